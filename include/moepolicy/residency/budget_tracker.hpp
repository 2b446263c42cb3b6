// moepolicy/residency/budget_tracker.hpp — the byte budgets that gate every transition
// (DynaExq, "Dynamic Expert Quantization for Scalable Mixture-of-Experts Inference", §3.3
// "Budget model and OOM safety" and "temporary staging buffers", §3.4 "ensures that the
// temporary pool has sufficient capacity", §2.5 (i) "Hard budget invariance").
//
// `budget_tracker` is one cap: `try_reserve(n)` admits n bytes only if the reservations then
// stay within it; `release(n)` returns bytes when a version is reclaimed.
//
// `residency_budget` is the global tracker of §3.3 as the paper splits it: the expert region
// M − M_res is divided into an upper bound for high-precision residency (M_hi), one for
// low-precision residency (M_lo), and the temporary pool (M_stage), each its own
// `budget_tracker`. Each guards one pool's arena, reservations are in the pool's block bytes,
// and a cap is at most the pool's blocks × block bytes, so a successful reservation
// guarantees that the allocation it stands for finds a block (§3.3: "a successful
// reservation guarantees that subsequent allocation from pool_hi will not trigger
// out-of-memory failures"). The three caps sum to at most M − M_res, so nothing reserved can
// ever run the device out of memory.
//
// The temporary pool (our reading, documented in predict/precision_budget.hpp): transient
// second copies of one tier, the *staged* tier. With `low_version::replaced` a demotion copies
// the low version in while the high one is still resident; when M_lo is full (the plan's
// L·E − N low versions are resident) its reservation comes from M_stage instead. Staging
// blocks are blocks of the staged tier's pool, of the same size, so they are fungible with
// that tier's blocks: when any version of the staged tier is given back, the staging
// reservation is released first. A staged reservation therefore lasts exactly as long as the
// staged tier holds more versions than M_lo admits — the transient of §3.3 — and never makes
// a block move.
//
// Thread-safe and lock-free: each cap is one atomic counter updated by a compare-and-swap
// loop, so the sum of its reservations never exceeds it at any instant, whatever the
// interleaving (all read-modify-writes of one atomic are totally ordered; each admits n only
// after seeing a value v with v + n <= cap, and the swap succeeds only if v is still current).
//
// Memory orders: the counter carries no data of its own, but a reservation stands for
// memory a releasing thread gave back, so a successful CAS is `acquire` and `release` is a
// `release` RMW: whatever the releasing thread did to the memory before giving it back
// happens-before the admitted thread's use of it. Failed attempts and observers are
// `relaxed`. The peak is a `fetch_max`-style CAS loop on a second counter, exact because it
// records the value each successful reservation installed.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/residency/precision_tier.hpp"

namespace moepolicy {

/// Reservations of bytes against a fixed cap; never exceeds it (DynaExq §3.3).
class budget_tracker {
 public:
  /// A tracker with nothing reserved.
  explicit budget_tracker(bytes cap) noexcept : cap_(cap) {}

  budget_tracker(const budget_tracker&) = delete;
  budget_tracker& operator=(const budget_tracker&) = delete;

  /// Reserves `n` bytes if the reservations then stay within the cap.
  ///
  /// Returns: true when reserved; false, with nothing reserved, when `n` does not fit.
  /// Complexity: lock-free; O(1) expected, retries only while other threads change the
  /// counter. No allocation.
  [[nodiscard]] bool try_reserve(bytes n) noexcept {
    bytes cur = reserved_.load(std::memory_order_relaxed);
    do {
      if (n > cap_ - cur) {
        failures_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    } while (!reserved_.compare_exchange_weak(cur, cur + n, std::memory_order_acquire, std::memory_order_relaxed));
    const bytes now = cur + n;
    MOEPOLICY_ASSERT(now <= cap_);
    bytes peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return true;
  }

  /// Returns `n` previously reserved bytes.
  ///
  /// Preconditions: `n <= reserved()` counting only this caller's reservations (asserted
  /// against the total).
  /// Complexity: one atomic RMW; no allocation.
  void release(bytes n) noexcept {
    [[maybe_unused]] const bytes before = reserved_.fetch_sub(n, std::memory_order_release);
    MOEPOLICY_ASSERT(before >= n);
  }

  /// Returns `n` reserved bytes if at least `n` are reserved; otherwise nothing.
  ///
  /// Returns: whether it released them.
  /// Complexity: lock-free; no allocation.
  bool try_release(bytes n) noexcept {
    bytes cur = reserved_.load(std::memory_order_relaxed);
    do {
      if (cur < n) return false;
    } while (!reserved_.compare_exchange_weak(cur, cur - n, std::memory_order_release, std::memory_order_relaxed));
    return true;
  }

  /// The cap.
  [[nodiscard]] bytes cap() const noexcept { return cap_; }
  /// Bytes reserved now (a snapshot).
  [[nodiscard]] bytes reserved() const noexcept { return reserved_.load(std::memory_order_relaxed); }
  /// Bytes that a reservation could get now (a snapshot).
  [[nodiscard]] bytes available() const noexcept { return cap_ - reserved(); }
  /// The most bytes ever reserved at once; never above `cap()`.
  [[nodiscard]] bytes peak_reserved() const noexcept { return peak_.load(std::memory_order_relaxed); }
  /// Reservations refused so far.
  [[nodiscard]] std::uint64_t refused() const noexcept { return failures_.load(std::memory_order_relaxed); }

 private:
  const bytes cap_;
  std::atomic<bytes> reserved_{0};
  std::atomic<bytes> peak_{0};
  std::atomic<std::uint64_t> failures_{0};
};

/// Where a reservation of `residency_budget` was charged.
enum class budget_account : std::uint8_t {
  none,     ///< refused: nothing reserved
  tier,     ///< the tier's own bound (M_hi or M_lo)
  staging,  ///< the temporary pool (M_stage)
};

/// The three bounds of `residency_budget` (DynaExq §3.3).
struct residency_budget_config {
  /// M_hi: high-precision residency (pool_hi's arena, or less).
  bytes high_bytes = 0;
  /// M_lo: low-precision residency.
  bytes low_bytes = 0;
  /// M_stage: the temporary pool, transient copies of `staging_tier`.
  bytes staging_bytes = 0;
  /// The tier whose transient copies the temporary pool takes: `low` with
  /// `low_version::replaced` (a demotion's low copy beside the high one).
  precision_tier staging_tier = precision_tier::low;
};

/// The global budget tracker of DynaExq §3.3 with separate bounds for high- and
/// low-precision residency and the temporary pool; never exceeds any of them.
class residency_budget {
 public:
  /// Nothing reserved.
  explicit residency_budget(const residency_budget_config& c) noexcept
      : config_(c), high_(c.high_bytes), low_(c.low_bytes), staging_(c.staging_bytes) {}

