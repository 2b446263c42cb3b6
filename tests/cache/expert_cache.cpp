// The expert cache container: get = find → admit? → evict → insert, capacity in experts or
// bytes, shared or per layer, prefetch and preload accounting, and its errors — against a
// scripted policy that records the events it is told.
#include "moepolicy/cache/expert_cache.hpp"

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "moepolicy/cache/lru.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

namespace {

/// Evicts the resident with the lowest (layer, expert), unless told to refuse; records
/// every event as text.
struct scripted_policy {
  struct config_type {
    bool admit = true;
    bool refuse_victims = false;
    std::vector<std::string>* log = nullptr;
  };
  scripted_policy(const cache_shape& s, const config_type& c) : shape(s), cfg(c), resident(s.slots(), 0) {}

  void on_insert(expert_key k, const access_info& i) noexcept {
    resident[shape.flat(k)] = 1;
    note((i.prefetch ? "prefetch " : "insert ") + name(k));
  }
  void on_hit(expert_key k, const access_info&) noexcept { note("hit " + name(k)); }
  void on_evict(expert_key k) noexcept {
    resident[shape.flat(k)] = 0;
    note("evict " + name(k));
  }
  void on_bypass(expert_key k, const access_info&) noexcept { note("bypass " + name(k)); }
  void on_prefetch(expert_key k, const access_info&) noexcept { note("re-prefetch " + name(k)); }
  void on_hint(expert_key k, float) noexcept { note("hint " + name(k)); }
  bool admit(expert_key, const access_info&, bool) const noexcept { return cfg.admit; }
  std::optional<expert_key> victim(std::size_t part) const noexcept {
    if (cfg.refuse_victims) return std::nullopt;
    for (std::size_t f = 0; f < shape.slots(); ++f) {
      if (resident[f] != 0 && shape.partition_of(shape.key(f)) == part) return shape.key(f);
    }
    return std::nullopt;
  }

  static std::string name(expert_key k) { return std::to_string(k.layer) + "." + std::to_string(k.expert); }
  void note(const std::string& s) noexcept {
    if (cfg.log != nullptr) cfg.log->push_back(s);
  }

  cache_shape shape;
  config_type cfg;
  std::vector<std::uint8_t> resident;
};
static_assert(EvictionPolicy<scripted_policy>);

}  // namespace

TEST_CASE("a miss is inserted, a second access hits, a full pool evicts the policy's victim first") {
  std::vector<std::string> log;
  expert_cache<scripted_policy> c({.num_layers = 2, .num_experts = 4, .capacity = 2, .expert_bytes = 10},
                                  {.log = &log});
  const access_outcome a = c.get({1, 3});
  CHECK(!a.hit);
  CHECK(a.inserted);
  CHECK(c.get({1, 3}).hit);
  c.get({0, 2});
  const access_outcome d = c.get({1, 0});  // full: evicts 0.2, the lowest resident
  CHECK(d.inserted);
  CHECK(d.evicted == 1);
  CHECK(c.last_evicted() == expert_key{0, 2});
  CHECK(!c.contains({0, 2}));
  CHECK(c.contains({1, 0}));
  CHECK(log == std::vector<std::string>{"insert 1.3", "hit 1.3", "insert 0.2", "evict 0.2", "insert 1.0"});
  const cache_stats& s = c.stats();
  CHECK(s.accesses == 4);
  CHECK(s.hits == 1);
  CHECK(s.misses == 3);
  CHECK(s.admissions == 3);
  CHECK(s.evictions == 1);
  CHECK(s.hit_bytes == 10);
  CHECK(s.demand_bytes == 30);
  CHECK(s.hit_ratio() == doctest::Approx(0.25));
  CHECK(c.resident_count() == 2);
  CHECK(c.used(0) == 2);
  c.reset_stats();
  CHECK(c.stats().accesses == 0);
  CHECK(c.resident_count() == 2);
}

