// The GPU expert cache on the timed model: a hit is resident and landed; a prefetch that has
// not landed is a late prefetch whose remainder is fetched on demand; every byte on the link
// is accounted for; evicting or cancelling a prefetch on its way stops its job.
#include "moepolicy/sim/timed_cache.hpp"

#include <doctest/doctest.h>

#include <array>
#include <limits>
#include <random>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

constexpr bytes mib = bytes{1} << 20;

/// A GPU and a link of 64 MiB/s (no latency) moving experts of 64 MiB: one second each.
struct rig {
  timeline tl;
  resource_id gpu, link;
  timed_expert_cache<> cache;
  explicit rig(std::uint64_t capacity, const any_eviction_config& policy = lru_config{})
      : gpu(tl.add_resource("gpu", resource_kind::processor)),
        link(tl.add_resource("link", resource_kind::link)),
        cache(tl, link, link_cost{{64.0 * static_cast<double>(mib), 0.0}}, 2, 4, capacity, policy, 64 * mib) {}
};

/// The link's demand and prefetch bytes equal what the cache accounts for.
void check_conservation(const rig& r) {
  const timed_cache_stats& s = r.cache.stats();
  const resource_account& a = r.tl.accounts()[r.link];
  const bytes on_link = a.moved(cost_kind::demand_fetch) + a.moved(cost_kind::prefetch);
  const bytes accounted = r.cache.residency().stats(timed_expert_cache<>::gpu_tier).installed_bytes +
                          s.transient_bytes + s.wasted_bytes + s.late_placed_bytes;
  CHECK(on_link == accounted);
  CHECK(a.moved(cost_kind::demand_fetch) == s.demand_bytes);
  CHECK(a.moved(cost_kind::prefetch) == s.prefetch_bytes + s.late_placed_bytes + s.wasted_bytes);
  CHECK(r.cache.consistent());
}

}  // namespace

TEST_CASE("a prefetch that has not landed is not a hit: the remainder is fetched on demand") {
  rig r(4);
  const expert_key k{0, 1};
  REQUIRE(r.cache.prefetch(k, 0.9f, 0.0, 0));
  CHECK(r.cache.state(k, 0.0) == copy_state::absent);  // queued: no copy has started
  r.tl.settle(0.25);                                   // a quarter of the expert crosses in the link's idle time
  r.cache.collect();
  CHECK(r.cache.state(k, 0.25) == copy_state::in_flight);
  const timed_access a = r.cache.serve(k, 0.25);
  CHECK(a.kind == timed_access_kind::late_prefetch);
  CHECK(a.moved == 48 * mib);
  CHECK(a.ready == doctest::Approx(1.0));  // 0.25 + the remaining 0.75 s: a partial stall
  CHECK(a.cached);
  const timed_cache_stats& s = r.cache.stats();
  CHECK(s.hits == 0);
  CHECK(s.late_prefetches == 1);
  CHECK(s.late_placed_bytes == 16 * mib);
  CHECK(s.late_wait == doctest::Approx(0.75));
  CHECK(r.cache.state(k, 0.99) == copy_state::in_flight);
  CHECK(r.cache.state(k, 1.0) == copy_state::usable);
  // A prefetch that lands in time is a hit.
  const expert_key h{1, 2};
  REQUIRE(r.cache.prefetch(h, 0.9f, 1.0, 0));
  r.tl.settle(2.5);
  r.cache.collect();
  CHECK(s.prefetches_landed == 1);
  CHECK(r.cache.state(h, 2.5) == copy_state::usable);
  CHECK(r.cache.serve(h, 2.5).kind == timed_access_kind::hit);
  CHECK(s.hits == 1);
  CHECK(s.prefetches_used == 1);
  check_conservation(r);
}

TEST_CASE("a prefetch waits for demand transfers: background work never delays them") {
  rig r(4);
  r.cache.prefetch({0, 0}, 0.9f, 0.0, 0);
  const timed_access m = r.cache.serve({0, 3}, 0.0);  // a miss: the link is busy until 1 s
  CHECK(m.kind == timed_access_kind::miss);
  CHECK(m.ready == doctest::Approx(1.0));
  r.tl.settle(1.5);
  r.cache.collect();
  CHECK(r.cache.state({0, 0}, 1.5) == copy_state::in_flight);  // only half a second was idle
  CHECK(r.cache.serve({0, 0}, 1.5).ready == doctest::Approx(2.0));
  check_conservation(r);
}

