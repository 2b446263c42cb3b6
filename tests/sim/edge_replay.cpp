// Edge-MoE on the timed model: a miss split between PCIe loads and the CPU as Alg. 2 says, a
// one-layer-ahead prefetch that only uses idle link time and is late when it has not landed,
// the cache bypassed when every miss runs on the CPU, and every byte on a link.
#include "moepolicy/sim/edge_replay.hpp"

#include <doctest/doctest.h>

#include <array>
#include <span>
#include <vector>

#include "../cache/cache_test_support.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "same_ledger.hpp"

using namespace moepolicy;

namespace {

// Mixtral-sized experts (11 ms over PCIe Gen4 x16), two MoE layers, four experts, top-1.
model_shape toy_shape() {
  model_shape m = models::mixtral_8x7b();
  m.name = "toy";
  m.num_layers = 2;
  m.num_experts = 4;
  m.top_k = 1;
  return m;
}

// One request; token i selects expert i mod 4 at layer 0 and (i + 1) mod 4 at layer 1.
routing_trace toy(std::uint32_t tokens) {
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 2, .num_experts = 4, .top_k = 1});
  const auto r = b.add_request("r");
  for (std::uint32_t i = 0; i < tokens; ++i) {
    const std::array<float, 1> w{1.0f};
    const std::array<expert_id, 1> a{static_cast<expert_id>(i % 4)};
    const std::array<expert_id, 1> c{static_cast<expert_id>((i + 1) % 4)};
    b.add({r, phase::decode, i + 1, i, 0, a, w, {}});
    b.add({r, phase::decode, i + 1, i, 1, c, w, {}});
  }
  return std::move(b).finish();
}

void check_conservation(const edge_system_result& s) {
  const resource_account& in = s.accounts[s.to_gpu];
  CHECK(in.moved(cost_kind::demand_fetch) == s.cache.demand_bytes);
  CHECK(in.moved(cost_kind::prefetch) == s.cache.prefetch_bytes + s.cache.late_placed_bytes + s.cache.wasted_bytes);
  CHECK(s.cache.accesses == s.cache.hits + s.cache.late_prefetches + s.cache.misses);
}

}  // namespace

