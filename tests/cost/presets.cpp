#include "moepolicy/cost/presets.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <set>
#include <string>
#include <string_view>

#include "moepolicy/cost/roofline.hpp"

using namespace moepolicy;

TEST_CASE("presets carry the papers' figures") {
  const auto sxm = presets::h100_sxm_gen4();  // Context-Aware GPU-NDP Tab. 2
  CHECK(sxm.compute.peak_flops == doctest::Approx(989.4e12));
  CHECK(sxm.capacity_bytes == 80'000'000'000ULL);
  CHECK(sxm.weight_link.bandwidth == doctest::Approx(32e9));

  const auto pcie = presets::h100_pcie_gen5();  // TriMoE Tab. 1
  CHECK(pcie.compute.peak_flops == doctest::Approx(819.6e12));
  CHECK(pcie.compute.memory_bandwidth == doctest::Approx(2.04e12));
  CHECK(pcie.weight_link.bandwidth == doctest::Approx(64e9));

  const auto cpu = presets::xeon_8470_amx();  // TriMoE Tab. 1
  CHECK(cpu.compute.peak_flops == doctest::Approx(90.1e12));
  CHECK(cpu.compute.memory_bandwidth == doctest::Approx(307.2e9));

  const auto ndp = presets::cxl_ndp();  // Context-Aware GPU-NDP Tab. 2
  CHECK(ndp.capacity_bytes == 512'000'000'000ULL);
  CHECK(ndp.compute.memory_bandwidth == doctest::Approx(512e9));
  CHECK(ndp.compute.peak_flops == doctest::Approx(2.048e12));
  CHECK(ndp.compute.bit_scaled_compute);
  CHECK(ndp.host_read_bandwidth == doctest::Approx(512e9));  // reads by the GPU at the internal bandwidth

  const auto dimm = presets::dimm_ndp();  // TriMoE Tab. 1
  CHECK(dimm.num_units == 16);
  CHECK(dimm.compute.peak_flops == doctest::Approx(256e9));
  CHECK(dimm.compute.memory_bandwidth == doctest::Approx(153.6e9));
  CHECK(dimm.capacity_bytes == 128'000'000'000ULL);
  CHECK(dimm.weight_link.bandwidth == doctest::Approx(25e9));
  CHECK(dimm.host_read_bandwidth * dimm.num_units == doctest::Approx(307.2e9));

  // Edge-MoE Tab. 1: three edge GPUs and six CPU cores.
  const auto s1 = presets::rtx_3080_ti();
  CHECK(s1.capacity_bytes == 12ULL * gibi);
  CHECK(s1.compute.peak_flops == doctest::Approx(80 * 512 * 1.665e9).epsilon(1e-3));
  CHECK(s1.compute.memory_bandwidth == doctest::Approx(384.0 / 8 * 19e9));
  CHECK(s1.weight_link.bandwidth == presets::pcie_gen4_x16.bandwidth);
  const auto s2 = presets::rtx_4060_ti_16gb();
  CHECK(s2.capacity_bytes == 16ULL * gibi);
  CHECK(s2.compute.peak_flops == doctest::Approx(34 * 512 * 2.535e9).epsilon(1e-3));
  CHECK(s2.compute.memory_bandwidth == doctest::Approx(128.0 / 8 * 18e9));
  CHECK(s2.weight_link.bandwidth == doctest::Approx(16e9));  // an x8 interface
  const auto s3 = presets::rtx_a6000();
  CHECK(s3.capacity_bytes == 48ULL * gibi);
  CHECK(s3.compute.peak_flops == doctest::Approx(309.7e12 / 2).epsilon(1e-3));
  CHECK(s3.weight_link.bandwidth == presets::pcie_gen4_x16.bandwidth);
  const auto six = presets::ryzen9_5900x_6c();
  CHECK(six.compute.peak_flops == doctest::Approx(710.4e9));
  CHECK(six.compute.memory_bandwidth == doctest::Approx(51.2e9));
  CHECK(std::isinf(six.weight_link.bandwidth));  // computes in its own memory
}

TEST_CASE("CXL-MoE's fetch model: CXL beats the PCIe host path by about 21%") {
  // CXL-MoE §2: 14 GB over PCIe 5.0 at 50 GB/s + 1000 ns = 0.28 s; over CXL at
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
                    presets::h100_host_pcie5, presets::xeon_8470_amx, presets::cxl_ndp, presets::dimm_ndp,
                    presets::rtx_3080_ti, presets::rtx_4060_ti_16gb, presets::rtx_a6000, presets::ryzen9_5900x_6c}) {
    CHECK_NOTHROW(make().validate());
  }
}

namespace {

/// Every field of two device specs is equal.
bool same_device(const device_spec& a, const device_spec& b) {
  const auto same_link = [](const link_spec& x, const link_spec& y) {
    return x.bandwidth == y.bandwidth && x.latency_seconds == y.latency_seconds;
  };
  return a.name == b.name && a.execution == b.execution && a.num_units == b.num_units &&
         a.capacity_bytes == b.capacity_bytes && a.compute.peak_flops == b.compute.peak_flops &&
         a.compute.peak_bits == b.compute.peak_bits && a.compute.bit_scaled_compute == b.compute.bit_scaled_compute &&
         a.compute.memory_bandwidth == b.compute.memory_bandwidth &&
         a.compute.launch_seconds == b.compute.launch_seconds && same_link(a.weight_link, b.weight_link) &&
         same_link(a.activation_link, b.activation_link) && a.host_read_bandwidth == b.host_read_bandwidth &&
         a.activation_element_bytes == b.activation_element_bytes && a.quant.group_size == b.quant.group_size &&
         a.quant.metadata_bits == b.quant.metadata_bits && a.quant.full_precision == b.quant.full_precision;
}

bool snake_case(std::string_view s) {
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("device presets by name") {
  CHECK(same_device(*presets::find("h100_sxm_gen4"), presets::h100_sxm_gen4()));
  CHECK(same_device(*presets::find("h100_pcie_gen5"), presets::h100_pcie_gen5()));
  CHECK(same_device(*presets::find("h100_cxl_expander"), presets::h100_cxl_expander()));
  CHECK(same_device(*presets::find("h100_host_pcie5"), presets::h100_host_pcie5()));
  CHECK(same_device(*presets::find("xeon_8470_amx"), presets::xeon_8470_amx()));
  CHECK(same_device(*presets::find("cxl_ndp"), presets::cxl_ndp()));
  CHECK(same_device(*presets::find("dimm_ndp"), presets::dimm_ndp()));
  CHECK(same_device(*presets::find("rtx_3080_ti"), presets::rtx_3080_ti()));
  CHECK(same_device(*presets::find("rtx_4060_ti_16gb"), presets::rtx_4060_ti_16gb()));
  CHECK(same_device(*presets::find("rtx_a6000"), presets::rtx_a6000()));
  CHECK(same_device(*presets::find("ryzen9_5900x_6c"), presets::ryzen9_5900x_6c()));

  constexpr auto names = presets::names();
  CHECK(names.size() == 11);
  CHECK(std::set<std::string_view>(names.begin(), names.end()).size() == names.size());
  for (std::string_view n : names) {
    CAPTURE(n);
    CHECK(snake_case(n));
    REQUIRE(presets::find(n).has_value());
    CHECK_NOTHROW(presets::find(n)->validate());
  }

  // Exact names only: no case folding, no display names, no prefixes.
  CHECK_FALSE(presets::find("H100_SXM_GEN4").has_value());
  CHECK_FALSE(presets::find("H100-SXM (PCIe Gen4 x16)").has_value());
  CHECK_FALSE(presets::find("h100").has_value());
  CHECK_FALSE(presets::find("").has_value());
  CHECK_FALSE(presets::find("cxl2_x16").has_value());  // a link, not a device
}

TEST_CASE("link presets by name") {
  const auto same = [](std::string_view name, const link_spec& l) {
    const auto found = presets::find_link(name);
    return found && found->bandwidth == l.bandwidth && found->latency_seconds == l.latency_seconds;
  };
  CHECK(same("pcie_gen4_x16", presets::pcie_gen4_x16));
  CHECK(same("pcie_gen4_x8", presets::pcie_gen4_x8));
  CHECK(same("pcie_gen5_x16", presets::pcie_gen5_x16));
  CHECK(same("host_pcie5_effective", presets::host_pcie5_effective));
  CHECK(same("cxl2_x16", presets::cxl2_x16));
  CHECK(same("dimm_link", presets::dimm_link));
  static_assert(presets::find_link("cxl2_x16")->latency_seconds == 300e-9);

  constexpr auto names = presets::link_names();
  CHECK(names.size() == 6);
  CHECK(std::set<std::string_view>(names.begin(), names.end()).size() == names.size());
  for (std::string_view n : names) {
    CAPTURE(n);
    CHECK(snake_case(n));
    CHECK(presets::find_link(n).has_value());
    CHECK_FALSE(presets::find(n).has_value());  // device and link names never collide
  }
  CHECK_FALSE(presets::find_link("PCIE_GEN4_X16").has_value());
  CHECK_FALSE(presets::find_link("cxl_ndp").has_value());
}
