// moepolicy/quant/prefix_split.hpp — prefix-split bitwidth allocation (Context-Aware GPU-NDP §4.2,
// "Context-Aware Mixture-of-Experts Inference on CXL-Enabled GPU-NDP Systems",
// Alg. 1 lines 19–22).
//
// Experts come in descending importance. A prefix-structured allocation gives the n_{m-1}
// most important experts the highest bitwidth, the next n_{m-2} the next one, and so on
// down to b_0 for the rest, so it is fully determined by the counts. With gains
// Δ_i(j) = w_i (L_i(b_0) − L_i(b_j)) and prefix sums C_j(k) = Σ_{i<k} Δ_i(j), the gain of
// counts (n_{m-1}, …, n_1) is
//   G = Σ_{j≥1} [ C_j(s_j + n_j) − C_j(s_j) ],   s_j = n_{m-1} + … + n_{j+1},
// evaluated in O(1) per tuple. The counts of levels m−1 … 2 are enumerated (for the
// paper's {1, 2, 3, 4}: n₄ with 3n₄ ≤ R, then n₃ with 3n₄ + 2n₃ ≤ R — O(E²)), and n₁ is
// derived: from the equality 3n₄ + 2n₃ + n₂ = R in the paper's `budget_form::exact`, or,
// in `budget_form::at_most`, as the best n₁ within the remaining budget, found in O(1) by a
// range-maximum table over C_1. The tuple of largest gain wins.
//
// Generalisations and readings, documented because the paper fixes {1, 2, 3, 4}:
//   - any ascending bit set; increments c_j = b_j − b_0 (so {2, 3, 4, 8} costs 0, 1, 2, 6);
//     with m levels the enumeration costs O(E^{max(m−2, 0)});
//   - fractional budgets: R = E (b̄ − b_0) rounded down by default (the realised average
//     never exceeds b̄), or to nearest (`budget_rounding`);
//   - `weights` (default all 1, the paper's objective Σ L_i(b_i)) scale each expert's loss,
//     so that importance can enter the objective as well as the ordering;
//   - R = 0: every expert at b_0. R above the all-highest budget E·c_{m−1}: status
//     `saturated`; with `budget_form::exact` every expert gets the highest bitwidth;
//   - `budget_form::exact` with no tuple meeting R exactly (possible when c_1 > 1 or E is
//     small): status `infeasible`;
//   - ties in gain keep the first tuple in enumeration order (n_{m−1} ascending, then
//     n_{m−2} ascending, …; in `at_most` the smallest n₁ of the best gain).
//
// Implementation: the prefix sums live in one flat array per call's workspace
// (`prefix_split_workspace`, reusable: no allocation once it has seen the largest E), the
// levels above 2 are enumerated by recursion and level 2 by a flat loop whose bounds are
// computed once per call (so a tuple costs no division when c_1 = 1, the paper's case) and
// whose body is three loads and four additions. Every tuple's gain is summed in the same
// order as the first implementation (quant/detail/prefix_split_reference.hpp), so the
// optimum and its tie-break are identical.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/units.hpp"
#include "moepolicy/quant/bit_allocation.hpp"

namespace moepolicy {

namespace detail {

/// Range maximum (first index of the maximum) over a fixed array, O(1) per query, its
/// tables in caller-owned vectors (reused across calls).
class range_argmax {
 public:
  range_argmax(std::span<const double> v, std::vector<std::uint32_t>& log, std::vector<std::uint32_t>& table)
      : v_(v.data()), n_(v.size()), log_(log.data()), table_(table.data()) {
    const std::size_t n = v.size();
    log.assign(n + 1, 0);
    for (std::size_t i = 2; i <= n; ++i) log[i] = log[i / 2] + 1;
    const std::size_t levels = n == 0 ? 0 : log[n] + 1;
    table.resize(levels * n);
    for (std::size_t i = 0; i < n; ++i) table[i] = static_cast<std::uint32_t>(i);
    for (std::size_t k = 1; k < levels; ++k) {
      const std::size_t half = std::size_t{1} << (k - 1);
      for (std::size_t i = 0; i + (std::size_t{1} << k) <= n; ++i) {
        table[k * n + i] = better(table[(k - 1) * n + i], table[(k - 1) * n + i + half]);
      }
    }
    log_ = log.data();
    table_ = table.data();
  }

  /// The first index of the largest value in [lo, hi].
  [[nodiscard]] std::uint32_t query(std::size_t lo, std::size_t hi) const noexcept {
    const std::size_t k = log_[hi - lo + 1];
    return better(table_[k * n_ + lo], table_[k * n_ + hi + 1 - (std::size_t{1} << k)]);
  }

