// moepolicy/io/flame_csv.hpp — importer of FLAME-MoE router-probability CSV files.
//
// The FLAME-MoE trace export writes one file per MoE layer, `prefill_layer<L>.csv`:
//
//   layer_id,token_id,expert_0,expert_1,...,expert_<E-1>
//   0,0,0.000000,0.000000,0.000000,0.032560,...
//
// one row per token of one prefill batch, holding the router's softmax probability for
// the k experts the token selected and 0 for the others. The `layer_id` column is a
// placeholder (0 in every row of the published files): the layer comes from the file
// name. Lines end in "\n" or "\r\n" (the published files use "\r\n"); the last line may
// lack its newline. A UTF-8 byte-order mark before the header is skipped.
//
// Mapping to a `routing_trace`:
//   - one request named "prefill batch", one step (0), phase::prefill: the files record
//     one teacher-forced prefill pass; the batch's split into sequences is not recorded;
//   - position = token_id (the row index of the batch, not a vocabulary id); a token
//     keeps its position across layer files;
//   - layer = the L of the file name; num_layers = the largest L + 1 — layers below the
//     first file's (and any gap between files) are simply absent from the trace;
//   - num_experts = E, the number of expert_ columns; top_k = k, the number of non-zero
//     probabilities, inferred from the first row and required of every row and file;
//   - top-k ids ordered by descending probability, ties broken by the lower expert id;
//     gate weights = those probabilities as written (softmax over all E experts, NOT
//     renormalised over the k selected; they sum to less than 1);
//   - has_scores = true: the row's full probability vector is the router scores.
//
// Validation (each a `parse_error` naming the file and the 1-based line): a header other
// than exactly `layer_id,token_id,expert_0..expert_<E-1>` in order; a row with a cell
// count other than E + 2 (a truncated last line included; a blank line too); a cell that
// is not a number (token_id and layer_id: an unsigned decimal integer; probabilities: a
// decimal number in [0, 1]); a layer_id other than 0 or the file's layer; a token_id seen
// before in the file; a row whose non-zero count differs from k. Across files: the same E,
// the same k and the same token_id set (every layer of a prefill pass routes every token;
// a missing token means a truncated file). A file name that carries no layer number is an
// error. Nothing is dropped or repaired.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::io {

namespace detail::flame {

/// One parsed layer file, its rows in file order.
struct layer_data {
  std::string file;
  layer_id layer = 0;
  std::uint32_t num_experts = 0;
  std::uint32_t top_k = 0;
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint64_t> lines;
  std::vector<expert_id> experts;  // rows × top_k, by descending probability
  std::vector<float> weights;      // rows × top_k
  std::vector<float> scores;       // rows × num_experts
};

inline constexpr std::string_view file_prefix = "prefill_layer";
inline constexpr std::string_view file_suffix = ".csv";

/// A cell as error messages show it: quoted, cut after 40 bytes, bytes outside printable
/// ASCII written `\xNN`.
inline std::string quote(std::string_view cell) {
  std::string out = "\"";
  out += io::detail::printable(cell, 40);
  out += '"';
  return out;
}

/// The layer number in a `prefill_layer<L>.csv` file name, or nothing when the name has
/// another shape. Throws `parse_error` for a layer number above 65535.
inline std::optional<layer_id> layer_from_file_name(const std::filesystem::path& path) {
  const std::string name = path.filename().string();
  const std::string_view n = name;
  if (n.size() <= file_prefix.size() + file_suffix.size() || !n.starts_with(file_prefix) || !n.ends_with(file_suffix)) {
    return std::nullopt;
  }
  const std::string_view digits = n.substr(file_prefix.size(), n.size() - file_prefix.size() - file_suffix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  unsigned long long value = 0;
  const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc{} || ptr != digits.data() + digits.size() || value > 65535) {
    io::detail::fail_file(path.string(), "layer " + std::string(digits) + " in the file name exceeds 65535");
  }
  return static_cast<layer_id>(value);
}

/// Parses an unsigned decimal integer that fills `cell` exactly.
template <class T>
[[nodiscard]] bool parse_unsigned(std::string_view cell, T& out) noexcept {
  const char* first = cell.data();
  const char* last = first + cell.size();
  if (first == last || *first < '0' || *first > '9') return false;
  const auto [ptr, ec] = std::from_chars(first, last, out);
  return ec == std::errc{} && ptr == last;
}

/// Whether `cell` is "0", "0." or "0." followed by zeros.
[[nodiscard]] inline bool is_plain_zero(std::string_view cell) noexcept {
  if (cell.empty() || cell[0] != '0') return false;
  if (cell.size() == 1) return true;
  if (cell[1] != '.') return false;
  for (std::size_t i = 2; i < cell.size(); ++i) {
    if (cell[i] != '0') return false;
  }
  return true;
}

/// Splits a text into lines ending in "\n" or "\r\n"; the last may lack its newline.
class line_reader {
 public:
  /// `file` names the text in messages.
  line_reader(std::string_view text, std::string_view file) noexcept
      : text_(text), file_(file), max_line_(active_input_limits().max_line_bytes) {}

