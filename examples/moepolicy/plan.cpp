// `moepolicy bitwidth PROBLEM.json` and `moepolicy place PROBLEM.json`: the problems (a bit
// allocation or a prefill placement given as JSON) read and solved, their answer as JSON,
// so that the policies script from Python and the shell (problem_commands.cpp runs them;
// `-` reads the problem from stdin).
//
// bitwidth problem:
//   {"bits": [1, 2, 3, 4],                 strictly ascending candidate bitwidths, whole
//                                          numbers in [1, 32]
//    "average_bits": 2.5,                  the layer's average budget b̄, in [bits[0], 32]
//    "losses": [[L(b0), L(b1), ...], ...], one row per expert, in descending importance
//                                          (at most 65536), one number in [-1e100, 1e100]
//                                          per bitwidth
//    "weights": [...],                     optional, one number in [0, 1e100] per expert
//                                          (default 1)
//    "form": "exact" | "at_most",          optional, default "exact"
//    "rounding": "down" | "nearest",       optional, default "down"
//    "min_count": [...],                   optional, one whole number in [0, 2^32 - 1] per
//                                          bitwidth: at least that many experts
//                                          at each bitwidth. Only the exact solver honours it:
//                                          with "solver": "prefix_split" it is an error; with
//                                          "both", prefix split's answer says whether it meets
//                                          them ("min_count_met") and its status is
//                                          "min_count_unmet" when it does not.
//    "solver": "prefix_split" | "exact" | "both"}   optional, default "both"
// place problem:
//   {"counts": [[...], ...],               prefill activation counts P, layers x experts
//                                          (1 to 65536 of each), numbers in [0, 1e100]
//    "weight_sums": [[...], ...],          prefill routing-score sums W, same shape
//    "gpu_experts_per_layer": 4,           a whole number in [0, experts]
//    "alpha": 0.5,                         optional, in [0, 1] (default 0.5)
//    "normalization": "sum_to_one" | "divide_by_max" | "min_max",   optional
//    "ndp_average_bits": 3,                with "losses", prefix split picks NDP bitwidths
//                                          at this average, in [losses.bits[0], 32]
//    "losses": {"bits": [1, 2, 3], "table": [[[L per bit] per expert] per layer]},
//                                          bits as above, the table layers x experts x
//                                          bits of the counts' shape, losses in [0, 1e100]
//    "uniform_bits": 3,                    without "losses", every NDP expert's bitwidth
//    "form": ..., "rounding": ...}
// Every number is checked as a number (its range, whether it is whole) before it becomes
// an integer; a key not listed here is an error naming it (a typo such as "solvr" would
// otherwise leave the default in force); a problem is read whole before anything is
// solved.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "json_input.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/place/engine_export.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "problems.hpp"

