// Costs of timed expert caching (sim/timed_cache.hpp, sim/offload_replay.hpp,
// sim/edge_replay.hpp): one demand access served through the timed cache, and a whole timed
// replay of the bundled Granite trace per decoded token — CXL-MoE (sticky LRU, frequency
// model prefetch, the prefill stand-in) and Edge-MoE's scheduler (router, transition
// prefetch, score-aware eviction, two-pointer split) — and the report's lockstep sweeps of
// both on 1 and 2 threads (wall time), and forming the decode streams they replay from a
// canonical file, each beside a floor that only reads the same inputs once. The ratio to the
// floor is the figure to quote.
#include <benchmark/benchmark.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "bundled_trace.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/edge_replay.hpp"
#include "moepolicy/sim/offload_replay.hpp"
#include "moepolicy/sim/timed_cache.hpp"

namespace {

using namespace moepolicy;

const std::vector<expert_key>& granite_accesses() {
  static const std::vector<expert_key> a = replay_accesses(bench::bundled_granite(), {.prefill = false});
  return a;
}

// One demand access through a timed cache of 256 Granite experts over CXL: a hit, or a
// demand transfer on the link plus admission and eviction. The timeline is reset every
// 4096 accesses (outside the timed region).
void BM_timed_cache_serve(benchmark::State& state) {
  const std::vector<expert_key>& acc = granite_accesses();
  const bytes w = expert_bytes(models::granite_3_1_1b_a400m(), fp16);
  timeline tl;
  tl.add_resource("gpu", resource_kind::processor);
  const resource_id link = tl.add_resource("link", resource_kind::link);
  std::optional<timed_expert_cache<>> cache;
  cache.emplace(tl, link, link_cost{presets::cxl2_x16}, 24, 32, 256, lru_config{}, w);
  std::size_t i = 0;
  double t = 0.0;
  for (auto _ : state) {
    if (i == 4096) {
      state.PauseTiming();
      tl.reset();
      cache.emplace(tl, link, link_cost{presets::cxl2_x16}, 24, 32, 256, lru_config{}, w);
      i = 0;
      t = 0.0;
      state.ResumeTiming();
    }
    const timed_access a = cache->serve(acc[i % acc.size()], t);
    t = a.ready;
    benchmark::DoNotOptimize(a);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("one demand access (hit, or transfer + admission + eviction)");
}
BENCHMARK(BM_timed_cache_serve);

void BM_timed_cache_serve_floor(benchmark::State& state) {
  const std::vector<expert_key>& acc = granite_accesses();
  std::size_t i = 0;
  std::uint64_t sum = 0;
  for (auto _ : state) {
    const expert_key k = acc[i % acc.size()];
    sum += k.layer + k.expert;
    benchmark::DoNotOptimize(sum);
    ++i;
  }
  state.SetItemsProcessed(state.iterations());
  state.SetLabel("floor: read the access once");
}
BENCHMARK(BM_timed_cache_serve_floor);

// The CXL-MoE replay of the bundled Granite trace (192 decoded tokens, 12 prefills, 24
// layers) with a cache of 192 experts, per decoded token, for one system, at B = 1 and 4.
void BM_offload_replay(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  const model_shape m = models::granite_3_1_1b_a400m();
  const roofline_cost gpu{presets::h100_pcie_gen5(), m};
  const std::array<offload_system_config, 1> systems{{cxl_moe_system()}};
  const auto B = static_cast<std::size_t>(state.range(0));
  std::uint64_t tokens = 0;
  for (auto _ : state) {
    const auto r = replay_offload(t, gpu, m, systems, {.streams = B, .cache_experts = 192});
    tokens = r.tokens;
    benchmark::DoNotOptimize(r.systems[0].run_seconds);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tokens));
  state.SetLabel("CXL-MoE, Granite bundled trace, per decoded token");
}
BENCHMARK(BM_offload_replay)->Arg(1)->Arg(4)->ArgName("B")->Unit(benchmark::kMillisecond);

// The report's CXL-MoE sweep in small (examples/drivers/cxl_prefetch.cpp): CXL-MoE, CXL-MoE
// without stickiness, LRU on demand and the CPU-offload baseline at five cache sizes, 20
// timed passes in one lockstep walk (`replay_offload_sweep`), per routing row of the
// decode streams and per pass: the figure the report's per-row CPU divides by its passes.
// On `jobs` threads (`offload_replay_config::jobs`), in wall time.
void BM_offload_sweep(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  const model_shape m = models::granite_3_1_1b_a400m();
  const roofline_cost gpu{presets::h100_pcie_gen5(), m};
  offload_system_config no_sticky = cxl_moe_system("no sticky");
  std::get<sticky_lru_config>(no_sticky.policy).stickiness = false;
  const offload_system_config lru_demand{"LRU on demand",   offload_system_kind::cached,
                                         presets::cxl2_x16, link_duplex::full,
                                         lru_config{},      {.predictor = offload_predictor::none, .prefill = false}};
  const std::array<offload_system_config, 4> systems{{cxl_moe_system(), no_sticky, lru_demand, cpu_offload_system()}};
  std::vector<offload_sweep_point> points;
  for (const std::uint64_t c : std::array<std::uint64_t, 5>{48, 96, 192, 288, 384}) points.push_back({c, systems});
  const decode_streams d = make_decode_streams(t, {.streams = 1});
  const auto rows = static_cast<std::int64_t>(d.batched().num_rows());
  const auto jobs = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    const auto r = replay_offload_sweep(t, d, gpu, m, points, {.jobs = jobs});
    benchmark::DoNotOptimize(r.back().systems.back().run_seconds);
  }
  state.SetItemsProcessed(state.iterations() * rows * static_cast<std::int64_t>(points.size() * systems.size()));
  state.SetLabel("CXL-MoE sweep, 20 passes, Granite bundled trace, per routing row per pass, " + std::to_string(jobs) +
                 " thread(s)");
}
BENCHMARK(BM_offload_sweep)->ArgName("jobs")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// The report's Edge-MoE systems in small (examples/drivers/edge_offload.cpp): six systems on
// two GPUs at half of the experts, 12 timed passes in one lockstep walk
// (`replay_edge_sweep`), per routing row of the decode streams and per pass, on `jobs`
// threads (`edge_replay_config::jobs`), in wall time.
void BM_edge_sweep(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  const model_shape m = models::granite_3_1_1b_a400m();
  const roofline_cost small{presets::rtx_4060_ti_16gb(), m}, big{presets::rtx_a6000(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  const std::array<edge_system_config, 6> systems{{
      {"lru", lru_config{}, edge_miss_rule::load_all},
      {"lfu", lfu_config{.decay = 1.0}, edge_miss_rule::load_all},
      {"ema", ema_score_config{}, edge_miss_rule::balance},
      {"ours", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::transition},
      {"no prefetch", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::none},
      {"prefix", score_aware_config{}, edge_miss_rule::best_prefix, true, 0.3, edge_predictor::transition},
  }};
  const std::uint64_t half = std::uint64_t{t.info().num_layers} * t.info().num_experts / 2;
  const std::array<edge_sweep_point<roofline_cost>, 2> points{{{&small, half, systems}, {&big, half, systems}}};
  const decode_streams d = make_decode_streams(t, {.streams = 1});
  const auto rows = static_cast<std::int64_t>(d.batched().num_rows());
  const auto jobs = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    const auto r = replay_edge_sweep<roofline_cost>(d, cpu, m, points, {.jobs = jobs});
    benchmark::DoNotOptimize(r.back().systems.back().run_seconds);
  }
  state.SetItemsProcessed(state.iterations() * rows * static_cast<std::int64_t>(points.size() * systems.size()));
  state.SetLabel("Edge-MoE sweep, 12 passes, Granite bundled trace, per routing row per pass, " + std::to_string(jobs) +
                 " thread(s)");
}
BENCHMARK(BM_edge_sweep)->ArgName("jobs")->Arg(1)->Arg(2)->UseRealTime()->Unit(benchmark::kMillisecond);

// Floor of the sweep: read every routing row of the decode streams once, per routing row.
void BM_offload_sweep_floor(benchmark::State& state) {
  const decode_streams d = make_decode_streams(bench::bundled_granite(), {.streams = 1});
  for (auto _ : state) {
    const bench::routing_sums sums = bench::read_routing_once(d.batched());
    benchmark::DoNotOptimize(sums.ids);
    benchmark::DoNotOptimize(sums.weights);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(d.batched().num_rows()));
  state.SetLabel("floor: read the decode streams' ids and weights once, per routing row");
}
BENCHMARK(BM_offload_sweep_floor)->Unit(benchmark::kMicrosecond);

// Edge-MoE's scheduler on the RTX 3080 Ti preset, cache 192 experts, per decoded token.
void BM_edge_replay(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  const model_shape m = models::granite_3_1_1b_a400m();
  const roofline_cost gpu{presets::rtx_3080_ti(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  const std::array<edge_system_config, 1> systems{
      {{"ours", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::transition}}};
  const auto B = static_cast<std::size_t>(state.range(0));
  std::uint64_t tokens = 0;
  for (auto _ : state) {
    const auto r = replay_edge(t, gpu, cpu, m, systems, {.streams = B, .cache_experts = 192});
    tokens = r.tokens;
    benchmark::DoNotOptimize(r.systems[0].run_seconds);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(tokens));
  state.SetLabel("Edge-MoE, Granite bundled trace, per decoded token");
}
BENCHMARK(BM_edge_replay)->Arg(1)->Arg(3)->ArgName("B")->Unit(benchmark::kMillisecond);

// Floor of the replays: read every routing row of the trace once, per decoded token.
void BM_timed_replay_floor(benchmark::State& state) {
  const routing_trace& t = bench::bundled_granite();
  for (auto _ : state) {
    const bench::routing_sums sums = bench::read_routing_once(t);
    benchmark::DoNotOptimize(sums.ids);
    benchmark::DoNotOptimize(sums.weights);
  }
  state.SetItemsProcessed(state.iterations() * 192);
  state.SetLabel("floor: read the trace's ids and weights once, per decoded token");
}
BENCHMARK(BM_timed_replay_floor)->Unit(benchmark::kMillisecond);

// B decode streams formed from the bundled Granite file's map (sim/decode_streams.hpp), per
// routing row of the file: each B on its own (`make_decode_streams`: the file walked to
// check its rows and find its steps, then formed), from the walks done once for every B
// (`file_decode_streams::form`), and the tokens alone (`tokens_only`, what a replay needs to
// size itself).
const canonical_file& granite_file() {
  static const canonical_file f(bench::bundled_granite_path(), canonical_file::access::copy);
  return f;
}
void BM_decode_streams_each(benchmark::State& state) {
  const auto B = static_cast<std::size_t>(state.range(0));
  for (auto _ : state) {
    const std::optional<decode_streams> d = make_decode_streams(granite_file(), {.streams = B});
    benchmark::DoNotOptimize(d->num_rows());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(granite_file().num_rows()));
  state.SetLabel("make_decode_streams(canonical_file), per routing row of the file");
}
BENCHMARK(BM_decode_streams_each)->ArgName("B")->Arg(1)->Arg(4)->Unit(benchmark::kMicrosecond);
void BM_decode_streams_reused(benchmark::State& state) {
  const auto B = static_cast<std::size_t>(state.range(0));
  const bool tokens_only = state.range(1) != 0;
  const std::optional<file_decode_streams> source = file_decode_streams::open(granite_file());
  for (auto _ : state) {
    const decode_streams d = source->form({.streams = B, .tokens_only = tokens_only});
    benchmark::DoNotOptimize(d.num_rows());
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(granite_file().num_rows()));
  state.SetLabel(std::string("file_decode_streams::form") + (tokens_only ? ", tokens only" : "") +
                 ", per routing row of the file");
}
BENCHMARK(BM_decode_streams_reused)
    ->ArgNames({"B", "tokens_only"})
    ->Args({1, 0})
    ->Args({4, 0})
    ->Args({1, 1})
    ->Args({4, 1})
    ->Unit(benchmark::kMicrosecond);
// Floor of the streams: walk the file's map once, reading every id and gate weight.
void BM_decode_streams_floor(benchmark::State& state) {
  const auto nothing = [](const auto&) {};
  for (auto _ : state) {
    bench::routing_sums sums;
    granite_file().for_each_batch(
        nothing, [&](const batch_view& v) { bench::add_routing(sums, v); }, nothing);
    benchmark::DoNotOptimize(sums.ids);
    benchmark::DoNotOptimize(sums.weights);
  }
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(granite_file().num_rows()));
  state.SetLabel("floor: walk the file's map once, reading its ids and weights, per routing row");
}
BENCHMARK(BM_decode_streams_floor)->Unit(benchmark::kMicrosecond);

}  // namespace
