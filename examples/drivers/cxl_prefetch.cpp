// The cxl_prefetch driver's comparison — CXL-MoE (§3–4) replayed on recorded routing on the
// timed model of serving (sim/offload_replay.hpp, where the systems, the hit definition and
// what each system pays for are stated). This file chooses the systems and prints:
//   1. by cache size, B = 1: CXL-MoE, CXL-MoE without stickiness, plain LRU on demand and
//      the CPU-offload baseline, with Belady's MIN (untimed, demand only) beside each size;
//   2. at the paper's size (16 GB for Mixtral-8x7B; the middle size otherwise), B = 1: every
//      ablation — the gate, stickiness, the Markov model, the oracle's prefetches, the
//      prefill-stage stand-in, half duplex, the same policy over PCIe — and HBM-only;
//   3. at that size, B concurrent streams: HBM-only, the CPU-offload baseline and CXL-MoE;
//   4. where the time goes: each resource's busy time by purpose.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "drivers/cxl_prefetch.hpp"

#include "common/alongside.hpp"
#include "common/model_match.hpp"
#include "common/next_uses.hpp"
#include "common/table.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/offload_replay.hpp"

namespace moepolicy::examples::cxl_prefetch {

namespace fs = std::filesystem;

namespace {

/// Cache sizes in GB suited to a model: around the paper's 16 GB for Mixtral-8x7B (whole
/// model 90 GB), fractions of the 2.4 GB of Granite-3.1-1B-A400M, else 1/16 … 3/4 of the
/// model.
std::vector<double> default_sizes_gb(const model_shape& shape, double model_gb) {
  if (shape.name == "Mixtral-8x7B") return {4.0, 8.0, 16.0, 32.0, 64.0};
  if (shape.name == "Granite-3.1-1B-A400M") return {0.25, 0.5, 1.0, 1.5, 2.0};
  std::vector<double> out;
  for (double f : {1.0 / 16, 1.0 / 8, 1.0 / 4, 1.0 / 2, 3.0 / 4})
    out.push_back(std::round(model_gb * f * 100.0) / 100.0);
  return out;
}

std::string gb_label(double gb) {
  std::string s = fixed(gb, 2);
  while (s.back() == '0') s.pop_back();
  if (s.back() == '.') s.pop_back();
  return s + " GB";
}

std::string ms(double s) { return fixed(s * 1e3, 2); }
std::string pct(double x) { return fixed(100.0 * x, 1); }
std::string mb(double b) { return fixed(b / 1e6, 1); }

struct size_point {
  std::string label;
  std::uint64_t experts = 0;
};

/// The demand hit ratio of Belady's MIN on the decode accesses of B streams.
double belady_ratio(const routing_trace& batched, std::uint64_t capacity) {
  const auto& i = batched.info();
  const next_use_index index = chunked_next_uses(batched);
  return replay_cache<belady_policy>(
             batched, cache_config{.num_layers = i.num_layers, .num_experts = i.num_experts, .capacity = capacity},
             belady_config{}, cache_replay_config{}, index)
      .stats.hit_ratio();
}

/// The same at several capacities, in one walk (the next uses indexed once).
std::vector<double> belady_ratios(const routing_trace& batched, std::span<const size_point> sizes) {
  const auto& i = batched.info();
  std::deque<expert_cache<belady_policy>> caches;
  for (const size_point& sz : sizes) {
    caches.emplace_back(cache_config{.num_layers = i.num_layers, .num_experts = i.num_experts, .capacity = sz.experts},
                        belady_config{});
  }
  const next_use_index index = chunked_next_uses(batched);
  static_cast<void>(replay_caches(batched, cache_replay_config{}, index, caches));
  std::vector<double> out;
  for (const auto& c : caches) out.push_back(c.stats().hit_ratio());
  return out;
}

/// The systems of the comparison.
struct system_set {
  offload_system_config cxl, no_sticky, no_gate, lru_prefetch, markov, oracle, no_prefill, half, over_pcie, lru_demand,
      cpu_offload, hbm;
};

system_set systems_for(const options& opt) {
  system_set s;
  const link_spec cxl = opt.cxl_gpu.weight_link, pcie = opt.pcie_gpu.weight_link;
  s.cxl = cxl_moe_system("CXL-MoE (sticky LRU, gate, " + std::string(to_string(opt.predictor)) +
                         " m=" + std::to_string(opt.history) + " n=" + std::to_string(opt.lookahead) + ")");
  s.cxl.link = cxl;
  s.cxl.prefetch.predictor = opt.predictor;
  s.cxl.prefetch.history = opt.history;
  s.cxl.prefetch.horizon = opt.lookahead;
  std::get<sticky_lru_config>(s.cxl.policy).sticky_steps = opt.lookahead;
  s.no_sticky = s.cxl;
  s.no_sticky.label = "  stickiness off";
  std::get<sticky_lru_config>(s.no_sticky.policy).stickiness = false;
  s.no_gate = s.cxl;
  s.no_gate.label = "  admission gate off";
  std::get<sticky_lru_config>(s.no_gate.policy).gated_admission = false;
  s.lru_prefetch = s.cxl;
  s.lru_prefetch.label = "  both off (LRU + prefetch)";
  s.lru_prefetch.policy = lru_config{};
  s.markov = s.cxl;
  s.markov.label = "  Markov model, m=1";
  s.markov.prefetch.predictor = offload_predictor::markov;
  s.markov.prefetch.history = 1;
  s.oracle = s.cxl;
  s.oracle.label = "  oracle prefetch (the trace's next steps)";
  s.oracle.prefetch.predictor = offload_predictor::oracle;
  s.no_prefill = s.cxl;
  s.no_prefill.label = "  no prefill-stage prefetch";
  s.no_prefill.prefetch.prefill = false;
  s.half = s.cxl;
  s.half.label = "  half duplex (KV writes share the link)";
  s.half.duplex = link_duplex::half;
  s.over_pcie = s.cxl;
  s.over_pcie.label = "  same system over PCIe host DRAM";
  s.over_pcie.link = pcie;
  s.lru_demand = {"LRU on demand, no prefetch (CXL)",
                  offload_system_kind::cached,
                  cxl,
                  link_duplex::full,
                  lru_config{},
                  {.predictor = offload_predictor::none, .prefill = false}};
  s.cpu_offload = cpu_offload_system("CPU offload, fMoE-like (PCIe)");
  s.cpu_offload.link = pcie;
  s.hbm = {"HBM-only (every expert in HBM)", offload_system_kind::hbm_only};
  return s;
}

/// One table of systems at one size and concurrency.
void print_systems(const offload_replay_result& r, std::ostream& out, std::vector<std::string>& notes) {
  text_table t({"system", "TPOT ms", "tok/s", "hit %", "late", "GPU stall %", "demand MB/tok", "prefetch MB/tok",
                "wasted MB/tok", "TTFT ms"});
  for (const auto& s : r.systems) {
    if (!s.ok()) {
      t.add({s.config.label, "-", "-", "-", "-", "-", "-", "-", "-", "-"});
      notes.push_back(s.config.label + ": does not fit (" + s.status_detail + ")");
      continue;
    }
    const double n = static_cast<double>(std::max<std::uint64_t>(s.tokens, 1));
    const resource_account& in = s.accounts[s.link_in];
    const bool cached = s.config.kind == offload_system_kind::cached;
    t.add({s.config.label, ms(s.tpot()), fixed(s.throughput(), 1), pct(s.decode_hit_ratio()),
           cached ? std::to_string(s.cache.late_prefetches) : "-",
           pct(s.run_seconds > 0.0 ? s.accounts[s.gpu].stall_seconds / s.run_seconds : 0.0),
           mb(static_cast<double>(in.moved(cost_kind::demand_fetch)) / n),
           mb(static_cast<double>(in.moved(cost_kind::prefetch)) / n),
           mb(static_cast<double>(s.cache.wasted_bytes) / n), s.prefills == 0 ? "-" : ms(s.mean_ttft())});
  }
  t.print(out, "    ");
}

const offload_system_result* find(const offload_replay_result& r, const std::string& label) {
  for (const auto& s : r.systems) {
    if (s.config.label == label && s.ok()) return &s;
  }
  return nullptr;
}

}  // namespace

void run(const fs::path& path, const options& opt, std::ostream& out) {
  run(path, examples::load_trace(path), opt, out);
}

void run(const fs::path& path, const routing_trace& trace, const options& opt, std::ostream& out) {
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  const std::uint32_t L = trace.info().num_layers, E = trace.info().num_experts, k = trace.info().top_k;
  const roofline_cost gpu{opt.cxl_gpu, *shape};
  const bytes expert_size = gpu.footprint_bytes({0, 0}, fp16);
  const std::uint64_t all_experts = std::uint64_t{L} * E;
  const double model_gb = static_cast<double>(expert_size) * static_cast<double>(all_experts) / giga;
  const link_spec cxl = opt.cxl_gpu.weight_link, pcie = opt.pcie_gpu.weight_link;

  const auto form = [&](std::size_t B) {
    const decode_streams_config c{.streams = B};
    return opt.streams ? opt.streams(c)
                       : std::make_shared<const decode_streams>(make_decode_streams(trace, c, opt.jobs));
  };
  std::shared_ptr<const decode_streams> one = form(1);
  std::size_t with_prefill = 0;
  for (const auto& q : one->sequences()) {
    if (one->prompt_tokens()[q.request] > 0) ++with_prefill;
  }
  out << "trace: " << path.string() << '\n'
      << "  model " << shape->name << ", " << L << " layers x " << E << " experts, top-" << k << "; FP16 expert "
      << fixed(static_cast<double>(expert_size) / (1024.0 * 1024.0), 1) << " MiB, all " << all_experts << " experts "
      << fixed(model_gb, 2) << " GB\n";
  if (one->num_steps() == 0) {
    out << "  no decode steps: nothing to replay\n";
    return;
  }
  out << "  decode: " << one->sequences().size() << " request(s), " << one->num_tokens() << " tokens; "
      << (with_prefill > 0 ? std::to_string(with_prefill) + " with a recorded prefill (run as a prefill pass first)"
                           : std::string("no recorded prefill (the prefill-stage prefetch cannot run)"))
      << '\n'
      << "  fetch one expert: CXL 2.0 x16 (" << fixed(cxl.bandwidth / giga, 0) << " GB/s + "
      << fixed(cxl.latency_seconds * 1e9, 0) << " ns) " << ms(cxl.seconds_for(expert_size))
      << " ms, host DRAM over PCIe (" << fixed(pcie.bandwidth / giga, 0) << " GB/s + "
      << fixed(pcie.latency_seconds * 1e9, 0) << " ns) " << ms(pcie.seconds_for(expert_size)) << " ms; GPU "
      << gpu.name() << '\n'
      << "  CXL-MoE's predictor: "
      << (opt.predictor == offload_predictor::markov ? std::string("Markov model")
                                                     : std::string("frequency model (short-horizon)"))
      << ", m = " << opt.history << " last tokens of each stream, n = " << opt.lookahead
      << " tokens ahead, n x top-k experts per layer and stream prefetched; sticky for n steps.\n"
      << "  a hit is an expert resident in HBM whose copy has landed when its layer's router output is known;\n"
      << "  a prefetch still on its way then is a late prefetch: its placed chunks stay, the rest is fetched on\n"
      << "  demand (a partial stall, counted as a miss); prefetches use only the link's idle time.\n";

  std::vector<size_point> sizes;
  if (!opt.cache_experts.empty()) {
    for (std::uint64_t c : opt.cache_experts) {
      sizes.push_back({fixed(static_cast<double>(c * expert_size) / giga, 2) + " GB", c});
    }
  } else {
    for (double gb : opt.cache_gb.empty() ? default_sizes_gb(*shape, model_gb) : opt.cache_gb) {
      sizes.push_back(
          {gb_label(gb), static_cast<std::uint64_t>(std::floor(gb * giga / static_cast<double>(expert_size)))});
    }
  }
  std::size_t paper = sizes.size() / 2;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if (shape->name == "Mixtral-8x7B" && sizes[i].label == "16 GB") paper = i;
  }
  const system_set s = systems_for(opt);
  std::vector<std::string> notes;

