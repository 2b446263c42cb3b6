// moepolicy/cache/score_aware.hpp — score-aware eviction with the in-layer protection
// shield (Edge-MoE, "Enabling MoE on the Edge via Importance-Driven Expert Scheduling",
// §5.3). Models `EvictionPolicy`; observes layers and steps.
//
// The victim is the resident expert with the lowest average router score over the last
// `window` iterations (forward passes), where the average counts every token's score for
// the expert whether the token selected it or not (§5.3: "considers the activation scores
// of all experts … including those not selected as top-k"). Experts selected for the layer
// being computed are shielded from eviction from `on_layer_begin` until `on_layer_end` of
// that layer (§5.3's protection shield against thrashing). Ties go to the least recently
// used, then to the lower (layer, expert).
//
// Readings of the text, where it leaves room:
//   - "the preceding n iterations": the window holds the iteration in progress (whose
//     scores for the current layer are known once the router ran) and the n − 1 before
//     it; the average of (layer, expert) is its score sum over the window divided by the
//     tokens that layer saw in the window (0 when it saw none);
//   - scores are those of the batch given to `on_layer_begin`: all `num_experts` router
//     scores of each token when the batch carries them (`batch_view::scores`); otherwise
//     the gate weights of the selected experts, and 0 for every expert a token did not
//     select. The Granite and Mixtral traces carry only top-k weights (renormalised over
//     the top-k), so on them the policy ranks experts by windowed selected-weight mass;
//     the FLAME-MoE CSVs carry full probability vectors, zero outside the top-k;
//   - the shield covers every expert of the batch's selection (the router's final output
//     in a routed system), resident yet or not; experts of other layers are never
//     shielded by it. A miss that finds only shielded residents in its pool is served
//     without being cached (`cache_stats::overflows`).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/cache/detail/shielded_ranking.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

namespace detail {

/// trunc(x · 2^32) for finite |x| < 2^31, exactly as `static_cast<std::int64_t>(double(x)
/// * 2^32)` gives it, from three 32-bit truncations that vectorise: hi = trunc(x); the
/// fraction r = x − hi is exact in float, and so are y = r · 2^16 and its fraction
/// r2 = y − trunc(y); as hi, trunc(y) and r2 share the sign of x,
/// trunc(x · 2^32) = hi · 2^32 + trunc(y) · 2^16 + trunc(r2 · 2^16).
[[nodiscard]] inline std::int64_t fixed_32(float x) noexcept {
  const auto hi = static_cast<std::int32_t>(x);
  const float y = (x - static_cast<float>(hi)) * 65536.0f;
  const auto mid = static_cast<std::int32_t>(y);
  const auto lo = static_cast<std::int32_t>((y - static_cast<float>(mid)) * 65536.0f);
  return std::int64_t{hi} * 4294967296 + std::int64_t{mid} * 65536 + std::int64_t{lo};
}

}  // namespace detail

/// Configuration of `score_aware_policy`.
struct score_aware_config {
  /// Iterations n the average covers, the current one included; >= 1. The paper does not
  /// give its n; 8 covers half of a bundled Granite request's 16 decode steps.
  std::uint32_t window = 8;
};

/// Evicts the resident expert with the lowest windowed average score, never one selected
/// for the layer in progress.
///
/// Unshielded residents sit in a heap per pool ranked by (average, last use). An average
/// changes only when its layer's batch arrives or when the window moves; the pools whose
/// ranks all moved then are marked stale and ranked at their next `victim`, by one O(n)
/// scan (detail/shielded_ranking.hpp), instead of being re-ranked eagerly at O(E log n)
/// per batch and O(L · E) per step end as in the first implementation
/// (cache/detail/score_aware_reference.hpp); the victims are the same.
///
/// The iteration that leaves the window at a step end is retired from a layer's sums when
/// the layer is next touched (its next batch, fused with adding the batch's scores, or a
/// read of one of its averages), not from all L · E sums at the step end.
///
/// Complexity per access, pools per layer of n residents, E experts, k selected per token:
/// O(E) per batch for the scores and the retired iteration (shared by its k·tokens
/// accesses), O(n) per batch for the first victim of a pool, O(log n) or O(1) per event;
/// O(pools) per step end.
class score_aware_policy {
 public:
  using config_type = score_aware_config;

