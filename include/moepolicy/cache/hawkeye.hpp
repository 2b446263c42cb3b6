// SPDX-License-Identifier: Apache-2.0
// moepolicy/cache/hawkeye.hpp — eviction that learns from Belady's decisions on the past
// (Hawkeye: Jain & Lin, "Back to the Future: Leveraging Belady's Algorithm for Improved
// Cache Replacement", ISCA 2016). Models `EvictionPolicy`; observes layers and bypassed
// misses; has admission (off by default).
//
// Hawkeye reconstructs what Belady's MIN would have done on the recent past (its
// OPTgen), trains a predictor on those decisions, and evicts what the predictor calls
// cache-averse first. Here, per capacity pool, rule by rule:
//   - time: every demand access to the pool (hit, cached miss, miss not cached) is one
//     step of the pool's clock; prefetches are not demand accesses and do not count;
//   - OPTgen: an occupancy vector over the last W = `window_factor` × C
//     steps (C: the pool's capacity in experts, `capacity`, or when 0 the most residents
//     the pool has held so far — the capacity once it has filled). When expert x is
//     accessed at time t and was last accessed at t' with t − t' <= W, MIN would have hit
//     iff every occupancy in [t', t) is below C; then x's interval is admitted (those
//     occupancies +1). An access whose previous one lies more than W steps back counts as a
//     MIN miss (Hawkeye's sampler has forgotten it); a first access trains nothing;
//   - predictor (Hawkeye's PC-indexed predictor): one saturating counter of `counter_bits` bits per (layer,
//     expert) — the expert is this cache's "PC"; a MIN hit increments x's counter, a MIN
//     miss decrements it. x is cache-friendly while the counter's top bit is set (>= 2^(b−1)),
//     averse otherwise; counters start at 2^(b−1) (weakly friendly), so an expert with no
//     history is cached as LRU caches it. Training precedes the prediction of the same
//     access;
//   - replacement (Hawkeye's RRIP-based policy): an expert's class is fixed by the prediction at its last
//     insert or hit (RRIP's insertion position). The victim is the least recently used
//     averse resident; when none is resident, the least recently used friendly one, and its
//     counter is decremented (the predictor called it friendly and it is leaving
//     unreused; Hawkeye detrains then, `detrain_on_eviction`). Hawkeye ages friendly lines
//     with 3-bit RRIP values capped at 6; without the cap those ages order the friendly
//     lines exactly as LRU does, which is what is kept here (ties cannot occur);
//   - the experts selected for the layer in progress (`on_layer_begin`) are shielded until
//     `on_layer_end` (Edge-MoE §5.3's protection shield): their use is now, so MIN would
//     keep them; they return to their class's list as most recently used;
//   - admission (`bypass_averse`, off by default): a miss predicted averse that would
//     force an eviction is not cached (served from the slow tier), as a last-level
//     cache may bypass. Admission reads the counter before the access trains it.
// Only past accesses are read: `access_info::next_use` is ignored.
//
// Cost. Per slot 8 + 1 bytes; per pool a ring of `window_factor` × (C, or the pool's slots
// when C is inferred) occupancies of 4 bytes; allocated at construction. An access costs
// O(1), plus O(t − t') (at most W) to admit an interval MIN would have kept: the question
// itself is O(1), since occupancies never exceed C and the latest saturated step decides
// it; `victim` O(1).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/layer_shield.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `hawkeye_policy`.
struct hawkeye_config {
  /// C: the capacity of each pool in experts that OPTgen simulates; 0 infers it as the
  /// most residents the pool has held so far. At most the pool's experts (a larger cache
  /// never evicts).
  std::uint64_t capacity = 0;
  /// The OPTgen window in multiples of C, in [1, 64]; Hawkeye keeps a history of 8 × the
  /// associativity.
  std::uint32_t window_factor = 8;
  /// Bits of each saturating counter, in [1, 8]; Hawkeye's predictor uses 3.
  std::uint32_t counter_bits = 3;
  /// Decrement the counter of a friendly expert evicted for lack of averse ones.
  bool detrain_on_eviction = true;
  /// Do not cache a miss predicted averse when caching it would evict.
  bool bypass_averse = false;
};

/// Evicts experts that Belady's MIN, replayed over the recent past, would not have kept.
class hawkeye_policy {
 public:
  using config_type = hawkeye_config;

