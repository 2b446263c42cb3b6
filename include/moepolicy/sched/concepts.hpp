// moepolicy/sched/concepts.hpp — the extension point of the makespan schedulers (TriMoE
// "TriMoE: Augmenting GPU with AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE
// Inference via Offloading", §4.2).
//
// Shipped models: `bottleneck_refinement_scheduler` (the paper's, sched/bottleneck_refinement.hpp),
// `local_search_scheduler` (sched/local_search.hpp) and `exact_makespan_scheduler`
// (sched/exact.hpp).
#pragma once

#include <concepts>

#include "moepolicy/sched/problem.hpp"

namespace moepolicy {

/// Assigns each activated expert of a step one option.
///
/// For `S s`, `const makespan_problem& p`, `makespan_schedule& out`, after `s.solve(p, out)`:
///   1. unless `out.status == too_large`, `out.assignment` has one allowed option per
///      expert of `p` (`is_valid_assignment`), and `out.makespan`, `out.gpu_seconds`,
///      `out.cpu_seconds` and `out.dimm_seconds` are that assignment's Eq. 5–7 totals;
///   2. `out.makespan` >= `makespan_lower_bound(p).value`;
///   3. `out.status == optimal` only when no assignment is shorter (up to the solver's
///      relative tolerance);
///   4. the call allocates nothing once `out` and `s` have met a step of that size.
template <class S>
concept MakespanScheduler = requires(S s, const makespan_problem& p, makespan_schedule& out) {
  { s.solve(p, out) } -> std::same_as<void>;
};

}  // namespace moepolicy
