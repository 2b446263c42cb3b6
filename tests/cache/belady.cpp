// Belady's MIN: the victim is needed farthest in the future; a miss needed later than
// every resident is not cached.
#include "moepolicy/cache/belady.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

namespace {

std::vector<expert_key> keys(std::initializer_list<int> ids) {
  std::vector<expert_key> out;
  for (int e : ids) out.push_back({0, static_cast<expert_id>(e)});
  return out;
}

cache_stats run(const std::vector<expert_key>& seq, std::uint64_t capacity) {
  const auto next = next_use_positions(seq, 1, 8);
  expert_cache<belady_policy> c({.num_layers = 1, .num_experts = 8, .capacity = capacity});
  for (std::size_t i = 0; i < seq.size(); ++i) c.get(seq[i], {.next_use = next[i]});
  return c.stats();
}

}  // namespace

TEST_CASE("next-use positions") {
  const auto next = next_use_positions(keys({1, 2, 1, 3, 2, 1}), 1, 8);
  CHECK(next == std::vector<std::uint64_t>{2, 4, 5, no_next_use, no_next_use, no_next_use});
}

TEST_CASE("Belady on the textbook reference string: 7 misses with 3 frames") {
  // 1 2 3 4 1 2 5 1 2 3 4 5: OPT faults 7 times with 3 frames.
  const cache_stats s = run(keys({1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5}), 3);
  CHECK(s.misses == 7);
  CHECK(s.hits == 5);
}

TEST_CASE("Belady declines a miss needed later than every resident") {
  // Capacity 1, a b a: demand paging would miss 3 times; MIN keeps a and misses twice.
  const cache_stats s = run(keys({1, 2, 1}), 1);
  CHECK(s.hits == 1);
  CHECK(s.rejections == 1);
  CHECK(s.evictions == 0);
}

TEST_CASE("Belady's victim is the resident needed farthest ahead") {
  belady_policy p({1, 4});
  p.on_insert({0, 0}, {.next_use = 10});
  p.on_insert({0, 1}, {.next_use = no_next_use});
  p.on_insert({0, 2}, {.next_use = 5});
  CHECK(p.victim(0) == expert_key{0, 1});
  p.on_hit({0, 1}, {.next_use = 3});
  CHECK(p.victim(0) == expert_key{0, 0});
  CHECK(p.admit({0, 3}, {.next_use = 7}, true));
  CHECK(!p.admit({0, 3}, {.next_use = 12}, true));
  CHECK(p.admit({0, 3}, {.next_use = 12}, false));
}

TEST_CASE("Belady's victim after any sequence of events: the farthest resident, ties to the lower key") {
  // Random skewed sequences (so several residents are never needed again and tie), both
  // scopes and several capacities: after every access the policy's victim in the accessed
  // pool is the one a scan of the residents finds.
  std::size_t checked = 0;
  for (std::uint32_t seed = 1; seed <= 12; ++seed) {
    std::mt19937 rng(seed);
    constexpr std::uint32_t L = 3, E = 6;
    const capacity_scope scope = seed % 2 == 0 ? capacity_scope::shared : capacity_scope::per_layer;
    const std::uint64_t capacity = scope == capacity_scope::shared ? 2 + seed % 9 : 1 + seed % 5;
    std::geometric_distribution<std::uint32_t> skew(0.35);
    std::vector<expert_key> seq;
    for (int i = 0; i < 600; ++i) {
      seq.push_back({static_cast<layer_id>(rng() % L), static_cast<expert_id>(std::min(skew(rng), E - 1))});
    }
    const std::vector<std::uint64_t> next = next_use_positions(seq, L, E);
    expert_cache<belady_policy> c({.num_layers = L, .num_experts = E, .capacity = capacity, .scope = scope});
    std::vector<std::uint64_t> given(L * E, no_next_use);  // the next use each resident was last given
    for (std::size_t i = 0; i < seq.size(); ++i) {
      c.get(seq[i], {.next_use = next[i]});
      given[seq[i].flat(E)] = next[i];
      std::optional<expert_key> want;
      for (std::uint32_t l = 0; l < L; ++l) {
        if (scope == capacity_scope::per_layer && l != seq[i].layer) continue;
        for (std::uint32_t e = 0; e < E; ++e) {
          const expert_key k{static_cast<layer_id>(l), static_cast<expert_id>(e)};
          if (!c.contains(k)) continue;
          if (!want || given[k.flat(E)] > given[want->flat(E)]) want = k;
        }
      }
      CHECK(c.victim_for(seq[i]) == want);
      ++checked;
    }
  }
  CHECK(checked == 12 * 600);
}
