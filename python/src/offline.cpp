// python/src/offline.cpp — decisions over a whole trace or table: bitwidth allocation
// (prefix split and exact, Context-Aware GPU-NDP §4.2), prefill-guided placement (§4.1-4.2),
// batched decode steps for the schedulers (TriMoE §5.1.3), and the expert-parallel
// rebalance with DeepSeek EPLB's signature and outputs.
#include <pybind11/stl.h>

#include <Eigen/Core>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy::python {
namespace {

using row_major = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::string_view status_name(allocation_status s) {
  switch (s) {
    case allocation_status::ok:
      return "ok";
    case allocation_status::saturated:
      return "saturated";
    case allocation_status::infeasible:
      return "infeasible";
  }
  return "?";
}

std::vector<bitwidth> read_bits(std::string_view fn, py::handle obj) {
  std::vector<std::int32_t> raw;
  py::array a = read_integers(obj, fn, "bits", bitwidth::min_bits, bitwidth::max_bits, raw);
  need_ndim(a, 1, fn, "bits");
  std::vector<bitwidth> out;
  for (std::int32_t b : raw) out.emplace_back(b);
  return out;
}

bit_allocation_config allocation_config(std::string_view fn, const std::string& form, const std::string& rounding) {
  bit_allocation_config c;
  if (form == "exact")
    c.form = budget_form::exact;
  else if (form == "at_most")
    c.form = budget_form::at_most;
  else
    detail::throw_invalid(fn, "form must be exact or at_most", form);
  if (rounding == "down")
    c.rounding = budget_rounding::down;
  else if (rounding == "nearest")
    c.rounding = budget_rounding::nearest;
  else
    detail::throw_invalid(fn, "rounding must be down or nearest", rounding);
  return c;
}

py::dict allocation_dict(bit_allocation&& a) {
  py::dict d;
  d["status"] = std::string(status_name(a.status));
  const auto n = static_cast<py::ssize_t>(a.level_of.size());
  const auto m = static_cast<py::ssize_t>(a.count_per_level.size());
  d["level_of"] = adopt(std::move(a.level_of), {n});
  d["count_per_level"] = adopt(std::move(a.count_per_level), {m});
  d["budget_increments"] = a.budget_increments;
  d["used_increments"] = a.used_increments;
  d["weighted_loss"] = a.weighted_loss;
  d["gain"] = a.gain;
  return d;
}

py::dict allocate(bool exact, py::handle bits_obj, py::handle loss_obj, double average_bits, const std::string& form,
                  const std::string& rounding, py::handle weights_obj, py::handle min_count_obj) {
  const std::string_view fn = exact ? "exact_allocation" : "prefix_split";
  const auto bits = read_bits(fn, bits_obj);
  auto loss = read_reals<double>(loss_obj, fn, "loss");
  need_ndim(loss, 2, fn, "loss (experts in descending importance x bitwidths)");
  const auto cfg = allocation_config(fn, form, rounding);
  std::optional<py::array_t<double, py::array::c_style>> w;
  std::span<const double> weights;
  if (!weights_obj.is_none()) {
    w = read_reals<double>(weights_obj, fn, "weights");
    weights = span_of(*w);
  }
  std::vector<std::uint32_t> min_count;
  if (!min_count_obj.is_none()) read_integers(min_count_obj, fn, "min_count", 0, 0xffffffffu, min_count);
  const Eigen::Map<const row_major> map(loss.data(), loss.shape(0), loss.shape(1));
  bit_allocation a;
  {
    maybe_release unlock(static_cast<std::size_t>(loss.size()));
    a = exact ? exact_allocation(bits, map, average_bits, cfg, weights, min_count)
              : prefix_split(bits, map, average_bits, cfg, weights);
  }
  return allocation_dict(std::move(a));
}

normalization normalization_by_name(const std::string& s) {
  if (s == "sum_to_one") return normalization::sum_to_one;
  if (s == "divide_by_max") return normalization::divide_by_max;
  if (s == "min_max") return normalization::min_max;
  detail::throw_invalid("place_from_prefill", "normalization must be sum_to_one, divide_by_max or min_max", s);
}

py::dict place(py::handle counts_obj, py::handle weight_sums_obj, py::handle losses_obj, py::handle bits_obj,
               std::size_t gpu_experts_per_layer, double alpha, const std::string& norm, bool select_bitwidths,
               double ndp_average_bits, int uniform_bits, int gpu_bits, const std::string& form,
               const std::string& rounding) {
  constexpr std::string_view fn = "place_from_prefill";
  auto counts = read_reals<double>(counts_obj, fn, "counts");
  auto sums = read_reals<double>(weight_sums_obj, fn, "weight_sums");
  need_ndim(counts, 2, fn, "counts (layers x experts)");
  need_ndim(sums, 2, fn, "weight_sums (layers x experts)");
  prefill_placement_config cfg;
  cfg.gpu_experts_per_layer = gpu_experts_per_layer;
  cfg.importance = importance_config{alpha, normalization_by_name(norm)};
  cfg.select_bitwidths = select_bitwidths;
  cfg.ndp_average_bits = ndp_average_bits;
  cfg.uniform_bits = bitwidth{uniform_bits};
  cfg.gpu_bits = bitwidth{gpu_bits};
  cfg.allocation = allocation_config(fn, form, rounding);
  const auto L = static_cast<std::size_t>(counts.shape(0));
  const auto E = static_cast<std::size_t>(counts.shape(1));
  std::optional<loss_table> table;
  if (!losses_obj.is_none()) {
    if (bits_obj.is_none()) detail::throw_invalid(fn, "a loss table needs its bits");
    auto bits = read_bits(fn, bits_obj);
    auto losses = read_reals<double>(losses_obj, fn, "losses");
    need_ndim(losses, 3, fn, "losses (layers x experts x bits)");
    const auto v = span_of(losses);
    table.emplace(static_cast<std::size_t>(losses.shape(0)), static_cast<std::size_t>(losses.shape(1)), std::move(bits),
                  std::vector<double>(v.begin(), v.end()));
  }
  const Eigen::Map<const row_major> c(counts.data(), counts.shape(0), counts.shape(1));
  const Eigen::Map<const row_major> w(sums.data(), sums.shape(0), sums.shape(1));
  placement_plan plan;
  {
    maybe_release unlock(L * E * 16);
    plan = place_from_prefill(c, w, table ? &*table : nullptr, cfg);
  }
  py::array_t<std::uint8_t> tiers(std::vector<py::ssize_t>{counts.shape(0), counts.shape(1)});
  py::array_t<std::uint8_t> bits(std::vector<py::ssize_t>{counts.shape(0), counts.shape(1)});
  std::vector<std::string> status;
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t e = 0; e < E; ++e) {
      tiers.mutable_data()[l * E + e] = plan.at(l, e).where == tier::gpu ? 0 : 1;
      bits.mutable_data()[l * E + e] = static_cast<std::uint8_t>(plan.at(l, e).bits.bits());
    }
    status.emplace_back(status_name(plan.status(l)));
  }
  py::dict d;
  d["tier"] = tiers;
  d["bits"] = bits;
  d["status"] = status;
  return d;
}

