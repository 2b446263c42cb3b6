// moepolicy/sched/batched_steps.hpp — batched decode steps formed from a recorded trace.
//
// TriMoE schedules the decode steps of large batches (TriMoE, "TriMoE: Augmenting GPU
// with AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE Inference via Offloading",
// §5.1.3: 256–768 sequences aggregated by offline or zigzag batching), while the recorded
// traces decode one sequence at a time (Mixtral-8x7B: 2 requests, top-2, so a single
// token activates 2 of 8 experts per layer). This header merges the per-layer routing of
// B recorded decode tokens into one batched step: an expert's load L_i is the number of
// the B tokens routed to it at that layer.
//
// Which tokens form a step (`batch_formation`), over the trace's n decode tokens (every
// decode `step_ref` of every request, requests in trace order, steps in order — a token
// whose step lacks a layer adds nothing at that layer):
//   concurrent_sequences  B sequences decoding together, as continuous batching runs them:
//                         the token stream is cut into B segments of s = ⌊n/B⌋ tokens,
//                         and step t holds token t of every segment, t = 0 … s−1; so
//                         step t+1 holds each sequence's next token, and the temporal
//                         locality a predictor sees is that of real sequences. (A segment
//                         may span the end of one request and the start of the next.)
//   consecutive_tokens    step t holds tokens tB … tB+B−1 of the stream.
// Either way ⌊n/B⌋ steps, and the n mod B tokens left over are not used.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// How recorded decode tokens are grouped into batched steps.
enum class batch_formation : std::uint8_t { concurrent_sequences, consecutive_tokens };

/// Per-expert loads of batched decode steps: steps × layers × experts token counts.
class batched_steps {
 public:
  batched_steps() = default;
  batched_steps(std::size_t steps, std::size_t layers, std::size_t experts, std::size_t batch)
      : steps_(steps), layers_(layers), experts_(experts), batch_(batch), loads_(steps * layers * experts, 0) {}

  [[nodiscard]] std::size_t num_steps() const noexcept { return steps_; }
  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }
  /// B: recorded tokens per step.
  [[nodiscard]] std::size_t batch_size() const noexcept { return batch_; }

  /// L_e of every expert of `layer` at `step`.
  [[nodiscard]] std::span<const std::uint32_t> loads(std::size_t step, std::size_t layer) const noexcept {
    MOEPOLICY_ASSERT(step < steps_ && layer < layers_);
    return std::span<const std::uint32_t>(loads_).subspan((step * layers_ + layer) * experts_, experts_);
  }
  [[nodiscard]] std::span<std::uint32_t> loads(std::size_t step, std::size_t layer) noexcept {
    MOEPOLICY_ASSERT(step < steps_ && layer < layers_);
    return std::span<std::uint32_t>(loads_).subspan((step * layers_ + layer) * experts_, experts_);
  }

 private:
  std::size_t steps_ = 0, layers_ = 0, experts_ = 0, batch_ = 0;
  std::vector<std::uint32_t> loads_;
};

/// Batched steps of `batch_size` decode tokens of `trace`, grouped as `how` says.
///
/// Returns: ⌊n / batch_size⌋ steps over the trace's n decode tokens (none when n < B).
/// Throws: `invalid_argument` when `batch_size` is 0.
/// Complexity: O(rows of the trace + steps × layers × experts).
[[nodiscard]] inline batched_steps make_batched_decode_steps(const routing_trace& trace, std::size_t batch_size,
                                                             batch_formation how = batch_formation::concurrent_sequences) {
  if (batch_size == 0) detail::throw_invalid("make_batched_decode_steps", "batch_size must be >= 1", batch_size);
  std::vector<const step_ref*> tokens;
  for (const auto& s : trace.steps()) {
    if (s.kind == phase::decode) tokens.push_back(&s);
  }
  const std::size_t n = tokens.size();
  const std::size_t steps = n / batch_size;
  const auto& info = trace.info();
  batched_steps out(steps, info.num_layers, info.num_experts, batch_size);
  for (std::size_t t = 0; t < steps; ++t) {
    for (std::size_t j = 0; j < batch_size; ++j) {
      const std::size_t u = how == batch_formation::concurrent_sequences ? j * steps + t : t * batch_size + j;
      for (const auto& b : trace.batches_of(*tokens[u])) {
        auto row = out.loads(t, b.layer);
        for (expert_id e : trace.view(b).experts) ++row[e];
      }
    }
  }
  return out;
}

}  // namespace moepolicy
