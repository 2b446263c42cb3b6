#include "moepolicy/sim/gpu_ndp.hpp"

#include <doctest/doctest.h>

#include <array>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

namespace {
const model_shape mixtral = models::mixtral_8x7b();
gpu_ndp_system<roofline_cost, roofline_cost> make() {
  return {roofline_cost{presets::h100_sxm_gen4(), mixtral}, roofline_cost{presets::cxl_ndp(), mixtral}};
}
}  // namespace

TEST_CASE("a decode layer: one expert on the GPU, one on NDP at 3 bits, overlapped") {
  const auto sys = make();
  const std::array<std::uint32_t, 4> loads{1, 0, 1, 0};
  const std::array<run_on, 4> how{run_on::gpu_resident, run_on::gpu_resident, run_on::ndp, run_on::ndp};
  const std::array<bitwidth, 4> bits{fp16, fp16, bitwidth{3}, bitwidth{2}};
  const auto t = sys.price(0, loads, how, bits, 1);
  const double gpu = 352'321'536.0 / 3.35e12;                                 // one pass over FP16 weights
  const double ndp_bytes = static_cast<double>(expert_bytes(mixtral, bitwidth{3}));
  const double ndp = std::max(ndp_bytes / 512e9, 352'321'536.0 / (2.048e12 * 16.0 / 3.0)) +
                     (2 * 300e-9 + 2 * 8192.0 / 32e9);  // compute + activations in and out
  CHECK(t.gpu_seconds == doctest::Approx(gpu));
  CHECK(t.ndp_seconds == doctest::Approx(ndp));
  CHECK(t.layer_seconds == doctest::Approx(std::max(gpu, ndp)));
  CHECK(t.fetched_bytes == 0);
}

TEST_CASE("a fetched expert pays its transfer on the GPU side") {
  const auto sys = make();
  const std::array<std::uint32_t, 2> loads{1, 1};
  const std::array<run_on, 2> how{run_on::gpu_fetched, run_on::gpu_resident};
  const std::array<bitwidth, 2> bits{fp16, fp16};
  const auto t = sys.price(3, loads, how, bits, 1);
  CHECK(t.fetched_bytes == 352'321'536ULL);
  CHECK(t.gpu_seconds == doctest::Approx(352'321'536.0 / 32e9 + 1e-6 + 2 * 352'321'536.0 / 3.35e12));
  CHECK(t.ndp_seconds == 0.0);
}

TEST_CASE("MoNDE's rule: in place for a decode token, fetch for a large batch") {
  const auto sys = make();
  // One token: FP16 on NDP streams 352 MB at 512 GB/s (0.69 ms) vs a 11 ms PCIe fetch.
  CHECK_FALSE(sys.fetch_is_cheaper({0, 0}, fp16, 1));
  // 8192 tokens: NDP computes at 2 TFLOP/s (1.4 s) vs fetch + GPU (11 ms + 3 ms).
  CHECK(sys.fetch_is_cheaper({0, 0}, fp16, 8192));
}
