// moepolicy/sim/timed_cache.hpp — a GPU expert cache on the timed model of serving
// (sim/timeline.hpp): every copy is a transfer over the link, a prefetch is a background
// job that uses only the link's idle time, and an expert is a hit only if its copy has
// landed when the layer needs it.
//
// `timed_expert_cache` joins three pieces: an `expert_cache<Policy>` (which experts hold
// a GPU slot — landed or on their way — and the policy that orders them: one chosen at run
// time, `any_eviction_policy`, or one policy type), a `timed_residency` (the copies and
// when each became usable: after `seal()` a copy exists only through the receipt of the
// transfer that brought it) and the timeline's link. Every expert's weights live in the
// offload memory (tier 0, preloaded); the GPU is tier 1.
//
// The hit definition. A demand access to expert k at time t0 (the router's output of its
// layer) is
//   hit            k's GPU copy is resident and landed by t0: usable at once;
//   late prefetch  a prefetch of k was asked for but its copy has not landed by t0: the
//                  prefetch job is stopped where it is, its chunks already placed stay (and
//                  stay charged as prefetch), and the remaining bytes cross the link as a
//                  demand transfer from t0 — a partial stall, charged; the copy is usable
//                  when that transfer lands. A started prefetch's copy stays (it holds its
//                  slot); one that had not started moves the whole expert — a full stall —
//                  and the policy decides whether the copy stays, as for a miss. Not a hit,
//                  counted apart from the misses;
//   miss           k is not resident: the whole expert crosses the link as a demand transfer
//                  from t0, and the policy decides whether the copy stays (admission; a copy
//                  that does not is used once and dropped).
// Demand transfers are served first in, first out on the link, in the order they are
// issued; prefetches never delay them (`timeline::settle`).
//
// Prefetch. `prefetch(k, score, ready, priority)` queues a background job over the link;
// the job takes a GPU slot when its first chunk is placed (the copy needs a buffer only once
// it starts: a prefetch that never gets link time evicts nothing), asking the policy for it
// as `expert_cache::prefetch` does, and is stopped when no slot can be freed. A policy that
// gates prefetches (`admit_prefetch`: the gated policy, cache/gated_prefetch.hpp) is asked
// when the prefetch is queued, and a refused one moves nothing (`prefetches_refused`); for
// the others the prefetcher's request is the admission (CXL-MoE §3). The copy is installed
// when the job lands. Both happen in `collect()`, which the caller runs after every
// `timeline::settle`. A prefetch of an expert already resident or on its way only tells the
// policy (`on_prefetch`: sticky LRU re-sticks it). `cancel_pending(layer,
// keep)` stops the jobs of a layer that are no longer wanted (Edge-MoE §5.2 clears its load
// queue when the true scores arrive); a started one gives its slot back. An expert evicted
// while its prefetch is on its way stops the job too. Bytes a stopped job already moved are
// counted as wasted.
//
// Conservation (tested): the link's demand and prefetch bytes = the bytes of installed
// copies' receipts + those of copies used once and dropped + the chunks of stopped jobs.
// Waste: the chunks of stopped jobs (`wasted_bytes`) and the landed prefetched copies that
// left the cache, or were still there at `close()`, without a use (`unused_bytes`).
//
// Capacity is one pool shared by all layers, or one pool of that size per layer
// (`capacity_scope`, as `expert_cache`'s).
//
// `replay_timed_prefetch` (below) replays a routing trace through this cache as
// `replay_cache_with_prefetch` (sim/cache_replay.hpp) does untimed, with every prefetch and
// every miss a transfer on the link and every layer's compute charged on the GPU.
//
// Cost. Construction allocates (the cache, the residency table, one job slot per expert);
// accesses, prefetches and hooks allocate nothing beyond what the timeline's first jobs
// reserve.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/sim/timed_residency.hpp"
#include "moepolicy/sim/timeline.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// How a demand access was served (see the header).
enum class timed_access_kind : std::uint8_t { hit, late_prefetch, miss };

/// "hit", "late_prefetch" or "miss".
[[nodiscard]] constexpr std::string_view to_string(timed_access_kind k) noexcept {
  switch (k) {
    case timed_access_kind::hit:
      return "hit";
    case timed_access_kind::late_prefetch:
      return "late_prefetch";
    case timed_access_kind::miss:
      return "miss";
  }
  return "?";
}

/// Where an expert's GPU copy stands at a moment.
enum class copy_state : std::uint8_t {
  usable,     ///< resident and landed
  in_flight,  ///< a started prefetch holds its slot, or a demand copy has not landed
  absent,     ///< not resident
};

/// One demand access.
struct timed_access {
  timed_access_kind kind = timed_access_kind::miss;
  /// When the weights are usable on the GPU (t0 for a hit).
  seconds ready = 0.0;
  /// Whether a copy stays resident afterwards.
  bool cached = false;
  /// Bytes moved on demand for it (0 for a hit).
  bytes moved = 0;
};

/// What a `timed_expert_cache` did.
struct timed_cache_stats {
  /// Demand accesses: hits + late_prefetches + misses, and the misses served elsewhere
  /// (`serve_elsewhere`: computed where the weights are, nothing moved) among the misses.
  std::uint64_t accesses = 0;
  std::uint64_t hits = 0;
  std::uint64_t late_prefetches = 0;
  /// Late prefetches that had not started (no chunk placed): a full stall.
  std::uint64_t late_unstarted = 0;
  std::uint64_t misses = 0;
  std::uint64_t served_elsewhere = 0;
  /// Misses whose copy the policy kept.
  std::uint64_t admitted = 0;
  /// Prefetch jobs queued; started (took a slot when their first chunk was placed); landed
  /// (copy installed); landed and then hit before eviction; stopped before landing because
  /// no longer wanted, evicted, or never started before their access (late ones not
  /// counted).
  std::uint64_t prefetches = 0;
  std::uint64_t prefetches_started = 0;
  std::uint64_t prefetches_landed = 0;
  std::uint64_t prefetches_used = 0;
  std::uint64_t prefetches_cancelled = 0;
  /// Prefetches the policy refused when they were asked for (nothing moved).
  std::uint64_t prefetches_refused = 0;
  /// Landed prefetched copies that left the cache (or were resident at `close()`) unused.
  std::uint64_t prefetches_unused = 0;
  /// Bytes moved on demand (misses and late remainders), of which late remainders.
  bytes demand_bytes = 0;
  bytes late_bytes = 0;
  /// Bytes landed prefetches moved; chunks of late prefetches already placed when they
  /// were stopped; chunks of cancelled prefetches (wasted).
  bytes prefetch_bytes = 0;
  bytes late_placed_bytes = 0;
  bytes wasted_bytes = 0;
  /// Bytes of demand copies used once and dropped (not admitted).
  bytes transient_bytes = 0;
  /// Bytes of the landed prefetched copies counted in `prefetches_unused`.
  bytes unused_bytes = 0;
  /// Σ over late prefetches and misses of (ready − t0): the wait each caused on its own.
  seconds late_wait = 0.0;
  seconds miss_wait = 0.0;