  /// Throws: `invalid_argument` naming `hawkeye_policy` when `window_factor` is outside
  /// [1, 64], `counter_bits` outside [1, 8], or `capacity` exceeds a pool's experts.
  explicit hawkeye_policy(const cache_shape& shape, const hawkeye_config& cfg = {})
      : shape_(shape),
        cfg_(checked(cfg, shape)),
        threshold_(static_cast<std::uint8_t>(1u << (cfg.counter_bits - 1))),
        max_counter_(static_cast<std::uint8_t>((1u << cfg.counter_bits) - 1)),
        fixed_capacity_(cfg.capacity),
        ring_(cfg.window_factor * (fixed_capacity_ != 0 ? fixed_capacity_ : shape.partition_slots())),
        friendly_(shape),
        averse_(shape),
        last_(shape.slots(), 0),
        counter_(shape.slots(), threshold_),
        resident_(shape.slots(), 0),
        shield_(shape),
        clock_(shape.partitions(), 0),
        residents_(shape.partitions(), 0),
        capacity_(shape.partitions(), fixed_capacity_),
        saturated_(shape.partitions(), 0),
        occupancy_(shape.partitions() * ring_, 0) {}

  /// Complexity of the demand events: O(1) plus the occupancy scan (see the header).
  void on_insert(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    const std::size_t p = shape_.partition_of(k);
    ++residents_[p];
    if (fixed_capacity_ == 0 && residents_[p] > capacity_[p]) {
      // A larger C: no occupancy (each at most the old C) is saturated any more.
      capacity_[p] = residents_[p];
      saturated_[p] = 0;
    }
    if (!i.prefetch) train(f, p);
    resident_[f] = 1;
    if (!shield_.shielded(f)) place(f);
  }
  void on_hit(expert_key k, const access_info&) noexcept {
    const std::size_t f = shape_.flat(k);
    train(f, shape_.partition_of(k));
    if (shield_.shielded(f)) return;
    unplace(f);
    place(f);
  }
  void on_bypass(expert_key k, const access_info&) noexcept {
    const std::size_t f = shape_.flat(k);
    train(f, shape_.partition_of(k));
  }
  void on_evict(expert_key k) noexcept {
    const std::size_t f = shape_.flat(k);
    const std::size_t p = shape_.partition_of(k);
    if (cfg_.detrain_on_eviction && friendly_.contains(f) && averse_.size(p) == 0 && counter_[f] > 0) --counter_[f];
    if (!shield_.shielded(f)) unplace(f);
    resident_[f] = 0;
    --residents_[p];
  }

