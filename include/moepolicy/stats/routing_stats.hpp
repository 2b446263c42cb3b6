// moepolicy/stats/routing_stats.hpp — routing-statistics collectors.
//
//   routing_stats_collector  per (layer, expert) activation counts P and routing-score
//                            sums W, kept apart for prefill and decode (Context-Aware GPU-NDP Alg. 1
//                            line 11; one collector per request, or `reset` between them);
//   step_load_counter        tokens per expert of the current forward pass, per layer (the
//                            loads L_i that TriMoE's cost model takes, TriMoE §4.2);
//   sliding_window_counts    counts and score sums over the last n steps;
//   ema_counts               an exponential moving average of per-step counts.
//
// Every collector takes a layer's router output for a batch as spans — `tokens × k` ids and
// gate weights, row-major, as `batch_view` holds them — and allocates nothing after
// construction. Ids are validated only by `MOEPOLICY_ASSERT`: the hot path trusts the
// router (a trace was validated when read).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

namespace detail {

inline void check_collector_shape(std::string_view fn, std::size_t layers, std::size_t experts) {
  if (layers == 0 || layers > 65536) throw_invalid(fn, "num_layers must be in [1, 65536]", layers);
  if (experts == 0 || experts > 65536) throw_invalid(fn, "num_experts must be in [1, 65536]", experts);
}

}  // namespace detail

/// Activation counts P and routing-score sums W per (layer, expert), by phase.
class routing_stats_collector {
 public:
  /// Throws: `invalid_argument` when a dimension is 0 or above 65536.
  routing_stats_collector(std::size_t num_layers, std::size_t num_experts)
      : P_{Eigen::MatrixXd::Zero(rows(num_layers, num_experts), static_cast<Eigen::Index>(num_experts)),
           Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(num_layers), static_cast<Eigen::Index>(num_experts))},
        W_{P_[0], P_[1]},
        tokens_{std::vector<std::uint64_t>(num_layers, 0), std::vector<std::uint64_t>(num_layers, 0)} {}

  [[nodiscard]] std::size_t num_layers() const noexcept { return static_cast<std::size_t>(P_[0].rows()); }
  [[nodiscard]] std::size_t num_experts() const noexcept { return static_cast<std::size_t>(P_[0].cols()); }

  /// Adds one layer's routing of a batch: `ids` and `weights` hold `top_k` entries per token.
  ///
  /// Preconditions: `layer < num_layers()`; ids below `num_experts()`; equal sizes, a
  /// multiple of `top_k`.
  /// Complexity: O(ids.size()); no allocation.
  void observe(phase kind, layer_id layer, std::span<const expert_id> ids, std::span<const float> weights,
               std::size_t top_k) noexcept {
    MOEPOLICY_ASSERT(layer < num_layers());
    MOEPOLICY_ASSERT(ids.size() == weights.size());
    MOEPOLICY_ASSERT(top_k > 0 && ids.size() % top_k == 0);
    const auto p = static_cast<std::size_t>(kind);
    const auto l = static_cast<Eigen::Index>(layer);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      MOEPOLICY_ASSERT(ids[i] < num_experts());
      P_[p](l, ids[i]) += 1.0;
      W_[p](l, ids[i]) += static_cast<double>(weights[i]);
    }
    tokens_[p][layer] += ids.size() / top_k;
  }

  /// Adds a batch of a trace.
  void observe(const batch_view& b) noexcept { observe(b.ref.kind, b.ref.layer, b.experts, b.weights, b.top_k); }

  /// Activation counts P of a phase: layers × experts.
  [[nodiscard]] const Eigen::MatrixXd& counts(phase kind) const noexcept { return P_[static_cast<std::size_t>(kind)]; }
  /// Routing-score sums W of a phase: layers × experts.
  [[nodiscard]] const Eigen::MatrixXd& weight_sums(phase kind) const noexcept {
    return W_[static_cast<std::size_t>(kind)];
  }
  /// Tokens observed at `layer` in a phase.
  [[nodiscard]] std::uint64_t tokens(phase kind, layer_id layer) const noexcept {
    return tokens_[static_cast<std::size_t>(kind)][layer];
  }

  /// Forgets everything (between requests). No allocation.
  void reset() noexcept {
    for (auto& m : P_) m.setZero();
    for (auto& m : W_) m.setZero();
    for (auto& t : tokens_) std::fill(t.begin(), t.end(), 0);
  }

 private:
  static Eigen::Index rows(std::size_t layers, std::size_t experts) {
    detail::check_collector_shape("routing_stats_collector", layers, experts);
    return static_cast<Eigen::Index>(layers);
  }

  Eigen::MatrixXd P_[2];
  Eigen::MatrixXd W_[2];
  std::vector<std::uint64_t> tokens_[2];
};