  /// Throws: `invalid_argument` when `cfg.window` is 0.
  explicit score_aware_policy(const cache_shape& shape, const score_aware_config& cfg = {})
      : shape_(shape),
        window_(checked_window(cfg.window)),
        ranking_(shape),
        ring_(window_ * shape.slots(), 0),
        ring_tokens_(window_ * shape.num_layers, 0),
        sums_(shape.slots(), 0),
        tokens_(shape.num_layers, 0),
        retired_(shape.num_layers, 0) {}

  [[nodiscard]] std::uint32_t window() const noexcept { return static_cast<std::uint32_t>(window_); }

  /// Complexity of the events: O(log n) for n residents of the pool.
  void on_insert(expert_key k, const access_info&) noexcept { ranking_.insert(shape_.flat(k), ranker()); }
  void on_hit(expert_key k, const access_info&) noexcept { ranking_.hit(shape_.flat(k), ranker()); }
  void on_evict(expert_key k) noexcept { ranking_.evict(shape_.flat(k)); }

  /// Adds the batch's scores to the current iteration and shields its selected experts.
  ///
  /// Preconditions: `b.ref.layer` within the shape; ids below `num_experts`; `b.scores`
  /// empty or `tokens × num_experts`; scores and weights finite, of magnitude below 2^31
  /// (they are probabilities; sums are kept in 2^-32 fixed point).
  /// Complexity: O(tokens · num_experts) with scores, O(tokens · k) without, plus
  /// O(k · tokens) to shield when pools are per layer (the layer's pool is ranked at its
  /// next victim), O(num_experts · log n) to re-rank the layer's residents otherwise.
  void on_layer_begin(const batch_view& b) noexcept {
    const layer_id l = b.ref.layer;
    MOEPOLICY_ASSERT(l < shape_.num_layers);
    const std::size_t E = shape_.num_experts;
    const std::size_t base = static_cast<std::size_t>(l) * E;
    std::int64_t* slot = ring_.data() + cur_ * shape_.slots() + base;
    const std::size_t tokens = b.tokens();
    // The layer's row of the iteration in progress still holds the iteration that left the
    // window at the last step end (see `retire`): when that is all it has to retire, the
    // first token's scores replace it in the same pass.
    std::size_t t0 = 0;
    if (steps_ - retired_[l] == 1 && !b.scores.empty() && tokens > 0) {
      retired_[l] = steps_;
      MOEPOLICY_ASSERT(b.scores.size() == tokens * E);
      std::int64_t* sum = sums_.data() + base;
      const float* s = b.scores.data();
      for (std::size_t e = 0; e < E; ++e) {
        const std::int64_t x = fixed(s[e]);
        sum[e] += x - slot[e];
        slot[e] = x;
      }
      std::uint64_t& row_tokens = ring_tokens_[cur_ * shape_.num_layers + l];
      tokens_[l] -= row_tokens;
      row_tokens = 0;
      t0 = 1;
    } else {
      retire(l);
    }
    if (!b.scores.empty()) {
      MOEPOLICY_ASSERT(b.scores.size() == tokens * E);
      std::int64_t* sum = sums_.data() + base;
      for (std::size_t t = t0; t < tokens; ++t) {
        const float* s = b.scores.data() + t * E;
        for (std::size_t e = 0; e < E; ++e) {
          const std::int64_t x = fixed(s[e]);
          slot[e] += x;
          sum[e] += x;
        }
      }
    } else {
      for (std::size_t i = 0; i < b.experts.size(); ++i) {
        MOEPOLICY_ASSERT(b.experts[i] < E);
        const std::int64_t x = fixed(b.weights[i]);
        slot[b.experts[i]] += x;
        sums_[base + b.experts[i]] += x;
      }
    }
    ring_tokens_[cur_ * shape_.num_layers + l] += tokens;
    tokens_[l] += tokens;
    // Every average of the layer moved (its token count did).
    ranking_.begin_layer(base, E, b.experts, ranker());
  }
  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  void on_layer_end(layer_id l) noexcept { ranking_.end_layer(l, ranker()); }
  /// Closes the iteration; the one that leaves the window is retired from each layer's
  /// sums when that layer is next read or written (`retire`), which gives the sums eager
  /// retirement would give. Sums are kept in fixed point (units of 2^-32), so retiring
  /// subtracts exactly: an expert whose scores all left the window averages exactly 0, and
  /// rounding never reorders equal averages.
  /// Complexity: O(pools); O(num_experts) per layer, paid at its next batch or read.
  void on_step_end() noexcept {
    cur_ = (cur_ + 1) % window_;
    ++steps_;
    ranking_.rerank_all(ranker());
  }

