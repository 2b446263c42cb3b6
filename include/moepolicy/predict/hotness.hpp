// moepolicy/predict/hotness.hpp — interval hotness estimation (DynaExq, "Dynamic Expert
// Quantization for Scalable Mixture-of-Experts Inference", §3.5 "Hotness Estimation").
//
// For each MoE layer l and expert e a counter c_{l,e} accumulates how often the router
// selects e during the current update interval. Intervals are measured in time, not in
// tokens (§3.5: "stable under varying batch composition and prompt lengths"), so the
// caller says when one ends: `end_interval()`, or `advance_to(now)` with a period. At the
// end of each interval the counters are folded into a smoothed hotness and reset:
//
//   h_{l,e} ← α · x_{l,e} + (1 − α) · h_{l,e},      h starts at 0.
//
// Reconstruction (the extracted text lost the symbols): the paper names one coefficient
// that "controls the tradeoff between responsiveness and stability". We read α as the
// weight of the interval just ended (responsiveness), as the project's other EMA (TriMoE
// Eq. 8, stats/routing_stats.hpp `ema_counts`) does; the other reading, α weighing the
// history, is the same estimator with α' = 1 − α.
//
// x_{l,e} is the raw counter (`interval_counts::raw`, the paper's literal reading) or, as
// an option, the counter's share of the layer's selections in the interval
// (`interval_counts::share`). Both rank experts the same within an interval; they differ
// across intervals of different traffic. Raw counts let busy intervals weigh more and make
// an additive hysteresis margin (predict/precision_target.hpp) a number of selections;
// shares weigh every interval alike and make the margin a fraction of traffic, which stays
// meaningful when load varies by orders of magnitude between day and night. An interval
// in which a layer saw no selection decays that layer's hotness by (1 − α) in both forms
// (an empty layer's shares are all 0), which keeps the ranking unchanged.
//
// Not synchronised: one thread observes and ends intervals (the scheduler that consumes
// router traces, §3.1). Allocation-free after construction.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

/// What an interval contributes to the hotness EMA.
enum class interval_counts : std::uint8_t {
  raw,    ///< the number of selections (the paper's counter)
  share,  ///< selections divided by all selections of the layer in the interval
};

/// Configuration of `hotness_estimator`.
struct hotness_config {
  /// Weight α of the interval just ended, in (0, 1]; 1 − α weighs the history.
  double alpha = 0.5;
  /// What an interval contributes: raw counts or shares of the layer's traffic.
  interval_counts counts = interval_counts::raw;
  /// Length of an update interval for `advance_to`, in the caller's time unit (seconds
  /// for a wall clock, steps for a replay); 0 when the caller only uses `end_interval`.
  seconds interval_seconds = 0.0;
};