  /// The next line without its terminator, or false at the end of the text.
  ///
  /// Throws: `parse_error` at the line when it holds more than
  /// `input_limits::max_line_bytes` bytes.
  bool next(std::string_view& line) {
    if (pos_ >= text_.size()) return false;
    const std::size_t nl = text_.find('\n', pos_);
    const std::size_t end = nl == std::string_view::npos ? text_.size() : nl;
    line = text_.substr(pos_, end - pos_);
    if (nl != std::string_view::npos && !line.empty() && line.back() == '\r') line.remove_suffix(1);
    pos_ = nl == std::string_view::npos ? text_.size() : nl + 1;
    ++line_;
    if (line.size() > max_line_) {
      io::detail::fail_at_line(file_, line_,
                               "line longer than the limit of " + std::to_string(max_line_) +
                                   " bytes (input_limits::max_line_bytes)");
    }
    return true;
  }

  /// The 1-based number of the line `next` returned last.
  [[nodiscard]] std::uint64_t line_number() const noexcept { return line_; }

 private:
  std::string_view text_;
  std::string_view file_;
  std::uint64_t max_line_;
  std::size_t pos_ = 0;
  std::uint64_t line_ = 0;
};

/// Checks the header and returns E, the number of expert columns.
inline std::uint32_t parse_header(std::string_view header, std::string_view file) {
  constexpr std::uint64_t line = 1;
  std::size_t pos = 0;
  std::size_t column = 0;
  std::string want;
  while (true) {
    const std::size_t comma = header.find(',', pos);
    const std::string_view cell =
        header.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    if (column == 0) {
      want = "layer_id";
    } else if (column == 1) {
      want = "token_id";
    } else {
      want = "expert_" + std::to_string(column - 2);
    }
    if (cell != want) {
      io::detail::fail_at_line(file, line, "header: expected " + quote(want) + " in column " +
                                               std::to_string(column + 1) + ", got " + quote(cell));
    }
    ++column;
    if (column > 65536 + 2) io::detail::fail_at_line(file, line, "header: more than 65536 expert columns");
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  if (column < 3) {
    io::detail::fail_at_line(file, line, "header: expected expert_0 after layer_id,token_id, got no expert column");
  }
  return static_cast<std::uint32_t>(column - 2);
}

/// Parses the text of one layer file. `name` is the file as messages show it.
inline layer_data parse_layer(std::string_view text, std::string_view name, layer_id layer) {
  layer_data d;
  d.file = std::string(name);
  d.layer = layer;
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);

  line_reader lines(text, name);
  std::string_view line;
  if (!lines.next(line)) {
    io::detail::fail_at_line(name, 1, "empty file: expected the header layer_id,token_id,expert_0,...");
  }
  d.num_experts = parse_header(line, name);
  const std::size_t num_experts = d.num_experts;
  const std::size_t cells_per_row = num_experts + 2;
  const std::string cells_wanted =
      "expected " + std::to_string(cells_per_row) + " cells (layer_id, token_id and " + std::to_string(num_experts) +
      " probabilities)";

  // A row holds about 9 bytes per expert; reserving from the text size avoids regrowth.
  const std::size_t rows_guess = text.size() / (cells_per_row * 9 + 1) + 1;
  d.tokens.reserve(rows_guess);
  d.lines.reserve(rows_guess);
  d.scores.reserve(rows_guess * num_experts);
  std::unordered_map<std::uint32_t, std::uint64_t> seen;
  seen.reserve(rows_guess);

  struct pick {
    double p;
    expert_id e;
  };
  std::vector<pick> picks;
  picks.reserve(num_experts);

  while (lines.next(line)) {
    const std::uint64_t ln = lines.line_number();
    if (line.empty()) io::detail::fail_at_line(name, ln, "empty line; " + cells_wanted);
    const std::size_t cells = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
    if (cells != cells_per_row) {
      io::detail::fail_at_line(name, ln, cells_wanted + ", got " + std::to_string(cells));
    }

    // The count above guarantees every cell ends at a comma or at the end of the line.
    const char* cursor = line.data();
    const char* const line_end = line.data() + line.size();
    const auto next_cell = [&]() {
      const char* end = cursor;
      while (end != line_end && *end != ',') ++end;
      const std::string_view cell(cursor, static_cast<std::size_t>(end - cursor));
      cursor = end == line_end ? end : end + 1;
      return cell;
    };

    const std::string_view layer_cell = next_cell();
    unsigned long long layer_value = 0;
    if (!parse_unsigned(layer_cell, layer_value)) {
      io::detail::fail_at_line(name, ln, "layer_id " + quote(layer_cell) + " is not an unsigned integer");
    }
    if (layer_value != 0 && layer_value != layer) {
      io::detail::fail_at_line(name, ln, "layer_id " + std::to_string(layer_value) +
                                             " is neither 0 (the FLAME export's placeholder) nor the file's layer " +
                                             std::to_string(layer));
    }

    const std::string_view token_cell = next_cell();
    std::uint32_t token = 0;
    if (!parse_unsigned(token_cell, token)) {
      io::detail::fail_at_line(name, ln, "token_id " + quote(token_cell) + " is not an unsigned integer below 2^32");
    }
    if (const auto [it, fresh] = seen.try_emplace(token, ln); !fresh) {
      io::detail::fail_at_line(name, ln, "token_id " + std::to_string(token) + " repeats the token of line " +
                                             std::to_string(it->second));
    }

    picks.clear();
    for (std::size_t e = 0; e < num_experts; ++e) {
      const std::string_view cell = next_cell();
      // Most cells are the unselected experts' "0.000000": skip the number parser there.
      if (is_plain_zero(cell)) {
        d.scores.push_back(0.0f);
        continue;
      }
      double p = 0.0;
      const char* first = cell.data();
      const char* last = first + cell.size();
      const auto [ptr, ec] = std::from_chars(first, last, p);
      if (ec == std::errc::result_out_of_range && ptr == last) {
        io::detail::fail_at_line(name, ln, "expert_" + std::to_string(e) + ": " + quote(cell) + " is out of range");
      }
      if (ec != std::errc{} || ptr != last) {
        io::detail::fail_at_line(name, ln, "expert_" + std::to_string(e) + ": " + quote(cell) + " is not a number");
      }
      if (!(p >= 0.0 && p <= 1.0)) {
        io::detail::fail_at_line(name, ln, "expert_" + std::to_string(e) + ": probability " + moepolicy::detail::show(p) +
                                               " is not in [0, 1]");
      }
      d.scores.push_back(static_cast<float>(p));
      if (p > 0.0) picks.push_back({p, static_cast<expert_id>(e)});
    }

    if (d.tokens.empty()) {
      if (picks.empty()) {
        io::detail::fail_at_line(name, ln, "no non-zero probability in the first row, so k cannot be inferred");
      }
      d.top_k = static_cast<std::uint32_t>(picks.size());
    } else if (picks.size() != d.top_k) {
      io::detail::fail_at_line(name, ln, "k varying within layer " + std::to_string(layer) + ": expected " +
                                             std::to_string(d.top_k) + " non-zero probabilities, got " +
                                             std::to_string(picks.size()));
    }
    std::sort(picks.begin(), picks.end(), [](const pick& a, const pick& b) { return a.p > b.p || (a.p == b.p && a.e < b.e); });
    for (const pick& pk : picks) {
      d.experts.push_back(pk.e);
      d.weights.push_back(static_cast<float>(pk.p));
    }
    d.tokens.push_back(token);
    d.lines.push_back(ln);
  }
  if (d.tokens.empty()) io::detail::fail_at_line(name, 2, "no token rows after the header");
  return d;
}

/// Checks that `d` agrees with `first` (the lowest layer's file) in E, k and tokens.
inline void check_consistent(const layer_data& first, const layer_data& d) {
  if (d.num_experts != first.num_experts) {
    io::detail::fail_at_line(d.file, 1, "has " + std::to_string(d.num_experts) + " expert columns, but " + first.file +
                                            " has " + std::to_string(first.num_experts));
  }
  if (d.top_k != first.top_k) {
    io::detail::fail_at_line(d.file, d.lines.front(), "k = " + std::to_string(d.top_k) +
                                                          " non-zero probabilities per row, but " + first.file +
                                                          " has k = " + std::to_string(first.top_k));
  }
  std::vector<std::uint32_t> want(first.tokens);
  std::sort(want.begin(), want.end());
  std::vector<std::pair<std::uint32_t, std::uint64_t>> have;
  have.reserve(d.tokens.size());
  for (std::size_t i = 0; i < d.tokens.size(); ++i) have.emplace_back(d.tokens[i], d.lines[i]);
  std::sort(have.begin(), have.end());
  // Report the extra token that comes first in the file, else the smallest missing one.
  std::optional<std::pair<std::uint64_t, std::uint32_t>> extra;
  std::optional<std::uint32_t> missing;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < have.size() || j < want.size()) {
    if (j == want.size() || (i < have.size() && have[i].first < want[j])) {
      if (!extra || have[i].second < extra->first) extra = std::pair(have[i].second, have[i].first);
      ++i;
    } else if (i == have.size() || want[j] < have[i].first) {
      if (!missing) missing = want[j];
      ++j;
    } else {
      ++i;
      ++j;
    }
  }
  const std::string rule = "; every layer file must hold the same token_id set";
  if (extra) {
    io::detail::fail_at_line(d.file, extra->first,
                             "token_id " + std::to_string(extra->second) + " does not occur in " + first.file + rule);
  }
  if (missing) {
    io::detail::fail_file(d.file, "token_id " + std::to_string(*missing) + " of " + first.file + " is missing" + rule);
  }
}