py::tuple rebalance(py::handle weight_obj, std::uint32_t replicas, std::uint32_t groups, std::uint32_t nodes,
                    std::uint32_t gpus, const std::string& algorithm, py::handle current_obj,
                    double balance_tolerance) {
  constexpr std::string_view fn = "rebalance_experts";
  auto w = read_reals<double>(weight_obj, fn, "weight");
  need_ndim(w, 2, fn, "weight (layers x logical experts)");
  const auto L = static_cast<std::size_t>(w.shape(0));
  const auto E = static_cast<std::size_t>(w.shape(1));
  const ep_load_view loads(span_of(w), L, E);
  const ep_cluster cluster{replicas, gpus, nodes, groups};
  ep_placement placement;
  if (algorithm == "deepseek") {
    if (!current_obj.is_none()) detail::throw_invalid(fn, "algorithm deepseek takes no current placement");
    deepseek_eplb solver(E, cluster);
    placement = ep_placement(L, E, replicas);
    py::gil_scoped_release unlock;
    solver.solve(loads, placement);
  } else if (algorithm == "moepolicy") {
    ep_rebalancer solver(L, E, cluster, ep_rebalance_config{.balance_tolerance = balance_tolerance});
    if (current_obj.is_none()) {
      py::gil_scoped_release unlock;
      placement = solver.rebalance(loads).placement;
    } else {
      std::vector<std::int32_t> current;
      py::array ca = read_integers(current_obj, fn, "current", 0, E - 1, current);
      need_size(ca, L * replicas, fn, "current (layers x num_replicas)");
      py::gil_scoped_release unlock;
      placement = solver.rebalance(loads, current).placement;
    }
  } else {
    detail::throw_invalid(fn, "algorithm must be moepolicy or deepseek", algorithm);
  }
  // DeepSeek EPLB's shapes: phy2log [L, R], log2phy [L, E, R - E + 1] padded with -1, logcnt [L, E].
  const std::size_t width = replicas - E + 1;
  std::vector<std::int64_t> p2l(L * replicas), l2p(L * E * width, -1), cnt(L * E);
  for (std::size_t l = 0; l < L; ++l) {
    const auto row = placement.physical_to_logical(l);
    for (std::size_t p = 0; p < replicas; ++p) p2l[l * replicas + p] = row[p];
    const auto c = placement.logical_count(l);
    for (std::size_t e = 0; e < E; ++e) {
      cnt[l * E + e] = c[e];
      const auto slots = placement.logical_to_physical(l, e);
      for (std::size_t r = 0; r < slots.size() && r < width; ++r) l2p[(l * E + e) * width + r] = slots[r];
    }
  }
  const auto sl = static_cast<py::ssize_t>(L), se = static_cast<py::ssize_t>(E);
  return py::make_tuple(adopt(std::move(p2l), {sl, static_cast<py::ssize_t>(replicas)}),
                        adopt(std::move(l2p), {sl, se, static_cast<py::ssize_t>(width)}),
                        adopt(std::move(cnt), {sl, se}));
}

}  // namespace

