// The GPU expert cache on the timed model: a hit is resident and landed; a prefetch that has
// not landed is a late prefetch whose remainder is fetched on demand; every byte on the link
// is accounted for; evicting or cancelling a prefetch on its way stops its job.
#include "moepolicy/sim/timed_cache.hpp"

#include <doctest/doctest.h>

#include <random>

#include "moepolicy/cache/lru.hpp"

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
