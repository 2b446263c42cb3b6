// cxl_prefetch — CXL-MoE replayed on recorded routing on the timed model of serving: the
// expert cache by size, its ablations, CXL against PCIe host DRAM, and concurrent streams
// (drivers/cxl_prefetch.hpp).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/cxl_prefetch.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;

int main(int argc, char** argv) {
  CLI::App app{
      "CXL-MoE: a timed expert cache with short-horizon prefetch over CXL vs PCIe, with concurrent decode "
      "streams, on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::cxl_prefetch::options opt;
  app.add_option("--trace", traces,
                 "Traces to replay (default: the shared Mixtral-8x7B decode trace when ../shared is present, else the "
                 "bundled Granite trace)")
      ->check(CLI::ExistingPath);
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
  opt.jobs = examples::default_jobs();
  app.add_option("--jobs", opt.jobs,
                 "Threads the systems of each lockstep replay share (default: the machine's hardware threads); the "
                 "output does not depend on it")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
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