  // The replays, planned for the progress line: 1. the sweep at every size; 2. every
  // ablation at the paper's size, where the sweep's systems ran in 1 and each system
  // replays on its own timeline, so their results are taken from there: only the others
  // (`rest`) replay in 2; 3. `served` at each B > 1 (planned with B = 1's rows, corrected as
  // each B's streams are formed).
  const std::vector<offload_system_config> sweep{s.cxl, s.no_sticky, s.lru_demand, s.cpu_offload};
  const std::vector<offload_system_config> served{s.hbm, s.cpu_offload, s.cxl};
  const std::uint64_t rows1 = one->batched().num_rows();
  const size_point& ps = sizes[paper];
  std::vector<offload_system_config> all{s.hbm,    s.cxl,  s.no_sticky, s.no_gate,    s.lru_prefetch, s.markov,
                                         s.oracle, s.half, s.over_pcie, s.lru_demand, s.cpu_offload};
  if (with_prefill > 0) all.insert(all.begin() + 2, s.no_prefill);
  std::vector<offload_system_config> rest;
  for (const auto& sc : all) {
    if (std::none_of(sweep.begin(), sweep.end(), [&](const auto& x) { return x.label == sc.label; }))
      rest.push_back(sc);
  }
  if (opt.progress != nullptr) {
    const auto more_b = static_cast<std::size_t>(
        std::count_if(opt.concurrency.begin(), opt.concurrency.end(), [](std::size_t B) { return B != 1; }));
    opt.progress->plan(rows1 * (sizes.size() * sweep.size() + rest.size() + more_b * served.size()));
  }