namespace moepolicy::tool {
namespace {

// Losses, weights and counts: magnitudes up to 1e100, so that their sums and products
// over 65536 experts stay finite.
constexpr double big = 1e100;
constexpr std::string_view any_range = "[-1e100, 1e100]";
constexpr std::string_view non_negative_range = "[0, 1e100]";
constexpr std::size_t max_extent = 65536;

/// Strictly ascending whole bitwidths in [1, 32], at least one.
std::vector<bitwidth> bit_set(const json& j, const std::string& path, const std::string& field) {
  if (!j.is_array()) bad_field(path, field, "expected an array of bitwidths, got " + describe(j));
  if (j.empty()) bad_field(path, field, "expected at least one bitwidth");
  std::vector<bitwidth> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    const auto b = static_cast<int>(whole_in(j[i], path, at, bitwidth::min_bits, bitwidth::max_bits));
    if (!out.empty() && b <= out.back().bits()) {
      bad_field(path, at,
                "expected a bitwidth above " + std::to_string(out.back().bits()) + " (strictly ascending), got " +
                    std::to_string(b));
    }
    out.emplace_back(b);
  }
  return out;
}

/// An average bitwidth in [lowest, 32].
double average_bits(const json& j, const std::string& path, const std::string& field, bitwidth lowest) {
  const std::string range = "[" + std::to_string(lowest.bits()) + ", " + std::to_string(bitwidth::max_bits) + "]";
  return number_in(j, path, field, lowest.bits(), bitwidth::max_bits, range);
}

bit_allocation_config allocation_config(const json& j, const std::string& path) {
  bit_allocation_config c;
  if (const json* f = optional_field(j, "form")) {
    c.form = one_of(*f, path, "form", {"exact", "at_most"}) == "exact" ? budget_form::exact : budget_form::at_most;
  }
  if (const json* r = optional_field(j, "rounding")) {
    c.rounding =
        one_of(*r, path, "rounding", {"down", "nearest"}) == "down" ? budget_rounding::down : budget_rounding::nearest;
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

}  // namespace

bitwidth_problem read_bitwidth_problem(const json& p, const std::string& path) {
  only_keys(p, path, "", {"bits", "average_bits", "losses", "weights", "form", "rounding", "min_count", "solver"});
  bitwidth_problem out;
  out.bits = bit_set(need(p, path, "", "bits"), path, "bits");
  out.average_bits = average_bits(need(p, path, "", "average_bits"), path, "average_bits", out.bits.front());
  out.losses = matrix_in(need(p, path, "", "losses"), path, "losses", out.bits.size(), max_extent, -big, big,
                         any_range);
  const auto experts = static_cast<std::size_t>(out.losses.rows());
  if (const json* w = optional_field(p, "weights")) {
    out.weights = numbers_in(*w, path, "weights", 0.0, big, non_negative_range);
    if (out.weights.size() != experts) {
      bad_field(path, "weights",
                "expected one weight per expert (" + std::to_string(experts) + "), got " +
                    std::to_string(out.weights.size()));
    }
  }
  if (const json* m = optional_field(p, "min_count")) {
    if (!m->is_array()) bad_field(path, "min_count", "expected an array of counts, got " + describe(*m));
    for (std::size_t i = 0; i < m->size(); ++i) {
      out.min_count.push_back(static_cast<std::uint32_t>(whole_in((*m)[i], path, "min_count[" + std::to_string(i) + "]",
                                                                  0, std::numeric_limits<std::uint32_t>::max())));
    }
  }
  if (const json* s = optional_field(p, "solver")) {
    out.solver = one_of(*s, path, "solver", {"prefix_split", "exact", "both"});
  }
  const bool constrained =
      std::any_of(out.min_count.begin(), out.min_count.end(), [](std::uint32_t c) { return c > 0; });
  if (constrained && out.solver == "prefix_split") {
    bad_field(path, "min_count", "prefix split cannot honour minimum counts; use \"solver\": \"exact\" or \"both\"");
  }
  if (!out.min_count.empty() && out.min_count.size() != out.bits.size()) {
    bad_field(path, "min_count",
              "expected one count per bitwidth (" + std::to_string(out.bits.size()) + "), got " +
                  std::to_string(out.min_count.size()));
  }
  out.config = allocation_config(p, path);
  return out;
}

json solve(const bitwidth_problem& p) {
  json out = json::object();
  if (p.solver != "exact") {
    const bit_allocation a = prefix_split(p.bits, p.losses, p.average_bits, p.config, p.weights);
    json j = to_json(a, p.bits);
    const bool constrained = std::any_of(p.min_count.begin(), p.min_count.end(), [](std::uint32_t c) { return c > 0; });
    if (constrained) {
      bool met = a.status != allocation_status::infeasible;
      for (std::size_t i = 0; i < p.min_count.size() && met; ++i) met = a.count_per_level[i] >= p.min_count[i];
      j["min_count_met"] = met;
      if (!met && a.status != allocation_status::infeasible) j["status"] = "min_count_unmet";
    }
    out["prefix_split"] = j;
  }
  if (p.solver != "prefix_split") {
    out["exact"] =
        to_json(exact_allocation(p.bits, p.losses, p.average_bits, p.config, p.weights, p.min_count), p.bits);
  }
  return out;
}

place_problem read_place_problem(const json& p, const std::string& path) {
  only_keys(p, path, "",
            {"counts", "weight_sums", "gpu_experts_per_layer", "alpha", "normalization", "ndp_average_bits", "losses",
             "uniform_bits", "form", "rounding"});
  place_problem out;
  out.counts =
      matrix_in(need(p, path, "", "counts"), path, "counts", std::nullopt, max_extent, 0.0, big, non_negative_range);
  if (out.counts.rows() == 0) bad_field(path, "counts", "expected at least one layer");
  if (out.counts.cols() == 0) bad_field(path, "counts[0]", "expected at least one expert");
  const auto layers = static_cast<std::size_t>(out.counts.rows());
  const auto experts = static_cast<std::size_t>(out.counts.cols());
  const json& w = need(p, path, "", "weight_sums");
  if (w.is_array() && w.size() != layers) {
    bad_field(path, "weight_sums",
              "expected " + std::to_string(layers) + " rows (as counts), got " + std::to_string(w.size()));
  }
  out.weight_sums = matrix_in(w, path, "weight_sums", experts, max_extent, 0.0, big, non_negative_range);
  prefill_placement_config& c = out.config;
  c.gpu_experts_per_layer = static_cast<std::size_t>(
      whole_in(need(p, path, "", "gpu_experts_per_layer"), path, "gpu_experts_per_layer", 0, experts));
  if (const json* a = optional_field(p, "alpha")) c.importance.alpha = number_in(*a, path, "alpha", 0.0, 1.0, "[0, 1]");
  if (const json* n = optional_field(p, "normalization")) {
    const std::string name = one_of(*n, path, "normalization", {"sum_to_one", "divide_by_max", "min_max"});
    c.importance.norm = name == "sum_to_one"      ? normalization::sum_to_one
                        : name == "divide_by_max" ? normalization::divide_by_max
                                                  : normalization::min_max;
  }
  c.allocation = allocation_config(p, path);
  if (const json* l = optional_field(p, "losses")) {
    only_keys(*l, path, "losses.", {"bits", "table"});
    const auto bits = bit_set(need(*l, path, "losses.", "bits"), path, "losses.bits");
    const json& t = need(*l, path, "losses.", "table");
    if (!t.is_array()) bad_field(path, "losses.table", "expected layers x experts x bits, got " + describe(t));
    if (t.size() != layers) {
      bad_field(path, "losses.table",
                "expected " + std::to_string(layers) + " layers (as counts), got " + std::to_string(t.size()));
    }
    std::vector<double> flat;
    for (std::size_t i = 0; i < layers; ++i) {
      const std::string at = "losses.table[" + std::to_string(i) + "]";
      if (t[i].is_array() && t[i].size() != experts) {
        bad_field(path, at,
                  "expected " + std::to_string(experts) + " experts (as counts), got " + std::to_string(t[i].size()));
      }
      const Eigen::MatrixXd m = matrix_in(t[i], path, at, bits.size(), max_extent, 0.0, big, non_negative_range);
      for (Eigen::Index e = 0; e < m.rows(); ++e) {
        for (Eigen::Index b = 0; b < m.cols(); ++b) flat.push_back(m(e, b));
      }
    }
    out.losses.emplace(layers, experts, bits, std::move(flat));
    c.select_bitwidths = true;
    c.ndp_average_bits = average_bits(need(p, path, "", "ndp_average_bits"), path, "ndp_average_bits", bits.front());
  } else {
    c.select_bitwidths = false;
    c.uniform_bits = bitwidth(static_cast<int>(
        whole_in(need(p, path, "", "uniform_bits"), path, "uniform_bits", bitwidth::min_bits, bitwidth::max_bits)));
  }
  return out;
}

json solve(const place_problem& p) {
  const placement_plan plan = place_from_prefill(p.counts, p.weight_sums, p.losses ? &*p.losses : nullptr, p.config);
  json layers = json::array();
  for (std::size_t l = 0; l < plan.num_layers(); ++l) {
    json ndp = json::array();
    for (expert_id e : plan.experts_on(l, tier::ndp)) ndp.push_back({{"expert", e}, {"bits", plan.at(l, e).bits.bits()}});
    layers.push_back({{"layer", l}, {"gpu", plan.experts_on(l, tier::gpu)}, {"ndp", ndp}, {"status", to_string(plan.status(l))}});
  }
  return json{{"layers", layers}};
}

namespace {

/// `a` as one shell word: single-quoted unless it is plain.
std::string shell_word(const std::string& a) {
  const bool plain = !a.empty() && std::all_of(a.begin(), a.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '=' || c == '/';
  });
  if (plain) return a;
  std::string out = "'";
  for (const char c : a) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string list(const std::vector<std::size_t>& v) {
  std::string out;
  for (std::size_t x : v) out += (out.empty() ? "" : ", ") + std::to_string(x);
  return out.empty() ? "none" : out;
}

}  // namespace

std::string export_placement(const place_problem& p, std::string_view engine, const std::optional<model_shape>& model) {
  constexpr std::string_view fn = "export_placement";
  const placement_plan plan = place_from_prefill(p.counts, p.weight_sums, p.losses ? &*p.losses : nullptr, p.config);
  const auto layers = static_cast<std::size_t>(p.counts.rows());
  const auto experts = static_cast<std::size_t>(p.counts.cols());
  std::size_t first_moe_block = 0;
  std::string module = "mlp.experts";
  if (model) {
    const std::size_t moe_layers = model->num_layers - model->num_dense_layers;
    if (moe_layers != layers) {
      detail::throw_invalid(
          fn,
          "the problem's layers differ from the MoE layers of " + model->name + " (" + std::to_string(moe_layers) + ")",
          layers);
    }
    if (model->num_experts != experts) {
      detail::throw_invalid(fn,
                            "the problem's experts per layer differ from those of " + model->name + " (" +
                                std::to_string(model->num_experts) + ")",
                            experts);
    }
    first_moe_block = model->num_dense_layers;
    if (model->name.starts_with("Mixtral")) module = "block_sparse_moe.experts";
  }
  std::vector<std::size_t> gpu(layers);
  std::vector<double> tokens(layers);
  for (std::size_t l = 0; l < layers; ++l) {
    gpu[l] = plan.experts_on(l, tier::gpu).size();
    tokens[l] = p.counts.row(static_cast<Eigen::Index>(l)).sum();
  }
  const whole_layer_split s = split_whole_layers(gpu, experts, tokens, first_moe_block);
  std::string head = "# From a placement of " + std::to_string(s.placement_gpu_experts) + " GPU experts over " +
                     std::to_string(layers) + " MoE layers of " + std::to_string(experts) + " experts.\n";
  if (engine == "llamacpp") {
    head +=
        "# llama.cpp stores a layer's experts in one tensor per projection (blk.N.ffn_*_exps), so only\n"
        "# whole layers move: " +
        std::to_string(s.gpu_layers) + " of " + std::to_string(layers) + " layers fit the same GPU memory (blocks " +
        list(s.blocks(true)) + "); " + std::to_string(s.unused_gpu_experts) +
        " of the placement's GPU experts stay unused.\n";
    std::string line;
    for (const auto& a : llamacpp_args(s)) line += (line.empty() ? "" : " ") + shell_word(a);
    return head + line + "\n";
  }
  if (engine == "ktransformers") {
    head += "# KTransformers replaces each layer's experts module as a whole (model.layers.N." + module +
            "), so only\n# whole layers move: " + std::to_string(s.gpu_layers) + " of " + std::to_string(layers) +
            " layers fit the same GPU memory (blocks " + list(s.blocks(true)) + "); " +
            std::to_string(s.unused_gpu_experts) +
            " of the placement's GPU experts stay unused.\n"
            "# Put this rule before the experts rule of the model's optimize-rules file (the first\n"
            "# matching rule applies); the other layers keep that file's CPU experts. GPU experts\n"
            "# need CUDA Graph off (KTransformers FAQ).\n";
    return head + ktransformers_rules(s, module);
  }
  detail::throw_invalid(fn, "engine must be \"llamacpp\" or \"ktransformers\", got \"" + std::string(engine) + "\"");
}

}  // namespace moepolicy::tool
