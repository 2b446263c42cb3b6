// trimoe — TriMoE's GPU + AMX-CPU + DIMM-NDP scheduling (seed 001 "TriMoE: Augmenting GPU
// with AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE Inference via Offloading",
// §4.2–4.3, §5.2 Tab. 3, §5.3 Fig. 8) replayed on batched decode steps of recorded traces,
// beside its baselines, its ablation (+CPU, +Refinement, +Relayout), the lower bound and
// the exact optimum. The replay and its modelling choices are in
// moepolicy/sim/trimoe_replay.hpp; the tables in drivers/trimoe.cpp.
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/trimoe.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{"TriMoE GPU + AMX-CPU + DIMM-NDP scheduling (seed 001) on batched decode steps of recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  moepolicy::examples::trimoe::options opt;
  app.add_option("--trace", traces,
                 "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
                 "decode trace)")
      ->check(CLI::ExistingPath);
  app.add_option("--batch", opt.batch, "B, concurrent sequences per step (default: 64 for 8-expert models, else 32)");
  app.add_option("--alpha", opt.alpha, "EMA weight of the newest step (seed 001 Eq. 8)")->check(CLI::Range(0.01, 1.0));
  app.add_option("--exact-nodes", opt.exact_nodes, "Node limit of the exact solver per (step, layer)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}));
  app.add_option("--window-scale", opt.window_scale,
                 "+Relayout overlap window as a multiple of the layer's executed MoE makespan (default 1)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--window-seconds", opt.window_seconds,
                 "+Relayout overlap window in seconds, fixed for every plan (overrides --window-scale when > 0)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--gpu-slots", opt.gpu_slots,
                 "+Relayout experts per layer in GPU HBM (default 0: as many as the class layout holds)");
  CLI11_PARSE(app, argc, argv);
  namespace ex = moepolicy::examples;
  if (traces.empty()) {
    traces = ex::bundled_and_shared(here, ex::shared_trace(here, "mixtral-8x7b-decode", "humaneval_2_routing.jsonl"));
  }
  return ex::run_each("trimoe", traces,
                      [&](const std::string& t) { static_cast<void>(ex::trimoe::run(t, opt, std::cout)); });
}
