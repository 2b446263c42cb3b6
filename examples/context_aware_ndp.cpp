// context_aware_ndp — the context-aware GPU + CXL-NDP system of Context-Aware GPU-NDP replayed
// on recorded routing on the timed model, beside its baselines (what it computes:
// drivers/context_aware_ndp.hpp).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/context_aware_ndp.hpp"
#include "moepolicy/io/machine_json.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;

int main(int argc, char** argv) {
  CLI::App app{"Context-aware GPU + CXL-NDP placement and mixed precision (Context-Aware GPU-NDP) on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  examples::context_aware_ndp::options opt;
  std::string loss = (here / ".." / "shared" / "traces" / "mixtral-8x7b-mc" / "mixtral_quant_loss.json").string();
  std::string calibration =
      (here / ".." / "shared" / "traces" / "mixtral-8x7b-mc" / "mixtral_c4_expert_activation.json").string();
  app.add_option("--trace", traces,
                 "Traces to replay (default: the bundled Granite trace and, when ../shared is present, the Mixtral "
                 "prefill+decode request)")
      ->check(CLI::ExistingPath);
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
