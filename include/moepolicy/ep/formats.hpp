// moepolicy/ep/formats.hpp — writing an EP placement (ep/problem.hpp) as the files serving
// engines read, to any `std::ostream`.
//
//   - DeepSeek EPLB's three maps: a JSON object with `physical_to_logical` [L][R],
//     `logical_to_physical` [L][E][max_replicas] (-1 padded) and `logical_count` [L][E].
//   - SGLang's `--init-expert-location FILE.json`: SGLang
//     (python/sglang/srt/eplb/expert_location.py, `compute_initial_expert_location_metadata`)
//     passes the document's keys to `ExpertLocationMetadata.init_by_mapping` when it has
//     `physical_to_logical_map`, so the object holds that one key, [L][R] over the MoE
//     layers, and nothing else (another key would be an unexpected argument there).
//   - vLLM: upstream vLLM takes no placement file (its `EPLBConfig` has window, interval,
//     redundant experts and policy only); the vLLM Ascend plugin's `expert_map_path`
//     (vllm_ascend/eplb, `_expert_file_to_tensor`) reads `{"moe_layer_count": L,
//     "layer_list": [{"layer_id", "device_count", "device_list": [{"device_id",
//     "device_expert": [logical experts of the device's slots]}]}]}`, the device's slots in
//     order — the rows of `physical_to_logical` cut R/G per device.
// Rows are written one per line, so a DeepSeek-V3-sized file stays readable and small.
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/ep/problem.hpp"

namespace moepolicy {

namespace detail::ep {

inline void write_row(std::ostream& os, std::span<const std::int32_t> row) {
  os << '[';
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (i != 0) os << ", ";
    os << row[i];
  }
  os << ']';
}

}  // namespace detail::ep

/// Writes the three maps as the members `"physical_to_logical": …, "logical_to_physical": …,
/// "logical_count": …` (no braces), each line indented by `indent` spaces, so a caller can
/// add members of its own.
inline void write_ep_maps_members(std::ostream& os, const ep_placement& p, std::size_t indent = 2) {
  const std::string pad(indent, ' ');
  os << pad << "\"physical_to_logical\": [\n";
  for (std::size_t l = 0; l < p.layers(); ++l) {
    os << pad << "  ";
    detail::ep::write_row(os, p.physical_to_logical(l));
    os << (l + 1 < p.layers() ? ",\n" : "\n");
  }
  os << pad << "],\n" << pad << "\"logical_to_physical\": [\n";
  for (std::size_t l = 0; l < p.layers(); ++l) {
    os << pad << "  [";
    for (std::size_t e = 0; e < p.experts(); ++e) {
      if (e != 0) os << ", ";
      detail::ep::write_row(os, p.logical_to_physical(l, e));
    }
    os << (l + 1 < p.layers() ? "],\n" : "]\n");
  }
  os << pad << "],\n" << pad << "\"logical_count\": [\n";
  for (std::size_t l = 0; l < p.layers(); ++l) {
    os << pad << "  ";
    detail::ep::write_row(os, p.logical_count(l));
    os << (l + 1 < p.layers() ? ",\n" : "\n");
  }
  os << pad << "]";
}

/// DeepSeek EPLB's three maps as one JSON object.
inline void write_ep_deepseek_json(std::ostream& os, const ep_placement& p) {
  os << "{\n";
  write_ep_maps_members(os, p);
  os << "\n}\n";
}

/// SGLang's `--init-expert-location` file: `{"physical_to_logical_map": [[…], …]}`.
inline void write_ep_sglang_json(std::ostream& os, const ep_placement& p) {
  os << "{\"physical_to_logical_map\": [\n";
  for (std::size_t l = 0; l < p.layers(); ++l) {
    os << "  ";
    detail::ep::write_row(os, p.physical_to_logical(l));
    os << (l + 1 < p.layers() ? ",\n" : "\n");
  }
  os << "]}\n";
}

/// The vLLM Ascend plugin's `expert_map_path` file for `gpus` devices.
///
/// Throws: `invalid_argument` naming `write_ep_vllm_json` when `gpus` is 0 or does not
/// divide the placement's slots.
inline void write_ep_vllm_json(std::ostream& os, const ep_placement& p, std::uint32_t gpus) {
  if (gpus == 0 || p.replicas() % gpus != 0) {
    detail::throw_invalid("write_ep_vllm_json", "gpus must divide the " + std::to_string(p.replicas()) + " slots", gpus);
  }
  const std::size_t per = p.replicas() / gpus;
  os << "{\n  \"moe_layer_count\": " << p.layers() << ",\n  \"layer_list\": [\n";
  for (std::size_t l = 0; l < p.layers(); ++l) {
    os << "    {\"layer_id\": " << l << ", \"device_count\": " << gpus << ", \"device_list\": [\n";
    const auto row = p.physical_to_logical(l);
    for (std::size_t g = 0; g < gpus; ++g) {
      os << "      {\"device_id\": " << g << ", \"device_expert\": ";
      detail::ep::write_row(os, row.subspan(g * per, per));
      os << (g + 1 < gpus ? "},\n" : "}\n");
    }
    os << (l + 1 < p.layers() ? "    ]},\n" : "    ]}\n");
  }
  os << "  ]\n}\n";
}

}  // namespace moepolicy
