// moepolicy/quant/exact_allocation.hpp — the exact optimum of the per-layer bitwidth
// allocation problem, without the prefix constraint: a multiple-choice knapsack.
//
//   minimise Σ_e w_e L_e(b_e)   subject to   Σ_e (b_e − b_0) {=, ≤} R,
//                                            |{e : b_e = b_j}| ≥ min_count[j] for every j.
//
// Solved by dynamic programming over experts with the state (increments spent, counts
// per level capped at their minimum), which is exact and runs in
// O(E · m · (R + 1) · P) time and memory, P = Π_j (min_count[j] + 1). It is the reference
// beside the prefix-split heuristic (quant/prefix_split.hpp): the gap between the two is
// what the prefix constraint costs. Budget, rounding, status and weights read as in
// quant/bit_allocation.hpp; with R above the all-highest budget the status is `saturated`
// and the problem is solved with R = E·c_{m−1}. Ties between allocations of equal loss
// go, expert by expert from the last, to the state reached from the fewest increments
// (each transition keeps the first candidate of least loss, candidates by ascending
// predecessor budget).
//
// Implementation (`exact_method::automatic`, the default):
//   - without minimum counts (P = 1) the DP pulls: per expert and level j, one pass over
//     the budgets r ≥ c_j, next[r] = min(next[r], cur[r − c_j] + w L(j)), a branch-free
//     minimum that vectorises; every row is kept and the backtrack re-derives each
//     expert's level, taking a state's candidates in the order the first implementation
//     (quant/detail/exact_allocation_reference.hpp) met them and keeping the first of
//     least loss, as it did, so results are identical. Budgets no prefix can reach are
//     skipped. O(E · m · (R + 1)) time, (E + 1)(R + 1) doubles in the workspace;
//   - with minimum counts (P > 1), the push DP of the first implementation, its tables in
//     the workspace;
//   - when every increment costs one step (consecutive bitwidths, c_j = j), there are no
//     minimum counts, and every expert's weighted loss is convex in its level — marginal
//     gains g_e(j) = w_e L_e(b_j) − w_e L_e(b_{j+1}) non-increasing in j — the greedy on
//     marginal gains is exact: an allocation is a choice of x_e ≤ m − 1 increments per
//     expert, its gain is Σ_e Σ_{j<x_e} g_e(j), a sum of Σ x_e values from the multiset of
//     all g_e(j). Taking the R largest of that multiset (ties: lower expert, then lower
//     level) takes, for every expert, a prefix of its own non-increasing list, so it is an
//     allocation, and no allocation of R increments can gain more than the R largest
//     values. With `budget_form::at_most` the greedy takes only the positive gains among
//     them (a non-positive one never lowers the loss; the DP, too, spends no increment
//     for nothing). O(E · m) time (selection by `std::nth_element`). It returns an
//     allocation of least loss; where several allocations share the least loss (equal
//     marginal gains) it may return another one than the DP. `exact_method` picks a
//     method explicitly.
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

