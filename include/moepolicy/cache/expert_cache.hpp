// moepolicy/cache/expert_cache.hpp — the expert cache container. Takes any `EvictionPolicy`.
//
// `expert_cache<P>` owns which experts are resident (in GPU memory, say), the capacity —
// counted in experts or in bytes, shared by all layers or per layer — and the statistics
// (hits, misses, admissions, rejections, evictions, prefetches, bytes). The policy `P`
// only orders residents and names victims. A demand access runs
//
//   get(k) = find k → hit?  done
//            miss: admit? (policies with admission)  → no: served, not cached
//                  evict victims of k's pool until k fits → insert k
//
// and a prefetch inserts the same way without asking for admission (CXL-MoE admits what
// the prefetcher requests, CXL-MoE §3) — unless the policy gates prefetches
// (`policy_traits::admits_prefetches`), when it is asked first and a refused prefetch moves
// nothing. The layer and step hooks (`begin_layer`,
// `end_layer`, `end_step`) and prefetch hints are forwarded to policies that take them
// (see `policy_traits` in cache/concepts.hpp).
//
// Everything after construction is noexcept and allocation-free; keys are checked only by
// `MOEPOLICY_ASSERT` (validate them at the boundary).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// The size and layout of an expert cache.
struct cache_config {
  /// MoE layers and routed experts per layer the cache may hold, each in [1, 65536].
  std::uint32_t num_layers = 0;
  std::uint32_t num_experts = 0;
  /// What the cache holds: this many experts (`unit == experts`) or bytes (`unit ==
  /// byte_count`), in all (`scope == shared`) or in each layer (`scope == per_layer`). 0
  /// is allowed: nothing is ever cached.
  std::uint64_t capacity = 0;
  capacity_unit unit = capacity_unit::experts;
  capacity_scope scope = capacity_scope::shared;
  /// Bytes of every expert, layer-major (`num_layers × num_experts` entries); empty: every
  /// expert weighs `expert_bytes`. Byte statistics use these in both units.
  std::vector<bytes> footprints = {};
  /// The size of every expert when `footprints` is empty; may be 0 for an experts-unit
  /// cache (byte statistics then stay 0).
  bytes expert_bytes = 0;

  [[nodiscard]] cache_shape shape() const noexcept { return {num_layers, num_experts, scope}; }
};

/// The footprint of every expert of `num_layers × num_experts` at `bits` as `device`
/// stores it, layer-major: `cache_config::footprints` from a device-cost model.
template <MemoryModel Device>
[[nodiscard]] std::vector<bytes> footprints_of(const Device& device, std::uint32_t num_layers,
                                               std::uint32_t num_experts, bitwidth bits) {
  std::vector<bytes> out;
  out.reserve(static_cast<std::size_t>(num_layers) * num_experts);
  for (std::uint32_t l = 0; l < num_layers; ++l) {
    for (std::uint32_t e = 0; e < num_experts; ++e) {
      out.push_back(device.footprint_bytes(expert_key{static_cast<layer_id>(l), static_cast<expert_id>(e)}, bits));
    }
  }
  return out;
}

/// What happened in a cache, since construction or `reset_stats`.
///
/// Identities (checked by the conformance suite):
///   accesses = hits + misses;  misses = admissions + rejections + overflows;
///   resident experts = preloads + admissions + prefetches − evictions − dropped.
struct cache_stats {
  /// Demand accesses (`get`).
  std::uint64_t accesses = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  /// Misses that were cached.
  std::uint64_t admissions = 0;
  /// Misses the policy declined to admit (served from the slow tier, not cached).
  std::uint64_t rejections = 0;
  /// Misses that could not be cached: larger than a pool, or no evictable victim left
  /// (every resident protected).
  std::uint64_t overflows = 0;
  std::uint64_t evictions = 0;
  /// Prefetches that inserted an expert; prefetches of residents; prefetches that found
  /// no room; prefetches the policy refused (`admits_prefetches`; nothing moved).
  std::uint64_t prefetches = 0;
  std::uint64_t prefetch_resident = 0;
  std::uint64_t prefetch_dropped = 0;
  std::uint64_t prefetch_rejected = 0;
  /// Demand hits on an expert that a prefetch inserted and nothing used since.
  std::uint64_t prefetch_hits = 0;
  /// Prefetched experts evicted (or dropped) before any use.
  std::uint64_t prefetch_wasted = 0;
  /// Experts inserted by `preload`; residents removed by `clear`.
  std::uint64_t preloads = 0;
  std::uint64_t dropped = 0;
  /// Bytes of the experts hit, of those fetched on a miss (served whether cached or not),
  /// and of those prefetched.
  bytes hit_bytes = 0;
  bytes demand_bytes = 0;
  bytes prefetch_bytes = 0;