/// Builds the trace from parsed layers sorted by ascending layer.
inline routing_trace build(std::vector<layer_data>& layers) {
  MOEPOLICY_ASSERT(!layers.empty());
  const layer_data& first = layers.front();
  trace_info info;
  info.model = "FLAME-MoE";
  info.source = "FLAME-MoE router-probability CSV:";
  for (std::size_t i = 0; i < layers.size(); ++i) {
    info.source += i == 0 ? " " : ", ";
    info.source += std::filesystem::path(layers[i].file).filename().string();
  }
  info.num_layers = static_cast<std::uint32_t>(layers.back().layer) + 1u;
  info.num_experts = first.num_experts;
  info.top_k = first.top_k;
  info.has_scores = true;

  routing_trace_builder builder(std::move(info));
  const std::uint32_t request = builder.add_request("prefill batch");
  const std::size_t k = first.top_k;
  const std::size_t e = first.num_experts;
  for (layer_data& d : layers) {
    for (std::size_t r = 0; r < d.tokens.size(); ++r) {
      const trace_row row{request,
                          phase::prefill,
                          0,
                          d.tokens[r],
                          d.layer,
                          std::span<const expert_id>(d.experts).subspan(r * k, k),
                          std::span<const float>(d.weights).subspan(r * k, k),
                          std::span<const float>(d.scores).subspan(r * e, e)};
      if (auto why = builder.check(row)) io::detail::fail_at_line(d.file, d.lines[r], *why);
      builder.add(row);
    }
    d = layer_data{};  // the builder holds a copy now
  }
  return std::move(builder).finish();
}

}  // namespace detail::flame

