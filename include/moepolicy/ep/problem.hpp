// moepolicy/ep/problem.hpp — expert-parallel (EP) placement: the problem, the placement in
// DeepSeek EPLB's shapes, and what a placement is measured by.
//
// The problem: a load per (MoE layer, logical expert) — a window of recorded token counts
// or a forecast — and a cluster of `nodes` × GPUs holding `replicas` physical expert slots
// in all (the same number on every GPU), the four numbers of DeepSeek EPLB's
// `rebalance_experts(weight, num_replicas, num_groups, num_nodes, num_gpus)`. Logical
// experts are split into `groups` consecutive groups (group-limited routing, DeepSeek-V3);
// when the nodes divide the groups, a placement may keep each group on one node.
//
// The placement, per layer, in the shapes DeepSeek EPLB (github.com/deepseek-ai/EPLB)
// returns and vLLM and SGLang consume:
//   physical_to_logical [L][R]               the logical expert in each physical slot;
//                                             slot p lives on GPU p / (R / G);
//   logical_to_physical [L][E][max_replicas] the slots of each logical expert, padded
//                                             with -1 (max_replicas over all layers);
//   logical_count       [L][E]               the replicas of each logical expert.
//
// The load model (EPLB's): a logical expert's load is split evenly among its replicas, and
// a GPU's load is the sum over its slots. Balancedness (vLLM's EPLB metric) is the mean
// GPU load ÷ the max GPU load, 1 for a layer without load.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/cost/concepts.hpp"

namespace moepolicy {

/// The cluster of an EP deployment, as DeepSeek EPLB's `rebalance_experts` takes it.
struct ep_cluster {
  /// R: physical expert slots in all, a multiple of `gpus`, >= the logical experts.
  std::uint32_t replicas = 0;
  /// G: GPUs in all, a multiple of `nodes` when the policy is hierarchical.
  std::uint32_t gpus = 1;
  /// N: server nodes (a fast intra-node network, a slower one between nodes).
  std::uint32_t nodes = 1;
  /// K: expert groups of group-limited routing; must divide the logical experts.
  std::uint32_t groups = 1;

  /// R / G: slots on each GPU.
  [[nodiscard]] std::uint32_t slots_per_gpu() const noexcept { return gpus == 0 ? 0 : replicas / gpus; }
  /// Whether DeepSeek EPLB's hierarchical policy applies (the nodes divide the groups);
  /// otherwise its global policy.
  [[nodiscard]] bool hierarchical() const noexcept { return nodes != 0 && groups % nodes == 0; }
};

/// The most logical experts, slots or layers the EP solvers accept (outputs are int32).
inline constexpr std::size_t ep_max_dimension = std::size_t{1} << 20;

/// A row-major layers × experts matrix of loads, not owned.
class ep_load_view {
 public:
  ep_load_view() = default;
  /// Throws: `invalid_argument` when `values.size() != layers * experts`, or a dimension is
  /// 0 or above `ep_max_dimension`.
  ep_load_view(std::span<const double> values, std::size_t layers, std::size_t experts)
      : values_(values), layers_(layers), experts_(experts) {
    constexpr std::string_view fn = "ep_load_view";
    if (layers == 0 || layers > ep_max_dimension) detail::throw_invalid(fn, "layers must be in [1, 2^20]", layers);
    if (experts == 0 || experts > ep_max_dimension) detail::throw_invalid(fn, "experts must be in [1, 2^20]", experts);
    if (values.size() != layers * experts) {
      detail::throw_invalid(fn, "values must hold layers * experts = " + std::to_string(layers * experts) + " loads",
                            values.size());
    }
  }
  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::span<const double> row(std::size_t layer) const noexcept {
    return values_.subspan(layer * experts_, experts_);
  }
  [[nodiscard]] std::span<const double> values() const noexcept { return values_; }

 private:
  std::span<const double> values_;
  std::size_t layers_ = 0;
  std::size_t experts_ = 0;
};

/// A placement of every layer, in DeepSeek EPLB's three shapes (see the file comment).
/// Storage is sized for the worst case at construction, so refilling it never allocates.
class ep_placement {
 public:
  ep_placement() = default;
  ep_placement(std::size_t layers, std::size_t experts, std::size_t replicas)
      : layers_(layers),
        experts_(experts),
        replicas_(replicas),
        p2l_(layers * replicas, -1),
        rank_(layers * replicas, 0),
        count_(layers * experts, 0),
        l2p_(layers * experts * (replicas >= experts ? replicas - experts + 1 : 1), -1) {}

  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::size_t replicas() const noexcept { return replicas_; }
  /// The width of `logical_to_physical`: the most replicas of any expert in any layer.
  [[nodiscard]] std::size_t max_replicas() const noexcept { return max_replicas_; }

