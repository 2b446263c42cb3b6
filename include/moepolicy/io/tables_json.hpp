// moepolicy/io/tables_json.hpp — readers of the per-layer count and loss tables that
// MC-MoE and the OLMoE paper publish as JSON (converted from their pickles):
//
//   read_activation_stats_json     mixtral_c4_expert_activation.json  → activation_stats
//   read_quant_loss_json           mixtral_quant_loss.json            → loss_table
//   read_olmoe_expert_counts_json  expert_counts.json                 → olmoe_expert_counts
//   read_olmoe_coactivation_json   expert_coactivation_crosslayer.json → olmoe_coactivation
//
// Each has a path overload and an (std::istream&, name) overload; `name` stands for the
// file in messages.
//
// Errors are `moepolicy::parse_error` only (no nlohmann exception escapes):
//   - text that is not JSON (syntax, a number too large for a double, trailing content),
//     nested deeper than `input_limits::max_json_depth`, a file larger than
//     `input_limits::max_json_bytes` → as io/json_document.hpp says, e.g.
//     `<file>:<line>: invalid JSON: <nlohmann's reason>`, the line 1-based, counted to
//     the byte where the parser stopped;
//   - JSON of the wrong shape (a missing key, a wrong type, a ragged or mis-sized row, a
//     negative or fractional count, a repeated object key, layers out of order)
//     → `<file>: <JSON path>: <problem>`, e.g.
//     `stats.json: expert_act_frequency[3]: expected 8 numbers, got 7`, without a line
//     (kind `file_location::kind::none`): the parser reports no positions for values.
//     A JSON path writes object keys after dots and array indices in brackets
//     (`datasets.olmoe.c4.expert_counts[2][5]`); a key that is not a plain word is
//     quoted in brackets (`datasets["a b"]`).
// Keys a reader does not know (metadata such as "calibration" or "layout") are ignored;
// an object key given twice is an error, since the DOM would keep only one of them.
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/json_document.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy::io {

/// MC-MoE's calibration statistics of one model (mixtral_c4_expert_activation.json):
/// for every MoE layer 0..L-1 and expert, how many tokens selected it and the sum of the
/// routing weights it received.
struct activation_stats {
  /// "model", "source" and "calibration" as the file gives them; empty when absent.
  std::string model;
  std::string source;
  std::string calibration;
  /// "expert_act_frequency": tokens that had the expert in their top-k; rows = layers 0..L-1.
  expert_table frequency;
  /// "expert_act_weight_sum": summed routing weights, same shape and layers.
  expert_table weight_sum;
};

/// The expert counts of one model on one text domain (OLMoE expert_counts.json).
struct olmoe_domain_counts {
  std::string model;
  std::string domain;
  /// "expert_counts": times each expert is in a token's top-k, one row per saved layer.
  expert_table counts;
  /// "expert_counts_top1": top-1 only; absent where the file has none (in the published
  /// file: the tulu domain of olmoe, olmoe-sft and olmoe-dpo).
  std::optional<expert_table> counts_top1;
};

/// The whole of OLMoE's expert_counts.json.
struct olmoe_expert_counts {
  /// "source"; empty when absent.
  std::string source;
  /// "layers_saved": the model layers the rows of every table stand for, ascending.
  std::vector<layer_id> layers;
  /// "models": short model name → description, in key order; empty when absent.
  std::vector<std::pair<std::string, std::string>> models;
  /// One entry per (model, domain) of "datasets", ordered by model then domain (byte order).
  std::vector<olmoe_domain_counts> datasets;

  /// The entry of `model` and `domain`, or null.
  [[nodiscard]] const olmoe_domain_counts* find(std::string_view model, std::string_view domain) const noexcept {
    for (const auto& d : datasets) {
      if (d.model == model && d.domain == domain) return &d;
    }
    return nullptr;
  }
};

/// The cross-layer co-activation counts of one model on one text domain (OLMoE
/// expert_coactivation_crosslayer.json).
struct olmoe_domain_coactivation {
  std::string model;
  std::string domain;
  /// "expert_counts_crosslayer": one E × E matrix per saved layer pair; M[i][j] counts
  /// tokens whose r-th choice is i at the first layer and j at the second (paired by
  /// rank position r).
  coactivation_table counts;
  /// "expert_counts_crosslayer_top1": the same over top-1 choices; absent when the file
  /// has none.
  std::optional<coactivation_table> counts_top1;
};

/// The whole of OLMoE's expert_coactivation_crosslayer.json.
struct olmoe_coactivation {
  /// "source"; empty when absent.
  std::string source;
  /// "pairs_saved": the layer pairs of the matrices, in file order.
  std::vector<layer_pair> pairs;
  /// One entry per (model, domain) of "datasets", ordered by model then domain (byte order).
  std::vector<olmoe_domain_coactivation> datasets;

  /// The entry of `model` and `domain`, or null.
  [[nodiscard]] const olmoe_domain_coactivation* find(std::string_view model, std::string_view domain) const noexcept {
    for (const auto& d : datasets) {
      if (d.model == model && d.domain == domain) return &d;
    }
    return nullptr;
  }
};

namespace detail::tables_json {

using json = nlohmann::json;

using json_document::index_path;
using json_document::key_path;

/// Throws the `parse_error` of a JSON value of the wrong shape at `path`.
[[noreturn]] inline void fail(std::string_view file, const std::string& path, const std::string& problem) {
  io::detail::fail_file(file, path.empty() ? problem : path + ": " + problem);
}

/// What a value is, for "got ..." in messages: a number shows itself, anything else its type.
inline std::string describe(const json& j) {
  if (j.is_number_unsigned()) return std::to_string(j.get<std::uint64_t>());
  if (j.is_number_integer()) return std::to_string(j.get<std::int64_t>());
  if (j.is_number_float()) return moepolicy::detail::show(j.get<double>());
  if (j.is_array()) return "an array of " + std::to_string(j.size());
  return j.type_name();
}

/// Parses `text` into a DOM (io/json_document.hpp).
inline json parse(std::string_view text, std::string_view file) { return parse_json_document(text, file); }

/// `obj[key]` of an object; throws when absent.
inline const json& member(const json& obj, std::string_view key, const std::string& path, std::string_view file) {
  const auto it = obj.find(key);
  if (it == obj.end()) fail(file, path, "missing key \"" + std::string(key) + "\"");
  return *it;
}

/// `obj[key]` of an object, or null when absent.
inline const json* optional_member(const json& obj, std::string_view key) {
  const auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

inline void expect_object(const json& j, const std::string& path, std::string_view file) {
  if (!j.is_object()) {
    fail(file, path, path.empty() ? "expected a JSON object at the top level, got " + describe(j)
                                   : "expected an object, got " + describe(j));
  }
}

inline void expect_array(const json& j, const std::string& path, std::string_view file, std::string_view of) {
  if (!j.is_array()) fail(file, path, "expected an array of " + std::string(of) + ", got " + describe(j));
}

/// The string `obj[key]`, or "" when absent.
inline std::string optional_string(const json& obj, std::string_view key, const std::string& path, std::string_view file) {
  const json* j = optional_member(obj, key);
  if (j == nullptr) return {};
  if (!j->is_string()) fail(file, key_path(path, key), "expected a string, got " + describe(*j));
  return j->get<std::string>();
}

enum class cell_kind : std::uint8_t {
  count,        // a whole number >= 0 (an integral float such as 3.0 is accepted)
  non_negative  // a finite number >= 0
};

inline double read_cell(const json& j, const std::string& path, std::string_view file, cell_kind kind) {
  if (kind == cell_kind::count) {
    if (j.is_number_unsigned()) return static_cast<double>(j.get<std::uint64_t>());
    if (j.is_number_float()) {
      const double v = j.get<double>();
      if (std::isfinite(v) && v >= 0.0 && v == std::floor(v)) return v;
    }
    fail(file, path, "expected a count (a whole number >= 0), got " + describe(j));
  }
  if (j.is_number()) {
    const double v = j.get<double>();
    if (std::isfinite(v) && v >= 0.0) return v;
  }
  fail(file, path, "expected a finite number >= 0, got " + describe(j));
}

struct matrix {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<double> values;  // row-major
};

/// Reads an array of equally long arrays of numbers. `rows`/`cols` are required sizes
/// when given (`rows_why` says why in the message), else taken from the data (at least 1,
/// at most 65536 columns).
inline matrix read_matrix(const json& j, const std::string& path, std::string_view file, cell_kind kind,
                          std::optional<std::size_t> rows, std::string_view rows_why,
                          std::optional<std::size_t> cols) {
  expect_array(j, path, file, "rows");
  matrix m;
  m.rows = j.size();
  if (rows && m.rows != *rows) {
    fail(file, path, "expected " + std::to_string(*rows) + " rows" + std::string(rows_why) + ", got " +
                         std::to_string(m.rows));
  }
  if (m.rows == 0) fail(file, path, "expected at least one row");
  for (std::size_t r = 0; r < m.rows; ++r) {
    const json& row = j[r];
    const std::string row_path = index_path(path, r);
    expect_array(row, row_path, file, "numbers");
    if (r == 0) {
      m.cols = cols.value_or(row.size());
      if (m.cols == 0) fail(file, row_path, "expected at least one number");
      if (m.cols > moepolicy::detail::max_table_extent) {
        fail(file, row_path, "expected at most 65536 numbers, got " + std::to_string(m.cols));
      }
    }
    if (row.size() != m.cols) {
      fail(file, row_path, "expected " + std::to_string(m.cols) + " numbers, got " + std::to_string(row.size()));
    }
    for (std::size_t e = 0; e < m.cols; ++e) m.values.push_back(read_cell(row[e], index_path(row_path, e), file, kind));
  }
  return m;
}

/// A layer number in [0, 65535].
inline layer_id read_layer(const json& j, const std::string& path, std::string_view file) {
  if (!j.is_number_unsigned() || j.get<std::uint64_t>() > 65535) {
    fail(file, path, "expected a layer number in [0, 65535], got " + describe(j));
  }
  return static_cast<layer_id>(j.get<std::uint64_t>());
}

/// An object key that is a canonical decimal number (no sign, no leading zero).
inline std::optional<std::uint64_t> key_number(std::string_view key) {
  if (key.empty() || (key.size() > 1 && key.front() == '0')) return std::nullopt;
  std::uint64_t v = 0;
  const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), v);
  if (ec != std::errc{} || ptr != key.data() + key.size()) return std::nullopt;
  return v;
}

/// The members of an object keyed 0..n-1, in numeric order; `what` names a key.
inline std::vector<const json*> numbered_members(const json& obj, const std::string& path, std::string_view file,
                                                 std::string_view what, std::string_view what_plural) {
  expect_object(obj, path, file);
  std::vector<std::pair<std::uint64_t, const json*>> members;
  members.reserve(obj.size());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const auto n = key_number(it.key());
    if (!n) {
      fail(file, path, "key " + moepolicy::detail::show(it.key().substr(0, 40)) + " is not " + std::string(what) +
                           " number");
    }
    members.emplace_back(*n, &*it);
  }
  if (members.empty()) fail(file, path, "expected at least one " + std::string(what.substr(what.find(' ') + 1)));
  std::sort(members.begin(), members.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i].first != i) {
      fail(file, path, std::string(what_plural) + " must be numbered 0 to " + std::to_string(members.size() - 1) +
                           " without gaps; " + std::string(what.substr(what.find(' ') + 1)) + " " + std::to_string(i) +
                           " is missing");
    }
  }
  std::vector<const json*> out;
  out.reserve(members.size());
  for (const auto& m : members) out.push_back(m.second);
  return out;
}

