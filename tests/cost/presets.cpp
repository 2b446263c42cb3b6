#include "moepolicy/cost/presets.hpp"

#include <doctest/doctest.h>

#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

TEST_CASE("presets carry the papers' figures") {
  const auto sxm = presets::h100_sxm_gen4();  // seed 000 Tab. 2
  CHECK(sxm.compute.peak_flops == doctest::Approx(989.4e12));
  CHECK(sxm.capacity_bytes == 80'000'000'000ULL);
  CHECK(sxm.weight_link.bandwidth == doctest::Approx(32e9));

  const auto pcie = presets::h100_pcie_gen5();  // seed 001 Tab. 1
  CHECK(pcie.compute.peak_flops == doctest::Approx(819.6e12));
  CHECK(pcie.compute.memory_bandwidth == doctest::Approx(2.04e12));
  CHECK(pcie.weight_link.bandwidth == doctest::Approx(64e9));

  const auto cpu = presets::xeon_8470_amx();  // seed 001 Tab. 1
  CHECK(cpu.compute.peak_flops == doctest::Approx(90.1e12));
  CHECK(cpu.compute.memory_bandwidth == doctest::Approx(307.2e9));

  const auto ndp = presets::cxl_ndp();  // seed 000 Tab. 2
  CHECK(ndp.capacity_bytes == 512'000'000'000ULL);
  CHECK(ndp.compute.memory_bandwidth == doctest::Approx(512e9));
  CHECK(ndp.compute.peak_flops == doctest::Approx(2.048e12));
  CHECK(ndp.compute.bit_scaled_compute);

  const auto dimm = presets::dimm_ndp();  // seed 001 Tab. 1
  CHECK(dimm.num_units == 16);
  CHECK(dimm.compute.peak_flops == doctest::Approx(256e9));
  CHECK(dimm.compute.memory_bandwidth == doctest::Approx(153.6e9));
  CHECK(dimm.capacity_bytes == 128'000'000'000ULL);
  CHECK(dimm.weight_link.bandwidth == doctest::Approx(25e9));
  CHECK(dimm.host_read_bandwidth * dimm.num_units == doctest::Approx(307.2e9));
}

TEST_CASE("CXL-MoE's fetch model: CXL beats the PCIe host path by about 21%") {
  // seed 002 §2: 14 GB over PCIe 5.0 at 50 GB/s + 1000 ns = 0.28 s; over CXL at
  // 64 GB/s + 300 ns = 0.21875 s: a 21.9% reduction.
  const roofline_cost host{presets::h100_host_pcie5(), models::mixtral_8x7b()};
  const roofline_cost cxl{presets::h100_cxl_expander(), models::mixtral_8x7b()};
  const bytes fourteen_gb = 14'000'000'000ULL;
  CHECK(host.transfer_seconds(fourteen_gb) == doctest::Approx(0.28 + 1e-6));
  CHECK(cxl.transfer_seconds(fourteen_gb) == doctest::Approx(0.21875 + 300e-9));
  CHECK(1.0 - cxl.transfer_seconds(fourteen_gb) / host.transfer_seconds(fourteen_gb) ==
        doctest::Approx(0.21875).epsilon(0.01));
}

TEST_CASE("every preset validates") {
  for (auto make : {presets::h100_sxm_gen4, presets::h100_pcie_gen5, presets::h100_cxl_expander,
                    presets::h100_host_pcie5, presets::xeon_8470_amx, presets::cxl_ndp, presets::dimm_ndp}) {
    CHECK_NOTHROW(make().validate());
  }
}