TEST_CASE("admission: a miss the policy declines is used once and dropped") {
  rig r(4, sticky_lru_config{});
  const timed_access a = r.cache.serve({0, 1}, 0.0);
  CHECK(a.kind == timed_access_kind::miss);
  CHECK(!a.cached);
  CHECK(r.cache.state({0, 1}, 5.0) == copy_state::absent);
  r.cache.hint({0, 2}, 0.9f);
  const timed_access b = r.cache.serve({0, 2}, 1.0);
  CHECK(b.cached);
  CHECK(r.cache.stats().admitted == 1);
  CHECK(r.cache.stats().transient_bytes == 64 * mib);
  check_conservation(r);
}

TEST_CASE("evicting or cancelling a prefetch on its way stops its job and wastes its chunks") {
  rig r(1);
  r.cache.prefetch({0, 0}, 0.9f, 0.0, 0);
  r.cache.prefetch({0, 1}, 0.9f, 0.0, 1);
  CHECK(!r.cache.cache().contains({0, 0}));  // a slot only once its copy starts
  r.tl.settle(0.5);
  r.cache.collect();
  // (0, 0) started and holds the one slot; (0, 1) never got link time and holds none.
  CHECK(r.cache.cache().contains({0, 0}));
  CHECK(!r.cache.cache().contains({0, 1}));
  CHECK(r.cache.stats().prefetches_started == 1);
  // A miss evicts (0, 0), whose job had placed half of it.
  r.cache.serve({1, 0}, 0.5);
  CHECK(!r.cache.pending({0, 0}));
  CHECK(r.cache.state({0, 0}, 10.0) == copy_state::absent);
  CHECK(r.cache.stats().prefetches_cancelled == 1);
  CHECK(r.cache.stats().wasted_bytes == 32 * mib);
  CHECK(r.cache.cancel_pending(0, [](expert_id) { return false; }) == 1);  // (0, 1), nothing placed
  CHECK(!r.cache.cache().contains({0, 1}));
  r.tl.drain();
  r.cache.collect();
  check_conservation(r);
}

TEST_CASE("random traffic: every byte on the link is accounted for and the bookkeeping agrees") {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> layer(0, 1), expert(0, 3), what(0, 3);
  for (const any_eviction_config& policy : {any_eviction_config{lru_config{}}, any_eviction_config{sticky_lru_config{}},
                                            any_eviction_config{ema_score_config{}}}) {
    rig r(3, policy);
    double t = 0.0;
    for (int i = 0; i < 300; ++i) {
      const expert_key k{static_cast<layer_id>(layer(rng)), static_cast<expert_id>(expert(rng))};
      switch (what(rng)) {
        case 0:
          r.cache.prefetch(k, 0.5f + 0.5f * static_cast<float>(expert(rng)) / 3.0f, t, expert(rng));
          break;
        case 1:
          r.cache.hint(k, 0.9f);
          [[fallthrough]];
        case 2:
          t = std::max(t, r.cache.serve(k, t).ready * 0.5 + t * 0.5);
          break;
        default:
          r.cache.cancel_pending(k.layer, [&](expert_id e) { return e != k.expert; });
          r.cache.end_step();
      }
      t += 0.3;
      r.tl.settle(t);
      r.cache.collect();
      REQUIRE(r.cache.consistent());
    }
    r.cache.cancel_all_pending();
    r.tl.drain();
    r.cache.collect();
    const timed_cache_stats& s = r.cache.stats();
    CHECK(s.accesses == s.hits + s.late_prefetches + s.misses);
    check_conservation(r);
  }
}

