// moepolicy/sim/timeline.hpp — the timed model of serving: a machine's processors, memories
// and links as resources on one timeline, the operations that occupy them, background
// transfers that yield to demand work, and the ledger of what every second and every byte
// was spent on.
//
// Why. A comparison of serving systems is only as fair as its accounting: a copy whose time
// is not charged, a prefetch that lands instantly or a layout that changes for free makes
// the system that uses them look better than it is. Here nothing is free: a system's replay
// (sim/gpu_ndp_replay.hpp, sim/trimoe_replay.hpp) issues every piece of work it does —
// compute on a device, a weight read from memory, a transfer over a link — as an operation
// on this timeline, and reads its end-to-end time and its per-resource ledger back. The
// timeline knows nothing of experts or devices: durations come from the `DeviceCost` models
// the replay holds, so any model (roofline, profiled tables, a machine file) prices it.
//
// Resources. Each is a `processor` (a GPU, a CPU, an NDP unit), a `memory` (a DIMM serving
// reads, TriMoE Eq. 6) or a `link` (one direction of PCIe, a CXL port, a DIMM-Link port).
// A resource serves one operation at a time.
//
// Demand operations (`occupy`, `run`, `transfer`) are the work a forward pass waits for.
// An operation occupies one or more resources at once — its *hops*: fetching a striped
// expert to the GPU holds the PCIe link for latency + bytes / bandwidth and every DIMM for
// its share of the read; a CPU expert holds the CPU for its compute and the DIMMs for the
// weight read. It starts at the first time at or after `ready` (when its inputs exist) at
// which every hop is free, holds each hop for that hop's own duration, and ends when the
// longest hop ends: the hops stream concurrently, the pipelined reading of TriMoE Eq. 2–3's
// max(). Demand operations are served in the order they are issued (first in, first out,
// not preempted): a resource is free from the end of its last operation (`free_at`).
// `backfill` (and `backfill_transfer`) instead places an operation at the earliest time all
// its hops fit in idle time, gaps that earlier operations left included: list scheduling in
// issue order, for work whose resources a system interleaves (DIMM reads for the CPU and for
// a PCIe fetch). A hop may be charged as another `cost_kind` than its operation
// (`hop::charge_as`): the DIMM hops of a CPU expert are weight reads, not expert compute.
//
// Background transfers (`enqueue`, `settle`) are work nothing waits for yet: a prefetch, a
// relayout, a placement copy that overlaps decoding. They never delay demand work: queued in
// priority order (lower value first, first in first out among equals), they are placed, in
// chunks of `chunk_bytes`, only into the idle time the demand operations left on their
// resources — the gaps between demand operations, and the time after the last one up to
// `until` — when `settle(until)` is called, each chunk within that idle time on every one of
// its hops and at or after the job's `ready`. (A DMA engine that interleaves a bulk copy with
// latency-critical transfers at fine grain behaves so; the chunk is the grain, and idle time
// shorter than a chunk stays unused, which only slows background work.) A resource's idle
// time is offered to background work once, in the order the replay settles it. A job's hops
// split in proportion to the chunk's share of the job's bytes, so its chunks add up to
// exactly the job's time and bytes on every hop. A job lands when its last chunk ends;
// `landed()` lists the receipts of the jobs landed since `clear_landed()`; `drain()` places
// whatever remains at the end of a run.
//
// Time never goes back: `settle(until)` declares everything before `until` decided. Jobs
// enqueued afterwards must be ready at or after it (an error otherwise); demand operations
// may name an earlier `ready` and simply start when their resources are free.
//
// Receipts. `transfer` and a landed background job return a `transfer_receipt`: the only
// proof a residency table (sim/timed_residency.hpp) accepts that a copy exists. A transfer
// must cross at least one link: every byte moved is charged on a link.
//
// Ledger. Per resource: busy seconds and bytes by `cost_kind` (what the time was spent on),
// operations, and stall seconds — the idle time before each demand operation that had to
// wait for its inputs or for another of its resources (whether or not background work used
// that time). Conservation holds by construction and is tested: a resource's busy time is
// the sum of its hops' durations, its bytes the sum of its hops' bytes.
//
// Cost. Adding resources and the first jobs allocates; demand operations allocate nothing
// (a resource's gap list grows only past its reserved capacity, `timeline_config`);
// `settle` is O(jobs · chunks · hops · gaps) in the worst case, and O(1) per chunk of a job
// of one hop that streams behind its resource's last operation.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

namespace detail {

/// Sorts `v` (a vector or a span) by `less`, equal elements keeping their order (as
/// `std::stable_sort`), by insertion: for the few items of one layer, without the buffer
/// `std::stable_sort` allocates on every call. Complexity: O(n + inversions); no allocation.
template <class Range, class Less>
void stable_insertion_sort(Range&& v, Less less) {
  for (std::size_t i = 1; i < v.size(); ++i) {
    if (!less(v[i], v[i - 1])) continue;
    auto x = std::move(v[i]);
    std::size_t j = i;
    for (; j > 0 && less(x, v[j - 1]); --j) v[j] = std::move(v[j - 1]);
    v[j] = std::move(x);
  }
}

}  // namespace detail

/// What a resource is.
enum class resource_kind : std::uint8_t {
  processor,  ///< computes: a GPU, a CPU, an NDP unit
  memory,     ///< serves reads for other devices: a DIMM (TriMoE Eq. 6)
  link,       ///< carries bytes: one direction of PCIe, a CXL port, a DIMM-Link port
};

/// "processor", "memory" or "link".
[[nodiscard]] constexpr std::string_view to_string(resource_kind k) noexcept {
  switch (k) {
    case resource_kind::processor:
      return "processor";
    case resource_kind::memory:
      return "memory";
    case resource_kind::link:
      return "link";
  }
  return "?";
}

/// Index of a resource in its timeline.
using resource_id = std::uint32_t;

/// What a second or a byte was spent on.
enum class cost_kind : std::uint8_t {
  attention,     ///< attention with the KV cache
  dense,         ///< dense layers, shared experts, the router, the output head
  expert,        ///< a routed expert's compute
  weight_read,   ///< memory serving a weight read for another device (TriMoE Eq. 6)
  demand_fetch,  ///< weights moved because a step needs them now (a miss)
  prefetch,      ///< weights moved ahead of use
  placement,     ///< a placement's copy: the initial one, or one per request
  migration,     ///< relayout, rebalancing, precision changes
  activation,    ///< activations to a device and results back
  kv_cache,      ///< KV-cache entries written to (or read from) a memory off the device
};

/// The number of `cost_kind` values.
inline constexpr std::size_t num_cost_kinds = 10;

/// "attention", "dense", "expert", "weight_read", "demand_fetch", "prefetch", "placement",
/// "migration", "activation" or "kv_cache".
[[nodiscard]] constexpr std::string_view to_string(cost_kind k) noexcept {
  switch (k) {
    case cost_kind::attention:
      return "attention";
    case cost_kind::dense:
      return "dense";
    case cost_kind::expert:
      return "expert";
    case cost_kind::weight_read:
      return "weight_read";
    case cost_kind::demand_fetch:
      return "demand_fetch";
    case cost_kind::prefetch:
      return "prefetch";
    case cost_kind::placement:
      return "placement";
    case cost_kind::migration:
      return "migration";
    case cost_kind::activation:
      return "activation";
    case cost_kind::kv_cache:
      return "kv_cache";
  }
  return "?";
}

/// One resource an operation holds: for `duration` seconds, moving `moved` bytes through it.
struct hop {
  resource_id resource = 0;
  seconds duration = 0.0;
  bytes moved = 0;
  /// What this hop's seconds and bytes are charged as in the ledger; the operation's `why`
  /// when empty. (A CPU expert holds the CPU for its compute and the DIMMs for the weight
  /// read it makes of them: `expert` on the one, `weight_read` on the others.)
  std::optional<cost_kind> charge_as{};
};

/// When an operation ran.
struct interval {
  seconds start = 0.0;
  seconds end = 0.0;
};

/// Proof that a payload crossed the machine's links: made only by `timeline::transfer` and
/// by a background job that landed.
class transfer_receipt {
 public:
  /// An empty receipt (no transfer); `valid()` is false.
  transfer_receipt() = default;

  [[nodiscard]] bool valid() const noexcept { return serial_ != 0; }
  /// When the first byte left.
  [[nodiscard]] seconds start() const noexcept { return start_; }
  /// When the last byte arrived: the copy is usable from then on.
  [[nodiscard]] seconds landed() const noexcept { return landed_; }
  /// The payload, bytes.
  [[nodiscard]] bytes size() const noexcept { return size_; }
  [[nodiscard]] cost_kind why() const noexcept { return why_; }
  /// The caller's tag, as given to `transfer` or `enqueue`.
  [[nodiscard]] std::uint64_t tag() const noexcept { return tag_; }
  /// A number unique within the timeline, from 1.
  [[nodiscard]] std::uint64_t serial() const noexcept { return serial_; }
  /// Whether the payload crossed a link (else a background job only read or wrote memory:
  /// no copy can come from it).
  [[nodiscard]] bool crossed_link() const noexcept { return crossed_link_; }