  /// The logical expert in each of the R slots of `layer`.
  [[nodiscard]] std::span<const std::int32_t> physical_to_logical(std::size_t layer) const noexcept {
    return {p2l_.data() + layer * replicas_, replicas_};
  }
  /// The slots of expert `expert` in `layer`, `max_replicas()` long, padded with -1.
  [[nodiscard]] std::span<const std::int32_t> logical_to_physical(std::size_t layer,
                                                                  std::size_t expert) const noexcept {
    return {l2p_.data() + (layer * experts_ + expert) * max_replicas_, max_replicas_};
  }
  /// The replicas of each logical expert of `layer`.
  [[nodiscard]] std::span<const std::int32_t> logical_count(std::size_t layer) const noexcept {
    return {count_.data() + layer * experts_, experts_};
  }
  /// The replica rank of each slot of `layer` (its column in `logical_to_physical`).
  [[nodiscard]] std::span<const std::int32_t> replica_rank(std::size_t layer) const noexcept {
    return {rank_.data() + layer * replicas_, replicas_};
  }

  /// Writable rows for solvers: after writing every layer's slots (and ranks, or calling
  /// `rank_by_slot`), `finish()` derives the counts and `logical_to_physical`.
  [[nodiscard]] std::span<std::int32_t> physical_to_logical_row(std::size_t layer) noexcept {
    return {p2l_.data() + layer * replicas_, replicas_};
  }
  [[nodiscard]] std::span<std::int32_t> replica_rank_row(std::size_t layer) noexcept {
    return {rank_.data() + layer * replicas_, replicas_};
  }
  /// Ranks the replicas of each expert of `layer` by slot, ascending (SGLang's order).
  void rank_by_slot(std::size_t layer) noexcept {
    std::int32_t* cnt = count_.data() + layer * experts_;
    std::fill(cnt, cnt + experts_, 0);
    const std::int32_t* p2l = p2l_.data() + layer * replicas_;
    std::int32_t* rank = rank_.data() + layer * replicas_;
    for (std::size_t p = 0; p < replicas_; ++p) rank[p] = cnt[static_cast<std::size_t>(p2l[p])]++;
  }
  /// Derives `logical_count`, `max_replicas` and `logical_to_physical` from the slots and
  /// ranks. Preconditions: every slot holds an expert in [0, E), ranks of an expert are
  /// 0, 1, … without gaps.
  void finish() noexcept {
    std::fill(count_.begin(), count_.end(), 0);
    std::size_t widest = 1;
    for (std::size_t l = 0; l < layers_; ++l) {
      const std::int32_t* p2l = p2l_.data() + l * replicas_;
      std::int32_t* cnt = count_.data() + l * experts_;
      for (std::size_t p = 0; p < replicas_; ++p) {
        MOEPOLICY_ASSERT(p2l[p] >= 0 && static_cast<std::size_t>(p2l[p]) < experts_);
        widest = std::max(widest, static_cast<std::size_t>(++cnt[static_cast<std::size_t>(p2l[p])]));
      }
    }
    max_replicas_ = widest;
    std::fill(l2p_.begin(), l2p_.begin() + static_cast<std::ptrdiff_t>(layers_ * experts_ * widest), -1);
    for (std::size_t l = 0; l < layers_; ++l) {
      const std::int32_t* p2l = p2l_.data() + l * replicas_;
      const std::int32_t* rank = rank_.data() + l * replicas_;
      for (std::size_t p = 0; p < replicas_; ++p) {
        const std::size_t e = static_cast<std::size_t>(p2l[p]);
        const auto r = static_cast<std::size_t>(rank[p]);
        MOEPOLICY_ASSERT(r < widest);
        l2p_[(l * experts_ + e) * widest + r] = static_cast<std::int32_t>(p);
      }
    }
  }

