// moepolicy/residency/transition_queue.hpp — the non-blocking transition pipeline (DynaExq,
// "Dynamic Expert Quantization for Scalable Mixture-of-Experts Inference", §3.3 "admission
// check", §3.4 "Asynchronous queues and backpressure", "Update/Evict procedure", §4).
//
// The pipeline takes promotion and demotion requests (from the policy,
// predict/precision_target.hpp), and a worker turns them into transitions of the handle
// table (residency/versioned_expert.hpp):
//
//   promotion  reserve b_hi in M_hi (residency/budget_tracker.hpp) → take a block from the
//              high pool → `begin` (state promoting) → mover copies the prepacked high version
//              from host memory → once the completion reports done, `publish` (one atomic
//              store; windows pinned from then on see it) → the old low version (with
//              `low_version::replaced`) retires and, after its grace period, returns its block
//              and its bytes;
//   demotion   with `replaced`: the same with the low version, reserved in M_lo or, when M_lo
//              is full, in the temporary pool (state demoting); with `kept`: switch the handle
//              to the resident low version and retire the high one.
// Every reservation is of the pool's block bytes, and each bound is at most its pool's arena
// (checked at construction), so a reservation always finds its block: the pools never
// overflow the budget, and the budget never overflows the device.
//
// Queues (§3.4 names "an update queue for promotion and demotion and an eviction queue").
// Our reading keeps what frees budget apart from what consumes it, so that "the worker
// prioritizes evictions when the memory budget is tight" is a choice between two queue
// heads:
//   update queue    promotions (consume b_hi);
//   eviction queue  demotions (free b_hi; with `replaced`, consume b_lo first);
//   retire list     versions awaiting their grace period, served first at every step
//                   (§3.2 "reclaiming the freed storage in the background").
//
// Admission (`admission_point`). §3.4: "Backpressure is implemented at admission: a
// promotion is enqueued only if it passes the budget reservation check"; §3.3: "If the
// reservation fails, the runtime does not initiate the promotion. Instead, it defers the
// promotion or schedules evictions to reclaim capacity".
//   enqueue (default, the paper)  `request_*` reserves the block's bytes at once; an admitted
//                request enters its queue holding its reservation (so a later request cannot
//                take the budget it waits on), and a refused one is *deferred*: it waits in a
//                deferred list, outside the queues, and every step retries the deferred heads
//                (demotions, then promotions) after reclaiming, moving those admitted to the
//                back of their queue. The budget is *tight* while a promotion is deferred.
//   issue        (the earlier behaviour, an option) requests queue without a reservation; the
//                worker reserves when it issues, and a refused head stays at the head of its
//                queue and is retried next step. The budget is tight when the head promotion
//                could not reserve now.
// Either way the forward pass keeps using its pinned mapping.
//
// Each step: (1) publish every in-flight copy whose completion is done; (2) one scan of the
// reader slots; reclaim retired versions no reader can hold; (3) with admission at enqueue,
// retry deferred requests; (4) issue new transitions while fewer than `max_in_flight` copies
// run (bounded interference, §3.4) and the per-step byte cap allows: when the budget is tight
// demotions go first, otherwise the older head. An expert transitions again only once it has
// *settled* (every window pinned before its last publication has ended; the table's
// `settled`), so a window meets at most one publication per expert. Requests are idempotent
// per expert (a desired tier per expert; a request that is stale when served is dropped,
// releasing its reservation, and counted as cancelled); an expert in the middle of a
// transition waits at the back of its queue.
//
// Threads: `request_*` from any thread; `step()` from one thread at a time (the caller's
// for deterministic tests and replays, or the background worker of `start()`); readers
// resolve handles concurrently through the table. Queues and desired tiers are guarded by
// a small mutex held only for O(1) bookkeeping (never during a copy); the table's writer
// side and the in-flight slots by the step mutex. Allocation-free after construction,
// except `start()` (which creates the thread).
//
// Per-transition queue delay — from the request that was served to the publication — is
// kept per kind (maximum and sum) and in a bounded log of `transition_record`s, so that a
// driver can report the worst-case promotion delay. `Clock` may be a replay's simulated
// clock.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <ratio>
#include <span>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/residency/block_pool.hpp"
#include "moepolicy/residency/budget_tracker.hpp"
#include "moepolicy/residency/concepts.hpp"
#include "moepolicy/residency/precision_tier.hpp"
#include "moepolicy/residency/versioned_expert.hpp"

namespace moepolicy {

/// Copies with `std::memcpy` on the calling thread: the copy is complete when `copy`
/// returns. For tests, examples and CPU engines.
struct host_memcpy_mover {
  struct completion {};

  /// Copies `src` into `dst`. Preconditions: `dst.size() >= src.size()` (asserted).
  completion copy(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
    MOEPOLICY_ASSERT(dst.size() >= src.size());
    if (!src.empty()) std::memcpy(dst.data(), src.data(), src.size());
    return {};
  }
  [[nodiscard]] bool done(const completion&) const noexcept { return true; }
  void wait(const completion&) const noexcept {}
};

static_assert(Mover<host_memcpy_mover>);
static_assert(WaitableMover<host_memcpy_mover>);

/// A clock that a replay advances by hand (for instance one tick per decode step, or the
/// modelled time of a simulated machine), so that queue delays come out in replay time.
/// One clock for the whole program: `set` before the pipeline calls that should see the
/// new time.
struct replay_clock {
  using rep = double;
  using period = std::ratio<1>;
  using duration = std::chrono::duration<double>;
  using time_point = std::chrono::time_point<replay_clock>;
  static constexpr bool is_steady = false;

