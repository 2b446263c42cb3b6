// moepolicy/sim/cache_replay.hpp — untimed demand replays of a routing trace through an
// expert cache, and measuring predictors on a trace.
//
// A replay walks the trace's batches in order (request, step, layer) and, for each batch
// of the phases kept, does what a serving system does at that layer:
//   [hint replays]            predictor.predict(layer) → hint every expert with a score > 0
//                             (the policy may use hints for admission, as the sticky LRU's
//                             prediction-gated admission does, CXL-MoE §3; nothing is loaded);
//   cache.begin_layer(batch)  (the policy sees the routing: scores, shield)
//   one demand access per distinct expert of the batch, in order of first selection
//   cache.end_layer(layer);   [hint replays] predictor.observe(batch)
// and `end_step` after each forward pass. An access is one expert fetched for one layer of
// one forward pass — an expert that several tokens of the batch select is fetched once.
// Nothing is timed: these are hit ratios of demand caching. Belady is fed the next-use
// position of every demand access (`next_use_positions` over the same access sequence); it
// bounds every demand policy here. Prefetching is only fully meaningful with time — a
// prefetch helps only if it lands before the access — so it lives on the timed model
// (sim/timed_cache.hpp, sim/offload_replay.hpp, sim/edge_replay.hpp); the untimed
// `replay_cache_with_prefetch` assumes every prefetch lands in time (an upper bound on
// their benefit) and counts what they move.
//
// Functions:
//   replay_accesses            the demand access sequence of a replay;
//   replay_cache               a demand replay, by policy type or by `any_eviction_config`;
//   replay_caches              demand replays of several caches of any policy types,
//                              capacities and scopes in one walk, the caches that read the
//                              future sharing one next-use sequence (or one cursor of a
//                              `next_use_index`); the same statistics as one `replay_cache`
//                              per cache, for the cost of one walk;
//   replay_cache_with_hints    a demand replay whose policy hears a predictor's hints;
//   replay_caches_with_hints   several caches in one walk, all hearing one predictor's hints;
//   replay_cache_with_prefetch a replay that also prefetches a predictor's forecast
//                              (untimed: an upper bound on the prefetches' benefit, their
//                              bytes and waste counted in full);
//   replay_caches_with_prefetch several caches in one walk, all prefetching one predictor's
//                              forecast;
//   evaluate_predictor         precision and recall of a predictor's top-scored experts
//                              against the experts of the next `horizon` batches per layer;
//   lru_hit_curve              the LRU hit count at every capacity in one pass;
//   next_use_index             the next uses of a replay of a canonical file or of a trace
//                              in memory, rebuilt a chunk at a time, for replays in bounded
//                              memory at any length.
//
// Every replay runs one event loop (`detail::replay_walk`), which feeds the events of each
// kept batch to one cache or to a set of caches.
//
// The demand replays, `replay_accesses` and `lru_hit_curve` take a `routing_trace` or a
// `canonical_file` (trace/canonical.hpp), which they walk straight from its memory map in
// bounded memory; both give identical results. Policies that read the future take the
// next uses from `next_use_positions`, computed per replay unless a caller that replays
// one trace many times (every capacity) computes them once and passes them in — held whole
// (8 bytes per access), or as a `next_use_index`, which holds a few bytes per key and
// chunk of accesses and gives each replay the same positions.
#pragma once

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/stack_distance.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Which batches a replay walks, and what it forgets between requests.
struct cache_replay_config {
  /// Replay prefill batches, decode batches, or both.
  bool prefill = true;
  bool decode = true;
  /// Empty the cache when a request starts (each request then starts cold); the predictor
  /// is told `begin_request` either way.
  bool reset_between_requests = false;
};

/// Demand accesses and hits of one layer.
struct layer_hits {
  std::uint64_t accesses = 0;
  std::uint64_t hits = 0;
};

/// What a replay measured.
struct cache_replay_result {
  /// The cache's statistics over the replay.
  cache_stats stats;
  /// Per layer, demand accesses and hits.
  std::vector<layer_hits> layers;
  /// Forward passes and batches replayed.
  std::uint64_t steps = 0;
  std::uint64_t batches = 0;
};

/// What a replay of several caches in one walk counted (`replay_caches`); each cache holds
/// its own statistics.
struct replay_walk_result {
  /// Demand accesses, forward passes and batches replayed.
  std::uint64_t accesses = 0;
  std::uint64_t steps = 0;
  std::uint64_t batches = 0;
};

/// Precision and recall of a predictor over a trace.
struct prediction_quality {
  /// Predictions made (one per batch replayed) and those where the predictor had nothing
  /// to go on.
  std::uint64_t predictions = 0;
  std::uint64_t empty_predictions = 0;
  /// Experts predicted, experts that were needed, and predicted experts that were needed.
  std::uint64_t predicted = 0;
  std::uint64_t actual = 0;
  std::uint64_t correct = 0;

  /// correct / predicted (0 when nothing was predicted).
  [[nodiscard]] double precision() const noexcept {
    return predicted == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(predicted);
  }
  /// correct / actual (0 when nothing was needed).
  [[nodiscard]] double recall() const noexcept {
    return actual == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(actual);
  }
};

/// How `evaluate_predictor` scores a predictor.
struct prediction_eval_config {
  /// The truth of a prediction at (step, layer): the union of the experts of the next
  /// `horizon` kept batches of that layer in the same request, the current one included;
  /// >= 1.
  std::uint32_t horizon = 1;
  /// The predicted set: the `budget` highest-scored experts (0: the trace's top_k) …
  std::size_t budget = 0;
  /// … whose score exceeds `min_score`.
  float min_score = 0.0f;
  /// Which batches are predicted, and counted in the truth.
  bool prefill = true;
  bool decode = true;
};

namespace detail {

/// Calls the walk's three callbacks over `t`'s batches (see `canonical_file::for_each_batch`).
template <class OnRequest, class OnBatch, class OnStepEnd>
void walk_batches(const routing_trace& t, OnRequest&& on_request, OnBatch&& on_batch, OnStepEnd&& on_step_end) {
  const auto requests = t.requests();
  for (std::size_t q = 0; q < requests.size(); ++q) {
    on_request(static_cast<std::uint32_t>(q));
    for (const step_ref& s : t.steps_of(requests[q])) {
      for (const batch_ref& ref : t.batches_of(s)) on_batch(t.view(ref));
      on_step_end(s);
    }
  }
}

template <class OnRequest, class OnBatch, class OnStepEnd>
void walk_batches(const canonical_file& t, OnRequest&& on_request, OnBatch&& on_batch, OnStepEnd&& on_step_end) {
  t.for_each_batch(on_request, on_batch, on_step_end);
}

}  // namespace detail

/// What a replay reads: a trace in memory, or a canonical file walked from its map.
template <class T>
concept replay_source = std::same_as<T, routing_trace> || std::same_as<T, canonical_file>;

