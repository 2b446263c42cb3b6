// python/tests/golden.cpp — the C++ side of the Python equality tests: runs the library on a
// trace (the bundled Granite trace in the tests) and prints its results as JSON, which
// test_golden.py compares with what the Python module returns for the same inputs. Every
// input below is derived from the trace by integer counts and exact products, so the Python
// side can rebuild it bit for bit with numpy.
//
// Usage: python_golden TRACE
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sim/cache_replay.hpp"

using namespace moepolicy;
using json = nlohmann::json;

namespace {

json replays(const routing_trace& t) {
  json out = json::object();
  for (const auto& e : eviction_policies) {
    for (std::uint64_t capacity : {64u, 256u}) {
      for (bool per_layer : {false, true}) {
        const std::uint64_t cap = per_layer ? capacity / t.info().num_layers + 1 : capacity;
        cache_config cc{.num_layers = t.info().num_layers, .num_experts = t.info().num_experts, .capacity = cap};
        cc.scope = per_layer ? capacity_scope::per_layer : capacity_scope::shared;
        const auto r = replay_cache(t, cc, e.defaults);
        std::vector<std::uint64_t> layer_hits;
        for (const auto& l : r.layers) layer_hits.push_back(l.hits);
        out[std::string(e.name) + (per_layer ? "/per_layer/" : "/shared/") + std::to_string(cap)] = {
            {"hits", r.stats.hits},
            {"misses", r.stats.misses},
            {"evictions", r.stats.evictions},
            {"rejections", r.stats.rejections},
            {"layer_hits", layer_hits}};
      }
    }
  }
  return out;
}

// Batched decode steps of 8 sequences: the loads every per-step golden below starts from.
constexpr std::size_t batch = 8;

json balancers(const batched_steps& b) {
  two_pointer_balancer bal({.cpu_seconds_per_token = 1e-4, .load_seconds = 3e-4, .max_items = 256});
  json alg2 = json::array(), optimal = json::array(), exact = json::array();
  for (std::size_t s = 0; s < b.num_steps(); ++s) {
    for (std::size_t l = 0; l < b.num_layers(); ++l) {
      std::vector<std::uint32_t> sizes;
      for (std::uint32_t x : b.loads(s, l)) {
        if (x > 0) sizes.push_back(x);
      }
      std::vector<balance_side> out(sizes.size());
      const auto r = bal.balance(sizes, out);
      std::vector<int> sides;
      for (auto x : out) sides.push_back(static_cast<int>(x));
      alg2.push_back({{"makespan", r.makespan()}, {"sides", sides}});
      optimal.push_back(bal.balance_optimal(sizes, out).makespan());
      if (sizes.size() <= 16) {
        std::vector<double> load(sizes.size(), 3e-4), cpu;
        for (std::uint32_t x : sizes) cpu.push_back(static_cast<double>(x) * 1e-4);
        exact.push_back(balance_exact(load, cpu, out).makespan());
      } else {
        exact.push_back(nullptr);
      }
    }
  }
  return {{"alg2", alg2}, {"optimal", optimal}, {"exact", exact}};
}

// One makespan problem per (step, layer 0): expert e with load L on the GPU costs
// 1e-5 L (+ 2e-4 when e is not resident: e % 3 != 0), on the CPU 5e-5 L, on its DIMM
// (e % 4, localized when e is even) 4e-5 L; each read busies the home DIMMs 1e-4.
json schedules(const batched_steps& b) {
  json out = json::object();
  local_search_scheduler ls;
  bottleneck_refinement_scheduler tri;
  exact_makespan_scheduler ex;
  makespan_schedule sched;
  std::vector<double> m_ls, m_tri, m_ex, lb;
  for (std::size_t s = 0; s < b.num_steps(); ++s) {
    makespan_problem p(4);
    const auto loads = b.loads(s, 0);
    for (std::size_t e = 0; e < loads.size(); ++e) {
      if (loads[e] == 0) continue;
      const double L = loads[e];
      expert_costs c;
      c.gpu_resident = e % 3 == 0;
      c.layout = e % 2 == 0 ? expert_layout::localized(static_cast<std::uint16_t>(e % 4)) : expert_layout::striped();
      c.exec = {1e-5 * L + (c.gpu_resident ? 0.0 : 2e-4), 5e-5 * L, e % 2 == 0 ? 4e-5 * L : not_allowed};
      c.dram = 1e-4;
      p.add(c);
    }
    ls.solve(p, sched);
    m_ls.push_back(sched.makespan);
    tri.solve(p, sched);
    m_tri.push_back(sched.makespan);
    ex.solve(p, sched);
    m_ex.push_back(sched.makespan);
    lb.push_back(makespan_lower_bound(p).value);
  }
  out["local-search"] = m_ls;
  out["trimoe"] = m_tri;
  out["exact"] = m_ex;
  out["lower_bound"] = lb;
  return out;
}

json predictors(const batched_steps& b) {
  ema_load_predictor ema(b.num_layers(), b.num_experts());
  precision_target_selector sel(b.num_layers(), b.num_experts(), 8);
  json targets = json::array();
  for (std::size_t s = 0; s < b.num_steps(); ++s) {
    for (std::size_t l = 0; l < b.num_layers(); ++l) ema.update(static_cast<layer_id>(l), b.loads(s, l));
    const auto t = sel.select(0, ema.predicted_loads(0));
    targets.push_back({std::vector<int>(t.target.begin(), t.target.end()),
                       std::vector<int>(t.promote.begin(), t.promote.end()),
                       std::vector<int>(t.demote.begin(), t.demote.end())});
  }
  json out;
  const auto p = ema.predicted_loads(5);
  const auto c = ema.predicted_classes(5);
  out["ema_loads_layer5"] = std::vector<double>(p.begin(), p.end());
  std::vector<int> classes;
  for (auto x : c) classes.push_back(static_cast<int>(x));
  out["ema_classes_layer5"] = classes;
  out["targets_layer0"] = targets;
  return out;
}

// Per (layer, expert): selections over the whole trace (the EP weights, the prefill counts)
// and a loss table L(l, e, b) = (count + 1) / 2^b for bits {2, 3, 4, 8}.
json allocations(const routing_trace& t) {
  const std::size_t L = t.info().num_layers, E = t.info().num_experts;
  std::vector<double> counts(L * E, 0.0), prefill(L * E, 0.0), sums(L * E, 0.0);
  for (std::size_t r = 0; r < t.num_rows(); ++r) {
    const auto row = t.row(r);
    for (std::size_t j = 0; j < row.experts.size(); ++j) {
      counts[row.layer * E + row.experts[j]] += 1.0;
      if (row.kind == phase::prefill) {
        prefill[row.layer * E + row.experts[j]] += 1.0;
        sums[row.layer * E + row.experts[j]] += static_cast<double>(row.weights[j]);
      }
    }
  }
  const std::vector<bitwidth> bits{bitwidth{2}, bitwidth{3}, bitwidth{4}, bitwidth{8}};
  std::vector<double> losses;
  for (double c : counts) {
    for (auto b : bits) losses.push_back((c + 1.0) / static_cast<double>(1u << b.bits()));
  }
  json out;
  // Layer 0's experts in id order as the allocation rows.
  Eigen::MatrixXd loss(static_cast<Eigen::Index>(E), 4);
  for (std::size_t e = 0; e < E; ++e) {
    for (std::size_t j = 0; j < 4; ++j)
      loss(static_cast<Eigen::Index>(e), static_cast<Eigen::Index>(j)) = losses[e * 4 + j];
  }
  for (const char* form : {"exact", "at_most"}) {
    const bit_allocation_config cfg{.form = std::string(form) == "exact" ? budget_form::exact : budget_form::at_most};
    const auto a = prefix_split(bits, loss, 3.0, cfg);
    const auto x = exact_allocation(bits, loss, 3.0, cfg);
    out[std::string("prefix_split/") + form] = {{"level_of", a.level_of}, {"gain", a.gain}};
    out[std::string("exact/") + form] = {{"level_of", x.level_of}, {"gain", x.gain}};
  }
  const loss_table table(L, E, bits, losses);
  const Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> P(
      prefill.data(), static_cast<Eigen::Index>(L), static_cast<Eigen::Index>(E));
  const Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> W(
      sums.data(), static_cast<Eigen::Index>(L), static_cast<Eigen::Index>(E));
  const auto plan = place_from_prefill(P, W, &table, {.gpu_experts_per_layer = 4, .ndp_average_bits = 3.0});
  std::vector<int> tiers, plan_bits;
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t e = 0; e < E; ++e) {
      tiers.push_back(plan.at(l, e).where == tier::gpu ? 0 : 1);
      plan_bits.push_back(plan.at(l, e).bits.bits());
    }
  }
  out["prefill_weight_sums"] = sums;
  out["place/tier"] = tiers;
  out["place/bits"] = plan_bits;
  const ep_load_view loads(counts, L, E);
  const ep_cluster cluster{.replicas = 48, .gpus = 8, .nodes = 2, .groups = 4};
  const auto ds = deepseek_rebalance(loads, cluster);
  ep_rebalancer reb(L, E, cluster);
  const auto& ours = reb.rebalance(loads).placement;
  std::vector<int> p2l_ds, p2l_ours, cnt_ours;
  for (std::size_t l = 0; l < L; ++l) {
    for (auto x : ds.physical_to_logical(l)) p2l_ds.push_back(x);
    for (auto x : ours.physical_to_logical(l)) p2l_ours.push_back(x);
    for (auto x : ours.logical_count(l)) cnt_ours.push_back(x);
  }
  out["eplb/deepseek/p2l"] = p2l_ds;
  out["eplb/moepolicy/p2l"] = p2l_ours;
  out["eplb/moepolicy/count"] = cnt_ours;
  return out;
}

