// TriMoE's per-step policies (TriMoE §4.2–4.3): what one decode step's scheduling costs
// with the paper's solver (greedy + bottleneck refinement), the improved solver (local
// search with pair moves and a bounded exact finish) and the exact solver, what pricing
// the step's cost matrix costs, what the EMA load predictor's update costs, and what the
// migration planner costs, each beside its floor: a benchmark that only reads the same
// inputs once. The figure to quote is policy time / floor time.
//
// Inputs, built outside the timed loops:
//   real_*       steps of the recorded traces under ../shared/traces, batched as B
//                concurrent sequences (sched/batched_steps.hpp): Mixtral-8x7B (8 experts,
//                top-2) at B = 16, 64, 256 and Granite-3.1-1B-A400M (32 experts, top-8) at
//                B = 16, 64; every (step, layer) is one problem, solved round-robin. Layout
//                "gpu_ndp": per layer, hot experts (classes of the whole trace's loads)
//                resident in HBM and striped, the others localized on DIMM (l·E + e) mod 16
//                — the layout where the refinement has most to do (tests/sched/real_traces).
//                Arguments: {model (0 Mixtral, 1 Granite), B}. Skipped when the traces are
//                absent.
//   synth_*      SYNTHETIC steps, labelled so: E = 8 … 256 experts (top-2 for 8, else
//                top-8), B = 1 … 512 tokens, each token's experts drawn from a Zipf(1)
//                popularity over a fixed random permutation of the experts; 64 steps per
//                size; layout from the popularity ranks (top 10 % resident and striped,
//                bottom 60 % localized round-robin, the rest striped); models of matching E
//                (Mixtral-8x7B, Granite, OLMoE, Qwen3-30B-A3B, DeepSeek-V3). Arguments {E, B}.
//   dimms_*      SYNTHETIC steps for the DIMM-count sweep, labelled so: E = 64 experts
//                (OLMoE-1B-7B's shape, top-8), B = 512 tokens drawn as synth_*, every expert
//                active (a zero load is raised to 1), so each step has 64 experts; layout as
//                synth_* with the localized experts on DIMM e mod D; the DIMM-NDP preset
//                with D = 4, 8, 16, 32 units and the host's 307.2 GB/s split over them (the
//                channels fix the total). Argument {D}.
// All problems are priced on the TriMoE machine (presets: H100 PCIe, Xeon 8470 AMX, 16
// DIMM-NDPs unless a sweep says otherwise) at FP16. Items are activated experts (solvers,
// pricing) or experts updated (predictor, relayout step). The +Relayout step benchmark runs
// the whole timed step of sim/trimoe_replay.hpp on a one-layer model (see it below).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sim/trimoe_replay.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace {

namespace fs = std::filesystem;
using namespace moepolicy;
using system3 = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;

system3 machine(const model_shape& m) {
  return {roofline_cost{presets::h100_pcie_gen5(), m}, roofline_cost{presets::xeon_8470_amx(), m},
          roofline_cost{presets::dimm_ndp(), m}};
}

/// The TriMoE machine with `dimms` DIMM-NDP units sharing the host's 307.2 GB/s.
system3 machine(const model_shape& m, std::size_t dimms) {
  device_spec ndp = presets::dimm_ndp();
  ndp.num_units = static_cast<std::uint32_t>(dimms);
  ndp.host_read_bandwidth = 307.2e9 / static_cast<double>(dimms);
  ndp.activation_link = {307.2e9 / static_cast<double>(dimms), 0.0};
  return {roofline_cost{presets::h100_pcie_gen5(), m}, roofline_cost{presets::xeon_8470_amx(), m},
          roofline_cost{std::move(ndp), m}};
}

constexpr std::size_t num_dimms = 16;

