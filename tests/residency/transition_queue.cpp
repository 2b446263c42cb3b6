#include "moepolicy/residency/transition_queue.hpp"

#include "allocation_counter.hpp"

#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

using namespace moepolicy;

namespace {

// A mover whose copies happen only when the test says so: while `hold` is set, `copy`
// records and `finish_all` copies and completes; otherwise it copies at once. A Mover
// without `wait`.
struct manual_mover {
  struct pending {
    std::span<std::byte> dst;
    std::span<const std::byte> src;
    bool done = false;
  };
  struct shared {
    std::vector<pending> log;
    bool hold = false;
  };
  shared* s;  // the pipeline holds a copy of the mover; the state stays with the test
  struct completion {
    std::size_t id = 0;
  };
  completion copy(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
    s->log.push_back({dst, src, false});
    if (!s->hold) finish(s->log.back());
    return {s->log.size() - 1};
  }
  bool done(const completion& c) const noexcept { return s->log[c.id].done; }
  static void finish(pending& p) noexcept {
    if (!p.done) std::memcpy(p.dst.data(), p.src.data(), p.src.size());
    p.done = true;
  }
};
static_assert(Mover<manual_mover> && !WaitableMover<manual_mover>);

void finish_all(manual_mover::shared& s) {
  for (auto& p : s.log) manual_mover::finish(p);
}

constexpr std::size_t E = 4;
constexpr std::size_t hi_size = 64, lo_size = 16;

// One layer of four experts; high versions 64 B, low versions 16 B, each filled with a
// byte that names the expert and the tier.
struct fixture {
  std::vector<std::vector<std::byte>> data;
  explicit fixture(bytes cap, std::size_t hi_blocks = E, std::size_t lo_blocks = E,
                   low_version low = low_version::replaced)
      : tracker(cap), hi_pool(hi_size, hi_blocks, 64), lo_pool(lo_size, lo_blocks, 16), table(1, E, {.low = low}) {
    for (std::size_t e = 0; e < E; ++e) {
      data.emplace_back(lo_size, static_cast<std::byte>(0x10 + e));
      data.emplace_back(hi_size, static_cast<std::byte>(0x80 + e));
    }
    replay_clock::set(0);
  }
  auto sources() {
    return [this](expert_key k, precision_tier t) {
      const auto& b = data[2 * k.expert + static_cast<std::size_t>(t)];
      return version_source{b, fnv1a_checksum(b), static_cast<std::uint8_t>(t == precision_tier::high ? 16 : 4)};
    };
  }
  budget_tracker tracker;
  block_pool hi_pool, lo_pool;
  versioned_expert_table table;
};

using host_pipeline = transition_pipeline<host_memcpy_mover, replay_clock>;
using manual_pipeline = transition_pipeline<manual_mover, replay_clock>;

std::vector<transition_record> drain(auto& p) {
  std::vector<transition_record> out(64);
  out.resize(p.drain_log(out));
  return out;
}

}  // namespace

TEST_CASE("load_all makes every expert Resident-Lo within the budget") {
  fixture f(1000);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  CHECK(p.load_all() == residency_load_status::ok);
  for (expert_id e = 0; e < E; ++e) CHECK(f.table.state({0, e}) == residency_state::resident_low);
  CHECK(f.tracker.reserved() == E * lo_size);
  CHECK(f.lo_pool.in_use() == E);
  auto reader = f.table.register_reader();
  auto g = reader.pin();
  const expert_version& v = g.resolve(expert_key{0, 2});
  CHECK(v.data[0] == std::byte{0x12});
  CHECK(v.checksum == fnv1a_checksum(v.data));
  CHECK(p.desired_tier({0, 2}) == precision_tier::low);
}

