// `moepolicy replay TRACE...`: replays a trace's routing through an expert cache at each
// capacity, every eviction policy by name.
//
// Untimed (the default): the demand hit ratio of each policy beside Belady's MIN (and LRU's
// exact stack-distance curve); the sticky LRU, whose admission is gated by a predictor
// (CXL-MoE §3), hears the hints of `--predictor` (by default the library's one definition of
// CXL-MoE's predictor, `cxl_moe_short_horizon`, printed with the figures); optionally the
// expert-cache router in front.
//
// Timed (`--link`): the decode steps on the timed model of serving (sim/offload_replay.hpp)
// — B concurrent streams (`--concurrency`), a GPU cache of each capacity fetching over the
// named link, prefetching with `--predictor` — giving TPOT, throughput, hit ratio (a hit is
// resident and landed), late prefetches, stalls and bytes per link.
//
// `--json` prints the results as one JSON document instead of tables.
//
// Untimed, one canonical file is replayed straight from its memory map (canonical_file), in
// bounded memory at any length: Belady's next uses are rebuilt a chunk at a time from an
// index (sim/cache_replay.hpp, `next_use_index`) and the exact LRU curve is taken in one
// pass; `--jobs N` runs the replays on N threads.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "../common/model_match.hpp"
#include "../common/table.hpp"
#include "commands.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/predict/markov_predictor.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/offload_replay.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "scratch_canonical.hpp"