  /// The time last `set` (0 initially).
  [[nodiscard]] static time_point now() noexcept { return time_point(duration(now_.load(std::memory_order_relaxed))); }
  /// Moves the clock to `t` seconds.
  static void set(seconds t) noexcept { now_.store(t, std::memory_order_relaxed); }

 private:
  static inline std::atomic<double> now_{0.0};
};

static_assert(TransitionClock<replay_clock>);

/// `replay_clock` with one clock per thread: `set` moves the calling thread's clock only, and
/// `now` reads the calling thread's (0 until its first `set`). For replays that run at once on
/// several threads, each stepping its own pipelines on its own thread (`step()`, never a
/// background worker from `start()`, which would read the worker's clock): each sees its own
/// modelled time.
struct thread_replay_clock {
  using rep = double;
  using period = std::ratio<1>;
  using duration = std::chrono::duration<double>;
  using time_point = std::chrono::time_point<thread_replay_clock>;
  static constexpr bool is_steady = false;

  /// The time the calling thread last `set` (0 initially).
  [[nodiscard]] static time_point now() noexcept { return time_point(duration(now_)); }
  /// Moves the calling thread's clock to `t` seconds.
  static void set(seconds t) noexcept { now_ = t; }

 private:
  static inline thread_local double now_ = 0.0;
};

static_assert(TransitionClock<thread_replay_clock>);

/// Promotion (low → high) or demotion (high → low).
enum class transition_kind : std::uint8_t { promotion, demotion };

/// One published transition.
struct transition_record {
  expert_key key;
  transition_kind kind = transition_kind::promotion;
  /// Bytes copied (0 for a demotion that only switched to a kept low version).
  bytes bytes_moved = 0;
  /// From the served request to the publication.
  seconds queue_delay = 0.0;
  /// From the start of the copy to the publication (as observed by the polling step).
  seconds copy_seconds = 0.0;
  /// The published version's number.
  std::uint64_t version = 0;
};

/// Counters of a pipeline since construction (a snapshot).
struct transition_stats {
  std::uint64_t promotions = 0;
  std::uint64_t demotions = 0;
  /// Requests that needed nothing when served (the expert already had the desired tier, or
  /// a later request had changed it).
  std::uint64_t cancelled = 0;
  /// Admission attempts refused by the budget or an empty pool (backpressure events): at
  /// enqueue, at each retry of a deferred request, or at issue.
  std::uint64_t admission_waits = 0;
  /// Requests deferred at enqueue because their reservation failed
  /// (`admission_point::enqueue`); each counts once.
  std::uint64_t deferred = 0;
  /// Reservations charged to the temporary pool (transient copies beyond M_lo or M_hi).
  std::uint64_t staged = 0;
  /// Old versions returned to their pool after their grace period.
  std::uint64_t reclaimed = 0;
  bytes bytes_moved = 0;
  seconds max_promotion_delay = 0.0;
  seconds max_demotion_delay = 0.0;
  seconds total_promotion_delay = 0.0;
  seconds total_demotion_delay = 0.0;
  /// Records overwritten in the log before `drain_log` took them.
  std::uint64_t log_overwritten = 0;
};

/// When a transition's reservation is made (DynaExq §3.3, §3.4).
enum class admission_point : std::uint8_t {
  enqueue,  ///< at the request: refused requests are deferred, outside the queues (the paper)
  issue,    ///< when the worker starts the transition: refused heads stay queued
};

/// Configuration of `transition_pipeline`.
struct transition_pipeline_config {
  /// Copies in flight at once on the migration stream (>= 1). With a mover whose copies
  /// complete at once (`host_memcpy_mover`) a copy still publishes only at the next step,
  /// so this also bounds the transitions started per step.
  std::size_t max_in_flight = 2;
  /// Issuing stops for the step once the copies it started reach this many bytes; the
  /// copy that crosses the limit still starts, so a step may exceed it by up to one
  /// version (subtract one version to hold a hard link limit). 0: no cap.
  bytes max_issue_bytes_per_step = 0;
  /// Records kept for `drain_log`; 0 keeps none.
  std::size_t log_capacity = 1024;
  /// How long the background worker sleeps after a step that made no progress (it wakes
  /// early on a request).
  std::chrono::microseconds idle_wait{200};
  /// When reservations are made.
  admission_point admission = admission_point::enqueue;
};

/// What one `step` did.
struct transition_step_result {
  std::size_t published = 0;
  std::size_t reclaimed = 0;
  std::size_t issued = 0;
  /// Deferred requests admitted into their queue this step (`admission_point::enqueue`).
  std::size_t admitted = 0;
  /// Admissions refused this step (budget or pool).
  std::size_t blocked = 0;
  [[nodiscard]] bool progressed() const noexcept { return published + reclaimed + issued + admitted > 0; }
};

/// Outcome of `transition_pipeline::load_all`.
enum class residency_load_status : std::uint8_t { ok, over_budget, pool_exhausted };

/// The transition pipeline of DynaExq §3.4 over a `Mover`.
///
/// The table, budget and pools are the caller's and must outlive the pipeline.
template <Mover M, TransitionClock Clock = std::chrono::steady_clock>
class transition_pipeline {
 public:
  using time_point = typename Clock::time_point;