  [[nodiscard]] double hit_ratio() const noexcept {
    return accesses == 0 ? 0.0 : static_cast<double>(hits) / static_cast<double>(accesses);
  }
};

/// A link's cost as a `TransferCost`: latency + n / bandwidth.
struct link_cost {
  link_spec link;
  [[nodiscard]] seconds transfer_seconds(bytes n) const noexcept { return link.seconds_for(n); }
};
static_assert(TransferCost<link_cost>);

/// The GPU expert cache of a timed replay (see the header); `Link` prices a transfer of
/// weights over the link (`link_cost`, or a GPU's `DeviceCost`, whose `transfer_seconds` is
/// its weight link); `Policy` orders the residents: a policy chosen at run time
/// (`any_eviction_policy`, the default), or one policy type, whose events a replay that
/// knows it calls directly instead of through the variant's dispatch (same decisions).
template <TransferCost Link = link_cost, EvictionPolicy Policy = any_eviction_policy>
class timed_expert_cache {
 public:
  static_assert(!std::is_same_v<Policy, belady_policy>, "Belady's policy needs the future; replay it untimed");
  static constexpr tier_id memory_tier = 0, gpu_tier = 1;
  using policy_config = typename Policy::config_type;

  /// A cache of `capacity` experts (one pool shared by all layers, or with `scope ==
  /// per_layer` one pool of `capacity` per layer) under the policy `policy`, fetching over
  /// `link` of `tl`, priced by `link_cost`; every expert weighs `expert_size` bytes at `bits`.
  /// Keeps a reference to `tl`, which must outlive it.
  ///
  /// Throws: `invalid_argument` naming `timed_expert_cache` when `link` is not a link of
  /// `tl`, `expert_size` is 0, or the policy is Belady's (it needs the future: compare with
  /// its untimed demand replay instead); what `expert_cache` and the policy throw.
  timed_expert_cache(timeline& tl, resource_id link, Link link_cost, std::uint32_t num_layers,
                     std::uint32_t num_experts, std::uint64_t capacity, const policy_config& policy, bytes expert_size,
                     bitwidth bits = fp16, capacity_scope scope = capacity_scope::shared)
      : tl_(&tl),
        link_(checked_link(tl, link)),
        cost_(std::move(link_cost)),
        E_(num_experts),
        size_(checked_size(expert_size)),
        whole_seconds_(cost_.transfer_seconds(size_)),
        bits_(bits),
        cache_(cache_config{.num_layers = num_layers,
                            .num_experts = num_experts,
                            .capacity = capacity,
                            .scope = scope,
                            .expert_bytes = expert_size},
               checked_policy(policy)),
        res_(num_layers, num_experts, 2),
        job_(static_cast<std::size_t>(num_layers) * num_experts, no_job),
        score_(static_cast<std::size_t>(num_layers) * num_experts, 0.0f),
        slot_(static_cast<std::size_t>(num_layers) * num_experts, 0),
        listed_(static_cast<std::size_t>(num_layers) * num_experts, 0),
        fresh_(static_cast<std::size_t>(num_layers) * num_experts, 0),
        seq_(static_cast<std::size_t>(num_layers) * num_experts, 0),
        marked_(static_cast<std::size_t>(num_layers) * num_experts, 0),
        pending_bits_(num_experts <= 64 ? num_layers : 0, 0) {
    for (std::uint32_t l = 0; l < num_layers; ++l) {
      for (std::uint32_t e = 0; e < num_experts; ++e) res_.preload(key(l, e), memory_tier, bits_);
    }
    stopped_.reserve(job_.size());
    candidates_.reserve(job_.size());
  }

  /// Places `k` on the GPU before the run (a static placement loaded at startup, not
  /// charged); counted as the cache's preload. Returns whether it found a slot.
  ///
  /// Throws: `invalid_argument` once the run has begun (the first access, prefetch or
  /// `collect`).
  bool preload(expert_key k) {
    if (res_.sealed()) {
      detail::throw_invalid("timed_expert_cache::preload", "the run has begun: a copy needs a transfer, expert",
                            flat(k));
    }
    if (!cache_.preload(k)) return false;
    res_.preload(k, gpu_tier, bits_);
    return true;
  }

  [[nodiscard]] const expert_cache<Policy>& cache() const noexcept { return cache_; }
  [[nodiscard]] const timed_residency& residency() const noexcept { return res_; }
  [[nodiscard]] const timed_cache_stats& stats() const noexcept { return stats_; }
  [[nodiscard]] bytes expert_size() const noexcept { return size_; }
  /// Seconds the link takes for `n` bytes.
  [[nodiscard]] seconds link_seconds(bytes n) const noexcept { return cost_.transfer_seconds(n); }