inline std::vector<layer_id> consecutive_layers(std::size_t n) {
  std::vector<layer_id> layers(n);
  for (std::size_t i = 0; i < n; ++i) layers[i] = static_cast<layer_id>(i);
  return layers;
}

/// The table `root` holds, read from `file`.
inline activation_stats activation_stats_from_root(const json& root, std::string_view file) {
  expect_object(root, "", file);
  activation_stats out;
  out.model = optional_string(root, "model", "", file);
  out.source = optional_string(root, "source", "", file);
  out.calibration = optional_string(root, "calibration", "", file);
  matrix freq = read_matrix(member(root, "expert_act_frequency", "", file), "expert_act_frequency", file,
                            cell_kind::count, std::nullopt, "", std::nullopt);
  if (freq.rows > moepolicy::detail::max_table_extent) {
    fail(file, "expert_act_frequency", "expected at most 65536 rows, got " + std::to_string(freq.rows));
  }
  matrix sum = read_matrix(member(root, "expert_act_weight_sum", "", file), "expert_act_weight_sum", file,
                           cell_kind::non_negative, freq.rows, " (as expert_act_frequency)", freq.cols);
  out.frequency = expert_table("expert_act_frequency", consecutive_layers(freq.rows), freq.cols, std::move(freq.values));
  out.weight_sum = expert_table("expert_act_weight_sum", consecutive_layers(sum.rows), sum.cols, std::move(sum.values));
  return out;
}

