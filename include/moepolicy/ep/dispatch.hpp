// moepolicy/ep/dispatch.hpp — load-aware token dispatch among an expert's replicas, per
// batch: given one layer's placement (ep/problem.hpp) and a batch's tokens per logical
// expert, how many of each expert's tokens each of its replicas takes.
//
// Engines split an expert's tokens among its replicas without looking at the batch:
// SGLang's `--ep-dispatch-algorithm` is `static` (each rank sends to one fixed replica) or
// `random` (each token to a uniformly random replica), whose expectation is the even split
// `ep_uniform_dispatch` computes (replica k of c gets ⌊t/c⌋, plus one for the first t mod c).
//
// `ep_dispatcher` makes the split that minimises the max GPU time of the batch:
//   minimise T  s.t.  Σ_g x_{e,g} = t_e for every expert e,  Σ_e x_{e,g} <= T · s_g for every
//   GPU g,  x_{e,g} >= 0 integer, and x_{e,g} = 0 unless GPU g holds a replica of e,
// with s_g the GPU's speed (1 when all are alike). For a fixed T this is a flow problem —
// source → expert e (capacity t_e) → each GPU holding a replica of e (unbounded) → sink
// (capacity ⌊T · s_g⌋) — and T is feasible iff the max flow is Σ t_e; by the integrality
// theorem of max flow, integer capacities give an integer flow, so no integer split is
// lost. Feasibility is monotone in T, so a bisection finds the least T: over integers when
// the speeds are equal (exact), over reals otherwise (to a relative 1e-12, the returned max
// being the split's own), between the bound below (infeasible under it) and the even split's
// max (feasible), so a few steps suffice. The flow is Dinic's algorithm; an expert held by
// one GPU only has no choice, so its tokens are charged to that GPU beforehand and only the
// replicated experts enter the network. Within a GPU, an expert's tokens are split evenly
// among its replicas there (their GPU time is the same).
//
// Bound beside it: T* >= max(Σ t / Σ s, max over experts of t_e / (Σ of s_g over the GPUs
// holding e)) — every token runs somewhere, and expert e's tokens can at best spread over
// the GPUs holding it; `ep_dispatch_lower_bound` computes it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/ep/problem.hpp"

