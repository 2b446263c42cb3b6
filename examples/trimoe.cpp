// trimoe — TriMoE's GPU + AMX-CPU + DIMM-NDP scheduling (seed 001 "TriMoE: Augmenting GPU
// with AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE Inference via Offloading",
// §4.2–4.3, §5.3 and Fig. 8) replayed on batched decode steps of a recorded trace, beside
// its baselines, the lower bound and the exact optimum.
//
// Machine: the Tab. 1 presets (H100 PCIe Gen5, Xeon 8470 AMX, 16 DIMM-NDPs) priced by the
// roofline model with the trace's model shape, FP16 weights. Steps: B concurrent sequences
// (sched/batched_steps.hpp, concurrent_sequences; B = 64 for 8-expert models such as
// Mixtral-8x7B and 32 otherwise, unless --batch). Each (step, layer) is one makespan
// problem (Eq. 5–7); a step's time is the sum of its layers' makespans.
//
// Layout scenario (one, stated in the output): the EMA load predictor (§4.3, Eq. 8,
// α = 0.3) is updated with every layer's loads after each step; step t's layer l uses the
// classes it predicted after step t − 1:
//   hot   resident in GPU HBM (and striped in host memory);
//   warm  striped over the 16 DIMMs;
//   cold  localized on DIMM (l · E + e) mod 16 (round robin, as tests/sched/real_traces.cpp).
// Step 0 only warms the predictor; steps 1 … S−1 are replayed. The systems without NDP
// (GPU-only, GPU+CPU) keep the same residency but stripe every non-resident expert, since
// localizing only serves NDP and would cut their host reads to one DIMM's 19.2 GB/s.
// Migration time between steps is not charged (the paper hides it behind GPU compute).
//
// Systems, as in §5.3's ablation (Fig. 8) plus this project's solver:
//   GPU-only        every expert on the GPU: hot ones hit HBM (Eq. 1), the rest are fetched
//                   over PCIe (Eq. 2); no CPU, no NDP (Klotski-like);
//   GPU+CPU         greedy per expert over GPU and CPU (Eq. 3), no NDP (KTransformers-like);
//   GPU+NDP         greedy over GPU and NDP (Eq. 4), no CPU (MoNDE-like; Fig. 8's base);
//   TriMoE +CPU     greedy over all three (sched/bottleneck_refinement.hpp, 0 iterations);
//   +Refinement     the paper's bottleneck-aware refinement (§4.2);
//   improved        sched/local_search.hpp (multi-start local search, exact finish on
//                   steps of <= 12 experts).
// Beside them: the lower bound (sched/lower_bound.hpp, dual bound) and the exact optimum of
// the three-device problem (sched/exact.hpp, seeded with the improved schedule, bounded by
// --exact-nodes); gaps to the optimum are over the problems it proved.
//
// Prediction block: class accuracy (hot/warm/cold as stats/analysis.hpp's share rule on the
// true next-step loads) and migration-decision accuracy (prefetch = hot, localize = cold,
// averaged; tests/predict/ema/accuracy.cpp) of the EMA, a last-value baseline and the
// oracle, and the improved solver's step time under each one's layout.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;
using examples::fixed;