 private:
  friend class timeline;
  transfer_receipt(seconds start, seconds landed, bytes size, cost_kind why, std::uint64_t tag, std::uint64_t serial,
                   bool crossed_link) noexcept
      : start_(start),
        landed_(landed),
        size_(size),
        why_(why),
        tag_(tag),
        serial_(serial),
        crossed_link_(crossed_link) {}

  seconds start_ = 0.0;
  seconds landed_ = 0.0;
  bytes size_ = 0;
  cost_kind why_ = cost_kind::demand_fetch;
  std::uint64_t tag_ = 0;
  std::uint64_t serial_ = 0;
  bool crossed_link_ = false;
};

/// One hold of one resource, as `timeline::record_into` logs it.
struct occupation {
  resource_id resource = 0;
  seconds start = 0.0;
  seconds end = 0.0;
  cost_kind why = cost_kind::expert;
  bytes moved = 0;
  /// Whether a background chunk (else a demand operation).
  bool background = false;
};

/// What one resource did.
struct resource_account {
  std::string name;
  resource_kind kind = resource_kind::processor;
  /// Σ of the durations of its hops, by what they were for.
  std::array<seconds, num_cost_kinds> busy_by{};
  /// Σ of the bytes of its hops, by what they were for.
  std::array<bytes, num_cost_kinds> bytes_by{};
  /// Operations (demand operations and background chunks) that held it.
  std::size_t operations = 0;
  /// Idle time before demand operations that waited for their inputs or another resource.
  seconds stall_seconds = 0.0;

  [[nodiscard]] seconds busy() const noexcept {
    seconds s = 0.0;
    for (seconds x : busy_by) s += x;
    return s;
  }
  [[nodiscard]] bytes moved() const noexcept {
    bytes s = 0;
    for (bytes x : bytes_by) s += x;
    return s;
  }
  [[nodiscard]] seconds busy(cost_kind k) const noexcept { return busy_by[static_cast<std::size_t>(k)]; }
  [[nodiscard]] bytes moved(cost_kind k) const noexcept { return bytes_by[static_cast<std::size_t>(k)]; }
};

/// Every resource's account and the end of the last operation.
struct ledger {
  std::vector<resource_account> resources;
  /// The end of the last operation on any resource.
  seconds horizon = 0.0;

  /// The resource named `name`, or `npos`.
  static constexpr resource_id npos = std::numeric_limits<resource_id>::max();
  [[nodiscard]] resource_id find(std::string_view name) const noexcept {
    for (std::size_t i = 0; i < resources.size(); ++i) {
      if (resources[i].name == name) return static_cast<resource_id>(i);
    }
    return npos;
  }
  [[nodiscard]] const resource_account& operator[](resource_id r) const noexcept {
    MOEPOLICY_ASSERT(r < resources.size());
    return resources[r];
  }
  /// Bytes moved over links for `k`, summed over every link.
  [[nodiscard]] bytes link_bytes(cost_kind k) const noexcept {
    bytes s = 0;
    for (const auto& r : resources) {
      if (r.kind == resource_kind::link) s += r.moved(k);
    }
    return s;
  }
  /// Busy seconds of `kind` resources for `k`.
  [[nodiscard]] seconds busy(resource_kind kind, cost_kind k) const noexcept {
    seconds s = 0.0;
    for (const auto& r : resources) {
      if (r.kind == kind) s += r.busy(k);
    }
    return s;
  }
  /// Subtracts `o`'s figures (an earlier snapshot of the same run) from this ledger's: what
  /// happened since.
  ///
  /// Throws: `invalid_argument` when the resources differ.
  ledger& operator-=(const ledger& o) {
    combine(o, -1.0, "ledger::operator-=");
    return *this;
  }

  /// Adds `o`'s figures to this ledger's; both must have the same resources.
  ///
  /// Throws: `invalid_argument` when the resources differ.
  ledger& operator+=(const ledger& o) {
    combine(o, 1.0, "ledger::operator+=");
    return *this;
  }

 private:
  void combine(const ledger& o, double sign, std::string_view fn) {
    if (o.resources.size() != resources.size()) {
      detail::throw_invalid(fn, "the ledgers must have the same resources, got sizes", o.resources.size());
    }
    for (std::size_t i = 0; i < resources.size(); ++i) {
      if (resources[i].name != o.resources[i].name)
        detail::throw_invalid(fn, "the ledgers' resources differ at", o.resources[i].name);
    }
    for (std::size_t i = 0; i < resources.size(); ++i) {
      auto& a = resources[i];
      const auto& b = o.resources[i];
      for (std::size_t k = 0; k < num_cost_kinds; ++k) {
        a.busy_by[k] += sign * b.busy_by[k];
        a.bytes_by[k] = sign > 0.0 ? a.bytes_by[k] + b.bytes_by[k] : a.bytes_by[k] - b.bytes_by[k];
      }
      a.operations = sign > 0.0 ? a.operations + b.operations : a.operations - b.operations;
      a.stall_seconds += sign * b.stall_seconds;
    }
    horizon += sign * o.horizon;
  }
};

/// Configuration of a `timeline`.
struct timeline_config {
  /// Bytes of a background job's payload per chunk, > 0: the grain at which background work
  /// yields to demand work (1 MiB: 31 µs on PCIe Gen4 ×16, 42 µs on a 25 GB/s DIMM-Link).
  bytes chunk_bytes = bytes{1} << 20;
  /// Idle gaps each resource keeps room for before its list grows.
  std::size_t reserved_gaps = 64;
  /// Background job slots reserved at construction, each with room for `reserved_hops`
  /// hops, so that enqueueing up to that many pending jobs allocates nothing. A slot is made
  /// in the reserved memory when a job first needs it, so the memory a timeline touches
  /// follows the most jobs it had pending at once, not the reservation.
  std::size_t reserved_jobs = 0;
  std::size_t reserved_hops = 0;
  /// Job slots of one hop reserved besides `reserved_jobs`, for a user whose many jobs have one
  /// hop and few have more: a job of one hop takes one of these while any is free, so that
  /// the slots of `reserved_hops` hops are kept for the longer jobs (a slot of one hop
  /// holds the hop's share of a slot of n hops).
  std::size_t reserved_one_hop_jobs = 0;
  /// Whether a background chunk of one hop that cannot end before its resource's last idle
  /// gap ends (a job that streams behind the resource's last operation) is placed without
  /// searching the gaps, and the chunks of one hop that follow a chunk placed in an idle gap
  /// in that same gap are placed together without searching it again. The placements,
  /// ledger, log and receipts are the same bit for bit either way; false runs the plain
  /// search for every chunk, the reference the fast paths are tested against.
  bool fast_paths = true;
};

/// Resources, demand operations, background transfers and the ledger (see the header).
class timeline {
 public:
  /// A background job: valid until it lands or is cancelled.
  using job_id = std::uint32_t;

  /// Throws: `invalid_argument` when `chunk_bytes` is 0.
  explicit timeline(timeline_config config = {}) : config_(config) {
    if (config_.chunk_bytes == 0)
      detail::throw_invalid("timeline::timeline", "chunk_bytes must be > 0", config_.chunk_bytes);
    // Capacity only: `take_slot` makes each slot in it when a job first needs one.
    const std::size_t slots = config_.reserved_jobs + config_.reserved_one_hop_jobs;
    jobs_.reserve(slots);
    next_.reserve(slots);
    more_.reserve(config_.reserved_jobs * (std::max<std::size_t>(config_.reserved_hops, 1) - 1));
    free_jobs_.reserve(config_.reserved_jobs);
    free_one_hop_.reserve(config_.reserved_one_hop_jobs);
    // Cancelled entries are at most half the queue (`cancel`), so twice the slots hold it.
    order_.reserve(2 * slots + 1);
    landed_.reserve(slots);
    chunk_.reserve(config_.reserved_hops);
  }

  /// Adds a resource.
  ///
  /// Throws: `invalid_argument` when the name is empty or already taken.
  resource_id add_resource(std::string name, resource_kind kind) {
    constexpr std::string_view fn = "timeline::add_resource";
    if (name.empty()) detail::throw_invalid(fn, "a resource needs a name");
    if (ledger_.find(name) != ledger::npos) detail::throw_invalid(fn, "the name is already taken", name);
    resource_account a;
    a.name = std::move(name);
    a.kind = kind;
    ledger_.resources.push_back(std::move(a));
    state s;
    s.gaps.reserve(config_.reserved_gaps);
    state_.push_back(std::move(s));
    window_.push_back(0.0);
    least_raw_.push_back(std::numeric_limits<seconds>::infinity());
    bound_.push_back(0.0);
    return static_cast<resource_id>(state_.size() - 1);
  }