TEST_CASE("per-layer pools: an expert only displaces an expert of its own layer") {
  expert_cache<lru_policy> c({.num_layers = 2, .num_experts = 4, .capacity = 1, .scope = capacity_scope::per_layer});
  c.get({0, 1});
  c.get({1, 1});
  CHECK(c.used(0) == 1);
  CHECK(c.used(1) == 1);
  c.get({0, 2});
  CHECK(!c.contains({0, 1}));
  CHECK(c.contains({1, 1}));
  CHECK(c.contains({0, 2}));
  CHECK(c.victim_for({1, 3}) == expert_key{1, 1});
  // A prefetch that evicts names its victim too; one that finds room leaves it unchanged.
  CHECK(c.last_evicted() == expert_key{0, 1});
  CHECK(c.prefetch({1, 2}, 1.0f) == prefetch_outcome::inserted);
  CHECK(c.last_evicted() == expert_key{1, 1});
  CHECK(c.stats().evictions == 2);
}

TEST_CASE("bytes capacity: an expert larger than the pool overflows; a large one evicts several") {
  std::vector<std::string> log;
  // Layer 0: experts of 3, 3, 5 and 9 bytes; layer 1 all 1 byte.
  expert_cache<scripted_policy> c({.num_layers = 2,
                                   .num_experts = 4,
                                   .capacity = 8,
                                   .unit = capacity_unit::byte_count,
                                   .footprints = {3, 3, 5, 9, 1, 1, 1, 1}},
                                  {.log = &log});
  CHECK(c.weight({0, 2}) == 5);
  c.get({0, 0});
  c.get({0, 1});
  CHECK(c.used(0) == 6);
  const access_outcome big = c.get({0, 3});  // 9 > 8: never fits, evicts nothing
  CHECK(!big.inserted);
  CHECK(big.evicted == 0);
  CHECK(c.stats().overflows == 1);
  const access_outcome five = c.get({0, 2});  // 6 + 5 > 8: evicts 0.0 then fits (3 + 5)
  CHECK(five.inserted);
  CHECK(five.evicted == 1);
  CHECK(c.used(0) == 8);
  CHECK(c.last_evicted() == expert_key{0, 0});
  c.get({1, 0});  // 8 + 1 > 8: evicts 0.1 (lowest resident)
  CHECK(c.last_evicted() == expert_key{0, 1});
  CHECK(c.used(0) == 6);
  CHECK(log.back() == "insert 1.0");
  CHECK(c.stats().demand_bytes == 3 + 3 + 9 + 5 + 1);
}

TEST_CASE("admission: a declined miss is served, not cached, and reported to the policy") {
  std::vector<std::string> log;
  expert_cache<scripted_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 2}, {.admit = false, .log = &log});
  const access_outcome o = c.get({0, 1});
  CHECK(!o.hit);
  CHECK(!o.inserted);
  CHECK(!c.contains({0, 1}));
  CHECK(c.stats().rejections == 1);
  CHECK(c.stats().misses == 1);
  CHECK(log == std::vector<std::string>{"bypass 0.1"});
  c.hint({0, 1}, 0.9f);
  CHECK(log.back() == "hint 0.1");
  // A prefetch is the prefetcher's request: admitted without asking.
  CHECK(c.prefetch({0, 1}, 0.9f) == prefetch_outcome::inserted);
  CHECK(c.contains({0, 1}));
}

TEST_CASE("no evictable victim: the miss overflows, the prefetch is dropped") {
  expert_cache<scripted_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 1}, {.refuse_victims = true});
  CHECK(c.get({0, 0}).inserted);
  CHECK(!c.get({0, 1}).inserted);
  CHECK(c.stats().overflows == 1);
  CHECK(c.prefetch({0, 2}, 1.0f) == prefetch_outcome::no_room);
  CHECK(c.stats().prefetch_dropped == 1);
  CHECK(!c.preload({0, 3}));
}

