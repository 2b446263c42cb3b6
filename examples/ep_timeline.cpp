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
// The timed passes (with a model preset that describes attention). Each traced token stands
// for B = tokens-per-GPU × G tokens routed alike; attention is data parallel (each GPU runs
// it for its B / G tokens, each attending to `--context` cached tokens). Per MoE layer of a
// pass, on one timeline of per-GPU compute and per-GPU links (sim/timeline.hpp):
//   attention   forward_pass_cost::attention_seconds on every GPU (the GPU's DeviceCost:
//               roofline_cost of an H100 SXM, 989.4 TFLOP/s, 3.35 TB/s);
//   dispatch    all-to-all: every routed token copy crosses from its token's GPU (any, evenly)
//               to the GPU of its replica (the even split among replicas), hidden × bytes per
//               element each; a GPU's same-node traffic on its NVLink in/out, the rest on its
//               InfiniBand in/out; the operation holds each link for its bytes ÷ bandwidth;
//   experts     on each GPU, its replicas one after another, DeviceCost::compute_seconds of
//               the replica's tokens; the layer waits for the slowest GPU;
//   combine     the all-to-all back.
// A rebalance's moves are issued at the window's start on the same links, ahead of the
// window's passes, so they delay the all-to-all they share a link with. The per-pass time
// is attention + the slowest GPU's experts + the all-to-all (+ the wait for moves).
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
#include "common/trace_input.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/dispatch.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/problem.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "moepolicy/sim/forward_pass.hpp"
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
  std::uint64_t tokens_per_gpu = 256, context = 4096;
  double element_bytes = 2.0;
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
  double pass_seconds = 0.0;                                // Σ over the timed windows (moves' delays included)
  double attention = 0.0, experts = 0.0, all_to_all = 0.0;  // Σ of each phase's span
  std::size_t passes = 0;
};

/// The per-GPU links of a cluster on a timeline.
struct gpu_links {
  std::vector<resource_id> nvl_in, nvl_out, ib_in, ib_out;
};

/// Issues the moves from `before` to `after` (flat L × R) on `links` of `tl` at `at`, each
/// from a GPU that held the expert (the same node first, over NVLink; else any, over IB);
/// returns when the last lands and adds the moves to `moved`.
double issue_moves(timeline& tl, const gpu_links& links, const std::vector<std::int32_t>& before,
                   const std::vector<std::int32_t>& after, std::size_t layers, const ep_cluster& c, const options& o,
                   double at, std::uint64_t& moved) {
  const std::size_t r = c.replicas;
  const std::size_t per = r / c.gpus;
  const std::size_t gpn = c.gpus / c.nodes;
  const double nvl = static_cast<double>(o.expert_bytes) / (o.nvlink_gbps * 1e9);
  const double ib = static_cast<double>(o.expert_bytes) / (o.ib_gbps * 1e9);
  double end = at;
  for (std::size_t l = 0; l < layers; ++l) {
    for (std::size_t p = 0; p < r; ++p) {
      const std::int32_t e = after[l * r + p];
      if (e == before[l * r + p]) continue;
      ++moved;
      const std::size_t dst = p / per;
      std::optional<std::size_t> same_node, other;
      for (std::size_t q = 0; q < r; ++q) {
        if (before[l * r + q] != e) continue;
        const std::size_t src = q / per;
        if (src / gpn == dst / gpn && !same_node) same_node = src;
        if (src / gpn != dst / gpn && !other) other = src;
      }
      std::vector<hop> hops;
      if (same_node) {
        hops.push_back({links.nvl_in[dst], nvl, o.expert_bytes});
        if (*same_node != dst) hops.push_back({links.nvl_out[*same_node], nvl, o.expert_bytes});
      } else {
        hops.push_back({links.ib_in[dst], ib, o.expert_bytes});
        hops.push_back({links.ib_out[*other], ib, o.expert_bytes});
      }
      end = std::max(end, tl.transfer(at, hops, o.expert_bytes, cost_kind::migration).landed());
    }
  }
  return end;
}

