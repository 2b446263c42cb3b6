// moepolicy/residency/block_pool.hpp — a fixed-granularity pool over a preallocated arena
// (DynaExq, "Dynamic Expert Quantization for Scalable Mixture-of-Experts Inference", §3.3
// "Partitioned pools" and "Fixed-granularity allocation").
//
// The expert-weight region is split into disjoint pools with one role each — `pool_hi` for
// high-precision versions, `pool_lo` for low-precision ones — and each pool hands out
// blocks of one fixed size from a constant-time free list, never calling a general-purpose
// allocator after construction (§3.3: "allocation and free are simple pointer operations").
// One pool per block size; we size a block to one expert version (the paper aligns blocks
// to "large granularities comparable to expert size"), so a version is one block. An
// engine that composes a version from several smaller blocks allocates them one by one.
//
// The arena is either owned (host memory, allocated and aligned at construction: tests,
// examples, a CPU engine) or borrowed: any `std::span<std::byte>` the caller keeps alive,
// for instance a device allocation viewed through its address. The pool never reads or
// writes the blocks, so a device address is fine.
//
// Free list: a Treiber stack of block indices, lock-free. The head packs a 32-bit index and
// a 32-bit tag incremented by every successful push or pop, so a pop that read a stale
// `next` fails its CAS instead of corrupting the list (the ABA problem; a tag repeats only
// after 2^32 operations inside one pop's window). The links live in a separate array of
// atomics, not in the blocks, which may be device memory. We chose lock-free over a small
// mutex because the same pool may be shared by several pipelines and by teardown code, and
// a lock-free O(1) pop/push never makes the worker wait behind a preempted thread; the
// cost is one CAS per operation either way. ThreadSanitizer-clean by construction: every
// shared word is atomic, and a block's bytes pass between threads through the
// release (push) / acquire (pop) pair on the head.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <span>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

/// One block of a `block_pool`: its index and its bytes. A default block is empty.
struct pool_block {
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t index = none;
  std::span<std::byte> data;

  [[nodiscard]] explicit operator bool() const noexcept { return index != none; }
};