TEST_CASE("loads stall the layer for their transfer, CPU experts for their compute and activations") {
  const model_shape m = toy_shape();
  const roofline_cost gpu{presets::rtx_3080_ti(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  const std::array<edge_system_config, 2> systems{
      {{"load", lru_config{}, edge_miss_rule::load_all}, {"cpu", lru_config{}, edge_miss_rule::cpu_all}}};
  const edge_replay_result r = replay_edge(toy(1), gpu, cpu, m, systems, {.cache_experts = 8});
  REQUIRE(r.steps == 1);
  const edge_system_result& load = r.systems[0];
  const edge_system_result& on_cpu = r.systems[1];
  const bytes W = expert_bytes(m, fp16);
  CHECK(load.accounts[load.to_gpu].moved(cost_kind::demand_fetch) == 2 * W);
  CHECK(load.accounts[load.gpu].stall_seconds == doctest::Approx(2 * gpu.transfer_seconds(W)));
  CHECK(on_cpu.accounts[on_cpu.cpu].busy(cost_kind::expert) ==
        doctest::Approx(2 * cpu.compute_seconds({0, 0}, fp16, 1)));
  CHECK(on_cpu.accounts[on_cpu.to_cpu].moved(cost_kind::activation) == 2 * 4096 * 2);
  CHECK(on_cpu.cache_bypassed());  // every miss ran on the CPU: no expert ever reached the GPU
  CHECK(!load.cache_bypassed());
  CHECK(on_cpu.tpot() < load.tpot());  // 6.9 ms on 6 cores beats an 11 ms load
  check_conservation(load);
}

TEST_CASE("the two-pointer split and its best prefix: never worse, both on the timeline") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost gpu{presets::rtx_4060_ti_16gb(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  const std::array<edge_system_config, 4> systems{{
      {"lru", lru_config{}, edge_miss_rule::load_all},
      {"ema", ema_score_config{}, edge_miss_rule::balance},
      {"ours", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::transition},
      {"prefix", score_aware_config{}, edge_miss_rule::best_prefix, true, 0.3, edge_predictor::transition},
  }};
  for (std::size_t B : {1u, 3u}) {
    // The progress counter gets every batched row once per system.
    replay_progress progress;
    const edge_replay_result r =
        replay_edge(t, gpu, cpu, m, systems, {.streams = B, .cache_experts = 192, .progress = &progress});
    CHECK(r.tokens == 48);
    const std::uint64_t rows = make_decode_streams(t, {.streams = B}).batched().num_rows();
    CHECK(rows > 0);
    CHECK(progress.rows == systems.size() * rows);
    CHECK(progress.total == 0);
    for (const auto& s : r.systems) {
      CAPTURE(s.config.label);
      check_conservation(s);
    }
    CHECK(r.systems[1].tpot() < r.systems[0].tpot());
    CHECK(r.systems[3].tpot() <= r.systems[2].tpot() * 1.02);
    // Streams formed once and replayed twice give the replay of the trace, bit for bit.
    const decode_streams d = make_decode_streams(t, {.streams = B});
    for (int twice = 0; twice < 2; ++twice) {
      const edge_replay_result f = replay_edge(d, gpu, cpu, m, systems, {.cache_experts = 192});
      CHECK(f.streams == B);
      CHECK(f.steps == r.steps);
      CHECK(f.tokens == r.tokens);
      REQUIRE(f.systems.size() == r.systems.size());
      for (std::size_t i = 0; i < f.systems.size(); ++i) {
        CAPTURE(i);
        CHECK(f.systems[i].token_seconds == r.systems[i].token_seconds);
        CHECK(f.systems[i].run_seconds == r.systems[i].run_seconds);
        CHECK(f.systems[i].cache.hits == r.systems[i].cache.hits);
        CHECK(f.systems[i].cache.late_prefetches == r.systems[i].cache.late_prefetches);
        CHECK(f.systems[i].cache.wasted_bytes == r.systems[i].cache.wasted_bytes);
        CHECK(f.systems[i].substituted == r.systems[i].substituted);
        CHECK(f.systems[i].accounts[f.systems[i].cpu].busy() == r.systems[i].accounts[r.systems[i].cpu].busy());
      }
    }
  }
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_edge(make_decode_streams(::toy(1), {.streams = 1}), gpu, cpu, m, systems)),
      "moepolicy::replay_edge: the trace's layers x experts must match the model's 24 x 32, trace layers, got 2",
      invalid_argument);
}

namespace {

// Every field a result carries, bit for bit.
void check_same(const edge_system_result& a, const edge_system_result& b) {
  CAPTURE(a.config.label);
  CHECK(a.steps == b.steps);
  CHECK(a.tokens == b.tokens);
  CHECK(a.token_seconds == b.token_seconds);
  CHECK(a.run_seconds == b.run_seconds);
  CHECK(a.substituted == b.substituted);
  CHECK(a.original_mass == b.original_mass);
  CHECK(a.routed_mass == b.routed_mass);
  CHECK(a.cache.accesses == b.cache.accesses);
  CHECK(a.cache.hits == b.cache.hits);
  CHECK(a.cache.late_prefetches == b.cache.late_prefetches);
  CHECK(a.cache.misses == b.cache.misses);
  CHECK(a.cache.served_elsewhere == b.cache.served_elsewhere);
  CHECK(a.cache.prefetches == b.cache.prefetches);
  CHECK(a.cache.prefetches_started == b.cache.prefetches_started);
  CHECK(a.cache.prefetches_landed == b.cache.prefetches_landed);
  CHECK(a.cache.prefetches_cancelled == b.cache.prefetches_cancelled);
  CHECK(a.cache.demand_bytes == b.cache.demand_bytes);
  CHECK(a.cache.prefetch_bytes == b.cache.prefetch_bytes);
  CHECK(a.cache.wasted_bytes == b.cache.wasted_bytes);
  CHECK(a.policy.hits == b.policy.hits);
  CHECK(a.policy.admissions == b.policy.admissions);
  CHECK(a.policy.evictions == b.policy.evictions);
  test::check_same_ledger(a.accounts, b.accounts);
}

}  // namespace

TEST_CASE("a sweep in lockstep equals each system replayed alone, on every GPU, size and B") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost small{presets::rtx_4060_ti_16gb(), m};
  const roofline_cost big{presets::rtx_a6000(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  // Systems that share a tape (two of the transition predictor, with other splits and
  // alphas), the oracle's, and none (on demand, on the CPU, a static placement).
  const std::vector<edge_system_config> all{
      {"lru", lru_config{}, edge_miss_rule::load_all},
      {"lfu", lfu_config{.decay = 1.0}, edge_miss_rule::load_all},
      {"static", lru_config{}, edge_miss_rule::cpu_all, false, 0.3, edge_predictor::none, true},
      {"ema", ema_score_config{}, edge_miss_rule::balance},
      {"ours", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::transition},
      {"no prefetch", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::none},
      {"oracle", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::oracle},
      {"prefix", score_aware_config{}, edge_miss_rule::best_prefix, true, 0.1, edge_predictor::transition},
  };
  const std::vector<edge_system_config> few{all[4], all[0]};
  for (std::size_t B : {1u, 3u}) {
    CAPTURE(B);
    const decode_streams d = make_decode_streams(t, {.streams = B});
    // Blocks of 5 steps (the systems alone run blocks of the default 64): the walk crosses
    // blocks, and a block's last step need not be the walk's.
    REQUIRE(d.num_steps() > 10);
    CHECK(d.num_steps() % 5 != 0);
    const std::array<edge_sweep_point<roofline_cost>, 3> points{{{&small, 96, all}, {&big, 160, all}, {&big, 32, few}}};
    replay_progress progress;
    const std::vector<edge_replay_result> swept =
        replay_edge_sweep<roofline_cost>(d, cpu, m, points, {.progress = &progress, .block_steps = 5});
    REQUIRE(swept.size() == points.size());
    CHECK(progress.rows == (2 * all.size() + few.size()) * d.batched().num_rows());
    bool differ = false;
    for (std::size_t p = 0; p < points.size(); ++p) {
      CAPTURE(p);
      REQUIRE(swept[p].systems.size() == points[p].systems.size());
      CHECK(swept[p].cache_experts == points[p].cache_experts);
      CHECK(swept[p].streams == B);
      CHECK(swept[p].expert_bytes == points[p].gpu->footprint_bytes({0, 0}, fp16));
      for (std::size_t i = 0; i < points[p].systems.size(); ++i) {
        const edge_replay_result alone = replay_edge(t, *points[p].gpu, cpu, m, std::span(&points[p].systems[i], 1),
                                                     {.streams = B, .cache_experts = points[p].cache_experts});
        CHECK(alone.steps == swept[p].steps);
        CHECK(alone.tokens == swept[p].tokens);
        check_same(swept[p].systems[i], alone.systems[0]);
        differ = differ || swept[p].systems[i].token_seconds != swept[p].systems[0].token_seconds;
      }
    }
    CHECK(differ);  // the systems do differ: equal results are not trivially so
    CHECK(swept[0].systems[4].cache.prefetches > 0);
    CHECK(swept[0].systems[6].cache.prefetches > 0);
  }
  const std::array<edge_sweep_point<roofline_cost>, 1> none{{{nullptr, 8, few}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_edge_sweep<roofline_cost>(make_decode_streams(t, {}), cpu, m, none)),
                       "moepolicy::replay_edge_sweep: point 0 has no GPU", invalid_argument);
  const std::array<edge_sweep_point<roofline_cost>, 1> good{{{&small, 8, few}}};
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_edge_sweep<roofline_cost>(make_decode_streams(t, {}), cpu, m, good, {.block_steps = 0})),
      "moepolicy::replay_edge_sweep: block_steps must be >= 1, got 0", invalid_argument);
  const std::array<edge_system_config, 1> bad{{{"b", belady_config{}}}};
  const std::array<edge_sweep_point<roofline_cost>, 1> with_bad{{{&small, 8, bad}}};
  CHECK_THROWS_WITH_AS(
      static_cast<void>(replay_edge_sweep<roofline_cost>(make_decode_streams(t, {}), cpu, m, with_bad)),
      "moepolicy::replay_edge_sweep: system \"b\": Belady's policy needs the future and cannot run timed",
      invalid_argument);
}

