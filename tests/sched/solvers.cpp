// Tests of the makespan solvers (sched/bottleneck_refinement.hpp, sched/local_search.hpp,
// sched/exact.hpp) and the lower bound (sched/lower_bound.hpp): the paper's rules on
// hand-worked instances, then a conformance suite over every solver on random instances.
#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/concepts.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"

using namespace moepolicy;

namespace {

constexpr seconds no = not_allowed;
constexpr auto gpu = device_option::gpu;
constexpr auto cpu = device_option::cpu;
constexpr auto ndp = device_option::ndp;

expert_costs row(std::array<seconds, 3> exec, expert_layout layout = expert_layout::striped(), seconds dram = 0.0,
                 bool resident = true) {
  expert_costs e;
  e.exec = exec;
  e.dram = dram;
  e.layout = layout;
  e.gpu_resident = resident;
  return e;
}

/// The tie-break instance. D = 2; dram 0 everywhere, so only executions count.
///   X  gpu 4, cpu 4.8, ndp 4.5 on DIMM 0   (greedy: GPU, 4 is its cheapest)
///   Y1 GPU only, 3;  Y2 GPU only, 3
///   Z  CPU only, 1;  V  NDP only on DIMM 0, 1
/// Greedy: GPU = 4 + 3 + 3 = 10, CPU = 1, DIMM0 = 1, DIMM1 = 0; makespan 10.
/// Iteration 1: bottleneck GPU; costliest expert on it X (4 > 3).
///   X -> CPU: GPU 6, CPU 1 + 4.8 = 5.8, DIMM0 1    -> makespan 6
///   X -> NDP: GPU 6, CPU 1, DIMM0 1 + 4.5 = 5.5    -> makespan 6
///   equal makespans: the smaller increase on the receiving device wins, NDP (4.5 < 4.8),
///   although the option order alone would pick the CPU.
/// Iteration 2: bottleneck GPU (6); costliest Y1 (3, first of equals) may go nowhere: stop.
makespan_problem tie_break_instance() {
  makespan_problem p(2);
  p.add(row({4.0, 4.8, 4.5}, expert_layout::localized(0)));
  p.add(row({3.0, no, no}));
  p.add(row({3.0, no, no}));
  p.add(row({no, 1.0, no}));
  p.add(row({no, no, 1.0}, expert_layout::localized(0)));
  return p;
}

/// The iteration-cap instance. D = 2, dram 0, all resident.
///   X1 gpu 4,   cpu 5, ndp 6 on DIMM 0
///   X2 gpu 3.5, cpu 5, ndp 5 on DIMM 1
///   X3 gpu 3,   cpu 9, ndp 9 on DIMM 0
/// Greedy: all on the GPU, 10.5.
/// Iteration 1: X1 (4) -> CPU: GPU 6.5, CPU 5 -> 6.5; -> NDP: GPU 6.5, DIMM0 6 -> 6.5;
///   tie, increase 5 < 6: CPU. Makespan 6.5.
/// Iteration 2: X2 (3.5) -> CPU: CPU 10 -> 10; -> NDP d1: GPU 3, CPU 5, DIMM1 5 -> 5: NDP.
/// Iteration 3: bottleneck CPU (5, before DIMM1's 5); X1 -> GPU: 7; -> NDP d0: 6. No
///   improvement: stop with makespan 5 after 2 moves, which is optimal (X1 costs >= 5
///   off the GPU, and on it X3 must leave for 9).
makespan_problem cap_instance() {
  makespan_problem p(2);
  p.add(row({4.0, 5.0, 6.0}, expert_layout::localized(0)));
  p.add(row({3.5, 5.0, 5.0}, expert_layout::localized(1)));
  p.add(row({3.0, 9.0, 9.0}, expert_layout::localized(0)));
  return p;
}

}  // namespace

