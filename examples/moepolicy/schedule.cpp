// `moepolicy schedule PROBLEM.json`: solve one decode step's makespan problem (TriMoE
// TriMoE §4.2, Eq. 5–7) on the TriMoE machine — an H100 over PCIe Gen5, a Xeon 8470 with
// AMX and DIMM-NDP units (cost/presets.hpp, roofline models) — and print each solver's
// assignment as JSON. `-` reads the problem from stdin.
//
// schedule problem:
//   {"model": "Mixtral-8x7B",              a model preset name (core/model_shape.hpp),
//                                          ASCII case ignored
//    "num_dimms": 16,                      optional, default the DIMM-NDP preset's 16; each
//                                          DIMM keeps the preset's per-DIMM figures
//    "experts": [                          the step's activated experts, each at most once
//      {"layer": 0, "expert": 3,           ids within the model's layers and experts
//       "tokens": 12,                      L_i, a whole number >= 1
//       "resident": false,                 optional, default false: weights in GPU HBM
//       "layout": "striped" | 5},          optional, default "striped": striped over every
//                                          DIMM, or localized on DIMM 5 (< num_dimms)
//      ...],
//    "solver": "paper" | "improved" | "exact" | "all",   optional, default "all"
//    "max_iterations": 64}                 optional: caps the refinement moves of "paper"
//                                          (default 64) and the descent moves of
//                                          "improved" (default 256); "exact" ignores it
// Weights are priced at fp16. "paper" is TriMoE's greedy + bottleneck refinement
// (sched/bottleneck_refinement.hpp), "improved" this project's local search
// (sched/local_search.hpp), "exact" branch and bound (sched/exact.hpp, at most 32
// experts, 10^7 nodes).
//
// output:
//   {"model": ..., "num_dimms": ..., "lower_bound_seconds": ...,  (sched/lower_bound.hpp)
//    "schedules": [{"solver": "paper", "status": "heuristic" | "optimal" | "node_limit"
//                   | "too_large", "iterations": ..., "makespan_seconds": ...,
//                   "device_seconds": {"gpu": ..., "cpu": ..., "dimm": [one per DIMM]},
//                   "assignment": [{"layer", "expert", "device": "gpu" | "cpu" | "ndp"}
//                                  in the problem's order]}, ...]}
// A "too_large" schedule has null times and an empty assignment.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "json_input.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"

namespace moepolicy::tool {
namespace {

using json = nlohmann::json;
/// Output keeps the documented key order.
using ojson = nlohmann::ordered_json;

json load(const std::string& path) { return load_json(path); }

[[noreturn]] void bad(const std::string& path, const std::string& field, const std::string& problem) {
  bad_field(path, field, problem);
}

const json& need(const json& j, const std::string& path, const std::string& prefix, const char* key) {
  if (!j.is_object() || !j.contains(key)) bad(path, prefix + key, "missing");
  return j.at(key);
}

/// A whole number in [lo, hi], or a parse_error naming `field`.
std::uint64_t whole(const json& j, const std::string& path, const std::string& field, std::uint64_t lo,
                    std::uint64_t hi) {
  const auto fail = [&] {
    bad(path, field,
        "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + j.dump());
  };
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v < lo || v > hi) fail();
    return v;
  }
  if (j.is_number_float()) {
    const double d = j.get<double>();
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi))) fail();
    const auto v = static_cast<std::uint64_t>(d);
    if (static_cast<double>(v) != d) fail();
    return v;
  }
  fail();
  return 0;  // unreachable
}

ojson seconds_or_null(seconds s) { return std::isfinite(s) ? ojson(s) : ojson(nullptr); }

ojson to_json(const char* solver, const makespan_schedule& s, const makespan_problem& p) {
  ojson assignment = ojson::array();
  for (std::size_t i = 0; i < s.assignment.size(); ++i) {
    assignment.push_back({{"layer", p[i].key.layer},
                          {"expert", p[i].key.expert},
                          {"device", std::string(to_string(s.assignment[i]))}});
  }
  ojson dimm = ojson::array();
  for (seconds d : s.dimm_seconds) dimm.push_back(seconds_or_null(d));
  return {{"solver", solver},
          {"status", std::string(to_string(s.status))},
          {"iterations", s.iterations},
          {"makespan_seconds", seconds_or_null(s.makespan)},
          {"device_seconds",
           {{"gpu", seconds_or_null(s.gpu_seconds)}, {"cpu", seconds_or_null(s.cpu_seconds)}, {"dimm", dimm}}},
          {"assignment", assignment}};
}