namespace moepolicy {

/// The largest DP table `exact_allocation` builds, in states × experts.
inline constexpr std::size_t exact_allocation_max_cells = std::size_t{1} << 24;

/// How `exact_allocation` solves: `automatic` uses the greedy when it is exact (unit
/// increments, no minimum counts, losses convex in the level) and the DP otherwise;
/// `dynamic_programming` always the DP; `greedy` always the greedy, and throws when it is
/// not exact on the instance.
enum class exact_method : std::uint8_t { automatic, dynamic_programming, greedy };

/// Scratch of `exact_allocation`: after a call of some size, calls of at most that size
/// (experts × budget states) allocate nothing.
struct exact_allocation_workspace {
  std::vector<double> cur, next, row;
  std::vector<std::uint8_t> choice;
  std::vector<std::uint32_t> from_code;
  std::vector<std::int64_t> cost;
  std::vector<std::size_t> radix, stride;
  std::vector<double> gain;            // greedy: E × (m − 1) marginal gains
  std::vector<std::uint32_t> by_gain;  // greedy: their indices, selected
};

namespace detail {

/// Whether the greedy on marginal gains is exact (see the header comment): unit
/// increments and, per expert, non-increasing marginal gains of its weighted loss.
/// Complexity: O(E · m).
inline bool greedy_is_exact(std::span<const std::int64_t> cost, const Eigen::Ref<const Eigen::MatrixXd>& loss,
                            std::span<const double> weights) noexcept {
  const std::size_t m = cost.size();
  for (std::size_t j = 0; j < m; ++j) {
    if (cost[j] != static_cast<std::int64_t>(j)) return false;
  }
  for (Eigen::Index e = 0; e < loss.rows(); ++e) {
    const double w = weights.empty() ? 1.0 : weights[static_cast<std::size_t>(e)];
    for (std::size_t j = 1; j + 1 < m; ++j) {
      const auto J = static_cast<Eigen::Index>(j);
      const double before = w * loss(e, J - 1) - w * loss(e, J);
      const double after = w * loss(e, J) - w * loss(e, J + 1);
      if (after > before) return false;
    }
  }
  return true;
}

}  // namespace detail

/// Solves the bitwidth allocation problem exactly, into `out`, with scratch in `ws`.
/// Allocates nothing when `ws` and `out` have served a problem at least as large.
///
/// Preconditions, result and throws: as the returning overload below; `method` as
/// `exact_method` (with `greedy` on an instance where it is not exact: `invalid_argument`).
/// Complexity: O(E · m) with the greedy; O(E · m · (R + 1)) with the DP without minimum
/// counts; O(E · m · (R + 1) · P), P = Π_j (min_count[j] + 1), with them.
inline void exact_allocation(std::span<const bitwidth> bits, const Eigen::Ref<const Eigen::MatrixXd>& loss,
                             double average_bits, const bit_allocation_config& config, std::span<const double> weights,
                             std::span<const std::uint32_t> min_count, exact_method method,
                             exact_allocation_workspace& ws, bit_allocation& out) {
  constexpr const char* fn = "exact_allocation";
  detail::check_allocation_problem(fn, bits, loss, weights, average_bits);
  const std::size_t E = static_cast<std::size_t>(loss.rows());
  const std::size_t m = bits.size();
  if (!min_count.empty() && min_count.size() != m) {
    detail::throw_invalid(fn, "min_count must be empty or one count per bitwidth (" + std::to_string(m) + "), size",
                          min_count.size());
  }
  out.status = allocation_status::infeasible;
  out.level_of.clear();
  out.count_per_level.clear();
  out.used_increments = 0;
  out.weighted_loss = 0.0;
  out.gain = 0.0;
  out.budget_increments = detail::budget_increments(E, average_bits, bits.front(), config.rounding);
  std::vector<std::int64_t>& cost = ws.cost;
  cost.resize(m);
  for (std::size_t j = 0; j < m; ++j) cost[j] = bits[j].bits() - bits[0].bits();
  const std::int64_t all_highest = static_cast<std::int64_t>(E) * cost[m - 1];
  const bool saturated = out.budget_increments > all_highest;
  const auto R = static_cast<std::size_t>(std::min(out.budget_increments, all_highest));

  // Mixed-radix code of the counts per level, each capped at its minimum.
  ws.radix.assign(m, 1);
  ws.stride.assign(m, 1);
  std::size_t* const radix = ws.radix.data();
  std::size_t* const stride = ws.stride.data();
  std::size_t P = 1;
  std::uint64_t required = 0;
  for (std::size_t j = 0; j < m; ++j) {
    const std::uint32_t need = min_count.empty() ? 0 : min_count[j];
    required += need;
    radix[j] = std::size_t{need} + 1;
    stride[j] = P;
    if (P > exact_allocation_max_cells / radix[j]) detail::throw_invalid(fn, "min_count makes the DP state too large");
    P *= radix[j];
  }
  if (required > E) return;  // infeasible

  const bool greedy_exact = P == 1 && E > 0 && detail::greedy_is_exact(cost, loss, weights);
  if (method == exact_method::greedy && !greedy_exact) {
    detail::throw_invalid(fn,
                          "the greedy is exact only with consecutive bitwidths, no minimum counts and losses convex "
                          "in the level; bitwidths",
                          m);
  }
  if (greedy_exact && method != exact_method::dynamic_programming) {
    // The R largest marginal gains (at_most: of those, the positive ones), ties to the
    // lower expert, then the lower level: index e · (m − 1) + j orders both.
    const std::size_t steps = m - 1;
    ws.gain.resize(E * steps);
    ws.by_gain.resize(E * steps);
    for (std::size_t e = 0; e < E; ++e) {
      const double w = weights.empty() ? 1.0 : weights[e];
      const auto row = static_cast<Eigen::Index>(e);
      for (std::size_t j = 0; j < steps; ++j) {
        const auto J = static_cast<Eigen::Index>(j);
        ws.gain[e * steps + j] = w * loss(row, J) - w * loss(row, J + 1);
        ws.by_gain[e * steps + j] = static_cast<std::uint32_t>(e * steps + j);
      }
    }
    const double* g = ws.gain.data();
    const auto first = [g](std::uint32_t a, std::uint32_t b) { return g[a] > g[b] || (g[a] == g[b] && a < b); };
    std::size_t take = R;  // R ≤ E (m − 1) here
    if (take < ws.by_gain.size()) {
      std::nth_element(ws.by_gain.begin(), ws.by_gain.begin() + static_cast<std::ptrdiff_t>(take), ws.by_gain.end(),
                       first);
    }
    if (config.form == budget_form::at_most || saturated) {
      // Of the R largest, the positive ones (as the DP, which picks the least loss over
      // every budget up to R when the form is at_most or the budget saturates).
      std::size_t kept = 0;
      for (std::size_t i = 0; i < take; ++i) {
        if (g[ws.by_gain[i]] > 0.0) ws.by_gain[kept++] = ws.by_gain[i];
      }
      take = kept;
    }
    out.level_of.assign(E, 0);
    for (std::size_t i = 0; i < take; ++i) ++out.level_of[ws.by_gain[i] / steps];
    out.status = saturated ? allocation_status::saturated : allocation_status::ok;
    detail::finish_allocation(out, bits, loss, weights);
    return;
  }

  const std::size_t states = (R + 1) * P;
  if (E != 0 && states > exact_allocation_max_cells / E) {
    detail::throw_invalid(fn, "instance too large for the exact solver: experts x states", E * states);
  }

  constexpr double inf = std::numeric_limits<double>::infinity();
  constexpr std::uint8_t none = std::numeric_limits<std::uint8_t>::max();
  if (m >= none) detail::throw_invalid(fn, "at most 254 bitwidths are supported", m);
  if (P == 1) {
    // Every row of the DP is kept (E + 1 rows of R + 1 losses): the forward pass is a
    // branch-free minimum, and the backtrack re-derives each expert's level from them.
    ws.row.assign((E + 1) * states, inf);
    ws.row[0] = 0.0;
    const auto cmax = static_cast<std::size_t>(cost[m - 1]);
    for (std::size_t e = 0; e < E; ++e) {
      const double* const prev = ws.row.data() + e * states;
      double* const nx = ws.row.data() + (e + 1) * states;
      const double w = weights.empty() ? 1.0 : weights[e];
      const std::size_t hi = std::min(R, (e + 1) * cmax);  // budgets reachable after e + 1 experts
      for (std::size_t j = m; j-- > 0;) {
        const auto c = static_cast<std::size_t>(cost[j]);
        if (c > hi) continue;
        const double wl = w * loss(static_cast<Eigen::Index>(e), static_cast<Eigen::Index>(j));
        const double* const src = prev - c;
        for (std::size_t r = c; r <= hi; ++r) {
          const double v = src[r] + wl;
          nx[r] = v < nx[r] ? v : nx[r];
        }
      }
    }
    const double* const last = ws.row.data() + E * states;
    std::size_t best_r = R + 1;
    if (config.form == budget_form::exact && !saturated) {
      if (last[R] < inf) best_r = R;
    } else {
      double best = inf;
      for (std::size_t r = 0; r <= R; ++r) {
        if (last[r] < best) {
          best = last[r];
          best_r = r;
        }
      }
    }
    if (best_r > R) return;  // infeasible
    out.level_of.assign(E, 0);
    // A state's candidates in ascending predecessor budget, i.e. descending level, the
    // first of least loss kept: the order in which the push DP of the first
    // implementation met them, so each expert gets the level it recorded.
    std::size_t r = best_r;
    for (std::size_t e = E; e-- > 0;) {
      const double* const prev = ws.row.data() + e * states;
      const double w = weights.empty() ? 1.0 : weights[e];
      double least = inf;
      std::size_t level = m;
      for (std::size_t j = m; j-- > 0;) {
        const auto c = static_cast<std::size_t>(cost[j]);
        if (c > r) continue;
        const double v = prev[r - c] + w * loss(static_cast<Eigen::Index>(e), static_cast<Eigen::Index>(j));
        if (v < least) {
          least = v;
          level = j;
        }
      }
      MOEPOLICY_ASSERT(level < m);
      out.level_of[e] = static_cast<std::uint32_t>(level);
      r -= static_cast<std::size_t>(cost[level]);
    }
    out.status = saturated ? allocation_status::saturated : allocation_status::ok;
    detail::finish_allocation(out, bits, loss, weights);
    return;
  } else {
    // Per expert and state: the level chosen and the count code it came from (capping
    // makes the count code of the predecessor ambiguous, so it is stored).
    ws.cur.assign(states, inf);
    ws.next.resize(states);
    ws.choice.resize(E * states);
    ws.cur[0] = 0.0;
    ws.from_code.resize(E * states);
    std::uint8_t* const choice = ws.choice.data();
    std::uint32_t* const from_code = ws.from_code.data();
    for (std::size_t e = 0; e < E; ++e) {
      std::fill(ws.next.begin(), ws.next.end(), inf);
      std::fill(choice + e * states, choice + (e + 1) * states, none);
      const double* const cur = ws.cur.data();
      double* const nx = ws.next.data();
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
            if (v < nx[s2]) {
              nx[s2] = v;
              choice[e * states + s2] = static_cast<std::uint8_t>(j);
              from_code[e * states + s2] = static_cast<std::uint32_t>(q);
            }
          }
        }
      }
      ws.cur.swap(ws.next);
    }
  }

  const std::vector<double>& cur = ws.cur;
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
  if (best_r > R) return;  // infeasible

  out.level_of.assign(E, 0);
  std::size_t r = best_r, q = full;
  for (std::size_t e = E; e-- > 0;) {
    const std::size_t cell = e * states + r * P + q;
    const std::uint8_t j = ws.choice[cell];
    MOEPOLICY_ASSERT(j != none);
    out.level_of[e] = j;
    r -= static_cast<std::size_t>(cost[j]);
    q = ws.from_code[cell];
  }
  out.status = saturated ? allocation_status::saturated : allocation_status::ok;
  detail::finish_allocation(out, bits, loss, weights);
}

/// Solves the bitwidth allocation problem exactly.
///
/// Preconditions: as `prefix_split`; `min_count` empty or one count per bitwidth.
/// Returns: an optimal allocation and its status; `infeasible` when no allocation meets
/// the budget form and the minimum counts.
/// Throws: `invalid_argument` naming `exact_allocation` for a violated precondition, or
/// when the DP table would exceed `exact_allocation_max_cells`.
/// Complexity: O(E · m) when the greedy is exact, else O(E · m · (R + 1) · P),
/// P = Π_j (min_count[j] + 1); allocates its workspace per call (the overload with a
/// workspace reuses it).
[[nodiscard]] inline bit_allocation exact_allocation(std::span<const bitwidth> bits,
                                                     const Eigen::Ref<const Eigen::MatrixXd>& loss, double average_bits,
                                                     const bit_allocation_config& config = {},
                                                     std::span<const double> weights = {},
                                                     std::span<const std::uint32_t> min_count = {},
                                                     exact_method method = exact_method::automatic) {
  exact_allocation_workspace ws;
  bit_allocation out;
  exact_allocation(bits, loss, average_bits, config, weights, min_count, method, ws, out);
  return out;
}

}  // namespace moepolicy