TEST_CASE("paper: the greedy start puts each expert on its cheapest option") {
  CHECK(bottleneck_refinement_scheduler::greedy_option(row({3.0, 2.0, 2.5}, expert_layout::localized(0))) == cpu);
  CHECK(bottleneck_refinement_scheduler::greedy_option(row({3.0, 3.0, 3.0}, expert_layout::localized(0))) == gpu);
  CHECK(bottleneck_refinement_scheduler::greedy_option(row({no, 3.0, 3.0}, expert_layout::localized(0))) == cpu);
  CHECK(bottleneck_refinement_scheduler::greedy_option(row({no, no, 3.0}, expert_layout::localized(0))) == ndp);
}

TEST_CASE("paper: equal new makespans go to the smallest increase on the receiving device") {
  const auto p = tie_break_instance();
  bottleneck_refinement_scheduler s;
  makespan_schedule out;
  s.solve(p, out);
  CHECK(out.status == solve_status::heuristic);
  CHECK(out.iterations == 1);
  CHECK(out.assignment == std::vector<device_option>{ndp, gpu, gpu, cpu, ndp});
  CHECK(out.makespan == doctest::Approx(6.0));
  CHECK(out.gpu_seconds == doctest::Approx(6.0));
  CHECK(out.cpu_seconds == doctest::Approx(1.0));
  CHECK(out.dimm_seconds[0] == doctest::Approx(5.5));
  CHECK(out.dimm_seconds[1] == doctest::Approx(0.0));
}

TEST_CASE("paper: the iteration cap stops refinement") {
  const auto p = cap_instance();
  makespan_schedule out;
  bottleneck_refinement_scheduler greedy_only({.max_iterations = 0});
  greedy_only.solve(p, out);
  CHECK(out.assignment == std::vector<device_option>{gpu, gpu, gpu});
  CHECK(out.makespan == doctest::Approx(10.5));
  CHECK(out.iterations == 0);

  bottleneck_refinement_scheduler one({.max_iterations = 1});
  one.solve(p, out);
  CHECK(out.assignment == std::vector<device_option>{cpu, gpu, gpu});
  CHECK(out.makespan == doctest::Approx(6.5));
  CHECK(out.iterations == 1);

  bottleneck_refinement_scheduler full;  // default cap 64: stops by itself after 2 moves
  full.solve(p, out);
  CHECK(out.assignment == std::vector<device_option>{cpu, ndp, gpu});
  CHECK(out.makespan == doctest::Approx(5.0));
  CHECK(out.iterations == 2);

  exact_makespan_scheduler exact;
  exact.solve(p, out);
  CHECK(out.status == solve_status::optimal);
  CHECK(out.makespan == doctest::Approx(5.0));
}

TEST_CASE("paper: a DIMM busy only with reads has no expert to move, so refinement stops") {
  // One striped expert, GPU-resident at 3 but cheaper on the CPU (1), whose read busies
  // each of the 2 DIMMs for 5: greedy CPU gives GPU 0, CPU 1, DIMMs 5 -> makespan 5 on
  // DIMM 0, where nothing executes. The paper's rule stops at 5; moving the expert to the
  // GPU (no read: resident) gives 3, which the improved and exact solvers find.
  makespan_problem p(2);
  p.add(row({3.0, 1.0, no}, expert_layout::striped(), 5.0, true));
  makespan_schedule out;
  bottleneck_refinement_scheduler paper;
  paper.solve(p, out);
  CHECK(out.makespan == doctest::Approx(5.0));
  CHECK(out.iterations == 0);
  local_search_scheduler improved;
  improved.solve(p, out);
  CHECK(out.makespan == doctest::Approx(3.0));
  CHECK(out.status == solve_status::optimal);
  exact_makespan_scheduler exact;
  exact.solve(p, out);
  CHECK(out.makespan == doctest::Approx(3.0));
}

