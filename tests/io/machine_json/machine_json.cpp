#include "moepolicy/io/machine_json.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>

#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using moepolicy::device_spec;
using moepolicy::execution_kind;
using moepolicy::link_spec;
using moepolicy::parse_error;
using moepolicy::unlimited_bandwidth;
namespace io = moepolicy::io;
namespace presets = moepolicy::presets;

namespace {

fs::path machines() { return MOEPOLICY_EXAMPLE_MACHINES; }

io::machine_description parse(const std::string& text) { return io::parse_machine(text, "m.json"); }

/// The message of the `parse_error` that `text` raises, "" when it parses.
std::string error_of(const std::string& text) {
  try {
    static_cast<void>(parse(text));
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

bool same_link(const link_spec& a, const link_spec& b) {
  return a.bandwidth == b.bandwidth && a.latency_seconds == b.latency_seconds;
}

/// Checks every field of `got` against `want`, exactly.
void check_same_device(const device_spec& got, const device_spec& want) {
  CAPTURE(want.name);
  CHECK(got.name == want.name);
  CHECK(got.execution == want.execution);
  CHECK(got.num_units == want.num_units);
  CHECK(got.capacity_bytes == want.capacity_bytes);
  CHECK(got.compute.peak_flops == want.compute.peak_flops);
  CHECK(got.compute.peak_bits == want.compute.peak_bits);
  CHECK(got.compute.bit_scaled_compute == want.compute.bit_scaled_compute);
  CHECK(got.compute.memory_bandwidth == want.compute.memory_bandwidth);
  CHECK(got.compute.launch_seconds == want.compute.launch_seconds);
  CHECK(same_link(got.weight_link, want.weight_link));
  CHECK(same_link(got.activation_link, want.activation_link));
  CHECK(got.host_read_bandwidth == want.host_read_bandwidth);
  CHECK(got.activation_element_bytes == want.activation_element_bytes);
  CHECK(got.quant.group_size == want.quant.group_size);
  CHECK(got.quant.metadata_bits == want.quant.metadata_bits);
  CHECK(got.quant.full_precision == want.quant.full_precision);
}

/// A GPU preset spelled out in full, as docs/machine.md shows them.
std::string spelled_gpu(std::string_view name, double tflops, double hbm_gbps, std::string_view weight_link) {
  std::ostringstream os;
  os << R"({"name": ")" << name << R"(", "execution": "serial", "units": 1, "capacity_gb": 80, "peak_tflops": )"
     << tflops << R"(, "peak_bits": 16, "bit_scaled_compute": false, "memory_bandwidth_gbps": )" << hbm_gbps
     << R"(, "launch_us": 0, "weight_link": )" << weight_link
     << R"(, "activation_link": {"bandwidth_gbps": "unlimited", "latency_ns": 0},)"
     << R"( "host_read_bandwidth_gbps": "unlimited", "activation_element_bytes": 2,)"
     << R"( "quant": {"group_size": 128, "metadata_bits": 32, "full_precision_bits": 16}})";
  return os.str();
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Round trips: files that spell the presets out give the presets, bit for bit.

TEST_CASE("machine json: papers.json reproduces the presets field by field") {
  const io::machine_description m = io::read_machine(machines() / "papers.json");
  CHECK(m.name == "The papers' devices");
  // The papers use different GPUs and CPUs per family, so the file leaves those roles out.
  CHECK_FALSE(m.gpu.has_value());
  CHECK_FALSE(m.cpu.has_value());
  REQUIRE(m.cxl_ndp.has_value());
  check_same_device(*m.cxl_ndp, presets::cxl_ndp());
  REQUIRE(m.dimm_ndp.has_value());
  check_same_device(*m.dimm_ndp, presets::dimm_ndp());
  REQUIRE(m.host_link.has_value());
  CHECK(same_link(*m.host_link, presets::host_pcie5_effective));
  REQUIRE(m.cxl_link.has_value());
  CHECK(same_link(*m.cxl_link, presets::cxl2_x16));
}

TEST_CASE("machine json: every GPU and CPU preset spelled out") {
  const auto gpu = [](const std::string& device) { return *parse(R"({"gpu": )" + device + "}").gpu; };
  check_same_device(
      gpu(spelled_gpu("H100-SXM (PCIe Gen4 x16)", 989.4, 3350, R"({"bandwidth_gbps": 32, "latency_ns": 1000})")),
      presets::h100_sxm_gen4());
  check_same_device(gpu(spelled_gpu("H100-PCIe (PCIe Gen5 x16)", 819.6, 2040, R"("pcie_gen5_x16")")),
                    presets::h100_pcie_gen5());
  check_same_device(
      gpu(spelled_gpu("H100 (CXL 2.0 x16 expander)", 819.6, 2040, R"({"bandwidth_gbps": 64, "latency_ns": 300})")),
      presets::h100_cxl_expander());
  check_same_device(gpu(spelled_gpu("H100 (host DRAM over PCIe 5.0)", 819.6, 2040, R"("host_pcie5_effective")")),
                    presets::h100_host_pcie5());

  // The short forms of docs/machine.md: what is left out takes device_spec's defaults.
  check_same_device(gpu(R"j({"name": "H100-PCIe (PCIe Gen5 x16)", "capacity_gb": 80, "peak_tflops": 819.6,
                            "memory_bandwidth_gbps": 2040, "weight_link": "pcie_gen5_x16"})j"),
                    presets::h100_pcie_gen5());
  check_same_device(gpu(R"j({"name": "H100 (CXL 2.0 x16 expander)", "capacity_gb": 80, "peak_tflops": 819.6,
                            "memory_bandwidth_gbps": 2040, "weight_link": "cxl2_x16"})j"),
                    presets::h100_cxl_expander());
  const auto cpu = parse(R"({"cpu": {"name": "Xeon-8470 AMX", "capacity_gb": 2000, "peak_tflops": 90.1,
      "memory_bandwidth_gbps": 307.2, "activation_link": {"bandwidth_gbps": 64, "latency_ns": 1000}}})");
  check_same_device(*cpu.cpu, presets::xeon_8470_amx());

