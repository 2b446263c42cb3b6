// Tests of cost/trimoe_profiles.hpp: the tables meet the figures TriMoE states (the H100 at
// 30 % utilisation at 256 tokens; AMX at 10 and 40 TFLOP/s at tens and hundreds of tokens,
// 22 % of an A100 beyond), are valid profiles for any spec, and the model choice.
#include "moepolicy/cost/trimoe_profiles.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cost/presets.hpp"

using namespace moepolicy;

namespace {
double utilisation(const any_device_cost& c, const model_shape& m, double peak, std::size_t tokens) {
  const double t = c.compute_seconds(expert_key{0, 0}, fp16, tokens);
  return static_cast<double>(tokens) * m.flops_per_token() / (peak * t);
}
}  // namespace

TEST_CASE("the H100 table: 30 % utilisation at 256 tokens, a weight pass at one token") {
  for (const model_shape& m : {models::mixtral_8x7b(), models::qwen3_235b_a22b(), models::granite_3_1_1b_a400m()}) {
    INFO(m.name);
    const device_spec h100 = presets::h100_pcie_gen5();
    const any_device_cost gpu = trimoe_gpu_cost(h100, m);
    const double peak = h100.compute.peak_flops;
    CHECK(utilisation(gpu, m, peak, 256) == doctest::Approx(0.30).epsilon(1e-9));
    CHECK(utilisation(gpu, m, peak, 64) == doctest::Approx(64.0 / (401.76 + 1.7638 * 64)).epsilon(1e-3));
    CHECK(utilisation(gpu, m, peak, 1024) == doctest::Approx(0.464).epsilon(1e-2));
    CHECK(utilisation(gpu, m, peak, 64) < utilisation(gpu, m, peak, 256));
    // At one token: one pass over the weights at 2.04 TB/s plus one token's slope.
    const double stream = static_cast<double>(expert_bytes(m, fp16)) / h100.compute.memory_bandwidth;
    CHECK(gpu.compute_seconds(expert_key{0, 0}, fp16, 1) > stream);
    CHECK(gpu.compute_seconds(expert_key{0, 0}, fp16, 1) < 1.01 * stream);
    // The roofline, for comparison, is at 64 % at 256 tokens.
    const any_device_cost roof = trimoe_gpu_cost(h100, m, trimoe_compute_model::roofline);
    CHECK(utilisation(roof, m, peak, 256) == doctest::Approx(256.0 / 401.76).epsilon(1e-3));
  }
}

TEST_CASE("the AMX table: 10 TFLOP/s at 32 tokens, 40 at 256, 22 % of an A100 at 2048") {
  const model_shape m = models::mixtral_8x7b();
  const device_spec xeon = presets::xeon_8470_amx();
  const any_device_cost cpu = trimoe_cpu_cost(xeon, m);
  const auto tflops = [&](std::size_t L) {
    return static_cast<double>(L) * m.flops_per_token() / cpu.compute_seconds(expert_key{0, 0}, fp16, L) / tera;
  };
  CHECK(tflops(256) == doctest::Approx(40.0).epsilon(1e-9));
  CHECK(tflops(2048) == doctest::Approx(0.22 * 312.0).epsilon(1e-9));
  // At 32 tokens 10 TFLOP/s would take 1.127 ms, less than one pass over the weights at
  // 307.2 GB/s (1.147 ms): the pass bounds it.
  const double stream = static_cast<double>(expert_bytes(m, fp16)) / xeon.compute.memory_bandwidth;
  CHECK(cpu.compute_seconds(expert_key{0, 0}, fp16, 32) == doctest::Approx(stream));
  CHECK(cpu.compute_seconds(expert_key{0, 0}, fp16, 1) == doctest::Approx(stream));
  CHECK(tflops(64) > 10.0);
  CHECK(tflops(64) < 40.0);
  // A CPU of half the peak gets half the throughput where compute bounds it.
  device_spec half = xeon;
  half.compute.peak_flops /= 2.0;
  const any_device_cost slow = trimoe_cpu_cost(half, m);
  CHECK(slow.compute_seconds(expert_key{0, 0}, fp16, 1024) ==
        doctest::Approx(2.0 * cpu.compute_seconds(expert_key{0, 0}, fp16, 1024)));
}

TEST_CASE("the tables are valid profiles, NDP stays roofline, and bad settings are refused") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const compute_profile g = trimoe_gpu_profile(presets::h100_pcie_gen5(), m);
  REQUIRE(g.points.size() == 13);
  CHECK(g.points.front().tokens == 1);
  CHECK(g.points.back().tokens == 4096);
  for (std::size_t i = 1; i < g.points.size(); ++i) CHECK(g.points[i].seconds_taken >= g.points[i - 1].seconds_taken);
  const compute_profile c = trimoe_cpu_profile(presets::xeon_8470_amx(), m);
  for (std::size_t i = 1; i < c.points.size(); ++i) CHECK(c.points[i].seconds_taken >= c.points[i - 1].seconds_taken);
  const any_device_cost ndp = trimoe_ndp_cost(presets::dimm_ndp(), m);
  CHECK(std::holds_alternative<roofline_cost>(ndp.model()));
  CHECK(std::holds_alternative<profiled_cost>(trimoe_gpu_cost(presets::h100_pcie_gen5(), m).model()));
  CHECK(to_string(trimoe_compute_model::profiled) == "profiled");
  CHECK(to_string(trimoe_compute_model::roofline) == "roofline");
  CHECK_THROWS_WITH_AS(static_cast<void>(trimoe_gpu_profile(presets::h100_pcie_gen5(), m, {.gpu_utilisation = 0.0})),
                       "moepolicy::trimoe_gpu_profile: gpu_utilisation must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(trimoe_cpu_profile(presets::xeon_8470_amx(), m, {.max_tokens = 1000})),
                       "moepolicy::trimoe_cpu_profile: max_tokens must be a power of 2 and >= 2, got 1000",
                       invalid_argument);
  trimoe_profile_config bad;
  bad.cpu_anchors[1].tokens = 16;
  CHECK_THROWS_WITH_AS(static_cast<void>(trimoe_cpu_profile(presets::xeon_8470_amx(), m, bad)),
                       "moepolicy::trimoe_cpu_profile: cpu_anchors must rise in tokens and not fall in FLOP/s, "
                       "anchor, got 1",
                       invalid_argument);
}