  /// hits / accesses, or 0 without accesses.
  [[nodiscard]] double hit_ratio() const noexcept {
    return accesses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(accesses);
  }
  /// Adds another run's counts.
  cache_stats& operator+=(const cache_stats& o) noexcept {
    accesses += o.accesses, hits += o.hits, misses += o.misses, admissions += o.admissions;
    rejections += o.rejections, overflows += o.overflows, evictions += o.evictions;
    prefetches += o.prefetches, prefetch_resident += o.prefetch_resident, prefetch_dropped += o.prefetch_dropped;
    prefetch_rejected += o.prefetch_rejected;
    prefetch_hits += o.prefetch_hits, prefetch_wasted += o.prefetch_wasted, preloads += o.preloads;
    dropped += o.dropped, hit_bytes += o.hit_bytes, demand_bytes += o.demand_bytes;
    prefetch_bytes += o.prefetch_bytes;
    return *this;
  }
};

/// The outcome of one `get`.
struct access_outcome {
  bool hit = false;
  /// The miss was cached.
  bool inserted = false;
  /// Experts evicted to make room.
  std::uint32_t evicted = 0;
};

/// The outcome of one `prefetch`.
/// `rejected`: the policy's prefetch admission refused it (nothing moved).
enum class prefetch_outcome : std::uint8_t { inserted, already_resident, no_room, rejected };

/// An expert cache over the eviction policy `Policy`.
template <EvictionPolicy Policy>
class expert_cache {
 public:
  using policy_type = Policy;
  using policy_config = typename Policy::config_type;
  using traits = policy_traits<Policy>;

  /// Throws: `invalid_argument` naming `expert_cache` when a dimension is 0 or above
  /// 65536, `footprints` has neither 0 nor `num_layers × num_experts` entries, or a
  /// bytes-unit cache has an expert of 0 bytes; whatever `Policy`'s constructor throws
  /// for `policy_cfg`.
  explicit expert_cache(cache_config cfg, const policy_config& policy_cfg = {})
      : cfg_(validated(std::move(cfg))),
        shape_(cfg_.shape()),
        footprint_(footprints_or_default(cfg_)),
        weight_(cfg_.unit == capacity_unit::experts ? std::vector<std::uint64_t>(shape_.slots(), 1) : footprint_),
        policy_(make_policy(shape_, policy_cfg, {cfg_.unit, weight_})),
        resident_(shape_.slots(), 0),
        prefetched_unused_(shape_.slots(), 0),
        used_(shape_.partitions(), 0),
        resident_count_(0) {}

  [[nodiscard]] const cache_config& config() const noexcept { return cfg_; }
  [[nodiscard]] const cache_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
  [[nodiscard]] const cache_stats& stats() const noexcept { return stats_; }
  /// Zeroes the statistics; residency stays.
  void reset_stats() noexcept { stats_ = {}; }

  /// Whether `k` is resident.
  [[nodiscard]] bool contains(expert_key k) const noexcept { return resident_[checked_flat(k)] != 0; }
  /// Resident experts in all pools.
  [[nodiscard]] std::size_t resident_count() const noexcept { return resident_count_; }
  /// What pool `part` holds, in the capacity's unit.
  [[nodiscard]] std::uint64_t used(std::size_t part) const noexcept { return used_[part]; }
  /// Capacity of each pool, in its unit.
  [[nodiscard]] std::uint64_t capacity() const noexcept { return cfg_.capacity; }
  /// What `k` weighs against capacity (1, or its bytes).
  [[nodiscard]] std::uint64_t weight(expert_key k) const noexcept { return weight_[checked_flat(k)]; }

