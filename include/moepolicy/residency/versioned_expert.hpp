// moepolicy/residency/versioned_expert.hpp — Versioned Expert Residency (VER): stable expert
// handles that always resolve to a complete version, one per pinned window (DynaExq,
// "Dynamic Expert Quantization for Scalable Mixture-of-Experts Inference", §3.2, and §3.1,
// §3.4 "window-level pinning").
//
// Each expert (layer, expert) has a stable handle: the address of one atomic pointer to an
// immutable version record (precision tier, bits, data span, version number, checksum).
// Resolving a handle is one atomic load plus a read of the record it finds (below). A new
// version is written while invisible and then
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
// One transition at a time per expert: a new one may begin only from a resident state, once
// the expert has settled (below).
//
// Reclamation and window pinning: epoch-based, with a fixed set of registered readers.
//   A reader pins a *window* (one forward pass, §3.1/§3.4 "window-level pinning") at an
//   epoch g; for the whole window it sees, for every handle, the newest version published
//   before g, however often it resolves and whatever is published meanwhile; a version
//   published during the window becomes visible at the reader's next window (§3.1: "the new
//   version becomes visible at the next iteration"). So gate, up and down launches, micro-
//   batches or tensor-parallel shards of one pass all run one precision per expert.
//   Each version record carries `visible_from` (the epoch from which it is seen) and
//   `previous` (the version it replaced). One transition at a time per expert, and a new
//   one only after every reader pinned before the last publication has unpinned (the
//   expert has *settled*; `settled`), so a pinned reader meets at most one publication per
//   expert and the version it needs is the newest or the one before.
//   Reader (wait-free, allocation-free):
//     pin      g = epoch.load(); do { slot.store(g); g' = epoch.load(); } until g' == g
//                                                                        — `reader_slot::pin()`
//     resolve  p = active.load(); if p.visible_from > g: p = p.previous; use *p
//                                                                        — `expert_handle::resolve`
//     unpin    slot.store(0, release)                                   — `~read_guard`
//   Writer (one at a time; `transition_pipeline` serialises it):
//     publish  t = epoch (the writer alone changes it); new.visible_from = t + 1;
//              new.previous = old; active.store(new); epoch.fetch_add(1) (returns t);
//              old retires at t, and the expert settles at t
//     reclaim  old is free, and the expert settled, once every slot holds 0 or a value > t
//              (slots loaded seq_cst: `safe_epoch`).
//   Every atomic operation here is seq_cst unless marked, so all of them lie in one total
//   order S. Why it is safe:
//   (a) The pin's loop ends only when the slot holds g and a later load still reads g, so
//       the slot store precedes, in S, the increment that took the epoch past g. Hence any
//       publication at t >= g scans after it and sees g (or a later value of the slot): the
//       version it retires stays while the reader is pinned. (Without the second load a
//       reader could announce a stale g after a scan and resolve a reclaimed `previous`.)
//   (b) A reader pinned at g > t read an epoch value written by, or after, the increment that
//       follows the publishing store, so its resolves (later in S) load the new pointer or a
//       later one, and the new version's visible_from = t + 1 <= g: it uses the new version
//       and never the one retired at t.
//   (c) A reader pinned at g <= t that loads the new pointer finds visible_from > g and
//       takes `previous`, the old version, which (a) keeps alive; one that still loads the
//       old pointer uses it. Either way every resolve in its window returns the old version.
//       That `previous` is the version the reader saw before: the expert's previous
//       publication settled before this transition began, i.e. every reader pinned before it
//       had left, so this reader pinned after it and g >= its visible_from.
//   (d) A slot seen as 0 was written by the reader's unpin — the scan's load reads a release
//       store, so everything the reader did with a version happens-before its reclamation —
//       or precedes the reader's next pin, which then falls under (b).
//   We use seq_cst operations instead of standalone `atomic_thread_fence`s, which
//   ThreadSanitizer does not model and g++ warns about under -fsanitize=thread. Cost: on
//   x86-64 a seq_cst load is the same `mov` as an acquire load, and the pin's seq_cst store
//   is one `xchg` per window; on AArch64 both loads are `ldar`. A resolve is one atomic load
//   of the handle and one (relaxed) load of the record it points at, which the caller reads
//   anyway. Record contents and the copied bytes are published by the store (release) and
//   read after the resolving load (acquire), so a reader sees them complete.
//
// Hold a guard for one forward pass or window (§3.1 "window-level pinning"): a guard held
// forever blocks reclamation, and with it the budget, and keeps showing the old mapping. An
// engine whose kernels run asynchronously keeps the guard until those kernels have finished.
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
/// that the caller returns the block to its pool and the bytes to its budget.
struct version_storage {
  block_pool* pool = nullptr;
  pool_block block;
  /// Bytes reserved for it (the pool's block bytes, in `transition_pipeline`).
  bytes reserved = 0;
  /// The tier whose bound the bytes were reserved in.
  precision_tier tier = precision_tier::low;
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

namespace detail {

struct alignas(64) reader_state {
  std::atomic<std::uint64_t> epoch{0};  // 0: quiescent; else the epoch pinned
  std::atomic<bool> claimed{false};
};

// A version record with its place in the mapping: readers pinned at g see it when
// g >= visible_from, else `previous`. The two mapping fields change only when the record is
// (re)published, which happens only after every reader that could read them has left (the
// expert settled); they are atomics so that the proof, not luck, keeps them race-free.
struct mapped_version {
  expert_version record;
  std::atomic<std::uint64_t> visible_from{0};
  std::atomic<const mapped_version*> previous{nullptr};
};

struct version_slot {
  mapped_version mapped;
  version_storage storage;
  bool live = false;
};

// Writer-only bookkeeping of one expert; readers touch only `versioned_expert_table::active_`
// and the mapped records.
struct ver_entry {
  std::array<version_slot, 2> slot;
  std::uint8_t active = 0;  // slot the handle points at (when live)
  std::uint8_t other = 0;   // slot being prepared or retired
  std::uint64_t retire_epoch = 0;
  std::uint64_t settle_epoch = 0;  // epoch of the last publication; 0: none since install
  std::uint64_t next_version = 1;
  std::atomic<residency_state> state{residency_state::absent};
  std::atomic<precision_tier> serving{precision_tier::low};
};

}  // namespace detail

/// A stable handle of one expert: its address never changes while the table lives.
class expert_handle {
 public:
  expert_handle() = default;

