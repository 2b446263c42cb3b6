// Replaying traces through expert caches: the access sequence, demand replays by type and
// by name, replays with a predictor's hints, predictor scoring, and golden hit counts of
// every policy on the bundled Granite trace (regenerate with MOEPOLICY_PRINT_GOLDEN=1).
#include "moepolicy/sim/cache_replay.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <string>
#include <vector>

#include "../../cache/cache_test_support.hpp"
#include "../../cache/count_allocations.hpp"
#include "large_decode_file.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "peak_rss.hpp"

using namespace moepolicy;

namespace {

bool print_golden() { return std::getenv("MOEPOLICY_PRINT_GOLDEN") != nullptr; }

cache_config granite_cache(std::uint64_t capacity, capacity_scope scope = capacity_scope::shared) {
  return {.num_layers = 24,
          .num_experts = 32,
          .capacity = capacity,
          .scope = scope,
          .expert_bytes = expert_bytes(models::granite_3_1_1b_a400m(), fp16)};
}

/// Two replays' cache statistics agree on every count, demand and prefetch.
void check_same_stats(const cache_stats& got, const cache_stats& want) {
  CHECK(got.accesses == want.accesses);
  CHECK(got.hits == want.hits);
  CHECK(got.admissions == want.admissions);
  CHECK(got.rejections == want.rejections);
  CHECK(got.evictions == want.evictions);
  CHECK(got.prefetches == want.prefetches);
  CHECK(got.prefetch_hits == want.prefetch_hits);
  CHECK(got.prefetch_wasted == want.prefetch_wasted);
  CHECK(got.prefetch_rejected == want.prefetch_rejected);
  CHECK(got.prefetch_resident == want.prefetch_resident);
  CHECK(got.prefetch_bytes == want.prefetch_bytes);
  CHECK(got.dropped == want.dropped);
}

}  // namespace

TEST_CASE("the access sequence: each batch's distinct experts in order of first selection") {
  routing_trace_builder b({"t", "test", 2, 4, 2, false});
  b.add_request("r");
  const float w[2] = {0.5f, 0.5f};
  const expert_id a[2] = {3, 1}, c[2] = {1, 2}, d[2] = {0, 3};
  b.add({0, phase::prefill, 0, 0, 0, a, w, {}});
  b.add({0, phase::prefill, 0, 1, 0, c, w, {}});
  b.add({0, phase::prefill, 0, 0, 1, d, w, {}});
  b.add({0, phase::decode, 1, 2, 0, c, w, {}});
  const routing_trace t = std::move(b).finish();
  CHECK(replay_accesses(t) == std::vector<expert_key>{{0, 3}, {0, 1}, {0, 2}, {1, 0}, {1, 3}, {0, 1}, {0, 2}});
  CHECK(replay_accesses(t, {.prefill = false}) == std::vector<expert_key>{{0, 1}, {0, 2}});
  const cache_replay_result r = replay_cache<lru_policy>(t, {.num_layers = 2, .num_experts = 4, .capacity = 8});
  CHECK(r.stats.accesses == 7);
  CHECK(r.stats.hits == 2);
  CHECK(r.layers[0].accesses == 5);
  CHECK(r.layers[0].hits == 2);
  CHECK(r.steps == 2);
  CHECK(r.batches == 3);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_cache<lru_policy>(t, {.num_layers = 1, .num_experts = 4})),
                       "moepolicy::replay_cache: cache num_layers must be >= the trace's 2, got 1", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_cache<lru_policy>(t, {.num_layers = 2, .num_experts = 4}, {},
                                                                  {.prefill = false, .decode = false})),
                       "moepolicy::replay_cache: replay prefill, decode or both", invalid_argument);
}

TEST_CASE("a replay by name equals the replay by type; Belady is fed the future") {
  const routing_trace t = test::synthetic_trace(21, {.batch = 2});
  const cache_config cc{.num_layers = 4, .num_experts = 16, .capacity = 12};
  CHECK(replay_cache(t, cc, eviction_config_by_name("lfu")).stats.hits == replay_cache<lfu_policy>(t, cc).stats.hits);
  const auto belady = replay_cache(t, cc, eviction_config_by_name("belady")).stats;
  CHECK(belady.hits == replay_cache<belady_policy>(t, cc).stats.hits);
  CHECK(belady.hits >= replay_cache<lru_policy>(t, cc).stats.hits);
  // Resetting between requests starts each request cold.
  const auto cold = replay_cache<lru_policy>(t, cc, {}, {.reset_between_requests = true}).stats;
  CHECK(cold.dropped > 0);
}

TEST_CASE("hints feed prediction-gated admission: nothing is loaded ahead, so Belady still bounds it") {
  const routing_trace t = test::granite_trace();
  const cache_config cc = granite_cache(8, capacity_scope::per_layer);
  const cache_replay_config decode{.prefill = false};
  const cache_replay_result none = replay_cache<sticky_lru_policy>(t, cc, {}, decode);
  CHECK(none.stats.hits == 0);  // the gate admits nothing without hints
  CHECK(none.stats.rejections == none.stats.misses);
  oracle_predictor oracle(t, {.prefill = false});
  const cache_replay_result told = replay_cache_with_hints<sticky_lru_policy>(t, cc, {}, oracle, decode);
  CHECK(told.stats.hits > 0);
  CHECK(told.stats.prefetches == 0);
  CHECK(told.stats.accesses == none.stats.accesses);
  CHECK(replay_cache<belady_policy>(t, cc, {}, decode).stats.hits >= told.stats.hits);
  short_horizon_predictor sh({.num_layers = 24, .num_experts = 32, .top_k = 8});
  const cache_replay_result freq = replay_cache_with_hints<sticky_lru_policy>(t, cc, {}, sh, decode);
  CHECK(freq.stats.hits > 0);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_cache_with_hints<lru_policy>(t, cc, {}, sh, {.prefill = false, .decode = false})),
      "moepolicy::replay_cache_with_hints: replay prefill, decode or both", invalid_argument);
}

