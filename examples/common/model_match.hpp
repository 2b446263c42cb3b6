// Which model preset a trace was recorded from, for the example drivers.
#pragma once

#include <cctype>
#include <optional>
#include <string>

#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples {

inline std::string lowercase(const std::string& s) {
  std::string out;
  for (char c : s) out += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// The preset whose shape (experts, top-k) matches the trace and whose name, or its family
/// before the first dash, appears in the trace's model id: "Granite-3.1-1B-A400M" matches
/// "ibm-granite/granite-3.1-1b-a400m-instruct", "Mixtral-8x7B" matches
/// "neuralmagic/Mixtral-8x7B-Instruct-v0.1-FP8".
inline std::optional<model_shape> preset_for(const trace_info& info) {
  const std::string id = lowercase(info.model);
  std::optional<model_shape> family_match;
  for (auto make : models::all) {
    model_shape s = make();
    if (s.num_experts != info.num_experts || s.top_k != info.top_k) continue;
    const std::string name = lowercase(s.name);
    if (id.find(name) != std::string::npos) return s;
    const auto dash = name.find('-');
    if (!family_match && dash != std::string::npos && id.find(name.substr(0, dash)) != std::string::npos) {
      family_match = s;
    }
  }
  return family_match;
}

}  // namespace moepolicy::examples
