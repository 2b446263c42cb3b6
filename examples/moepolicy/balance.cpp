// `moepolicy balance PROBLEM.json`: one layer's split of the activated, non-resident experts
// between loading to the GPU and computing on the CPU (Edge-MoE §5.4, Alg. 2), read and
// solved by balance/two_pointer.hpp, each solver's split as JSON (problem_commands.cpp
// runs it; `-` reads the problem from stdin).
//
// balance problem, in one of two forms:
//   uniform costs (Alg. 2 as published):
//   {"tokens": [12, 3, 7],                 B_i per expert (1 to 65536 experts), whole
//                                          numbers in [0, 2^32 - 1]
//    "load_seconds": 0.002,                t_load: seconds to load one expert, in [0, 1e6]
//    "cpu_seconds_per_token": 0.0004,      t_cpu: CPU seconds per token, in [0, 1e6]
//    "solver": ...}
//   priced by device models (the general form of two_pointer.hpp):
//   {"model": "deepseek-moe-16b",          a model preset name (core/model_shape.hpp)
//    "experts": [{"layer": 1, "expert": 3, "tokens": 12,
//                 "bits": 16}, ...],        bits optional (default 16), in [1, 32]; each
//                                          (layer, expert) at most once
//    "solver": ...}
//   the load time of an expert is its footprint over the GPU's weight link, the CPU time
//   the CPU's roofline time (cost/roofline.hpp); the GPU is Edge-MoE's setting S1 (RTX
//   3080 Ti) and the CPU its 6 cores of a Ryzen 9 5900X unless `--machine` gives the
//   "gpu" or "cpu" role (docs/machine.md).
//   "solver": "two_pointer" | "best_prefix" | "exact" | "all"   optional, default "all"
// "two_pointer" is Alg. 2 (uniform: sorted by B descending; priced: by CPU time per load
// time descending); "best_prefix" loads the best prefix of that order (with uniform costs
// the optimum, `balance_optimal`); "exact" enumerates every split (at most 24 experts,
// else its status is "too_large"). Keys not listed are errors naming them.
//
// output:
//   {"form": "uniform" | "priced", "experts": n,
//    "splits": [{"solver": ..., "status": "heuristic" | "optimal" | "too_large",
//                "makespan_seconds": max(C_load, C_cpu), "load_seconds": C_load,
//                "cpu_seconds": C_cpu, "loaded": [indices into the problem's list],
//                "on_cpu": [indices]}, ...]}
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
#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "problems.hpp"

namespace moepolicy::tool {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::size_t max_balance_items = 65536;

ojson split_json(const char* solver, const char* status, const balance_result& r, std::span<const balance_side> side) {
  ojson loaded = ojson::array();
  ojson on_cpu = ojson::array();
  for (std::size_t i = 0; i < side.size(); ++i) (side[i] == balance_side::load ? loaded : on_cpu).push_back(i);
  return {{"solver", solver},
          {"status", status},
          {"makespan_seconds", r.makespan()},
          {"load_seconds", r.load_seconds},
          {"cpu_seconds", r.cpu_seconds},
          {"loaded", loaded},
          {"on_cpu", on_cpu}};
}

ojson too_large(const char* solver) {
  return {{"solver", solver},        {"status", "too_large"},  {"makespan_seconds", nullptr},
          {"load_seconds", nullptr}, {"cpu_seconds", nullptr}, {"loaded", ojson::array()},
          {"on_cpu", ojson::array()}};
}

}  // namespace