  /// The average score of `k` over the window (0 when its layer saw no token in it).
  [[nodiscard]] double average_score(expert_key k) const noexcept { return average(shape_.flat(k)); }
  /// Whether `k` is shielded now.
  [[nodiscard]] bool shielded(expert_key k) const noexcept { return ranking_.shielded(shape_.flat(k)); }

  /// Returns: the unshielded resident of pool `part` with the lowest average score (ties:
  /// least recently used, then lower key), or nothing when every resident is shielded.
  /// Complexity: O(1); O(n) for a pool whose ranks moved since its last victim.
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = ranking_.top(part, ranker());
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  static std::size_t checked_window(std::uint32_t w) {
    if (w == 0) detail::throw_invalid("score_aware_policy", "window must be >= 1", w);
    return w;
  }
  static constexpr double fixed_one = 4294967296.0;  // 2^32
  static std::int64_t fixed(float x) noexcept { return detail::fixed_32(x); }
  /// Retires from layer `l`'s sums the iterations that left the window since it was last
  /// read or written: each step end retires one row of the ring, so after `window` rows
  /// every row of the layer is retired. Logically const: the sums are those of eager
  /// retirement.
  void retire(std::size_t l) const noexcept {
    const std::uint64_t behind = steps_ - retired_[l];
    if (behind == 0) return;
    retired_[l] = steps_;
    const std::size_t E = shape_.num_experts, slots = shape_.slots(), L = shape_.num_layers;
    const std::size_t base = l * E;
    std::int64_t* sum = sums_.data() + base;
    const std::size_t n = behind < window_ ? static_cast<std::size_t>(behind) : window_;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t pos = (cur_ + window_ - i) % window_;  // the row step end steps_ − i retired
      std::int64_t* row = ring_.data() + pos * slots + base;
      for (std::size_t e = 0; e < E; ++e) {
        sum[e] -= row[e];
        row[e] = 0;
      }
      tokens_[l] -= ring_tokens_[pos * L + l];
      ring_tokens_[pos * L + l] = 0;
    }
  }
  [[nodiscard]] double average(std::size_t f) const noexcept {
    const std::size_t l = layer_of_.divide(f);
    retire(l);
    const std::uint64_t n = tokens_[l];
    return n == 0 ? 0.0 : static_cast<double>(sums_[f]) / fixed_one / static_cast<double>(n);
  }
  /// Ranks a slot by (average, last use).
  struct ranker_fn {
    const score_aware_policy* policy;
    [[nodiscard]] detail::heap_rank operator()(std::size_t f) const noexcept {
      return {policy->average(f), policy->ranking_.last_use(f)};
    }
  };
  [[nodiscard]] ranker_fn ranker() const noexcept { return {this}; }

  cache_shape shape_;
  detail::slot_divider layer_of_{shape_.num_experts};  // slot → layer
  std::size_t window_;
  std::size_t cur_ = 0;                             // the ring's row of the iteration in progress
  std::uint64_t steps_ = 0;                         // step ends so far
  detail::shielded_ranking ranking_;                // unshielded residents by (average, last use); the shield
  mutable std::vector<std::int64_t> ring_;          // window × slots score sums per iteration (fixed point)
  mutable std::vector<std::uint64_t> ring_tokens_;  // window × layers tokens per iteration
  mutable std::vector<std::int64_t> sums_;
  mutable std::vector<std::uint64_t> tokens_;
  mutable std::vector<std::uint64_t> retired_;  // per layer: the step ends retired from its sums
};

static_assert(EvictionPolicy<score_aware_policy>);
static_assert(policy_traits<score_aware_policy>::observes_layers && policy_traits<score_aware_policy>::observes_steps);

}  // namespace moepolicy
