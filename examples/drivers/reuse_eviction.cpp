// SPDX-License-Identifier: Apache-2.0
// The reuse_eviction driver's comparison (drivers/reuse_eviction.hpp).
#include "drivers/reuse_eviction.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/gated_prefetch.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/cache/size_aware_reuse.hpp"
#include "moepolicy/cache/space_time_bound.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/predict/markov_predictor.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/forward_pass.hpp"
#include "moepolicy/sim/timed_cache.hpp"

namespace moepolicy::examples::reuse_eviction {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 7> names = {"LRU",     "LFU",        "score-aware", "ema-score",
                                                   "hawkeye", "pred-reuse", "MIN"};
constexpr std::size_t online = 6;  // the first six are online

/// The hits of every policy on `t` with cache `cc`.
std::array<std::uint64_t, 7> hits_of(const routing_trace& t, const cache_config& cc) {
  return {replay_cache<lru_policy>(t, cc).stats.hits,
          replay_cache<lfu_policy>(t, cc).stats.hits,
          replay_cache<score_aware_policy>(t, cc).stats.hits,
          replay_cache<ema_score_policy>(t, cc).stats.hits,
          replay_cache<hawkeye_policy>(t, cc, {.capacity = cc.capacity}).stats.hits,
          replay_cache<predicted_reuse_policy>(t, cc).stats.hits,
          replay_cache<belady_policy>(t, cc).stats.hits};
}

std::string pct(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", 100.0 * x);
  return buf;
}

void run_scope(const routing_trace& t, capacity_scope scope, const std::vector<std::uint64_t>& per_layer,
               const options& opt, std::ostream& out) {
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  const std::uint64_t accesses = replay_accesses(t).size();
  const bool shared = scope == capacity_scope::shared;
  out << "  " << to_string(scope)
      << (shared ? " pool (capacity = per-layer figure x " + std::to_string(L) + " layers)"
                 : " pools (capacity per layer)")
      << ", hit ratio % of " << accesses << " demand accesses:\n";
  std::vector<std::string> header{"capacity"};
  for (auto n : names) header.emplace_back(n);
  header.insert(header.end(), {"best online", "gap to MIN", "vs max(LRU,LFU)"});
  text_table table(header);
  double worst_gap = 0.0, sum_gap = 0.0;
  std::uint64_t worst_cap = 0;
  std::size_t below = 0, over_five = 0;
  for (std::uint64_t c : per_layer) {
    const std::uint64_t cap = shared ? c * L : c;
    const cache_config cc{.num_layers = L, .num_experts = E, .capacity = cap, .scope = scope};
    const auto h = hits_of(t, cc);
    std::vector<std::string> row{std::to_string(cap)};
    for (std::size_t p = 0; p < names.size(); ++p) {
      row.push_back(opt.counts ? std::to_string(h[p]) : pct(static_cast<double>(h[p]) / static_cast<double>(accesses)));
    }
    std::size_t best = 0;
    for (std::size_t p = 1; p < online; ++p) {
      if (h[p] > h[best]) best = p;
    }
    const double gap = static_cast<double>(h[6] - h[best]) / static_cast<double>(accesses);
    const double vs =
        (static_cast<double>(h[best]) - static_cast<double>(std::max(h[0], h[1]))) / static_cast<double>(accesses);
    row.emplace_back(names[best]);
    row.push_back(pct(gap));
    row.push_back((vs >= 0 ? "+" : "") + pct(vs));
    table.add(std::move(row));
    if (gap > worst_gap) worst_gap = gap, worst_cap = cap;
    sum_gap += gap;
    if (gap > 0.05) ++over_five;
    // The new policies against the baselines: is the better of them ever below LRU or LFU?
    if (std::max(h[4], h[5]) < std::max(h[0], h[1])) ++below;
  }
  table.print(out, "    ");
  out << "  " << to_string(scope) << " summary: gap of the best online policy to MIN: max " << pct(worst_gap)
      << " points (capacity " << worst_cap << "), mean " << pct(sum_gap / static_cast<double>(per_layer.size()))
      << "; over 5 points at " << over_five << " of " << per_layer.size()
      << " capacities; hawkeye and pred-reuse both below max(LRU, LFU) at " << below << "\n";
  out << "  " << to_string(scope) << " goal (best online within 5 points of MIN at every capacity, new policies "
      << "never below LRU or LFU): " << (over_five == 0 && below == 0 ? "met" : "NOT met") << "\n";
}

/// The prefetching table (see the header): per capacity, each predictor feeding each policy.
void run_prefetch(const routing_trace& t, const std::vector<std::uint64_t>& per_layer, std::ostream& out) {
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts, k = t.info().top_k;
  const std::uint64_t accesses = replay_accesses(t).size();
  std::vector<std::uint64_t> caps;
  for (std::uint64_t c : {std::uint64_t{E / 8}, std::uint64_t{E / 4}, std::uint64_t{E / 2}}) {
    if (c == 0 || std::find(per_layer.begin(), per_layer.end(), c) == per_layer.end()) continue;
    if (std::find(caps.begin(), caps.end(), c) == caps.end()) caps.push_back(c);
  }
  if (caps.empty()) return;
  const short_horizon_config sh = cxl_moe_short_horizon(L, E, k);
  const markov_config mk{.num_layers = L, .num_experts = E, .top_k = k};
  const transition_config tr{.num_layers = L, .num_experts = E, .top_k = k};
  out << "  prefetching, per-layer pools: before each layer's batch the predictor's best " << k
      << " (top-k) experts are prefetched and every expert it scores is hinted; untimed, so a prefetch "
         "lands before its access (an upper bound on what prefetching adds); every prefetched expert is "
         "moved, and one never used before it leaves (or by the end) is wasted. Predictors: "
      << describe(sh) << " (CXL-MoE §3); Markov chain m = " << mk.history << ", n = " << mk.horizon
      << " (CXL-MoE §3); cross-layer transition counts. Policies: LRU admitting every prefetch; sticky LRU "
         "(CXL-MoE §3: prefetches admitted, demand misses only when flagged, sticky at confidence >= 0.8); "
         "pred-reuse admitting every prefetch; gated (ours, cache/gated_prefetch.hpp): pred-reuse eviction, a "
         "prefetch admitted at confidence >= 0.5, an evicting demand miss only when flagged >= 0.5. MIN "
         "without prefetch bounds demand caching only. Of "
      << accesses << " demand accesses:\n";
  text_table table({"capacity", "predictor", "policy", "hit %", "prefetched/access", "wasted % of prefetched",
                    "refused prefetches", "moved/access"});
  const auto add = [&](std::uint64_t c, const std::string& pred, const std::string& pol, const cache_stats& st) {
    const double a = static_cast<double>(accesses);
    const double moved = static_cast<double>(st.misses + st.prefetches) / a;
    const double wasted =
        st.prefetches == 0 ? 0.0 : static_cast<double>(st.prefetch_wasted) / static_cast<double>(st.prefetches);
    char buf[4][32];
    std::snprintf(buf[0], sizeof buf[0], "%.2f", 100.0 * static_cast<double>(st.hits) / a);
    std::snprintf(buf[1], sizeof buf[1], "%.3f", static_cast<double>(st.prefetches) / a);
    std::snprintf(buf[2], sizeof buf[2], "%.1f", 100.0 * wasted);
    std::snprintf(buf[3], sizeof buf[3], "%.3f", moved);
    table.add({std::to_string(c), pred, pol, buf[0], buf[1], buf[2], std::to_string(st.prefetch_rejected), buf[3]});
  };
  for (std::uint64_t c : caps) {
    const cache_config cc{.num_layers = L, .num_experts = E, .capacity = c, .scope = capacity_scope::per_layer};
    add(c, "-", "LRU, no prefetch", replay_cache<lru_policy>(t, cc).stats);
    add(c, "-", "MIN, no prefetch", replay_cache<belady_policy>(t, cc).stats);
    const auto rows = [&](const std::string& pname, auto make) {
      {
        auto p = make();
        add(c, pname, "LRU", replay_cache_with_prefetch<lru_policy>(t, cc, {}, p).stats);
      }
      {
        auto p = make();
        add(c, pname, "sticky LRU (CXL-MoE)", replay_cache_with_prefetch<sticky_lru_policy>(t, cc, {}, p).stats);
      }
      {
        auto p = make();
        add(c, pname, "pred-reuse", replay_cache_with_prefetch<predicted_reuse_policy>(t, cc, {}, p).stats);
      }
      {
        auto p = make();
        add(c, pname, "gated (ours)", replay_cache_with_prefetch<gated_prefetch_policy>(t, cc, {}, p).stats);
      }
    };
    rows("short-horizon", [&] { return short_horizon_predictor(sh); });
    rows("Markov", [&] { return markov_predictor(mk); });
    rows("transition", [&] { return transition_predictor(tr); });
  }
  table.print(out, "    ");
}

/// The GPU work of one MoE layer of a forward pass, from the model's shape on the GPU
/// (sim/forward_pass.hpp): attention over the tokens' positions and the router before the
/// experts (the dense layers too before the first MoE layer), each routed expert at FP16 on
/// its tokens, the shared experts after them (and the output head after the last layer). One
/// sequence per batch, as the traces record them.
struct model_layer_cost {
  forward_pass_cost<roofline_cost> fp;
  std::uint32_t dense_layers = 0, moe_layers = 0;

