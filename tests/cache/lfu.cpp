// LFU: counts every demand access (kept across evictions), optionally decayed per step.
#include "moepolicy/cache/lfu.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

TEST_CASE("LFU evicts the least frequently used; ties go to the least recently used") {
  expert_cache<lfu_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 3});
  for (int e : {1, 1, 2, 3}) c.get({0, static_cast<expert_id>(e)});
  CHECK(c.policy().victim(0) == expert_key{0, 2});  // 2 and 3 once each; 2 older
  c.get({0, 4});                                    // evicts 2
  CHECK(!c.contains({0, 2}));
  c.get({0, 3});
  CHECK(c.policy().victim(0) == expert_key{0, 4});
  CHECK(c.policy().frequency({0, 1}) == doctest::Approx(2.0));
}

TEST_CASE("LFU counts survive eviction and count misses that were not cached") {
  expert_cache<lfu_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 1});
  c.get({0, 0});
  c.get({0, 1});  // evicts 0 (count 1, older)
  c.get({0, 0});  // 0 counts 2 now: 1 (count 1) is the victim
  CHECK(c.policy().frequency({0, 0}) == doctest::Approx(2.0));
  CHECK(c.contains({0, 0}));
  expert_cache<lfu_policy> zero({.num_layers = 1, .num_experts = 4, .capacity = 0});
  zero.get({0, 2});
  zero.get({0, 2});
  CHECK(zero.policy().frequency({0, 2}) == doctest::Approx(2.0));
}

TEST_CASE("decayed LFU forgets old popularity; rescaling keeps the order") {
  expert_cache<lfu_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 2}, {.decay = 0.5});
  c.get({0, 0});
  c.get({0, 0});
  for (int i = 0; i < 3; ++i) c.end_step();
  c.get({0, 1});
  CHECK(c.policy().frequency({0, 0}) == doctest::Approx(0.25));
  CHECK(c.policy().frequency({0, 1}) == doctest::Approx(1.0));
  CHECK(c.policy().victim(0) == expert_key{0, 0});

  // decay 0.01: the lazy scale passes 1e100 after 51 steps and is folded back.
  expert_cache<lfu_policy> r({.num_layers = 1, .num_experts = 4, .capacity = 2}, {.decay = 0.01});
  r.get({0, 2});
  r.get({0, 3});
  for (int i = 0; i < 60; ++i) {
    r.end_step();
    r.get({0, 3});
  }
  CHECK(r.policy().victim(0) == expert_key{0, 2});
  CHECK(r.policy().frequency({0, 3}) == doctest::Approx(1.0101010101).epsilon(1e-6));
  CHECK_THROWS_WITH_AS(lfu_policy({1, 1}, {.decay = 0.0}), "moepolicy::lfu_policy: decay must be in (0, 1], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(lfu_policy({1, 1}, {.decay = 1.5}), "moepolicy::lfu_policy: decay must be in (0, 1], got 1.5",
                       invalid_argument);
}

namespace {

// The definition of LFU without a heap: the victim is the resident whose rank at its last
// insert or hit — (count, access number), then the slot — is lowest, found by a scan.
// Counts use the same lazy decay arithmetic as `lfu_policy`, so ranks compare exactly.
class scanning_lfu {
 public:
  using config_type = lfu_config;
  scanning_lfu(const cache_shape& s, const lfu_config& c)
      : shape_(s), growth_(1.0 / c.decay), counts_(s.slots(), 0.0), rank_(s.slots()), in_(s.slots(), 0) {}
  void on_insert(expert_key k, const access_info&) noexcept {
    in_[shape_.flat(k)] = 1;
    touch(k);
  }
  void on_hit(expert_key k, const access_info&) noexcept { touch(k); }
  void on_bypass(expert_key k, const access_info&) noexcept { counts_[shape_.flat(k)] += scale_, ++clock_; }
  void on_evict(expert_key k) noexcept { in_[shape_.flat(k)] = 0; }
  void on_step_end() noexcept {
    if (growth_ == 1.0) return;
    scale_ *= growth_;
    if (scale_ > 1e100) {
      for (std::size_t f = 0; f < counts_.size(); ++f) {
        counts_[f] /= scale_;
        rank_[f].first = counts_[f];
      }
      scale_ = 1.0;
    }
  }
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    std::optional<std::size_t> best;
    for (std::size_t f = 0; f < in_.size(); ++f) {
      if (in_[f] == 0 || shape_.partition_of(shape_.key(f)) != part) continue;
      if (!best || rank_[f] < rank_[*best]) best = f;  // equal ranks: the lower slot stays
    }
    if (!best) return std::nullopt;
    return shape_.key(*best);
  }

 private:
  void touch(expert_key k) noexcept {
    const std::size_t f = shape_.flat(k);
    counts_[f] += scale_;
    rank_[f] = {counts_[f], ++clock_};
  }
  cache_shape shape_;
  double growth_;
  double scale_ = 1.0;
  std::uint64_t clock_ = 0;
  std::vector<double> counts_;
  std::vector<std::pair<double, std::uint64_t>> rank_;
  std::vector<std::uint8_t> in_;
};
static_assert(EvictionPolicy<scanning_lfu>);

}  // namespace

TEST_CASE("LFU's lazily sifted heap picks the same victims as a scan over every resident") {
  std::mt19937_64 rng(16);
  for (const double decay : {1.0, 0.5, 0.01}) {
    for (const capacity_scope scope : {capacity_scope::shared, capacity_scope::per_layer}) {
      CAPTURE(decay);
      CAPTURE(to_string(scope));
      const cache_config cfg{.num_layers = 3, .num_experts = 16, .capacity = 5, .scope = scope};
      expert_cache<lfu_policy> lazy(cfg, {.decay = decay});
      expert_cache<scanning_lfu> scan(cfg, {.decay = decay});
      for (int step = 0; step < 120; ++step) {
        for (int i = 0; i < 24; ++i) {
          // Skewed popularity, so that counts tie and differ and residents are hit often.
          const auto e = static_cast<expert_id>(std::min(rng() % 16, rng() % 16));
          const expert_key k{static_cast<layer_id>(rng() % 3), e};
          if (rng() % 8 == 0) {
            lazy.prefetch(k, 1.0F);
            scan.prefetch(k, 1.0F);
          } else {
            REQUIRE(lazy.get(k).hit == scan.get(k).hit);
          }
          for (std::size_t p = 0; p < cfg.shape().partitions(); ++p) {
            REQUIRE(lazy.policy().victim(p) == scan.policy().victim(p));
          }
        }
        lazy.end_step();
        scan.end_step();
      }
      CHECK(lazy.stats().hits == scan.stats().hits);
      CHECK(lazy.stats().evictions == scan.stats().evictions);
    }
  }
}