  [[nodiscard]] std::size_t num_resources() const noexcept { return state_.size(); }
  [[nodiscard]] const timeline_config& config() const noexcept { return config_; }
  /// Every resource's account so far.
  [[nodiscard]] const ledger& accounts() const noexcept { return ledger_; }
  /// When `r` is free for the next demand operation.
  [[nodiscard]] seconds free_at(resource_id r) const noexcept {
    MOEPOLICY_ASSERT(r < state_.size());
    return state_[r].free_at;
  }
  /// The end of the last operation.
  [[nodiscard]] seconds horizon() const noexcept { return ledger_.horizon; }
  /// The latest `until` given to `settle`.
  [[nodiscard]] seconds settled_until() const noexcept { return settled_; }

  /// Appends every hold of a resource from now on to `*log` (none when null): for tests
  /// that check no resource is held twice at once, and for drawing the timeline. Holds of
  /// zero duration are not logged.
  void record_into(std::vector<occupation>* log) noexcept { log_ = log; }

  /// Forgets every operation and job; keeps the resources. Time restarts at 0.
  void reset() noexcept {
    for (auto& a : ledger_.resources) {
      a.busy_by.fill(0.0);
      a.bytes_by.fill(0);
      a.operations = 0;
      a.stall_seconds = 0.0;
    }
    ledger_.horizon = 0.0;
    for (auto& s : state_) {
      s.free_at = 0.0;
      s.gaps.clear();
    }
    for (auto& j : jobs_) j.active = false;
    for (auto& n : next_) n.one_hop = false;
    order_.clear();
    cancelled_ = 0;
    fill_free_slots();
    landed_.clear();
    std::fill(least_raw_.begin(), least_raw_.end(), std::numeric_limits<seconds>::infinity());
    multi_hop_ = 0;
    settled_ = 0.0;
    next_seq_ = 0;
  }

  /// A demand operation: holds every hop from the first time at or after `ready` at which
  /// all are free, each for its duration.
  ///
  /// Throws: `invalid_argument` when `hops` is empty, names an unknown resource or one twice,
  /// or a duration or `ready` is negative or not finite.
  /// Complexity: O(hops); allocates only when a resource's gap list outgrows its reserve.
  interval occupy(seconds ready, std::span<const hop> hops, cost_kind why) {
    check_hops(ready, hops, "timeline::occupy");
    if (hops.size() == 1) {
      // One hop (most operations): the loops below for one resource, arithmetic in order.
      const hop& h = hops[0];
      state& s = state_[h.resource];
      const seconds start = std::max(ready, s.free_at);
      if (start > s.free_at) {
        ledger_.resources[h.resource].stall_seconds += start - s.free_at;
        const seconds from = std::max(s.free_at, settled_);
        if (start > from) s.gaps.push_back({from, start});
      }
      s.free_at = start + h.duration;
      const cost_kind as = h.charge_as.value_or(why);
      charge(h.resource, as, h.duration, h.moved);
      log(h.resource, start, h.duration, as, h.moved, false);
      const seconds end = std::max(start, start + h.duration);
      ledger_.horizon = std::max(ledger_.horizon, end);
      return {start, end};
    }
    seconds start = ready;
    for (const hop& h : hops) start = std::max(start, state_[h.resource].free_at);
    seconds end = start;
    for (const hop& h : hops) {
      state& s = state_[h.resource];
      resource_account& a = ledger_.resources[h.resource];
      if (start > s.free_at) {
        a.stall_seconds += start - s.free_at;
        const seconds from = std::max(s.free_at, settled_);
        if (start > from) s.gaps.push_back({from, start});
      }
      s.free_at = start + h.duration;
      charge(h.resource, h.charge_as.value_or(why), h.duration, h.moved);
      log(h.resource, start, h.duration, h.charge_as.value_or(why), h.moved, false);
      end = std::max(end, start + h.duration);
    }
    ledger_.horizon = std::max(ledger_.horizon, end);
    return {start, end};
  }

  /// A demand operation on one resource: `occupy` of one hop, with its arithmetic in the
  /// same order, written for one resource (most operations). `occupy`'s path for one hop is
  /// the same code with the hop's bytes and `charge_as`; the two sharing one helper counted
  /// 1.3–1.5% more instructions in the timed replays (g++ 12), so each keeps its own.
  ///
  /// Throws: as `occupy`.
  interval run(seconds ready, resource_id r, seconds duration, cost_kind why) {
    constexpr seconds inf = std::numeric_limits<seconds>::infinity();
    if (!(ready >= 0.0 && ready < inf && r < state_.size() && duration >= 0.0 && duration < inf)) [[unlikely]] {
      reject_run(ready, r, duration);
    }
    state& s = state_[r];
    const seconds start = std::max(ready, s.free_at);
    if (start > s.free_at) {
      ledger_.resources[r].stall_seconds += start - s.free_at;
      const seconds from = std::max(s.free_at, settled_);
      if (start > from) s.gaps.push_back({from, start});
    }
    s.free_at = start + duration;
    charge(r, why, duration, 0);
    log(r, start, duration, why, 0, false);
    const seconds end = std::max(start, start + duration);
    ledger_.horizon = std::max(ledger_.horizon, end);
    return {start, end};
  }

  /// A demand transfer of `payload` bytes along `hops` (at least one a link), as `occupy`.
  ///
  /// Throws: as `occupy`; `invalid_argument` when `payload` is 0 or no hop is a link that
  /// the transfer holds (duration > 0 or bytes > 0).
  transfer_receipt transfer(seconds ready, std::span<const hop> hops, bytes payload, cost_kind why,
                            std::uint64_t tag = 0) {
    check_transfer(hops, payload, "timeline::transfer");
    const interval t = occupy(ready, hops, why);
    return transfer_receipt(t.start, t.end, payload, why, tag, ++serial_, true);
  }

  /// A demand operation that may use idle time earlier operations left (backfilling): it
  /// holds every hop from the earliest time at or after `ready` at which each hop fits in
  /// an idle gap of its resource or after its last operation, each for its duration. Issued
  /// in priority order, such operations are list-scheduled: a striped read waits only for
  /// the DIMMs' own idle time, not for an unrelated transfer issued before it on another
  /// resource. Idle time before the start counts as stall only where the hop extends its
  /// resource past `free_at` (as `occupy`); a hop placed in a gap stalls nothing.
  ///
  /// Throws: as `occupy`.
  /// Complexity: O(hops · gaps) per round of the search for a common start; allocates only
  /// when a resource's gap list outgrows its reserve.
  interval backfill(seconds ready, std::span<const hop> hops, cost_kind why) {
    check_hops(ready, hops, "timeline::backfill");
    const seconds start = common_fit(ready, hops);
    seconds end = start;
    for (const hop& h : hops) {
      state& s = state_[h.resource];
      resource_account& a = ledger_.resources[h.resource];
      if (h.duration > 0.0) {
        if (start >= s.free_at) a.stall_seconds += start - s.free_at;
        hold(h.resource, start, h.duration);
      }
      charge(h.resource, h.charge_as.value_or(why), h.duration, h.moved);
      log(h.resource, start, h.duration, h.charge_as.value_or(why), h.moved, false);
      end = std::max(end, start + h.duration);
    }
    ledger_.horizon = std::max(ledger_.horizon, end);
    return {start, end};
  }

  /// A demand transfer placed as `backfill` places an operation.
  ///
  /// Throws: as `transfer`.
  transfer_receipt backfill_transfer(seconds ready, std::span<const hop> hops, bytes payload, cost_kind why,
                                     std::uint64_t tag = 0) {
    check_transfer(hops, payload, "timeline::backfill_transfer");
    const interval t = backfill(ready, hops, why);
    return transfer_receipt(t.start, t.end, payload, why, tag, ++serial_, true);
  }