  /// `source_of(key, tier)` gives the prepacked version of every expert at both tiers; it
  /// is called 2 · L · E times here and never again.
  ///
  /// Throws: `invalid_argument` when a source is empty or larger than its pool's blocks,
  /// when a bound of `budget` exceeds the arena of the pool it guards (M_hi > high_pool's,
  /// or M_lo + M_stage > low_pool's for the staged low tier), or `max_in_flight` is 0.
  /// Complexity: O(L · E + log_capacity); the only allocation (with `start`).
  template <class SourceFn>
  requires std::is_invocable_r_v<version_source, SourceFn&, expert_key, precision_tier> transition_pipeline(
      versioned_expert_table& table, residency_budget& budget, block_pool& low_pool, block_pool& high_pool,
      SourceFn&& source_of, M mover = M{}, const transition_pipeline_config& config = {})
      : table_(table),
        budget_(budget),
        low_pool_(low_pool),
        high_pool_(high_pool),
        mover_(std::move(mover)),
        config_(config),
        n_(table.size()) {
    constexpr std::string_view fn = "transition_pipeline";
    if (config.max_in_flight == 0) detail::throw_invalid(fn, "max_in_flight must be > 0", config.max_in_flight);
    const auto arena = [](const block_pool& p) { return static_cast<bytes>(p.num_blocks()) * p.block_bytes(); };
    const bytes staged = budget.staging().cap();
    const bool low_staged = budget.config().staging_tier == precision_tier::low;
    const bytes high_bound = budget.high().cap() + (low_staged ? 0 : staged);
    const bytes low_bound = budget.low().cap() + (low_staged ? staged : 0);
    if (high_bound > arena(high_pool)) {
      detail::throw_invalid(fn, "the high-precision bound exceeds high_pool's arena", high_bound);
    }
    if (low_bound > arena(low_pool)) {
      detail::throw_invalid(fn, "the low-precision bound (with the staging pool) exceeds low_pool's arena", low_bound);
    }
    sources_.resize(2 * n_);
    for (std::size_t i = 0; i < n_; ++i) {
      for (precision_tier t : {precision_tier::low, precision_tier::high}) {
        const version_source s = source_of(table.key_of(i), t);
        const block_pool& pool = t == precision_tier::high ? high_pool : low_pool;
        if (s.bytes.empty()) detail::throw_invalid(fn, "every source must hold at least one byte", s.bytes.size());
        if (s.bytes.size() > pool.block_bytes()) {
          detail::throw_invalid(fn,
                                t == precision_tier::high ? "a high-precision source is larger than high_pool's blocks"
                                                          : "a low-precision source is larger than low_pool's blocks",
                                s.bytes.size());
        }
        sources_[2 * i + static_cast<std::size_t>(t)] = s;
      }
    }
    desired_.assign(n_, precision_tier::low);
    promote_queued_.assign(n_, 0);
    demote_queued_.assign(n_, 0);
    promotions_.init(n_);
    demotions_.init(n_);
    deferred_[0].init(n_);
    deferred_[1].init(n_);
    retired_.init(n_);
    flights_.resize(config.max_in_flight);
    log_.resize(config.log_capacity);
  }

  transition_pipeline(const transition_pipeline&) = delete;
  transition_pipeline& operator=(const transition_pipeline&) = delete;

  /// Calls `shutdown()`.
  ~transition_pipeline() { shutdown(); }

  // ---- setup --------------------------------------------------------------------------

  /// Loads every absent expert at `tier`, synchronously (reserve, allocate, copy, wait,
  /// install), before serving starts. The temporary pool is not used.
  ///
  /// Returns: `ok`, or the first shortage met; experts loaded before it stay loaded.
  /// Throws: `invalid_argument` when the table keeps low versions and `tier` is high (the
  /// low version must be resident first).
  [[nodiscard]] residency_load_status load_all(precision_tier tier = precision_tier::low) {
    if (table_.config().low == low_version::kept && tier == precision_tier::high) {
      detail::throw_invalid("transition_pipeline::load_all",
                            "with kept low versions experts load at low precision first", to_string(tier));
    }
    return load_all([tier](expert_key) { return tier; });
  }

