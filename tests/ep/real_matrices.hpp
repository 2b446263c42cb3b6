// Real load matrices from ../shared/traces for the EP tests: the Qwen3-30B-A3B decode heat
// (mbolt, MIT), the OLMoE expert counts (Apache-2.0) and the Mixtral-8x7B C4 activation
// counts (MC-MoE); each as a row-major layers × experts matrix.
#pragma once

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace moepolicy::test {

struct load_matrix {
  std::string name;
  std::size_t layers = 0;
  std::size_t experts = 0;
  std::vector<double> values;
};

/// `layer,expert,<load>` rows after a header line.
inline load_matrix read_heat_csv(const std::filesystem::path& path, std::size_t layers, std::size_t experts) {
  load_matrix m{path.filename().string(), layers, experts, std::vector<double>(layers * experts, 0.0)};
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    unsigned l = 0, e = 0;
    double x = 0;
    if (std::sscanf(line.c_str(), "%u,%u,%lf", &l, &e, &x) == 3 && l < layers && e < experts) m.values[l * experts + e] = x;
  }
  return m;
}

/// A JSON array of per-layer arrays.
inline load_matrix from_json_rows(std::string name, const nlohmann::json& rows) {
  load_matrix m{std::move(name), rows.size(), rows.at(0).size(), {}};
  for (const auto& row : rows) {
    for (const auto& x : row) m.values.push_back(x.get<double>());
  }
  return m;
}

/// Every real matrix under `shared` (the shared traces folder).
inline std::vector<load_matrix> real_matrices(const std::filesystem::path& shared) {
  std::vector<load_matrix> out;
  out.push_back(read_heat_csv(shared / "mbolt-decode-heat" / "heat_qwen3-30b-a3b.csv", 48, 128));
  std::ifstream olmoe(shared / "olmoe-counts" / "expert_counts.json");
  const auto doc = nlohmann::json::parse(olmoe);
  for (const auto& [model, domains] : doc.at("datasets").items()) {
    for (const auto& [domain, tables] : domains.items()) {
      out.push_back(from_json_rows(model + "/" + domain, tables.at("expert_counts")));
    }
  }
  std::ifstream mixtral(shared / "mixtral-8x7b-mc" / "mixtral_c4_expert_activation.json");
  out.push_back(from_json_rows("mixtral-c4", nlohmann::json::parse(mixtral).at("expert_act_frequency")));
  return out;
}

}  // namespace moepolicy::test