namespace detail {

template <replay_source T>
inline void check_replay(const T& t, const cache_config& cc, const cache_replay_config& rc, std::string_view fn) {
  if (cc.num_layers < t.info().num_layers) {
    throw_invalid(fn, "cache num_layers must be >= the trace's " + std::to_string(t.info().num_layers), cc.num_layers);
  }
  if (cc.num_experts < t.info().num_experts) {
    throw_invalid(fn, "cache num_experts must be >= the trace's " + std::to_string(t.info().num_experts),
                  cc.num_experts);
  }
  if (!rc.prefill && !rc.decode) throw_invalid(fn, "replay prefill, decode or both");
}

[[nodiscard]] inline bool kept(phase p, bool prefill, bool decode) noexcept {
  return p == phase::prefill ? prefill : decode;
}

/// Calls `each(key)` for the distinct experts of `b`, in order of first selection; `seen`
/// has one flag per expert and is left all-zero.
template <class Each>
void distinct_experts(const batch_view& b, std::vector<std::uint8_t>& seen, Each&& each) {
  for (expert_id e : b.experts) {
    if (seen[e] != 0) continue;
    seen[e] = 1;
    each(expert_key{b.ref.layer, e});
  }
  for (expert_id e : b.experts) seen[e] = 0;
}

/// The replay event loop, shared by every replay of this header: walks `t`'s batches in
/// order and, for each batch of a kept phase, calls `before(b)`, `feed.begin_layer(b)`,
/// `feed.access(k, info)` for each distinct expert `k` of the batch in order of first
/// selection (`info.next_use` read from `future` when it is active, the accesses numbered
/// 0, 1, … in this order), `feed.end_layer(layer)` and `after(b)`; after each kept step
/// `feed.end_step()` and `step_end()`; when a request starts `feed.clear()` if the replay
/// resets between requests, then `new_request()`. `future.finish(accesses)` checks the
/// count at the end. The feed dispatches the events to one cache or to many.
template <replay_source T, class Future, class Feed, class Before, class After, class NewRequest, class StepEnd>
replay_walk_result replay_walk(const T& t, const cache_replay_config& rc, Future& future, Feed& feed, Before&& before,
                               After&& after, NewRequest&& new_request, StepEnd&& step_end) {
  replay_walk_result out;
  std::vector<std::uint8_t> seen(t.info().num_experts, 0);
  std::uint64_t position = 0;
  walk_batches(
      t,
      [&](std::uint32_t) {
        if (rc.reset_between_requests) feed.clear();
        new_request();
      },
      [&](const batch_view& b) {
        if (!kept(b.ref.kind, rc.prefill, rc.decode)) return;
        before(b);
        feed.begin_layer(b);
        distinct_experts(b, seen, [&](expert_key k) {
          access_info info;
          if (future.active()) info.next_use = future.next(position);
          ++position;
          feed.access(k, info);
        });
        feed.end_layer(b.ref.layer);
        after(b);
        ++out.batches;
      },
      [&](const step_ref& s) {
        if (!kept(s.kind, rc.prefill, rc.decode)) return;
        feed.end_step();
        step_end();
        ++out.steps;
      });
  if (future.active()) future.finish(position);
  out.accesses = position;
  return out;
}

/// The events of a replay fed to one cache, counting each layer's accesses and hits.
template <EvictionPolicy P>
struct single_cache_feed {
  expert_cache<P>& cache;
  std::vector<layer_hits>& layers;

  void clear() noexcept { cache.clear(); }
  void begin_layer(const batch_view& b) noexcept { cache.begin_layer(b); }
  void access(expert_key k, const access_info& info) noexcept {
    const access_outcome o = cache.get(k, info);
    ++layers[k.layer].accesses;
    if (o.hit) ++layers[k.layer].hits;
  }
  void end_layer(layer_id l) noexcept { cache.end_layer(l); }
  void end_step() noexcept { cache.end_step(); }
};

/// The replay of one cache (`replay_walk` through a `single_cache_feed`).
template <EvictionPolicy P, replay_source T, class Future, class Before, class After, class NewRequest, class StepEnd>
cache_replay_result replay_loop(const T& t, expert_cache<P>& cache, const cache_replay_config& rc, Future&& future,
                                Before&& before, After&& after, NewRequest&& new_request, StepEnd&& step_end) {
  cache_replay_result out;
  out.layers.assign(t.info().num_layers, {});
  single_cache_feed<P> feed{cache, out.layers};
  const replay_walk_result w = replay_walk(t, rc, future, feed, before, after, new_request, step_end);
  out.steps = w.steps;
  out.batches = w.batches;
  out.stats = cache.stats();
  return out;
}

/// The next uses a replay reads from a span (none when it is empty), checked against the
/// replay's accesses.
struct span_future {
  std::span<const std::uint64_t> next_use;
  std::string_view fn = "replay_cache";

  [[nodiscard]] bool active() const noexcept { return !next_use.empty(); }
  [[nodiscard]] std::uint64_t next(std::uint64_t position) const {
    if (position >= next_use.size()) {
      throw_invalid(fn, "next_use has fewer entries than the replay's accesses", next_use.size());
    }
    return next_use[position];
  }
  void finish(std::uint64_t positions) const {
    if (positions != next_use.size()) {
      throw_invalid(fn, "next_use has " + std::to_string(next_use.size()) + " entries, the replay made " +
                            std::to_string(positions) + " accesses");
    }
  }
};

/// The next uses a replay of `cache` on `t` reads: `given` when not empty (checked against
/// the replay's accesses), else computed, or none when the policy does not read the future.
template <EvictionPolicy P, replay_source T>
std::span<const std::uint64_t> future_of(const T& t, const expert_cache<P>& cache, const cache_config& cc,
                                         const cache_replay_config& rc, std::span<const std::uint64_t> given,
                                         std::vector<std::uint64_t>& storage, std::string_view fn);

template <EvictionPolicy P>
[[nodiscard]] bool reads_future(const expert_cache<P>& cache) noexcept {
  if constexpr (requires { cache.policy().reads_future(); }) {
    return cache.policy().reads_future();
  } else {
    return policy_traits<P>::needs_future;
  }
}

/// Calls `each(key)` for the demand accesses a replay of `t` makes, in order (see
/// `replay_accesses`).
template <class T, class Each>
void for_each_access(const T& t, const cache_replay_config& rc, Each&& each) {
  std::vector<std::uint8_t> seen(t.info().num_experts, 0);
  const auto nothing = [](const auto&) {};
  walk_batches(
      t, nothing,
      [&](const batch_view& b) {
        if (!kept(b.ref.kind, rc.prefill, rc.decode)) return;
        distinct_experts(b, seen, each);
      },
      nothing);
}

}  // namespace detail

/// The demand accesses a replay of `t` makes, in order: for each kept batch, its distinct
/// experts in order of first selection.
///
/// Complexity: O(rows · k).
template <replay_source T>
[[nodiscard]] std::vector<expert_key> replay_accesses(const T& t, const cache_replay_config& rc = {}) {
  std::vector<expert_key> out;
  detail::for_each_access(t, rc, [&](expert_key k) { out.push_back(k); });
  return out;
}

/// The next uses of every demand access of a replay of `t` (`next_use_positions` over
/// `replay_accesses(t, rc)`): what a policy that reads the future needs, the same for
/// every capacity, so a caller replaying many capacities computes it once.
///
/// Complexity: O(accesses) time; 12 bytes per access at the peak, 8 kept.
template <replay_source T>
[[nodiscard]] std::vector<std::uint64_t> replay_next_uses(const T& t, const cache_replay_config& rc = {}) {
  return next_use_positions(replay_accesses(t, rc), t.info().num_layers, t.info().num_experts);
}