  /// Where `k`'s GPU copy stands at `t` (a prefetch that has not started is `absent`: no
  /// copy is on its way).
  [[nodiscard]] copy_state state(expert_key k, seconds t) const noexcept {
    if (res_.usable(k, gpu_tier, t)) return copy_state::usable;
    const std::size_t f = flat(k);
    if ((job_[f] != no_job && slot_[f] != 0) || res_.present(k, gpu_tier)) return copy_state::in_flight;
    return copy_state::absent;
  }
  /// Bytes `k`'s copy still needs to cross at `t` to be usable: 0 when usable or already
  /// crossing on demand, the rest of a started prefetch, else the whole expert.
  [[nodiscard]] bytes remaining(expert_key k, seconds t) const noexcept {
    if (res_.usable(k, gpu_tier, t)) return 0;
    const std::size_t f = flat(k);
    if (job_[f] != no_job && slot_[f] != 0) return size_ - tl_->placed_bytes(static_cast<timeline::job_id>(job_[f]));
    if (job_[f] == no_job && res_.present(k, gpu_tier)) return 0;
    return size_;
  }
  /// Whether a prefetch of `k` is queued or on its way.
  [[nodiscard]] bool pending(expert_key k) const noexcept { return job_[flat(k)] != no_job; }
  /// The cache's bookkeeping agrees with the copies: `k` holds a slot exactly when its copy
  /// is present or a started prefetch is bringing it (for tests).
  [[nodiscard]] bool consistent() const noexcept {
    for (std::size_t f = 0; f < job_.size(); ++f) {
      const expert_key k = key(static_cast<std::uint32_t>(f / E_), static_cast<std::uint32_t>(f % E_));
      const bool job = job_[f] != no_job;
      const bool held = (job && slot_[f] != 0) || res_.present(k, gpu_tier);
      if (held != cache_.contains(k)) return false;
      if (job && res_.present(k, gpu_tier)) return false;
      if (!job && slot_[f] != 0) return false;
    }
    return true;
  }

  /// A demand access to `k` whose layer's routing is known at `t0` (see the header).
  ///
  /// Complexity: O(1) plus the policy's events and one timeline operation.
  timed_access serve(expert_key k, seconds t0, const access_info& info = {}) {
    res_.seal();
    ++stats_.accesses;
    const std::size_t f = flat(k);
    if (res_.usable(k, gpu_tier, t0)) {
      ++stats_.hits;
      if (fresh_[f] != 0) {
        ++stats_.prefetches_used;
        fresh_[f] = 0;
      }
      static_cast<void>(cache_.get(k, info));
      return {timed_access_kind::hit, t0, true, 0};
    }
    if (job_[f] == no_job && res_.present(k, gpu_tier)) {
      // A copy still crossing on demand (asked for earlier): wait for it.
      ++stats_.late_prefetches;
      const seconds ready = res_.ready_at(k, gpu_tier);
      stats_.late_wait += ready - t0;
      static_cast<void>(cache_.get(k, info));
      return {timed_access_kind::late_prefetch, ready, true, 0};
    }
    if (job_[f] != no_job && slot_[f] != 0) {
      // Late: stop the prefetch where it is and bring the rest on demand.
      const auto j = static_cast<timeline::job_id>(job_[f]);
      const bytes placed = tl_->placed_bytes(j);
      tl_->cancel(j);
      clear_job(f, k);
      slot_[f] = 0;
      note_stop(f);
      const bytes rest = size_ - placed;
      const transfer_receipt r = demand(t0, rest, k);
      res_.install(k, gpu_tier, bits_, rest, r);
      static_cast<void>(cache_.get(k, info));
      ++stats_.late_prefetches;
      stats_.late_bytes += rest;
      stats_.demand_bytes += rest;
      stats_.late_placed_bytes += placed;
      stats_.late_wait += r.landed() - t0;
      return {timed_access_kind::late_prefetch, r.landed(), true, rest};
    }
    if (job_[f] != no_job) {
      // Queued, never started: the whole expert crosses on demand, and the policy decides
      // whether the copy stays, as for a miss.
      tl_->cancel(static_cast<timeline::job_id>(job_[f]));
      clear_job(f, k);
      note_stop(f);
      const transfer_receipt r = demand(t0, size_, k);
      const access_outcome o = cache_.get(k, info);
      if (o.evicted != 0) sync_victim(cache_.last_evicted());
      const bool kept = o.inserted;
      if (kept) {
        res_.install(k, gpu_tier, bits_, size_, r);
      } else {
        stats_.transient_bytes += size_;
      }
      ++stats_.late_prefetches;
      ++stats_.late_unstarted;
      stats_.late_bytes += size_;
      stats_.demand_bytes += size_;
      stats_.late_wait += r.landed() - t0;
      return {timed_access_kind::late_prefetch, r.landed(), kept, size_};
    }
    ++stats_.misses;
    const transfer_receipt r = demand(t0, size_, k);
    stats_.demand_bytes += size_;
    stats_.miss_wait += r.landed() - t0;
    const access_outcome o = cache_.get(k, info);
    if (o.evicted != 0) sync_victim(cache_.last_evicted());
    if (o.inserted) {
      ++stats_.admitted;
      res_.install(k, gpu_tier, bits_, size_, r);
    } else {
      stats_.transient_bytes += size_;
    }
    return {timed_access_kind::miss, r.landed(), o.inserted, size_};
  }

  /// A demand access to `k` computed where its weights are (on the CPU): a miss that
  /// moves nothing and leaves the cache and its policy untouched.
  void serve_elsewhere(expert_key k) noexcept {
    static_cast<void>(k);
    ++stats_.accesses;
    ++stats_.misses;
    ++stats_.served_elsewhere;
  }

  /// Prefetches `k` with the predictor's `score` in [0, 1]: a background job over the link,
  /// ready at `ready`, at `priority` (lower first). Returns whether a job was queued (false:
  /// already resident or on its way — the policy is told when it holds a slot).
  ///
  /// Throws: what `timeline::enqueue` throws (`ready` before the last settle).
  bool prefetch(expert_key k, float score, seconds ready, int priority) {
    res_.seal();
    const std::size_t f = flat(k);
    if (cache_.contains(k)) {
      static_cast<void>(cache_.prefetch(k, score));
      return false;
    }
    if (job_[f] != no_job) {
      score_[f] = std::max(score_[f], score);
      return false;
    }
    return queue_prefetch(k, f, score, ready, priority);
  }