/// The table `root` holds, read from `file`.
inline loss_table quant_loss_from_root(const json& root, std::string_view file) {
  expect_object(root, "", file);
  const std::string loss_path = "loss";
  const auto layers = numbered_members(member(root, "loss", "", file), loss_path, file, "a layer", "layers");
  if (layers.size() > moepolicy::detail::max_table_extent) {
    fail(file, loss_path, "expected at most 65536 layers, got " + std::to_string(layers.size()));
  }
  std::size_t num_experts = 0;
  std::vector<int> bits;
  std::string bits_text;
  std::vector<double> losses;
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const std::string layer_path = key_path(loss_path, std::to_string(l));
    expect_object(*layers[l], layer_path, file);
    if (l > 0 && layers[l]->size() != num_experts) {
      fail(file, layer_path, "expected " + std::to_string(num_experts) + " experts (as loss.0), got " +
                                 std::to_string(layers[l]->size()));
    }
    const auto experts = numbered_members(*layers[l], layer_path, file, "an expert", "experts");
    if (l == 0) {
      num_experts = experts.size();
      if (num_experts > moepolicy::detail::max_table_extent) {
        fail(file, layer_path, "expected at most 65536 experts, got " + std::to_string(num_experts));
      }
    }
    for (std::size_t e = 0; e < experts.size(); ++e) {
      const std::string expert_path = key_path(layer_path, std::to_string(e));
      const json& by_bits = *experts[e];
      expect_object(by_bits, expert_path, file);
      std::vector<std::pair<int, const json*>> cells;
      for (auto it = by_bits.begin(); it != by_bits.end(); ++it) {
        const auto b = key_number(it.key());
        if (!b) {
          fail(file, expert_path, "key " + moepolicy::detail::show(it.key().substr(0, 40)) + " is not a bitwidth");
        }
        if (*b < static_cast<std::uint64_t>(bitwidth::min_bits) || *b > static_cast<std::uint64_t>(bitwidth::max_bits)) {
          fail(file, expert_path, "bitwidth " + std::to_string(*b) + " is not in [1, 32]");
        }
        cells.emplace_back(static_cast<int>(*b), &*it);
      }
      std::sort(cells.begin(), cells.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
      std::string these;
      for (const auto& c : cells) these += (these.empty() ? "" : ", ") + std::to_string(c.first);
      if (l == 0 && e == 0) {
        if (cells.empty()) fail(file, expert_path, "expected at least one bitwidth");
        for (const auto& c : cells) bits.push_back(c.first);
        bits_text = these;
      } else if (these != bits_text) {
        fail(file, expert_path, "expected bits " + bits_text + " (as loss.0.0), got " + (these.empty() ? "none" : these));
      }
      for (const auto& c : cells) {
        losses.push_back(read_cell(*c.second, key_path(expert_path, std::to_string(c.first)), file, cell_kind::non_negative));
      }
    }
  }
  std::vector<bitwidth> bit_set;
  bit_set.reserve(bits.size());
  for (int b : bits) bit_set.emplace_back(b);
  return loss_table(layers.size(), num_experts, std::move(bit_set), std::move(losses));
}

