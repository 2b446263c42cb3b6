#include "moepolicy/predict/precision_target.hpp"

#include "../../residency/allocation_counter.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

using namespace moepolicy;

namespace {

using ids = std::vector<expert_id>;

ids v(std::span<const expert_id> s) { return {s.begin(), s.end()}; }
std::vector<std::uint8_t> bits(std::span<const std::uint8_t> s) { return {s.begin(), s.end()}; }

std::vector<std::uint8_t> mask(std::size_t experts, std::initializer_list<expert_id> members) {
  std::vector<std::uint8_t> m(experts, 0);
  for (expert_id e : members) m[e] = 1;
  return m;
}

}  // namespace

TEST_CASE("configurations compare equal field by field") {
  const precision_target_config a{.mode = target_hysteresis::margin, .margin = 0.01};
  CHECK(a == precision_target_config{.mode = target_hysteresis::margin, .margin = 0.01});
  CHECK_FALSE(a == precision_target_config{.mode = target_hysteresis::none, .margin = 0.01});
  CHECK_FALSE(a == precision_target_config{.mode = target_hysteresis::margin, .margin = 0.02});
  CHECK_FALSE(a == precision_target_config{.mode = target_hysteresis::margin, .margin = 0.01, .rank_slack = 1});
  CHECK_FALSE(a == precision_target_config{.mode = target_hysteresis::margin,
                                           .margin = 0.01,
                                           .slack_form = rank_slack_form::protect_members});
  CHECK_FALSE(a == precision_target_config{.mode = target_hysteresis::margin, .margin = 0.01, .min_hotness = -1.0});
}

TEST_CASE("plain top-n: ties go to the lower id, unseen experts stay low") {
  precision_target_selector sel(1, 6, 2, {.mode = target_hysteresis::none});
  // h:        id0 id1 id2 id3 id4 id5
  const std::vector<double> h{5, 1, 5, 3, 0, 2};
  // Ranking: 0 (5), 2 (5, tie → after 0), 3 (3), 5 (2), 1 (1), 4 (0).  Top-2 = {0, 2}.
  const auto t = sel.select(0, h);
  CHECK(v(t.target) == ids{0, 2});
  CHECK(v(t.promote) == ids{0, 2});
  CHECK(v(t.demote).empty());
  CHECK(bits(sel.membership(0)) == std::vector<std::uint8_t>{1, 0, 1, 0, 0, 0});

  // With room for all six, id4 (hotness 0) is still not promoted.
  sel.set_capacity(0, 6);
  const auto all = sel.select(0, h);
  CHECK(v(all.target) == ids{0, 2, 3, 5, 1});
  CHECK(v(all.promote) == ids{3, 5, 1});
}

TEST_CASE("min_hotness below zero gives the literal top-n over every expert") {
  precision_target_selector sel(1, 3, 2, {.mode = target_hysteresis::none, .min_hotness = -1.0});
  const std::vector<double> h{0, 0, 0};
  CHECK(v(sel.select(0, h).target) == ids{0, 1});
}

TEST_CASE("additive margin: a swap needs the outsider hotter than the member by more than δ") {
  // E = 5, n = 2, H = {0, 1}.
  // h:        id0  id1  id2  id3  id4
  const std::vector<double> h{4.0, 2.0, 2.5, 3.1, 0.5};
  const auto H = mask(5, {0, 1});
  // Ranking: 0 (4.0), 3 (3.1), 2 (2.5), 1 (2.0), 4 (0.5). Plain top-2 would be {0, 3}.
  SUBCASE("δ = 1.0: coldest member 1 (2.0) vs hottest outsider 3 (3.1): 3.1 > 3.0, swap") {
    precision_target_selector sel(1, 5, 2, {.mode = target_hysteresis::margin, .margin = 1.0});
    const auto t = sel.select(0, h, H);
    // Next pair: coldest member 0 (4.0) vs outsider 2 (2.5): 2.5 > 5.0 fails, stop.
    CHECK(v(t.target) == ids{0, 3});
    CHECK(v(t.promote) == ids{3});
    CHECK(v(t.demote) == ids{1});
  }
  SUBCASE("δ = 1.2: 3.1 > 3.2 fails, nothing changes") {
    precision_target_selector sel(1, 5, 2, {.mode = target_hysteresis::margin, .margin = 1.2});
    const auto t = sel.select(0, h, H);
    CHECK(v(t.target) == ids{0, 1});
    CHECK(v(t.promote).empty());
    CHECK(v(t.demote).empty());
  }
}

