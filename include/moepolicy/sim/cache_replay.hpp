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
//   replay_cache_with_hints    a demand replay whose policy hears a predictor's hints;
//   replay_cache_with_prefetch a replay that also prefetches a predictor's forecast
//                              (untimed: an upper bound on the prefetches' benefit, their
//                              bytes and waste counted in full);
//   evaluate_predictor         precision and recall of a predictor's top-scored experts
//                              against the experts of the next `horizon` batches per layer;
//   lru_hit_curve              the LRU hit count at every capacity in one pass.
//
// The demand replays, `replay_accesses` and `lru_hit_curve` take a `routing_trace` or a
// `canonical_file` (trace/canonical.hpp), which they walk straight from its memory map in
// bounded memory; both give identical results. Policies that read the future take the
// next uses from `next_use_positions`, computed per replay unless a caller that replays
// one trace many times (every capacity) computes them once and passes them in.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
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

/// The replay loop shared by the demand and hint replays. `before(b)` runs before the
/// batch's accesses, `after(b)` after its `end_layer`, `new_request()` when a request
/// starts, `step_end()` after each kept step.
template <EvictionPolicy P, replay_source T, class Before, class After, class NewRequest, class StepEnd>
cache_replay_result replay_loop(const T& t, expert_cache<P>& cache, const cache_replay_config& rc,
                                std::span<const std::uint64_t> next_use, Before&& before, After&& after,
                                NewRequest&& new_request, StepEnd&& step_end) {
  cache_replay_result out;
  out.layers.assign(t.info().num_layers, {});
  std::vector<std::uint8_t> seen(t.info().num_experts, 0);
  std::uint64_t position = 0;
  walk_batches(
      t,
      [&](std::uint32_t) {
        if (rc.reset_between_requests) cache.clear();
        new_request();
      },
      [&](const batch_view& b) {
        if (!kept(b.ref.kind, rc.prefill, rc.decode)) return;
        before(b);
        cache.begin_layer(b);
        distinct_experts(b, seen, [&](expert_key k) {
          access_info info;
          if (!next_use.empty()) {
            if (position >= next_use.size()) {
              throw_invalid("replay_cache", "next_use has fewer entries than the replay's accesses", next_use.size());
            }
            info.next_use = next_use[position];
          }
          ++position;
          const access_outcome o = cache.get(k, info);
          ++out.layers[k.layer].accesses;
          if (o.hit) ++out.layers[k.layer].hits;
        });
        cache.end_layer(b.ref.layer);
        after(b);
        ++out.batches;
      },
      [&](const step_ref& s) {
        if (!kept(s.kind, rc.prefill, rc.decode)) return;
        cache.end_step();
        step_end();
        ++out.steps;
      });
  if (!next_use.empty() && position != next_use.size()) {
    throw_invalid("replay_cache", "next_use has " + std::to_string(next_use.size()) + " entries, the replay made " +
                                      std::to_string(position) + " accesses");
  }
  out.stats = cache.stats();
  return out;
}

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

}  // namespace detail

/// The demand accesses a replay of `t` makes, in order: for each kept batch, its distinct
/// experts in order of first selection.
///
/// Complexity: O(rows · k).
template <replay_source T>
[[nodiscard]] std::vector<expert_key> replay_accesses(const T& t, const cache_replay_config& rc = {}) {
  std::vector<expert_key> out;
  std::vector<std::uint8_t> seen(t.info().num_experts, 0);
  const auto nothing = [](const auto&) {};
  detail::walk_batches(
      t, nothing,
      [&](const batch_view& b) {
        if (!detail::kept(b.ref.kind, rc.prefill, rc.decode)) return;
        detail::distinct_experts(b, seen, [&](expert_key k) { out.push_back(k); });
      },
      nothing);
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
  return detail::replay_loop(t, cache, rc, future, nothing, nothing, nothing, nothing);
}

/// Replays `t` through the policy `pc` names (see `eviction_config_by_name`). `next_use`:
/// as above.
template <replay_source T>
[[nodiscard]] cache_replay_result replay_cache(const T& t, const cache_config& cc, const any_eviction_config& pc,
                                               const cache_replay_config& rc = {},
                                               std::span<const std::uint64_t> next_use = {}) {
  return replay_cache<any_eviction_policy>(t, cc, pc, rc, next_use);
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
  const std::size_t E = t.info().num_experts;
  std::vector<float> scores(E, 0.0f);
  const auto before = [&](const batch_view& b) {
    const layer_id l = b.ref.layer;
    if (!predictor.predict(l, scores)) return;
    for (std::size_t e = 0; e < E; ++e) {
      if (scores[e] > 0.0f) cache.hint(expert_key{l, static_cast<expert_id>(e)}, scores[e]);
    }
  };
  const auto after = [&](const batch_view& b) { predictor.observe(b); };
  const auto new_request = [&]() { predictor.begin_request(); };
  const auto step_end = [&]() { predictor.end_step(); };
  return detail::replay_loop(t, cache, rc, future, before, after, new_request, step_end);
}

/// How `replay_cache_with_prefetch` prefetches.
struct prefetch_replay_config {
  /// The most experts prefetched per batch: the predictor's best scores above 0, best
  /// first (ties: lower expert); 0 stands for the trace's top_k. At most the layer's experts.
  std::uint32_t depth = 0;
};

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
  const std::size_t E = t.info().num_experts;
  const std::size_t depth = std::min<std::size_t>(pf.depth == 0 ? t.info().top_k : pf.depth, E);
  std::vector<float> scores(E, 0.0f);
  std::vector<std::uint32_t> order(E);
  const auto before = [&](const batch_view& b) {
    const layer_id l = b.ref.layer;
    if (!predictor.predict(l, scores)) return;
    for (std::size_t e = 0; e < E; ++e) {
      order[e] = static_cast<std::uint32_t>(e);
      if (scores[e] > 0.0f) cache.hint(expert_key{l, static_cast<expert_id>(e)}, scores[e]);
    }
    const auto better = [&](std::uint32_t x, std::uint32_t y) {
      return scores[x] > scores[y] || (scores[x] == scores[y] && x < y);
    };
    std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(depth), order.end(), better);
    for (std::size_t i = 0; i < depth && scores[order[i]] > 0.0f; ++i) {
      static_cast<void>(cache.prefetch(expert_key{l, static_cast<expert_id>(order[i])}, scores[order[i]]));
    }
  };
  const auto after = [&](const batch_view& b) { predictor.observe(b); };
  const auto new_request = [&]() { predictor.begin_request(); };
  const auto step_end = [&]() { predictor.end_step(); };
  cache_replay_result out = detail::replay_loop(t, cache, rc, next_use, before, after, new_request, step_end);
  cache.clear();  // prefetches never used by the end are wasted
  out.stats = cache.stats();
  return out;
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
/// (see cache/stack_distance.hpp).
///
/// Throws: `invalid_argument` when `shape` is smaller than the trace or no phase is kept.
template <replay_source T>
[[nodiscard]] hit_curve lru_hit_curve(const T& t, const cache_shape& shape, const cache_replay_config& rc = {}) {
  detail::check_replay(t, cache_config{.num_layers = shape.num_layers, .num_experts = shape.num_experts}, rc,
                       "lru_hit_curve");
  return lru_hit_curve(replay_accesses(t, rc), shape);
}

}  // namespace moepolicy
