// moepolicy/balance/detail/migration_planner_reference.hpp — the first implementation of
// TriMoE's migration planner (TriMoE §4.3, "Expert Migration Decision"), kept unchanged as
// the reference that tests and bench/shapes_bench.cpp compare balance/migration_planner.hpp
// against: it prices every expert for the predicted step, again for the NDP weights of
// rebalancing, and a whole row again for every candidate task. See
// balance/migration_planner.hpp for the method.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/balance/ndp_rebalance.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/problem.hpp"
#include "moepolicy/stats/analysis.hpp"

#include "moepolicy/balance/migration_planner.hpp"

namespace moepolicy::reference {

/// Plans one layer's background migrations on a GPU + CPU + DIMM-NDP system.
template <DeviceCost Gpu, DeviceCost Cpu, DeviceCost Dimm>
class migration_planner {
 public:
  using system_type = gpu_cpu_ndp_system<Gpu, Cpu, Dimm>;

  /// Throws: `invalid_argument` when `num_experts` is not in [1, 65536], or the
  /// rebalancing or scheduling configuration is invalid (see `ndp_rebalancer`,
  /// `local_search_scheduler`).
  migration_planner(system_type system, std::size_t num_experts, migration_planner_config config = {})
      : system_(std::move(system)),
        config_(config),
        rebalancer_(system_.num_dimms(), num_experts, config.rebalancing),
        scheduler_(config.scheduling),
        problem_(system_.num_dimms(), num_experts),
        schedule_(num_experts, system_.num_dimms()),
        experts_(num_experts) {
    // At most a prefetch and a relayout per expert, plus the rebalance moves.
    const std::size_t most = 2 * num_experts + config.rebalancing.max_moves;
    tasks_.reserve(most);
    ranked_.reserve(most);
    order_.reserve(most);
    keys_.reserve(most);
    ndp_weight_.assign(num_experts, 0.0);
    index_.assign(num_experts, none);
    projected_.reserve(system_.num_dimms());
    loads_.reset(system_.num_dimms());
    scheduler_.reserve(num_experts, system_.num_dimms());
  }

  [[nodiscard]] const system_type& system() const noexcept { return system_; }
  [[nodiscard]] const migration_planner_config& config() const noexcept { return config_; }
  /// The predicted step of the last plan and its schedule.
  [[nodiscard]] const makespan_problem& predicted_step() const noexcept { return problem_; }
  [[nodiscard]] const makespan_schedule& predicted_schedule() const noexcept { return schedule_; }

