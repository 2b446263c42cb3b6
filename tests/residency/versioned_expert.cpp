#include "moepolicy/residency/versioned_expert.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

using namespace moepolicy;

namespace {

// Two prepared versions of one expert and the pools that hold their copies.
struct fixture {
  std::vector<std::byte> hi_bytes = std::vector<std::byte>(64, std::byte{0xAB});
  std::vector<std::byte> lo_bytes = std::vector<std::byte>(16, std::byte{0x11});
  version_source hi{hi_bytes, fnv1a_checksum(hi_bytes), 16};
  version_source lo{lo_bytes, fnv1a_checksum(lo_bytes), 4};
  block_pool hi_pool{64, 2, 64};
  block_pool lo_pool{64, 2, 64};

  version_storage take(block_pool& p, const version_source& s) {
    const pool_block b = p.try_allocate();
    REQUIRE(b);
    std::memcpy(b.data.data(), s.bytes.data(), s.bytes.size());
    return {&p, b, s.bytes.size()};
  }
  static void fill(std::span<std::byte> dst, const version_source& s) {
    std::memcpy(dst.data(), s.bytes.data(), s.bytes.size());
  }
};

constexpr expert_key k{1, 2};

}  // namespace

TEST_CASE("experts start absent and handles are stable") {
  versioned_expert_table t(2, 3);
  CHECK(t.size() == 6);
  CHECK(t.state(k) == residency_state::absent);
  CHECK(t.index_of(k) == 5);
  CHECK(t.key_of(5) == k);
  const expert_handle a = t.handle(k), b = t.handle(k);
  CHECK(a);
  auto reader = t.register_reader();
  fixture f;
  t.install(k, precision_tier::low, f.take(f.lo_pool, f.lo), f.lo);
  auto g = reader.pin();
  CHECK(&a.resolve(g) == &b.resolve(g));
}

TEST_CASE("replaced: Resident-Lo → Promoting → Evicting → Resident-Hi → Demoting → Evicting → Resident-Lo") {
  fixture f;
  versioned_expert_table t(2, 3, {.low = low_version::replaced});
  auto reader = t.register_reader();
  const expert_handle h = t.handle(k);

  const version_storage lo_store = f.take(f.lo_pool, f.lo);
  t.install(k, precision_tier::low, lo_store, f.lo);
  CHECK(t.state(k) == residency_state::resident_low);
  {
    auto g = reader.pin();
    const expert_version& v = h.resolve(g);
    CHECK(v.key == k);
    CHECK(v.tier == precision_tier::low);
    CHECK(v.bits == 4);
    CHECK(v.version == 1);
    CHECK(v.data.size() == 16);
    CHECK(v.checksum == fnv1a_checksum(v.data));
  }

  // Promote: the new version is written while the handle still shows the low one.
  const pool_block hb = f.hi_pool.try_allocate();
  const std::span<std::byte> dst = t.begin(k, precision_tier::high, {&f.hi_pool, hb, 64}, f.hi);
  CHECK(dst.size() == 64);
  CHECK(t.state(k) == residency_state::promoting);
  {
    auto g = reader.pin();
    CHECK(h.resolve(g).tier == precision_tier::low);  // Promoting: still the low version
  }
  fixture::fill(dst, f.hi);
  const auto pub = t.publish(k);
  CHECK(pub.retired);
  CHECK(pub.version->version == 2);
  CHECK(t.state(k) == residency_state::evicting);
  CHECK(t.serving_tier(k) == precision_tier::high);
  {
    auto g = reader.pin();
    const expert_version& v = h.resolve(g);
    CHECK(v.tier == precision_tier::high);
    CHECK(v.version == 2);
    CHECK(v.checksum == fnv1a_checksum(v.data));
  }
  CHECK(t.safe_epoch() > pub.retire_epoch);  // nobody pinned
  const version_storage back = t.reclaim(k, t.safe_epoch());
  CHECK(back.pool == &f.lo_pool);
  CHECK(back.block.index == lo_store.block.index);
  CHECK(back.reserved == 16);
  CHECK(t.state(k) == residency_state::resident_high);
  f.lo_pool.deallocate(back.block);

  // Demote: copy the low version back in.
  const pool_block lb = f.lo_pool.try_allocate();
  const std::span<std::byte> ldst = t.begin(k, precision_tier::low, {&f.lo_pool, lb, 16}, f.lo);
  CHECK(t.state(k) == residency_state::demoting);
  {
    auto g = reader.pin();
    CHECK(h.resolve(g).tier == precision_tier::high);  // Demoting: still the high version
  }
  fixture::fill(ldst, f.lo);
  const auto pub2 = t.publish(k);
  CHECK(pub2.retired);
  CHECK(pub2.retire_epoch > pub.retire_epoch);
  CHECK(t.state(k) == residency_state::evicting);
  {
    auto g = reader.pin();
    CHECK(h.resolve(g).tier == precision_tier::low);
    CHECK(h.resolve(g).version == 3);
  }
  const version_storage hi_back = t.reclaim(k, t.safe_epoch());
  CHECK(hi_back.pool == &f.hi_pool);
  CHECK(hi_back.block.index == hb.index);
  CHECK(t.state(k) == residency_state::resident_low);
  f.hi_pool.deallocate(hi_back.block);

  std::array<version_storage, 2> out{};
  {
    auto g = reader.pin();  // an open window could still resolve the handle: nothing is done
    const evict_result busy = t.evict(k, out);
    CHECK(busy.status == evict_status::readers_pinned);
    CHECK(busy.storages == 0);
    CHECK(t.state(k) == residency_state::resident_low);
  }
  const evict_result ev = t.evict(k, out);
  CHECK(ev.status == evict_status::evicted);
  CHECK(ev.storages == 1);
  CHECK(out[0].block.index == lb.index);
  CHECK(t.state(k) == residency_state::absent);
  f.lo_pool.deallocate(out[0].block);
}

