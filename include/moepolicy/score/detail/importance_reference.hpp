// moepolicy/score/detail/importance_reference.hpp — the first implementation of the top-K
// selection of score/importance.hpp (Context-Aware GPU-NDP §4.1, Alg. 1 lines 13–17), kept
// unchanged as the reference that tests and bench/shapes_bench.cpp compare against: a
// heap-based `std::partial_sort` of all E ids, O(E log K).
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <span>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy::reference {

/// The ids of the `k` highest scores, best first; ties go to the lower id (as
/// `moepolicy::top_k_experts`). Complexity: O(E log k); no allocation.
inline std::span<const expert_id> top_k_experts(std::span<const double> scores, std::size_t k,
                                                std::span<expert_id> order) noexcept {
  MOEPOLICY_ASSERT(order.size() == scores.size() && k <= scores.size());
  std::iota(order.begin(), order.end(), expert_id{0});
  const auto before = [&](expert_id a, expert_id b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  };
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(), before);
  return order.first(k);
}

}  // namespace moepolicy::reference
