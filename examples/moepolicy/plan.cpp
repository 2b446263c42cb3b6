// `moepolicy bitwidth PROBLEM.json` and `moepolicy place PROBLEM.json`: solve a bit
// allocation or a prefill placement given as JSON and print the answer as JSON, so that
// the policies script from Python and the shell. `-` reads the problem from stdin.
//
// bitwidth problem:
//   {"bits": [1, 2, 3, 4],                 ascending candidate bitwidths
//    "average_bits": 2.5,                  the layer's average budget b̄
//    "losses": [[L(b0), L(b1), ...], ...], one row per expert, in descending importance
//    "weights": [...],                     optional, one per expert (default 1)
//    "form": "exact" | "at_most",          optional, default "exact"
//    "rounding": "down" | "nearest",       optional, default "down"
//    "min_count": [...],                   optional, one per bitwidth: at least that many experts
//                                          at each bitwidth. Only the exact solver honours it:
//                                          with "solver": "prefix_split" it is an error; with
//                                          "both", prefix split's answer says whether it meets
//                                          them ("min_count_met") and its status is
//                                          "min_count_unmet" when it does not.
//    "solver": "prefix_split" | "exact" | "both"}   optional, default "both"
// place problem:
//   {"counts": [[...], ...],               prefill activation counts P, layers x experts
//    "weight_sums": [[...], ...],          prefill routing-score sums W, same shape
//    "gpu_experts_per_layer": 4,
//    "alpha": 0.5, "normalization": "sum_to_one" | "divide_by_max" | "min_max",
//    "ndp_average_bits": 3,                with "losses", prefix split picks NDP bitwidths
//    "losses": {"bits": [1, 2, 3], "table": [[[L per bit] per expert] per layer]},
//    "uniform_bits": 3,                    without "losses", every NDP expert's bitwidth
//    "form": ..., "rounding": ...}
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "json_input.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"