/// One size's inputs: per-step loads (steps × experts), the layer's layout, and the priced
/// problems.
struct step_set {
  std::string label;
  std::size_t experts = 0;
  std::size_t dimms = num_dimms;
  std::vector<std::vector<std::uint32_t>> loads;
  std::vector<std::vector<expert_layout>> layouts;
  std::vector<std::vector<std::uint8_t>> resident;
  std::vector<layer_id> layer;
  std::vector<makespan_problem> problems;
  std::unique_ptr<system3> sys;
  std::size_t activated = 0;  // Σ problem sizes
};

void price_all(step_set& s) {
  for (std::size_t i = 0; i < s.loads.size(); ++i) {
    makespan_problem p(s.dimms, s.experts);
    s.sys->build_layer(s.layer[i], s.loads[i], s.layouts[i], s.resident[i], fp16, p);
    s.activated += p.size();
    s.problems.push_back(std::move(p));
  }
}

// --- real steps ----------------------------------------------------------------------------

const routing_trace* trace_of(int model) {
  static std::map<int, std::unique_ptr<routing_trace>> cache;
  auto& slot = cache[model];
  if (slot) return slot.get();
  const fs::path root = MOEPOLICY_SHARED_TRACES;
  if (!fs::is_directory(root)) return nullptr;
  if (model == 0) {
    slot = std::make_unique<routing_trace>(
        io::read_vllm_decode_jsonl(root / "mixtral-8x7b-decode" / "humaneval_2_routing.jsonl"));
  } else {
    std::vector<fs::path> files;
    for (const auto& f : fs::directory_iterator(root / "granite-3.1-1b-a400m")) {
      if (f.path().extension() == ".jsonl") files.push_back(f.path());
    }
    std::sort(files.begin(), files.end());
    slot = std::make_unique<routing_trace>(io::read_granite_jsonl(files));
  }
  return slot.get();
}

const step_set* real_set(int model, std::size_t batch) {
  static std::map<std::pair<int, std::size_t>, std::unique_ptr<step_set>> cache;
  auto& slot = cache[{model, batch}];
  if (slot) return slot->problems.empty() ? nullptr : slot.get();
  slot = std::make_unique<step_set>();
  const routing_trace* t = trace_of(model);
  if (t == nullptr) return nullptr;
  const auto steps = make_batched_decode_steps(*t, batch);
  const std::size_t L = steps.num_layers(), E = steps.num_experts();
  auto& s = *slot;
  s.experts = E;
  s.sys = std::make_unique<system3>(machine(model == 0 ? models::mixtral_8x7b() : models::granite_3_1_1b_a400m()));
  s.label = std::string(model == 0 ? "Mixtral-8x7B" : "Granite") + " trace, B=" + std::to_string(batch) + ", " +
            std::to_string(steps.num_steps() * L) + " steps";
  std::vector<double> total(E);
  std::vector<hotness> cls(E);
  for (std::size_t l = 0; l < L; ++l) {
    std::fill(total.begin(), total.end(), 0.0);
    for (std::size_t st = 0; st < steps.num_steps(); ++st) {
      for (std::size_t e = 0; e < E; ++e) total[e] += steps.loads(st, l)[e];
    }
    classify_by_share(total, cls);
    std::vector<expert_layout> lay(E);
    std::vector<std::uint8_t> res(E);
    for (std::size_t e = 0; e < E; ++e) {
      const bool hot = cls[e] == hotness::hot;
      lay[e] = hot ? expert_layout::striped()
                   : expert_layout::localized(static_cast<std::uint16_t>((l * E + e) % num_dimms));
      res[e] = hot ? 1 : 0;
    }
    for (std::size_t st = 0; st < steps.num_steps(); ++st) {
      const auto ld = steps.loads(st, l);
      s.loads.emplace_back(ld.begin(), ld.end());
      s.layouts.push_back(lay);
      s.resident.push_back(res);
      s.layer.push_back(static_cast<layer_id>(l));
    }
  }
  price_all(s);
  return s.problems.empty() ? nullptr : &s;
}

// --- synthetic steps -----------------------------------------------------------------------

