// The trimoe driver's replay and tables (see drivers/trimoe.hpp and
// moepolicy/sim/trimoe_replay.hpp for the model).
#include "drivers/trimoe.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sim/forward_pass.hpp"

namespace moepolicy::examples::trimoe {

namespace {

namespace fs = std::filesystem;
using enum trimoe_system;

std::string pct(double x) { return fixed(100.0 * x, 1) + " %"; }
std::string us(double s) { return fixed(s * 1e6, 1); }
std::string ms(double s) { return fixed(s * 1e3, 3); }
std::string mb(double b) { return fixed(b / 1e6, 1); }
std::string gb(double b) { return fixed(b / 1e9, 2); }

constexpr std::array<trimoe_system, num_trimoe_systems> all_systems = {
    gpu_only, gpu_cpu, gpu_ndp, greedy, refined, relayout, relayout_benefit, improved, exact};

const char* long_name(trimoe_system s) {
  switch (s) {
    case gpu_only:
      return "GPU-only (Klotski-like)";
    case gpu_cpu:
      return "GPU+CPU (En-KTransformers-like)";
    case gpu_ndp:
      return "GPU+NDP (MoNDE-like)";
    case greedy:
      return "TriMoE +CPU (greedy)";
    case refined:
      return "TriMoE +Refinement";
    case relayout:
      return "TriMoE +Relayout/rebalancing";
    case relayout_benefit:
      return "+Relayout, benefit rule (variant)";
    case improved:
      return "+Relayout, improved solver";
    case exact:
      return "+Relayout, exact Eq. 7 solver";
  }
  return "?";
}

const char* short_name(trimoe_system s) {
  switch (s) {
    case gpu_only:
      return "GPU-only";
    case gpu_cpu:
      return "GPU+CPU";
    case gpu_ndp:
      return "GPU+NDP";
    case greedy:
      return "+CPU";
    case refined:
      return "+Refine";
    case relayout:
      return "+Relayout";
    case relayout_benefit:
      return "+RL benefit";
    case improved:
      return "+RL improved";
    case exact:
      return "+RL exact";
  }
  return "?";
}

/// TriMoE Tab. 3 (GPU / CPU / NDP compute utilisation) for the system each row stands for.
const char* paper_use(trimoe_system s) {
  switch (s) {
    case gpu_only:
      return "Klotski 28.6 / - / -";
    case gpu_cpu:
      return "En-KTransformers 57.6 / 42.0 / -";
    case gpu_ndp:
      return "MoNDE 33.9 / - / 70.1";
    case relayout:
      return "TriMoE 66.0 / 74.9 / 87.8";
    default:
      return "-";
  }
}

/// B: the option, or the default halved until the trace gives at least 3 steps.
std::size_t choose_batch(const routing_trace& trace, const options& opt, std::string& why) {
  if (opt.batch != 0) {
    why = "given";
    return opt.batch;
  }
  std::size_t B = trimoe_default_batch(trace.info().num_experts);
  std::size_t decode = 0;
  for (const auto& s : trace.steps()) decode += s.kind == phase::decode ? std::size_t{1} : std::size_t{0};
  const std::size_t first = B;
  while (B > 1 && decode / B < 3) B /= 2;
  why = B == first ? "the default for " + std::to_string(trace.info().num_experts) + " experts"
                   : "the default " + std::to_string(first) + " halved until the trace's " + std::to_string(decode) +
                         " decode tokens give 3 steps";
  return B;
}

trimoe_replay_config make_config(const options& opt, std::size_t B) {
  trimoe_replay_config c;
  c.batch = B;
  c.alpha = opt.alpha;
  c.classes = opt.classes;
  c.prompt_tokens = opt.prompt_tokens;
  c.window = opt.window;
  c.window_scale = opt.window_scale;
  c.window_seconds = opt.window_seconds;
  c.gpu_slots_per_layer = opt.gpu_slots;
  c.exact_nodes = opt.exact_nodes;
  c.compute = opt.compute;
  c.relayout_memory_bandwidth = opt.ndp.compute.memory_bandwidth;
  return c;
}

std::string window_text(const trimoe_replay_config& c) {
  switch (c.window) {
    case trimoe_window::attention_mlp:
      return "the GPU's attention + router + MLP (its experts) time of the layer just run (Sec. 4.3)";
    case trimoe_window::moe_span:
      return fixed(c.window_scale, 2) + " x the layer's MoE span (router end to the last result back)";
    case trimoe_window::fixed:
      return ms(c.window_seconds) + " ms for every plan";
  }
  return "?";
}

void print_header(const fs::path& path, const routing_trace& trace, const model_shape& shape,
                  const trimoe_replayer<>& r, const options& opt, const std::string& batch_why,
                  const trimoe_result& res, std::ostream& out) {
  const auto& sys = r.system();
  const std::size_t S = r.num_steps(), D = r.num_dimms();
  out << "trace: " << path.string() << '\n'
      << "  model " << shape.name << ", " << r.num_layers() << " MoE layers x " << r.num_experts() << " experts, top-"
      << trace.info().top_k << "; FP16 weights, one expert " << mb(static_cast<double>(res.expert_bytes)) << " MB\n"
      << "  devices: " << sys.gpu().name() << " + " << sys.cpu().name() << " + " << D << " x " << sys.dimm().name()
      << "; expert compute " << to_string(opt.compute) << " (GPU and CPU; NDP roofline)\n"
      << "  steps: B = " << res.batch << " concurrent sequences (" << batch_why << ") -> " << S
      << " batched decode steps; step 0 is the warm-up (the offline analysis of the initial layouts, not measured), "
      << "steps 1.." << (S == 0 ? 0 : S - 1) << " measured\n"
      << "  context: each sequence has " << opt.prompt_tokens << " prompt tokens + the steps decoded so far in its KV "
      << "cache (kept in HBM)\n"
      << "  classes: hot = head with " << pct(opt.classes.hot_share) << " of a layer's tokens, cold = tail within "
      << pct(opt.classes.cold_share) << " (calibrated to Sec. 3.1: cold > 70 % of experts with ~8 % of tokens, warm "
      << "20-40 % with up to 70 %)\n"
      << "          measured on this trace's steps: cold " << pct(res.class_expert_share[0]) << " of experts with "
      << pct(res.class_token_share[0]) << " of tokens, warm " << pct(res.class_expert_share[1]) << " with "
      << pct(res.class_token_share[1]) << ", hot " << pct(res.class_expert_share[2]) << " with "
      << pct(res.class_token_share[2]) << '\n'
      << "  HBM: " << gb(static_cast<double>(res.hbm_capacity)) << " GB = non-expert weights "
      << gb(static_cast<double>(res.hbm_non_expert)) << " + KV cache " << gb(static_cast<double>(res.hbm_kv))
      << " + room for experts " << gb(static_cast<double>(res.hbm_for_experts)) << "; the initial GPU set holds "
      << res.gpu_copies << " experts (the warm-up's hot ones" << (res.hbm_fits ? "" : "; the rest does not fit")
      << "), the same for every system\n"
      << "  window (Sec. 4.3): " << window_text(r.config()) << "; migrations run as background jobs in idle time\n";
}

void print_layers(const trimoe_result& res, std::ostream& out) {
  out << "  per MoE layer, us per batched step (means over the " << res.measured_steps
      << " measured steps): each system's layer span (attention start to the last result back);\n"
      << "  then +Relayout's demand busy time per device in the layer and the lower bound on its timed span:\n";
  std::vector<std::string> head{"layer"};
  for (trimoe_system s : all_systems) {
    if (res[s].ran) head.emplace_back(short_name(s));
  }
  const bool rl = res[relayout].ran;
  if (rl) {
    for (const char* h : {"|", "RL GPU", "RL CPU", "RL max DIMM", "RL mean DIMM", "RL bound"}) head.emplace_back(h);
  }
  text_table t(head);
  for (std::size_t l = 0; l < res.num_layers; ++l) {
    std::vector<std::string> row{std::to_string(l)};
    for (trimoe_system s : all_systems) {
      if (res[s].ran) row.push_back(us(res[s].layers[l].span));
    }
    if (rl) {
      const auto& x = res[relayout].layers[l];
      row.emplace_back("|");
      for (seconds v : {x.gpu, x.cpu, x.max_dimm, x.mean_dimm, res.layer_bound[l]}) row.push_back(us(v));
    }
    t.add(std::move(row));
  }
  t.print(out, "    ");
}

void print_end_to_end(const trimoe_result& res, std::ostream& out) {
  out << "  end to end, from the timeline: ms per batched step (B tokens, one per sequence) over the "
      << res.measured_steps << " measured steps; the startup (initial GPU copies) apart:\n";
  text_table t({"system", "ms/step", "tok/s", "vs GPU-only", "MoE ms", "Eq. 7 ms", "startup ms", "per step, ms"});
  const double base = res[gpu_only].ran ? res[gpu_only].step_seconds : 0.0;
  for (trimoe_system s : all_systems) {
    const auto& a = res[s];
    if (!a.ran) continue;
    std::string steps;
    for (std::size_t i = 0; i < a.step_walls.size(); ++i) {
      if (i != 0) steps += ' ';
      steps += fixed(a.step_walls[i] * 1e3, 1);
    }
    t.add({long_name(s), ms(a.step_seconds), fixed(static_cast<double>(res.batch) / a.step_seconds, 0),
           base > 0.0 ? fixed(base / a.step_seconds, 2) + "x" : std::string("-"), ms(a.layer_sum.moe),
           ms(a.layer_sum.eq7), ms(a.placement_seconds), steps});
  }
  t.print(out, "    ");
  out << "  MoE ms: Sum over layers of router end to the last result back; Eq. 7 ms: what the system's solver "
         "estimated "
         "for the same\n"
         "  (Eq. 5 adds up a GPU miss's max(compute, PCIe, DIMM read), the timeline overlaps fetches of different "
         "experts).\n";
  const auto m = [&](trimoe_system s) { return res[s].ran ? res[s].step_seconds : 0.0; };
  if (res[relayout].ran && res[gpu_cpu].ran && res[gpu_ndp].ran && res[gpu_only].ran) {
    const double best = std::min({m(gpu_only), m(gpu_cpu), m(gpu_ndp)});
    out << "  TriMoE (+Relayout) against the best baseline here: " << fixed(best / m(relayout), 2)
        << "x (paper Fig. 6: 2.12-2.83x MoE-layer decode speed-up over the best baseline, Fig. 7: 2.09-2.78x end to "
           "end)\n"
        << "    left out: the paper's 256-768-sequence batches and 128-160-expert models (here B = " << res.batch
        << ", " << res.num_experts << " experts); prefill; a KV cache in host DIMMs; Klotski's multi-batch pipeline\n";
  }
}

/// Per-step figures of one system's ledger.
struct ledger_row {
  double gpu_attn = 0, gpu_dense = 0, gpu_expert = 0, gpu_stall = 0, cpu = 0;
  double dimm_ndp = 0, dimm_read = 0, dimm_act = 0, dimm_bg = 0;
  double h2d_bytes = 0, h2d_busy = 0, d2h_bytes = 0, link_bytes = 0, link_busy = 0;
};

ledger_row ledger_of(const trimoe_system_result& a, std::size_t D, std::size_t steps) {
  ledger_row x;
  const ledger& l = a.accounts;
  const double n = static_cast<double>(std::max<std::size_t>(steps, 1));
  const auto& g = l[l.find("gpu")];
  x.gpu_attn = g.busy(cost_kind::attention) / n;
  x.gpu_dense = g.busy(cost_kind::dense) / n;
  x.gpu_expert = g.busy(cost_kind::expert) / n;
  x.gpu_stall = g.stall_seconds / n;
  x.cpu = l[l.find("cpu")].busy() / n;
  for (std::size_t d = 0; d < D; ++d) {
    const auto& m = l[l.find("dimm " + std::to_string(d))];
    x.dimm_ndp += m.busy(cost_kind::expert);
    x.dimm_read += m.busy(cost_kind::weight_read);
    x.dimm_act += m.busy(cost_kind::activation);
    x.dimm_bg += m.busy(cost_kind::prefetch) + m.busy(cost_kind::migration);
    const auto& p = l[l.find("dimm-link " + std::to_string(d))];
    x.link_bytes += static_cast<double>(p.moved());
    x.link_busy = std::max(x.link_busy, p.busy());
  }
  const double dn = static_cast<double>(D) * n;
  x.dimm_ndp /= dn;
  x.dimm_read /= dn;
  x.dimm_act /= dn;
  x.dimm_bg /= dn;
  x.link_bytes /= n;
  x.link_busy /= n;
  const auto& h = l[l.find("pcie h2d")];
  x.h2d_bytes = static_cast<double>(h.moved()) / n;
  x.h2d_busy = h.busy() / n;
  x.d2h_bytes = static_cast<double>(l[l.find("pcie d2h")].moved()) / n;
  return x;
}

void print_ledger(const trimoe_result& res, std::ostream& out) {
  out << "  ledger of the measured steps, per step (ms or MB): GPU busy by kind and its stall (idle before work that "
         "waited);\n"
         "  CPU busy; each DIMM's mean busy by kind (NDP compute, weight reads for GPU and CPU, activations, "
         "background reads/writes\n"
         "  of prefetches and migrations); PCIe bytes and busy time; DIMM-Link bytes over all ports (each byte counts "
         "at both ends)\n"
         "  and the busiest port's time:\n";
  text_table t({"system", "GPU attn", "GPU dense", "GPU experts", "GPU stall", "CPU", "DIMM NDP", "DIMM reads",
                "DIMM act", "DIMM bg", "h2d MB", "h2d ms", "d2h MB", "DIMM-Link MB", "port ms"});
  for (trimoe_system s : all_systems) {
    const auto& a = res[s];
    if (!a.ran) continue;
    const ledger_row x = ledger_of(a, res.num_dimms, res.measured_steps);
    t.add({long_name(s), ms(x.gpu_attn), ms(x.gpu_dense), ms(x.gpu_expert), ms(x.gpu_stall), ms(x.cpu), ms(x.dimm_ndp),
           ms(x.dimm_read), ms(x.dimm_act), ms(x.dimm_bg), mb(x.h2d_bytes), ms(x.h2d_busy), mb(x.d2h_bytes),
           mb(x.link_bytes), ms(x.link_busy)});
  }
  t.print(out, "    ");
}

std::string added_costs(const trimoe_result& res, trimoe_system s) {
  const ledger_row x = ledger_of(res[s], res.num_dimms, res.measured_steps);
  const auto& mig = res[s].migrations;
  switch (s) {
    case gpu_ndp:
      return "base: GPU + NDP units, every expert localized; NDP " + ms(x.dimm_ndp) + " ms/DIMM/step, PCIe " +
             mb(x.h2d_bytes) + " MB/step";
    case greedy:
      return "the AMX CPU (" + ms(x.cpu) + " ms busy/step) and warm experts striped for it; DIMM reads " +
             ms(x.dimm_read) + " ms/DIMM/step";
    case refined:
      return "bottleneck-aware refinement: no device time (the solver's own time is not on the timeline)";
    case relayout: {
      std::size_t taken = 0;
      for (auto k : mig.taken) taken += k;
      return "prefetch + relayout + rebalancing: " + std::to_string(taken) + " jobs, " +
             mb(static_cast<double>(mig.job_bytes[0]) /
                static_cast<double>(std::max<std::size_t>(res.measured_steps, 1))) +
             " MB/step PCIe, " + mb(x.link_bytes) + " MB/step DIMM-Link, DIMM bg " + ms(x.dimm_bg) + " ms/DIMM/step, " +
             std::to_string(mig.late) + " late";
    }
    default:
      return "";
  }
}

void print_ablation(const trimoe_result& res, const trimoe_result* moe_window, std::ostream& out) {
  if (!res[gpu_ndp].ran || !res[greedy].ran || !res[refined].ran || !res[relayout].ran) return;
  out << "  ablation (paper Fig. 8, batch 512: +CPU 1.75x, +Refinement 1.28x, +Relayout 1.16x), one mechanism per row, "
         "each with what it adds:\n";
  text_table t({"row", "ms/step", "factor", "adds (per measured step)"});
  trimoe_system prev = gpu_ndp;
  for (trimoe_system s : {gpu_ndp, greedy, refined, relayout}) {
    const std::string f =
        s == gpu_ndp ? std::string("-") : fixed(res[prev].step_seconds / res[s].step_seconds, 2) + "x";
    t.add({long_name(s), ms(res[s].step_seconds), f, added_costs(res, s)});
    prev = s;
  }
  t.print(out, "    ");
  if (moe_window != nullptr && (*moe_window)[relayout].ran) {
    const auto& w = (*moe_window)[relayout];
    std::size_t taken = 0, landed = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      taken += w.migrations.taken[k];
      landed += w.migrations.landed[k];
    }
    out << "  with the window read as the layer's MoE span instead: +Relayout " << ms(w.step_seconds) << " ms/step, "
        << fixed(res[refined].step_seconds / w.step_seconds, 2) << "x over +Refinement (" << taken << " jobs, "
        << landed << " landed)\n";
  }
  out << "    left out: the solver's own run time; the paper's batch of 512; the Relayout Unit's command overheads\n";
}

void print_migrations(const trimoe_result& res, std::ostream& out) {
  out << "  migrations (Sec. 4.3): per system that plans, over the measured steps; taken / proposed by kind, jobs "
         "landed,\n"
         "  late (still in flight when the layer they were planned for started), in flight at the end; the window's "
         "mean and\n"
         "  the planner's estimate of what it took:\n";
  text_table t({"system", "plans", "prefetch", "to striped", "to localized", "rebalance", "landed", "late", "in flight",
                "PCIe GB", "DIMM-Link GB", "window us", "taken us", "dropped"});
  for (trimoe_system s : all_systems) {
    const auto& a = res[s];
    if (!a.ran || !prefetches(s)) continue;
    const auto& m = a.migrations;
    const auto k = [&](std::size_t i) { return std::to_string(m.taken[i]) + "/" + std::to_string(m.proposed[i]); };
    std::size_t landed = 0;
    for (auto x : m.landed) landed += x;
    const double plans = static_cast<double>(std::max<std::size_t>(m.plans, 1));
    t.add({long_name(s), std::to_string(m.plans), k(0), k(1), k(2), k(3), std::to_string(landed),
           std::to_string(m.late), std::to_string(m.pending_at_end), gb(static_cast<double>(m.job_bytes[0])),
           gb(static_cast<double>(m.job_bytes[1] + m.job_bytes[2] + m.job_bytes[3])), us(m.window_seconds / plans),
           us(m.estimated_seconds / plans), std::to_string(m.evictions)});
  }
  t.print(out, "    ");
  out << "  paper (Sec. 5.5): migrating up to four experts costs ~0.63 ms, masked by ~0.68 ms of GPU computation; "
         "overhead below 3.3 %\n"
         "    left out: DIMM-Link latency (not published); the Relayout Unit's address remapping\n";
}

void print_solvers(const trimoe_result& res, std::ostream& out) {
  if (!res[relayout].ran || res.gaps.problems == 0) return;
  const auto& g = res.gaps;
  out << "  solvers on +Relayout's " << g.problems
      << " (step, layer) problems, Eq. 7 makespan of the MoE part summed per step (ms), gap to the proven optimum on "
      << g.proven << " of them (mean / max):\n";
  text_table t({"solver", "Eq. 7 ms/step", "gap to optimum"});
  const auto gap = [&](std::size_t i) {
    return g.proven > 0 ? pct(g.gap_mean[i]) + " / " + pct(g.gap_max[i]) : std::string("-");
  };
  t.add({"paper greedy (+CPU)", ms(g.greedy), gap(0)});
  t.add({"paper greedy + refinement", ms(g.refined), gap(1)});
  t.add({"improved (local search)", ms(g.improved), gap(2)});
  t.add({"exact (best found)", ms(g.exact), "-"});
  t.add({"lower bound on that Eq. 7 makespan", ms(g.bound), "-"});
  t.print(out, "    ");
  out << "  timed: +Relayout's layers take " << ms(res[relayout].layer_sum.span)
      << " ms/step; a lower bound on those spans on the copies each layer had when its MoE work began (any "
         "assignment): "
      << ms(res.step_bound) << " ms/step (" << pct(res[relayout].layer_sum.span / res.step_bound - 1.0) << " above)\n";
}

void print_use(const trimoe_result& res, const options& opt, std::ostream& out) {
  out << "  utilisation over the measured time (Tab. 3): busy = the device's busy seconds / wall time (the GPU's "
         "include attention\n"
         "  and dense work); NDP compute = seconds the DIMMs' NDP units computed experts / (D x wall), only for "
         "systems that run NDP;\n"
         "  DIMM busy = every second the DIMMs were busy (NDP, reads for GPU and CPU, activations, migrations) / (D x "
         "wall); FLOP = achieved / peak\n";
  text_table t({"system", "GPU busy", "GPU FLOP", "CPU busy", "CPU FLOP", "NDP compute", "NDP FLOP", "DIMM busy",
                "paper Tab. 3 GPU/CPU/NDP %"});
  const double D = static_cast<double>(res.num_dimms);
  for (trimoe_system s : all_systems) {
    const auto& a = res[s];
    if (!a.ran) continue;
    const double T = a.step_seconds * static_cast<double>(res.measured_steps);
    const auto flop = [&](double f, double peak) { return T > 0.0 ? pct(f / (peak * T)) : std::string("-"); };
    t.add({long_name(s), pct(a.gpu.busy), flop(a.gpu.flops, opt.gpu.compute.peak_flops),
           a.cpu.present ? pct(a.cpu.busy) : std::string("- (none)"),
           a.cpu.present ? flop(a.cpu.flops, opt.cpu.compute.peak_flops) : std::string("-"),
           a.ndp.present ? pct(a.ndp.compute) : std::string("- (none)"),
           a.ndp.present ? flop(a.ndp.flops, opt.ndp.compute.peak_flops * D) : std::string("-"), pct(a.dimm.busy),
           paper_use(s)});
  }
  t.print(out, "    ");
  if (res[relayout].ran) {
    const auto& rl = res[relayout];
    out << "  +Relayout mean busy over the three domains (GPU, CPU, NDP compute): "
        << pct((rl.gpu.busy + rl.cpu.busy + rl.ndp.compute) / 3.0) << " (paper: 76.2 %)\n";
  }
  out << "    left out: the paper does not define its utilisation; its batches are 8-24x larger, so every device "
         "here waits more\n";
}

void print_prediction(const trimoe_result& res, double alpha, std::ostream& out) {
  out << "  prediction of each measured step's classes per (layer, expert), against the true classes of the step's "
         "loads:\n"
         "  class acc; decision acc = prefetch (hot) and localize (cold) each right or wrong, averaged (the paper's "
         "reading);\n"
         "  a move = a class different from the predictor's previous one: precision = right moves / moves, recall = "
         "right moves / needed moves\n";
  text_table t(
      {"predictor", "class acc", "decision acc", "hot prec", "hot recall", "moves", "move prec", "move recall"});
  const std::string names[num_trimoe_predictors] = {"EMA (alpha = " + fixed(alpha, 2) + ")", "last value",
                                                    "never migrate (warm-up classes)",
                                                    "true classes (reference, not a predictor)"};
  for (std::size_t k = 0; k < num_trimoe_predictors; ++k) {
    const auto& p = res.prediction[k];
    t.add({names[k], pct(p.confusion.accuracy()), pct(p.decision_accuracy), pct(p.confusion.precision(hotness::hot)),
           pct(p.confusion.recall(hotness::hot)), std::to_string(p.moves),
           p.moves > 0 ? pct(p.precision()) : std::string("-"), pct(p.recall())});
  }
  t.print(out, "    ");
  out << "  paper (Sec. 4.3, 5.3): >78 % migration decision accuracy with alpha = 0.3\n"
         "    left out: the paper's accuracy metric is not defined; a predictor that never migrates scores "
      << pct(res.prediction[static_cast<std::size_t>(trimoe_predictor::never_migrate)].decision_accuracy)
      << " on it here\n";
}

// The threshold sweep's grid (hot head share, cold tail share): the paper's point first.
constexpr std::array<std::pair<double, double>, 5> sweep_grid = {
    {{0.22, 0.08}, {0.5, 0.1}, {0.3, 0.05}, {0.15, 0.15}, {0.1, 0.3}}};

// One point of the threshold sweep: the systems the sweep prints, replayed with the classes
// `hot` / `cold` (each re-derives its initial layout and predictor classes from them).
trimoe_result sweep_point(const batched_steps& steps, const model_shape& shape, const trimoe_devices<>& devices,
                          const trimoe_replay_config& base, double hot, double cold) {
  trimoe_replay_config c = base;
  c.classes = {.hot_share = hot, .cold_share = cold};
  c.systems = {true, true, true, false, true, true, false, false, false};
  c.solver_gaps = false;
  trimoe_replayer<> r(steps, shape, devices, c);
  r.replay_all();
  return r.result();
}

void print_sweep(std::span<const trimoe_result> points, std::ostream& out) {
  out << "  threshold sweep (hot head share / cold tail share), ms per step; every system re-derives its initial "
         "layout and\n"
         "  predictor classes from the thresholds:\n";
  text_table t({"hot / cold", "cold experts", "warm experts", "hot experts", "GPU-only", "GPU+CPU", "GPU+NDP",
                "+Refinement", "+Relayout", "best baseline / +Relayout"});
  for (std::size_t i = 0; i < sweep_grid.size(); ++i) {
    const auto& [hot, cold] = sweep_grid[i];
    const trimoe_result& x = points[i];
    const double best = std::min({x[gpu_only].step_seconds, x[gpu_cpu].step_seconds, x[gpu_ndp].step_seconds});
    t.add({fixed(hot, 2) + " / " + fixed(cold, 2), pct(x.class_expert_share[0]), pct(x.class_expert_share[1]),
           pct(x.class_expert_share[2]), ms(x[gpu_only].step_seconds), ms(x[gpu_cpu].step_seconds),
           ms(x[gpu_ndp].step_seconds), ms(x[refined].step_seconds), ms(x[relayout].step_seconds),
           fixed(best / x[relayout].step_seconds, 2) + "x"});
  }
  t.print(out, "    ");
}

}  // namespace