/// Iterates "datasets": model → domain → object, calling `read(model, domain, path, obj)`.
template <class F>
void for_each_dataset(const json& root, std::string_view file, F&& read) {
  const std::string path = "datasets";
  const json& models = member(root, "datasets", "", file);
  expect_object(models, path, file);
  if (models.empty()) fail(file, path, "expected at least one model");
  for (auto m = models.begin(); m != models.end(); ++m) {
    const std::string model_path = key_path(path, m.key());
    expect_object(*m, model_path, file);
    if (m->empty()) fail(file, model_path, "expected at least one domain");
    for (auto d = m->begin(); d != m->end(); ++d) {
      const std::string domain_path = key_path(model_path, d.key());
      expect_object(*d, domain_path, file);
      read(m.key(), d.key(), domain_path, *d);
    }
  }
}

/// The table `root` holds, read from `file`.
inline olmoe_expert_counts expert_counts_from_root(const json& root, std::string_view file) {
  expect_object(root, "", file);
  olmoe_expert_counts out;
  out.source = optional_string(root, "source", "", file);

  const json& saved = member(root, "layers_saved", "", file);
  expect_array(saved, "layers_saved", file, "layer numbers");
  if (saved.empty()) fail(file, "layers_saved", "expected at least one layer");
  for (std::size_t i = 0; i < saved.size(); ++i) {
    const std::string p = index_path("layers_saved", i);
    const layer_id l = read_layer(saved[i], p, file);
    if (!out.layers.empty() && l <= out.layers.back()) {
      fail(file, p, "expected a layer above " + std::to_string(out.layers.back()) + " (strictly ascending), got " +
                        std::to_string(l));
    }
    out.layers.push_back(l);
  }

  if (const json* models = optional_member(root, "models")) {
    expect_object(*models, "models", file);
    for (auto it = models->begin(); it != models->end(); ++it) {
      if (!it->is_string()) fail(file, key_path("models", it.key()), "expected a string, got " + describe(*it));
      out.models.emplace_back(it.key(), it->get<std::string>());
    }
  }

  const std::string rows_why = " (one per entry of layers_saved)";
  for_each_dataset(root, file, [&](const std::string& model, const std::string& domain, const std::string& path,
                                   const json& obj) {
    matrix counts = read_matrix(member(obj, "expert_counts", path, file), key_path(path, "expert_counts"), file,
                                cell_kind::count, out.layers.size(), rows_why, std::nullopt);
    olmoe_domain_counts entry{model, domain, expert_table("expert_counts", out.layers, counts.cols, std::move(counts.values)),
                              std::nullopt};
    if (const json* top1 = optional_member(obj, "expert_counts_top1")) {
      matrix t = read_matrix(*top1, key_path(path, "expert_counts_top1"), file, cell_kind::count, out.layers.size(),
                             rows_why, counts.cols);
      entry.counts_top1 = expert_table("expert_counts_top1", out.layers, t.cols, std::move(t.values));
    }
    out.datasets.push_back(std::move(entry));
  });
  return out;
}

