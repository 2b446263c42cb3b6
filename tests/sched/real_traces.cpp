// The makespan solvers on real decode steps: Mixtral-8x7B (vLLM, HumanEval; 8 experts,
// top-2) and Granite-3.1-1B-A400M (32 experts, top-8), priced on the TriMoE machine
// (TriMoE Tab. 1: H100 PCIe, Xeon 8470 AMX, 16 DIMM-NDPs) at FP16.
//
// Steps. The traces decode one sequence at a time, so B recorded tokens are merged into one
// batched step as B concurrent sequences would be (sched/batched_steps.hpp,
// concurrent_sequences: the decode-token stream cut into B segments, step t = token t of
// each): Mixtral B = 16, 32, 64, 128, 256 (21, 10, 5, 2, 1 steps × 32 layers), Granite
// B = 16, 32, 64 (12, 6, 3 steps × 24 layers). Granite B = 128 (1 step) is left out: its
// exact optima need up to 10^7 search nodes, too slow for a sanitizer build.
//
// Layouts (which experts are localized, which resident in HBM), per layer, from the
// hot/warm/cold classes (stats/analysis.hpp defaults: hot = head with 50 % of tokens,
// cold = tail within 10 %) of the layer's loads summed over the whole trace:
//   offline        the paper's initial layout (§4.3): cold localized, hot resident and
//                  striped, warm striped;
//   gpu_ndp        hot resident and striped, all others localized (the binary GPU-NDP
//                  layout of MoNDE-like systems, TriMoE §3.1);
//   all_localized  every expert localized, none resident (before any relayout).
// A localized expert e of layer l lives on DIMM (l · E + e) mod 16.
//
// What is checked: every heuristic is >= the lower bounds and >= the exact optimum; the
// improved solver's median gap to the optimum is <= 2 % (overall and per model); the
// measured medians and 90th percentiles are pinned below (regenerate them with
// MOEPOLICY_PRINT_GOLDEN=1 in the environment, which prints them; otherwise the test
// prints nothing).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <string>
#include <vector>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "test_support.hpp"

using namespace moepolicy;
namespace fs = std::filesystem;

