// SPDX-License-Identifier: Apache-2.0
// The reuse_eviction driver's comparison (drivers/reuse_eviction.hpp).
#include "drivers/reuse_eviction.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/table.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/hawkeye.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/predicted_reuse.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/sim/cache_replay.hpp"

namespace moepolicy::examples::reuse_eviction {
namespace {

namespace fs = std::filesystem;

constexpr std::array<std::string_view, 7> names = {"LRU", "LFU", "score-aware", "ema-score", "hawkeye", "pred-reuse",
                                                   "MIN"};
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
  out << "  " << to_string(scope) << (shared ? " pool (capacity = per-layer figure x " + std::to_string(L) + " layers)"
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
    const double vs = (static_cast<double>(h[best]) - static_cast<double>(std::max(h[0], h[1]))) /
                      static_cast<double>(accesses);
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

}  // namespace

routing_trace load(const fs::path& path) { return io::read_trace(path); }

void run(const routing_trace& t, const std::string& label, const options& opt, std::ostream& out) {
  const std::uint32_t E = t.info().num_experts;
  std::vector<std::uint64_t> caps;
  for (std::uint64_t c : opt.capacities) {
    if (c >= E) {
      out << "note: capacity " << c << " per layer holds all " << E << " experts of a layer: not replayed on "
          << label << "\n";
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
}

}  // namespace moepolicy::examples::reuse_eviction