void bind_offline(py::module_& m) {
  m.def(
      "prefix_split",
      [](py::handle bits, py::handle loss, double average_bits, const std::string& form, const std::string& rounding,
         py::handle weights) { return allocate(false, bits, loss, average_bits, form, rounding, weights, py::none()); },
      py::arg("bits"), py::arg("loss"), py::arg("average_bits"), py::kw_only(), py::arg("form") = "exact",
      py::arg("rounding") = "down", py::arg("weights") = py::none(),
      "Prefix-split bitwidth allocation of one layer (Context-Aware GPU-NDP §4.2, Alg. 1 lines 19-22): loss is\n"
      "experts (in descending importance) x bits. Returns status, level_of (an index into bits per expert),\n"
      "count_per_level, budget and used increments, weighted_loss and gain.");
  m.def(
      "exact_allocation",
      [](py::handle bits, py::handle loss, double average_bits, const std::string& form, const std::string& rounding,
         py::handle weights,
         py::handle min_count) { return allocate(true, bits, loss, average_bits, form, rounding, weights, min_count); },
      py::arg("bits"), py::arg("loss"), py::arg("average_bits"), py::kw_only(), py::arg("form") = "exact",
      py::arg("rounding") = "down", py::arg("weights") = py::none(), py::arg("min_count") = py::none(),
      "The optimal bitwidth allocation of the same problem (dynamic programming), as prefix_split returns it.");
  m.def("place_from_prefill", &place, py::arg("counts"), py::arg("weight_sums"), py::arg("losses") = py::none(),
        py::arg("bits") = py::none(), py::kw_only(), py::arg("gpu_experts_per_layer") = 4, py::arg("alpha") = 0.5,
        py::arg("normalization") = "sum_to_one", py::arg("select_bitwidths") = true, py::arg("ndp_average_bits") = 3.0,
        py::arg("uniform_bits") = 3, py::arg("gpu_bits") = 16, py::arg("form") = "exact", py::arg("rounding") = "down",
        "Prefill-guided placement (Context-Aware GPU-NDP §4.1-4.2): the K most important experts per layer on\n"
        "the GPU, the rest on the NDP device at prefix-split bitwidths from losses (layers x experts x bits).\n"
        "Returns tier (0 gpu, 1 ndp) and bits, layers x experts, and each layer's allocation status.");
  m.def(
      "batched_decode_steps",
      [](const routing_trace& t, std::size_t batch_size, const std::string& formation) {
        batch_formation how;
        if (formation == "concurrent_sequences")
          how = batch_formation::concurrent_sequences;
        else if (formation == "consecutive_tokens")
          how = batch_formation::consecutive_tokens;
        else
          detail::throw_invalid("batched_decode_steps", "formation must be concurrent_sequences or consecutive_tokens",
                                formation);
        batched_steps b;
        {
          py::gil_scoped_release unlock;
          b = make_batched_decode_steps(t, batch_size, how);
        }
        const std::size_t S = b.num_steps(), L = b.num_layers(), E = b.num_experts();
        std::vector<std::uint32_t> out(S * L * E);
        for (std::size_t s = 0; s < S; ++s) {
          for (std::size_t l = 0; l < L; ++l) {
            const auto row = b.loads(s, l);
            std::copy(row.begin(), row.end(), out.begin() + static_cast<std::ptrdiff_t>((s * L + l) * E));
          }
        }
        return adopt(std::move(out),
                     {static_cast<py::ssize_t>(S), static_cast<py::ssize_t>(L), static_cast<py::ssize_t>(E)});
      },
      py::arg("trace"), py::arg("batch_size"), py::kw_only(), py::arg("formation") = "concurrent_sequences",
      "Batched decode steps of batch_size recorded decode tokens (TriMoE §5.1.3): per-expert loads, steps x\n"
      "layers x experts (uint32). formation: concurrent_sequences (B sequences decoding together) or\n"
      "consecutive_tokens.");
  m.def("rebalance_experts", &rebalance, py::arg("weight"), py::arg("num_replicas"), py::arg("num_groups"),
        py::arg("num_nodes"), py::arg("num_gpus"), py::kw_only(), py::arg("algorithm") = "moepolicy",
        py::arg("current") = py::none(), py::arg("balance_tolerance") = 0.0,
        "DeepSeek EPLB's rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus): weight is\n"
        "layers x logical experts (any array-like, a torch tensor too). Returns (physical_to_logical [L, R],\n"
        "logical_to_physical [L, E, R - E + 1] padded with -1, logical_count [L, E]) as int64 numpy arrays.\n"
        "algorithm='deepseek' is EPLB itself; 'moepolicy' (default) the rebalancer of ep/rebalancer.hpp, never\n"
        "worse balanced, which also takes the current physical_to_logical to move fewer experts.");
}

}  // namespace moepolicy::python
