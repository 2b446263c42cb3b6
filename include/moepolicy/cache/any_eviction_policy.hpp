// moepolicy/cache/any_eviction_policy.hpp — an eviction policy chosen at run time, and the
// table of policy names. Models `EvictionPolicy`.
//
// Drivers and the command-line tool name a policy ("lru", "score-aware", …); the name
// table turns the name into an `any_eviction_config` (a variant of the policies' configs,
// defaults filled in), and `expert_cache<any_eviction_policy>` builds the matching
// alternative. Every hook of every alternative is forwarded, so the variant has the union
// of their capabilities: admission (true for alternatives without it), hints, layer and
// step hooks, prefetch admission (true for alternatives without it: a prefetch is then always
// admitted), the capacity weights (passed to `size-aware`, which takes its expert sizes from
// a bytes-unit cache). `policy_traits<any_eviction_policy>::needs_future` is true because an
// alternative (Belady) may read the future; `reads_future()` says whether the held one does.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>

#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/fifo.hpp"
#include "moepolicy/cache/gated_prefetch.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cache/size_aware_reuse.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// The configuration of one of the shipped policies; the alternative picks the policy.
using any_eviction_config =
    std::variant<score_aware_config, sticky_lru_config, ema_score_config, lru_config, lfu_config, fifo_config,
                 hawkeye_config, predicted_reuse_config, gated_prefetch_config, size_aware_reuse_config, belady_config>;

/// One entry of the name table.
struct eviction_policy_entry {
  std::string_view name;
  std::string_view summary;
  any_eviction_config defaults;
};

/// Every shipped policy by name, in the order of `any_eviction_config`.
inline const std::array<eviction_policy_entry, 11> eviction_policies = {{
    {"score-aware", "lowest windowed average router score, in-layer shield (Edge-MoE §5.3)", score_aware_config{}},
    {"sticky-lru", "LRU with confidence stickiness and prediction-gated admission (CXL-MoE §3)", sticky_lru_config{}},
    {"ema-score", "HybriMoE-like: lowest moving average of the router score, in-layer shield", ema_score_config{}},
    {"lru", "least recently used", lru_config{}},
    {"lfu", "least frequently used (decay 1: no decay)", lfu_config{}},
    {"fifo", "first in, first out", fifo_config{}},
    {"hawkeye", "learns from Belady's MIN replayed on the past (Hawkeye, ISCA 2016), in-layer shield",
     hawkeye_config{}},
    {"pred-reuse", "largest predicted reuse distance (LIRS-style moving average of gaps), in-layer shield",
     predicted_reuse_config{}},
    {"gated-prefetch",
     "pred-reuse eviction; prefetches and evicting misses admitted at predictor confidence >= 0.5 (ours, "
     "cf. CXL-MoE §3)",
     gated_prefetch_config{}},
    {"size-aware",
     "largest bytes x predicted reuse distance (ours; sizes from a bytes-unit cache, else pred-reuse's rule)",
     size_aware_reuse_config{}},
    {"belady", "Belady's offline optimum (needs the future)", belady_config{}},
}};

/// The default configuration of the policy named `name` (exact, lower case).
///
/// Throws: `invalid_argument` naming the known policies when `name` is not one of them.
[[nodiscard]] inline any_eviction_config eviction_config_by_name(std::string_view name) {
  for (const auto& e : eviction_policies) {
    if (e.name == name) return e.defaults;
  }
  std::string known;
  for (const auto& e : eviction_policies) {
    if (!known.empty()) known += ", ";
    known += e.name;
  }
  detail::throw_invalid("eviction_config_by_name", "unknown eviction policy (known: " + known + ")", name);
}

/// The name of the policy `cfg` configures.
[[nodiscard]] inline std::string_view eviction_policy_name(const any_eviction_config& cfg) noexcept {
  return eviction_policies[cfg.index()].name;
}

/// One of the shipped eviction policies, chosen at run time.
class any_eviction_policy {
 public:
  using config_type = any_eviction_config;
  using variant_type = std::variant<score_aware_policy, sticky_lru_policy, ema_score_policy, lru_policy, lfu_policy,
                                    fifo_policy, hawkeye_policy, predicted_reuse_policy, gated_prefetch_policy,
                                    size_aware_reuse_policy, belady_policy>;
  /// An alternative (Belady) may read `access_info::next_use`; feed it.
  static constexpr bool needs_future = true;

  /// Throws: what the chosen policy's constructor throws (`size-aware` without footprints
  /// needs the capacity weights: the constructor below, which `expert_cache` calls).
  any_eviction_policy(const cache_shape& shape, const any_eviction_config& cfg)
      : policy_(std::visit([&](const auto& c) { return make(shape, c); }, cfg)) {}
  /// As above; a policy that reads capacity weights (`size-aware`) gets `w`.
  any_eviction_policy(const cache_shape& shape, const any_eviction_config& cfg, const capacity_weights& w)
      : policy_(std::visit(
            [&](const auto& c) {
              if constexpr (std::is_same_v<std::decay_t<decltype(c)>, size_aware_reuse_config>) {
                return variant_type(std::in_place_type<size_aware_reuse_policy>, shape, c, w);
              } else {
                return make(shape, c);
              }
            },
            cfg)) {}

