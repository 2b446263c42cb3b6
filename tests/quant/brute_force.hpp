// Brute-force references for the bit-allocation tests: every assignment, and every
// prefix-structured assignment, of small instances.
#pragma once

#include <Eigen/Core>

#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <vector>

#include "moepolicy/core/units.hpp"
#include "moepolicy/quant/bit_allocation.hpp"

namespace moepolicy::test {

struct brute_result {
  bool found = false;
  double loss = std::numeric_limits<double>::infinity();
};

inline bool meets(std::int64_t used, std::int64_t R, budget_form form) {
  return form == budget_form::exact ? used == R : used <= R;
}

inline double weighted_loss(const Eigen::MatrixXd& L, std::span<const double> w, const std::vector<std::uint32_t>& lv) {
  double s = 0.0;
  for (std::size_t e = 0; e < lv.size(); ++e) {
    s += (w.empty() ? 1.0 : w[e]) * L(static_cast<Eigen::Index>(e), static_cast<Eigen::Index>(lv[e]));
  }
  return s;
}

inline std::int64_t used(std::span<const bitwidth> bits, const std::vector<std::uint32_t>& lv) {
  std::int64_t u = 0;
  for (auto j : lv) u += bits[j].bits() - bits[0].bits();
  return u;
}

/// Best over all m^E assignments.
inline brute_result brute_all(std::span<const bitwidth> bits, const Eigen::MatrixXd& L, std::int64_t R,
                              budget_form form, std::span<const double> w = {},
                              std::span<const std::uint32_t> min_count = {}) {
  const std::size_t E = static_cast<std::size_t>(L.rows()), m = bits.size();
  std::vector<std::uint32_t> lv(E, 0);
  brute_result best;
  std::function<void(std::size_t)> rec = [&](std::size_t e) {
    if (e == E) {
      if (!meets(used(bits, lv), R, form)) return;
      if (!min_count.empty()) {
        std::vector<std::uint32_t> c(m, 0);
        for (auto j : lv) ++c[j];
        for (std::size_t j = 0; j < m; ++j) {
          if (c[j] < min_count[j]) return;
        }
      }
      const double l = weighted_loss(L, w, lv);
      if (l < best.loss) best = {true, l};
      return;
    }
    for (std::uint32_t j = 0; j < m; ++j) {
      lv[e] = j;
      rec(e + 1);
    }
  };
  rec(0);
  return best;
}

/// Best over all prefix-structured assignments (levels non-increasing along the rows).
inline brute_result brute_prefix(std::span<const bitwidth> bits, const Eigen::MatrixXd& L, std::int64_t R,
                                 budget_form form, std::span<const double> w = {}) {
  const std::size_t E = static_cast<std::size_t>(L.rows()), m = bits.size();
  std::vector<std::uint32_t> lv(E, 0);
  brute_result best;
  std::function<void(std::size_t, std::uint32_t)> rec = [&](std::size_t e, std::uint32_t top) {
    if (e == E) {
      if (!meets(used(bits, lv), R, form)) return;
      const double l = weighted_loss(L, w, lv);
      if (l < best.loss) best = {true, l};
      return;
    }
    for (std::uint32_t j = 0; j <= top; ++j) {
      lv[e] = j;
      rec(e + 1, j);
    }
  };
  rec(0, static_cast<std::uint32_t>(m - 1));
  return best;
}

}  // namespace moepolicy::test
