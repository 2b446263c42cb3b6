// moepolicy/sched/exact.hpp — the optimal makespan of a small step, by branch and bound
// over expert → option assignments (the problem of TriMoE, "TriMoE: Augmenting GPU with
// AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE Inference via Offloading", §4.2,
// Eq. 5–7). Models `MakespanScheduler` (sched/concepts.hpp).
//
// Search. Experts are branched on largest first (by bound A of sched/lower_bound.hpp,
// the cost of the expert at its best option), depth first; at each node the expert's
// allowed options are tried in order of the partial makespan they lead to. A node is
// pruned when its bound is not below the incumbent by more than the relative tolerance.
// The bound of a node extends sched/lower_bound.hpp to a partial assignment: with the
// partial totals T_dev and suffix sums over the unassigned experts of the per-expert
// minima, every bound B(λ) becomes Σ_dev λ_dev T_dev + Σ_{unassigned} min_o ⟨λ, c_i(o)⟩
// (the same proof: the assigned experts' contributions are fixed, the others' are at
// least their minima), plus the partial makespan itself and bound A of the unassigned.
// The incumbent starts from list scheduling (below) or a schedule the caller passes.
//
// List scheduling (`detail::list_schedule`): experts largest first, each to the option of
// smallest resulting partial makespan, then of smallest Σ T_dev², then of smallest exec.
// It is the exact solver's first incumbent and a start of the improved solver.
//
// Limits. More than `max_experts` experts: status `too_large`, no schedule. The search
// stops after `node_limit` nodes with status `node_limit` and the best schedule found.
// Otherwise the status is `optimal`: no assignment is shorter by more than the tolerance.
// Each node costs O(D); memory is O(experts · D), reserved on first use. Measured on real
// steps (tests/sched/real_traces.cpp): Mixtral-8x7B (8 experts) at most ~300 nodes, a few
// µs; Granite (32 experts) up to 10^4–10^5 nodes at B <= 64, and 10^7 on some B = 128 steps.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <numeric>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/sched/concepts.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"

namespace moepolicy {

namespace detail {

/// Sorts `order` (resized to p.size()) by decreasing bound A, lowest index among equals.
inline void largest_first(const makespan_problem& p, std::vector<std::size_t>& order, std::vector<double>& key) {
  const std::size_t n = p.size();
  order.resize(n);
  key.resize(n);
  for (std::size_t i = 0; i < n; ++i) key[i] = terms_of(p[i], p.num_dimms()).single;
  std::iota(order.begin(), order.end(), std::size_t{0});
  // The index tie-break gives a stable order without stable_sort's buffer.
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return key[a] > key[b] || (key[a] == key[b] && a < b); });
}

/// List scheduling in `order` into `assignment`; `loads` ends with its totals (refreshed).
inline void list_schedule(const makespan_problem& p, std::span<const std::size_t> order,
                          std::span<device_option> assignment, device_loads& loads) noexcept {
  loads.reset(p.num_dimms());
  for (std::size_t i : order) {
    const expert_costs& e = p[i];
    bool found = false;
    device_option best{};
    seconds best_m = 0.0, best_q = 0.0, best_x = 0.0;
    for (std::size_t k = 0; k < num_device_options; ++k) {
      const auto o = static_cast<device_option>(k);
      if (!e.allows(o)) continue;
      device_loads::delta c;
      c.add(e, o, 1.0);
      const seconds m = loads.makespan_after(c);
      const double q = loads.square_sum_after(c);
      const seconds x = e.exec[k];
      if (!found || m < best_m || (m == best_m && (q < best_q || (q == best_q && x < best_x)))) {
        found = true;
        best = o;
        best_m = m;
        best_q = q;
        best_x = x;
      }
    }
    assignment[i] = best;
    loads.apply(e, best, 1.0);
    loads.refresh();
  }
}

}  // namespace detail

/// Configuration of `exact_makespan_scheduler`.
struct exact_makespan_config {
  /// Largest problem searched, in experts, at most 64; larger ones get `too_large`.
  std::size_t max_experts = 32;
  /// Search nodes at most before giving up with `node_limit`.
  std::size_t node_limit = 10'000'000;
  /// Relative difference below which two makespans are equal.
  double tolerance = detail::default_tolerance;
};