  /// Queues a background job of `payload` bytes along `hops` (each hop's duration and bytes
  /// for the whole payload), ready from `ready`, at `priority` (lower first). A job that
  /// crosses a link is a transfer whose receipt can install a copy; one that does not (the
  /// reads a copy makes of a memory, charged apart from the link they feed, which a resource
  /// serving other work at the same time would interleave with it) only charges its hops.
  ///
  /// Throws: as `occupy`; `invalid_argument` when `payload` is 0 or `ready` is before
  /// `settled_until()`.
  /// Complexity: O(hops + pending jobs); allocates only for a new job slot, more hops than
  /// the slot held, or a queue longer than ever before (its pending jobs and at most as many
  /// cancelled ones: the reserved slots' jobs fit in what the constructor reserves).
  job_id enqueue(seconds ready, std::span<const hop> hops, bytes payload, cost_kind why, int priority,
                 std::uint64_t tag = 0) {
    constexpr std::string_view fn = "timeline::enqueue";
    check_hops(ready, hops, fn);
    if (payload == 0) detail::throw_invalid(fn, "a job needs a payload > 0", payload);
    if (ready < settled_) {
      detail::throw_invalid(
          fn, "a job must be ready at or after the last settle(until) " + detail::show(settled_) + ", ready", ready);
    }
    const job_id id = take_slot(hops.size());
    job& j = jobs_[id];
    j.active = true;
    j.ready = ready;
    j.priority = priority;
    j.seq = next_seq_++;
    j.why = why;
    j.tag = tag;
    j.payload = payload;
    j.done_bytes = 0;
    j.first_start = -1.0;
    j.last_start = ready;
    j.last_end = 0.0;
    j.crosses_link = false;
    for (const hop& h : hops)
      j.crosses_link = j.crosses_link || ledger_.resources[h.resource].kind == resource_kind::link;
    j.first = {hops[0], 0.0, 0};
    if (hops.size() - 1 > j.more_room) {
      // More hops than the slot holds: a segment of its own at the end.
      j.more_at = static_cast<std::uint32_t>(more_.size());
      j.more_room = static_cast<std::uint32_t>(hops.size() - 1);
      more_.resize(more_.size() + hops.size() - 1);
    }
    j.more_count = static_cast<std::uint32_t>(hops.size() - 1);
    for (std::size_t h = 1; h < hops.size(); ++h) more_[j.more_at + h - 1] = {hops[h], 0.0, 0};
    next_[id].seq = j.seq;
    refresh_next(id);
    if (hops.size() > 1) ++multi_hop_;
    // The queue stays in placement order (priority, then first in first out): this job is
    // the newest, so it goes after every job of its priority — at the end when no queued
    // job has a higher priority value (a replay that queues each pass's prefetches after
    // the last), else where a search finds.
    const queued e{priority, id, j.seq};
    if (order_.empty() || order_.back().priority <= priority) {
      order_.push_back(e);
    } else {
      order_.insert(std::upper_bound(order_.begin(), order_.end(), priority,
                                     [](int p, const queued& b) { return p < b.priority; }),
                    e);
    }
    return id;
  }

  /// Whether job `id` is still queued or in progress.
  [[nodiscard]] bool pending(job_id id) const noexcept { return id < jobs_.size() && jobs_[id].active; }
  /// Jobs that have placed their first chunk so far (a count that only grows): while it
  /// stays the same, every job that had placed nothing still has placed nothing.
  [[nodiscard]] std::uint64_t started_jobs() const noexcept { return started_; }
  /// How many of the most recently started jobs `started_job` recalls.
  static constexpr std::uint64_t started_history = 1024;
  /// The job and tag of the `i`-th job to start (counting from 0 as `started_jobs` counts),
  /// for `started_jobs() - started_history <= i < started_jobs()`: a reader that saw
  /// `started_jobs()` at n finds the jobs started since among i in [n, started_jobs()),
  /// without visiting the jobs that did not start. The job may have landed or been
  /// cancelled since, and its id reused.
  [[nodiscard]] std::pair<job_id, std::uint64_t> started_job(std::uint64_t i) const noexcept {
    MOEPOLICY_ASSERT(i < started_ && started_ - i <= started_history);
    return started_ring_[i % started_history];
  }
  /// Bytes of job `id`'s payload already placed.
  [[nodiscard]] bytes placed_bytes(job_id id) const noexcept { return id < jobs_.size() ? jobs_[id].done_bytes : 0; }
  /// Jobs queued or in progress.
  [[nodiscard]] std::size_t pending_jobs() const noexcept {
    std::size_t n = 0;
    for (const auto& j : jobs_) n += j.active ? std::size_t{1} : std::size_t{0};
    return n;
  }
  /// Job slots made so far: a slot is made when a job finds none free (in the memory
  /// `timeline_config` reserved, while any is left), so this is the most jobs pending at
  /// once (per kind of slot), not the reservation.
  [[nodiscard]] std::size_t job_slots() const noexcept { return jobs_.size(); }

  /// Stops job `id`: its remaining chunks are not placed and it never lands. The chunks
  /// already placed stay charged (the bytes they moved were spent). Returns whether it was
  /// pending. Complexity: amortised O(1): the job's entry stays in the queue, told apart by
  /// the job's state (`live`), until a pass over the queue drops it, or until cancelled
  /// entries outnumber the others.
  bool cancel(job_id id) noexcept {
    if (!pending(id)) return false;
    jobs_[id].active = false;
    next_[id].one_hop = false;
    free_slot(id);
    ++cancelled_;
    if (2 * cancelled_ > order_.size()) drop_cancelled();
    return true;
  }

  /// Places queued jobs' chunks into idle time that ends by `until` (see the header), highest
  /// priority first; then everything before `until` is decided.
  ///
  /// Throws: `invalid_argument` when `until` is negative or not finite.
  void settle(seconds until) {
    if (!(until >= 0.0) || !std::isfinite(until))
      detail::throw_invalid("timeline::settle", "until must be finite and >= 0", until);
    place_queued(until);
    settled_ = std::max(settled_, until);
    for (auto& s : state_) {
      // Gaps are sorted and disjoint: when the first starts after `settled_`, every one
      // does, and each stays as it is.
      if (s.gaps.empty() || s.gaps.front().start > settled_) continue;
      std::size_t w = 0;
      for (const interval& g : s.gaps) {
        if (g.end <= settled_) continue;
        s.gaps[w++] = {std::max(g.start, settled_), g.end};
      }
      s.gaps.resize(w);
    }
  }

  /// Places every queued job's remaining chunks, however late (the end of a run: work that
  /// was committed is charged in full); then everything before the horizon is decided.
  void drain() {
    place_queued(std::numeric_limits<seconds>::infinity());
    settle(ledger_.horizon);
  }

  /// Receipts of the jobs landed since the last `clear_landed()`, in the order their last
  /// chunks were placed.
  [[nodiscard]] std::span<const transfer_receipt> landed() const noexcept { return landed_; }
  void clear_landed() noexcept { landed_.clear(); }

 private:
  struct state {
    seconds free_at = 0.0;
    /// Idle windows before `free_at`, sorted, disjoint, none before the last settle.
    std::vector<interval> gaps;
  };
  /// One hop of a job and what of it is placed.
  struct hop_progress {
    hop whole;
    seconds done_seconds = 0.0;
    bytes done_moved = 0;
  };
  /// A job slot. Its first hop is kept in the slot and the others in its segment of
  /// `more_` (`more_room` hops from `more_at`, `more_count` of them used), so that a job of
  /// one hop (most of them) needs no memory of its own; the fields are ordered for the
  /// smallest slot (136 bytes on x86-64), as a replay reserves a slot for each job it may
  /// queue.
  struct job {
    seconds ready = 0.0;
    std::uint64_t seq = 0;
    std::uint64_t tag = 0;
    bytes payload = 0, done_bytes = 0;
    seconds first_start = -1.0, last_start = 0.0, last_end = 0.0;
    int priority = 0;
    bool active = false;
    bool crosses_link = false;
    cost_kind why = cost_kind::prefetch;
    /// Whether the slot is one of `timeline_config::reserved_one_hop_jobs`.
    bool one_hop_slot = false;
    std::uint32_t more_at = 0, more_room = 0, more_count = 0;
    hop_progress first;

    /// Hops of the job: `first`, then its segment of `more_`.
    [[nodiscard]] std::size_t hop_count() const noexcept { return 1 + more_count; }
  };
  /// Hop `h` of job `j`.
  [[nodiscard]] hop_progress& hop_of(job& j, std::size_t h) noexcept {
    return h == 0 ? j.first : more_[j.more_at + h - 1];
  }
  /// A queue entry: the job, and its priority and `seq` when it was queued. The entry keeps
  /// them so that the queue stays in order after the job is cancelled and its slot reused
  /// (`live` tells such an entry from the new job's).
  struct queued {
    int priority = 0;
    job_id id = 0;
    std::uint64_t seq = 0;
  };

  /// Throws what `check_hops_in_full` throws; an operation of one valid hop (most of them)
  /// is accepted by a few comparisons.
  void check_hops(seconds ready, std::span<const hop> hops, std::string_view fn) const {
    constexpr seconds inf = std::numeric_limits<seconds>::infinity();
    if (hops.size() == 1 && ready >= 0.0 && ready < inf && hops[0].resource < state_.size() &&
        hops[0].duration >= 0.0 && hops[0].duration < inf) {
      return;
    }
    check_hops_in_full(ready, hops, fn);
  }

  void check_hops_in_full(seconds ready, std::span<const hop> hops, std::string_view fn) const {
    if (!(ready >= 0.0) || !std::isfinite(ready)) detail::throw_invalid(fn, "ready must be finite and >= 0", ready);
    if (hops.empty()) detail::throw_invalid(fn, "an operation needs at least one hop");
    for (std::size_t i = 0; i < hops.size(); ++i) {
      const hop& h = hops[i];
      if (h.resource >= state_.size()) detail::throw_invalid(fn, "unknown resource", h.resource);
      if (!(h.duration >= 0.0) || !std::isfinite(h.duration)) {
        detail::throw_invalid(fn, "a hop's duration must be finite and >= 0 on " + ledger_.resources[h.resource].name,
                              h.duration);
      }
      for (std::size_t k = 0; k < i; ++k) {
        if (hops[k].resource == h.resource) {
          detail::throw_invalid(fn, "a resource may appear once per operation", ledger_.resources[h.resource].name);
        }
      }
    }
  }