  // The edge devices (Edge-MoE Tab. 1), in the short forms of docs/machine.md.
  check_same_device(gpu(R"j({"name": "RTX 3080 Ti 12GB", "capacity_gb": 12.884901888, "peak_tflops": 68.2,
                            "memory_bandwidth_gbps": 912, "weight_link": "pcie_gen4_x16"})j"),
                    presets::rtx_3080_ti());
  check_same_device(gpu(R"j({"name": "RTX 4060 Ti 16GB", "capacity_gb": 17.179869184, "peak_tflops": 44.1,
                            "memory_bandwidth_gbps": 288, "weight_link": "pcie_gen4_x8"})j"),
                    presets::rtx_4060_ti_16gb());
  check_same_device(gpu(R"j({"name": "RTX A6000 48GB", "capacity_gb": 51.539607552, "peak_tflops": 154.8,
                            "memory_bandwidth_gbps": 768, "weight_link": "pcie_gen4_x16"})j"),
                    presets::rtx_a6000());
  const auto six = parse(R"({"cpu": {"name": "6 cores of Ryzen 9 5900X", "capacity_gb": 137.438953472,
      "peak_tflops": 0.7104, "memory_bandwidth_gbps": 51.2, "activation_link": "pcie_gen4_x16"}})");
  check_same_device(*six.cpu, presets::ryzen9_5900x_6c());
}

TEST_CASE("machine json: preset names, bare or as a base") {
  for (std::string_view name : presets::names()) {
    CAPTURE(name);
    const std::string n(name);
    const auto bare = parse(R"({"gpu": ")" + n + R"("})");
    const auto based = parse(R"({"cpu": {"preset": ")" + n + R"("}})");
    check_same_device(*bare.gpu, *presets::find(name));
    check_same_device(*based.cpu, *presets::find(name));
  }
  for (std::string_view name : presets::link_names()) {
    CAPTURE(name);
    const std::string n(name);
    const auto m = parse(R"({"host_link": ")" + n + R"(", "cxl_link": {"preset": ")" + n + R"("}})");
    CHECK(same_link(*m.host_link, *presets::find_link(name)));
    CHECK(same_link(*m.cxl_link, *presets::find_link(name)));
  }
  const auto empty = parse("{}");
  CHECK(empty.name.empty());
  CHECK_FALSE(empty.gpu.has_value());
  CHECK_FALSE(empty.cpu.has_value());
  CHECK_FALSE(empty.cxl_ndp.has_value());
  CHECK_FALSE(empty.dimm_ndp.has_value());
  CHECK_FALSE(empty.host_link.has_value());
  CHECK_FALSE(empty.cxl_link.has_value());
}

// ---------------------------------------------------------------------------------------
// Partial overrides.