namespace moepolicy {

namespace detail::ep {

/// Checks one layer's slots and token counts for the dispatch functions.
inline void check_dispatch(std::string_view fn, std::span<const std::int32_t> slots,
                           std::span<const std::uint64_t> tokens, std::size_t gpus, std::span<std::uint64_t> out) {
  if (gpus == 0 || slots.empty() || slots.size() % gpus != 0) {
    throw_invalid(fn, "gpus must divide the " + std::to_string(slots.size()) + " slots", gpus);
  }
  if (out.size() != slots.size()) {
    throw_invalid(fn, "output must hold one count per slot (" + std::to_string(slots.size()) + ")", out.size());
  }
  for (std::size_t p = 0; p < slots.size(); ++p) {
    if (slots[p] < 0 || static_cast<std::size_t>(slots[p]) >= tokens.size()) {
      throw_invalid(fn,
                    "slot " + std::to_string(p) + " must name an expert in [0, " + std::to_string(tokens.size()) + ")",
                    slots[p]);
    }
  }
}

}  // namespace detail::ep

/// The even split engines make by default: replica k (by slot) of an expert with c replicas
/// takes ⌊t/c⌋ tokens, plus one when k < t mod c. Writes tokens per slot; returns the max
/// GPU token count.
///
/// Throws: `invalid_argument` naming `ep_uniform_dispatch` when `gpus` does not divide the
/// slots, `out` is not one per slot, a slot names no expert of `tokens`, or an expert with
/// tokens has no slot. Complexity: O(R + E); allocates O(E).
inline std::uint64_t ep_uniform_dispatch(std::span<const std::int32_t> slots, std::span<const std::uint64_t> tokens,
                                         std::size_t gpus, std::span<std::uint64_t> out) {
  constexpr std::string_view fn = "ep_uniform_dispatch";
  detail::ep::check_dispatch(fn, slots, tokens, gpus, out);
  std::vector<std::uint64_t> count(tokens.size(), 0), seen(tokens.size(), 0);
  for (auto e : slots) ++count[static_cast<std::size_t>(e)];
  for (std::size_t e = 0; e < tokens.size(); ++e) {
    if (count[e] == 0 && tokens[e] > 0) detail::throw_invalid(fn, "an expert with tokens has no slot: expert", e);
  }
  const std::size_t per = slots.size() / gpus;
  std::uint64_t mx = 0;
  for (std::size_t g = 0; g < gpus; ++g) {
    std::uint64_t load = 0;
    for (std::size_t p = g * per; p < (g + 1) * per; ++p) {
      const auto e = static_cast<std::size_t>(slots[p]);
      const std::uint64_t k = seen[e]++;
      out[p] = tokens[e] / count[e] + (k < tokens[e] % count[e] ? 1 : 0);
      load += out[p];
    }
    mx = std::max(mx, load);
  }
  return mx;
}

/// The bound of the file comment on the least max GPU time of any split.
///
/// Throws: as `ep_uniform_dispatch` (naming `ep_dispatch_lower_bound`, without `out`), and
/// when `speeds` is neither empty nor one finite positive value per GPU.
[[nodiscard]] inline double ep_dispatch_lower_bound(std::span<const std::int32_t> slots,
                                                    std::span<const std::uint64_t> tokens, std::size_t gpus,
                                                    std::span<const double> speeds = {}) {
  constexpr std::string_view fn = "ep_dispatch_lower_bound";
  std::vector<std::uint64_t> scratch(slots.size());
  detail::ep::check_dispatch(fn, slots, tokens, gpus, scratch);
  detail::ep::check_speeds(fn, speeds, gpus);
  const std::size_t per = slots.size() / gpus;
  auto speed = [&](std::size_t g) { return speeds.empty() ? 1.0 : speeds[g]; };
  double total = 0.0, speed_sum = 0.0;
  for (auto t : tokens) total += static_cast<double>(t);
  for (std::size_t g = 0; g < gpus; ++g) speed_sum += speed(g);
  double bound = total / speed_sum;
  std::vector<double> reach(tokens.size(), 0.0);
  std::vector<std::size_t> last(tokens.size(), gpus);
  for (std::size_t p = 0; p < slots.size(); ++p) {
    const auto e = static_cast<std::size_t>(slots[p]);
    if (last[e] != p / per) reach[e] += speed(p / per), last[e] = p / per;
  }
  for (std::size_t e = 0; e < tokens.size(); ++e) {
    if (tokens[e] == 0) continue;
    if (reach[e] == 0.0) detail::throw_invalid(fn, "an expert with tokens has no slot: expert", e);
    bound = std::max(bound, static_cast<double>(tokens[e]) / reach[e]);
  }
  return bound;
}

/// The optimal split of a batch's tokens among replicas (file comment), with its graph
/// preallocated: `dispatch` allocates nothing.
class ep_dispatcher {
 public:
  /// For layers of `experts` logical experts in `replicas` slots on `gpus` GPUs of
  /// `speeds` (empty: alike).
  ///
  /// Throws: `invalid_argument` naming `ep_dispatcher` when a dimension is 0 or above 2^20,
  /// `gpus` does not divide `replicas`, or a speed is not finite and > 0 (or not one per GPU).
  ep_dispatcher(std::size_t experts, std::size_t replicas, std::size_t gpus, std::span<const double> speeds = {})
      : experts_(experts), replicas_(replicas), gpus_(gpus) {
    constexpr std::string_view fn = "ep_dispatcher";
    if (experts == 0 || experts > ep_max_dimension) detail::throw_invalid(fn, "experts must be in [1, 2^20]", experts);
    if (replicas == 0 || replicas > ep_max_dimension)
      detail::throw_invalid(fn, "replicas must be in [1, 2^20]", replicas);
    if (gpus == 0 || replicas % gpus != 0) {
      detail::throw_invalid(fn, "gpus must divide the " + std::to_string(replicas) + " replicas", gpus);
    }
    detail::ep::check_speeds(fn, speeds, gpus);
    speed_.assign(gpus, 1.0);
    uniform_ = true;
    for (std::size_t g = 0; g < speeds.size(); ++g) {
      speed_[g] = speeds[g];
      uniform_ = uniform_ && speeds[g] == speeds[0];
    }
    const std::size_t nodes = experts + gpus + 2;
    const std::size_t edges = 2 * (experts + replicas + gpus);
    head_.resize(nodes);
    level_.resize(nodes);
    it_.resize(nodes);
    queue_.resize(nodes);
    to_.resize(edges);
    next_.resize(edges);
    cap_.resize(edges);
    pair_edge_.resize(replicas);
    pair_of_slot_.resize(replicas);
    pair_expert_.resize(replicas);
    pair_gpu_.resize(replicas);
    pair_slots_.resize(replicas);
    gpu_edge_.resize(gpus);
    stack_.resize(nodes);
    gpu_time_.resize(gpus);
    has_slot_.resize(experts);
    reach_.resize(experts);
    replicas_of_.resize(experts);
    seen_.resize(experts);
    gpus_of_.resize(experts);
    fixed_.resize(gpus);
    pair_flow_.resize(replicas);
  }