/// The timed passes of a window (see the file comment).
class pass_model {
 public:
  pass_model(const model_shape& shape, const ep_cluster& c, const options& o)
      : gpu_(gpu_of(o), shape), fwd_(gpu_, shape), c_(c), o_(o) {
    const std::size_t g = c.gpus;
    for (std::size_t q = 0; q < g; ++q) {
      const std::string n = "gpu" + std::to_string(q);
      gpu_id_.push_back(tl_.add_resource(n, resource_kind::processor));
      links_.nvl_in.push_back(tl_.add_resource(n + " NVLink in", resource_kind::link));
      links_.nvl_out.push_back(tl_.add_resource(n + " NVLink out", resource_kind::link));
      links_.ib_in.push_back(tl_.add_resource(n + " IB in", resource_kind::link));
      links_.ib_out.push_back(tl_.add_resource(n + " IB out", resource_kind::link));
    }
    dense_ = shape.num_dense_layers;
    token_bytes_ = static_cast<double>(shape.hidden_size) * o.element_bytes;
    batch_ = static_cast<double>(o.tokens_per_gpu) * static_cast<double>(g);
    vol_.resize(g);
  }

  /// Links of the moves from `before` to `after` (flat L × R), all issued at `at`; returns
  /// when the last lands and adds them to `moved`.
  double moves(const std::vector<std::int32_t>& before, const std::vector<std::int32_t>& after, std::size_t layers,
               double at, std::uint64_t& moved) {
    return issue_moves(tl_, links_, before, after, layers, c_, o_, at, moved);
  }

  /// Runs passes [first, last) of `pl` on placement `p` from time `at` (after any moves
  /// issued there); returns the end time and adds each phase's span to `t`.
  double passes(const pass_loads& pl, std::size_t first, std::size_t last, const ep_placement& p, double at, tally& t) {
    const std::size_t g = c_.gpus;
    const std::size_t r = c_.replicas;
    const std::size_t per = r / g;
    const std::uint64_t tok = o_.tokens_per_gpu;
    for (std::size_t s = first; s < last; ++s) {
      const double pass_start = at;
      for (std::size_t l = 0; l < pl.layers; ++l) {
        const double* row = pl.v.data() + (s * pl.layers + l) * pl.experts;
        const auto layer = static_cast<std::uint32_t>(dense_ + l);
        // Attention, data parallel: every GPU its B / G tokens.
        const double ta = fwd_.attention_seconds(layer, tok, tok * (o_.context + 1), tok);
        double ready = at;
        for (std::size_t q = 0; q < g; ++q)
          ready = std::max(ready, tl_.run(at, gpu_id_[q], ta, cost_kind::attention).end);
        t.attention += ready - at;
        // Routed token copies per GPU (the even split among replicas).
        const auto slots = p.physical_to_logical(l);
        const auto count = p.logical_count(l);
        std::fill(vol_.begin(), vol_.end(), 0.0);
        for (std::size_t k = 0; k < r; ++k) {
          const auto e = static_cast<std::size_t>(slots[k]);
          vol_[k / per] += batch_ * row[e] / count[e];
        }
        const double a2a_start = ready;
        ready = all_to_all(ready, false);
        // Experts: each GPU its replicas in turn; the layer waits for the slowest.
        const double experts_start = ready;
        double done = ready;
        for (std::size_t q = 0; q < g; ++q) {
          double d = 0.0;
          for (std::size_t k = q * per; k < (q + 1) * per; ++k) {
            const auto e = static_cast<std::size_t>(slots[k]);
            const auto n = static_cast<std::size_t>(std::llround(batch_ * row[e] / count[e]));
            d += gpu_.compute_seconds({static_cast<layer_id>(l), static_cast<expert_id>(e)}, bitwidth{16}, n);
          }
          if (d > 0.0) done = std::max(done, tl_.run(ready, gpu_id_[q], d, cost_kind::expert).end);
        }
        t.experts += done - experts_start;
        const double combine_start = done;
        at = all_to_all(done, true);
        t.all_to_all += (experts_start - a2a_start) + (at - combine_start);
      }
      t.pass_seconds += at - pass_start;
      ++t.passes;
    }
    return at;
  }

 private:
  static device_spec gpu_of(const options& o) {
    device_spec d = presets::h100_sxm_gen4();
    d.compute.peak_flops = o.tflops * 1e12;
    return d;
  }

