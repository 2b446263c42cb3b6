// moepolicy/predict/ema_load_predictor.hpp — TriMoE's expert load predictor: an
// exponential moving average of each expert's per-step load and the hot / warm / cold
// class it predicts (TriMoE, "TriMoE: Augmenting GPU with AMX-Enabled CPU and DIMM-NDP
// for High-Throughput MoE Inference via Offloading", §4.3, Eq. 8).
//
//   EMA_e(t) = α · F_e(t) + (1 − α) · EMA_e(t − 1),   α = 0.3 (the paper's value)
//
// where F_e(t) is expert e's load (tokens routed to it) at decode step t, per layer. The
// EMA after step t is the prediction for step t + 1. The paper does not state EMA(0):
// with `warm_start` (the default) the first observed step sets the EMA to its loads, so
// early predictions are not biased toward 0; without it, EMA(0) = 0 and Eq. 8 applies
// from the first step. (Classes are scale-invariant, so only predicted loads differ.)
//
// Classes: the share rule of stats/analysis.hpp's `classify_by_share` (the smallest
// most-loaded head holding `hot_share` of the predicted tokens is hot, the largest
// least-loaded tail within `cold_share` is cold, the rest warm; TriMoE §3 describes
// the classes by token share). The predictor applies the same rule to the EMA without
// allocating (`detail::classify_by_share_into`, tested equal to `classify_by_share`), and
// recomputes a layer's classes at each update — re-sorting the layer's order of the last
// step, which an EMA leaves nearly sorted (O(E) in the common case).
//
// `hotness_confusion` counts predicted against actual classes: accuracy, per-class
// precision and recall. tests/predict/ema/accuracy.cpp measures the predictor on the
// Mixtral-8x7B decode trace against a last-value baseline and the oracle (the next step's
// true loads): batched to 16 concurrent sequences, 50.7 % of next-step classes and 72.6 %
// of migration decisions (prefetch = hot, localize = cold) right, against 47.8 % and
// 70.6 % for last value; 78.6 % of decisions at 64 sequences (the paper reports >78 %).
//
// Per-step calls allocate nothing; the EMA table is layers × experts doubles (8 B each:
// 2 KiB for Mixtral-8x7B, 60 KiB for DeepSeek-V3's 58 × 256 — the paper reports 38 KB of
// predictor metadata).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace moepolicy {

namespace detail {

/// Orders `order` (a permutation of the loads' indices) by load, largest first, lower
/// index among equals — a strict total order, so the result is unique. `order` is usually
/// the order of the previous step, nearly sorted because EMAs move slowly: insertion sort
/// finishes in O(E + inversions); past 8·E shifts it falls back to std::sort.
inline void sort_by_load(std::span<const double> loads, std::span<std::uint32_t> order) noexcept {
  const auto before = [&](std::uint32_t a, std::uint32_t b) {
    return loads[a] > loads[b] || (loads[a] == loads[b] && a < b);
  };
  std::size_t budget = 8 * order.size();
  for (std::size_t i = 1; i < order.size(); ++i) {
    const std::uint32_t x = order[i];
    std::size_t j = i;
    while (j > 0 && before(x, order[j - 1])) {
      order[j] = order[j - 1];
      --j;
      if (--budget == 0) {
        order[j] = x;
        std::sort(order.begin(), order.end(), before);
        return;
      }
    }
    order[j] = x;
  }
}

/// `classify_by_share` into `out`, with `order` (one entry per load) as its sort buffer:
/// the same rule and tie order (more load first, then lower index), no allocation.
///
/// Preconditions: `config` as `classify_by_share` requires; loads finite and >= 0; equal
/// sizes.
inline void classify_by_share_into(std::span<const double> loads, std::span<hotness> out,
                                   std::span<std::uint32_t> order, const share_classes_config& config) noexcept {
  MOEPOLICY_ASSERT(out.size() == loads.size() && order.size() == loads.size());
  std::iota(order.begin(), order.end(), std::uint32_t{0});
  std::sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) {
    return loads[a] > loads[b] || (loads[a] == loads[b] && a < b);
  });
  classify_sorted<std::uint32_t>(loads, out, order, config);
}

}  // namespace detail

