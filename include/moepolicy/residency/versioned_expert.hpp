// moepolicy/residency/versioned_expert.hpp — Versioned Expert Residency (VER): stable expert
// handles that always resolve to a complete version (DynaExq, "Dynamic Expert
// Quantization for Scalable Mixture-of-Experts Inference", §3.2, and §3.1 "window-level
// pinning").
//
// Each expert (layer, expert) has a stable handle: the address of one atomic pointer to an
// immutable version record (precision tier, bits, data span, version number, checksum).
// Resolving a handle is ONE atomic load. A new version is written while invisible and then
// published by one atomic store (publish-then-switch, §3.2), so no reader ever sees a
// partly written version. The old version is reclaimed only after publication and only
// once no reader can still hold it.
//
// States (§3.2), with `absent` added for an expert not yet loaded:
//   resident_low   only the low version is resident (with `low_version::replaced`), or the
//                  handle points at the low version (with `kept`);
//   resident_high  the handle points at the high version;
//   promoting      the high version is being copied in; the handle still points at the low;
//   demoting       the low version is being copied in (`replaced` only); the handle still
//                  points at the high;
//   evicting       the handle was switched to the remaining version; the old one awaits its
//                  grace period, after which its storage returns to its pool.
// One transition at a time per expert: a new one may begin only from a resident state.
//
// Reclamation: epoch-based, with a fixed set of registered readers.
//   Reader (wait-free, allocation-free):
//     pin      g = epoch.load(seq_cst); slot.store(g, seq_cst)      — `reader_slot::pin()`
//     resolve  p = active.load(seq_cst); use *p                     — `expert_handle::resolve`
//     unpin    slot.store(0, release)                               — `~read_guard`
//   Writer (one at a time; `transition_pipeline` serialises it):
//     publish  active.store(new, seq_cst); t = epoch.fetch_add(1, seq_cst); retire old at t
//     reclaim  old is free once every slot holds 0 or a value > t (slots loaded seq_cst).
//   Why it is safe. (a) A slot value v > t was read from the epoch after the fetch_add that
//   follows the publishing store; that load acquires, so the store happens-before the
//   reader's resolve, which therefore sees the new pointer (or a later one). (b) A slot seen
//   as 0 either was written by the reader's unpin — the scan's load reads a release store,
//   so everything the reader did with the old version happens-before the reclamation — or
//   precedes the reader's next pin in the slot's modification order; then the scan precedes
//   that pin in the single total order S of seq_cst operations, and the publishing store
//   (which strongly happens-before the scan: same thread, or through the pipeline's step
//   mutex) precedes the pin and hence the resolve in S, so the resolve (seq_cst) returns
//   the new pointer or a later one. (c) Any other value <= t means the reader may hold the
//   old version: wait. We use seq_cst operations instead of standalone
//   `atomic_thread_fence`s, which ThreadSanitizer does not model and g++ warns about under
//   -fsanitize=thread. Cost: on x86-64 a seq_cst load is the same `mov` as an acquire load,
//   and the pin's seq_cst store is one `xchg` per guard; on AArch64 both loads are `ldar`.
//   Record contents and the copied bytes are published by the store (release) and read
//   after the resolving load (acquire), so a reader sees them complete.
//
// Hold a guard for one forward pass or window (§3.1 "window-level pinning"): a guard held
// forever blocks reclamation, and with it the budget. An engine whose kernels run
// asynchronously keeps the guard until those kernels have finished.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/residency/block_pool.hpp"
#include "moepolicy/residency/precision_tier.hpp"

namespace moepolicy {

/// An expert's residency state (DynaExq §3.2), plus `absent` before its first load.
enum class residency_state : std::uint8_t { absent, resident_low, resident_high, promoting, demoting, evicting };

/// The state's name as the paper writes it ("Resident-Lo", …; "absent").
[[nodiscard]] constexpr std::string_view to_string(residency_state s) noexcept {
  switch (s) {
    case residency_state::absent:
      return "absent";
    case residency_state::resident_low:
      return "Resident-Lo";
    case residency_state::resident_high:
      return "Resident-Hi";
    case residency_state::promoting:
      return "Promoting";
    case residency_state::demoting:
      return "Demoting";
    case residency_state::evicting:
      return "Evicting";
  }
  return "?";
}

/// FNV-1a over bytes: the checksum a `version_source` may carry and a reader may verify.
///
/// Complexity: O(data.size()); no allocation.
[[nodiscard]] inline std::uint64_t fnv1a_checksum(std::span<const std::byte> data) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (std::byte b : data) {
    h ^= static_cast<std::uint64_t>(b);
    h *= 1099511628211ull;
  }
  return h;
}

