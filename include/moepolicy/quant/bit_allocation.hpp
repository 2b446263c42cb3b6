// moepolicy/quant/bit_allocation.hpp — the per-layer bitwidth allocation problem and
// its result, shared by the prefix-split heuristic (quant/prefix_split.hpp) and the
// exact solver (quant/exact_allocation.hpp).
//
// A layer has E experts to quantise, each to one bitwidth of an ascending set
// b_0 < b_1 < … < b_{m-1}, with a measured loss L_e(b_j) and an importance weight w_e.
// Raising an expert from b_0 to b_j costs c_j = b_j − b_0 *increments*; the budget is
// R = E · (b̄ − b_0) increments for a target average bitwidth b̄ (Context-Aware GPU-NDP §4.2, which
// uses {1, 2, 3, 4}, so c_j = j and R = E_NDP (b̄ − 1)). The objective is the weighted
// loss Σ_e w_e L_e(b_e); the budget holds with equality (the paper's 3n₄ + 2n₃ + n₂ = R)
// or as an upper bound.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

/// Whether the increments spent must equal the budget R or may stay below it.
enum class budget_form : std::uint8_t {
  /// Σ c(b_e) = R, as Context-Aware GPU-NDP §4.2 writes the constraint (3n₄ + 2n₃ + n₂ = R).
  exact,
  /// Σ c(b_e) ≤ R: never worse, and the only form with an answer for some budgets.
  at_most,
};

/// How a fractional budget E · (b̄ − b_0) becomes a whole number of increments.
enum class budget_rounding : std::uint8_t {
  /// Round down, so the realised average never exceeds b̄ (the default).
  down,
  /// Round to the nearest whole increment (halves up).
  nearest,
};

/// What became of an allocation.
enum class allocation_status : std::uint8_t {
  /// An allocation that meets the budget in the requested form.
  ok,
  /// The budget reaches or exceeds every expert at the highest bitwidth: all are there,
  /// and `used_increments < budget_increments` if it exceeds it.
  saturated,
  /// No allocation meets the budget with equality (`budget_form::exact` only); the
  /// result holds no levels.
  infeasible,
};

/// The configuration both solvers share.
struct bit_allocation_config {
  budget_form form = budget_form::exact;
  budget_rounding rounding = budget_rounding::down;
};

/// An allocation of one layer's experts.
struct bit_allocation {
  allocation_status status = allocation_status::infeasible;
  /// Per expert, in the caller's order: an index into the bitwidth set.
  std::vector<std::uint32_t> level_of;
  /// Experts per level (ascending bitwidth).
  std::vector<std::uint32_t> count_per_level;
  /// R, the budget in increments after rounding.
  std::int64_t budget_increments = 0;
  /// Increments the allocation spends.
  std::int64_t used_increments = 0;
  /// Σ w_e L_e(b_e).
  double weighted_loss = 0.0;
  /// Σ w_e (L_e(b_0) − L_e(b_e)): the gain over every expert at the lowest bitwidth.
  double gain = 0.0;
};

namespace detail {

/// Validates a bit-allocation problem; `fn` names the caller in messages.
inline void check_allocation_problem(std::string_view fn, std::span<const bitwidth> bits,
                                     const Eigen::Ref<const Eigen::MatrixXd>& loss,
                                     std::span<const double> weights, double average_bits) {
  if (bits.empty()) throw_invalid(fn, "the bitwidth set is empty");
  for (std::size_t j = 1; j < bits.size(); ++j) {
    if (!(bits[j - 1] < bits[j])) {
      throw_invalid(fn, "bitwidths must be strictly ascending, at position " + std::to_string(j), bits[j].bits());
    }
  }
  if (static_cast<std::size_t>(loss.cols()) != bits.size()) {
    throw_invalid(fn, "the loss table must have one column per bitwidth (" + std::to_string(bits.size()) + "), columns",
                  loss.cols());
  }
  for (Eigen::Index e = 0; e < loss.rows(); ++e) {
    for (Eigen::Index j = 0; j < loss.cols(); ++j) {
      if (!std::isfinite(loss(e, j))) {
        throw_invalid(fn, "loss of expert " + std::to_string(e) + " at " +
                              std::to_string(bits[static_cast<std::size_t>(j)].bits()) + " bits must be finite",
                      loss(e, j));
      }
    }
  }
  if (!weights.empty() && weights.size() != static_cast<std::size_t>(loss.rows())) {
    throw_invalid(fn, "weights must be empty or one per expert (" + std::to_string(loss.rows()) + "), size",
                  weights.size());
  }
  for (std::size_t e = 0; e < weights.size(); ++e) {
    if (!std::isfinite(weights[e]) || weights[e] < 0.0) {
      throw_invalid(fn, "weight of expert " + std::to_string(e) + " must be finite and >= 0", weights[e]);
    }
  }
  // Above the largest bitwidth there is can only mean "every expert at the highest"; the
  // bound also keeps the budget E (b̄ − b_0) a whole number of increments an int64 holds.
  if (!(average_bits >= static_cast<double>(bits.front().bits()) &&
        average_bits <= static_cast<double>(bitwidth::max_bits))) {
    throw_invalid(fn, "average_bits must be in [" + std::to_string(bits.front().bits()) + ", " +
                          std::to_string(bitwidth::max_bits) + "] (the lowest bitwidth to the largest there is)",
                  average_bits);
  }
}

/// R = E (b̄ − b_0) in whole increments. A tolerance of 1e-9 absorbs binary rounding of
/// b̄ (4 × (2.3 − 1) is 5.2 exactly, not 5.1999…).
///
/// Preconditions: b̄ in [b_0, 32] (`check_allocation_problem`) and E < 2^57, so that R
/// fits an int64.
inline std::int64_t budget_increments(std::size_t experts, double average_bits, bitwidth lowest,
                                       budget_rounding rounding) noexcept {
  const double r = static_cast<double>(experts) * (average_bits - static_cast<double>(lowest.bits()));
  return static_cast<std::int64_t>(rounding == budget_rounding::down ? std::floor(r + 1e-9) : std::floor(r + 0.5));
}

/// Fills the derived fields of `a` from `level_of`.
inline void finish_allocation(bit_allocation& a, std::span<const bitwidth> bits,
                              const Eigen::Ref<const Eigen::MatrixXd>& loss, std::span<const double> weights) {
  a.count_per_level.assign(bits.size(), 0);
  a.used_increments = 0;
  a.weighted_loss = 0.0;
  a.gain = 0.0;
  for (std::size_t e = 0; e < a.level_of.size(); ++e) {
    const auto j = a.level_of[e];
    const double w = weights.empty() ? 1.0 : weights[e];
    ++a.count_per_level[j];
    a.used_increments += bits[j].bits() - bits.front().bits();
    const auto row = static_cast<Eigen::Index>(e);
    a.weighted_loss += w * loss(row, static_cast<Eigen::Index>(j));
    a.gain += w * (loss(row, 0) - loss(row, static_cast<Eigen::Index>(j)));
  }
}

}  // namespace detail
}  // namespace moepolicy