namespace moepolicy::tool {
namespace {

using json = nlohmann::json;

json load(const std::string& path) { return load_json(path); }

[[noreturn]] void bad(const std::string& path, const std::string& field, const std::string& problem) {
  bad_field(path, field, problem);
}

const json& need(const json& j, const std::string& path, const char* key) {
  if (!j.is_object() || !j.contains(key)) bad(path, key, "missing");
  return j.at(key);
}

double number(const json& j, const std::string& path, const std::string& field) {
  if (!j.is_number()) bad(path, field, "expected a number, got " + j.dump());
  return j.get<double>();
}

std::vector<double> numbers(const json& j, const std::string& path, const std::string& field) {
  if (!j.is_array()) bad(path, field, "expected an array of numbers");
  std::vector<double> out;
  for (std::size_t i = 0; i < j.size(); ++i) out.push_back(number(j[i], path, field + "[" + std::to_string(i) + "]"));
  return out;
}

std::vector<bitwidth> bit_set(const json& j, const std::string& path, const std::string& field) {
  std::vector<bitwidth> out;
  for (double b : numbers(j, path, field)) {
    if (b != static_cast<double>(static_cast<int>(b)) || b < 1 || b > 32) {
      bad(path, field, "bitwidths must be whole numbers in [1, 32], got " + json(b).dump());
    }
    out.emplace_back(static_cast<int>(b));
  }
  return out;
}

Eigen::MatrixXd matrix(const json& j, const std::string& path, const std::string& field) {
  if (!j.is_array()) bad(path, field, "expected an array of rows");
  const std::size_t rows = j.size();
  const std::size_t cols = rows == 0 ? 0 : (j[0].is_array() ? j[0].size() : 0);
  Eigen::MatrixXd m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  for (std::size_t r = 0; r < rows; ++r) {
    const auto row = numbers(j[r], path, field + "[" + std::to_string(r) + "]");
    if (row.size() != cols) {
      bad(path, field + "[" + std::to_string(r) + "]", "expected " + std::to_string(cols) + " numbers, got " +
                                                            std::to_string(row.size()));
    }
    for (std::size_t c = 0; c < cols; ++c) m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = row[c];
  }
  return m;
}

bit_allocation_config allocation_config(const json& j, const std::string& path) {
  bit_allocation_config c;
  if (j.contains("form")) {
    const auto f = j.at("form");
    if (f == "exact") {
      c.form = budget_form::exact;
    } else if (f == "at_most") {
      c.form = budget_form::at_most;
    } else {
      bad(path, "form", "expected \"exact\" or \"at_most\", got " + f.dump());
    }
  }
  if (j.contains("rounding")) {
    const auto r = j.at("rounding");
    if (r == "down") {
      c.rounding = budget_rounding::down;
    } else if (r == "nearest") {
      c.rounding = budget_rounding::nearest;
    } else {
      bad(path, "rounding", "expected \"down\" or \"nearest\", got " + r.dump());
    }
  }
  return c;
}

const char* to_string(allocation_status s) {
  switch (s) {
    case allocation_status::ok: return "ok";
    case allocation_status::saturated: return "saturated";
    case allocation_status::infeasible: return "infeasible";
  }
  return "?";
}

json to_json(const bit_allocation& a, std::span<const bitwidth> bits) {
  json out{{"status", to_string(a.status)},
           {"budget_increments", a.budget_increments},
           {"used_increments", a.used_increments},
           {"weighted_loss", a.weighted_loss},
           {"gain", a.gain},
           {"count_per_bitwidth", a.count_per_level}};
  json b = json::array();
  for (auto level : a.level_of) b.push_back(bits[level].bits());
  out["bits"] = b;
  return out;
}

void solve_bitwidth(const std::string& path) {
  const json p = load(path);
  const auto bits = bit_set(need(p, path, "bits"), path, "bits");
  const double avg = number(need(p, path, "average_bits"), path, "average_bits");
  const Eigen::MatrixXd L = matrix(need(p, path, "losses"), path, "losses");
  const auto weights = p.contains("weights") ? numbers(p.at("weights"), path, "weights") : std::vector<double>{};
  std::vector<std::uint32_t> min_count;
  if (p.contains("min_count")) {
    for (double c : numbers(p.at("min_count"), path, "min_count")) {
      if (c < 0 || c != static_cast<double>(static_cast<std::uint32_t>(c))) {
        bad(path, "min_count", "counts must be whole numbers >= 0, got " + json(c).dump());
      }
      min_count.push_back(static_cast<std::uint32_t>(c));
    }
  }
  const std::string solver = p.value("solver", std::string("both"));
  if (solver != "prefix_split" && solver != "exact" && solver != "both") {
    bad(path, "solver", "expected \"prefix_split\", \"exact\" or \"both\", got \"" + solver + "\"");
  }
  const bool constrained = std::any_of(min_count.begin(), min_count.end(), [](std::uint32_t c) { return c > 0; });
  if (constrained && solver == "prefix_split") {
    bad(path, "min_count", "prefix split cannot honour minimum counts; use \"solver\": \"exact\" or \"both\"");
  }
  if (!min_count.empty() && min_count.size() != bits.size()) {
    bad(path, "min_count",
        "expected one count per bitwidth (" + std::to_string(bits.size()) + "), got " + std::to_string(min_count.size()));
  }
  const auto config = allocation_config(p, path);
  json out = json::object();
  if (solver != "exact") {
    const bit_allocation a = prefix_split(bits, L, avg, config, weights);
    json j = to_json(a, bits);
    if (constrained) {
      bool met = a.status != allocation_status::infeasible;
      for (std::size_t i = 0; i < min_count.size() && met; ++i) met = a.count_per_level[i] >= min_count[i];
      j["min_count_met"] = met;
      if (!met && a.status != allocation_status::infeasible) j["status"] = "min_count_unmet";
    }
    out["prefix_split"] = j;
  }
  if (solver != "prefix_split") out["exact"] = to_json(exact_allocation(bits, L, avg, config, weights, min_count), bits);
  std::cout << out.dump(2) << '\n';
}

void solve_place(const std::string& path) {
  const json p = load(path);
  const Eigen::MatrixXd P = matrix(need(p, path, "counts"), path, "counts");
  const Eigen::MatrixXd W = matrix(need(p, path, "weight_sums"), path, "weight_sums");
  prefill_placement_config c;
  c.gpu_experts_per_layer =
      static_cast<std::size_t>(number(need(p, path, "gpu_experts_per_layer"), path, "gpu_experts_per_layer"));
  if (p.contains("alpha")) c.importance.alpha = number(p.at("alpha"), path, "alpha");
  if (p.contains("normalization")) {
    const auto n = p.at("normalization");
    if (n == "sum_to_one") {
      c.importance.norm = normalization::sum_to_one;
    } else if (n == "divide_by_max") {
      c.importance.norm = normalization::divide_by_max;
    } else if (n == "min_max") {
      c.importance.norm = normalization::min_max;
    } else {
      bad(path, "normalization", "expected \"sum_to_one\", \"divide_by_max\" or \"min_max\", got " + n.dump());
    }
  }
  c.allocation = allocation_config(p, path);
  std::optional<loss_table> table;
  if (p.contains("losses")) {
    const json& l = p.at("losses");
    const auto bits = bit_set(need(l, path, "bits"), path, "losses.bits");
    const json& t = need(l, path, "table");
    if (!t.is_array()) bad(path, "losses.table", "expected layers x experts x bits");
    std::vector<double> flat;
    const std::size_t layers = t.size();
    const std::size_t experts = layers == 0 ? 0 : t[0].size();
    for (std::size_t i = 0; i < layers; ++i) {
      const Eigen::MatrixXd m = matrix(t[i], path, "losses.table[" + std::to_string(i) + "]");
      if (static_cast<std::size_t>(m.rows()) != experts || static_cast<std::size_t>(m.cols()) != bits.size()) {
        bad(path, "losses.table[" + std::to_string(i) + "]",
            "expected " + std::to_string(experts) + " experts x " + std::to_string(bits.size()) + " bits");
      }
      for (Eigen::Index e = 0; e < m.rows(); ++e) {
        for (Eigen::Index b = 0; b < m.cols(); ++b) flat.push_back(m(e, b));
      }
    }
    table.emplace(layers, experts, bits, std::move(flat));
    c.select_bitwidths = true;
    c.ndp_average_bits = number(need(p, path, "ndp_average_bits"), path, "ndp_average_bits");
  } else {
    c.select_bitwidths = false;
    const auto u = bit_set(json::array({need(p, path, "uniform_bits")}), path, "uniform_bits");
    c.uniform_bits = u.front();
  }
  const placement_plan plan = place_from_prefill(P, W, table ? &*table : nullptr, c);
  json layers = json::array();
  for (std::size_t l = 0; l < plan.num_layers(); ++l) {
    json ndp = json::array();
    for (expert_id e : plan.experts_on(l, tier::ndp)) ndp.push_back({{"expert", e}, {"bits", plan.at(l, e).bits.bits()}});
    layers.push_back({{"layer", l}, {"gpu", plan.experts_on(l, tier::gpu)}, {"ndp", ndp}, {"status", to_string(plan.status(l))}});
  }
  std::cout << json{{"layers", layers}}.dump(2) << '\n';
}

}  // namespace

void add_plan_commands(CLI::App& app) {
  auto bw_path = std::make_shared<std::string>();
  auto* bw = app.add_subcommand("bitwidth", "Allocate NDP bitwidths for one layer (prefix split and the exact optimum)");
  bw->add_option("problem", *bw_path, "Problem JSON file, or - for standard input")->required();
  bw->callback([bw_path] { solve_bitwidth(*bw_path); });

  auto pl_path = std::make_shared<std::string>();
  auto* pl = app.add_subcommand("place", "Place experts on GPU and NDP from prefill statistics (Context-Aware GPU-NDP Alg. 1)");
  pl->add_option("problem", *pl_path, "Problem JSON file, or - for standard input")->required();
  pl->callback([pl_path] { solve_place(*pl_path); });
}

}  // namespace moepolicy::tool
