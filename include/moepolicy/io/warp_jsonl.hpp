// moepolicy/io/warp_jsonl.hpp — importer of the decode routing JSONL that the WARP engine's
// tracing tools wrote for OLMoE-1B-7B and Kimi-Linear-48B-A3B
// (../shared/traces/warp-olmoe-kimi/PROVENANCE.txt).
//
// Format: one JSON object per decode step, {"tok": n, "layers": [[e0, ..., e_{k-1}], ...]}:
// "layers" holds one list per routed MoE layer, in layer order, each the k selected expert
// ids. The recorder sorted each list ascending, so the router's rank order is lost, and it
// wrote no gate weights or scores. Batch 1, decode only, one request per file.
//
// Mapping: one request, named after the file's stem (`name` for the stream overload);
// every record is one decode step, step = position = tok (the prompt length is not in the
// file, so positions count generated tokens from the recorder's first); the i-th list of
// "layers" is MoE layer i of the trace (for Kimi-Linear the raw list index 0..25 is model
// layer 1..26, layer 0 being dense). Gate weights are not recorded: every id gets 1/k, so
// policies that weigh experts by their gate see equal weights, and the trace's `source`
// says so. top_k is the length of the first list; num_layers is the number of lists of the
// first record unless the options give it; num_experts is not in the file and comes from
// the options.
//
// `warp_options_for(path)` knows the two recorded files by their names (trace_olmoe_*,
// trace_kimi_*) and returns their model and expert count from the PROVENANCE; any other
// name needs explicit options.
//
// Errors: `moepolicy::parse_error` naming the file and the 1-based line: a missing field or
// one of the wrong type, "tok" out of [0, 2^32 − 1], a step that does not increase, a
// record whose layer count differs from the trace's, a list whose length differs from
// top_k (k varying), an expert id >= num_experts or repeated in a list, input without
// records, and the line rules of io/jsonl_format.hpp. Bad options:
// `moepolicy::invalid_argument`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::io {

/// What a WARP routing file does not state.
struct warp_jsonl_options {
  /// Routed experts per layer, in [1, 65536].
  std::uint32_t num_experts = 0;
  /// MoE layers; 0: the number of lists in the first record. At most 65536.
  std::uint32_t num_layers = 0;
  /// The trace's model name.
  std::string model;
};

/// The source string of traces this importer reads.
inline constexpr std::string_view warp_jsonl_source =
    "warp routing jsonl (decode, batch 1; ids sorted, no gate weights: every id weighs 1/k)";

/// The options of the recorded WARP files, known by name: `trace_olmoe_*` (OLMoE-1B-7B,
/// 64 experts, 16 MoE layers) and `trace_kimi_*` (Kimi-Linear-48B-A3B, 256 experts, 26 MoE
/// layers), from their PROVENANCE; nothing for any other name.
[[nodiscard]] inline std::optional<warp_jsonl_options> warp_options_for(const std::filesystem::path& path) {
  const std::string stem = path.stem().string();
  if (stem.starts_with("trace_olmoe")) return warp_jsonl_options{64, 16, "allenai/OLMoE-1B-7B"};
  if (stem.starts_with("trace_kimi")) return warp_jsonl_options{256, 26, "moonshotai/Kimi-Linear-48B-A3B"};
  return std::nullopt;
}

