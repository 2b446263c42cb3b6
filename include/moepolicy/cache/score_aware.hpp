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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

/// For each e < n, with x = fixed_32(s[e]): `sum[e] += x − row[e]` and `row[e] = x` when
/// `Replace`, else `sum[e] += x` and `row[e] += x`. Returns max |s[e]| (0 when n = 0).
///
/// On x86-64 four scores at a time in SSE2 (the baseline of every x86-64 compiler): the
/// three truncations of `fixed_32` in 32-bit lanes, then the 64-bit value from its two
/// halves, low = mid · 2^16 + lo modulo 2^32 and high = hi − 1 when mid · 2^16 + lo < 0
/// (mid and lo share the sign of x) — the same integers as `fixed_32`, which the scalar
/// tail and other targets call.
template <bool Replace>
inline float add_fixed_row(const float* s, std::int64_t* row, std::int64_t* sum, std::size_t n) noexcept {
  std::size_t e = 0;
  float most = 0.0f;
#if defined(__SSE2__)
  const __m128 scale = _mm_set1_ps(65536.0f);
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7fffffff));
  __m128 most4 = _mm_setzero_ps();
  for (; e + 4 <= n; e += 4) {
    const __m128 x = _mm_loadu_ps(s + e);
    most4 = _mm_max_ps(most4, _mm_and_ps(x, abs_mask));
    const __m128i hi = _mm_cvttps_epi32(x);
    const __m128 y = _mm_mul_ps(_mm_sub_ps(x, _mm_cvtepi32_ps(hi)), scale);
    const __m128i mid = _mm_cvttps_epi32(y);
    const __m128i lo = _mm_cvttps_epi32(_mm_mul_ps(_mm_sub_ps(y, _mm_cvtepi32_ps(mid)), scale));
    const __m128i low = _mm_add_epi32(_mm_slli_epi32(mid, 16), lo);
    const __m128i high = _mm_add_epi32(hi, _mm_srai_epi32(_mm_or_si128(mid, lo), 31));
    const __m128i v[2] = {_mm_unpacklo_epi32(low, high), _mm_unpackhi_epi32(low, high)};
    for (std::size_t h = 0; h < 2; ++h) {
      auto* r = reinterpret_cast<__m128i*>(row + e + 2 * h);
      auto* t = reinterpret_cast<__m128i*>(sum + e + 2 * h);
      const __m128i old = _mm_loadu_si128(r);
      if constexpr (Replace) {
        _mm_storeu_si128(t, _mm_add_epi64(_mm_loadu_si128(t), _mm_sub_epi64(v[h], old)));
        _mm_storeu_si128(r, v[h]);
      } else {
        _mm_storeu_si128(t, _mm_add_epi64(_mm_loadu_si128(t), v[h]));
        _mm_storeu_si128(r, _mm_add_epi64(old, v[h]));
      }
    }
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, most4);
  for (const float m : lanes) most = m > most ? m : most;
#endif
  for (; e < n; ++e) {
    const std::int64_t x = fixed_32(s[e]);
    const float a = s[e] < 0.0f ? -s[e] : s[e];
    most = a > most ? a : most;
    if constexpr (Replace) {
      sum[e] += x - row[e];
      row[e] = x;
    } else {
      sum[e] += x;
      row[e] += x;
    }
  }
  return most;
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
/// Unshielded residents sit in a heap per layer ranked by (average, last use); a pool
/// shared by the layers keeps a tournament tree over its layers' lowest members. An average
/// changes only when its layer's batch arrives or when the window moves; the layers whose
/// ranks all moved then are marked stale and ranked when their pool is next asked for a
/// victim, by one O(n) scan of the layer (detail/shielded_ranking.hpp), instead of being
/// re-ranked eagerly at O(E log n) per batch and O(L · E) per step end as in the first
/// implementation (cache/detail/score_aware_reference.hpp); the victims are the same.
///
/// The iteration that leaves the window at a step end is retired from a layer's sums when
/// the layer is next touched (its next batch, fused with adding the batch's scores, or a
/// read of one of its averages), not from all L · E sums at the step end.
///
/// Within a layer, whose averages share one divisor, the residents are ranked by the
/// fixed-point sums themselves while they are small enough to order them exactly as the
/// rounded averages do (`rank_kind`): no division per resident; in a shared pool only each
/// layer's lowest is ranked by its average among the other layers' lowest. Scores become
/// fixed point four at a time (`detail::add_fixed_row`).
///
/// Complexity per access, n residents per layer, L layers, E experts, k selected per token:
/// O(E) per batch for the scores and the retired iteration (shared by its k·tokens
/// accesses), O(n) per batch for the first victim after it, O(log n) or O(1) per event,
/// plus O(log L) per event in a shared pool; O(L) per step end.
class score_aware_policy {
 public:
  using config_type = score_aware_config;

