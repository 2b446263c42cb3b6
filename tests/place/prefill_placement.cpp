#include "moepolicy/place/prefill_placement.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace moepolicy;

namespace {

// One layer, six experts. Prefill counts and weight sums chosen so that the ranking by
// S = 0.5 P/ΣP + 0.5 W/ΣW is 2, 0, 5, 1, 4, 3.
Eigen::MatrixXd P() {
  Eigen::MatrixXd m(1, 6);
  m << 8, 4, 10, 1, 2, 6;
  return m;
}
Eigen::MatrixXd W() {
  Eigen::MatrixXd m(1, 6);
  m << 5, 2, 6, 0.5, 1, 3;
  return m;
}

// Losses at 1, 2, 3 bits; NDP experts in importance order will be 1, 4, 3.
loss_table losses() {
  std::vector<double> v{
      90, 30, 10,  // expert 0
      80, 20, 5,   // expert 1
      70, 25, 9,   // expert 2
      60, 40, 30,  // expert 3
      50, 10, 2,   // expert 4
      40, 20, 10,  // expert 5
  };
  return loss_table(1, 6, {bitwidth{1}, bitwidth{2}, bitwidth{3}}, v);
}

}  // namespace

TEST_CASE("top-K by importance go to the GPU at FP16, the rest get prefix-split bits") {
  // S: P shares 8,4,10,1,2,6 /31; W shares 5,2,6,.5,1,3 /17.5 -> order 2,0,5,1,4,3.
  const auto plan = place_from_prefill(P(), W(), nullptr,
                                       {.gpu_experts_per_layer = 3, .select_bitwidths = false, .uniform_bits = bitwidth{2}});
  CHECK(plan.experts_on(0, tier::gpu) == std::vector<expert_id>{0, 2, 5});
  CHECK(plan.at(0, 1) == residence{tier::ndp, bitwidth{2}});
  CHECK(plan.at(0, 2) == residence{tier::gpu, fp16});

  const loss_table L = losses();
  // NDP experts in importance order 1, 4, 3 at an average of 2 bits (R = 3):
  //   gains Δ(2): 60, 40, 20; Δ(3): 75, 48, 30.
  //   (n3, n2) = (0, 3): 120; (1, 1): 75 + 40 = 115. Best: all at 2 bits.
  const auto two = place_from_prefill(P(), W(), &L, {.gpu_experts_per_layer = 3, .ndp_average_bits = 2.0});
  CHECK(two.at(0, 1).bits == bitwidth{2});
  CHECK(two.at(0, 4).bits == bitwidth{2});
  CHECK(two.at(0, 3).bits == bitwidth{2});
  // At 2 + 1/3 (R = 4): (1, 2): 75 + 40 + 20 = 135; (2, 0): 75 + 48 = 123; (0, 3) not exact.
  const auto more = place_from_prefill(P(), W(), &L, {.gpu_experts_per_layer = 3, .ndp_average_bits = 2.0 + 1.0 / 3.0});
  CHECK(more.at(0, 1).bits == bitwidth{3});
  CHECK(more.at(0, 4).bits == bitwidth{2});
  CHECK(more.at(0, 3).bits == bitwidth{2});
  CHECK(more.status(0) == allocation_status::ok);
}

TEST_CASE("diff lists moves; only experts landing on the GPU move bytes") {
  const loss_table L = losses();
  const auto a = place_from_prefill(P(), W(), &L, {.gpu_experts_per_layer = 3, .ndp_average_bits = 2.0});
  Eigen::MatrixXd P2 = P();
  P2(0, 3) = 100;  // expert 3 becomes the most important
  Eigen::MatrixXd W2 = W();
  W2(0, 3) = 50;
  const auto b = place_from_prefill(P2, W2, &L, {.gpu_experts_per_layer = 3, .ndp_average_bits = 2.0});
  const auto shape = models::mixtral_8x7b();
  const auto moves = diff(a, b, shape);
  // Expert 3 goes up to the GPU; expert 5 (third before) comes down to NDP.
  REQUIRE(moves.size() >= 2);
  bytes total = 0;
  for (const auto& m : moves) {
    if (m.key.expert == 3) {
      CHECK(m.to.where == tier::gpu);
      CHECK(m.moved_bytes == expert_bytes(shape, fp16));
    }
    if (m.key.expert == 5) {
      CHECK(m.to.where == tier::ndp);
      CHECK(m.moved_bytes == 0);
    }
    total += m.moved_bytes;
  }
  CHECK(moved_bytes(moves) == total);
  CHECK(total == expert_bytes(shape, fp16));
  CHECK(diff(a, a, shape).empty());
}

TEST_CASE("bad input names place_from_prefill") {
  const loss_table L = losses();
  CHECK_THROWS_WITH_AS(static_cast<void>(place_from_prefill(P(), W(), &L, {.gpu_experts_per_layer = 7})),
                       "moepolicy::place_from_prefill: gpu_experts_per_layer must be <= the experts per layer 6, got 7",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(place_from_prefill(P(), W(), nullptr)),
                       "moepolicy::place_from_prefill: selecting bitwidths needs a loss table", invalid_argument);
  CHECK_THROWS_AS(static_cast<void>(place_from_prefill(P(), Eigen::MatrixXd(2, 6), &L)), invalid_argument);
  Eigen::MatrixXd neg = P();
  neg(0, 0) = -1;
  CHECK_THROWS_WITH_AS(static_cast<void>(place_from_prefill(neg, W(), &L)),
                       "moepolicy::place_from_prefill: counts and weight sums must be finite and >= 0, got -1",
                       invalid_argument);
  const loss_table wrong(2, 6, {bitwidth{1}, bitwidth{2}}, std::vector<double>(24, 1.0));
  CHECK_THROWS_WITH_AS(static_cast<void>(place_from_prefill(P(), W(), &wrong)),
                       "moepolicy::place_from_prefill: the loss table must cover 1 layers x 6 experts, its layers, got 2",
                       invalid_argument);
}
