// The lower bound max(W / G, M*) and the replication greedy that reaches M*.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "moepolicy/ep/exact.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "test_support.hpp"

using namespace moepolicy;

TEST_CASE("the bound by hand: the average, or the largest replica") {
  // W / G = 60 / 2 = 30 dominates.
  CHECK(ep_lower_bound(std::vector<double>{10, 20, 30}, 4, 2) == 30);
  // One hot expert with 5 spare slots: the greedy gives it all 6 replicas of 15 each, below
  // W / G = 100 / 4 = 25; with no spare slot its 90 dominates 100 / 4.
  std::vector<std::int32_t> counts(3);
  std::vector<detail::ep::replica_entry> heap(3);
  const double m = ep_replicate(std::vector<double>{90, 5, 5}, 8, counts, heap);
  CHECK(counts == std::vector<std::int32_t>{6, 1, 1});
  CHECK(m == doctest::Approx(15.0));
  CHECK(ep_lower_bound(std::vector<double>{90, 5, 5}, 8, 4) == doctest::Approx(25.0));
  CHECK(ep_lower_bound(std::vector<double>{90, 5, 5}, 4, 4) == doctest::Approx(45.0));
}

TEST_CASE("the bound with GPU speeds: total over summed speed, or the largest replica on the fastest GPU") {
  // W / Σ s = 60 / 3 = 20; the greedy's largest replica 20 on the speed-2 GPU takes 10.
  CHECK(ep_lower_bound(std::vector<double>{10, 20, 30}, 4, 2, std::vector<double>{2, 1}) == doctest::Approx(20.0));
  // No spare slot: expert 0's 90 runs at best on the speed-3 GPU, 30 > 100 / 6.
  CHECK(ep_lower_bound(std::vector<double>{90, 5, 5, 0}, 4, 4, std::vector<double>{3, 1, 1, 1}) ==
        doctest::Approx(30.0));
  // Equal speeds of 1 give the plain bound.
  CHECK(ep_lower_bound(std::vector<double>{10, 20, 30}, 4, 2, std::vector<double>{1, 1}) == 30.0);
  CHECK_THROWS_WITH_AS((void)ep_lower_bound(std::vector<double>{1, 2}, 2, 2, std::vector<double>{1, 0}),
                       "moepolicy::ep_lower_bound: speed of GPU 1 must be finite and > 0, got 0", invalid_argument);
}

TEST_CASE("the greedy's largest replica is the least over every count vector") {
  std::mt19937_64 rng(11);
  for (int t = 0; t < 200; ++t) {
    const std::size_t n = 1 + rng() % 5;
    const std::size_t r = n + rng() % 6;
    std::vector<double> w(n);
    for (auto& x : w) x = static_cast<double>(rng() % 100);
    std::vector<std::int32_t> counts(n);
    std::vector<detail::ep::replica_entry> heap(n);
    const double greedy = ep_replicate(w, r, counts, heap);
    // Every count vector by enumeration.
    double best = 1e300;
    std::vector<std::int32_t> c(n, 1);
    auto rec = [&](auto&& self, std::size_t e, std::size_t extra) -> void {
      if (e + 1 == n) {
        c[e] = static_cast<std::int32_t>(1 + extra);
        double mx = 0;
        for (std::size_t i = 0; i < n; ++i) mx = std::max(mx, w[i] / c[i]);
        best = std::min(best, mx);
        return;
      }
      for (std::size_t k = 0; k <= extra; ++k) c[e] = static_cast<std::int32_t>(1 + k), self(self, e + 1, extra - k);
    };
    rec(rec, 0, r - n);
    CHECK(greedy == doctest::Approx(best));
  }
}

TEST_CASE("the bound never exceeds the exact optimum") {
  std::mt19937_64 rng(5);
  for (int t = 0; t < 150; ++t) {
    const std::uint32_t g = 1 + static_cast<std::uint32_t>(rng() % 4);
    const std::size_t n = 1 + rng() % 6;
    std::uint32_t r = g * (1 + static_cast<std::uint32_t>(rng() % 3));
    while (r < n) r += g;
    if (r > 12) continue;
    std::vector<double> w(n);
    for (auto& x : w) x = static_cast<double>(rng() % 1000);
    CHECK(ep_lower_bound(w, r, g) <= ep_exact_max_load(w, r, g) * (1 + 1e-12));
  }
}

TEST_CASE("bad input names the function, the problem and the value") {
  CHECK_THROWS_WITH_AS(
      (void)ep_lower_bound(std::vector<double>{1, 2, 3}, 2, 2),
      "moepolicy::ep_lower_bound: replicas cannot hold every logical expert: replicas must be >= the 3 "
      "logical experts, got 2",
      invalid_argument);
  CHECK_THROWS_WITH_AS((void)ep_lower_bound(std::vector<double>{1, -2, 3}, 4, 2),
                       "moepolicy::ep_lower_bound: load of expert 1 must be finite and >= 0, got -2", invalid_argument);
  CHECK_THROWS_WITH_AS((void)ep_lower_bound(std::vector<double>{1, 2, 3}, 4, 0),
                       "moepolicy::ep_lower_bound: gpus must be >= 1, got 0", invalid_argument);
}