  void check_transfer(std::span<const hop> hops, bytes payload, std::string_view fn) const {
    if (payload == 0) detail::throw_invalid(fn, "a transfer needs a payload > 0", payload);
    for (const hop& h : hops) {
      if (ledger_.resources[h.resource].kind == resource_kind::link && (h.duration > 0.0 || h.moved > 0)) return;
    }
    detail::throw_invalid(fn, "a transfer must cross at least one link");
  }

  void charge(resource_id r, cost_kind why, seconds d, bytes moved) noexcept {
    resource_account& a = ledger_.resources[r];
    a.busy_by[static_cast<std::size_t>(why)] += d;
    a.bytes_by[static_cast<std::size_t>(why)] += moved;
    ++a.operations;
  }

  void log(resource_id r, seconds start, seconds d, cost_kind why, bytes moved, bool background) {
    if (log_ != nullptr && d > 0.0) [[unlikely]] {
      append_log(r, start, d, why, moved, background);
    }
  }
  /// `log` into a log (tests and drawings only): apart, so that the operations' paths stay
  /// small enough to be inlined.
  [[gnu::noinline]] void append_log(resource_id r, seconds start, seconds d, cost_kind why, bytes moved,
                                    bool background) {
    log_->push_back({r, start, start + d, why, moved, background});
  }

  /// `run`'s `check_hops` when an argument is out of range: throws as `check_hops` does.
  [[noreturn, gnu::noinline]] void reject_run(seconds ready, resource_id r, seconds duration) const {
    const hop h{r, duration, 0};
    check_hops_in_full(ready, std::span<const hop>(&h, 1), "timeline::occupy");
    detail::throw_invalid("timeline::occupy", "an operation out of range on resource", r);  // not reached
  }

  /// The earliest start >= `from` of a window of `d` seconds on `r`: in a gap, or after
  /// `free_at`.
  [[nodiscard]] seconds earliest_fit(resource_id r, seconds from, seconds d) const noexcept {
    const state& s = state_[r];
    for (const interval& g : s.gaps) {
      const seconds start = std::max(g.start, from);
      if (start + d <= g.end) return start;
    }
    return std::max(s.free_at, from);
  }

  /// The earliest time >= `from` at which every hop of positive duration fits on its
  /// resource (in a gap or after `free_at`).
  [[nodiscard]] seconds common_fit(seconds from, std::span<const hop> hops) const noexcept {
    seconds s = from;
    for (;;) {
      seconds next = s;
      for (const hop& h : hops) {
        if (h.duration > 0.0) next = std::max(next, earliest_fit(h.resource, s, h.duration));
      }
      if (next == s) return s;
      s = next;
    }
  }

  /// Holds [start, start + d) on `r`, carving a gap or extending `free_at`. Returns the
  /// index of the gap left after the hold in the gap it was carved from (starting at
  /// `start + d`), `no_gap` when the hold extended `free_at` or left no idle time after it
  /// in its gap.
  static constexpr std::size_t no_gap = std::numeric_limits<std::size_t>::max();
  std::size_t hold(resource_id r, seconds start, seconds d) {
    state& s = state_[r];
    if (start >= s.free_at) {
      const seconds from = std::max(s.free_at, settled_);
      if (start > from) s.gaps.push_back({from, start});
      s.free_at = start + d;
      return no_gap;
    }
    for (std::size_t i = 0; i < s.gaps.size(); ++i) {
      interval& g = s.gaps[i];
      if (start < g.start || start + d > g.end) continue;
      const interval right{start + d, g.end};
      g.end = start;
      const bool keep_left = g.end > g.start;
      const bool keep_right = right.end > right.start;
      if (keep_left && keep_right) {
        s.gaps.insert(s.gaps.begin() + static_cast<std::ptrdiff_t>(i) + 1, right);
        return i + 1;
      }
      if (!keep_left && keep_right) {
        g = right;
        return i;
      }
      if (!keep_left) s.gaps.erase(s.gaps.begin() + static_cast<std::ptrdiff_t>(i));
      return no_gap;
    }
    MOEPOLICY_ASSERT(false);  // earliest_fit found the window
    return no_gap;
  }

  /// The longest idle window of resource `r` within [settled_, until]: in a gap, or from
  /// `free_at` (0 when none).
  [[nodiscard]] seconds longest_window(std::size_t r, seconds until) const noexcept {
    const state& s = state_[r];
    seconds w = until - std::max(s.free_at, settled_);
    for (const interval& g : s.gaps) w = std::max(w, std::min(g.end, until) - std::max(g.start, settled_));
    return std::max(w, 0.0);
  }

  /// Whether queue entry `e` is its job's and the job is pending: a job's entry outlives its
  /// cancellation (`cancel`), and its slot may hold a newer job since, whose `seq` differs.
  /// A job of one hop is pending while `next_[id].one_hop` (read first: it is compact).
  [[nodiscard]] bool live(const queued& e) const noexcept {
    const next_chunk& n = next_[e.id];
    return n.seq == e.seq && (n.one_hop || jobs_[e.id].active);
  }

  /// Drops the entries of cancelled jobs from the queue (in order).
  void drop_cancelled() noexcept {
    std::size_t w = 0;
    for (const queued& e : order_) {
      if (live(e)) order_[w++] = e;
    }
    order_.resize(w);
    cancelled_ = 0;
  }

  /// Places the queued jobs in order (`order_`: priority, then first in first out), then
  /// drops those that landed from the queue.
  void place_queued(seconds until) {
    // The longest idle window of each resource within [settled_, until]. Placing a chunk
    // only takes idle time away, so a chunk longer than this on any of its hops cannot be
    // placed in this pass: `place_chunks` skips it without searching the gaps.
    const std::size_t resources = state_.size();
    const bool bounded = until < std::numeric_limits<seconds>::infinity();
    const bool may_stop = bounded && multi_hop_ == 0;
    // When every pending job has one hop and no resource's longest window holds the
    // shortest next chunk queued on it, the loop below would skip every job by its first
    // test (`least_raw_` is at most each job's `raw`): nothing is placed, nothing lands.
    bool none = may_stop;
    for (std::size_t r = 0; r < resources; ++r) {
      window_[r] = longest_window(r, until);
      none = none && least_raw_[r] > window_[r] + 1e-12 * until;
    }
    if (none) return;
    // Measured again exactly over the jobs that stay pending (refresh_next lowers them as
    // chunks are placed); `bound_` keeps the bound of the jobs not yet visited.
    for (std::size_t r = 0; r < resources; ++r) {
      bound_[r] = least_raw_[r];
      least_raw_[r] = std::numeric_limits<seconds>::infinity();
    }
    std::size_t multi = 0;
    const std::size_t landed_before = landed_.size();
    for (const queued& e : order_) {
      if (!live(e)) continue;  // a cancelled job's entry
      const job_id id = e.id;
      // The tests `place_chunks_one_hop` starts with, on compact data.
      const next_chunk& c = next_[id];
      if (bounded && c.one_hop &&
          (std::max(c.earliest, settled_) >= until || c.raw > window_[c.resource] + 1e-12 * until)) {
        least_raw_[c.resource] = std::min(least_raw_[c.resource], c.raw);
        continue;
      }
      const bytes before = jobs_[id].done_bytes;
      place_chunks(id, until);
      if (next_[id].one_hop) {
        least_raw_[next_[id].resource] = std::min(least_raw_[next_[id].resource], next_[id].raw);
      } else if (jobs_[id].active) {
        ++multi;
      }
      // What the job placed took idle time away: its resources' longest windows are
      // measured again, so that the jobs after it whose chunks no longer fit anywhere are
      // skipped by the test above rather than searched (the same rejection, exact, as the
      // window is the longest left).
      if (bounded && jobs_[id].done_bytes != before) {
        for (std::size_t h = 0; h < jobs_[id].hop_count(); ++h) {
          const resource_id r = hop_of(jobs_[id], h).whole.resource;
          window_[r] = longest_window(r, until);
        }
        // When no window left holds the shortest chunk of the jobs not yet visited, each of
        // them would be skipped by the first test: the pass ends here.
        if (may_stop) {
          none = true;
          for (std::size_t r = 0; r < resources && none; ++r) none = bound_[r] > window_[r] + 1e-12 * until;
          if (none) {
            for (std::size_t r = 0; r < resources; ++r) least_raw_[r] = std::min(least_raw_[r], bound_[r]);
            break;
          }
        }
      }
    }
    multi_hop_ = multi;
    // The jobs that landed here, and those cancelled before, leave the queue.
    if (landed_.size() == landed_before) return;
    drop_cancelled();
  }