/// Reads P square matrices of one size (`experts`, or the first matrix's row count).
inline std::pair<std::size_t, std::vector<double>> read_matrices(const json& j, const std::string& path,
                                                                 std::string_view file, std::size_t num_pairs,
                                                                 std::optional<std::size_t> experts) {
  expect_array(j, path, file, "matrices");
  if (j.size() != num_pairs) {
    fail(file, path, "expected " + std::to_string(num_pairs) + " matrices (one per entry of pairs_saved), got " +
                         std::to_string(j.size()));
  }
  std::vector<double> values;
  std::size_t e = experts.value_or(0);
  for (std::size_t p = 0; p < num_pairs; ++p) {
    const std::string mp = index_path(path, p);
    if (p == 0 && !experts) {
      expect_array(j[p], mp, file, "rows");
      e = j[p].size();
      if (e == 0) fail(file, mp, "expected at least one row");
      if (e > moepolicy::detail::max_table_extent) {
        fail(file, mp, "expected at most 65536 rows, got " + std::to_string(e));
      }
    }
    matrix m = read_matrix(j[p], mp, file, cell_kind::count, e, " (a square matrix over the experts)", e);
    values.insert(values.end(), m.values.begin(), m.values.end());
  }
  return {e, std::move(values)};
}

/// The table `root` holds, read from `file`.
inline olmoe_coactivation coactivation_from_root(const json& root, std::string_view file) {
  expect_object(root, "", file);
  olmoe_coactivation out;
  out.source = optional_string(root, "source", "", file);

  const json& saved = member(root, "pairs_saved", "", file);
  expect_array(saved, "pairs_saved", file, "layer pairs");
  if (saved.empty()) fail(file, "pairs_saved", "expected at least one layer pair");
  for (std::size_t i = 0; i < saved.size(); ++i) {
    const std::string p = index_path("pairs_saved", i);
    const json& pr = saved[i];
    if (!pr.is_array() || pr.size() != 2) fail(file, p, "expected a pair [from, to] of layers, got " + describe(pr));
    const layer_pair lp{read_layer(pr[0], index_path(p, 0), file), read_layer(pr[1], index_path(p, 1), file)};
    for (std::size_t q = 0; q < out.pairs.size(); ++q) {
      if (out.pairs[q] == lp) fail(file, p, "repeats pairs_saved[" + std::to_string(q) + "]");
    }
    out.pairs.push_back(lp);
  }

  for_each_dataset(root, file, [&](const std::string& model, const std::string& domain, const std::string& path,
                                   const json& obj) {
    auto [e, values] = read_matrices(member(obj, "expert_counts_crosslayer", path, file),
                                     key_path(path, "expert_counts_crosslayer"), file, out.pairs.size(), std::nullopt);
    olmoe_domain_coactivation entry{model, domain,
                                    coactivation_table("expert_counts_crosslayer", out.pairs, e, std::move(values)),
                                    std::nullopt};
    if (const json* top1 = optional_member(obj, "expert_counts_crosslayer_top1")) {
      auto [e1, v1] = read_matrices(*top1, key_path(path, "expert_counts_crosslayer_top1"), file, out.pairs.size(), e);
      entry.counts_top1 = coactivation_table("expert_counts_crosslayer_top1", out.pairs, e1, std::move(v1));
    }
    out.datasets.push_back(std::move(entry));
  });
  return out;
}