TEST_CASE("machine json: a preset with some fields overridden keeps the rest") {
  const auto m = parse(R"({
    "gpu": {"preset": "h100_pcie_gen5", "capacity_gb": 40, "launch_us": 5,
            "weight_link": {"latency_ns": 2000}, "quant": {"group_size": 64}},
    "dimm_ndp": {"preset": "dimm_ndp", "units": 8, "host_read_bandwidth_gbps": "unlimited",
                 "activation_link": {"preset": "pcie_gen4_x16", "latency_ns": 0}},
    "cxl_ndp": {"preset": "cxl_ndp", "name": "My NDP", "bit_scaled_compute": false, "peak_bits": 8,
                "activation_element_bytes": 1, "weight_link": "cxl2_x16"},
    "cxl_link": {"preset": "cxl2_x16", "bandwidth_gbps": 128}
  })");
  device_spec gpu = presets::h100_pcie_gen5();
  gpu.capacity_bytes = 40'000'000'000ULL;
  gpu.compute.launch_seconds = 5e-6;
  gpu.weight_link.latency_seconds = 2e-6;
  gpu.quant.group_size = 64;
  check_same_device(*m.gpu, gpu);

  device_spec dimm = presets::dimm_ndp();
  dimm.num_units = 8;
  dimm.host_read_bandwidth = unlimited_bandwidth;
  dimm.activation_link = {presets::pcie_gen4_x16.bandwidth, 0.0};
  check_same_device(*m.dimm_ndp, dimm);

  device_spec ndp = presets::cxl_ndp();
  ndp.name = "My NDP";
  ndp.compute.bit_scaled_compute = false;
  ndp.compute.peak_bits = moepolicy::int8;
  ndp.activation_element_bytes = 1.0;
  ndp.weight_link = presets::cxl2_x16;
  check_same_device(*m.cxl_ndp, ndp);

  CHECK(same_link(*m.cxl_link, {128e9, 300e-9}));
  CHECK_FALSE(m.cpu.has_value());
  CHECK_FALSE(m.host_link.has_value());
}

TEST_CASE("machine json: units, rounding and accepted number forms") {
  const auto m = parse(R"({"name": "", "gpu": {"preset": "h100_sxm_gen4", "capacity_gb": 25.769803776,
      "memory_bandwidth_gbps": 1008, "peak_tflops": 165.2, "launch_us": 2.5},
      "dimm_ndp": {"preset": "dimm_ndp", "units": 4.0, "quant": {"group_size": 0, "metadata_bits": 0,
      "full_precision_bits": 8.0}},
      "host_link": {"bandwidth_gbps": "unlimited", "latency_ns": 0}})");
  CHECK(m.name.empty());
  CHECK(m.gpu->capacity_bytes == 24ULL * moepolicy::gibi);  // rounded to the nearest byte
  CHECK(m.gpu->compute.memory_bandwidth == 1008e9);
  CHECK(m.gpu->compute.peak_flops == 165.2 * moepolicy::tera);
  CHECK(m.gpu->compute.launch_seconds == 2.5e-6);
  CHECK(m.dimm_ndp->num_units == 4);
  CHECK(m.dimm_ndp->quant.group_size == 0);
  CHECK(m.dimm_ndp->quant.metadata_bits == 0);
  CHECK(m.dimm_ndp->quant.full_precision == moepolicy::int8);
  CHECK(same_link(*m.host_link, link_spec{}));  // unlimited and free
}

TEST_CASE("machine json: apply_role") {
  const auto m = parse(R"({"gpu": "h100_pcie_gen5", "cxl_link": "pcie_gen5_x16"})");
  check_same_device(io::apply_role(m.gpu, presets::h100_sxm_gen4()), presets::h100_pcie_gen5());
  check_same_device(io::apply_role(m.cpu, presets::xeon_8470_amx()), presets::xeon_8470_amx());
  CHECK(same_link(io::apply_role(m.cxl_link, presets::cxl2_x16), presets::pcie_gen5_x16));
  CHECK(same_link(io::apply_role(m.host_link, presets::host_pcie5_effective), presets::host_pcie5_effective));
}

// ---------------------------------------------------------------------------------------
// The example files.

TEST_CASE("machine json: example-workstation.json") {
  const io::machine_description m = io::read_machine(machines() / "example-workstation.json");
  CHECK(m.name == "Workstation: GeForce RTX 4090 + Ryzen 9 7950X");
  REQUIRE(m.gpu.has_value());
  CHECK(m.gpu->name == "GeForce RTX 4090 24GB");
  CHECK(m.gpu->execution == execution_kind::serial);
  CHECK(m.gpu->capacity_bytes == 24ULL * moepolicy::gibi);
  CHECK(m.gpu->compute.peak_flops == doctest::Approx(165.2e12));
  CHECK(m.gpu->compute.memory_bandwidth == doctest::Approx(1008e9));
  CHECK(same_link(m.gpu->weight_link, presets::pcie_gen4_x16));
  CHECK(m.gpu->activation_link.bandwidth == unlimited_bandwidth);
  REQUIRE(m.cpu.has_value());
  CHECK(m.cpu->capacity_bytes == 64ULL * moepolicy::gibi);
  CHECK(m.cpu->compute.peak_flops == doctest::Approx(16 * 32 * 4.5e9));
  CHECK(m.cpu->compute.memory_bandwidth == doctest::Approx(2 * 8 * 5200e6));
  CHECK(m.cpu->weight_link.bandwidth == unlimited_bandwidth);
  CHECK(same_link(m.cpu->activation_link, presets::pcie_gen4_x16));
  CHECK_FALSE(m.cxl_ndp.has_value());
  CHECK_FALSE(m.dimm_ndp.has_value());
  REQUIRE(m.host_link.has_value());
  CHECK(same_link(*m.host_link, presets::pcie_gen4_x16));
  CHECK_FALSE(m.cxl_link.has_value());
}

