// moepolicy/io/machine_json.hpp — a machine's devices described in a small JSON file (the
// `--machine` option of `moepolicy report`); docs/machine.md has the full guide.
//
// The file names the devices of one machine by role. Each role given replaces that role
// in every system family a caller runs; a role left out keeps each family's own paper
// preset (`apply_role`). The schema, where GB = 1e9 bytes as in core/units.hpp:
//
//   {
//     "name":      string                  optional, the machine's name ("" when absent)
//     "gpu":       device                  the GPU that runs dense layers and cached experts
//     "cpu":       device                  the host CPU computing on experts in host DRAM
//     "cxl_ndp":   device                  a CXL-attached near-data-processing device
//     "dimm_ndp":  device                  DIMM-side near-data-processing units
//     "host_link": link                    host DRAM → GPU, for experts fetched on demand
//     "cxl_link":  link                    CXL memory expander → GPU
//   }
//
// A device is a device preset name (`presets::names()`: "h100_sxm_gen4", "h100_pcie_gen5",
// "h100_cxl_expander", "h100_host_pcie5", "xeon_8470_amx", "cxl_ndp", "dimm_ndp") or an
// object of these keys (which are required without "preset" is said below):
//
//   "preset"                    device preset name: the base the other keys override
//   "name"                      non-empty string
//   "execution"                 "serial" | "parallel_units"
//   "units"                     whole number >= 1 (exactly 1 for a serial device)
//   "capacity_gb"               number in [0, 1e9]: memory per unit for expert weights, rounded
//                               to the nearest byte
//   "peak_tflops"               number in [1e-6, 1e6]: TFLOP/s of one unit at "peak_bits"
//   "peak_bits"                 whole number in [1, 32]
//   "bit_scaled_compute"        true | false
//   "memory_bandwidth_gbps"     number in [1e-6, 1e6]: GB/s at which a unit reads its own
//                               memory
//   "launch_us"                 number in [0, 1e9]: µs per expert invocation
//   "weight_link"               link: brings expert weights into the device
//   "activation_link"           link: carries activations to the device and back
//   "host_read_bandwidth_gbps"  number in [1e-6, 1e6] or "unlimited": reads of a unit's
//                               memory by other devices
//   "activation_element_bytes"  number in [1e-3, 64]
//   "quant"                     object, keys all optional: "group_size" (whole number
//                               >= 0), "metadata_bits" (whole number >= 0; needs
//                               group_size > 0 when > 0), "full_precision_bits" ([1, 32])
//
// Without "preset" the device starts from `device_spec`'s defaults (serial, 1 unit,
// FP16 peak, unlimited links and host reads, 2-byte activations, 128-weight groups of
// 32 metadata bits) and must give "name", "capacity_gb", "peak_tflops" and
// "memory_bandwidth_gbps", plus what its role depends on: "gpu" needs "weight_link";
// "cpu" needs "activation_link"; "cxl_ndp" needs "weight_link", "activation_link" and
// "host_read_bandwidth_gbps"; "dimm_ndp" needs those three and "execution" and "units".
// With "preset", fields not given keep the preset's values, the name included.
//
// A link is a link preset name (`presets::link_names()`: "pcie_gen4_x16",
// "pcie_gen5_x16", "host_pcie5_effective", "cxl2_x16", "dimm_link") or an object of
//
//   "preset"          link preset name: the base the other keys override
//   "bandwidth_gbps"  number in [1e-6, 1e6] or "unlimited": GB/s per direction
//   "latency_ns"      number in [0, 1e12]: ns per transfer
//
// A link object without "preset" inside a device that has a "preset" overrides that
// device preset's link; otherwise (and always for "host_link" and "cxl_link") it must
// give both "bandwidth_gbps" and "latency_ns".
//
// Every device read is checked with `device_spec::validate()`. Errors are
// `moepolicy::parse_error` only (no nlohmann or `invalid_argument` exception escapes):
//   - text that is not JSON (a syntax error, a number too large for a double, trailing
//     content, ill-formed UTF-8) → `<file>:<line>: invalid JSON at column <c>: <nlohmann's
//     reason>`: the 1-based line and byte column where the parser stopped, the reason's
//     bytes outside printable ASCII written `\xNN`;
//   - nesting deeper than `input_limits::max_json_depth`, a file larger than
//     `input_limits::max_json_bytes` → as io/json_document.hpp says;
//   - anything else → `<file>: <JSON path>: <problem>` without a line (kind
//     `file_location::kind::none`), the path written with dots (`gpu.quant.group_size`),
//     the problem naming the value found: an unknown key (with the keys
//     allowed there), a wrong type, an unknown preset (with the names known), a number
//     out of range, a missing key, a role given as null, a key repeated in one object
//     (the DOM would keep only one), a serial device with several units.
// Nothing is ignored or clamped, and the only defaults are the ones stated above. The
// number ranges keep every time and size a model derives from the file finite.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/io/json_document.hpp"
#include "moepolicy/io/tables_json.hpp"  // the path spelling and messages of the io JSON readers