json router(const routing_trace& t) {
  // The decode batches of layer 3 through the router with experts 0-15 resident.
  expert_cache_router r({.num_experts = t.info().num_experts, .top_k = t.info().top_k, .alpha = 0.3});
  json out = json::array();
  for (std::uint32_t bi : t.layer_batches(3)) {
    const auto v = t.view(t.batches()[bi]);
    std::vector<expert_id> ids(v.experts.size());
    std::vector<float> w(v.experts.size());
    const auto res = r.route(
        v, [](expert_id e) { return e < 16; }, ids, w);
    out.push_back({res.unscored, res.top_score, res.substituted, res.full_scores});
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: python_golden TRACE\n";
    return 2;
  }
  try {
    const routing_trace t = io::read_trace(argv[1]);
    const auto steps = make_batched_decode_steps(t, batch);
    json out;
    out["rows"] = t.num_rows();
    out["replay"] = replays(t);
    const auto curve = lru_hit_curve(t, cache_shape{t.info().num_layers, t.info().num_experts});
    out["lru_hit_curve"] = curve.hits;
    out["batched_steps"] = steps.num_steps();
    std::vector<std::uint64_t> per_step;
    for (std::size_t s = 0; s < steps.num_steps(); ++s) {
      std::uint64_t sum = 0;
      for (std::size_t l = 0; l < steps.num_layers(); ++l) {
        for (std::uint32_t x : steps.loads(s, l)) sum += x * (l + 1);
      }
      per_step.push_back(sum);
    }
    out["batched_checksum"] = per_step;
    out["balance"] = balancers(steps);
    out["schedule"] = schedules(steps);
    out["predict"] = predictors(steps);
    out["alloc"] = allocations(t);
    out["router"] = router(t);
    std::cout << out.dump() << '\n';
  } catch (const std::exception& e) {
    std::cerr << "python_golden: " << e.what() << '\n';
    return 1;
  }
}