TEST_CASE("machine json: the stream reader and a missing file") {
  std::istringstream in(R"({"name": "s", "gpu": "h100_sxm_gen4"})");
  const auto m = io::read_machine(in, "stdin");
  CHECK(m.name == "s");
  CHECK(m.gpu->name == presets::h100_sxm_gen4().name);
  std::istringstream bad("{");
  CHECK_PARSE_ERROR(static_cast<void>(io::read_machine(bad, "stdin")),
                    "stdin:1: invalid JSON at column 2: syntax error while parsing object key - unexpected end of "
                    "input; expected string literal");
  const fs::path missing = machines() / "no-such-machine.json";
  CHECK_PARSE_ERROR(static_cast<void>(io::read_machine(missing)),
                    missing.string() + ": cannot open: No such file or directory");
  CHECK_PARSE_ERROR(static_cast<void>(io::read_machine(machines())),
                    machines().string() + ": is a directory, not a file");
}

// ---------------------------------------------------------------------------------------
// Errors, one class at a time, with the exact message.

TEST_CASE("machine json: syntax errors give the line and column") {
  CHECK(error_of("") ==
        "m.json:1: invalid JSON at column 1: syntax error while parsing value - unexpected end of input; expected "
        "'[', '{', or a literal");
  CHECK(error_of("{\n  \"gpu\": tru\n}") ==
        "m.json:2: invalid JSON at column 13: syntax error while parsing value - invalid literal; last read: "
        "'\"gpu\": tru<U+000A>'");
  CHECK(error_of("{\"name\": \"a\"} {}") ==
        "m.json:1: invalid JSON at column 15: syntax error while parsing value - unexpected '{'; expected end of "
        "input");
  CHECK(error_of("{\n\"gpu\": {\"preset\": \"h100_sxm_gen4\",\n  \"capacity_gb\": 1e400}}") ==
        "m.json:3: invalid JSON at column 22: number overflow parsing '1e400'");
  CHECK(error_of("{\"name\": \"\xff\"}") ==
        "m.json:1: invalid JSON at column 11: syntax error while parsing value - invalid string: ill-formed UTF-8 "
        "byte; last read: '\"\\xff'");
  CHECK(error_of("{\"gpu\": \"h100_sxm_gen4\",}") ==
        "m.json:1: invalid JSON at column 25: syntax error while parsing object key - unexpected '}'; expected "
        "string literal");
}

TEST_CASE("machine json: wrong shape at the top level") {
  CHECK(error_of("[1]") == "m.json: expected a JSON object at the top level, got an array");
  CHECK(error_of("\"h100_sxm_gen4\"") == "m.json: expected a JSON object at the top level, got \"h100_sxm_gen4\"");
  CHECK(error_of(R"({"name": 3})") == "m.json: name: expected a string, got 3");
  CHECK(error_of(R"({"gpus": "h100_sxm_gen4"})") ==
        "m.json: unknown key \"gpus\" (allowed: name, gpu, cpu, cxl_ndp, dimm_ndp, host_link, cxl_link)");
  CHECK(error_of(R"({"gpu": "h100_sxm_gen4", "gpu": "h100_pcie_gen5"})") == "m.json: duplicate key \"gpu\"");
}

TEST_CASE("machine json: roles of the wrong type or null") {
  CHECK(error_of(R"({"gpu": null})") ==
        "m.json: gpu: expected a device preset name or an object, got null (leave the key out to keep each "
        "family's paper device)");
  CHECK(error_of(R"({"dimm_ndp": null})") ==
        "m.json: dimm_ndp: expected a device preset name or an object, got null (leave the key out to keep each "
        "family's paper device)");
  CHECK(error_of(R"({"host_link": null})") ==
        "m.json: host_link: expected a link preset name or an object, got null (leave the key out to keep each "
        "family's paper link)");
  CHECK(error_of(R"({"cpu": 5})") == "m.json: cpu: expected a device preset name or an object, got 5");
  CHECK(error_of(R"({"cxl_ndp": ["cxl_ndp"]})") ==
        "m.json: cxl_ndp: expected a device preset name or an object, got an array");
  CHECK(error_of(R"({"cxl_link": true})") == "m.json: cxl_link: expected a link preset name or an object, got true");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "weight_link": null}})") ==
        "m.json: gpu.weight_link: expected a link preset name or an object, got null");
}