  /// Splits `tokens` (per logical expert) among the replicas of `slots` (one layer's
  /// `physical_to_logical`, GPU = slot ÷ (R / G)); writes tokens per slot to `out` and
  /// returns the max GPU time (tokens ÷ speed; tokens when the speeds are alike).
  ///
  /// Throws: `invalid_argument` naming `ep_dispatcher::dispatch` when the shapes differ from
  /// the dispatcher's, a slot names no expert, or an expert with tokens has no slot.
  /// Complexity: O(log(Σ t) · Dinic on E + G nodes, E + R + G edges); no allocation.
  double dispatch(std::span<const std::int32_t> slots, std::span<const std::uint64_t> tokens,
                  std::span<std::uint64_t> out) {
    constexpr std::string_view fn = "ep_dispatcher::dispatch";
    if (slots.size() != replicas_) {
      detail::throw_invalid(fn, "slots must number the dispatcher's " + std::to_string(replicas_), slots.size());
    }
    if (tokens.size() != experts_) {
      detail::throw_invalid(fn, "tokens must number the dispatcher's " + std::to_string(experts_) + " experts",
                            tokens.size());
    }
    detail::ep::check_dispatch(fn, slots, tokens, gpus_, out);
    build_pairs(slots);
    std::uint64_t total = 0;
    for (std::size_t e = 0; e < experts_; ++e) {
      if (tokens[e] > 0 && !has_slot(e)) detail::throw_invalid(fn, "an expert with tokens has no slot: expert", e);
      total += tokens[e];
    }
    if (total == 0) {
      std::fill(out.begin(), out.end(), std::uint64_t{0});
      return 0.0;
    }
    const auto n_total = static_cast<std::int64_t>(total);
    if (uniform_) {
      // Integer bisection on the max GPU token count c (time c / s), between the bound
      // (anything below it is infeasible) and the even split (feasible).
      const auto [bound, even] = bound_and_even(tokens);
      std::int64_t lo = static_cast<std::int64_t>(std::ceil(bound * (1.0 - 1e-12))) - 1;
      std::int64_t hi = static_cast<std::int64_t>(std::llround(even));
      lo = std::max<std::int64_t>(lo, 0);
      hi = std::min(hi, n_total);
      while (hi - lo > 1) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (feasible(tokens, [&](std::size_t) { return mid; }) == n_total) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
      feasible(tokens, [&](std::size_t) { return hi; });
    } else {
      // Between the bound and the even split's max time (feasible).
      const auto [bound, even] = bound_and_even(tokens);
      double lo = bound * (1.0 - 1e-9);
      double hi = even * (1.0 + 1e-12);
      auto caps = [&](double t) {
        return [this, t](std::size_t g) { return static_cast<std::int64_t>(std::floor(t * speed_[g] + 1e-9)); };
      };
      for (int i = 0; i < 200 && hi - lo > 1e-12 * hi; ++i) {
        const double mid = 0.5 * (lo + hi);
        if (feasible(tokens, caps(mid)) == n_total) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
      feasible(tokens, caps(hi));
    }
    return write(out);
  }

 private:
  bool has_slot(std::size_t e) const noexcept { return has_slot_[e] != 0; }

  /// The bound of the file comment and the even split's max GPU time, for the pairs built.
  std::pair<double, double> bound_and_even(std::span<const std::uint64_t> tokens) noexcept {
    std::fill(reach_.begin(), reach_.end(), 0.0);
    std::fill(replicas_of_.begin(), replicas_of_.end(), 0u);
    std::fill(gpu_time_.begin(), gpu_time_.end(), 0.0);
    double total = 0.0, speed_sum = 0.0;
    for (std::size_t g = 0; g < gpus_; ++g) speed_sum += speed_[g];
    for (std::size_t k = 0; k < npairs_; ++k) {
      const auto e = static_cast<std::size_t>(pair_expert_[k]);
      reach_[e] += speed_[static_cast<std::size_t>(pair_gpu_[k])];
      replicas_of_[e] += static_cast<std::uint32_t>(pair_slots_[k]);
    }
    double bound = 0.0;
    for (std::size_t e = 0; e < experts_; ++e) {
      total += static_cast<double>(tokens[e]);
      if (tokens[e] > 0) bound = std::max(bound, static_cast<double>(tokens[e]) / reach_[e]);
    }
    bound = std::max(bound, total / speed_sum);
    // The even split: replica k of c takes ⌊t/c⌋, plus one for the first t mod c (by slot).
    std::fill(seen_.begin(), seen_.end(), 0u);
    for (std::size_t p = 0; p < replicas_; ++p) {
      const auto e = static_cast<std::size_t>(pair_expert_[static_cast<std::size_t>(pair_of_slot_[p])]);
      const std::uint64_t c = replicas_of_[e];
      const std::uint64_t k = seen_[e]++;
      gpu_time_[p / (replicas_ / gpus_)] += static_cast<double>(tokens[e] / c + (k < tokens[e] % c ? 1u : 0u));
    }
    double even = 0.0;
    for (std::size_t g = 0; g < gpus_; ++g) even = std::max(even, gpu_time_[g] / speed_[g]);
    return {bound, even};
  }

  /// Distinct (expert, GPU) pairs of the layer, with the slots of each.
  void build_pairs(std::span<const std::int32_t> slots) noexcept {
    const std::size_t per = replicas_ / gpus_;
    npairs_ = 0;
    std::fill(has_slot_.begin(), has_slot_.end(), std::uint8_t{0});
    std::fill(gpus_of_.begin(), gpus_of_.end(), 0u);
    for (auto e : slots) has_slot_[static_cast<std::size_t>(e)] = 1;
    for (std::size_t g = 0; g < gpus_; ++g) {
      const std::size_t first = npairs_;
      for (std::size_t p = g * per; p < (g + 1) * per; ++p) {
        std::size_t k = first;
        while (k < npairs_ && pair_expert_[k] != slots[p]) ++k;
        if (k == npairs_) {
          pair_expert_[k] = slots[p];
          pair_gpu_[k] = static_cast<std::int32_t>(g);
          pair_slots_[k] = 0;
          ++gpus_of_[static_cast<std::size_t>(slots[p])];
          ++npairs_;
        }
        ++pair_slots_[k];
        pair_of_slot_[p] = static_cast<std::int32_t>(k);
      }
    }
  }

  std::size_t add_edge(std::size_t a, std::size_t b, std::int64_t c) noexcept {
    const std::size_t e = nedges_;
    to_[e] = static_cast<std::int32_t>(b), cap_[e] = c, next_[e] = head_[a], head_[a] = static_cast<std::int32_t>(e);
    to_[e + 1] = static_cast<std::int32_t>(a), cap_[e + 1] = 0, next_[e + 1] = head_[b];
    head_[b] = static_cast<std::int32_t>(e + 1);
    nedges_ += 2;
    return e;
  }

  /// Builds the flow network with GPU capacities `cap_of(g)` and returns the max flow.
  template <class Caps>
  std::int64_t feasible(std::span<const std::uint64_t> tokens, Caps cap_of) noexcept {
    const std::size_t src = experts_ + gpus_;
    const std::size_t snk = src + 1;
    std::fill(head_.begin(), head_.end(), -1);
    nedges_ = 0;
    const std::int64_t inf = std::numeric_limits<std::int64_t>::max() / 4;
    // An expert on one GPU only sends it every token: its load is fixed, and only the
    // experts on several GPUs enter the network (a few dozen at DeepSeek-V3 shape).
    std::int64_t fixed_flow = 0;
    for (std::size_t g = 0; g < gpus_; ++g) fixed_[g] = 0;
    for (std::size_t k = 0; k < npairs_; ++k) {
      const auto e = static_cast<std::size_t>(pair_expert_[k]);
      if (gpus_of_[e] == 1) fixed_[static_cast<std::size_t>(pair_gpu_[k])] += static_cast<std::int64_t>(tokens[e]);
    }
    for (std::size_t e = 0; e < experts_; ++e) {
      if (tokens[e] == 0) continue;
      if (gpus_of_[e] == 1) {
        fixed_flow += static_cast<std::int64_t>(tokens[e]);
      } else {
        add_edge(src, e, static_cast<std::int64_t>(tokens[e]));
      }
    }
    for (std::size_t k = 0; k < npairs_; ++k) {
      const auto e = static_cast<std::size_t>(pair_expert_[k]);
      if (gpus_of_[e] == 1 || tokens[e] == 0) continue;
      pair_edge_[k] = add_edge(e, experts_ + static_cast<std::size_t>(pair_gpu_[k]), inf);
    }
    for (std::size_t g = 0; g < gpus_; ++g) {
      const std::int64_t room = cap_of(g) - fixed_[g];
      if (room < 0) return -1;  // the fixed experts alone overflow this GPU
      gpu_edge_[g] = add_edge(experts_ + g, snk, room);
    }
    std::int64_t flow = 0;
    while (bfs(src, snk)) {
      for (std::size_t v = 0; v < head_.size(); ++v) it_[v] = head_[v];
      for (;;) {
        const std::int64_t f = augment(src, snk);
        if (f == 0) break;
        flow += f;
      }
    }
    // The flow on each pair: the fixed experts' tokens, or the reverse edge's capacity.
    for (std::size_t k = 0; k < npairs_; ++k) {
      const auto e = static_cast<std::size_t>(pair_expert_[k]);
      pair_flow_[k] = gpus_of_[e] == 1 ? static_cast<std::int64_t>(tokens[e])
                      : tokens[e] == 0 ? 0
                                       : cap_[pair_edge_[k] ^ 1u];
    }
    return flow + fixed_flow;
  }

  bool bfs(std::size_t src, std::size_t snk) noexcept {
    std::fill(level_.begin(), level_.end(), -1);
    std::size_t qh = 0, qt = 0;
    queue_[qt++] = static_cast<std::int32_t>(src);
    level_[src] = 0;
    while (qh < qt) {
      const auto v = static_cast<std::size_t>(queue_[qh++]);
      for (std::int32_t e = head_[v]; e >= 0; e = next_[static_cast<std::size_t>(e)]) {
        const auto u = static_cast<std::size_t>(to_[static_cast<std::size_t>(e)]);
        if (cap_[static_cast<std::size_t>(e)] > 0 && level_[u] < 0) {
          level_[u] = level_[v] + 1;
          queue_[qt++] = static_cast<std::int32_t>(u);
        }
      }
    }
    return level_[snk] >= 0;
  }

  /// One blocking-flow path by an iterative depth-first search (depth <= 3 here).
  std::int64_t augment(std::size_t src, std::size_t snk) noexcept {
    std::size_t depth = 0;
    std::size_t v = src;
    for (;;) {
      if (v == snk) {
        std::int64_t f = std::numeric_limits<std::int64_t>::max();
        for (std::size_t d = 0; d < depth; ++d) f = std::min(f, cap_[static_cast<std::size_t>(stack_[d])]);
        for (std::size_t d = 0; d < depth; ++d) {
          cap_[static_cast<std::size_t>(stack_[d])] -= f;
          cap_[static_cast<std::size_t>(stack_[d]) ^ 1u] += f;
        }
        return f;
      }
      bool advanced = false;
      for (std::int32_t& e = it_[v]; e >= 0; e = next_[static_cast<std::size_t>(e)]) {
        const auto u = static_cast<std::size_t>(to_[static_cast<std::size_t>(e)]);
        if (cap_[static_cast<std::size_t>(e)] > 0 && level_[u] == level_[v] + 1) {
          stack_[depth++] = e;
          v = u;
          advanced = true;
          break;
        }
      }
      if (advanced) continue;
      if (depth == 0) return 0;
      // Dead end: retreat and skip the edge that led here.
      level_[v] = -1;
      const auto e = static_cast<std::size_t>(stack_[--depth]);
      v = static_cast<std::size_t>(to_[e ^ 1u]);
      it_[v] = next_[static_cast<std::size_t>(it_[v])];
    }
  }

  /// Tokens per slot from the last flow; returns the max GPU time.
  double write(std::span<std::uint64_t> out) noexcept {
    std::fill(gpu_time_.begin(), gpu_time_.end(), 0.0);
    // Flow on a pair edge = its reverse edge's capacity.
    for (std::size_t p = 0; p < replicas_; ++p) {
      const auto k = static_cast<std::size_t>(pair_of_slot_[p]);
      const auto f = static_cast<std::uint64_t>(pair_flow_[k]);
      const auto c = static_cast<std::uint64_t>(pair_slots_[k]);
      // The j-th slot of the pair (in slot order) takes ⌊f/c⌋, plus one for the first f mod c.
      std::uint64_t j = 0;
      for (std::size_t q = (p / (replicas_ / gpus_)) * (replicas_ / gpus_); q < p; ++q) {
        j += pair_of_slot_[q] == pair_of_slot_[p] ? 1u : 0u;
      }
      out[p] = f / c + (j < f % c ? 1u : 0u);
      gpu_time_[p / (replicas_ / gpus_)] += static_cast<double>(out[p]);
    }
    double mx = 0.0;
    for (std::size_t g = 0; g < gpus_; ++g) mx = std::max(mx, gpu_time_[g] / speed_[g]);
    return mx;
  }

  std::size_t experts_, replicas_, gpus_;
  bool uniform_ = true;
  std::vector<double> speed_, gpu_time_;
  std::vector<std::int32_t> head_, level_, it_, queue_, to_, next_, stack_, pair_of_slot_, pair_expert_, pair_gpu_,
      pair_slots_;
  std::vector<std::int64_t> cap_;
  std::vector<std::size_t> pair_edge_, gpu_edge_;
  std::vector<std::uint8_t> has_slot_;
  std::vector<double> reach_;
  std::vector<std::uint32_t> replicas_of_, seen_, gpus_of_;
  std::vector<std::int64_t> fixed_, pair_flow_;
  std::size_t npairs_ = 0;
  std::size_t nedges_ = 0;
};

}  // namespace moepolicy
