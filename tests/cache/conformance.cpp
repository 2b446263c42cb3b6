// The conformance suite of the eviction policies, written once and run over every shipped
// policy (CacheLib's MMTypeTest): capacity is never exceeded, victims are resident and of
// the asked pool, victim() is stable without events, the container evicts what the policy
// names, the statistics add up, and Belady's optimum is at least every policy's hits on
// the same demand trace and capacity.
#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cache_test_support.hpp"
#include "count_allocations.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/fifo.hpp"
#include "moepolicy/cache/gated_prefetch.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cache/size_aware_reuse.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/sim/cache_replay.hpp"

using namespace moepolicy;

namespace {

/// The first invariant `cache` breaks, or nothing. Plain code rather than doctest
/// assertions: it runs after every event of every replay.
template <class P>
std::optional<std::string> broken_invariant(const expert_cache<P>& cache, bool scan) {
  const cache_shape& s = cache.shape();
  for (std::size_t p = 0; p < s.partitions(); ++p) {
    if (cache.used(p) > cache.capacity()) return "capacity exceeded in pool " + std::to_string(p);
    const std::optional<expert_key> v = cache.policy().victim(p);
    // A pure query: asking again gives the same answer.
    if (cache.policy().victim(p) != v) return "victim() changed without an event";
    if (v && !cache.contains(*v)) return "victim not resident";
    if (v && s.partition_of(*v) != p) return "victim from another pool";
  }
  const cache_stats& st = cache.stats();
  if (st.accesses != st.hits + st.misses) return "accesses != hits + misses";
  if (st.misses != st.admissions + st.rejections + st.overflows) return "misses != admissions + rejections + overflows";
  if (cache.resident_count() != st.preloads + st.admissions + st.prefetches - st.evictions - st.dropped) {
    return "resident count != preloads + admissions + prefetches - evictions - dropped";
  }
  if (scan) {
    std::size_t resident = 0;
    std::vector<std::uint64_t> used(s.partitions(), 0);
    for (std::size_t f = 0; f < s.slots(); ++f) {
      if (!cache.contains(s.key(f))) continue;
      ++resident;
      used[s.partition_of(s.key(f))] += cache.weight(s.key(f));
    }
    if (resident != cache.resident_count()) return "resident_count() disagrees with contains()";
    for (std::size_t p = 0; p < s.partitions(); ++p) {
      if (used[p] != cache.used(p)) return "used() disagrees with the residents' weights";
    }
  }
  return std::nullopt;
}

struct drive_options {
  /// Hint each layer's true experts (and a few others) before the layer, with random
  /// confidence; prefetch a few random experts.
  bool hints = true;
  bool prefetch = true;
  std::uint32_t seed = 1;
  /// Preload this many random experts first.
  std::size_t preload = 0;
  /// Check the invariants after every event.
  bool check = true;
};

/// Drives a cache through a trace the way a serving loop does, checking the invariants
/// after every event. Returns the final statistics.
template <class P>
cache_stats drive(const routing_trace& t, const cache_config& cc, const typename P::config_type& pc,
                  const drive_options& o) {
  expert_cache<P> cache(cc, pc);
  std::optional<std::string> failure;
  const auto check_invariants = [&](const expert_cache<P>& c, bool scan) {
    if (o.check && !failure) failure = broken_invariant(c, scan);
  };
  const std::vector<expert_key> accesses = replay_accesses(t);
  const std::vector<std::uint64_t> next = next_use_positions(accesses, cc.num_layers, cc.num_experts);
  std::mt19937 rng(o.seed);
  std::uniform_int_distribution<int> expert(0, static_cast<int>(cc.num_experts) - 1);
  std::uniform_real_distribution<float> conf(0.0f, 1.0f);
  for (std::size_t i = 0; i < o.preload; ++i) {
    cache.preload({static_cast<layer_id>(static_cast<std::size_t>(expert(rng)) % cc.num_layers),
                   static_cast<expert_id>(expert(rng))});
    check_invariants(cache, true);
  }
  std::size_t pos = 0;
  std::uint64_t prefetch_calls = 0;
  std::vector<std::uint8_t> seen(cc.num_experts, 0);
  for (const step_ref& s : t.steps()) {
    for (const batch_ref& ref : t.batches_of(s)) {
      const batch_view b = t.view(ref);
      const layer_id l = ref.layer;
      if (o.hints) {
        for (expert_id e : b.experts) cache.hint({l, e}, conf(rng));
        cache.hint({l, static_cast<expert_id>(expert(rng))}, conf(rng));
      }
      if (o.prefetch) {
        for (int i = 0; i < 2; ++i) {
          const expert_key k{l, static_cast<expert_id>(expert(rng))};
          const bool was_resident = cache.contains(k);
          const prefetch_outcome po = cache.prefetch(k, conf(rng));
          ++prefetch_calls;
          if (po == prefetch_outcome::already_resident) {
            if (!was_resident && !failure) failure = "prefetch reported resident for a non-resident expert";
          } else if (was_resident && !failure) {
            failure = "prefetch of a resident expert moved it";
          }
          if ((po == prefetch_outcome::inserted) != (!was_resident && cache.contains(k)) && !failure) {
            failure = "prefetch outcome disagrees with residency";
          }
          if (po == prefetch_outcome::rejected && !policy_traits<P>::admits_prefetches && !failure) {
            failure = "a prefetch was refused by a policy without prefetch admission";
          }
          check_invariants(cache, false);
        }
      }
      cache.begin_layer(b);
      check_invariants(cache, false);
      for (expert_id e : b.experts) {
        if (seen[e] != 0) continue;
        seen[e] = 1;
        const expert_key k{l, e};
        const bool was_resident = cache.contains(k);
        const std::optional<expert_key> v = cache.victim_for(k);
        const access_outcome out = cache.get(k, {.next_use = next[pos++]});
        if (out.hit != was_resident && !failure) failure = "hit on a non-resident expert, or miss on a resident";
        // The container evicted the victim the policy named (one eviction suffices when
        // experts weigh 1).
        if (out.evicted == 1 && cc.unit == capacity_unit::experts && (!v || cache.contains(*v)) && !failure) {
          failure = "the evicted expert is not the victim the policy named";
        }
        if (out.inserted && !cache.contains(k) && !failure) failure = "inserted but not resident";
        check_invariants(cache, false);
      }
      for (expert_id e : b.experts) seen[e] = 0;
      cache.end_layer(l);
      check_invariants(cache, false);
    }
    cache.end_step();
    check_invariants(cache, true);
  }
  CHECK(pos == accesses.size());
  {
    const cache_stats& st = cache.stats();
    CHECK(prefetch_calls == st.prefetches + st.prefetch_resident + st.prefetch_dropped + st.prefetch_rejected);
  }
  cache.clear();
  check_invariants(cache, true);
  CHECK(cache.resident_count() == 0);
  CHECK_MESSAGE(!failure, failure.value_or(""));
  return cache.stats();
}

/// The configurations every policy is driven through.
std::vector<cache_config> configurations(const routing_trace& t) {
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  std::vector<cache_config> out;
  for (std::uint64_t c : {0u, 1u, 7u, 3u * E, L * E / 2, L * E}) {
    out.push_back({.num_layers = L, .num_experts = E, .capacity = c});
  }
  for (std::uint64_t c : {1u, 3u, E / 2}) {
    out.push_back({.num_layers = L, .num_experts = E, .capacity = c, .scope = capacity_scope::per_layer});
  }
  // Bytes with unequal sizes: 1 to 4 units.
  std::vector<bytes> sizes(static_cast<std::size_t>(L) * E);
  for (std::size_t f = 0; f < sizes.size(); ++f) sizes[f] = 1 + (f * 7919) % 4;
  out.push_back(
      {.num_layers = L, .num_experts = E, .capacity = 5u * E, .unit = capacity_unit::byte_count, .footprints = sizes});
  out.push_back({.num_layers = L,
                 .num_experts = E,
                 .capacity = 9,
                 .unit = capacity_unit::byte_count,
                 .scope = capacity_scope::per_layer,
                 .footprints = sizes});
  return out;
}

}  // namespace