TEST_CASE("several caches in one walk prefetching one predictor's forecast: each has the counts of its own replay") {
  const routing_trace t = test::granite_trace();
  const short_horizon_config hc{.num_layers = 24, .num_experts = 32, .top_k = 8};
  const transition_config tc{.num_layers = 24, .num_experts = 32, .top_k = 8};
  const std::vector<cache_config> points{granite_cache(2, capacity_scope::per_layer),
                                         granite_cache(8, capacity_scope::per_layer), granite_cache(64)};
  const auto same = check_same_stats;
  const auto check = [&](auto make, const prefetch_replay_config& pf, const cache_replay_config& rc) {
    // LRU, the gated policy (it gates prefetches on the hints' confidence) and Belady (it
    // reads the future), at two per-layer capacities and one shared.
    std::deque<expert_cache<lru_policy>> lru;
    std::deque<expert_cache<gated_prefetch_policy>> gated;
    std::vector<expert_cache<belady_policy>> belady;
    belady.reserve(points.size());
    for (const cache_config& cc : points) {
      lru.emplace_back(cc);
      gated.emplace_back(cc);
      belady.emplace_back(cc);
    }
    auto shared = make();
    const replay_walk_result w = replay_caches_with_prefetch(t, shared, pf, rc, lru, gated, belady);
    CHECK(w.accesses == replay_accesses(t, rc).size());
    for (std::size_t i = 0; i < points.size(); ++i) {
      CAPTURE(i);
      auto p1 = make(), p2 = make(), p3 = make();
      same(lru[i].stats(), replay_cache_with_prefetch<lru_policy>(t, points[i], {}, p1, pf, rc).stats);
      same(gated[i].stats(), replay_cache_with_prefetch<gated_prefetch_policy>(t, points[i], {}, p2, pf, rc).stats);
      same(belady[i].stats(), replay_cache_with_prefetch<belady_policy>(t, points[i], {}, p3, pf, rc).stats);
      // Every cache was emptied at the end.
      CHECK(lru[i].resident_count() == 0);
    }
    CHECK(lru.front().stats().prefetches > 0);
  };
  for (const cache_replay_config rc : {cache_replay_config{}, cache_replay_config{.prefill = false}}) {
    for (const prefetch_replay_config pf : {prefetch_replay_config{}, prefetch_replay_config{.depth = 3}}) {
      check([&] { return short_horizon_predictor(hc); }, pf, rc);
      check([&] { return transition_predictor(tc); }, pf, rc);
    }
  }
  short_horizon_predictor p(hc);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches_with_prefetch(t, p, {}, {.prefill = false, .decode = false})),
                       "moepolicy::replay_caches_with_prefetch: replay prefill, decode or both", invalid_argument);
}

TEST_CASE("prefetch replay: the oracle's prefetches turn decode misses into hits, each charged in bytes") {
  const routing_trace t = test::granite_trace();
  const cache_config cc = granite_cache(8, capacity_scope::per_layer);
  const cache_replay_config decode{.prefill = false};
  const bytes size = cc.expert_bytes;
  // The oracle scores exactly the batch's experts (1) and nothing else: prefetching its top
  // 8 brings every expert before its access, so every decode access hits and every
  // prefetch is used.
  oracle_predictor oracle(t, {.prefill = false});
  const cache_replay_result r = replay_cache_with_prefetch<lru_policy>(t, cc, {}, oracle, {.depth = 8}, decode);
  CHECK(r.stats.hits == r.stats.accesses);
  CHECK(r.stats.prefetch_wasted == 0);
  CHECK(r.stats.prefetch_bytes == r.stats.prefetches * size);
  CHECK(r.stats.demand_bytes == 0);
  CHECK(r.stats.prefetches + r.stats.prefetch_resident >= r.stats.accesses);
  // Depth 1: one prefetch per batch at most.
  oracle_predictor one(t, {.prefill = false});
  const cache_replay_result d1 = replay_cache_with_prefetch<lru_policy>(t, cc, {}, one, {.depth = 1}, decode);
  CHECK(d1.stats.prefetches + d1.stats.prefetch_resident <= d1.batches);
  // A real predictor: every prefetch ends used or wasted (the replay ends with an empty
  // cache), and what it adds over the demand replay is paid in prefetched bytes.
  short_horizon_predictor sh({.num_layers = 24, .num_experts = 32, .top_k = 8});
  const cache_replay_result freq = replay_cache_with_prefetch<lru_policy>(t, cc, {}, sh, {}, decode);
  CHECK(freq.stats.prefetches > 0);
  CHECK(freq.stats.prefetch_hits + freq.stats.prefetch_wasted == freq.stats.prefetches);
  CHECK(freq.stats.prefetch_wasted > 0);
  CHECK(freq.stats.hits > replay_cache<lru_policy>(t, cc, {}, decode).stats.hits);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_cache_with_prefetch<lru_policy>(t, cc, {}, sh, {}, {.prefill = false, .decode = false})),
      "moepolicy::replay_cache_with_prefetch: replay prefill, decode or both", invalid_argument);
}