/// The next uses of every demand access of a replay of a canonical file, in memory bounded
/// however long the file is: what `replay_next_uses(f, rc)` returns, given out one access
/// at a time by a `cursor` instead of held whole.
///
/// Building it walks the file once (checking every row). The access sequence is cut into
/// chunks of about `chunk_accesses` accesses, each starting at a batch; for every chunk the
/// index keeps its first row and access position and, for every expert (layer × experts
/// keys), the position of its first access after the chunk (a forward pass finds them:
/// an access settles the chunks its key had not been seen after). A cursor rebuilds one
/// chunk's next uses at a time: it reads the chunk's rows again from the map
/// (`canonical_file::for_each_batch_in_rows`) and runs `next_use_positions`' backward
/// pass over them, starting from the positions kept for the chunk's end. So a replay with
/// a cursor reads the file twice; the positions are exactly those of `replay_next_uses`.
///
/// Memory: 16 bytes and one row of 8 bytes per key for every chunk (the chunk length is
/// raised as needed to keep these rows within about 128 MiB), plus 8 bytes per access of
/// one chunk in each cursor.
class next_use_index {
 public:
  /// Accesses per chunk unless told: 2^22 (a cursor holds 32 MiB).
  static constexpr std::uint64_t default_chunk_accesses = std::uint64_t{1} << 22;

  /// Indexes `f` for a replay that keeps the phases of `rc`; `chunk_accesses` (>= 1): the
  /// chunk length, 0 for the default (see the class comment). `on_access(expert_key)` is
  /// called for every access in order, so a caller can take another figure (the LRU curve)
  /// from the same pass.
  ///
  /// Throws: `invalid_argument` when no phase is kept; `parse_error` as
  /// `canonical_file::for_each_batch`.
  template <class OnAccess>
  next_use_index(const canonical_file& f, const cache_replay_config& rc, std::uint64_t chunk_accesses,
                 OnAccess&& on_access)
      : file_(&f), rc_(rc), num_experts_(f.info().num_experts) {
    build(f, chunk_accesses, on_access);
  }

  /// Indexes the trace `t` in memory the same way, so that a replay of it holds one chunk's
  /// next uses instead of all of them (8 bytes per access); a cursor reads the chunk's
  /// batches again from `t`, which must outlive the index. `balanced_chunk_accesses` picks a
  /// chunk length for the least memory.
  template <class OnAccess>
  next_use_index(const routing_trace& t, const cache_replay_config& rc, std::uint64_t chunk_accesses,
                 OnAccess&& on_access)
      : trace_(&t), rc_(rc), num_experts_(t.info().num_experts) {
    build(t, chunk_accesses, on_access);
  }

  /// Indexes `t` (see above) with nothing else taken from the pass.
  explicit next_use_index(const routing_trace& t, const cache_replay_config& rc = {}, std::uint64_t chunk_accesses = 0)
      : next_use_index(t, rc, chunk_accesses, [](expert_key) {}) {}

  /// The chunk length that holds the least for a replay of at most `accesses` accesses
  /// over `keys` keys (layers × experts): a cursor holds 8 bytes per access of a chunk and
  /// the index 8 bytes per key and chunk, so about √(accesses · keys), and at least 4,096.
  [[nodiscard]] static std::uint64_t balanced_chunk_accesses(std::uint64_t accesses, std::uint64_t keys) noexcept {
    const long double product = static_cast<long double>(accesses) * static_cast<long double>(keys);
    const auto root = static_cast<std::uint64_t>(std::sqrt(product)) + 1;
    return std::max<std::uint64_t>(root, 4096);
  }

  /// Indexes `f` (see above) with nothing else taken from the pass.
  explicit next_use_index(const canonical_file& f, const cache_replay_config& rc = {}, std::uint64_t chunk_accesses = 0)
      : next_use_index(f, rc, chunk_accesses, [](expert_key) {}) {}

  next_use_index(const next_use_index&) = delete;
  next_use_index& operator=(const next_use_index&) = delete;

  /// The file indexed (null when a trace in memory was), the trace indexed (null when a
  /// file was), the phases kept, the accesses of the replay, the chunk length and the chunks.
  [[nodiscard]] const canonical_file* file() const noexcept { return file_; }
  [[nodiscard]] const routing_trace* trace() const noexcept { return trace_; }
  [[nodiscard]] const cache_replay_config& config() const noexcept { return rc_; }
  [[nodiscard]] std::uint64_t accesses() const noexcept { return chunk_position_.back(); }
  [[nodiscard]] std::uint64_t chunk_accesses() const noexcept { return chunk_; }
  [[nodiscard]] std::size_t chunks() const noexcept { return chunk_row_.size() - 1; }

  /// The next uses in access order, one chunk rebuilt at a time. Cursors are independent
  /// (one per replay, on any thread).
  class cursor {
   public:
    explicit cursor(const next_use_index& ix) : ix_(&ix), seen_(ix.slots_, no_next_use), flags_(ix.num_experts_, 0) {
      buf_.reserve(static_cast<std::size_t>(ix.longest_));
    }

    /// The next use of the access at `position`, which must be the one after the last asked.
    ///
    /// Throws: `invalid_argument` past the last access, or when the positions asked skip.
    [[nodiscard]] std::uint64_t next(std::uint64_t position) {
      if (position != ix_->chunk_position_[chunk_] + at_) {
        detail::throw_invalid(
            "next_use_index::cursor",
            "positions must be asked in order, expected " + std::to_string(ix_->chunk_position_[chunk_] + at_),
            position);
      }
      while (at_ == buf_.size()) {
        if (loaded_ && chunk_ + 1 >= ix_->chunks()) {
          detail::throw_invalid("replay_cache", "the next-use index has fewer entries than the replay's accesses",
                                ix_->accesses());
        }
        if (loaded_) ++chunk_;
        load(chunk_);
      }
      return buf_[at_++];
    }

    /// Checks that the replay made as many accesses as the index holds.
    void finish(std::uint64_t positions) const {
      if (positions != ix_->accesses()) {
        detail::throw_invalid("replay_cache", "the next-use index has " + std::to_string(ix_->accesses()) +
                                                  " entries, the replay made " + std::to_string(positions) +
                                                  " accesses");
      }
    }

    [[nodiscard]] bool active() const noexcept { return true; }

   private:
    void load(std::size_t c) {
      const next_use_index& ix = *ix_;
      buf_.clear();
      ix.for_each_batch_in_rows(ix.chunk_row_[c], ix.chunk_row_[c + 1], [&](const batch_view& b) {
        if (!detail::kept(b.ref.kind, ix.rc_.prefill, ix.rc_.decode)) return;
        detail::distinct_experts(b, flags_, [&](expert_key k) { buf_.push_back(k.flat(ix.num_experts_)); });
      });
      const std::uint64_t first = ix.chunk_position_[c];
      MOEPOLICY_ASSERT(buf_.size() == ix.chunk_position_[c + 1] - first);
      std::copy_n(ix.after_.begin() + static_cast<std::ptrdiff_t>(c * ix.slots_), ix.slots_, seen_.begin());
      for (std::size_t i = buf_.size(); i-- > 0;) {  // next_use_positions, from the chunk's end
        const auto key = static_cast<std::size_t>(buf_[i]);
        buf_[i] = seen_[key];
        seen_[key] = first + i;
      }
      at_ = 0;
      loaded_ = true;
    }

