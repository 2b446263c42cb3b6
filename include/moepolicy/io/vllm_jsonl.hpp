// moepolicy/io/vllm_jsonl.hpp — importers of the per-token routing JSONL that a patched
// vLLM wrote for Mixtral-8x7B (the speculative-moe recordings,
// ../shared/traces/mixtral-8x7b-decode/PROVENANCE.txt).
//
// The recorder logged, for every token row of every forward pass, the top-k expert ids
// and gate weights (softmax renormalised over the top-k), one JSON object per line, and
// dropped rows whose weights were exactly equal (its padding filter). Two variants:
//
// Decode-only (humaneval_2_routing.jsonl), `read_vllm_decode_jsonl`:
//   {"dataset", "problem_id", "layer", "experts", "gating_probs", "token_idx"}, where
//   token_idx is the 0-based index of the generated token, renumbered per (problem,
//   layer) after filtering.
//   Mapping: one request per (dataset, problem_id), named "<dataset>/<problem_id>", in
//   order of first appearance; every row phase::decode with step = position = token_idx.
//   Absolute positions are not recorded (the prompt length is unknown), so positions
//   count generated tokens; and since the filter renumbered each layer's stream, a step
//   joins the layers' token_idx-th rows, exact per layer and approximate across layers
//   near a request's end (PROVENANCE).
//
// Prefill + decode (routing_raw.jsonl), `read_vllm_raw_jsonl`:
//   {"dataset", "problem_id", "layer", "token_pos", "experts", "gating_probs"}, where
//   token_pos is the row's index inside its forward batch (batch size 1, so a prefill
//   row's token_pos is its prompt position, and a decode row's is 0).
//   Batches: a batch is a maximal run of consecutive lines of the same request and
//   layer whose token_pos strictly increase. (Not "increase by 1": the filter dropped
//   some prefill rows, so the recorded file has 113 gaps in token_pos inside batches.)
//   A batch of two or more rows is a prefill pass: phase::prefill, step 0, position =
//   token_pos. A one-row batch is a decode row, and must have token_pos 0.
//   Decode steps: the decode rows of a request are numbered in file order into steps
//   1, 2, ...; a new step starts at every decode row whose layer is <= the layer of the
//   request's previous decode row (the layers of a step come in increasing order; the
//   filter leaves some out, so a step may lack layers — the recorded file's first step
//   has no layer 2 — and a step missing its last layers followed by one missing its first
//   ones would merge, which the data cannot tell apart). Position of a decode row =
//   P + step − 1, where P = (largest prefill token_pos of the request) + 1, the prompt
//   length (135 in the recorded file, equal to its largest prefill batch).
//   Rules: each layer has at most one prefill batch per request; every prefill batch of
//   a request comes before its decode rows. A request without prefill batches is
//   accepted with P = 0 (a one-token prompt's prefill is indistinguishable from a
//   decode row, and is then step 1 at position 0).
//
// Both: num_experts and num_layers are not in the files and come from
// `vllm_jsonl_options` (Mixtral-8x7B: 8 and 32); top_k is the length of the first
// record's `experts`, and every record must have that many (else "k varying"); the model
// name comes from the options; source names the variant; no router scores.
//
// Errors: `moepolicy::parse_error` naming the file (or the stream's name) and the
// 1-based line: a missing field or one of the wrong type, an integer out of range
// (negative, layer or expert id > 65535, token_idx/token_pos > 2^32 − 1), k varying, a
// row that `routing_trace_builder::check` rejects (layer >= num_layers, expert id >=
// num_experts, an id twice, as many weights as ids, a weight negative or not finite), a
// weight that does not fit a float, a repeated (layer, token_idx) in a decode-only
// request, the batch rules above for the raw variant, input without records, and the
// line rules of io/jsonl_format.hpp. Bad options: `moepolicy::invalid_argument`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::io {

/// What the vLLM routing files do not state. The defaults describe the recorded model.
struct vllm_jsonl_options {
  /// Routed experts per layer (Mixtral-8x7B: 8), in [1, 65536].
  std::uint32_t num_experts = 8;
  /// MoE layers (Mixtral-8x7B: 32), in [1, 65536].
  std::uint32_t num_layers = 32;
  /// The trace's model name.
  std::string model = "neuralmagic/Mixtral-8x7B-Instruct-v0.1-FP8";
};