TEST_CASE("predictor scoring: the oracle is exact on decode; horizons widen the truth") {
  const routing_trace t = test::granite_trace();
  oracle_predictor oracle(t, {.prefill = false});
  const prediction_quality q = evaluate_predictor(t, oracle, {.prefill = false});
  CHECK(q.precision() == 1.0);
  CHECK(q.recall() == 1.0);
  CHECK(q.predictions == 12 * 16 * 24);
  CHECK(q.actual == 12 * 16 * 24 * 8);
  short_horizon_predictor sh({.num_layers = 24, .num_experts = 32, .top_k = 8, .history = 8, .horizon = 2});
  const prediction_quality one = evaluate_predictor(t, sh, {.horizon = 1, .prefill = false});
  const prediction_quality two = evaluate_predictor(t, sh, {.horizon = 2, .prefill = false});
  CHECK(two.precision() >= one.precision());
  CHECK(two.actual > one.actual);
  CHECK_THROWS_WITH_AS(static_cast<void>(evaluate_predictor(t, sh, {.horizon = 0})),
                       "moepolicy::evaluate_predictor: horizon must be >= 1, got 0", invalid_argument);
}

TEST_CASE("golden: demand hit counts of every policy on the bundled Granite trace") {
  const routing_trace t = test::granite_trace();
  struct point {
    std::uint64_t capacity;
    capacity_scope scope;
  };
  const std::array<point, 6> points{{{64, capacity_scope::shared},
                                     {128, capacity_scope::shared},
                                     {256, capacity_scope::shared},
                                     {384, capacity_scope::shared},
                                     {8, capacity_scope::per_layer},
                                     {16, capacity_scope::per_layer}}};
  // hits[point][policy], policies in the name table's order:
  // score-aware, sticky-lru, ema-score, lru, lfu, fifo, hawkeye, pred-reuse, gated-prefetch,
  // size-aware (counted in experts: pred-reuse's rule), belady. 44,803 accesses (decode and
  // prefill).
  // LRU and FIFO thrash below one step's working set (24 layers × ~8 experts); sticky LRU
  // caches nothing without a predictor's hints (its admission is gated), and the gated policy
  // caches a miss only into free room.
  constexpr std::size_t P = 11, belady = P - 1, lru = 3;
  REQUIRE(eviction_policies.size() == P);
  constexpr std::uint64_t golden[6][P] = {
      {6861, 0, 6903, 0, 7670, 0, 5358, 6346, 4732, 6346, 11972},
      {12919, 0, 13690, 0, 14314, 0, 12489, 12348, 8423, 12348, 20837},
      {23006, 0, 23854, 17126, 24146, 15530, 21422, 22962, 16402, 22962, 31375},
      {30958, 0, 31739, 25957, 31894, 24895, 29314, 31339, 23956, 31339, 37357},
      {19121, 0, 19121, 13409, 18451, 12501, 19121, 19121, 12621, 19121, 26251},
      {32352, 0, 32340, 27105, 31154, 25937, 32338, 32631, 26047, 32631, 36849},
  };

  const hit_curve shared_lru = lru_hit_curve(t, {24, 32, capacity_scope::shared});
  const hit_curve layer_lru = lru_hit_curve(t, {24, 32, capacity_scope::per_layer});
  for (std::size_t i = 0; i < points.size(); ++i) {
    const cache_config cc = granite_cache(points[i].capacity, points[i].scope);
    std::uint64_t hits[P] = {};
    for (std::size_t p = 0; p < eviction_policies.size(); ++p) {
      const cache_replay_result r = replay_cache(t, cc, eviction_policies[p].defaults);
      hits[p] = r.stats.hits;
      if (print_golden()) {
        std::printf("granite %s capacity %3llu %-11s hits %6llu / %llu  hit ratio %.4f\n",
                    std::string(to_string(points[i].scope)).c_str(),
                    static_cast<unsigned long long>(points[i].capacity), std::string(eviction_policies[p].name).c_str(),
                    static_cast<unsigned long long>(r.stats.hits), static_cast<unsigned long long>(r.stats.accesses),
                    r.stats.hit_ratio());
      }
    }
    if (print_golden()) {
      std::printf("      {");
      for (std::size_t p = 0; p < P; ++p)
        std::printf("%s%llu", p == 0 ? "" : ", ", static_cast<unsigned long long>(hits[p]));
      std::printf("},\n");
    } else {
      for (std::size_t p = 0; p < P; ++p) CHECK(hits[p] == golden[i][p]);
    }
    for (std::size_t p = 0; p < belady; ++p) CHECK(hits[belady] >= hits[p]);  // Belady bounds every policy
    const hit_curve& curve = points[i].scope == capacity_scope::shared ? shared_lru : layer_lru;
    CHECK(curve.hits_at(points[i].capacity) == hits[lru]);  // Mattson agrees with the LRU replay
  }
}