namespace {

/// Random traffic through a cache under the run-time `any_eviction_policy` holding `cfg` and
/// one under `Policy` itself, on timelines of their own: every access, and the statistics
/// after each operation, agree.
template <class Policy>
void check_typed_same_as_any(const typename Policy::config_type& cfg, std::uint32_t seed) {
  const link_cost link{{64.0 * static_cast<double>(mib), 0.0}};
  timeline ta, tb;
  for (timeline* t : {&ta, &tb}) t->add_resource("gpu", resource_kind::processor);
  const resource_id la = ta.add_resource("link", resource_kind::link);
  const resource_id lb = tb.add_resource("link", resource_kind::link);
  timed_expert_cache<> a(ta, la, link, 2, 4, 3, any_eviction_config{cfg}, 64 * mib);
  timed_expert_cache<link_cost, Policy> b(tb, lb, link, 2, 4, 3, cfg, 64 * mib);
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> layer(0, 1), expert(0, 3), what(0, 3);
  double t = 0.0;
  const auto same = [&] {
    const timed_cache_stats &x = a.stats(), &y = b.stats();
    REQUIRE(x.hits == y.hits);
    REQUIRE(x.late_prefetches == y.late_prefetches);
    REQUIRE(x.misses == y.misses);
    REQUIRE(x.admitted == y.admitted);
    REQUIRE(x.prefetches == y.prefetches);
    REQUIRE(x.prefetches_started == y.prefetches_started);
    REQUIRE(x.prefetches_landed == y.prefetches_landed);
    REQUIRE(x.prefetches_cancelled == y.prefetches_cancelled);
    REQUIRE(x.prefetches_unused == y.prefetches_unused);
    REQUIRE(x.demand_bytes == y.demand_bytes);
    REQUIRE(x.wasted_bytes == y.wasted_bytes);
    REQUIRE(a.cache().stats().evictions == b.cache().stats().evictions);
    REQUIRE(b.consistent());
  };
  for (int i = 0; i < 400; ++i) {
    const expert_key k{static_cast<layer_id>(layer(rng)), static_cast<expert_id>(expert(rng))};
    switch (what(rng)) {
      case 0: {
        const float score = 0.5f + 0.5f * static_cast<float>(expert(rng)) / 3.0f;
        const int priority = expert(rng);
        REQUIRE(a.prefetch(k, score, t, priority) == b.prefetch(k, score, t, priority));
        break;
      }
      case 1:
        a.hint(k, 0.9f);
        b.hint(k, 0.9f);
        [[fallthrough]];
      case 2: {
        const timed_access x = a.serve(k, t), y = b.serve(k, t);
        REQUIRE(x.kind == y.kind);
        REQUIRE(x.ready == y.ready);
        REQUIRE(x.cached == y.cached);
        t = std::max(t, x.ready * 0.5 + t * 0.5);
        break;
      }
      default:
        REQUIRE(a.cancel_pending(k.layer, [&](expert_id e) { return e != k.expert; }) ==
                b.cancel_pending(k.layer, [&](expert_id e) { return e != k.expert; }));
        a.end_step();
        b.end_step();
    }
    t += 0.3;
    ta.settle(t);
    tb.settle(t);
    a.collect();
    b.collect();
    same();
  }
  a.close();
  b.close();
  same();
}

}  // namespace

TEST_CASE("a cache of one policy type decides as the run-time policy holding it") {
  for (std::uint32_t seed : {1u, 2u, 3u}) {
    check_typed_same_as_any<lru_policy>(lru_config{}, seed);
    check_typed_same_as_any<sticky_lru_policy>(sticky_lru_config{}, seed);
    check_typed_same_as_any<sticky_lru_policy>(sticky_lru_config{.stickiness = false}, seed);
    check_typed_same_as_any<sticky_lru_policy>(sticky_lru_config{.gated_admission = false, .sticky_steps = 2}, seed);
  }
}

TEST_CASE("bad arguments name the function and the value") {
  timeline tl;
  const resource_id gpu = tl.add_resource("gpu", resource_kind::processor);
  const resource_id link = tl.add_resource("link", resource_kind::link);
  CHECK_THROWS_WITH_AS(timed_expert_cache<>(tl, gpu, {}, 1, 2, 1, lru_config{}, 8),
                       "moepolicy::timed_expert_cache: the link must be a link resource of the timeline, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(timed_expert_cache<>(tl, link, {}, 1, 2, 1, lru_config{}, 0),
                       "moepolicy::timed_expert_cache: expert_size must be > 0, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(timed_expert_cache<>(tl, link, {}, 1, 2, 1, belady_config{}, 8),
                       "moepolicy::timed_expert_cache: Belady's policy needs the future; replay it untimed, got "
                       "\"belady\"",
                       invalid_argument);
}