TEST_CASE("additive margin pairs the i-th coldest member with the i-th hottest outsider") {
  // E = 6, n = 3, H = {3, 4, 5}, δ = 0.5.
  // h:        id0 id1 id2 id3 id4 id5
  const std::vector<double> h{9, 8, 1, 2, 7, 0.5};
  // Ranking: 0 (9), 1 (8), 4 (7), 3 (2), 2 (1), 5 (0.5).
  // Pair 1: member 5 (0.5) vs outsider 0 (9): 9 > 1.0, swap.
  // Pair 2: member 3 (2)   vs outsider 1 (8): 8 > 2.5, swap.
  // Pair 3: member 4 (7)   vs outsider 2 (1): 1 > 7.5 fails, stop.
  precision_target_selector sel(1, 6, 3, {.mode = target_hysteresis::margin, .margin = 0.5});
  const auto t = sel.select(0, h, mask(6, {3, 4, 5}));
  CHECK(v(t.target) == ids{0, 1, 4});
  CHECK(v(t.promote) == ids{0, 1});
  CHECK(v(t.demote) == ids{5, 3});  // coldest first
}

TEST_CASE("a shrunk capacity demotes the coldest members whatever the margin") {
  // H = {0, 1, 2}, n = 2, h = [1, 3, 2], δ = 10: keep the best two members, 1 and 2.
  precision_target_selector sel(1, 3, 3, {.mode = target_hysteresis::margin, .margin = 10.0});
  sel.set_capacity(0, 2);
  const auto t = sel.select(0, std::vector<double>{1, 3, 2}, mask(3, {0, 1, 2}));
  CHECK(v(t.target) == ids{1, 2});
  CHECK(v(t.promote).empty());
  CHECK(v(t.demote) == ids{0});
}

TEST_CASE("free slots fill without a margin; members without traffic leave") {
  SUBCASE("fill") {
    // H = {1}, n = 2, h = [0.2, 5, 0.3], δ = 100: slot 2 is free, so the best outsider (2) enters.
    precision_target_selector sel(1, 3, 2, {.mode = target_hysteresis::margin, .margin = 100.0});
    const auto t = sel.select(0, std::vector<double>{0.2, 5, 0.3}, mask(3, {1}));
    CHECK(v(t.target) == ids{1, 2});
    CHECK(v(t.promote) == ids{2});
    CHECK(v(t.demote).empty());
  }
  SUBCASE("cold member") {
    // H = {0, 1}, n = 2, h = [0, 1, 0.5]: member 0 is not eligible (h <= 0), outsider 2 takes its slot.
    precision_target_selector sel(1, 3, 2, {.mode = target_hysteresis::margin, .margin = 0.0});
    const auto t = sel.select(0, std::vector<double>{0, 1, 0.5}, mask(3, {0, 1}));
    CHECK(v(t.target) == ids{1, 2});
    CHECK(v(t.promote) == ids{2});
    CHECK(v(t.demote) == ids{0});
  }
}

TEST_CASE("with δ = 0, ties stay with the incumbents") {
  // n = 1, H = {1}, h = [2, 2]: plain top-1 picks 0 (lower id), the margin rule keeps 1.
  precision_target_selector sel(1, 2, 1, {.mode = target_hysteresis::margin, .margin = 0.0});
  CHECK(v(sel.select(0, std::vector<double>{2, 2}, mask(2, {1})).target) == ids{1});
}

