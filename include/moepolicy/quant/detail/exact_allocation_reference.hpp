// moepolicy/quant/detail/exact_allocation_reference.hpp — the first implementation of the
// exact bitwidth allocation (a multiple-choice knapsack by dynamic programming), kept
// unchanged as the reference that tests and bench/shapes_bench.cpp compare
// quant/exact_allocation.hpp against: a push DP with a data-dependent branch and three
// dependent stores per transition, allocating its tables on every call.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/quant/bit_allocation.hpp"

namespace moepolicy::reference {

/// The largest DP table the reference builds, in states × experts.
inline constexpr std::size_t exact_allocation_max_cells = std::size_t{1} << 24;

/// Solves the bitwidth allocation problem exactly.
///
/// Preconditions: as `prefix_split`; `min_count` empty or one count per bitwidth.
/// Returns: an optimal allocation and its status; `infeasible` when no allocation meets
/// the budget form and the minimum counts.
/// Throws: `invalid_argument` naming `exact_allocation` for a violated precondition, or
/// when the DP table would exceed `exact_allocation_max_cells`.
/// Complexity: O(E · m · (R + 1) · P), P = Π_j (min_count[j] + 1).
[[nodiscard]] inline bit_allocation exact_allocation(std::span<const bitwidth> bits,
                                                     const Eigen::Ref<const Eigen::MatrixXd>& loss, double average_bits,
                                                     const bit_allocation_config& config = {},
                                                     std::span<const double> weights = {},
                                                     std::span<const std::uint32_t> min_count = {}) {
  constexpr const char* fn = "exact_allocation";
  moepolicy::detail::check_allocation_problem(fn, bits, loss, weights, average_bits);
  const std::size_t E = static_cast<std::size_t>(loss.rows());
  const std::size_t m = bits.size();
  if (!min_count.empty() && min_count.size() != m) {
    moepolicy::detail::throw_invalid(
        fn, "min_count must be empty or one count per bitwidth (" + std::to_string(m) + "), size", min_count.size());
  }
  bit_allocation out;
  out.budget_increments = moepolicy::detail::budget_increments(E, average_bits, bits.front(), config.rounding);
  std::vector<std::int64_t> cost(m);
  for (std::size_t j = 0; j < m; ++j) cost[j] = bits[j].bits() - bits[0].bits();
  const std::int64_t all_highest = static_cast<std::int64_t>(E) * cost[m - 1];
  const bool saturated = out.budget_increments > all_highest;
  const auto R = static_cast<std::size_t>(std::min(out.budget_increments, all_highest));

  // Mixed-radix code of the counts per level, each capped at its minimum.
  std::vector<std::size_t> radix(m, 1), stride(m, 1);
  std::size_t P = 1;
  std::uint64_t required = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const std::uint32_t need = min_count.empty() ? 0 : min_count[j];
    required += need;
    radix[j] = std::size_t{need} + 1;
    stride[j] = P;
    if (P > exact_allocation_max_cells / radix[j])
      moepolicy::detail::throw_invalid(fn, "min_count makes the DP state too large");
    P *= radix[j];
  }
  if (required > E) {
    out.status = allocation_status::infeasible;
    return out;
  }
  const std::size_t states = (R + 1) * P;
  if (E != 0 && states > exact_allocation_max_cells / E) {
    moepolicy::detail::throw_invalid(fn, "instance too large for the exact solver: experts x states", E * states);
  }

  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr std::uint8_t none = std::numeric_limits<std::uint8_t>::max();
  if (m >= none) moepolicy::detail::throw_invalid(fn, "at most 254 bitwidths are supported", m);
  std::vector<double> cur(states, inf), next(states, inf);
  // Per expert and state: the level chosen and the count code it came from (capping makes
  // the count code of the predecessor ambiguous, so it is stored).
  std::vector<std::uint8_t> choice(E * states, none);
  std::vector<std::uint32_t> from_code(E * states, 0);
  cur[0] = 0.0;
  for (std::size_t e = 0; e < E; ++e) {
    std::fill(next.begin(), next.end(), inf);
    const double w = weights.empty() ? 1.0 : weights[e];
    for (std::size_t r = 0; r <= R; ++r) {
      for (std::size_t q = 0; q < P; ++q) {
        const double base = cur[r * P + q];
        if (base == inf) continue;
        for (std::size_t j = 0; j < m; ++j) {
          const std::size_t r2 = r + static_cast<std::size_t>(cost[j]);
          if (r2 > R) break;  // costs ascend with j
          const std::size_t digit = (q / stride[j]) % radix[j];
          const std::size_t q2 = digit + 1 < radix[j] ? q + stride[j] : q;
          const double v = base + w * loss(static_cast<Eigen::Index>(e), static_cast<Eigen::Index>(j));
          const std::size_t s2 = r2 * P + q2;
          if (v < next[s2]) {
            next[s2] = v;
            choice[e * states + s2] = static_cast<std::uint8_t>(j);
            from_code[e * states + s2] = static_cast<std::uint32_t>(q);
          }
        }
      }
    }
    cur.swap(next);
  }

  const std::size_t full = P - 1;  // every digit at its cap
  std::size_t best_r = R + 1;
  if (config.form == budget_form::exact && !saturated) {
    if (cur[R * P + full] < inf) best_r = R;
  } else {
    double best = inf;
    for (std::size_t r = 0; r <= R; ++r) {
      if (cur[r * P + full] < best) {
        best = cur[r * P + full];
        best_r = r;
      }
    }
  }
  if (best_r > R) {
    out.status = allocation_status::infeasible;
    return out;
  }

  out.level_of.assign(E, 0);
  std::size_t r = best_r, q = full;
  for (std::size_t e = E; e-- > 0;) {
    const std::size_t cell = e * states + r * P + q;
    const std::uint8_t j = choice[cell];
    MOEPOLICY_ASSERT(j != none);
    out.level_of[e] = j;
    r -= static_cast<std::size_t>(cost[j]);
    q = from_code[cell];
  }
  out.status = saturated ? allocation_status::saturated : allocation_status::ok;
  moepolicy::detail::finish_allocation(out, bits, loss, weights);
  return out;
}

}  // namespace moepolicy::reference