  /// One all-to-all over `vol_` (token copies per GPU), from every GPU evenly; `back` for the
  /// combine (the same bytes, the directions swapped). Returns when the last link is done.
  double all_to_all(double ready, bool back) {
    const std::size_t g = c_.gpus;
    const std::size_t gpn = g / c_.nodes;
    const double G = static_cast<double>(g);
    std::vector<hop> hops;
    bytes total = 0;
    auto add = [&](resource_id id, double copies, double gbps) {
      const auto b = static_cast<bytes>(std::llround(copies * token_bytes_));
      if (b == 0) return;
      hops.push_back({id, static_cast<double>(b) / (gbps * 1e9), b});
      total += b;
    };
    for (std::size_t q = 0; q < g; ++q) {
      // Into q: its copies from the other GPUs of its node (NVLink) and of other nodes (IB).
      const double in_nvl = vol_[q] * static_cast<double>(gpn - 1) / G;
      const double in_ib = vol_[q] * static_cast<double>(g - gpn) / G;
      // Out of q: its share of every other GPU's copies.
      double out_nvl = 0.0, out_ib = 0.0;
      for (std::size_t d = 0; d < g; ++d) {
        if (d == q) continue;
        (d / gpn == q / gpn ? out_nvl : out_ib) += vol_[d] / G;
      }
      add(back ? links_.nvl_out[q] : links_.nvl_in[q], in_nvl, o_.nvlink_gbps);
      add(back ? links_.ib_out[q] : links_.ib_in[q], in_ib, o_.ib_gbps);
      add(back ? links_.nvl_in[q] : links_.nvl_out[q], out_nvl, o_.nvlink_gbps);
      add(back ? links_.ib_in[q] : links_.ib_out[q], out_ib, o_.ib_gbps);
    }
    if (hops.empty()) return ready;
    return tl_.transfer(ready, hops, total, cost_kind::activation).landed();
  }

  roofline_cost gpu_;
  forward_pass_cost<roofline_cost> fwd_;
  ep_cluster c_;
  options o_;
  timeline tl_;
  std::vector<resource_id> gpu_id_;
  gpu_links links_;
  std::uint32_t dense_ = 0;
  double token_bytes_ = 0.0, batch_ = 0.0;
  std::vector<double> vol_;
};