  /// The expert's version in the guard's window: the newest published before the window
  /// was pinned, the same on every call until the guard dies (see the header comment).
  ///
  /// Preconditions: the handle is not empty; `guard` is pinned on this handle's table; the
  /// expert was loaded (its state is not `absent`) (asserted).
  /// Complexity: one atomic load of the handle and one relaxed load of the record; wait-free.
  [[nodiscard]] const expert_version& resolve(const read_guard& guard) const noexcept;

  [[nodiscard]] explicit operator bool() const noexcept { return active_ != nullptr; }

 private:
  friend class versioned_expert_table;
  explicit expert_handle(const std::atomic<const detail::mapped_version*>* p) noexcept : active_(p) {}
  const std::atomic<const detail::mapped_version*>* active_ = nullptr;
};

/// Proof that a reader is pinned for a window: while it lives, every handle resolves to one
/// version, and no version it resolves is reclaimed. Move-only; unpins on destruction.
class read_guard {
 public:
  read_guard(read_guard&& o) noexcept
      : table_(std::exchange(o.table_, nullptr)), slot_(std::exchange(o.slot_, nullptr)), epoch_(o.epoch_) {}
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
  /// The epoch the window is pinned at: versions published before it are visible.
  [[nodiscard]] std::uint64_t epoch() const noexcept { return epoch_; }

 private:
  friend class reader_slot;
  read_guard(const versioned_expert_table* t, detail::reader_state* s, std::uint64_t epoch) noexcept
      : table_(t), slot_(s), epoch_(epoch) {}
  const versioned_expert_table* table_;
  detail::reader_state* slot_;
  std::uint64_t epoch_;
};

inline const expert_version& expert_handle::resolve(const read_guard& guard) const noexcept {
  const detail::mapped_version* m = active_->load(std::memory_order_seq_cst);
  MOEPOLICY_ASSERT(m != nullptr);
  if (m->visible_from.load(std::memory_order_relaxed) > guard.epoch()) {
    m = m->previous.load(std::memory_order_relaxed);  // published during the window: not yet
    MOEPOLICY_ASSERT(m != nullptr);
  }
  return m->record;
}

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