/// A prepared version of an expert in host memory, the source of its copies (§4: "prepared
/// offline into high- and low-precision versions in kernel-ready layouts").
struct version_source {
  /// The packed weights (and quantisation parameters, in whatever layout the kernel reads).
  std::span<const std::byte> bytes;
  /// A checksum of `bytes`, copied into every version made from it (for example
  /// `fnv1a_checksum(bytes)`; 0 when unused).
  std::uint64_t checksum = 0;
  /// Bits per weight, for the kernel (0 when unused).
  std::uint8_t bits = 0;
};

/// A complete version of an expert, as readers see it. Immutable from publication until
/// reclamation.
struct expert_version {
  expert_key key;
  precision_tier tier = precision_tier::low;
  /// Bits per weight, from the source.
  std::uint8_t bits = 0;
  /// The expert's copy number: 1 for its first materialised version, +1 for each later one.
  /// Re-activating a kept low version (`low_version::kept`) shows its original number.
  std::uint64_t version = 0;
  /// The source's checksum.
  std::uint64_t checksum = 0;
  /// The version's bytes (in the pool's memory: host or device).
  std::span<const std::byte> data;
};

/// Storage behind a version, handed back by the table when the version is reclaimed so
/// that the caller returns the block to its pool and the bytes to its budget tracker.
struct version_storage {
  block_pool* pool = nullptr;
  pool_block block;
  bytes reserved = 0;
};

/// Configuration of `versioned_expert_table`.
struct versioned_table_config {
  /// Whether a high version replaces the low one or sits beside it.
  low_version low = low_version::replaced;
  /// Reader slots (threads that may hold a guard at the same time).
  std::size_t max_readers = 64;
};

class versioned_expert_table;
class read_guard;

/// A stable handle of one expert: its address never changes while the table lives.
class expert_handle {
 public:
  expert_handle() = default;

  /// The expert's current version: ONE atomic load (seq_cst; see the header comment).
  ///
  /// Preconditions: the handle is not empty; `guard` is pinned on this handle's table; the
  /// expert was loaded (its state is not `absent`) (asserted).
  /// Complexity: one atomic load; wait-free.
  [[nodiscard]] const expert_version& resolve([[maybe_unused]] const read_guard& guard) const noexcept {
    const expert_version* v = active_->load(std::memory_order_seq_cst);
    MOEPOLICY_ASSERT(v != nullptr);
    return *v;
  }

  [[nodiscard]] explicit operator bool() const noexcept { return active_ != nullptr; }

 private:
  friend class versioned_expert_table;
  explicit expert_handle(const std::atomic<const expert_version*>* p) noexcept : active_(p) {}
  const std::atomic<const expert_version*>* active_ = nullptr;
};

namespace detail {

struct alignas(64) reader_state {
  std::atomic<std::uint64_t> epoch{0};  // 0: quiescent; else the epoch pinned
  std::atomic<bool> claimed{false};
};

struct version_slot {
  expert_version record;
  version_storage storage;
  bool live = false;
};

// Writer-only bookkeeping of one expert; readers touch only `versioned_expert_table::active_`.
struct ver_entry {
  std::array<version_slot, 2> slot;
  std::uint8_t active = 0;  // slot the handle points at (when live)
  std::uint8_t other = 0;   // slot being prepared or retired
  std::uint64_t retire_epoch = 0;
  std::uint64_t next_version = 1;
  std::atomic<residency_state> state{residency_state::absent};
  std::atomic<precision_tier> serving{precision_tier::low};
};

}  // namespace detail