  /// Loads every absent expert at `tier_of(key)`, as the other overload: for instance a
  /// static high-precision set at high and the rest at low, which is how pools planned for
  /// `replaced` start (their low pool holds L·E − N + k versions, not L·E).
  ///
  /// Throws: `invalid_argument` when the table keeps low versions and `tier_of` gives high
  /// (experts loaded before stay loaded).
  template <class TierFn>
  requires std::is_invocable_r_v<precision_tier, TierFn&, expert_key>
  [[nodiscard]] residency_load_status load_all(TierFn&& tier_of) {
    std::lock_guard step_lock(step_mutex_);
    for (std::size_t i = 0; i < n_; ++i) {
      const expert_key key = table_.key_of(i);
      if (table_.state(key) != residency_state::absent) continue;
      const precision_tier tier = tier_of(key);
      if (table_.config().low == low_version::kept && tier == precision_tier::high) {
        detail::throw_invalid("transition_pipeline::load_all",
                              "with kept low versions experts load at low precision first", to_string(tier));
      }
      block_pool& pool = pool_of(tier);
      const version_source& src = source(i, tier);
      if (budget_.try_reserve(tier, pool.block_bytes(), false) == budget_account::none) {
        return residency_load_status::over_budget;
      }
      const pool_block block = pool.try_allocate();
      if (!block) {
        budget_.release(tier, pool.block_bytes());
        return residency_load_status::pool_exhausted;
      }
      auto c = mover_.copy(block.data.first(src.bytes.size()), src.bytes);
      wait_for(c);
      table_.install(key, tier, {&pool, block, pool.block_bytes(), tier}, src);
      shut_ = false;  // there is something to shut down again
      std::lock_guard lock(mutex_);
      desired_[i] = tier;
    }
    return residency_load_status::ok;
  }

  // ---- requests (any thread) ----------------------------------------------------------

  /// Asks for `key` at high precision. With admission at enqueue, reserves the high block's
  /// bytes now, or defers the request when they do not fit.
  ///
  /// Returns: true when a new request was queued or deferred; false when one was pending
  /// already or the expert is resident high (a pending demotion, if any, is then dropped
  /// when served).
  /// Complexity: O(1) under the queue mutex; no allocation.
  bool request_promote(expert_key key) { return request(key, precision_tier::high); }

  /// Asks for `key` at low precision. Returns and complexity as `request_promote`.
  bool request_demote(expert_key key) { return request(key, precision_tier::low); }

  /// Queues a layer's candidates: demotions first (they free budget), then promotions.
  ///
  /// Returns: the number of new requests queued or deferred.
  std::size_t request(layer_id layer, std::span<const expert_id> promote, std::span<const expert_id> demote) {
    std::size_t n = 0;
    for (expert_id e : demote) n += request_demote({layer, e});
    for (expert_id e : promote) n += request_promote({layer, e});
    return n;
  }

  /// The tier last requested for `key` (or loaded).
  [[nodiscard]] precision_tier desired_tier(expert_key key) const {
    std::lock_guard lock(mutex_);
    return desired_[table_.index_of(key)];
  }

  // ---- the worker ---------------------------------------------------------------------

  /// One round of the worker: publish completed copies, reclaim what no reader can hold,
  /// admit deferred requests, issue new transitions within the in-flight and budget limits.
  ///
  /// Complexity: O(copy slots up to the last one in flight (at most max_in_flight) + reclaimed + max_readers + queued);
  /// no allocation.
  transition_step_result step() noexcept {
    std::lock_guard step_lock(step_mutex_);
    transition_step_result r;
    complete(r);
    const std::uint64_t safe = table_.safe_epoch();  // after this step's publications
    reclaim(r, safe);
    std::unique_lock lock(mutex_);
    if (config_.admission == admission_point::enqueue) admit_deferred(r);
    issue(r, safe, lock);
    return r;
  }

  /// Starts a background worker that calls `step()` until `stop()`. Idempotent.
  ///
  /// Throws: `std::system_error` when the thread cannot be started.
  void start() {
    std::lock_guard lock(mutex_);
    if (worker_.joinable()) return;
    stop_requested_ = false;
    worker_ = std::thread([this] { run(); });
  }

  /// Stops and joins the background worker (if any); in-flight copies stay in flight.
  void stop() noexcept {
    std::thread w;
    {
      std::lock_guard lock(mutex_);
      stop_requested_ = true;
      w = std::move(worker_);
    }
    wake_.notify_all();
    if (w.joinable()) w.join();
  }

  /// Whether the background worker runs.
  [[nodiscard]] bool running() const {
    std::lock_guard lock(mutex_);
    return worker_.joinable();
  }