    const next_use_index* ix_;
    std::vector<std::uint64_t> buf_;  // the loaded chunk's next uses
    std::vector<std::uint64_t> seen_;
    std::vector<std::uint8_t> flags_;
    std::size_t chunk_ = 0;
    std::size_t at_ = 0;
    bool loaded_ = false;
  };

 private:
  template <replay_source T, class OnAccess>
  void build(const T& f, std::uint64_t chunk_accesses, OnAccess& on_access) {
    constexpr std::string_view fn = "next_use_index";
    const cache_replay_config& rc = rc_;
    if (!rc.prefill && !rc.decode) detail::throw_invalid(fn, "index prefill, decode or both");
    slots_ = static_cast<std::size_t>(f.info().num_layers) * num_experts_;
    if (chunk_accesses == 0) {
      // At most about 128 MiB of kept positions: (accesses / chunk) rows of 8 · slots bytes,
      // accesses being at most rows · top_k.
      const std::uint64_t most = f.num_rows() * f.info().top_k;
      const std::uint64_t per_row = 8 * static_cast<std::uint64_t>(slots_);
      chunk_accesses = std::max(default_chunk_accesses, most / ((std::uint64_t{1} << 27) / per_row + 1) + 1);
    }
    chunk_ = chunk_accesses;
    std::vector<std::uint32_t> pending(slots_, 0);  // the first chunk whose position of a key is unset
    std::vector<std::uint8_t> seen(num_experts_, 0);
    chunk_row_.push_back(0);
    chunk_position_.push_back(0);
    std::uint64_t position = 0;
    std::uint32_t chunk = 0;
    const auto nothing = [](const auto&) {};
    detail::walk_batches(
        f, nothing,
        [&](const batch_view& b) {
          if (!detail::kept(b.ref.kind, rc.prefill, rc.decode)) return;
          if (position - chunk_position_.back() >= chunk_) {
            chunk_row_.push_back(b.ref.first_row);
            chunk_position_.push_back(position);
            after_.resize(after_.size() + slots_, no_next_use);
            ++chunk;
          }
          detail::distinct_experts(b, seen, [&](expert_key k) {
            const std::size_t key = k.flat(num_experts_);
            for (std::uint32_t c = pending[key]; c < chunk; ++c) after_[c * slots_ + key] = position;
            pending[key] = chunk;
            on_access(k);
            ++position;
          });
        },
        nothing);
    chunk_row_.push_back(f.num_rows());
    chunk_position_.push_back(position);
    after_.resize(after_.size() + slots_, no_next_use);
    for (std::size_t c = 0; c + 1 < chunk_position_.size(); ++c) {
      longest_ = std::max(longest_, chunk_position_[c + 1] - chunk_position_[c]);
    }
  }

  /// The batches whose rows lie in [first, last) of what was indexed, in order (a chunk's
  /// bounds are batches' first rows; a trace's batches lie in row order).
  template <class OnBatch>
  void for_each_batch_in_rows(std::uint64_t first, std::uint64_t last, OnBatch&& on_batch) const {
    if (file_ != nullptr) {
      file_->for_each_batch_in_rows(first, last, on_batch);
      return;
    }
    const auto batches = trace_->batches();
    auto it =
        std::partition_point(batches.begin(), batches.end(), [&](const batch_ref& b) { return b.first_row < first; });
    for (; it != batches.end(); ++it) {
      const batch_ref b = *it;
      if (b.first_row >= last) break;
      on_batch(trace_->view(b));
    }
  }

  const canonical_file* file_ = nullptr;
  const routing_trace* trace_ = nullptr;
  cache_replay_config rc_;
  std::size_t num_experts_ = 0;
  std::size_t slots_ = 0;
  std::uint64_t chunk_ = 0;
  std::uint64_t longest_ = 0;                  // accesses of the longest chunk
  std::vector<std::uint64_t> chunk_row_;       // each chunk's first row, then the rows
  std::vector<std::uint64_t> chunk_position_;  // each chunk's first access, then the accesses
  std::vector<std::uint64_t> after_;           // per chunk and key: its first access after the chunk
};

namespace detail {

template <EvictionPolicy P, replay_source T>
std::span<const std::uint64_t> future_of(const T& t, const expert_cache<P>& cache, const cache_config& cc,
                                         const cache_replay_config& rc, std::span<const std::uint64_t> given,
                                         std::vector<std::uint64_t>& storage, std::string_view) {
  if (!reads_future(cache)) return {};
  if (!given.empty()) return given;
  storage = next_use_positions(replay_accesses(t, rc), cc.num_layers, cc.num_experts);
  return storage;
}

/// The next uses a replay reads from an index's cursor, or none.
struct optional_cursor {
  std::optional<next_use_index::cursor> cursor;

  [[nodiscard]] bool active() const noexcept { return cursor.has_value(); }
  [[nodiscard]] std::uint64_t next(std::uint64_t position) { return cursor->next(position); }
  void finish(std::uint64_t positions) const { cursor->finish(positions); }
};

inline void check_index(const canonical_file& t, const cache_replay_config& rc, const next_use_index& index,
                        std::string_view fn) {
  if (index.file() != &t) throw_invalid(fn, "the next-use index was built on another file than " + t.name());
  if (index.config().prefill != rc.prefill || index.config().decode != rc.decode) {
    throw_invalid(fn, "the next-use index was built for other phases than the replay keeps");
  }
}

inline void check_index(const routing_trace& t, const cache_replay_config& rc, const next_use_index& index,
                        std::string_view fn) {
  if (index.trace() != &t) throw_invalid(fn, "the next-use index was built on another trace than the one replayed");
  if (index.config().prefill != rc.prefill || index.config().decode != rc.decode) {
    throw_invalid(fn, "the next-use index was built for other phases than the replay keeps");
  }
}

/// Before a batch of layer `l` of a hint replay: `predictor.predict(l)` into `scores`, then
/// `hint(key, score)` for every expert scored above 0, in expert order.
template <class Predictor, class Hint>
void hint_predicted(Predictor& predictor, layer_id l, std::vector<float>& scores, Hint&& hint) {
  if (!predictor.predict(l, scores)) return;
  for (std::size_t e = 0; e < scores.size(); ++e) {
    if (scores[e] > 0.0f) hint(expert_key{l, static_cast<expert_id>(e)}, scores[e]);
  }
}

/// The next uses a set of caches reads in one walk of `t`: none when no cache reads the
/// future (`reads` false), else `given` when not empty (checked as the walk goes), else
/// computed into `storage`.
template <replay_source T>
span_future set_future(const T& t, const cache_replay_config& rc, bool reads, std::span<const std::uint64_t> given,
                       std::vector<std::uint64_t>& storage, std::string_view fn) {
  if (!reads) return {{}, fn};
  if (given.empty()) {
    storage = replay_next_uses(t, rc);
    given = storage;
  }
  return {given, fn};
}

}  // namespace detail