  /// The held policy's name.
  [[nodiscard]] std::string_view name() const noexcept { return eviction_policies[policy_.index()].name; }
  /// Whether the held policy reads the future.
  [[nodiscard]] bool reads_future() const noexcept {
    return std::visit([](const auto& p) { return policy_traits<std::decay_t<decltype(p)>>::needs_future; }, policy_);
  }
  /// The held policy.
  [[nodiscard]] const variant_type& policy() const noexcept { return policy_; }

  void on_insert(expert_key k, const access_info& i) noexcept {
    std::visit([&](auto& p) { p.on_insert(k, i); }, policy_);
  }
  void on_hit(expert_key k, const access_info& i) noexcept {
    std::visit([&](auto& p) { p.on_hit(k, i); }, policy_);
  }
  void on_evict(expert_key k) noexcept {
    std::visit([&](auto& p) { p.on_evict(k); }, policy_);
  }
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    return std::visit([&](const auto& p) { return p.victim(part); }, policy_);
  }
  [[nodiscard]] bool admit(expert_key k, const access_info& i, bool must_evict) const noexcept {
    return std::visit(
        [&](const auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::has_admission) {
            return static_cast<bool>(p.admit(k, i, must_evict));
          } else {
            return true;
          }
        },
        policy_);
  }
  [[nodiscard]] bool admit_prefetch(expert_key k, const access_info& i, bool must_evict) const noexcept {
    return std::visit(
        [&](const auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::admits_prefetches) {
            return static_cast<bool>(p.admit_prefetch(k, i, must_evict));
          } else {
            return true;
          }
        },
        policy_);
  }
  void on_layer_begin(const batch_view& b) noexcept {
    std::visit(
        [&](auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::observes_layers) p.on_layer_begin(b);
        },
        policy_);
  }
  void on_layer_end(layer_id l) noexcept {
    std::visit(
        [&](auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::observes_layers) p.on_layer_end(l);
        },
        policy_);
  }
  void on_step_end() noexcept {
    std::visit(
        [&](auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::observes_steps) p.on_step_end();
        },
        policy_);
  }
  void on_bypass(expert_key k, const access_info& i) noexcept {
    std::visit(
        [&](auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::observes_bypass) p.on_bypass(k, i);
        },
        policy_);
  }
  void on_hint(expert_key k, float c) noexcept {
    std::visit(
        [&](auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::takes_hints) p.on_hint(k, c);
        },
        policy_);
  }
  void on_prefetch(expert_key k, const access_info& i) noexcept {
    std::visit(
        [&](auto& p) {
          if constexpr (policy_traits<std::decay_t<decltype(p)>>::observes_prefetch) p.on_prefetch(k, i);
        },
        policy_);
  }

 private:
  static variant_type make(const cache_shape& s, const score_aware_config& c) { return score_aware_policy(s, c); }
  static variant_type make(const cache_shape& s, const sticky_lru_config& c) { return sticky_lru_policy(s, c); }
  static variant_type make(const cache_shape& s, const ema_score_config& c) { return ema_score_policy(s, c); }
  static variant_type make(const cache_shape& s, const lru_config& c) { return lru_policy(s, c); }
  static variant_type make(const cache_shape& s, const lfu_config& c) { return lfu_policy(s, c); }
  static variant_type make(const cache_shape& s, const fifo_config& c) { return fifo_policy(s, c); }
  static variant_type make(const cache_shape& s, const hawkeye_config& c) { return hawkeye_policy(s, c); }
  static variant_type make(const cache_shape& s, const predicted_reuse_config& c) {
    return predicted_reuse_policy(s, c);
  }
  static variant_type make(const cache_shape& s, const gated_prefetch_config& c) { return gated_prefetch_policy(s, c); }
  static variant_type make(const cache_shape& s, const size_aware_reuse_config& c) {
    return size_aware_reuse_policy(s, c);
  }
  static variant_type make(const cache_shape& s, const belady_config& c) { return belady_policy(s, c); }

  variant_type policy_;
};

static_assert(EvictionPolicy<any_eviction_policy>);
static_assert(policy_traits<any_eviction_policy>::needs_future && policy_traits<any_eviction_policy>::has_admission &&
              policy_traits<any_eviction_policy>::observes_layers && policy_traits<any_eviction_policy>::takes_hints &&
              policy_traits<any_eviction_policy>::admits_prefetches &&
              policy_traits<any_eviction_policy>::observes_prefetch &&
              policy_traits<any_eviction_policy>::takes_capacity_weights);

}  // namespace moepolicy
