// SPDX-License-Identifier: Apache-2.0
// ep_timeline — expert-parallel rebalancing over time on a recorded per-token routing trace:
// every N forward passes the placement is rebuilt from the past window's loads and measured
// on the next window, for our rebalancer (migration-aware, and with FlashLB's hysteresis),
// DeepSeek EPLB (afresh each time, as engines call it), a static placement from the first
// window, and two references: the hindsight placement (ours on the measured window itself)
// and the lower bound on that window. Every moved expert is charged on the timed model
// (sim/timeline.hpp): its bytes cross the source GPU's egress and the destination GPU's
// ingress link, NVLink inside a node and InfiniBand between nodes.
//
// Load model (EPLB's): a window's load of (layer, expert) is the tokens routed to it; an
// expert's load splits evenly among its replicas; a GPU's load is the sum over its slots.
// Balancedness is mean ÷ max GPU load per layer, averaged over layers and windows.
//
// Moves against balance: a window's gain over the static placement is the max-GPU tokens it
// saves, summed over layers; at a batch of B tokens per traced token, those tokens cost
// B × 6 × hidden × ffn / FLOP/s of expert compute each (three matrices, two flops per
// multiply-add, compute-bound as large expert-parallel batches are). The break-even batch is
// the B at which the gain over the run equals the time its moves took on the links.
//
// Figures (options): NVLink 160 GB/s and InfiniBand 50 GB/s per GPU (DeepSeek-V3 technical
// report §3.2.2, H800 nodes); 989.4 TFLOP/s dense FP16 (H100/H800 SXM, shared/DESIGN.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "common/model_match.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/dispatch.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/problem.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/sim/timeline.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;