/// Branch and bound for the optimal schedule of a small step.
class exact_makespan_scheduler {
 public:
  /// Throws: `invalid_argument` when `max_experts` > 64, `node_limit` is 0, or
  /// `tolerance` is negative or not finite.
  explicit exact_makespan_scheduler(exact_makespan_config config = {}) : config_(config) {
    constexpr const char* fn = "exact_makespan_scheduler";
    if (config_.max_experts > 64) detail::throw_invalid(fn, "max_experts must be <= 64", config_.max_experts);
    if (config_.node_limit == 0) detail::throw_invalid(fn, "node_limit must be >= 1", config_.node_limit);
    if (!(config_.tolerance >= 0.0) || !std::isfinite(config_.tolerance)) {
      detail::throw_invalid(fn, "tolerance must be finite and >= 0", config_.tolerance);
    }
  }

  [[nodiscard]] const exact_makespan_config& config() const noexcept { return config_; }

  /// Reserves the search state for steps of up to `max_experts` experts (at most
  /// `config().max_experts`; larger steps are refused without search) on `num_dimms`
  /// DIMMs, so that later solves of such steps allocate nothing but `out`'s vectors.
  /// Complexity: O(experts · D) memory.
  void reserve(std::size_t max_experts, std::size_t num_dimms) {
    const std::size_t n = std::min(max_experts, config_.max_experts);
    order_.reserve(n);
    key_.reserve(n);
    suf_.reserve(n + 1);
    suf_dimm_.reserve((n + 1) * num_dimms);
    suf_triple_.reserve((n + 1) * num_dimms);
    best_.reserve(n);
    cur_.reserve(n);
    loads_.local.reserve(num_dimms);
  }

  /// The optimal schedule of `p` into `out`, starting from list scheduling.
  ///
  /// Returns: `out.status` `optimal`, `node_limit` or `too_large`; `out.iterations` the
  /// nodes searched.
  /// Complexity: exponential in the experts in the worst case, bounded by `node_limit`
  /// nodes of O(D) each.
  void solve(const makespan_problem& p, makespan_schedule& out) { solve_from(p, {}, out); }

  /// As `solve`, with `start` as the first incumbent when it is a valid assignment of `p`
  /// (list scheduling otherwise).
  void solve_from(const makespan_problem& p, std::span<const device_option> start, makespan_schedule& out) {
    const std::size_t n = p.size();
    out.iterations = 0;
    if (n > config_.max_experts) {
      out.status = solve_status::too_large;
      out.assignment.clear();
      out.dimm_seconds.clear();
      out.makespan = out.gpu_seconds = out.cpu_seconds = not_allowed;
      return;
    }
    prepare(p);
    best_.resize(n);
    if (is_valid_assignment(p, start)) {
      std::copy(start.begin(), start.end(), best_.begin());
      loads_.reset(p.num_dimms());
      loads_.rebuild(p, best_, n);
    } else {
      detail::list_schedule(p, order_, best_, loads_);
    }
    best_m_ = loads_.makespan();

    nodes_ = 0;
    aborted_ = false;
    if (detail::less_than(root_bound_, best_m_, config_.tolerance)) {
      cur_.resize(n);
      loads_.reset(p.num_dimms());
      search(p, 0);
    }
    out.status = aborted_ ? solve_status::node_limit : solve_status::optimal;
    out.iterations = nodes_;
    out.assignment.assign(best_.begin(), best_.end());
    loads_.reset(p.num_dimms());
    loads_.rebuild(p, out.assignment, n);
    detail::write_totals(loads_, out);
  }

 private:
  /// Search order, per-expert bound terms and their suffix sums.
  void prepare(const makespan_problem& p) {
    const std::size_t n = p.size(), D = p.num_dimms();
    detail::largest_first(p, order_, key_);
    suf_.assign(n + 1, suffix{});
    suf_dimm_.assign((n + 1) * D, 0.0);
    suf_triple_.assign((n + 1) * D, 0.0);
    for (std::size_t k = n; k-- > 0;) {
      const expert_costs& e = p[order_[k]];
      const auto t = detail::terms_of(e, D);
      suffix s = suf_[k + 1];
      s.single = std::max(s.single, t.single);
      s.all += t.all;
      s.serial += t.serial;
      if (e.layout.is_striped()) {
        s.striped_dimm += t.dimm;
        s.striped_triple += t.triple;
      } else {
        s.local_serial += t.serial;
      }
      suf_[k] = s;
      std::copy_n(suf_dimm_.begin() + static_cast<std::ptrdiff_t>((k + 1) * D), D,
                  suf_dimm_.begin() + static_cast<std::ptrdiff_t>(k * D));
      std::copy_n(suf_triple_.begin() + static_cast<std::ptrdiff_t>((k + 1) * D), D,
                  suf_triple_.begin() + static_cast<std::ptrdiff_t>(k * D));
      if (e.layout.is_localized()) {
        suf_dimm_[k * D + e.layout.home] += t.dimm;
        suf_triple_[k * D + e.layout.home] += t.triple - t.serial;
      }
    }
    loads_.reset(D);
    root_bound_ = node_bound(0);
  }