/// The moves from `before` to `after` (flat L × R) on a timeline of per-GPU links; returns
/// the time until the last lands (all start together) and adds the moves to `moved`.
double charge_moves(const std::vector<std::int32_t>& before, const std::vector<std::int32_t>& after, std::size_t layers,
                    const ep_cluster& c, const options& o, std::uint64_t& moved) {
  timeline tl;
  gpu_links links;
  for (std::size_t q = 0; q < c.gpus; ++q) {
    const std::string n = "gpu" + std::to_string(q);
    links.nvl_in.push_back(tl.add_resource(n + " NVLink in", resource_kind::link));
    links.nvl_out.push_back(tl.add_resource(n + " NVLink out", resource_kind::link));
    links.ib_in.push_back(tl.add_resource(n + " IB in", resource_kind::link));
    links.ib_out.push_back(tl.add_resource(n + " IB out", resource_kind::link));
  }
  return issue_moves(tl, links, before, after, layers, c, o, 0.0, moved);
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
  const routing_trace trace = examples::load_trace(path);
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
  // The timed passes, one timeline per policy over the whole run.
  const bool timed = preset && preset->describes_forward_pass();
  std::optional<pass_model> m_ours, m_hyst, m_eplb, m_fixed;
  double t_ours = 0.0, t_hyst = 0.0, t_eplb = 0.0, t_fixed = 0.0;
  std::uint64_t counted = 0;
  if (timed)
    m_ours.emplace(*preset, c, o), m_hyst.emplace(*preset, c, o), m_eplb.emplace(*preset, c, o),
        m_fixed.emplace(*preset, c, o);
  auto timed_window = [&](std::optional<pass_model>& m, double& at, const std::vector<std::int32_t>& before,
                          const std::vector<std::int32_t>& after, const ep_placement& p, tally& t, std::size_t k) {
    if (!m) return;
    (void)m->moves(before, after, L, at, counted);
    at = m->passes(pl, k * o.window, (k + 1) * o.window, p, at, t);
  };
  for (std::size_t k = 1; k < windows; ++k) {
    past = window(k - 1);
    const std::vector<double> next_v = window(k);
    const ep_load_view pv(past, L, E), nv(next_v, L, E);
    // Ours, migration-aware from its previous placement.
    const auto& ro = ours_solver.rebalance(pv, ours_cur);
    std::vector<std::int32_t> now = flat(ro.placement);
    ours.move_seconds += charge_moves(ours_cur, now, L, c, o, ours.moved);
    measure(ours, nv, ro.placement, c.gpus);
    timed_window(m_ours, t_ours, ours_cur, now, ro.placement, ours, k);
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
    timed_window(m_hyst, t_hyst, hyst_cur, now, rh.placement, hyst, k);
    hyst_cur = std::move(now);
    // EPLB afresh.
    const ep_placement pe = deepseek_rebalance(pv, c);
    now = flat(pe);
    eplb.move_seconds += charge_moves(eplb_cur, now, L, c, o, eplb.moved);
    measure(eplb, nv, pe, c.gpus);
    timed_window(m_eplb, t_eplb, eplb_cur, now, pe, eplb, k);
    eplb_cur = std::move(now);
    // Static.
    measure(fixed, nv, first, c.gpus);
    {
      const std::vector<std::int32_t> same = flat(first);
      timed_window(m_fixed, t_fixed, same, same, first, fixed, k);
    }
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
  std::cout << "trace: " << path << " (" << trace.info().model << ", " << L << " layers x " << E << " experts, "
            << pl.passes << " forward passes)\n";
  std::cout << "cluster: " << c.replicas << " slots on " << c.gpus << " GPUs in " << c.nodes << " nodes, " << c.groups
            << " groups; window " << o.window << " passes (" << windows - 1 << " rebalances); expert "
            << static_cast<double>(o.expert_bytes) / 1e6 << " MB; NVLink " << o.nvlink_gbps << " GB/s, IB " << o.ib_gbps
            << " GB/s\n";
  std::cout << "  policy                      balancedness  max GPU tokens/layer/window  experts moved  move time (s)  "
               "per-pass time (ms)  run time vs static\n";
  std::cout << std::fixed;
  for (const tally* t : {&ours, &hyst, &eplb, &fixed, &oracle, &bound}) {
    const double bal = t->balancedness / static_cast<double>(t->layer_rounds);
    const double mx = t->max_tokens / static_cast<double>(t->layer_rounds);
    std::cout << "  " << std::left << std::setw(28) << t->name << std::right << std::setprecision(4) << std::setw(12)
              << bal << "  " << std::setprecision(2) << std::setw(27) << mx << "  " << std::setw(13) << t->moved << "  "
              << std::setprecision(3) << std::setw(13) << t->move_seconds << "  ";
    if (t->passes == 0) {
      std::cout << std::setw(18) << "-"
                << "  -\n";
    } else {
      std::cout << std::setprecision(3) << std::setw(18) << t->pass_seconds / static_cast<double>(t->passes) * 1e3
                << "  " << std::setprecision(4) << t->pass_seconds / fixed.pass_seconds << "\n";
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
  if (timed) {
    const double n = static_cast<double>(ours.passes);
    std::cout << "  per pass, ours (" << o.tokens_per_gpu << " tokens per GPU, " << o.tokens_per_gpu * c.gpus
              << " per traced token; context " << o.context << "): attention " << std::setprecision(3)
              << ours.attention / n * 1e3 << " ms, experts (slowest GPU) " << ours.experts / n * 1e3
              << " ms, all-to-all (dispatch + combine, with waits for moves) " << ours.all_to_all / n * 1e3 << " ms\n";
    std::cout << "  left out: the router, shared experts, dense layers, norms and the output head; overlap of the "
                 "all-to-all with compute (two micro-batches); DeepEP's IB-then-NVLink forwarding; link latency and "
                 "congestion inside the switch\n";
  } else {
    std::cout << "  per-pass time not modelled: no model preset with an attention block matches the trace\n";
  }
  std::cout << "  hindsight and the bound see the measured window; move time: each rebalance's moves alone on the "
               "links\n";
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
  app.add_option("--tflops", o.tflops, "GPU dense TFLOP/s (the H100 SXM roofline's peak)");
  app.add_option("--tokens-per-gpu", o.tokens_per_gpu,
                 "Tokens per GPU per pass (each traced token stands for "
                 "this times the GPUs)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--context", o.context, "Cached tokens each query attends to");
  app.add_option("--element-bytes", o.element_bytes, "Bytes per hidden element of a dispatched token (2: BF16)");
  CLI11_PARSE(app, argc, argv);
  if (traces.empty()) traces.push_back(examples::bundled_granite(here).string());
  return examples::run_each("ep_timeline", traces, [&](const std::string& t) { run(t, o); });
}