model_shape shape_for(std::size_t experts) {
  switch (experts) {
    case 8:
      return models::mixtral_8x7b();
    case 32:
      return models::granite_3_1_1b_a400m();
    case 64:
      return models::olmoe_1b_7b();
    case 128:
      return models::qwen3_30b_a3b();
    default:
      return models::deepseek_v3();
  }
}

/// Zipf(1) steps of `experts` experts and `batch` tokens on `dimms` DIMMs; with `all_active`
/// every zero load is raised to 1.
void fill_synth(step_set& s, std::size_t experts, std::size_t batch, std::size_t dimms, bool all_active) {
  const std::size_t E = experts, k = E == 8 ? 2 : 8;
  s.experts = E;
  s.dimms = dimms;
  s.sys = std::make_unique<system3>(dimms == num_dimms ? machine(shape_for(E)) : machine(shape_for(E), dimms));
  s.label = "SYNTHETIC Zipf(1), E=" + std::to_string(E) + " top-" + std::to_string(k) + ", B=" + std::to_string(batch);
  if (all_active) s.label += ", every expert active, D=" + std::to_string(dimms);
  std::mt19937 rng(static_cast<unsigned>(E * 1000 + batch));
  std::vector<std::size_t> perm(E);
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<double> weight(E);
  for (std::size_t r = 0; r < E; ++r) weight[perm[r]] = 1.0 / static_cast<double>(r + 1);
  std::vector<expert_layout> lay(E);
  std::vector<std::uint8_t> res(E);
  for (std::size_t r = 0; r < E; ++r) {
    const std::size_t e = perm[r];
    res[e] = r < (E + 9) / 10 ? 1 : 0;
    lay[e] =
        r >= E * 4 / 10 ? expert_layout::localized(static_cast<std::uint16_t>(e % dimms)) : expert_layout::striped();
  }
  std::discrete_distribution<std::size_t> pick(weight.begin(), weight.end());
  for (int st = 0; st < 64; ++st) {
    std::vector<std::uint32_t> loads(E, 0);
    std::vector<std::uint8_t> chosen(E);
    for (std::size_t t = 0; t < batch; ++t) {
      std::fill(chosen.begin(), chosen.end(), 0);
      for (std::size_t j = 0; j < k;) {
        const std::size_t e = pick(rng);
        if (chosen[e]) continue;
        chosen[e] = 1;
        ++loads[e];
        ++j;
      }
    }
    if (all_active) {
      for (auto& x : loads) x = std::max(x, std::uint32_t{1});
    }
    s.loads.push_back(std::move(loads));
    s.layouts.push_back(lay);
    s.resident.push_back(res);
    s.layer.push_back(0);
  }
  price_all(s);
}

const step_set* synth_set(std::size_t experts, std::size_t batch) {
  static std::map<std::pair<std::size_t, std::size_t>, std::unique_ptr<step_set>> cache;
  auto& slot = cache[{experts, batch}];
  if (slot) return slot.get();
  slot = std::make_unique<step_set>();
  fill_synth(*slot, experts, batch, num_dimms, false);
  return slot.get();
}

/// The DIMM-count sweep's steps: 64 active experts on `dimms` DIMMs.
const step_set* dimm_set(std::size_t dimms) {
  static std::map<std::size_t, std::unique_ptr<step_set>> cache;
  auto& slot = cache[dimms];
  if (slot) return slot.get();
  slot = std::make_unique<step_set>();
  fill_synth(*slot, 64, 512, dimms, true);
  return slot.get();
}

// --- the floor ------------------------------------------------------------------------------

/// Reads every field a solver reads once: each row's prices, read time, home and residency.
double read_once(const makespan_problem& p) {
  double acc = 0.0;
  for (const auto& e : p.experts()) {
    acc += (e.exec[0] + e.exec[1] + (e.allows(device_option::ndp) ? e.exec[2] : 0.0)) + e.dram +
           static_cast<double>(e.layout.home) + (e.gpu_resident ? 1.0 : 0.0);
  }
  return acc;
}