TEST_CASE("a sweep on several threads equals the sweep on one, system by system") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost small{presets::rtx_4060_ti_16gb(), m};
  const roofline_cost big{presets::rtx_a6000(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  // Two tapes (the transition predictor's, the oracle's) and two price tables (one per GPU)
  // recorded in parallel; systems of every kind stepping in parallel.
  const std::vector<edge_system_config> all{
      {"lru", lru_config{}, edge_miss_rule::load_all},
      {"static", lru_config{}, edge_miss_rule::cpu_all, false, 0.3, edge_predictor::none, true},
      {"ours", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::transition},
      {"oracle", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::oracle},
      {"prefix", score_aware_config{}, edge_miss_rule::best_prefix, true, 0.1, edge_predictor::transition},
  };
  const decode_streams d = make_decode_streams(t, {.streams = 3});
  const std::array<edge_sweep_point<roofline_cost>, 2> points{{{&small, 96, all}, {&big, 32, all}}};
  replay_progress one_progress;
  const std::vector<edge_replay_result> one =
      replay_edge_sweep<roofline_cost>(d, cpu, m, points, {.progress = &one_progress, .block_steps = 5, .jobs = 1});
  // 2 and 3 threads, and more threads than systems (one per system); blocks of one step,
  // of a few, and so long that the steps fill one, two or three of them (with more than
  // one thread, three blocks are held: one prepared, one recorded, one run at a time).
  const std::size_t steps = d.num_steps();
  REQUIRE(steps >= 9);
  for (std::size_t block : {std::size_t{1}, std::size_t{5}, steps / 3, (steps + 1) / 2, steps, 1000 * steps}) {
    for (std::size_t jobs : {2u, 3u, 64u}) {
      CAPTURE(block);
      CAPTURE(jobs);
      replay_progress progress;
      const std::vector<edge_replay_result> many = replay_edge_sweep<roofline_cost>(
          d, cpu, m, points, {.progress = &progress, .block_steps = block, .jobs = jobs});
      CHECK(progress.rows == one_progress.rows);
      REQUIRE(many.size() == one.size());
      for (std::size_t p = 0; p < points.size(); ++p) {
        REQUIRE(many[p].systems.size() == one[p].systems.size());
        for (std::size_t i = 0; i < one[p].systems.size(); ++i) check_same(many[p].systems[i], one[p].systems[i]);
      }
    }
  }
  CHECK(one[0].systems[0].token_seconds != one[0].systems[2].token_seconds);  // not trivially equal
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_edge_sweep<roofline_cost>(d, cpu, m, points, {.jobs = 0})),
                       "moepolicy::replay_edge_sweep: jobs must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_edge(d, small, cpu, m, all, {.jobs = 0})),
                       "moepolicy::replay_edge: jobs must be >= 1, got 0", invalid_argument);
}