TEST_CASE("lower bound: each part on the iteration-cap instance") {
  // A  = max(min(4, 5, 6), min(3.5, 5, 5), min(3, 9, 9)) = 4 (dram 0, resident).
  // B1 = (4 + 3.5 + 3) / (2 + 2) = 2.625.
  // B2 = every expert may take NDP (0 serial work): 0.
  // B3 = every expert may avoid its DIMM (GPU, resident): 0.
  // B4 = DIMM 0: (min(4,5,6) + min(3,9,9) + 0 for X2) / 3 = 7/3; DIMM 1: 3.5/3.
  const auto b = makespan_lower_bound(cap_instance());
  CHECK(b.single_expert == doctest::Approx(4.0));
  CHECK(b.average_all == doctest::Approx(2.625));
  CHECK(b.average_serial == doctest::Approx(0.0));
  CHECK(b.per_dimm == doctest::Approx(0.0));
  CHECK(b.serial_and_dimm == doctest::Approx(7.0 / 3.0));
  CHECK(b.value == doctest::Approx(4.0));
  CHECK(makespan_dual_bound(cap_instance()) >= b.value);
  CHECK(makespan_dual_bound(cap_instance()) <= 5.0 + 1e-12);  // <= the optimum
}

TEST_CASE("lower bound: reads that must land on a DIMM, and serial work that must stay serial") {
  // D = 4. Two striped experts that must run on the GPU (miss, dram 2 per DIMM) or the CPU
  // (dram 2): every DIMM carries 2 + 2 = 4 whatever happens (B3 = 4). Serial work:
  // min(gpu, cpu) = 3 and 5 -> B2 = 8 / 2 = 4. The optimum: GPU 3 + CPU 5, or CPU 5 + 6...
  makespan_problem p(4);
  p.add(row({3.0, 4.0, no}, expert_layout::striped(), 2.0, false));
  p.add(row({6.0, 5.0, no}, expert_layout::striped(), 2.0, false));
  const auto b = makespan_lower_bound(p);
  CHECK(b.per_dimm == doctest::Approx(4.0));
  CHECK(b.average_serial == doctest::Approx(4.0));
  CHECK(b.single_expert == doctest::Approx(5.0));  // the second expert costs >= 5 anywhere
  exact_makespan_scheduler exact;
  makespan_schedule out;
  exact.solve(p, out);
  CHECK(out.makespan == doctest::Approx(5.0));  // GPU 3, CPU 5, DIMMs 4
  CHECK(out.status == solve_status::optimal);
  const auto empty = makespan_lower_bound(makespan_problem(3));
  CHECK(empty.value == 0.0);
}

TEST_CASE("exact: refuses steps above its cap, stops at its node limit") {
  makespan_problem p(2);
  for (int i = 0; i < 5; ++i) p.add(row({1.0 + i, 2.0, 1.5 + 0.1 * i}, expert_layout::localized(static_cast<std::uint16_t>(i % 2))));
  exact_makespan_scheduler small({.max_experts = 4});
  makespan_schedule out;
  small.solve(p, out);
  CHECK(out.status == solve_status::too_large);
  CHECK(out.assignment.empty());
  CHECK(out.makespan == not_allowed);
  exact_makespan_scheduler tiny({.node_limit = 1});
  tiny.solve(p, out);
  CHECK((out.status == solve_status::node_limit || out.status == solve_status::optimal));
  CHECK(is_valid_assignment(p, out.assignment));
  CHECK_THROWS_WITH_AS(exact_makespan_scheduler({.max_experts = 65}),
                       "moepolicy::exact_makespan_scheduler: max_experts must be <= 64, got 65", invalid_argument);
  CHECK_THROWS_WITH_AS(exact_makespan_scheduler({.node_limit = 0}),
                       "moepolicy::exact_makespan_scheduler: node_limit must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(bottleneck_refinement_scheduler({.tolerance = -1.0}),
                       "moepolicy::bottleneck_refinement_scheduler: tolerance must be finite and >= 0, got -1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(local_search_scheduler({.exact_max_experts = 100}),
                       "moepolicy::local_search_scheduler: exact_max_experts must be <= 64, got 100", invalid_argument);
}