  /// A predictor flags `k` as likely needed (prediction-gated admission, CXL-MoE §3).
  void hint(expert_key k, float score) noexcept { cache_.hint(k, score); }

  /// Stops the prefetches of `layer` still queued or on their way whose expert `keep(e)`
  /// rejects; a started one gives its slot back. Returns how many were stopped.
  template <class Keep>
  std::size_t cancel_pending(layer_id layer, Keep&& keep) {
    std::size_t n = 0;
    if (!pending_bits_.empty()) {
      // The layer's pending jobs, in expert order, as the loop below visits them.
      for (std::uint64_t m = pending_bits_[layer]; m != 0; m &= m - 1) {
        const auto e = static_cast<std::uint32_t>(std::countr_zero(m));
        if (keep(static_cast<expert_id>(e))) continue;
        const std::size_t f = static_cast<std::size_t>(layer) * E_ + e;
        const bool held = slot_[f] != 0;
        stop(f, key(layer, e));
        if (held) static_cast<void>(cache_.erase(key(layer, e)));
        ++n;
      }
      return n;
    }
    for (std::uint32_t e = 0; e < E_; ++e) {
      const std::size_t f = static_cast<std::size_t>(layer) * E_ + e;
      if (job_[f] == no_job || keep(static_cast<expert_id>(e))) continue;
      const bool held = slot_[f] != 0;
      stop(f, key(layer, e));
      if (held) static_cast<void>(cache_.erase(key(layer, e)));
      ++n;
    }
    return n;
  }
  /// Stops every prefetch still queued or on its way (the end of a run: speculative work is
  /// not completed).
  void cancel_all_pending() {
    for (std::size_t f = 0; f < job_.size(); ++f) {
      if (job_[f] == no_job) continue;
      const bool held = slot_[f] != 0;
      const expert_key k = key(static_cast<std::uint32_t>(f / E_), static_cast<std::uint32_t>(f % E_));
      stop(f, k);
      if (held) static_cast<void>(cache_.erase(k));
    }
  }

  /// The end of a run: stops every prefetch still queued or on its way, and counts the landed
  /// prefetched copies never used as unused (as `expert_cache::clear` counts them wasted).
  void close() {
    cancel_all_pending();
    for (std::size_t f = 0; f < fresh_.size(); ++f) {
      if (fresh_[f] == 0) continue;
      fresh_[f] = 0;
      ++stats_.prefetches_unused;
      stats_.unused_bytes += size_;
    }
  }

  /// Gives a slot to every prefetch whose copy has started, and installs those that landed;
  /// call after every `timeline::settle`.
  void collect() {
    res_.seal();
    // The scan of the waiting prefetches changes nothing when none was stopped and no job of
    // the timeline placed its first chunk since the last scan: it is skipped. Otherwise it
    // visits only those that started or stopped since.
    const std::uint64_t now = tl_->started_jobs();
    if (stops_ != 0 || now != started_seen_) scan_waiting(started_seen_, now);
    stops_ = 0;
    stopped_overflow_ = false;
    stopped_.clear();
    started_seen_ = now;
    for (const transfer_receipt& r : tl_->landed()) {
      if (!r.crossed_link() || r.why() != cost_kind::prefetch) continue;
      const auto f = static_cast<std::size_t>(r.tag());
      if (f >= job_.size() || job_[f] == no_job || slot_[f] == 0) continue;
      const expert_key k = key(static_cast<std::uint32_t>(f / E_), static_cast<std::uint32_t>(f % E_));
      clear_job(f, k);
      slot_[f] = 0;
      res_.install(k, gpu_tier, bits_, size_, r);
      ++stats_.prefetches_landed;
      stats_.prefetch_bytes += r.size();
      fresh_[f] = 1;
    }
    tl_->clear_landed();
  }

  /// The policy's layer and step hooks.
  void begin_layer(const batch_view& b) noexcept { cache_.begin_layer(b); }
  void end_layer(layer_id l) noexcept { cache_.end_layer(l); }
  void end_step() noexcept { cache_.end_step(); }

 private:
  static constexpr std::uint64_t no_job = std::numeric_limits<std::uint64_t>::max();

  static resource_id checked_link(const timeline& tl, resource_id link) {
    if (link >= tl.num_resources() || tl.accounts()[link].kind != resource_kind::link) {
      detail::throw_invalid("timed_expert_cache", "the link must be a link resource of the timeline", link);
    }
    return link;
  }
  static const policy_config& checked_policy(const policy_config& p) {
    if constexpr (std::is_same_v<Policy, any_eviction_policy>) {
      if (std::holds_alternative<belady_config>(p)) {
        detail::throw_invalid("timed_expert_cache", "Belady's policy needs the future; replay it untimed",
                              eviction_policy_name(p));
      }
    }
    return p;
  }
  static bytes checked_size(bytes b) {
    if (b == 0) detail::throw_invalid("timed_expert_cache", "expert_size must be > 0", b);
    return b;
  }
  [[nodiscard]] static expert_key key(std::size_t l, std::size_t e) noexcept {
    return {static_cast<layer_id>(l), static_cast<expert_id>(e)};
  }
  [[nodiscard]] std::size_t flat(expert_key k) const noexcept { return k.flat(E_); }

  /// `prefetch` of `k` (slot `f`), neither resident nor on its way: queues its job unless
  /// the policy refuses it. Apart from `prefetch`, whose other outcomes (most calls) then
  /// need no stack frame.
  [[gnu::noinline]] bool queue_prefetch(expert_key k, std::size_t f, float score, seconds ready, int priority) {
    if constexpr (policy_traits<Policy>::admits_prefetches) {
      const access_info info{.confidence = score, .prefetch = true};
      const bool must_evict = cache_.used(cache_.shape().partition_of(k)) + 1 > cache_.capacity();
      if (!cache_.policy().admit_prefetch(k, info, must_evict)) {
        ++stats_.prefetches_refused;
        return false;
      }
    }
    const std::array<hop, 1> h{{{link_, whole_seconds_, size_}}};
    job_[f] = tl_->enqueue(ready, h, size_, cost_kind::prefetch, priority, f);
    if (!pending_bits_.empty()) pending_bits_[k.layer] |= std::uint64_t{1} << k.expert;
    score_[f] = score;
    slot_[f] = 0;
    if (listed_[f] == 0) {
      listed_[f] = 1;
      seq_[f] = next_seq_++;
    }
    ++stats_.prefetches;
    return true;
  }