/// Fixed-size blocks from a preallocated arena with an O(1) lock-free free list
/// (DynaExq §3.3).
class block_pool {
 public:
  /// A pool owning a host arena of `num_blocks` blocks of `block_bytes`, each aligned to
  /// `alignment` (a power of two).
  ///
  /// Throws: `invalid_argument` when `block_bytes` is 0 or not a multiple of `alignment`,
  /// `alignment` is not a power of two, or `num_blocks` is 0 or above 2^32 − 2;
  /// `std::bad_alloc` when the arena cannot be allocated.
  /// Complexity: O(num_blocks); the only allocation.
  block_pool(bytes block_bytes, std::size_t num_blocks, std::size_t alignment = 256)
      : block_(block_bytes), blocks_(num_blocks) {
    constexpr std::string_view fn = "block_pool";
    if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
      detail::throw_invalid(fn, "alignment must be a power of two", alignment);
    }
    check(fn, block_bytes, num_blocks);
    if (block_bytes % alignment != 0)
      detail::throw_invalid(fn, "block_bytes must be a multiple of alignment", block_bytes);
    const auto total = static_cast<std::size_t>(block_bytes) * num_blocks;
    owned_ = std::unique_ptr<std::byte[], aligned_delete>(
        static_cast<std::byte*>(::operator new (total, std::align_val_t{alignment})), aligned_delete{alignment});
    base_ = owned_.get();
    link();
  }

  /// A pool over a borrowed arena, cut into `arena.size() / block_bytes` blocks (a tail
  /// shorter than a block is unused). The caller keeps the arena alive and aligned.
  ///
  /// Throws: `invalid_argument` when `block_bytes` is 0 or the arena holds no block or
  /// more than 2^32 − 2 blocks.
  block_pool(std::span<std::byte> arena, bytes block_bytes)
      : block_(block_bytes), blocks_(block_bytes == 0 ? 0 : static_cast<std::size_t>(arena.size() / block_bytes)) {
    check("block_pool", block_bytes, blocks_);
    base_ = arena.data();
    link();
  }

  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;

  /// Takes a free block.
  ///
  /// Returns: the block, or an empty one when the pool is exhausted.
  /// Complexity: lock-free, O(1) expected; no allocation.
  [[nodiscard]] pool_block try_allocate() noexcept {
    std::uint64_t head = head_.load(std::memory_order_acquire);
    for (;;) {
      const std::uint32_t idx = index_of(head);
      if (idx == pool_block::none) {
        exhausted_.fetch_add(1, std::memory_order_relaxed);
        return {};
      }
      // May be stale if another thread popped idx meanwhile; the tag then fails the CAS.
      const std::uint32_t next = next_[idx].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, pack(next, tag_of(head) + 1), std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
        const std::size_t used = in_use_.fetch_add(1, std::memory_order_relaxed) + 1;
        std::size_t peak = peak_.load(std::memory_order_relaxed);
        while (used > peak && !peak_.compare_exchange_weak(peak, used, std::memory_order_relaxed)) {
        }
        return {idx, block_data(idx)};
      }
    }
  }

  /// Returns a block taken from this pool.
  ///
  /// Preconditions: `b` came from this pool's `try_allocate` and was not returned since
  /// (its index is asserted to be in range).
  /// Complexity: lock-free, O(1) expected; no allocation.
  void deallocate(pool_block b) noexcept {
    MOEPOLICY_ASSERT(b.index < blocks_);
    MOEPOLICY_ASSERT(b.data.data() == base_ + static_cast<std::size_t>(b.index) * block_);
    std::uint64_t head = head_.load(std::memory_order_relaxed);
    do {
      next_[b.index].store(index_of(head), std::memory_order_relaxed);
    } while (!head_.compare_exchange_weak(head, pack(b.index, tag_of(head) + 1), std::memory_order_release,
                                          std::memory_order_relaxed));
    [[maybe_unused]] const std::size_t before = in_use_.fetch_sub(1, std::memory_order_relaxed);
    MOEPOLICY_ASSERT(before > 0);
  }

  /// The bytes of block `index`.
  [[nodiscard]] std::span<std::byte> block_data(std::uint32_t index) const noexcept {
    MOEPOLICY_ASSERT(index < blocks_);
    return {base_ + static_cast<std::size_t>(index) * block_, static_cast<std::size_t>(block_)};
  }

  /// Bytes per block.
  [[nodiscard]] bytes block_bytes() const noexcept { return block_; }
  /// Blocks in the pool.
  [[nodiscard]] std::size_t num_blocks() const noexcept { return blocks_; }
  /// Blocks handed out now (exact when no call is in progress).
  [[nodiscard]] std::size_t in_use() const noexcept { return in_use_.load(std::memory_order_relaxed); }
  /// Blocks free now (exact when no call is in progress).
  [[nodiscard]] std::size_t free_blocks() const noexcept { return blocks_ - in_use(); }
  /// The most blocks ever handed out at once.
  [[nodiscard]] std::size_t peak_in_use() const noexcept { return peak_.load(std::memory_order_relaxed); }
  /// Allocations refused because the pool was empty.
  [[nodiscard]] std::uint64_t exhausted() const noexcept { return exhausted_.load(std::memory_order_relaxed); }
  /// The arena.
  [[nodiscard]] std::span<std::byte> arena() const noexcept {
    return {base_, static_cast<std::size_t>(block_) * blocks_};
  }

 private:
  struct aligned_delete {
    std::size_t alignment;
    void operator()(std::byte* p) const noexcept { ::operator delete (p, std::align_val_t{alignment}); }
  };

  static void check(std::string_view fn, bytes block_bytes, std::size_t num_blocks) {
    if (block_bytes == 0) detail::throw_invalid(fn, "block_bytes must be > 0", block_bytes);
    if (num_blocks == 0 || num_blocks >= pool_block::none) {
      detail::throw_invalid(fn, "the pool must hold between 1 and 2^32 - 2 blocks", num_blocks);
    }
  }

  static constexpr std::uint64_t pack(std::uint32_t index, std::uint64_t tag) noexcept { return (tag << 32) | index; }
  static constexpr std::uint32_t index_of(std::uint64_t head) noexcept { return static_cast<std::uint32_t>(head); }
  static constexpr std::uint64_t tag_of(std::uint64_t head) noexcept { return head >> 32; }

  void link() {
    next_ = std::make_unique<std::atomic<std::uint32_t>[]>(blocks_);
    for (std::size_t i = 0; i < blocks_; ++i) {
      next_[i].store(i + 1 < blocks_ ? static_cast<std::uint32_t>(i + 1) : pool_block::none, std::memory_order_relaxed);
    }
    head_.store(pack(0, 0), std::memory_order_release);
  }

  bytes block_;
  std::size_t blocks_;
  std::unique_ptr<std::byte[], aligned_delete> owned_{nullptr, aligned_delete{1}};
  std::byte* base_ = nullptr;
  std::unique_ptr<std::atomic<std::uint32_t>[]> next_;
  std::atomic<std::uint64_t> head_{0};
  std::atomic<std::size_t> in_use_{0};
  std::atomic<std::size_t> peak_{0};
  std::atomic<std::uint64_t> exhausted_{0};
};

}  // namespace moepolicy