namespace {

/// One request, one layer of 3 experts, top-1: decode steps selecting experts `seq` in turn.
routing_trace sequence(std::span<const expert_id> seq) {
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 1, .num_experts = 3, .top_k = 1});
  const auto r = b.add_request("r");
  const std::array<float, 1> w{1.0f};
  for (std::uint32_t i = 0; i < seq.size(); ++i) {
    const std::array<expert_id, 1> e{seq[i]};
    b.add({r, phase::decode, i, i, 0, e, w, {}});
  }
  return std::move(b).finish();
}

/// Predicts, at its `call`-th prediction (from 0), `expert` with confidence 0.9; nothing else.
struct scripted_predictor {
  std::uint32_t call = 0;
  expert_id expert = 0;
  std::uint32_t calls = 0;
  bool predict(layer_id, std::span<float> out) noexcept {
    for (float& x : out) x = 0.0f;
    if (calls++ != call) return false;
    out[expert] = 0.9f;
    return true;
  }
  void observe(const batch_view&) noexcept {}
  void end_step() noexcept {}
  void begin_request() noexcept {}
};
static_assert(PrefetchPredictor<scripted_predictor>);

// Experts of 1024 B over a link of 1024 B/s: one second each; chunks of 128 B (1/8 s); each
// layer's attention and router take 0.5 s, each expert 0.25 s on the GPU.
timed_prefetch_config hand_config(std::uint64_t capacity) {
  return {
      .capacity = capacity, .policy = lru_config{}, .expert_bytes = 1024, .link = {1024.0, 0.0}, .chunk_bytes = 128};
}
constexpr fixed_layer_cost hand_cost{.before = 0.5, .expert = 0.25};
constexpr std::array<expert_id, 3> e0_e1_e0{0, 1, 0};

}  // namespace

TEST_CASE("timed replay by hand: each miss stalls the GPU for its transfer") {
  const routing_trace t = sequence(e0_e1_e0);
  // One slot: three misses. Pass 1: attention [0, 0.5], e0 on the link [0.5, 1.5], computed
  // [1.5, 1.75]; pass 2: [1.75, 2.25], e1 [2.25, 3.25], [3.25, 3.5]; pass 3: [3.5, 4],
  // e0 [4, 5], [5, 5.25]. The GPU waits 1 s per pass.
  const timed_prefetch_result one = replay_timed_prefetch(t, hand_cost, hand_config(1));
  CHECK(one.stats.hits == 0);
  CHECK(one.stats.misses == 3);
  CHECK(one.total_seconds == 5.25);
  CHECK(one.stall_seconds == 3.0);
  CHECK(one.link_busy_seconds == 3.0);
  CHECK(one.gpu_busy_seconds == 2.25);
  CHECK(one.decode_steps == 3);
  CHECK(one.seconds_per_decode_step() == 1.75);
  // Two slots: pass 3 hits, its expert computed at once [4, 4.25].
  const timed_prefetch_result two = replay_timed_prefetch(t, hand_cost, hand_config(2));
  CHECK(two.stats.hits == 1);
  CHECK(two.total_seconds == 4.25);
  CHECK(two.stall_seconds == 2.0);
  CHECK(two.link_busy_seconds == 2.0);
}