  /// Gives a slot to every waiting prefetch whose copy has started; drops the stopped ones.
  /// The waiting prefetches are the listed experts, in the order they were listed (`seq_`);
  /// the ones that neither started nor stopped are left as they are, so only the others are
  /// visited, in that order: the experts of the jobs the timeline started since the last
  /// scan (`from` to `to` in its count) and those stopped since (`stopped_`). Where the
  /// timeline no longer recalls every job started since, or more stops came than
  /// `stopped_` holds, every listed expert is visited.
  void scan_waiting(std::uint64_t from, std::uint64_t to) {
    candidates_.clear();
    const auto add = [&](std::size_t f) {
      if (listed_[f] == 0 || marked_[f] != 0) return;
      marked_[f] = 1;
      candidates_.push_back(static_cast<std::uint32_t>(f));
    };
    if (to - from <= timeline::started_history && !stopped_overflow_) {
      for (std::uint64_t i = from; i < to; ++i) {
        const auto [id, tag] = tl_->started_job(i);
        if (tag < job_.size() && job_[tag] == id) add(static_cast<std::size_t>(tag));
      }
      for (const std::uint32_t f : stopped_) add(f);
    } else {
      for (std::size_t f = 0; f < listed_.size(); ++f) add(f);
    }
    std::sort(candidates_.begin(), candidates_.end(),
              [&](std::uint32_t a, std::uint32_t b) { return seq_[a] < seq_[b]; });
    for (const std::uint32_t f : candidates_) {
      marked_[f] = 0;
      if (listed_[f] == 0) continue;
      if (job_[f] == no_job || slot_[f] != 0) {  // stopped, or holding a slot already
        listed_[f] = 0;
        continue;
      }
      if (tl_->placed_bytes(static_cast<timeline::job_id>(job_[f])) == 0) continue;  // still waiting
      listed_[f] = 0;
      const expert_key k = key(f / E_, f % E_);
      const std::uint64_t evictions = cache_.stats().evictions;
      const prefetch_outcome o = cache_.prefetch(k, score_[f]);
      if (cache_.stats().evictions != evictions) sync_victim(cache_.last_evicted());
      if (o == prefetch_outcome::inserted) {
        slot_[f] = 1;
        ++stats_.prefetches_started;
      } else {
        stop(f, k);  // no slot could be freed, or the policy refused the prefetch
      }
    }
  }

  /// A listed prefetch of `f` stopped: the next scan visits it.
  void note_stop(std::size_t f) noexcept {
    if (listed_[f] == 0) return;
    ++stops_;
    if (stopped_.size() < stopped_.capacity()) {
      stopped_.push_back(static_cast<std::uint32_t>(f));
    } else {
      stopped_overflow_ = true;
    }
  }

  /// Expert `f` (`k`) no longer has a prefetch job.
  void clear_job(std::size_t f, expert_key k) noexcept {
    job_[f] = no_job;
    if (!pending_bits_.empty()) pending_bits_[k.layer] &= ~(std::uint64_t{1} << k.expert);
  }

  transfer_receipt demand(seconds t0, bytes n, expert_key k) {
    const std::array<hop, 1> h{{{link_, n == size_ ? whole_seconds_ : cost_.transfer_seconds(n), n}}};
    return tl_->transfer(t0, h, n, cost_kind::demand_fetch, flat(k));
  }

  /// Drops the copy (or stops the prefetch) of the victim the cache just evicted (experts
  /// weigh 1: an insertion evicts at most one; the cache names it, so the victim is
  /// computed once).
  void sync_victim(expert_key v) noexcept {
    MOEPOLICY_ASSERT(!cache_.contains(v));
    const std::size_t f = flat(v);
    if (job_[f] != no_job) stop(f, v);
    res_.drop(v, gpu_tier);
    if (fresh_[f] != 0) {
      ++stats_.prefetches_unused;
      stats_.unused_bytes += size_;
    }
    fresh_[f] = 0;
  }
  /// Stops the job of `f`: what it placed is wasted; it no longer holds a slot (the caller
  /// gives the cache's slot back when it held one).
  void stop(std::size_t f, expert_key k) noexcept {
    const auto j = static_cast<timeline::job_id>(job_[f]);
    stats_.wasted_bytes += tl_->placed_bytes(j);
    tl_->cancel(j);
    clear_job(f, k);
    slot_[f] = 0;
    note_stop(f);
    ++stats_.prefetches_cancelled;
  }

  timeline* tl_;
  resource_id link_;
  Link cost_;
  std::uint32_t E_;
  bytes size_;
  /// The link's time for one whole expert (`cost_.transfer_seconds(size_)`, computed once).
  seconds whole_seconds_;
  bitwidth bits_;
  expert_cache<Policy> cache_;
  timed_residency res_;
  std::vector<std::uint64_t> job_;
  /// The score of a queued prefetch, and whether its started copy holds a slot.
  std::vector<float> score_;
  std::vector<std::uint8_t> slot_;
  std::vector<std::uint8_t> listed_;
  /// Landed by a prefetch and not used since.
  std::vector<std::uint8_t> fresh_;
  /// Queued prefetches that hold no slot yet are listed (a superset), each with the order
  /// in which it was listed; `marked_`: already a candidate of the scan under way.
  std::vector<std::uint64_t> seq_;
  std::vector<std::uint8_t> marked_;
  std::uint64_t next_seq_ = 0;
  /// Listed prefetches stopped since the last scan (all of them unless `stopped_overflow_`),
  /// and their count; the timeline's started jobs at that scan; the scan's candidates.
  std::vector<std::uint32_t> stopped_;
  bool stopped_overflow_ = false;
  std::uint64_t stops_ = 0;
  std::uint64_t started_seen_ = 0;
  std::vector<std::uint32_t> candidates_;
  /// Per layer, when a layer has at most 64 experts: bit e set when expert e has a
  /// prefetch job (`job_` is not `no_job`), so that `cancel_pending` visits only those.
  std::vector<std::uint64_t> pending_bits_;
  timed_cache_stats stats_;
};

