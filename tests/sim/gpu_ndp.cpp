#include "moepolicy/sim/gpu_ndp.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

namespace {
const model_shape mixtral = models::mixtral_8x7b();
gpu_ndp_system<roofline_cost, roofline_cost> make() {
  return {roofline_cost{presets::h100_sxm_gen4(), mixtral}, roofline_cost{presets::cxl_ndp(), mixtral}};
}
}  // namespace

TEST_CASE("MoNDE's rule: in place for a decode token, migrate for a large batch") {
  const auto sys = make();
  // One token: FP16 on NDP streams 352 MB at 512 GB/s (0.69 ms) vs an 11 ms PCIe fetch.
  CHECK_FALSE(sys.fetch_is_cheaper({0, 0}, fp16, 1));
  // 8192 tokens: NDP computes at 2 TFLOP/s (1.4 s) vs fetch + GPU (11 ms + 3 ms).
  CHECK(sys.fetch_is_cheaper({0, 0}, fp16, 8192));
}

TEST_CASE("MoNDE's rule at its break-even load") {
  const auto sys = make();
  // Fetch: 352 MB / 32 GB/s + 1 us = 11.01 ms, plus the GPU's pass over the weights
  // (0.105 ms, memory-bound below 295 tokens). In place: t x 352 MFLOP / 2.048 TFLOP/s
  // once compute-bound, plus 2 x (300 ns + t x 8 KB / 32 GB/s) of activations.
  const auto in_place = [&](std::uint32_t t) {
    return sys.ndp().compute_seconds({0, 0}, fp16, t) + sys.ndp().activation_transfer_seconds(t);
  };
  const auto fetch = [&](std::uint32_t t) {
    return sys.gpu().transfer_seconds(352'321'536) + sys.gpu().compute_seconds({0, 0}, fp16, t);
  };
  std::uint32_t t = 1;
  while (!(fetch(t) < in_place(t))) ++t;
  CHECK(sys.fetch_is_cheaper({0, 0}, fp16, t));
  CHECK_FALSE(sys.fetch_is_cheaper({0, 0}, fp16, t - 1));
  CHECK(t == 65);  // 64 tokens take 11.0 ms in place
}