namespace detail {

/// Throws `invalid_argument` naming `fn` when `opt` cannot describe a trace.
inline void check_vllm_options(std::string_view fn, const vllm_jsonl_options& opt) {
  if (opt.num_experts == 0 || opt.num_experts > 65536) {
    moepolicy::detail::throw_invalid(fn, "options.num_experts must be in [1, 65536]", opt.num_experts);
  }
  if (opt.num_layers == 0 || opt.num_layers > 65536) {
    moepolicy::detail::throw_invalid(fn, "options.num_layers must be in [1, 65536]", opt.num_layers);
  }
}

/// What both vLLM variants share: the options, the builder (made at the first record,
/// when top_k is known), requests by name, and the common fields of a record.
class vllm_reader {
 public:
  vllm_reader(std::string_view fn, const vllm_jsonl_options& opt, std::string_view source)
      : opt_(opt), source_(source) {
    check_vllm_options(fn, opt);
  }

  /// Reads the fields every record has into `request()`, `layer()`, `experts()` and
  /// `weights()`, and checks them as a row of the trace.
  void take(const jsonl_lines& at, const json& rec) {
    const std::string& dataset = require_string(at, rec, "dataset");
    const std::uint64_t problem = require_uint(at, rec, "problem_id", 0, std::numeric_limits<std::uint64_t>::max());
    layer_ = static_cast<layer_id>(require_uint(at, rec, "layer", 0, 65535));
    require_expert_ids(at, rec, "experts", ids_);
    require_weights(at, rec, "gating_probs", weights_);
    if (!builder_) {
      if (ids_.empty()) at.fail("field \"experts\" is empty: top_k must be at least 1");
      if (ids_.size() > opt_.num_experts) {
        at.fail("top_k = " + std::to_string(ids_.size()) +
                " (experts in the first record) exceeds num_experts = " + std::to_string(opt_.num_experts));
      }
      builder_.emplace(trace_info{opt_.model, std::string(source_), opt_.num_layers, opt_.num_experts,
                                  static_cast<std::uint32_t>(ids_.size()), false});
    } else if (ids_.size() != builder_->info().top_k) {
      at.fail("k varying: layer " + std::to_string(layer_) + " has " + std::to_string(ids_.size()) +
              " experts, the first record had " + std::to_string(builder_->info().top_k));
    }
    if (dataset != last_dataset_ || problem != last_problem_ || !any_) {
      std::string name = dataset + '/' + std::to_string(problem);
      const auto [it, fresh] = requests_.emplace(std::move(name), 0u);
      if (fresh) it->second = builder_->add_request(it->first);
      request_ = it->second;
      last_dataset_ = dataset;
      last_problem_ = problem;
      any_ = true;
    }
    if (auto why = builder_->check(row(phase::decode, 0, 0))) at.fail(*why);
  }

  /// The current record as a row with the given phase, step and position.
  [[nodiscard]] trace_row row(phase kind, std::uint32_t step, std::uint32_t position) const noexcept {
    return trace_row{request_, kind, step, position, layer_, ids_, weights_, {}};
  }

  [[nodiscard]] std::uint32_t request() const noexcept { return request_; }
  [[nodiscard]] layer_id layer() const noexcept { return layer_; }
  [[nodiscard]] std::size_t num_requests() const noexcept { return builder_ ? builder_->num_requests() : 0; }
  [[nodiscard]] const std::vector<expert_id>& experts() const noexcept { return ids_; }
  [[nodiscard]] const std::vector<float>& weights() const noexcept { return weights_; }

  /// Appends a checked row.
  void add(const trace_row& r) { builder_->add(r); }

  /// The trace.
  ///
  /// Throws: `parse_error` at line 1 of `file` when no record was read.
  routing_trace finish(std::string_view file) && {
    if (!builder_) fail_at_line(file, 1, "expected routing records, got end of input");
    return std::move(*builder_).finish();
  }

