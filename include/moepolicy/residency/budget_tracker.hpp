// moepolicy/residency/budget_tracker.hpp — the global byte budget that gates every
// transition (DynaExq, "Dynamic Expert Quantization for Scalable Mixture-of-Experts
// Inference", §3.3 "Budget model and OOM safety", §2.5 (i) "Hard budget invariance").
//
// `try_reserve(n)` admits n bytes only if the reservations then stay within the cap; a
// successful reservation guarantees that the allocation it stands for will not run the
// device out of memory. `release(n)` returns bytes when a version is reclaimed.
//
// Thread-safe and lock-free: one atomic counter updated by a compare-and-swap loop, so the
// sum of reservations never exceeds the cap at any instant, whatever the interleaving (all
// read-modify-writes of one atomic are totally ordered; each admits n only after seeing a
// value v with v + n <= cap, and the swap succeeds only if v is still current).
//
// Memory orders: the counter carries no data of its own, but a reservation stands for
// memory a releasing thread gave back, so a successful CAS is `acquire` and `release` is a
// `release` RMW: whatever the releasing thread did to the memory before giving it back
// happens-before the admitted thread's use of it. Failed attempts and observers are
// `relaxed`. The peak is a `fetch_max`-style CAS loop on a second counter, exact because it
// records the value each successful reservation installed.
#pragma once

#include <atomic>
#include <cstdint>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"

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

}  // namespace moepolicy