  static std::uint64_t cached_reads(const batch_view& b) noexcept {
    std::uint64_t s = 0;
    for (std::uint32_t p : b.positions) s += std::uint64_t{p} + 1;
    return s;
  }
  [[nodiscard]] seconds before_experts(const batch_view& b) const {
    const std::size_t n = b.tokens();
    const std::uint64_t reads = cached_reads(b);
    seconds s = fp.attention_seconds(dense_layers + b.ref.layer, n, reads, 1) + fp.router_seconds(n);
    if (b.ref.layer == 0) {
      for (std::uint32_t d = 0; d < dense_layers; ++d) s += fp.dense_layer_seconds(d, n, reads, 1);
    }
    return s;
  }
  [[nodiscard]] seconds expert_seconds(expert_key k, std::size_t tokens) const noexcept {
    return fp.device().compute_seconds(k, fp16, tokens);
  }
  [[nodiscard]] seconds after_experts(const batch_view& b) const {
    seconds s = fp.shared_experts_seconds(b.ref.layer, b.tokens());
    if (std::uint32_t{b.ref.layer} + 1 == moe_layers) s += fp.output_head_seconds(b.tokens());
    return s;
  }
};
static_assert(LayerCost<model_layer_cost>);

std::string fixed_str(double x, int digits) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

/// The timed prefetching table (see the header); its eight walks (below) are independent and
/// run on `jobs` threads.
void run_timed(const routing_trace& t, const std::vector<std::uint64_t>& per_layer, std::size_t jobs,
               std::ostream& out) {
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts, k = t.info().top_k;
  std::vector<std::uint64_t> caps;
  for (std::uint64_t c : {std::uint64_t{E / 8}, std::uint64_t{E / 4}, std::uint64_t{E / 2}}) {
    if (c == 0 || std::find(per_layer.begin(), per_layer.end(), c) == per_layer.end()) continue;
    if (std::find(caps.begin(), caps.end(), c) == caps.end()) caps.push_back(c);
  }
  if (caps.empty()) return;
  const std::optional<model_shape> shape = preset_for(t.info());
  if (!shape || !shape->describes_forward_pass() || shape->num_moe_layers() != L) {
    out << "  timed prefetching: skipped, no model preset matches " << t.info().model << " (" << L << " layers x " << E
        << " experts, top-" << k << "): the GPU's work cannot be priced\n";
    return;
  }
  const device_spec gpu = presets::h100_host_pcie5();
  const model_layer_cost cost{forward_pass_cost<roofline_cost>(roofline_cost(gpu, *shape), *shape),
                              shape->num_dense_layers, L};
  const bytes size = expert_bytes(*shape, fp16);
  // Eight independent walks, each a task (the timed ones, the longest, first); their
  // results are printed once all are done, so they do not depend on `jobs`.
  // The untimed demand replays of LRU and pred-reuse at every capacity, in one walk that
  // also counts the accesses.
  std::vector<expert_cache<lru_policy>> lru_demand;
  std::vector<expert_cache<predicted_reuse_policy>> reuse_demand;
  lru_demand.reserve(caps.size());
  reuse_demand.reserve(caps.size());
  for (std::uint64_t c : caps) {
    const cache_config cc{.num_layers = L, .num_experts = E, .capacity = c, .scope = capacity_scope::per_layer};
    lru_demand.emplace_back(cc);
    reuse_demand.emplace_back(cc);
  }
  std::uint64_t accesses = 0;
  const short_horizon_config sh = cxl_moe_short_horizon(L, E, k);
  const markov_config mk{.num_layers = L, .num_experts = E, .top_k = k};
  const transition_config tr{.num_layers = L, .num_experts = E, .top_k = k};
  // The untimed prefetch replays: per predictor, LRU and the gated policy at every capacity
  // in one walk, all hearing one predictor (the same statistics as one replay each).
  struct untimed_prefetch {
    std::vector<expert_cache<lru_policy>> lru;
    std::vector<expert_cache<gated_prefetch_policy>> gated;
  };
  const auto untimed = [&](auto predictor) {
    untimed_prefetch u;
    u.lru.reserve(caps.size());
    u.gated.reserve(caps.size());
    for (std::uint64_t c : caps) {
      const cache_config cc{.num_layers = L, .num_experts = E, .capacity = c, .scope = capacity_scope::per_layer};
      u.lru.emplace_back(cc);
      u.gated.emplace_back(cc);
    }
    static_cast<void>(replay_caches_with_prefetch(t, predictor, {}, {}, u.lru, u.gated));
    return u;
  };
  untimed_prefetch short_horizon, markov, transition;
  text_table table({"capacity", "predictor", "policy", "hits untimed", "hits timed", "late prefetches",
                    "prefetched untimed", "prefetched timed", "wasted untimed", "wasted prefetch MB timed", "stall s",
                    "link busy s", "total s", "decode ms/step"});
  const auto add = [&](std::uint64_t c, const std::string& pred, const std::string& pol, const cache_stats& u,
                       const timed_prefetch_result& r) {
    table.add({std::to_string(c), pred, pol, std::to_string(u.hits), std::to_string(r.stats.hits),
               std::to_string(r.stats.late_prefetches), std::to_string(u.prefetches),
               std::to_string(r.stats.prefetches), std::to_string(u.prefetch_wasted),
               fixed_str(static_cast<double>(r.wasted_prefetch_bytes) / 1e6, 1), fixed_str(r.stall_seconds, 4),
               fixed_str(r.link_busy_seconds, 4), fixed_str(r.total_seconds, 4),
               fixed_str(1e3 * r.seconds_per_decode_step(), 3)});
  };
  // The timed runs: the demand runs of every capacity in one walk, and per predictor its LRU
  // and gated runs of every capacity in one walk hearing the one predictor
  // (`replay_timed_prefetch_lockstep`: each run as replayed alone, each policy in its own
  // type). Per capacity: LRU then the second policy.
  std::vector<timed_prefetch_config> demand_cfgs, prefetch_cfgs;
  for (std::uint64_t c : caps) {
    timed_prefetch_config tc{.capacity = c, .expert_bytes = size, .link = gpu.weight_link};
    tc.policy = lru_config{};
    demand_cfgs.push_back(tc);
    prefetch_cfgs.push_back(tc);
    tc.policy = predicted_reuse_config{};
    demand_cfgs.push_back(tc);
    tc.policy = gated_prefetch_config{};
    prefetch_cfgs.push_back(tc);
  }
  const auto timed = [&](auto predictor) {
    return replay_timed_prefetch_lockstep(t, cost, std::span<const timed_prefetch_config>(prefetch_cfgs), &predictor);
  };
  std::vector<timed_prefetch_result> demand_timed, short_horizon_timed, markov_timed, transition_timed;
  detail::task_pool pool(std::min<std::size_t>(jobs, 8));
  pool.for_each(8, [&](std::size_t i) {
    switch (i) {
      case 0:
        short_horizon_timed = timed(short_horizon_predictor(sh));
        break;
      case 1:
        markov_timed = timed(markov_predictor(mk));
        break;
      case 2:
        transition_timed = timed(transition_predictor(tr));
        break;
      case 3:
        demand_timed = replay_timed_prefetch_lockstep(t, cost, std::span<const timed_prefetch_config>(demand_cfgs));
        break;
      case 4:
        accesses = replay_caches(t, {}, {}, lru_demand, reuse_demand).accesses;
        break;
      case 5:
        short_horizon = untimed(short_horizon_predictor(sh));
        break;
      case 6:
        markov = untimed(markov_predictor(mk));
        break;
      default:
        transition = untimed(transition_predictor(tr));
        break;
    }
  });
  out << "  timed prefetching, per-layer pools (sim/timed_cache.hpp): " << shape->name << " on " << gpu.name
      << ", experts at FP16 (" << size << " B) over its host link (" << fixed_str(gpu.weight_link.bandwidth / 1e9, 0)
      << " GB/s, " << fixed_str(gpu.weight_link.latency_seconds * 1e6, 1)
      << " us a transfer); the same walk and predictions as the untimed table, but every prefetch and every miss "
         "is a transfer on the link, a prefetch is usable only once landed and gets only the link time demand "
         "misses leave (it is queued at the previous layer's router output; late: its rest crosses on demand), "
         "and each layer's attention, router, experts and shared experts run on the GPU (roofline). Stall: the "
         "GPU's idle time waiting for weights. Of "
      << accesses << " demand accesses:\n";
  out << "  left out: the KV cache's and activations' traffic, kernel launch overheads, overlap of a layer's "
         "experts with the next layer's attention, the predictor's own compute, batching of several sequences, "
         "and pinned-memory or DMA setup; a prefetch never delays a demand transfer (it gets only idle link time, "
         "in 1 MiB chunks, as a DMA engine that yields at chunk grain).\n";
  for (std::size_t i = 0; i < caps.size(); ++i) {
    const std::uint64_t c = caps[i];
    add(c, "-", "LRU, no prefetch", lru_demand[i].stats(), demand_timed[2 * i]);
    add(c, "-", "pred-reuse, no prefetch", reuse_demand[i].stats(), demand_timed[2 * i + 1]);
    const auto rows = [&](const std::string& pname, const untimed_prefetch& u,
                          const std::vector<timed_prefetch_result>& r) {
      add(c, pname, "LRU", u.lru[i].stats(), r[2 * i]);
      add(c, pname, "gated (ours)", u.gated[i].stats(), r[2 * i + 1]);
    };
    rows("short-horizon", short_horizon, short_horizon_timed);
    rows("Markov", markov, markov_timed);
    rows("transition", transition, transition_timed);
  }
  table.print(out, "    ");
}

/// Bytes of an expert of 2^20 parameters at 16 and at 4 bits (4.25 bits a parameter with one
/// 16-bit scale and one 16-bit zero point per group of 128): the ratio is what matters.
constexpr std::uint64_t fp16_bytes = (std::uint64_t{1} << 20) * 2;
constexpr std::uint64_t int4_bytes = (std::uint64_t{1} << 20) * 17 / 32;

/// Demand accesses and hits of the experts of each size (a replay walking the batches as
/// `replay_cache` does, with the layer and step hooks).
struct size_class_hits {
  std::uint64_t big_accesses = 0, big_hits = 0, small_accesses = 0, small_hits = 0;
};

template <EvictionPolicy P>
size_class_hits hits_by_size(const routing_trace& t, const cache_config& cc, const typename P::config_type& pc,
                             bytes big) {
  expert_cache<P> cache(cc, pc);
  size_class_hits out;
  std::vector<std::uint8_t> seen(t.info().num_experts, 0);
  for (const step_ref& s : t.steps()) {
    for (const batch_ref& r : t.batches_of(s)) {
      const batch_view b = t.view(r);
      cache.begin_layer(b);
      detail::distinct_experts(b, seen, [&](expert_key k) {
        const bool hit = cache.get(k).hit;
        if (cc.footprints[cc.shape().flat(k)] == big) {
          ++out.big_accesses;
          out.big_hits += hit ? 1 : 0;
        } else {
          ++out.small_accesses;
          out.small_hits += hit ? 1 : 0;
        }
      });
      cache.end_layer(b.ref.layer);
    }
    cache.end_step();
  }
  return out;
}

/// How well `predicted_reuse_policy`'s moving average I of an expert's past gaps (smoothing
/// a, gaps counted in accesses to its layer) predicts its next gap: over the accesses that
/// have both, the shares where the next gap is within a factor 2 of I, longer, and shorter
/// (all 0 when none has both).
std::array<double, 3> interval_accuracy(const std::vector<expert_key>& accesses, std::uint32_t L, std::uint32_t E,
                                        double a) {
  const std::size_t n = accesses.size();
  std::vector<std::uint64_t> clock(L, 0), when(n);
  for (std::size_t i = 0; i < n; ++i) when[i] = ++clock[accesses[i].layer];
  std::vector<std::uint64_t> next_gap(n, 0);
  std::vector<std::size_t> later(static_cast<std::size_t>(L) * E, n);
  for (std::size_t i = n; i-- > 0;) {
    const std::size_t f = accesses[i].flat(E);
    if (later[f] != n) next_gap[i] = when[later[f]] - when[i];
    later[f] = i;
  }
  std::vector<std::uint64_t> last(static_cast<std::size_t>(L) * E, 0);
  std::vector<double> interval(last.size(), 0.0);
  std::array<std::uint64_t, 3> count{};
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t f = accesses[i].flat(E);
    if (last[f] != 0) {
      const auto gap = static_cast<double>(when[i] - last[f]);
      interval[f] = interval[f] == 0.0 ? gap : interval[f] + a * (gap - interval[f]);
    }
    last[f] = when[i];
    if (interval[f] == 0.0 || next_gap[i] == 0) continue;
    const double g = static_cast<double>(next_gap[i]);
    ++count[g > 2.0 * interval[f] ? 1 : g * 2.0 < interval[f] ? 2 : 0];
  }
  // No access with both (no expert used three times): nothing to measure.
  const double total = std::max<double>(1.0, static_cast<double>(count[0] + count[1] + count[2]));
  return {static_cast<double>(count[0]) / total, static_cast<double>(count[1]) / total,
          static_cast<double>(count[2]) / total};
}