  /// A demand access to `k`: a hit, or a miss that is served and, if the policy admits it
  /// and room can be made, cached. `info.next_use` must be set for policies that need
  /// the future.
  ///
  /// Preconditions: `k` within the shape.
  /// Complexity: O(1) plus the policy's events, times the evictions; no allocation.
  access_outcome get(expert_key k, const access_info& info = {}) noexcept {
    const std::size_t f = checked_flat(k);
    ++stats_.accesses;
    if (resident_[f] != 0) {
      ++stats_.hits;
      stats_.hit_bytes += footprint_[f];
      if (prefetched_unused_[f] != 0) {
        ++stats_.prefetch_hits;
        prefetched_unused_[f] = 0;
      }
      policy_.on_hit(k, info);
      return {.hit = true};
    }
    ++stats_.misses;
    stats_.demand_bytes += footprint_[f];
    const std::size_t part = shape_.partition_of(k);
    if constexpr (traits::has_admission) {
      const bool must_evict = used_[part] + weight_[f] > cfg_.capacity;
      if (!policy_.admit(k, info, must_evict)) {
        ++stats_.rejections;
        bypassed(k, info);
        return {};
      }
    }
    std::uint32_t evicted = 0;
    if (!make_room(f, part, evicted)) {
      ++stats_.overflows;
      bypassed(k, info);
      return {.evicted = evicted};
    }
    insert(k, f, part, info);
    ++stats_.admissions;
    return {.inserted = true, .evicted = evicted};
  }

  /// A prefetch of `k` with the predictor's `confidence` in [0, 1]: inserts `k` (evicting
  /// as `get` does, without asking `admit`) unless it is resident, in which case the
  /// policy is told (`on_prefetch`) and nothing moves, or the policy gates prefetches and
  /// `admit_prefetch` refuses it (nothing moves either).
  ///
  /// Preconditions: `k` within the shape. Complexity: as `get`.
  prefetch_outcome prefetch(expert_key k, float confidence, access_info info = {}) noexcept {
    const std::size_t f = checked_flat(k);
    info.prefetch = true;
    info.confidence = confidence;
    if (resident_[f] != 0) {
      ++stats_.prefetch_resident;
      if constexpr (traits::observes_prefetch) policy_.on_prefetch(k, info);
      return prefetch_outcome::already_resident;
    }
    if constexpr (traits::admits_prefetches) {
      const bool must_evict = used_[shape_.partition_of(k)] + weight_[f] > cfg_.capacity;
      if (!policy_.admit_prefetch(k, info, must_evict)) {
        ++stats_.prefetch_rejected;
        return prefetch_outcome::rejected;
      }
    }
    std::uint32_t evicted = 0;
    if (!make_room(f, shape_.partition_of(k), evicted)) {
      ++stats_.prefetch_dropped;
      return prefetch_outcome::no_room;
    }
    insert(k, f, shape_.partition_of(k), info);
    ++stats_.prefetches;
    stats_.prefetch_bytes += footprint_[f];
    prefetched_unused_[f] = 1;
    return prefetch_outcome::inserted;
  }

  /// Places `k` before any traffic (the initial GPU-resident set of Edge-MoE §4.1),
  /// evicting if needed; counted as a preload, not a prefetch. Returns whether `k` is
  /// resident afterwards.
  bool preload(expert_key k) noexcept {
    const std::size_t f = checked_flat(k);
    if (resident_[f] != 0) return true;
    std::uint32_t evicted = 0;
    if (!make_room(f, shape_.partition_of(k), evicted)) return false;
    insert(k, f, shape_.partition_of(k), {});
    ++stats_.preloads;
    return true;
  }

  /// A predictor flags `k` as likely needed soon, with `confidence` in [0, 1]; forwarded
  /// to policies that take hints (prediction-gated admission, CXL-MoE §3).
  void hint(expert_key k, float confidence) noexcept {
    static_cast<void>(checked_flat(k));
    if constexpr (traits::takes_hints) policy_.on_hint(k, confidence);
  }

  /// The router's final selection for a layer, before its experts are fetched.
  void begin_layer(const batch_view& b) noexcept {
    if constexpr (traits::observes_layers) policy_.on_layer_begin(b);
  }
  /// The layer's computation is done.
  void end_layer(layer_id l) noexcept {
    if constexpr (traits::observes_layers) policy_.on_layer_end(l);
  }
  /// A forward pass is done.
  void end_step() noexcept {
    if constexpr (traits::observes_steps) policy_.on_step_end();
  }

  /// The expert the policy would evict from `k`'s pool now, or nothing.
  [[nodiscard]] std::optional<expert_key> victim_for(expert_key k) const noexcept {
    return policy_.victim(shape_.partition_of(k));
  }
  /// The expert the last eviction removed (valid once `stats().evictions` > 0): a caller
  /// that holds state per resident expert learns what a `get` or `prefetch` evicted without
  /// asking the policy for the victim beforehand.
  [[nodiscard]] expert_key last_evicted() const noexcept { return last_evicted_; }