TEST_CASE("symmetric rank slack: stay while r < n + s, enter only with r < n − s") {
  // E = 8, n = 3, s = 1: members stay at ranks 0..3, outsiders enter at ranks 0..1.
  // h = [8, 7, …, 1] so that expert i has rank i.
  const std::vector<double> h{8, 7, 6, 5, 4, 3, 2, 1};
  precision_target_selector sel(1, 8, 3, {.mode = target_hysteresis::rank_slack, .rank_slack = 1});
  SUBCASE("entrants 0 and 1 displace the worst stayer") {
    // H = {2, 3, 6}: stayers 2 (r2), 3 (r3); 6 (r6) leaves. Entrants 0 (r0), 1 (r1).
    // Walking ranks with n = 3: 0 (entrant), 1 (entrant), 2 (stayer) — 3 does not fit.
    const auto t = sel.select(0, h, mask(8, {2, 3, 6}));
    CHECK(v(t.target) == ids{0, 1, 2});
    CHECK(v(t.promote) == ids{0, 1});
    CHECK(v(t.demote) == ids{6, 3});
  }
  SUBCASE("an outsider at rank n − s is not enough") {
    // H = {0, 1, 3}: outsider 2 has r2, not < 2; member 3 has r3 < 4 and stays. Plain top-3
    // would swap 3 for 2.
    const auto t = sel.select(0, h, mask(8, {0, 1, 3}));
    CHECK(v(t.target) == ids{0, 1, 3});
    CHECK(v(t.promote).empty());
    CHECK(v(t.demote).empty());
  }
  SUBCASE("a member at rank n + s leaves and the best outsider fills its slot") {
    // H = {0, 1, 4}: 4 has r4, not < 4. Stayers 0, 1; no entrant (2 has r2); the free slot
    // goes to the best outsider, 2.
    const auto t = sel.select(0, h, mask(8, {0, 1, 4}));
    CHECK(v(t.target) == ids{0, 1, 2});
    CHECK(v(t.promote) == ids{2});
    CHECK(v(t.demote) == ids{4});
  }
}

TEST_CASE("protect-members rank slack: outsiders only take free slots") {
  // E = 8, n = 3, s = 1: members stay at ranks 0..3.
  const std::vector<double> h{8, 7, 6, 5, 4, 3, 2, 1};
  precision_target_selector sel(
      1, 8, 3,
      {.mode = target_hysteresis::rank_slack, .rank_slack = 1, .slack_form = rank_slack_form::protect_members});
  SUBCASE("all members within n + s: nothing changes, though outsider 1 has rank 1") {
    const auto t = sel.select(0, h, mask(8, {0, 2, 3}));
    CHECK(v(t.target) == ids{0, 2, 3});
    CHECK(v(t.promote).empty());
  }
  SUBCASE("member 5 (r5) leaves; the best outsider, 1, takes the slot") {
    const auto t = sel.select(0, h, mask(8, {0, 2, 5}));
    CHECK(v(t.target) == ids{0, 1, 2});
    CHECK(v(t.promote) == ids{1});
    CHECK(v(t.demote) == ids{5});
  }
}

TEST_CASE("rank slack 0 is the plain top-n") {
  const std::vector<double> h{1, 4, 3, 2};
  precision_target_selector sel(1, 4, 2, {.mode = target_hysteresis::rank_slack, .rank_slack = 0});
  CHECK(v(sel.select(0, h, mask(4, {0, 3})).target) == ids{1, 2});
}

TEST_CASE("over intervals, the selector's own targets damp oscillation") {
  // n = 1, δ = 1, the selector remembers its last target.
  precision_target_selector sel(2, 2, 1, {.mode = target_hysteresis::margin, .margin = 1.0});
  auto t = sel.select(1, std::vector<double>{2, 1});  // empty set: free slot → {0}
  CHECK(v(t.target) == ids{0});
  t = sel.select(1, std::vector<double>{2, 2.5});  // 2.5 > 3 fails → {0}
  CHECK(v(t.target) == ids{0});
  CHECK(v(t.promote).empty());
  t = sel.select(1, std::vector<double>{2, 3.5});  // 3.5 > 3 → {1}
  CHECK(v(t.target) == ids{1});
  CHECK(v(t.promote) == ids{1});
  CHECK(v(t.demote) == ids{0});
  // Layer 0 is untouched, and `last` repeats layer 1's result.
  CHECK(bits(sel.membership(0)) == std::vector<std::uint8_t>{0, 0});
  CHECK(v(sel.last(1).target) == ids{1});
  sel.reset();
  CHECK(bits(sel.membership(1)) == std::vector<std::uint8_t>{0, 0});
  CHECK(sel.last(1).target.empty());
}