// Each reader: the document parsed once, then read as its table (a caller that tries
// several tables on one document, like the fuzz target, parses it once).
inline activation_stats activation_stats_from(std::string_view text, std::string_view file) {
  return activation_stats_from_root(parse(text, file), file);
}
inline loss_table quant_loss_from(std::string_view text, std::string_view file) {
  return quant_loss_from_root(parse(text, file), file);
}
inline olmoe_expert_counts expert_counts_from(std::string_view text, std::string_view file) {
  return expert_counts_from_root(parse(text, file), file);
}
inline olmoe_coactivation coactivation_from(std::string_view text, std::string_view file) {
  return coactivation_from_root(parse(text, file), file);
}

}  // namespace detail::tables_json

/// Reads MC-MoE's activation statistics (mixtral_c4_expert_activation.json): the arrays
/// "expert_act_frequency" (counts) and "expert_act_weight_sum" (finite numbers >= 0),
/// both L × E with rows for layers 0..L-1; "model", "source" and "calibration" strings
/// when present.
///
/// Throws: `parse_error` naming the file (see the header comment): for a file that
/// cannot be read, text that is not JSON (with its line), a missing array, rows of
/// unequal length, the two arrays differing in shape, a negative or fractional count.
inline activation_stats read_activation_stats_json(std::istream& in, std::string_view name) {
  return detail::tables_json::activation_stats_from(detail::read_rest<std::string>(in, name, detail::json_limit()), name);
}