TEST_CASE("a canonical file replays from its map exactly as the trace, with next uses computed once") {
  const auto path =
      std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = test::granite_trace();
  const canonical_file f(path);
  CHECK(replay_accesses(f) == replay_accesses(t));
  CHECK(replay_accesses(f, {.prefill = false}) == replay_accesses(t, {.prefill = false}));
  const std::vector<std::uint64_t> next = replay_next_uses(f);
  CHECK(next == next_use_positions(replay_accesses(t), 24, 32));
  for (const auto& scope : {capacity_scope::shared, capacity_scope::per_layer}) {
    const cache_config cc = granite_cache(scope == capacity_scope::shared ? 128 : 8, scope);
    for (const auto& e : eviction_policies) {
      CAPTURE(e.name);
      const cache_replay_result a = replay_cache(t, cc, e.defaults);
      const cache_replay_result b = replay_cache(f, cc, e.defaults, {}, next);
      CHECK(b.stats.hits == a.stats.hits);
      CHECK(b.stats.accesses == a.stats.accesses);
      CHECK(b.steps == a.steps);
      CHECK(b.batches == a.batches);
      for (std::size_t l = 0; l < a.layers.size(); ++l) CHECK(b.layers[l].hits == a.layers[l].hits);
      const cache_replay_config cold{.prefill = false, .reset_between_requests = true};
      CHECK(replay_cache(f, cc, e.defaults, cold).stats.hits == replay_cache(t, cc, e.defaults, cold).stats.hits);
    }
    short_horizon_predictor p1({.num_layers = 24, .num_experts = 32, .top_k = 8});
    short_horizon_predictor p2({.num_layers = 24, .num_experts = 32, .top_k = 8});
    CHECK(replay_cache_with_hints<sticky_lru_policy>(f, cc, {}, p1).stats.hits ==
          replay_cache_with_hints<sticky_lru_policy>(t, cc, {}, p2).stats.hits);
    const cache_shape shape{24, 32, scope};
    CHECK(lru_hit_curve(f, shape).hits == lru_hit_curve(t, shape).hits);
  }
  // Next uses of another sequence are refused.
  const cache_config cc = granite_cache(64);
  const std::vector<std::uint64_t> short_next(next.begin(), next.end() - 1);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_cache<belady_policy>(f, cc, {}, {}, short_next)),
                       ("moepolicy::replay_cache: next_use has fewer entries than the replay's accesses, got " +
                        std::to_string(short_next.size()))
                           .c_str(),
                       invalid_argument);
}

TEST_CASE("a next-use index gives a canonical file's next uses a chunk at a time, and Belady the same hits") {
  const auto path =
      std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = test::granite_trace();
  const canonical_file f(path);
  for (const cache_replay_config rc : {cache_replay_config{}, cache_replay_config{.prefill = false}}) {
    const std::vector<std::uint64_t> want = replay_next_uses(t, rc);
    for (const std::uint64_t chunk : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{1000}, std::uint64_t{0}}) {
      CAPTURE(chunk);
      std::vector<expert_key> seen_in_pass;
      const next_use_index ix(f, rc, chunk, [&](expert_key k) { seen_in_pass.push_back(k); });
      CHECK(seen_in_pass == replay_accesses(t, rc));
      CHECK(ix.accesses() == want.size());
      // Chunks start at batches: each but the last holds at least `chunk` accesses.
      if (chunk == 0) CHECK(ix.chunks() == 1);
      if (chunk != 0) CHECK(ix.chunks() <= (want.size() + chunk - 1) / chunk);
      if (chunk != 0) CHECK(ix.chunks() > 1);
      next_use_index::cursor c(ix);
      std::vector<std::uint64_t> got;
      for (std::uint64_t p = 0; p < ix.accesses(); ++p) got.push_back(c.next(p));
      CHECK(got == want);
      c.finish(ix.accesses());
      CHECK_THROWS_WITH_AS(static_cast<void>(c.next(ix.accesses())),
                           ("moepolicy::replay_cache: the next-use index has fewer entries than the replay's "
                            "accesses, got " +
                            std::to_string(ix.accesses()))
                               .c_str(),
                           invalid_argument);
    }
  }
  // Every policy, both scopes: the same hits as the trace in memory.
  const next_use_index ix(f, {}, 1000);
  const next_use_index decode_ix(f, {.prefill = false}, 1000);
  for (const auto& scope : {capacity_scope::shared, capacity_scope::per_layer}) {
    const cache_config cc = granite_cache(scope == capacity_scope::shared ? 96 : 6, scope);
    for (const auto& e : eviction_policies) {
      CAPTURE(e.name);
      const cache_replay_result a = replay_cache(t, cc, e.defaults);
      const cache_replay_result b = replay_cache(f, cc, e.defaults, {}, ix);
      CHECK(b.stats.hits == a.stats.hits);
      CHECK(b.stats.accesses == a.stats.accesses);
      for (std::size_t l = 0; l < a.layers.size(); ++l) CHECK(b.layers[l].hits == a.layers[l].hits);
      CHECK(replay_cache(f, cc, e.defaults, {.prefill = false}, decode_ix).stats.hits ==
            replay_cache(t, cc, e.defaults, {.prefill = false}).stats.hits);
    }
    CHECK(replay_cache<belady_policy>(f, cc, {}, {}, ix).stats.hits == replay_cache<belady_policy>(t, cc).stats.hits);
  }
  // The cursor asks in order; an index of other phases or of another file is refused.
  next_use_index::cursor c(ix);
  CHECK_THROWS_WITH_AS(static_cast<void>(c.next(3)),
                       "moepolicy::next_use_index::cursor: positions must be asked in order, expected 0, got 3",
                       invalid_argument);
  const cache_config cc = granite_cache(64);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_cache<belady_policy>(f, cc, {}, {.prefill = false}, ix)),
                       "moepolicy::replay_cache: the next-use index was built for other phases than the replay keeps",
                       invalid_argument);
  const canonical_file other(path);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_cache<belady_policy>(other, cc, {}, {}, ix)),
      ("moepolicy::replay_cache: the next-use index was built on another file than " + path.string()).c_str(),
      invalid_argument);
  CHECK_THROWS_WITH_AS(next_use_index(f, {.prefill = false, .decode = false}),
                       "moepolicy::next_use_index: index prefill, decode or both", invalid_argument);
}