 private:
  std::size_t layers_ = 0;
  std::size_t experts_ = 0;
  std::size_t replicas_ = 0;
  std::size_t max_replicas_ = 1;
  std::vector<std::int32_t> p2l_;
  std::vector<std::int32_t> rank_;
  std::vector<std::int32_t> count_;
  std::vector<std::int32_t> l2p_;
};

namespace detail::ep {

/// Checks the cluster against `experts` logical experts, naming `fn` in errors.
inline void check_cluster(std::string_view fn, std::size_t experts, const ep_cluster& c) {
  if (c.gpus == 0) throw_invalid(fn, "gpus must be >= 1", c.gpus);
  if (c.nodes == 0) throw_invalid(fn, "nodes must be >= 1", c.nodes);
  if (c.groups == 0) throw_invalid(fn, "groups must be >= 1", c.groups);
  if (c.replicas == 0 || c.replicas > ep_max_dimension) throw_invalid(fn, "replicas must be in [1, 2^20]", c.replicas);
  if (experts == 0 || experts > ep_max_dimension) throw_invalid(fn, "logical experts must be in [1, 2^20]", experts);
  if (c.replicas < experts) {
    throw_invalid(fn,
                  "replicas cannot hold every logical expert: replicas must be >= the " + std::to_string(experts) +
                      " logical experts",
                  c.replicas);
  }
  if (c.replicas % c.gpus != 0) {
    throw_invalid(fn, "replicas must be a multiple of gpus (" + std::to_string(c.gpus) + ")", c.replicas);
  }
  // Only the hierarchical policy places whole nodes (EPLB's global policy ignores them).
  if (c.hierarchical() && c.gpus % c.nodes != 0) {
    throw_invalid(fn, "gpus must be a multiple of nodes (" + std::to_string(c.nodes) + ")", c.gpus);
  }
  if (experts % c.groups != 0) {
    throw_invalid(fn, "groups must divide the " + std::to_string(experts) + " logical experts", c.groups);
  }
}

/// Checks per-GPU speeds: empty (all alike) or `gpus` values, each finite and > 0.
inline void check_speeds(std::string_view fn, std::span<const double> speed, std::size_t gpus) {
  if (speed.empty()) return;
  if (speed.size() != gpus) {
    throw_invalid(fn, "gpu speeds must be empty or one per GPU (" + std::to_string(gpus) + ")", speed.size());
  }
  for (std::size_t g = 0; g < speed.size(); ++g) {
    if (!(std::isfinite(speed[g]) && speed[g] > 0.0)) {
      throw_invalid(fn, "speed of GPU " + std::to_string(g) + " must be finite and > 0", speed[g]);
    }
  }
}

/// Checks that every load is finite and >= 0, naming the first bad one.
inline void check_loads(std::string_view fn, const ep_load_view& loads) {
  const auto v = loads.values();
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!(std::isfinite(v[i]) && v[i] >= 0.0)) {
      throw_invalid(fn,
                    "load of layer " + std::to_string(i / loads.experts()) + ", expert " +
                        std::to_string(i % loads.experts()) + " must be finite and >= 0",
                    v[i]);
    }
  }
}

/// Checks a current placement (`layers` × R slots, flat) against the problem.
inline void check_current(std::string_view fn, std::span<const std::int32_t> current, std::size_t layers,
                          std::size_t experts, std::size_t replicas, std::vector<std::uint32_t>& seen) {
  if (current.size() != layers * replicas) {
    throw_invalid(fn, "current placement must hold layers * replicas = " + std::to_string(layers * replicas) + " slots",
                  current.size());
  }
  seen.assign(experts, 0);
  for (std::size_t l = 0; l < layers; ++l) {
    std::fill(seen.begin(), seen.end(), 0u);
    for (std::size_t p = 0; p < replicas; ++p) {
      const std::int32_t e = current[l * replicas + p];
      if (e < 0 || static_cast<std::size_t>(e) >= experts) {
        throw_invalid(fn,
                      "current placement of layer " + std::to_string(l) + ", slot " + std::to_string(p) +
                          " must name a logical expert in [0, " + std::to_string(experts) + ")",
                      e);
      }
      seen[static_cast<std::size_t>(e)] = 1;
    }
    for (std::size_t e = 0; e < experts; ++e) {
      if (seen[e] == 0) {
        throw_invalid(
            fn, "current placement of layer " + std::to_string(l) + " must hold every logical expert; missing", e);
      }
    }
  }
}

}  // namespace detail::ep

/// Each GPU's speed for expert work, priced by its `ComputeCost` model (a `DeviceCost`, or
/// `any_device_cost` for a mix of kinds): `tokens ÷ compute_seconds(key, bits, tokens)`, in
/// tokens per second, at a reference batch of `tokens` tokens per expert (the batch the
/// deployment runs: at small batches a roofline GPU streams weights, at large ones it
/// computes, and the speeds differ accordingly). Pass the result as `ep_rebalancer`'s
/// `gpu_speed` and to the bound and dispatch functions.
///
/// Throws: `invalid_argument` naming `ep_gpu_speeds` when `devices` is empty, `tokens` is 0,
/// or a device prices the batch at a time that is not finite and > 0.
template <ComputeCost C>
[[nodiscard]] std::vector<double> ep_gpu_speeds(std::span<const C> devices, std::size_t tokens, bitwidth bits,
                                                expert_key key = {}) {
  constexpr std::string_view fn = "ep_gpu_speeds";
  if (devices.empty()) detail::throw_invalid(fn, "devices must not be empty", devices.size());
  if (tokens == 0) detail::throw_invalid(fn, "tokens must be > 0", tokens);
  std::vector<double> out(devices.size());
  for (std::size_t g = 0; g < devices.size(); ++g) {
    const double t = static_cast<double>(devices[g].compute_seconds(key, bits, tokens));
    if (!(std::isfinite(t) && t > 0.0)) {
      detail::throw_invalid(fn, "device " + std::to_string(g) + " must take a finite time > 0 for the batch", t);
    }
    out[g] = static_cast<double>(tokens) / t;
  }
  return out;
}