/// Reads the FLAME-MoE layer files `layer_files` (each named `prefill_layer<L>.csv`, in
/// any order) into one trace; see the header comment for the mapping.
///
/// Throws: `invalid_argument` when `layer_files` is empty; `parse_error` naming the file
/// (and the line where there is one) when a file cannot be read, its name carries no
/// layer number, two files give the same layer, a file is malformed, or the files
/// disagree in expert columns, k or token_id set.
/// Complexity: linear in the total file size, plus sorting the rows.
inline routing_trace read_flame_csv(std::span<const std::filesystem::path> layer_files) {
  if (layer_files.empty()) moepolicy::detail::throw_invalid("io::read_flame_csv", "no layer files given");
  std::vector<std::pair<layer_id, std::size_t>> order;
  order.reserve(layer_files.size());
  for (std::size_t i = 0; i < layer_files.size(); ++i) {
    const auto layer = detail::flame::layer_from_file_name(layer_files[i]);
    if (!layer) {
      detail::fail_file(layer_files[i].string(), "file name does not match prefill_layer<L>.csv, so its layer is unknown");
    }
    order.emplace_back(*layer, i);
  }
  std::sort(order.begin(), order.end());
  for (std::size_t i = 1; i < order.size(); ++i) {
    if (order[i].first == order[i - 1].first) {
      detail::fail_file(layer_files[order[i].second].string(),
                        "layer " + std::to_string(order[i].first) + " is also given by " +
                            layer_files[order[i - 1].second].string());
    }
  }
  std::vector<detail::flame::layer_data> layers;
  layers.reserve(order.size());
  for (const auto& [layer, index] : order) {
    const std::filesystem::path& path = layer_files[index];
    std::ifstream in = detail::open_input(path);
    const std::string text = detail::read_rest<std::string>(in, path.string(), detail::file_limit(),
                                                              moepolicy::detail::file_size_or_zero(path));
    layers.push_back(detail::flame::parse_layer(text, path.string(), layer));
    if (layers.size() > 1) detail::flame::check_consistent(layers.front(), layers.back());
  }
  return detail::flame::build(layers);
}