  /// Plans `layer`'s migrations.
  ///
  /// `predicted` and `classes`: the predictor's loads and classes for the layer's next
  /// step; `layouts` and `resident`: where its experts are now; `window`: the overlap
  /// window in seconds; `gpu_free_bytes`: HBM free for prefetched experts.
  /// Throws: `invalid_argument` when a span has not one entry per expert, a predicted load
  /// is negative, not finite or >= 4·10⁹, a localized home is >= D, or the window is
  /// negative or not finite.
  /// Returns: every proposed task, in rank order, with `taken` set on those planned
  /// (valid until the next call).
  /// Complexity: one schedule of the predicted step, O(E log E) and the rebalancing; no
  /// allocation after the first call.
  std::span<const migration_task> plan(layer_id layer, std::span<const double> predicted,
                                       std::span<const hotness> classes, std::span<const expert_layout> layouts,
                                       std::span<const std::uint8_t> resident, seconds window, bytes gpu_free_bytes) {
    constexpr std::string_view fn = "migration_planner::plan";
    const auto need = [&](const char* what, std::size_t got) {
      if (got != experts_) {
        moepolicy::detail::throw_invalid(
            fn, std::string(what) + " must have one entry per expert (" + std::to_string(experts_) + ")", got);
      }
    };
    need("predicted", predicted.size());
    need("classes", classes.size());
    need("layouts", layouts.size());
    need("resident", resident.size());
    if (!(window >= 0.0) || !std::isfinite(window))
      moepolicy::detail::throw_invalid(fn, "window must be finite and >= 0", window);
    for (std::size_t e = 0; e < experts_; ++e) {
      if (!(predicted[e] >= 0.0) || !(predicted[e] < 4.0e9)) {
        moepolicy::detail::throw_invalid(fn, "predicted loads must be finite, >= 0 and < 4e9", predicted[e]);
      }
      if (layouts[e].is_localized() && layouts[e].home >= system_.num_dimms()) {
        moepolicy::detail::throw_invalid(
            fn, "a localized home must be < the DIMMs " + std::to_string(system_.num_dimms()), layouts[e].home);
      }
    }
    layer_ = layer;
    tasks_.clear();
    const std::size_t D = system_.num_dimms();

    // The predicted step and its schedule.
    problem_.clear();
    for (std::size_t e = 0; e < experts_; ++e) {
      index_[e] = none;
      if (!(predicted[e] > 0.0)) continue;
      index_[e] = problem_.size();
      problem_.add(expected_row(e, predicted[e], layouts[e], resident[e] != 0));
    }
    scheduler_.solve(problem_, schedule_);
    loads_.reset(D);
    loads_.rebuild(problem_, schedule_.assignment, problem_.size());
    base_m_ = loads_.makespan();
    base_q_ = loads_.square_sum_after({});

    // Rebalancing on today's layout, in predicted NDP seconds.
    for (std::size_t e = 0; e < experts_; ++e) {
      ndp_weight_[e] =
          priced(predicted[e], [&](std::uint32_t t) { return system_.ndp_seconds(key(e), config_.bits, t); });
    }
    if (config_.rebalance) {
      std::uint32_t chain = 0;
      for (const auto& m : rebalancer_.plan(ndp_weight_, classes, layouts)) {
        migration_task t;
        t.kind = migration_kind::rebalance;
        t.expert = m.expert;
        t.from = expert_layout::localized(m.from);
        t.to = expert_layout::localized(m.to);
        if (!evaluate(t, predicted[m.expert], resident[m.expert] != 0, t.to)) break;  // no benefit ends the chain
        t.size = system_.weight_bytes(key(m.expert), config_.bits);
        t.transfer_seconds = system_.dimm().transfer_seconds(t.size);
        t.chain = ++chain;
        tasks_.push_back(t);
      }
    }
    if (config_.rebalance) {
      const auto after = rebalancer_.dimm_loads();
      projected_.assign(after.begin(), after.end());
    } else {
      projected_.assign(D, 0.0);
      for (std::size_t e = 0; e < experts_; ++e) {
        if (classes[e] == hotness::cold && layouts[e].is_localized()) projected_[layouts[e].home] += ndp_weight_[e];
      }
    }

    for (std::size_t e = 0; e < experts_; ++e) {
      const double x = predicted[e];
      const expert_layout here = layouts[e];
      const bool res = resident[e] != 0;
      migration_task t;
      t.expert = static_cast<expert_id>(e);
      t.from = t.to = here;
      t.size = system_.weight_bytes(key(e), config_.bits);
      if (config_.prefetch && classes[e] == hotness::hot && !res) {
        t.kind = migration_kind::prefetch;
        t.transfer_seconds = system_.gpu().transfer_seconds(t.size);
        if (evaluate(t, x, true, here)) tasks_.push_back(t);
      }
      if (!config_.relayout) continue;
      t.transfer_seconds = system_.dimm().transfer_seconds(relayout_port_bytes(t.size));
      const bool by_class = config_.relayout_when == relayout_rule::class_change;
      const bool to_striped = here.is_localized() && (by_class ? classes[e] != hotness::cold : x > 0.0);
      const bool to_localized =
          here.is_striped() && (by_class ? classes[e] == hotness::cold : classes[e] != hotness::hot);
      if (to_striped) {
        t.kind = migration_kind::relayout_to_striped;
        t.to = expert_layout::striped();
        if (evaluate(t, x, res, t.to)) tasks_.push_back(t);
      } else if (to_localized) {
        std::size_t target = 0;
        for (std::size_t d = 1; d < D; ++d) {
          if (projected_[d] < projected_[target]) target = d;
        }
        t.kind = migration_kind::relayout_to_localized;
        t.to = expert_layout::localized(static_cast<std::uint16_t>(target));
        if (evaluate(t, x, res, t.to)) {
          tasks_.push_back(t);
          projected_[target] += ndp_weight_[e];
        }
      }
    }

    rank();
    take(window, gpu_free_bytes);
    return ranked_;
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  [[nodiscard]] expert_key key(std::size_t e) const noexcept { return {layer_, static_cast<expert_id>(e)}; }

  /// Bytes the busiest DIMM-Link port carries in a relayout of `w` bytes.
  [[nodiscard]] bytes relayout_port_bytes(bytes w) const noexcept {
    if (config_.relayout_time == relayout_estimate::whole_expert) return w;
    const auto D = static_cast<bytes>(system_.num_dimms());
    return D <= 1 ? w : (D - 1) * ((w + D - 1) / D);
  }

  template <class F>
  [[nodiscard]] static seconds priced(double x, F&& f) {
    if (!(x > 0.0)) return 0.0;
    MOEPOLICY_ASSERT(x < 4.0e9);
    const double lo = std::floor(x);
    const auto l = static_cast<std::uint32_t>(lo);
    const seconds c_lo = l == 0 ? 0.0 : f(l);
    if (x == lo) return c_lo;
    const seconds c_hi = f(l + 1);
    return c_lo + (x - lo) * (c_hi - c_lo);
  }

  /// The prices of expert `e` at predicted load `x` with `layout` and residency `res`.
  [[nodiscard]] expert_costs expected_row(std::size_t e, double x, expert_layout layout, bool res) const {
    const expert_key k = key(e);
    const bitwidth b = config_.bits;
    expert_costs c;
    c.key = k;
    c.load = static_cast<std::uint32_t>(std::ceil(x));
    c.layout = layout;
    c.gpu_resident = res;
    c.dram = std::min(1.0, x) * system_.dram_seconds(k, b, layout);
    c.exec[0] = res ? priced(x, [&](std::uint32_t n) { return system_.gpu_hit_seconds(k, b, n); })
                    : priced(x, [&](std::uint32_t n) { return system_.gpu_miss_seconds(k, b, n, layout); });
    c.exec[1] = system_.config().use_cpu
                    ? priced(x, [&](std::uint32_t n) { return system_.cpu_seconds(k, b, n, layout); })
                    : not_allowed;
    c.exec[2] = (system_.config().use_ndp && layout.is_localized())
                    ? priced(x, [&](std::uint32_t n) { return system_.ndp_seconds(k, b, n); })
                    : not_allowed;
    return c;
  }

  /// Fills `t.benefit` and `t.balance_gain` for expert `t.expert` moving to `layout` with
  /// residency `res`; false when the task improves neither.
  bool evaluate(migration_task& t, double x, bool res, expert_layout layout) const {
    const std::size_t i = index_[t.expert];
    if (i == none) return false;
    const expert_costs& old = problem_[i];
    const expert_costs now = expected_row(t.expert, x, layout, res);
    bool found = false;
    seconds best_m = 0.0;
    double best_q = 0.0;
    for (std::size_t k = 0; k < num_device_options; ++k) {
      const auto o = static_cast<device_option>(k);
      if (!now.allows(o)) continue;
      moepolicy::detail::device_loads::delta d;
      d.add(old, schedule_.assignment[i], -1.0);
      d.add(now, o, 1.0);
      const seconds m = loads_.makespan_after(d);
      const double q = loads_.square_sum_after(d);
      if (!found || m < best_m || (m == best_m && q < best_q)) {
        found = true;
        best_m = m;
        best_q = q;
      }
    }
    t.benefit = base_m_ - best_m;
    t.balance_gain = base_q_ - best_q;
    const double tol = moepolicy::detail::default_tolerance * base_m_;
    if (t.benefit > tol) return true;
    if (t.benefit < -tol) return false;
    t.benefit = std::max(t.benefit, 0.0);
    return t.balance_gain > moepolicy::detail::default_tolerance * base_q_;
  }

  void rank() {
    // Chain keys: the running minimum of benefits along the rebalance sequence.
    keys_.resize(tasks_.size());
    seconds run = not_allowed;
    for (std::size_t i = 0; i < tasks_.size(); ++i) {
      if (tasks_[i].kind == migration_kind::rebalance) {
        run = std::min(run, tasks_[i].benefit);
        keys_[i] = run;
      } else {
        keys_[i] = tasks_[i].benefit;
      }
    }
    order_.resize(tasks_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = tasks_[a];
      const auto& y = tasks_[b];
      if (keys_[a] != keys_[b]) return keys_[a] > keys_[b];
      if (x.kind == migration_kind::rebalance && y.kind == migration_kind::rebalance) return x.chain < y.chain;
      if (x.balance_gain != y.balance_gain) return x.balance_gain > y.balance_gain;
      if (x.transfer_seconds != y.transfer_seconds) return x.transfer_seconds < y.transfer_seconds;
      if (x.kind != y.kind) return x.kind < y.kind;
      if (x.chain != y.chain) return x.chain < y.chain;
      return x.expert < y.expert;
    });
    ranked_.resize(tasks_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) ranked_[i] = tasks_[order_[i]];
  }

