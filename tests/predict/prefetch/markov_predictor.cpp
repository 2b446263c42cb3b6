// The Markov model of CXL-MoE §3: a learned token-to-token chain per layer, propagated n
// tokens ahead; with nothing learned it is the frequency model.
#include "moepolicy/predict/markov_predictor.hpp"

#include <doctest/doctest.h>

#include <random>
#include <vector>

#include "../../cache/count_allocations.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"

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
    return batch_view{batch_ref{0, 0, l, phase::decode, 0, static_cast<std::uint32_t>(ids.size() / k)},
                      k,
                      positions,
                      ids,
                      weights,
                      {}};
  }
};

}  // namespace

TEST_CASE("a learned chain: the next token's experts from the last token's, n tokens ahead") {
  markov_predictor p({.num_layers = 1, .num_experts = 4, .top_k = 2, .history = 1, .horizon = 1});
  std::vector<float> out(4);
  CHECK(!p.predict(0, out));
  // Tokens {0,1} {0,2} {0,1} {1,3} {0,1}: experts 0 and 1 were each followed three times,
  // by 0 and 1 twice and by 2 and 3 once: T(0, ·) = T(1, ·) = (2, 2, 1, 1) / 3.
  for (std::vector<expert_id> t : {std::vector<expert_id>{0, 1}, {0, 2}, {0, 1}, {1, 3}, {0, 1}}) {
    rows r{t};
    p.observe(r.view(0, 2));
  }
  CHECK(p.transition(0, 0, 0) == doctest::Approx(2.0 / 3.0));
  CHECK(p.transition(0, 1, 3) == doctest::Approx(1.0 / 3.0));
  CHECK(p.transition(0, 2, 0) == doctest::Approx(1.0));  // {0,2} was followed by {0,1}
  REQUIRE(p.predict(0, out));
  CHECK(out[0] == doctest::Approx(2.0 / 3.0));
  CHECK(out[1] == doctest::Approx(2.0 / 3.0));
  CHECK(out[2] == doctest::Approx(1.0 / 3.0));
  CHECK(out[3] == doctest::Approx(1.0 / 3.0));
  // The history restarts with a request; what was learned stays.
  p.begin_request();
  CHECK(!p.predict(0, out));
  CHECK(p.transition(0, 0, 0) == doctest::Approx(2.0 / 3.0));
}

TEST_CASE("an alternating chain is predicted exactly, one and two tokens ahead") {
  markov_predictor one({.num_layers = 1, .num_experts = 4, .top_k = 2, .history = 1, .horizon = 1});
  markov_predictor two({.num_layers = 1, .num_experts = 4, .top_k = 2, .history = 1, .horizon = 2});
  for (int i = 0; i < 6; ++i) {
    rows r{i % 2 == 0 ? std::vector<expert_id>{0, 1} : std::vector<expert_id>{2, 3}};
    one.observe(r.view(0, 2));
    two.observe(r.view(0, 2));
  }
  // The last token selected {2, 3}: the next selects {0, 1}, the one after {2, 3} again.
  std::vector<float> out(4);
  one.predict(0, out);
  CHECK(out == std::vector<float>{1.0f, 1.0f, 0.0f, 0.0f});
  two.predict(0, out);
  CHECK(out == std::vector<float>{1.0f, 1.0f, 1.0f, 1.0f});
}

TEST_CASE("with nothing learned the chain persists: exactly the frequency model") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> pick(0, 7);
  for (std::uint32_t m : {1u, 3u, 8u}) {
    for (std::uint32_t n : {1u, 2u, 4u}) {
      markov_predictor chain({.num_layers = 2,
                              .num_experts = 8,
                              .top_k = 2,
                              .history = m,
                              .horizon = n,
                              .recency_decay = 0.8,
                              .learn = false});
      short_horizon_predictor freq(
          {.num_layers = 2, .num_experts = 8, .top_k = 2, .history = m, .horizon = n, .recency_decay = 0.8});
      std::vector<float> a(8), b(8);
      for (int t = 0; t < 12; ++t) {
        const auto e0 = static_cast<expert_id>(pick(rng));
        const auto e1 = static_cast<expert_id>((e0 + 1 + pick(rng) % 7) % 8);
        rows r{{e0, e1}};
        chain.observe(r.view(1, 2));
        freq.observe(r.view(1, 2));
        CHECK(chain.predict(1, a) == freq.predict(1, b));
        for (std::size_t e = 0; e < 8; ++e) CHECK(a[e] == doctest::Approx(b[e]));
      }
    }
  }
}

TEST_CASE("a prefill batch chains its tokens in order, and bad configurations name the value") {
  markov_predictor p({.num_layers = 1, .num_experts = 4, .top_k = 1, .history = 1, .horizon = 1});
  rows prefill{{0, 1, 2, 3}};  // four tokens of top-1: 0→1→2→3
  p.observe(prefill.view(0, 1));
  CHECK(p.transition(0, 0, 1) == 1.0);
  CHECK(p.transition(0, 2, 3) == 1.0);
  CHECK(p.transition(0, 3, 0) == 0.0);  // 3 was never followed
  std::vector<float> out(4);
  p.predict(0, out);
  CHECK(out == std::vector<float>{0.0f, 0.0f, 0.0f, 1.0f});  // persistence from a state never left
  CHECK_THROWS_WITH_AS(markov_predictor({.num_layers = 1, .num_experts = 5000, .top_k = 1}),
                       "moepolicy::markov_predictor: num_experts must be in [1, 4096], got 5000", invalid_argument);
  CHECK_THROWS_WITH_AS(markov_predictor({.num_layers = 1, .num_experts = 4, .top_k = 1, .horizon = 0}),
                       "moepolicy::markov_predictor: horizon must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(markov_predictor({.num_layers = 1, .num_experts = 4, .top_k = 1, .history = 0}),
                       "moepolicy::markov_predictor: history must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(markov_predictor({.num_layers = 1, .num_experts = 4, .top_k = 1, .recency_decay = 1.5}),
                       "moepolicy::markov_predictor: recency_decay must be in (0, 1], got 1.5", invalid_argument);
}

TEST_CASE("the Markov model observes and predicts without allocating") {
  if (!test::allocation_counting) return;
  markov_predictor p({.num_layers = 2, .num_experts = 4, .top_k = 2, .history = 3, .horizon = 2});
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