TEST_CASE("a next-use index of a trace in memory gives its next uses a chunk at a time, and Belady the same hits") {
  const routing_trace t = test::granite_trace();
  const decode_streams d = make_decode_streams(t, {.streams = 4});
  for (const routing_trace* src : {&t, &d.batched()}) {
    for (const cache_replay_config rc : {cache_replay_config{}, cache_replay_config{.prefill = false}}) {
      const std::vector<std::uint64_t> want = replay_next_uses(*src, rc);
      REQUIRE(want.size() > 1000);
      for (const std::uint64_t chunk : {std::uint64_t{1}, std::uint64_t{7}, std::uint64_t{1000}, std::uint64_t{0}}) {
        CAPTURE(chunk);
        std::vector<expert_key> seen_in_pass;
        const next_use_index ix(*src, rc, chunk, [&](expert_key k) { seen_in_pass.push_back(k); });
        CHECK(seen_in_pass == replay_accesses(*src, rc));
        CHECK(ix.trace() == src);
        CHECK(ix.file() == nullptr);
        CHECK(ix.accesses() == want.size());
        if (chunk == 0) CHECK(ix.chunks() == 1);
        if (chunk != 0) CHECK(ix.chunks() > 1);
        next_use_index::cursor c(ix);
        std::vector<std::uint64_t> got;
        for (std::uint64_t p = 0; p < ix.accesses(); ++p) got.push_back(c.next(p));
        CHECK(got == want);
        c.finish(ix.accesses());
      }
      for (const capacity_scope scope : {capacity_scope::shared, capacity_scope::per_layer}) {
        const cache_config cc = granite_cache(scope == capacity_scope::shared ? 96 : 6, scope);
        const next_use_index ix(*src, rc, 997);
        CHECK(replay_cache<belady_policy>(*src, cc, {}, rc, ix).stats.hits ==
              replay_cache<belady_policy>(*src, cc, {}, rc).stats.hits);
      }
    }
  }
  // An index of another trace, of a file, or of other phases is refused.
  const cache_config cc = granite_cache(64);
  const next_use_index ix(t, {}, 1000);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_cache<belady_policy>(d.batched(), cc, {}, {}, ix)),
                       "moepolicy::replay_cache: the next-use index was built on another trace than the one replayed",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_cache<belady_policy>(t, cc, {}, {.prefill = false}, ix)),
                       "moepolicy::replay_cache: the next-use index was built for other phases than the replay keeps",
                       invalid_argument);
  // The balanced chunk: about the square root of accesses times keys, at least 4,096.
  CHECK(next_use_index::balanced_chunk_accesses(2'000'000, 256) == 22'628);
  CHECK(next_use_index::balanced_chunk_accesses(10, 10) == 4096);
}

namespace {

/// The caches of one multi-cache replay: LRU by type, every policy of the name table
/// through the variant, and Belady by type, each at every (capacity, scope) of `points`.
struct cache_set {
  std::vector<cache_config> configs;
  std::deque<expert_cache<lru_policy>> lru;
  std::deque<expert_cache<any_eviction_policy>> any;
  std::deque<expert_cache<belady_policy>> belady;

  explicit cache_set(const std::vector<cache_config>& points) : configs(points) {
    for (const cache_config& cc : configs) {
      lru.emplace_back(cc);
      for (const auto& e : eviction_policies) any.emplace_back(cc, e.defaults);
      belady.emplace_back(cc);
    }
  }
};

/// The statistics of one `replay_cache` per cache of a `cache_set` of `points` on `t`, in
/// its order.
std::vector<cache_stats> single_replays(const routing_trace& t, const std::vector<cache_config>& points,
                                        const cache_replay_config& rc) {
  std::vector<cache_stats> out;
  for (const cache_config& cc : points) {
    out.push_back(replay_cache<lru_policy>(t, cc, {}, rc).stats);
    for (const auto& e : eviction_policies) out.push_back(replay_cache(t, cc, e.defaults, rc).stats);
    out.push_back(replay_cache<belady_policy>(t, cc, {}, rc).stats);
  }
  return out;
}

/// Checks that every cache of `set`, replayed together, has the statistics `want` of its
/// own replay.
void check_against_single(const cache_set& set, const std::vector<cache_stats>& want) {
  REQUIRE(want.size() == set.configs.size() * (eviction_policies.size() + 2));
  const auto same = check_same_stats;
  std::size_t w = 0, a = 0;
  for (std::size_t i = 0; i < set.configs.size(); ++i) {
    CAPTURE(set.configs[i].capacity);
    CAPTURE(to_string(set.configs[i].scope));
    same(set.lru[i].stats(), want[w++]);
    for (const auto& e : eviction_policies) {
      CAPTURE(e.name);
      same(set.any[a++].stats(), want[w++]);
    }
    same(set.belady[i].stats(), want[w++]);
  }
}

}  // namespace