  /// Stops the worker, drops queued and deferred requests (releasing their reservations),
  /// finishes and publishes in-flight copies, waits for every retired version's grace
  /// period and for every pinned window to end, then evicts every version, returning all
  /// blocks to their pools and all bytes to the budget. Idempotent.
  ///
  /// Preconditions: readers unpin eventually (this waits for them) and pin no new window once
  /// it has begun evicting.
  void shutdown() noexcept {
    stop();
    std::lock_guard step_lock(step_mutex_);
    if (shut_) return;
    {
      std::lock_guard lock(mutex_);
      for (auto* q : {&promotions_, &demotions_}) {
        const precision_tier t = q == &promotions_ ? precision_tier::high : precision_tier::low;
        while (q->size() > 0) {
          const entry en = q->pop_front();
          if (en.reserved) budget_.release(t, pool_of(t).block_bytes());
        }
      }
      deferred_[0].clear();
      deferred_[1].clear();
      std::fill(promote_queued_.begin(), promote_queued_.end(), std::uint8_t{0});
      std::fill(demote_queued_.begin(), demote_queued_.end(), std::uint8_t{0});
    }
    transition_step_result r;
    for (auto& f : flights_) {
      if (f.c) wait_for(*f.c);
    }
    complete(r);
    while (retired_.size() > 0) {
      reclaim(r, table_.safe_epoch());
      if (retired_.size() > 0) std::this_thread::yield();
    }
    std::array<version_storage, 2> out{};
    for (std::size_t i = 0; i < n_; ++i) {
      const expert_key key = table_.key_of(i);
      for (;;) {
        const evict_result e = table_.evict(key, out);
        if (e.status == evict_status::readers_pinned) {
          std::this_thread::yield();  // a window is still open
          continue;
        }
        MOEPOLICY_ASSERT(e.status == evict_status::evicted || e.status == evict_status::absent);
        for (std::size_t j = 0; j < e.storages; ++j) give_back(out[j]);
        break;
      }
    }
    shut_ = true;
  }

  // ---- observers (any thread) ---------------------------------------------------------

  /// Counters since construction.
  [[nodiscard]] transition_stats stats() const noexcept {
    transition_stats s;
    s.promotions = promotions_done_.load(std::memory_order_relaxed);
    s.demotions = demotions_done_.load(std::memory_order_relaxed);
    s.cancelled = cancelled_.load(std::memory_order_relaxed);
    s.admission_waits = admission_waits_.load(std::memory_order_relaxed);
    s.deferred = deferrals_.load(std::memory_order_relaxed);
    s.staged = staged_.load(std::memory_order_relaxed);
    s.reclaimed = reclaimed_.load(std::memory_order_relaxed);
    s.bytes_moved = bytes_moved_.load(std::memory_order_relaxed);
    s.max_promotion_delay = max_delay_[0].load(std::memory_order_relaxed);
    s.max_demotion_delay = max_delay_[1].load(std::memory_order_relaxed);
    s.total_promotion_delay = total_delay_[0].load(std::memory_order_relaxed);
    s.total_demotion_delay = total_delay_[1].load(std::memory_order_relaxed);
    s.log_overwritten = log_overwritten_.load(std::memory_order_relaxed);
    return s;
  }

  /// Moves up to `out.size()` logged transitions, oldest first, into `out`.
  ///
  /// Returns: how many were written. No allocation.
  std::size_t drain_log(std::span<transition_record> out) {
    std::lock_guard lock(log_mutex_);
    const std::size_t n = std::min(out.size(), log_size_);
    for (std::size_t i = 0; i < n; ++i) {
      out[i] = log_[log_head_];
      log_head_ = (log_head_ + 1) % log_.size();
    }
    log_size_ -= n;
    return n;
  }

  /// Requests waiting in the update queue (promotions; admitted ones with enqueue admission).
  [[nodiscard]] std::size_t queued_promotions() const {
    std::lock_guard lock(mutex_);
    return promotions_.size();
  }
  /// Requests waiting in the eviction queue (demotions).
  [[nodiscard]] std::size_t queued_demotions() const {
    std::lock_guard lock(mutex_);
    return demotions_.size();
  }
  /// Promotions deferred at enqueue, waiting for budget.
  [[nodiscard]] std::size_t deferred_promotions() const {
    std::lock_guard lock(mutex_);
    return deferred_[0].size();
  }
  /// Demotions deferred at enqueue, waiting for budget (with `replaced`).
  [[nodiscard]] std::size_t deferred_demotions() const {
    std::lock_guard lock(mutex_);
    return deferred_[1].size();
  }
  /// Copies in flight.
  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_.load(std::memory_order_relaxed); }
  /// Retired versions awaiting their grace period.
  [[nodiscard]] std::size_t awaiting_reclaim() const noexcept { return awaiting_.load(std::memory_order_relaxed); }
  /// Nothing queued, deferred, in flight or awaiting reclamation.
  [[nodiscard]] bool idle() const {
    std::lock_guard lock(mutex_);
    return in_flight() == 0 && awaiting_reclaim() == 0 && promotions_.size() == 0 && demotions_.size() == 0 &&
           deferred_[0].size() == 0 && deferred_[1].size() == 0;
  }

  [[nodiscard]] M& mover() noexcept { return mover_; }
  [[nodiscard]] const transition_pipeline_config& config() const noexcept { return config_; }
  [[nodiscard]] versioned_expert_table& table() const noexcept { return table_; }
  [[nodiscard]] residency_budget& budget() const noexcept { return budget_; }
  /// The prepacked version of `key` at `tier`.
  [[nodiscard]] const version_source& source_of(expert_key key, precision_tier tier) const noexcept {
    return source(table_.index_of(key), tier);
  }

 private:
  struct entry {
    std::uint32_t index = 0;
    time_point enqueued{};
    /// Holds its reservation (made at enqueue, or at issue).
    bool reserved = false;
  };

