// Our rebalancer against DeepSeek EPLB, the lower bound and the exact optimum on random
// instances; migration-aware placement, the balance–movement knob, hysteresis, no
// allocation per call, and bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "../cache/count_allocations.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/exact.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

std::vector<double> skewed_loads(std::mt19937_64& rng, std::size_t n) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<double> w(n);
  for (auto& x : w) x = std::floor(1000.0 * std::pow(u(rng), 3.0));
  return w;
}

std::vector<std::int32_t> flat_slots(const ep_placement& p) {
  std::vector<std::int32_t> out;
  for (std::size_t l = 0; l < p.layers(); ++l) {
    const auto row = p.physical_to_logical(l);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

/// Every slot holds a logical expert, every expert has a slot, ranks are consistent.
void check_valid(const ep_placement& p) {
  for (std::size_t l = 0; l < p.layers(); ++l) {
    std::vector<int> seen(p.experts(), 0);
    for (auto e : p.physical_to_logical(l)) {
      REQUIRE(e >= 0);
      REQUIRE(static_cast<std::size_t>(e) < p.experts());
      ++seen[static_cast<std::size_t>(e)];
    }
    for (std::size_t e = 0; e < p.experts(); ++e) {
      REQUIRE(seen[e] >= 1);
      REQUIRE(p.logical_count(l)[e] == seen[e]);
      for (std::size_t k = 0; k < static_cast<std::size_t>(seen[e]); ++k) {
        const auto slot = p.logical_to_physical(l, e)[k];
        REQUIRE(p.physical_to_logical(l)[static_cast<std::size_t>(slot)] == static_cast<std::int32_t>(e));
      }
    }
  }
}

}  // namespace

TEST_CASE("random instances: ours <= DeepSeek EPLB and >= the lower bound, hierarchical and global") {
  std::mt19937_64 rng(2024);
  int better = 0;
  int layers_seen = 0;
  for (int t = 0; t < 400; ++t) {
    const std::uint32_t g = 1u << (rng() % 4);
    std::uint32_t nodes = 1u << (rng() % 3);
    if (g % nodes != 0) nodes = 1;
    const std::uint32_t groups = 1u << (rng() % 4);
    const std::size_t e = groups * (1 + rng() % 4);
    std::uint32_t r = g * (1 + static_cast<std::uint32_t>(rng() % 5));
    while (r < e) r += g;
    const std::size_t layers = 2;
    const auto w = skewed_loads(rng, layers * e);
    const ep_load_view loads(w, layers, e);
    const ep_cluster c{.replicas = r, .gpus = g, .nodes = nodes, .groups = groups};
    const ep_placement ref = deepseek_rebalance(loads, c);
    const auto ref_stats = ep_evaluate(loads, ref, g);
    ep_rebalancer ours(layers, e, c);
    const auto& res = ours.rebalance(loads);
    check_valid(res.placement);
    for (std::size_t l = 0; l < layers; ++l) {
      CAPTURE(t);
      CAPTURE(l);
      ++layers_seen;
      CHECK(res.max_load[l] <= ref_stats.max_load[l] * (1 + 1e-6));
      CHECK(res.max_load[l] >= ep_lower_bound(loads.row(l), r, g) * (1 - 1e-12));
      better += res.max_load[l] < ref_stats.max_load[l] * (1 - 1e-9) ? 1 : 0;
    }
  }
  MESSAGE("ours strictly below EPLB's max load on " << better << " of " << layers_seen << " layers");
  CHECK(better > 0);
}

TEST_CASE("tiny instances: ours against the exact optimum (global model)") {
  std::mt19937_64 rng(99);
  int optimal = 0;
  int seen = 0;
  double worst = 1.0;
  for (int t = 0; t < 300; ++t) {
    const std::uint32_t g = 1 + static_cast<std::uint32_t>(rng() % 4);
    const std::size_t e = 1 + rng() % 6;
    std::uint32_t r = g * (1 + static_cast<std::uint32_t>(rng() % 3));
    while (r < e) r += g;
    if (r > 10) continue;
    const auto w = skewed_loads(rng, e);
    ep_rebalancer ours(1, e, {.replicas = r, .gpus = g});
    const double mine = ours.rebalance(ep_load_view(w, 1, e)).max_load[0];
    const double best = ep_exact_max_load(w, r, g);
    CHECK(mine >= best * (1 - 1e-12));
    ++seen;
    optimal += mine <= best * (1 + 1e-12) ? 1 : 0;
    if (best > 0) worst = std::max(worst, mine / best);
  }
  MESSAGE("ours optimal on " << optimal << " of " << seen << " tiny instances; worst ratio " << worst);
  // No optimality is claimed: the replication step minimises the largest replica, not the
  // packed max (the worst case seen here is 1.48). The stated, checked factor is 1.5.
  CHECK(worst <= 1.5);
}

TEST_CASE("replica-count search: never above EPLB's greedy replication, >= the bound, closer to the exact optimum") {
  std::mt19937_64 rng(99);
  int optimal_plain = 0;
  int optimal_search = 0;
  int improved = 0;
  int seen = 0;
  double worst = 1.0;
  for (int t = 0; t < 300; ++t) {
    const std::uint32_t g = 1 + static_cast<std::uint32_t>(rng() % 4);
    const std::size_t e = 1 + rng() % 6;
    std::uint32_t r = g * (1 + static_cast<std::uint32_t>(rng() % 3));
    while (r < e) r += g;
    if (r > 10) continue;
    const auto w = skewed_loads(rng, e);
    const ep_load_view loads(w, 1, e);
    ep_rebalancer plain(1, e, {.replicas = r, .gpus = g});
    ep_rebalancer searched(1, e, {.replicas = r, .gpus = g}, {.replica_search_rounds = 16});
    const double a = plain.rebalance(loads).max_load[0];
    const auto& res = searched.rebalance(loads);
    check_valid(res.placement);
    const double b = res.max_load[0];
    const double best = ep_exact_max_load(w, r, g);
    CAPTURE(t);
    CHECK(b <= a * (1 + 1e-12));
    CHECK(b >= best * (1 - 1e-12));
    CHECK(b >= ep_lower_bound(w, r, g) * (1 - 1e-12));
    ++seen;
    improved += b < a * (1 - 1e-9) ? 1 : 0;
    optimal_plain += a <= best * (1 + 1e-12) ? 1 : 0;
    optimal_search += b <= best * (1 + 1e-12) ? 1 : 0;
    if (best > 0) worst = std::max(worst, b / best);
  }
  MESSAGE("search optimal on " << optimal_search << " of " << seen << " tiny instances (greedy replication: "
                               << optimal_plain << "), improved " << improved << ", worst ratio " << worst);
  CHECK(improved > 0);
  CHECK(optimal_search > optimal_plain);
  // Measured: optimal on 260 of 278, worst ratio 1.071 (the gain-only search reached 236
  // and 1.48: it could not take replicas away from an expert doubled up on one GPU).
  CHECK(optimal_search >= 255);
  CHECK(worst <= 1.1);
  // A block of one expert: no other expert can take a replica it gives up.
  ep_rebalancer single(1, 1, {.replicas = 4, .gpus = 2}, {.replica_search_rounds = 4});
  CHECK(single.rebalance(ep_load_view(std::vector<double>{10.0}, 1, 1)).max_load[0] == 5.0);
  // Larger random instances, hierarchical and global: never above EPLB, never below the bound.
  for (int t = 0; t < 60; ++t) {
    const std::uint32_t g = 4u << (rng() % 3);
    const std::uint32_t nodes = 1u << (rng() % 3);
    const std::uint32_t groups = 8;
    const std::size_t e = 64;
    const std::uint32_t r = g * (static_cast<std::uint32_t>(e) / g + 1 + static_cast<std::uint32_t>(rng() % 2));
    const auto w = skewed_loads(rng, 2 * e);
    const ep_load_view loads(w, 2, e);
    const ep_cluster c{.replicas = r, .gpus = g, .nodes = nodes, .groups = groups};
    const auto ref = ep_evaluate(loads, deepseek_rebalance(loads, c), g);
    ep_rebalancer searched(2, e, c, {.replica_search_rounds = 16});
    const auto& res = searched.rebalance(loads);
    check_valid(res.placement);
    for (std::size_t l = 0; l < 2; ++l) {
      CAPTURE(t);
      CHECK(res.max_load[l] <= ref.max_load[l] * (1 + 1e-6));
      CHECK(res.max_load[l] >= ep_lower_bound(loads.row(l), r, g) * (1 - 1e-12));
    }
  }
}

TEST_CASE("hierarchical: polishing only the nodes above the layer's max reaches the max of polishing every node") {
  std::mt19937_64 rng(41);
  int differ = 0;
  for (int t = 0; t < 60; ++t) {
    const std::uint32_t g = 8u << (rng() % 3);
    const std::uint32_t nodes = 2u << (rng() % 2);
    const std::size_t e = 64;
    const std::uint32_t r = g * (static_cast<std::uint32_t>(e) / g + 1 + static_cast<std::uint32_t>(rng() % 2));
    const std::size_t layers = 2;
    const auto w = skewed_loads(rng, layers * e);
    const ep_load_view loads(w, layers, e);
    const ep_cluster c{.replicas = r, .gpus = g, .nodes = nodes, .groups = 8};
    const std::uint32_t rounds = (t % 3 == 0) ? 8u : 0u;
    std::vector<double> speeds;
    if (t % 4 == 1) {
      speeds.resize(g);
      for (auto& s : speeds) s = (rng() % 2) != 0 ? 2.0 : 1.0;
    }
    ep_rebalancer fast(layers, e, c, {.replica_search_rounds = rounds}, speeds);
    ep_rebalancer every(layers, e, c, {.replica_search_rounds = rounds, .polish_every_node = true}, speeds);
    const auto& a = fast.rebalance(loads);
    const auto& b = every.rebalance(loads);
    check_valid(a.placement);
    for (std::size_t l = 0; l < layers; ++l) {
      CAPTURE(t);
      CAPTURE(l);
      CHECK(a.max_load[l] == b.max_load[l]);
    }
    differ += flat_slots(a.placement) != flat_slots(b.placement) ? 1 : 0;
  }
  MESSAGE("placements differ (other nodes left unpolished) on " << differ << " of 60 instances");
  CHECK(differ > 0);
}

TEST_CASE("GPU speeds: load is time, the faster GPU takes the heavier pair, and the speed bound holds") {
  // Two GPUs of speeds 1 and 3, two slots each; loads 3, 3, 3, 1. Blind to speed, LPT puts
  // 3 + 3 on GPU 0 (time 6); by time, GPU 0 takes 3 + 1 (time 4) and GPU 1 3 + 3 (time 2).
  const std::vector<double> w{3, 3, 3, 1};
  const ep_load_view loads(w, 1, 4);
  const ep_cluster c{.replicas = 4, .gpus = 2};
  const std::vector<double> speeds{1.0, 3.0};
  ep_rebalancer blind(1, 4, c);
  CHECK(blind.rebalance(loads).max_load[0] == 6.0);
  ep_rebalancer aware(1, 4, c, {}, speeds);
  const auto& res = aware.rebalance(loads);
  CHECK(res.max_load[0] == 4.0);
  CHECK(res.gpu_loads[0] == 4.0);
  CHECK(res.gpu_loads[1] == 2.0);
  // Balancedness by time: ideal 10 / 4 = 2.5 over the max 4.
  CHECK(res.balancedness[0] == doctest::Approx(2.5 / 4.0));
  // Random instances: equal speeds change nothing; mixed speeds stay >= the bound and, over
  // the set, below the speed-blind placement timed on the same GPUs.
  std::mt19937_64 rng(5);
  double aware_sum = 0.0, blind_sum = 0.0;
  for (int t = 0; t < 80; ++t) {
    const std::uint32_t g = 4u << (rng() % 2);
    const std::uint32_t nodes = 1u << (rng() % 2);
    const std::size_t e = 32;
    const std::uint32_t r = g * (static_cast<std::uint32_t>(e) / g + 1);
    const auto x = skewed_loads(rng, e);
    const ep_load_view lv(x, 1, e);
    const ep_cluster cc{.replicas = r, .gpus = g, .nodes = nodes, .groups = 4};
    std::vector<double> sp(g);
    for (auto& s : sp) s = (rng() % 2) != 0 ? 2.0 : 1.0;
    ep_rebalancer same(1, e, cc, {}, std::vector<double>(g, 1.0));
    ep_rebalancer plain(1, e, cc);
    const auto plain_slots = plain.rebalance(lv).placement.physical_to_logical(0);
    const auto same_slots = same.rebalance(lv).placement.physical_to_logical(0);
    CHECK(std::equal(plain_slots.begin(), plain_slots.end(), same_slots.begin()));
    ep_rebalancer timed(1, e, cc, {}, sp);
    const auto& tr = timed.rebalance(lv);
    check_valid(tr.placement);
    CHECK(tr.max_load[0] >= ep_lower_bound(x, r, g, sp) * (1 - 1e-12));
    // The speed-blind placement, timed.
    std::vector<double> gl(g);
    ep_gpu_loads(x, plain.result().placement.physical_to_logical(0), plain.result().placement.logical_count(0), gl);
    double blind_max = 0.0;
    for (std::size_t q = 0; q < g; ++q) blind_max = std::max(blind_max, gl[q] / sp[q]);
    aware_sum += tr.max_load[0];
    blind_sum += blind_max;
  }
  MESSAGE("mean max time: by speed " << aware_sum / 80 << ", speed-blind " << blind_sum / 80);
  CHECK(aware_sum < blind_sum);
  CHECK_THROWS_WITH_AS(ep_rebalancer(1, 4, c, {}, std::vector<double>{1.0}),
                       "moepolicy::ep_rebalancer: gpu speeds must be empty or one per GPU (2), got 1",
                       invalid_argument);
}

TEST_CASE("migration-aware: the same loads move nothing, and relabelling keeps replicas in place") {
  std::mt19937_64 rng(7);
  const std::size_t e = 32;
  const std::size_t layers = 3;
  const auto w = skewed_loads(rng, layers * e);
  const ep_load_view loads(w, layers, e);
  const ep_cluster c{.replicas = 48, .gpus = 8, .nodes = 2, .groups = 4};
  ep_rebalancer ours(layers, e, c);
  const auto first = flat_slots(ours.rebalance(loads).placement);
  const auto& again = ours.rebalance(loads, first);
  CHECK(again.moved_total == 0);
  CHECK(flat_slots(again.placement) == first);

  // From EPLB's placement: a fresh placement relabelled onto the current GPUs moves fewer
  // slots than the fresh one as solved, at the same balance.
  const ep_placement ref = deepseek_rebalance(loads, c);
  const auto current = flat_slots(ref);
  ep_rebalancer fresh(layers, e, c);
  const auto fresh_stats = ep_evaluate(loads, fresh.rebalance(loads).placement, c.gpus, current);
  const auto& migr = ours.rebalance(loads, current);
  check_valid(migr.placement);
  CHECK(migr.moved_total <= fresh_stats.moved_total);
  for (std::size_t l = 0; l < layers; ++l) {
    CHECK(migr.max_load[l] <= fresh_stats.max_load[l] * (1 + 1e-9));
  }
  const auto measured = ep_evaluate(loads, migr.placement, c.gpus, current);
  CHECK(measured.moved_total == migr.moved_total);
}

TEST_CASE("the balance tolerance trades balance for fewer moves, monotonically") {
  std::mt19937_64 rng(3);
  const std::size_t e = 64;
  const std::size_t layers = 4;
  const auto w0 = skewed_loads(rng, layers * e);
  auto w1 = w0;
  std::uniform_real_distribution<double> u(0.3, 1.7);
  for (auto& x : w1) x = std::floor(x * u(rng));
  const ep_cluster c{.replicas = 80, .gpus = 16};
  ep_rebalancer base(layers, e, c);
  const auto current = flat_slots(base.rebalance(ep_load_view(w0, layers, e)).placement);
  std::uint64_t last_moves = ~std::uint64_t{0};
  double fresh_max = 0.0;
  for (double eps : {0.0, 0.02, 0.1, 0.5, 1e6}) {
    ep_rebalancer r(layers, e, c, {.balance_tolerance = eps, .expert_bytes = 1000});
    const auto& res = r.rebalance(ep_load_view(w1, layers, e), current);
    check_valid(res.placement);
    CAPTURE(eps);
    CHECK(res.moved_total <= last_moves);
    CHECK(res.moved_bytes == res.moved_total * 1000);
    last_moves = res.moved_total;
    double mx = 0.0;
    for (double m : res.max_load) mx = std::max(mx, m);
    if (eps == 0.0) fresh_max = mx;
    ep_rebalancer f(layers, e, c);
    const auto& fr = f.rebalance(ep_load_view(w1, layers, e));
    for (std::size_t l = 0; l < layers; ++l) CHECK(res.max_load[l] <= fr.max_load[l] * (1 + eps) * (1 + 1e-9));
  }
  CHECK(last_moves == 0);  // an unbounded tolerance keeps the current placement
  CHECK(fresh_max > 0.0);
}

TEST_CASE("hysteresis: a layer is rebalanced only when its imbalance grew by the factor (FlashLB)") {
  std::mt19937_64 rng(17);
  const std::size_t e = 16;
  const auto w0 = skewed_loads(rng, e);
  const ep_cluster c{.replicas = 24, .gpus = 4};
  ep_rebalancer r(1, e, c, {.hysteresis = 1.15});
  const auto committed = flat_slots(r.rebalance(ep_load_view(w0, 1, e)).placement);
  const double committed_imbalance = 1.0 / r.result().balancedness[0];
  // Slightly perturbed loads: the imbalance stays below 1.15 × the committed one.
  auto w1 = w0;
  for (auto& x : w1) x += 1.0;
  const auto& kept = r.rebalance(ep_load_view(w1, 1, e), committed);
  if (1.0 / kept.balancedness[0] < 1.15 * committed_imbalance) {
    CHECK(kept.updated[0] == 0);
    CHECK(kept.moved_total == 0);
  }
  // One expert becomes very hot: the imbalance jumps, the layer is rebalanced.
  auto w2 = w0;
  w2[3] += 20000.0;
  const auto& moved = r.rebalance(ep_load_view(w2, 1, e), committed);
  CHECK(moved.updated[0] == 1);
  CHECK(moved.moved_total > 0);
}

TEST_CASE("a rebalance allocates nothing after construction (with the search and GPU speeds too)") {
  if (!test::allocation_counting) return;
  std::mt19937_64 rng(1);
  const std::size_t e = 256;
  const std::size_t layers = 4;
  const auto w = skewed_loads(rng, layers * e);
  const ep_load_view loads(w, layers, e);
  ep_rebalancer ours(layers, e, {.replicas = 288, .gpus = 32, .nodes = 4, .groups = 8});
  const auto current = flat_slots(deepseek_rebalance(loads, {.replicas = 288, .gpus = 32, .nodes = 4, .groups = 8}));
  (void)ours.rebalance(loads, current);  // the first call sizes the check's scratch
  std::vector<double> speeds(32, 1.0);
  for (std::size_t g = 0; g < 32; g += 2) speeds[g] = 2.0;
  ep_rebalancer searched(layers, e, {.replicas = 288, .gpus = 32, .nodes = 4, .groups = 8},
                         {.replica_search_rounds = 8}, speeds);
  (void)searched.rebalance(loads, current);
  test::allocation_counter count;
  (void)ours.rebalance(loads);
  (void)ours.rebalance(loads, current);
  (void)searched.rebalance(loads);
  (void)searched.rebalance(loads, current);
  CHECK(count.count() == 0);
}

TEST_CASE("bad input names the function, the problem and the value") {
  const ep_cluster c{.replicas = 8, .gpus = 4};
  CHECK_THROWS_WITH_AS(
      ep_rebalancer(1, 12, c),
      "moepolicy::ep_rebalancer: replicas cannot hold every logical expert: replicas must be >= the 12 "
      "logical experts, got 8",
      invalid_argument);
  CHECK_THROWS_WITH_AS(ep_rebalancer(1, 4, c, {.balance_tolerance = -0.5}),
                       "moepolicy::ep_rebalancer: balance_tolerance must be in [0, 1e6], got -0.5", invalid_argument);
  CHECK_THROWS_WITH_AS(ep_rebalancer(1, 4, c, {.hysteresis = 0.5}),
                       "moepolicy::ep_rebalancer: hysteresis must be 0 (off) or in [1, 1e6], got 0.5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ep_rebalancer(0, 4, c), "moepolicy::ep_rebalancer: layers must be in [1, 2^20], got 0",
                       invalid_argument);
  ep_rebalancer r(2, 4, c);
  const std::vector<double> one_layer(4, 1.0);
  CHECK_THROWS_WITH_AS((void)r.rebalance(ep_load_view(one_layer, 1, 4)),
                       "moepolicy::ep_rebalancer::rebalance: load matrix layers must equal the solver's 2, got 1",
                       invalid_argument);
  std::vector<double> neg(8, 1.0);
  neg[5] = -3.0;
  CHECK_THROWS_WITH_AS((void)r.rebalance(ep_load_view(neg, 2, 4)),
                       "moepolicy::ep_rebalancer::rebalance: load of layer 1, expert 1 must be finite and >= 0, got -3",
                       invalid_argument);
  const std::vector<double> ok(8, 1.0);
  const std::vector<std::int32_t> short_current(8, 0);
  CHECK_THROWS_WITH_AS(
      (void)r.rebalance(ep_load_view(ok, 2, 4), short_current),
      "moepolicy::ep_rebalancer::rebalance: current placement must hold layers * replicas = 16 slots, got 8",
      invalid_argument);
}
