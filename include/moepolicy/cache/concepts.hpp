// moepolicy/cache/concepts.hpp — the eviction-policy extension point of the expert cache.
//
// The expert cache (cache/expert_cache.hpp) owns residency, capacity and statistics; a
// policy only orders the resident experts so that the cache can ask it for a victim
// (libCacheSim's get = find → evict → insert; CacheLib's MMContainer). This header holds
// the vocabulary both sides share:
//
//   cache_shape      the experts a cache may hold and how capacity is partitioned
//                    (one shared pool, or one pool per layer);
//   access_info      what the caller knows about an access (the future, for Belady; a
//                    prefetcher's confidence);
//   EvictionPolicy   the concept every policy models (numbered requirements below);
//   policy_traits    the optional capabilities of a policy, defaulted from its members
//                    (needs_future, admission, layer/step hooks, prefetch hints).
//
// Shipped policies, each with `static_assert(EvictionPolicy<…>)` where it is defined:
// `lru_policy`, `fifo_policy` (cache/lru.hpp, cache/fifo.hpp), `lfu_policy` (cache/lfu.hpp),
// `score_aware_policy` (cache/score_aware.hpp, Edge-MoE §5.3), `sticky_lru_policy`
// (cache/sticky_lru.hpp, CXL-MoE §3), the HybriMoE-like `ema_score_policy`
// (cache/ema_score.hpp), the prediction-gated `gated_prefetch_policy` (cache/gated_prefetch.hpp),
// `belady_policy` (cache/belady.hpp) and the run-time choice `any_eviction_policy`
// (cache/any_eviction_policy.hpp).
#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// What a cache's capacity counts: resident experts, or resident bytes.
enum class capacity_unit : std::uint8_t { experts, byte_count };

/// Whether capacity is one pool shared by all layers, or one pool of the same size per
/// layer (an expert then only ever displaces an expert of its own layer).
enum class capacity_scope : std::uint8_t { shared, per_layer };

/// "shared" or "per-layer".
[[nodiscard]] constexpr std::string_view to_string(capacity_scope s) noexcept {
  return s == capacity_scope::shared ? "shared" : "per-layer";
}

/// The experts a cache may hold, and how its capacity is partitioned. Experts are
/// numbered densely, layer-major: `flat(k) = k.layer * num_experts + k.expert`.
struct cache_shape {
  std::uint32_t num_layers = 0;
  std::uint32_t num_experts = 0;
  capacity_scope scope = capacity_scope::shared;

  /// Every (layer, expert) the cache may hold.
  [[nodiscard]] constexpr std::size_t slots() const noexcept {
    return static_cast<std::size_t>(num_layers) * num_experts;
  }
  /// Capacity pools: 1 when shared, `num_layers` when per layer.
  [[nodiscard]] constexpr std::size_t partitions() const noexcept {
    return scope == capacity_scope::per_layer ? num_layers : 1;
  }
  /// Slots of one pool.
  [[nodiscard]] constexpr std::size_t partition_slots() const noexcept {
    return scope == capacity_scope::per_layer ? num_experts : slots();
  }
  /// The pool `k` belongs to.
  [[nodiscard]] constexpr std::size_t partition_of(expert_key k) const noexcept {
    return scope == capacity_scope::per_layer ? k.layer : 0;
  }
  /// The dense index of `k`.
  [[nodiscard]] constexpr std::size_t flat(expert_key k) const noexcept { return k.flat(num_experts); }
  /// The key of dense index `f`.
  [[nodiscard]] constexpr expert_key key(std::size_t f) const noexcept {
    // slots() ≤ 2^32: a 32-bit division (several times cheaper than a 64-bit one).
    const auto g = static_cast<std::uint32_t>(f);
    return {static_cast<layer_id>(g / num_experts), static_cast<expert_id>(g % num_experts)};
  }

  /// Throws: `invalid_argument` naming `fn` when a dimension is 0 or above 65536.
  void validate(std::string_view fn) const {
    if (num_layers == 0 || num_layers > 65536)
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", num_layers);
    if (num_experts == 0 || num_experts > 65536) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts);
    }
  }
};

/// "Never accessed again", as `access_info::next_use` says it.
inline constexpr std::uint64_t no_next_use = std::numeric_limits<std::uint64_t>::max();

/// What the caller knows about one access or prefetch.
struct access_info {
  /// Position in the access sequence of the next access to the same expert, or
  /// `no_next_use`. Only policies with `policy_traits<P>::needs_future` read it
  /// (`next_use_positions` in cache/belady.hpp computes it from a trace).
  std::uint64_t next_use = no_next_use;
  /// The prefetcher's confidence in [0, 1] (prefetches only).
  float confidence = 0.0f;
  /// Whether the event is a prefetch rather than a demand access.
  bool prefetch = false;
};

