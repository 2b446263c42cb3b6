// Tests of balance/ndp_rebalance.hpp on hand-worked cases, and against a direct scan of
// every expert per move on random layers.
#include "moepolicy/balance/ndp_rebalance.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <random>
#include <vector>

using namespace moepolicy;

namespace {
using enum hotness;
constexpr auto loc = [](std::uint16_t d) { return expert_layout::localized(d); };
// D = 3. Cold localized: e0 = 4 and e1 = 3 and e2 = 1 on DIMM 0, e3 = 2 on DIMM 1.
// e4 (5, DIMM 2) is warm and e5 (2) striped: neither counts.
const std::array<double, 6> weights{4.0, 3.0, 1.0, 2.0, 5.0, 2.0};
const std::array<hotness, 6> classes{cold, cold, cold, cold, warm, cold};
const std::array<expert_layout, 6> layouts{loc(0), loc(0), loc(0), loc(1), loc(2), expert_layout::striped()};
}  // namespace

TEST_CASE("cold experts move one by one from the busiest DIMM to the most idle") {
  // Loads: DIMM 0 = 4 + 3 + 1 = 8, DIMM 1 = 2, DIMM 2 = 0; mean 10/3, skew 8 > 1.1 · 10/3.
  // Move 1: busiest 0, idlest 2, gap 8. After-move maxima: e0 max(4, 4) = 4, e1 max(5, 3)
  //   = 5, e2 max(7, 1) = 7: e0 goes, relief 8 − 4 = 4. Loads (4, 2, 4).
  // Move 2: busiest 0 (first of the 4s), idlest 1, gap 2: e1 (3) is not < 2; e2 (1):
  //   max(3, 3) = 3: e2 goes, relief 1. Loads (3, 3, 4).
  // Move 3: busiest 2, idlest 0, gap 1: the only cold expert on DIMM 2 is e0 (4 >= 1): stop.
  ndp_rebalancer r(3, 6);
  const auto moves = r.plan(weights, classes, layouts);
  REQUIRE(moves.size() == 2);
  CHECK(moves[0].expert == 0);
  CHECK(moves[0].from == 0);
  CHECK(moves[0].to == 2);
  CHECK(moves[0].load == 4.0);
  CHECK(moves[0].relief == doctest::Approx(4.0));
  CHECK(moves[1].expert == 2);
  CHECK(moves[1].from == 0);
  CHECK(moves[1].to == 1);
  CHECK(moves[1].relief == doctest::Approx(1.0));
  CHECK(r.dimm_loads()[0] == doctest::Approx(3.0));
  CHECK(r.dimm_loads()[1] == doctest::Approx(3.0));
  CHECK(r.dimm_loads()[2] == doctest::Approx(4.0));
}

TEST_CASE("no skew, no moves; the move cap holds") {
  // Threshold 1.5: skew needs DIMM 0 above 2.5 · 10/3 = 8.33; it holds 8.
  ndp_rebalancer calm(3, 6, {.skew_threshold = 1.5});
  CHECK(calm.plan(weights, classes, layouts).empty());
  CHECK(calm.dimm_loads()[0] == doctest::Approx(8.0));
  ndp_rebalancer one(3, 6, {.max_moves = 1});
  CHECK(one.plan(weights, classes, layouts).size() == 1);
  // A single cold expert cannot be rebalanced: moving it only moves the skew (x < gap fails).
  const std::array<double, 2> w{2.0, 0.0};
  const std::array<hotness, 2> c{cold, warm};
  const std::array<expert_layout, 2> l{loc(0), loc(1)};
  ndp_rebalancer lone(2, 2);
  CHECK(lone.plan(w, c, l).empty());
}

TEST_CASE("ndp_rebalancer: bad configuration") {
  CHECK_THROWS_WITH_AS(ndp_rebalancer(0, 4), "moepolicy::ndp_rebalancer: num_dimms must be in [1, 65534], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ndp_rebalancer(2, 0), "moepolicy::ndp_rebalancer: num_experts must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ndp_rebalancer(2, 4, {.skew_threshold = -0.5}),
                       "moepolicy::ndp_rebalancer: skew_threshold must be finite and >= 0, got -0.5", invalid_argument);
}