TEST_CASE("improved: leaves a plateau where the paper's refinement stops") {
  // D = 1, dram 0, all resident.
  //   a: gpu 2, cpu 3, ndp 2.2 on DIMM 0     b: gpu 3, cpu 9 (no NDP)
  //   c: gpu 3, cpu 2, ndp 2.2 on DIMM 0     d: gpu 9, cpu 3 (no NDP)
  // Greedy: GPU {a, b} = 5, CPU {c, d} = 5, DIMM 0 = 0: makespan 5, GPU and CPU tied.
  // Paper: the bottleneck is the GPU, its costliest expert b can only go to the CPU (14):
  //   stop at 5.
  // Improved: a -> NDP keeps the makespan at 5 (the CPU) but lowers Σ T² from
  //   25 + 25 + 0 = 50 to 9 + 25 + 4.84 = 38.84, so it is taken; then c -> NDP gives
  //   GPU 3, CPU 3, DIMM 4.4: makespan 4.4, the optimum (the exact solver agrees).
  makespan_problem p(1);
  p.add(row({2.0, 3.0, 2.2}, expert_layout::localized(0)));
  p.add(row({3.0, 9.0, no}));
  p.add(row({3.0, 2.0, 2.2}, expert_layout::localized(0)));
  p.add(row({9.0, 3.0, no}));
  makespan_schedule out;
  bottleneck_refinement_scheduler paper;
  paper.solve(p, out);
  CHECK(out.makespan == doctest::Approx(5.0));
  CHECK(out.iterations == 0);
  local_search_scheduler improved({.pair_candidates = 0, .exact_max_experts = 0});
  improved.solve(p, out);
  CHECK(out.makespan == doctest::Approx(4.4));
  CHECK(out.assignment == std::vector<device_option>{ndp, gpu, ndp, cpu});
  CHECK(out.status == solve_status::heuristic);  // the bound, 10/3, does not prove it
  CHECK(out.iterations == 2);
  exact_makespan_scheduler exact;
  exact.solve(p, out);
  CHECK(out.makespan == doctest::Approx(4.4));
}

TEST_CASE("improved: a pair move swaps two experts between the GPU and the CPU") {
  // D = 1, dram 0, all resident, no NDP. Greedy (cheapest option each):
  //   x: gpu 2.5, cpu 2.6 -> GPU     b: GPU only 1.5
  //   y: gpu 3.2, cpu 3   -> CPU     e: CPU only 2
  // GPU {x, b} = 4, CPU {y, e} = 5: makespan 5 on the CPU. Single moves: y -> GPU gives
  // GPU 7.2, x -> CPU gives CPU 7.6: both worse. The swap (x -> CPU, y -> GPU) gives
  // GPU 1.5 + 3.2 = 4.7, CPU 2 + 2.6 = 4.6: makespan 4.7, the optimum (of the 4 ways to
  // place x and y: 7.2, 5, 4.7, 7.6).
  makespan_problem p(1);
  p.add(row({2.5, 2.6, no}));
  p.add(row({1.5, no, no}));
  p.add(row({3.2, 3.0, no}));
  p.add(row({no, 2.0, no}));
  makespan_schedule out;
  local_search_scheduler singles({.pair_candidates = 0, .exact_max_experts = 0});
  singles.solve(p, out);
  CHECK(out.makespan == doctest::Approx(5.0));
  local_search_scheduler pairs({.exact_max_experts = 0});
  pairs.solve(p, out);
  CHECK(out.makespan == doctest::Approx(4.7));
  CHECK(out.assignment == std::vector<device_option>{cpu, gpu, gpu, cpu});
  exact_makespan_scheduler exact;
  exact.solve(p, out);
  CHECK(out.makespan == doctest::Approx(4.7));
}

// ---------------------------------------------------------------------------------------
// Conformance: every solver on random instances (fixed seed).

