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

// Room for every expert at either tier, no staging.
constexpr residency_budget_config roomy{.high_bytes = E * hi_size, .low_bytes = E * lo_size};

// One layer of four experts; high versions 64 B, low versions 16 B (one block each), each
// filled with a byte that names the expert and the tier.
struct fixture {
  std::vector<std::vector<std::byte>> data;
  explicit fixture(const residency_budget_config& caps = roomy, std::size_t hi_blocks = E, std::size_t lo_blocks = E,
                   low_version low = low_version::replaced)
      : budget(caps), hi_pool(hi_size, hi_blocks, 64), lo_pool(lo_size, lo_blocks, 16), table(1, E, {.low = low}) {
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
  residency_budget budget;
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

// The bounds a plan gives for N = 1 high slot of four experts with one staging block
// (predict/precision_budget.hpp): M_hi one high block, M_lo three low blocks, M_stage one;
// pool_lo holds 4 − 1 + 1 blocks.
constexpr residency_budget_config one_slot{.high_bytes = hi_size, .low_bytes = 3 * lo_size, .staging_bytes = lo_size};

}  // namespace

TEST_CASE("load_all makes every expert Resident-Lo within the budget") {
  fixture f;
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  CHECK(p.load_all() == residency_load_status::ok);
  for (expert_id e = 0; e < E; ++e) CHECK(f.table.state({0, e}) == residency_state::resident_low);
  CHECK(f.budget.reserved() == E * lo_size);
  CHECK(f.lo_pool.in_use() == E);
  auto reader = f.table.register_reader();
  auto g = reader.pin();
  const expert_version& v = g.resolve(expert_key{0, 2});
  CHECK(v.data[0] == std::byte{0x12});
  CHECK(v.checksum == fnv1a_checksum(v.data));
  CHECK(p.desired_tier({0, 2}) == precision_tier::low);
}

TEST_CASE("a promotion is issued, then published and its low version reclaimed") {
  fixture f;
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  CHECK(p.request_promote({0, 1}));
  CHECK(p.queued_promotions() == 1);
  CHECK(p.desired_tier({0, 1}) == precision_tier::high);

  auto r = p.step();  // the host copy completes at once; publication waits for the next step
  CHECK(r.issued == 1);
  CHECK(r.published == 0);
  CHECK(f.table.state({0, 1}) == residency_state::promoting);
  CHECK(p.in_flight() == 1);
  CHECK(f.budget.reserved() == E * lo_size + hi_size);  // both versions are held

  r = p.step();
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);  // no reader pinned: the grace period is over at once
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);
  CHECK(f.budget.reserved() == (E - 1) * lo_size + hi_size);
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
  fixture f;
  manual_mover::shared m;
  manual_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m});
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

TEST_CASE("admission at enqueue: a promotion that cannot reserve is deferred; the demotion goes first, staged") {
  // The plan's shape for one high slot: expert 0 starts high, 1–3 low; M_lo is full, so the
  // demotion that frees the high block copies its low version in through the temporary pool.
  fixture f(one_slot, 1, E);
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all([](expert_key k) { return k.expert == 0 ? precision_tier::high : precision_tier::low; }) ==
          residency_load_status::ok);
  CHECK(f.budget.high().reserved() == hi_size);
  CHECK(f.budget.low().reserved() == 3 * lo_size);

  replay_clock::set(1);
  CHECK(p.request_promote({0, 1}));  // M_hi is full: deferred, not queued
  CHECK(p.queued_promotions() == 0);
  CHECK(p.deferred_promotions() == 1);
  replay_clock::set(2);
  CHECK(p.request_demote({0, 0}));  // M_lo is full: reserved in the temporary pool
  CHECK(f.budget.staging().reserved() == lo_size);
  CHECK(p.queued_demotions() == 1);

  replay_clock::set(3);
  auto r = p.step();  // the deferred promotion is refused again; the demotion is issued
  CHECK(r.blocked == 1);
  CHECK(r.issued == 1);
  CHECK(f.table.state({0, 0}) == residency_state::demoting);
  CHECK(f.table.state({0, 1}) == residency_state::resident_low);

  replay_clock::set(4);
  r = p.step();  // publishes the demotion, reclaims the high block, admits and issues the promotion
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);
  CHECK(r.admitted == 1);
  CHECK(r.issued == 1);
  CHECK(f.table.state({0, 1}) == residency_state::promoting);

  replay_clock::set(5);
  r = p.step();  // publishes the promotion; expert 1's low block ends the staged transient
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);
  CHECK(f.budget.staging().reserved() == 0);
  CHECK(f.budget.low().reserved() == 3 * lo_size);
  CHECK(f.budget.high().reserved() == hi_size);
  CHECK(p.idle());
  // Peak: every bound full at once — the staged low copy beside the high version it replaces.
  CHECK(f.budget.peak_reserved() == f.budget.cap());
  CHECK(f.hi_pool.peak_in_use() == 1);
  CHECK(f.lo_pool.peak_in_use() == E);

  const auto log = drain(p);
  REQUIRE(log.size() == 2);
  CHECK((log[0].kind == transition_kind::demotion && log[0].key == expert_key{0, 0}));
  CHECK((log[1].kind == transition_kind::promotion && log[1].key == expert_key{0, 1}));
  CHECK(log[1].queue_delay == 4.0);  // requested at 1, published at 5
  CHECK(log[1].copy_seconds == 1.0);
  CHECK(log[0].queue_delay == 2.0);
  const auto s = p.stats();
  CHECK(s.deferred == 1);
  CHECK(s.staged == 1);
  CHECK(s.admission_waits == 2);  // at the request, and at the retry of step 3
  CHECK(s.promotions == 1);
  CHECK(s.demotions == 1);
  CHECK(s.bytes_moved == hi_size + lo_size);
}