TEST_CASE("machine json: unknown keys name the keys allowed") {
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "peak_tflop": 1}})") ==
        "m.json: gpu: unknown key \"peak_tflop\" (allowed: preset, name, execution, units, capacity_gb, "
        "peak_tflops, peak_bits, bit_scaled_compute, memory_bandwidth_gbps, launch_us, weight_link, "
        "activation_link, host_read_bandwidth_gbps, activation_element_bytes, quant)");
  CHECK(error_of(R"({"cxl_link": {"preset": "cxl2_x16", "bandwidth": 1}})") ==
        "m.json: cxl_link: unknown key \"bandwidth\" (allowed: preset, bandwidth_gbps, latency_ns)");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "weight_link": {"latency_us": 1}}})") ==
        "m.json: gpu.weight_link: unknown key \"latency_us\" (allowed: preset, bandwidth_gbps, latency_ns)");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "quant": {"bits": 4}}})") ==
        "m.json: gpu.quant: unknown key \"bits\" (allowed: group_size, metadata_bits, full_precision_bits)");
  // Odd keys are quoted as JSON writes them and cut after 40 bytes.
  CHECK(error_of("{\"a\\\"b\\u0001\": 1}") ==
        "m.json: unknown key \"a\\\"b\\u0001\" (allowed: name, gpu, cpu, cxl_ndp, dimm_ndp, host_link, cxl_link)");
  CHECK(error_of(R"({"0123456789012345678901234567890123456789xyz": 1})") ==
        "m.json: unknown key \"0123456789012345678901234567890123456789...\" (allowed: name, gpu, cpu, cxl_ndp, "
        "dimm_ndp, host_link, cxl_link)");
}

TEST_CASE("machine json: unknown presets list the names known") {
  const std::string devices =
      "h100_sxm_gen4, h100_pcie_gen5, h100_cxl_expander, h100_host_pcie5, xeon_8470_amx, cxl_ndp, dimm_ndp, "
      "rtx_3080_ti, rtx_4060_ti_16gb, rtx_a6000, ryzen9_5900x_6c";
  const std::string links = "pcie_gen4_x16, pcie_gen4_x8, pcie_gen5_x16, host_pcie5_effective, cxl2_x16, dimm_link";
  CHECK(error_of(R"({"gpu": "h100"})") == "m.json: gpu: unknown device preset \"h100\" (known: " + devices + ")");
  CHECK(error_of(R"({"gpu": "H100_SXM_GEN4"})") ==
        "m.json: gpu: unknown device preset \"H100_SXM_GEN4\" (known: " + devices + ")");
  CHECK(error_of(R"({"gpu": "cxl2_x16"})") ==
        "m.json: gpu: unknown device preset \"cxl2_x16\" (known: " + devices + ")");
  CHECK(error_of(R"({"cpu": {"preset": "xeon"}})") ==
        "m.json: cpu.preset: unknown device preset \"xeon\" (known: " + devices + ")");
  CHECK(error_of(R"({"cpu": {"preset": 8470}})") ==
        "m.json: cpu.preset: expected a device preset name (a string), got 8470");
  CHECK(error_of(R"({"host_link": "pcie6"})") ==
        "m.json: host_link: unknown link preset \"pcie6\" (known: " + links + ")");
  CHECK(error_of(R"({"host_link": "cxl_ndp"})") ==
        "m.json: host_link: unknown link preset \"cxl_ndp\" (known: " + links + ")");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "weight_link": {"preset": "pcie7"}}})") ==
        "m.json: gpu.weight_link.preset: unknown link preset \"pcie7\" (known: " + links + ")");
  CHECK(error_of(R"({"cxl_link": {"preset": ["cxl2_x16"]}})") ==
        "m.json: cxl_link.preset: expected a link preset name (a string), got an array");
}