balance_problem read_balance_problem(const json& p, const std::string& path, const io::machine_description* machine) {
  if (!p.is_object()) bad_field(path, "problem", "expected a JSON object, got " + describe(p));
  balance_problem out;
  const bool uniform = p.contains("tokens");
  if (uniform) {
    only_keys(p, path, "", {"tokens", "load_seconds", "cpu_seconds_per_token", "solver"});
    const json& t = need(p, path, "", "tokens");
    if (!t.is_array()) bad_field(path, "tokens", "expected an array of batch sizes, got " + describe(t));
    if (t.empty() || t.size() > max_balance_items) {
      bad_field(path, "tokens", "expected 1 to 65536 experts, got " + std::to_string(t.size()));
    }
    for (std::size_t i = 0; i < t.size(); ++i) {
      out.tokens.push_back(static_cast<std::uint32_t>(
          whole_in(t[i], path, "tokens[" + std::to_string(i) + "]", 0, std::numeric_limits<std::uint32_t>::max())));
    }
    out.uniform.load_seconds = number_in(need(p, path, "", "load_seconds"), path, "load_seconds", 0.0, 1e6, "[0, 1e6]");
    out.uniform.cpu_seconds_per_token =
        number_in(need(p, path, "", "cpu_seconds_per_token"), path, "cpu_seconds_per_token", 0.0, 1e6, "[0, 1e6]");
    out.uniform.max_items = out.tokens.size();
  } else {
    only_keys(p, path, "", {"model", "experts", "solver"});
    const json& model_j = need(p, path, "", "model");
    if (!model_j.is_string()) bad_field(path, "model", "expected a model preset name, got " + describe(model_j));
    const std::optional<model_shape> model = models::find(model_j.get_ref<const std::string&>());
    if (!model) {
      std::string names;
      for (auto make : models::all) names += (names.empty() ? "" : ", ") + make().name;
      bad_field(path, "model", "unknown preset " + describe(model_j) + " (known: " + names + ")");
    }
    out.model = *model;
    const json& ex = need(p, path, "", "experts");
    if (!ex.is_array()) bad_field(path, "experts", "expected an array of experts, got " + describe(ex));
    if (ex.empty() || ex.size() > max_balance_items) {
      bad_field(path, "experts", "expected 1 to 65536 experts, got " + std::to_string(ex.size()));
    }
    std::set<std::pair<std::uint64_t, std::uint64_t>> seen;
    for (std::size_t i = 0; i < ex.size(); ++i) {
      const json& e = ex[i];
      const std::string at = "experts[" + std::to_string(i) + "]";
      if (!e.is_object()) bad_field(path, at, "expected an object, got " + describe(e));
      only_keys(e, path, at + ".", {"layer", "expert", "tokens", "bits"});
      const auto layer = whole_in(need(e, path, at + ".", "layer"), path, at + ".layer", model->num_dense_layers,
                                  std::uint64_t{model->num_layers} - 1);
      const auto expert =
          whole_in(need(e, path, at + ".", "expert"), path, at + ".expert", 0, std::uint64_t{model->num_experts} - 1);
      const auto tokens = whole_in(need(e, path, at + ".", "tokens"), path, at + ".tokens", 0,
                                   std::numeric_limits<std::uint32_t>::max());
      if (!seen.emplace(layer, expert).second) {
        bad_field(path, at, "layer " + std::to_string(layer) + " expert " + std::to_string(expert) + " listed twice");
      }
      bitwidth bits = fp16;
      if (const json* b = optional_field(e, "bits")) {
        bits = bitwidth(static_cast<int>(whole_in(*b, path, at + ".bits", bitwidth::min_bits, bitwidth::max_bits)));
      }
      out.items.push_back({expert_key{static_cast<layer_id>(layer), static_cast<expert_id>(expert)},
                           static_cast<std::uint32_t>(tokens), bits});
    }
    out.gpu = machine != nullptr && machine->gpu ? *machine->gpu : presets::rtx_3080_ti();
    out.cpu = machine != nullptr && machine->cpu ? *machine->cpu : presets::ryzen9_5900x_6c();
  }
  if (const json* s = optional_field(p, "solver")) {
    out.solver = one_of(*s, path, "solver", {"two_pointer", "best_prefix", "exact", "all"});
  }
  return out;
}

ojson solve(const balance_problem& p) {
  const bool all = p.solver == "all";
  ojson splits = ojson::array();
  const std::size_t n = p.model ? p.items.size() : p.tokens.size();
  std::vector<balance_side> side(n);
  if (!p.model) {
    two_pointer_balancer b(p.uniform);
    if (all || p.solver == "two_pointer")
      splits.push_back(split_json("two_pointer", "heuristic", b.balance(p.tokens, side), side));
    if (all || p.solver == "best_prefix") {
      splits.push_back(split_json("best_prefix", "optimal", b.balance_optimal(p.tokens, side), side));
    }
    if (all || p.solver == "exact") {
      if (n > balance_exact_max_items) {
        splits.push_back(too_large("exact"));
      } else {
        const std::vector<double> load(n, p.uniform.load_seconds);
        std::vector<double> cpu(n);
        for (std::size_t i = 0; i < n; ++i) cpu[i] = static_cast<double>(p.tokens[i]) * p.uniform.cpu_seconds_per_token;
        splits.push_back(split_json("exact", "optimal", balance_exact(load, cpu, side), side));
      }
    }
    return ojson{{"form", "uniform"}, {"experts", n}, {"splits", splits}};
  }
  cost_balancer<roofline_cost, roofline_cost> b(roofline_cost{p.gpu, *p.model}, roofline_cost{p.cpu, *p.model}, n);
  if (all || p.solver == "two_pointer")
    splits.push_back(split_json("two_pointer", "heuristic", b.balance(p.items, side), side));
  if (all || p.solver == "best_prefix") {
    splits.push_back(split_json("best_prefix", "heuristic", b.balance_best_prefix(p.items, side), side));
  }
  if (all || p.solver == "exact") {
    if (n > balance_exact_max_items) {
      splits.push_back(too_large("exact"));
    } else {
      splits.push_back(split_json("exact", "optimal", b.balance_exact(p.items, side), side));
    }
  }
  return ojson{{"form", "priced"},  {"model", p.model->name}, {"gpu", p.gpu.name},
               {"cpu", p.cpu.name}, {"experts", n},           {"splits", splits}};
}

}  // namespace moepolicy::tool