TEST_CASE("admission at issue: the refused promotion stays at the head of its queue") {
  fixture f(one_slot, 1, E);
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), {}, {.admission = admission_point::issue});
  REQUIRE(p.load_all([](expert_key k) { return k.expert == 0 ? precision_tier::high : precision_tier::low; }) ==
          residency_load_status::ok);
  replay_clock::set(1);
  CHECK(p.request_promote({0, 1}));
  replay_clock::set(2);
  CHECK(p.request_demote({0, 0}));
  CHECK(p.queued_promotions() == 1);  // queued without a reservation
  CHECK(f.budget.staging().reserved() == 0);

  replay_clock::set(3);
  auto r = p.step();  // tight (the head promotion cannot reserve): the younger demotion goes first
  CHECK(r.issued == 1);
  CHECK(r.blocked == 1);  // then the promotion is tried and refused: it stays at the head
  CHECK(f.table.state({0, 0}) == residency_state::demoting);
  CHECK(f.budget.staging().reserved() == lo_size);
  r = p.step();  // publishes the demotion and reclaims the high block first
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 1);
  CHECK(r.issued == 1);  // ... and then admitted in the same step
  replay_clock::set(5);
  p.step();
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);
  CHECK(p.idle());
  CHECK(p.stats().deferred == 0);
  CHECK(f.budget.staging().reserved() == 0);
}

TEST_CASE("admission at enqueue holds the reservation; a dropped request gives it back") {
  fixture f;
  manual_mover::shared m;
  manual_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m});
  REQUIRE(p.load_all() == residency_load_status::ok);
  CHECK(p.request_promote({0, 2}));
  CHECK(f.budget.high().reserved() == hi_size);  // reserved at the request
  CHECK_FALSE(p.request_demote({0, 2}));         // it is low already: the promotion is now stale
  const auto r = p.step();
  CHECK(r.issued == 0);
  CHECK(p.stats().cancelled == 1);
  CHECK(f.budget.high().reserved() == 0);
  CHECK(p.idle());
}

TEST_CASE("a demotion that finds M_lo and the temporary pool full waits for a promotion to free a low block") {
  // N = 2 of 4 with one staging block: M_lo holds two lows, staging one.
  fixture f({.high_bytes = 2 * hi_size, .low_bytes = 2 * lo_size, .staging_bytes = lo_size}, 2, 3);
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all([](expert_key k) { return k.expert < 2 ? precision_tier::high : precision_tier::low; }) ==
          residency_load_status::ok);
  CHECK(p.request_demote({0, 0}));  // staged
  CHECK(p.request_demote({0, 1}));  // nothing left: deferred
  CHECK(p.deferred_demotions() == 1);
  for (int i = 0; i < 4; ++i) p.step();
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);  // still waiting
  CHECK(p.deferred_demotions() == 1);
  CHECK_FALSE(p.idle());
  CHECK(p.request_promote({0, 2}));  // frees a low block once published
  for (int i = 0; i < 5; ++i) p.step();
  CHECK(f.table.state({0, 1}) == residency_state::resident_low);
  CHECK(f.table.state({0, 2}) == residency_state::resident_high);
  CHECK(p.idle());
  CHECK(f.lo_pool.peak_in_use() <= f.lo_pool.num_blocks());
  CHECK(f.budget.peak_reserved() <= f.budget.cap());
}

