// trimoe — TriMoE's GPU + AMX-CPU + DIMM-NDP system (TriMoE §4.2–4.3, §5.1.2, §5.2 Tab. 3,
// §5.3 Fig. 8) replayed on batched decode steps of recorded traces on the timed model, beside
// its baselines (Klotski-, En-KTransformers- and MoNDE-like), its ablation (+CPU,
// +Refinement, +Relayout), the improved and exact solvers and the bounds. The replay and its
// modelling choices are in moepolicy/sim/trimoe_replay.hpp; the tables in drivers/trimoe.cpp.
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/trimoe.hpp"
#include "moepolicy/io/machine_json.hpp"

namespace fs = std::filesystem;

int main(int argc, char** argv) {
  CLI::App app{
      "TriMoE GPU + AMX-CPU + DIMM-NDP serving on the timed model, on batched decode steps of recorded "
      "routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  std::string machine;
  moepolicy::examples::trimoe::options opt;
  app.add_option("--trace", traces,
                 "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
                 "decode trace)")
      ->check(CLI::ExistingPath);
  app.add_option("--machine", machine,
                 "A machine file (docs/machine.md): its gpu, cpu and dimm_ndp roles replace the TriMoE presets")
      ->check(CLI::ExistingFile);
  app.add_option("--batch", opt.batch,
                 "B, concurrent sequences per step (default: 64 for 8-expert models, else 32, halved until the trace "
                 "gives 3 steps)");
  app.add_option("--alpha", opt.alpha, "EMA weight of the newest step (TriMoE Eq. 8)")->check(CLI::Range(0.01, 1.0));
  app.add_option("--hot-share", opt.classes.hot_share,
                 "Hot experts: the most-loaded head holding this share of a layer's tokens (default 0.22, TriMoE "
                 "Sec. 3.1)")
      ->check(CLI::Range(0.001, 1.0));
  app.add_option("--cold-share", opt.classes.cold_share,
                 "Cold experts: the least-loaded tail within this share of a layer's tokens (default 0.08)")
      ->check(CLI::Range(0.0, 1.0));
  std::string compute = "profiled";
  app.add_option("--compute", compute, "Expert compute on GPU and CPU: profiled (default) or roofline")
      ->check(CLI::IsMember({"profiled", "roofline"}));
  app.add_option("--prompt-tokens", opt.prompt_tokens,
                 "Tokens each sequence has cached before the first batched step (default 512)");
  app.add_option("--exact-nodes", opt.exact_nodes, "Node limit of the exact solver per (step, layer)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1'000'000'000}));
  std::string window = "attention-mlp";
  app.add_option("--window", window,
                 "Sec. 4.3 overlap window: attention-mlp (default: the GPU's attention + MLP time of the layer), "
                 "moe-span (the layer's MoE span x --window-scale) or fixed (--window-seconds)")
      ->check(CLI::IsMember({"attention-mlp", "moe-span", "fixed"}));
  app.add_option("--window-scale", opt.window_scale, "Multiplier of the MoE span for --window moe-span (default 1)")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--window-seconds", opt.window_seconds, "The window for --window fixed, seconds")
      ->check(CLI::Range(0.0, 1e6));
  app.add_option("--gpu-slots", opt.gpu_slots,
                 "GPU copies per layer (default 0: the warm-up's hot experts, within HBM)");
  bool no_sweep = false;
  app.add_flag("--no-sweep", no_sweep, "Skip the threshold sweep and the second window reading");
  opt.jobs = moepolicy::examples::default_jobs();
  app.add_option("--jobs", opt.jobs,
                 "Threads the independent replays share (the tables' systems, the second window reading, each point "
                 "of the sweep; default: the machine's hardware threads); the output does not depend on it")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  CLI11_PARSE(app, argc, argv);
  opt.sweep = !no_sweep;
  opt.compute =
      compute == "roofline" ? moepolicy::trimoe_compute_model::roofline : moepolicy::trimoe_compute_model::profiled;
  opt.window = window == "moe-span" ? moepolicy::trimoe_window::moe_span
               : window == "fixed"  ? moepolicy::trimoe_window::fixed
                                    : moepolicy::trimoe_window::attention_mlp;
  namespace ex = moepolicy::examples;
  if (traces.empty()) {
    traces = ex::bundled_and_shared(here, ex::shared_trace(here, "mixtral-8x7b-decode", "humaneval_2_routing.jsonl"));
  }
  return ex::run_each("trimoe", traces, [&](const std::string& t) {
    if (!machine.empty()) {
      const moepolicy::io::machine_description m = moepolicy::io::read_machine(machine);
      if (m.gpu) opt.gpu = *m.gpu;
      if (m.cpu) opt.cpu = *m.cpu;
      if (m.dimm_ndp) opt.ndp = *m.dimm_ndp;
    }
    static_cast<void>(ex::trimoe::run(t, opt, std::cout));
  });
}