TEST_CASE("kept: promotion publishes without retiring, demotion switches back to the kept low version") {
  fixture f;
  versioned_expert_table t(2, 3, {.low = low_version::kept});
  auto reader = t.register_reader();
  const expert_handle h = t.handle(k);
  t.install(k, precision_tier::low, f.take(f.lo_pool, f.lo), f.lo);
  const expert_version* low = nullptr;
  {
    auto g = reader.pin();
    low = &h.resolve(g);
  }

  const pool_block hb = f.hi_pool.try_allocate();
  fixture::fill(t.begin(k, precision_tier::high, {&f.hi_pool, hb, 64}, f.hi), f.hi);
  CHECK(t.state(k) == residency_state::promoting);
  const auto pub = t.publish(k);
  CHECK_FALSE(pub.retired);  // the low version stays resident
  CHECK(t.state(k) == residency_state::resident_high);

  const auto sw = t.switch_to_low(k);
  CHECK(sw.retired);
  CHECK(sw.version == low);  // the same record: version 1, never rewritten
  CHECK(t.state(k) == residency_state::evicting);
  {
    auto g = reader.pin();
    CHECK(&h.resolve(g) == low);
    CHECK(h.resolve(g).version == 1);
  }
  const version_storage back = t.reclaim(k, t.safe_epoch());
  CHECK(back.pool == &f.hi_pool);
  CHECK(back.block.index == hb.index);
  CHECK(t.state(k) == residency_state::resident_low);
  f.hi_pool.deallocate(back.block);

  // A second promotion reuses the free slot and numbers the copy 3.
  const pool_block hb2 = f.hi_pool.try_allocate();
  fixture::fill(t.begin(k, precision_tier::high, {&f.hi_pool, hb2, 64}, f.hi), f.hi);
  CHECK(t.publish(k).version->version == 3);
  std::array<version_storage, 2> out{};
  const evict_result ev = t.evict(k, out);
  CHECK(ev.status == evict_status::evicted);
  CHECK(ev.storages == 2);  // both versions are resident
  for (std::size_t i = 0; i < 2; ++i) out[i].pool->deallocate(out[i].block);
}

TEST_CASE("a pinned reader holds back reclamation; a reader pinned after publication does not") {
  fixture f;
  versioned_expert_table t(1, 4);
  const expert_key e{0, 1};
  t.install(e, precision_tier::low, f.take(f.lo_pool, f.lo), f.lo);
  auto early = t.register_reader();
  auto late = t.register_reader();
  CHECK(t.pinned_readers() == 0);
  CHECK(t.safe_epoch() == std::numeric_limits<std::uint64_t>::max());

  std::optional<read_guard> g1(early.pin());  // pinned before the publication
  const expert_version& old = g1->resolve(e);
  CHECK(t.pinned_readers() == 1);
  const pool_block hb = f.hi_pool.try_allocate();
  fixture::fill(t.begin(e, precision_tier::high, {&f.hi_pool, hb, 64}, f.hi), f.hi);
  const auto pub = t.publish(e);
  CHECK(t.safe_epoch() <= pub.retire_epoch);  // g1 may still hold the low version
  CHECK(old.tier == precision_tier::low);     // and it is intact

  {
    auto g2 = late.pin();  // pinned after: sees the new version, does not block
    CHECK(g2.resolve(e).tier == precision_tier::high);
    g1.reset();
    CHECK(t.safe_epoch() > pub.retire_epoch);
  }
  f.lo_pool.deallocate(t.reclaim(e, t.safe_epoch()).block);
  std::array<version_storage, 2> out{};
  REQUIRE(t.evict(e, out).status == evict_status::evicted);
  f.hi_pool.deallocate(out[0].block);
}