TEST_CASE("machine json: values of the wrong type") {
  const std::string gpu = R"({"gpu": {"preset": "h100_sxm_gen4", )";
  CHECK(error_of(gpu + R"("peak_tflops": "989.4"}})") ==
        "m.json: gpu.peak_tflops: expected a number in [1e-6, 1e6], got \"989.4\"");
  CHECK(error_of(gpu + R"("name": 1}})") == "m.json: gpu.name: expected a non-empty string, got 1");
  CHECK(error_of(gpu + R"("bit_scaled_compute": 1}})") ==
        "m.json: gpu.bit_scaled_compute: expected true or false, got 1");
  CHECK(error_of(gpu + R"("execution": "parallel"}})") ==
        "m.json: gpu.execution: expected \"serial\" or \"parallel_units\", got \"parallel\"");
  CHECK(error_of(gpu + R"("execution": 2}})") ==
        "m.json: gpu.execution: expected \"serial\" or \"parallel_units\", got 2");
  CHECK(error_of(gpu + R"("units": "1"}})") ==
        "m.json: gpu.units: expected a whole number in [1, 4294967295], got \"1\"");
  CHECK(error_of(gpu + R"("quant": 4}})") == "m.json: gpu.quant: expected an object, got 4");
  CHECK(error_of(gpu + R"("capacity_gb": {"gb": 80}}})") ==
        "m.json: gpu.capacity_gb: expected a number in [0, 1e9], got an object");
  CHECK(error_of(gpu + R"("host_read_bandwidth_gbps": "infinite"}})") ==
        "m.json: gpu.host_read_bandwidth_gbps: expected a number in [1e-6, 1e6] or \"unlimited\", got "
        "\"infinite\"");
  CHECK(error_of(gpu + R"("memory_bandwidth_gbps": "unlimited"}})") ==
        "m.json: gpu.memory_bandwidth_gbps: expected a number in [1e-6, 1e6], got \"unlimited\"");
  CHECK(error_of(gpu + R"("launch_us": null}})") == "m.json: gpu.launch_us: expected a number in [0, 1e9], got null");
}

TEST_CASE("machine json: numbers out of range") {
  const std::string gpu = R"({"gpu": {"preset": "h100_sxm_gen4", )";
  CHECK(error_of(gpu + R"("peak_tflops": 0}})") == "m.json: gpu.peak_tflops: expected a number in [1e-6, 1e6], got 0");
  CHECK(error_of(gpu + R"("peak_tflops": -989.4}})") == "m.json: gpu.peak_tflops: expected a number in [1e-6, 1e6], got -989.4");
  CHECK(error_of(gpu + R"("peak_tflops": 1e300}})") == "m.json: gpu.peak_tflops: expected a number in [1e-6, 1e6], got 1e+300");
  CHECK(error_of(gpu + R"("memory_bandwidth_gbps": 0.0}})") ==
        "m.json: gpu.memory_bandwidth_gbps: expected a number in [1e-6, 1e6], got 0.0");
  CHECK(error_of(gpu + R"("capacity_gb": -80}})") == "m.json: gpu.capacity_gb: expected a number in [0, 1e9], got -80");
  CHECK(error_of(gpu + R"("capacity_gb": 1e11}})") ==
        "m.json: gpu.capacity_gb: expected a number in [0, 1e9], got 100000000000.0");
  CHECK(error_of(gpu + R"("launch_us": -1}})") == "m.json: gpu.launch_us: expected a number in [0, 1e9], got -1");
  CHECK(error_of(gpu + R"("activation_element_bytes": 0}})") ==
        "m.json: gpu.activation_element_bytes: expected a number in [1e-3, 64], got 0");
  CHECK(error_of(gpu + R"("peak_bits": 33}})") == "m.json: gpu.peak_bits: expected a whole number in [1, 32], got 33");
  CHECK(error_of(gpu + R"("peak_bits": 0}})") == "m.json: gpu.peak_bits: expected a whole number in [1, 32], got 0");
  CHECK(error_of(gpu + R"("units": 0}})") == "m.json: gpu.units: expected a whole number in [1, 4294967295], got 0");
  CHECK(error_of(gpu + R"("units": -1}})") == "m.json: gpu.units: expected a whole number in [1, 4294967295], got -1");
  CHECK(error_of(gpu + R"("units": 1.5}})") ==
        "m.json: gpu.units: expected a whole number in [1, 4294967295], got 1.5");
  CHECK(error_of(gpu + R"("units": 4294967296}})") ==
        "m.json: gpu.units: expected a whole number in [1, 4294967295], got 4294967296");
  CHECK(error_of(gpu + R"("quant": {"metadata_bits": -32}}})") ==
        "m.json: gpu.quant.metadata_bits: expected a whole number in [0, 4294967295], got -32");
  CHECK(error_of(gpu + R"("quant": {"full_precision_bits": 64}}})") ==
        "m.json: gpu.quant.full_precision_bits: expected a whole number in [1, 32], got 64");
  CHECK(error_of(gpu + R"("weight_link": {"bandwidth_gbps": 0}}})") ==
        "m.json: gpu.weight_link.bandwidth_gbps: expected a number in [1e-6, 1e6] or \"unlimited\", got 0");
  CHECK(error_of(gpu + R"("weight_link": {"latency_ns": -300}}})") ==
        "m.json: gpu.weight_link.latency_ns: expected a number in [0, 1e12], got -300");
  CHECK(error_of(R"({"host_link": {"bandwidth_gbps": 1e300, "latency_ns": 0}})") ==
        "m.json: host_link.bandwidth_gbps: expected a number in [1e-6, 1e6] or \"unlimited\", got 1e+300");
  CHECK(error_of(gpu + R"("name": ""}})") == "m.json: gpu.name: expected a non-empty string, got \"\"");
}