TEST_CASE_TEMPLATE("eviction policy conformance: capacity, victims, stability, statistics", P, lru_policy, fifo_policy,
                   lfu_policy, score_aware_policy, sticky_lru_policy, ema_score_policy, belady_policy,
                   any_eviction_policy, hawkeye_policy, predicted_reuse_policy, gated_prefetch_policy,
                   size_aware_reuse_policy) {
  const routing_trace synthetic = test::synthetic_trace(7);
  const routing_trace granite = test::first_requests(test::granite_trace(), 3);
  for (const routing_trace* t : {&synthetic, &granite}) {
    for (const cache_config& cc : configurations(*t)) {
      CAPTURE(cc.capacity);
      CAPTURE(to_string(cc.scope));
      CAPTURE(static_cast<int>(cc.unit));
      static_cast<void>(drive<P>(*t, cc, {}, {.seed = 3, .preload = 5}));
    }
  }
}

TEST_CASE_TEMPLATE("Belady's optimum is at least every policy's hits on the same demand trace", P, lru_policy,
                   fifo_policy, lfu_policy, score_aware_policy, sticky_lru_policy, ema_score_policy, hawkeye_policy,
                   predicted_reuse_policy, gated_prefetch_policy, size_aware_reuse_policy) {
  const routing_trace synthetic = test::synthetic_trace(11, {.layers = 3, .experts = 12, .top_k = 3, .batch = 2});
  const routing_trace granite = test::granite_trace();
  for (const routing_trace* t : {&synthetic, &granite}) {
    for (const cache_config& cc : configurations(*t)) {
      if (cc.unit == capacity_unit::byte_count) continue;  // the optimum holds for experts of equal size
      CAPTURE(cc.capacity);
      CAPTURE(to_string(cc.scope));
      // Demand traffic only; hints do not insert, so sticky LRU's gate may admit.
      const drive_options demand{.hints = true, .prefetch = false, .seed = 5, .check = false};
      const cache_stats policy = drive<P>(*t, cc, {}, demand);
      const cache_stats belady = drive<belady_policy>(*t, cc, {}, demand);
      CHECK(belady.hits >= policy.hits);
    }
  }
}