/// Proof that a reader is pinned: while it lives, no version it resolves is reclaimed.
/// Move-only; unpins on destruction.
class read_guard {
 public:
  read_guard(read_guard&& o) noexcept
      : table_(std::exchange(o.table_, nullptr)), slot_(std::exchange(o.slot_, nullptr)) {}
  read_guard& operator=(read_guard&&) = delete;
  read_guard(const read_guard&) = delete;
  read_guard& operator=(const read_guard&) = delete;
  ~read_guard() {
    if (slot_ != nullptr) slot_->epoch.store(0, std::memory_order_release);
  }

  /// `h.resolve(*this)`.
  [[nodiscard]] const expert_version& resolve(expert_handle h) const noexcept { return h.resolve(*this); }
  /// Resolves the handle of `key` on the guard's table.
  [[nodiscard]] const expert_version& resolve(expert_key key) const noexcept;

 private:
  friend class reader_slot;
  read_guard(const versioned_expert_table* t, detail::reader_state* s) noexcept : table_(t), slot_(s) {}
  const versioned_expert_table* table_;
  detail::reader_state* slot_;
};

/// A registered reader of a table (one per thread that resolves handles). Move-only;
/// gives its slot back on destruction.
class reader_slot {
 public:
  reader_slot(reader_slot&& o) noexcept
      : table_(std::exchange(o.table_, nullptr)), slot_(std::exchange(o.slot_, nullptr)) {}
  reader_slot& operator=(reader_slot&&) = delete;
  reader_slot(const reader_slot&) = delete;
  reader_slot& operator=(const reader_slot&) = delete;
  ~reader_slot() {
    if (slot_ != nullptr) {
      MOEPOLICY_ASSERT(slot_->epoch.load(std::memory_order_relaxed) == 0);
      slot_->claimed.store(false, std::memory_order_release);
    }
  }

  /// Pins the reader for a window: until the guard dies, the versions it resolves stay.
  ///
  /// Preconditions: the slot is not pinned already (asserted).
  /// Complexity: one load and one store; wait-free, no allocation.
  [[nodiscard]] read_guard pin() const noexcept;

 private:
  friend class versioned_expert_table;
  reader_slot(const versioned_expert_table* t, detail::reader_state* s) noexcept : table_(t), slot_(s) {}
  const versioned_expert_table* table_;
  detail::reader_state* slot_;
};

