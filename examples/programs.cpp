// The command lines of the driver programs (examples/<name>.cpp, each of which calls its
// function here): their options, the defaults of their traces, and the driver they run
// (drivers/<name>.hpp). In one source because CLI11 is header-only: each source that
// includes it compiles its parser again (about 10 s of g++ -O2 each).
#include <cstddef>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/context_aware_ndp.hpp"
#include "drivers/cxl_prefetch.hpp"
#include "drivers/dynaexq.hpp"
#include "drivers/edge_offload.hpp"
#include "drivers/reuse_eviction.hpp"
#include "drivers/trimoe.hpp"
#include "moepolicy/io/machine_json.hpp"
#include "programs.hpp"

namespace fs = std::filesystem;

namespace moepolicy::examples::programs {
namespace {

/// `--trace`: the traces to replay, each a file or folder that exists.
void add_traces(CLI::App& app, std::vector<std::string>& traces, const std::string& help) {
  app.add_option("--trace", traces, help)->check(CLI::ExistingPath);
}

/// `--jobs`: the threads the replays share, 1 to 4096; the machine's hardware threads unless
/// given (`default_jobs`).
void add_jobs(CLI::App& app, std::size_t& jobs, const std::string& help) {
  jobs = default_jobs();
  app.add_option("--jobs", jobs, help)->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
}

}  // namespace

int context_aware_ndp_main(int argc, char** argv) {
  CLI::App app{"Context-aware GPU + CXL-NDP placement and mixed precision (Context-Aware GPU-NDP) on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::context_aware_ndp::options opt;
  std::string loss = (here / ".." / "shared" / "traces" / "mixtral-8x7b-mc" / "mixtral_quant_loss.json").string();
  std::string calibration =
      (here / ".." / "shared" / "traces" / "mixtral-8x7b-mc" / "mixtral_c4_expert_activation.json").string();
  add_traces(app, traces,
             "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
             "prefill+decode request)");
  app.add_option("--loss-table", loss, "Quantisation loss table (MC-MoE JSON) for the model's experts");
  app.add_option("--calibration", calibration,
                 "Calibration statistics (MC-MoE activation JSON) for the static placement and the initial GPU set "
                 "(without a matching file, a trace of several requests calibrates on its first request)");
  app.add_option("--gpu-experts", opt.gpu_experts, "K, experts per layer on the GPU (default: half of them)");
  app.add_option("--alpha", opt.alpha, "Importance weight of activation counts against routing-score sums")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--per-layer", opt.per_layer, "Also print the similarity of every layer");
  std::string machine;
  app.add_option(
         "--machine", machine,
         "A machine file (docs/machine.md): its gpu and cxl_ndp roles replace the Context-Aware GPU-NDP presets")
      ->check(CLI::ExistingFile);
  bool no_projection = false;
  app.add_flag("--no-projection", no_projection, "Skip the projection over prompt and output lengths");
  CLI11_PARSE(app, argc, argv);
  opt.loss_table = loss;
  opt.calibration = calibration;
  opt.projection = !no_projection;
  if (traces.empty()) {
    traces =
        examples::bundled_and_shared(here, examples::shared_trace(here, "mixtral-8x7b-decode", "routing_raw.jsonl"));
  }
  return examples::run_each("context_aware_ndp", traces, [&](const std::string& t) {
    if (!machine.empty()) {
      const io::machine_description m = io::read_machine(machine);
      if (m.gpu) opt.gpu = *m.gpu;
      if (m.cxl_ndp) opt.ndp = *m.cxl_ndp;
    }
    examples::context_aware_ndp::run(t, opt, std::cout);
  });
}

int cxl_prefetch_main(int argc, char** argv) {
  CLI::App app{
      "CXL-MoE: a timed expert cache with short-horizon prefetch over CXL vs PCIe, with concurrent decode "
      "streams, on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::cxl_prefetch::options opt;
  add_traces(app, traces,
             "Traces to replay (default: the shared Mixtral-8x7B decode trace when ../shared is present, else the "
             "bundled Granite trace)");
  auto* gb = app.add_option("--cache-gb", opt.cache_gb,
                            "GPU expert cache sizes in GB (10^9 bytes) of FP16 experts "
                            "(default: a list suited to the model)");
  app.add_option("--cache-experts", opt.cache_experts, "GPU expert cache sizes in experts")->excludes(gb);
  app.add_option("--concurrency", opt.concurrency, "Concurrent decode streams B of the sweep (default: 1 4 8 16 32)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  app.add_option("--history", opt.history, "m, the last tokens of a stream CXL-MoE's predictor reads")
      ->check(CLI::Range(1, 65536));
  app.add_option("--lookahead", opt.lookahead, "n, the tokens ahead CXL-MoE's predictor covers (also its sticky steps)")
      ->check(CLI::Range(1, 65536));
  std::string predictor = "frequency";
  app.add_option("--predictor", predictor, "CXL-MoE's predictor: frequency or markov")
      ->capture_default_str()
      ->check(CLI::IsMember({"frequency", "markov"}));
  add_jobs(app, opt.jobs,
           "Threads the systems of each lockstep replay share (default: the machine's hardware threads); the "
           "output does not depend on it");
  CLI11_PARSE(app, argc, argv);
  opt.predictor = predictor == "markov" ? offload_predictor::markov : offload_predictor::frequency;
  if (traces.empty()) {
    const fs::path shared = examples::shared_trace(here, "mixtral-8x7b-decode", "humaneval_2_routing.jsonl");
    if (fs::exists(shared)) {
      traces.push_back(shared.string());
    } else {
      std::cerr << "note: " << shared.string() << " not found; replaying the bundled Granite trace\n";
      traces.push_back(examples::bundled_granite(here).string());
    }
  }
  return examples::run_each("cxl_prefetch", traces,
                            [&](const std::string& t) { examples::cxl_prefetch::run(t, opt, std::cout); });
}

int dynaexq_main(int argc, char** argv) {
  CLI::App app{"DynaExq: hotness-driven FP16/4-bit expert residency on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::string trace = examples::bundled_granite(here).string();
  examples::dynaexq::options opt;
  app.add_option("--trace", trace,
                 "Trace with *-cal-* and *-eval-* requests (else: the first half of the requests calibrate)")
      ->check(CLI::ExistingPath)
      ->capture_default_str();
  app.add_option("--interval-ms", opt.interval_ms, "Hotness update interval, ms of modelled time")
      ->check(CLI::Range(1e-3, 1e6))
      ->capture_default_str();
  app.add_option("--step-ms", opt.step_ms, "Modelled time of one forward pass, in ms")
      ->check(CLI::Range(1e-3, 1e3))
      ->capture_default_str();
  app.add_option("--link-gbps", opt.link_gbps, "Host-to-device link bandwidth, GB/s")
      ->check(CLI::Range(1e-3, 1e4))
      ->capture_default_str();
  app.add_option("--alpha", opt.alpha, "Hotness EMA weight of the interval just ended")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--margin", opt.margin, "Additive hysteresis margin, in shares of a layer's selections")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--slack", opt.slack, "Rank slack, in ranks")->capture_default_str();
  app.add_option("--staging", opt.staging,
                 "Staging blocks k of the temporary pool (demotions that may run ahead of promotions)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  app.add_option("--phase-repeats", opt.phase_repeats,
                 "Times each serving request is replayed back to back in the phased stream")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}))
      ->capture_default_str();
  app.add_option("--series-points", opt.series_points,
                 "Most points of each per-interval series the plots draw (>= 1): more update intervals are merged, "
                 "consecutive ones, into each point")
      ->capture_default_str();
  app.add_flag("--admit-at-issue", opt.admit_at_issue,
               "Reserve a transition's budget when it is issued, not when it is requested (DynaExq §3.4)");
  app.add_flag("--resolve-each-access", opt.resolve_each_access,
               "Resolve every routed expert through its handle (the general path; the same results, slower)");
  bool no_shared_replays = false;
  app.add_flag("--no-shared-replays", no_shared_replays,
               "Run every table row's replay on its own, also where another row runs the same one (the general path; "
               "the same results, slower)");
  app.add_option("--sweep-margins", opt.sweep_margins, "Margins of the margin sweep")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--sweep-alphas", opt.sweep_alphas, "EMA factors of the EMA sweep")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--sweep-intervals-ms", opt.sweep_intervals_ms, "Update intervals of the interval sweep, ms")
      ->check(CLI::Range(1e-3, 1e6))
      ->capture_default_str();
  add_jobs(app, opt.jobs,
           "Threads the groups of replays share (replays with the same hotness inputs step together as one "
           "group; default: the machine's hardware threads); the output does not depend on it");
  CLI11_PARSE(app, argc, argv);
  opt.share_equal_replays = !no_shared_replays;
  try {
    static_cast<void>(examples::dynaexq::run(trace, opt, std::cout));
  } catch (const std::exception& e) {
    std::cerr << "dynaexq: " << e.what() << '\n';
    return 1;
  }
  return 0;
}

int edge_offload_main(int argc, char** argv) {
  CLI::App app{
      "Importance-driven expert scheduling on the edge (Edge-MoE) against its baselines on the timed model, "
      "on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::edge_offload::options opt;
  add_traces(app, traces,
             "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
             "decode trace)");
  app.add_option("--batch", opt.batches, "Concurrent decode streams to run (default: 1 3)")->check(CLI::Range(1u, 64u));
  app.add_option("--alpha", opt.alphas, "Router thresholds alpha of the sweep (default: 0.1 0.2 0.3 0.4 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fraction", opt.fractions,
                 "Cache sizes, as fractions of all experts, for a model that fits the GPU whole (default: 0.25 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  add_jobs(app, opt.jobs,
           "Threads the systems of each lockstep replay share (default: the machine's hardware threads); the "
           "output does not depend on it");
  CLI11_PARSE(app, argc, argv);
  if (traces.empty()) {
    traces = examples::bundled_and_shared(
        here, examples::shared_trace(here, "mixtral-8x7b-decode", "humaneval_2_routing.jsonl"));
  }
  try {
    examples::edge_offload::print_settings(opt, std::cout);
    for (const auto& t : traces) {
      std::cout << '\n';
      examples::edge_offload::run(t, opt, std::cout);
    }
  } catch (const std::exception& e) {
    std::cerr << "edge_offload: " << e.what() << '\n';
    return 1;
  }
  return 0;
}

int reuse_eviction_main(int argc, char** argv) {
  CLI::App app{"Eviction that predicts reuse beside LRU, LFU, score-aware, HybriMoE-like and Belady's MIN"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::reuse_eviction::options opt;
  add_traces(app, traces,
             "Traces to replay (default: the bundled Granite trace, and with --all-shared every real trace of "
             "../shared/traces that can be read)");
  bool all_shared = false;
  app.add_flag("--all-shared", all_shared, "Also replay every shared trace present");
  app.add_option("--capacity", opt.capacities, "Capacities per layer in experts (default: every one, or E/32 steps)");
  std::string scope = "both";
  app.add_option("--scope", scope, "per-layer, shared or both")->check(CLI::IsMember({"per-layer", "shared", "both"}));
  app.add_flag("--counts", opt.counts, "Print hit counts instead of ratios");
  bool no_prefetch = false, no_bytes = false, no_timed = false;
  app.add_flag("--no-prefetch", no_prefetch, "Skip the prefetching table");
  app.add_flag("--no-timed", no_timed, "Skip the timed prefetching table");
  app.add_flag("--no-bytes", no_bytes, "Skip the byte-capacity table");
  add_jobs(app, opt.jobs,
           "Threads the timed prefetching table's walks share (default: the machine's hardware threads); the "
           "output does not depend on it");
  CLI11_PARSE(app, argc, argv);
  opt.per_layer = scope != "shared";
  opt.shared = scope != "per-layer";
  opt.prefetch = !no_prefetch;
  opt.timed = !no_timed;
  opt.byte_capacity = !no_bytes;
  if (traces.empty()) traces.push_back(examples::bundled_granite(here).string());
  if (all_shared) {
    for (const auto& [folder, name] :
         std::vector<std::pair<std::string, std::string>>{{"mixtral-8x7b-decode", "humaneval_2_routing.jsonl"},
                                                          {"mixtral-8x7b-decode", "routing_raw.jsonl"},
                                                          {"flame-moe-290m", ""},
                                                          {"warp-olmoe-kimi", "trace_olmoe_299.jsonl"},
                                                          {"warp-olmoe-kimi", "trace_kimi_300.jsonl"}}) {
      const fs::path p = examples::shared_trace(here, folder, name);
      if (fs::exists(p)) {
        traces.push_back(p.lexically_normal().string());
      } else {
        std::cerr << "note: " << p.string() << " not found\n";
      }
    }
  }
  return examples::run_each("reuse_eviction", traces, [&](const std::string& t) {
    fs::path label = fs::path(t).filename();
    if (label.empty()) label = fs::path(t).parent_path().filename();
    examples::reuse_eviction::run(examples::reuse_eviction::load(t), label.string(), opt, std::cout);
  });
}

int trimoe_main(int argc, char** argv) {
  CLI::App app{
      "TriMoE GPU + AMX-CPU + DIMM-NDP serving on the timed model, on batched decode steps of recorded "
      "routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  std::string machine;
  moepolicy::examples::trimoe::options opt;
  add_traces(app, traces,
             "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
             "decode trace)");
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
  add_jobs(app, opt.jobs,
           "Threads the independent replays share (the tables' systems, the second window reading, each point "
           "of the sweep; default: the machine's hardware threads); the output does not depend on it");
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

}  // namespace moepolicy::examples::programs