 private:
  [[nodiscard]] std::uint32_t better(std::uint32_t a, std::uint32_t b) const noexcept {
    if (v_[b] > v_[a]) return b;
    if (v_[a] > v_[b]) return a;
    return std::min(a, b);
  }

  const double* v_;
  std::size_t n_;
  const std::uint32_t* log_;
  const std::uint32_t* table_;
};

}  // namespace detail

/// Scratch of `prefix_split`: after a call with E experts and m bitwidths, calls of at
/// most that size allocate nothing.
struct prefix_split_workspace {
  std::vector<double> prefix;  // m × (E + 1): C_j(k) at j · (E + 1) + k
  std::vector<std::int64_t> cost;
  std::vector<std::uint32_t> counts, best_counts, log, table;
};

/// Allocates bitwidths to one layer's experts by prefix split, into `out`, with scratch
/// in `ws`. Allocates nothing when `ws` and `out` have served a problem at least as large.
///
/// Preconditions, result and throws: as the returning overload below.
/// Complexity: O(E^{m−2} + E log E) time for m ≥ 3 bitwidths, O(E log E) for m ≤ 2
/// (the E log E is the range-maximum table of `budget_form::at_most`; `exact` needs O(mE)
/// besides the enumeration); O(m E + E log E) memory in `ws`.
inline void prefix_split(std::span<const bitwidth> bits, const Eigen::Ref<const Eigen::MatrixXd>& loss,
                         double average_bits, const bit_allocation_config& config, std::span<const double> weights,
                         prefix_split_workspace& ws, bit_allocation& out) {
  detail::check_allocation_problem("prefix_split", bits, loss, weights, average_bits);
  const std::size_t E = static_cast<std::size_t>(loss.rows());
  const std::size_t m = bits.size();
  out.status = allocation_status::infeasible;
  out.level_of.clear();
  out.count_per_level.clear();
  out.used_increments = 0;
  out.weighted_loss = 0.0;
  out.gain = 0.0;
  out.budget_increments = detail::budget_increments(E, average_bits, bits.front(), config.rounding);
  const std::int64_t R = out.budget_increments;

  std::vector<std::int64_t>& cost = ws.cost;
  cost.resize(m);
  for (std::size_t j = 0; j < m; ++j) cost[j] = bits[j].bits() - bits[0].bits();
  const std::int64_t all_highest = static_cast<std::int64_t>(E) * cost[m - 1];
  const bool saturated = R > all_highest;

  if (m == 1 || E == 0 || (saturated && config.form == budget_form::exact)) {
    out.status = saturated ? allocation_status::saturated : allocation_status::ok;
    out.level_of.assign(E, static_cast<std::uint32_t>(m - 1));
    detail::finish_allocation(out, bits, loss, weights);
    return;
  }

  // C_j(k) = Σ_{i<k} w_i (L_i(b_0) − L_i(b_j)), j ≥ 1, at C[j · (E + 1) + k].
  const std::size_t stride = E + 1;
  ws.prefix.resize(m * stride);
  double* const C = ws.prefix.data();
  for (std::size_t j = 1; j < m; ++j) {
    double* Cj = C + j * stride;
    Cj[0] = 0.0;
    for (std::size_t i = 0; i < E; ++i) {
      const double w = weights.empty() ? 1.0 : weights[i];
      const auto row = static_cast<Eigen::Index>(i);
      Cj[i + 1] = Cj[i] + w * (loss(row, 0) - loss(row, static_cast<Eigen::Index>(j)));
    }
  }
  const double* const C1 = C + stride;
  const bool exact = config.form == budget_form::exact;
  std::optional<detail::range_argmax> c1_max;
  if (!exact) c1_max.emplace(std::span<const double>(C1, stride), ws.log, ws.table);
  const std::int64_t c1 = cost[1];
  const auto Ei = static_cast<std::int64_t>(E);

  ws.counts.assign(m, 0);
  ws.best_counts.assign(m, 0);
  std::uint32_t* const counts = ws.counts.data();
  double best_gain = 0.0;
  bool found = false;
  const auto record = [&](double g, std::size_t n1) {
    if (!found || g > best_gain) {
      found = true;
      best_gain = g;
      counts[1] = static_cast<std::uint32_t>(n1);
      std::copy(ws.counts.begin(), ws.counts.end(), ws.best_counts.begin());
    }
  };
  // Level 1 closes a tuple: derived from the budget left.
  const auto close = [&](std::int64_t start, std::int64_t left, double gain) {
    const std::int64_t room = Ei - start;
    std::int64_t n1 = 0;
    if (exact) {
      const std::int64_t need = c1 == 1 ? left : (left % c1 != 0 ? -1 : left / c1);
      if (need < 0 || need > room) return;
      n1 = need;
    } else {
      const std::int64_t most = std::min(room, c1 == 1 ? left : left / c1);
      n1 = static_cast<std::int64_t>(
               c1_max->query(static_cast<std::size_t>(start), static_cast<std::size_t>(start + most))) -
           start;
    }
    record(gain + C1[start + n1] - C1[start], static_cast<std::size_t>(n1));
  };
  // Level 2, the innermost enumerated one, with level 1 closing each tuple: a flat loop.
  const double* const C2 = m >= 3 ? C + 2 * stride : nullptr;
  const auto level2 = [&](std::int64_t start0, std::int64_t left0, double gain0) {
    const std::int64_t c2 = cost[2];
    const std::int64_t hi = std::min(Ei - start0, left0 / c2);  // n₂ with start + n₂ ≤ E and n₂ c₂ ≤ left
    if (exact && c1 == 1) {
      // n₁ = left0 − n₂ c₂ must fit the room E − start0 − n₂: n₂ (c₂ − 1) ≥ left0 − (E − start0).
      const std::int64_t deficit = left0 - (Ei - start0);
      const std::int64_t lo = deficit <= 0 ? 0 : (deficit + c2 - 2) / (c2 - 1);
      double local = -std::numeric_limits<double>::infinity();
      std::int64_t arg = -1;
      const double* c2p = C2 + start0;
      const double c2s = C2[start0];
      for (std::int64_t n = lo; n <= hi; ++n) {
        const std::int64_t s = start0 + n;
        const std::int64_t n1 = left0 - n * c2;
        const double g = ((gain0 + c2p[n]) - c2s) + C1[s + n1] - C1[s];
        if (g > local) {
          local = g;
          arg = n;
        }
      }
      if (arg >= 0 && (!found || local > best_gain)) {
        counts[2] = static_cast<std::uint32_t>(arg);
        record(local, static_cast<std::size_t>(left0 - arg * c2));
      }
    } else {
      for (std::int64_t n = 0; n <= hi; ++n) {
        counts[2] = static_cast<std::uint32_t>(n);
        close(start0 + n, left0 - n * c2, gain0 + C2[start0 + n] - C2[start0]);
      }
    }
    counts[2] = 0;
  };
  // Levels m−1 … 3 are enumerated by recursion, highest first, each from 0 up to what fits.
  const auto enumerate = [&](auto&& self, std::size_t j, std::int64_t start, std::int64_t left, double gain) -> void {
    if (j == 2) {
      level2(start, left, gain);
      return;
    }
    const double* Cj = C + j * stride;
    for (std::int64_t n = 0; start + n <= Ei && n * cost[j] <= left; ++n) {
      counts[j] = static_cast<std::uint32_t>(n);
      self(self, j - 1, start + n, left - n * cost[j], gain + Cj[start + n] - Cj[start]);
    }
    counts[j] = 0;
  };
  if (m == 2) {
    close(0, R, 0.0);
  } else {
    enumerate(enumerate, m - 1, 0, R, 0.0);
  }

  if (!found) {
    out.status = allocation_status::infeasible;
    return;
  }
  out.status = saturated ? allocation_status::saturated : allocation_status::ok;
  for (std::size_t j = m; j-- > 1;)
    out.level_of.insert(out.level_of.end(), ws.best_counts[j], static_cast<std::uint32_t>(j));
  out.level_of.resize(E, 0);
  detail::finish_allocation(out, bits, loss, weights);
}

/// Allocates bitwidths to one layer's experts by prefix split.
///
/// `loss(i, j)` is L_i(b_j) for the i-th most important expert (rows in descending
/// importance) and the j-th bitwidth of `bits`.
///
/// Preconditions: `bits` strictly ascending; `loss` has one column per bitwidth and finite
/// entries; `weights` empty or one finite non-negative weight per expert;
/// `average_bits` in [`bits.front()`, 32]: above the highest bitwidth of `bits` every
/// expert is at it (`saturated`).
/// Returns: the allocation of largest gain among prefix-structured ones, with its status.
/// Throws: `invalid_argument` naming `prefix_split` and the violated precondition.
/// Complexity: O(E^{m−2} + E log E) time for m ≥ 3 bitwidths, O(E log E) for m ≤ 2;
/// O(m E + E log E) memory, allocated per call (the overload with a workspace reuses it).
[[nodiscard]] inline bit_allocation prefix_split(std::span<const bitwidth> bits,
                                                 const Eigen::Ref<const Eigen::MatrixXd>& loss, double average_bits,
                                                 const bit_allocation_config& config = {},
                                                 std::span<const double> weights = {}) {
  prefix_split_workspace ws;
  bit_allocation out;
  prefix_split(bits, loss, average_bits, config, weights, ws, out);
  return out;
}

}  // namespace moepolicy
