// Costs of the timed model of serving (sim/timeline.hpp, sim/gpu_ndp_replay.hpp): one demand
// operation, one background chunk placed into idle time, and a whole Context-Aware GPU-NDP
// replay of the bundled Granite trace per decoded token. Each sits beside a floor that only
// reads the same inputs once; the ratio to it is the figure the README quotes.
#include <benchmark/benchmark.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bundled_trace.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/sim/gpu_ndp_replay.hpp"
#include "moepolicy/sim/timeline.hpp"

namespace {

using namespace moepolicy;

/// A layer's worth of operations: `n` two-hop operations over four resources, with
/// durations drawn once (synthetic: the cost of bookkeeping does not depend on the values).
struct ops {
  std::vector<std::array<hop, 2>> hops;
  std::vector<seconds> ready;
  explicit ops(std::size_t n) {
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<double> d(1e-6, 1e-3);
    std::uniform_int_distribution<int> r(0, 3);
    double t = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const auto a = static_cast<resource_id>(r(rng));
      const auto b = static_cast<resource_id>((a + 1 + static_cast<unsigned>(r(rng)) % 3) % 4);
      hops.push_back({{{a, d(rng), 4096}, {b, d(rng), 0}}});
      t += d(rng);
      ready.push_back(t);
    }
  }
};

timeline machine() {
  timeline tl;
  tl.add_resource("gpu", resource_kind::processor);
  tl.add_resource("ndp", resource_kind::processor);
  tl.add_resource("link up", resource_kind::link);
  tl.add_resource("link down", resource_kind::link);
  return tl;
}