TEST_CASE("without budget pressure the older request goes first") {
  fixture f;
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), {}, {.max_in_flight = 1});
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
  fixture f(roomy, E, E, low_version::kept);
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  p.request_promote({0, 0});
  p.step();
  const auto r = p.step();
  CHECK(r.published == 1);
  CHECK(r.reclaimed == 0);  // nothing retires: the low version stays
  CHECK(f.table.state({0, 0}) == residency_state::resident_high);
  CHECK(f.budget.reserved() == E * lo_size + hi_size);

  p.request_demote({0, 0});
  auto d = p.step();  // the switch happens when the request is served
  CHECK(d.published == 1);
  CHECK(d.issued == 0);
  CHECK(f.table.state({0, 0}) == residency_state::evicting);
  CHECK(f.table.serving_tier({0, 0}) == precision_tier::low);
  d = p.step();
  CHECK(d.reclaimed == 1);
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(f.budget.reserved() == E * lo_size);
  CHECK(f.hi_pool.in_use() == 0);
  const auto log = drain(p);
  REQUIRE(log.size() == 2);
  CHECK(log[1].kind == transition_kind::demotion);
  CHECK(log[1].bytes_moved == 0);
  CHECK(log[1].version == 1);  // the kept low copy
}

TEST_CASE("requests are idempotent and stale ones are dropped when served") {
  fixture f;
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  CHECK(p.request_promote({0, 0}));
  CHECK_FALSE(p.request_promote({0, 0}));  // already queued
  CHECK_FALSE(p.request_demote({0, 0}));   // changes its mind: it is low, so the promotion goes stale
  CHECK(p.desired_tier({0, 0}) == precision_tier::low);
  CHECK_FALSE(p.request_demote({0, 1}));  // resident low, nothing pending: nothing to do
  const auto r = p.step();
  CHECK(r.issued == 0);
  CHECK(p.stats().cancelled == 1);  // the promotion is stale when served
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
  CHECK(p.idle());

  const std::array<expert_id, 2> up{1, 2};
  const std::array<expert_id, 1> down{3};
  CHECK(p.request(0, up, down) == 2);  // demoting a low expert queues nothing
}

TEST_CASE("an expert in mid-transition waits at the back of its queue") {
  fixture f;
  manual_mover::shared m;
  manual_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m});
  REQUIRE(p.load_all() == residency_load_status::ok);
  m.hold = true;
  p.request_promote({0, 0});
  p.step();
  CHECK(f.table.state({0, 0}) == residency_state::promoting);
  p.request_demote({0, 0});  // M_lo is full until the promotion's low copy is reclaimed: deferred
  CHECK(p.step().issued == 0);
  CHECK(p.deferred_demotions() == 1);
  finish_all(m);
  p.step();  // publish + reclaim; then the demotion starts
  CHECK(f.table.state({0, 0}) == residency_state::demoting);
  finish_all(m);
  p.step();
  CHECK(f.table.state({0, 0}) == residency_state::resident_low);
}

TEST_CASE("in-flight and per-step byte limits bound the interference") {
  fixture f;
  manual_mover::shared m;
  SUBCASE("max_in_flight") {
    manual_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m}, {.max_in_flight = 2});
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
    manual_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), manual_mover{&m},
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
  fixture f;
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
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
  CHECK(f.budget.reserved() == E * lo_size + hi_size);  // the low copy still counts
  CHECK(fnv1a_checksum(old.data) == old.checksum);      // and is intact
  g.reset();
  r = p.step();
  CHECK(r.reclaimed == 1);
  CHECK(f.budget.reserved() == (E - 1) * lo_size + hi_size);
}