TEST_CASE_TEMPLATE("the in-layer shield: experts selected for the layer in progress are never the victim", P,
                   score_aware_policy, ema_score_policy, hawkeye_policy, predicted_reuse_policy, gated_prefetch_policy,
                   size_aware_reuse_policy) {
  // One pool of 2 holding the first batch's two experts; expert 0 (not in that batch) asks
  // for room. Edge-MoE §5.3: while the layer runs, nothing can be evicted for it.
  const routing_trace t = test::synthetic_trace(
      3, {.layers = 1, .experts = 4, .top_k = 2, .requests = 1, .prompt_tokens = 1, .decode_steps = 1});
  expert_cache<P> cache(cache_config{.num_layers = 1, .num_experts = 4, .capacity = 2});
  const batch_view b = t.view(t.batches().front());
  const expert_key outsider{0, 0};
  REQUIRE(b.experts[0] != 0);
  REQUIRE(b.experts[1] != 0);
  cache.get({0, b.experts[0]});
  cache.get({0, b.experts[1]});
  cache.begin_layer(b);
  CHECK_FALSE(cache.victim_for(outsider).has_value());
  cache.end_layer(0);
  CHECK(cache.victim_for(outsider).has_value());
}

TEST_CASE("the variant behaves exactly as the policy it holds") {
  const routing_trace t = test::synthetic_trace(13, {.batch = 2});
  const cache_config cc{.num_layers = 4, .num_experts = 16, .capacity = 20};
  const drive_options o{.seed = 9, .preload = 3};
  const auto same = [](const cache_stats& a, const cache_stats& b) {
    CHECK(a.hits == b.hits);
    CHECK(a.admissions == b.admissions);
    CHECK(a.rejections == b.rejections);
    CHECK(a.evictions == b.evictions);
    CHECK(a.prefetch_hits == b.prefetch_hits);
    CHECK(a.prefetch_wasted == b.prefetch_wasted);
  };
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("score-aware"), o),
       drive<score_aware_policy>(t, cc, {}, o));
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("sticky-lru"), o),
       drive<sticky_lru_policy>(t, cc, {}, o));
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("ema-score"), o),
       drive<ema_score_policy>(t, cc, {}, o));
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("lru"), o), drive<lru_policy>(t, cc, {}, o));
  same(drive<any_eviction_policy>(t, cc, lfu_config{.decay = 0.8}, o), drive<lfu_policy>(t, cc, {.decay = 0.8}, o));
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("fifo"), o), drive<fifo_policy>(t, cc, {}, o));
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("gated-prefetch"), o),
       drive<gated_prefetch_policy>(t, cc, {}, o));
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("belady"), o), drive<belady_policy>(t, cc, {}, o));
  // Size-aware by name takes its sizes from a bytes-unit cache: the policy given the same
  // footprints explicitly.
  same(drive<any_eviction_policy>(t, cc, eviction_config_by_name("size-aware"), o),
       drive<size_aware_reuse_policy>(t, cc, {}, o));
  std::vector<bytes> sizes(cc.shape().slots(), 3);
  for (std::size_t f = 0; f < sizes.size(); f += 3) sizes[f] = 8;
  const cache_config by_bytes{
      .num_layers = 4, .num_experts = 16, .capacity = 60, .unit = capacity_unit::byte_count, .footprints = sizes};
  same(drive<any_eviction_policy>(t, by_bytes, eviction_config_by_name("size-aware"), o),
       drive<size_aware_reuse_policy>(t, by_bytes, {.footprints = sizes}, o));
}