TEST_CASE("a one-layer-ahead prefetch lands only in idle link time, a late one loads the rest") {
  const model_shape m = toy_shape();
  const roofline_cost gpu{presets::rtx_3080_ti(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  // The oracle names layer 1's expert exactly. Over PCIe the 11 ms load cannot land within a
  // layer; over an unlimited link it lands at once and every layer-1 access hits.
  device_spec instant = presets::rtx_3080_ti();
  instant.weight_link = {unlimited_bandwidth, 0.0};
  const roofline_cost fast{instant, m};
  const std::array<edge_system_config, 2> systems{
      {{"oracle", lru_config{}, edge_miss_rule::load_all, false, 0.3, edge_predictor::oracle},
       {"none", lru_config{}, edge_miss_rule::load_all}}};
  const edge_replay_result slow = replay_edge(toy(8), gpu, cpu, m, systems, {.cache_experts = 1});
  const edge_replay_result quick = replay_edge(toy(8), fast, cpu, m, systems, {.cache_experts = 1});
  const edge_system_result& o = slow.systems[0];
  CHECK(o.cache.prefetches > 0);
  CHECK(o.cache.prefetches_landed == 0);
  CHECK(o.cache.hits == 0);
  check_conservation(o);
  CHECK(quick.systems[0].cache.hits == 8);  // layer 1 of each step
  CHECK(quick.systems[0].cache.late_prefetches == 0);
  CHECK(quick.systems[1].cache.hits == 0);
}

TEST_CASE("room for experts, and bad systems name the problem") {
  const model_shape m = models::mixtral_8x7b();
  const roofline_cost gpu{presets::rtx_3080_ti(), m};
  const std::uint64_t room = experts_that_fit(gpu, m, bytes{2} << 30, 0);
  CHECK(room == (12ULL * gibi - non_expert_weight_bytes(m) - (bytes{2} << 30)) / expert_bytes(m, fp16));
  CHECK(experts_that_fit(roofline_cost{presets::rtx_3080_ti(), m}, m, 12ULL * gibi, 0) == 0);
  const model_shape toy = toy_shape();
  const std::array<edge_system_config, 1> bad{{{"b", belady_config{}}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_edge(::toy(1), roofline_cost{presets::rtx_3080_ti(), toy},
                                                     roofline_cost{presets::ryzen9_5900x_6c(), toy}, toy, bad)),
                       "moepolicy::replay_edge: system \"b\": Belady's policy needs the future and cannot run timed",
                       invalid_argument);
}

TEST_CASE("a run under its policy's own type equals the run under the run-time policy") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost gpu{presets::rtx_4060_ti_16gb(), m};
  const roofline_cost cpu{presets::ryzen9_5900x_6c(), m};
  // Each typed policy (LRU, LFU, the EMA score, the score-aware policy) with configurations
  // other than the defaults where it has one, prefetching and routing or not, and one that
  // stays on the run-time policy (FIFO).
  const std::vector<edge_system_config> systems{
      {"lru", lru_config{}, edge_miss_rule::load_all},
      {"lru, oracle", lru_config{}, edge_miss_rule::balance, false, 0.3, edge_predictor::oracle},
      {"static", lru_config{}, edge_miss_rule::cpu_all, false, 0.3, edge_predictor::none, true},
      {"lfu", lfu_config{.decay = 0.5}, edge_miss_rule::load_all},
      {"lfu, transition", lfu_config{.decay = 1.0}, edge_miss_rule::best_prefix, false, 0.3,
       edge_predictor::transition},
      {"ema", ema_score_config{.keep = 0.2}, edge_miss_rule::balance},
      {"ema, oracle", ema_score_config{}, edge_miss_rule::load_all, true, 0.3, edge_predictor::oracle},
      {"ours", score_aware_config{.window = 2}, edge_miss_rule::balance, true, 0.3, edge_predictor::transition},
      {"ours, no prefetch", score_aware_config{}, edge_miss_rule::balance, true, 0.3, edge_predictor::none},
      {"fifo", fifo_config{}, edge_miss_rule::load_all, false, 0.3, edge_predictor::transition},
  };
  for (std::size_t B : {1u, 3u}) {
    CAPTURE(B);
    const decode_streams d = make_decode_streams(t, {.streams = B});
    const std::array<edge_sweep_point<roofline_cost>, 2> points{{{&gpu, 24, systems}, {&gpu, 96, systems}}};
    const edge_replay_config cfg{.block_steps = 7};
    const std::vector<edge_replay_result> typed =
        detail::replay_edge_points<roofline_cost>(d, cpu, m, points, cfg, true);
    const std::vector<edge_replay_result> any =
        detail::replay_edge_points<roofline_cost>(d, cpu, m, points, cfg, false);
    REQUIRE(typed.size() == any.size());
    bool evicted = false;
    for (std::size_t p = 0; p < points.size(); ++p) {
      CAPTURE(p);
      REQUIRE(typed[p].systems.size() == systems.size());
      REQUIRE(any[p].systems.size() == systems.size());
      for (std::size_t i = 0; i < systems.size(); ++i) {
        check_same(typed[p].systems[i], any[p].systems[i]);
        evicted = evicted || typed[p].systems[i].policy.evictions > 0;
      }
    }
    // The policies decided something: at 24 experts every system that loads evicts.
    CHECK(evicted);
    for (std::size_t i : {0u, 3u, 5u, 7u}) CHECK(typed[0].systems[i].policy.evictions > 0);
    CHECK(typed[0].systems[7].cache.prefetches > 0);
  }
}