TEST_CASE("the background worker serves requests until stopped") {
  fixture f;
  transition_pipeline<host_memcpy_mover> p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), {},
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
  fixture f;
  {
    host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
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
  CHECK(f.budget.reserved() == 0);
  CHECK(f.hi_pool.free_blocks() == f.hi_pool.num_blocks());
  CHECK(f.lo_pool.free_blocks() == f.lo_pool.num_blocks());
  for (expert_id e = 0; e < E; ++e) CHECK(f.table.state({0, e}) == residency_state::absent);
}

TEST_CASE("load_all reports a budget or pool too small") {
  SUBCASE("budget") {
    fixture f({.high_bytes = E * hi_size, .low_bytes = 3 * lo_size});
    host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
    CHECK(p.load_all() == residency_load_status::over_budget);
    CHECK(f.table.state({0, 2}) == residency_state::resident_low);
    CHECK(f.table.state({0, 3}) == residency_state::absent);
  }
  SUBCASE("budget: loading does not use the temporary pool") {
    fixture f(one_slot, 1, E);
    host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
    CHECK(p.load_all() == residency_load_status::over_budget);  // four lows, M_lo holds three
    CHECK(f.budget.staging().reserved() == 0);
  }
  SUBCASE("pool") {
    fixture f;
    host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
    const pool_block a1 = f.lo_pool.try_allocate(), a2 = f.lo_pool.try_allocate();  // someone else's
    CHECK(p.load_all() == residency_load_status::pool_exhausted);
    CHECK(f.budget.reserved() == 2 * lo_size);  // the refused reservation was returned
    f.lo_pool.deallocate(a1);
    f.lo_pool.deallocate(a2);
  }
}

TEST_CASE("bad pipelines are rejected with the library's message") {
  fixture f;
  auto big = [&](expert_key k, precision_tier t) {
    version_source s = f.sources()(k, t);
    if (t == precision_tier::high) s.bytes = std::span<const std::byte>(f.data[1].data(), hi_size + 1);
    return s;
  };
  std::vector<std::byte> longer(hi_size + 1);
  f.data[1] = longer;
  CHECK_THROWS_WITH_AS(
      host_pipeline(f.table, f.budget, f.lo_pool, f.hi_pool, big),
      "moepolicy::transition_pipeline: a high-precision source is larger than high_pool's blocks, got 65",
      invalid_argument);
  auto empty = [](expert_key, precision_tier) { return version_source{}; };
  CHECK_THROWS_WITH_AS(host_pipeline(f.table, f.budget, f.lo_pool, f.hi_pool, empty),
                       "moepolicy::transition_pipeline: every source must hold at least one byte, got 0",
                       invalid_argument);
  f.data[1].resize(hi_size);
  CHECK_THROWS_WITH_AS(host_pipeline(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources(), {}, {.max_in_flight = 0}),
                       "moepolicy::transition_pipeline: max_in_flight must be > 0, got 0", invalid_argument);

  fixture k(roomy, E, E, low_version::kept);
  host_pipeline p(k.table, k.budget, k.lo_pool, k.hi_pool, k.sources());
  CHECK_THROWS_WITH_AS(static_cast<void>(p.load_all(precision_tier::high)),
                       "moepolicy::transition_pipeline::load_all: with kept low versions experts load at low precision "
                       "first, got \"high\"",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(p.load_all(
                           [](expert_key e) { return e.expert == 2 ? precision_tier::high : precision_tier::low; })),
                       "moepolicy::transition_pipeline::load_all: with kept low versions experts load at low precision "
                       "first, got \"high\"",
                       invalid_argument);
}

TEST_CASE("bounds larger than the pools' arenas are rejected: a reservation must always find its block") {
  SUBCASE("high") {
    fixture f({.high_bytes = E * hi_size + 1, .low_bytes = E * lo_size});
    CHECK_THROWS_WITH_AS(host_pipeline(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources()),
                         "moepolicy::transition_pipeline: the high-precision bound exceeds high_pool's arena, got 257",
                         invalid_argument);
  }
  SUBCASE("low with staging") {
    fixture f({.high_bytes = E * hi_size, .low_bytes = E * lo_size, .staging_bytes = lo_size});
    CHECK_THROWS_WITH_AS(host_pipeline(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources()),
                         "moepolicy::transition_pipeline: the low-precision bound (with the staging pool) exceeds "
                         "low_pool's arena, got 80",
                         invalid_argument);
  }
}