  void take(seconds window, bytes gpu_free) {
    seconds pcie = 0.0, link = 0.0;
    bytes gpu_used = 0;
    std::uint32_t chain_done = 0;
    for (auto& t : ranked_) {
      const bool on_pcie = t.kind == migration_kind::prefetch;
      seconds& used = (config_.separate_links && on_pcie) ? pcie : link;
      const bool fits = used + t.transfer_seconds <= window && (!on_pcie || gpu_used + t.size <= gpu_free) &&
                        (t.kind != migration_kind::rebalance || t.chain == chain_done + 1);
      if (!fits) {
        if (config_.stop_at_first_misfit) break;
        continue;
      }
      t.taken = true;
      used += t.transfer_seconds;
      if (on_pcie) gpu_used += t.size;
      if (t.kind == migration_kind::rebalance) chain_done = t.chain;
    }
  }

  system_type system_;
  migration_planner_config config_;
  ndp_rebalancer rebalancer_;
  local_search_scheduler scheduler_;
  makespan_problem problem_;
  makespan_schedule schedule_;
  moepolicy::detail::device_loads loads_;
  std::size_t experts_;
  layer_id layer_ = 0;
  seconds base_m_ = 0.0;
  double base_q_ = 0.0;
  std::vector<migration_task> tasks_, ranked_;
  std::vector<std::size_t> order_, index_;
  std::vector<seconds> keys_;
  std::vector<double> ndp_weight_, projected_;
};

}  // namespace moepolicy::reference