/// Replays `t` through an `expert_cache<P>` of configuration `cc` (demand accesses only).
///
/// Throws: `invalid_argument` when the cache is smaller than the trace's layers or experts,
/// no phase is kept, or the cache or policy configuration is bad.
/// Complexity: O(accesses × the policy's event cost) plus, for policies that need the
/// future, O(accesses) to compute it.
template <EvictionPolicy P, replay_source T>
[[nodiscard]] cache_replay_result replay_cache(const T& t, const cache_config& cc,
                                               const typename P::config_type& pc = {},
                                               const cache_replay_config& rc = {},
                                               std::span<const std::uint64_t> next_use = {}) {
  detail::check_replay(t, cc, rc, "replay_cache");
  expert_cache<P> cache(cc, pc);
  std::vector<std::uint64_t> storage;
  const auto future = detail::future_of(t, cache, cc, rc, next_use, storage, "replay_cache");
  const auto nothing = [](const auto&...) {};
  return detail::replay_loop(t, cache, rc, detail::span_future{future}, nothing, nothing, nothing, nothing);
}

/// Replays `t` through the policy `pc` names (see `eviction_config_by_name`). `next_use`:
/// as above.
template <replay_source T>
[[nodiscard]] cache_replay_result replay_cache(const T& t, const cache_config& cc, const any_eviction_config& pc,
                                               const cache_replay_config& rc = {},
                                               std::span<const std::uint64_t> next_use = {}) {
  return replay_cache<any_eviction_policy>(t, cc, pc, rc, next_use);
}

/// Replays the canonical file or trace `t` as above, a policy that reads the future taking
/// the next uses from `index` (built on `t` for the same phases), holding one chunk of them
/// (for a file, in memory bounded however long it is). The same result as with
/// `replay_next_uses(t, rc)`.
///
/// Throws: as above; `invalid_argument` when `index` was built on another file or trace or
/// for other phases.
template <EvictionPolicy P, replay_source T>
[[nodiscard]] cache_replay_result replay_cache(const T& t, const cache_config& cc, const typename P::config_type& pc,
                                               const cache_replay_config& rc, const next_use_index& index) {
  constexpr std::string_view fn = "replay_cache";
  detail::check_replay(t, cc, rc, fn);
  detail::check_index(t, rc, index, fn);
  expert_cache<P> cache(cc, pc);
  detail::optional_cursor future;
  if (detail::reads_future(cache)) future.cursor.emplace(index);
  const auto nothing = [](const auto&...) {};
  return detail::replay_loop(t, cache, rc, future, nothing, nothing, nothing, nothing);
}

/// Replays the canonical file `t` through the policy `pc` names, with `index` as above.
[[nodiscard]] inline cache_replay_result replay_cache(const canonical_file& t, const cache_config& cc,
                                                      const any_eviction_config& pc, const cache_replay_config& rc,
                                                      const next_use_index& index) {
  return replay_cache<any_eviction_policy>(t, cc, pc, rc, index);
}

/// A range of expert caches of one policy type that `replay_caches` can feed: a
/// `std::vector`, `std::deque`, `std::array` or `std::span` of `expert_cache<P>`, not const.
template <class R>
concept expert_cache_range = std::ranges::forward_range<R> && requires {
  typename std::ranges::range_value_t<R>::policy_type;
} && std::same_as<std::ranges::range_value_t<R>, expert_cache<typename std::ranges::range_value_t<R>::policy_type>> &&
    std::same_as < std::ranges::range_reference_t<R>,
    std::ranges::range_value_t<R>
& > ;

namespace detail {

/// The events of a replay fed to every cache of several ranges, in order; a cache whose
/// policy reads the future gets the access's next use, the others an empty `access_info`.
template <class... Ranges>
struct cache_set_feed {
  std::tuple<Ranges&...> sets;

  template <class F>
  void each(F&& f) {
    std::apply([&](auto&... set) { (each_in(set, f), ...); }, sets);
  }
  template <class Set, class F>
  static void each_in(Set& set, F& f) {
    for (auto& c : set) f(c);
  }

  void clear() noexcept {
    each([](auto& c) { c.clear(); });
  }
  void begin_layer(const batch_view& b) noexcept {
    each([&](auto& c) { c.begin_layer(b); });
  }
  void access(expert_key k, const access_info& info) noexcept {
    each([&](auto& c) {
      if (reads_future(c)) {
        static_cast<void>(c.get(k, info));
      } else {
        static_cast<void>(c.get(k));
      }
    });
  }
  void end_layer(layer_id l) noexcept {
    each([&](auto& c) { c.end_layer(l); });
  }
  void end_step() noexcept {
    each([](auto& c) { c.end_step(); });
  }
  /// Checks every cache against `t` and `rc`; returns whether one reads the future.
  template <replay_source T>
  bool check(const T& t, const cache_replay_config& rc, std::string_view fn) {
    check_replay(t, cache_config{.num_layers = t.info().num_layers, .num_experts = t.info().num_experts}, rc, fn);
    bool future = false;
    each([&](auto& c) {
      check_replay(t, c.config(), rc, fn);
      future = future || reads_future(c);
    });
    return future;
  }
};

/// A `cache_set_feed` that records the events of a replay on a tape of fixed size and plays
/// the tape to one cache after another when it fills (and at `flush`): each cache runs a
/// block of about a thousand batches while its state stays in the processor's caches,
/// instead of every cache being visited for every event. The caches being independent and
/// each one hearing exactly its events in their order (hints, `begin_layer`, the accesses,
/// `end_layer`, `end_step`, `clear`), their statistics are those of the untaped feed. A
/// flush may fall between any two events. Only for traces in memory (`routing_trace`),
/// whose batch views stay valid for the whole walk. Allocates at construction only.
template <class... Ranges>
class cache_set_tape {
 public:
  /// The accesses, hints and tape items a tape holds by default before it is played.
  static constexpr std::size_t default_capacity = 2048;

  /// Preconditions: `capacity` >= 1.
  explicit cache_set_tape(Ranges&... sets, std::size_t capacity = default_capacity)
      : feed_{{sets...}}, capacity_(capacity) {
    MOEPOLICY_ASSERT(capacity_ >= 1);
    items_.reserve(capacity_);
    views_.reserve(capacity_);
    accesses_.reserve(capacity_);
    hints_.reserve(capacity_);
  }

  template <replay_source T>
  bool check(const T& t, const cache_replay_config& rc, std::string_view fn) {
    return feed_.check(t, rc, fn);
  }
  void clear() noexcept { push_item({.what = item_kind::clear}, {}); }
  void hint(expert_key k, float score) noexcept {
    if (hints_.size() == capacity_) flush();
    hints_.push_back({k, score});
  }
  void begin_layer(const batch_view& b) noexcept {
    push_item({.what = item_kind::batch, .layer = b.ref.layer}, b);
    items_.back().hints_end = static_cast<std::uint32_t>(hints_.size());
    items_.back().accesses_end = static_cast<std::uint32_t>(accesses_.size());
  }
  void access(expert_key k, const access_info& info) noexcept {
    if (accesses_.size() == capacity_) {
      // The batch's accesses so far are played with it, without its `end_layer`; a `resume`
      // item carries the rest.
      const batch_view b = views_.back();
      cut_ = true;
      flush();
      cut_ = false;
      push_item({.what = item_kind::resume, .layer = b.ref.layer}, b);
    }
    // The walk's accesses carry a next use and nothing else (`replay_walk`).
    MOEPOLICY_ASSERT(!info.prefetch && info.confidence == 0.0f);
    accesses_.push_back({k, info.next_use});
    items_.back().accesses_end = static_cast<std::uint32_t>(accesses_.size());
  }
  void end_layer(layer_id) noexcept {}
  void end_step() noexcept { push_item({.what = item_kind::step_end}, {}); }