  // A fixed-capacity double-ended ring; each expert occupies at most one slot per queue.
  template <class T>
  struct ring {
    std::vector<T> buf;
    std::size_t head = 0, count = 0;
    void init(std::size_t cap) { buf.resize(cap); }
    [[nodiscard]] std::size_t size() const noexcept { return count; }
    [[nodiscard]] T& front() noexcept { return buf[head]; }
    void push_back(const T& v) noexcept {
      MOEPOLICY_ASSERT(count < buf.size());
      buf[(head + count) % buf.size()] = v;
      ++count;
    }
    void push_front(const T& v) noexcept {
      MOEPOLICY_ASSERT(count < buf.size());
      head = (head + buf.size() - 1) % buf.size();
      buf[head] = v;
      ++count;
    }
    T pop_front() noexcept {
      MOEPOLICY_ASSERT(count > 0);
      T v = buf[head];
      head = (head + 1) % buf.size();
      --count;
      return v;
    }
    void clear() noexcept { head = count = 0; }
  };

  struct retired_entry {
    std::uint32_t index = 0;
    std::uint64_t epoch = 0;
  };

  struct flight {
    std::optional<typename M::completion> c;
    std::uint32_t index = 0;
    transition_kind kind = transition_kind::promotion;
    bytes size = 0;
    time_point enqueued{}, issued{};
  };

  [[nodiscard]] const version_source& source(std::size_t i, precision_tier t) const noexcept {
    return sources_[2 * i + static_cast<std::size_t>(t)];
  }
  [[nodiscard]] block_pool& pool_of(precision_tier t) const noexcept {
    return t == precision_tier::high ? high_pool_ : low_pool_;
  }
  static constexpr precision_tier tier_of(transition_kind k) noexcept {
    return k == transition_kind::promotion ? precision_tier::high : precision_tier::low;
  }
  static constexpr residency_state steady(precision_tier t) noexcept {
    return t == precision_tier::high ? residency_state::resident_high : residency_state::resident_low;
  }
  // Whether a transition of this kind copies a version in (and so needs a reservation).
  [[nodiscard]] bool copies(transition_kind k) const noexcept {
    return k == transition_kind::promotion || table_.config().low == low_version::replaced;
  }