TEST_CASE("machine json: every number has a range that keeps the priced times finite") {
  // The review's finding: launch_us 1e308 was accepted and filled the tables with inf,
  // where every other field had a range.
  const std::string gpu = R"({"gpu": {"preset": "h100_sxm_gen4", )";
  CHECK(error_of(gpu + R"("launch_us": 1e308}})") == "m.json: gpu.launch_us: expected a number in [0, 1e9], got 1e+308");
  CHECK(error_of(gpu + R"("launch_us": 1e9}})").empty());
  CHECK(error_of(gpu + R"("weight_link": {"latency_ns": 1e308}}})") ==
        "m.json: gpu.weight_link.latency_ns: expected a number in [0, 1e12], got 1e+308");
  CHECK(error_of(gpu + R"("peak_tflops": 1e-300}})") ==
        "m.json: gpu.peak_tflops: expected a number in [1e-6, 1e6], got 1e-300");
  CHECK(error_of(gpu + R"("memory_bandwidth_gbps": 1e-300}})") ==
        "m.json: gpu.memory_bandwidth_gbps: expected a number in [1e-6, 1e6], got 1e-300");
  CHECK(error_of(gpu + R"("activation_element_bytes": 1e308}})") ==
        "m.json: gpu.activation_element_bytes: expected a number in [1e-3, 64], got 1e+308");
  CHECK(error_of(R"({"cxl_link": {"bandwidth_gbps": 1e-300, "latency_ns": 0}})") ==
        "m.json: cxl_link.bandwidth_gbps: expected a number in [1e-6, 1e6] or \"unlimited\", got 1e-300");
  // At the bounds, every time a device prices is finite.
  const auto m = parse(gpu + R"("peak_tflops": 1e-6, "memory_bandwidth_gbps": 1e-6, "launch_us": 1e9,
      "weight_link": {"bandwidth_gbps": 1e-6, "latency_ns": 1e12}}})");
  REQUIRE(m.gpu.has_value());
  const moepolicy::roofline_cost c(*m.gpu, moepolicy::models::deepseek_v3());
  const moepolicy::expert_key e{3, 5};
  CHECK(std::isfinite(c.compute_seconds(e, moepolicy::fp16, std::size_t{1} << 32)));
  CHECK(std::isfinite(c.transfer_seconds(c.footprint_bytes(e, moepolicy::fp16))));
  CHECK(std::isfinite(c.activation_transfer_seconds(std::size_t{1} << 32)));
}

TEST_CASE("machine json: nesting and size are bounded") {
  // Nesting beyond input_limits::max_json_depth stops at the line that goes too deep,
  // before any value is built, copied or printed.
  const std::string deep = "{\"name\":\n" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK(error_of(deep) == "m.json:2: JSON nested deeper than 64 levels (input_limits::max_json_depth)");
  CHECK(error_of("{\"name\": " + std::string(63, '[') + std::string(63, ']') + "}") ==
        "m.json: name: expected a string, got an array");
  {
    moepolicy::scoped_input_limits small({.max_json_depth = 2});
    CHECK(error_of(R"({"gpu": {"quant": {}}})") ==
          "m.json:1: JSON nested deeper than 2 levels (input_limits::max_json_depth)");
  }
  moepolicy::scoped_input_limits tiny({.max_json_bytes = 16});
  std::istringstream in(R"({"name": "0123456789"})");
  CHECK_THROWS_WITH_AS(static_cast<void>(moepolicy::io::read_machine(in, "stdin")),
                       "stdin: larger than the limit of 16 bytes (input_limits::max_json_bytes)", parse_error);
}