  /// Plays what the tape holds to every cache, in order, and empties it.
  void flush() noexcept {
    feed_.each([&](auto& c) { play(c); });
    items_.clear();
    views_.clear();
    accesses_.clear();
    hints_.clear();
  }

 private:
  // batch: hints, `begin_layer`, accesses, and `end_layer` unless the tape filled in the
  // middle of the batch's accesses; resume: the rest of that batch's accesses, `end_layer`.
  enum class item_kind : std::uint8_t { batch, resume, step_end, clear };
  // Small, so that a cache's play reads little besides its own state; the batch views,
  // which only the policies that observe layers read, lie beside the items.
  struct item {
    item_kind what = item_kind::batch;
    layer_id layer = 0;
    std::uint32_t hints_end = 0;     // one past the item's last hint
    std::uint32_t accesses_end = 0;  // one past the item's last access
  };
  struct taped_access {
    expert_key key;
    std::uint64_t next_use;
  };
  struct taped_hint {
    expert_key key;
    float score;
  };

  void push_item(const item& i, const batch_view& view) noexcept {
    if (items_.size() == capacity_) flush();
    items_.push_back(i);
    views_.push_back(view);
    items_.back().hints_end = static_cast<std::uint32_t>(hints_.size());
    items_.back().accesses_end = static_cast<std::uint32_t>(accesses_.size());
  }

  template <class Cache>
  void play(Cache& c) const noexcept {
    std::size_t h = 0, a = 0;
    const std::size_t n = items_.size();
    for (std::size_t i = 0; i < n; ++i) {
      const item& it = items_[i];
      switch (it.what) {
        case item_kind::batch:
        case item_kind::resume: {
          for (; h < it.hints_end; ++h) c.hint(hints_[h].key, hints_[h].score);
          if (it.what == item_kind::batch) c.begin_layer(views_[i]);
          if (reads_future(c)) {
            for (; a < it.accesses_end; ++a) {
              access_info info;
              info.next_use = accesses_[a].next_use;
              static_cast<void>(c.get(accesses_[a].key, info));
            }
          } else {
            for (; a < it.accesses_end; ++a) static_cast<void>(c.get(accesses_[a].key));
          }
          // A batch cut by a full tape ends in the next tape's `resume`.
          if (!cut_ || i + 1 < n) c.end_layer(it.layer);
          break;
        }
        case item_kind::step_end:
          c.end_step();
          break;
        case item_kind::clear:
          c.clear();
          break;
      }
    }
    for (; h < hints_.size(); ++h) c.hint(hints_[h].key, hints_[h].score);  // hints of a batch yet to come
  }

  cache_set_feed<Ranges...> feed_;
  std::size_t capacity_;
  std::vector<item> items_;
  std::vector<batch_view> views_;  // per item: its batch (batch and resume items)
  std::vector<taped_access> accesses_;
  std::vector<taped_hint> hints_;
  bool cut_ = false;  // the last item's batch continues on the next tape
};

/// Runs `walk(feed)` (one walk of the replay) over the caches `caches...` fed as one set:
/// a typed tape of events played a block at a time for a trace in memory (flushed after
/// the walk), the caches called event by event for a canonical file.
template <class T, class Walk, class... Ranges>
replay_walk_result with_cache_set(Walk&& walk, Ranges&... caches) {
  if constexpr (std::same_as<T, routing_trace>) {
    cache_set_tape<Ranges...> feed(caches...);
    const replay_walk_result w = walk(feed);
    feed.flush();
    return w;
  } else {
    cache_set_feed<Ranges...> feed{{caches...}};
    return walk(feed);
  }
}

}  // namespace detail

/// Replays `t` through every cache of `caches...` in one walk: any number of caches, of
/// any policy types (one range per type; LRU in its own type avoids the dispatch of
/// `any_eviction_policy`), at any capacities and scopes. Each cache sees exactly the
/// events that `replay_cache` gives one cache — `begin_layer`, one `get` per distinct
/// expert of each kept batch, in order, `end_layer`, `end_step` after each kept step,
/// `clear` when a request starts if `rc` resets — so, the caches being independent, each
/// one's statistics afterwards are those of `replay_cache` with its configuration from a
/// fresh cache (`replay_cache` starts from an empty cache; these start from the state
/// they are passed in). Caches whose policy reads the future (Belady) share one next-use
/// sequence: `next_use` when not empty (checked against the replay's accesses), else
/// computed once (`replay_next_uses`, 8 bytes per access) when a cache reads it. The trace
/// is walked once whatever the number of caches (twice when next uses are computed).
///
/// Throws: `invalid_argument` when a cache is smaller than the trace's layers or experts,
/// no phase is kept, or `next_use` does not match the replay's accesses.
/// Complexity: O(accesses × the sum of the caches' event costs); nothing allocates per
/// batch or access.
template <replay_source T, class... Ranges>
requires(expert_cache_range<Ranges>&&...) replay_walk_result
    replay_caches(const T& t, const cache_replay_config& rc, std::span<const std::uint64_t> next_use,
                  Ranges&&... caches) {
  constexpr std::string_view fn = "replay_caches";
  const auto nothing = [](const auto&...) {};
  std::vector<std::uint64_t> storage;
  return detail::with_cache_set<T>(
      [&](auto& feed) {
        const bool reads = feed.check(t, rc, fn);
        const detail::span_future future = detail::set_future(t, rc, reads, next_use, storage, fn);
        return detail::replay_walk(t, rc, future, feed, nothing, nothing, nothing, nothing);
      },
      caches...);
}

/// Replays the canonical file or trace `t` through every cache of `caches...` in one walk,
/// as above, the caches that read the future sharing one cursor of `index` (built on `t`
/// for the same phases: one rebuild of each chunk's next uses for all of them), holding one
/// chunk of next uses instead of 8 bytes per access (for a file, in memory bounded however
/// long it is). The same statistics as with `replay_next_uses(t, rc)`.
///
/// Throws: as above; `invalid_argument` when `index` was built on another file or trace or
/// for other phases.
template <replay_source T, class... Ranges>
requires(expert_cache_range<Ranges>&&...) replay_walk_result
    replay_caches(const T& t, const cache_replay_config& rc, const next_use_index& index, Ranges&&... caches) {
  constexpr std::string_view fn = "replay_caches";
  const auto nothing = [](const auto&...) {};
  return detail::with_cache_set<T>(
      [&](auto& feed) {
        const bool reads = feed.check(t, rc, fn);
        detail::check_index(t, rc, index, fn);
        detail::optional_cursor future;
        if (reads) future.cursor.emplace(index);
        return detail::replay_walk(t, rc, future, feed, nothing, nothing, nothing, nothing);
      },
      caches...);
}