TEST_CASE("a promotion is issued, then published and its low version reclaimed") {
  fixture f(1000);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  CHECK(p.request_promote({0, 1}));
  CHECK(p.queued_promotions() == 1);
  CHECK(p.desired_tier({0, 1}) == precision_tier::high);

  auto r = p.step();  // the host copy completes at once; publication waits for the next step
  CHECK(r.issued == 1);
  CHECK(r.published == 0);
  CHECK(f.table.state({0, 1}) == residency_state::promoting);
  CHECK(p.in_flight() == 1);
  CHECK(f.tracker.reserved() == E * lo_size + hi_size);  // both versions are held

  r = p.step();
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);  // no reader pinned: the grace period is over at once
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);
  CHECK(f.tracker.reserved() == (E - 1) * lo_size + hi_size);
  CHECK(f.lo_pool.in_use() == E - 1);
  CHECK(f.hi_pool.in_use() == 1);
  CHECK(p.idle());
  const auto s = p.stats();
  CHECK(s.promotions == 1);
  CHECK(s.bytes_moved == hi_size);
  CHECK(s.reclaimed == 1);
  const auto log = drain(p);
  REQUIRE(log.size() == 1);
  CHECK(log[0].key == expert_key{0, 1});
  CHECK(log[0].kind == transition_kind::promotion);
  CHECK(log[0].version == 2);
  CHECK(drain(p).empty());

  auto reader = f.table.register_reader();
  auto g = reader.pin();
  const expert_version& v = g.resolve(expert_key{0, 1});
  CHECK(v.tier == precision_tier::high);
  CHECK(v.data.size() == hi_size);
  CHECK(v.data[hi_size - 1] == std::byte{0x81});
}

TEST_CASE("while the copy is in flight the handle keeps the low version (Promoting)") {
  fixture f(1000);
  manual_mover::shared m;
  manual_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m});
  REQUIRE(p.load_all() == residency_load_status::ok);
  m.hold = true;
  auto reader = f.table.register_reader();
  p.request_promote({0, 3});
  CHECK(p.step().issued == 1);
  for (int i = 0; i < 3; ++i) {
    CHECK(p.step().published == 0);  // not done: nothing is published
    CHECK(f.table.state({0, 3}) == residency_state::promoting);
    auto g = reader.pin();
    CHECK(g.resolve(expert_key{0, 3}).tier == precision_tier::low);
  }
  finish_all(m);
  CHECK(p.step().published == 1);
  auto g = reader.pin();
  const expert_version& v = g.resolve(expert_key{0, 3});
  CHECK(v.tier == precision_tier::high);
  CHECK(fnv1a_checksum(v.data) == v.checksum);
}

TEST_CASE("backpressure: a promotion that cannot reserve waits; demotions go first when the budget is tight") {
  // Cap: four low versions, one high version, and 16 B of staging = 144 B.
  fixture f(E * lo_size + hi_size + lo_size);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);  // reserved 64, available 80

  replay_clock::set(1);
  p.request_promote({0, 0});
  replay_clock::set(2);
  p.request_promote({0, 1});
  replay_clock::set(3);
  auto r = p.step();  // promotion 0 reserves 64 (available 16); promotion 1 cannot reserve 64
  CHECK(r.issued == 1);
  CHECK(r.blocked == 1);
  CHECK(p.queued_promotions() == 1);
  CHECK(f.table.state({0, 1}) == residency_state::resident_low);
  r = p.step();  // publishes 0, reclaims its low copy (available 32): 1 still does not fit
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);
  CHECK(r.blocked == 1);
  CHECK(f.tracker.available() == 32);

  replay_clock::set(4);
  p.request_demote({0, 0});  // requested after promotion 1, served before it: the budget is tight
  r = p.step();              // demotion 0 copies its low version in (reserves 16, available 16)
  CHECK(r.issued == 1);
  CHECK(f.table.state({0, 0}) == residency_state::demoting);
  CHECK(f.table.state({0, 1}) == residency_state::resident_low);
  replay_clock::set(6);
  r = p.step();  // publishes demotion 0, reclaims its high copy (available 80), issues promotion 1
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);
  CHECK(r.issued == 1);
  CHECK(f.table.state({0, 1}) == residency_state::promoting);
  replay_clock::set(9);
  p.step();
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);
  CHECK(f.tracker.peak_reserved() <= f.tracker.cap());
  // Peak: three low copies + high 0 + the transient low copy of demotion 0 = 48 + 64 + 16.
  CHECK(f.tracker.peak_reserved() == 128);

  const auto log = drain(p);
  REQUIRE(log.size() == 3);
  CHECK((log[0].kind == transition_kind::promotion && log[0].key == expert_key{0, 0}));
  CHECK((log[1].kind == transition_kind::demotion && log[1].key == expert_key{0, 0}));
  CHECK((log[2].kind == transition_kind::promotion && log[2].key == expert_key{0, 1}));
  // Promotion 1 was requested at 2 and published at 9; promotion 0 at 1 and 3.
  CHECK(log[2].queue_delay == 7.0);
  CHECK(log[2].copy_seconds == 3.0);
  CHECK(log[0].queue_delay == 2.0);
  CHECK(log[1].queue_delay == 2.0);
  const auto s = p.stats();
  CHECK(s.max_promotion_delay == 7.0);
  CHECK(s.total_promotion_delay == 9.0);
  CHECK(s.max_demotion_delay == 2.0);
  CHECK(s.admission_waits == 3);
  CHECK(s.promotions == 2);
  CHECK(s.demotions == 1);
  CHECK(s.bytes_moved == 2 * hi_size + lo_size);
}

