// CXL-MoE's short-horizon predictor (CXL-MoE §3): last m tokens → next n.
#include "moepolicy/predict/short_horizon_predictor.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../../cache/count_allocations.hpp"

using namespace moepolicy;

namespace {

/// A batch of layer `l` with the given top-k rows.
struct rows {
  std::vector<expert_id> ids;
  std::vector<float> weights = {};
  std::vector<std::uint32_t> positions = {};
  batch_view view(layer_id l, std::uint32_t k) {
    weights.assign(ids.size(), 0.5f);
    positions.resize(ids.size() / k);
    return batch_view{batch_ref{0, 0, l, phase::decode, 0, static_cast<std::uint32_t>(ids.size() / k)}, k, positions,
                      ids, weights, {}};
  }
};

}  // namespace

TEST_CASE("frequency over the last m tokens, turned into a chance within the next n") {
  short_horizon_predictor p({.num_layers = 2, .num_experts = 4, .top_k = 2, .history = 3, .horizon = 2});
  std::vector<float> out(4);
  CHECK(!p.predict(0, out));
  CHECK(out == std::vector<float>(4, 0.0f));
  rows a{{0, 1}}, b{{0, 2}}, c{{0, 3}};
  p.observe(a.view(0, 2));
  p.observe(b.view(0, 2));
  p.observe(c.view(0, 2));
  REQUIRE(p.predict(0, out));
  // p(0) = 1, p(1) = p(2) = p(3) = 1/3; score = 1 − (1 − p)^2.
  CHECK(out[0] == doctest::Approx(1.0));
  CHECK(out[1] == doctest::Approx(5.0 / 9.0));
  CHECK(out[3] == doctest::Approx(5.0 / 9.0));
  CHECK(!p.predict(1, out));  // layers are separate
  // A fourth token pushes the first out of the window of 3.
  rows d{{2, 3}};
  p.observe(d.view(0, 2));
  p.predict(0, out);
  CHECK(out[1] == doctest::Approx(0.0));
  CHECK(out[0] == doctest::Approx(1.0 - (1.0 / 3.0) * (1.0 / 3.0)));
  CHECK(out[3] == doctest::Approx(1.0 - (1.0 / 3.0) * (1.0 / 3.0)));
  p.begin_request();
  CHECK(!p.predict(0, out));
}

TEST_CASE("a prefill batch leaves its last m tokens; recency decay weighs newer tokens more") {
  short_horizon_predictor p({.num_layers = 1, .num_experts = 4, .top_k = 1, .history = 2, .horizon = 1,
                             .recency_decay = 0.5});
  rows prefill{{0, 1, 2, 3}};  // four tokens of top-1
  p.observe(prefill.view(0, 1));
  std::vector<float> out(4);
  p.predict(0, out);
  // History: 3 (newest, weight 1) and 2 (weight 0.5).
  CHECK(out[0] == 0.0f);
  CHECK(out[1] == 0.0f);
  CHECK(out[2] == doctest::Approx(0.5 / 1.5));
  CHECK(out[3] == doctest::Approx(1.0 / 1.5));
  CHECK_THROWS_WITH_AS(short_horizon_predictor({.num_layers = 1, .num_experts = 4, .top_k = 1, .history = 0}),
                       "moepolicy::short_horizon_predictor: history must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(short_horizon_predictor({.num_layers = 1, .num_experts = 4, .top_k = 5}),
                       "moepolicy::short_horizon_predictor: top_k must be in [1, num_experts], got 5", invalid_argument);
  CHECK_THROWS_WITH_AS(
      short_horizon_predictor({.num_layers = 1, .num_experts = 4, .top_k = 1, .horizon = 0}),
      "moepolicy::short_horizon_predictor: horizon must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(
      short_horizon_predictor({.num_layers = 1, .num_experts = 4, .top_k = 1, .recency_decay = 0.0}),
      "moepolicy::short_horizon_predictor: recency_decay must be in (0, 1], got 0", invalid_argument);
}

TEST_CASE("observing and predicting allocate nothing after construction") {
  if (!test::allocation_counting) return;
  short_horizon_predictor p({.num_layers = 2, .num_experts = 4, .top_k = 2, .history = 3, .horizon = 2});
  rows a{{0, 1, 2, 3, 0, 2}};
  const batch_view v = a.view(1, 2);
  std::vector<float> out(4);
  test::allocation_counter counter;
  for (int i = 0; i < 5; ++i) {
    p.observe(v);
    static_cast<void>(p.predict(1, out));
    p.end_step();
  }
  p.begin_request();
  CHECK(counter.count() == 0);
}

TEST_CASE("scores equal the formula over the held tokens on random traffic, with equal and decaying weights") {
  // The predictor keeps counts and a score per count when every weight is 1, and walks the
  // history otherwise; both must give exactly 1 − (1 − min(1, Σ w_j [e selected] / Σ w_j))^n
  // summed newest first, here recomputed from a plain list of every token observed.
  constexpr std::uint32_t L = 3, E = 6, k = 2;
  for (const double decay : {1.0, 0.75}) {
    for (const std::uint32_t m : {1u, 4u, 9u}) {
      CAPTURE(decay);
      CAPTURE(m);
      const std::uint32_t n = 3;
      short_horizon_predictor p({.num_layers = L, .num_experts = E, .top_k = k, .history = m, .horizon = n,
                                 .recency_decay = decay});
      std::vector<std::vector<std::vector<expert_id>>> seen(L);  // per layer, tokens oldest first
      std::uint64_t state = 12345 + m;
      const auto next = [&](std::uint64_t bound) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        return (state >> 33) % bound;
      };
      std::vector<float> out(E), want(E);
      std::size_t full = 0;
      for (int i = 0; i < 400; ++i) {
        if (next(60) == 0) {
          p.begin_request();
          for (auto& s : seen) s.clear();
        }
        const auto l = static_cast<layer_id>(next(L));
        const std::size_t tokens = 1 + next(3);
        rows r;
        for (std::size_t t = 0; t < tokens; ++t) {
          const auto a = static_cast<expert_id>(next(E));
          auto b = static_cast<expert_id>(next(E - 1));
          if (b >= a) ++b;
          r.ids.push_back(a);
          r.ids.push_back(b);
          seen[l].push_back({a, b});
        }
        p.observe(r.view(l, k));
        const auto q = static_cast<layer_id>(next(L));
        const bool any = p.predict(q, out);
        REQUIRE(any == !seen[q].empty());
        if (!any) continue;
        std::vector<double> share(E, 0.0);
        double total = 0.0, w = 1.0;
        const std::size_t held = std::min<std::size_t>(m, seen[q].size());
        if (held == m) ++full;
        for (std::size_t j = 0; j < held; ++j, w *= decay) {
          total += w;
          for (const expert_id e : seen[q][seen[q].size() - 1 - j]) share[e] += w;
        }
        for (std::size_t e = 0; e < E; ++e) {
          const double x = std::min(1.0, share[e] / total);
          want[e] = static_cast<float>(1.0 - std::pow(1.0 - x, static_cast<double>(n)));
        }
        CHECK(out == want);
      }
      CHECK(full > 100);  // the full-history path ran
    }
  }
}