/// Replays `t` through every cache of `caches...` in one walk, as `replay_caches`, every
/// cache hearing `predictor`'s hints before each kept batch as in `replay_cache_with_hints`
/// (every expert the predictor scores above 0 is hinted with its score, in expert order).
/// The predictor sees only the trace — `predict`, `observe`, `begin_request` and `end_step`
/// in the order one replay makes them — never a cache, so one predictor serves all caches:
/// each cache's statistics afterwards are those of `replay_cache_with_hints` with its
/// configuration and a fresh predictor in the state `predictor` starts in. `next_use`: as
/// `replay_caches`.
///
/// Throws: as `replay_caches`.
/// Complexity: O(batches × E × caches) for the hints plus O(accesses × the sum of the
/// caches' event costs); nothing allocates per batch or access.
template <PrefetchPredictor Predictor, replay_source T, class... Ranges>
requires(expert_cache_range<Ranges>&&...) replay_walk_result
    replay_caches_with_hints(const T& t, const cache_replay_config& rc, std::span<const std::uint64_t> next_use,
                             Predictor& predictor, Ranges&&... caches) {
  constexpr std::string_view fn = "replay_caches_with_hints";
  std::vector<std::uint64_t> storage;
  std::vector<float> scores(t.info().num_experts, 0.0f);
  const auto walk = [&](auto& feed, auto&& hint) {
    const bool reads = feed.check(t, rc, fn);
    const detail::span_future future = detail::set_future(t, rc, reads, next_use, storage, fn);
    const auto before = [&](const batch_view& b) { detail::hint_predicted(predictor, b.ref.layer, scores, hint); };
    const auto after = [&](const batch_view& b) { predictor.observe(b); };
    const auto new_request = [&]() { predictor.begin_request(); };
    const auto step_end = [&]() { predictor.end_step(); };
    return detail::replay_walk(t, rc, future, feed, before, after, new_request, step_end);
  };
  if constexpr (std::same_as<T, routing_trace>) {
    detail::cache_set_tape<std::remove_reference_t<Ranges>...> feed(caches...);
    const replay_walk_result w = walk(feed, [&](expert_key k, float s) { feed.hint(k, s); });
    feed.flush();
    return w;
  } else {
    detail::cache_set_feed<std::remove_reference_t<Ranges>...> feed{{caches...}};
    return walk(feed, [&](expert_key k, float s) { feed.each([&](auto& c) { c.hint(k, s); }); });
  }
}

/// Replays `t` through an `expert_cache<P>` whose policy hears `predictor`'s hints before
/// every batch (see the header comment): demand accesses only, nothing is loaded ahead. The
/// predictor observes every replayed batch. `next_use`: as `replay_cache`.
///
/// Throws: as `replay_cache`.
template <EvictionPolicy P, PrefetchPredictor Predictor, replay_source T>
[[nodiscard]] cache_replay_result replay_cache_with_hints(const T& t, const cache_config& cc,
                                                          const typename P::config_type& pc, Predictor& predictor,
                                                          const cache_replay_config& rc = {},
                                                          std::span<const std::uint64_t> next_use = {}) {
  detail::check_replay(t, cc, rc, "replay_cache_with_hints");
  expert_cache<P> cache(cc, pc);
  std::vector<std::uint64_t> storage;
  const auto future = detail::future_of(t, cache, cc, rc, next_use, storage, "replay_cache_with_hints");
  std::vector<float> scores(t.info().num_experts, 0.0f);
  const auto before = [&](const batch_view& b) {
    detail::hint_predicted(predictor, b.ref.layer, scores, [&](expert_key k, float s) { cache.hint(k, s); });
  };
  const auto after = [&](const batch_view& b) { predictor.observe(b); };
  const auto new_request = [&]() { predictor.begin_request(); };
  const auto step_end = [&]() { predictor.end_step(); };
  return detail::replay_loop(t, cache, rc, detail::span_future{future}, before, after, new_request, step_end);
}

/// How `replay_cache_with_prefetch` prefetches.
struct prefetch_replay_config {
  /// The most experts prefetched per batch: the predictor's best scores above 0, best
  /// first (ties: lower expert); 0 stands for the trace's top_k. At most the layer's experts.
  std::uint32_t depth = 0;
};

namespace detail {

/// The hints and prefetches of a prefetch replay before a batch of layer l: the predictor
/// scores layer l; every expert scored above 0 is hinted, in expert order, then the
/// `depth` best scores above 0 are prefetched, best first (ties: lower expert).
class prefetch_selection {
 public:
  prefetch_selection(const trace_info& info, const prefetch_replay_config& pf)
      : depth_(std::min<std::size_t>(pf.depth == 0 ? info.top_k : pf.depth, info.num_experts)),
        scores_(info.num_experts, 0.0f),
        order_(info.num_experts) {}

  template <class Predictor, class Hint, class Prefetch>
  void operator()(Predictor& predictor, layer_id l, Hint&& hint, Prefetch&& prefetch) {
    if (!predictor.predict(l, scores_)) return;
    for (std::size_t e = 0; e < scores_.size(); ++e) {
      order_[e] = static_cast<std::uint32_t>(e);
      if (scores_[e] > 0.0f) hint(expert_key{l, static_cast<expert_id>(e)}, scores_[e]);
    }
    const auto better = [&](std::uint32_t x, std::uint32_t y) {
      return scores_[x] > scores_[y] || (scores_[x] == scores_[y] && x < y);
    };
    std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(depth_), order_.end(), better);
    for (std::size_t i = 0; i < depth_ && scores_[order_[i]] > 0.0f; ++i) {
      prefetch(expert_key{l, static_cast<expert_id>(order_[i])}, scores_[order_[i]]);
    }
  }

 private:
  std::size_t depth_;
  std::vector<float> scores_;
  std::vector<std::uint32_t> order_;
};

}  // namespace detail

/// Replays `t` through an `expert_cache<P>` that prefetches what `predictor` forecasts.
/// Before each kept batch of layer l: `predictor.predict(l)`, every expert with a score
/// above 0 is hinted (`cache.hint`: prediction-gated admission reads it), and the `depth`
/// best are prefetched with their scores as confidence (`cache.prefetch`: a policy that
/// gates prefetches may refuse; others take every one); then the batch's demand accesses
/// as in `replay_cache`, then the predictor observes the batch.
///
/// Untimed: a prefetch is assumed to land before the access it serves, so the hit ratio is
/// an upper bound on what the prefetches can add (sim/timed_cache.hpp times them). Their
/// cost is counted in full: `stats.prefetches` experts and `stats.prefetch_bytes` bytes
/// moved (with `cache_config::footprints` or `expert_bytes`), demand misses'
/// `stats.demand_bytes`; a prefetched expert evicted before any use, or still unused when the
/// replay ends (the cache is then emptied, counted in `stats.dropped`), is in
/// `stats.prefetch_wasted`.
///
/// Throws: as `replay_cache`.
/// Complexity: O(batches × E log depth) for the selection plus the cache's events; nothing
/// allocates per batch.
template <EvictionPolicy P, PrefetchPredictor Predictor>
[[nodiscard]] cache_replay_result replay_cache_with_prefetch(const routing_trace& t, const cache_config& cc,
                                                             const typename P::config_type& pc, Predictor& predictor,
                                                             const prefetch_replay_config& pf = {},
                                                             const cache_replay_config& rc = {}) {
  detail::check_replay(t, cc, rc, "replay_cache_with_prefetch");
  expert_cache<P> cache(cc, pc);
  std::vector<std::uint64_t> next_use;
  if (detail::reads_future(cache)) {
    next_use = next_use_positions(replay_accesses(t, rc), cc.num_layers, cc.num_experts);
  }
  detail::prefetch_selection select(t.info(), pf);
  const auto before = [&](const batch_view& b) {
    select(
        predictor, b.ref.layer, [&](expert_key k, float s) { cache.hint(k, s); },
        [&](expert_key k, float s) { static_cast<void>(cache.prefetch(k, s)); });
  };
  const auto after = [&](const batch_view& b) { predictor.observe(b); };
  const auto new_request = [&]() { predictor.begin_request(); };
  const auto step_end = [&]() { predictor.end_step(); };
  cache_replay_result out =
      detail::replay_loop(t, cache, rc, detail::span_future{next_use}, before, after, new_request, step_end);
  cache.clear();  // prefetches never used by the end are wasted
  out.stats = cache.stats();
  return out;
}

