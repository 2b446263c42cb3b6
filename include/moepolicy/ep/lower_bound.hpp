// moepolicy/ep/lower_bound.hpp — a proven lower bound on the max GPU load any EP placement
// of one layer can reach, and the replication that minimises the largest per-replica load
// (the step DeepSeek EPLB's `replicate_experts` takes, shared by ep/rebalancer.hpp).
//
// Model (EPLB's): expert e with load w_e and c_e >= 1 replicas puts w_e / c_e on each GPU
// holding a replica; Σ c_e = R slots; every GPU holds R/G slots. T* is the least max GPU
// load over every replication and placement (with or without nodes and groups: those only
// add constraints, so the bound holds for the hierarchical problem too).
//
// Bound: T* >= max(W / G, M*), W = Σ w_e, M* = min over count vectors of max_e w_e / c_e.
// Proof. Take any placement with counts c and max GPU load T. (a) The G GPU loads sum to
// W, so T >= W / G. (b) Each replica of e sits on some GPU, whose load is at least w_e / c_e,
// so T >= max_e w_e / c_e >= M*.
// M* is reached by the greedy that gives each of the R − E extra replicas to an expert with
// the largest w_e / c_e (`ep_replicate`). Proof. Let c* attain M* and n_e = max(1,
// ⌈w_e / M*⌉) (so c*_e >= n_e for every e). If the greedy ever raises some c_e past n_e, at
// that step w_e / c_e <= M* is the largest per-replica load, so every later value, and the
// final max, is <= M*. Otherwise its counts end with c_e <= n_e <= c*_e and the same sum R,
// so c = c* and its max is M*. Either way the greedy's max is M*.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/ep/problem.hpp"

namespace moepolicy {

namespace detail::ep {

/// A heap entry of the replication greedy: the load per replica and the expert.
struct replica_entry {
  double per_replica;
  std::uint32_t expert;
};

/// Orders the heap so its top is the largest load per replica, ties to the lower expert.
struct replica_less {
  bool operator()(const replica_entry& a, const replica_entry& b) const noexcept {
    return a.per_replica < b.per_replica || (a.per_replica == b.per_replica && a.expert > b.expert);
  }
};

}  // namespace detail::ep

/// Gives every expert of `loads` one replica and each of the `replicas − loads.size()`
/// extra ones to an expert with the largest load per replica (ties to the lower index);
/// writes the counts to `counts` and returns the largest load per replica (M* above).
///
/// Preconditions: `replicas >= loads.size() >= 1`, `counts.size() == heap.size() ==
/// loads.size()`; loads finite and >= 0. Complexity: O(E + (R − E) log E); no allocation.
inline double ep_replicate(std::span<const double> loads, std::size_t replicas, std::span<std::int32_t> counts,
                           std::span<detail::ep::replica_entry> heap) noexcept {
  const std::size_t n = loads.size();
  for (std::size_t e = 0; e < n; ++e) {
    counts[e] = 1;
    heap[e] = {loads[e], static_cast<std::uint32_t>(e)};
  }
  const std::size_t extra = replicas - n;
  // Only the `extra` heaviest experts can take an extra replica: for another to be the
  // largest at some step, all of them must already have been given one, which takes
  // `extra` steps. So the greedy runs on a heap of those alone (same result, ties included).
  const std::size_t k = std::min(extra, n);
  if (k == 0) {
    double mx = 0.0;
    for (std::size_t e = 0; e < n; ++e) mx = std::max(mx, loads[e]);
    return mx;
  }
  const auto by_load = [](const detail::ep::replica_entry& a, const detail::ep::replica_entry& b) {
    return detail::ep::replica_less{}(b, a);
  };
  if (k < n)
    std::nth_element(heap.begin(), heap.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     heap.begin() + static_cast<std::ptrdiff_t>(n), by_load);
  // The largest outside the candidates is the (k+1)-th by load, never replicated.
  double rest = 0.0;
  for (std::size_t e = k; e < n; ++e) rest = std::max(rest, heap[e].per_replica);
  const auto end = heap.begin() + static_cast<std::ptrdiff_t>(k);
  std::make_heap(heap.begin(), end, detail::ep::replica_less{});
  for (std::size_t x = 0; x < extra; ++x) {
    std::pop_heap(heap.begin(), end, detail::ep::replica_less{});
    auto& top = heap[k - 1];
    const std::int32_t c = ++counts[top.expert];
    top.per_replica = loads[top.expert] / c;
    std::push_heap(heap.begin(), end, detail::ep::replica_less{});
  }
  return std::max(heap.front().per_replica, rest);
}

/// The lower bound max(W / G, M*) on the max GPU load of any placement of one layer with
/// `replicas` slots on `gpus` GPUs (proof in the file comment).
///
/// Throws: `invalid_argument` naming `ep_lower_bound` when `gpus` is 0, `replicas` is
/// below the experts or not a multiple of `gpus`, or a load is negative or not finite.
/// Complexity: O(E + (R − E) log E).
[[nodiscard]] inline double ep_lower_bound(std::span<const double> loads, std::uint32_t replicas, std::uint32_t gpus) {
  constexpr std::string_view fn = "ep_lower_bound";
  detail::ep::check_cluster(fn, loads.size(), ep_cluster{.replicas = replicas, .gpus = gpus});
  double total = 0.0;
  for (std::size_t e = 0; e < loads.size(); ++e) {
    if (!(std::isfinite(loads[e]) && loads[e] >= 0.0)) {
      detail::throw_invalid(fn, "load of expert " + std::to_string(e) + " must be finite and >= 0", loads[e]);
    }
    total += loads[e];
  }
  std::vector<std::int32_t> counts(loads.size());
  std::vector<detail::ep::replica_entry> heap(loads.size());
  const double per_replica = ep_replicate(loads, replicas, counts, heap);
  return std::max(total / gpus, per_replica);
}

/// The bound for GPUs of different speeds s_g (a GPU's time is its load ÷ s_g):
/// max(W / Σ s, M* / max s). Proof. Take any placement with max time T. (a) GPU g carries at
/// most T · s_g, so W <= T · Σ s. (b) The largest replica, of load >= M* (the greedy's value
/// is the least largest replica over every count vector), sits on some GPU, whose time is
/// >= M* / s_g >= M* / max s. With equal speeds 1 it is the bound above.
///
/// Throws: as `ep_lower_bound`, and when `speeds` is not one finite value > 0 per GPU.
[[nodiscard]] inline double ep_lower_bound(std::span<const double> loads, std::uint32_t replicas, std::uint32_t gpus,
                                           std::span<const double> speeds) {
  constexpr std::string_view fn = "ep_lower_bound";
  if (speeds.empty()) return ep_lower_bound(loads, replicas, gpus);
  detail::ep::check_speeds(fn, speeds, gpus);
  (void)ep_lower_bound(loads, replicas, gpus);  // checks the rest
  double total = 0.0;
  for (double x : loads) total += x;
  std::vector<std::int32_t> counts(loads.size());
  std::vector<detail::ep::replica_entry> heap(loads.size());
  const double per_replica = ep_replicate(loads, replicas, counts, heap);
  double speed_sum = 0.0;
  double speed_max = 0.0;
  for (double s : speeds) speed_sum += s, speed_max = std::max(speed_max, s);
  return std::max(total / speed_sum, per_replica / speed_max);
}

}  // namespace moepolicy