void BM_timeline_occupy(benchmark::State& state) {
  const ops o(1024);
  timeline tl = machine();
  std::size_t i = 0;
  for (auto _ : state) {
    if (i == o.hops.size()) {
      state.PauseTiming();
      tl.reset();
      i = 0;
      state.ResumeTiming();
    }
    benchmark::DoNotOptimize(tl.occupy(o.ready[i], o.hops[i], cost_kind::expert));
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("one two-hop demand operation");
}
BENCHMARK(BM_timeline_occupy);

void BM_timeline_floor(benchmark::State& state) {
  const ops o(1024);
  std::size_t i = 0;
  double sum = 0.0;
  for (auto _ : state) {
    if (i == o.hops.size()) i = 0;
    sum += o.ready[i] + o.hops[i][0].duration + o.hops[i][1].duration + static_cast<double>(o.hops[i][0].resource);
    benchmark::DoNotOptimize(sum);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("floor: the same hops read once");
}
BENCHMARK(BM_timeline_floor);

// Background work: per iteration, a layer of 16 demand operations leaves gaps and a 4 MiB
// job (four 1 MiB chunks) is placed into them.
void BM_timeline_settle(benchmark::State& state) {
  const ops o(16);
  timeline tl = machine();
  double base = 0.0;
  for (auto _ : state) {
    if (base > 1e6) {
      state.PauseTiming();
      tl.reset();
      base = 0.0;
      state.ResumeTiming();
    }
    for (std::size_t i = 0; i < o.hops.size(); ++i) tl.occupy(base + o.ready[i], o.hops[i], cost_kind::expert);
    const std::array<hop, 1> job{{{2, 1e-4, 4 << 20}}};
    tl.enqueue(tl.settled_until(), job, 4 << 20, cost_kind::prefetch, 0);
    tl.settle(tl.horizon());
    tl.clear_landed();
    base = tl.horizon();
  }
  state.SetItemsProcessed(state.iterations() * 16);
  state.SetLabel("16 demand operations + one 4-chunk background job, per operation");
}
BENCHMARK(BM_timeline_settle);

// Background streaming, per chunk: a demand operation on a link, then a 32 MiB job (32
// chunks of 1 MiB, the Edge-MoE grain) queued behind it and settled in full, as an expert
// load of the Edge-MoE and CXL-MoE replays is. Arg: `timeline_config::fast_paths` (0: every
// chunk searches the link's idle gaps, the reference the fast path is tested against).
void BM_timeline_stream(benchmark::State& state) {
  timeline tl({.fast_paths = state.range(0) != 0});
  tl.add_resource("gpu", resource_kind::processor);
  const resource_id link = tl.add_resource("link", resource_kind::link);
  constexpr bytes payload = bytes{32} << 20;
  const std::array<hop, 1> job{{{link, 1e-3, payload}}};
  for (auto _ : state) {
    if (tl.horizon() > 1e6) {
      state.PauseTiming();
      tl.reset();
      state.ResumeTiming();
    }
    // The demand operation starts after an idle gap: the gap list is not empty.
    tl.run(tl.settled_until() + 1e-5, link, 1e-4, cost_kind::demand_fetch);
    tl.enqueue(tl.settled_until(), job, payload, cost_kind::prefetch, 0);
    tl.settle(tl.horizon() + 2e-3);
    tl.clear_landed();
  }
  state.SetItemsProcessed(state.iterations() * 32);
  state.SetLabel(state.range(0) != 0 ? "fast paths: one 1 MiB chunk streamed behind a link's last operation"
                                     : "plain search: one 1 MiB chunk streamed behind a link's last operation");
}
BENCHMARK(BM_timeline_stream)->Arg(0)->Arg(1);

// Background gap filling, per chunk: a demand operation on a link and another 10 ms later
// leave an idle gap, and a 32 MiB job (32 chunks of 1 MiB, 31 µs each) ready before the gap
// is settled into it, as the Edge-MoE replay's prefetches fill the gaps between demand
// loads. Arg: `timeline_config::fast_paths` (0: every chunk searches the link's idle gaps;
// 1: the chunks after the first are placed together in the gap).
void BM_timeline_gap(benchmark::State& state) {
  timeline tl({.fast_paths = state.range(0) != 0});
  tl.add_resource("gpu", resource_kind::processor);
  const resource_id link = tl.add_resource("link", resource_kind::link);
  constexpr bytes payload = bytes{32} << 20;
  const std::array<hop, 1> job{{{link, 1e-3, payload}}};
  for (auto _ : state) {
    if (tl.horizon() > 1e6) {
      state.PauseTiming();
      tl.reset();
      state.ResumeTiming();
    }
    const seconds t = tl.settled_until();
    tl.run(t, link, 1e-4, cost_kind::demand_fetch);
    tl.run(t + 1e-2, link, 1e-4, cost_kind::demand_fetch);
    tl.enqueue(t, job, payload, cost_kind::prefetch, 0);
    tl.settle(tl.horizon());
    tl.clear_landed();
  }
  state.SetItemsProcessed(state.iterations() * 32);
  state.SetLabel(state.range(0) != 0 ? "fast paths: one 1 MiB chunk placed in an idle gap of a link"
                                     : "plain search: one 1 MiB chunk placed in an idle gap of a link");
}
BENCHMARK(BM_timeline_gap)->Arg(0)->Arg(1);

// Floor of the streaming: each chunk's cumulative share of the payload, the one division a
// chunk needs, read from the same job.
void BM_timeline_stream_floor(benchmark::State& state) {
  constexpr bytes payload = bytes{32} << 20;
  const std::array<hop, 1> job{{{1, 1e-3, payload}}};
  for (auto _ : state) {
    double sum = 0.0;
    for (bytes done = bytes{1} << 20; done <= payload; done += bytes{1} << 20)
      sum += job[0].duration * (static_cast<double>(done) / static_cast<double>(payload));
    benchmark::DoNotOptimize(sum);
  }
  state.SetItemsProcessed(state.iterations() * 32);
  state.SetLabel("floor: each chunk's share of the job, per chunk");
}
BENCHMARK(BM_timeline_stream_floor);

// Stopping queued work, as a timed cache stops a prefetch it no longer wants: per iteration
// one of `state.range(0)` pending jobs (of one priority, never settled) is cancelled and a new
// one queued in its place; the job cancelled is drawn once, in advance. Per pair.
struct cancel_draws {
  std::vector<std::size_t> pick;
  explicit cancel_draws(std::size_t n) : pick(4096) {
    std::mt19937_64 rng(7);
    for (auto& p : pick) p = static_cast<std::size_t>(rng() % n);
  }
};

void BM_timeline_cancel(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const cancel_draws draws(n);
  timeline tl = machine();
  const std::array<hop, 1> job{{{2, 1e-4, 4 << 20}}};
  std::vector<timeline::job_id> ids;
  for (std::size_t i = 0; i < n; ++i) ids.push_back(tl.enqueue(0.0, job, 4 << 20, cost_kind::prefetch, 0));
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t i = draws.pick[k++ % draws.pick.size()];
    tl.cancel(ids[i]);
    ids[i] = tl.enqueue(0.0, job, 4 << 20, cost_kind::prefetch, 0);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel(std::to_string(n) + " pending jobs: one cancelled and one queued, per pair");
}
BENCHMARK(BM_timeline_cancel)->Arg(64)->Arg(256)->Arg(1024);

// Floor of the above: read the job to cancel and its id.
void BM_timeline_cancel_floor(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const cancel_draws draws(n);
  std::vector<timeline::job_id> ids(n);
  for (std::size_t i = 0; i < n; ++i) ids[i] = static_cast<timeline::job_id>(i);
  std::size_t k = 0;
  for (auto _ : state) {
    const std::size_t i = draws.pick[k++ % draws.pick.size()];
    benchmark::DoNotOptimize(ids[i]);
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("floor: the job to cancel, per pair");
}
BENCHMARK(BM_timeline_cancel_floor)->Arg(64)->Arg(256)->Arg(1024);

// The whole Context-Aware GPU-NDP replay on the bundled Granite trace (11 measured requests,
// 176 decoded tokens, 24 layers), per decoded token, for one system.
void BM_gpu_ndp_replay(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  const model_shape m = models::granite_3_1_1b_a400m();
  const gpu_ndp_system<roofline_cost, roofline_cost> sys{roofline_cost{presets::h100_sxm_gen4(), m},
                                                         roofline_cost{presets::cxl_ndp(), m}};
  const gpu_ndp_system_kind kinds[] = {gpu_ndp_system_kind::uniform_bits, gpu_ndp_system_kind::monde,
                                       gpu_ndp_system_kind::hobbit_like};
  const std::array<gpu_ndp_system_config, 1> systems{{{"s", kinds[state.range(0)], 2.0, bitwidth{2}}}};
  std::uint64_t tokens = 0;
  for (auto _ : state) {
    const auto r =
        replay_gpu_ndp(t, sys, m, nullptr, nullptr, systems, {.gpu_experts_per_layer = 16, .calibration_requests = 1});
    tokens = r.systems[0].decode_steps();
    benchmark::DoNotOptimize(r.systems[0].accounts.horizon);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tokens));
  state.SetLabel(std::string(to_string(kinds[state.range(0)])) + ": Granite bundled trace, per decoded token");
}
BENCHMARK(BM_gpu_ndp_replay)->Arg(0)->Arg(1)->Arg(2);

// Floor of the replay: read every routing row of the trace once.
void BM_gpu_ndp_replay_floor(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  for (auto _ : state) {
    const bench::routing_sums sums = bench::read_routing_once(t);
    benchmark::DoNotOptimize(sums.ids);
    benchmark::DoNotOptimize(sums.weights);
  }
  state.SetItemsProcessed(state.iterations() * 176);
  state.SetLabel("floor: read the trace's ids and weights once, per decoded token");
}
BENCHMARK(BM_gpu_ndp_replay_floor);

}  // namespace