  /// Pins the reader for a window: until the guard dies, each handle resolves to one
  /// version (the newest published before this call), and none of them is reclaimed.
  ///
  /// Preconditions: the slot is not pinned already (asserted).
  /// Complexity: two loads and a store, repeated only while a publication lands in between;
  /// lock-free, no allocation.
  [[nodiscard]] read_guard pin() const noexcept;

 private:
  friend class versioned_expert_table;
  reader_slot(const versioned_expert_table* t, detail::reader_state* s) noexcept : table_(t), slot_(s) {}
  const versioned_expert_table* table_;
  detail::reader_state* slot_;
};

/// What `versioned_expert_table::evict` did.
enum class evict_status : std::uint8_t {
  evicted,          ///< the expert is absent now; its storages were written out
  absent,           ///< it was not loaded: nothing done
  in_transition,    ///< it is promoting, demoting or evicting: nothing done
  readers_pinned,   ///< a reader is pinned and could still resolve it: nothing done
};

/// The outcome of `versioned_expert_table::evict`.
struct evict_result {
  evict_status status = evict_status::absent;
  /// Storages written (0, 1 or 2).
  std::size_t storages = 0;
};

/// The handle table of VER (DynaExq §3.2, §4 "a persistent handle table").
///
/// Readers: `register_reader`, `reader_slot::pin`, `expert_handle::resolve` — thread-safe,
/// lock-free (resolution wait-free). Observers (`state`, `serving_tier`, …) — thread-safe
/// snapshots. Writer (`install`, `begin`, `publish`, `switch_to_low`, `reclaim`, `evict`) —
/// one thread at a time; `transition_pipeline` is the usual writer.
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
    active_ = std::make_unique<std::atomic<const detail::mapped_version*>[]>(size());
    entries_ = std::make_unique<detail::ver_entry[]>(size());
    readers_ = std::make_unique<detail::reader_state[]>(config.max_readers);
    for (std::size_t i = 0; i < size(); ++i) {
      for (auto& s : entries_[i].slot) s.mapped.record.key = key_of(i);
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
  /// The tier of the newest published version, the one a window pinned now sees
  /// (meaningless while `absent`).
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

  /// Versions retired (and publications made) at an epoch below the returned value can no
  /// longer be held, or seen as the newest-but-one, by any reader (see the header comment).
  /// `max()` when no reader is pinned.
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

  /// Whether every reader pinned before the expert's last publication has left, given a
  /// `safe_epoch()` scan made after that publication: only then may a new transition of the
  /// expert begin (one publication per expert per pinned window).
  [[nodiscard]] bool settled(expert_key key, std::uint64_t safe) const noexcept {
    const std::uint64_t t = entries_[index_of(key)].settle_epoch;
    return t == 0 || t < safe;
  }

  /// Makes the first version of an absent expert visible, to every window. The bytes in
  /// `storage.block` must already hold a complete copy of `source`.
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
    e.settle_epoch = 0;
    detail::mapped_version& m = e.slot[0].mapped;
    m.visible_from.store(0, std::memory_order_relaxed);
    m.previous.store(nullptr, std::memory_order_relaxed);
    active_[index_of(key)].store(&m, std::memory_order_seq_cst);
    e.serving.store(tier, std::memory_order_release);
    e.state.store(tier == precision_tier::high ? residency_state::resident_high : residency_state::resident_low,
                  std::memory_order_release);
  }

  /// Begins a transition to `tier`: records a new, still invisible version backed by
  /// `storage` and moves the expert to `promoting` or `demoting`. The caller then copies
  /// `source` into the returned span and calls `publish` once the copy is complete.
  ///
  /// Preconditions: the expert is `resident_low` (for `high`) or, with `replaced`,
  /// `resident_high` (for `low`) (asserted), and `settled` (the pipeline checks it); the
  /// source fits the block (asserted).
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
    /// The epoch of the publication: the expert settles once `safe_epoch()` exceeds it.
    std::uint64_t settle_epoch = 0;
    /// The published version.
    const expert_version* version = nullptr;
  };

  /// Publishes the version begun by `begin` (publish-then-switch, §3.2): one atomic store
  /// makes it visible to windows pinned from now on; windows already pinned keep the
  /// previous version. With `replaced`, and with `kept` for a demotion, the previous
  /// version retires (state `evicting`); a promotion with `kept` keeps the low version
  /// resident (state `resident_high`; the expert still settles before its next transition).
  ///
  /// Preconditions: the expert is `promoting` or `demoting`, and the copy is complete.
  publish_result publish(expert_key key) noexcept {
    const std::size_t i = index_of(key);
    detail::ver_entry& e = entries_[i];
    [[maybe_unused]] const residency_state s = e.state.load(std::memory_order_relaxed);
    MOEPOLICY_ASSERT(s == residency_state::promoting || s == residency_state::demoting);
    const std::uint8_t fresh = e.other, old = e.active;
    const std::uint64_t t = switch_active(i, e, fresh, old);
    const precision_tier tier = e.slot[fresh].mapped.record.tier;
    publish_result r{false, 0, t, &e.slot[fresh].mapped.record};
    if (config_.low == low_version::kept && tier == precision_tier::high) {
      e.state.store(residency_state::resident_high, std::memory_order_release);
      return r;
    }
    r.retired = true;
    r.retire_epoch = retire(e, t);
    return r;
  }

  /// Demotes with `low_version::kept`: switches the handle back to the resident low
  /// version (for windows pinned from now on); the high version retires (state `evicting`).
  ///
  /// Preconditions: the table keeps low versions, the expert is `resident_high` (asserted)
  /// and `settled` (the pipeline checks it).
  publish_result switch_to_low(expert_key key) noexcept {
    const std::size_t i = index_of(key);
    detail::ver_entry& e = entries_[i];
    MOEPOLICY_ASSERT(config_.low == low_version::kept);
    MOEPOLICY_ASSERT(e.state.load(std::memory_order_relaxed) == residency_state::resident_high);
    const std::uint8_t low = e.other, high = e.active;
    MOEPOLICY_ASSERT(e.slot[low].live && e.slot[low].mapped.record.tier == precision_tier::low);
    const std::uint64_t t = switch_active(i, e, low, high);
    return {true, retire(e, t), t, &e.slot[low].mapped.record};
  }

  /// Ends the grace period of the expert's retired version and hands back its storage;
  /// the state becomes resident again.
  ///
  /// Preconditions: the expert is `evicting`; `safe` was returned by a `safe_epoch()` call
  /// made after the retirement, and the retire epoch is below it (asserted).
  /// Note: a fresh scan may show a *smaller* safe epoch than `safe` — a reader that read the
  /// epoch before the retirement, announced it after the earlier scan, and is about to
  /// retry its pin with the new epoch (header comment, (a)) — and that is harmless. So the
  /// decision rests on the caller's scan, not on a second one.
  [[nodiscard]] version_storage reclaim(expert_key key, [[maybe_unused]] std::uint64_t safe) noexcept {
    detail::ver_entry& e = entries_[index_of(key)];
    MOEPOLICY_ASSERT(e.state.load(std::memory_order_relaxed) == residency_state::evicting);
    MOEPOLICY_ASSERT(e.retire_epoch < safe);
    detail::version_slot& s = e.slot[e.other];
    MOEPOLICY_ASSERT(s.live);
    s.live = false;
    const version_storage out = std::exchange(s.storage, version_storage{});
    e.state.store(e.slot[e.active].mapped.record.tier == precision_tier::high ? residency_state::resident_high
                                                                              : residency_state::resident_low,
                  std::memory_order_release);
    return out;
  }

  /// The epoch at which the expert's version retired (meaningful while `evicting`).
  [[nodiscard]] std::uint64_t retire_epoch(expert_key key) const noexcept {
    return entries_[index_of(key)].retire_epoch;
  }

  /// Teardown: drops every version of a resident expert and writes their storage into
  /// `out` (up to two entries); the expert becomes `absent` and its handle stops resolving.
  ///
  /// Preconditions: no reader pins a window on the table while the call runs (teardown).
  /// Returns: `evicted` with the storages written; or, changing nothing, `absent`,
  /// `in_transition` (promoting, demoting or evicting: finish the transition first) or
  /// `readers_pinned` (a window is open: it could still resolve the handle).
  /// Complexity: O(max_readers); no allocation.
  [[nodiscard]] evict_result evict(expert_key key, std::span<version_storage, 2> out) noexcept {
    const std::size_t i = index_of(key);
    detail::ver_entry& e = entries_[i];
    const residency_state s = e.state.load(std::memory_order_relaxed);
    if (s == residency_state::absent) return {evict_status::absent, 0};
    if (s != residency_state::resident_low && s != residency_state::resident_high) {
      return {evict_status::in_transition, 0};
    }
    if (pinned_readers() != 0) return {evict_status::readers_pinned, 0};
    active_[i].store(nullptr, std::memory_order_seq_cst);
    std::size_t n = 0;
    for (auto& slot : e.slot) {
      if (slot.live) {
        slot.live = false;
        out[n++] = std::exchange(slot.storage, version_storage{});
      }
    }
    e.settle_epoch = 0;
    e.state.store(residency_state::absent, std::memory_order_release);
    return {evict_status::evicted, n};
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
    s.mapped.record.tier = tier;
    s.mapped.record.bits = source.bits;
    s.mapped.record.version = e.next_version++;
    s.mapped.record.checksum = source.checksum;
    s.mapped.record.data = storage.block.data.first(source.bytes.size());
    s.storage = storage;
    s.live = true;
  }

  // Points the handle at slot `to` for windows pinned from now on (the header comment's
  // publish): returns the epoch t of the publication.
  std::uint64_t switch_active(std::size_t i, detail::ver_entry& e, std::uint8_t to, std::uint8_t from) noexcept {
    const std::uint64_t t = epoch_.load(std::memory_order_relaxed);  // only the writer changes it
    detail::mapped_version& m = e.slot[to].mapped;
    m.visible_from.store(t + 1, std::memory_order_relaxed);
    m.previous.store(&e.slot[from].mapped, std::memory_order_relaxed);
    active_[i].store(&m, std::memory_order_seq_cst);
    [[maybe_unused]] const std::uint64_t was = epoch_.fetch_add(1, std::memory_order_seq_cst);
    MOEPOLICY_ASSERT(was == t);
    e.serving.store(m.record.tier, std::memory_order_release);
    e.active = to;
    e.other = from;
    e.settle_epoch = t;
    return t;
  }

  static std::uint64_t retire(detail::ver_entry& e, std::uint64_t t) noexcept {
    e.retire_epoch = t;
    e.state.store(residency_state::evicting, std::memory_order_release);
    return t;
  }

  std::size_t layers_, experts_;
  versioned_table_config config_;
  std::unique_ptr<std::atomic<const detail::mapped_version*>[]> active_;
  std::unique_ptr<detail::ver_entry[]> entries_;
  std::unique_ptr<detail::reader_state[]> readers_;
  std::atomic<std::uint64_t> epoch_{1};
};

inline read_guard reader_slot::pin() const noexcept {
  MOEPOLICY_ASSERT(slot_ != nullptr && slot_->epoch.load(std::memory_order_relaxed) == 0);
  std::uint64_t g = table_->epoch_.load(std::memory_order_seq_cst);
  for (;;) {
    slot_->epoch.store(g, std::memory_order_seq_cst);
    const std::uint64_t now = table_->epoch_.load(std::memory_order_seq_cst);
    if (now == g) break;  // the announcement precedes every publication at an epoch >= g
    g = now;
  }
  return read_guard(table_, slot_, g);
}

inline const expert_version& read_guard::resolve(expert_key key) const noexcept {
  return table_->handle(key).resolve(*this);
}

}  // namespace moepolicy
