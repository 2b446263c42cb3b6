// moepolicy/cost/presets.hpp — device specs of the papers' systems.
//
// Each preset carries only published figures; the table each comes from is cited on
// the preset. Where a paper leaves a figure open the choice is stated on the field
// (for example nominal rather than effective PCIe bandwidth). Kernel launch overheads
// are 0 in every preset: no paper gives one; set `compute.launch_seconds` to model it.
// Make a cost model from a preset with `roofline_cost{preset(), model}`. Every device
// and link preset also has a stable snake_case name (`find`, `find_link`), for files
// that name them (the machine descriptions of io/machine_json.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string_view>

#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"

namespace moepolicy::presets {

/// PCIe Gen4 ×16, nominal 32 GB/s per direction; 1 µs per transfer (the host-path
/// latency assumed by CXL-MoE §2).
inline constexpr link_spec pcie_gen4_x16{32.0 * giga, 1e-6};
/// PCIe Gen4 ×8, nominal 16 GB/s per direction (the RTX 4060 Ti's interface); 1 µs per
/// transfer.
inline constexpr link_spec pcie_gen4_x8{16.0 * giga, 1e-6};
/// PCIe Gen5 ×16, 64 GB/s per direction (TriMoE §5.1.1); 1 µs per transfer.
inline constexpr link_spec pcie_gen5_x16{64.0 * giga, 1e-6};
/// Host DRAM reached over PCIe 5.0 as CXL-MoE models it: 50 GB/s effective, 1000 ns
/// (CXL-MoE §2, scenario 1).
inline constexpr link_spec host_pcie5_effective{50.0 * giga, 1000e-9};
/// CXL 2.0 ×16 memory expander: 64 GB/s, 300 ns measured load latency (CXL-MoE §2,
/// scenario 2).
inline constexpr link_spec cxl2_x16{64.0 * giga, 300e-9};
/// DIMM-Link: 8 lanes × 25 Gb/s = 25 GB/s per link, host-free between DIMMs
/// (TriMoE §3 and Tab. 1). Latency not published: 0.
inline constexpr link_spec dimm_link{25.0 * giga, 0.0};

/// NVIDIA H100 SXM as the context-aware GPU-NDP system uses it (Context-Aware GPU-NDP Tab. 2):
/// 989.4 TFLOP/s FP16 dense, 80 GB HBM3, PCIe Gen4 ×16 to the CXL-NDP device.
/// HBM bandwidth 3.35 TB/s from NVIDIA's SXM datasheet (the table omits it).
inline device_spec h100_sxm_gen4() {
  device_spec d;
  d.name = "H100-SXM (PCIe Gen4 x16)";
  d.capacity_bytes = 80'000'000'000ULL;
  d.compute = {.peak_flops = 989.4 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 3.35 * tera,
               .launch_seconds = 0.0};
  d.weight_link = pcie_gen4_x16;
  return d;
}

/// NVIDIA H100 PCIe 80 GB as TriMoE uses it (TriMoE Tab. 1): 819.6 TFLOP/s BF16,
/// 2.04 TB/s HBM, PCIe 5.0 at 64 GB/s for host-to-GPU weight transfer.
inline device_spec h100_pcie_gen5() {
  device_spec d;
  d.name = "H100-PCIe (PCIe Gen5 x16)";
  d.capacity_bytes = 80'000'000'000ULL;
  d.compute = {.peak_flops = 819.6 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 2.04 * tera,
               .launch_seconds = 0.0};
  d.weight_link = pcie_gen5_x16;
  return d;
}

/// The H100 80GB PCIe of CXL-MoE's testbed (CXL-MoE Tab. 1; figures as in
/// `h100_pcie_gen5`) whose missing experts come from a CXL 2.0 memory expander (§2).
inline device_spec h100_cxl_expander() {
  device_spec d = h100_pcie_gen5();
  d.name = "H100 (CXL 2.0 x16 expander)";
  d.weight_link = cxl2_x16;
  return d;
}

/// The same H100 80GB PCIe whose missing experts come from host DRAM over PCIe 5.0 at
/// CXL-MoE's effective figures (CXL-MoE §2, the CPU-offload baseline).
inline device_spec h100_host_pcie5() {
  device_spec d = h100_pcie_gen5();
  d.name = "H100 (host DRAM over PCIe 5.0)";
  d.weight_link = host_pcie5_effective;
  return d;
}

/// Intel Xeon Platinum 8470 with AMX (TriMoE Tab. 1): 90.1 TFLOP/s BF16 theoretical,
/// 8 channels × 2 DIMMs DDR5-4800 = 307.2 GB/s, 2 TB. It computes on weights in its own
/// DRAM (no weight link) and receives activations from the GPU over PCIe 5.0.
inline device_spec xeon_8470_amx() {
  device_spec d;
  d.name = "Xeon-8470 AMX";
  d.capacity_bytes = 2'000'000'000'000ULL;
  d.compute = {.peak_flops = 90.1 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 307.2 * giga,
               .launch_seconds = 0.0};
  d.activation_link = pcie_gen5_x16;
  return d;
}

/// The CXL-NDP device of the context-aware system (Context-Aware GPU-NDP Tab. 2, after MoNDE): 512 GB
/// at 512 GB/s internal bandwidth, 64 × (4×4 systolic arrays) at 1 GHz = 64·16 MAC ×
/// 2 FLOP × 1 GHz = 2.048 TFLOP/s at FP16, bit-scaled (16/b: 5.3× at 3 bits, 8× at
/// 2 bits, matching the ≈5× and 8× NDP-side reductions of §5.2). Activations cross
/// PCIe Gen4 ×16 (Tab. 2) with the CXL load latency of CXL-MoE §2 (300 ns).
inline device_spec cxl_ndp() {
  device_spec d;
  d.name = "CXL-NDP";
  d.capacity_bytes = 512'000'000'000ULL;
  d.compute = {.peak_flops = 64.0 * 16.0 * 2.0 * giga,
               .peak_bits = fp16,
               .bit_scaled_compute = true,
               .memory_bandwidth = 512.0 * giga,
               .launch_seconds = 0.0};
  d.weight_link = {pcie_gen4_x16.bandwidth, 300e-9};
  d.activation_link = {pcie_gen4_x16.bandwidth, 300e-9};
  // The GPU's reads of weights held here (fetches, copies) occupy the device's DRAM at its
  // internal 512 GB/s while the link carries them at 32 GB/s: a read of W bytes keeps the
  // memory busy for W / 512 GB/s.
  d.host_read_bandwidth = 512.0 * giga;
  return d;
}

/// DIMM-NDP units of TriMoE (Tab. 1): 16 DIMMs of DDR5-4800, each 128 GB with an
/// NDP unit of 256 GFLOP/s BF16 and 153.6 GB/s internal bandwidth; DIMM-Link 25 GB/s
/// moves weights between DIMMs. A unit runs only experts localised on it.
/// Host reads: the host's 307.2 GB/s (8 channels × 2 DIMMs) divided over the 16 DIMMs,
/// 19.2 GB/s each, so a read striped over all DIMMs sees the full 307.2 GB/s and a read
/// of an expert localised on one DIMM sees one DIMM's share (TriMoE §4.2, Eq. 2–3, 6).
/// Activations reach a DIMM over the host memory channel: one DIMM's 19.2 GB/s.
inline device_spec dimm_ndp() {
  device_spec d;
  d.name = "DIMM-NDP";
  d.execution = execution_kind::parallel_units;
  d.num_units = 16;
  d.capacity_bytes = 128'000'000'000ULL;
  d.compute = {.peak_flops = 256.0 * giga,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 153.6 * giga,
               .launch_seconds = 0.0};
  d.weight_link = dimm_link;
  d.host_read_bandwidth = 307.2 * giga / 16.0;
  d.activation_link = {307.2 * giga / 16.0, 0.0};
  return d;
}

/// The edge GPUs of Edge-MoE Tab. 1 (RTX 3080 Ti, RTX 4060 Ti, RTX A6000), from the vendors'
/// datasheets. Tensor-core FP16/BF16 peaks are dense (no 2:4 sparsity) with FP32
/// accumulation — what a BF16 matmul gets; GeForce parts run that at half their
/// FP16-accumulate rate. Memory in GiB as the cards count it. PCIe Gen4 at the nominal
/// rate, as `pcie_gen4_x16` (the 128b/130b coding would take 1.5% off).
///
/// RTX 3080 Ti: 12 GB GDDR6X, 384-bit at 19 Gbps = 912 GB/s, 80 SMs at a 1.665 GHz boost,
/// PCIe 4.0 ×16 (NVIDIA product page); 80 SMs × 512 FLOP/clk (GA102 whitepaper per-SM
/// tensor rate) × 1.665 GHz = 68.2 TFLOP/s.
inline device_spec rtx_3080_ti() {
  device_spec d;
  d.name = "RTX 3080 Ti 12GB";
  d.capacity_bytes = 12ULL * gibi;
  d.compute = {.peak_flops = 68.2 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 912.0 * giga,
               .launch_seconds = 0.0};
  d.weight_link = pcie_gen4_x16;
  return d;
}

/// RTX 4060 Ti 16 GB (Edge-MoE Tab. 1; its text says 24GB, the table and the product 16GB):
/// 16 GB GDDR6, 128-bit at 18 Gbps = 288 GB/s, 34 SMs at a 2.535 GHz boost, a PCIe 4.0 ×8
/// interface (NVIDIA product page); 34 × 512 FLOP/clk (Ada whitepaper per-SM tensor rate)
/// × 2.535 GHz = 44.1 TFLOP/s.
inline device_spec rtx_4060_ti_16gb() {
  device_spec d;
  d.name = "RTX 4060 Ti 16GB";
  d.capacity_bytes = 16ULL * gibi;
  d.compute = {.peak_flops = 44.1 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 288.0 * giga,
               .launch_seconds = 0.0};
  d.weight_link = pcie_gen4_x8;
  return d;
}

/// RTX A6000 (Edge-MoE Tab. 1): 48 GB GDDR6 at 768 GB/s, PCIe 4.0 ×16, tensor 309.7
/// TFLOP/s with sparsity = 154.8 dense, FP32 accumulate at full rate (NVIDIA datasheet).
inline device_spec rtx_a6000() {
  device_spec d;
  d.name = "RTX A6000 48GB";
  d.capacity_bytes = 48ULL * gibi;
  d.compute = {.peak_flops = 154.8 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 768.0 * giga,
               .launch_seconds = 0.0};
  d.weight_link = pcie_gen4_x16;
  return d;
}

/// The 6 CPU cores of Edge-MoE §6.1, as those of an AMD Ryzen 9 5900X (Zen 3, base 3.7 GHz,
/// DDR4-3200 dual channel; AMD product page). Zen 3 has two 256-bit FMA pipes = 32 FP32
/// FLOP/clk/core and no BF16 FMA, so BF16 weights are widened and run at the FP32 peak:
/// 6 × 32 × 3.7 GHz = 710.4 GFLOP/s. Memory 2 channels × 8 B × 3200 MT/s = 51.2 GB/s,
/// assumed reachable by 6 cores; 128 GiB of host DRAM (a configuration choice). The
/// weights are in its own memory (no weight link); activations cross the GPU's PCIe 4.0
/// ×16.
inline device_spec ryzen9_5900x_6c() {
  device_spec d;
  d.name = "6 cores of Ryzen 9 5900X";
  d.capacity_bytes = 128ULL * gibi;
  d.compute = {.peak_flops = 0.7104 * tera,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = 51.2 * giga,
               .launch_seconds = 0.0};
  d.activation_link = pcie_gen4_x16;
  return d;
}

/// A device preset and its stable name.
struct named_device {
  std::string_view name;
  device_spec (*make)();
};

/// A link preset and its stable name.
struct named_link {
  std::string_view name;
  link_spec link;
};

/// Every device preset, by the name of its function.
inline constexpr std::array<named_device, 11> devices = {{
    {"h100_sxm_gen4", h100_sxm_gen4},
    {"h100_pcie_gen5", h100_pcie_gen5},
    {"h100_cxl_expander", h100_cxl_expander},
    {"h100_host_pcie5", h100_host_pcie5},
    {"xeon_8470_amx", xeon_8470_amx},
    {"cxl_ndp", cxl_ndp},
    {"dimm_ndp", dimm_ndp},
    {"rtx_3080_ti", rtx_3080_ti},
    {"rtx_4060_ti_16gb", rtx_4060_ti_16gb},
    {"rtx_a6000", rtx_a6000},
    {"ryzen9_5900x_6c", ryzen9_5900x_6c},
}};

/// Every link preset, by the name of its constant.
inline constexpr std::array<named_link, 6> links = {{
    {"pcie_gen4_x16", pcie_gen4_x16},
    {"pcie_gen4_x8", pcie_gen4_x8},
    {"pcie_gen5_x16", pcie_gen5_x16},
    {"host_pcie5_effective", host_pcie5_effective},
    {"cxl2_x16", cxl2_x16},
    {"dimm_link", dimm_link},
}};

/// The names of the device presets, in the order of `devices`.
[[nodiscard]] constexpr std::array<std::string_view, devices.size()> names() noexcept {
  std::array<std::string_view, devices.size()> out{};
  for (std::size_t i = 0; i < devices.size(); ++i) out[i] = devices[i].name;
  return out;
}

/// The names of the link presets, in the order of `links`.
[[nodiscard]] constexpr std::array<std::string_view, links.size()> link_names() noexcept {
  std::array<std::string_view, links.size()> out{};
  for (std::size_t i = 0; i < links.size(); ++i) out[i] = links[i].name;
  return out;
}

/// The device preset named `name` (exactly, case included, e.g. "h100_sxm_gen4"), or
/// nothing.
[[nodiscard]] inline std::optional<device_spec> find(std::string_view name) {
  for (const auto& d : devices) {
    if (d.name == name) return d.make();
  }
  return std::nullopt;
}

/// The link preset named `name` (exactly, e.g. "cxl2_x16"), or nothing.
[[nodiscard]] constexpr std::optional<link_spec> find_link(std::string_view name) noexcept {
  for (const auto& l : links) {
    if (l.name == name) return l.link;
  }
  return std::nullopt;
}

}  // namespace moepolicy::presets
