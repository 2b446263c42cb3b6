// The cross-layer transition predictor: layer l's experts → layer l+1's, from counts.
#include "moepolicy/predict/transition_predictor.hpp"

#include <doctest/doctest.h>

#include <vector>
#include "../../cache/count_allocations.hpp"

using namespace moepolicy;

namespace {

struct rows {
  std::vector<expert_id> ids;
  std::vector<std::uint32_t> positions;
  std::vector<float> weights = {};
  batch_view view(layer_id l, std::uint32_t k) {
    weights.assign(ids.size(), 0.5f);
    return batch_view{batch_ref{0, 0, l, phase::decode, 0, static_cast<std::uint32_t>(positions.size())}, k,
                      positions, ids, weights, {}};
  }
};

}  // namespace

TEST_CASE("transition counts learned from consecutive layers predict the next layer") {
  transition_predictor p({.num_layers = 3, .num_experts = 4, .top_k = 2});
  std::vector<float> out(4);
  // Two tokens (positions 7 and 9). Layer 0: {0, 1} and {0, 2}; layer 1: {2, 3} and {2, 1}.
  rows l0{{0, 1, 0, 2}, {7, 9}}, l1{{2, 3, 2, 1}, {7, 9}};
  CHECK(!p.predict(0, out));  // nothing before layer 0
  p.observe(l0.view(0, 2));
  CHECK(!p.predict(1, out));  // no counts yet
  p.observe(l1.view(1, 2));
  // P(2|0) = 1, P(3|0) = P(1|0) = 1/2; P(2|1) = P(3|1) = 1; P(2|2) = P(1|2) = 1.
  CHECK(p.transition(0, 0, 2) == doctest::Approx(1.0));
  CHECK(p.transition(0, 0, 3) == doctest::Approx(0.5));
  CHECK(p.transition(0, 1, 3) == doctest::Approx(1.0));
  CHECK(p.transition(0, 3, 0) == 0.0);
  p.end_step();
  CHECK(!p.predict(1, out));  // nothing pairs across steps
  // Next step, one token {0, 1} at layer 0: p(f) = mean over e of P(f|e).
  rows n0{{0, 1}, {11}};
  p.observe(n0.view(0, 2));
  REQUIRE(p.predict(1, out));
  CHECK(out[2] == doctest::Approx(1.0));
  CHECK(out[3] == doctest::Approx(0.75));
  CHECK(out[1] == doctest::Approx(0.25));
  CHECK(out[0] == doctest::Approx(0.0));
  CHECK(!p.predict(2, out));  // only the layer after the last observed one
}

TEST_CASE("a batch's chance is that some token selects the expert; learning can be frozen; tokens join on position") {
  transition_predictor p({.num_layers = 2, .num_experts = 4, .top_k = 1, .learn = false});
  CHECK(!p.learning());
  p.set_learning(true);
  // Layer 1 is missing the token at position 5: only position 3 pairs.
  rows a0{{0, 1}, {3, 5}}, a1{{2}, {3}};
  p.observe(a0.view(0, 1));
  p.observe(a1.view(1, 1));
  p.end_step();
  CHECK(p.transition(0, 0, 2) == doctest::Approx(1.0));
  CHECK(p.transition(0, 1, 2) == 0.0);
  rows b0{{0, 1}, {3, 5}}, b1{{3, 2}, {3, 5}};
  p.observe(b0.view(0, 1));
  p.observe(b1.view(1, 1));
  p.end_step();
  // P(2|0) = 1/2, P(3|0) = 1/2, P(2|1) = 1.
  p.set_learning(false);
  rows c0{{0, 1}, {1, 2}}, c1{{0, 0}, {1, 2}};
  p.observe(c0.view(0, 1));
  std::vector<float> out(4);
  REQUIRE(p.predict(1, out));
  // Two tokens: 1 − (1 − 1/2)(1 − 1) = 1 for expert 2; 1 − (1 − 1/2) = 1/2 for expert 3.
  CHECK(out[2] == doctest::Approx(1.0));
  CHECK(out[3] == doctest::Approx(0.5));
  p.observe(c1.view(1, 1));  // frozen: no change
  CHECK(p.transition(0, 0, 0) == 0.0);
  CHECK_THROWS_WITH_AS(transition_predictor({.num_layers = 2, .num_experts = 5000, .top_k = 1}),
                       "moepolicy::transition_predictor: num_experts must be in [1, 4096], got 5000", invalid_argument);
  CHECK_THROWS_WITH_AS(transition_predictor({.num_layers = 2, .num_experts = 4, .top_k = 1, .max_batch_tokens = 0}),
                       "moepolicy::transition_predictor: max_batch_tokens must be >= 1, got 0", invalid_argument);
}

TEST_CASE("observing and predicting allocate nothing after construction") {
  if (!test::allocation_counting) return;
  transition_predictor p({.num_layers = 3, .num_experts = 4, .top_k = 2, .max_batch_tokens = 4});
  rows l0{{0, 1, 0, 2}, {7, 9}}, l1{{2, 3, 2, 1}, {7, 9}};
  const batch_view v0 = l0.view(0, 2), v1 = l1.view(1, 2);
  std::vector<float> out(4);
  test::allocation_counter counter;
  for (int i = 0; i < 5; ++i) {
    p.observe(v0);
    static_cast<void>(p.predict(1, out));
    p.observe(v1);
    p.end_step();
  }
  CHECK(counter.count() == 0);
}
