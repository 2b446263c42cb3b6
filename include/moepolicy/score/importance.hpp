// moepolicy/score/importance.hpp — expert importance and top-K selection (Context-Aware GPU-NDP §4.1,
// Alg. 1 lines 13–17).
//
// S_{l,e} = α · norm(P_{l,e}) + (1 − α) · norm(W_{l,e}) per layer, from the activation
// counts P and routing-score sums W of a prefill. The paper leaves Norm open; three are
// offered, each applied to one layer's row:
//   sum_to_one   x / Σx            (shares; the default: P and W become distributions)
//   divide_by_max x / max x        (the busiest expert scores 1)
//   min_max      (x − min) / (max − min)
// A row of equal values normalises to all-equal values (1/E for sum_to_one, 1 for
// divide_by_max, 0 for min_max), and an all-zero row to zeros.
// Top-K orders by score descending and breaks ties by the lower expert id.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// How `importance_scores` normalises P and W within a layer.
enum class normalization : std::uint8_t { sum_to_one, divide_by_max, min_max };

namespace detail {

/// The statistics of a row that every normalisation needs.
struct norm_stats {
  double lo = 0.0, hi = 0.0, sum = 0.0;

  explicit norm_stats(std::span<const double> x) noexcept {
    if (x.empty()) return;
    lo = hi = x[0];
    for (double v : x) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      sum += v;
    }
  }

  [[nodiscard]] double apply(double v, normalization how) const noexcept {
    switch (how) {
      case normalization::sum_to_one:
        return sum > 0.0 ? v / sum : 0.0;
      case normalization::divide_by_max:
        return hi > 0.0 ? v / hi : 0.0;
      case normalization::min_max:
        return hi > lo ? (v - lo) / (hi - lo) : 0.0;
    }
    return 0.0;
  }
};

}  // namespace detail

/// Writes `norm(x)` into `out`. Preconditions: equal sizes; finite, non-negative x.
inline void normalize(std::span<const double> x, std::span<double> out, normalization how) noexcept {
  MOEPOLICY_ASSERT(x.size() == out.size());
  const detail::norm_stats st(x);
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = st.apply(x[i], how);
}

/// Configuration of the importance score.
struct importance_config {
  /// Weight of activation counts against routing-score sums, in [0, 1]; the paper's
  /// accuracy study uses 0.5.
  double alpha = 0.5;
  normalization norm = normalization::sum_to_one;
};

/// Checks an `importance_config`; `fn` names the caller.
inline void check_importance_config(std::string_view fn, const importance_config& c) {
  if (!(c.alpha >= 0.0 && c.alpha <= 1.0)) detail::throw_invalid(fn, "alpha must be in [0, 1]", c.alpha);
}

/// S = α norm(P) + (1 − α) norm(W) for one layer, into `out`.
///
/// Preconditions: `counts`, `weight_sums` and `out` of equal size; finite non-negative
/// inputs; a valid config. No allocation.
inline void importance_scores(std::span<const double> counts, std::span<const double> weight_sums,
                              std::span<double> out, const importance_config& config = {}) noexcept {
  MOEPOLICY_ASSERT(counts.size() == weight_sums.size() && counts.size() == out.size());
  const detail::norm_stats p(counts), w(weight_sums);
  for (std::size_t e = 0; e < out.size(); ++e) {
    out[e] =
        config.alpha * p.apply(counts[e], config.norm) + (1.0 - config.alpha) * w.apply(weight_sums[e], config.norm);
  }
}

/// Below this many experts `top_k_experts` selects with `std::partial_sort` (measured in
/// bench/shapes_bench: at E = 8 it is faster than `std::nth_element` and a sort).
inline constexpr std::size_t small_ranking = 32;

/// The ids of the `k` highest scores, best first; ties go to the lower id. Writes
/// `order` (one slot per score: the `k` answers first, in rank order, then the other ids
/// in no particular order) and returns its first `k` entries.
///
/// Partial selection: `std::nth_element` puts the k best first, then `std::sort` orders
/// them (below `small_ranking` ids a heap-based `std::partial_sort`, cheaper there); the order "score descending, then
/// lower id" is strict and total, so the answer is that of a full sort (and of the heap-based `std::partial_sort` of
/// the first implementation, score/detail/importance_reference.hpp). Preconditions: `order.size() == scores.size()`, `k
/// <= scores.size()`, scores not NaN. Complexity: O(E + k log k) on average (introselect: O(E log E) at worst); no
/// allocation.
inline std::span<const expert_id> top_k_experts(std::span<const double> scores, std::size_t k,
                                                std::span<expert_id> order) noexcept {
  MOEPOLICY_ASSERT(order.size() == scores.size() && k <= scores.size());
  std::iota(order.begin(), order.end(), expert_id{0});
  const auto before = [&](expert_id a, expert_id b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  const auto kth = order.begin() + static_cast<std::ptrdiff_t>(k);
  if (order.size() < small_ranking) {
    std::partial_sort(order.begin(), kth, order.end(), before);  // cheaper below a few dozen ids
  } else {
    if (k < order.size()) std::nth_element(order.begin(), kth, order.end(), before);
    std::sort(order.begin(), kth, before);
  }
  return order.first(k);
}

/// The full ranking of experts by score, best first, ties to the lower id.
/// Preconditions and allocation as `top_k_experts`. Complexity: O(E log E).
inline void rank_experts(std::span<const double> scores, std::span<expert_id> order) noexcept {
  MOEPOLICY_ASSERT(order.size() == scores.size());
  std::iota(order.begin(), order.end(), expert_id{0});
  std::sort(order.begin(), order.end(),
            [&](expert_id a, expert_id b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
}

}  // namespace moepolicy