/// Tokens per expert of the current forward pass, per layer.
class step_load_counter {
 public:
  /// Throws: `invalid_argument` when a dimension is 0 or above 65536.
  step_load_counter(std::size_t num_layers, std::size_t num_experts)
      : experts_((detail::check_collector_shape("step_load_counter", num_layers, num_experts), num_experts)),
        loads_(num_layers * num_experts, 0) {}

  /// Adds one layer's routing of a batch. Preconditions as `routing_stats_collector::observe`.
  void observe(layer_id layer, std::span<const expert_id> ids) noexcept {
    MOEPOLICY_ASSERT(static_cast<std::size_t>(layer) * experts_ < loads_.size());
    std::uint32_t* row = loads_.data() + static_cast<std::size_t>(layer) * experts_;
    for (expert_id e : ids) {
      MOEPOLICY_ASSERT(e < experts_);
      ++row[e];
    }
  }
  /// Tokens each expert of `layer` received this step.
  [[nodiscard]] std::span<const std::uint32_t> loads(layer_id layer) const noexcept {
    return std::span<const std::uint32_t>(loads_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// Starts a new step. No allocation.
  void clear() noexcept { std::fill(loads_.begin(), loads_.end(), 0u); }

 private:
  std::size_t experts_;
  std::vector<std::uint32_t> loads_;
};

/// Activation counts and score sums per (layer, expert) over the last `window` steps.
///
/// Each step's contribution is kept in a ring of `window` slots; `end_step` retires the
/// oldest slot, so sums always cover exactly the last `window` completed steps (fewer at
/// the start) plus the step in progress.
class sliding_window_counts {
 public:
  /// Throws: `invalid_argument` when a dimension or `window` is 0.
  sliding_window_counts(std::size_t num_layers, std::size_t num_experts, std::size_t window)
      : layers_(num_layers), experts_(num_experts), window_(window) {
    detail::check_collector_shape("sliding_window_counts", num_layers, num_experts);
    if (window == 0) detail::throw_invalid("sliding_window_counts", "window must be >= 1", window);
    const std::size_t cells = num_layers * num_experts;
    ring_counts_.assign((window + 1) * cells, 0.0);
    ring_scores_.assign((window + 1) * cells, 0.0);
    counts_.assign(cells, 0.0);
    scores_.assign(cells, 0.0);
  }

  [[nodiscard]] std::size_t window() const noexcept { return window_; }
  /// Completed steps currently in the window (at most `window()`).
  [[nodiscard]] std::size_t steps_in_window() const noexcept { return std::min(completed_, window_); }

  /// Adds activations of the step in progress: `scores` are the gate weights of `ids`.
  void observe(layer_id layer, std::span<const expert_id> ids, std::span<const float> scores) noexcept {
    MOEPOLICY_ASSERT(ids.size() == scores.size());
    const std::size_t base = static_cast<std::size_t>(layer) * experts_;
    const std::size_t slot = current_slot() + base;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      MOEPOLICY_ASSERT(ids[i] < experts_);
      ring_counts_[slot + ids[i]] += 1.0;
      ring_scores_[slot + ids[i]] += static_cast<double>(scores[i]);
      counts_[base + ids[i]] += 1.0;
      scores_[base + ids[i]] += static_cast<double>(scores[i]);
    }
  }
  /// Adds every expert's router score of the step in progress, selected or not (the
  /// score-aware eviction of Edge-MoE §5.3 averages scores of inactive experts too).
  void observe_scores(layer_id layer, std::span<const float> all_scores) noexcept {
    MOEPOLICY_ASSERT(all_scores.size() == experts_);
    const std::size_t base = static_cast<std::size_t>(layer) * experts_;
    const std::size_t slot = current_slot() + base;
    for (std::size_t e = 0; e < experts_; ++e) {
      ring_scores_[slot + e] += static_cast<double>(all_scores[e]);
      scores_[base + e] += static_cast<double>(all_scores[e]);
    }
  }
  /// Closes the step in progress and retires the step that falls out of the window.
  void end_step() noexcept {
    ++completed_;
    // The slot after the current one is the oldest; it leaves the window now.
    const std::size_t cells = layers_ * experts_;
    const std::size_t oldest = ((completed_ % (window_ + 1)) * cells);
    for (std::size_t c = 0; c < cells; ++c) {
      counts_[c] -= ring_counts_[oldest + c];
      scores_[c] -= ring_scores_[oldest + c];
      ring_counts_[oldest + c] = 0.0;
      ring_scores_[oldest + c] = 0.0;
    }
  }
  /// Activations of (layer, expert) in the window.
  [[nodiscard]] double count(layer_id layer, expert_id e) const noexcept {
    return counts_[static_cast<std::size_t>(layer) * experts_ + e];
  }
  /// Sum of scores of (layer, expert) in the window.
  [[nodiscard]] double score_sum(layer_id layer, expert_id e) const noexcept {
    return scores_[static_cast<std::size_t>(layer) * experts_ + e];
  }
  /// The counts of one layer, one per expert.
  [[nodiscard]] std::span<const double> counts(layer_id layer) const noexcept {
    return std::span<const double>(counts_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// The score sums of one layer, one per expert.
  [[nodiscard]] std::span<const double> score_sums(layer_id layer) const noexcept {
    return std::span<const double>(scores_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }

 private:
  [[nodiscard]] std::size_t current_slot() const noexcept { return (completed_ % (window_ + 1)) * layers_ * experts_; }

  std::size_t layers_, experts_, window_;
  std::size_t completed_ = 0;
  std::vector<double> ring_counts_, ring_scores_;
  std::vector<double> counts_, scores_;
};

/// EMA_e(t) = α · x_e(t) + (1 − α) · EMA_e(t − 1) per (layer, expert), over per-step
/// values x (TriMoE Eq. 8 uses token loads with α = 0.3).
class ema_counts {
 public:
  /// Throws: `invalid_argument` when a dimension is 0 or `alpha` is not in (0, 1].
  ema_counts(std::size_t num_layers, std::size_t num_experts, double alpha)
      : experts_(num_experts), alpha_(alpha) {
    detail::check_collector_shape("ema_counts", num_layers, num_experts);
    if (!(alpha > 0.0 && alpha <= 1.0)) detail::throw_invalid("ema_counts", "alpha must be in (0, 1]", alpha);
    ema_.assign(num_layers * num_experts, 0.0);
  }

  [[nodiscard]] double alpha() const noexcept { return alpha_; }

  /// Folds one step's values of `layer` (one per expert) into the average.
  template <class T>
  void update(layer_id layer, std::span<const T> values) noexcept {
    MOEPOLICY_ASSERT(values.size() == experts_);
    double* row = ema_.data() + static_cast<std::size_t>(layer) * experts_;
    for (std::size_t e = 0; e < experts_; ++e) {
      row[e] = alpha_ * static_cast<double>(values[e]) + (1.0 - alpha_) * row[e];
    }
  }
  /// The averages of one layer.
  [[nodiscard]] std::span<const double> values(layer_id layer) const noexcept {
    return std::span<const double>(ema_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }
  /// Sets every average to 0.
  void reset() noexcept { std::fill(ema_.begin(), ema_.end(), 0.0); }

 private:
  std::size_t experts_;
  double alpha_;
  std::vector<double> ema_;
};

}  // namespace moepolicy