/// As the stream overload, reading the file at `path`.
inline activation_stats read_activation_stats_json(const std::filesystem::path& path) {
  return detail::tables_json::activation_stats_from(detail::read_all(path, detail::json_limit()), path.string());
}

/// Reads MC-MoE's quantization loss (mixtral_quant_loss.json): "loss" is an object keyed
/// by layer "0".."L-1", each keyed by expert "0".."E-1", each keyed by bitwidth ("1",
/// "2", "3") with a finite loss >= 0. Every layer must have the same experts and every
/// expert the same bitwidths (ascending in the table whatever the key order).
///
/// Throws: `parse_error` naming the file: for a file that cannot be read, text that is
/// not JSON (with its line), a missing "loss", a key that is not a canonical decimal
/// number, a gap in the layer or expert numbers, a layer with other experts or an expert
/// with other bitwidths than the first, a bitwidth outside [1, 32], a negative loss.
inline loss_table read_quant_loss_json(std::istream& in, std::string_view name) {
  return detail::tables_json::quant_loss_from(detail::read_rest<std::string>(in, name, detail::json_limit()), name);
}

/// As the stream overload, reading the file at `path`.
inline loss_table read_quant_loss_json(const std::filesystem::path& path) {
  return detail::tables_json::quant_loss_from(detail::read_all(path, detail::json_limit()), path.string());
}

/// Reads OLMoE's expert_counts.json: "layers_saved" (ascending layer numbers), optional
/// "models" (name → description) and "datasets"[model][domain] with "expert_counts" and
/// optionally "expert_counts_top1", each one row of E counts per saved layer.
///
/// Throws: `parse_error` naming the file: for a file that cannot be read, text that is
/// not JSON (with its line), missing keys, layers out of order or above 65535, a table
/// with another row count than layers_saved, ragged rows, top-1 counts of another width
/// than the counts, a negative or fractional count, an empty "datasets" or model.
inline olmoe_expert_counts read_olmoe_expert_counts_json(std::istream& in, std::string_view name) {
  return detail::tables_json::expert_counts_from(detail::read_rest<std::string>(in, name, detail::json_limit()), name);
}

/// As the stream overload, reading the file at `path`.
inline olmoe_expert_counts read_olmoe_expert_counts_json(const std::filesystem::path& path) {
  return detail::tables_json::expert_counts_from(detail::read_all(path, detail::json_limit()), path.string());
}

/// Reads OLMoE's expert_coactivation_crosslayer.json: "pairs_saved" (a list of [from,
/// to] layer pairs) and "datasets"[model][domain] with "expert_counts_crosslayer" and
/// optionally "expert_counts_crosslayer_top1", each one E × E count matrix per pair.
///
/// Throws: `parse_error` naming the file: for a file that cannot be read, text that is
/// not JSON (with its line), missing keys, a pair that is not two layer numbers or that
/// repeats another, a matrix count other than the pairs', a matrix that is not square or
/// not of the domain's size, a negative or fractional count, an empty "datasets" or model.
inline olmoe_coactivation read_olmoe_coactivation_json(std::istream& in, std::string_view name) {
  return detail::tables_json::coactivation_from(detail::read_rest<std::string>(in, name, detail::json_limit()), name);
}

/// As the stream overload, reading the file at `path`.
inline olmoe_coactivation read_olmoe_coactivation_json(const std::filesystem::path& path) {
  return detail::tables_json::coactivation_from(detail::read_all(path, detail::json_limit()), path.string());
}

}  // namespace moepolicy::io