 private:
  vllm_jsonl_options opt_;
  std::string_view source_;
  std::optional<routing_trace_builder> builder_;
  std::unordered_map<std::string, std::uint32_t> requests_;
  std::string last_dataset_;
  std::uint64_t last_problem_ = 0;
  bool any_ = false;
  std::uint32_t request_ = 0;
  layer_id layer_ = 0;
  std::vector<expert_id> ids_;
  std::vector<float> weights_;
};

inline constexpr std::string_view vllm_decode_source = "vllm routing jsonl, decode-only (speculative-moe)";
inline constexpr std::string_view vllm_raw_source = "vllm routing jsonl, prefill+decode (speculative-moe)";

inline routing_trace read_vllm_decode(std::istream& in, std::string_view name, const vllm_jsonl_options& opt,
                                      std::string_view fn) {
  vllm_reader reader(fn, opt, vllm_decode_source);
  jsonl_lines lines(in, name);
  // Per request: (layer << 32 | token_idx) -> line, to name both lines of a duplicate.
  std::vector<std::unordered_map<std::uint64_t, std::uint64_t>> seen;
  json rec;
  while (lines.next(rec)) {
    reader.take(lines, rec);
    const auto token =
        static_cast<std::uint32_t>(require_uint(lines, rec, "token_idx", 0, std::numeric_limits<std::uint32_t>::max()));
    seen.resize(reader.num_requests());
    const std::uint64_t key = (std::uint64_t{reader.layer()} << 32) | token;
    if (const auto [it, fresh] = seen[reader.request()].emplace(key, lines.line()); !fresh) {
      lines.fail("duplicate record for layer " + std::to_string(reader.layer()) + ", token_idx " +
                 std::to_string(token) + " (first on line " + std::to_string(it->second) + ")");
    }
    reader.add(reader.row(phase::decode, token, token));
  }
  return std::move(reader).finish(name);
}

/// The raw variant's state for one request.
struct vllm_raw_request {
  /// Line of each layer's prefill batch, 0 for none (grown to the largest layer seen).
  std::vector<std::uint64_t> prefill_line;
  /// P: largest prefill token_pos + 1.
  std::uint64_t prompt_len = 0;
  /// Line of the first decode row, 0 before any.
  std::uint64_t first_decode_line = 0;
  std::uint32_t step = 0;
  layer_id last_decode_layer = 0;
};

inline routing_trace read_vllm_raw(std::istream& in, std::string_view name, const vllm_jsonl_options& opt,
                                   std::string_view fn) {
  vllm_reader reader(fn, opt, vllm_raw_source);
  jsonl_lines lines(in, name);
  std::vector<vllm_raw_request> requests;

  // The open batch. Its first row waits in `pending` until the next line tells
  // whether the batch is a prefill pass (more rows follow) or a decode row.
  bool open = false;
  std::uint32_t batch_request = 0;
  layer_id batch_layer = 0;
  std::uint64_t batch_last_pos = 0;
  std::uint64_t batch_line = 0;
  std::size_t batch_rows = 0;
  struct {
    std::uint32_t request = 0;
    layer_id layer = 0;
    std::uint32_t position = 0;
    std::vector<expert_id> experts;
    std::vector<float> weights;
  } pending;

  const auto pending_row = [&](phase kind, std::uint32_t step, std::uint32_t position) {
    return trace_row{pending.request, kind, step, position, pending.layer, pending.experts, pending.weights, {}};
  };
  // A one-row batch ends: it is a decode row.
  const auto close_single = [&] {
    if (pending.position != 0) {
      fail_at_line(name, batch_line,
                   "a one-row batch (a decode row) must have token_pos 0, got " + std::to_string(pending.position));
    }
    vllm_raw_request& r = requests[pending.request];
    if (r.first_decode_line == 0 || pending.layer <= r.last_decode_layer) {
      if (r.step == std::numeric_limits<std::uint32_t>::max()) fail_at_line(name, batch_line, "too many decode steps");
      ++r.step;
    }
    const std::uint64_t position = r.prompt_len + r.step - 1u;
    if (position > std::numeric_limits<std::uint32_t>::max()) {
      fail_at_line(name, batch_line, "decode position " + std::to_string(position) + " exceeds 2^32 - 1");
    }
    if (r.first_decode_line == 0) r.first_decode_line = batch_line;
    r.last_decode_layer = pending.layer;
    reader.add(pending_row(phase::decode, r.step, static_cast<std::uint32_t>(position)));
  };

  json rec;
  while (lines.next(rec)) {
    reader.take(lines, rec);
    const std::uint64_t pos = require_uint(lines, rec, "token_pos", 0, std::numeric_limits<std::uint32_t>::max());
    const std::uint32_t request = reader.request();
    if (requests.size() < reader.num_requests()) {
      requests.resize(reader.num_requests());
    }
    vllm_raw_request& r = requests[request];

    if (open && request == batch_request && reader.layer() == batch_layer && pos > batch_last_pos) {
      if (batch_rows == 1) {
        // The batch has become a prefill pass.
        if (r.first_decode_line != 0) {
          fail_at_line(name, batch_line,
                       "prefill batch of layer " + std::to_string(batch_layer) + " after decode rows (first on line " +
                           std::to_string(r.first_decode_line) + ")");
        }
        if (r.prefill_line.size() <= batch_layer) r.prefill_line.resize(std::size_t{batch_layer} + 1u, 0);
        if (const std::uint64_t first = r.prefill_line[batch_layer]; first != 0) {
          fail_at_line(name, batch_line,
                       "second prefill batch of layer " + std::to_string(batch_layer) + " (the first starts on line " +
                           std::to_string(first) + ")");
        }
        r.prefill_line[batch_layer] = batch_line;
        reader.add(pending_row(phase::prefill, 0, pending.position));
        r.prompt_len = std::max<std::uint64_t>(r.prompt_len, std::uint64_t{pending.position} + 1u);
      }
      reader.add(reader.row(phase::prefill, 0, static_cast<std::uint32_t>(pos)));
      r.prompt_len = std::max<std::uint64_t>(r.prompt_len, pos + 1u);
      batch_last_pos = pos;
      ++batch_rows;
      continue;
    }
    if (open && batch_rows == 1) close_single();
    open = true;
    batch_request = request;
    batch_layer = reader.layer();
    batch_last_pos = pos;
    batch_line = lines.line();
    batch_rows = 1;
    pending.request = request;
    pending.layer = reader.layer();
    pending.position = static_cast<std::uint32_t>(pos);
    pending.experts = reader.experts();
    pending.weights = reader.weights();
  }
  if (open && batch_rows == 1) close_single();
  return std::move(reader).finish(name);
}

}  // namespace detail