  // 1 and 2 in one lockstep walk over `one`'s steps: the sweep at every size, then the rest
  // at the paper's size; Belady's bound at each size beside it.
  std::vector<offload_sweep_point> points;
  for (const size_point& sz : sizes) points.push_back({sz.experts, sweep});
  points.push_back({ps.experts, rest});
  std::vector<offload_replay_result> by_size;
  std::vector<double> belady;
  alongside(
      opt.jobs,
      [&] {
        by_size = replay_offload_sweep(trace, *one, gpu, *shape, points, {.progress = opt.progress, .jobs = opt.jobs});
      },
      [&] { belady = belady_ratios(one->batched(), sizes); });
  offload_replay_result at = std::move(by_size.back());
  by_size.pop_back();

  // 1. By cache size, one stream.
  // The B = 1 streams are not read again: held beside each B's, they doubled the peak.
  one.reset();
  out << "\n  B = 1 (as recorded), by cache size (one pool of FP16 experts in HBM):\n";
  text_table summary({"system", "cache", "experts", "hit %", "Belady %", "TPOT ms", "tok/s", "late", "GPU stall %"});
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const size_point& sz = sizes[i];
    for (const auto& r : by_size[i].systems) {
      summary.add({r.config.label, sz.label, std::to_string(sz.experts), pct(r.decode_hit_ratio()), pct(belady[i]),
                   ms(r.tpot()), fixed(r.throughput(), 1), std::to_string(r.cache.late_prefetches),
                   pct(r.run_seconds > 0.0 ? r.accounts[r.gpu].stall_seconds / r.run_seconds : 0.0)});
    }
  }
  summary.print(out, "    ");
  out << "    Belady = MIN's demand hit ratio at the same size (untimed, no prefetch): the bound of demand caching.\n";

  // 2. Every ablation at the paper's size.
  {
    std::vector<offload_system_result> merged;
    merged.reserve(all.size());
    for (const auto& sc : all) {
      const auto& from = std::any_of(sweep.begin(), sweep.end(), [&](const auto& x) { return x.label == sc.label; })
                             ? by_size[paper].systems
                             : at.systems;
      merged.push_back(
          *std::find_if(from.begin(), from.end(), [&](const auto& r) { return r.config.label == sc.label; }));
    }
    at.systems = std::move(merged);
  }
  out << "\n  cache " << ps.label << " = " << ps.experts << " experts ("
      << pct(static_cast<double>(ps.experts) / static_cast<double>(all_experts)) << "% of " << all_experts
      << "), B = 1: every system and ablation (Belady MIN " << pct(belady[paper]) << "%):\n";
  print_systems(at, out, notes);
  const offload_system_result* c = find(at, s.cxl.label);
  const offload_system_result* cpu = find(at, s.cpu_offload.label);
  const offload_system_result* via_pcie = find(at, s.over_pcie.label);
  if (c != nullptr && cpu != nullptr && via_pcie != nullptr) {
    out << "    CXL-MoE against the CPU-offload baseline: TPOT " << pct(1.0 - c->tpot() / cpu->tpot())
        << "% lower, throughput " << fixed(c->throughput() / cpu->throughput(), 2)
        << "x; the interconnect alone (same system over PCIe): " << pct(1.0 - c->tpot() / via_pcie->tpot())
        << "% lower TPOT.\n";
  }

  // 3. Concurrent streams.
  out << "\n  cache " << ps.label << ", B concurrent decode streams (see sim/decode_streams.hpp for how they are "
      << "formed):\n";
  text_table cc({"B", "streams formed", "steps", "Belady %", "HBM-only TPOT ms", "CPU offload TPOT ms", "tok/s",
                 "hit %", "CXL-MoE TPOT ms", "tok/s", "hit %", "CXL/CPU tok/s"});
  std::vector<offload_replay_result> by_b;
  for (std::size_t B : opt.concurrency) {
    // B = 1 is `one`, and its Belady figure the sweep's at this size.
    std::shared_ptr<const decode_streams> formed;
    if (B != 1) formed = form(B);
    double bound = belady[paper];  // Belady's at this B, computed beside the replay
    if (B == 1) {
      // The run above: the same systems at B = 1.
      offload_replay_result r = at;
      r.systems.clear();
      for (const auto& sc : served) {
        for (const auto& x : at.systems) {
          if (x.config.label == sc.label) r.systems.push_back(x);
        }
      }
      by_b.push_back(std::move(r));
    } else {
      if (opt.progress != nullptr) {
        opt.progress->plan(formed->batched().num_rows() * served.size());
        opt.progress->total.fetch_sub(rows1 * served.size(), std::memory_order_relaxed);
      }
      const offload_sweep_point point{ps.experts, served};
      alongside(
          opt.jobs,
          [&] {
            by_b.push_back(std::move(replay_offload_sweep(trace, *formed, gpu, *shape, std::span(&point, 1),
                                                          {.progress = opt.progress, .jobs = opt.jobs})
                                         .front()));
          },
          [&] {
            if (formed->num_steps() > 0) bound = belady_ratio(formed->batched(), ps.experts);
          });
    }
    const offload_replay_result& r = by_b.back();
    if (r.steps == 0) {
      cc.add(
          {std::to_string(B), std::string(to_string(r.formation)), "0", "-", "-", "-", "-", "-", "-", "-", "-", "-"});
      continue;
    }
    const auto& h = r.systems[0];
    const auto& p = r.systems[1];
    const auto& x = r.systems[2];
    cc.add({std::to_string(B), std::string(to_string(r.formation)), std::to_string(r.steps), pct(bound),
            h.ok() ? ms(h.tpot()) : "does not fit", ms(p.tpot()), fixed(p.throughput(), 1), pct(p.decode_hit_ratio()),
            ms(x.tpot()), fixed(x.throughput(), 1), pct(x.decode_hit_ratio()),
            fixed(x.throughput() / p.throughput(), 2) + "x"});
  }
  cc.print(out, "    ");

  // 4. Where the time goes.
  out << "\n  where the time goes at " << ps.label
      << ", ms per token (busy time of each resource by purpose; stall = GPU idle waiting for weights):\n";
  text_table w({"system", "B", "GPU attn", "GPU dense", "GPU experts", "GPU stall", "link in: demand", "prefetch",
                "link out: KV"});
  const auto where = [&](const offload_system_result& r, std::size_t B) {
    if (!r.ok() || r.tokens == 0) return;
    const double n = static_cast<double>(r.tokens);
    const auto& g = r.accounts[r.gpu];
    const auto& in = r.accounts[r.link_in];
    const auto& o = r.accounts[r.link_out];
    w.add({r.config.label, std::to_string(B), ms(g.busy(cost_kind::attention) / n), ms(g.busy(cost_kind::dense) / n),
           ms(g.busy(cost_kind::expert) / n), ms(g.stall_seconds / n), ms(in.busy(cost_kind::demand_fetch) / n),
           ms(in.busy(cost_kind::prefetch) / n), fixed(o.busy(cost_kind::kv_cache) / n * 1e3, 4)});
  };
  for (const auto& r : at.systems) {
    if (r.config.label == s.cxl.label || r.config.label == s.cpu_offload.label || r.config.label == s.half.label) {
      where(r, 1);
    }
  }
  if (!by_b.empty() && by_b.back().steps > 0) {
    for (std::size_t i = 1; i < by_b.back().systems.size(); ++i) where(by_b.back().systems[i], opt.concurrency.back());
  }
  w.print(out, "    ");
  for (const auto& n : notes) out << "  not run: " << n << '\n';
  out << "  TPOT = mean time from a token's previous token (its step's start, for a sequence's first) to its step's\n"
         "  end; tok/s = decoded tokens over the run (prefill passes included); late = prefetches that had not\n"
         "  landed when needed; wasted = chunks of prefetches stopped before landing.\n"
         "  CXL-MoE Sec. 4 reports, at 32 concurrent requests with a 16 GB cache on ShareGPT: 96.4% hits, TPOT 6.2 vs\n"
         "  11.2 ms and 1530 vs 850 tok/s against CPU offload; HBM-only out of memory beyond 8 requests.\n"
         "  Left out here: prefill chunking and request arrival times (a server without chunked prefill, all requests\n"
         "  present), CUDA streams and kernel launch overheads, the GPU's own HBM traffic for fetched weights, and "
         "the\n"
         "  paper's classifier (the prefill-stage prefetch uses the prefill's own activation counts as a stand-in).\n";
}

}  // namespace moepolicy::examples::cxl_prefetch
