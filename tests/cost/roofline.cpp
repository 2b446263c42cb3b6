#include "moepolicy/cost/roofline.hpp"

#include <doctest/doctest.h>

#include <cmath>

#include "moepolicy/cost/presets.hpp"

using namespace moepolicy;

namespace {
const model_shape mixtral = models::mixtral_8x7b();
}

TEST_CASE("a Mixtral-8x7B FP16 expert crosses PCIe 5.0 in 5.5 ms") {
  // 3 x 4096 x 14336 weights x 2 bytes = 352,321,536 bytes; at 64 GB/s that is
  // 352321536 / 64e9 = 5.505024 ms, plus the 1 us transfer latency.
  const roofline_cost gpu{presets::h100_pcie_gen5(), mixtral};
  const bytes b = gpu.footprint_bytes({0, 0}, fp16);
  CHECK(b == 352'321'536ULL);
  CHECK(gpu.transfer_seconds(b) == doctest::Approx(5.505024e-3 + 1e-6).epsilon(1e-12));
  CHECK(gpu.transfer_seconds(0) == 0.0);
}

TEST_CASE("the roofline knee sits where arithmetic meets weight streaming") {
  // H100 SXM: 989.4 TFLOP/s, 3.35 TB/s. With FP16 weights the expert streams
  // 2 bytes per weight and computes 2 FLOP per weight per token, so the knee is at
  // peak / bandwidth = 989.4 / 3.35 = 295.3 tokens.
  const roofline_cost gpu{presets::h100_sxm_gen4(), mixtral};
  const double knee = gpu.knee_tokens(fp16);
  CHECK(knee == doctest::Approx(989.4 / 3.35).epsilon(1e-9));
  const double stream = 352'321'536.0 / 3.35e12;
  // Below the knee: memory-bound, flat at one pass over the weights.
  CHECK(gpu.compute_seconds({0, 0}, fp16, 1) == doctest::Approx(stream));
  CHECK(gpu.compute_seconds({0, 0}, fp16, 295) == doctest::Approx(stream));
  // Above the knee: compute-bound, linear in tokens.
  CHECK(gpu.compute_seconds({0, 0}, fp16, 1000) == doctest::Approx(1000 * 352'321'536.0 / 989.4e12));
  CHECK(gpu.compute_seconds({0, 0}, fp16, 2000) ==
        doctest::Approx(2.0 * gpu.compute_seconds({0, 0}, fp16, 1000)));
}

TEST_CASE("every preset is non-negative and monotone in tokens") {
  for (auto make : {presets::h100_sxm_gen4, presets::h100_pcie_gen5, presets::h100_cxl_expander,
                    presets::h100_host_pcie5, presets::xeon_8470_amx, presets::cxl_ndp, presets::dimm_ndp}) {
    const roofline_cost dev{make(), mixtral};
    CAPTURE(dev.name());
    CHECK(dev.compute_seconds({0, 0}, fp16, 0) == 0.0);
    CHECK(dev.activation_transfer_seconds(0) == 0.0);
    CHECK(dev.contention_seconds(0) == 0.0);
    double prev = 0.0;
    for (std::size_t t = 1; t <= 4096; t = t * 3 / 2 + 1) {
      for (int bits : {2, 3, 4, 8, 16}) {
        const double c = dev.compute_seconds({1, 2}, bitwidth{bits}, t);
        CHECK(std::isfinite(c));
        CHECK(c > 0.0);
      }
      const double now = dev.compute_seconds({1, 2}, fp16, t);
      CHECK(now >= prev);
      prev = now;
      CHECK(dev.activation_transfer_seconds(t) >= dev.activation_transfer_seconds(t - 1));
    }
    CHECK(dev.transfer_seconds(1000) <= dev.transfer_seconds(2000));
  }
}

TEST_CASE("low-bit weights speed up the CXL-NDP device in proportion to 16 / bits") {
  // Context-Aware GPU-NDP §5.2 reports about 5x (3-bit) and 8x (2-bit) lower NDP-side latency; the
  // bit-scaled systolic arrays give 16/3 = 5.33x and 16/2 = 8x in the compute-bound
  // region, and the weights streamed shrink by about the same factor.
  const roofline_cost ndp{presets::cxl_ndp(), mixtral};
  CHECK(ndp.peak_flops(bitwidth{3}) == doctest::Approx(2.048e12 * 16.0 / 3.0));
  CHECK(ndp.peak_flops(bitwidth{2}) == doctest::Approx(2.048e12 * 8.0));
  CHECK(ndp.peak_flops(fp16) == doctest::Approx(2.048e12));
  for (std::size_t tokens : {1u, 4u, 64u, 512u}) {
    const double full = ndp.compute_seconds({0, 0}, fp16, tokens);
    const double three = ndp.compute_seconds({0, 0}, bitwidth{3}, tokens);
    const double two = ndp.compute_seconds({0, 0}, bitwidth{2}, tokens);
    CAPTURE(tokens);
    CHECK(full / three == doctest::Approx(5.0).epsilon(0.1));
    CHECK(full / two == doctest::Approx(8.0).epsilon(0.1));
    CHECK(two < three);
  }
  // The GPU dequantises: low-bit weights stream faster but compute does not speed up.
  const roofline_cost gpu{presets::h100_sxm_gen4(), mixtral};
  CHECK(gpu.peak_flops(bitwidth{2}) == gpu.peak_flops(fp16));
  CHECK(gpu.compute_seconds({0, 0}, bitwidth{2}, 4096) == doctest::Approx(gpu.compute_seconds({0, 0}, fp16, 4096)));
}

TEST_CASE("activation transfer ships tokens in and results out") {
  const roofline_cost ndp{presets::cxl_ndp(), mixtral};
  // One token: 4096 FP16 elements each way over 32 GB/s, 300 ns each way.
  CHECK(ndp.activation_transfer_seconds(1) == doctest::Approx(2 * 300e-9 + 2 * 8192.0 / 32e9));
  const roofline_cost gpu{presets::h100_sxm_gen4(), mixtral};
  CHECK(gpu.activation_transfer_seconds(1000) == 0.0);  // computes where activations are
}

TEST_CASE("DIMM-NDP: parallel units, contention from host reads per Eq. 6") {
  const roofline_cost dimm{presets::dimm_ndp(), mixtral};
  CHECK(dimm.execution() == execution_kind::parallel_units);
  CHECK(dimm.num_units() == 16);
  const bytes w = dimm.footprint_bytes({0, 0}, fp16);
  // Localised: one DIMM serves all of it at 19.2 GB/s; striped: each of 16 serves 1/16.
  CHECK(dimm.contention_seconds(w) == doctest::Approx(352'321'536.0 / 19.2e9));
  CHECK(dimm.contention_seconds((w + 15) / 16) == doctest::Approx(352'321'536.0 / 307.2e9).epsilon(1e-6));
  // T_NDP = max(compute, internal read): decode of one token is bound by 153.6 GB/s.
  CHECK(dimm.compute_seconds({0, 0}, fp16, 1) == doctest::Approx(352'321'536.0 / 153.6e9));
}

TEST_CASE("a bad spec or shape is rejected when the model is built") {
  device_spec d = presets::cxl_ndp();
  d.compute.memory_bandwidth = 0.0;
  CHECK_THROWS_WITH_AS(roofline_cost(d, mixtral),
                       "moepolicy::device_spec::validate(CXL-NDP): compute.memory_bandwidth must be > 0, got 0",
                       invalid_argument);
  model_shape s = mixtral;
  s.hidden_size = 0;
  CHECK_THROWS_AS(roofline_cost(presets::cxl_ndp(), s), invalid_argument);
}