TEST_CASE("prefetch accounting: inserted, already resident, used, wasted") {
  std::vector<std::string> log;
  expert_cache<scripted_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 2, .expert_bytes = 4}, {.log = &log});
  CHECK(c.prefetch({0, 3}, 0.7f) == prefetch_outcome::inserted);
  CHECK(c.prefetch({0, 3}, 0.9f) == prefetch_outcome::already_resident);
  CHECK(c.prefetch({0, 2}, 0.5f) == prefetch_outcome::inserted);
  CHECK(c.get({0, 3}).hit);  // the prefetch paid off
  CHECK(c.get({0, 3}).hit);  // counted once
  c.get({0, 0});             // evicts 0.2, prefetched and never used
  const cache_stats& s = c.stats();
  CHECK(s.prefetches == 2);
  CHECK(s.prefetch_resident == 1);
  CHECK(s.prefetch_hits == 1);
  CHECK(s.prefetch_wasted == 1);
  CHECK(s.prefetch_bytes == 8);
  CHECK(log == std::vector<std::string>{"prefetch 0.3", "re-prefetch 0.3", "prefetch 0.2", "hit 0.3", "hit 0.3",
                                        "evict 0.2", "insert 0.0"});
}

TEST_CASE("preload and clear") {
  expert_cache<lru_policy> c({.num_layers = 2, .num_experts = 2, .capacity = 3});
  CHECK(c.preload({0, 0}));
  CHECK(c.preload({0, 0}));
  CHECK(c.preload({1, 1}));
  CHECK(c.stats().preloads == 2);
  CHECK(c.stats().accesses == 0);
  CHECK(c.get({1, 1}).hit);
  c.clear();
  CHECK(c.resident_count() == 0);
  CHECK(c.used(0) == 0);
  CHECK(c.stats().dropped == 2);
  CHECK(c.stats().evictions == 0);
  CHECK(!c.get({0, 0}).hit);
}

TEST_CASE("erase drops one resident: counted as dropped, and as wasted when a prefetch brought it unused") {
  std::vector<std::string> log;
  expert_cache<scripted_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 3}, {.log = &log});
  c.prefetch({0, 1}, 0.9f);
  c.get({0, 2});
  CHECK(c.erase({0, 1}));
  CHECK(!c.erase({0, 1}));  // no longer resident
  CHECK(c.erase({0, 2}));
  CHECK(!c.erase({0, 3}));
  CHECK(c.resident_count() == 0);
  CHECK(c.used(0) == 0);
  const cache_stats& s = c.stats();
  CHECK(s.dropped == 2);
  CHECK(s.evictions == 0);
  CHECK(s.prefetch_wasted == 1);
  CHECK(log == std::vector<std::string>{"prefetch 0.1", "insert 0.2", "evict 0.1", "evict 0.2"});
}

TEST_CASE("capacity 0 caches nothing") {
  expert_cache<lru_policy> c({.num_layers = 1, .num_experts = 2, .capacity = 0});
  CHECK(!c.get({0, 0}).inserted);
  CHECK(!c.get({0, 0}).hit);
  CHECK(c.stats().overflows == 2);
}

TEST_CASE("footprints from a device model") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const roofline_cost gpu(presets::h100_pcie_gen5(), m);
  const auto f = footprints_of(gpu, 2, 3, bitwidth{4});
  REQUIRE(f.size() == 6);
  CHECK(f[5] == expert_bytes(m, bitwidth{4}));
  expert_cache<lru_policy> c(
      {.num_layers = 2, .num_experts = 3, .capacity = 2 * f[0], .unit = capacity_unit::byte_count, .footprints = f});
  c.get({0, 0});
  c.get({0, 1});
  c.get({1, 2});
  CHECK(c.resident_count() == 2);
  CHECK(c.stats().evictions == 1);
}

TEST_CASE("bad configurations name the problem") {
  using cache = expert_cache<lru_policy>;
  CHECK_THROWS_WITH_AS(static_cast<void>(cache({.num_layers = 0, .num_experts = 4})),
                       "moepolicy::expert_cache: num_layers must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(cache({.num_layers = 1, .num_experts = 4, .footprints = {1, 2}})),
                       "moepolicy::expert_cache: footprints must be empty or hold num_layers * num_experts = 4 "
                       "entries, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(cache({.num_layers = 1, .num_experts = 4, .unit = capacity_unit::byte_count})),
                       "moepolicy::expert_cache: a bytes-unit cache needs footprints or expert_bytes > 0, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(
          cache({.num_layers = 1, .num_experts = 2, .unit = capacity_unit::byte_count, .footprints = {3, 0}})),
      "moepolicy::expert_cache: footprints must be > 0 in a bytes-unit cache; entry 1, got 0", invalid_argument);
}
