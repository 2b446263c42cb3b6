// SPDX-License-Identifier: Apache-2.0
// moepolicy/cache/gated_prefetch.hpp — eviction by predicted reuse with admission gated by a
// predictor's confidence, on prefetch and on demand miss. Models `EvictionPolicy`; takes
// hints, has admission and prefetch admission, observes layers, steps, bypassed misses and
// prefetches of residents.
//
// The published relative is CXL-MoE's prediction-gated admission (CXL-MoE §3 "On-GPU
// Expert Cache Management": "An expert is admitted into the on-GPU cache only when it is
// requested by the predictive prefetcher … [a demand miss] is not admitted to the cache
// unless the predictor flags it as likely to be used again in the near future"), which
// `sticky_lru_policy` (cache/sticky_lru.hpp) reproduces on LRU. This policy is ours; it
// differs from CXL-MoE's rules in three ways, each a choice made here:
//   - the prefetch itself is gated: a prefetch is admitted only when its confidence is at
//     least `prefetch_threshold` (CXL-MoE admits whatever the prefetcher requests). A
//     prefetch moves an expert's bytes whether or not it is used, so a prefetcher that
//     proposes its `depth` best guesses spends link bytes on weak ones; the gate drops them
//     before any byte moves (`expert_cache::prefetch` asks `admit_prefetch` first);
//   - a demand miss is gated only when caching it would evict (`gate_free_room = false`,
//     the default): a free slot costs nothing to fill, since the miss has already moved the
//     bytes. With `gate_free_room` the gate applies always, as CXL-MoE's rule is written.
//     The miss is admitted when a hint of at least `admit_threshold` flagged the expert
//     within `hint_steps` forward passes (the same rule and window as `sticky_lru_policy`);
//   - the victim is not LRU's but the resident with the largest predicted reuse distance
//     (`predicted_reuse_policy`, cache/predicted_reuse.hpp: Belady's rule on an estimate
//     learned from past intervals, with the in-layer shield of Edge-MoE §5.3), to which
//     every residency event is forwarded.
// A hint is the predictor's confidence that the expert is used within its horizon, counting
// from the layer's next batch (`PrefetchPredictor`, predict/prefetch_queue.hpp): the
// short-horizon frequency model and the Markov model of CXL-MoE §3
// (predict/short_horizon_predictor.hpp, predict/markov_predictor.hpp) or the cross-layer
// transition counts (predict/transition_predictor.hpp). The latest hint of an expert
// replaces the earlier one.
// Only past events are read: `access_info::next_use` is ignored.
//
// Cost. Per slot 12 bytes beyond `predicted_reuse_policy`'s, allocated at construction;
// hints O(1), admission O(1), residency events as `predicted_reuse_policy`'s.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `gated_prefetch_policy`.
struct gated_prefetch_config {
  /// A prefetch is admitted when its confidence is at least this; in [0, 1].
  float prefetch_threshold = 0.5f;
  /// A demand miss that would evict is cached when a hint of at least this flagged the
  /// expert within `hint_steps` forward passes; in [0, 1].
  float admit_threshold = 0.5f;
  /// Forward passes a hint survives; >= 1 (as `sticky_lru_config::hint_steps`).
  std::uint32_t hint_steps = 1;
  /// Gate demand misses even when a free slot holds them (CXL-MoE §3's rule as written).
  bool gate_free_room = false;
  /// The eviction order (and its optional bypass) of the predicted-reuse policy.
  predicted_reuse_config eviction = {};
};

/// Predicted-reuse eviction; prefetches and evicting demand misses admitted only on a
/// confident prediction.
class gated_prefetch_policy {
 public:
  using config_type = gated_prefetch_config;

  /// Throws: `invalid_argument` naming `gated_prefetch_policy` when a threshold is outside
  /// [0, 1] or `hint_steps` is 0; what `predicted_reuse_policy` throws for `eviction`.
  explicit gated_prefetch_policy(const cache_shape& shape, const gated_prefetch_config& cfg = {})
      : shape_(shape),
        cfg_(checked(cfg)),
        order_(shape, cfg.eviction),
        hint_conf_(shape.slots(), 0.0f),
        hint_step_(shape.slots(), never) {}

