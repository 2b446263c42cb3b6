// `moepolicy schedule PROBLEM.json [--machine FILE]`: one decode step's makespan problem
// (TriMoE §4.2, Eq. 5–7) on the TriMoE machine — an H100 over PCIe Gen5, a Xeon 8470 with
// AMX and DIMM-NDP units (cost/presets.hpp, roofline models) — or on the "gpu", "cpu" and
// "dimm_ndp" roles of a machine file (docs/machine.md; roles it leaves out keep the TriMoE
// presets), read and solved, each solver's assignment as JSON (problem_commands.cpp runs
// it; `-` reads the problem from stdin).
//
// schedule problem:
//   {"model": "Mixtral-8x7B",              a model preset name (core/model_shape.hpp),
//                                          ASCII case ignored
//    "num_dimms": 16,                      optional, default the DIMM-NDP device's units
//                                          (the preset's 16, or the machine's), a
//                                          whole number in [1, 65534]; each DIMM keeps the
//                                          preset's per-DIMM figures
//    "experts": [                          the step's activated experts, each at most once
//      {"layer": 0, "expert": 3,           ids within the model's layers and experts
//       "tokens": 12,                      L_i, a whole number in [1, 2^32 - 1]
//       "resident": false,                 optional, default false: weights in GPU HBM
//       "layout": "striped" | 5},          optional, default "striped": striped over every
//                                          DIMM, or localized on DIMM 5 (< num_dimms)
//      ...],
//    "solver": "paper" | "improved" | "exact" | "all",   optional, default "all"
//    "max_iterations": 64}                 optional, a whole number in [0, 10^9]: caps the
//                                          refinement moves of "paper"
//                                          (default 64) and the descent moves of
//                                          "improved" (default 256); "exact" ignores it
// Weights are priced at fp16. "paper" is TriMoE's greedy + bottleneck refinement
// (sched/bottleneck_refinement.hpp), "improved" this project's local search
// (sched/local_search.hpp), "exact" branch and bound (sched/exact.hpp, at most 32
// experts, 10^7 nodes).
//
// output:
//   {"model": ..., "devices": {"gpu": name, "cpu": name, "dimm": name},
//    "num_dimms": ..., "lower_bound_seconds": ...,  (sched/lower_bound.hpp)
//    "schedules": [{"solver": "paper", "status": "heuristic" | "optimal" | "node_limit"
//                   | "too_large", "iterations": ..., "makespan_seconds": ...,
//                   "device_seconds": {"gpu": ..., "cpu": ..., "dimm": [one per DIMM]},
//                   "assignment": [{"layer", "expert", "device": "gpu" | "cpu" | "ndp"}
//                                  in the problem's order]}, ...]}
// A "too_large" schedule has null times and an empty assignment. Every number is checked
// as a number (range, wholeness) before it becomes an integer; a key not listed here is
// an error naming it.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

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
#include "problems.hpp"