  /// The bookkeeping of job `id` (`j`) once a chunk of `size` bytes is placed from `s` to
  /// `end`: a job whose `last` chunk this is lands (its receipt) and frees its entry.
  void chunk_placed(job_id id, job& j, bytes size, seconds s, seconds end, bool last) {
    j.done_bytes += size;
    if (j.first_start < 0.0) {
      j.first_start = s;
      started_ring_[started_ % started_history] = {id, j.tag};
      ++started_;
    }
    j.last_start = s;
    j.last_end = std::max(j.last_end, end);
    ledger_.horizon = std::max(ledger_.horizon, end);
    if (last) land(id, j);
  }

  /// Job `id` (`j`), whose last chunk is placed, lands: its receipt, and its entry is freed.
  void land(job_id id, job& j) {
    landed_.push_back(transfer_receipt(j.first_start, j.last_end, j.payload, j.why, j.tag, ++serial_, j.crosses_link));
    j.active = false;
    free_slot(id);
  }

  void place_chunks(job_id id, seconds until) {
    job& j = jobs_[id];
    const std::size_t n = j.hop_count();
    if (n == 1) {
      place_chunks_one_hop(id, until);
      return;
    }
    while (j.active && j.done_bytes < j.payload) {
      const bytes size = std::min<bytes>(config_.chunk_bytes, j.payload - j.done_bytes);
      const bool last = j.done_bytes + size == j.payload;
      const double share = static_cast<double>(j.done_bytes + size) / static_cast<double>(j.payload);
      // Cheap rejections, exact: the start is never before `s0`, and a hop longer than its
      // resource's longest idle window before `until` (with a margin far above rounding)
      // cannot fit.
      const seconds s0 = std::max({j.ready, j.last_start, settled_});
      if (s0 >= until) return;
      if (until < std::numeric_limits<seconds>::infinity()) {
        const seconds margin = 1e-12 * until;
        for (std::size_t h = 0; h < n; ++h) {
          const hop_progress& p = hop_of(j, h);
          const hop& whole = p.whole;
          const seconds d = last ? whole.duration - p.done_seconds : whole.duration * share - p.done_seconds;
          if (d > window_[whole.resource] + margin) return;
        }
      }
      // Each hop's share of the chunk: the cumulative share minus what is placed, the
      // remainder exactly on the last chunk.
      chunk_.resize(n);
      for (std::size_t h = 0; h < n; ++h) {
        const hop_progress& p = hop_of(j, h);
        const hop& whole = p.whole;
        seconds d = last ? whole.duration - p.done_seconds : whole.duration * share - p.done_seconds;
        bytes m = last ? whole.moved - p.done_moved
                       : std::min<bytes>(whole.moved, static_cast<bytes>(static_cast<double>(whole.moved) * share)) -
                             std::min(p.done_moved, whole.moved);
        chunk_[h] = {whole.resource, std::max(d, 0.0), m, whole.charge_as};
      }
      seconds s = s0;
      for (;;) {
        seconds next = s;
        for (const hop& h : chunk_) {
          if (h.duration > 0.0) next = std::max(next, earliest_fit(h.resource, s, h.duration));
        }
        if (next == s) break;
        s = next;
      }
      // Within the idle time before `until` on every hop (a zero-length chunk: starting
      // before it).
      bool fits = s < until || (s == until && until == std::numeric_limits<seconds>::infinity());
      for (const hop& h : chunk_) fits = fits && s + h.duration <= until;
      if (!fits) return;
      seconds end = s;
      for (std::size_t h = 0; h < n; ++h) {
        const hop& c = chunk_[h];
        if (c.duration > 0.0) hold(c.resource, s, c.duration);
        charge(c.resource, c.charge_as.value_or(j.why), c.duration, c.moved);
        log(c.resource, s, c.duration, c.charge_as.value_or(j.why), c.moved, true);
        hop_of(j, h).done_seconds += c.duration;
        hop_of(j, h).done_moved += c.moved;
        end = std::max(end, s + c.duration);
      }
      chunk_placed(id, j, size, s, end, last);
    }
  }

  /// The next chunk of a job of one hop: its bytes, whether it is the job's last, its
  /// cumulative share of the payload and its duration before clamping at 0 (the remainder
  /// exactly on the last chunk).
  struct one_hop_chunk {
    bytes size = 0;
    bool last = false;
    double share = 0.0;
    seconds raw = 0.0;
  };
  [[nodiscard]] one_hop_chunk next_one_hop_chunk(const job& j) const noexcept {
    return chunk_after(config_.chunk_bytes, j.payload, static_cast<double>(j.payload), j.first.whole.duration,
                       j.done_bytes, j.first.done_seconds);
  }
  /// The next chunk of a job of one hop of `payload` bytes (`total` as a double) lasting
  /// `duration`, in chunks of `chunk` bytes, once `done_bytes` and `done_seconds` are placed.
  [[nodiscard]] static one_hop_chunk chunk_after(bytes chunk, bytes payload, double total, seconds duration,
                                                 bytes done_bytes, seconds done_seconds) noexcept {
    one_hop_chunk c;
    c.size = std::min<bytes>(chunk, payload - done_bytes);
    c.last = done_bytes + c.size == payload;
    c.share = static_cast<double>(done_bytes + c.size) / total;
    c.raw = c.last ? duration - done_seconds : duration * c.share - done_seconds;
    return c;
  }
  /// The bytes chunk `c` of a job of one hop moves, over a hop that moves `moved` bytes of
  /// which `done` are placed: the rest on the last chunk, else up to min(moved, moved × its
  /// cumulative share).
  [[nodiscard]] static bytes chunk_moved(bytes moved, bytes done, const one_hop_chunk& c) noexcept {
    return c.last ? moved - done
                  : std::min<bytes>(moved, static_cast<bytes>(static_cast<double>(moved) * c.share)) -
                        std::min(done, moved);
  }

  /// `place_chunks` for a job of one hop (a prefetch over one link), with the same
  /// arithmetic in the same order, without assembling the chunk's hops. Each chunk's figures
  /// are computed once (`next_one_hop_chunk`, which also keeps `next_[id]`), and a chunk
  /// that cannot end before the resource's last idle gap ends (the common case: the job
  /// streams behind the resource's last operation) is placed without searching the gaps, by
  /// `stream_chunks` together with the chunks that stream after it.
  /// With the fast paths the first chunk is tested on its duration kept in `next_[id]` (the
  /// same value): its share (a division) and bytes are computed only once it fits.
  void place_chunks_one_hop(job_id id, seconds until) {
    job& j = jobs_[id];
    const hop& whole = j.first.whole;
    const resource_id r = whole.resource;
    state& st = state_[r];
    const cost_kind as = whole.charge_as.value_or(j.why);
    const bool bounded = until < std::numeric_limits<seconds>::infinity();
    const seconds limit = bounded ? window_[r] + 1e-12 * until : 0.0;
    if (!j.active || j.done_bytes >= j.payload) return;
    MOEPOLICY_ASSERT(next_[id].one_hop && next_[id].raw == next_one_hop_chunk(j).raw);
    // Without the fast paths the chunk is computed first (the reference the fast paths are
    // tested against).
    bool computed = !config_.fast_paths;  // whether `c` holds the next chunk
    one_hop_chunk c = computed ? next_one_hop_chunk(j) : one_hop_chunk{};
    seconds raw = computed ? c.raw : next_[id].raw;
    for (;;) {
      const seconds s0 = std::max({j.ready, j.last_start, settled_});
      if (s0 >= until) return;
      if (bounded && raw > limit) return;
      const seconds d = std::max(raw, 0.0);
      seconds s = s0;
      if (d > 0.0) {
        // A window of `d` from `s0` or later ends after every gap ends (the last gap ends
        // last): every gap is rejected, and the search ends at `free_at` or `s0`, as
        // `earliest_fit` finds.
        const seconds last_gap_end = st.gaps.empty() ? -std::numeric_limits<seconds>::infinity() : st.gaps.back().end;
        if (config_.fast_paths && s0 + d > last_gap_end) {
          if (!computed) c = next_one_hop_chunk(j);
          if (!stream_chunks(id, until, limit, s0, d, c)) return;
          raw = c.raw;
          computed = true;
          continue;
        }
        for (;;) {
          const seconds next = std::max(s, earliest_fit(r, s, d));
          if (next == s) break;
          s = next;
        }
      }
      const bool fits = (s < until || (s == until && !bounded)) && s + d <= until;
      if (!fits) return;
      if (!computed) c = next_one_hop_chunk(j);
      const bytes m = chunk_moved(whole.moved, j.first.done_moved, c);
      const std::size_t rest = d > 0.0 ? hold(r, s, d) : no_gap;
      charge(r, as, d, m);
      log(r, s, d, as, m, true);
      j.first.done_seconds += d;
      j.first.done_moved += m;
      const seconds end = std::max(s, s + d);
      chunk_placed(id, j, c.size, s, end, c.last);
      if (!j.active || j.done_bytes >= j.payload) {
        next_[id].one_hop = false;
        return;
      }
      c = next_one_hop_chunk(j);
      computed = true;
      raw = c.raw;
      set_next(id, j, c);
      // The chunk went into an idle gap and left idle time after it there: the chunks that
      // follow it in that gap are placed together.
      if (config_.fast_paths && rest != no_gap) {
        if (gap_chunks(id, until, limit, rest, s, c)) return;
        raw = c.raw;
      }
    }
  }

