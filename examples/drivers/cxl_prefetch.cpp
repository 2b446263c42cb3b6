// The cxl_prefetch driver's replay — CXL-MoE (seed 002, "CXL-MoE: Accelerating Sparse Model Inference through
// Intelligent Expert Offloading to CXL Memory") replayed on recorded decode routing: the
// experts live off the GPU, on a CXL 2.0 expander or in host DRAM behind PCIe 5.0, and the
// GPU keeps an expert cache of a given size.
//
// For each trace and cache size, the decode steps are replayed (io::read_trace: the
// canonical reader for the bundled Granite trace, the vLLM decode reader for the shared
// Mixtral trace) through
//   - LRU, demand fetches only;
//   - LRU fed by the short-horizon predictor (last m tokens → next n tokens, §3 "Decode
//     Stage Prefetching") for each lookahead n (default 2, 3, 4);
//   - the sticky LRU of §3 "On-GPU Expert Cache Management" with the same predictor, its
//     prediction-gated admission and its stickiness each on and off;
//   - Belady's MIN, the demand bound at the same capacity.
//
// Modelling choices (printed with the tables):
//   - Cache size in GB (10^9 bytes, as the paper's "16 GB") → whole FP16 experts of the
//     model, one pool shared by all layers; or directly in experts (--cache-experts).
//   - Prefetch depth: a lookahead of n tokens can need up to n · top-k experts of a layer,
//     so the load queue takes the n · top-k best-scored experts (at most the layer's);
//     --depth fixes it instead. With a fixed depth the lookahead only rescales the scores
//     monotonically, so LRU's queue — and its hit ratio — would not depend on n.
//   - The replay has no timing: every queued prefetch lands before its layer is computed.
//   - TPOT per decode step = GPU compute of the activated experts (roofline: H100 figures
//     of the preset, FP16, each distinct expert of a layer once with its tokens) + one
//     on-demand fetch (latency + bytes / bandwidth) of every demand miss, stalling the
//     GPU; prefetches are assumed hidden behind compute and cost no time. The column
//     "pf link / compute" says how far that assumption is from holding: the CXL link time
//     of the prefetches over the compute time they must hide behind (> 1: they cannot),
//     and "link-bound CXL" prices them on the link instead: demand stalls + max(compute,
//     prefetch link time).
//     Attention, dense layers and the KV cache are not priced.
//   - The CXL saving is TPOT(PCIe) − TPOT(CXL) at the same replay: the hit ratio does not
//     depend on the path in an untimed replay, so it is the misses times the difference of
//     one fetch over the two paths.
//   - The cache stays warm across requests (one serving process); the predictor's history
//     restarts with each request.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "drivers/cxl_prefetch.hpp"

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/sim/cache_replay.hpp"

namespace moepolicy::examples::cxl_prefetch {

namespace fs = std::filesystem;

namespace {

/// A predictor whose scores never reach 1: with `sticky_threshold = 1` no prefetch makes an
/// entry sticky, while admission (threshold 0.5) and the queue's order are as the inner
/// predictor's. `sticky_lru_config` has no switch for stickiness, and a threshold of 1 alone
/// does not turn it off: the short-horizon score is exactly 1 for an expert every one of
/// the last m tokens selected (always so after a request's first token).
template <PrefetchPredictor P>
class below_one_predictor {
 public:
  explicit below_one_predictor(P inner) : inner_(std::move(inner)) {}
  bool predict(layer_id l, std::span<float> out) noexcept {
    const bool any = inner_.predict(l, out);
    for (float& s : out) s = std::min(s, cap);
    return any;
  }
  void observe(const batch_view& b) noexcept { inner_.observe(b); }
  void end_step() noexcept { inner_.end_step(); }
  void begin_request() noexcept { inner_.begin_request(); }