  residency_budget(const residency_budget&) = delete;
  residency_budget& operator=(const residency_budget&) = delete;

  /// Reserves `n` bytes for a version of `tier`: from the tier's bound, else (when `tier` is
  /// the staged tier and `allow_staging`) from the temporary pool.
  ///
  /// Returns: where the bytes were charged; `none` with nothing reserved when neither fits.
  /// Complexity: lock-free, at most two CAS loops; no allocation.
  [[nodiscard]] budget_account try_reserve(precision_tier tier, bytes n, bool allow_staging = true) noexcept {
    if (of(tier).try_reserve(n)) {
      count(n);
      return budget_account::tier;
    }
    if (allow_staging && tier == config_.staging_tier && staging_.cap() > 0 && staging_.try_reserve(n)) {
      count(n);
      staged_.fetch_add(1, std::memory_order_relaxed);
      return budget_account::staging;
    }
    return budget_account::none;
  }

  /// Gives back `n` bytes of a version of `tier`. For the staged tier the temporary pool is
  /// released first (its blocks are fungible with the tier's): a staged transient ends as soon
  /// as any version of that tier is given back.
  ///
  /// Preconditions: `n` bytes of `tier` are reserved (asserted against the totals), and every
  /// reservation of the staged tier has one size (a pool's block), so that the temporary
  /// pool holds whole reservations.
  /// Complexity: lock-free; no allocation.
  void release(precision_tier tier, bytes n) noexcept {
    // The total goes down before the bounds and up after them, so it never exceeds their sum.
    [[maybe_unused]] const bytes before = total_.fetch_sub(n, std::memory_order_release);
    MOEPOLICY_ASSERT(before >= n);
    if (tier == config_.staging_tier && staging_.try_release(n)) return;
    of(tier).release(n);
  }

  /// M_hi's tracker.
  [[nodiscard]] const budget_tracker& high() const noexcept { return high_; }
  /// M_lo's tracker.
  [[nodiscard]] const budget_tracker& low() const noexcept { return low_; }
  /// The temporary pool's tracker.
  [[nodiscard]] const budget_tracker& staging() const noexcept { return staging_; }
  /// The tracker of `tier`'s own bound.
  [[nodiscard]] const budget_tracker& tier(precision_tier t) const noexcept {
    return t == precision_tier::high ? high_ : low_;
  }
  [[nodiscard]] const residency_budget_config& config() const noexcept { return config_; }
  /// M_hi + M_lo + M_stage.
  [[nodiscard]] bytes cap() const noexcept { return high_.cap() + low_.cap() + staging_.cap(); }
  /// Bytes reserved now, all bounds together (a snapshot).
  [[nodiscard]] bytes reserved() const noexcept { return total_.load(std::memory_order_relaxed); }
  /// The most bytes ever reserved at once, all bounds together (as the total recorded them:
  /// it rises after a bound admits and falls before a bound gives back); never above `cap()`.
  [[nodiscard]] bytes peak_reserved() const noexcept { return peak_.load(std::memory_order_relaxed); }
  /// Reservations charged to the temporary pool so far.
  [[nodiscard]] std::uint64_t staged() const noexcept { return staged_.load(std::memory_order_relaxed); }

 private:
  budget_tracker& of(precision_tier t) noexcept { return t == precision_tier::high ? high_ : low_; }

  void count(bytes n) noexcept {
    const bytes now = total_.fetch_add(n, std::memory_order_relaxed) + n;
    MOEPOLICY_ASSERT(now <= cap());
    bytes peak = peak_.load(std::memory_order_relaxed);
    while (now > peak && !peak_.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
  }

  residency_budget_config config_;
  budget_tracker high_, low_, staging_;
  std::atomic<bytes> total_{0};
  std::atomic<bytes> peak_{0};
  std::atomic<std::uint64_t> staged_{0};
};

}  // namespace moepolicy