/// Prices the GPU work of one layer of a forward pass for `replay_timed_prefetch`: for
/// `const C& c`, `batch_view b`, `expert_key k`, `std::size_t tokens`:
///   `c.before_experts(b)`  the work before the layer's routing is known (attention, the
///                          router; for the first MoE layer also the dense layers before it);
///   `c.expert_seconds(k, tokens)`  one routed expert on its tokens;
///   `c.after_experts(b)`   the work after the routed experts (shared experts; after the last
///                          MoE layer also the output head).
/// Each is finite and >= 0.
template <class C>
concept LayerCost = requires(const C& c, const batch_view& b, expert_key k, std::size_t tokens) {
  { c.before_experts(b) } -> std::convertible_to<seconds>;
  { c.expert_seconds(k, tokens) } -> std::convertible_to<seconds>;
  { c.after_experts(b) } -> std::convertible_to<seconds>;
};

/// A `LayerCost` of fixed durations (hand-worked examples and tests): `before` per layer,
/// `expert` per expert whatever its tokens, nothing after.
struct fixed_layer_cost {
  seconds before = 0.0;
  seconds expert = 0.0;
  [[nodiscard]] seconds before_experts(const batch_view&) const noexcept { return before; }
  [[nodiscard]] seconds expert_seconds(expert_key, std::size_t) const noexcept { return expert; }
  [[nodiscard]] seconds after_experts(const batch_view&) const noexcept { return 0.0; }
};
static_assert(LayerCost<fixed_layer_cost>);

/// How `replay_timed_prefetch` runs.
struct timed_prefetch_config {
  /// Experts per pool, and whether one pool per layer or one shared pool.
  std::uint64_t capacity = 0;
  capacity_scope scope = capacity_scope::per_layer;
  /// The eviction policy (not Belady's: it needs the future).
  any_eviction_config policy = lru_config{};
  /// Bytes of every expert's weights, > 0, and the host-to-GPU link that moves them.
  bytes expert_bytes = 0;
  link_spec link = {};
  /// The most experts prefetched per batch, as `prefetch_replay_config::depth` (0: top_k).
  std::uint32_t depth = 0;
  /// Bytes per background chunk (the grain at which prefetches yield to demand transfers).
  bytes chunk_bytes = timeline_config{}.chunk_bytes;
};

/// What `replay_timed_prefetch` measured.
struct timed_prefetch_result {
  timed_cache_stats stats;
  /// Forward passes; decode passes and the sum of their durations (first layer's start to
  /// the last layer's end).
  std::uint64_t steps = 0;
  std::uint64_t decode_steps = 0;
  seconds decode_seconds = 0.0;
  /// The end of the last pass.
  seconds total_seconds = 0.0;
  /// The GPU's idle time waiting for weights (the ledger's stall of the GPU).
  seconds stall_seconds = 0.0;
  /// The GPU's busy time; the link's busy time, all of it and that of prefetches (chunks of
  /// landed, late and stopped prefetches alike).
  seconds gpu_busy_seconds = 0.0;
  seconds link_busy_seconds = 0.0;
  seconds link_prefetch_seconds = 0.0;
  /// Bytes of prefetches spent without a use: stopped jobs' chunks and unused landed copies.
  bytes wasted_prefetch_bytes = 0;

  /// Mean decode pass, seconds (0 without decode passes).
  [[nodiscard]] seconds seconds_per_decode_step() const noexcept {
    return decode_steps == 0 ? 0.0 : decode_seconds / static_cast<double>(decode_steps);
  }
};

namespace detail {
struct no_prefetch_predictor {
  [[nodiscard]] bool predict(layer_id, std::span<float>) noexcept { return false; }
  void observe(const batch_view&) noexcept {}
  void end_step() noexcept {}
  void begin_request() noexcept {}
};
/// One run of `replay_timed_prefetch` (its timeline, GPU cache and per-batch scratch) fed
/// batch by batch; the walk and the predictor are the caller's, so that several runs can
/// share one walk and one prediction (`replay_timed_prefetch_lockstep`).
class timed_prefetch_run_base {
 public:
  virtual ~timed_prefetch_run_base() = default;
  /// A forward pass starts.
  virtual void begin_step() = 0;
  /// Layer `b.ref.layer` of the pass, with the predictor's scores for it (empty: none).
  virtual void batch(const batch_view& b, std::span<const float> scores) = 0;
  /// The pass ends (`decode`: a decode pass).
  virtual void end_step(bool decode) = 0;
  /// The end of the walk: what the run measured.
  virtual timed_prefetch_result finish() = 0;
};

template <EvictionPolicy Policy, LayerCost Cost>
class timed_prefetch_run final : public timed_prefetch_run_base {
 public:
  timed_prefetch_run(const trace_info& info, const Cost& cost, const timed_prefetch_config& cfg,
                     const typename Policy::config_type& policy)
      : cost_(&cost),
        E_(info.num_experts),
        tl_(timeline_config{.chunk_bytes = cfg.chunk_bytes,
                            .reserved_jobs = static_cast<std::size_t>(info.num_layers) * info.num_experts,
                            .reserved_hops = 1}),
        gpu_(tl_.add_resource("gpu", resource_kind::processor)),
        link_(tl_.add_resource("host to GPU link", resource_kind::link)),
        cache_(tl_, link_, link_cost{cfg.link}, info.num_layers, E_, cfg.capacity, policy, cfg.expert_bytes, fp16,
               cfg.scope),
        depth_(std::min<std::size_t>(cfg.depth == 0 ? info.top_k : cfg.depth, E_)),
        order_(E_),
        tokens_(E_, 0),
        selected_(E_, 0) {
    served_.reserve(E_);
  }

  void begin_step() final { step_start_ = tl_.free_at(gpu_); }

