// The trimoe driver's replay and tables (see drivers/trimoe.hpp and
// moepolicy/sim/trimoe_replay.hpp for the model).
#include "drivers/trimoe.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/sched/batched_steps.hpp"

namespace moepolicy::examples::trimoe {

namespace {

namespace fs = std::filesystem;

std::string pct(double x) { return fixed(100.0 * x, 1) + " %"; }
std::string us(double s) { return fixed(s * 1e6, 1); }
std::string ms(double s) { return fixed(s * 1e3, 3); }

constexpr std::size_t num_systems = num_trimoe_systems;

/// Per replayed step: each system's time (Σ over layers) and, for the two +Relayout rows,
/// the activated experts that ran from a localized layout.
struct step_figures {
  std::array<seconds, num_systems> makespan{};
  std::array<std::size_t, 2> localized{};
};

/// Replays every step, keeping the figures of each replayed step.
std::vector<step_figures> replay_by_step(trimoe_replayer& r) {
  std::vector<step_figures> steps;
  std::array<seconds, num_systems> sum{};
  std::array<std::size_t, 2> localized{};
  while (!r.done()) {
    r.replay_step();
    const trimoe_result now = r.result();
    if (now.replayed_steps == 0) continue;
    const auto n = static_cast<double>(now.replayed_steps);
    step_figures f;
    for (std::size_t s = 0; s < num_systems; ++s) {
      const seconds total = now.systems[s].step.makespan * n;
      f.makespan[s] = total - sum[s];
      sum[s] = total;
    }
    const std::size_t active[2] = {now.relayout.localized_active, now.relayout_benefit.localized_active};
    for (std::size_t k = 0; k < 2; ++k) {
      f.localized[k] = active[k] - localized[k];
      localized[k] = active[k];
    }
    steps.push_back(f);
  }
  return steps;
}

const char* long_name(trimoe_system s) {
  switch (s) {
    case trimoe_system::gpu_only:
      return "GPU-only (fetch misses over PCIe)";
    case trimoe_system::gpu_cpu:
      return "GPU+CPU, greedy";
    case trimoe_system::gpu_ndp:
      return "GPU+NDP (MoNDE-like), greedy";
    case trimoe_system::greedy:
      return "TriMoE +CPU (greedy)";
    case trimoe_system::refined:
      return "TriMoE +Refinement (paper)";
    case trimoe_system::relayout:
      return "TriMoE +Relayout/rebalancing";
    case trimoe_system::relayout_benefit:
      return "TriMoE +Relayout (benefit rule)";
    case trimoe_system::improved:
      return "TriMoE improved (local search)";
    case trimoe_system::exact:
      return "exact optimum (best found)";
  }
  return "?";
}

const char* short_name(trimoe_system s) {
  switch (s) {
    case trimoe_system::gpu_only:
      return "GPU-only";
    case trimoe_system::gpu_cpu:
      return "GPU+CPU";
    case trimoe_system::gpu_ndp:
      return "GPU+NDP";
    case trimoe_system::greedy:
      return "+CPU";
    case trimoe_system::refined:
      return "+Refine";
    case trimoe_system::relayout:
      return "+Relayout";
    case trimoe_system::relayout_benefit:
      return "+RL benefit";
    case trimoe_system::improved:
      return "improved";
    case trimoe_system::exact:
      return "exact";
  }
  return "?";
}

/// Seed 001 Tab. 3 (GPU / CPU / NDP compute utilisation) for the system each row stands for.
const char* paper_use(trimoe_system s) {
  switch (s) {
    case trimoe_system::gpu_only:
      return "Klotski 28.6 / - / -";
    case trimoe_system::gpu_cpu:
      return "En-KTransformers 57.6 / 42.0 / -";
    case trimoe_system::gpu_ndp:
      return "MoNDE 33.9 / - / 70.1";
    case trimoe_system::relayout:
      return "TriMoE 66.0 / 74.9 / 87.8";
    default:
      return "-";
  }
}

void print_header(const fs::path& path, const routing_trace& trace, const model_shape& shape, const trimoe_replayer& r,
                  const options& opt, std::ostream& out) {
  const auto& sys = r.system();
  const std::size_t S = r.num_steps(), D = r.num_dimms();
  const std::size_t B = opt.batch != 0 ? opt.batch : trimoe_default_batch(trace.info().num_experts);
  out << "trace: " << path.string() << '\n'
      << "  model " << shape.name << ", " << r.num_layers() << " layers x " << r.num_experts() << " experts, top-"
      << trace.info().top_k << "; FP16 weights\n"
      << "  devices: " << sys.gpu().name() << " + " << sys.cpu().name() << " + " << D << " x " << sys.dimm().name()
      << '\n'
      << "  steps: B = " << B << " concurrent sequences -> " << S << " batched decode steps; step 0 warms the "
      << "predictor, steps 1.." << (S == 0 ? 0 : S - 1) << " replayed\n"
      << "  layout: EMA (alpha = " << fixed(opt.alpha, 2) << ") classes of the previous step: hot GPU-resident, "
      << "warm striped, cold localized on DIMM (l*E+e) mod " << D << ";\n"
      << "          re-derived every step at no charge; GPU-only and GPU+CPU keep the residency and stripe every "
      << "other expert\n"
      << "  +Relayout: step 1's class layout, then only the migration planner's taken tasks (prefetch, relayout, "
      << "rebalance),\n"
      << "          planned after each (step, layer) for the layer's next step within ";
  if (opt.window_seconds > 0.0) {
    out << ms(opt.window_seconds) << " ms";
  } else {
    out << fixed(opt.window_scale, 2) << " x the layer's executed MoE makespan (attention left out: conservative)";
  }
  out << ",\n          PCIe and DIMM-Link sharing it; HBM experts per layer: ";
  if (opt.gpu_slots != 0) {
    out << opt.gpu_slots;
  } else {
    out << "as many as the class layout holds (the predicted-hot count)";
  }
  out << '\n'
      << "  +Relayout relayouts by predicted class (warm/hot localized -> striped, cold striped -> localized); "
      << "+Relayout (benefit rule)\n"
      << "          runs the same machinery on its own state but proposes striping any localized expert and "
      << "localizing any\n"
      << "          striped expert not predicted hot; both keep a relayout only when the predicted step gains\n";
}

void print_layers(const trimoe_result& res, std::ostream& out) {
  out << "  per MoE layer, us per batched step (averaged over the " << res.replayed_steps
      << " replayed steps); device split of +Relayout (RL, Eq. 5-6):\n";
  std::vector<std::string> head{"layer"};
  for (std::size_t s = 0; s < num_systems; ++s) head.emplace_back(short_name(static_cast<trimoe_system>(s)));
  for (const char* h : {"bound", "|", "RL GPU", "RL CPU", "RL max DIMM", "RL mean DIMM"}) head.emplace_back(h);
  text_table t(head);
  const auto& rl = res[trimoe_system::relayout];
  for (std::size_t l = 0; l < res.num_layers; ++l) {
    std::vector<std::string> row{std::to_string(l)};
    for (std::size_t s = 0; s < num_systems; ++s) row.push_back(us(res.systems[s].layers[l].makespan));
    row.push_back(us(res.layer_bound[l]));
    row.emplace_back("|");
    row.push_back(us(rl.layers[l].gpu));
    row.push_back(us(rl.layers[l].cpu));
    row.push_back(us(rl.layers[l].max_dimm));
    row.push_back(us(rl.layers[l].mean_dimm));
    t.add(std::move(row));
  }
  t.print(out, "    ");
}

void print_end_to_end(const trimoe_result& res, std::size_t exact_nodes, std::ostream& out) {
  const double steps = static_cast<double>(res.replayed_steps);
  const double problems_per_step = static_cast<double>(res.problems) / steps;
  out << "  end to end: " << res.problems << " (step, layer) problems; times per batched step are sums over the "
      << res.num_layers << " layers (one token per sequence), averaged over the " << res.replayed_steps
      << " replayed steps\n";
  text_table t({"system", "us/layer", "ms/step", "tok/s", "speed-up", "GPU ms", "CPU ms", "max DIMM ms", "mean DIMM ms",
                "gap to opt (mean/max)"});
  const double base = res[trimoe_system::gpu_only].step.makespan;
  for (std::size_t s = 0; s < num_systems; ++s) {
    const auto& a = res.systems[s];
    const std::string gap = a.has_gap && a.proven > 0 ? pct(a.gap_mean) + " / " + pct(a.gap_max) : std::string("-");
    t.add({long_name(a.system), us(a.step.makespan / problems_per_step), ms(a.step.makespan),
           fixed(static_cast<double>(res.batch) / a.step.makespan, 0), fixed(base / a.step.makespan, 2) + "x",
           ms(a.step.gpu), ms(a.step.cpu), ms(a.step.max_dimm), ms(a.step.mean_dimm), gap});
  }
  t.add({"lower bound (dual)", us(res.step_bound / problems_per_step), ms(res.step_bound), "-",
         fixed(base / res.step_bound, 2) + "x", "-", "-", "-", "-", "-"});
  t.print(out, "    ");
  const auto& rl = res.relayout;
  const auto& rb = res.relayout_benefit;
  out << "  exact: " << res.exact_proven << " of " << res.problems << " class-layout problems and " << rl.proven
      << " of " << res.problems << " +Relayout problems proven optimal within " << exact_nodes
      << " nodes; gaps are makespan / optimum - 1 over those (+Relayout against the optimum of its own layouts, "
      << ms(rl.exact_step_seconds) << " ms/step)\n"
      << "  exact, +Relayout (benefit rule): " << rb.proven << " of " << res.problems
      << " problems proven optimal; the optimum of its own layouts is " << ms(rb.exact_step_seconds) << " ms/step\n";
  const auto m = [&](trimoe_system s) { return res[s].step.makespan; };
  using enum trimoe_system;
  out << "  ablation (paper Fig. 8, batch 512: +CPU 1.75x, +Refinement 1.28x, +Relayout 1.16x): +CPU "
      << fixed(m(gpu_ndp) / m(greedy), 2) << "x over GPU+NDP, +Refinement " << fixed(m(greedy) / m(refined), 2)
      << "x, +Relayout " << fixed(m(refined) / m(relayout), 2) << "x (benefit rule "
      << fixed(m(refined) / m(relayout_benefit), 2) << "x); improved " << fixed(m(refined) / m(improved), 2)
      << "x over +Refinement\n";
}

void print_relayout(const trimoe_result& res, const trimoe_replayer& r, const std::vector<step_figures>& by_step,
                    trimoe_system row, std::ostream& out) {
  const bool literal = row == trimoe_system::relayout;
  const char* name = literal ? "+Relayout" : "+Relayout (benefit rule)";
  const auto& st = res.relayout_stats(row);
  const auto k = [&](migration_kind kind) {
    const auto i = static_cast<std::size_t>(kind);
    return std::to_string(st.taken[i]) + " of " + std::to_string(st.proposed[i]);
  };
  out << "  " << name << " planner: " << st.plans << " plans; taken of proposed: prefetch "
      << k(migration_kind::prefetch) << ", to striped " << k(migration_kind::relayout_to_striped) << ", to localized "
      << k(migration_kind::relayout_to_localized) << ", rebalance " << k(migration_kind::rebalance) << ";\n"
      << "          moved " << fixed(static_cast<double>(st.pcie_bytes) / 1e9, 2) << " GB over PCIe and "
      << fixed(static_cast<double>(st.link_bytes) / 1e9, 2) << " GB over DIMM-Link; window filled "
      << pct(st.window_seconds > 0.0 ? st.transfer_seconds / st.window_seconds : 0.0) << " on average, "
      << pct(st.max_fill) << " at most; " << st.evictions << " HBM residents dropped\n";

  // Where the row stands against GPU+CPU, from its per-domain times.
  const auto& rl = res[row];
  const auto& gc = res[trimoe_system::gpu_cpu];
  if (rl.step.makespan <= gc.step.makespan) {
    out << "  " << name << " is " << fixed(gc.step.makespan / rl.step.makespan, 2) << "x faster than GPU+CPU\n";
    return;
  }
  const double ndp_calc = rl.ndp.compute * rl.step.makespan;
  std::size_t dimm_bound = 0;
  for (const auto& x : rl.layers) dimm_bound += x.max_dimm >= std::max(x.gpu, x.cpu) ? std::size_t{1} : std::size_t{0};
  const auto& sys = r.system();
  const expert_key key{0, 0};
  out << "  " << name << " still trails GPU+CPU (" << ms(rl.step.makespan) << " vs " << ms(gc.step.makespan)
      << " ms/step). Per domain, summed over layers: max DIMM " << ms(rl.step.max_dimm) << ", GPU " << ms(rl.step.gpu)
      << ", CPU " << ms(rl.step.cpu) << " ms/step;\n"
      << "          the DIMMs average " << ms(rl.step.mean_dimm) << " ms/step busy, " << ms(ndp_calc)
      << " of it NDP compute: a DIMM bounds " << dimm_bound << " of " << res.num_layers << " layers.\n";
  if (st.localized_active == 0) return;
  const double tokens = static_cast<double>(st.localized_tokens) / static_cast<double>(st.localized_active);
  const auto typical = static_cast<std::uint32_t>(std::max(1.0, std::round(tokens)));
  if (literal) {
    out << "          The planner stripes only experts predicted warm or hot, so predicted-cold experts stay localized;"
        << " an activated\n"
        << "          localized expert";
  } else {
    const bytes w = sys.weight_bytes(key, fp16);
    out << "          The planner may stripe any localized expert the predicted step gains from, each move "
        << ms(sys.dimm().transfer_seconds(w)) << " ms over DIMM-Link\n"
        << "          within the window, starting from step 1's class layout (the same for both rows); an activated"
        << " localized expert";
  }
  out << " carries " << fixed(tokens, 1) << " tokens on average here: its DIMM's NDP runs " << typical << " tokens in "
      << ms(sys.ndp_seconds(key, fp16, typical)) << " ms and a host read of it takes "
      << ms(sys.dram_seconds(key, fp16, expert_layout::localized(0))) << " ms,\n"
      << "          against " << ms(sys.cpu_seconds(key, fp16, typical, expert_layout::striped()))
      << " ms on the CPU from a striped copy.\n";
  if (by_step.empty()) return;
  const auto list = [&](auto value) {
    std::string x;
    for (std::size_t i = 0; i < by_step.size(); ++i) x += (i == 0 ? "" : ", ") + value(by_step[i]);
    return x;
  };
  const std::size_t slot = literal ? 0 : 1;
  out << "          Per replayed step (1.." << by_step.size()
      << "), ms: " << list([&](const step_figures& f) { return ms(f.makespan[static_cast<std::size_t>(row)]); })
      << " (GPU+CPU "
      << list([](const step_figures& f) { return ms(f.makespan[static_cast<std::size_t>(trimoe_system::gpu_cpu)]); })
      << "); activated localized experts "
      << list([&](const step_figures& f) { return std::to_string(f.localized[slot]); }) << ".\n";
}

void print_use(const trimoe_result& res, std::ostream& out) {
  out << "  utilisation per domain, % of the makespan summed over problems (Tab. 3): busy = Eq. 5-6 totals (GPU and "
         "CPU\n"
         "  waits for PCIe and DIMM reads included; NDP = mean DIMM, contention included); compute = time computing "
         "(roofline\n"
         "  f_calc, no waits; NDP averaged over the "
      << res.num_dimms << " DIMMs); FLOP = achieved FLOP/s / peak\n";
  text_table t({"system", "GPU busy", "GPU compute", "GPU FLOP", "CPU busy", "CPU compute", "CPU FLOP", "NDP busy",
                "NDP compute", "NDP FLOP", "paper Tab. 3 GPU/CPU/NDP %"});
  for (std::size_t s = 0; s < num_systems; ++s) {
    const auto& a = res.systems[s];
    t.add({long_name(a.system), pct(a.gpu.busy), pct(a.gpu.compute), pct(a.gpu.flops), pct(a.cpu.busy),
           pct(a.cpu.compute), pct(a.cpu.flops), pct(a.ndp.busy), pct(a.ndp.compute), pct(a.ndp.flops),
           paper_use(a.system)});
  }
  t.print(out, "    ");
  const auto& rl = res[trimoe_system::relayout];
  const auto& rb = res[trimoe_system::relayout_benefit];
  out << "  +Relayout mean compute utilisation over the three domains: "
      << pct((rl.gpu.compute + rl.cpu.compute + rl.ndp.compute) / 3.0) << " (paper: 76.2 %); benefit rule "
      << pct((rb.gpu.compute + rb.cpu.compute + rb.ndp.compute) / 3.0) << "\n";
}

void print_prediction(const trimoe_result& res, double alpha, std::ostream& out) {
  out << "  prediction of the next step's classes (hot = head with 50 % of tokens, cold = tail within 10 %):\n";
  text_table t({"predictor", "class acc", "decision acc", "hot prec", "hot recall", "ms/step (improved)", "vs oracle"});
  const double oracle = res.prediction[static_cast<std::size_t>(trimoe_predictor::oracle)].step_seconds;
  const std::string names[num_trimoe_predictors] = {"EMA (alpha = " + fixed(alpha, 2) + ")", "last value",
                                                    "oracle (true loads)"};
  for (std::size_t k = 0; k < num_trimoe_predictors; ++k) {
    const auto& p = res.prediction[k];
    t.add({names[k], pct(p.confusion.accuracy()), pct(p.decision_accuracy), pct(p.confusion.precision(hotness::hot)),
           pct(p.confusion.recall(hotness::hot)), ms(p.step_seconds), fixed(p.step_seconds / oracle, 3) + "x"});
  }
  t.print(out, "    ");
  out << "  paper (Sec. 4.3): >78 % migration decision accuracy with alpha = 0.3\n";
}

}  // namespace

result run(const fs::path& path, const options& opt, std::ostream& out) {
  const routing_trace trace = io::read_trace(path);
  const auto shape = preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  trimoe_replay_config config{.batch = opt.batch, .alpha = opt.alpha, .exact_nodes = opt.exact_nodes};
  config.relayout.window = opt.window_seconds > 0.0 ? relayout_window::fixed : relayout_window::moe_makespan;
  config.relayout.window_scale = opt.window_scale;
  config.relayout.window_seconds = opt.window_seconds;
  config.relayout.gpu_slots_per_layer = opt.gpu_slots;
  const std::size_t B = opt.batch != 0 ? opt.batch : trimoe_default_batch(trace.info().num_experts);
  const batched_steps steps = make_batched_decode_steps(trace, B);
  trimoe_replayer replayer(steps, *shape, {opt.gpu, opt.cpu, opt.ndp}, config);

  print_header(path, trace, *shape, replayer, opt, out);
  if (replayer.num_steps() < 2) {
    out << "  fewer than 2 batched steps at B = " << B << ": nothing to replay\n";
    return replayer.result();
  }
  const std::vector<step_figures> by_step = replay_by_step(replayer);
  const trimoe_result res = replayer.result();
  print_layers(res, out);
  print_end_to_end(res, opt.exact_nodes, out);
  print_relayout(res, replayer, by_step, trimoe_system::relayout, out);
  print_relayout(res, replayer, by_step, trimoe_system::relayout_benefit, out);
  print_use(res, out);
  print_prediction(res, opt.alpha, out);
  return res;
}

}  // namespace moepolicy::examples::trimoe