TEST_CASE("without budget pressure the older request goes first") {
  fixture f(1000);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), {}, {.max_in_flight = 1});
  REQUIRE(p.load_all() == residency_load_status::ok);
  p.request_promote({0, 2});
  p.step();
  p.step();
  REQUIRE(f.table.state({0, 2}) == residency_state::resident_high);
  drain(p);
  replay_clock::set(1);
  p.request_promote({0, 3});  // older
  replay_clock::set(2);
  p.request_demote({0, 2});
  for (int i = 0; i < 4; ++i) p.step();
  const auto log = drain(p);
  REQUIRE(log.size() == 2);
  CHECK(log[0].key == expert_key{0, 3});
  CHECK(log[1].key == expert_key{0, 2});
}

TEST_CASE("kept low versions: a demotion is a switch and a reclamation, no copy") {
  fixture f(1000, E, E, low_version::kept);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  p.request_promote({0, 0});
  p.step();
  const auto r = p.step();
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 0);  // nothing retires: the low version stays
  CHECK(f.table.state({0, 0}) == residency_state::resident_high);
  CHECK(f.tracker.reserved() == E * lo_size + hi_size);

  p.request_demote({0, 0});
  auto d = p.step();  // the switch happens when the request is served
  CHECK(d.published == 1);
  CHECK(d.issued == 0);
  CHECK(f.table.state({0, 0}) == residency_state::evicting);
  CHECK(f.table.serving_tier({0, 0}) == precision_tier::low);
  d = p.step();
  CHECK(d.reclaimed == 1);
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(f.tracker.reserved() == E * lo_size);
  CHECK(f.hi_pool.in_use() == 0);
  const auto log = drain(p);
  REQUIRE(log.size() == 2);
  CHECK(log[1].kind == transition_kind::demotion);
  CHECK(log[1].bytes_moved == 0);
  CHECK(log[1].version == 1);  // the kept low copy
}

TEST_CASE("requests are idempotent and stale ones are dropped when served") {
  fixture f(1000);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  CHECK(p.request_promote({0, 0}));
  CHECK_FALSE(p.request_promote({0, 0}));  // already queued
  CHECK(p.request_demote({0, 0}));         // changes its mind; must be queued, a promotion is pending
  CHECK(p.desired_tier({0, 0}) == precision_tier::low);
  CHECK_FALSE(p.request_demote({0, 1}));  // resident low, nothing pending: nothing to do
  const auto r = p.step();
  CHECK(r.issued == 0);
  CHECK(p.stats().cancelled == 2);  // the promotion is stale, the demotion finds it low
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(p.idle());

  const std::array<expert_id, 2> up{1, 2};
  const std::array<expert_id, 1> down{3};
  CHECK(p.request(0, up, down) == 2);  // demoting a low expert queues nothing
}