namespace {

enum class scenario { offline, gpu_ndp, all_localized };

/// Gaps to the optimum (makespan / optimum − 1) of one solver.
struct gaps {
  std::vector<double> v;
  [[nodiscard]] double quantile(double q) const {
    std::vector<double> s = v;
    std::sort(s.begin(), s.end());
    if (s.empty()) return 0.0;
    return s[static_cast<std::size_t>(q * static_cast<double>(s.size() - 1) + 0.5)];
  }
  [[nodiscard]] double mean() const {
    double t = 0.0;
    for (double x : v) t += x;
    return v.empty() ? 0.0 : t / static_cast<double>(v.size());
  }
  [[nodiscard]] double fraction_above(double x) const {
    return v.empty() ? 0.0 : static_cast<double>(std::count_if(v.begin(), v.end(), [&](double g) { return g > x; })) /
                                 static_cast<double>(v.size());
  }
};

struct results {
  gaps greedy, paper, improved, improved_no_exact, bound;  // bound: optimum / dual lower bound − 1
  // The same on the contested steps: those where the greedy start is not optimal.
  gaps contested_paper, contested_improved;
  std::size_t instances = 0, unproven = 0, paper_moves_max = 0;
};

bool print_golden() { return std::getenv("MOEPOLICY_PRINT_GOLDEN") != nullptr; }

void report(const char* what, const results& r) {
  if (!print_golden()) return;
  std::printf("%s: %zu steps (%zu unproven), %zu contested | greedy mean %.4f suboptimal %.3f | paper median %.4f p90 "
              "%.4f mean %.4f suboptimal %.3f | improved median %.4f p90 %.4f max %.4f | improved without exact finish "
              "median %.4f p90 %.4f max %.4f | contested: paper median %.4f p90 %.4f, improved median %.4f p90 %.4f | "
              "optimum/dual bound median %.4f p90 %.4f | paper moves max %zu\n",
              what, r.instances, r.unproven, r.contested_paper.v.size(), r.greedy.mean(), r.greedy.fraction_above(1e-9),
              r.paper.quantile(0.5), r.paper.quantile(0.9), r.paper.mean(), r.paper.fraction_above(1e-9),
              r.improved.quantile(0.5), r.improved.quantile(0.9), r.improved.quantile(1.0),
              r.improved_no_exact.quantile(0.5), r.improved_no_exact.quantile(0.9), r.improved_no_exact.quantile(1.0),
              r.contested_paper.quantile(0.5), r.contested_paper.quantile(0.9), r.contested_improved.quantile(0.5),
              r.contested_improved.quantile(0.9), r.bound.quantile(0.5), r.bound.quantile(0.9), r.paper_moves_max);
}

template <class Gpu, class Cpu, class Dimm>
void run(const routing_trace& trace, const gpu_cpu_ndp_system<Gpu, Cpu, Dimm>& sys, std::size_t batch, scenario sc,
         std::initializer_list<results*> into) {
  const std::size_t E = trace.info().num_experts, L = trace.info().num_layers, D = sys.num_dimms();
  const auto steps = make_batched_decode_steps(trace, batch);
  bottleneck_refinement_scheduler greedy({.max_iterations = 0});
  bottleneck_refinement_scheduler paper;
  local_search_scheduler improved;
  local_search_scheduler no_exact({.exact_max_experts = 0});
  exact_makespan_scheduler exact({.max_experts = 32, .node_limit = 2'000'000});
  makespan_problem p(D, E);
  makespan_schedule g(E, D), a(E, D), b(E, D), c(E, D), o(E, D);
  std::vector<double> total(E);
  std::vector<hotness> cls(E);
  std::vector<expert_layout> layout(E);
  std::vector<std::uint8_t> resident(E);
  for (std::size_t l = 0; l < L; ++l) {
    std::fill(total.begin(), total.end(), 0.0);
    for (std::size_t s = 0; s < steps.num_steps(); ++s) {
      for (std::size_t e = 0; e < E; ++e) total[e] += steps.loads(s, l)[e];
    }
    classify_by_share(total, cls);
    for (std::size_t e = 0; e < E; ++e) {
      const auto home = expert_layout::localized(static_cast<std::uint16_t>((l * E + e) % D));
      const bool hot = cls[e] == hotness::hot;
      switch (sc) {
        case scenario::offline: layout[e] = cls[e] == hotness::cold ? home : expert_layout::striped(); break;
        case scenario::gpu_ndp: layout[e] = hot ? expert_layout::striped() : home; break;
        case scenario::all_localized: layout[e] = home; break;
      }
      resident[e] = (hot && sc != scenario::all_localized) ? 1 : 0;
    }
    for (std::size_t s = 0; s < steps.num_steps(); ++s) {
      sys.build_layer(static_cast<layer_id>(l), steps.loads(s, l), layout, resident, fp16, p);
      greedy.solve(p, g);
      paper.solve(p, a);
      improved.solve(p, b);
      no_exact.solve(p, c);
      exact.solve(p, o);
      const double lb = makespan_dual_bound(p);
      // Never below the bound; never below the optimum.
      CHECK(a.makespan >= lb * (1 - 1e-12));
      CHECK(b.makespan >= lb * (1 - 1e-12));
      CHECK(c.makespan >= lb * (1 - 1e-12));
      CHECK(o.makespan >= lb * (1 - 1e-12));
      CHECK(o.makespan <= a.makespan * (1 + 1e-12));
      CHECK(o.makespan <= b.makespan * (1 + 1e-12));
      CHECK(o.makespan <= c.makespan * (1 + 1e-12));
      for (auto* r : into) {
        ++r->instances;
        r->paper_moves_max = std::max(r->paper_moves_max, a.iterations);
        if (o.status != solve_status::optimal) {
          ++r->unproven;
          continue;
        }
        r->greedy.v.push_back(g.makespan / o.makespan - 1);
        r->paper.v.push_back(a.makespan / o.makespan - 1);
        if (g.makespan > o.makespan * (1 + 1e-9)) {
          r->contested_paper.v.push_back(a.makespan / o.makespan - 1);
          r->contested_improved.v.push_back(b.makespan / o.makespan - 1);
        }
        r->improved.v.push_back(b.makespan / o.makespan - 1);
        r->improved_no_exact.v.push_back(c.makespan / o.makespan - 1);
        r->bound.v.push_back(o.makespan / lb - 1);
      }
    }
  }
}

std::vector<fs::path> granite_files() {
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(moepolicy::test::shared_traces() / "granite-3.1-1b-a400m")) {
    if (f.path().extension() == ".jsonl") files.push_back(f.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

auto machine(const model_shape& m) {
  return gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>(
      roofline_cost{presets::h100_pcie_gen5(), m}, roofline_cost{presets::xeon_8470_amx(), m},
      roofline_cost{presets::dimm_ndp(), m});
}

}  // namespace

TEST_CASE("batched decode steps of the Mixtral trace") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto trace = io::read_vllm_decode_jsonl(moepolicy::test::shared_traces() / "mixtral-8x7b-decode" /
                                                "humaneval_2_routing.jsonl");
  std::size_t decode = 0;
  for (const auto& s : trace.steps()) decode += s.kind == phase::decode ? 1 : 0;
  for (auto how : {batch_formation::concurrent_sequences, batch_formation::consecutive_tokens}) {
    const auto steps = make_batched_decode_steps(trace, 16, how);
    CHECK(steps.num_steps() == decode / 16);
    CHECK(steps.num_layers() == 32);
    CHECK(steps.num_experts() == 8);
    // Each token adds top-2 = 2 to a layer it reached (near a request's end a layer may
    // lack the token: PROVENANCE), so a layer's loads sum to at most 32.
    std::size_t full = 0;
    for (std::size_t s = 0; s < steps.num_steps(); ++s) {
      for (std::size_t l = 0; l < 32; ++l) {
        std::uint32_t sum = 0;
        for (auto x : steps.loads(s, l)) sum += x;
        CHECK(sum <= 32);
        full += sum == 32 ? 1 : 0;
      }
    }
    CHECK(full * 100 >= steps.num_steps() * 32 * 95);
  }
  CHECK(make_batched_decode_steps(trace, decode + 1).num_steps() == 0);
  CHECK_THROWS_WITH_AS(static_cast<void>(make_batched_decode_steps(trace, 0)),
                       "moepolicy::make_batched_decode_steps: batch_size must be >= 1, got 0", invalid_argument);
}

TEST_CASE("real decode steps: paper and improved solvers against the exact optimum") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto mixtral = io::read_vllm_decode_jsonl(moepolicy::test::shared_traces() / "mixtral-8x7b-decode" /
                                                  "humaneval_2_routing.jsonl");
  const auto files = granite_files();
  const auto granite = io::read_granite_jsonl(files);
  const auto mixtral_sys = machine(models::mixtral_8x7b());
  const auto granite_sys = machine(models::granite_3_1_1b_a400m());