namespace moepolicy::tool {
namespace {

using examples::fixed;
using json = nlohmann::json;

using options = replay_options;

std::string pct(double r) { return fixed(100.0 * r, 2) + "%"; }

/// The policies a run covers: one by name, or every one (Belady apart: it is the bound).
std::vector<std::string> policy_names(const options& o, bool timed) {
  std::vector<std::string> names;
  if (o.policy == "all") {
    for (const auto& e : eviction_policies) {
      if (e.name != "belady") names.emplace_back(e.name);
    }
  } else {
    names.push_back(o.policy);
  }
  if (timed) names.erase(std::remove(names.begin(), names.end(), "belady"), names.end());
  return names;
}

/// The untimed predictor settings: the shared definition, with the options' overrides.
short_horizon_config hint_config(const options& o, const trace_info& i) {
  short_horizon_config c = cxl_moe_short_horizon(i.num_layers, i.num_experts, i.top_k);
  if (o.lookahead) c.horizon = *o.lookahead;
  if (o.history) c.history = *o.history;
  return c;
}

/// Calls `f(predictor&)` with a fresh predictor of the chosen kind (untimed mode).
template <class F>
void with_predictor(const options& o, const trace_info& i, const routing_trace* whole, F&& f) {
  const short_horizon_config sh = hint_config(o, i);
  if (o.predictor == "transition") {
    transition_predictor p({.num_layers = i.num_layers, .num_experts = i.num_experts, .top_k = i.top_k});
    f(p);
  } else if (o.predictor == "markov") {
    markov_predictor p({.num_layers = i.num_layers,
                        .num_experts = i.num_experts,
                        .top_k = i.top_k,
                        .history = o.history.value_or(1),
                        .horizon = sh.horizon});
    f(p);
  } else if (o.predictor == "oracle") {
    oracle_predictor p(*whole, {.horizon = sh.horizon});
    f(p);
  } else {
    short_horizon_predictor p(sh);
    f(p);
  }
}

std::string predictor_label(const options& o, const trace_info& i) {
  const short_horizon_config sh = hint_config(o, i);
  if (o.predictor == "none") return "none (the gate admits nothing)";
  if (o.predictor == "transition") return "transition predictor (layer l -> l+1)";
  if (o.predictor == "markov") {
    return "Markov model, m = " + std::to_string(o.history.value_or(1)) + ", n = " + std::to_string(sh.horizon);
  }
  if (o.predictor == "oracle") return "oracle (the trace's next " + std::to_string(sh.horizon) + " batches)";
  return describe(sh);
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
            b,
            [&](expert_id e) {
              return cache.contains(expert_key{l, e});
            },
            std::span<expert_id>(ids), std::span<float>(weights));
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

/// The untimed replays of one canonical file on one thread, in one walk of the file
/// (`replay_caches`, sim/cache_replay.hpp): every cache of `plain` (policies that hear no
/// predictor) and a Belady cache at each of `belady_capacities`, which share one cursor of
/// `index` (one rebuild of each chunk's next uses). The hit ratios are those of one
/// `replay_cache` per cache. LRU, the common case, is replayed by its own type rather than
/// through `any_eviction_policy`. `ratio(i)` receives the hit ratio of the i-th plain
/// cache, then of each Belady cache. Without `index`, no cache may read the future.
struct fused_cache_spec {
  std::uint64_t capacity = 0;
  std::string policy;
};

template <class Out>
void replay_fused(const canonical_file& t, const next_use_index* index, capacity_scope scope,
                  const std::vector<fused_cache_spec>& plain, const std::vector<std::uint64_t>& belady_capacities,
                  Out&& ratio) {
  const trace_info& info = t.info();
  const auto config = [&](std::uint64_t c) {
    return cache_config{.num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = c, .scope = scope};
  };
  std::deque<expert_cache<lru_policy>> lru;
  std::deque<expert_cache<any_eviction_policy>> other;
  std::deque<expert_cache<belady_policy>> belady;
  for (const fused_cache_spec& p : plain) {
    if (p.policy == "lru") {
      lru.emplace_back(config(p.capacity), lru_config{});
    } else {
      other.emplace_back(config(p.capacity), eviction_config_by_name(p.policy));
    }
  }
  for (std::uint64_t c : belady_capacities) belady.emplace_back(config(c), belady_config{});
  if (index != nullptr) {
    static_cast<void>(replay_caches(t, cache_replay_config{}, *index, lru, other, belady));
  } else {  // no cache reads the future
    static_cast<void>(replay_caches(t, cache_replay_config{}, std::span<const std::uint64_t>{}, lru, other, belady));
  }
  std::size_t li = 0, oi = 0;
  for (std::size_t i = 0; i < plain.size(); ++i) {
    ratio(i, plain[i].policy == "lru" ? lru[li++].stats().hit_ratio() : other[oi++].stats().hit_ratio());
  }
  for (std::size_t i = 0; i < belady.size(); ++i) ratio(plain.size() + i, belady[i].stats().hit_ratio());
}

/// The untimed replay of a trace in memory or of a canonical file walked from its map
/// (`canonical_file`, which holds a chunk of the file at a time). The access sequence is
/// built once: the LRU curve and the next uses Belady reads come from it, and then it is
/// dropped; every (capacity, policy) replay is independent and runs on `--jobs` threads.
template <class Trace>
void run_untimed(const options& o, const Trace& t, const routing_trace* whole,
                 const std::vector<std::filesystem::path>& paths) {
  const trace_info& info = t.info();
  const capacity_scope scope = o.per_layer ? capacity_scope::per_layer : capacity_scope::shared;
  const cache_shape shape{info.num_layers, info.num_experts, scope};
  const std::vector<std::string> names = policy_names(o, false);
  const bool show_lru_exact = o.policy == "lru" || o.policy == "all";
  const bool reference = o.reference == "belady";
  const bool sticky = std::find(names.begin(), names.end(), "sticky-lru") != names.end() ||
                      std::find(names.begin(), names.end(), "gated-prefetch") != names.end();
  const std::string hints = predictor_label(o, info);
  // The next uses are read by the Belady column and by a policy that reads the future.
  const cache_config probe{
      .num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = o.capacities.front(), .scope = scope};
  bool needs_future = reference;
  for (const auto& n : names) {
    needs_future =
        needs_future || expert_cache<any_eviction_policy>(probe, eviction_config_by_name(n)).policy().reads_future();
  }
  // The future Belady reads: a trace in memory holds its next uses (8 bytes per access); a
  // mapped file gets an index that rebuilds them a chunk at a time, so its replay runs in
  // bounded memory at any length. The LRU curve comes from the same pass; without a
  // reader of the future the curve's pass is the only one before the replays.
  constexpr bool mapped = std::is_same_v<Trace, canonical_file>;
  using future_type = std::conditional_t<mapped, std::unique_ptr<next_use_index>, std::vector<std::uint64_t>>;
  hit_curve lru_curve;
  future_type next_use;
  std::uint64_t accesses = 0;
  if (!needs_future) {
    lru_curve = lru_hit_curve(t, shape);  // counts the accesses too
    accesses = lru_curve.accesses;
  } else {
    lru_curve_builder lru(shape);
    if constexpr (mapped) {
      next_use = std::make_unique<next_use_index>(t, cache_replay_config{}, 0, [&](expert_key k) {
        if (show_lru_exact) lru.add(k);
      });
      accesses = next_use->accesses();
    } else {
      const std::vector<expert_key> sequence = replay_accesses(t);
      accesses = sequence.size();
      if (show_lru_exact) {
        for (const expert_key& k : sequence) lru.add(k);
      }
      next_use = next_use_positions(sequence, info.num_layers, info.num_experts);
    }
    if (show_lru_exact) lru_curve = lru.curve();
  }
  // The LRU column is read off the exact curve, computed whenever LRU is replayed: a demand
  // LRU cache counted in experts, with no admission, prefetch, shield or reset, is a stack
  // algorithm (cache/stack_distance.hpp), so its hits at every capacity are the curve's, as
  // the tests check against replays. No LRU cache is replayed.
  const auto lru_from_curve = [&](const std::string& n) { return n == "lru" && show_lru_exact; };

  // One task per (capacity, column): the policies, then Belady unless `--reference none`.
  // On one thread, a mapped file's replays that hear no predictor run together in one walk
  // (`replay_fused`).
  const std::size_t columns = names.size() + 1;
  std::vector<double> ratio(o.capacities.size() * columns, 0.0);
  std::vector<std::function<void()>> tasks;
  const auto hinted_policy = [&](const std::string& n) {
    return (n == "sticky-lru" || n == "gated-prefetch") && o.predictor != "none";
  };
  for (std::size_t ci = 0; ci < o.capacities.size(); ++ci) {
    for (std::size_t pi = 0; pi < names.size(); ++pi) {
      if (lru_from_curve(names[pi])) {
        ratio[ci * columns + pi] = lru_curve.hit_ratio(static_cast<std::size_t>(o.capacities[ci]));
      }
    }
  }
  bool fused = false;
  if constexpr (mapped) {
    if (o.jobs <= 1) {
      fused = true;
      std::vector<fused_cache_spec> plain;
      std::vector<std::size_t> where;
      for (std::size_t ci = 0; ci < o.capacities.size(); ++ci) {
        for (std::size_t pi = 0; pi < names.size(); ++pi) {
          if (hinted_policy(names[pi]) || lru_from_curve(names[pi])) continue;
          plain.push_back({o.capacities[ci], names[pi]});
          where.push_back(ci * columns + pi);
        }
      }
      const std::vector<std::uint64_t> belady_capacities = reference ? o.capacities : std::vector<std::uint64_t>{};
      for (std::size_t ci = 0; ci < belady_capacities.size(); ++ci) where.push_back(ci * columns + names.size());
      if (!plain.empty() || !belady_capacities.empty()) {
        replay_fused(t, next_use.get(), scope, plain, belady_capacities,
                     [&](std::size_t i, double r) { ratio[where[i]] = r; });
      }
    }
  }
  // One replay, reading the index or the positions, or no future when nothing reads it.
  const auto replay_one = [&](const cache_config& cc, const any_eviction_config& pc) {
    if constexpr (mapped) {
      if (next_use) return replay_cache(t, cc, pc, {}, *next_use);
      return replay_cache(t, cc, pc);
    } else {
      return replay_cache(t, cc, pc, {}, std::span<const std::uint64_t>(next_use));
    }
  };
  for (std::size_t ci = 0; ci < o.capacities.size(); ++ci) {
    const cache_config cc{
        .num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = o.capacities[ci], .scope = scope};
    for (std::size_t pi = 0; pi < columns; ++pi) {
      double* out = &ratio[ci * columns + pi];
      if (pi == names.size()) {
        if (!fused && reference) {
          tasks.emplace_back([&t, cc, out, &next_use] {
            if constexpr (mapped) {
              *out = replay_cache<belady_policy>(t, cc, {}, {}, *next_use).stats.hit_ratio();
            } else {
              *out = replay_cache<belady_policy>(t, cc, {}, {}, next_use).stats.hit_ratio();
            }
          });
        }
        continue;
      }
      if (lru_from_curve(names[pi]) || (fused && !hinted_policy(names[pi]))) continue;
      const std::string n = names[pi];
      tasks.emplace_back([&o, &t, whole, cc, out, n, &replay_one, &hinted_policy] {
        const any_eviction_config pc = eviction_config_by_name(n);
        if (hinted_policy(n)) {
          // The sticky LRU and the gated prefetch read no future.
          const auto hinted = [&](const auto& trace) {
            with_predictor(o, trace.info(), whole, [&](auto& p) {
              *out = replay_cache_with_hints<any_eviction_policy>(trace, cc, pc, p).stats.hit_ratio();
            });
          };
          if (o.predictor == "oracle") {
            hinted(*whole);  // the oracle reads the trace in memory
          } else {
            hinted(t);
          }
        } else {
          *out = replay_one(cc, pc).stats.hit_ratio();
        }
      });
    }
  }
  // Each task on the pool (`--jobs` threads, at most one per task); the first exception a
  // task throws is rethrown once every thread has stopped.
  detail::task_pool pool(std::max<std::size_t>(1, std::min(o.jobs, tasks.size())));
  pool.for_each(tasks.size(), [&](std::size_t i) { tasks[i](); });

  json doc{{"mode", "untimed"},
           {"trace", paths.front().string()},
           {"scope", std::string(to_string(scope))},
           {"accesses", accesses},
           {"hints", hints},
           {"rows", json::array()}};
  std::vector<std::string> header{"capacity"};
  for (const auto& n : names) header.push_back(n);
  const bool gap = reference && o.policy != "all" && o.policy != "belady";
  if (reference) header.emplace_back("belady (MIN)");
  if (gap) header.emplace_back("gap to MIN");
  if (show_lru_exact) header.emplace_back("lru exact");
  examples::text_table table(header);
  for (std::size_t ci = 0; ci < o.capacities.size(); ++ci) {
    const std::uint64_t c = o.capacities[ci];
    std::vector<std::string> row{std::to_string(c)};
    json jr{{"capacity", c}};
    double last = 0.0;
    for (std::size_t pi = 0; pi < names.size(); ++pi) {
      last = ratio[ci * columns + pi];
      row.push_back(pct(last));
      jr[names[pi]] = last;
    }
    if (reference) {
      const double min = ratio[ci * columns + names.size()];
      row.push_back(pct(min));
      jr["belady"] = min;
      if (gap) row.push_back(fixed(100.0 * (min - last), 2) + " pt");
    }
    if (show_lru_exact) {
      const double exact = lru_curve.hit_ratio(static_cast<std::size_t>(c));
      row.push_back(pct(exact));
      jr["lru_exact"] = exact;
    }
    table.add(std::move(row));
    doc["rows"].push_back(jr);
  }

  std::optional<prediction_quality> quality;
  if (!o.predictor.empty() && o.predictor != "none") {
    prediction_quality q;
    with_predictor(o, info, whole,
                   [&](auto& p) { q = evaluate_predictor(*whole, p, {.horizon = hint_config(o, info).horizon}); });
    quality = q;
    doc["predictor"] = {{"name", hints},
                        {"precision", q.precision()},
                        {"recall", q.recall()},
                        {"predictions", q.predictions},
                        {"empty", q.empty_predictions}};
  }
  std::optional<std::vector<router_run>> routed;
  std::string rp;
  if (o.router_alpha) {
    rp = o.policy == "all" || o.policy == "belady" ? "lru" : o.policy;
    routed.emplace();
    for (std::uint64_t c : o.capacities) {
      const cache_config cc{
          .num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = c, .scope = scope};
      routed->push_back(replay_with_router(*whole, cc, eviction_config_by_name(rp), *o.router_alpha));
      const router_run& r = routed->back();
      doc["router"].push_back({{"capacity", c},
                               {"hit_ratio", r.stats.hit_ratio()},
                               {"substituted", r.totals.substituted},
                               {"mass_preserved", r.totals.mass_preserved()}});
    }
  }
  if (o.json_out) {
    std::cout << doc.dump(2) << '\n';
    return;
  }

  std::cout << "trace: " << paths.front().string();
  if (paths.size() > 1) std::cout << " (+" << paths.size() - 1 << " more files)";
  std::cout << '\n';
  std::cout << "  shape: " << info.num_layers << " MoE layers, " << info.num_experts << " experts, top-" << info.top_k
            << "; cache " << to_string(scope) << " ("
            << (o.per_layer ? std::to_string(info.num_experts) + " slots per layer"
                            : std::to_string(shape.slots()) + " slots")
            << "), capacity in experts" << (o.per_layer ? " per layer" : "") << '\n';
  std::cout << "  demand accesses " << accesses << " (one per distinct expert of each layer batch)\n";
  std::cout << "  demand hit ratio (untimed; --link replays on the timed model with prefetch):\n";
  table.print(std::cout, "    ");
  if (sticky) {
    std::cout << "  sticky-lru caches only experts a predictor flagged (CXL-MoE's gated admission), gated-prefetch "
                 "only those flagged when caching would evict; the predictor and its hints here: "
              << hints << '\n';
  }
  if (quality) {
    std::cout << "  predictor " << hints << " (top-" << info.top_k << " predicted per batch, truth: next "
              << hint_config(o, info).horizon << " batch(es) of the layer): precision " << pct(quality->precision())
              << ", recall " << pct(quality->recall()) << ", " << quality->empty_predictions << " of "
              << quality->predictions << " predictions empty\n";
  }
  if (routed) {
    std::cout << "  expert-cache router, alpha " << fixed(*o.router_alpha, 2) << ", in front of " << rp
              << " (residency from the cache):\n";
    if (!info.has_scores) {
      std::cout << "    this trace has no full router scores (only the top-" << info.top_k
                << " gate weights): the router cannot substitute on it; every routing is kept\n";
    }
    examples::text_table rt(
        {"capacity", "hit ratio", "substituted", "unreplaced", "low kept", "mass preserved", "kept fraction"});
    for (std::size_t i = 0; i < o.capacities.size(); ++i) {
      const router_run& r = (*routed)[i];
      rt.add({std::to_string(o.capacities[i]), pct(r.stats.hit_ratio()),
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

/// The link `name` names: a link preset, or "cxl" / "pcie" for CXL-MoE's two paths.
link_spec link_by_name(const std::string& name) {
  if (name == "cxl") return presets::cxl2_x16;
  if (name == "pcie") return presets::host_pcie5_effective;
  if (const auto l = presets::find_link(name)) return *l;
  std::string known = "cxl, pcie";
  for (auto n : presets::link_names()) known += ", " + std::string(n);
  throw option_error("--link", "unknown link \"" + name + "\" (known: " + known + ")");
}

/// The timed replay. `t` is the recorded trace, or at least its prefill steps (the decode
/// steps are read through `streams`); `streams(B)` forms B decode streams from the trace.
void run_timed(const options& o, const routing_trace& t, const std::function<decode_streams(std::size_t)>& streams,
               const std::vector<std::filesystem::path>& paths) {
  const trace_info& info = t.info();
  const auto shape = examples::preset_for(info);
  if (!shape) {
    throw std::runtime_error(paths.front().string() +
                             ": the timed replay needs the model's shape, and no model preset matches this trace");
  }
  const auto dev = presets::find(o.gpu);
  if (!dev) throw option_error("--gpu", "unknown device preset \"" + o.gpu + "\"");
  const roofline_cost gpu{*dev, *shape};
  const link_spec link = link_by_name(o.link);
  const std::string pred = o.predictor.empty() ? "short-horizon" : o.predictor;
  const short_horizon_config sh = hint_config(o, info);
  offload_prefetch_config pf{.predictor = pred == "none"     ? offload_predictor::none
                                          : pred == "markov" ? offload_predictor::markov
                                          : pred == "oracle" ? offload_predictor::oracle
                                                             : offload_predictor::frequency,
                             .history = pred == "markov" ? o.history.value_or(1) : sh.history,
                             .horizon = sh.horizon,
                             .depth = o.depth,
                             .prefill = o.prefill_prefetch};
  const std::string pred_label = pred == "none" ? std::string("none") : predictor_label(o, info);
  std::vector<offload_system_config> systems;
  for (const auto& n : policy_names(o, true)) {
    any_eviction_config pc = eviction_config_by_name(n);
    if (auto* s = std::get_if<sticky_lru_config>(&pc)) s->sticky_steps = sh.horizon;
    systems.push_back(
        {n, offload_system_kind::cached, link, o.duplex == "half" ? link_duplex::half : link_duplex::full, pc, pf});
  }
  json doc{{"mode", "timed"},
           {"trace", paths.front().string()},
           {"model", shape->name},
           {"gpu", gpu.name()},
           {"link", {{"name", o.link}, {"gbps", link.bandwidth / giga}, {"latency_ns", link.latency_seconds * 1e9}}},
           {"duplex", o.duplex},
           {"predictor", pred_label},
           {"rows", json::array()}};
  examples::text_table table({"capacity", "B", "streams", "policy", "TPOT ms", "tok/s", "hit %", "late", "GPU stall %",
                              "demand MB/tok", "prefetch MB/tok", "Belady %"});
  // Per B, the decode streams are formed once, for the timed replay at every capacity and
  // for Belady's column (MIN on the same streams, its next uses rebuilt a chunk at a time
  // from an index of a few bytes per key and chunk, rather than held whole: 8 bytes per
  // access beside the 4 of the access sequence they were computed from). The rows are
  // printed by capacity, then B.
  const std::size_t nb = o.concurrency.size();
  std::vector<offload_replay_result> results(o.capacities.size() * nb);
  std::vector<double> beladys(results.size(), 0.0);
  for (std::size_t bi = 0; bi < nb; ++bi) {
    const std::size_t B = o.concurrency[bi];
    const decode_streams d = streams(B);
    const routing_trace& bt = d.batched();
    const auto keys = static_cast<std::uint64_t>(bt.info().num_layers) * bt.info().num_experts;
    const next_use_index index(bt, {}, next_use_index::balanced_chunk_accesses(bt.num_rows() * bt.info().top_k, keys));
    for (std::size_t ci = 0; ci < o.capacities.size(); ++ci) {
      const std::uint64_t c = o.capacities[ci];
      const offload_sweep_point point{c, systems};
      results[ci * nb + bi] =
          std::move(replay_offload_sweep(t, d, gpu, *shape, std::span(&point, 1), {.streams = B}).front());
      beladys[ci * nb + bi] =
          replay_cache<belady_policy>(
              bt, cache_config{.num_layers = info.num_layers, .num_experts = info.num_experts, .capacity = c}, {}, {},
              index)
              .stats.hit_ratio();
    }
  }
  for (std::size_t ci = 0; ci < o.capacities.size(); ++ci) {
    const std::uint64_t c = o.capacities[ci];
    for (std::size_t bi = 0; bi < nb; ++bi) {
      const std::size_t B = o.concurrency[bi];
      const offload_replay_result& r = results[ci * nb + bi];
      const double belady = beladys[ci * nb + bi];
      for (const auto& s : r.systems) {
        const double n = static_cast<double>(std::max<std::uint64_t>(s.tokens, 1));
        const double stall = s.run_seconds > 0.0 ? s.accounts[s.gpu].stall_seconds / s.run_seconds : 0.0;
        const auto& in = s.accounts[s.link_in];
        const double demand = static_cast<double>(in.moved(cost_kind::demand_fetch)) / n;
        const double prefetch = static_cast<double>(in.moved(cost_kind::prefetch)) / n;
        if (!s.ok()) {
          table.add({std::to_string(c), std::to_string(B), std::string(to_string(r.formation)), s.config.label,
                     "does not fit", "-", "-", "-", "-", "-", "-", pct(belady)});
          doc["rows"].push_back(
              {{"capacity", c}, {"streams", B}, {"policy", s.config.label}, {"status", s.status_detail}});
          continue;
        }
        table.add({std::to_string(c), std::to_string(B), std::string(to_string(r.formation)), s.config.label,
                   fixed(s.tpot() * 1e3, 3), fixed(s.throughput(), 1), pct(s.decode_hit_ratio()),
                   std::to_string(s.cache.late_prefetches), pct(stall), fixed(demand / 1e6, 1),
                   fixed(prefetch / 1e6, 1), pct(belady)});
        doc["rows"].push_back({{"capacity", c},
                               {"streams", B},
                               {"formation", std::string(to_string(r.formation))},
                               {"steps", r.steps},
                               {"tokens", s.tokens},
                               {"policy", s.config.label},
                               {"tpot_ms", s.tpot() * 1e3},
                               {"tokens_per_second", s.throughput()},
                               {"hit_ratio", s.decode_hit_ratio()},
                               {"late_prefetches", s.cache.late_prefetches},
                               {"gpu_stall_share", stall},
                               {"demand_bytes_per_token", demand},
                               {"prefetch_bytes_per_token", prefetch},
                               {"wasted_prefetch_bytes", s.cache.wasted_bytes},
                               {"kv_bytes", s.accounts.link_bytes(cost_kind::kv_cache)},
                               {"belady_hit_ratio", belady}});
      }
    }
  }
  if (o.json_out) {
    std::cout << doc.dump(2) << '\n';
    return;
  }
  std::cout << "trace: " << paths.front().string() << "\n  timed replay of the decode steps: model " << shape->name
            << ", GPU " << gpu.name() << ", experts fetched over " << o.link << " (" << fixed(link.bandwidth / giga, 1)
            << " GB/s + " << fixed(link.latency_seconds * 1e9, 0) << " ns, " << o.duplex
            << " duplex); one cache pool, capacity in experts; prefetch: " << pred_label << '\n'
            << "  a hit is resident and landed when the layer's router output is known; late = prefetches still on\n"
            << "  their way then (the rest fetched on demand); Belady = MIN's untimed demand hit ratio on the same\n"
            << "  streams:\n";
  table.print(std::cout, "    ");
}

void replay_traces(const options& o) {
  const std::vector<std::filesystem::path> paths(o.traces.begin(), o.traces.end());
  // One canonical file is walked from its map in bounded memory, and so is one routing
  // JSONL or CSV file, from the scratch canonical file it is first written as
  // (scratch_canonical.hpp: streamed as the rows come, or sorted in bounded runs). A part
  // of the run that needs the trace's indices (the router, a predictor's scoring) reads
  // the canonical file whole besides. The timed model (`--link`) forms its decode streams
  // from the canonical file's map (the scratch file's for a text trace) and reads only the
  // recorded prefills beside them.
  std::error_code ec;
  const bool one_canonical = paths.size() == 1 && std::filesystem::is_regular_file(paths.front(), ec) &&
                             examples::is_canonical_trace(paths.front());
  const bool needs_whole =
      !o.link.empty() || o.router_alpha.has_value() || (!o.predictor.empty() && o.predictor != "none");
  std::unique_ptr<scratch_file> scratch = one_canonical ? nullptr : scratch_canonical(paths, "replay");
  if (!o.link.empty() && (one_canonical || scratch)) {
    // The timed model forms its decode streams straight from the file's map and holds
    // the recorded prefills alone beside them, never the trace whole.
    const std::filesystem::path& file = scratch ? scratch->path() : paths.front();
    const canonical_file f(file, canonical_file::access::copy);
    const routing_trace prefills = prefill_steps(f);
    // Every B's streams from one reading of the file's steps; the file read whole where its
    // columns cannot be used in place.
    const std::optional<file_decode_streams> source = file_decode_streams::open(f);
    std::optional<routing_trace> whole;
    if (!source) whole = examples::load_trace(file);
    run_timed(
        o, prefills,
        [&](std::size_t B) {
          const decode_streams_config c{.streams = B};
          return source ? source->form(c, o.jobs) : make_decode_streams(*whole, c, o.jobs);
        },
        paths);
    return;
  }
  if (o.link.empty()) {
    if (one_canonical || scratch) {
      const std::filesystem::path& file = scratch ? scratch->path() : paths.front();
      const canonical_file f(file);
      if (!needs_whole) {
        run_untimed(o, f, nullptr, paths);
        return;
      }
      // The router, a predictor's scoring and the oracle read the trace whole; the
      // replays, Belady's next uses (a chunk at a time from the index) and the LRU curve
      // still walk the map, so no next uses are held whole beside the trace.
      const routing_trace t = examples::load_trace(file);
      run_untimed(o, f, &t, paths);
      return;
    }
  }
  const routing_trace t = scratch ? examples::load_trace(scratch->path()) : examples::load_trace(paths);
  scratch.reset();
  if (o.link.empty()) {
    run_untimed(o, t, &t, paths);
  } else {
    run_timed(
        o, t, [&](std::size_t B) { return make_decode_streams(t, {.streams = B}, o.jobs); }, paths);
  }
}

}  // namespace

std::string known_policies() {
  std::string known;
  for (const auto& e : eviction_policies) known += std::string(e.name) + ", ";
  return known + "all";
}

bool is_known_policy(std::string_view name) {
  if (name == "all") return true;
  for (const auto& e : eviction_policies) {
    if (e.name == name) return true;
  }
  return false;
}

void run_replay(const replay_options& o) {
  for (std::uint64_t c : o.capacities) {
    if (c == 0) throw option_error("--capacity", "capacity must be >= 1 expert, got 0");
  }
  if (o.lookahead && *o.lookahead == 0) throw option_error("--lookahead", "lookahead must be >= 1, got 0");
  if (o.history && *o.history == 0) throw option_error("--history", "history must be >= 1, got 0");
  for (std::size_t b : o.concurrency) {
    if (b == 0) throw option_error("--concurrency", "concurrency must be >= 1 stream, got 0");
  }
  if (o.router_alpha && !(*o.router_alpha >= 0.0 && *o.router_alpha <= 1.0)) {
    throw option_error("--router-alpha", "alpha must be in [0, 1], got " + std::to_string(*o.router_alpha));
  }
  const bool timed = !o.link.empty();
  if (!timed && o.predictor == "none" && o.lookahead) {
    throw option_error("--lookahead", "--lookahead needs a predictor");
  }
  if (timed && o.predictor == "transition") {
    throw option_error("--predictor",
                       "the transition predictor scores the next layer of the same token; the timed replay "
                       "prefetches the next step: use short-horizon, markov or oracle");
  }
  if (timed && o.per_layer) throw option_error("--per-layer", "the timed replay has one shared pool");
  if (timed && o.reference != "belady") {
    throw option_error("--reference",
                       "--reference applies to the untimed replay; the timed one prints "
                       "Belady's untimed hit ratio beside every row");
  }
  if (timed && o.router_alpha) {
    throw option_error("--router-alpha", "the router runs in the untimed replay (the timed one has no CPU)");
  }
  if (timed && o.policy == "belady") {
    throw option_error("--policy",
                       "Belady needs the future and cannot run timed; its untimed hit ratio is "
                       "printed beside every row");
  }
  if (timed) link_by_name(o.link);
  replay_traces(o);
}

}  // namespace moepolicy::tool