/// The handle table of VER (DynaExq §3.2, §4 "a persistent handle table").
///
/// Readers: `register_reader`, `reader_slot::pin`, `expert_handle::resolve` — thread-safe,
/// wait-free. Observers (`state`, `serving_tier`, …) — thread-safe snapshots. Writer
/// (`install`, `begin`, `publish`, `switch_to_low`, `reclaim`, `evict`) — one thread at a
/// time; `transition_pipeline` is the usual writer.
class versioned_expert_table {
 public:
  /// Every expert starts `absent`.
  ///
  /// Throws: `invalid_argument` when a dimension is 0 or above 65536, or `max_readers` is 0.
  /// Complexity: O(L · E + max_readers); the only allocation.
  versioned_expert_table(std::size_t num_layers, std::size_t num_experts, const versioned_table_config& config = {})
      : layers_(num_layers), experts_(num_experts), config_(config) {
    constexpr std::string_view fn = "versioned_expert_table";
    if (num_layers == 0 || num_layers > 65536)
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", num_layers);
    if (num_experts == 0 || num_experts > 65536) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts);
    }
    if (config.max_readers == 0) detail::throw_invalid(fn, "max_readers must be > 0", config.max_readers);
    active_ = std::make_unique<std::atomic<const expert_version*>[]>(size());
    entries_ = std::make_unique<detail::ver_entry[]>(size());
    readers_ = std::make_unique<detail::reader_state[]>(config.max_readers);
    for (std::size_t i = 0; i < size(); ++i) {
      for (auto& s : entries_[i].slot) s.record.key = key_of(i);
    }
  }

  versioned_expert_table(const versioned_expert_table&) = delete;
  versioned_expert_table& operator=(const versioned_expert_table&) = delete;

  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }
  /// L · E.
  [[nodiscard]] std::size_t size() const noexcept { return layers_ * experts_; }
  [[nodiscard]] const versioned_table_config& config() const noexcept { return config_; }
  /// `layer * num_experts() + expert`.
  [[nodiscard]] std::size_t index_of(expert_key k) const noexcept {
    MOEPOLICY_ASSERT(k.layer < layers_ && k.expert < experts_);
    return k.flat(experts_);
  }
  /// The key of flat index `i`.
  [[nodiscard]] expert_key key_of(std::size_t i) const noexcept {
    MOEPOLICY_ASSERT(i < size());
    return {static_cast<layer_id>(i / experts_), static_cast<expert_id>(i % experts_)};
  }

  // ---- readers ------------------------------------------------------------------------

  /// The stable handle of `key`.
  [[nodiscard]] expert_handle handle(expert_key key) const noexcept { return expert_handle(&active_[index_of(key)]); }

  /// Claims a reader slot for the calling thread.
  ///
  /// Throws: `invalid_argument` when all `max_readers` slots are taken.
  /// Complexity: O(max_readers); no allocation.
  [[nodiscard]] reader_slot register_reader() {
    for (std::size_t i = 0; i < config_.max_readers; ++i) {
      bool expected = false;
      if (!readers_[i].claimed.load(std::memory_order_relaxed) &&
          readers_[i].claimed.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
        return reader_slot(this, &readers_[i]);
      }
    }
    detail::throw_invalid("versioned_expert_table::register_reader", "all max_readers reader slots are taken",
                          config_.max_readers);
  }

  // ---- observers (snapshots; exact only when the writer is idle) -----------------------

  /// The expert's residency state.
  [[nodiscard]] residency_state state(expert_key key) const noexcept {
    return entries_[index_of(key)].state.load(std::memory_order_acquire);
  }
  /// The tier the handle points at (meaningless while `absent`).
  [[nodiscard]] precision_tier serving_tier(expert_key key) const noexcept {
    return entries_[index_of(key)].serving.load(std::memory_order_acquire);
  }
  /// The current reclamation epoch.
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_.load(std::memory_order_relaxed); }
  /// Readers pinned now.
  [[nodiscard]] std::size_t pinned_readers() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < config_.max_readers; ++i) n += readers_[i].epoch.load(std::memory_order_relaxed) != 0;
    return n;
  }

  // ---- writer (one thread at a time) ----------------------------------------------------

  /// Versions retired at an epoch below the returned value can no longer be held by any
  /// reader (see the header comment). `max()` when no reader is pinned.
  ///
  /// Complexity: O(max_readers) seq_cst loads; no allocation.
  [[nodiscard]] std::uint64_t safe_epoch() const noexcept {
    std::uint64_t safe = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t i = 0; i < config_.max_readers; ++i) {
      const std::uint64_t v = readers_[i].epoch.load(std::memory_order_seq_cst);
      if (v != 0 && v < safe) safe = v;
    }
    return safe;
  }

  /// Makes the first version of an absent expert visible. The bytes in `storage.block`
  /// must already hold a complete copy of `source`.
  ///
  /// Preconditions: `state(key) == absent`; `source.bytes.size() <= storage.block.data.size()`;
  /// `tier == low` when the table keeps low versions (asserted).
  void install(expert_key key, precision_tier tier, const version_storage& storage,
               const version_source& source) noexcept {
    detail::ver_entry& e = entries_[index_of(key)];
    MOEPOLICY_ASSERT(e.state.load(std::memory_order_relaxed) == residency_state::absent);
    MOEPOLICY_ASSERT(config_.low == low_version::replaced || tier == precision_tier::low);
    prepare(e, 0, tier, storage, source);
    e.active = 0;
    e.other = 1;
    active_[index_of(key)].store(&e.slot[0].record, std::memory_order_seq_cst);
    e.serving.store(tier, std::memory_order_release);
    e.state.store(tier == precision_tier::high ? residency_state::resident_high : residency_state::resident_low,
                  std::memory_order_release);
  }

  /// Begins a transition to `tier`: records a new, still invisible version backed by
  /// `storage` and moves the expert to `promoting` or `demoting`. The caller then copies
  /// `source` into the returned span and calls `publish` once the copy is complete.
  ///
  /// Preconditions: the expert is `resident_low` (for `high`) or, with `replaced`,
  /// `resident_high` (for `low`); the source fits the block (asserted).
  /// Returns: the bytes to fill, `source.bytes.size()` long.
  [[nodiscard]] std::span<std::byte> begin(expert_key key, precision_tier tier, const version_storage& storage,
                                           const version_source& source) noexcept {
    detail::ver_entry& e = entries_[index_of(key)];
    [[maybe_unused]] const residency_state s = e.state.load(std::memory_order_relaxed);
    MOEPOLICY_ASSERT(tier == precision_tier::high
                         ? s == residency_state::resident_low
                         : (s == residency_state::resident_high && config_.low == low_version::replaced));
    const std::uint8_t free = free_slot(e);
    prepare(e, free, tier, storage, source);
    e.other = free;
    e.state.store(tier == precision_tier::high ? residency_state::promoting : residency_state::demoting,
                  std::memory_order_release);
    return storage.block.data.first(source.bytes.size());
  }

  /// What `publish` and `switch_to_low` did with the version they replaced.
  struct publish_result {
    /// True when the replaced version retired and awaits `reclaim` (state `evicting`).
    bool retired = false;
    /// The epoch it retired at: reclaimable once `safe_epoch()` exceeds it.
    std::uint64_t retire_epoch = 0;
    /// The published version.
    const expert_version* version = nullptr;
  };

  /// Publishes the version begun by `begin` (publish-then-switch, §3.2): one atomic store
  /// makes it visible. With `replaced`, and with `kept` for a demotion, the previous
  /// version retires (state `evicting`); a promotion with `kept` keeps the low version
  /// resident (state `resident_high`).
  ///
  /// Preconditions: the expert is `promoting` or `demoting`, and the copy is complete.
  publish_result publish(expert_key key) noexcept {
    const std::size_t i = index_of(key);
    detail::ver_entry& e = entries_[i];
    [[maybe_unused]] const residency_state s = e.state.load(std::memory_order_relaxed);
    MOEPOLICY_ASSERT(s == residency_state::promoting || s == residency_state::demoting);
    const std::uint8_t fresh = e.other, old = e.active;
    active_[i].store(&e.slot[fresh].record, std::memory_order_seq_cst);
    const precision_tier tier = e.slot[fresh].record.tier;
    e.serving.store(tier, std::memory_order_release);
    e.active = fresh;
    e.other = old;
    publish_result r{false, 0, &e.slot[fresh].record};
    if (config_.low == low_version::kept && tier == precision_tier::high) {
      e.state.store(residency_state::resident_high, std::memory_order_release);
      return r;
    }
    r.retired = true;
    r.retire_epoch = retire(e);
    return r;
  }

  /// Demotes with `low_version::kept`: switches the handle back to the resident low
  /// version; the high version retires (state `evicting`).
  ///
  /// Preconditions: the table keeps low versions and the expert is `resident_high`.
  publish_result switch_to_low(expert_key key) noexcept {
    const std::size_t i = index_of(key);
    detail::ver_entry& e = entries_[i];
    MOEPOLICY_ASSERT(config_.low == low_version::kept);
    MOEPOLICY_ASSERT(e.state.load(std::memory_order_relaxed) == residency_state::resident_high);
    const std::uint8_t low = e.other, high = e.active;
    MOEPOLICY_ASSERT(e.slot[low].live && e.slot[low].record.tier == precision_tier::low);
    active_[i].store(&e.slot[low].record, std::memory_order_seq_cst);
    e.serving.store(precision_tier::low, std::memory_order_release);
    e.active = low;
    e.other = high;
    return {true, retire(e), &e.slot[low].record};
  }

  /// Ends the grace period of the expert's retired version and hands back its storage;
  /// the state becomes resident again.
  ///
  /// Preconditions: the expert is `evicting`; `safe` was returned by a `safe_epoch()` call
  /// made after the retirement, and the retire epoch is below it (asserted).
  /// Note: a fresh scan may show a *smaller* safe epoch than `safe` — a reader that read the
  /// epoch before the retirement but announced it after the earlier scan — and that is
  /// harmless: such a reader resolves the new version (case (b) of the header comment). So
  /// the decision rests on the caller's scan, not on a second one.
  [[nodiscard]] version_storage reclaim(expert_key key, [[maybe_unused]] std::uint64_t safe) noexcept {
    detail::ver_entry& e = entries_[index_of(key)];
    MOEPOLICY_ASSERT(e.state.load(std::memory_order_relaxed) == residency_state::evicting);
    MOEPOLICY_ASSERT(e.retire_epoch < safe);
    detail::version_slot& s = e.slot[e.other];
    MOEPOLICY_ASSERT(s.live);
    s.live = false;
    const version_storage out = std::exchange(s.storage, version_storage{});
    e.state.store(e.slot[e.active].record.tier == precision_tier::high ? residency_state::resident_high
                                                                       : residency_state::resident_low,
                  std::memory_order_release);
    return out;
  }

  /// The epoch at which the expert's version retired (meaningful while `evicting`).
  [[nodiscard]] std::uint64_t retire_epoch(expert_key key) const noexcept {
    return entries_[index_of(key)].retire_epoch;
  }

  /// Teardown: drops every version of a resident expert and writes their storage into
  /// `out` (up to two entries); the expert becomes `absent`.
  ///
  /// Preconditions: the expert is `resident_low` or `resident_high`; no reader is pinned
  /// (asserted), since the handle stops resolving.
  /// Returns: how many storages were written.
  std::size_t evict(expert_key key, std::span<version_storage, 2> out) noexcept {
    const std::size_t i = index_of(key);
    detail::ver_entry& e = entries_[i];
    [[maybe_unused]] const residency_state s = e.state.load(std::memory_order_relaxed);
    MOEPOLICY_ASSERT(s == residency_state::resident_low || s == residency_state::resident_high);
    MOEPOLICY_ASSERT(pinned_readers() == 0);
    active_[i].store(nullptr, std::memory_order_seq_cst);
    std::size_t n = 0;
    for (auto& slot : e.slot) {
      if (slot.live) {
        slot.live = false;
        out[n++] = std::exchange(slot.storage, version_storage{});
      }
    }
    e.state.store(residency_state::absent, std::memory_order_release);
    return n;
  }

 private:
  friend class reader_slot;
  friend class read_guard;

  static std::uint8_t free_slot(const detail::ver_entry& e) noexcept {
    MOEPOLICY_ASSERT(!(e.slot[0].live && e.slot[1].live));
    return e.slot[0].live ? 1 : 0;
  }

  static void prepare(detail::ver_entry& e, std::uint8_t i, precision_tier tier, const version_storage& storage,
                      const version_source& source) noexcept {
    MOEPOLICY_ASSERT(source.bytes.size() <= storage.block.data.size());
    detail::version_slot& s = e.slot[i];
    s.record.tier = tier;
    s.record.bits = source.bits;
    s.record.version = e.next_version++;
    s.record.checksum = source.checksum;
    s.record.data = storage.block.data.first(source.bytes.size());
    s.storage = storage;
    s.live = true;
  }

  std::uint64_t retire(detail::ver_entry& e) noexcept {
    e.retire_epoch = epoch_.fetch_add(1, std::memory_order_seq_cst);
    e.state.store(residency_state::evicting, std::memory_order_release);
    return e.retire_epoch;
  }

  std::size_t layers_, experts_;
  versioned_table_config config_;
  std::unique_ptr<std::atomic<const expert_version*>[]> active_;
  std::unique_ptr<detail::ver_entry[]> entries_;
  std::unique_ptr<detail::reader_state[]> readers_;
  std::atomic<std::uint64_t> epoch_{1};
};

inline read_guard reader_slot::pin() const noexcept {
  MOEPOLICY_ASSERT(slot_ != nullptr && slot_->epoch.load(std::memory_order_relaxed) == 0);
  slot_->epoch.store(table_->epoch_.load(std::memory_order_seq_cst), std::memory_order_seq_cst);
  return read_guard(table_, slot_);
}

inline const expert_version& read_guard::resolve(expert_key key) const noexcept {
  return table_->handle(key).resolve(*this);
}

}  // namespace moepolicy