/// Per (layer, expert) selection counters over the current interval, folded into a hotness
/// EMA at each interval's end (DynaExq §3.5).
class hotness_estimator {
 public:
  /// Preconditions: none.
  /// Throws: `invalid_argument` when a dimension is 0 or above 65536, `alpha` is outside
  /// (0, 1], or `interval_seconds` is negative or not finite.
  /// Complexity: O(layers × experts) time and memory, the only allocation.
  hotness_estimator(std::size_t num_layers, std::size_t num_experts, const hotness_config& config = {})
      : layers_(num_layers), experts_(num_experts), config_(config) {
    constexpr std::string_view fn = "hotness_estimator";
    if (num_layers == 0 || num_layers > 65536)
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", num_layers);
    if (num_experts == 0 || num_experts > 65536) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts);
    }
    if (!(config.alpha > 0.0 && config.alpha <= 1.0))
      detail::throw_invalid(fn, "alpha must be in (0, 1]", config.alpha);
    if (!(std::isfinite(config.interval_seconds) && config.interval_seconds >= 0.0)) {
      detail::throw_invalid(fn, "interval_seconds must be finite and >= 0", config.interval_seconds);
    }
    counts_.assign(num_layers * num_experts, 0);
    hotness_.assign(num_layers * num_experts, 0.0);
    layer_total_.assign(num_layers, 0);
    next_end_ = config.interval_seconds;
  }

  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }
  [[nodiscard]] const hotness_config& config() const noexcept { return config_; }

  /// Counts one layer's routing of a batch: every id is one selection.
  ///
  /// Preconditions: `layer < num_layers()`; ids below `num_experts()` (asserted).
  /// Complexity: O(ids.size()); no allocation.
  void observe(layer_id layer, std::span<const expert_id> ids) noexcept {
    MOEPOLICY_ASSERT(layer < layers_);
    std::uint64_t* row = counts_.data() + static_cast<std::size_t>(layer) * experts_;
    for (expert_id e : ids) {
      MOEPOLICY_ASSERT(e < experts_);
      ++row[e];
    }
    layer_total_[layer] += ids.size();
  }

  /// Counts `times` selections of one expert.
  ///
  /// Preconditions: `layer < num_layers()`, `e < num_experts()` (asserted).
  void observe(layer_id layer, expert_id e, std::uint64_t times = 1) noexcept {
    MOEPOLICY_ASSERT(layer < layers_ && e < experts_);
    counts_[static_cast<std::size_t>(layer) * experts_ + e] += times;
    layer_total_[layer] += times;
  }

  /// Ends the current interval: folds every counter into the hotness EMA, then resets the
  /// counters.
  ///
  /// Complexity: O(layers × experts); no allocation.
  void end_interval() noexcept {
    const double a = config_.alpha;
    for (std::size_t l = 0; l < layers_; ++l) {
      const std::size_t base = l * experts_;
      const double scale = config_.counts == interval_counts::share && layer_total_[l] > 0
                               ? 1.0 / static_cast<double>(layer_total_[l])
                               : 1.0;
      for (std::size_t e = 0; e < experts_; ++e) {
        const double x = static_cast<double>(counts_[base + e]) * scale;
        hotness_[base + e] = a * x + (1.0 - a) * hotness_[base + e];
        counts_[base + e] = 0;
      }
      layer_total_[l] = 0;
    }
    ++intervals_;
  }

  /// Ends every interval whose end lies at or before `now` (time-based intervals of
  /// `config().interval_seconds`, the first ending at that length after time 0). When
  /// several have passed, the first receives the counts observed so far and the others are
  /// empty, so the hotness decays once per elapsed interval.
  ///
  /// Preconditions: `config().interval_seconds > 0`; `now` non-decreasing across calls.
  /// Returns: the number of intervals ended.
  /// Complexity: O(ended × layers × experts); no allocation.
  std::size_t advance_to(seconds now) noexcept {
    MOEPOLICY_ASSERT(config_.interval_seconds > 0.0);
    if (!(config_.interval_seconds > 0.0)) return 0;  // never loop forever without a period
    std::size_t ended = 0;
    while (now >= next_end_) {
      end_interval();
      next_end_ += config_.interval_seconds;
      ++ended;
    }
    return ended;
  }

  /// The smoothed hotness of every expert of `layer`.
  [[nodiscard]] std::span<const double> hotness(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < layers_);
    return std::span<const double>(hotness_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// The hotness of one expert.
  [[nodiscard]] double hotness(layer_id layer, expert_id e) const noexcept {
    MOEPOLICY_ASSERT(layer < layers_ && e < experts_);
    return hotness_[static_cast<std::size_t>(layer) * experts_ + e];
  }
  /// The counters of the interval in progress, one per expert of `layer`.
  [[nodiscard]] std::span<const std::uint64_t> counts(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < layers_);
    return std::span<const std::uint64_t>(counts_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// Selections observed at `layer` in the interval in progress.
  [[nodiscard]] std::uint64_t interval_selections(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < layers_);
    return layer_total_[layer];
  }
  /// Intervals ended so far.
  [[nodiscard]] std::uint64_t intervals() const noexcept { return intervals_; }
  /// The end of the interval in progress, for `advance_to`.
  [[nodiscard]] seconds next_interval_end() const noexcept { return next_end_; }

  /// Forgets counters, hotness and elapsed intervals. No allocation.
  void reset() noexcept {
    std::fill(counts_.begin(), counts_.end(), std::uint64_t{0});
    std::fill(hotness_.begin(), hotness_.end(), 0.0);
    std::fill(layer_total_.begin(), layer_total_.end(), std::uint64_t{0});
    intervals_ = 0;
    next_end_ = config_.interval_seconds;
  }

 private:
  std::size_t layers_, experts_;
  hotness_config config_;
  std::vector<std::uint64_t> counts_;
  std::vector<double> hotness_;
  std::vector<std::uint64_t> layer_total_;
  std::uint64_t intervals_ = 0;
  seconds next_end_ = 0.0;
};

}  // namespace moepolicy