TEST_CASE("an expert in mid-transition waits at the back of its queue") {
  fixture f(1000);
  manual_mover::shared m;
  manual_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m});
  REQUIRE(p.load_all() == residency_load_status::ok);
  m.hold = true;
  p.request_promote({0, 0});
  p.step();
  CHECK(f.table.state({0, 0}) == residency_state::promoting);
  p.request_demote({0, 0});  // busy: stays queued
  CHECK(p.step().issued == 0);
  CHECK(p.queued_demotions() == 1);
  finish_all(m);
  p.step();  // publish + reclaim; then the demotion starts
  CHECK(f.table.state({0, 0}) == residency_state::demoting);
  finish_all(m);
  p.step();
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
}

TEST_CASE("in-flight and per-step byte limits bound the interference") {
  fixture f(1000);
  manual_mover::shared m;
  SUBCASE("max_in_flight") {
    manual_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m}, {.max_in_flight = 2});
    REQUIRE(p.load_all() == residency_load_status::ok);
    m.hold = true;
    for (expert_id e = 0; e < 3; ++e) p.request_promote({0, e});
    CHECK(p.step().issued == 2);
    CHECK(p.in_flight() == 2);
    CHECK(p.queued_promotions() == 1);
    CHECK(p.step().issued == 0);
    finish_all(m);
    const auto r = p.step();
    CHECK(r.published == 2);
    CHECK(r.issued == 1);
    finish_all(m);
    p.step();
  }
  SUBCASE("max_issue_bytes_per_step") {
    manual_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m},
                      {.max_in_flight = 4, .max_issue_bytes_per_step = hi_size});
    REQUIRE(p.load_all() == residency_load_status::ok);
    m.hold = true;
    for (expert_id e = 0; e < 3; ++e) p.request_promote({0, e});
    CHECK(p.step().issued == 1);
    CHECK(p.step().issued == 1);
    finish_all(m);
    p.step();
    finish_all(m);
    p.step();
  }
}

TEST_CASE("a pinned reader holds back reclamation, and with it the budget") {
  fixture f(1000);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  auto reader = f.table.register_reader();
  std::optional<read_guard> g(reader.pin());
  const expert_version& old = g->resolve(expert_key{0, 0});
  p.request_promote({0, 0});
  p.step();
  auto r = p.step();
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 0);
  CHECK(p.awaiting_reclaim() == 1);
  CHECK(f.table.state({0, 0}) == residency_state::evicting);
  CHECK(f.tracker.reserved() == E * lo_size + hi_size);  // the low copy still counts
  CHECK(fnv1a_checksum(old.data) == old.checksum);       // and is intact
  g.reset();
  r = p.step();
  CHECK(r.reclaimed == 1);
  CHECK(f.tracker.reserved() == (E - 1) * lo_size + hi_size);
}

TEST_CASE("the background worker serves requests until stopped") {
  fixture f(1000);
  transition_pipeline<host_memcpy_mover> p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), {},
                                           {.idle_wait = std::chrono::microseconds(100)});
  REQUIRE(p.load_all() == residency_load_status::ok);
  p.start();
  p.start();  // idempotent
  CHECK(p.running());
  for (expert_id e = 0; e < E; ++e) p.request_promote({0, e});
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool all_high = false;
  while (!all_high && std::chrono::steady_clock::now() < deadline) {
    all_high = true;
    for (expert_id e = 0; e < E; ++e) all_high = all_high && f.table.state({0, e}) == residency_state::resident_high;
    if (!all_high) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(all_high);
  p.stop();
  CHECK_FALSE(p.running());
  CHECK(p.stats().promotions == E);
  CHECK(p.stats().max_promotion_delay >= 0.0);
}

TEST_CASE("shutdown returns every block and byte") {
  fixture f(1000);
  {
    host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
    REQUIRE(p.load_all() == residency_load_status::ok);
    p.request_promote({0, 0});
    p.request_promote({0, 1});
    p.step();
    p.step();
    p.request_demote({0, 1});
    p.request_promote({0, 2});
    p.step();  // leaves copies in flight and versions retired
    p.shutdown();
    CHECK(p.idle());
    p.shutdown();  // idempotent
  }
  CHECK(f.tracker.reserved() == 0);
  CHECK(f.hi_pool.free_blocks() == f.hi_pool.num_blocks());
  CHECK(f.lo_pool.free_blocks() == f.lo_pool.num_blocks());
  for (expert_id e = 0; e < E; ++e) CHECK(f.table.state({0, e}) == residency_state::absent);
}