/// The decode-only vLLM routing read from `in`; `name` labels errors.
///
/// Throws: `invalid_argument` for bad options; `parse_error` naming `name` and the line
/// (see the header comment).
[[nodiscard]] inline routing_trace read_vllm_decode_jsonl(std::istream& in, std::string_view name,
                                                          const vllm_jsonl_options& options = {}) {
  return detail::read_vllm_decode(in, name, options, "io::read_vllm_decode_jsonl");
}

/// The decode-only vLLM routing file `file` (humaneval_2_routing.jsonl).
///
/// Throws: as the stream overload, naming the file as given.
[[nodiscard]] inline routing_trace read_vllm_decode_jsonl(const std::filesystem::path& file,
                                                          const vllm_jsonl_options& options = {}) {
  detail::check_vllm_options("io::read_vllm_decode_jsonl", options);
  std::ifstream in = detail::open_input(file);
  return detail::read_vllm_decode(in, file.string(), options, "io::read_vllm_decode_jsonl");
}

/// The prefill+decode vLLM routing read from `in`; `name` labels errors.
///
/// Throws: `invalid_argument` for bad options; `parse_error` naming `name` and the line
/// (see the header comment).
[[nodiscard]] inline routing_trace read_vllm_raw_jsonl(std::istream& in, std::string_view name,
                                                       const vllm_jsonl_options& options = {}) {
  return detail::read_vllm_raw(in, name, options, "io::read_vllm_raw_jsonl");
}

/// The prefill+decode vLLM routing file `file` (routing_raw.jsonl).
///
/// Throws: as the stream overload, naming the file as given.
[[nodiscard]] inline routing_trace read_vllm_raw_jsonl(const std::filesystem::path& file,
                                                       const vllm_jsonl_options& options = {}) {
  detail::check_vllm_options("io::read_vllm_raw_jsonl", options);
  std::ifstream in = detail::open_input(file);
  return detail::read_vllm_raw(in, file.string(), options, "io::read_vllm_raw_jsonl");
}

}  // namespace moepolicy::io