// Every hysteresis mode, with and without a margin, and both forms of the rank slack.
const precision_target_config every_mode[] = {
    {.mode = target_hysteresis::none},
    {.mode = target_hysteresis::margin, .margin = 0.0},
    {.mode = target_hysteresis::margin, .margin = 1.5},
    {.mode = target_hysteresis::rank_slack, .rank_slack = 2},
    {.mode = target_hysteresis::rank_slack, .rank_slack = 3, .slack_form = rank_slack_form::protect_members},
};

TEST_CASE("invariants on random inputs, every mode, both rankings") {
  std::mt19937_64 rng(20240611);
  for (const std::size_t E : {std::size_t{24}, std::size_t{130}}) {  // comparison sort, radix sort
    const auto& configs = every_mode;
    for (const auto& cfg : configs) {
      precision_target_selector sel(1, E, 6, cfg);
      for (int trial = 0; trial < 300; ++trial) {
        const auto n = static_cast<std::uint32_t>(rng() % (E + 1));
        sel.set_capacity(0, n);
        std::vector<double> h(E);
        for (auto& x : h) x = static_cast<double>(rng() % 8);  // many ties and zeros
        std::vector<std::uint8_t> cur(E);
        for (auto& c : cur) c = (rng() % 3 == 0) ? 1 : 0;
        const auto t = sel.select(0, h, cur);
        REQUIRE(t.target.size() <= n);
        std::vector<std::uint8_t> next(E, 0);
        for (expert_id e : t.target) next[e] = 1;
        for (expert_id e : t.promote) REQUIRE((next[e] == 1 && cur[e] == 0));
        for (expert_id e : t.demote) REQUIRE((next[e] == 0 && cur[e] == 1));
        std::size_t changes = 0;
        for (std::size_t e = 0; e < E; ++e) changes += next[e] != cur[e];
        REQUIRE(changes == t.promote.size() + t.demote.size());
        REQUIRE(bits(sel.membership(0)) == next);
        for (expert_id e : t.target) REQUIRE(h[e] > 0.0);  // eligibility
        // Never leaves a slot empty while an eligible outsider exists.
        const auto eligible =
            static_cast<std::size_t>(std::count_if(h.begin(), h.end(), [](double x) { return x > 0.0; }));
        REQUIRE(t.target.size() == std::min<std::size_t>(n, eligible));
        if (cfg.mode == target_hysteresis::margin) {
          for (std::size_t o = 0; o < E; ++o) {
            if (next[o] != 0 || !(h[o] > 0.0)) continue;
            for (expert_id m : t.target) REQUIRE(h[o] <= h[m] + cfg.margin);
          }
        }
        if (cfg.mode == target_hysteresis::none) {
          std::vector<expert_id> order(E);
          for (std::size_t i = 0; i < E; ++i) order[i] = static_cast<expert_id>(i);
          std::stable_sort(order.begin(), order.end(), [&](expert_id a, expert_id b) { return h[a] > h[b]; });
          order.resize(t.target.size());
          REQUIRE(v(t.target) == order);
        }
      }
    }
  }
}

TEST_CASE("the radix ranking orders signed values, signed zeros and ties like the comparison") {
  // 160 experts (radix path): values in {−2, −1, −0, +0, 0.5, 1, 3}, many ties.
  const std::size_t E = 160;
  const double pool[] = {-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 3.0};
  std::vector<double> h(E);
  std::mt19937 rng(5);
  for (auto& x : h) x = pool[rng() % 7];
  precision_target_selector sel(1, E, static_cast<std::uint32_t>(E),
                                {.mode = target_hysteresis::none, .min_hotness = -1e300});
  std::vector<expert_id> want(E);
  for (std::size_t i = 0; i < E; ++i) want[i] = static_cast<expert_id>(i);
  std::stable_sort(want.begin(), want.end(), [&](expert_id a, expert_id b) { return h[a] > h[b]; });
  CHECK(v(sel.select(0, h).target) == want);
}