TEST_CASE("a window sees one version of each handle until it unpins; the next window sees the new one") {
  fixture f;
  versioned_expert_table t(1, 4);
  const expert_key e{0, 1};
  const expert_handle h = t.handle(e);
  t.install(e, precision_tier::low, f.take(f.lo_pool, f.lo), f.lo);
  auto reader = t.register_reader();
  std::optional<read_guard> window(reader.pin());
  const expert_version* first = &h.resolve(*window);
  CHECK(first->tier == precision_tier::low);

  const pool_block hb = f.hi_pool.try_allocate();
  fixture::fill(t.begin(e, precision_tier::high, {&f.hi_pool, hb, 64}, f.hi), f.hi);
  const auto pub = t.publish(e);
  CHECK(t.serving_tier(e) == precision_tier::high);
  CHECK(pub.settle_epoch == pub.retire_epoch);
  // Gate, up and down of one pass: every resolve in the window is the version it started with.
  for (int launch = 0; launch < 3; ++launch) CHECK(&h.resolve(*window) == first);
  CHECK(&window->resolve(e) == first);
  CHECK_FALSE(t.settled(e, t.safe_epoch()));  // the window still counts the low version as current
  window.reset();

  window.emplace(reader.pin());  // the next window
  const expert_version& next = h.resolve(*window);
  CHECK(next.tier == precision_tier::high);
  CHECK(next.version == pub.version->version);
  CHECK(&h.resolve(*window) == &next);
  CHECK(window->epoch() > pub.retire_epoch);
  window.reset();
  CHECK(t.settled(e, t.safe_epoch()));
  f.lo_pool.deallocate(t.reclaim(e, t.safe_epoch()).block);
  std::array<version_storage, 2> out{};
  REQUIRE(t.evict(e, out).status == evict_status::evicted);
  f.hi_pool.deallocate(out[0].block);
}

TEST_CASE("evict reports what it could not do") {
  fixture f;
  versioned_expert_table t(1, 2);
  std::array<version_storage, 2> out{};
  CHECK(t.evict({0, 0}, out).status == evict_status::absent);
  t.install({0, 0}, precision_tier::low, f.take(f.lo_pool, f.lo), f.lo);
  const pool_block hb = f.hi_pool.try_allocate();
  fixture::fill(t.begin({0, 0}, precision_tier::high, {&f.hi_pool, hb, 64}, f.hi), f.hi);
  CHECK(t.evict({0, 0}, out).status == evict_status::in_transition);  // promoting
  static_cast<void>(t.publish({0, 0}));
  CHECK(t.evict({0, 0}, out).status == evict_status::in_transition);  // evicting its low version
  f.lo_pool.deallocate(t.reclaim({0, 0}, t.safe_epoch()).block);
  const evict_result r = t.evict({0, 0}, out);
  CHECK(r.status == evict_status::evicted);
  CHECK(r.storages == 1);
  f.hi_pool.deallocate(out[0].block);
}

TEST_CASE("reader slots are limited and given back") {
  versioned_expert_table t(1, 1, {.max_readers = 1});
  {
    auto r = t.register_reader();
    CHECK_THROWS_WITH_AS(
        static_cast<void>(t.register_reader()),
        "moepolicy::versioned_expert_table::register_reader: all max_readers reader slots are taken, got 1",
        invalid_argument);
  }
  auto again = t.register_reader();  // the slot came back
  auto moved = std::move(again);
  CHECK_THROWS_AS(static_cast<void>(t.register_reader()), invalid_argument);
}

TEST_CASE("state names follow the paper") {
  CHECK(to_string(residency_state::resident_high) == "Resident-Hi");
  CHECK(to_string(residency_state::resident_low) == "Resident-Lo");
  CHECK(to_string(residency_state::promoting) == "Promoting");
  CHECK(to_string(residency_state::demoting) == "Demoting");
  CHECK(to_string(residency_state::evicting) == "Evicting");
  CHECK(to_string(residency_state::absent) == "absent");
}

TEST_CASE("fnv1a_checksum is the standard FNV-1a") {
  CHECK(fnv1a_checksum({}) == 14695981039346656037ull);
  const std::array<std::byte, 1> a{std::byte{'a'}};
  CHECK(fnv1a_checksum(a) == 0xaf63dc4c8601ec8cull);
}

TEST_CASE("bad tables are rejected with the library's message") {
  CHECK_THROWS_WITH_AS(versioned_expert_table(0, 4),
                       "moepolicy::versioned_expert_table: num_layers must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(versioned_expert_table(2, 0),
                       "moepolicy::versioned_expert_table: num_experts must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(versioned_expert_table(2, 4, {.max_readers = 0}),
                       "moepolicy::versioned_expert_table: max_readers must be > 0, got 0", invalid_argument);
}
