// The oracle predictor reads the trace's own future.
#include "moepolicy/predict/oracle_predictor.hpp"

#include <doctest/doctest.h>

#include <vector>
#include "../../cache/count_allocations.hpp"

using namespace moepolicy;

namespace {

/// Two requests, 2 layers, 4 experts, top-1: a one-token prefill (step 0) and two decode
/// steps each. Request r, step s, layer l selects expert (r + s + l) % 4.
routing_trace tiny() {
  routing_trace_builder b({"tiny", "test", 2, 4, 1, false});
  for (std::uint32_t r = 0; r < 2; ++r) {
    b.add_request("r" + std::to_string(r));
    for (std::uint32_t s = 0; s < 3; ++s) {
      for (std::uint32_t l = 0; l < 2; ++l) {
        const expert_id e[1] = {static_cast<expert_id>((r + s + l) % 4)};
        const float w[1] = {1.0f};
        b.add({r, s == 0 ? phase::prefill : phase::decode, s, s, static_cast<layer_id>(l), e, w, {}});
      }
    }
  }
  return std::move(b).finish();
}

}  // namespace

TEST_CASE("the oracle predicts exactly the next batch of the layer, within the request") {
  const routing_trace t = tiny();
  oracle_predictor o(t);
  std::vector<float> out(4);
  REQUIRE(o.predict(0, out));  // before anything: request 0, step 0, layer 0 → expert 0
  CHECK(out == std::vector<float>{1.0f, 0.0f, 0.0f, 0.0f});
  o.observe(t.view(t.batches()[0]));
  o.predict(1, out);  // step 0, layer 1 → 1
  CHECK(out == std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
  o.predict(0, out);  // step 1, layer 0 → 1
  CHECK(out[1] == 1.0f);
  // The last batch of request 0 observed: nothing left in the request.
  o.observe(t.view(t.batches()[5]));
  CHECK(!o.predict(0, out));
  o.begin_request();  // the next request is fair game again
  REQUIRE(o.predict(0, out));
  CHECK(out[1] == 1.0f);  // request 1, step 0, layer 0 → 1
}

TEST_CASE("a horizon covers several batches of the layer; phases can be skipped") {
  const routing_trace t = tiny();
  oracle_predictor two(t, {.horizon = 2});
  std::vector<float> out(4);
  two.predict(1, out);  // layer 1 at steps 0 and 1 of request 0: experts 1 and 2
  CHECK(out == std::vector<float>{0.0f, 1.0f, 1.0f, 0.0f});
  oracle_predictor decode(t, {.prefill = false});
  decode.predict(0, out);  // the first decode batch of layer 0: step 1 → 1
  CHECK(out == std::vector<float>{0.0f, 1.0f, 0.0f, 0.0f});
  CHECK_THROWS_WITH_AS(oracle_predictor(t, {.horizon = 0}), "moepolicy::oracle_predictor: horizon must be >= 1, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(oracle_predictor(t, {.prefill = false, .decode = false}),
                       "moepolicy::oracle_predictor: keep prefill, decode or both", invalid_argument);
}

TEST_CASE("observing and predicting allocate nothing after construction") {
  if (!test::allocation_counting) return;
  const routing_trace t = tiny();
  oracle_predictor o(t, {.horizon = 2});
  std::vector<float> out(4);
  const batch_view v = t.view(t.batches()[2]);
  test::allocation_counter counter;
  static_cast<void>(o.predict(0, out));
  o.observe(v);
  static_cast<void>(o.predict(1, out));
  o.end_step();
  o.begin_request();
  CHECK(counter.count() == 0);
}