TEST_CASE("machine json: missing keys without a preset") {
  CHECK(error_of(R"({"gpu": {}})") == "m.json: gpu: missing key \"name\" (required without \"preset\")");
  CHECK(error_of(R"({"gpu": {"name": "x"}})") ==
        "m.json: gpu: missing key \"capacity_gb\" (required without \"preset\")");
  const std::string core = R"("name": "x", "capacity_gb": 1, "peak_tflops": 1, "memory_bandwidth_gbps": 1)";
  CHECK(error_of(R"({"gpu": {)" + core + "}}") ==
        "m.json: gpu: missing key \"weight_link\" (required without \"preset\")");
  CHECK(error_of(R"({"cpu": {)" + core + "}}") ==
        "m.json: cpu: missing key \"activation_link\" (required without \"preset\")");
  CHECK(error_of(R"({"cxl_ndp": {)" + core + R"(, "weight_link": "cxl2_x16", "activation_link": "cxl2_x16"}})") ==
        "m.json: cxl_ndp: missing key \"host_read_bandwidth_gbps\" (required without \"preset\")");
  CHECK(error_of(R"({"dimm_ndp": {)" + core + "}}") ==
        "m.json: dimm_ndp: missing key \"execution\" (required without \"preset\")");
  CHECK(error_of(R"({"host_link": {"bandwidth_gbps": 10}})") ==
        "m.json: host_link: missing key \"latency_ns\" (required without \"preset\")");
  CHECK(error_of(R"({"cxl_link": {}})") ==
        "m.json: cxl_link: missing key \"bandwidth_gbps\" (required without \"preset\")");
  CHECK(error_of(R"({"gpu": {)" + core + R"(, "weight_link": {"bandwidth_gbps": 32}}})") ==
        "m.json: gpu.weight_link: missing key \"latency_ns\" (required when neither the link nor its device names a "
        "\"preset\")");
  // Complete without a preset: every role's minimum.
  const auto m = parse(R"({"gpu": {)" + core + R"(, "weight_link": "pcie_gen4_x16"},
      "cpu": {)" + core +
                       R"(, "activation_link": "pcie_gen5_x16"},
      "cxl_ndp": {)" + core +
                       R"(, "weight_link": "cxl2_x16", "activation_link": "cxl2_x16",
                  "host_read_bandwidth_gbps": 64},
      "dimm_ndp": {)" + core +
                       R"(, "execution": "parallel_units", "units": 4, "weight_link": "dimm_link",
                   "activation_link": {"bandwidth_gbps": 19.2, "latency_ns": 0}, "host_read_bandwidth_gbps": 19.2}})");
  CHECK(m.gpu->capacity_bytes == 1'000'000'000ULL);
  CHECK(m.gpu->activation_link.bandwidth == unlimited_bandwidth);  // device_spec's default
  CHECK(m.dimm_ndp->execution == execution_kind::parallel_units);
  CHECK(m.dimm_ndp->num_units == 4);
}

TEST_CASE("machine json: fields that contradict each other") {
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "units": 2}})") ==
        "m.json: gpu.units: execution \"serial\" needs units 1, got units 2");
  CHECK(error_of(R"({"dimm_ndp": {"preset": "dimm_ndp", "execution": "serial"}})") ==
        "m.json: dimm_ndp.execution: execution \"serial\" needs units 1, got units 16");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "quant": {"group_size": 0}}})") ==
        "m.json: gpu.quant.group_size: group_size 0 (no groups) needs metadata_bits 0, got metadata_bits 32");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "quant": {"group_size": 0, "metadata_bits": 16}}})") ==
        "m.json: gpu.quant.group_size: group_size 0 (no groups) needs metadata_bits 0, got metadata_bits 16");
  CHECK(error_of(R"({"dimm_ndp": {"preset": "dimm_ndp", "execution": "serial", "units": 1}})").empty());
}

TEST_CASE("machine json: repeated keys are errors, not last-one-wins") {
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "preset": "cxl_ndp"}})") ==
        "m.json: gpu: duplicate key \"preset\"");
  CHECK(error_of(R"({"gpu": {"preset": "h100_sxm_gen4", "weight_link": {"latency_ns": 1, "latency_ns": 2}}})") ==
        "m.json: gpu.weight_link: duplicate key \"latency_ns\"");
}

TEST_CASE("machine json: device_spec::validate messages point at the key") {
  namespace mj = io::detail::machine_json;
  CHECK(mj::validate_path("gpu", "moepolicy::device_spec::validate(x): compute.peak_flops must be > 0, got 0") ==
        "gpu.peak_tflops");
  CHECK(mj::validate_path("gpu",
                          "moepolicy::device_spec::validate(a): b): weight_link.latency_seconds must be "
                          "finite and >= 0, got -1") == "gpu.weight_link.latency_ns");
  CHECK(mj::validate_path("cpu",
                          "moepolicy::device_spec::validate(x): a serial device has exactly 1 unit, "
                          "num_units, got 2") == "cpu.units");
  CHECK(mj::validate_path("cpu", "moepolicy::device_spec::validate(x): something new") == "cpu");
  CHECK(mj::validate_path("cpu", "no such shape") == "cpu");
}