namespace {

using system_t = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;

/// Sums over the replayed (step, layer) problems of one system.
struct totals {
  double makespan = 0.0, gpu = 0.0, cpu = 0.0, dimm = 0.0;
  double gap_sum = 0.0, gap_max = 0.0;  // against the proven optima
  void add(const makespan_schedule& s) {
    makespan += s.makespan;
    gpu += s.gpu_seconds;
    cpu += s.cpu_seconds;
    dimm += s.dimm_seconds.empty() ? 0.0 : *std::max_element(s.dimm_seconds.begin(), s.dimm_seconds.end());
  }
  void add_gap(double m, double opt) {
    const double g = opt > 0.0 ? m / opt - 1.0 : 0.0;
    gap_sum += g;
    gap_max = std::max(gap_max, g);
  }
};

/// Prediction scores of one predictor over the scored (step, layer, expert) triples.
struct prediction_scores {
  hotness_confusion confusion;
  double decisions = 0.0;
  double step_seconds = 0.0;  // Σ of the improved solver's makespans under its layout
};

/// Fills `layout` and `resident` from `classes`: hot resident, cold localized round robin
/// (unless `stripe_all`), the rest striped.
void layout_from(std::span<const hotness> classes, std::size_t layer, std::size_t dimms, bool stripe_all,
                 std::vector<expert_layout>& layout, std::vector<std::uint8_t>& resident) {
  const std::size_t E = classes.size();
  for (std::size_t e = 0; e < E; ++e) {
    resident[e] = classes[e] == hotness::hot ? 1 : 0;
    layout[e] = (!stripe_all && classes[e] == hotness::cold)
                    ? expert_layout::localized(static_cast<std::uint16_t>((layer * E + e) % dimms))
                    : expert_layout::striped();
  }
}

std::string pct(double x) { return fixed(100.0 * x, 1) + " %"; }

void run(const fs::path& path, std::size_t batch_option, double alpha, std::size_t exact_nodes) {
  const routing_trace trace = io::read_trace(path);
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  const std::size_t B = batch_option != 0 ? batch_option : (trace.info().num_experts <= 8 ? 64 : 32);
  const batched_steps steps = make_batched_decode_steps(trace, B);
  const std::size_t S = steps.num_steps(), L = steps.num_layers(), E = steps.num_experts();

  const auto make = [&](bool cpu, bool ndp) {
    return system_t{roofline_cost{presets::h100_pcie_gen5(), *shape}, roofline_cost{presets::xeon_8470_amx(), *shape},
                    roofline_cost{presets::dimm_ndp(), *shape}, {.use_cpu = cpu, .use_ndp = ndp}};
  };
  const system_t gpu_only = make(false, false), gpu_cpu = make(true, false), gpu_ndp = make(false, true),
                 full = make(true, true);
  const std::size_t D = full.num_dimms();

  std::cout << "trace: " << path.string() << '\n'
            << "  model " << shape->name << ", " << L << " layers x " << E << " experts, top-" << trace.info().top_k
            << "; FP16 weights\n"
            << "  devices: " << full.gpu().name() << " + " << full.cpu().name() << " + " << D << " x "
            << full.dimm().name() << '\n'
            << "  steps: B = " << B << " concurrent sequences -> " << S << " batched decode steps; step 0 warms the "
            << "predictor, steps 1.." << (S == 0 ? 0 : S - 1) << " replayed\n"
            << "  layout: EMA (alpha = " << fixed(alpha, 2) << ") classes of the previous step: hot GPU-resident, "
            << "warm striped, cold localized on DIMM (l*E+e) mod " << D << ";\n"
            << "          GPU-only and GPU+CPU keep the residency and stripe every other expert\n";
  if (S < 2) {
    std::cout << "  fewer than 2 batched steps at B = " << B << ": nothing to replay\n";
    return;
  }

  enum { r_gpu_only, r_gpu_cpu, r_gpu_ndp, r_greedy, r_refined, r_improved, r_exact, num_rows };
  std::vector<totals> acc(num_rows);
  double bound_sum = 0.0;
  std::size_t problems = 0, proven = 0;

  bottleneck_refinement_scheduler greedy({.max_iterations = 0});
  bottleneck_refinement_scheduler refined;
  local_search_scheduler improved;
  exact_makespan_scheduler exact({.max_experts = 64, .node_limit = exact_nodes});
  makespan_problem p_gpu(D, E), p_gc(D, E), p_gn(D, E), p_full(D, E), p_pred(D, E);
  std::vector<makespan_schedule> out(num_rows, makespan_schedule(E, D));
  makespan_schedule scratch(E, D);

  ema_load_predictor ema(L, E, {.alpha = alpha}), last(L, E, {.alpha = 1.0});
  prediction_scores scores[3];  // EMA, last value, oracle
  std::vector<double> actual(E);
  std::vector<hotness> truth(E);
  std::vector<expert_layout> layout(E), striped(E);
  std::vector<std::uint8_t> resident(E);

  for (std::size_t t = 0; t < S; ++t) {
    for (std::size_t l = 0; l < L; ++l) {
      const auto lid = static_cast<layer_id>(l);
      const auto loads = steps.loads(t, l);
      if (t > 0 && std::any_of(loads.begin(), loads.end(), [](std::uint32_t x) { return x > 0; })) {
        ++problems;
        // The systems under the EMA's layout.
        layout_from(ema.predicted_classes(lid), l, D, false, layout, resident);
        layout_from(ema.predicted_classes(lid), l, D, true, striped, resident);
        gpu_only.build_layer(lid, loads, striped, resident, fp16, p_gpu);
        gpu_cpu.build_layer(lid, loads, striped, resident, fp16, p_gc);
        gpu_ndp.build_layer(lid, loads, layout, resident, fp16, p_gn);
        full.build_layer(lid, loads, layout, resident, fp16, p_full);
        greedy.solve(p_gpu, out[r_gpu_only]);
        greedy.solve(p_gc, out[r_gpu_cpu]);
        greedy.solve(p_gn, out[r_gpu_ndp]);
        greedy.solve(p_full, out[r_greedy]);
        refined.solve(p_full, out[r_refined]);
        improved.solve(p_full, out[r_improved]);
        exact.solve_from(p_full, out[r_improved].assignment, out[r_exact]);
        for (int r = 0; r < num_rows; ++r) acc[static_cast<std::size_t>(r)].add(out[static_cast<std::size_t>(r)]);
        bound_sum += makespan_dual_bound(p_full);
        if (out[r_exact].status == solve_status::optimal) {
          ++proven;
          for (int r : {r_greedy, r_refined, r_improved}) {
            acc[static_cast<std::size_t>(r)].add_gap(out[static_cast<std::size_t>(r)].makespan, out[r_exact].makespan);
          }
        }

        // Prediction: classes against the true ones, and the step under each layout.
        for (std::size_t e = 0; e < E; ++e) actual[e] = loads[e];
        classify_by_share(actual, truth);
        const std::span<const hotness> predicted[3] = {ema.predicted_classes(lid), last.predicted_classes(lid), truth};
        for (std::size_t k = 0; k < 3; ++k) {
          scores[k].confusion.observe(predicted[k], truth);
          for (std::size_t e = 0; e < E; ++e) {
            const hotness c = predicted[k][e];
            scores[k].decisions += 0.5 * (((c == hotness::hot) == (truth[e] == hotness::hot) ? 1.0 : 0.0) +
                                          ((c == hotness::cold) == (truth[e] == hotness::cold) ? 1.0 : 0.0));
          }
          if (k == 0) {
            scores[k].step_seconds += out[r_improved].makespan;
            continue;
          }
          layout_from(predicted[k], l, D, false, layout, resident);
          full.build_layer(lid, loads, layout, resident, fp16, p_pred);
          improved.solve(p_pred, scratch);
          scores[k].step_seconds += scratch.makespan;
        }
      }
      ema.update(lid, loads);
      last.update(lid, loads);
    }
  }

  const double steps_replayed = static_cast<double>(S - 1);
  const double base = acc[r_gpu_only].makespan;
  std::cout << "  " << problems << " (step, layer) problems; times per batched step are sums over the " << L
            << " layers (one token per sequence), averaged over the " << (S - 1) << " replayed steps\n";
  examples::text_table t({"system", "us/layer", "ms/step", "tok/s", "speed-up", "GPU ms", "CPU ms", "max DIMM ms",
                          "gap to opt (mean/max)"});
  const char* names[num_rows] = {"GPU-only (fetch misses over PCIe)", "GPU+CPU, greedy", "GPU+NDP (MoNDE-like), greedy",
                                 "TriMoE +CPU (greedy)", "TriMoE +Refinement (paper)", "TriMoE improved (local search)",
                                 "exact optimum (best found)"};
  for (int r = 0; r < num_rows; ++r) {
    const totals& a = acc[static_cast<std::size_t>(r)];
    const double step = a.makespan / steps_replayed;
    const bool has_gap = r == r_greedy || r == r_refined || r == r_improved;
    const std::string gap = has_gap && proven > 0 ? pct(a.gap_sum / static_cast<double>(proven)) + " / " + pct(a.gap_max)
                                                  : std::string("-");
    t.add({names[r], fixed(a.makespan / static_cast<double>(problems) * 1e6, 1), fixed(step * 1e3, 3),
           fixed(static_cast<double>(B) / step, 0), fixed(base / a.makespan, 2) + "x", fixed(a.gpu / steps_replayed * 1e3, 3),
           fixed(a.cpu / steps_replayed * 1e3, 3), fixed(a.dimm / steps_replayed * 1e3, 3), gap});
  }
  t.add({"lower bound (dual)", fixed(bound_sum / static_cast<double>(problems) * 1e6, 1),
         fixed(bound_sum / steps_replayed * 1e3, 3), "-", fixed(base / bound_sum, 2) + "x", "-", "-", "-", "-"});
  t.print(std::cout, "    ");
  std::cout << "  exact: " << proven << " of " << problems << " problems proven optimal within " << exact_nodes
            << " nodes; gaps are makespan / optimum - 1 over those\n"
            << "  ablation (paper Fig. 8, batch 512: +CPU 1.75x, +Refinement 1.28x): +CPU "
            << fixed(acc[r_gpu_ndp].makespan / acc[r_greedy].makespan, 2) << "x over GPU+NDP, +Refinement "
            << fixed(acc[r_greedy].makespan / acc[r_refined].makespan, 2) << "x, improved "
            << fixed(acc[r_refined].makespan / acc[r_improved].makespan, 2) << "x over +Refinement\n";

  std::cout << "  prediction of the next step's classes (hot = head with 50 % of tokens, cold = tail within 10 %):\n";
  examples::text_table pt({"predictor", "class acc", "decision acc", "hot prec", "hot recall", "ms/step (improved)",
                           "vs oracle"});
  const char* pnames[3] = {"", "last value", "oracle (true loads)"};
  const std::string ema_name = "EMA (alpha = " + fixed(alpha, 2) + ")";
  const double n = static_cast<double>(scores[0].confusion.total());
  for (std::size_t k = 0; k < 3; ++k) {
    const auto& s = scores[k];
    pt.add({k == 0 ? ema_name : std::string(pnames[k]), pct(s.confusion.accuracy()), pct(s.decisions / n),
            pct(s.confusion.precision(hotness::hot)), pct(s.confusion.recall(hotness::hot)),
            fixed(s.step_seconds / steps_replayed * 1e3, 3), fixed(s.step_seconds / scores[2].step_seconds, 3) + "x"});
  }
  pt.print(std::cout, "    ");
  std::cout << "  paper (Sec. 4.3): >78 % migration decision accuracy with alpha = 0.3\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"TriMoE GPU + AMX-CPU + DIMM-NDP scheduling (seed 001) on batched decode steps of recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  std::size_t batch = 0;
  double alpha = 0.3;
  std::size_t exact_nodes = 1'000'000;
  app.add_option("--trace", traces,
                 "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
                 "decode trace)")
      ->check(CLI::ExistingPath);
  app.add_option("--batch", batch, "B, concurrent sequences per step (default: 64 for 8-expert models, else 32)");
  app.add_option("--alpha", alpha, "EMA weight of the newest step (seed 001 Eq. 8)")->check(CLI::Range(0.01, 1.0));
  app.add_option("--exact-nodes", exact_nodes, "Node limit of the exact solver per (step, layer)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}));
  CLI11_PARSE(app, argc, argv);
  if (traces.empty()) {
    traces.push_back((here / "examples" / "traces" / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace").string());
    const fs::path mixtral = here / ".." / "shared" / "traces" / "mixtral-8x7b-decode" / "humaneval_2_routing.jsonl";
    if (fs::exists(mixtral)) {
      traces.push_back(mixtral.string());
    } else {
      std::cout << "note: " << mixtral.string() << " not found; replaying the bundled trace only\n";
    }
  }
  try {
    bool first = true;
    for (const auto& t : traces) {
      if (!first) std::cout << '\n';
      first = false;
      run(t, batch, alpha, exact_nodes);
    }
  } catch (const std::exception& e) {
    std::cerr << "trimoe: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