  void batch(const batch_view& b, std::span<const float> scores) final {
    const layer_id l = b.ref.layer;
    if (!scores.empty()) prefetch_for(l, scores);
    const seconds t0 = tl_.run(tl_.free_at(gpu_), gpu_, cost_->before_experts(b), cost_kind::attention).end;
    tl_.settle(t0);
    cache_.collect();
    // The batch's experts, in order of first selection, with their tokens.
    served_.clear();
    for (expert_id e : b.experts) {
      if (tokens_[e]++ == 0) served_.emplace_back(expert_key{l, e}, 0.0);
    }
    for (const auto& [k, unused] : served_) selected_[k.expert] = 1;
    static_cast<void>(cache_.cancel_pending(l, [&](expert_id e) { return selected_[e] != 0; }));
    cache_.begin_layer(b);
    for (auto& [k, ready] : served_) ready = cache_.serve(k, t0).ready;
    // Hits first, then the others in the order their weights land.
    stable_insertion_sort(served_, [](const auto& x, const auto& y) { return x.second < y.second; });
    for (const auto& [k, ready] : served_) {
      static_cast<void>(tl_.run(ready, gpu_, cost_->expert_seconds(k, tokens_[k.expert]), cost_kind::expert));
      tokens_[k.expert] = 0;
      selected_[k.expert] = 0;
    }
    static_cast<void>(tl_.run(tl_.free_at(gpu_), gpu_, cost_->after_experts(b), cost_kind::dense));
    cache_.end_layer(l);
    last_t0_ = t0;
  }

  void end_step(bool decode) final {
    cache_.end_step();
    ++out_.steps;
    if (decode) {
      ++out_.decode_steps;
      out_.decode_seconds += tl_.free_at(gpu_) - step_start_;
    }
  }

  timed_prefetch_result finish() final {
    cache_.close();
    out_.stats = cache_.stats();
    const ledger& led = tl_.accounts();
    out_.total_seconds = tl_.free_at(gpu_);
    out_.stall_seconds = led[gpu_].stall_seconds;
    out_.gpu_busy_seconds = led[gpu_].busy();
    out_.link_busy_seconds = led[link_].busy();
    out_.link_prefetch_seconds = led[link_].busy(cost_kind::prefetch);
    out_.wasted_prefetch_bytes = out_.stats.wasted_bytes + out_.stats.unused_bytes;
    return out_;
  }

 private:
  /// Hints every expert of layer `l` with a score > 0 and prefetches the `depth` best.
  void prefetch_for(layer_id l, std::span<const float> scores) {
    for (std::uint32_t e = 0; e < E_; ++e) {
      order_[e] = e;
      if (scores[e] > 0.0f) cache_.hint(expert_key{l, static_cast<expert_id>(e)}, scores[e]);
    }
    const auto better = [&](std::uint32_t x, std::uint32_t y) {
      return scores[x] > scores[y] || (scores[x] == scores[y] && x < y);
    };
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(depth_), order_.end(), better);
    for (std::size_t i = 0; i < depth_ && scores[order_[i]] > 0.0f; ++i) {
      static_cast<void>(
          cache_.prefetch(expert_key{l, static_cast<expert_id>(order_[i])}, scores[order_[i]], last_t0_, 0));
    }
  }

  const Cost* cost_;
  std::uint32_t E_;
  timeline tl_;
  resource_id gpu_, link_;
  timed_expert_cache<link_cost, Policy> cache_;
  std::size_t depth_;
  std::vector<std::uint32_t> order_, tokens_;
  std::vector<std::uint8_t> selected_;
  std::vector<std::pair<expert_key, seconds>> served_;
  seconds last_t0_ = 0.0;
  seconds step_start_ = 0.0;
  timed_prefetch_result out_;
};

inline void check_timed_prefetch(const routing_trace& t, const timed_prefetch_config& cfg) {
  constexpr std::string_view fn = "replay_timed_prefetch";
  const trace_info& info = t.info();
  if (info.num_layers == 0 || info.num_experts == 0 || t.steps().empty()) {
    throw_invalid(fn, "the trace has no forward pass, steps", t.steps().size());
  }
  if (cfg.expert_bytes == 0) throw_invalid(fn, "expert_bytes must be > 0", cfg.expert_bytes);
}

/// Walks `t` once, feeding every run of `runs` each batch with the predictor's one
/// prediction for it (the predictor observes the batch after all runs have served it).
template <class Run, PrefetchPredictor Predictor>
void walk_timed_prefetch(const routing_trace& t, std::span<Run* const> runs, Predictor* predictor) {
  std::vector<float> scores(t.info().num_experts, 0.0f);
  for (const request_ref& r : t.requests()) {
    if (predictor != nullptr) predictor->begin_request();
    for (const step_ref& s : t.steps_of(r)) {
      for (Run* run : runs) run->begin_step();
      for (const batch_ref& ref : t.batches_of(s)) {
        const batch_view b = t.view(ref);
        std::span<const float> predicted;
        if (predictor != nullptr && predictor->predict(ref.layer, scores)) predicted = scores;
        for (Run* run : runs) run->batch(b, predicted);
        if (predictor != nullptr) predictor->observe(b);
      }
      for (Run* run : runs) run->end_step(s.kind == phase::decode);
      if (predictor != nullptr) predictor->end_step();
    }
  }
}

/// The run of `cfg`: in its policy's own type for LRU, sticky LRU, pred-reuse and the
/// gated policy, else with `any_eviction_policy`.
template <LayerCost Cost>
[[nodiscard]] std::unique_ptr<timed_prefetch_run_base> make_timed_prefetch_run(const trace_info& info, const Cost& cost,
                                                                               const timed_prefetch_config& cfg) {
  if (const auto* p = std::get_if<lru_config>(&cfg.policy)) {
    return std::make_unique<timed_prefetch_run<lru_policy, Cost>>(info, cost, cfg, *p);
  }
  if (const auto* p = std::get_if<sticky_lru_config>(&cfg.policy)) {
    return std::make_unique<timed_prefetch_run<sticky_lru_policy, Cost>>(info, cost, cfg, *p);
  }
  if (const auto* p = std::get_if<predicted_reuse_config>(&cfg.policy)) {
    return std::make_unique<timed_prefetch_run<predicted_reuse_policy, Cost>>(info, cost, cfg, *p);
  }
  if (const auto* p = std::get_if<gated_prefetch_config>(&cfg.policy)) {
    return std::make_unique<timed_prefetch_run<gated_prefetch_policy, Cost>>(info, cost, cfg, *p);
  }
  return std::make_unique<timed_prefetch_run<any_eviction_policy, Cost>>(info, cost, cfg, cfg.policy);
}

}  // namespace detail