  /// The bytes a job of one hop has placed after a chunk of cumulative share `share`
  /// (`last`: the job's last chunk) over a hop that moves `moved` bytes, the sum of the
  /// chunks' bytes as `chunk_moved` counts them chunk by chunk: each chunk brings the placed
  /// bytes to min(moved, moved × its share), the last to `moved` (they start at most `moved`
  /// and never exceed it), which is `chunk_moved` from none placed. `gap_chunks` and
  /// `stream_chunks` count the bytes of a run this way, once, when no log needs each
  /// chunk's (the same integer sum).
  [[nodiscard]] static bytes bytes_placed_after(bytes moved, double share, bool last) noexcept {
    return chunk_moved(moved, 0, {.last = last, .share = share});
  }

  /// Places the chunks of job `id` (of one hop, pending) that follow, in the same idle gap,
  /// a chunk the gap search just placed from `s` in a gap whose idle time after that chunk
  /// is `state_[r].gaps[g]` (it starts where the chunk ends); `c` is the job's next chunk,
  /// `limit` the bound of `place_chunks_one_hop`. One chunk after another in a tight loop,
  /// with the arithmetic of `place_chunks_one_hop` in the same order (each chunk's share,
  /// duration, bytes, its start the previous chunk's end, the busy seconds added chunk by
  /// chunk), until the job lands or its next chunk does not fit in what is left of the gap;
  /// the job's and the ledger's figures are stored once at the end, as `stream_chunks`
  /// stores them, and the gap is shrunk once.
  ///
  /// Why the gap search would place each of these chunks at the previous chunk's end `e`:
  /// its earliest start `s0` is the previous chunk's start `s` (at or after `ready` and
  /// `settled_`), every gap before the one left in the gap ends by `s`, so a chunk of
  /// duration `d` with `s + d > s` and `e + d > e` (not below the clock's rounding at `s`
  /// or `e`) fits in none of them from `s` or `e`, and it fits from `e` in the gap left when
  /// `e + d` ends by that gap's end (which also keeps `s0 + d` within the last gap, so the
  /// chunk is not one that streams). `hold` would then leave the gap [e + d, end): after
  /// the last chunk the gap starts where it ends, or is dropped when it ends at the gap's
  /// end, as the chunk-by-chunk holds leave it. Any chunk outside these conditions is left
  /// to `place_chunks_one_hop`, which repeats the tests.
  ///
  /// Returns whether the job landed.
  bool gap_chunks(job_id id, seconds until, seconds limit, std::size_t g, seconds s, one_hop_chunk& c) {
    job& j = jobs_[id];
    const hop& whole = j.first.whole;
    const resource_id r = whole.resource;
    state& st = state_[r];
    resource_account& a = ledger_.resources[r];
    const auto as = static_cast<std::size_t>(whole.charge_as.value_or(j.why));
    const bool bounded = until < std::numeric_limits<seconds>::infinity();
    const seconds duration = whole.duration;
    const bytes moved = whole.moved, payload = j.payload, chunk = config_.chunk_bytes;
    const double total = static_cast<double>(payload);
    const seconds gap_end = st.gaps[g].end;
    seconds e = st.gaps[g].start;  // the previous chunk's end
    seconds busy = a.busy_by[as], done_s = j.first.done_seconds;
    seconds last_start = j.last_start, last_end = j.last_end, horizon = ledger_.horizon;
    bytes done_m = j.first.done_moved, done_b = j.done_bytes;
    const bytes done_m0 = done_m;  // the bytes placed before the run
    MOEPOLICY_ASSERT(done_m0 <= moved);
    std::size_t ops = 0;
    seconds least = std::numeric_limits<seconds>::infinity();
    bool landed = false;
    for (;;) {
      // The chunk's earliest start is the previous chunk's start `s` (at or after `ready`
      // and `settled_`), and `s <= e < end <= until` when the test below passes: the tests
      // of the earliest start (`s0 == s`, `s0 < until`) and of `e` against `until` hold
      // whenever it does, and are not repeated.
      MOEPOLICY_ASSERT(std::max({j.ready, last_start, settled_}) == s);
      const seconds d = std::max(c.raw, 0.0);
      const seconds end = e + d;
      if (!(!(bounded && c.raw > limit) && d > 0.0 && s + d > s && end > e && end <= gap_end && end <= until)) break;
      if (log_ != nullptr) {
        const bytes m = chunk_moved(moved, done_m, c);
        log_->push_back({r, e, end, static_cast<cost_kind>(as), m, true});
        done_m += m;
      }
      busy += d;
      ++ops;
      done_s += d;
      done_b += c.size;
      last_start = e;
      s = e;
      e = end;
      if (c.last) {
        landed = true;
        break;
      }
      c = chunk_after(chunk, payload, total, duration, done_b, done_s);
      least = std::min(least, c.raw);
    }
    if (ops == 0) return false;
    // Each chunk ends after the one before (`end > e`), so the last placed ends last: the
    // largest end is taken once. The last chunk's cumulative share is the bytes placed over
    // the payload (as `chunk_after` computed it), and it was the job's last when it landed.
    last_end = std::max(last_end, e);
    horizon = std::max(horizon, e);
    if (log_ == nullptr) done_m = bytes_placed_after(moved, static_cast<double>(done_b) / total, landed);
    if (e < gap_end) {
      st.gaps[g].start = e;
    } else {
      st.gaps.erase(st.gaps.begin() + static_cast<std::ptrdiff_t>(g));
    }
    a.busy_by[as] = busy;
    a.bytes_by[as] += done_m - done_m0;
    a.operations += ops;
    j.first.done_seconds = done_s;
    j.first.done_moved = done_m;
    j.done_bytes = done_b;
    j.last_start = last_start;
    j.last_end = last_end;
    ledger_.horizon = horizon;
    least_raw_[r] = std::min(least_raw_[r], least);
    if (landed) {
      land(id, j);
      next_[id].one_hop = false;
      return true;
    }
    set_next(id, j, c);
    return false;
  }