namespace {

struct paper_solver : bottleneck_refinement_scheduler {};
struct improved_solver : local_search_scheduler {};
struct improved_no_exact : local_search_scheduler {
  improved_no_exact() : local_search_scheduler({.exact_max_experts = 0}) {}
};
struct exact_solver : exact_makespan_scheduler {};

/// Random steps: 0-9 experts over 1-4 DIMMs, random prices and layouts, some options off.
std::vector<makespan_problem> random_instances() {
  std::mt19937 rng(20240611);
  std::uniform_real_distribution<double> t(0.1, 10.0);
  std::vector<makespan_problem> out;
  for (int k = 0; k < 300; ++k) {
    const std::size_t D = 1 + rng() % 4;
    const std::size_t n = rng() % 10;
    makespan_problem p(D);
    for (std::size_t i = 0; i < n; ++i) {
      const bool loc = rng() % 2 == 0;
      const auto lay = loc ? expert_layout::localized(static_cast<std::uint16_t>(rng() % D)) : expert_layout::striped();
      const bool cpu_ok = rng() % 5 != 0;
      // Integer-ish prices now and then, so that ties occur.
      const auto price = [&] { return rng() % 3 == 0 ? static_cast<double>(1 + rng() % 4) : t(rng); };
      p.add(row({price(), cpu_ok ? price() : no, loc ? price() : no}, lay, rng() % 2 ? price() : 0.0, rng() % 3 == 0));
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace

static_assert(MakespanScheduler<paper_solver> && MakespanScheduler<improved_solver> && MakespanScheduler<exact_solver>);

TEST_CASE_TEMPLATE("conformance: a valid schedule, its own totals, never below the bound nor the optimum", S,
                   paper_solver, improved_solver, improved_no_exact, exact_solver) {
  S solver;
  exact_makespan_scheduler exact;
  makespan_schedule out, opt, check;
  for (const auto& p : random_instances()) {
    solver.solve(p, out);
    REQUIRE(out.status != solve_status::too_large);
    // Every expert exactly once, on an allowed option; NDP only for a localized expert
    // (on its own DIMM, the only NDP option a row can express).
    REQUIRE(is_valid_assignment(p, out.assignment));
    for (std::size_t i = 0; i < p.size(); ++i) {
      if (out.assignment[i] == ndp) CHECK(p[i].layout.is_localized());
    }
    // The reported totals are the assignment's.
    evaluate(p, out.assignment, check);
    CHECK(out.makespan == doctest::Approx(check.makespan));
    CHECK(out.gpu_seconds == doctest::Approx(check.gpu_seconds));
    CHECK(out.cpu_seconds == doctest::Approx(check.cpu_seconds));
    REQUIRE(out.dimm_seconds.size() == p.num_dimms());
    for (std::size_t d = 0; d < p.num_dimms(); ++d) CHECK(out.dimm_seconds[d] == doctest::Approx(check.dimm_seconds[d]));
    // Never below the lower bounds, never below the optimum.
    const auto lb = makespan_lower_bound(p);
    CHECK(out.makespan >= lb.value * (1 - 1e-12));
    CHECK(out.makespan >= makespan_dual_bound(p) * (1 - 1e-12));
    exact.solve(p, opt);
    REQUIRE(opt.status == solve_status::optimal);
    CHECK(opt.makespan <= out.makespan * (1 + 1e-12));
    if (out.status == solve_status::optimal) CHECK(out.makespan == doctest::Approx(opt.makespan));
    // Deterministic: the same answer again from the same object.
    const auto first = out.assignment;
    solver.solve(p, out);
    CHECK(out.assignment == first);
  }
}

TEST_CASE("improved: at least as good as the paper's on every random instance, and optimal on these small ones") {
  bottleneck_refinement_scheduler paper;
  local_search_scheduler improved;
  exact_makespan_scheduler exact;
  makespan_schedule a, b, c;
  int strictly_better = 0;
  for (const auto& p : random_instances()) {
    paper.solve(p, a);
    improved.solve(p, b);
    exact.solve(p, c);
    CHECK(b.makespan <= a.makespan * (1 + 1e-12));
    CHECK(b.makespan == doctest::Approx(c.makespan));  // <= 9 experts: the exact finish runs
    if (b.makespan < a.makespan * (1 - 1e-9)) ++strictly_better;
  }
  CHECK(strictly_better > 0);
}