 private:
  static constexpr float cap = 0.99999994f;  // the float just below 1
  P inner_;
};

/// One configuration's replay.
struct outcome {
  std::string label;
  cache_stats stats;
};

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

}  // namespace

void run(const fs::path& path, const options& opt, std::ostream& out) {
  const routing_trace trace = io::read_trace(path);
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  const std::uint32_t L = trace.info().num_layers, E = trace.info().num_experts, k = trace.info().top_k;
  const bytes expert_size = expert_bytes(*shape, fp16);
  const std::uint64_t all_experts = std::uint64_t{L} * E;
  const double model_gb = static_cast<double>(expert_size) * static_cast<double>(all_experts) / giga;

  const roofline_cost cxl{opt.cxl_gpu, *shape};
  const roofline_cost pcie{opt.pcie_gpu, *shape};
  const double fetch_cxl = cxl.transfer_seconds(expert_size);
  const double fetch_pcie = pcie.transfer_seconds(expert_size);

  // Compute of the decode steps: every distinct expert of a layer once, with its tokens.
  const cache_replay_config decode{.prefill = false};
  double compute_total = 0.0;
  std::uint64_t steps = 0;
  std::vector<std::size_t> tokens_of(E, 0);
  for (const step_ref& s : trace.steps()) {
    if (s.kind != phase::decode) continue;
    ++steps;
    for (const batch_ref& ref : trace.batches_of(s)) {
      const batch_view b = trace.view(ref);
      for (expert_id e : b.experts) ++tokens_of[e];
      for (std::uint32_t e = 0; e < E; ++e) {
        if (tokens_of[e] == 0) continue;
        compute_total += cxl.compute_seconds(expert_key{ref.layer, static_cast<expert_id>(e)}, fp16, tokens_of[e]);
        tokens_of[e] = 0;
      }
    }
  }
  const std::uint64_t accesses = replay_accesses(trace, decode).size();
  out << "trace: " << path.string() << '\n'
      << "  model " << shape->name << ", " << L << " layers x " << E << " experts, top-" << k << "; FP16 expert "
      << fixed(static_cast<double>(expert_size) / (1024.0 * 1024.0), 1) << " MiB, all " << all_experts << " experts "
      << fixed(model_gb, 2) << " GB\n";
  if (steps == 0) {
    out << "  no decode steps: nothing to replay\n";
    return;
  }
  const double compute = compute_total / static_cast<double>(steps);
  out << "  decode: " << trace.requests().size() << " request(s), " << steps << " steps, " << accesses
      << " expert accesses (" << fixed(static_cast<double>(accesses) / static_cast<double>(steps), 1) << " per step)\n"
      << "  fetch one expert on demand: CXL 2.0 x16 (64 GB/s + 300 ns) " << fixed(fetch_cxl * 1e3, 3)
      << " ms, host DRAM over PCIe 5.0 (50 GB/s + 1000 ns) " << fixed(fetch_pcie * 1e3, 3) << " ms\n"
      << "  GPU compute of the activated experts (roofline, " << cxl.name()
      << " compute figures): " << fixed(compute * 1e3, 3) << " ms/token = TPOT with every access a hit\n"
      << "  predictor: short-horizon, m = " << opt.history << " last tokens; prefetch depth "
      << (opt.depth == 0 ? std::string("n x top-k per layer") : std::to_string(opt.depth) + " per layer")
      << "; sticky LRU runs with n = " << opt.sticky_lookahead << " (sticky for n steps)\n";

  struct size_point {
    std::string label;
    std::uint64_t experts;
  };
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

  const auto depth_for = [&](std::uint32_t n) -> std::size_t {
    return opt.depth != 0 ? opt.depth : std::min<std::size_t>(std::size_t{n} * k, E);
  };
  const auto predictor = [&](std::uint32_t n) {
    return short_horizon_predictor(
        {.num_layers = L, .num_experts = E, .top_k = k, .history = opt.history, .horizon = n});
  };

  std::vector<std::string> labels;
  std::vector<std::vector<double>> hit_ratios;  // [config][size]
  std::vector<double> belady_ratios;
  std::optional<double> paper_point_lru, paper_point_cxl, paper_point_belady;

  for (const size_point& sz : sizes) {
    const cache_config cc{.num_layers = L, .num_experts = E, .capacity = sz.experts, .expert_bytes = expert_size};
    const std::uint32_t ns = opt.sticky_lookahead;
    std::vector<outcome> rows;
    rows.push_back({"LRU, no prefetch", replay_cache<lru_policy>(trace, cc, {}, decode).stats});
    for (std::uint32_t n : opt.lookaheads) {
      short_horizon_predictor p = predictor(n);
      rows.push_back({"LRU + prefetch n=" + std::to_string(n),
                      replay_cache_with_prefetch<lru_policy>(trace, cc, {}, p, {.depth = depth_for(n)}, decode).stats});
    }
    for (const bool gate : {true, false}) {
      for (const bool sticky : {true, false}) {
        const sticky_lru_config sc{.gated_admission = gate,
                                   .sticky_threshold = sticky ? sticky_lru_config{}.sticky_threshold : 1.0f,
                                   .sticky_steps = ns};
        std::string label = "sticky LRU n=" + std::to_string(ns) + ", gate " + (gate ? "on" : "off") + ", sticky " +
                            (sticky ? "on" : "off") + (gate && sticky ? " (CXL-MoE)" : "");
        cache_replay_result r;
        if (sticky) {
          short_horizon_predictor p = predictor(ns);
          r = replay_cache_with_prefetch<sticky_lru_policy>(trace, cc, sc, p, {.depth = depth_for(ns)}, decode);
        } else {
          below_one_predictor p(predictor(ns));
          r = replay_cache_with_prefetch<sticky_lru_policy>(trace, cc, sc, p, {.depth = depth_for(ns)}, decode);
        }
        rows.push_back({std::move(label), r.stats});
      }
    }
    const cache_stats belady = replay_cache<belady_policy>(trace, cc, {}, decode).stats;
    rows.push_back({"Belady MIN (demand bound)", belady});

    out << "\n  cache " << sz.label << " = " << sz.experts << " experts ("
        << fixed(100.0 * static_cast<double>(sz.experts) / static_cast<double>(all_experts), 1) << "% of "
        << all_experts << "); Belady MIN hit ratio " << fixed(belady.hit_ratio(), 4) << ":\n";
    examples::text_table t({"configuration", "hit ratio", "Belady", "TPOT CXL ms", "TPOT PCIe ms", "CXL saves ms",
                            "demand MB/tok", "prefetch MB/tok", "pf link/compute", "link-bound CXL ms"});
    const double per_step = 1.0 / static_cast<double>(steps);
    for (const outcome& o : rows) {
      const double misses = static_cast<double>(o.stats.misses) * per_step;
      const double tpot_cxl = compute + misses * fetch_cxl;
      const double tpot_pcie = compute + misses * fetch_pcie;
      const double pf_link = static_cast<double>(o.stats.prefetches) * per_step * fetch_cxl;
      t.add({o.label, fixed(o.stats.hit_ratio(), 4), fixed(belady.hit_ratio(), 4), fixed(tpot_cxl * 1e3, 3),
             fixed(tpot_pcie * 1e3, 3), fixed((tpot_pcie - tpot_cxl) * 1e3, 3),
             fixed(static_cast<double>(o.stats.demand_bytes) * per_step / 1e6, 1),
             fixed(static_cast<double>(o.stats.prefetch_bytes) * per_step / 1e6, 1), fixed(pf_link / compute, 2),
             fixed((misses * fetch_cxl + std::max(compute, pf_link)) * 1e3, 3)});
    }
    t.print(out, "    ");

    if (labels.empty()) {
      for (const outcome& o : rows) labels.push_back(o.label);
      hit_ratios.assign(rows.size(), {});
    }
    for (std::size_t i = 0; i < rows.size(); ++i) hit_ratios[i].push_back(rows[i].stats.hit_ratio());
    belady_ratios.push_back(belady.hit_ratio());
    if (shape->name == "Mixtral-8x7B" && sz.label == "16 GB") {
      paper_point_lru = rows[1].stats.hit_ratio();
      paper_point_belady = belady.hit_ratio();
      for (const outcome& o : rows) {
        if (o.label.find("(CXL-MoE)") != std::string::npos) paper_point_cxl = o.stats.hit_ratio();
      }
    }
  }

  out << "\n  hit ratio by cache size (Belady MIN beside each):\n";
  std::vector<std::string> header{"configuration"};
  for (const size_point& sz : sizes) {
    header.push_back(sz.label);
    header.push_back("Belady");
  }
  examples::text_table summary(header);
  for (std::size_t i = 0; i + 1 < labels.size(); ++i) {
    std::vector<std::string> row{labels[i]};
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      row.push_back(fixed(hit_ratios[i][j], 4));
      row.push_back(fixed(belady_ratios[j], 4));
    }
    summary.add(std::move(row));
  }
  summary.print(out, "    ");
  out << "  TPOT prices GPU compute of the activated experts plus one stalled on-demand fetch per miss;\n"
         "  prefetches are assumed hidden behind compute (pf link/compute > 1: the link cannot hide them);\n"
         "  link-bound CXL = demand stalls + max(compute, prefetch link time): TPOT when prefetches share the link.\n"
         "  Prefetching policies may beat Belady: prefetches are not demand accesses.\n";
  if (paper_point_cxl && paper_point_lru && paper_point_belady) {
    out << "  seed 002 Sec. 4 reports a 96.4% decode hit rate with a 16 GB cache (ShareGPT, 32 concurrent\n"
        << "  requests); here, one request at a time: " << fixed(100.0 * *paper_point_cxl, 1)
        << "% for CXL-MoE's sticky LRU, " << fixed(100.0 * *paper_point_lru, 1)
        << "% for LRU + prefetch n=" << opt.lookaheads.front() << ".\n"
        << "  16 GB holds " << static_cast<std::uint64_t>(16.0 * giga / static_cast<double>(expert_size))
        << " experts, fewer than the " << L << " x top-" << k << " = " << L * k
        << " one token activates: no demand policy beats Belady's " << fixed(100.0 * *paper_point_belady, 1)
        << "% there, and the\n  prefetch hits above move the same bytes (pf link/compute).\n";
  }
}

}  // namespace moepolicy::examples::cxl_prefetch