/// The byte-capacity table (see the header).
void run_bytes(const routing_trace& t, const std::vector<std::uint64_t>& per_layer, std::ostream& out) {
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
  const std::vector<expert_key> accesses = replay_accesses(t);
  // The hottest quarter of each layer by activation count over the trace: a static choice of
  // precisions, as a deployment makes it once (the policies see only the sizes).
  std::vector<std::uint64_t> count(static_cast<std::size_t>(L) * E, 0);
  for (expert_key k : accesses) ++count[k.flat(E)];
  std::vector<bytes> sizes(count.size(), int4_bytes);
  const std::uint32_t hot = (E + 3) / 4;
  std::vector<std::uint32_t> order(E);
  for (std::uint32_t l = 0; l < L; ++l) {
    for (std::uint32_t e = 0; e < E; ++e) order[e] = e;
    const std::size_t base = static_cast<std::size_t>(l) * E;
    std::partial_sort(order.begin(), order.begin() + hot, order.end(), [&](std::uint32_t a, std::uint32_t b) {
      return count[base + a] > count[base + b] || (count[base + a] == count[base + b] && a < b);
    });
    for (std::uint32_t i = 0; i < hot; ++i) sizes[base + order[i]] = fp16_bytes;
  }
  const std::uint64_t layer_bytes = hot * fp16_bytes + (E - hot) * int4_bytes;
  // Per-layer pools of c FP16 experts' bytes, with the sizes above.
  const auto pools_of = [&](std::uint64_t c) {
    return cache_config{.num_layers = L,
                        .num_experts = E,
                        .capacity = c * fp16_bytes,
                        .unit = capacity_unit::byte_count,
                        .scope = capacity_scope::per_layer,
                        .footprints = sizes};
  };
  out << "  byte capacity, per-layer pools: the hottest " << hot << " experts of each layer (by activations over "
      << "the trace) at FP16 (" << fp16_bytes << " B for 2^20 parameters), the other " << (E - hot) << " at 4 bits ("
      << int4_bytes
      << " B, 4.25 bits a parameter); capacity = c FP16 experts' bytes per layer. MIN's rule (evict the "
         "farthest next use, size-blind) is a heuristic here, not the optimum (NP-hard with unequal sizes); "
         "the space-time bound (cache/space_time_bound.hpp, PFOO-U) is an upper bound on any demand "
         "policy, so the optimum lies between the best row and it. size-aware (ours, "
         "cache/size_aware_reuse.hpp) evicts the largest bytes x predicted reuse distance, the bound's greedy "
         "rule online. Hit ratio % of "
      << accesses.size() << " demand accesses:\n";
  text_table table({"capacity (FP16 experts)", "LRU", "LFU", "score-aware", "ema-score", "hawkeye", "pred-reuse",
                    "size-aware", "MIN's rule (heuristic)", "space-time bound", "best online", "gap to bound"});
  const double a = static_cast<double>(accesses.size());
  for (std::uint64_t c : per_layer) {
    if (c * fp16_bytes >= layer_bytes) break;
    const cache_config cc = pools_of(c);
    // The online policies (size-aware last), then MIN's rule.
    const std::array<std::uint64_t, 8> h = {
        replay_cache<lru_policy>(t, cc).stats.hits,
        replay_cache<lfu_policy>(t, cc).stats.hits,
        replay_cache<score_aware_policy>(t, cc).stats.hits,
        replay_cache<ema_score_policy>(t, cc).stats.hits,
        replay_cache<hawkeye_policy>(t, cc).stats.hits,
        replay_cache<predicted_reuse_policy>(t, cc).stats.hits,
        replay_cache<size_aware_reuse_policy>(t, cc, {.footprints = sizes}).stats.hits,
        replay_cache<belady_policy>(t, cc).stats.hits};
    const std::uint64_t bound = space_time_hit_bound(accesses, cc);
    std::vector<std::string> row{std::to_string(c)};
    for (std::uint64_t x : h) row.push_back(pct(static_cast<double>(x) / a));
    row.push_back(pct(static_cast<double>(bound) / a));
    std::size_t best = 0;
    for (std::size_t p = 1; p < 7; ++p) {
      if (h[p] > h[best]) best = p;
    }
    row.emplace_back(best == 6 ? std::string_view("size-aware") : names[best]);
    row.push_back(pct(static_cast<double>(bound - std::min(bound, h[best])) / a));
    table.add(std::move(row));
  }
  table.print(out, "    ");
  // Why the reuse-distance policies trail where they do: how well the interval predicts,
  // and which size class the size weighting gives hits to and takes them from.
  const std::array<double, 3> acc = interval_accuracy(accesses, L, E, predicted_reuse_config{}.smoothing);
  out << "  pred-reuse's moving average of an expert's gaps (smoothing " << predicted_reuse_config{}.smoothing
      << ", per-layer clocks) lies within 2x of its next gap at " << pct(acc[0]) << "% of the accesses that have both"
      << " (the next gap is longer at " << pct(acc[1]) << "%, shorter at " << pct(acc[2])
      << "%). Hit ratio % of the FP16 experts' accesses / of the 4-bit experts' accesses:\n";
  text_table why({"capacity (FP16 experts)", "FP16 share of accesses", "ema-score", "pred-reuse", "size-aware"});
  for (std::uint64_t c : per_layer) {
    if (c * fp16_bytes >= layer_bytes) break;
    const cache_config cc = pools_of(c);
    const std::array<size_class_hits, 3> h = {hits_by_size<ema_score_policy>(t, cc, {}, fp16_bytes),
                                              hits_by_size<predicted_reuse_policy>(t, cc, {}, fp16_bytes),
                                              hits_by_size<size_aware_reuse_policy>(t, cc, {}, fp16_bytes)};
    const auto ratio = [](std::uint64_t x, std::uint64_t n) {
      return n == 0 ? std::string("-") : pct(static_cast<double>(x) / static_cast<double>(n));
    };
    std::vector<std::string> row{std::to_string(c), ratio(h[0].big_accesses, h[0].big_accesses + h[0].small_accesses)};
    for (const size_class_hits& x : h) {
      row.push_back(ratio(x.big_hits, x.big_accesses) + " / " + ratio(x.small_hits, x.small_accesses));
    }
    why.add(std::move(row));
  }
  why.print(out, "    ");
}

}  // namespace