TEST_CASE("load_all reports a budget or pool too small") {
  SUBCASE("budget") {
    fixture f(3 * lo_size);
    host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
    CHECK(p.load_all() == residency_load_status::over_budget);
    CHECK(f.table.state({0, 2}) == residency_state::resident_low);
    CHECK(f.table.state({0, 3}) == residency_state::absent);
  }
  SUBCASE("pool") {
    fixture f(1000, E, 2);
    host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
    CHECK(p.load_all() == residency_load_status::pool_exhausted);
    CHECK(f.tracker.reserved() == 2 * lo_size);  // the refused reservation was returned
  }
}

TEST_CASE("bad pipelines are rejected with the library's message") {
  fixture f(1000);
  auto big = [&](expert_key k, precision_tier t) {
    version_source s = f.sources()(k, t);
    if (t == precision_tier::high) s.bytes = std::span<const std::byte>(f.data[1].data(), hi_size + 1);
    return s;
  };
  std::vector<std::byte> longer(hi_size + 1);
  f.data[1] = longer;
  CHECK_THROWS_WITH_AS(
      host_pipeline(f.table, f.tracker, f.lo_pool, f.hi_pool, big),
      "moepolicy::transition_pipeline: a high-precision source is larger than high_pool's blocks, got 65",
      invalid_argument);
  auto empty = [](expert_key, precision_tier) { return version_source{}; };
  CHECK_THROWS_WITH_AS(host_pipeline(f.table, f.tracker, f.lo_pool, f.hi_pool, empty),
                       "moepolicy::transition_pipeline: every source must hold at least one byte, got 0",
                       invalid_argument);
  f.data[1].resize(hi_size);
  CHECK_THROWS_WITH_AS(host_pipeline(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources(), {}, {.max_in_flight = 0}),
                       "moepolicy::transition_pipeline: max_in_flight must be > 0, got 0", invalid_argument);

  fixture k(1000, E, E, low_version::kept);
  host_pipeline p(k.table, k.tracker, k.lo_pool, k.hi_pool, k.sources());
  CHECK_THROWS_WITH_AS(static_cast<void>(p.load_all(precision_tier::high)),
                       "moepolicy::transition_pipeline::load_all: with kept low versions experts load at low precision "
                       "first, got \"high\"",
                       invalid_argument);
}

TEST_CASE("requests, steps, pins and resolutions allocate nothing after construction") {
  fixture f(1000);
  host_pipeline p(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  auto reader = f.table.register_reader();
  std::array<transition_record, 8> sink{};
  const std::size_t n = count_allocations([&] {
    for (int round = 0; round < 3; ++round) {
      for (expert_id e = 0; e < E; ++e) p.request_promote({0, e});
      for (int s = 0; s < 4; ++s) static_cast<void>(p.step());
      {
        auto g = reader.pin();
        for (expert_id e = 0; e < E; ++e) static_cast<void>(g.resolve(expert_key{0, e}));
      }
      for (expert_id e = 0; e < E; ++e) p.request_demote({0, e});
      for (int s = 0; s < 4; ++s) static_cast<void>(p.step());
      static_cast<void>(p.drain_log(sink));
      static_cast<void>(p.stats());
    }
  });
  CHECK(n == 0);
  CHECK(p.stats().promotions == 3 * E);
  // The counter does count.
  CHECK(count_allocations([] { ::operator delete(::operator new(4)); }) == (test::counting_allocations ? 1u : 0u));
}

TEST_CASE("a low-precision source larger than its pool's blocks is rejected") {
  fixture f(1000);
  f.data[0].resize(lo_size + 3);
  CHECK_THROWS_WITH_AS(
      host_pipeline(f.table, f.tracker, f.lo_pool, f.hi_pool, f.sources()),
      "moepolicy::transition_pipeline: a low-precision source is larger than low_pool's blocks, got 19",
      invalid_argument);
}

TEST_CASE("the replay clock shows the time it was set to") {
  replay_clock::set(2.5);
  CHECK(replay_clock::now().time_since_epoch().count() == 2.5);
  replay_clock::set(0);
}