/// What each expert weighs against a cache's capacity, as the cache tells a policy built
/// with it (`policy_traits<P>::takes_capacity_weights`): the unit, and per expert,
/// layer-major, 1 in an experts-unit cache or its bytes in a bytes-unit one. The span is
/// valid during the policy's construction only.
struct capacity_weights {
  capacity_unit unit = capacity_unit::experts;
  std::span<const std::uint64_t> weight = {};
};

/// Orders the resident experts of an `expert_cache` for eviction.
///
/// For `P& p`, `const P& cp`, `cache_shape s`, `typename P::config_type c`, `expert_key k`,
/// `access_info i`, `std::size_t part`:
///   1. `P(s, c)` builds a policy for caches of shape `s`; it may throw
///      `invalid_argument` for a bad `c`; every later call is noexcept and allocation-free;
///   2. the cache reports every change of residency and every use, in order:
///      `p.on_insert(k, i)` when a non-resident `k` becomes resident (demand or prefetch),
///      `p.on_hit(k, i)` when a resident `k` is accessed, `p.on_evict(k)` when a resident
///      `k` leaves;
///   3. `cp.victim(part)` is a resident expert of pool `part` that the policy would evict
///      now, or nothing when no resident of the pool may be evicted (all protected, or
///      the pool is empty);
///   4. `victim` is a pure query: without an intervening event it returns the same answer;
///   5. the answer depends only on the events seen and the policy's configuration
///      (deterministic; ties broken by a documented rule).
template <class P>
concept EvictionPolicy = requires(P& p, const P& cp, expert_key k, const access_info& i, std::size_t part) {
  typename P::config_type;
  requires std::constructible_from<P, const cache_shape&, const typename P::config_type&>;
  { p.on_insert(k, i) }
  noexcept;
  { p.on_hit(k, i) }
  noexcept;
  { p.on_evict(k) }
  noexcept;
  { cp.victim(part) }
  noexcept->std::same_as<std::optional<expert_key>>;
};

namespace detail {

template <class P>
constexpr bool declared_needs_future() {
  if constexpr (requires { P::needs_future; }) {
    return static_cast<bool>(P::needs_future);
  } else {
    return false;
  }
}

}  // namespace detail

/// Optional capabilities of a policy, defaulted from its members (as Abseil's policy
/// traits are); specialise to override.
///
///   needs_future      the policy reads `access_info::next_use` (declared by a member
///                     `static constexpr bool needs_future = true`); callers must feed it;
///   has_admission     `cp.admit(k, i, must_evict) -> bool` is asked on a demand miss,
///                     before any eviction; false leaves the miss unadmitted (served, not
///                     cached); `must_evict` says whether admitting would evict;
///   observes_layers   `p.on_layer_begin(batch_view)` before a layer's experts are fetched
///                     (the router's final selection) and `p.on_layer_end(layer)` after;
///   observes_steps    `p.on_step_end()` at the end of each forward pass;
///   observes_bypass   `p.on_bypass(k, i)` for a demand miss that was not cached;
///   admits_prefetches `cp.admit_prefetch(k, i, must_evict) -> bool` is asked by a prefetch
///                     of a non-resident `k`, before any eviction or byte moved; false
///                     drops the prefetch (nothing moves); without it a prefetch is always
///                     admitted (CXL-MoE §3: the prefetcher's request is the admission);
///   takes_hints       `p.on_hint(k, confidence)`: a predictor flags `k` as likely needed;
///   observes_prefetch `p.on_prefetch(k, i)`: a prefetch of an expert already resident;
///   takes_capacity_weights  `P(s, c, w)` with `capacity_weights w`: the cache builds the
///                     policy this way, telling it what each expert weighs against
///                     capacity (the size-aware policy reads expert sizes from it).
template <class P>
struct policy_traits {
  static constexpr bool needs_future = detail::declared_needs_future<P>();
  static constexpr bool has_admission = requires(const P& cp, expert_key k, const access_info& i, bool must_evict) {
    { cp.admit(k, i, must_evict) } -> std::convertible_to<bool>;
  };
  static constexpr bool admits_prefetches = requires(const P& cp, expert_key k, const access_info& i, bool must_evict) {
    { cp.admit_prefetch(k, i, must_evict) } -> std::convertible_to<bool>;
  };
  static constexpr bool observes_layers = requires(P & p, const batch_view& b, layer_id l) {
    p.on_layer_begin(b);
    p.on_layer_end(l);
  };
  static constexpr bool observes_steps = requires(P & p) { p.on_step_end(); };
  static constexpr bool observes_bypass = requires(P & p, expert_key k, const access_info& i) { p.on_bypass(k, i); };
  static constexpr bool takes_hints = requires(P & p, expert_key k, float c) { p.on_hint(k, c); };
  static constexpr bool observes_prefetch = requires(P & p, expert_key k, const access_info& i) {
    p.on_prefetch(k, i);
  };
  static constexpr bool takes_capacity_weights =
      std::constructible_from<P, const cache_shape&, const typename P::config_type&, const capacity_weights&>;
};

}  // namespace moepolicy