routing_trace load(const fs::path& path) { return examples::load_trace(path); }

void run(const routing_trace& t, const std::string& label, const options& opt, std::ostream& out) {
  const std::uint32_t E = t.info().num_experts;
  std::vector<std::uint64_t> caps;
  for (std::uint64_t c : opt.capacities) {
    if (c >= E) {
      out << "note: capacity " << c << " per layer holds all " << E << " experts of a layer: not replayed on " << label
          << "\n";
    } else {
      caps.push_back(c);
    }
  }
  if (opt.capacities.empty()) {
    const std::uint64_t step = E <= 64 ? 1 : E / 32;
    for (std::uint64_t c = step; c < E; c += step) caps.push_back(c);
  }
  out << "trace " << label << ": " << t.info().model << ", " << t.info().num_layers << " layers x " << E
      << " experts, top-" << t.info().top_k << ", " << t.requests().size() << " request(s), " << t.steps().size()
      << " forward passes (prefill and decode, one demand access per distinct expert of a layer's batch)\n";
  if (caps.empty()) {
    out << "  no capacity below " << E << " experts per layer to replay\n";
    return;
  }
  if (opt.per_layer) run_scope(t, capacity_scope::per_layer, caps, opt, out);
  if (opt.shared) run_scope(t, capacity_scope::shared, caps, opt, out);
  if (opt.prefetch) run_prefetch(t, caps, out);
  if (opt.timed) run_timed(t, caps, opt.jobs, out);
  if (opt.byte_capacity) run_bytes(t, caps, out);
}

}  // namespace moepolicy::examples::reuse_eviction