TEST_CASE("timed replay by hand: a prefetch gets only the link's idle time and is late") {
  const routing_trace t = sequence(e0_e1_e0);
  // The third prediction (before pass 3, made when pass 2's routing was known at 2.25) names
  // e0. The link carries e1 on demand until 3.25; the prefetch then gets its idle time up to
  // pass 3's router output at 4: 6 chunks of 1/8 s, 768 B. It takes the one slot (LRU evicts
  // e1); at 4 the rest, 256 B, crosses on demand [4, 4.25], and e0 is computed [4.25, 4.5]:
  // a late prefetch, the GPU waiting 0.25 s instead of 1 s.
  scripted_predictor p{.call = 2, .expert = 0};
  const timed_prefetch_result r = replay_timed_prefetch(t, hand_cost, hand_config(1), &p);
  CHECK(r.stats.hits == 0);
  CHECK(r.stats.late_prefetches == 1);
  CHECK(r.stats.late_unstarted == 0);
  CHECK(r.stats.misses == 2);
  CHECK(r.stats.prefetches == 1);
  CHECK(r.stats.late_placed_bytes == 768);
  CHECK(r.stats.late_bytes == 256);
  CHECK(r.stats.demand_bytes == 2 * 1024 + 256);
  CHECK(r.wasted_prefetch_bytes == 0);
  CHECK(r.total_seconds == 4.5);
  CHECK(r.stall_seconds == 2.25);
  CHECK(r.link_busy_seconds == 3.0);
  CHECK(r.link_prefetch_seconds == 0.75);
  // A wrong prediction (e2) is wasted: its 768 B are stopped when pass 3 selects e0 instead,
  // and e0 is a full miss behind nothing (the stopped job left the link at 4).
  scripted_predictor wrong{.call = 2, .expert = 2};
  const timed_prefetch_result w = replay_timed_prefetch(t, hand_cost, hand_config(1), &wrong);
  CHECK(w.stats.misses == 3);
  CHECK(w.stats.prefetches_cancelled == 1);
  CHECK(w.wasted_prefetch_bytes == 768);
  CHECK(w.total_seconds == 5.25);
  // An unlimited link: every transfer takes no time, nothing stalls, and the prefetch lands
  // before its access: a hit.
  timed_prefetch_config fast = hand_config(1);
  fast.link = {unlimited_bandwidth, 0.0};
  scripted_predictor q{.call = 2, .expert = 0};
  const timed_prefetch_result f = replay_timed_prefetch(t, hand_cost, fast, &q);
  CHECK(f.stats.hits == 1);
  CHECK(f.stats.late_prefetches == 0);
  CHECK(f.stall_seconds == 0.0);
  CHECK(f.total_seconds == 2.25);
}

TEST_CASE(
    "timed replay on the bundled trace: an unlimited link reproduces the untimed walk, and time takes hits away") {
  const routing_trace t =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  const trace_info& i = t.info();
  const cache_config cc{
      .num_layers = i.num_layers, .num_experts = i.num_experts, .capacity = 8, .scope = capacity_scope::per_layer};
  // Granite-3.1-1B-A400M's experts at FP16 (3 x 1024 x 512 weights) over a 50 GB/s link;
  // 20 us of attention per layer, 5 us per expert.
  const fixed_layer_cost cost{.before = 20e-6, .expert = 5e-6};
  timed_prefetch_config slow{.capacity = 8, .expert_bytes = 3 * 1024 * 512 * 2, .link = {50e9, 1e-6}};
  timed_prefetch_config fast = slow;
  fast.link = {unlimited_bandwidth, 0.0};
  const transition_config tc{.num_layers = i.num_layers, .num_experts = i.num_experts, .top_k = i.top_k};
  for (const any_eviction_config& policy :
       {any_eviction_config{lru_config{}}, eviction_config_by_name("gated-prefetch")}) {
    CAPTURE(eviction_policy_name(policy));
    slow.policy = fast.policy = policy;
    {
      // One prefetch a batch: with an unlimited link the timed replay makes the untimed one's
      // decisions, event for event. (With several, the untimed walk may evict an expert with
      // one prefetch and fetch it again with the next; the timed cache skips a prefetch of a
      // resident when it is queued.)
      transition_predictor p0(tc), p1(tc);
      timed_prefetch_config one = fast;
      one.depth = 1;
      const cache_stats untimed =
          replay_cache_with_prefetch<any_eviction_policy>(t, cc, policy, p0, {.depth = 1}).stats;
      const timed_prefetch_result instant = replay_timed_prefetch(t, cost, one, &p1);
      CHECK(instant.stats.hits == untimed.hits);
      CHECK(instant.stats.prefetches == untimed.prefetches);
      CHECK(instant.stats.prefetches_refused == untimed.prefetch_rejected);
      CHECK(instant.stats.prefetches_unused == untimed.prefetch_wasted);
      CHECK(instant.stall_seconds == 0.0);
      CHECK(instant.stats.late_prefetches == 0);
    }
    // The top-k prefetched before each batch: on this trace time takes hits away, from the
    // unlimited link's and from the untimed count alike.
    transition_predictor p0(tc), p1(tc), p2(tc);
    const cache_stats untimed = replay_cache_with_prefetch<any_eviction_policy>(t, cc, policy, p0).stats;
    const timed_prefetch_result timed = replay_timed_prefetch(t, cost, slow, &p1);
    const timed_prefetch_result instant = replay_timed_prefetch(t, cost, fast, &p2);
    CHECK(timed.stats.accesses == untimed.accesses);
    CHECK(timed.stats.hits <= untimed.hits);
    CHECK(timed.stats.hits <= instant.stats.hits);
    CHECK(timed.stats.late_prefetches > 0);
    CHECK(timed.stall_seconds > 0.0);
    CHECK(instant.stall_seconds == 0.0);
    CHECK(instant.stats.late_prefetches == 0);
    CHECK(instant.total_seconds < timed.total_seconds);
    // The GPU is never idle but when it waits for weights.
    CHECK(timed.total_seconds == doctest::Approx(timed.gpu_busy_seconds + timed.stall_seconds));
    CHECK(timed.link_busy_seconds >= timed.link_prefetch_seconds);
  }
  // No predictor: nothing is prefetched, the timed hits are the demand replay's, and the link
  // carries each miss once.
  slow.policy = lru_config{};
  const timed_prefetch_result none = replay_timed_prefetch(t, cost, slow);
  CHECK(none.stats.prefetches == 0);
  CHECK(none.stats.hits == replay_cache<lru_policy>(t, cc).stats.hits);
  CHECK(none.link_busy_seconds ==
        doctest::Approx(static_cast<double>(none.stats.misses) * (1e-6 + 3.0 * 1024 * 512 * 2 / 50e9)));
}