TEST_CASE("several caches in one walk: each has the hits of its own replay, on the bundled trace") {
  const auto path =
      std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = test::granite_trace();
  const canonical_file f(path);
  // A shared and a per-layer cache of every policy, all in one walk.
  const std::vector<cache_config> points{granite_cache(64), granite_cache(8, capacity_scope::per_layer)};
  {  // Both phases: a trace in memory (the next uses computed by the replay), then the
     // canonical file, the Belady caches sharing one cursor of a chunked index.
    const std::vector<cache_stats> want = single_replays(t, points, {});
    cache_set in_memory(points);
    const replay_walk_result w = replay_caches(t, {}, {}, in_memory.lru, in_memory.any, in_memory.belady);
    CHECK(w.accesses == 44803);
    CHECK(w.batches == replay_cache<lru_policy>(t, granite_cache(1)).batches);
    CHECK(w.steps == replay_cache<lru_policy>(t, granite_cache(1)).steps);
    check_against_single(in_memory, want);
    cache_set mapped(points);
    const next_use_index ix(f, {}, 1000);
    CHECK(replay_caches(f, {}, ix, mapped.lru, mapped.any, mapped.belady).accesses == 44803);
    check_against_single(mapped, want);
    // The trace in memory with a chunked index of it: the cursor's chunks (1,000 accesses)
    // end inside and across the tape's batches.
    cache_set chunked(points);
    const next_use_index tix(t, {}, 1000);
    CHECK(replay_caches(t, {}, tix, chunked.lru, chunked.any, chunked.belady).accesses == 44803);
    check_against_single(chunked, want);
  }
  {  // Decode alone, each request starting cold (the per-layer cache).
    const cache_replay_config rc{.prefill = false, .reset_between_requests = true};
    const std::vector<cache_config> per_layer{points.back()};
    cache_set mapped(per_layer);
    const next_use_index ix(f, rc, 1000);
    static_cast<void>(replay_caches(f, rc, ix, mapped.lru, mapped.any, mapped.belady));
    check_against_single(mapped, single_replays(t, per_layer, rc));
    cache_set chunked(per_layer);
    const next_use_index tix(t, rc, 7);
    static_cast<void>(replay_caches(t, rc, tix, chunked.lru, chunked.any, chunked.belady));
    check_against_single(chunked, single_replays(t, per_layer, rc));
  }
  // The next uses given are checked against the replay's accesses; a cache smaller than
  // the trace, an index of other phases and a replay of no phase are refused.
  std::vector<expert_cache<belady_policy>> one;
  one.emplace_back(granite_cache(64));
  const std::vector<std::uint64_t> next = replay_next_uses(t);
  const std::vector<std::uint64_t> short_next(next.begin(), next.end() - 1);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches(t, {}, short_next, one)),
                       ("moepolicy::replay_caches: next_use has fewer entries than the replay's accesses, got " +
                        std::to_string(short_next.size()))
                           .c_str(),
                       invalid_argument);
  std::vector<expert_cache<lru_policy>> small;
  small.emplace_back(cache_config{.num_layers = 24, .num_experts = 16, .capacity = 4});
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches(t, {}, {}, one, small)),
                       "moepolicy::replay_caches: cache num_experts must be >= the trace's 32, got 16",
                       invalid_argument);
  const next_use_index decode_ix(f, {.prefill = false});
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches(f, {}, decode_ix, one)),
                       "moepolicy::replay_caches: the next-use index was built for other phases than the replay keeps",
                       invalid_argument);
  const next_use_index decode_tix(t, {.prefill = false}, 1000);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches(t, {}, decode_tix, one)),
                       "moepolicy::replay_caches: the next-use index was built for other phases than the replay keeps",
                       invalid_argument);
  const routing_trace other = test::granite_trace();
  const next_use_index other_ix(other, {}, 1000);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches(t, {}, other_ix, one)),
                       "moepolicy::replay_caches: the next-use index was built on another trace than the one replayed",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches(t, {.prefill = false, .decode = false}, {})),
                       "moepolicy::replay_caches: replay prefill, decode or both", invalid_argument);
}

TEST_CASE("several caches in one walk hearing one predictor's hints: each has the hits of its own replay") {
  const routing_trace t = test::granite_trace();
  const short_horizon_config hc{.num_layers = 24, .num_experts = 32, .top_k = 8};
  const std::vector<std::uint64_t> next = replay_next_uses(t);
  for (const cache_replay_config rc : {cache_replay_config{}, cache_replay_config{.prefill = false}}) {
    const std::vector<std::uint64_t> next_rc = replay_next_uses(t, rc);
    // The two gated policies of the name table, and Belady beside them (hints do not
    // change its decisions), at two per-layer capacities and one shared.
    const std::vector<cache_config> points{granite_cache(2, capacity_scope::per_layer),
                                           granite_cache(8, capacity_scope::per_layer), granite_cache(64)};
    std::deque<expert_cache<any_eviction_policy>> gated;
    std::deque<expert_cache<belady_policy>> belady;
    for (const cache_config& cc : points) {
      gated.emplace_back(cc, sticky_lru_config{});
      gated.emplace_back(cc, gated_prefetch_config{});
      belady.emplace_back(cc);
    }
    short_horizon_predictor shared(hc);
    const replay_walk_result w = replay_caches_with_hints(t, rc, next_rc, shared, gated, belady);
    CHECK(w.accesses == next_rc.size());
    std::size_t g = 0;
    for (std::size_t i = 0; i < points.size(); ++i) {
      CAPTURE(i);
      for (const any_eviction_config& pc :
           {any_eviction_config{sticky_lru_config{}}, any_eviction_config{gated_prefetch_config{}}}) {
        short_horizon_predictor own(hc);
        const cache_stats want = replay_cache_with_hints<any_eviction_policy>(t, points[i], pc, own, rc, next_rc).stats;
        const cache_stats got = gated[g++].stats();
        CHECK(got.accesses == want.accesses);
        CHECK(got.hits == want.hits);
        CHECK(got.admissions == want.admissions);
        CHECK(got.rejections == want.rejections);
        CHECK(got.evictions == want.evictions);
      }
      CHECK(belady[i].stats().hits == replay_cache<belady_policy>(t, points[i], {}, rc, next_rc).stats.hits);
    }
    // The hints reach the caches: without them the sticky LRU admits nothing.
    CHECK(gated.front().stats().hits > 0);
    CHECK(replay_cache(t, points.front(), sticky_lru_config{}, rc).stats.hits == 0);
  }
  short_horizon_predictor p(hc);
  std::deque<expert_cache<belady_policy>> one;
  one.emplace_back(granite_cache(64));
  const std::vector<std::uint64_t> short_next(next.begin(), next.end() - 1);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches_with_hints(t, {}, short_next, p, one)),
                       ("moepolicy::replay_caches_with_hints: next_use has fewer entries than the replay's accesses, "
                        "got " +
                        std::to_string(short_next.size()))
                           .c_str(),
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_caches_with_hints(t, {.prefill = false, .decode = false}, {}, p)),
                       "moepolicy::replay_caches_with_hints: replay prefill, decode or both", invalid_argument);
}

