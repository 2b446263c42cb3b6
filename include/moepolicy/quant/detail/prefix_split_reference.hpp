// moepolicy/quant/detail/prefix_split_reference.hpp — the first implementation of prefix
// split (Context-Aware GPU-NDP §4.2, Alg. 1 lines 19–22), kept unchanged as the reference
// that tests and bench/shapes_bench.cpp compare quant/prefix_split.hpp against: the same
// enumeration through a generic recursive lambda, a 64-bit division per tuple and a
// vector of vectors of prefix sums. See quant/prefix_split.hpp for the method.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/units.hpp"
#include "moepolicy/quant/bit_allocation.hpp"

namespace moepolicy::reference {

namespace detail {

/// Range maximum (first index of the maximum) over a fixed array, O(1) per query.
class range_argmax {
 public:
  explicit range_argmax(std::span<const double> v) : v_(v) {
    const std::size_t n = v.size();
    log_.assign(n + 1, 0);
    for (std::size_t i = 2; i <= n; ++i) log_[i] = log_[i / 2] + 1;
    const std::size_t levels = n == 0 ? 0 : log_[n] + 1;
    table_.assign(levels * n, 0);
    for (std::size_t i = 0; i < n; ++i) table_[i] = static_cast<std::uint32_t>(i);
    for (std::size_t k = 1; k < levels; ++k) {
      const std::size_t half = std::size_t{1} << (k - 1);
      for (std::size_t i = 0; i + (std::size_t{1} << k) <= n; ++i) {
        table_[k * n + i] = better(table_[(k - 1) * n + i], table_[(k - 1) * n + i + half]);
      }
    }
  }

  /// The first index of the largest value in [lo, hi].
  [[nodiscard]] std::uint32_t query(std::size_t lo, std::size_t hi) const noexcept {
    const std::size_t n = v_.size();
    const std::size_t k = log_[hi - lo + 1];
    return better(table_[k * n + lo], table_[k * n + hi + 1 - (std::size_t{1} << k)]);
  }

 private:
  [[nodiscard]] std::uint32_t better(std::uint32_t a, std::uint32_t b) const noexcept {
    if (v_[b] > v_[a]) return b;
    if (v_[a] > v_[b]) return a;
    return std::min(a, b);
  }

  std::span<const double> v_;
  std::vector<std::size_t> log_;
  std::vector<std::uint32_t> table_;
};

}  // namespace detail

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
/// O(m E + E log E) memory.
[[nodiscard]] inline bit_allocation prefix_split(std::span<const bitwidth> bits,
                                                 const Eigen::Ref<const Eigen::MatrixXd>& loss, double average_bits,
                                                 const bit_allocation_config& config = {},
                                                 std::span<const double> weights = {}) {
  moepolicy::detail::check_allocation_problem("prefix_split", bits, loss, weights, average_bits);
  const std::size_t E = static_cast<std::size_t>(loss.rows());
  const std::size_t m = bits.size();
  bit_allocation out;
  out.budget_increments = moepolicy::detail::budget_increments(E, average_bits, bits.front(), config.rounding);
  const std::int64_t R = out.budget_increments;

  std::vector<std::int64_t> cost(m);
  for (std::size_t j = 0; j < m; ++j) cost[j] = bits[j].bits() - bits[0].bits();
  const std::int64_t all_highest = static_cast<std::int64_t>(E) * cost[m - 1];
  const bool saturated = R > all_highest;

  if (m == 1 || E == 0 || (saturated && config.form == budget_form::exact)) {
    out.status = saturated ? allocation_status::saturated : allocation_status::ok;
    out.level_of.assign(E, static_cast<std::uint32_t>(m - 1));
    moepolicy::detail::finish_allocation(out, bits, loss, weights);
    return out;
  }

  // C[j][k] = Σ_{i<k} w_i (L_i(b_0) − L_i(b_j)), j ≥ 1.
  std::vector<std::vector<double>> C(m, std::vector<double>(E + 1, 0.0));
  for (std::size_t j = 1; j < m; ++j) {
    for (std::size_t i = 0; i < E; ++i) {
      const double w = weights.empty() ? 1.0 : weights[i];
      const auto row = static_cast<Eigen::Index>(i);
      C[j][i + 1] = C[j][i] + w * (loss(row, 0) - loss(row, static_cast<Eigen::Index>(j)));
    }
  }
  const detail::range_argmax c1_max(C[1]);

  std::vector<std::uint32_t> counts(m, 0), best_counts;
  double best_gain = 0.0;
  bool found = false;

  // Level 1 closes a tuple: derived from the budget left.
  const auto close = [&](std::size_t start, std::int64_t left, double gain) {
    const std::size_t room = E - start;
    std::size_t n1 = 0;
    if (config.form == budget_form::exact) {
      if (left % cost[1] != 0) return;
      const auto need = static_cast<std::size_t>(left / cost[1]);
      if (need > room) return;
      n1 = need;
    } else {
      const auto most = std::min<std::size_t>(room, static_cast<std::size_t>(left / cost[1]));
      n1 = c1_max.query(start, start + most) - start;
    }
    const double g = gain + C[1][start + n1] - C[1][start];
    if (!found || g > best_gain) {
      found = true;
      best_gain = g;
      counts[1] = static_cast<std::uint32_t>(n1);
      best_counts = counts;
    }
  };
  // Levels m−1 … 2 are enumerated, highest first, each from 0 up to what fits.
  const auto enumerate = [&](auto&& self, std::size_t j, std::size_t start, std::int64_t left, double gain) -> void {
    if (j == 1) {
      close(start, left, gain);
      return;
    }
    for (std::size_t n = 0; start + n <= E && static_cast<std::int64_t>(n) * cost[j] <= left; ++n) {
      counts[j] = static_cast<std::uint32_t>(n);
      self(self, j - 1, start + n, left - static_cast<std::int64_t>(n) * cost[j], gain + C[j][start + n] - C[j][start]);
    }
    counts[j] = 0;
  };
  enumerate(enumerate, m - 1, 0, R, 0.0);

  if (!found) {
    out.status = allocation_status::infeasible;
    return out;
  }
  out.status = saturated ? allocation_status::saturated : allocation_status::ok;
  out.level_of.reserve(E);
  for (std::size_t j = m; j-- > 1;)
    out.level_of.insert(out.level_of.end(), best_counts[j], static_cast<std::uint32_t>(j));
  out.level_of.resize(E, 0);
  moepolicy::detail::finish_allocation(out, bits, loss, weights);
  return out;
}

}  // namespace moepolicy::reference