namespace detail {

inline void check_warp_options(std::string_view fn, const warp_jsonl_options& opt) {
  if (opt.num_experts == 0 || opt.num_experts > 65536) {
    moepolicy::detail::throw_invalid(fn, "options.num_experts must be in [1, 65536]", opt.num_experts);
  }
  if (opt.num_layers > 65536) {
    moepolicy::detail::throw_invalid(fn, "options.num_layers must be in [0, 65536] (0: from the first record)",
                                     opt.num_layers);
  }
}

/// The ids of list `i` of the record's "layers", into `out`.
inline void warp_layer_ids(const jsonl_lines& at, const json& list, std::size_t i, std::vector<expert_id>& out) {
  if (!list.is_array()) {
    at.fail("\"layers\"[" + std::to_string(i) + "] must be an array of expert ids, got " + std::string(describe(list)));
  }
  out.clear();
  for (std::size_t j = 0; j < list.size(); ++j) {
    const json& v = list[j];
    if (!v.is_number_integer()) {
      at.fail("\"layers\"[" + std::to_string(i) + "] must hold integers, got " + std::string(describe(v)) +
              " at index " + std::to_string(j));
    }
    const bool negative = !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
    if (negative || v.get<std::uint64_t>() > 65535u) {
      at.fail("expert id " + v.dump() + " in \"layers\"[" + std::to_string(i) + "] is out of range [0, 65535]");
    }
    out.push_back(static_cast<expert_id>(v.get<std::uint64_t>()));
  }
}

inline routing_trace read_warp(std::istream& in, std::string_view name, std::string_view request,
                               const warp_jsonl_options& opt, std::string_view fn) {
  check_warp_options(fn, opt);
  jsonl_lines lines(in, name);
  std::optional<routing_trace_builder> builder;
  std::uint32_t req = 0;
  std::uint64_t last_tok = 0;
  std::uint64_t last_line = 0;
  std::vector<expert_id> ids;
  std::vector<float> weights;
  json rec;
  while (lines.next(rec)) {
    const std::uint64_t tok = require_uint(lines, rec, "tok", 0, std::numeric_limits<std::uint32_t>::max());
    const json& layers = require_array(lines, rec, "layers");
    if (layers.empty()) lines.fail("field \"layers\" is empty");
    if (!builder) {
      warp_layer_ids(lines, layers[0], 0, ids);
      if (ids.empty()) lines.fail("\"layers\"[0] is empty: top_k must be at least 1");
      const std::uint32_t num_layers = opt.num_layers != 0 ? opt.num_layers : static_cast<std::uint32_t>(layers.size());
      if (ids.size() > opt.num_experts) {
        lines.fail("top_k = " + std::to_string(ids.size()) +
                   " (ids in the first list) exceeds num_experts = " + std::to_string(opt.num_experts));
      }
      builder.emplace(trace_info{opt.model, std::string(warp_jsonl_source), num_layers, opt.num_experts,
                                 static_cast<std::uint32_t>(ids.size()), false});
      req = builder->add_request(std::string(request));
      weights.assign(ids.size(), 1.0f / static_cast<float>(ids.size()));
    } else if (tok <= last_tok) {
      lines.fail("\"tok\" = " + std::to_string(tok) + " does not follow " + std::to_string(last_tok) + " (line " +
                 std::to_string(last_line) + "): decode steps must increase");
    }
    const std::uint32_t num_layers = builder->info().num_layers;
    if (layers.size() != num_layers) {
      lines.fail("\"layers\" has " + std::to_string(layers.size()) + " lists, the trace has " +
                 std::to_string(num_layers) + " MoE layers");
    }
    const std::uint32_t k = builder->info().top_k;
    for (std::size_t l = 0; l < layers.size(); ++l) {
      warp_layer_ids(lines, layers[l], l, ids);
      if (ids.size() != k) {
        lines.fail("k varying: \"layers\"[" + std::to_string(l) + "] has " + std::to_string(ids.size()) +
                   " ids, the first record's first list had " + std::to_string(k));
      }
      const trace_row row{req,     phase::decode, static_cast<std::uint32_t>(tok), static_cast<std::uint32_t>(tok),
                          static_cast<layer_id>(l), ids, weights, {}};
      if (auto why = builder->check(row)) lines.fail(*why);
      builder->add(row);
    }
    last_tok = tok;
    last_line = lines.line();
  }
  if (!builder) fail_at_line(name, 1, "expected routing records, got end of input");
  return std::move(*builder).finish();
}

}  // namespace detail

/// The WARP routing read from `in`: one request named `request`; `name` labels errors.
///
/// Throws: `invalid_argument` for bad options; `parse_error` naming `name` and the line
/// (see the header comment).
[[nodiscard]] inline routing_trace read_warp_jsonl(std::istream& in, std::string_view name, std::string_view request,
                                                   const warp_jsonl_options& options) {
  return detail::read_warp(in, name, request, options, "io::read_warp_jsonl");
}

/// The WARP routing file `file`, one request named after its stem, with `options`.
///
/// Throws: as the stream overload, naming the file as given.
[[nodiscard]] inline routing_trace read_warp_jsonl(const std::filesystem::path& file,
                                                   const warp_jsonl_options& options) {
  detail::check_warp_options("io::read_warp_jsonl", options);
  std::ifstream in = detail::open_input(file);
  return detail::read_warp(in, file.string(), file.stem().string(), options, "io::read_warp_jsonl");
}

/// The WARP routing file `file` with the options its name calls for (`warp_options_for`).
///
/// Throws: `parse_error` naming the file when its name is not one of the recorded files
/// (the expert count is not in the file: pass options); as above otherwise.
[[nodiscard]] inline routing_trace read_warp_jsonl(const std::filesystem::path& file) {
  const auto opt = warp_options_for(file);
  if (!opt) {
    detail::fail_file(file.string(),
                      "a WARP routing file does not state its model or expert count, and this name is neither "
                      "trace_olmoe_* nor trace_kimi_*: call io::read_warp_jsonl with warp_jsonl_options");
  }
  return read_warp_jsonl(file, *opt);
}

}  // namespace moepolicy::io