  [[nodiscard]] const gated_prefetch_config& config() const noexcept { return cfg_; }
  /// The eviction order.
  [[nodiscard]] const predicted_reuse_policy& order() const noexcept { return order_; }

  void on_insert(expert_key k, const access_info& i) noexcept { order_.on_insert(k, i); }
  void on_hit(expert_key k, const access_info& i) noexcept { order_.on_hit(k, i); }
  void on_evict(expert_key k) noexcept { order_.on_evict(k); }
  void on_bypass(expert_key k, const access_info& i) noexcept { order_.on_bypass(k, i); }
  void on_prefetch(expert_key k, const access_info& i) noexcept { order_.on_prefetch(k, i); }
  void on_layer_begin(const batch_view& b) noexcept { order_.on_layer_begin(b); }
  void on_layer_end(layer_id l) noexcept { order_.on_layer_end(l); }
  /// Ages hints. Complexity: O(1).
  void on_step_end() noexcept { ++steps_; }
  /// The predictor's confidence that `k` is needed soon. Complexity: O(1).
  void on_hint(expert_key k, float confidence) noexcept {
    const std::size_t f = shape_.flat(k);
    hint_conf_[f] = confidence;
    hint_step_[f] = steps_;
  }

  /// Returns: whether a demand miss of `k` is cached: true when it would not evict (unless
  /// `gate_free_room`), else whether `flagged(k)` and the eviction order's admission (its
  /// optional bypass) agree.
  [[nodiscard]] bool admit(expert_key k, const access_info& i, bool must_evict) const noexcept {
    if (!must_evict && !cfg_.gate_free_room) return true;
    return flagged(k) && order_.admit(k, i, must_evict);
  }
  /// Returns: whether a prefetch of `k` (not resident) is admitted: its confidence is at
  /// least `prefetch_threshold`.
  [[nodiscard]] bool admit_prefetch(expert_key, const access_info& i, bool) const noexcept {
    return i.confidence >= cfg_.prefetch_threshold;
  }
  /// Whether the predictor's hints currently flag `k` for admission.
  [[nodiscard]] bool flagged(expert_key k) const noexcept {
    const std::size_t f = shape_.flat(k);
    return hint_step_[f] != never && steps_ - hint_step_[f] < cfg_.hint_steps && hint_conf_[f] >= cfg_.admit_threshold;
  }

  /// Returns: the eviction order's victim (largest predicted reuse distance). O(1).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept { return order_.victim(part); }

 private:
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

  static gated_prefetch_config checked(const gated_prefetch_config& c) {
    constexpr const char* fn = "gated_prefetch_policy";
    if (!(c.prefetch_threshold >= 0.0f && c.prefetch_threshold <= 1.0f)) {
      detail::throw_invalid(fn, "prefetch_threshold must be in [0, 1]", c.prefetch_threshold);
    }
    if (!(c.admit_threshold >= 0.0f && c.admit_threshold <= 1.0f)) {
      detail::throw_invalid(fn, "admit_threshold must be in [0, 1]", c.admit_threshold);
    }
    if (c.hint_steps == 0) detail::throw_invalid(fn, "hint_steps must be >= 1", c.hint_steps);
    return c;
  }

  cache_shape shape_;
  gated_prefetch_config cfg_;
  predicted_reuse_policy order_;
  std::uint64_t steps_ = 0;
  std::vector<float> hint_conf_;
  std::vector<std::uint64_t> hint_step_;
};

static_assert(EvictionPolicy<gated_prefetch_policy>);
static_assert(!policy_traits<gated_prefetch_policy>::needs_future);
static_assert(policy_traits<gated_prefetch_policy>::has_admission &&
              policy_traits<gated_prefetch_policy>::admits_prefetches &&
              policy_traits<gated_prefetch_policy>::takes_hints &&
              policy_traits<gated_prefetch_policy>::observes_layers &&
              policy_traits<gated_prefetch_policy>::observes_steps &&
              policy_traits<gated_prefetch_policy>::observes_bypass &&
              policy_traits<gated_prefetch_policy>::observes_prefetch);

}  // namespace moepolicy
