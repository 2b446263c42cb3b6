// moepolicy/sched/bottleneck_refinement.hpp — TriMoE's scheduler, as published: greedy
// cost-model-based initial assignment, then bottleneck-aware refinement (TriMoE
// "TriMoE: Augmenting GPU with AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE
// Inference via Offloading", §4.2). Models `MakespanScheduler` (sched/concepts.hpp).
//
// Initial assignment. §4.2: "estimate the execution cost of any expert E_i on all possible
// paths and select the most suitable one". Greedy here means per expert and blind to the
// others: each expert goes to the option of smallest execution time exec (Eq. 1–4), the
// device totals are formed only afterwards (Eq. 5–7). Among equal times the order
// gpu, cpu, ndp decides.
//
// Refinement, one move per iteration:
//   1. the bottleneck device is the one with the largest total (GPU, CPU or a DIMM; among
//      equals the first of GPU, CPU, DIMM 0, 1, ...);
//   2. the candidate is the expert *executing* on it with the largest execution time there
//      (lowest index among equals). A DIMM's total also holds contention from GPU/CPU reads
//      (Eq. 6), but those experts execute elsewhere; when no expert executes on the
//      bottleneck (a DIMM busy with contention only), refinement stops;
//   3. the candidate is priced on each other option it may take — for a GPU or CPU expert
//      the other serial device and, only if localized, the NDP unit of its home DIMM; for
//      an NDP expert the GPU and the CPU — and the move of smallest new makespan (Eq. 7)
//      wins; equal makespans go to the move of smallest time increase on the receiving
//      device (its exec there); then gpu before cpu before ndp;
//   4. refinement stops when the winning move does not lower the makespan, or after
//      `max_iterations` moves.
// Makespans within a relative 1e-12 (`tolerance`) are equal, so rounding never decides a
// tie or counts as an improvement. Totals are recomputed from the assignment after each
// move (O(experts + DIMMs)); the candidate's moves are priced in O(1).
//
// The paper gives no iteration cap. The default, 64, is far above what real steps need:
// on 5,256 Mixtral-8x7B and Granite decode steps batched to 16–256 tokens
// (tests/sched/real_traces.cpp) refinement ends on its own after at most 12 moves.
#pragma once

#include <cmath>
#include <cstddef>
#include <span>

#include "moepolicy/core/error.hpp"
#include "moepolicy/sched/concepts.hpp"
#include "moepolicy/sched/problem.hpp"

namespace moepolicy {

/// Configuration of `bottleneck_refinement_scheduler`.
struct bottleneck_refinement_config {
  /// Refinement moves at most; 0 keeps the greedy assignment (the paper's "+CPU" stage, §5.3).
  std::size_t max_iterations = 64;
  /// Relative difference below which two makespans are equal.
  double tolerance = detail::default_tolerance;
};

/// TriMoE's two-phase scheduler (TriMoE §4.2).
class bottleneck_refinement_scheduler {
 public:
  /// Throws: `invalid_argument` when `tolerance` is negative or not finite.
  explicit bottleneck_refinement_scheduler(bottleneck_refinement_config config = {}) : config_(config) {
    if (!(config_.tolerance >= 0.0) || !std::isfinite(config_.tolerance)) {
      detail::throw_invalid("bottleneck_refinement_scheduler", "tolerance must be finite and >= 0", config_.tolerance);
    }
  }

  [[nodiscard]] const bottleneck_refinement_config& config() const noexcept { return config_; }

  /// Reserves the internal state for steps on `num_dimms` DIMMs, so that `solve` allocates
  /// nothing but `out`'s vectors (which `makespan_schedule`'s constructor can reserve).
  /// The state does not depend on the number of experts; `max_experts` is for symmetry
  /// with the other solvers.
  void reserve(std::size_t max_experts, std::size_t num_dimms) {
    static_cast<void>(max_experts);
    loads_.local.reserve(num_dimms);
  }

  /// Schedules `p` into `out`: greedy assignment, then refinement.
  ///
  /// Returns: `out.status` is `heuristic`; `out.iterations` counts the moves made.
  /// Complexity: O((experts + DIMMs) · (1 + moves)); allocates only when `out` or the
  /// internal state meets more experts or DIMMs than before.
  void solve(const makespan_problem& p, makespan_schedule& out) {
    const std::size_t n = p.size();
    out.status = solve_status::heuristic;
    out.iterations = 0;
    out.assignment.resize(n);
    for (std::size_t i = 0; i < n; ++i) out.assignment[i] = greedy_option(p[i]);
    loads_.reset(p.num_dimms());
    loads_.rebuild(p, out.assignment, n);

    for (std::size_t it = 0; it < config_.max_iterations; ++it) {
      const std::size_t dev = loads_.bottleneck();
      const std::size_t cand = candidate(p, out.assignment, dev);
      if (cand == npos) break;
      const expert_costs& e = p[cand];
      const device_option from = out.assignment[cand];
      const seconds current = loads_.makespan();
      bool found = false;
      device_option best{};
      seconds best_m = 0.0, best_inc = 0.0;
      for (std::size_t o = 0; o < num_device_options; ++o) {
        const auto to = static_cast<device_option>(o);
        if (to == from || !e.allows(to)) continue;
        detail::device_loads::delta c;
        c.add(e, from, -1.0);
        c.add(e, to, 1.0);
        const seconds m = loads_.makespan_after(c);
        const seconds inc = e.exec_seconds(to);
        const bool better = !found || detail::less_than(m, best_m, config_.tolerance) ||
                            (!detail::less_than(best_m, m, config_.tolerance) && inc < best_inc);
        if (better) {
          found = true;
          best = to;
          best_m = m;
          best_inc = inc;
        }
      }
      if (!found || !detail::less_than(best_m, current, config_.tolerance)) break;
      out.assignment[cand] = best;
      loads_.rebuild(p, out.assignment, n);
      ++out.iterations;
    }
    detail::write_totals(loads_, out);
  }

  /// The greedy option of one expert: its smallest execution time (gpu, cpu, ndp among equals).
  [[nodiscard]] static device_option greedy_option(const expert_costs& e) noexcept {
    device_option best = device_option::gpu;
    seconds t = not_allowed;
    for (std::size_t o = 0; o < num_device_options; ++o) {
      if (e.exec[o] < t) {
        t = e.exec[o];
        best = static_cast<device_option>(o);
      }
    }
    return best;
  }

 private:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);

  /// The expert executing on device `dev` (0 GPU, 1 CPU, 2 + d DIMM d) with the largest
  /// execution time there, lowest index among equals; npos when none.
  [[nodiscard]] static std::size_t candidate(const makespan_problem& p, std::span<const device_option> a,
                                             std::size_t dev) noexcept {
    std::size_t best = npos;
    seconds t = -1.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const device_option o = a[i];
      bool on = false;
      if (dev == 0) on = o == device_option::gpu;
      else if (dev == 1) on = o == device_option::cpu;
      else on = o == device_option::ndp && p[i].layout.home == dev - 2;
      if (on && p[i].exec_seconds(o) > t) {
        t = p[i].exec_seconds(o);
        best = i;
      }
    }
    return best;
  }

  bottleneck_refinement_config config_;
  detail::device_loads loads_;
};

static_assert(MakespanScheduler<bottleneck_refinement_scheduler>);

}  // namespace moepolicy