void solve_schedule(const std::string& path) {
  const json p = load(path);
  if (!p.is_object()) bad(path, "problem", "expected a JSON object, got " + p.dump());

  const json& model_j = need(p, path, "", "model");
  if (!model_j.is_string()) bad(path, "model", "expected a model preset name, got " + model_j.dump());
  const std::optional<model_shape> model = models::find(model_j.get<std::string>());
  if (!model) {
    std::string names;
    for (auto make : models::all) names += (names.empty() ? "" : ", ") + make().name;
    bad(path, "model", "unknown preset " + model_j.dump() + " (known: " + names + ")");
  }

  device_spec dimm_spec = presets::dimm_ndp();
  if (p.contains("num_dimms")) {
    dimm_spec.num_units =
        static_cast<std::uint32_t>(whole(p.at("num_dimms"), path, "num_dimms", 1, expert_layout::striped_home - 1));
  }
  const std::size_t num_dimms = dimm_spec.num_units;

  const json solver_j = p.value("solver", json("all"));
  if (solver_j != "paper" && solver_j != "improved" && solver_j != "exact" && solver_j != "all") {
    bad(path, "solver", "expected \"paper\", \"improved\", \"exact\" or \"all\", got " + solver_j.dump());
  }
  const std::string solver = solver_j.get<std::string>();
  std::optional<std::size_t> max_iterations;
  if (p.contains("max_iterations")) {
    max_iterations = static_cast<std::size_t>(whole(p.at("max_iterations"), path, "max_iterations", 0, 1'000'000'000));
  }

  const json& experts_j = need(p, path, "", "experts");
  if (!experts_j.is_array()) bad(path, "experts", "expected an array of experts, got " + experts_j.dump());
  std::vector<step_expert> experts;
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (std::size_t i = 0; i < experts_j.size(); ++i) {
    const json& e = experts_j[i];
    const std::string at = "experts[" + std::to_string(i) + "]";
    if (!e.is_object()) bad(path, at, "expected an object, got " + e.dump());
    const auto layer = whole(need(e, path, at + ".", "layer"), path, at + ".layer", model->num_dense_layers,
                             std::uint64_t{model->num_layers} - 1);
    const auto expert =
        whole(need(e, path, at + ".", "expert"), path, at + ".expert", 0, std::uint64_t{model->num_experts} - 1);
    const auto tokens = whole(need(e, path, at + ".", "tokens"), path, at + ".tokens", 1, UINT32_MAX);
    if (!seen.emplace(layer, expert).second) {
      bad(path, at, "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + " listed twice");
    }
    bool resident = false;
    if (e.contains("resident")) {
      if (!e.at("resident").is_boolean()) bad(path, at + ".resident", "expected true or false, got " + e.at("resident").dump());
      resident = e.at("resident").get<bool>();
    }
    expert_layout layout = expert_layout::striped();
    if (e.contains("layout")) {
      const json& l = e.at("layout");
      if (l == "striped") {
        layout = expert_layout::striped();
      } else if (l.is_number()) {
        layout = expert_layout::localized(static_cast<std::uint16_t>(whole(l, path, at + ".layout", 0, num_dimms - 1)));
      } else {
        bad(path, at + ".layout", "expected \"striped\" or a DIMM index, got " + l.dump());
      }
    }
    experts.push_back({expert_key{static_cast<layer_id>(layer), static_cast<expert_id>(expert)},
                       static_cast<std::uint32_t>(tokens), layout, resident, fp16});
  }

  const gpu_cpu_ndp_system system(roofline_cost{presets::h100_pcie_gen5(), *model},
                                  roofline_cost{presets::xeon_8470_amx(), *model}, roofline_cost{dimm_spec, *model});
  makespan_problem problem(num_dimms, experts.size());
  system.build(experts, problem);

  ojson schedules = ojson::array();
  makespan_schedule out(problem.size(), num_dimms);
  if (solver == "paper" || solver == "all") {
    bottleneck_refinement_config c;
    if (max_iterations) c.max_iterations = *max_iterations;
    bottleneck_refinement_scheduler s(c);
    s.solve(problem, out);
    schedules.push_back(to_json("paper", out, problem));
  }
  if (solver == "improved" || solver == "all") {
    local_search_config c;
    if (max_iterations) c.max_moves = *max_iterations;
    local_search_scheduler s(c);
    s.solve(problem, out);
    schedules.push_back(to_json("improved", out, problem));
  }
  if (solver == "exact" || solver == "all") {
    exact_makespan_scheduler s;
    s.solve(problem, out);
    schedules.push_back(to_json("exact", out, problem));
  }
  const ojson result{{"model", model->name},
                    {"num_dimms", num_dimms},
                    {"lower_bound_seconds", makespan_lower_bound(problem).value},
                    {"schedules", schedules}};
  std::cout << result.dump(2) << '\n';
}

}  // namespace

void add_schedule(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* sc = app.add_subcommand("schedule",
                                "Schedule one decode step's experts on GPU, CPU and DIMM-NDP (TriMoE solvers)");
  sc->add_option("problem", *path, "Problem JSON file, or - for standard input")->required();
  sc->callback([path] { solve_schedule(*path); });
}

}  // namespace moepolicy::tool
