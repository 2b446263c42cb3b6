// moepolicy/io/loss_table_csv.hpp — a quantisation loss table L(layer, expert, bits) as CSV.
//
// The format is one row per (layer, expert, bitwidth) after a header line:
//   layer,expert,bits,loss
//   0,0,1,455.00341354793954
//   0,0,2,180.39785089373
//   ...
// Rows may come in any order; together they must cover layers 0..L−1 and experts
// 0..E−1 completely, every (layer, expert) with the same set of bitwidths, each once.
// Losses are finite and >= 0. `write_loss_table_csv` writes rows in (layer, expert, bits)
// order with the shortest decimal that reads back to the same double.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <map>
#include <ostream>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <vector>

#include "moepolicy/core/units.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/detail/file_input.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy::io {

namespace detail::loss_csv {

inline std::uint64_t whole(std::string_view cell, std::string_view file, std::uint64_t line, const char* what,
                           std::uint64_t max) {
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc{} || ptr != cell.data() + cell.size() || cell.empty()) {
    moepolicy::detail::fail_at_line(file, line, std::string(what) + " \"" + io::detail::printable(cell, 40) + "\" is not a whole number");
  }
  if (v > max) {
    moepolicy::detail::fail_at_line(file, line, std::string(what) + " " + std::to_string(v) + " exceeds " +
                                                    std::to_string(max));
  }
  return v;
}

}  // namespace detail::loss_csv

/// Reads a loss table from CSV text; `name` stands for the file in errors.
///
/// Throws: `parse_error` naming the file and line: a wrong header, a row without four
/// cells, a cell that is not a number, a bitwidth outside [1, 32], a negative or
/// non-finite loss, a repeated (layer, expert, bits), or — naming the file — a table that
/// misses a layer, an expert or a bitwidth of some expert (named when few are missing,
/// counted when the rows cover a small part of the table their ids span).
[[nodiscard]] inline loss_table read_loss_table_csv(std::istream& in, std::string_view name) {
  namespace lc = detail::loss_csv;
  using moepolicy::detail::fail_at_line;
  using moepolicy::detail::fail_file;
  const std::string text = moepolicy::detail::read_rest<std::string>(in, name, moepolicy::detail::file_limit());
  const std::uint64_t max_line = active_input_limits().max_line_bytes;
  std::map<std::tuple<std::uint64_t, std::uint64_t, std::uint64_t>, double> cells;
  std::set<std::uint64_t> bits;
  std::uint64_t max_layer = 0, max_expert = 0, line_no = 0;
  std::size_t pos = 0;
  bool header = true;
  while (pos < text.size()) {
    const std::size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.size() > max_line) {
      fail_at_line(name, line_no,
                   "line longer than the limit of " + std::to_string(max_line) + " bytes (input_limits::max_line_bytes)");
    }
    if (header) {
      if (line != "layer,expert,bits,loss") {
        fail_at_line(name, line_no, "expected the header \"layer,expert,bits,loss\", got \"" + io::detail::printable(line, 80) + "\"");
      }
      header = false;
      continue;
    }
    if (line.empty()) fail_at_line(name, line_no, "empty line; expected layer,expert,bits,loss");
    std::vector<std::string_view> f;
    std::size_t start = 0;
    while (true) {
      const std::size_t comma = line.find(',', start);
      f.push_back(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
    if (f.size() != 4) fail_at_line(name, line_no, "expected 4 cells, got " + std::to_string(f.size()));
    const auto layer = lc::whole(f[0], name, line_no, "layer", 65535);
    const auto expert = lc::whole(f[1], name, line_no, "expert", 65535);
    const auto b = lc::whole(f[2], name, line_no, "bits", 32);
    if (b == 0) fail_at_line(name, line_no, "bits must be in [1, 32], got 0");
    double loss = 0.0;
    const auto [ptr, ec] = std::from_chars(f[3].data(), f[3].data() + f[3].size(), loss);
    if (ec != std::errc{} || ptr != f[3].data() + f[3].size() || f[3].empty()) {
      fail_at_line(name, line_no, "loss \"" + io::detail::printable(f[3], 40) + "\" is not a number");
    }
    if (!std::isfinite(loss) || loss < 0.0) {
      fail_at_line(name, line_no, "loss must be finite and >= 0, got " + io::detail::printable(f[3], 40));
    }
    if (!cells.emplace(std::tuple(layer, expert, b), loss).second) {
      fail_at_line(name, line_no, "layer " + std::to_string(layer) + ", expert " + std::to_string(expert) + " at " +
                                      std::to_string(b) + " bits appears twice");
    }
    bits.insert(b);
    max_layer = std::max(max_layer, layer);
    max_expert = std::max(max_expert, expert);
  }
  if (header) fail_file(name, "empty file; expected the header \"layer,expert,bits,loss\"");
  if (cells.empty()) fail_file(name, "no rows after the header");
  const std::size_t L = max_layer + 1, E = max_expert + 1;
  // Every cell appears once, so a complete table has exactly L·E·|bits| rows; checking that
  // first keeps a few rows with large ids from sizing a huge table.
  const std::uint64_t cells_needed = static_cast<std::uint64_t>(L) * E * bits.size();  // < 2^38
  if (cells_needed > 16 * static_cast<std::uint64_t>(cells.size())) {
    fail_file(name, "the rows name layers 0.." + std::to_string(L - 1) + ", experts 0.." + std::to_string(E - 1) +
                        " and " + std::to_string(bits.size()) + " bitwidths, " + std::to_string(cells_needed) +
                        " losses in all, but the file holds only " + std::to_string(cells.size()));
  }
  std::vector<bitwidth> bit_set;
  for (auto b : bits) bit_set.emplace_back(static_cast<int>(b));
  std::vector<double> values;
  values.reserve(static_cast<std::size_t>(cells_needed));
  for (std::uint64_t l = 0; l < L; ++l) {
    for (std::uint64_t e = 0; e < E; ++e) {
      for (auto b : bits) {
        const auto it = cells.find(std::tuple(l, e, b));
        if (it == cells.end()) {
          fail_file(name, "no loss for layer " + std::to_string(l) + ", expert " + std::to_string(e) + " at " +
                              std::to_string(b) + " bits (the table has layers 0.." + std::to_string(L - 1) +
                              ", experts 0.." + std::to_string(E - 1) + ")");
        }
        values.push_back(it->second);
      }
    }
  }
  return loss_table(L, E, std::move(bit_set), std::move(values));
}

/// Reads a loss table from a CSV file. Throws: as the stream overload, and `parse_error`
/// naming the file when it cannot be opened.
[[nodiscard]] inline loss_table read_loss_table_csv(const std::filesystem::path& path) {
  std::ifstream in = moepolicy::detail::open_input(path);
  return read_loss_table_csv(in, path.string());
}

/// Writes `table` in the format above.
inline void write_loss_table_csv(const loss_table& table, std::ostream& os) {
  os << "layer,expert,bits,loss\n";
  char buf[64];
  for (std::size_t l = 0; l < table.num_layers(); ++l) {
    for (std::size_t e = 0; e < table.num_experts(); ++e) {
      for (std::size_t i = 0; i < table.num_bits(); ++i) {
        const auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, table.loss(l, e, i));
        static_cast<void>(ec);
        os << l << ',' << e << ',' << table.bits()[i].bits() << ',' << std::string_view(buf, static_cast<std::size_t>(ptr - buf))
           << '\n';
      }
    }
  }
}

}  // namespace moepolicy::io