namespace moepolicy::tool {
namespace {

/// Output keeps the documented key order.
using ojson = nlohmann::ordered_json;

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

}  // namespace

schedule_problem read_schedule_problem(const json& p, const std::string& path, const io::machine_description* machine) {
  if (!p.is_object()) bad_field(path, "problem", "expected a JSON object, got " + describe(p));
  only_keys(p, path, "", {"model", "num_dimms", "experts", "solver", "max_iterations"});
  schedule_problem out;

  const json& model_j = need(p, path, "", "model");
  if (!model_j.is_string()) bad_field(path, "model", "expected a model preset name, got " + describe(model_j));
  const std::optional<model_shape> model = models::find(model_j.get_ref<const std::string&>());
  if (!model) {
    std::string names;
    for (auto make : models::all) names += (names.empty() ? "" : ", ") + make().name;
    bad_field(path, "model", "unknown preset " + describe(model_j) + " (known: " + names + ")");
  }
  out.model = *model;

  out.gpu = machine != nullptr && machine->gpu ? *machine->gpu : presets::h100_pcie_gen5();
  out.cpu = machine != nullptr && machine->cpu ? *machine->cpu : presets::xeon_8470_amx();
  out.dimms = machine != nullptr && machine->dimm_ndp ? *machine->dimm_ndp : presets::dimm_ndp();
  if (const json* n = optional_field(p, "num_dimms")) {
    out.dimms.num_units =
        static_cast<std::uint32_t>(whole_in(*n, path, "num_dimms", 1, expert_layout::striped_home - 1));
  } else if (out.dimms.num_units >= expert_layout::striped_home) {
    bad_field(path, "num_dimms",
              "missing, and the machine's dimm_ndp has " + std::to_string(out.dimms.num_units) +
                  " units, more than the 65534 a schedule addresses");
  }
  const std::size_t num_dimms = out.dimms.num_units;

  if (const json* s = optional_field(p, "solver")) {
    out.solver = one_of(*s, path, "solver", {"paper", "improved", "exact", "all"});
  }
  if (const json* m = optional_field(p, "max_iterations")) {
    out.max_iterations = static_cast<std::size_t>(whole_in(*m, path, "max_iterations", 0, 1'000'000'000));
  }

  const json& experts_j = need(p, path, "", "experts");
  if (!experts_j.is_array()) bad_field(path, "experts", "expected an array of experts, got " + describe(experts_j));
  std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
  for (std::size_t i = 0; i < experts_j.size(); ++i) {
    const json& e = experts_j[i];
    const std::string at = "experts[" + std::to_string(i) + "]";
    if (!e.is_object()) bad_field(path, at, "expected an object, got " + describe(e));
    only_keys(e, path, at + ".", {"layer", "expert", "tokens", "resident", "layout"});
    const auto layer = whole_in(need(e, path, at + ".", "layer"), path, at + ".layer", model->num_dense_layers,
                                std::uint64_t{model->num_layers} - 1);
    const auto expert =
        whole_in(need(e, path, at + ".", "expert"), path, at + ".expert", 0, std::uint64_t{model->num_experts} - 1);
    const auto tokens =
        whole_in(need(e, path, at + ".", "tokens"), path, at + ".tokens", 1, std::numeric_limits<std::uint32_t>::max());
    if (!seen.emplace(layer, expert).second) {
      bad_field(path, at, "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + " listed twice");
    }
    bool resident = false;
    if (const json* r = optional_field(e, "resident")) {
      if (!r->is_boolean()) bad_field(path, at + ".resident", "expected true or false, got " + describe(*r));
      resident = r->get<bool>();
    }
    expert_layout layout = expert_layout::striped();
    if (const json* l = optional_field(e, "layout")) {
      if (l->is_string() && l->get_ref<const std::string&>() == "striped") {
        layout = expert_layout::striped();
      } else if (l->is_number()) {
        layout = expert_layout::localized(static_cast<std::uint16_t>(whole_in(*l, path, at + ".layout", 0, num_dimms - 1)));
      } else {
        bad_field(path, at + ".layout", "expected \"striped\" or a DIMM index, got " + describe(*l));
      }
    }
    out.experts.push_back({expert_key{static_cast<layer_id>(layer), static_cast<expert_id>(expert)},
                           static_cast<std::uint32_t>(tokens), layout, resident, fp16});
  }
  return out;
}

ojson solve(const schedule_problem& p) {
  const std::size_t num_dimms = p.dimms.num_units;
  const gpu_cpu_ndp_system system(roofline_cost{p.gpu, p.model}, roofline_cost{p.cpu, p.model},
                                  roofline_cost{p.dimms, p.model});
  makespan_problem problem(num_dimms, p.experts.size());
  system.build(p.experts, problem);

  ojson schedules = ojson::array();
  makespan_schedule out(problem.size(), num_dimms);
  if (p.solver == "paper" || p.solver == "all") {
    bottleneck_refinement_config c;
    if (p.max_iterations) c.max_iterations = *p.max_iterations;
    bottleneck_refinement_scheduler s(c);
    s.solve(problem, out);
    schedules.push_back(to_json("paper", out, problem));
  }
  if (p.solver == "improved" || p.solver == "all") {
    local_search_config c;
    if (p.max_iterations) c.max_moves = *p.max_iterations;
    local_search_scheduler s(c);
    s.solve(problem, out);
    schedules.push_back(to_json("improved", out, problem));
  }
  if (p.solver == "exact" || p.solver == "all") {
    exact_makespan_scheduler s;
    s.solve(problem, out);
    schedules.push_back(to_json("exact", out, problem));
  }
  return ojson{{"model", p.model.name},
               {"devices", {{"gpu", p.gpu.name}, {"cpu", p.cpu.name}, {"dimm", p.dimms.name}}},
               {"num_dimms", num_dimms},
               {"lower_bound_seconds", makespan_lower_bound(problem).value},
               {"schedules", schedules}};
}

}  // namespace moepolicy::tool