TEST_CASE("timed replay: a policy run in its own type equals the run-time policy holding it") {
  const routing_trace t =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  const trace_info& i = t.info();
  const fixed_layer_cost cost{.before = 20e-6, .expert = 5e-6};
  const transition_config tc{.num_layers = i.num_layers, .num_experts = i.num_experts, .top_k = i.top_k};
  const auto same = [](const timed_prefetch_result& a, const timed_prefetch_result& b) {
    const timed_cache_stats &x = a.stats, &y = b.stats;
    CHECK(x.accesses == y.accesses);
    CHECK(x.hits == y.hits);
    CHECK(x.late_prefetches == y.late_prefetches);
    CHECK(x.late_unstarted == y.late_unstarted);
    CHECK(x.misses == y.misses);
    CHECK(x.admitted == y.admitted);
    CHECK(x.prefetches == y.prefetches);
    CHECK(x.prefetches_started == y.prefetches_started);
    CHECK(x.prefetches_landed == y.prefetches_landed);
    CHECK(x.prefetches_used == y.prefetches_used);
    CHECK(x.prefetches_cancelled == y.prefetches_cancelled);
    CHECK(x.prefetches_refused == y.prefetches_refused);
    CHECK(x.prefetches_unused == y.prefetches_unused);
    CHECK(x.demand_bytes == y.demand_bytes);
    CHECK(x.prefetch_bytes == y.prefetch_bytes);
    CHECK(x.wasted_bytes == y.wasted_bytes);
    CHECK(x.transient_bytes == y.transient_bytes);
    CHECK(x.late_wait == y.late_wait);
    CHECK(x.miss_wait == y.miss_wait);
    CHECK(a.decode_seconds == b.decode_seconds);
    CHECK(a.total_seconds == b.total_seconds);
    CHECK(a.stall_seconds == b.stall_seconds);
    CHECK(a.link_busy_seconds == b.link_busy_seconds);
    CHECK(a.link_prefetch_seconds == b.link_prefetch_seconds);
    CHECK(a.wasted_prefetch_bytes == b.wasted_prefetch_bytes);
  };
  // A slow link (late prefetches, stalls) at two capacities; the four policies
  // `replay_timed_prefetch` runs in their own types, with and without a predictor.
  for (const std::uint64_t capacity : {std::uint64_t{4}, std::uint64_t{16}}) {
    for (const std::string_view name : {"lru", "sticky-lru", "pred-reuse", "gated-prefetch"}) {
      CAPTURE(capacity);
      CAPTURE(name);
      const timed_prefetch_config cfg{.capacity = capacity,
                                      .policy = eviction_config_by_name(name),
                                      .expert_bytes = 3 * 1024 * 512 * 2,
                                      .link = {50e9, 1e-6}};
      same(replay_timed_prefetch(t, cost, cfg),
           replay_timed_prefetch_as<any_eviction_policy>(t, cost, cfg, cfg.policy));
      transition_predictor p0(tc), p1(tc);
      const timed_prefetch_result typed = replay_timed_prefetch(t, cost, cfg, &p0);
      const timed_prefetch_result any = replay_timed_prefetch_as<any_eviction_policy>(t, cost, cfg, cfg.policy, &p1);
      CHECK(typed.stats.prefetches > 0);
      same(typed, any);
    }
  }
  // In lockstep: every policy at both capacities and two depths in one walk, hearing one
  // predictor, each run equal to the same run replayed alone with its own predictor.
  std::vector<timed_prefetch_config> cfgs;
  for (const std::uint32_t depth : {0u, 1u}) {
    for (const std::uint64_t capacity : {std::uint64_t{4}, std::uint64_t{16}}) {
      for (const std::string_view name : {"lru", "sticky-lru", "pred-reuse", "gated-prefetch", "fifo"}) {
        cfgs.push_back({.capacity = capacity,
                        .policy = eviction_config_by_name(name),
                        .expert_bytes = 3 * 1024 * 512 * 2,
                        .link = {50e9, 1e-6},
                        .depth = depth});
      }
    }
  }
  transition_predictor shared(tc);
  const std::vector<timed_prefetch_result> together =
      replay_timed_prefetch_lockstep(t, cost, std::span<const timed_prefetch_config>(cfgs), &shared);
  REQUIRE(together.size() == cfgs.size());
  for (std::size_t r = 0; r < cfgs.size(); ++r) {
    CAPTURE(r);
    transition_predictor alone(tc);
    same(together[r], replay_timed_prefetch_as<any_eviction_policy>(t, cost, cfgs[r], cfgs[r].policy, &alone));
  }
  const std::vector<timed_prefetch_result> no_predictor =
      replay_timed_prefetch_lockstep(t, cost, std::span<const timed_prefetch_config>(cfgs).first(3));
  for (std::size_t r = 0; r < no_predictor.size(); ++r) {
    CAPTURE(r);
    CHECK(no_predictor[r].stats.prefetches == 0);
    same(no_predictor[r], replay_timed_prefetch(t, cost, cfgs[r]));
  }
}