TEST_CASE("bad selector inputs are rejected with the library's message") {
  const std::array<std::uint32_t, 2> caps{2, 5};
  CHECK_THROWS_WITH_AS(precision_target_selector(caps, 4),
                       "moepolicy::precision_target_selector: capacity must be <= num_experts, got 5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(precision_target_selector(std::span<const std::uint32_t>{}, 4),
                       "moepolicy::precision_target_selector: num_layers must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(precision_target_selector(2, 0, 0),
                       "moepolicy::precision_target_selector: num_experts must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(precision_target_selector(2, 4, 1, {.margin = -1.0}),
                       "moepolicy::precision_target_selector: margin must be finite and >= 0, got -1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(precision_target_selector(2, 4, 1, {.margin = std::numeric_limits<double>::quiet_NaN()}),
                       "moepolicy::precision_target_selector: margin must be finite and >= 0, got nan",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(precision_target_selector(2, 4, 1, {.min_hotness = std::numeric_limits<double>::infinity()}),
                       "moepolicy::precision_target_selector: min_hotness must be finite, got inf", invalid_argument);
  precision_target_selector sel(2, 4, 1);
  CHECK_THROWS_WITH_AS(sel.set_capacity(2, 1),
                       "moepolicy::precision_target_selector::set_capacity: layer must be < num_layers, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(sel.set_capacity(0, 5),
                       "moepolicy::precision_target_selector::set_capacity: capacity must be <= num_experts, got 5",
                       invalid_argument);
}

TEST_CASE("select allocates nothing after construction") {
  for (const std::size_t E : {std::size_t{16}, std::size_t{256}}) {
    std::vector<double> h(E);
    for (std::size_t e = 0; e < E; ++e) h[e] = static_cast<double>((e * 37) % 11);
    for (const auto mode : {target_hysteresis::none, target_hysteresis::margin, target_hysteresis::rank_slack}) {
      precision_target_selector sel(2, E, static_cast<std::uint32_t>(E / 4), {.mode = mode, .rank_slack = 1});
      const std::size_t n = count_allocations([&] {
        static_cast<void>(sel.select(0, h));
        static_cast<void>(sel.select(1, h, sel.membership(0)));
        h[3] += 5.0;
        static_cast<void>(sel.select(0, h));
      });
      CHECK(n == 0);
    }
  }
}

TEST_CASE("select_ranked with a shared rank_only ranking equals select, every mode, both rankings") {
  std::mt19937_64 rng(20261127);
  for (const std::size_t E : {std::size_t{8}, std::size_t{24}, std::size_t{130}}) {  // comparison sort, radix sort
    const auto& configs = every_mode;
    // One ranker of another configuration and capacity serves every selector.
    precision_target_selector ranker(1, E, 0, {.mode = target_hysteresis::none});
    for (const auto& cfg : configs) {
      precision_target_selector alone(2, E, 3, cfg), shared(2, E, 3, cfg);
      for (int trial = 0; trial < 200; ++trial) {
        const auto n = static_cast<std::uint32_t>(rng() % (E + 1));
        const auto layer = static_cast<layer_id>(trial % 2);
        alone.set_capacity(layer, n);
        shared.set_capacity(layer, n);
        std::vector<double> h(E);
        for (auto& x : h) x = static_cast<double>(rng() % 8) - (rng() % 5 == 0 ? 0.0 : 1.0);  // ties, zeros, < 0
        std::vector<std::uint8_t> cur(E);
        for (auto& c : cur) c = (rng() % 3 == 0) ? 1 : 0;
        const auto a = alone.select(layer, h, cur);
        const auto order = ranker.rank_only(h);
        const auto b = shared.select_ranked(layer, h, order, cur);
        REQUIRE(v(a.target) == v(b.target));
        REQUIRE(v(a.promote) == v(b.promote));
        REQUIRE(v(a.demote) == v(b.demote));
        REQUIRE(bits(alone.membership(layer)) == bits(shared.membership(layer)));
      }
    }
  }
}