  /// Throws: `invalid_argument` when `cfg.window` is 0.
  explicit score_aware_policy(const cache_shape& shape, const score_aware_config& cfg = {})
      : shape_(shape),
        window_(checked_window(cfg.window)),
        ranking_(shape),
        ring_(window_ * shape.slots(), 0),
        ring_counts_(window_ * shape.num_layers),
        sums_(shape.slots(), 0),
        counts_(shape.num_layers),
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
  /// O(k · tokens) to shield (the layer's residents are ranked at the next victim).
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
    float most = 0.0f;  // the largest |score| or |weight| of the batch
    if (steps_ - retired_[l] == 1 && !b.scores.empty() && tokens > 0) {
      retired_[l] = steps_;
      MOEPOLICY_ASSERT(b.scores.size() == tokens * E);
      most = detail::add_fixed_row<true>(b.scores.data(), slot, sums_.data() + base, E);
      window_counts& row = ring_counts_[cur_ * shape_.num_layers + l];
      counts_[l] -= row;
      row = {};
      t0 = 1;
    } else {
      retire(l);
    }
    if (!b.scores.empty()) {
      MOEPOLICY_ASSERT(b.scores.size() == tokens * E);
      std::int64_t* sum = sums_.data() + base;
      for (std::size_t t = t0; t < tokens; ++t) {
        const float m = detail::add_fixed_row<false>(b.scores.data() + t * E, slot, sum, E);
        most = m > most ? m : most;
      }
    } else {
      for (std::size_t i = 0; i < b.experts.size(); ++i) {
        MOEPOLICY_ASSERT(b.experts[i] < E);
        const std::int64_t x = fixed(b.weights[i]);
        slot[b.experts[i]] += x;
        sums_[base + b.experts[i]] += x;
        const float a = b.weights[i] < 0.0f ? -b.weights[i] : b.weights[i];
        most = a > most ? a : most;
      }
    }
    // At most `values` terms of magnitude below 2^33 entered any one sum of the layer, or
    // (`big`) the batch may push a sum past 2^51.
    const std::uint64_t values = b.scores.empty() ? b.experts.size() : tokens;
    const window_counts add{tokens, most < 2.0f ? values : big};
    ring_counts_[cur_ * shape_.num_layers + l] += add;
    counts_[l] += add;
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
  /// Complexity: O(layers); O(num_experts) per layer, paid at its next batch or read.
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
  /// Complexity: O(1) for a pool per layer, O(log L) per layer touched since the last
  /// victim in a shared pool; O(n) more for a layer whose ranks moved since.
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
    if (retired_[l] != steps_) retire_rows(l);
  }
  /// `retire` of a layer that has rows to retire (out of line: once per layer and step,
  /// where `retire` is asked once per rank).
  [[gnu::noinline]] void retire_rows(std::size_t l) const noexcept {
    const std::uint64_t behind = steps_ - retired_[l];
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
      counts_[l] -= ring_counts_[pos * L + l];
      ring_counts_[pos * L + l] = {};
    }
  }
  [[nodiscard]] double average(std::size_t f) const noexcept {
    const std::size_t l = layer_of_.divide(f);
    retire(l);
    return average_in(l, f);
  }
  [[nodiscard]] double average_in(std::size_t l, std::size_t f) const noexcept {
    const std::uint64_t n = counts_[l].tokens;
    return n == 0 ? 0.0 : static_cast<double>(sums_[f]) / fixed_one / static_cast<double>(n);
  }

  /// How the residents of a layer are ranked among themselves (after `retire` of the layer).
  ///
  /// Within a layer every average has the same divisor n, the layer's tokens, so
  /// when every sum of the layer is below 2^51 in magnitude the sums order the residents
  /// exactly as their averages do: sums are integers, exact as doubles; two that differ
  /// differ by at least 1, their quotients by at least 1/n, which is more than the spacing
  /// of doubles below 2^51 / n, so the rounded averages differ in the same direction, and
  /// equal sums give equal averages. `counts_[l].bound` keeps that true: it is at most
  /// 2^18 only while the layer's window holds fewer than 2^18 values per sum, each below
  /// 2^33 in magnitude (a score or weight below 2). The sum is then the rank, without a
  /// division; a layer whose window saw more, or larger values, is ranked by its averages.
  /// Ranks only change kind where all of a layer's ranks move at once (its batch, a step
  /// end), so the ranks held together in a layer's heap are always of one kind; in a shared
  /// pool a layer's lowest enters the tree over layers by its average (`ranker_fn::leaf`).
  enum class rank_kind : std::uint8_t { average, sum, zero };
  [[nodiscard]] rank_kind kind_of(std::size_t l) const noexcept {
    if (counts_[l].tokens == 0) return rank_kind::zero;
    return counts_[l].bound < big ? rank_kind::sum : rank_kind::average;
  }
  [[nodiscard]] double primary(rank_kind kind, std::size_t l, std::size_t f) const noexcept {
    switch (kind) {
      case rank_kind::sum:
        return static_cast<double>(sums_[f]);
      case rank_kind::zero:
        return 0.0;
      default:
        return average_in(l, f);
    }
  }
  /// Ranks a slot by (average, last use), or by (sum, last use) where that is the same
  /// order (see `rank_kind`).
  struct ranker_fn {
    const score_aware_policy* policy;
    [[nodiscard]] detail::heap_rank operator()(std::size_t f) const noexcept {
      const std::size_t l = policy->layer_of_.divide(f);
      policy->retire(l);
      return {policy->primary(policy->kind_of(l), l, f), policy->ranking_.last_use(f)};
    }
    /// The ranker of the members of layer `l`, which ranks them all at once: the layer
    /// retired once, its rank kind read once.
    [[nodiscard]] auto layer(std::size_t l) const noexcept {
      struct layer_ranker {
        const score_aware_policy* policy;
        const std::int64_t* sums;
        std::size_t layer;
        rank_kind kind;
        [[nodiscard]] detail::heap_rank operator()(std::size_t f) const noexcept {
          if (kind == rank_kind::sum) return {static_cast<double>(sums[f]), policy->ranking_.last_use(f)};
          return rank_other(f);
        }
        [[nodiscard, gnu::noinline]] detail::heap_rank rank_other(std::size_t f) const noexcept {
          return {policy->primary(kind, layer, f), policy->ranking_.last_use(f)};
        }
      };
      policy->retire(l);
      return layer_ranker{policy, policy->sums_.data(), l, policy->kind_of(l)};
    }
    /// The rank of `f`, layer `l`'s lowest member of rank `r`, among the other layers'
    /// lowest in a shared pool: by its average where the layer ranks by sums.
    [[nodiscard]] detail::heap_rank leaf(std::size_t l, std::size_t f, const detail::heap_rank& r) const noexcept {
      policy->retire(l);
      if (policy->kind_of(l) != rank_kind::sum) return r;
      return {policy->average_in(l, f), r.secondary};
    }
  };
  [[nodiscard]] ranker_fn ranker() const noexcept { return {this}; }

  /// Per layer and iteration (and per layer over the window): tokens, and the bound of
  /// `rank_kind` (values per sum, or `big`).
  struct window_counts {
    std::uint64_t tokens = 0;
    std::uint64_t bound = 0;
    window_counts& operator+=(const window_counts& o) noexcept {
      tokens += o.tokens;
      bound += o.bound;
      return *this;
    }
    window_counts& operator-=(const window_counts& o) noexcept {
      tokens -= o.tokens;
      bound -= o.bound;
      return *this;
    }
  };
  static constexpr std::uint64_t big = std::uint64_t{1} << 18;

  cache_shape shape_;
  detail::slot_divider layer_of_{shape_.num_experts};  // slot → layer
  std::size_t window_;
  std::size_t cur_ = 0;                             // the ring's row of the iteration in progress
  std::uint64_t steps_ = 0;                         // step ends so far
  detail::shielded_ranking ranking_;                // unshielded residents by (average, last use); the shield
  mutable std::vector<std::int64_t> ring_;          // window × slots score sums per iteration (fixed point)
  mutable std::vector<window_counts> ring_counts_;  // window × layers, per iteration
  mutable std::vector<std::int64_t> sums_;
  mutable std::vector<window_counts> counts_;   // per layer, over the window
  mutable std::vector<std::uint64_t> retired_;  // per layer: the step ends retired from its sums
};

static_assert(EvictionPolicy<score_aware_policy>);
static_assert(policy_traits<score_aware_policy>::observes_layers && policy_traits<score_aware_policy>::observes_steps);

}  // namespace moepolicy
