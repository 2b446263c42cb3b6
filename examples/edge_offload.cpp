// edge_offload — the importance-driven expert scheduler of Edge-MoE against its baselines on
// recorded decode routing on the timed model, priced on the paper's three edge settings
// (drivers/edge_offload.hpp).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/edge_offload.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;

int main(int argc, char** argv) {
  CLI::App app{
      "Importance-driven expert scheduling on the edge (Edge-MoE) against its baselines on the timed model, "
      "on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::edge_offload::options opt;
  app.add_option("--trace", traces,
                 "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
                 "decode trace)")
      ->check(CLI::ExistingPath);
  app.add_option("--batch", opt.batches, "Concurrent decode streams to run (default: 1 3)")->check(CLI::Range(1u, 64u));
  app.add_option("--alpha", opt.alphas, "Router thresholds alpha of the sweep (default: 0.1 0.2 0.3 0.4 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--fraction", opt.fractions,
                 "Cache sizes, as fractions of all experts, for a model that fits the GPU whole (default: 0.25 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  opt.jobs = examples::default_jobs();
  app.add_option("--jobs", opt.jobs,
                 "Threads the systems of each lockstep replay share (default: the machine's hardware threads); the "
                 "output does not depend on it")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
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