TEST_CASE_TEMPLATE("per-decision calls allocate nothing after construction", P, lru_policy, fifo_policy, lfu_policy,
                   score_aware_policy, sticky_lru_policy, ema_score_policy, belady_policy, any_eviction_policy,
                   hawkeye_policy, predicted_reuse_policy, gated_prefetch_policy, size_aware_reuse_policy) {
  if (!test::allocation_counting) {
    MESSAGE("allocation counting is off under AddressSanitizer; the build without it checks this");
    return;
  }
  const routing_trace t = test::synthetic_trace(17, {.batch = 3});
  const std::vector<expert_key> accesses = replay_accesses(t);
  const std::vector<std::uint64_t> next = next_use_positions(accesses, 4, 16);
  for (capacity_scope scope : {capacity_scope::shared, capacity_scope::per_layer}) {
    expert_cache<P> cache(
        {.num_layers = 4, .num_experts = 16, .capacity = scope == capacity_scope::shared ? 20u : 5u, .scope = scope},
        {});
    std::size_t pos = 0;
    std::vector<std::uint8_t> seen(16, 0);
    test::allocation_counter counter;
    for (const step_ref& s : t.steps()) {
      for (const batch_ref& ref : t.batches_of(s)) {
        const batch_view b = t.view(ref);
        cache.hint({ref.layer, b.experts[0]}, 0.9f);
        cache.prefetch({ref.layer, static_cast<expert_id>((pos * 7) % 16)}, 0.95f);
        cache.begin_layer(b);
        for (expert_id e : b.experts) {
          if (seen[e] != 0) continue;
          seen[e] = 1;
          static_cast<void>(cache.get({ref.layer, e}, {.next_use = next[pos++]}));
        }
        for (expert_id e : b.experts) seen[e] = 0;
        cache.end_layer(ref.layer);
      }
      cache.end_step();
    }
    CHECK(counter.count() == 0);
  }
}