  /// Removes `k` if it is resident (the caller gave up a copy it had started to bring in, or
  /// no longer wants it); counted as dropped, not evicted, and as a wasted prefetch when
  /// a prefetch inserted it and nothing used it since. Returns whether `k` was resident.
  ///
  /// Preconditions: `k` within the shape. Complexity: O(1) plus the policy's `on_evict`.
  bool erase(expert_key k) noexcept {
    const std::size_t f = checked_flat(k);
    if (resident_[f] == 0) return false;
    if (prefetched_unused_[f] != 0) ++stats_.prefetch_wasted;
    remove(f);
    ++stats_.dropped;
    return true;
  }

  /// Removes every resident (between independent runs); counted as dropped, not evicted.
  /// Complexity: O(slots).
  void clear() noexcept {
    for (std::size_t f = 0; f < shape_.slots(); ++f) {
      if (resident_[f] == 0) continue;
      if (prefetched_unused_[f] != 0) ++stats_.prefetch_wasted;
      remove(f);
      ++stats_.dropped;
    }
  }

 private:
  static cache_config validated(cache_config cfg) {
    constexpr std::string_view fn = "expert_cache";
    cfg.shape().validate(fn);
    const std::size_t slots = cfg.shape().slots();
    if (!cfg.footprints.empty() && cfg.footprints.size() != slots) {
      detail::throw_invalid(
          fn, "footprints must be empty or hold num_layers * num_experts = " + std::to_string(slots) + " entries",
          cfg.footprints.size());
    }
    if (cfg.unit == capacity_unit::byte_count) {
      if (cfg.footprints.empty() && cfg.expert_bytes == 0) {
        detail::throw_invalid(fn, "a bytes-unit cache needs footprints or expert_bytes > 0", cfg.expert_bytes);
      }
      for (std::size_t f = 0; f < cfg.footprints.size(); ++f) {
        if (cfg.footprints[f] == 0) {
          detail::throw_invalid(fn, "footprints must be > 0 in a bytes-unit cache; entry " + std::to_string(f),
                                cfg.footprints[f]);
        }
      }
    }
    return cfg;
  }

  static std::vector<bytes> footprints_or_default(const cache_config& c) {
    return c.footprints.empty() ? std::vector<bytes>(c.shape().slots(), c.expert_bytes) : c.footprints;
  }
  /// `Policy(s, c, w)` for policies that read the capacity weights, else `Policy(s, c)`.
  static Policy make_policy(const cache_shape& s, const policy_config& c, const capacity_weights& w) {
    if constexpr (traits::takes_capacity_weights) {
      return Policy(s, c, w);
    } else {
      return Policy(s, c);
    }
  }

  [[nodiscard]] std::size_t checked_flat(expert_key k) const noexcept {
    MOEPOLICY_ASSERT(k.layer < shape_.num_layers && k.expert < shape_.num_experts);
    return shape_.flat(k);
  }

  bool make_room(std::size_t f, std::size_t part, std::uint32_t& evicted) noexcept {
    const std::uint64_t w = weight_[f];
    if (w > cfg_.capacity) return false;
    while (used_[part] + w > cfg_.capacity) {
      const std::optional<expert_key> v = policy_.victim(part);
      if (!v) return false;
      const std::size_t vf = shape_.flat(*v);
      MOEPOLICY_ASSERT(resident_[vf] != 0 && shape_.partition_of(*v) == part);
      if (prefetched_unused_[vf] != 0) ++stats_.prefetch_wasted;
      remove(vf);
      ++stats_.evictions;
      ++evicted;
      last_evicted_ = *v;
    }
    return true;
  }

  void insert(expert_key k, std::size_t f, std::size_t part, const access_info& info) noexcept {
    resident_[f] = 1;
    used_[part] += weight_[f];
    ++resident_count_;
    policy_.on_insert(k, info);
  }

  void remove(std::size_t f) noexcept {
    const expert_key k = shape_.key(f);
    resident_[f] = 0;
    prefetched_unused_[f] = 0;
    used_[shape_.partition_of(k)] -= weight_[f];
    --resident_count_;
    policy_.on_evict(k);
  }

  void bypassed(expert_key k, const access_info& info) noexcept {
    if constexpr (traits::observes_bypass) policy_.on_bypass(k, info);
  }

  cache_config cfg_;
  cache_shape shape_;
  std::vector<bytes> footprint_;
  std::vector<std::uint64_t> weight_;  // against capacity: 1, or the footprint
  Policy policy_;
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint8_t> prefetched_unused_;
  std::vector<std::uint64_t> used_;
  std::size_t resident_count_;
  expert_key last_evicted_{};
  cache_stats stats_;
};

}  // namespace moepolicy