/// Where a benchmark's steps come from.
enum class source { synth, real, dimms };

const step_set* set_of(const benchmark::State& state, source from) {
  switch (from) {
    case source::real:
      return real_set(static_cast<int>(state.range(0)), static_cast<std::size_t>(state.range(1)));
    case source::synth:
      return synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
    case source::dimms:
      return dimm_set(static_cast<std::size_t>(state.range(0)));
  }
  return nullptr;
}

template <class Solver>
void solve_loop(benchmark::State& state, source from, Solver&& solver) {
  const step_set* s = set_of(state, from);
  if (s == nullptr) {
    state.SkipWithError("shared traces not found (or no step of this size)");
    return;
  }
  makespan_schedule out(s->experts, s->dimms);
  std::size_t i = 0, items = 0, moves = 0;
  for (auto _ : state) {
    const auto& p = s->problems[i];
    solver(p, out);
    benchmark::DoNotOptimize(out.makespan);
    items += p.size();
    moves += out.iterations;
    if (++i == s->problems.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  // Moves (heuristics) or nodes (exact) per step.
  state.counters["moves_or_nodes"] = static_cast<double>(moves) / static_cast<double>(state.iterations());
  state.counters["experts_per_step"] = static_cast<double>(s->activated) / static_cast<double>(s->problems.size());
  state.SetLabel(s->label);
}

void floor_loop(benchmark::State& state, source from) {
  const step_set* s = set_of(state, from);
  if (s == nullptr) {
    state.SkipWithError("shared traces not found (or no step of this size)");
    return;
  }
  std::size_t i = 0, items = 0;
  for (auto _ : state) {
    const auto& p = s->problems[i];
    benchmark::DoNotOptimize(read_once(p));
    items += p.size();
    if (++i == s->problems.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.SetLabel("floor: read the step's cost rows once; " + s->label);
}

void paper(benchmark::State& state, source from) {
  bottleneck_refinement_scheduler solver;
  solve_loop(state, from, [&](const makespan_problem& p, makespan_schedule& o) { solver.solve(p, o); });
}
void improved(benchmark::State& state, source from) {
  local_search_scheduler solver;
  solve_loop(state, from, [&](const makespan_problem& p, makespan_schedule& o) { solver.solve(p, o); });
}
void exact(benchmark::State& state, source from) {
  exact_makespan_scheduler solver({.max_experts = 32, .node_limit = 10'000'000});
  solve_loop(state, from, [&](const makespan_problem& p, makespan_schedule& o) { solver.solve(p, o); });
}

/// Pricing the cost matrix of a step (Eq. 1–4, 6) from loads, layouts and residency.
void price(benchmark::State& state, source from) {
  const step_set* s = set_of(state, from);
  if (s == nullptr) {
    state.SkipWithError("shared traces not found (or no step of this size)");
    return;
  }
  makespan_problem p(s->dimms, s->experts);
  std::size_t i = 0, items = 0;
  for (auto _ : state) {
    s->sys->build_layer(s->layer[i], s->loads[i], s->layouts[i], s->resident[i], fp16, p);
    benchmark::DoNotOptimize(p.experts().data());
    items += p.size();
    if (++i == s->loads.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.SetLabel(s->label);
}
/// Reads the pricing's inputs once: loads, layouts, residency.
void price_floor(benchmark::State& state, source from) {
  const step_set* s = set_of(state, from);
  if (s == nullptr) {
    state.SkipWithError("shared traces not found (or no step of this size)");
    return;
  }
  std::size_t i = 0, items = 0;
  for (auto _ : state) {
    std::uint64_t acc = 0;
    std::size_t active = 0;
    for (std::size_t e = 0; e < s->experts; ++e) {
      acc += std::uint64_t{s->loads[i][e]} + s->layouts[i][e].home + s->resident[i][e];
      active += s->loads[i][e] > 0 ? std::size_t{1} : std::size_t{0};
    }
    benchmark::DoNotOptimize(acc);
    items += active;
    if (++i == s->loads.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(items));
  state.SetLabel("floor: read loads, layouts and residency once; " + s->label);
}

void real_args(benchmark::internal::Benchmark* b) {
  for (int B : {16, 64, 256}) b->Args({0, B});
  for (int B : {16, 64}) b->Args({1, B});
  b->ArgNames({"model", "B"});
}
void synth_args(benchmark::internal::Benchmark* b) {
  for (int E : {8, 32, 64, 128, 256}) {
    for (int B : {1, 16, 64, 512}) b->Args({E, B});
  }
  b->ArgNames({"E", "B"});
}

void real_paper(benchmark::State& s) { paper(s, source::real); }
void real_paper_floor(benchmark::State& s) { floor_loop(s, source::real); }
void real_improved(benchmark::State& s) { improved(s, source::real); }
void real_improved_floor(benchmark::State& s) { floor_loop(s, source::real); }
void real_exact(benchmark::State& s) { exact(s, source::real); }
void real_price(benchmark::State& s) { price(s, source::real); }
void real_price_floor(benchmark::State& s) { price_floor(s, source::real); }
void synth_paper(benchmark::State& s) { paper(s, source::synth); }
void synth_paper_floor(benchmark::State& s) { floor_loop(s, source::synth); }
void synth_improved(benchmark::State& s) { improved(s, source::synth); }
void synth_improved_floor(benchmark::State& s) { floor_loop(s, source::synth); }
void synth_price(benchmark::State& s) { price(s, source::synth); }
void synth_price_floor(benchmark::State& s) { price_floor(s, source::synth); }

BENCHMARK(real_paper)->Apply(real_args);
BENCHMARK(real_paper_floor)->Apply(real_args);
BENCHMARK(real_improved)->Apply(real_args);
BENCHMARK(real_improved_floor)->Apply(real_args);
BENCHMARK(real_exact)->Apply(real_args);
BENCHMARK(real_price)->Apply(real_args);
BENCHMARK(real_price_floor)->Apply(real_args);
BENCHMARK(synth_paper)->Apply(synth_args);
BENCHMARK(synth_paper_floor)->Apply(synth_args);
BENCHMARK(synth_improved)->Apply(synth_args);
BENCHMARK(synth_improved_floor)->Apply(synth_args);
BENCHMARK(synth_price)->Apply(synth_args);
BENCHMARK(synth_price_floor)->Apply(synth_args);

// --- the DIMM-count sweep --------------------------------------------------------------------

/// The paper's and the improved solver on 64 active experts at D = 4 … 32 DIMMs, beside the
/// floor (SYNTHETIC steps; see dimms_* at the top).
void dimms_paper(benchmark::State& s) { paper(s, source::dimms); }
void dimms_improved(benchmark::State& s) { improved(s, source::dimms); }
void dimms_floor(benchmark::State& s) { floor_loop(s, source::dimms); }
void dimm_args(benchmark::internal::Benchmark* b) {
  for (int D : {4, 8, 16, 32}) b->Args({D});
  b->ArgNames({"D"});
}
BENCHMARK(dimms_paper)->Apply(dimm_args);
BENCHMARK(dimms_improved)->Apply(dimm_args);
BENCHMARK(dimms_floor)->Apply(dimm_args);

// --- the EMA load predictor (Eq. 8) -------------------------------------------------------

/// One decode step of every layer: update (Eq. 8 and the reclassification) per layer.
/// Arguments {model (0 Mixtral, 1 Granite), B} on the real traces.
void real_ema_update(benchmark::State& state) {
  const int model = static_cast<int>(state.range(0));
  const routing_trace* t = trace_of(model);
  if (t == nullptr) {
    state.SkipWithError("shared traces not found");
    return;
  }
  const auto steps = make_batched_decode_steps(*t, static_cast<std::size_t>(state.range(1)));
  const std::size_t L = steps.num_layers(), E = steps.num_experts();
  ema_load_predictor p(L, E);
  std::size_t s = 0;
  for (auto _ : state) {
    for (std::size_t l = 0; l < L; ++l) p.update(static_cast<layer_id>(l), steps.loads(s, l));
    benchmark::DoNotOptimize(p.predicted_classes(0).data());
    if (++s == steps.num_steps()) s = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(L * E));
  state.SetLabel(std::string(model == 0 ? "Mixtral-8x7B" : "Granite") + " trace, all layers of one step");
}
void real_ema_update_floor(benchmark::State& state) {
  const routing_trace* t = trace_of(static_cast<int>(state.range(0)));
  if (t == nullptr) {
    state.SkipWithError("shared traces not found");
    return;
  }
  const auto steps = make_batched_decode_steps(*t, static_cast<std::size_t>(state.range(1)));
  const std::size_t L = steps.num_layers(), E = steps.num_experts();
  std::size_t s = 0;
  for (auto _ : state) {
    std::uint64_t acc = 0;
    for (std::size_t l = 0; l < L; ++l) {
      for (auto x : steps.loads(s, l)) acc += x;
    }
    benchmark::DoNotOptimize(acc);
    if (++s == steps.num_steps()) s = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(L * E));
  state.SetLabel("floor: read the step's loads once");
}
BENCHMARK(real_ema_update)->Args({0, 16})->Args({1, 16})->ArgNames({"model", "B"});
BENCHMARK(real_ema_update_floor)->Args({0, 16})->Args({1, 16})->ArgNames({"model", "B"});

/// One layer's update at E = 8 … 256 experts (SYNTHETIC loads of the synth_* steps).
void synth_ema_update(benchmark::State& state) {
  const step_set* s = synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  ema_load_predictor p(1, s->experts);
  std::size_t i = 0;
  for (auto _ : state) {
    p.update(0, s->loads[i]);
    benchmark::DoNotOptimize(p.predicted_classes(0).data());
    if (++i == s->loads.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(s->experts));
  state.SetLabel(s->label);
}
void synth_ema_update_floor(benchmark::State& state) {
  const step_set* s = synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  std::size_t i = 0;
  for (auto _ : state) {
    std::uint64_t acc = 0;
    for (auto x : s->loads[i]) acc += x;
    benchmark::DoNotOptimize(acc);
    if (++i == s->loads.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(s->experts));
  state.SetLabel("floor: read the loads once; " + s->label);
}
void ema_args(benchmark::internal::Benchmark* b) {
  for (int E : {8, 32, 64, 128, 256}) b->Args({E, 64});
  b->ArgNames({"E", "B"});
}
BENCHMARK(synth_ema_update)->Apply(ema_args);
BENCHMARK(synth_ema_update_floor)->Apply(ema_args);

// --- the migration planner (§4.3) -----------------------------------------------------------

/// One layer's plan from the EMA's prediction (SYNTHETIC steps), window 0.68 ms.
void synth_plan(benchmark::State& state) {
  const step_set* s = synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  ema_load_predictor pred(1, s->experts);
  for (const auto& l : s->loads) pred.update(0, l);
  migration_planner planner(*s->sys, s->experts);
  for (auto _ : state) {
    const auto tasks = planner.plan(0, pred.predicted_loads(0), pred.predicted_classes(0), s->layouts[0],
                                    s->resident[0], 0.68e-3, 8'000'000'000ULL);
    benchmark::DoNotOptimize(tasks.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(s->experts));
  state.SetLabel(s->label);
}
void synth_plan_floor(benchmark::State& state) {
  const step_set* s = synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  ema_load_predictor pred(1, s->experts);
  for (const auto& l : s->loads) pred.update(0, l);
  for (auto _ : state) {
    double acc = 0.0;
    const auto x = pred.predicted_loads(0);
    const auto c = pred.predicted_classes(0);
    for (std::size_t e = 0; e < s->experts; ++e) {
      acc += x[e] + static_cast<double>(c[e]) + static_cast<double>(s->layouts[0][e].home) + s->resident[0][e];
    }
    benchmark::DoNotOptimize(acc);
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(s->experts));
  state.SetLabel("floor: read the plan's inputs once; " + s->label);
}
BENCHMARK(synth_plan)->Apply(ema_args);
BENCHMARK(synth_plan_floor)->Apply(ema_args);

// --- one step of the +Relayout system on the timed model (sim/trimoe_replay.hpp) ------------

/// One batched step of the +Relayout system as the replay runs it, and only it: attention and
/// the router on the timeline, background work settled and landed copies installed, the
/// refined schedule issued onto the GPU, CPU, DIMMs and PCIe, the EMA update, and the plan for
/// the next layer queued as background jobs. A one-layer model of E experts over the
/// SYNTHETIC steps (a fresh replayer, built outside the timed region, after the 63rd); the
/// window is the layer's MoE span, so that migrations happen; roofline prices.
void synth_relayout_step(benchmark::State& state) {
  const step_set* s = synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  const model_shape shape = shape_for(s->experts);
  batched_steps steps(s->loads.size(), 1, s->experts, static_cast<std::size_t>(state.range(1)));
  for (std::size_t t = 0; t < s->loads.size(); ++t)
    std::copy(s->loads[t].begin(), s->loads[t].end(), steps.loads(t, 0).begin());
  trimoe_replay_config c;
  c.systems = {false, false, false, false, false, true, false, false, false};
  c.solver_gaps = false;
  c.window = trimoe_window::moe_span;
  c.compute = trimoe_compute_model::roofline;
  const auto devices = make_trimoe_devices({}, shape, c.compute);
  auto r = std::make_unique<trimoe_replayer<>>(steps, shape, devices, c);
  std::size_t replayed = 0;
  std::size_t jobs = 0;
  for (auto _ : state) {
    if (r->done()) {
      state.PauseTiming();
      const trimoe_result done = r->result();
      for (std::size_t k = 0; k < 4; ++k) jobs += done[trimoe_system::relayout].migrations.taken[k];
      r = std::make_unique<trimoe_replayer<>>(steps, shape, devices, c);
      state.ResumeTiming();
    }
    r->replay_step();
    ++replayed;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(s->experts));
  state.counters["jobs_per_step"] = static_cast<double>(jobs) / static_cast<double>(std::max<std::size_t>(replayed, 1));
  state.SetLabel(s->label);
}
/// Reads the relayout step's inputs once: the loads, the prediction and the layer's state.
void synth_relayout_step_floor(benchmark::State& state) {
  const step_set* s = synth_set(static_cast<std::size_t>(state.range(0)), static_cast<std::size_t>(state.range(1)));
  ema_load_predictor pred(1, s->experts);
  for (const auto& l : s->loads) pred.update(0, l);
  std::size_t i = 0;
  for (auto _ : state) {
    double acc = 0.0;
    const auto x = pred.predicted_loads(0);
    const auto c = pred.predicted_classes(0);
    for (std::size_t e = 0; e < s->experts; ++e) {
      acc += static_cast<double>(s->loads[i][e]) + x[e] + static_cast<double>(c[e]) +
             static_cast<double>(s->layouts[0][e].home) + s->resident[0][e];
    }
    benchmark::DoNotOptimize(acc);
    if (++i == s->loads.size()) i = 0;
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(s->experts));
  state.SetLabel("floor: read the relayout step's inputs once; " + s->label);
}
BENCHMARK(synth_relayout_step)->Apply(ema_args);
BENCHMARK(synth_relayout_step_floor)->Apply(ema_args);

}  // namespace