TEST_CASE("a taped walk gives each cache the statistics of its own replay, the tape cut anywhere") {
  // The tape `replay_caches` and `replay_caches_with_hints` use on a trace in memory, at
  // capacities that cut it between hints, inside batches' accesses and at step ends and
  // request starts: every cache of every policy, hearing one predictor's hints, must count
  // what its own hinted replay counts.
  const routing_trace t = test::granite_trace();
  const short_horizon_config hc{.num_layers = 24, .num_experts = 32, .top_k = 8};
  const std::vector<cache_config> points{granite_cache(4, capacity_scope::per_layer), granite_cache(48)};
  for (const cache_replay_config rc :
       {cache_replay_config{}, cache_replay_config{.prefill = false, .reset_between_requests = true}}) {
    const std::vector<std::uint64_t> next = replay_next_uses(t, rc);
    std::vector<cache_stats> want;
    for (const cache_config& cc : points) {
      short_horizon_predictor a(hc), b(hc);
      want.push_back(replay_cache_with_hints<lru_policy>(t, cc, {}, a, rc, next).stats);
      for (const auto& e : eviction_policies) {
        short_horizon_predictor own(hc);
        want.push_back(replay_cache_with_hints<any_eviction_policy>(t, cc, e.defaults, own, rc, next).stats);
      }
      want.push_back(replay_cache_with_hints<belady_policy>(t, cc, {}, b, rc, next).stats);
    }
    for (const std::size_t capacity : {std::size_t{1}, std::size_t{5}, std::size_t{64}}) {
      CAPTURE(capacity);
      CAPTURE(rc.prefill);
      cache_set set(points);
      detail::cache_set_tape<std::deque<expert_cache<lru_policy>>, std::deque<expert_cache<any_eviction_policy>>,
                             std::deque<expert_cache<belady_policy>>>
          tape(set.lru, set.any, set.belady, capacity);
      short_horizon_predictor p(hc);
      std::vector<float> scores(32, 0.0f);
      const detail::span_future future{next, "taped walk"};
      const replay_walk_result w = detail::replay_walk(
          t, rc, future, tape,
          [&](const batch_view& b) {
            detail::hint_predicted(p, b.ref.layer, scores, [&](expert_key k, float s) { tape.hint(k, s); });
          },
          [&](const batch_view& b) { p.observe(b); }, [&] { p.begin_request(); }, [&] { p.end_step(); });
      tape.flush();
      CHECK(w.accesses == next.size());
      check_against_single(set, want);
    }
  }
}

TEST_CASE("several caches in one walk: a hand-made trace, hits worked by hand") {
  // One layer of 4 experts, one expert a step: A B C A B D A B.
  routing_trace_builder b({"t", "test", 1, 4, 1, false});
  b.add_request("r");
  const float w[1] = {1.0f};
  const expert_id seq[8] = {0, 1, 2, 0, 1, 3, 0, 1};
  for (std::uint32_t s = 0; s < 8; ++s) b.add({0, phase::decode, s, s, 0, {&seq[s], 1}, w, {}});
  const routing_trace t = std::move(b).finish();
  const cache_config two{.num_layers = 1, .num_experts = 4, .capacity = 2};
  const cache_config three{.num_layers = 1, .num_experts = 4, .capacity = 3};
  std::vector<expert_cache<lru_policy>> lru{expert_cache<lru_policy>(two), expert_cache<lru_policy>(three)};
  std::vector<expert_cache<belady_policy>> belady{expert_cache<belady_policy>(two), expert_cache<belady_policy>(three)};
  std::vector<expert_cache<any_eviction_policy>> fifo{
      expert_cache<any_eviction_policy>(two, eviction_config_by_name("fifo"))};
  const replay_walk_result r = replay_caches(t, {}, {}, lru, belady, fifo);
  CHECK(r.accesses == 8);
  CHECK(r.steps == 8);
  CHECK(r.batches == 8);
  // LRU of 2 thrashes on the cycle of 3; of 3 it hits A and B twice until D evicts C, then
  // A and B again: A B C A+ B+ D(evicts C) A+ B+.
  CHECK(lru[0].stats().hits == 0);
  CHECK(lru[1].stats().hits == 4);
  // MIN of 2 bypasses C and D (never needed again): A+ B+ A+ B+.
  CHECK(belady[0].stats().hits == 4);
  CHECK(belady[1].stats().hits == 4);
  CHECK(fifo[0].stats().hits == 0);
  for (std::size_t i = 0; i < 2; ++i) {
    const cache_config& cc = i == 0 ? two : three;
    CHECK(lru[i].stats().hits == replay_cache<lru_policy>(t, cc).stats.hits);
    CHECK(belady[i].stats().hits == replay_cache<belady_policy>(t, cc).stats.hits);
  }
  // The caches replay from the state they are passed in: a warm cache hits where a fresh
  // one missed, so the comparisons with single replays can tell a cache that was not fed
  // exactly the single replay's events.
  std::vector<expert_cache<lru_policy>> warm{expert_cache<lru_policy>(two)};
  static_cast<void>(warm[0].get({0, 2}));
  static_cast<void>(warm[0].get({0, 0}));
  warm[0].reset_stats();
  static_cast<void>(replay_caches(t, {}, {}, warm));
  CHECK(warm[0].stats().hits == 1);
  CHECK(warm[0].stats().hits != replay_cache<lru_policy>(t, two).stats.hits);
}

