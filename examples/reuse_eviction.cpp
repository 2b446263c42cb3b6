// SPDX-License-Identifier: Apache-2.0
// reuse_eviction — eviction that predicts reuse (Hawkeye-style learning from Belady's MIN on
// the past; predicted time to next use) beside LRU, LFU, score-aware, HybriMoE-like and MIN,
// per-layer and shared, at every capacity, on every real trace (drivers/reuse_eviction.hpp).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/reuse_eviction.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;

int main(int argc, char** argv) {
  CLI::App app{"Eviction that predicts reuse beside LRU, LFU, score-aware, HybriMoE-like and Belady's MIN"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::reuse_eviction::options opt;
  app.add_option("--trace", traces,
                 "Traces to replay (default: the bundled Granite trace, and with --all-shared every real trace of "
                 "../shared/traces that can be read)")
      ->check(CLI::ExistingPath);
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
  opt.jobs = examples::default_jobs();
  app.add_option("--jobs", opt.jobs,
                 "Threads the timed prefetching table's walks share (default: the machine's hardware threads); the "
                 "output does not depend on it")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
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