  /// Shields the batch's selected experts (their use is now: Belady would never evict
  /// them) until `on_layer_end` of the layer, as Edge-MoE §5.3's protection shield does.
  /// Complexity: O(selected).
  void on_layer_begin(const batch_view& b) noexcept {
    const std::size_t base = static_cast<std::size_t>(b.ref.layer) * shape_.num_experts;
    shield_.shield(base, b.experts, [&](std::size_t f) {
      if (resident_[f] != 0) unplace(f);
    });
  }
  /// Revokes the shields of layer `l`: its residents return as most recently used, each
  /// classed by its counter now. Complexity: O(shielded).
  void on_layer_end(layer_id l) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0) place(f);
    });
  }

  /// Returns: false for a miss predicted averse that would evict, when `bypass_averse`.
  [[nodiscard]] bool admit(expert_key k, const access_info&, bool must_evict) const noexcept {
    return !cfg_.bypass_averse || !must_evict || counter_[shape_.flat(k)] >= threshold_;
  }

  /// Returns: the least recently used averse resident of pool `part`, else its least
  /// recently used friendly resident, or nothing when the pool is empty. Complexity: O(1).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    auto f = averse_.back(part);
    if (!f) f = friendly_.back(part);
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

  /// Whether `k` is predicted cache-friendly now.
  [[nodiscard]] bool friendly(expert_key k) const noexcept { return counter_[shape_.flat(k)] >= threshold_; }
  /// The saturating counter of `k`.
  [[nodiscard]] std::uint32_t counter(expert_key k) const noexcept { return counter_[shape_.flat(k)]; }
  /// The capacity OPTgen simulates for pool `part` now.
  [[nodiscard]] std::uint64_t simulated_capacity(std::size_t part) const noexcept { return capacity_[part]; }

 private:
  static hawkeye_config checked(const hawkeye_config& c, const cache_shape& shape) {
    constexpr std::string_view fn = "hawkeye_policy";
    if (c.capacity > shape.partition_slots()) {
      detail::throw_invalid(
          fn, "capacity exceeds the experts of a pool (" + std::to_string(shape.partition_slots()) + ")", c.capacity);
    }
    if (c.window_factor < 1 || c.window_factor > 64)
      detail::throw_invalid(fn, "window_factor must be in [1, 64]", c.window_factor);
    if (c.counter_bits < 1 || c.counter_bits > 8)
      detail::throw_invalid(fn, "counter_bits must be in [1, 8]", c.counter_bits);
    return c;
  }

  void place(std::size_t f) noexcept {
    if (counter_[f] >= threshold_) {
      friendly_.push_front(f);
    } else {
      averse_.push_front(f);
    }
  }
  void unplace(std::size_t f) noexcept {
    if (friendly_.contains(f)) {
      friendly_.erase(f);
    } else {
      averse_.erase(f);
    }
  }

  /// Adds 1 to each of `occ[0, n)`; returns the last index whose occupancy reached `C`, or
  /// `n` when none did. Blocks of 16 without a branch per entry (the compiler vectorises
  /// them), and a backward search only in a block where one reached C.
  static std::size_t admit_run(std::uint32_t* occ, std::size_t n, std::uint64_t C) noexcept {
    // Occupancies are >= 1 after the increment, so a C beyond 32 bits (never reached) maps
    // to 0, which no entry equals.
    const std::uint32_t c = C > UINT32_MAX ? 0 : static_cast<std::uint32_t>(C);
    constexpr std::size_t block = 16;
    std::size_t last = n;
    std::size_t j = 0;
    for (; j + block <= n; j += block) {
      std::uint32_t full = 0;
      for (std::size_t i = 0; i < block; ++i) {
        occ[j + i] += 1;
        full |= static_cast<std::uint32_t>(occ[j + i] == c);
      }
      if (full != 0) {
        for (std::size_t i = block; i-- > 0;) {
          if (occ[j + i] == c) {
            last = j + i;
            break;
          }
        }
      }
    }
    for (; j < n; ++j) {
      if (++occ[j] == c) last = j;
    }
    return last;
  }

  /// OPTgen on the access to slot `f` of pool `p` now, and the counter update.
  void train(std::size_t f, std::size_t p) noexcept {
    const std::uint64_t now = clock_[p]++;
    std::uint32_t* occ = occupancy_.data() + p * ring_;
    occ[now % ring_] = 0;
    const std::uint64_t prev = last_[f];
    last_[f] = now + 1;  // 0: never accessed
    if (prev == 0) return;
    const std::uint64_t since = prev - 1;
    const std::uint64_t C = capacity_[p];
    const std::uint64_t window = std::min<std::uint64_t>(cfg_.window_factor * C, ring_);
    // Occupancies never exceed C, so [since, now) has room iff no step in it is saturated,
    // i.e. iff the latest saturated step lies before `since`: O(1) for the question, one
    // pass over the interval to admit it.
    const bool hit = C > 0 && now - since <= window && saturated_[p] <= since;
    if (hit) {
      // [since, now) in the ring: one or two contiguous runs.
      const std::size_t a = since % ring_;
      const std::size_t len = now - since;
      const std::size_t first = std::min(len, ring_ - a);
      std::size_t last_full = ring_;  // the last run index that reached C
      if (const std::size_t j = admit_run(occ + a, first, C); j != first) last_full = j;
      if (const std::size_t j = admit_run(occ, len - first, C); j != len - first) last_full = first + j;
      if (last_full != ring_) saturated_[p] = since + last_full + 1;
    }
    if (hit) {
      if (counter_[f] < max_counter_) ++counter_[f];
    } else if (counter_[f] > 0) {
      --counter_[f];
    }
  }

  cache_shape shape_;
  hawkeye_config cfg_;
  std::uint8_t threshold_;
  std::uint8_t max_counter_;
  std::uint64_t fixed_capacity_;
  std::size_t ring_;                   // occupancy entries per pool
  detail::partitioned_list friendly_;  // friendly residents, most recent first
  detail::partitioned_list averse_;    // averse residents, most recent first
  std::vector<std::uint64_t> last_;    // per slot: pool time of the last demand access + 1, 0 never
  std::vector<std::uint8_t> counter_;  // per slot: the saturating counter
  std::vector<std::uint8_t> resident_;
  detail::layer_shield shield_;
  std::vector<std::uint64_t> clock_;  // per pool: demand accesses so far
  std::vector<std::uint64_t> residents_;
  std::vector<std::uint64_t> capacity_;   // per pool: C
  std::vector<std::uint64_t> saturated_;  // per pool: the latest step whose occupancy is C, + 1; 0 none
  std::vector<std::uint32_t> occupancy_;  // per pool: the OPTgen ring
};

static_assert(EvictionPolicy<hawkeye_policy>);
static_assert(policy_traits<hawkeye_policy>::has_admission && policy_traits<hawkeye_policy>::observes_bypass);
static_assert(!policy_traits<hawkeye_policy>::needs_future);

}  // namespace moepolicy
