// moepolicy/stats/analysis.hpp — analyses of routing statistics.
//
//   cosine_similarity           of two activation distributions (Context-Aware GPU-NDP §3.2 compares a
//                               request's prefill and decode distributions per layer and
//                               reports 0.89 averaged over layers for Mixtral-8x7B);
//   layer_cosine_similarity     that, row by row, for two layers × experts matrices;
//   summarize_defined           mean, minimum and maximum of those per-layer values,
//                               skipping the NaN of layers one phase never reached;
//   classify_by_share           hot / warm / cold experts by their share of tokens (TriMoE
//                               §3: a long cold tail holds few tokens, warm experts many).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"

namespace moepolicy {

/// a·b / (|a| |b|); 0 when either vector is all zeros.
///
/// Preconditions: equal sizes.
[[nodiscard]] inline double cosine_similarity(std::span<const double> a, std::span<const double> b) noexcept {
  MOEPOLICY_ASSERT(a.size() == b.size());
  double dot = 0.0, na = 0.0, nb = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    na += a[i] * a[i];
    nb += b[i] * b[i];
  }
  if (na == 0.0 || nb == 0.0) return 0.0;
  return dot / (std::sqrt(na) * std::sqrt(nb));
}

/// The cosine similarity of each row of `a` with the same row of `b`; a row that is all
/// zeros in either gives NaN, so that callers average only the layers both phases reached.
///
/// Throws: `invalid_argument` when the shapes differ.
[[nodiscard]] inline std::vector<double> layer_cosine_similarity(const Eigen::Ref<const Eigen::MatrixXd>& a,
                                                                 const Eigen::Ref<const Eigen::MatrixXd>& b) {
  if (a.rows() != b.rows() || a.cols() != b.cols()) {
    detail::throw_invalid("layer_cosine_similarity", "the two matrices must have the same shape, rows " +
                                                         std::to_string(a.rows()) + " vs",
                          b.rows());
  }
  std::vector<double> out(static_cast<std::size_t>(a.rows()));
  for (Eigen::Index l = 0; l < a.rows(); ++l) {
    const double na = a.row(l).norm(), nb = b.row(l).norm();
    out[static_cast<std::size_t>(l)] =
        (na == 0.0 || nb == 0.0) ? std::nan("") : a.row(l).dot(b.row(l)) / (na * nb);
  }
  return out;
}

/// Mean, minimum and maximum of the values of a series that are not NaN.
struct defined_summary {
  /// Values that are not NaN.
  std::size_t count = 0;
  /// NaN when `count` is 0.
  double mean = std::nan("");
  double min = std::nan("");
  double max = std::nan("");
};

/// Summarises `values`, skipping NaN (as `layer_cosine_similarity` gives for a layer one
/// phase never reached).
///
/// Complexity: O(n); no allocation.
[[nodiscard]] inline defined_summary summarize_defined(std::span<const double> values) noexcept {
  defined_summary s;
  double sum = 0.0;
  for (double v : values) {
    if (std::isnan(v)) continue;
    sum += v;
    s.min = s.count == 0 ? v : std::min(s.min, v);
    s.max = s.count == 0 ? v : std::max(s.max, v);
    ++s.count;
  }
  if (s.count > 0) s.mean = sum / static_cast<double>(s.count);
  return s;
}

/// Hotness classes.
enum class hotness : std::uint8_t { cold = 0, warm = 1, hot = 2 };

/// Thresholds of `classify_by_share`, as cumulative shares of tokens.
struct share_classes_config {
  /// Experts, taken most-loaded first, are hot while the share of tokens before them is
  /// below this (so the hot set is the smallest head holding at least this share).
  double hot_share = 0.5;
  /// The least-loaded experts whose loads together stay within this share are cold.
  double cold_share = 0.1;
};

namespace detail {

/// The share rule of `classify_by_share` on loads already ordered most-loaded first (ties
/// by lower index); `Index` is the caller's index type. No allocation.
template <class Index>
void classify_sorted(std::span<const double> loads, std::span<hotness> out, std::span<const Index> order,
                     const share_classes_config& config) noexcept {
  double total = 0.0;
  for (double v : loads) total += v;
  if (total == 0.0) {
    std::fill(out.begin(), out.end(), hotness::cold);
    return;
  }
  std::fill(out.begin(), out.end(), hotness::warm);
  double before = 0.0;
  for (Index i : order) {
    if (before >= config.hot_share * total) break;
    out[i] = hotness::hot;
    before += loads[i];
  }
  double tail = 0.0;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    if (out[*it] == hotness::hot) break;
    if (tail + loads[*it] > config.cold_share * total) break;
    tail += loads[*it];
    out[*it] = hotness::cold;
  }
}

}  // namespace detail

/// Classifies experts by their share of `loads`: the smallest most-loaded head that holds
/// at least `hot_share` of the tokens is hot, the largest least-loaded tail that holds at
/// most `cold_share` is cold, the rest warm. Ties in load order by lower index first.
/// All-zero loads: every expert is cold.
///
/// Throws: `invalid_argument` unless 0 <= cold_share, 0 < hot_share, and
/// hot_share + cold_share <= 1; or when a load is negative or not finite.
/// Complexity: O(E log E); writes `out` (one entry per load), allocates an index buffer.
inline void classify_by_share(std::span<const double> loads, std::span<hotness> out,
                              const share_classes_config& config = {}) {
  constexpr const char* fn = "classify_by_share";
  if (!(config.cold_share >= 0.0) || !(config.hot_share > 0.0) || config.hot_share + config.cold_share > 1.0 + 1e-12) {
    detail::throw_invalid(fn, "need 0 < hot_share, 0 <= cold_share and hot_share + cold_share <= 1, hot_share",
                          config.hot_share);
  }
  if (out.size() != loads.size()) detail::throw_invalid(fn, "out must have one entry per load, size", out.size());
  for (double v : loads) {
    if (!(v >= 0.0) || !std::isfinite(v)) detail::throw_invalid(fn, "loads must be finite and >= 0", v);
  }
  std::vector<std::size_t> order(loads.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return loads[a] > loads[b]; });
  detail::classify_sorted(loads, out, std::span<const std::size_t>(order), config);
}

}  // namespace moepolicy