result run(const fs::path& path, const options& opt, std::ostream& out) {
  return run(path, examples::load_trace(path), opt, out);
}

result run(const fs::path& path, const routing_trace& trace, const options& opt, std::ostream& out) {
  const auto shape = preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  std::string batch_why;
  const std::size_t B = choose_batch(trace, opt, batch_why);
  const trimoe_replay_config config = make_config(opt, B);
  const batched_steps steps = make_batched_decode_steps(trace, B);
  const trimoe_devices<> devices = make_trimoe_devices({opt.gpu, opt.cpu, opt.ndp}, *shape, opt.compute);
  // The replays: the systems of the tables (task 0, the longest, handed out first), then,
  // with the sweep, the second window reading (task 1) and the sweep's points (tasks 2..).
  // Each builds its own replayer and timelines, whose reserved job slots are most of the
  // stage's memory: up to `jobs` replayers are held at once. None reads another's, so the
  // output does not depend on `jobs`. With fewer than 2 steps nothing is measured and only
  // task 0 runs.
  const bool more = opt.sweep && steps.num_steps() > 1;
  const bool second_window = more && opt.window != trimoe_window::moe_span;
  const std::size_t tasks = more ? 2 + sweep_grid.size() : 1;
  trimoe_result res;
  std::ostringstream header;
  std::optional<trimoe_result> other;
  std::vector<trimoe_result> points(more ? sweep_grid.size() : 0);
  // One thread runs the tasks in order and stops at the first error; on several the first
  // error a task throws stops the tasks not yet started.
  detail::task_pool pool(std::min(opt.jobs, tasks));
  pool.for_each(tasks, [&](std::size_t i) {
    if (i == 0) {
      trimoe_replayer<> replayer(steps, *shape, devices, config);
      replayer.replay_all();
      res = replayer.result();
      print_header(path, trace, *shape, replayer, opt, batch_why, res, header);
    } else if (i == 1) {
      if (!second_window) return;
      trimoe_replay_config c = config;
      c.window = trimoe_window::moe_span;
      c.window_scale = 1.0;
      c.systems = {false, false, false, false, false, true, false, false, false};
      c.solver_gaps = false;
      trimoe_replayer<> r(steps, *shape, devices, c);
      r.replay_all();
      other = r.result();
    } else {
      const auto& [hot, cold] = sweep_grid[i - 2];
      points[i - 2] = sweep_point(steps, *shape, devices, config, hot, cold);
    }
  });
  out << header.str();
  if (res.measured_steps == 0) {
    out << "  fewer than 2 batched steps at B = " << B << ": nothing to measure\n";
    return res;
  }
  print_layers(res, out);
  print_end_to_end(res, out);
  print_ledger(res, out);
  print_ablation(res, other ? &*other : nullptr, out);
  print_migrations(res, out);
  print_solvers(res, out);
  print_use(res, opt, out);
  print_prediction(res, opt.alpha, out);
  if (more) print_sweep(points, out);
  return res;
}

}  // namespace moepolicy::examples::trimoe