/// Replays `t` on the timed model: a GPU and its host-to-GPU link on one timeline, the GPU's
/// expert cache a `timed_expert_cache` (a hit is resident and landed). The walk and the
/// prediction are those of `replay_cache_with_prefetch` (sim/cache_replay.hpp), so the two
/// see the same events; here every byte takes link time. Per batch (layer l of a pass), in
/// the trace's order:
///   1. the predictor, having observed the batches before this one, scores layer l: every
///      expert with a score > 0 is hinted, and the `depth` best are prefetched — background
///      jobs ready at the previous batch's router output (when the routing it observed last
///      was known), placed in the link's idle time, behind every demand transfer (the
///      timeline's rule: prefetches never delay a demand transfer, and compete with the
///      misses for the link);
///   2. the GPU runs `cost.before_experts(b)` from the end of the previous layer; its end is
///      the router's output t0; the link's idle time up to t0 goes to the queued prefetches;
///      prefetches of layer l the batch does not select are then stopped (their chunks are
///      wasted);
///   3. each distinct expert of the batch, in order of first selection, is served at t0 (a
///      hit, a late prefetch whose rest crosses on demand, or a miss crossing on demand,
///      first in first out on the link); the GPU computes the hits, then the others in the
///      order their weights land, each when its weights are usable; then
///      `cost.after_experts(b)`.
/// At the end the prefetches still queued are stopped and unused prefetched copies counted.
/// With a link of unlimited bandwidth and no latency every transfer takes no time: nothing
/// stalls and no prefetch is late.
///
/// Throws: `invalid_argument` naming `replay_timed_prefetch` when the trace is empty or
/// `expert_bytes` is 0; what `timed_expert_cache` throws (Belady's policy).
/// Complexity: as `replay_cache_with_prefetch` plus the timeline's operations; the
/// per-batch work allocates nothing beyond what the timeline's first jobs reserve.
///
/// `replay_timed_prefetch_as<Policy>` runs the cache with the policy type `Policy` (whose
/// configuration is `policy`; `cfg.policy` is not read): the same decisions as through
/// `any_eviction_policy`, without the variant's dispatch per event. `replay_timed_prefetch`
/// does so itself for LRU, sticky LRU, pred-reuse and the gated policy.
template <EvictionPolicy Policy, LayerCost Cost, PrefetchPredictor Predictor = detail::no_prefetch_predictor>
[[nodiscard]] timed_prefetch_result replay_timed_prefetch_as(const routing_trace& t, const Cost& cost,
                                                             const timed_prefetch_config& cfg,
                                                             const typename Policy::config_type& policy,
                                                             Predictor* predictor = nullptr) {
  detail::check_timed_prefetch(t, cfg);
  detail::timed_prefetch_run<Policy, Cost> run(t.info(), cost, cfg, policy);
  const std::array<detail::timed_prefetch_run<Policy, Cost>*, 1> runs{&run};
  detail::walk_timed_prefetch(t, std::span<detail::timed_prefetch_run<Policy, Cost>* const>(runs), predictor);
  return run.finish();
}

/// See above: runs the policy `cfg.policy` in its own type when it is LRU, sticky LRU,
/// pred-reuse or the gated policy, else through `any_eviction_policy`.
template <LayerCost Cost, PrefetchPredictor Predictor = detail::no_prefetch_predictor>
[[nodiscard]] timed_prefetch_result replay_timed_prefetch(const routing_trace& t, const Cost& cost,
                                                          const timed_prefetch_config& cfg,
                                                          Predictor* predictor = nullptr) {
  detail::check_timed_prefetch(t, cfg);
  const std::unique_ptr<detail::timed_prefetch_run_base> run = detail::make_timed_prefetch_run(t.info(), cost, cfg);
  const std::array<detail::timed_prefetch_run_base*, 1> runs{run.get()};
  detail::walk_timed_prefetch(t, std::span<detail::timed_prefetch_run_base* const>(runs), predictor);
  return run->finish();
}

/// `replay_timed_prefetch` of every configuration of `cfgs` in one walk of `t`, every run
/// hearing the one `predictor` (whose predictions depend on the trace alone): result `i`
/// equals `replay_timed_prefetch(t, cost, cfgs[i], p)` with `p` a fresh predictor configured
/// as `predictor`, while the walk and each prediction are made once.
///
/// Throws: as `replay_timed_prefetch`, for the first configuration that fails.
/// Complexity: the sum of the runs' plus one walk and one prediction per batch.
template <LayerCost Cost, PrefetchPredictor Predictor = detail::no_prefetch_predictor>
[[nodiscard]] std::vector<timed_prefetch_result> replay_timed_prefetch_lockstep(
    const routing_trace& t, const Cost& cost, std::span<const timed_prefetch_config> cfgs,
    Predictor* predictor = nullptr) {
  std::vector<std::unique_ptr<detail::timed_prefetch_run_base>> owned;
  std::vector<detail::timed_prefetch_run_base*> runs;
  owned.reserve(cfgs.size());
  runs.reserve(cfgs.size());
  for (const timed_prefetch_config& cfg : cfgs) {
    detail::check_timed_prefetch(t, cfg);
    owned.push_back(detail::make_timed_prefetch_run(t.info(), cost, cfg));
    runs.push_back(owned.back().get());
  }
  detail::walk_timed_prefetch(t, std::span<detail::timed_prefetch_run_base* const>(runs), predictor);
  std::vector<timed_prefetch_result> out;
  out.reserve(runs.size());
  for (detail::timed_prefetch_run_base* run : runs) out.push_back(run->finish());
  return out;
}

}  // namespace moepolicy