namespace {

struct options {
  std::size_t window = 16;
  std::uint32_t gpus = 0, replicas = 0, nodes = 2, groups = 1;
  double nvlink_gbps = 160.0, ib_gbps = 50.0, tflops = 989.4, tolerance = 0.0;
  std::uint64_t expert_bytes = 0;
  std::uint32_t search = 0;
};

/// Per forward pass, the tokens routed to each (layer, expert), flat [S][L][E].
struct pass_loads {
  std::size_t passes = 0, layers = 0, experts = 0;
  std::vector<double> v;
};

pass_loads loads_of(const routing_trace& t) {
  pass_loads out{t.steps().size(), t.info().num_layers, t.info().num_experts, {}};
  out.v.assign(out.passes * out.layers * out.experts, 0.0);
  std::size_t s = 0;
  for (const auto& step : t.steps()) {
    for (const auto& b : t.batches_of(step)) {
      const auto view = t.view(b);
      double* row = out.v.data() + (s * out.layers + b.layer) * out.experts;
      for (auto e : view.experts) row[e] += 1.0;
    }
    ++s;
  }
  return out;
}

/// What one policy reached over the run.
struct tally {
  std::string name;
  double balancedness = 0.0;
  double max_tokens = 0.0;  // Σ over windows and layers of the max GPU tokens
  std::uint64_t moved = 0;
  double move_seconds = 0.0;
  std::size_t rounds = 0;
  std::size_t layer_rounds = 0;
};

/// The moves from `before` to `after` (flat L × R) on a timeline of per-GPU links; returns
/// the time until the last lands (all start together) and adds the moves to `moved`.
double charge_moves(const std::vector<std::int32_t>& before, const std::vector<std::int32_t>& after, std::size_t layers,
                    const ep_cluster& c, const options& o, std::uint64_t& moved) {
  timeline tl;
  const std::size_t g = c.gpus;
  std::vector<resource_id> nvl_in(g), nvl_out(g), ib_in(g), ib_out(g);
  for (std::size_t q = 0; q < g; ++q) {
    nvl_in[q] = tl.add_resource("gpu" + std::to_string(q) + " NVLink in", resource_kind::link);
    nvl_out[q] = tl.add_resource("gpu" + std::to_string(q) + " NVLink out", resource_kind::link);
    ib_in[q] = tl.add_resource("gpu" + std::to_string(q) + " IB in", resource_kind::link);
    ib_out[q] = tl.add_resource("gpu" + std::to_string(q) + " IB out", resource_kind::link);
  }
  const std::size_t r = c.replicas;
  const std::size_t per = r / g;
  const std::size_t gpn = g / c.nodes;
  const double nvl = static_cast<double>(o.expert_bytes) / (o.nvlink_gbps * 1e9);
  const double ib = static_cast<double>(o.expert_bytes) / (o.ib_gbps * 1e9);
  double end = 0.0;
  for (std::size_t l = 0; l < layers; ++l) {
    for (std::size_t p = 0; p < r; ++p) {
      const std::int32_t e = after[l * r + p];
      if (e == before[l * r + p]) continue;
      ++moved;
      const std::size_t dst = p / per;
      // A source GPU that held the expert: the same node first (NVLink), else any (IB).
      std::optional<std::size_t> same_node, other;
      for (std::size_t q = 0; q < r; ++q) {
        if (before[l * r + q] != e) continue;
        const std::size_t src = q / per;
        if (src / gpn == dst / gpn && !same_node) same_node = src;
        if (src / gpn != dst / gpn && !other) other = src;
      }
      std::vector<hop> hops;
      if (same_node) {
        hops.push_back({nvl_in[dst], nvl, o.expert_bytes});
        if (*same_node != dst) hops.push_back({nvl_out[*same_node], nvl, o.expert_bytes});
      } else {
        hops.push_back({ib_in[dst], ib, o.expert_bytes});
        hops.push_back({ib_out[*other], ib, o.expert_bytes});
      }
      end = std::max(end, tl.transfer(0.0, hops, o.expert_bytes, cost_kind::migration).landed());
    }
  }
  return end;
}

void measure(tally& t, const ep_load_view& next, const ep_placement& p, std::uint32_t gpus) {
  const auto s = ep_evaluate(next, p, gpus);
  for (std::size_t l = 0; l < next.layers(); ++l) {
    t.balancedness += s.balancedness[l];
    t.max_tokens += s.max_load[l];
  }
  t.layer_rounds += next.layers();
  ++t.rounds;
}

std::vector<std::int32_t> flat(const ep_placement& p) {
  std::vector<std::int32_t> out;
  for (std::size_t l = 0; l < p.layers(); ++l) {
    const auto row = p.physical_to_logical(l);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

void run(const std::string& path, const options& given) {
  const routing_trace trace = io::read_trace(path);
  const pass_loads pl = loads_of(trace);
  options o = given;
  const std::size_t L = pl.layers, E = pl.experts;
  const auto preset = examples::preset_for(trace.info());
  if (o.expert_bytes == 0) {
    if (!preset) {
      throw std::runtime_error("no model preset matches " + trace.info().model + "; give --expert-bytes");
    }
    o.expert_bytes = expert_bytes(*preset, bitwidth{16});
  }
  if (o.gpus == 0) o.gpus = E >= 32 ? 8 : 4;
  if (o.replicas == 0) o.replicas = static_cast<std::uint32_t>(E) + o.gpus;
  const ep_cluster c{.replicas = o.replicas, .gpus = o.gpus, .nodes = o.nodes, .groups = o.groups};
  detail::ep::check_cluster("ep_timeline", E, c);
  if (o.gpus % o.nodes != 0) throw std::runtime_error("--gpus must be a multiple of --nodes");
  const std::size_t windows = pl.passes / o.window;
  if (windows < 2)
    throw std::runtime_error("the trace has fewer than two windows of " + std::to_string(o.window) + " passes");
  auto window = [&](std::size_t k) {
    std::vector<double> w(L * E, 0.0);
    for (std::size_t s = k * o.window; s < (k + 1) * o.window; ++s) {
      for (std::size_t i = 0; i < L * E; ++i) w[i] += pl.v[s * L * E + i];
    }
    return w;
  };

  tally ours{"ours (migration-aware)"}, hyst{"ours + hysteresis 1.15"}, eplb{"DeepSeek EPLB"},
      fixed{"static (window 0)"}, oracle{"hindsight (reference)"}, bound{"lower bound (reference)"};
  const ep_rebalance_config base{
      .balance_tolerance = o.tolerance, .expert_bytes = o.expert_bytes, .replica_search_rounds = o.search};
  ep_rebalancer ours_solver(L, E, c, base);
  ep_rebalance_config hc = base;
  hc.hysteresis = 1.15;
  ep_rebalancer hyst_solver(L, E, c, hc);
  ep_rebalancer fresh(L, E, c, base);
  std::vector<double> past = window(0);
  const ep_load_view past0(past, L, E);
  const ep_placement first = fresh.rebalance(past0).placement;
  (void)hyst_solver.rebalance(past0);
  ep_dispatcher dispatcher(E, c.replicas, c.gpus);
  std::vector<std::uint64_t> batch(E), split(c.replicas);
  double even_sum = 0.0, best_sum = 0.0, ideal_sum = 0.0;
  std::size_t dispatched = 0;
  std::vector<std::int32_t> ours_cur = flat(first), hyst_cur = ours_cur, eplb_cur = flat(deepseek_rebalance(past0, c));
  for (std::size_t k = 1; k < windows; ++k) {
    past = window(k - 1);
    const std::vector<double> next_v = window(k);
    const ep_load_view pv(past, L, E), nv(next_v, L, E);
    // Ours, migration-aware from its previous placement.
    const auto& ro = ours_solver.rebalance(pv, ours_cur);
    std::vector<std::int32_t> now = flat(ro.placement);
    ours.move_seconds += charge_moves(ours_cur, now, L, c, o, ours.moved);
    measure(ours, nv, ro.placement, c.gpus);
    // Each pass of the window dispatched on ours' placement: even split and optimal split.
    for (std::size_t s = k * o.window; s < (k + 1) * o.window; ++s) {
      for (std::size_t l = 0; l < L; ++l) {
        const double* row = pl.v.data() + (s * L + l) * E;
        double total = 0.0;
        for (std::size_t e = 0; e < E; ++e) batch[e] = static_cast<std::uint64_t>(row[e]), total += row[e];
        if (total <= 0.0) continue;
        const auto slots = ro.placement.physical_to_logical(l);
        const double even = static_cast<double>(ep_uniform_dispatch(slots, batch, c.gpus, split));
        const double best = dispatcher.dispatch(slots, batch, split);
        even_sum += even, best_sum += best, ideal_sum += total / c.gpus;
        ++dispatched;
      }
    }
    ours_cur = std::move(now);
    // With hysteresis.
    const auto& rh = hyst_solver.rebalance(pv, hyst_cur);
    now = flat(rh.placement);
    hyst.move_seconds += charge_moves(hyst_cur, now, L, c, o, hyst.moved);
    measure(hyst, nv, rh.placement, c.gpus);
    hyst_cur = std::move(now);
    // EPLB afresh.
    const ep_placement pe = deepseek_rebalance(pv, c);
    now = flat(pe);
    eplb.move_seconds += charge_moves(eplb_cur, now, L, c, o, eplb.moved);
    measure(eplb, nv, pe, c.gpus);
    eplb_cur = std::move(now);
    // Static.
    measure(fixed, nv, first, c.gpus);
    // Hindsight: ours on the measured window itself; moves not charged (a reference).
    measure(oracle, nv, fresh.rebalance(nv).placement, c.gpus);
    // The bound on the measured window.
    for (std::size_t l = 0; l < L; ++l) {
      double total = 0.0;
      for (double x : nv.row(l)) total += x;
      const double lb = ep_lower_bound(nv.row(l), c.replicas, c.gpus);
      bound.balancedness += lb > 0.0 ? total / c.gpus / lb : 1.0;
      bound.max_tokens += lb;
    }
    bound.layer_rounds += L;
    ++bound.rounds;
  }
  const double flops_per_token = preset ? 2.0 * static_cast<double>(preset->weights_per_expert()) : 0.0;
  const double t_tok = flops_per_token / (o.tflops * 1e12);
  std::cout << "trace: " << path << " (" << trace.info().model << ", " << L << " layers x " << E << " experts, "
            << pl.passes << " forward passes)\n";
  std::cout << "cluster: " << c.replicas << " slots on " << c.gpus << " GPUs in " << c.nodes << " nodes, " << c.groups
            << " groups; window " << o.window << " passes (" << windows - 1 << " rebalances); expert "
            << static_cast<double>(o.expert_bytes) / 1e6 << " MB; NVLink " << o.nvlink_gbps << " GB/s, IB " << o.ib_gbps
            << " GB/s\n";
  std::cout << "  policy                      balancedness  max GPU tokens/layer/window  experts moved  move time (s)  "
               "break-even batch\n";
  std::cout << std::fixed;
  for (const tally* t : {&ours, &hyst, &eplb, &fixed, &oracle, &bound}) {
    const double bal = t->balancedness / static_cast<double>(t->layer_rounds);
    const double mx = t->max_tokens / static_cast<double>(t->layer_rounds);
    std::cout << "  " << std::left << std::setw(28) << t->name << std::right << std::setprecision(4) << std::setw(12)
              << bal << "  " << std::setprecision(2) << std::setw(27) << mx << "  " << std::setw(13) << t->moved << "  "
              << std::setprecision(3) << std::setw(13) << t->move_seconds << "  ";
    const double saved = fixed.max_tokens - t->max_tokens;  // tokens over the run
    if (t == &fixed || t == &oracle || t == &bound) {
      std::cout << "-\n";
    } else if (saved <= 0.0 || t_tok <= 0.0) {
      std::cout << "never (no gain over static)\n";
    } else {
      std::cout << std::setprecision(1) << t->move_seconds / (saved * t_tok) << "\n";
    }
  }
  if (dispatched > 0) {
    std::cout << "  per-pass dispatch on ours' placement (" << dispatched
              << " layer-passes): max GPU tokens, even split " << std::setprecision(3)
              << even_sum / static_cast<double>(dispatched) << " (balancedness " << std::setprecision(4)
              << ideal_sum / even_sum << "), load-aware split " << std::setprecision(3)
              << best_sum / static_cast<double>(dispatched) << " (balancedness " << std::setprecision(4)
              << ideal_sum / best_sum << ")\n";
  }
  std::cout << "  break-even batch: tokens per traced token at which the expert time saved over the static placement "
               "("
            << std::setprecision(3) << t_tok * 1e9 << " ns per token on a GPU) equals the move time; hindsight and "
            << "the bound see the measured window\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Expert-parallel rebalancing every N passes on a routing trace: ours, EPLB, static, with moves timed"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::vector<std::string> traces;
  options o;
  app.add_option("--trace", traces, "Traces (default: the bundled Granite trace)")->check(CLI::ExistingPath);
  app.add_option("--window", o.window, "Forward passes per window (rebalance every N passes)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--gpus", o.gpus, "GPUs (default 8 for 32+ experts, else 4)");
  app.add_option("--replicas", o.replicas, "Physical slots in all (default experts + gpus)");
  app.add_option("--nodes", o.nodes, "Nodes (NVLink inside, InfiniBand between)");
  app.add_option("--groups", o.groups, "Expert groups (group-limited routing)");
  app.add_option("--tolerance", o.tolerance, "Our balance tolerance (accept (1 + t) x the best max to move less)");
  app.add_option("--replica-search", o.search, "Rounds of our replica-count search");
  app.add_option("--expert-bytes", o.expert_bytes, "Bytes of one expert (default: the model preset at 16 bits)");
  app.add_option("--nvlink-gbps", o.nvlink_gbps, "NVLink GB/s per GPU and direction");
  app.add_option("--ib-gbps", o.ib_gbps, "InfiniBand GB/s per GPU and direction");
  app.add_option("--tflops", o.tflops, "GPU dense TFLOP/s for expert compute");
  CLI11_PARSE(app, argc, argv);
  if (traces.empty()) traces.push_back(examples::bundled_granite(here).string());
  return examples::run_each("ep_timeline", traces, [&](const std::string& t) { run(t, o); });
}