TEST_CASE("a demand LRU cache hits exactly as the stack-distance curve, at every capacity") {
  // What lets `moepolicy replay` read its LRU column off `lru_hit_curve` instead of
  // replaying LRU caches: the LRU cache protects nothing of the current batch and keeps
  // one recency order per pool, so it is a stack algorithm in both scopes. Checked on the
  // bundled trace and on random traces (batches of several tokens repeat experts), both
  // phases and decode alone, one LRU cache per capacity from 0 to past the pool's slots.
  std::vector<routing_trace> traces;
  traces.push_back(test::granite_trace());
  for (std::uint32_t seed : {3u, 17u, 29u}) {
    for (std::uint32_t batch : {1u, 4u}) {
      traces.push_back(test::synthetic_trace(seed, {.layers = 3, .experts = 12, .top_k = 3, .batch = batch}));
    }
  }
  std::size_t compared = 0;
  for (std::size_t ti = 0; ti < traces.size(); ++ti) {
    const routing_trace& t = traces[ti];
    const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
    for (const capacity_scope scope : {capacity_scope::shared, capacity_scope::per_layer}) {
      const cache_shape shape{L, E, scope};
      const std::size_t slots = shape.partition_slots();
      std::vector<std::uint64_t> capacities;
      for (std::uint64_t c = 0; c <= slots + 1; ++c) {
        if (c <= 16 || c % 64 == 0 || c + 1 >= slots) capacities.push_back(c);
      }
      for (const cache_replay_config rc : {cache_replay_config{}, cache_replay_config{.prefill = false}}) {
        if (ti == 0 && !rc.prefill) continue;  // the bundled trace: both phases only (time)
        std::vector<expert_cache<lru_policy>> lru;
        for (std::uint64_t c : capacities) {
          lru.emplace_back(cache_config{.num_layers = L, .num_experts = E, .capacity = c, .scope = scope});
        }
        static_cast<void>(replay_caches(t, rc, {}, lru));
        const hit_curve curve = lru_hit_curve(t, shape, rc);
        for (std::size_t i = 0; i < capacities.size(); ++i) {
          CAPTURE(ti);
          CAPTURE(to_string(scope));
          CAPTURE(capacities[i]);
          CHECK(curve.hits_at(capacities[i]) == lru[i].stats().hits);
          CHECK(curve.accesses == lru[i].stats().accesses);
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 300);
}

TEST_CASE("several caches in one walk allocate nothing per batch or access") {
  if (!test::allocation_counting) {
    MESSAGE("allocation counting is off under AddressSanitizer");
    return;
  }
  const routing_trace t = test::granite_trace();
  const std::vector<std::uint64_t> next = replay_next_uses(t);
  std::vector<expert_cache<lru_policy>> lru;
  std::vector<expert_cache<belady_policy>> belady;
  std::vector<expert_cache<any_eviction_policy>> any;
  for (const std::uint64_t c : {std::uint64_t{64}, std::uint64_t{128}}) {
    lru.emplace_back(granite_cache(c));
    belady.emplace_back(granite_cache(c));
    any.emplace_back(granite_cache(c), eviction_config_by_name("hawkeye"));
  }
  replay_walk_result w;
  std::size_t made = 0;
  {
    test::allocation_counter count;
    w = replay_caches(t, {}, next, lru, belady, any);
    made = count.count();
  }
  CHECK(w.accesses == next.size());
  // The walk's one flag per expert and the four buffers of its tape, whatever the trace's
  // length (44,803 accesses).
  CHECK(made <= 5);
}

TEST_CASE("Belady's replay of a 10^7-access file holds a bounded window of it") {
  // A synthetic decode trace (4 layers, 8 experts, top-1; 21 bytes a row, one access a
  // row), generated into the working folder and removed afterwards. Next uses held whole
  // would take 80 MB (120 MB at the peak with the access sequence); the index holds a
  // chunk. Sanitizer builds replay 10^6 rows and skip the memory figure.
  const std::uint64_t rows = test::sanitized ? 1'000'000 : 10'000'000;
  const auto path = std::filesystem::current_path() / "cache_replay_1e7.mtrace";
  test::write_large_decode_file(path, rows);
  const bool measured = !test::sanitized && test::reset_peak_rss() && test::peak_rss_bytes() > 0;
  const long long before = measured ? test::peak_rss_bytes() : 0;
  const canonical_file f(path);
  const cache_config cc{.num_layers = 4, .num_experts = 8, .capacity = 2, .scope = capacity_scope::per_layer};
  cache_replay_result r;
  {
    const next_use_index ix(f);
    CHECK(ix.accesses() == rows);
    r = replay_cache<belady_policy>(f, cc, {}, {}, ix);
  }
  const long long after = measured ? test::peak_rss_bytes() : 0;
  // The same hits as with the next uses held whole (measured after the figure above).
  CHECK(r.stats.accesses == rows);
  CHECK(r.stats.hits == replay_cache<belady_policy>(f, cc, {}, {}, replay_next_uses(f)).stats.hits);
  if (measured) {
    const long long grew = after - before;
    MESSAGE("Belady's replay of a " << rows << "-access file: peak resident memory grew by " << grew << " bytes");
    CHECK(grew < 64ll << 20);  // the index holds under 1 KB, a cursor a chunk (32 MiB), each walk a 5 MB window
  } else {
    MESSAGE("peak resident memory not measured (sanitizer build or no /proc)");
  }
  std::filesystem::remove(path);
}
