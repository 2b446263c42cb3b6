// `moepolicy replay TRACE...`: replays a trace's routing through an expert cache with an
// eviction policy at each capacity, beside Belady's MIN (and LRU's exact stack-distance
// curve), optionally with a prefetch predictor or the expert-cache router in front.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../common/table.hpp"
#include "commands.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sim/cache_replay.hpp"

namespace moepolicy::tool {
namespace {

using examples::fixed;

struct options {
  std::vector<std::string> traces;
  std::string policy = "lru";
  std::vector<std::uint64_t> capacities;
  bool per_layer = false;
  std::string predictor = "none";
  std::uint32_t lookahead = 1;
  std::optional<double> router_alpha;
};

std::string known_policies() {
  std::string known;
  for (const auto& e : eviction_policies) known += std::string(e.name) + ", ";
  return known + "all";
}

std::string pct(double r) { return fixed(100.0 * r, 2) + "%"; }

/// Calls `f(predictor&)` with a fresh predictor of the chosen kind.
template <class F>
void with_predictor(const options& o, const routing_trace& t, F&& f) {
  const trace_info& i = t.info();
  if (o.predictor == "short-horizon") {
    short_horizon_predictor p(
        {.num_layers = i.num_layers, .num_experts = i.num_experts, .top_k = i.top_k, .horizon = o.lookahead});
    f(p);
  } else if (o.predictor == "transition") {
    transition_predictor p({.num_layers = i.num_layers, .num_experts = i.num_experts, .top_k = i.top_k});
    f(p);
  } else {
    oracle_predictor p(t, {.horizon = o.lookahead});
    f(p);
  }
}

/// Router in front of a cache of policy `pc`: each batch is routed with the cache's
/// residency, and the routed experts are accessed.
struct router_run {
  route_result totals;
  cache_stats stats;
};

router_run replay_with_router(const routing_trace& t, const cache_config& cc, const any_eviction_config& pc,
                              double alpha) {
  const trace_info& info = t.info();
  expert_cache<any_eviction_policy> cache(cc, pc);
  expert_cache_router router({.num_experts = info.num_experts, .top_k = info.top_k, .alpha = alpha});
  router_run out;
  std::vector<expert_id> ids;
  std::vector<float> weights;
  std::vector<std::uint8_t> seen(info.num_experts, 0);
  for (const request_ref& req : t.requests()) {
    for (const step_ref& s : t.steps_of(req)) {
      for (const batch_ref& ref : t.batches_of(s)) {
        const batch_view b = t.view(ref);
        ids.resize(b.experts.size());
        weights.resize(b.weights.size());
        const layer_id l = ref.layer;
        const route_result r = router.route(
            b, [&](expert_id e) { return cache.contains(expert_key{l, e}); }, std::span<expert_id>(ids),
            std::span<float>(weights));
        out.totals.tokens += r.tokens;
        out.totals.selections += r.selections;
        out.totals.top_score += r.top_score;
        out.totals.low_score += r.low_score;
        out.totals.unscored += r.unscored;
        out.totals.low_kept_resident += r.low_kept_resident;
        out.totals.substituted += r.substituted;
        out.totals.unreplaced += r.unreplaced;
        out.totals.original_mass += r.original_mass;
        out.totals.routed_mass += r.routed_mass;
        out.totals.kept_mass += r.kept_mass;
        out.totals.full_scores = out.totals.full_scores && r.full_scores;
        batch_view routed = b;
        routed.experts = ids;
        routed.weights = weights;
        cache.begin_layer(routed);
        for (expert_id e : ids) {
          if (seen[e] != 0) continue;
          seen[e] = 1;
          static_cast<void>(cache.get(expert_key{l, e}, access_info{}));
        }
        for (expert_id e : ids) seen[e] = 0;
        cache.end_layer(l);
      }
      cache.end_step();
    }
  }
  out.stats = cache.stats();
  return out;
}

void run_replay(const options& o) {
  const std::vector<std::filesystem::path> paths(o.traces.begin(), o.traces.end());
  const routing_trace t = io::read_trace(paths);
  const trace_info& info = t.info();
  const capacity_scope scope = o.per_layer ? capacity_scope::per_layer : capacity_scope::shared;
  const cache_shape shape{info.num_layers, info.num_experts, scope};

  std::vector<std::string> names;
  if (o.policy == "all") {
    for (const auto& e : eviction_policies) {
      if (e.name != "belady") names.emplace_back(e.name);
    }
  } else {
    names.push_back(o.policy);
  }
  const bool prefetch = o.predictor != "none";
  const bool show_lru_exact = o.policy == "lru" || o.policy == "all";

  std::cout << "trace: " << paths.front().string();
  if (paths.size() > 1) std::cout << " (+" << paths.size() - 1 << " more files)";
  std::cout << '\n';
  std::cout << "  shape: " << info.num_layers << " MoE layers, " << info.num_experts << " experts, top-" << info.top_k
            << "; cache " << to_string(scope) << " ("
            << (o.per_layer ? std::to_string(info.num_experts) + " slots per layer"
                            : std::to_string(shape.slots()) + " slots")
            << "), capacity in experts" << (o.per_layer ? " per layer" : "") << '\n';
  const std::vector<expert_key> accesses = replay_accesses(t);
  std::cout << "  demand accesses " << accesses.size() << " (one per distinct expert of each layer batch)\n";

  const hit_curve lru_curve = show_lru_exact ? lru_hit_curve(t, shape) : hit_curve{};
  std::vector<std::string> header{"capacity"};
  for (const auto& n : names) {
    header.push_back(n);
    if (prefetch) header.push_back(n + "+" + o.predictor);
  }
  header.emplace_back("belady (MIN)");
  if (o.policy != "all" && o.policy != "belady") header.emplace_back("gap to MIN");
  if (show_lru_exact) header.emplace_back("lru exact");
  examples::text_table table(header);
  for (std::uint64_t c : o.capacities) {
    const cache_config cc{.num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = c, .scope = scope};
    std::vector<std::string> row{std::to_string(c)};
    double last = 0.0;
    for (const auto& n : names) {
      const any_eviction_config pc = eviction_config_by_name(n);
      last = replay_cache(t, cc, pc).stats.hit_ratio();
      row.push_back(pct(last));
      if (prefetch) {
        with_predictor(o, t, [&](auto& p) {
          const auto r = replay_cache_with_prefetch<any_eviction_policy>(t, cc, pc, p);
          row.push_back(pct(r.stats.hit_ratio()));
        });
      }
    }
    const double min = replay_cache<belady_policy>(t, cc).stats.hit_ratio();
    row.push_back(pct(min));
    if (o.policy != "all" && o.policy != "belady") row.push_back(fixed(100.0 * (min - last), 2) + " pt");
    if (show_lru_exact) row.push_back(pct(lru_curve.hit_ratio(static_cast<std::size_t>(c))));
    table.add(std::move(row));
  }
  std::cout << "  demand hit ratio" << (prefetch ? " (with prefetch: demand hits, prefetches not counted)" : "")
            << ":\n";
  table.print(std::cout, "    ");
  if (!prefetch && std::find(names.begin(), names.end(), "sticky-lru") != names.end()) {
    std::cout << "  note: sticky-lru caches only experts a predictor flagged (CXL-MoE's gated admission); "
                 "without --predictor it admits nothing\n";
  }

  if (prefetch) {
    prediction_quality q;
    with_predictor(o, t, [&](auto& p) { q = evaluate_predictor(t, p, {.horizon = o.lookahead}); });
    std::cout << "  predictor " << o.predictor << " (lookahead " << o.lookahead << ", top-" << info.top_k
              << " predicted per batch, truth: next " << o.lookahead << " batch(es) of the layer): precision "
              << pct(q.precision()) << ", recall " << pct(q.recall()) << ", " << q.empty_predictions << " of "
              << q.predictions << " predictions empty\n";
  }

  if (o.router_alpha) {
    const std::string rp = o.policy == "all" || o.policy == "belady" ? "lru" : o.policy;
    std::cout << "  expert-cache router, alpha " << fixed(*o.router_alpha, 2) << ", in front of " << rp
              << " (residency from the cache):\n";
    if (!info.has_scores) {
      std::cout << "    this trace has no full router scores (only the top-" << info.top_k
                << " gate weights): the router cannot substitute on it; every routing is kept\n";
    }
    examples::text_table rt({"capacity", "hit ratio", "substituted", "unreplaced", "low kept", "mass preserved",
                             "kept fraction"});
    for (std::uint64_t c : o.capacities) {
      const cache_config cc{.num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = c,
                            .scope = scope};
      const router_run r = replay_with_router(t, cc, eviction_config_by_name(rp), *o.router_alpha);
      rt.add({std::to_string(c), pct(r.stats.hit_ratio()),
              std::to_string(r.totals.substituted) + "/" + std::to_string(r.totals.selections),
              std::to_string(r.totals.unreplaced), std::to_string(r.totals.low_kept_resident),
              pct(r.totals.mass_preserved()), pct(r.totals.kept_fraction())});
    }
    rt.print(std::cout, "    ");
    if (info.has_scores) {
      std::cout << "    (recorded scores that are zero outside the top-k, as in FLAME-MoE CSV, give the router "
                   "nothing to substitute with either)\n";
    }
  }
}

}  // namespace

void add_replay(CLI::App& app) {
  auto* cmd = app.add_subcommand("replay", "Replay a trace's routing through an expert cache: hit ratio per capacity "
                                           "beside Belady's MIN");
  auto opt = std::make_shared<options>();
  cmd->add_option("traces", opt->traces, "Trace file or directory; several Granite JSONL files combine into one trace")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--policy", opt->policy, "Eviction policy: " + known_policies())
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v == "all") return {};
            for (const auto& e : eviction_policies) {
              if (e.name == v) return {};
            }
            return "unknown policy '" + v + "' (known: " + known_policies() + ")";
          },
          "POLICY"));
  cmd->add_option("--capacity", opt->capacities, "Cache capacities in experts (per layer with --per-layer), >= 1")
      ->required()
      ->expected(1, -1);
  cmd->add_flag("--per-layer", opt->per_layer, "One pool per layer instead of one shared pool");
  cmd->add_option("--predictor", opt->predictor, "Prefetch predictor: none, short-horizon, transition, oracle")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "short-horizon", "transition", "oracle"}));
  auto* la = cmd->add_option("--lookahead", opt->lookahead,
                             "Batches of a layer a prediction covers (short-horizon, oracle, and the truth of "
                             "precision/recall), >= 1")
                 ->capture_default_str();
  cmd->add_option("--router-alpha", opt->router_alpha,
                  "Run the expert-cache router (substitution threshold alpha in [0, 1]) before the cache");
  cmd->callback([opt, la] {
    for (std::uint64_t c : opt->capacities) {
      if (c == 0) throw CLI::ValidationError("--capacity", "capacity must be >= 1 expert, got 0");
    }
    if (opt->lookahead == 0) throw CLI::ValidationError("--lookahead", "lookahead must be >= 1, got 0");
    if (la->count() > 0 && opt->predictor == "none") {
      throw CLI::ValidationError("--lookahead", "--lookahead " + std::to_string(opt->lookahead) +
                                                    " needs --predictor (short-horizon, transition or oracle)");
    }
    if (opt->router_alpha && !(*opt->router_alpha >= 0.0 && *opt->router_alpha <= 1.0)) {
      throw CLI::ValidationError("--router-alpha", "alpha must be in [0, 1], got " + std::to_string(*opt->router_alpha));
    }
    run_replay(*opt);
  });
}

}  // namespace moepolicy::tool