/// Replays `t` through every cache of `caches...` in one walk, each prefetching what one
/// `predictor` forecasts, as `replay_cache_with_prefetch` does for one cache: before each
/// kept batch the predictor scores its layer once, and every cache hears the same hints and
/// is asked the same prefetches, then the batch's demand accesses, as in `replay_caches`;
/// at the end every cache is emptied (prefetches never used count as wasted). The predictor
/// sees only the trace, so each cache's statistics afterwards are those of
/// `replay_cache_with_prefetch` with its configuration and a fresh predictor in the state
/// `predictor` starts in (these caches start from the state they are passed in). Caches
/// that read the future share one next-use sequence, computed once.
///
/// Throws: as `replay_caches`.
/// Complexity: one prediction and selection per kept batch, O(E log depth), plus the caches'
/// events; nothing allocates per batch or access.
template <PrefetchPredictor Predictor, class... Ranges>
requires(expert_cache_range<Ranges>&&...) replay_walk_result
    replay_caches_with_prefetch(const routing_trace& t, Predictor& predictor, const prefetch_replay_config& pf,
                                const cache_replay_config& rc, Ranges&&... caches) {
  constexpr std::string_view fn = "replay_caches_with_prefetch";
  detail::cache_set_feed<std::remove_reference_t<Ranges>...> feed{{caches...}};
  const bool reads = feed.check(t, rc, fn);
  std::vector<std::uint64_t> storage;
  const detail::span_future future = detail::set_future(t, rc, reads, {}, storage, fn);
  detail::prefetch_selection select(t.info(), pf);
  const auto before = [&](const batch_view& b) {
    select(
        predictor, b.ref.layer, [&](expert_key k, float s) { feed.each([&](auto& c) { c.hint(k, s); }); },
        [&](expert_key k, float s) { feed.each([&](auto& c) { static_cast<void>(c.prefetch(k, s)); }); });
  };
  const auto after = [&](const batch_view& b) { predictor.observe(b); };
  const auto new_request = [&]() { predictor.begin_request(); };
  const auto step_end = [&]() { predictor.end_step(); };
  const replay_walk_result w = detail::replay_walk(t, rc, future, feed, before, after, new_request, step_end);
  feed.each([](auto& c) { c.clear(); });  // prefetches never used by the end are wasted
  return w;
}

/// Scores `predictor` on `t`: before each kept batch of layer l it predicts layer l; the
/// predicted set (the `budget` best scores above `min_score`) is compared with the experts
/// of the next `horizon` kept batches of layer l in the request; then it observes the
/// batch.
///
/// Throws: `invalid_argument` when `horizon` is 0 or no phase is kept.
template <PrefetchPredictor Predictor>
[[nodiscard]] prediction_quality evaluate_predictor(const routing_trace& t, Predictor& predictor,
                                                    const prediction_eval_config& ec = {}) {
  constexpr std::string_view fn = "evaluate_predictor";
  if (ec.horizon == 0) detail::throw_invalid(fn, "horizon must be >= 1", ec.horizon);
  if (!ec.prefill && !ec.decode) detail::throw_invalid(fn, "evaluate prefill, decode or both");
  const std::size_t E = t.info().num_experts;
  const std::size_t budget = ec.budget == 0 ? t.info().top_k : ec.budget;
  const auto batches = t.batches();
  // Where each batch sits in its layer's list of batches.
  std::vector<std::size_t> slot_in_layer(batches.size(), 0);
  for (std::uint32_t l = 0; l < t.info().num_layers; ++l) {
    const auto list = t.layer_batches(static_cast<layer_id>(l));
    for (std::size_t p = 0; p < list.size(); ++p) slot_in_layer[list[p]] = p;
  }
  std::vector<float> scores(E, 0.0f);
  std::vector<std::uint8_t> truth(E, 0);
  std::vector<expert_id> order(E);
  prediction_quality q;
  for (const request_ref& req : t.requests()) {
    predictor.begin_request();
    for (const step_ref& s : t.steps_of(req)) {
      if (!detail::kept(s.kind, ec.prefill, ec.decode)) continue;
      for (std::size_t bi = s.first_batch; bi < s.first_batch + s.num_batches; ++bi) {
        const batch_ref& ref = batches[bi];
        const layer_id l = ref.layer;
        // The truth: the next `horizon` kept batches of this layer in this request.
        std::fill(truth.begin(), truth.end(), std::uint8_t{0});
        const auto list = t.layer_batches(l);
        std::size_t found = 0;
        for (std::size_t p = slot_in_layer[bi]; p < list.size() && found < ec.horizon; ++p) {
          const batch_ref& nb = batches[list[p]];
          if (nb.request != ref.request) break;
          if (!detail::kept(nb.kind, ec.prefill, ec.decode)) continue;
          ++found;
          for (expert_id e : t.view(nb).experts) truth[e] = 1;
        }
        for (std::uint8_t x : truth) q.actual += x;
        // The prediction.
        ++q.predictions;
        if (predictor.predict(l, scores)) {
          std::size_t n = 0;
          for (std::size_t e = 0; e < E; ++e) {
            if (scores[e] > ec.min_score) order[n++] = static_cast<expert_id>(e);
          }
          const std::size_t take = std::min(budget, n);
          std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take),
                            order.begin() + static_cast<std::ptrdiff_t>(n), [&](expert_id a, expert_id b) {
                              return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
                            });
          q.predicted += take;
          for (std::size_t i = 0; i < take; ++i) q.correct += truth[order[i]];
        } else {
          ++q.empty_predictions;
        }
        predictor.observe(t.view(ref));
      }
      predictor.end_step();
    }
  }
  return q;
}

/// The hits of a demand LRU cache of `shape` replaying `t`, at every capacity in experts
/// (see cache/stack_distance.hpp), in one pass holding nothing per access.
///
/// Throws: `invalid_argument` when `shape` is smaller than the trace or no phase is kept.
template <replay_source T>
[[nodiscard]] hit_curve lru_hit_curve(const T& t, const cache_shape& shape, const cache_replay_config& rc = {}) {
  detail::check_replay(t, cache_config{.num_layers = shape.num_layers, .num_experts = shape.num_experts}, rc,
                       "lru_hit_curve");
  lru_curve_builder curve(shape);
  detail::for_each_access(t, rc, [&](expert_key k) { curve.add(k); });
  return curve.curve();
}

}  // namespace moepolicy