/// Reads one FLAME-MoE layer file, or every `prefill_layer*.csv` file of a directory
/// (sorted by layer; other files are ignored).
///
/// Throws: `parse_error` as the overload over a list of files, and naming the directory
/// when it holds no `prefill_layer*.csv` file or cannot be listed.
inline routing_trace read_flame_csv(const std::filesystem::path& file_or_directory) {
  std::error_code ec;
  if (!std::filesystem::is_directory(file_or_directory, ec)) {
    return read_flame_csv(std::span<const std::filesystem::path>(&file_or_directory, 1));
  }
  std::vector<std::filesystem::path> files;
  std::filesystem::directory_iterator it(file_or_directory, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (std::string_view(name).starts_with(detail::flame::file_prefix) &&
        std::string_view(name).ends_with(detail::flame::file_suffix)) {
      files.push_back(it->path());
    }
  }
  if (ec) detail::fail_file(file_or_directory.string(), "cannot list the directory: " + ec.message());
  if (files.empty()) detail::fail_file(file_or_directory.string(), "no prefill_layer<L>.csv file in the directory");
  std::sort(files.begin(), files.end());
  return read_flame_csv(std::span<const std::filesystem::path>(files));
}

/// Reads one layer's CSV text from `in`; `name` stands for the file in messages and in
/// `trace_info::source`, and `layer` is the layer the rows belong to (num_layers =
/// layer + 1).
///
/// Throws: `parse_error` naming `name` and the line for a malformed text (see the header
/// comment), or when reading the stream fails.
inline routing_trace read_flame_csv(std::istream& in, std::string_view name, layer_id layer) {
  const std::string text = detail::read_rest<std::string>(in, name, detail::file_limit());
  std::vector<detail::flame::layer_data> layers;
  layers.push_back(detail::flame::parse_layer(text, name, layer));
  return detail::flame::build(layers);
}

}  // namespace moepolicy::io