TEST_CASE("timed replay: bad arguments name the function and the value") {
  const routing_trace t = sequence(e0_e1_e0);
  timed_prefetch_config c = hand_config(1);
  c.expert_bytes = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_timed_prefetch(t, hand_cost, c)),
                       "moepolicy::replay_timed_prefetch: expert_bytes must be > 0, got 0", invalid_argument);
  c = hand_config(1);
  c.policy = belady_config{};
  CHECK_THROWS_AS(static_cast<void>(replay_timed_prefetch(t, hand_cost, c)), invalid_argument);
}

TEST_CASE("a collect gives every started prefetch its slot, past what the timeline recalls") {
  // 1 layer of 2400 experts, each crossing in 1 ms: the prefetches start in one settle, a
  // few (the timeline recalls them) or more than it recalls (every waiting one is visited).
  for (const std::uint64_t n : {std::uint64_t{5}, timeline::started_history + 100}) {
    CAPTURE(n);
    timeline tl;
    const resource_id link = tl.add_resource("link", resource_kind::link);
    timed_expert_cache<> cache(tl, link, link_cost{{1000.0 * static_cast<double>(mib), 0.0}}, 1, 2400, 2400,
                               lru_config{}, mib);
    // Every other expert queued and then stopped, so a scan meets stopped ones too.
    for (std::uint64_t e = 0; e < 2 * n; ++e) REQUIRE(cache.prefetch({0, static_cast<expert_id>(e)}, 0.5f, 0.0, 0));
    CHECK(cache.cancel_pending(0, [](expert_id e) { return e % 2 == 0; }) == n);
    tl.settle(0.0005 * static_cast<double>(2 * n));
    cache.collect();
    CHECK(cache.stats().prefetches_started == n);
    CHECK(cache.consistent());
    tl.drain();
    cache.collect();
    CHECK(cache.stats().prefetches_landed == n);
    for (std::uint64_t e = 0; e < 2 * n; ++e)
      CHECK(cache.cache().contains({0, static_cast<expert_id>(e)}) == (e % 2 == 0));
  }
}