namespace moepolicy::io {

/// The devices of one machine, by role; a role is empty where the file leaves it out.
struct machine_description {
  /// "name"; empty when absent.
  std::string name;
  std::optional<device_spec> gpu;
  std::optional<device_spec> cpu;
  std::optional<device_spec> cxl_ndp;
  std::optional<device_spec> dimm_ndp;
  std::optional<link_spec> host_link;
  std::optional<link_spec> cxl_link;
};

/// The device a family runs in a role: the machine's when it gives one, else the
/// family's paper preset `preset`.
[[nodiscard]] inline device_spec apply_role(const std::optional<device_spec>& given, device_spec preset) {
  return given ? *given : preset;
}

/// The link a family uses in a role: the machine's when it gives one, else `preset`.
[[nodiscard]] constexpr link_spec apply_role(const std::optional<link_spec>& given, link_spec preset) noexcept {
  return given ? *given : preset;
}

namespace detail::machine_json {

using json = nlohmann::json;
using tables_json::key_path;

enum class role : std::uint8_t { gpu, cpu, cxl_ndp, dimm_ndp };

inline constexpr std::string_view top_keys[] = {"name", "gpu", "cpu", "cxl_ndp", "dimm_ndp", "host_link", "cxl_link"};

inline constexpr std::string_view device_keys[] = {
    "preset", "name", "execution", "units", "capacity_gb", "peak_tflops", "peak_bits", "bit_scaled_compute",
    "memory_bandwidth_gbps", "launch_us", "weight_link", "activation_link", "host_read_bandwidth_gbps",
    "activation_element_bytes", "quant"};

inline constexpr std::string_view link_keys[] = {"preset", "bandwidth_gbps", "latency_ns"};

inline constexpr std::string_view quant_keys[] = {"group_size", "metadata_bits", "full_precision_bits"};

/// The values a number key accepts, and how messages write them. The bounds keep every
/// time and size the models derive finite (a FLOP count of 10^18 at the lowest rate is
/// 10^12 s) while leaving orders of magnitude around any real machine.
struct number_range {
  double lo;
  double hi;
  std::string_view text;
};
inline constexpr number_range capacity_gb_range{0.0, 1e9, "[0, 1e9]"};
inline constexpr number_range peak_tflops_range{1e-6, 1e6, "[1e-6, 1e6]"};
inline constexpr number_range bandwidth_range{1e-6, 1e6, "[1e-6, 1e6]"};
inline constexpr number_range launch_us_range{0.0, 1e9, "[0, 1e9]"};
inline constexpr number_range latency_ns_range{0.0, 1e12, "[0, 1e12]"};
inline constexpr number_range element_bytes_range{1e-3, 64.0, "[1e-3, 64]"};

/// Keys a device object without "preset" must give, in the order they are asked for.
inline std::span<const std::string_view> required_keys(role r) noexcept {
  static constexpr std::string_view gpu[] = {"name", "capacity_gb", "peak_tflops", "memory_bandwidth_gbps",
                                             "weight_link"};
  static constexpr std::string_view cpu[] = {"name", "capacity_gb", "peak_tflops", "memory_bandwidth_gbps",
                                             "activation_link"};
  static constexpr std::string_view cxl[] = {"name", "capacity_gb", "peak_tflops", "memory_bandwidth_gbps",
                                             "weight_link", "activation_link", "host_read_bandwidth_gbps"};
  static constexpr std::string_view dimm[] = {"name", "execution", "units", "capacity_gb", "peak_tflops",
                                              "memory_bandwidth_gbps", "weight_link", "activation_link",
                                              "host_read_bandwidth_gbps"};
  switch (r) {
    case role::gpu: return gpu;
    case role::cpu: return cpu;
    case role::cxl_ndp: return cxl;
    case role::dimm_ndp: return dimm;
  }
  return gpu;
}

/// `items` as `a, b, c`.
template <class Range>
std::string join(const Range& items) {
  std::string out;
  for (std::string_view s : items) {
    if (!out.empty()) out += ", ";
    out += s;
  }
  return out;
}

/// A string as JSON writes it (quoted, escaped), cut after 40 bytes.
inline std::string quote(std::string_view s) {
  constexpr std::size_t max_shown = 40;
  const bool cut = s.size() > max_shown;
  std::string out = json(std::string(s.substr(0, max_shown))).dump(-1, ' ', false, json::error_handler_t::replace);
  if (cut) out.insert(out.size() - 1, "...");
  return out;
}

/// A JSON value for "got ..." in messages: scalars as JSON writes them, containers by kind.
inline std::string describe(const json& j) {
  if (j.is_object()) return "an object";
  if (j.is_array()) return "an array";
  if (j.is_string()) return quote(j.get_ref<const std::string&>());
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

/// The JSON path of a `device_spec::validate()` message about a device at `path`: the
/// key that sets the field it names, or the device itself.
inline std::string validate_path(const std::string& path, std::string_view message) {
  struct field_key {
    std::string_view field;
    std::string_view key;
  };
  static constexpr field_key map[] = {
      {"num_units", "units"},
      {"compute.peak_flops", "peak_tflops"},
      {"compute.memory_bandwidth", "memory_bandwidth_gbps"},
      {"compute.launch_seconds", "launch_us"},
      {"weight_link.bandwidth", "weight_link.bandwidth_gbps"},
      {"weight_link.latency_seconds", "weight_link.latency_ns"},
      {"activation_link.bandwidth", "activation_link.bandwidth_gbps"},
      {"activation_link.latency_seconds", "activation_link.latency_ns"},
      {"host_read_bandwidth", "host_read_bandwidth_gbps"},
      {"activation_element_bytes", "activation_element_bytes"},
  };
  // "moepolicy::device_spec::validate(<name>): <field> must ..." — the name may hold anything.
  const auto start = message.rfind("): ");
  if (start == std::string_view::npos) return path;
  message.remove_prefix(start + 3);
  std::string_view best;
  std::size_t best_at = std::string_view::npos;
  for (const auto& m : map) {
    const auto at = message.find(m.field);
    if (at != std::string_view::npos && (at < best_at || (at == best_at && m.field.size() > best.size()))) {
      best_at = at;
      best = m.key;
    }
  }
  return best.empty() ? path : path + "." + std::string(best);
}

class reader {
 public:
  explicit reader(std::string_view file) noexcept : file_(file) {}

  machine_description machine(std::string_view text) const {
    const json root = parse(text);
    if (!root.is_object()) fail("", "expected a JSON object at the top level, got " + describe(root));
    check_keys(root, "", top_keys);
    machine_description out;
    if (const json* n = member(root, "name")) {
      if (!n->is_string()) fail("name", "expected a string, got " + describe(*n));
      out.name = n->get<std::string>();
    }
    const auto device_role = [&](std::string_view key, role r, std::optional<device_spec>& into) {
      if (const json* j = member(root, key)) {
        if (j->is_null()) {
          fail(std::string(key), "expected a device preset name or an object, got null (leave the key out to "
                                 "keep each family's paper device)");
        }
        into = device(*j, std::string(key), r);
      }
    };
    device_role("gpu", role::gpu, out.gpu);
    device_role("cpu", role::cpu, out.cpu);
    device_role("cxl_ndp", role::cxl_ndp, out.cxl_ndp);
    device_role("dimm_ndp", role::dimm_ndp, out.dimm_ndp);
    const auto link_role = [&](std::string_view key, std::optional<link_spec>& into) {
      if (const json* j = member(root, key)) {
        if (j->is_null()) {
          fail(std::string(key), "expected a link preset name or an object, got null (leave the key out to keep "
                                 "each family's paper link)");
        }
        into = link(*j, std::string(key), std::nullopt, "required without \"preset\"");
      }
    };
    link_role("host_link", out.host_link);
    link_role("cxl_link", out.cxl_link);
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& problem) const {
    tables_json::fail(file_, path, problem);
  }

  /// The DOM of `text`; a syntax error names its line and column, nesting too deep its
  /// line, a repeated key its path.
  json parse(std::string_view text) const {
    namespace jd = io::detail::json_document;
    const std::uint32_t max_depth = active_input_limits().max_json_depth;
    json root;
    jd::dom_builder builder(root, max_depth, /*reject_duplicates=*/true);
    if (json::sax_parse(text.data(), text.data() + text.size(), &builder, json::input_format_t::json, true)) {
      return root;
    }
    if (builder.syntax_error()) {
      // `syntax_position` counts the characters read, the offending one included.
      const std::size_t at = std::min(builder.syntax_position() > 0 ? builder.syntax_position() - 1 : 0, text.size());
      const std::string_view before = text.substr(0, at);
      const auto line = static_cast<std::uint64_t>(std::count(before.begin(), before.end(), '\n')) + 1;
      const std::size_t line_start = before.rfind('\n') == std::string_view::npos ? 0 : before.rfind('\n') + 1;
      io::detail::fail_at_line(file_, line,
                               "invalid JSON at column " + std::to_string(at - line_start + 1) + ": " +
                                   io::detail::printable(*builder.syntax_error()));
    }
    jd::fail_structure(builder, text, file_, max_depth);
  }

  static const json* member(const json& obj, std::string_view key) {
    const auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
  }

  void check_keys(const json& obj, const std::string& path, std::span<const std::string_view> allowed) const {
    for (auto it = obj.begin(); it != obj.end(); ++it) {
      if (std::find(allowed.begin(), allowed.end(), it.key()) == allowed.end()) {
        fail(path, "unknown key " + quote(it.key()) + " (allowed: " + join(allowed) + ")");
      }
    }
  }

  /// A number in `r`.
  double number(const json& j, const std::string& path, const number_range& r) const {
    if (j.is_number()) {
      const double v = j.get<double>();
      if (v >= r.lo && v <= r.hi) return v;
    }
    fail(path, "expected a number in " + std::string(r.text) + ", got " + describe(j));
  }

  /// A bandwidth in GB/s: a number in `bandwidth_range` or "unlimited", in bytes per second.
  double bandwidth(const json& j, const std::string& path) const {
    if (j.is_string() && j.get_ref<const std::string&>() == "unlimited") return unlimited_bandwidth;
    if (j.is_number()) {
      const double v = j.get<double>();
      if (v >= bandwidth_range.lo && v <= bandwidth_range.hi) return v * giga;
    }
    fail(path, "expected a number in " + std::string(bandwidth_range.text) + " or \"unlimited\", got " + describe(j));
  }

  /// A whole number in [lo, hi]; an integral float such as 16.0 is accepted.
  std::uint64_t whole(const json& j, const std::string& path, std::uint64_t lo, std::uint64_t hi) const {
    std::optional<std::uint64_t> v;
    if (j.is_number_unsigned()) {
      v = j.get<std::uint64_t>();
    } else if (j.is_number_float()) {
      const double d = j.get<double>();
      // 2^64 is exactly representable; every whole double below it converts.
      if (d >= 0.0 && d < 18446744073709551616.0 && d == std::floor(d)) v = static_cast<std::uint64_t>(d);
    }
    if (!v || *v < lo || *v > hi) {
      fail(path, "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                     describe(j));
    }
    return *v;
  }

  std::string string(const json& j, const std::string& path, std::string_view what) const {
    if (!j.is_string()) fail(path, "expected " + std::string(what) + ", got " + describe(j));
    return j.get<std::string>();
  }

  device_spec device_preset(const json& j, const std::string& path) const {
    const std::string name = string(j, path, "a device preset name (a string)");
    auto d = presets::find(name);
    if (!d) fail(path, "unknown device preset " + quote(name) + " (known: " + join(presets::names()) + ")");
    return *d;
  }

  link_spec link_preset(const json& j, const std::string& path) const {
    const std::string name = string(j, path, "a link preset name (a string)");
    const auto l = presets::find_link(name);
    if (!l) fail(path, "unknown link preset " + quote(name) + " (known: " + join(presets::link_names()) + ")");
    return *l;
  }

  /// A link at `path`; an object without "preset" overrides `base`, or must give every
  /// field (`why` says when) when there is none.
  link_spec link(const json& j, const std::string& path, std::optional<link_spec> base, std::string_view why) const {
    if (j.is_string()) return link_preset(j, path);
    if (!j.is_object()) fail(path, "expected a link preset name or an object, got " + describe(j));
    check_keys(j, path, link_keys);
    link_spec out;
    if (const json* p = member(j, "preset")) {
      out = link_preset(*p, key_path(path, "preset"));
    } else if (base) {
      out = *base;
    } else {
      for (std::string_view k : {std::string_view("bandwidth_gbps"), std::string_view("latency_ns")}) {
        if (!j.contains(k)) fail(path, "missing key " + quote(k) + " (" + std::string(why) + ")");
      }
    }
    if (const json* b = member(j, "bandwidth_gbps")) out.bandwidth = bandwidth(*b, key_path(path, "bandwidth_gbps"));
    if (const json* l = member(j, "latency_ns")) out.latency_seconds = number(*l, key_path(path, "latency_ns"), latency_ns_range) / 1e9;
    return out;
  }

  quant_format quant(const json& j, const std::string& path, quant_format out) const {
    if (!j.is_object()) fail(path, "expected an object, got " + describe(j));
    check_keys(j, path, quant_keys);
    constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
    if (const json* g = member(j, "group_size")) {
      out.group_size = static_cast<std::uint32_t>(whole(*g, key_path(path, "group_size"), 0, u32));
    }
    if (const json* m = member(j, "metadata_bits")) {
      out.metadata_bits = static_cast<std::uint32_t>(whole(*m, key_path(path, "metadata_bits"), 0, u32));
    }
    if (const json* f = member(j, "full_precision_bits")) {
      out.full_precision = bitwidth(static_cast<int>(whole(*f, key_path(path, "full_precision_bits"), 1, 32)));
    }
    if (out.group_size == 0 && out.metadata_bits > 0) {
      const bool group_given = j.contains("group_size");
      fail(key_path(path, group_given ? "group_size" : "metadata_bits"),
           "group_size 0 (no groups) needs metadata_bits 0, got metadata_bits " + std::to_string(out.metadata_bits));
    }
    return out;
  }

  device_spec device(const json& j, const std::string& path, role r) const {
    if (j.is_string()) return device_preset(j, path);
    if (!j.is_object()) fail(path, "expected a device preset name or an object, got " + describe(j));
    check_keys(j, path, device_keys);
    device_spec d;
    const json* base = member(j, "preset");
    if (base != nullptr) {
      d = device_preset(*base, key_path(path, "preset"));
    } else {
      for (std::string_view k : required_keys(r)) {
        if (!j.contains(k)) fail(path, "missing key " + quote(k) + " (required without \"preset\")");
      }
    }
    const auto field = [&](std::string_view key) -> const json* { return member(j, key); };
    const auto at = [&](std::string_view key) { return key_path(path, key); };

    if (const json* v = field("name")) {
      d.name = string(*v, at("name"), "a non-empty string");
      if (d.name.empty()) fail(at("name"), "expected a non-empty string, got \"\"");
    }
    if (const json* v = field("execution")) {
      const std::string e = string(*v, at("execution"), "\"serial\" or \"parallel_units\"");
      if (e == "serial") {
        d.execution = execution_kind::serial;
      } else if (e == "parallel_units") {
        d.execution = execution_kind::parallel_units;
      } else {
        fail(at("execution"), "expected \"serial\" or \"parallel_units\", got " + describe(*v));
      }
    }
    if (const json* v = field("units")) {
      d.num_units = static_cast<std::uint32_t>(whole(*v, at("units"), 1, std::numeric_limits<std::uint32_t>::max()));
    }
    if (const json* v = field("capacity_gb")) {
      // At most 1e18 bytes: well inside the range of `bytes`.
      d.capacity_bytes = static_cast<bytes>(std::round(number(*v, at("capacity_gb"), capacity_gb_range) * giga));
    }
    if (const json* v = field("peak_tflops")) {
      d.compute.peak_flops = number(*v, at("peak_tflops"), peak_tflops_range) * tera;
    }
    if (const json* v = field("peak_bits")) {
      d.compute.peak_bits = bitwidth(static_cast<int>(whole(*v, at("peak_bits"), 1, 32)));
    }
    if (const json* v = field("bit_scaled_compute")) {
      if (!v->is_boolean()) fail(at("bit_scaled_compute"), "expected true or false, got " + describe(*v));
      d.compute.bit_scaled_compute = v->get<bool>();
    }
    if (const json* v = field("memory_bandwidth_gbps")) {
      d.compute.memory_bandwidth = number(*v, at("memory_bandwidth_gbps"), bandwidth_range) * giga;
    }
    if (const json* v = field("launch_us")) d.compute.launch_seconds = number(*v, at("launch_us"), launch_us_range) / 1e6;
    const std::string_view link_why = "required when neither the link nor its device names a \"preset\"";
    if (const json* v = field("weight_link")) {
      d.weight_link = link(*v, at("weight_link"), base ? std::optional(d.weight_link) : std::nullopt, link_why);
    }
    if (const json* v = field("activation_link")) {
      d.activation_link =
          link(*v, at("activation_link"), base ? std::optional(d.activation_link) : std::nullopt, link_why);
    }
    if (const json* v = field("host_read_bandwidth_gbps")) {
      d.host_read_bandwidth = bandwidth(*v, at("host_read_bandwidth_gbps"));
    }
    if (const json* v = field("activation_element_bytes")) {
      d.activation_element_bytes = number(*v, at("activation_element_bytes"), element_bytes_range);
    }
    if (const json* v = field("quant")) d.quant = quant(*v, at("quant"), d.quant);

    if (d.execution == execution_kind::serial && d.num_units != 1) {
      fail(at(j.contains("units") ? "units" : "execution"),
           "execution \"serial\" needs units 1, got units " + std::to_string(d.num_units));
    }
    try {
      d.validate();
    } catch (const moepolicy::invalid_argument& e) {
      fail(validate_path(path, e.what()), io::detail::printable(e.what(), 400));
    }
    return d;
  }

  std::string_view file_;
};

}  // namespace detail::machine_json

/// Reads a machine description from `json_text`; `source_name` stands for the file in
/// messages. The schema is in the header comment and docs/machine.md.
///
/// Throws: `parse_error` naming `source_name` and the line and column of a syntax error
/// or the JSON path of any other problem (see the header comment).
[[nodiscard]] inline machine_description parse_machine(std::string_view json_text, std::string_view source_name) {
  return detail::machine_json::reader(source_name).machine(json_text);
}

/// As `parse_machine`, reading the rest of `in`.
[[nodiscard]] inline machine_description read_machine(std::istream& in, std::string_view name) {
  return parse_machine(detail::read_rest<std::string>(in, name, detail::json_limit()), name);
}

/// As `parse_machine`, reading the file at `path`; also throws `parse_error` for a file
/// that cannot be read.
[[nodiscard]] inline machine_description read_machine(const std::filesystem::path& path) {
  return parse_machine(detail::read_all(path, detail::json_limit()), path.string());
}

}  // namespace moepolicy::io