/// Configuration of `ema_load_predictor`.
struct ema_load_predictor_config {
  /// α of Eq. 8, in (0, 1]; 1 predicts the last step's loads (the last-value baseline).
  double alpha = 0.3;
  /// The class thresholds (stats/analysis.hpp).
  share_classes_config classes{};
  /// Whether a layer's first update sets the EMA to its loads (else EMA(0) = 0).
  bool warm_start = true;
};

/// Per (layer, expert) EMA of decode-step loads and the predicted hotness classes.
class ema_load_predictor {
 public:
  /// Throws: `invalid_argument` when a dimension is 0 or above 65536, `alpha` is not in
  /// (0, 1], or the class thresholds are out of range (as `classify_by_share`).
  ema_load_predictor(std::size_t num_layers, std::size_t num_experts, ema_load_predictor_config config = {})
      : layers_(num_layers), experts_(num_experts), config_(config) {
    constexpr const char* fn = "ema_load_predictor";
    if (num_layers == 0 || num_layers > 65536) detail::throw_invalid(fn, "num_layers must be in [1, 65536]", num_layers);
    if (num_experts == 0 || num_experts > 65536) detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts);
    if (!(config.alpha > 0.0 && config.alpha <= 1.0)) detail::throw_invalid(fn, "alpha must be in (0, 1]", config.alpha);
    const auto& c = config.classes;
    if (!(c.cold_share >= 0.0) || !(c.hot_share > 0.0) || c.hot_share + c.cold_share > 1.0 + 1e-12) {
      detail::throw_invalid(fn, "need 0 < hot_share, 0 <= cold_share and hot_share + cold_share <= 1, hot_share",
                            c.hot_share);
    }
    ema_.assign(num_layers * num_experts, 0.0);
    classes_.assign(num_layers * num_experts, hotness::cold);
    updates_.assign(num_layers, 0);
    order_.resize(num_layers * num_experts);
    for (std::size_t l = 0; l < num_layers; ++l) {
      std::iota(order_.begin() + static_cast<std::ptrdiff_t>(l * num_experts),
                order_.begin() + static_cast<std::ptrdiff_t>((l + 1) * num_experts), std::uint32_t{0});
    }
  }

  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }
  [[nodiscard]] const ema_load_predictor_config& config() const noexcept { return config_; }

  /// Folds one decode step's loads of `layer` (one per expert) into the EMA (Eq. 8) and
  /// reclassifies the layer.
  ///
  /// Preconditions: `layer < num_layers()`; `loads.size() == num_experts()`; loads finite
  /// and >= 0.
  /// Complexity: O(E + inversions of the load order since the last step), at most
  /// O(E log E) beyond 8·E inversions; no allocation.
  void update(layer_id layer, std::span<const std::uint32_t> loads) noexcept { fold(layer, loads); }
  /// As above, for fractional loads (for example token shares).
  void update(layer_id layer, std::span<const double> loads) noexcept { fold(layer, loads); }

  /// EMA_e after the last update of `layer`: the predicted loads of its next step.
  [[nodiscard]] std::span<const double> predicted_loads(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < layers_);
    return std::span<const double>(ema_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// The predicted classes of `layer`'s experts (all cold before its first update).
  [[nodiscard]] std::span<const hotness> predicted_classes(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < layers_);
    return std::span<const hotness>(classes_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// Updates of `layer` so far.
  [[nodiscard]] std::size_t updates(layer_id layer) const noexcept { return updates_[layer]; }

  /// Forgets everything (a new workload). No allocation.
  void reset() noexcept {
    std::fill(ema_.begin(), ema_.end(), 0.0);
    std::fill(classes_.begin(), classes_.end(), hotness::cold);
    std::fill(updates_.begin(), updates_.end(), 0);
  }

 private:
  template <class T>
  void fold(layer_id layer, std::span<const T> loads) noexcept {
    MOEPOLICY_ASSERT(layer < layers_ && loads.size() == experts_);
    double* row = ema_.data() + static_cast<std::size_t>(layer) * experts_;
    // Warm start: the first step sets the average (α = 1 once).
    const double a = (config_.warm_start && updates_[layer] == 0) ? 1.0 : config_.alpha;
    for (std::size_t e = 0; e < experts_; ++e) {
      MOEPOLICY_ASSERT(static_cast<double>(loads[e]) >= 0.0);
      row[e] = a * static_cast<double>(loads[e]) + (1.0 - a) * row[e];
    }
    ++updates_[layer];
    // The layer's order of the last step is nearly right: re-sorting it is O(E) mostly.
    const std::span<std::uint32_t> order =
        std::span<std::uint32_t>(order_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
    detail::sort_by_load(predicted_loads(layer), order);
    detail::classify_sorted<std::uint32_t>(predicted_loads(layer), classes_span(layer), order, config_.classes);
  }

  [[nodiscard]] std::span<hotness> classes_span(layer_id layer) noexcept {
    return std::span<hotness>(classes_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }

  std::size_t layers_, experts_;
  ema_load_predictor_config config_;
  std::vector<double> ema_;
  std::vector<hotness> classes_;
  std::vector<std::size_t> updates_;
  std::vector<std::uint32_t> order_;
};

/// Counts of predicted against actual hotness classes.
class hotness_confusion {
 public:
  /// Adds one prediction per expert.
  ///
  /// Preconditions: equal sizes. Complexity: O(size); no allocation.
  void observe(std::span<const hotness> predicted, std::span<const hotness> actual) noexcept {
    MOEPOLICY_ASSERT(predicted.size() == actual.size());
    for (std::size_t i = 0; i < predicted.size(); ++i) {
      ++counts_[static_cast<std::size_t>(predicted[i])][static_cast<std::size_t>(actual[i])];
    }
  }
  /// Predictions of class `p` whose actual class was `a`.
  [[nodiscard]] std::uint64_t count(hotness p, hotness a) const noexcept {
    return counts_[static_cast<std::size_t>(p)][static_cast<std::size_t>(a)];
  }
  [[nodiscard]] std::uint64_t total() const noexcept {
    std::uint64_t t = 0;
    for (const auto& r : counts_) for (auto c : r) t += c;
    return t;
  }
  /// Fraction of predictions that were right; 0 when empty.
  [[nodiscard]] double accuracy() const noexcept {
    const auto t = total();
    if (t == 0) return 0.0;
    std::uint64_t ok = 0;
    for (std::size_t c = 0; c < 3; ++c) ok += counts_[c][c];
    return static_cast<double>(ok) / static_cast<double>(t);
  }
  /// Of the predictions of class `c`, the fraction right; 0 when none.
  [[nodiscard]] double precision(hotness c) const noexcept {
    const auto k = static_cast<std::size_t>(c);
    std::uint64_t n = 0;
    for (auto x : counts_[k]) n += x;
    return n == 0 ? 0.0 : static_cast<double>(counts_[k][k]) / static_cast<double>(n);
  }
  /// Of the experts actually of class `c`, the fraction predicted so; 0 when none.
  [[nodiscard]] double recall(hotness c) const noexcept {
    const auto k = static_cast<std::size_t>(c);
    std::uint64_t n = 0;
    for (const auto& r : counts_) n += r[k];
    return n == 0 ? 0.0 : static_cast<double>(counts_[k][k]) / static_cast<double>(n);
  }
  void reset() noexcept { counts_ = {}; }

 private:
  std::array<std::array<std::uint64_t, 3>, 3> counts_{};
};

}  // namespace moepolicy