  // Reserves the block bytes of a transition's incoming version.
  bool reserve(transition_kind k) noexcept {
    const precision_tier t = tier_of(k);
    const budget_account a = budget_.try_reserve(t, pool_of(t).block_bytes());
    if (a == budget_account::none) {
      admission_waits_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    if (a == budget_account::staging) staged_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  void unreserve(transition_kind k) noexcept {
    const precision_tier t = tier_of(k);
    budget_.release(t, pool_of(t).block_bytes());
  }

  bool request(expert_key key, precision_tier tier) {
    const std::size_t i = table_.index_of(key);
    const bool up = tier == precision_tier::high;
    const transition_kind kind = up ? transition_kind::promotion : transition_kind::demotion;
    {
      std::lock_guard lock(mutex_);
      desired_[i] = tier;
      auto& queued = up ? promote_queued_ : demote_queued_;
      if (queued[i] != 0) return false;
      // Already there: an opposite request still queued is now stale and will be dropped
      // when served. (The worker moves a resident expert only through a queued request, and
      // starts one only under this mutex, so the state cannot leave `steady` behind us.)
      if (table_.state(key) == steady(tier)) return false;
      queued[i] = 1;
      entry en{static_cast<std::uint32_t>(i), Clock::now(), false};
      if (config_.admission == admission_point::enqueue && copies(kind)) {
        if (!reserve(kind)) {
          deferred_[up ? 0 : 1].push_back(en);
          deferrals_.fetch_add(1, std::memory_order_relaxed);
          return true;
        }
        en.reserved = true;
      }
      (up ? promotions_ : demotions_).push_back(en);
    }
    wake_.notify_one();
    return true;
  }

  void wait_for(typename M::completion& c) noexcept {
    if constexpr (WaitableMover<M>) {
      mover_.wait(c);
    } else {
      while (!mover_.done(c)) std::this_thread::yield();
    }
  }

  void give_back(const version_storage& s) noexcept {
    s.pool->deallocate(s.block);
    budget_.release(s.tier, s.reserved);
  }

  // (1) Publish the copies whose completion is done, in slot order. Only the step thread
  // (under step_mutex_) engages or resets a slot and moves `in_flight_`, so it counts the
  // engaged slots exactly: the walk stops after the last one, and an idle pipeline walks none.
  void complete(transition_step_result& r) noexcept {
    std::size_t engaged = in_flight_.load(std::memory_order_relaxed);
    for (auto& f : flights_) {
      if (engaged == 0) break;
      if (!f.c) continue;
      --engaged;
      if (!mover_.done(*f.c)) continue;
      const expert_key key = table_.key_of(f.index);
      const auto pub = table_.publish(key);
      if (pub.retired) {
        retired_.push_back({f.index, pub.retire_epoch});
        awaiting_.fetch_add(1, std::memory_order_relaxed);
      }
      f.c.reset();
      in_flight_.fetch_sub(1, std::memory_order_relaxed);
      record(key, f.kind, f.size, f.enqueued, f.issued, pub.version->version);
      ++r.published;
    }
  }

  // (2) Return retired versions that no reader can hold any more (retire epochs increase
  // along the list, so it is served from the front).
  void reclaim(transition_step_result& r, std::uint64_t safe) noexcept {
    while (retired_.size() > 0 && retired_.front().epoch < safe) {
      const retired_entry e = retired_.pop_front();
      give_back(table_.reclaim(table_.key_of(e.index), safe));
      awaiting_.fetch_sub(1, std::memory_order_relaxed);
      reclaimed_.fetch_add(1, std::memory_order_relaxed);
      ++r.reclaimed;
    }
  }

  // (3) Admission at enqueue: retry the deferred heads, demotions first (with `replaced`
  // they make room for the promotions behind them). One block size per tier, so once a head
  // is refused the rest of its list would be too.
  void admit_deferred(transition_step_result& r) noexcept {
    for (const std::size_t q : {std::size_t{1}, std::size_t{0}}) {
      const transition_kind kind = q == 0 ? transition_kind::promotion : transition_kind::demotion;
      const precision_tier want = tier_of(kind);
      auto& list = deferred_[q];
      auto& queued = q == 0 ? promote_queued_ : demote_queued_;
      while (list.size() > 0) {
        entry en = list.front();
        const residency_state s = table_.state(table_.key_of(en.index));
        if (desired_[en.index] != want || s == steady(want) || s == residency_state::absent) {
          list.pop_front();
          queued[en.index] = 0;
          cancelled_.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        if (!reserve(kind)) {
          ++r.blocked;
          break;
        }
        list.pop_front();
        en.reserved = true;
        (q == 0 ? promotions_ : demotions_).push_back(en);
        ++r.admitted;
      }
    }
  }

  enum class outcome : std::uint8_t { issued, switched, dropped, busy, blocked };

  // Whether a promotion could be admitted now: the budget is tight when it could not.
  [[nodiscard]] bool tight() const noexcept {
    if (config_.admission == admission_point::enqueue) return deferred_[0].size() > 0;
    if (promotions_.size() == 0) return false;
    const bytes need = high_pool_.block_bytes();
    const bool staged = budget_.config().staging_tier == precision_tier::high;
    return budget_.high().available() < need && !(staged && budget_.staging().available() >= need);
  }

  // (4) Start new transitions.
  void issue(transition_step_result& r, std::uint64_t safe, std::unique_lock<std::mutex>& lock) noexcept {
    bytes issued_bytes = 0;
    bool blocked[2] = {false, false};  // [promotion, demotion] refused admission this step
    // Heads requeued because their expert was mid-transition or unsettled; each queue is
    // walked at most once per step, which bounds a step by O(queued).
    std::size_t busy[2] = {0, 0};
    const std::size_t walk[2] = {promotions_.size(), demotions_.size()};
    for (;;) {
      if (in_flight_.load(std::memory_order_relaxed) >= config_.max_in_flight) break;
      if (config_.max_issue_bytes_per_step != 0 && r.issued > 0 && issued_bytes >= config_.max_issue_bytes_per_step)
        break;
      const bool can_p = !blocked[0] && promotions_.size() > 0 && busy[0] < walk[0];
      const bool can_d = !blocked[1] && demotions_.size() > 0 && busy[1] < walk[1];
      if (!can_p && !can_d) break;
      bool demote_next = !can_p;
      if (can_p && can_d) demote_next = tight() || demotions_.front().enqueued <= promotions_.front().enqueued;
      const std::size_t q = demote_next ? 1 : 0;
      auto& queue = demote_next ? demotions_ : promotions_;
      auto& queued = demote_next ? demote_queued_ : promote_queued_;
      entry en = queue.pop_front();
      queued[en.index] = 0;
      const transition_kind kind = demote_next ? transition_kind::demotion : transition_kind::promotion;
      bytes moved = 0;
      switch (try_start(en, kind, safe, moved, lock)) {
        case outcome::issued:
          ++r.issued;
          issued_bytes += moved;
          break;
        case outcome::switched:
          ++r.published;
          break;
        case outcome::dropped:
          if (en.reserved) unreserve(kind);
          cancelled_.fetch_add(1, std::memory_order_relaxed);
          break;
        case outcome::busy:
          queue.push_back(en);
          queued[en.index] = 1;
          ++busy[q];
          break;
        case outcome::blocked:
          queue.push_front(en);
          queued[en.index] = 1;
          blocked[q] = true;
          ++r.blocked;
          break;
      }
    }
  }

  // Called under the queue mutex, so that a request sees either the queued entry or the
  // state it led to; the mutex is released only around the copy, after `begin` has moved
  // the expert to its transitional state.
  outcome try_start(entry& en, transition_kind kind, std::uint64_t safe, bytes& moved,
                    std::unique_lock<std::mutex>& lock) noexcept {
    const precision_tier want = tier_of(kind);
    if (desired_[en.index] != want) return outcome::dropped;
    const expert_key key = table_.key_of(en.index);
    const residency_state s = table_.state(key);
    if (s == residency_state::absent || s == steady(want)) return outcome::dropped;
    if (s != steady(want == precision_tier::high ? precision_tier::low : precision_tier::high)) return outcome::busy;
    if (!table_.settled(key, safe)) return outcome::busy;  // a window still sees the last publication as new

    if (!copies(kind)) {  // `kept` demotion: switch to the resident low version
      const time_point now = Clock::now();
      const auto pub = table_.switch_to_low(key);
      retired_.push_back({en.index, pub.retire_epoch});
      awaiting_.fetch_add(1, std::memory_order_relaxed);
      record(key, kind, 0, en.enqueued, now, pub.version->version);
      return outcome::switched;
    }
    if (!en.reserved) {  // admission at issue
      if (!reserve(kind)) return outcome::blocked;
      en.reserved = true;
    }
    block_pool& pool = pool_of(want);
    const pool_block block = pool.try_allocate();
    if (!block) {  // only when the pools are smaller than the bounds promised (checked at construction)
      admission_waits_.fetch_add(1, std::memory_order_relaxed);
      if (config_.admission == admission_point::issue) {
        unreserve(kind);
        en.reserved = false;
      }
      return outcome::blocked;
    }
    const version_source& src = source(en.index, want);
    const std::span<std::byte> dst = table_.begin(key, want, {&pool, block, pool.block_bytes(), want}, src);
    flight* slot = nullptr;
    for (auto& f : flights_) {
      if (!f.c) {
        slot = &f;
        break;
      }
    }
    MOEPOLICY_ASSERT(slot != nullptr);
    slot->index = en.index;
    slot->kind = kind;
    slot->size = src.bytes.size();
    slot->enqueued = en.enqueued;
    slot->issued = Clock::now();
    lock.unlock();  // a host copy may take a while; requests need not wait for it
    slot->c.emplace(mover_.copy(dst, src.bytes));
    lock.lock();
    in_flight_.fetch_add(1, std::memory_order_relaxed);
    moved = src.bytes.size();
    return outcome::issued;
  }

  void record(expert_key key, transition_kind kind, bytes size, time_point enqueued, time_point issued,
              std::uint64_t version) noexcept {
    const time_point now = Clock::now();
    const auto secs = [](auto d) { return std::chrono::duration_cast<std::chrono::duration<double>>(d).count(); };
    const transition_record rec{key, kind, size, secs(now - enqueued), secs(now - issued), version};
    const std::size_t k = kind == transition_kind::promotion ? 0 : 1;
    (k == 0 ? promotions_done_ : demotions_done_).fetch_add(1, std::memory_order_relaxed);
    bytes_moved_.fetch_add(size, std::memory_order_relaxed);
    // Single writer (the step mutex), so load-then-store is exact.
    if (rec.queue_delay > max_delay_[k].load(std::memory_order_relaxed)) {
      max_delay_[k].store(rec.queue_delay, std::memory_order_relaxed);
    }
    total_delay_[k].store(total_delay_[k].load(std::memory_order_relaxed) + rec.queue_delay, std::memory_order_relaxed);
    if (log_.empty()) return;
    std::lock_guard lock(log_mutex_);
    if (log_size_ == log_.size()) {
      log_head_ = (log_head_ + 1) % log_.size();
      --log_size_;
      log_overwritten_.fetch_add(1, std::memory_order_relaxed);
    }
    log_[(log_head_ + log_size_) % log_.size()] = rec;
    ++log_size_;
  }

  void run() noexcept {
    for (;;) {
      const transition_step_result r = step();
      std::unique_lock lock(mutex_);
      if (stop_requested_) return;
      if (!r.progressed()) {
        wake_.wait_for(lock, config_.idle_wait);
        if (stop_requested_) return;
      }
    }
  }

  versioned_expert_table& table_;
  residency_budget& budget_;
  block_pool& low_pool_;
  block_pool& high_pool_;
  M mover_;
  transition_pipeline_config config_;
  std::size_t n_;
  std::vector<version_source> sources_;

  // Guarded by mutex_: requests, queues, deferred lists, desired tiers, the worker's lifecycle.
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<precision_tier> desired_;
  std::vector<std::uint8_t> promote_queued_, demote_queued_;  // in the queue or deferred
  ring<entry> promotions_, demotions_;
  std::array<ring<entry>, 2> deferred_;  // [promotions, demotions]
  std::thread worker_;
  bool stop_requested_ = false;

  // Guarded by step_mutex_: the table's writer side, in-flight copies, the retire list.
  std::mutex step_mutex_;
  std::vector<flight> flights_;
  ring<retired_entry> retired_;
  bool shut_ = false;

  // Guarded by log_mutex_.
  std::mutex log_mutex_;
  std::vector<transition_record> log_;
  std::size_t log_head_ = 0, log_size_ = 0;

  // Written under the locks above, read by anyone.
  std::atomic<std::size_t> in_flight_{0}, awaiting_{0};
  std::atomic<std::uint64_t> promotions_done_{0}, demotions_done_{0}, cancelled_{0}, admission_waits_{0}, deferrals_{0},
      staged_{0}, reclaimed_{0}, log_overwritten_{0};
  std::atomic<bytes> bytes_moved_{0};
  std::atomic<double> max_delay_[2] = {0.0, 0.0}, total_delay_[2] = {0.0, 0.0};
};

}  // namespace moepolicy