namespace {

/// The rule of the header, move by move, scanning every expert for the busiest DIMM's (the
/// first implementation's loop): what the per-DIMM lists must reproduce.
std::vector<rebalance_move> scan_every_expert(std::span<const double> w, std::span<const hotness> c,
                                              std::span<const expert_layout> l, std::size_t D,
                                              const ndp_rebalance_config& cfg, std::vector<double>& loads) {
  const std::size_t n = w.size();
  std::vector<std::size_t> home(n, D);
  loads.assign(D, 0.0);
  double total = 0.0;
  for (std::size_t e = 0; e < n; ++e) {
    if (c[e] != cold || !l[e].is_localized()) continue;
    home[e] = l[e].home;
    loads[home[e]] += w[e];
    total += w[e];
  }
  const double mean = total / static_cast<double>(D);
  std::vector<rebalance_move> moves;
  while (moves.size() < cfg.max_moves) {
    std::size_t b = 0, i = 0;
    for (std::size_t d = 1; d < D; ++d) {
      if (loads[d] > loads[b]) b = d;
      if (loads[d] < loads[i]) i = d;
    }
    const double gap = loads[b] - loads[i];
    if (!(loads[b] > (1.0 + cfg.skew_threshold) * mean) || !(gap > 0.0)) break;
    std::size_t pick = n;
    double best = loads[b];
    for (std::size_t e = 0; e < n; ++e) {
      if (home[e] != b || !(w[e] > 0.0 && w[e] < gap)) continue;
      const double after = std::max(loads[b] - w[e], loads[i] + w[e]);
      if (after < best) {
        best = after;
        pick = e;
      }
    }
    if (pick == n) break;
    moves.push_back({static_cast<expert_id>(pick), static_cast<std::uint16_t>(b), static_cast<std::uint16_t>(i),
                     w[pick], loads[b] - best});
    loads[b] -= w[pick];
    loads[i] += w[pick];
    home[pick] = i;
  }
  return moves;
}

}  // namespace

TEST_CASE("an expert that moved competes in index order on its new DIMM") {
  // D = 4, all cold and localized. Moves: e1 (4) from DIMM 2 to 1, e4 (2) from 2 to 0, e0
  // (4) from 3 to 0; then DIMM 0 holds e0, e3 and e4, and e3 (1) goes to 1 although e4 was
  // there first among the experts DIMM 0 received; then e5 (2) from 2 to 3.
  const std::array<double, 10> w{4.0, 4.0, 4.0, 1.0, 2.0, 2.0, 1.0, 1.0, 1.0, 2.0};
  const std::array<std::uint16_t, 10> homes{3, 2, 3, 0, 2, 2, 2, 2, 2, 2};
  std::array<hotness, 10> c{};
  std::array<expert_layout, 10> l{};
  for (std::size_t e = 0; e < 10; ++e) {
    c[e] = cold;
    l[e] = loc(homes[e]);
  }
  ndp_rebalancer r(4, 10, {.skew_threshold = 0.0, .max_moves = 40});
  const auto moves = r.plan(w, c, l);
  const std::array<std::array<std::size_t, 3>, 5> want{{{1, 2, 1}, {4, 2, 0}, {0, 3, 0}, {3, 0, 1}, {5, 2, 3}}};
  REQUIRE(moves.size() == want.size());
  for (std::size_t k = 0; k < want.size(); ++k) {
    CHECK(moves[k].expert == want[k][0]);
    CHECK(moves[k].from == want[k][1]);
    CHECK(moves[k].to == want[k][2]);
  }
}

TEST_CASE("ndp_rebalancer equals a scan of every expert per move on random layers") {
  std::mt19937 rng(21);
  std::exponential_distribution<double> load(1.0);
  std::size_t moves_seen = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    // Mostly small layers, where a DIMM that received an expert is often the busiest later.
    const std::size_t D = 1 + rng() % 6, n = 1 + rng() % (trial % 4 == 0 ? 200 : 12);
    const bool all_count = trial % 2 == 1;  // every expert cold and localized
    const ndp_rebalance_config cfg{.skew_threshold = all_count ? 0.0 : static_cast<double>(rng() % 4) * 0.05,
                                   .max_moves = 1 + rng() % 40};
    std::vector<double> w(n);
    std::vector<hotness> c(n);
    std::vector<expert_layout> l(n);
    for (std::size_t e = 0; e < n; ++e) {
      // Most weights from three values, so that experts tie (the lower index wins), also
      // after one of them has moved.
      w[e] = rng() % 4 != 0 ? static_cast<double>(1 + rng() % 3) : load(rng);
      c[e] = !all_count && rng() % 4 == 0 ? warm : cold;
      l[e] = !all_count && rng() % 5 == 0 ? expert_layout::striped()
                                          : expert_layout::localized(static_cast<std::uint16_t>(rng() % D));
    }
    ndp_rebalancer r(D, 256, cfg);
    std::vector<double> loads;
    for (int round = 0; round < 2; ++round) {  // the second plan reuses the lists
      const auto got = r.plan(w, c, l);
      const auto want = scan_every_expert(w, c, l, D, cfg, loads);
      CAPTURE(trial);
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < got.size(); ++k) {
        CHECK(got[k].expert == want[k].expert);
        CHECK(got[k].from == want[k].from);
        CHECK(got[k].to == want[k].to);
        CHECK(got[k].relief == want[k].relief);
      }
      CHECK(std::equal(loads.begin(), loads.end(), r.dimm_loads().begin(), r.dimm_loads().end()));
      moves_seen += got.size();
    }
  }
  CHECK(moves_seen > 500);
}