  /// Places the chunks of job `id` (of one hop, pending) that stream behind its resource's
  /// last operation, from the next chunk `c` (its duration `d` = max(c.raw, 0), its earliest
  /// start `s0`; it passed the tests of `place_chunks_one_hop` and cannot end before the
  /// resource's last idle gap ends), one after another in a tight loop with the arithmetic
  /// of `place_chunks_one_hop` in the same order, until the job lands or its next chunk
  /// cannot be placed in this pass: each chunk's share, duration and bytes, the job's and
  /// the resource's busy seconds added chunk by chunk. The job's and the ledger's figures
  /// are kept in locals and stored once at the end (`next_[id]` and `least_raw_` as
  /// `set_next` leaves them after every chunk): what is observable chunk by chunk (the log,
  /// a gap left before the first chunk) is written as it happens; integer counts
  /// (operations, bytes) are added once, which is the same sum. Like `gap_chunks`, it keeps
  /// these figures in its own locals: held in one struct shared by the two loops, they were
  /// kept in memory across chunks by g++ 12 (-O2), and `BM_timeline_stream` took twice as
  /// long (260 → 550 ns for its 32 chunks).
  ///
  /// Each later chunk is tested as `place_chunks_one_hop` tests it: the resource's gaps all
  /// end by the first chunk's start and each later chunk's earliest start `s0` is at or
  /// after it, so the test `s0 + d > last gap's end` holds for every chunk of zero or
  /// positive duration but one shorter than the clock's rounding at `s0` (`s0 + d == s0`)
  /// behind a gap that ends at `s0`; that chunk is left to the gap search.
  ///
  /// Returns false when the job landed or its next chunk cannot be placed in this pass,
  /// true when the next chunk (now in `c`) needs the gap search.
  bool stream_chunks(job_id id, seconds until, seconds limit, seconds s0, seconds d, one_hop_chunk& c) {
    job& j = jobs_[id];
    const hop& whole = j.first.whole;
    const resource_id r = whole.resource;
    state& st = state_[r];
    resource_account& a = ledger_.resources[r];
    const auto as = static_cast<std::size_t>(whole.charge_as.value_or(j.why));
    const bool bounded = until < std::numeric_limits<seconds>::infinity();
    const seconds duration = whole.duration, settled = settled_;
    const bytes moved = whole.moved, payload = j.payload, chunk = config_.chunk_bytes;
    const double total = static_cast<double>(payload);
    seconds last_gap_end = st.gaps.empty() ? -std::numeric_limits<seconds>::infinity() : st.gaps.back().end;
    seconds free_at = st.free_at, busy = a.busy_by[as], done_s = j.first.done_seconds;
    seconds last_start = j.last_start, last_end = j.last_end, horizon = ledger_.horizon;
    bytes done_m = j.first.done_moved, done_b = j.done_bytes;
    const bytes done_m0 = done_m;  // the bytes placed before the run
    MOEPOLICY_ASSERT(done_m0 <= moved);
    // The latest end of the run's chunks, for the job's `last_end` and the ledger's horizon.
    seconds latest = -std::numeric_limits<seconds>::infinity();
    bool first = true;  // only the run's first chunk can be the job's first
    std::size_t ops = 0;
    seconds least = std::numeric_limits<seconds>::infinity();
    const auto store = [&] {
      // The last chunk placed: its cumulative share is the bytes placed over the payload (as
      // `chunk_after` computed it), and it was the job's last when they are the payload.
      if (log_ == nullptr && ops != 0) {
        done_m = bytes_placed_after(moved, static_cast<double>(done_b) / total, done_b == payload);
      }
      last_end = std::max(last_end, latest);
      horizon = std::max(horizon, latest);
      st.free_at = free_at;
      a.busy_by[as] = busy;
      a.bytes_by[as] += done_m - done_m0;
      a.operations += ops;
      j.first.done_seconds = done_s;
      j.first.done_moved = done_m;
      j.done_bytes = done_b;
      j.last_start = last_start;
      j.last_end = last_end;
      ledger_.horizon = horizon;
    };
    for (;;) {
      // The chunk `c` from `s0`, of duration `d`, streams: it starts at `free_at` or `s0`.
      const seconds s = d > 0.0 ? std::max(s0, free_at) : s0;
      if (!((s < until || (s == until && !bounded)) && s + d <= until)) {
        store();
        set_next(id, j, c);
        least_raw_[r] = std::min(least_raw_[r], least);
        return false;
      }
      if (d > 0.0) {
        const seconds from = std::max(free_at, settled);
        if (s > from) {
          st.gaps.push_back({from, s});
          last_gap_end = s;
        }
        free_at = s + d;
      }
      if (log_ != nullptr) {
        const bytes m = chunk_moved(moved, done_m, c);
        if (d > 0.0) log_->push_back({r, s, s + d, static_cast<cost_kind>(as), m, true});
        done_m += m;
      }
      busy += d;
      ++ops;
      done_s += d;
      const seconds end = std::max(s, s + d);
      done_b += c.size;
      if (first) {
        first = false;
        if (j.first_start < 0.0) {
          j.first_start = s;
          started_ring_[started_ % started_history] = {id, j.tag};
          ++started_;
        }
      }
      last_start = s;
      latest = std::max(latest, end);
      if (c.last) {
        store();
        least_raw_[r] = std::min(least_raw_[r], least);
        land(id, j);
        next_[id].one_hop = false;
        return false;
      }
      c = chunk_after(chunk, payload, total, duration, done_b, done_s);
      least = std::min(least, c.raw);
      // The next chunk's earliest start, max(ready, last start, settled), is this chunk's
      // start `s` (at or after `s0`), which is before `until` (or `until` is infinite).
      MOEPOLICY_ASSERT(std::max({j.ready, last_start, settled}) == s);
      s0 = s;
      d = std::max(c.raw, 0.0);
      const bool stop = bounded && c.raw > limit;
      if (stop || (d > 0.0 && !(s0 + d > last_gap_end))) {
        store();
        set_next(id, j, c);
        least_raw_[r] = std::min(least_raw_[r], least);
        return !stop;
      }
    }
  }

  /// `next_[id]` from job `id`'s state, with the arithmetic of `place_chunks_one_hop`.
  void refresh_next(job_id id) noexcept {
    const job& j = jobs_[id];
    next_chunk& c = next_[id];
    c.one_hop = j.more_count == 0 && j.active && j.done_bytes < j.payload;
    if (!c.one_hop) return;
    set_next(id, j, next_one_hop_chunk(j));
  }

  /// `next_[id]` for job `id` (`j`, of one hop, pending) whose next chunk is `c`.
  void set_next(job_id id, const job& j, const one_hop_chunk& c) noexcept {
    next_chunk& n = next_[id];
    n.one_hop = true;
    n.resource = j.first.whole.resource;
    n.earliest = std::max(j.ready, j.last_start);
    n.raw = c.raw;
    least_raw_[n.resource] = std::min(least_raw_[n.resource], n.raw);
  }

  /// Every slot made free: those of `reserved_hops` hops (and any made beyond the
  /// reservation) in `free_jobs_`, those of one hop in `free_one_hop_`, each taken lowest id
  /// first.
  void fill_free_slots() noexcept {
    free_jobs_.clear();
    free_one_hop_.clear();
    for (std::size_t i = jobs_.size(); i-- > 0;) free_slot(static_cast<job_id>(i));
  }
  /// Returns slot `id` to its free list.
  void free_slot(job_id id) noexcept { (jobs_[id].one_hop_slot ? free_one_hop_ : free_jobs_).push_back(id); }

  /// A free slot for a job of `hops` hops: a free slot of one hop for such a job, while any
  /// is free or still to make; else a free slot of `reserved_hops` hops, while any is free
  /// or still to make; else a new slot (which allocates when the reservation is spent).
  job_id take_slot(std::size_t hops) {
    const auto pop = [](std::vector<job_id>& free) {
      const job_id id = free.back();
      free.pop_back();
      return id;
    };
    if (hops == 1) {
      if (!free_one_hop_.empty()) return pop(free_one_hop_);
      if (made_one_hop_ < config_.reserved_one_hop_jobs) {
        ++made_one_hop_;
        return make_slot(true, 0);
      }
    }
    if (!free_jobs_.empty()) return pop(free_jobs_);
    if (made_jobs_ < config_.reserved_jobs) {
      ++made_jobs_;
      return make_slot(false, std::max<std::size_t>(config_.reserved_hops, 1) - 1);
    }
    return make_slot(false, 0);
  }
  /// Makes slot `jobs_.size()` with room for `more_room` hops after its first in `more_`.
  job_id make_slot(bool one_hop, std::size_t more_room) {
    const auto id = static_cast<job_id>(jobs_.size());
    job& j = jobs_.emplace_back();
    j.one_hop_slot = one_hop;
    j.more_at = static_cast<std::uint32_t>(more_.size());
    j.more_room = static_cast<std::uint32_t>(more_room);
    more_.resize(more_.size() + more_room);
    next_.emplace_back();
    return id;
  }

  timeline_config config_;
  ledger ledger_;
  std::vector<state> state_;
  std::vector<job> jobs_;
  /// The hops after the first of the jobs of several hops, a segment per slot.
  std::vector<hop_progress> more_;
  /// Slots made of `reserved_jobs` and of `reserved_one_hop_jobs`.
  std::size_t made_jobs_ = 0, made_one_hop_ = 0;
  std::vector<job_id> free_jobs_;
  /// The free slots of one hop (`timeline_config::reserved_one_hop_jobs`).
  std::vector<job_id> free_one_hop_;
  /// The pending jobs in placement order, priority then first in first out, and the entries
  /// of jobs cancelled since the last pass that dropped them.
  std::vector<queued> order_;
  /// The entries in `order_` of jobs cancelled since cancelled entries were last dropped.
  std::size_t cancelled_ = 0;
  std::vector<hop> chunk_;
  /// Per resource, the longest idle window of the current `place_queued` pass.
  std::vector<seconds> window_;
  /// Per resource, at most the `raw` of every pending one-hop job's next chunk on it (+inf
  /// when none): exact after a `place_queued` pass that visits the jobs, lowered as jobs
  /// are queued or place chunks. `multi_hop_`: at least the pending jobs of several hops.
  std::vector<seconds> least_raw_;
  std::vector<seconds> bound_;
  std::size_t multi_hop_ = 0;
  std::uint64_t started_ = 0;
  /// The last `started_history` jobs to start, and their tags, by `started_` modulo.
  std::vector<std::pair<job_id, std::uint64_t>> started_ring_ =
      std::vector<std::pair<job_id, std::uint64_t>>(started_history);
  /// Per job of one hop, what `place_chunks_one_hop` tests first, kept compact so that a
  /// pass over many jobs that cannot place a chunk touches little memory.
  struct next_chunk {
    bool one_hop = false;
    resource_id resource = 0;
    std::uint64_t seq = 0;   // the job's, for `live`
    seconds earliest = 0.0;  // max(ready, last_start)
    seconds raw = 0.0;       // the next chunk's duration before clamping at 0
  };
  std::vector<next_chunk> next_;
  std::vector<transfer_receipt> landed_;
  std::vector<occupation>* log_ = nullptr;
  seconds settled_ = 0.0;
  std::uint64_t next_seq_ = 0;
  std::uint64_t serial_ = 0;
};

}  // namespace moepolicy