TEST_CASE("kept low versions: a window pinned before a promotion keeps the low version, and the demotion waits") {
  fixture f(roomy, E, E, low_version::kept);
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
  REQUIRE(p.load_all() == residency_load_status::ok);
  auto reader = f.table.register_reader();
  std::optional<read_guard> g(reader.pin());
  CHECK(g->resolve(expert_key{0, 1}).tier == precision_tier::low);
  p.request_promote({0, 1});
  p.step();
  CHECK(p.step().published == 1);
  CHECK(f.table.state({0, 1}) == residency_state::resident_high);
  CHECK(g->resolve(expert_key{0, 1}).tier == precision_tier::low);  // the window's mapping holds
  p.request_demote({0, 1});
  for (int i = 0; i < 3; ++i) {
    const auto r = p.step();
    CHECK(r.published == 0);  // unsettled: the open window still sees the low version as current
    CHECK(g->resolve(expert_key{0, 1}).tier == precision_tier::low);
  }
  {
    auto g2 = f.table.register_reader();
    auto w = g2.pin();  // a later window sees the high version
    CHECK(w.resolve(expert_key{0, 1}).tier == precision_tier::high);
    g.reset();
  }
  CHECK(p.step().published == 1);  // settled: the switch happens
  CHECK(f.table.serving_tier({0, 1}) == precision_tier::low);
}

TEST_CASE("requests, steps, pins and resolutions allocate nothing after construction") {
  fixture f;
  host_pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
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
  fixture f;
  f.data[0].resize(lo_size + 3);
  CHECK_THROWS_WITH_AS(
      host_pipeline(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources()),
      "moepolicy::transition_pipeline: a low-precision source is larger than low_pool's blocks, got 19",
      invalid_argument);
}

TEST_CASE("the replay clock shows the time it was set to") {
  replay_clock::set(2.5);
  CHECK(replay_clock::now().time_since_epoch().count() == 2.5);
  replay_clock::set(0);
}

TEST_CASE("the per-thread replay clock: each thread sees the time it set") {
  thread_replay_clock::set(2.5);
  CHECK(thread_replay_clock::now().time_since_epoch().count() == 2.5);
  double other = -1.0;
  std::thread([&] { other = thread_replay_clock::now().time_since_epoch().count(); }).join();
  CHECK(other == 0.0);  // a new thread's clock starts at 0
  CHECK(thread_replay_clock::now().time_since_epoch().count() == 2.5);
  thread_replay_clock::set(0);
}

TEST_CASE("pipelines stepped at once on their own threads see their own replay time") {
  // Each thread replays a promotion requested at `t0` and published at `t0 + delay`, its clock
  // moved in small steps meanwhile; with one clock per thread each logs its own delay (with
  // the process-wide `replay_clock` the threads' times would mix).
  using pipeline = transition_pipeline<host_memcpy_mover, thread_replay_clock>;
  constexpr std::size_t threads = 4, rounds = 200;
  std::array<std::vector<double>, threads> delays;
  std::array<bool, threads> ok{};
  const auto replay = [&](std::size_t i) {
    fixture f;
    pipeline p(f.table, f.budget, f.lo_pool, f.hi_pool, f.sources());
    if (p.load_all() != residency_load_status::ok) return;
    const double t0 = 1000.0 * static_cast<double>(i + 1);
    std::array<transition_record, 4> log{};
    for (std::size_t r = 0; r < rounds; ++r) {
      const expert_key k{0, static_cast<expert_id>(r % E)};
      const double start = t0 + 10.0 * static_cast<double>(r);
      thread_replay_clock::set(start);
      if (!(r / E % 2 == 0 ? p.request_promote(k) : p.request_demote(k))) return;
      thread_replay_clock::set(start + 1.0);
      p.step();  // issues the copy
      std::this_thread::yield();
      thread_replay_clock::set(start + 1.0 + static_cast<double>(i));
      p.step();  // publishes it
      if (p.drain_log(log) != 1) return;
      delays[i].push_back(log[0].queue_delay);
    }
    ok[i] = true;
  };
  std::vector<std::thread> pool;
  for (std::size_t i = 0; i < threads; ++i) pool.emplace_back(replay, i);
  for (auto& t : pool) t.join();
  for (std::size_t i = 0; i < threads; ++i) {
    CAPTURE(i);
    REQUIRE(ok[i]);
    REQUIRE(delays[i].size() == rounds);
    for (const double d : delays[i]) CHECK(d == 1.0 + static_cast<double>(i));
  }
}