  /// The bound of a node whose first k experts (in search order) are assigned in `loads_`.
  [[nodiscard]] seconds node_bound(std::size_t k) const noexcept {
    const std::size_t D = loads_.local.size();
    const suffix& s = suf_[k];
    const double* b3 = suf_dimm_.data() + k * D;
    const double* b4 = suf_triple_.data() + k * D;
    const seconds g = loads_.gpu, u = loads_.cpu, st = loads_.stripe;
    seconds sum_local = 0.0, max_local = 0.0, bound = s.single;
    for (std::size_t d = 0; d < D; ++d) {
      const seconds l = loads_.local[d];
      sum_local += l;
      max_local = std::max(max_local, l);
      bound = std::max(bound, st + l + s.striped_dimm + b3[d]);
      bound = std::max(bound, (g + u + st + l + s.striped_triple + s.local_serial + b4[d]) / 3.0);
    }
    bound = std::max({bound, g, u, st + max_local});
    bound = std::max(bound, (g + u + static_cast<double>(D) * st + sum_local + s.all) / static_cast<double>(2 + D));
    bound = std::max(bound, (g + u + s.serial) / 2.0);
    return bound;
  }

  void search(const makespan_problem& p, std::size_t k) {
    if (aborted_) return;
    if (++nodes_ > config_.node_limit) {
      aborted_ = true;
      return;
    }
    const std::size_t n = p.size();
    if (k == n) {
      const seconds m = partial_makespan();
      if (m < best_m_) {
        best_m_ = m;
        std::copy(cur_.begin(), cur_.end(), best_.begin());
      }
      return;
    }
    const std::size_t i = order_[k];
    const expert_costs& e = p[i];
    // Children in order of the partial makespan they lead to.
    device_option opts[num_device_options];
    seconds ms[num_device_options];
    std::size_t count = 0;
    for (std::size_t o = 0; o < num_device_options; ++o) {
      const auto opt = static_cast<device_option>(o);
      if (!e.allows(opt)) continue;
      loads_.apply(e, opt, 1.0);
      const seconds m = partial_makespan();
      loads_.apply(e, opt, -1.0);
      std::size_t at = count++;
      while (at > 0 && ms[at - 1] > m) {
        ms[at] = ms[at - 1];
        opts[at] = opts[at - 1];
        --at;
      }
      ms[at] = m;
      opts[at] = opt;
    }
    for (std::size_t c = 0; c < count; ++c) {
      if (!detail::less_than(ms[c], best_m_, config_.tolerance)) break;
      loads_.apply(e, opts[c], 1.0);
      cur_[i] = opts[c];
      if (detail::less_than(node_bound(k + 1), best_m_, config_.tolerance)) search(p, k + 1);
      loads_.apply(e, opts[c], -1.0);
      if (aborted_) return;
    }
  }

  [[nodiscard]] seconds partial_makespan() const noexcept {
    seconds m = std::max(loads_.gpu, loads_.cpu);
    for (seconds l : loads_.local) m = std::max(m, loads_.stripe + l);
    return m;
  }

  struct suffix {
    seconds single = 0.0, all = 0.0, serial = 0.0, striped_dimm = 0.0, striped_triple = 0.0, local_serial = 0.0;
  };

  exact_makespan_config config_;
  detail::device_loads loads_;
  std::vector<std::size_t> order_;
  std::vector<double> key_;
  std::vector<suffix> suf_;
  std::vector<double> suf_dimm_, suf_triple_;
  std::vector<device_option> best_, cur_;
  seconds best_m_ = 0.0, root_bound_ = 0.0;
  std::size_t nodes_ = 0;
  bool aborted_ = false;
};

static_assert(MakespanScheduler<exact_makespan_scheduler>);

}  // namespace moepolicy