/// Per-GPU loads of one layer: `out[g]` = Σ over the slots of GPU g of load / replicas.
///
/// Preconditions: `slots` holds experts in [0, loads.size()), `counts[e]` their replica
/// counts, `out.size()` divides `slots.size()`. Complexity: O(R); no allocation.
inline void ep_gpu_loads(std::span<const double> loads, std::span<const std::int32_t> slots,
                         std::span<const std::int32_t> counts, std::span<double> out) noexcept {
  const std::size_t per = slots.size() / out.size();
  for (std::size_t g = 0; g < out.size(); ++g) {
    double s = 0.0;
    for (std::size_t k = 0; k < per; ++k) {
      const auto e = static_cast<std::size_t>(slots[g * per + k]);
      s += loads[e] / counts[e];
    }
    out[g] = s;
  }
}

/// Mean ÷ max of `gpu_loads`; 1 when every load is 0.
[[nodiscard]] inline double ep_balancedness(std::span<const double> gpu_loads) noexcept {
  double sum = 0.0;
  double mx = 0.0;
  for (double x : gpu_loads) sum += x, mx = std::max(mx, x);
  if (mx <= 0.0) return 1.0;
  return sum / static_cast<double>(gpu_loads.size()) / mx;
}

/// What a placement achieves on given loads.
struct ep_placement_stats {
  /// [L][G]: the load of every GPU.
  std::vector<double> gpu_loads;
  /// [L]: the max GPU load and the balancedness (mean ÷ max) of every layer.
  std::vector<double> max_load;
  std::vector<double> balancedness;
  /// The mean of `balancedness` over the layers.
  double mean_balancedness = 1.0;
  /// [L]: slots whose logical expert differs from `previous` (0 without one), and the total.
  std::vector<std::uint32_t> moved;
  std::uint64_t moved_total = 0;
};

/// Measures `placement` on `loads` with `gpus` GPUs; counts the slots changed against
/// `previous` when given (a flat layers × R array of logical experts).
///
/// Throws: `invalid_argument` when the shapes disagree (layers, experts, slots, or gpus not
/// dividing the slots).
[[nodiscard]] inline ep_placement_stats ep_evaluate(const ep_load_view& loads, const ep_placement& placement,
                                                    std::uint32_t gpus, std::span<const std::int32_t> previous = {}) {
  constexpr std::string_view fn = "ep_evaluate";
  if (placement.layers() != loads.layers()) {
    detail::throw_invalid(fn, "placement layers must equal the load matrix's " + std::to_string(loads.layers()),
                          placement.layers());
  }
  if (placement.experts() != loads.experts()) {
    detail::throw_invalid(fn, "placement experts must equal the load matrix's " + std::to_string(loads.experts()),
                          placement.experts());
  }
  if (gpus == 0 || placement.replicas() % gpus != 0) {
    detail::throw_invalid(fn, "gpus must divide the " + std::to_string(placement.replicas()) + " slots", gpus);
  }
  if (!previous.empty() && previous.size() != placement.layers() * placement.replicas()) {
    detail::throw_invalid(fn, "previous placement must hold layers * replicas slots", previous.size());
  }
  const std::size_t layers = loads.layers();
  ep_placement_stats s;
  s.gpu_loads.resize(layers * gpus);
  s.max_load.resize(layers);
  s.balancedness.resize(layers);
  s.moved.assign(layers, 0);
  double sum = 0.0;
  for (std::size_t l = 0; l < layers; ++l) {
    std::span<double> row{s.gpu_loads.data() + l * gpus, gpus};
    ep_gpu_loads(loads.row(l), placement.physical_to_logical(l), placement.logical_count(l), row);
    s.max_load[l] = *std::max_element(row.begin(), row.end());
    s.balancedness[l] = ep_balancedness(row);
    sum += s.balancedness[l];
    if (!previous.empty()) {
      const auto now = placement.physical_to_logical(l);
      for (std::size_t p = 0; p < now.size(); ++p) s.moved[l] += now[p] != previous[l * now.size() + p] ? 1u : 0u;
      s.moved_total += s.moved[l];
    }
  }
  s.mean_balancedness = sum / static_cast<double>(layers);
  return s;
}

}  // namespace moepolicy