  results all, mix, gra, large;
  const char* names[] = {"offline", "gpu_ndp", "all_localized"};
  for (auto sc : {scenario::offline, scenario::gpu_ndp, scenario::all_localized}) {
    results mix_sc, gra_sc;
    for (std::size_t b : {std::size_t{16}, std::size_t{32}, std::size_t{64}, std::size_t{128}, std::size_t{256}}) {
      results at;
      if (b >= 64) {
        run(mixtral, mixtral_sys, b, sc, {&all, &mix, &mix_sc, &large, &at});
      } else {
        run(mixtral, mixtral_sys, b, sc, {&all, &mix, &mix_sc, &at});
      }
      report(("  mixtral " + std::string(names[static_cast<int>(sc)]) + " B=" + std::to_string(b)).c_str(), at);
    }
    for (std::size_t b : {std::size_t{16}, std::size_t{32}, std::size_t{64}}) {
      results at;
      if (b >= 64) {
        run(granite, granite_sys, b, sc, {&all, &gra, &gra_sc, &large, &at});
      } else {
        run(granite, granite_sys, b, sc, {&all, &gra, &gra_sc, &at});
      }
      report(("  granite " + std::string(names[static_cast<int>(sc)]) + " B=" + std::to_string(b)).c_str(), at);
    }
    report(("mixtral " + std::string(names[static_cast<int>(sc)])).c_str(), mix_sc);
    report(("granite " + std::string(names[static_cast<int>(sc)])).c_str(), gra_sc);
  }
  report("mixtral", mix);
  report("granite", gra);
  report("B >= 64", large);
  report("all", all);

  // Mixtral: 3,744 steps (3 scenarios × 32 layers × (21+10+5+2+1)); Granite: 1,512
  // (3 × 24 × (12+6+3)).
  CHECK(mix.instances == 3 * 32 * (21 + 10 + 5 + 2 + 1));
  CHECK(gra.instances == 3 * 24 * (12 + 6 + 3));
  CHECK(all.unproven == 0);
  // The improved solver: within 2 % of the optimum at the median, overall, per model and
  // on the contested steps.
  CHECK(all.improved.quantile(0.5) <= 0.02);
  CHECK(all.contested_improved.quantile(0.5) <= 0.02);
  CHECK(mix.improved.quantile(0.5) <= 0.02);
  CHECK(gra.improved.quantile(0.5) <= 0.02);
  CHECK(all.improved_no_exact.quantile(0.5) <= 0.02);
  // Pinned figures (MOEPOLICY_PRINT_GOLDEN=1 prints them). Over all 5,256 steps the
  // median gap is 0 for every solver: on most steps each expert's cheapest option is
  // already optimal. The 844 contested steps (greedy start not optimal) are where the
  // solvers differ: the paper's refinement leaves a median gap of 20.7 %, the improved
  // solver none.
  CHECK(all.contested_paper.v.size() == 844);
  CHECK(all.paper.quantile(0.5) == 0.0);
  CHECK(all.paper.quantile(0.9) == doctest::Approx(0.0625).epsilon(0.01));
  CHECK(all.paper.mean() == doctest::Approx(0.0675).epsilon(0.01));
  CHECK(all.contested_paper.quantile(0.5) == doctest::Approx(0.2073).epsilon(0.01));
  CHECK(all.contested_paper.quantile(0.9) == doctest::Approx(1.2222).epsilon(0.01));
  CHECK(all.improved.quantile(0.5) == 0.0);
  CHECK(all.contested_improved.quantile(0.5) == 0.0);
  CHECK(all.contested_improved.quantile(0.9) == 0.0);
  CHECK(all.improved.quantile(1.0) == doctest::Approx(0.0256).epsilon(0.01));
  CHECK(all.improved_no_exact.quantile(1.0) == doctest::Approx(0.3333).epsilon(0.01));
  // The paper's refinement never needs its iteration cap (64) on these steps.
  CHECK(all.paper_moves_max == 12);
}
