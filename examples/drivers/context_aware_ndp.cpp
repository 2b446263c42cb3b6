// The context-aware GPU + CXL-NDP comparison of the context_aware_ndp driver (see
// drivers/context_aware_ndp.hpp).
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "drivers/context_aware_ndp.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/io/tables_json.hpp"
#include "moepolicy/sim/gpu_ndp_replay.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace moepolicy::examples::context_aware_ndp {

namespace fs = std::filesystem;

void run(const fs::path& path, const options& opt, std::ostream& out) {
  const fs::path& loss_path = opt.loss_table;
  const std::size_t gpu_experts = opt.gpu_experts;
  const double alpha = opt.alpha;
  const bool per_layer = opt.per_layer;
  const routing_trace trace = io::read_trace(path);
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  std::optional<loss_table> table;
  if (!loss_path.empty() && fs::exists(loss_path)) {
    loss_table t = io::read_quant_loss_json(loss_path);
    if (t.num_layers() == trace.info().num_layers && t.num_experts() == trace.info().num_experts) table = std::move(t);
  }
  const std::size_t K = gpu_experts == 0 ? trace.info().num_experts / 2 : gpu_experts;

  const gpu_ndp_system<roofline_cost, roofline_cost> system{roofline_cost{opt.gpu, *shape},
                                                            roofline_cost{opt.ndp, *shape}};
  std::vector<gpu_ndp_system_config> systems;
  if (table) {
    systems.push_back({"context-aware, avg 3 bits", gpu_ndp_system_kind::context_aware, 3.0});
    systems.push_back({"context-aware, avg 2 bits", gpu_ndp_system_kind::context_aware, 2.0});
  }
  systems.push_back({"uniform 3 bits (no selector)", gpu_ndp_system_kind::uniform_bits, 3.0, bitwidth{3}});
  systems.push_back({"uniform 2 bits (no selector)", gpu_ndp_system_kind::uniform_bits, 2.0, bitwidth{2}});
  systems.push_back({table ? "static whole-trace, avg 2 bits" : "static whole-trace, 2 bits",
                     gpu_ndp_system_kind::static_placement, 2.0, bitwidth{2}});
  systems.push_back({"on-demand GPU-NDP (MoNDE), FP16", gpu_ndp_system_kind::on_demand});
  systems.push_back({"GPU-only, fetch on miss, FP16", gpu_ndp_system_kind::gpu_only});

  const auto results = replay_gpu_ndp(trace, system, table ? &*table : nullptr, systems,
                                      {.gpu_experts_per_layer = K, .importance = {.alpha = alpha}});

  out << "trace: " << path.string() << '\n'
      << "  model " << shape->name << ", " << trace.info().num_layers << " layers x " << trace.info().num_experts
      << " experts, top-" << trace.info().top_k << "; GPU holds K = " << K << " experts per layer\n"
      << "  devices: " << system.gpu().name() << " + " << system.ndp().name()
      << "; loss table: " << (table ? loss_path.string() : std::string("none for this model")) << '\n';
  if (results.empty()) {
    out << "  no request has both prefill and decode steps: nothing to replay\n";
    return;
  }
  out << "  prefill <-> decode cosine similarity of expert activations (seed 000 Sec. 3.2 reports 0.89):\n";
  examples::text_table sim({"request", "prefill tokens", "mean over layers", "min layer", "max layer"});
  for (const auto& r : results) {
    const defined_summary d = summarize_defined(r.similarity);
    sim.add({r.name, std::to_string(r.prefill_tokens), fixed(d.mean, 3), fixed(d.min, 3), fixed(d.max, 3)});
  }
  sim.print(out, "    ");
  if (per_layer) {
    for (const auto& r : results) {
      out << "    " << r.name << " per layer:";
      for (double s : r.similarity) out << ' ' << (std::isnan(s) ? std::string("n/a") : fixed(s, 2));
      out << '\n';
    }
  }

  std::vector<gpu_ndp_outcome> total(systems.size());
  for (const auto& r : results) {
    for (std::size_t i = 0; i < systems.size(); ++i) total[i] += r.outcomes[i];
  }
  out << "  decode over " << results.size() << " request(s), " << total.front().decode_steps
      << " decode steps (per-token times are per decode step):\n";
  examples::text_table t(
      {"system", "ms/token", "NDP ms/token", "speed-up", "MB migrated", "mean loss", "prefix/exact"});
  const double baseline = total.back().seconds_per_token();
  for (std::size_t i = 0; i < systems.size(); ++i) {
    const auto& o = total[i];
    const std::string loss = table ? fixed(o.mean_loss(), 1) : "n/a";
    const std::string gap =
        o.exact_objective > 0.0 ? fixed(o.prefix_objective / o.exact_objective, 4) : std::string("-");
    t.add({systems[i].label, fixed(o.seconds_per_token() * 1e3, 3), fixed(o.ndp_seconds_per_token() * 1e3, 3),
           fixed(baseline / o.seconds_per_token(), 2) + "x", fixed(static_cast<double>(o.migrated_bytes) / 1e6, 1),
           loss, gap});
  }
  t.print(out, "    ");
  out << "  speed-up is against GPU-only; mean loss is L(l, e, b) per decode expert activation (FP16: 0);\n"
         "  prefix/exact is prefix split's loss over the exact allocation's at the same budget.\n";
}

}  // namespace moepolicy::examples::context_aware_ndp
