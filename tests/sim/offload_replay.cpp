// CXL-MoE and its baselines on the timed model: demand fetches stall the GPU for their link
// time, a prefetch helps only when it lands before the access (a late one is a partial
// stall), every byte crosses a link, HBM-only needs room for every expert, and on the Mixtral
// decode trace the CXL-MoE rows change with cache size and with stickiness.
#include "moepolicy/sim/offload_replay.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <vector>

#include "../cache/cache_test_support.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "same_ledger.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

model_shape toy_shape() { return test::mixtral_sized_toy(); }

// One request of four decode tokens selecting experts 0, 2, 2, 3.
routing_trace toy() {
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 1, .num_experts = 4, .top_k = 1});
  const auto r = b.add_request("r");
  std::uint32_t step = 1;
  for (expert_id e : std::array<expert_id, 4>{0, 2, 2, 3}) {
    const std::array<expert_id, 1> ids{e};
    const std::array<float, 1> ws{1.0f};
    b.add({r, phase::decode, step, step, 0, ids, ws, {}});
    ++step;
  }
  return std::move(b).finish();
}

roofline_cost h100(const model_shape& m, bytes hbm = 80'000'000'000ULL) {
  device_spec g = presets::h100_pcie_gen5();
  g.capacity_bytes = hbm;
  return roofline_cost{g, m};
}

offload_system_config lru_system(offload_predictor p, link_spec link = presets::cxl2_x16) {
  return {"lru",        offload_system_kind::cached,
          link,         link_duplex::full,
          lru_config{}, {.predictor = p, .horizon = 1, .depth = 1}};
}

seconds device_spec_dense(const roofline_cost& gpu, const dense_work& w) { return gpu.dense_seconds(w.flops, w.read); }

/// Link bytes of weights = the cache's installed, transient and wasted bytes.
void check_conservation(const offload_system_result& s) {
  REQUIRE(s.ok());
  const resource_account& in = s.accounts[s.link_in];
  CHECK(in.moved(cost_kind::demand_fetch) == s.cache.demand_bytes);
  CHECK(in.moved(cost_kind::prefetch) == s.cache.prefetch_bytes + s.cache.late_placed_bytes + s.cache.wasted_bytes);
  CHECK(s.cache.accesses == s.cache.hits + s.cache.late_prefetches + s.cache.misses);
  CHECK(s.decode_hits <= s.decode_accesses);
  // Weights only ever cross towards the GPU.
  CHECK(s.accounts.link_bytes(cost_kind::demand_fetch) == in.moved(cost_kind::demand_fetch));
}

}  // namespace

TEST_CASE("demand caching on the timeline: each miss stalls the GPU for its transfer") {
  const model_shape m = toy_shape();
  const roofline_cost gpu = h100(m);
  const std::array<offload_system_config, 2> systems{
      {{"hbm", offload_system_kind::hbm_only}, lru_system(offload_predictor::none)}};
  const offload_replay_result r = replay_offload(toy(), gpu, m, systems, {.cache_experts = 2});
  REQUIRE(r.steps == 4);
  const offload_system_result& hbm = r.systems[0];
  const offload_system_result& lru = r.systems[1];
  REQUIRE(hbm.ok());
  CHECK(hbm.decode_hit_ratio() == 1.0);
  CHECK(hbm.accounts.link_bytes(cost_kind::demand_fetch) == 0);
  // LRU of 2: 0 miss, 2 miss, 2 hit, 3 miss.
  CHECK(lru.decode_accesses == 4);
  CHECK(lru.decode_hits == 1);
  const bytes W = expert_bytes(m, fp16);
  const seconds T = presets::cxl2_x16.seconds_for(W);
  CHECK(lru.accounts[lru.link_in].moved(cost_kind::demand_fetch) == 3 * W);
  CHECK(lru.accounts[lru.gpu].stall_seconds == doctest::Approx(3 * T));
  CHECK(lru.tpot() == doctest::Approx(hbm.tpot() + 0.75 * T));
  CHECK(lru.throughput() == doctest::Approx(4.0 / (4 * hbm.tpot() + 3 * T)));
  // The KV entries of each layer cross the other direction.
  CHECK(lru.accounts[lru.link_out].moved(cost_kind::kv_cache) == 4 * kv_bytes_per_token(m));
  check_conservation(lru);
}

TEST_CASE("a hybrid model's linear-attention layer writes no KV entries and is priced on its fixed state") {
  // Two MoE layers, the same toy trace in each; in the hybrid, layer 0 runs Kimi's KDA block.
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 2, .num_experts = 4, .top_k = 1});
  const auto req = b.add_request("r");
  std::uint32_t step = 1;
  for (expert_id e : std::array<expert_id, 4>{0, 2, 2, 3}) {
    const std::array<expert_id, 1> ids{e};
    const std::array<float, 1> ws{1.0f};
    for (layer_id l = 0; l < 2; ++l) b.add({req, phase::decode, step, step, l, ids, ws, {}});
    ++step;
  }
  const routing_trace trace = std::move(b).finish();
  const model_shape full = test::mixtral_sized_toy(2);
  model_shape hybrid = full;
  hybrid.linear_attention = models::kimi_linear_48b_a3b().linear_attention;
  hybrid.linear_attention_layers = {0};
  const std::array<offload_system_config, 1> systems{{lru_system(offload_predictor::none)}};
  const offload_replay_result a = replay_offload(trace, h100(full), full, systems, {.cache_experts = 2});
  const offload_replay_result h = replay_offload(trace, h100(hybrid), hybrid, systems, {.cache_experts = 2});
  REQUIRE(a.systems[0].ok());
  REQUIRE(h.systems[0].ok());
  const bytes kv_layer = 2ULL * 8 * 128 * 2;  // Mixtral: 8 K/V heads of 128, BF16
  CHECK(a.systems[0].accounts[a.systems[0].link_out].moved(cost_kind::kv_cache) == 4 * 2 * kv_layer);
  CHECK(h.systems[0].accounts[h.systems[0].link_out].moved(cost_kind::kv_cache) == 4 * kv_layer);
  // GPU attention time: per token one GQA layer and one KDA layer of one sequence.
  const forward_pass_cost<roofline_cost> pass{h100(hybrid), hybrid};
  seconds expected = 0.0;
  for (std::uint64_t ctx = 0; ctx < 4; ++ctx) {
    expected +=
        pass.attention_seconds(1, ctx + 1) + device_spec_dense(h100(hybrid), linear_attention_work(hybrid, 1, 1));
  }
  CHECK(h.systems[0].accounts[h.systems[0].gpu].busy_by[static_cast<std::size_t>(cost_kind::attention)] ==
        doctest::Approx(expected));
}

TEST_CASE("a prefetch that has not landed is not a hit: late prefetches are partial stalls") {
  const model_shape m = toy_shape();
  const roofline_cost gpu = h100(m);
  // The oracle predicts the next token's expert exactly. Over CXL the layer's idle link time
  // (about 0.3 ms) moves a few chunks of the 5.5 ms expert: every prediction is late.
  const std::array<offload_system_config, 2> systems{
      {lru_system(offload_predictor::oracle), lru_system(offload_predictor::oracle, {unlimited_bandwidth, 0.0})}};
  const offload_replay_result r = replay_offload(toy(), gpu, m, systems, {.cache_experts = 2});
  const offload_system_result& cxl = r.systems[0];
  const offload_system_result& instant = r.systems[1];
  CHECK(cxl.decode_hits == 1);  // the repeated expert 2, already resident
  CHECK(cxl.cache.late_prefetches == 2);
  CHECK(cxl.cache.late_placed_bytes > 0);
  CHECK(cxl.cache.late_placed_bytes < expert_bytes(m, fp16));
  // A late prefetch stalls less than a miss.
  const seconds T = presets::cxl2_x16.seconds_for(expert_bytes(m, fp16));
  CHECK(cxl.accounts[cxl.gpu].stall_seconds < 3 * T);
  CHECK(cxl.accounts[cxl.gpu].stall_seconds > T);
  check_conservation(cxl);
  // When a prefetch can land, every predicted access hits.
  CHECK(instant.decode_hits == 3);
  CHECK(instant.cache.late_prefetches == 0);
  CHECK(instant.cache.prefetches_used == 2);
}

TEST_CASE("HBM-only needs room for every expert: the paper's out-of-memory row") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 2);
  const std::array<offload_system_config, 1> systems{{{"hbm", offload_system_kind::hbm_only}}};
  // The progress counter gets every batched row of a system, run or not.
  replay_progress progress;
  const std::uint64_t rows = make_decode_streams(t, {.streams = 1}).batched().num_rows();
  REQUIRE(rows > 0);
  const offload_replay_result fits = replay_offload(t, h100(m), m, systems, {.progress = &progress});
  CHECK(fits.systems[0].ok());
  CHECK(progress.rows == rows);
  const offload_replay_result oom = replay_offload(t, h100(m, 1'000'000'000ULL), m, systems, {.progress = &progress});
  CHECK(oom.systems[0].status == offload_status::does_not_fit);
  CHECK(progress.rows == 2 * rows);
  CHECK(oom.systems[0].status_detail.find("has 1.00 GB") != std::string::npos);
}

TEST_CASE("concurrent streams on the bundled Granite trace: every byte on a link, prefills charged") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 6);
  const roofline_cost gpu = h100(m);
  std::vector<offload_system_config> systems{cxl_moe_system(), cpu_offload_system(),
                                             lru_system(offload_predictor::none)};
  offload_system_config markov = cxl_moe_system("markov");
  markov.prefetch.predictor = offload_predictor::markov;
  markov.prefetch.history = 1;
  systems.push_back(markov);
  for (std::size_t B : {1u, 4u}) {
    CAPTURE(B);
    replay_progress progress;
    const offload_replay_result r =
        replay_offload(t, gpu, m, systems, {.streams = B, .cache_experts = 192, .progress = &progress});
    CHECK(r.tokens == 6 * 16);
    CHECK(progress.rows == systems.size() * make_decode_streams(t, {.streams = B}).batched().num_rows());
    for (const offload_system_result& s : r.systems) {
      CAPTURE(s.config.label);
      check_conservation(s);
      CHECK(s.prefills == 6);
      CHECK(s.mean_ttft() > 0.0);
      CHECK(s.tpot() > 0.0);
    }
    // The half-duplex CPU-offload path carries the KV writes on its only link.
    const offload_system_result& cpu = r.systems[1];
    CHECK(cpu.link_in == cpu.link_out);
    CHECK(cpu.accounts[cpu.link_in].moved(cost_kind::kv_cache) > 0);
  }
}

TEST_CASE("bad arguments name the function and the value") {
  const model_shape m = toy_shape();
  offload_system_config belady = lru_system(offload_predictor::none);
  belady.policy = belady_config{};
  const std::array<offload_system_config, 1> s{{belady}};
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload(toy(), h100(m), m, s)),
                       "moepolicy::replay_offload: system \"lru\": Belady's policy needs the future and cannot run "
                       "timed",
                       invalid_argument);
  const model_shape g = models::granite_3_1_1b_a400m();
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload(toy(), h100(g), g, std::span<const offload_system_config>{})),
                       "moepolicy::replay_offload: the trace's layers x experts must match the model's 24 x 32, trace "
                       "layers, got 1",
                       invalid_argument);
}

TEST_CASE("Mixtral decode: CXL-MoE's rows change with cache size and with stickiness") {
  const std::filesystem::path p =
      std::filesystem::path(MOEPOLICY_SHARED_TRACES) / "mixtral-8x7b-decode" / "humaneval_2_routing.jsonl";
  if (!std::filesystem::exists(p)) {
    MESSAGE("shared traces not found: skipped");
    return;
  }
  const routing_trace t = io::read_trace(p);
  const model_shape m = models::mixtral_8x7b();
  const roofline_cost gpu = h100(m);
  offload_system_config plain = cxl_moe_system("no stickiness");
  std::get<sticky_lru_config>(plain.policy).stickiness = false;
  const std::array<offload_system_config, 2> systems{{cxl_moe_system(), plain}};
  std::vector<double> hit;
  std::vector<double> tpot;
  for (std::uint64_t c : {11u, 22u, 45u, 181u}) {  // 4, 8, 16 and 64 GB of FP16 experts
    const offload_replay_result r = replay_offload(t, gpu, m, systems, {.cache_experts = c});
    check_conservation(r.systems[0]);
    hit.push_back(r.systems[0].decode_hit_ratio());
    tpot.push_back(r.systems[0].tpot());
    // Stickiness protects predicted experts where the cache is smaller than a token's working
    // set (64 experts); with room for most of it LRU keeps them anyway.
    if (c < 45) CHECK(r.systems[0].decode_hit_ratio() > r.systems[1].decode_hit_ratio() + 0.02);
  }
  for (std::size_t i = 1; i < hit.size(); ++i) CHECK(hit[i - 1] < hit[i]);
  for (std::size_t i = 1; i < tpot.size(); ++i) CHECK(tpot[i - 1] > tpot[i]);
}

namespace {

void check_same(const offload_system_result& a, const offload_system_result& b) {
  CAPTURE(a.config.label);
  CHECK(a.status == b.status);
  CHECK(a.hbm_needed_bytes == b.hbm_needed_bytes);
  CHECK(a.steps == b.steps);
  CHECK(a.tokens == b.tokens);
  CHECK(a.token_seconds == b.token_seconds);
  CHECK(a.run_seconds == b.run_seconds);
  CHECK(a.prefills == b.prefills);
  CHECK(a.ttft_seconds == b.ttft_seconds);
  CHECK(a.decode_accesses == b.decode_accesses);
  CHECK(a.decode_hits == b.decode_hits);
  CHECK(a.cache.hits == b.cache.hits);
  CHECK(a.cache.late_prefetches == b.cache.late_prefetches);
  CHECK(a.cache.misses == b.cache.misses);
  CHECK(a.cache.prefetches == b.cache.prefetches);
  CHECK(a.cache.prefetches_started == b.cache.prefetches_started);
  CHECK(a.cache.prefetches_cancelled == b.cache.prefetches_cancelled);
  CHECK(a.cache.prefetches_refused == b.cache.prefetches_refused);
  CHECK(a.cache.demand_bytes == b.cache.demand_bytes);
  CHECK(a.cache.prefetch_bytes == b.cache.prefetch_bytes);
  CHECK(a.cache.wasted_bytes == b.cache.wasted_bytes);
  CHECK(a.policy.hits == b.policy.hits);
  CHECK(a.policy.evictions == b.policy.evictions);
  test::check_same_ledger(a.accounts, b.accounts);
}

}  // namespace

TEST_CASE("a sweep in lockstep equals each system replayed alone, at every size and B") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost gpu = h100(m);
  // Systems that share a prediction tape (CXL-MoE and its ablations), one of their own
  // (the CPU-offload baseline, Markov, the oracle), none (LRU on demand, HBM-only).
  offload_system_config no_sticky = cxl_moe_system("no stickiness");
  std::get<sticky_lru_config>(no_sticky.policy).stickiness = false;
  offload_system_config no_gate = cxl_moe_system("no gate");
  std::get<sticky_lru_config>(no_gate.policy).gated_admission = false;
  offload_system_config half = cxl_moe_system("half duplex");
  half.duplex = link_duplex::half;
  offload_system_config markov = cxl_moe_system("markov");
  markov.prefetch.predictor = offload_predictor::markov;
  markov.prefetch.history = 1;
  offload_system_config oracle = cxl_moe_system("oracle");
  oracle.prefetch.predictor = offload_predictor::oracle;
  offload_system_config no_prefill = cxl_moe_system("no prefill");
  no_prefill.prefetch.prefill = false;
  const std::vector<offload_system_config> all{
      cxl_moe_system(), no_sticky, cpu_offload_system(), lru_system(offload_predictor::none),   no_gate, half,
      markov,           oracle,    no_prefill,           {"hbm", offload_system_kind::hbm_only}};
  const std::vector<offload_system_config> few{cpu_offload_system(), cxl_moe_system()};
  for (std::size_t B : {1u, 4u}) {
    CAPTURE(B);
    const decode_streams d = make_decode_streams(t, {.streams = B});
    const std::array<offload_sweep_point, 2> points{{{48, all}, {96, few}}};
    replay_progress progress;
    const std::vector<offload_replay_result> swept =
        replay_offload_sweep(t, d, gpu, m, points, {.progress = &progress});
    REQUIRE(swept.size() == points.size());
    CHECK(progress.rows == (all.size() + few.size()) * d.batched().num_rows());
    bool differ = false;
    for (std::size_t p = 0; p < points.size(); ++p) {
      CAPTURE(points[p].cache_experts);
      REQUIRE(swept[p].systems.size() == points[p].systems.size());
      CHECK(swept[p].cache_experts == points[p].cache_experts);
      CHECK(swept[p].streams == B);
      for (std::size_t i = 0; i < points[p].systems.size(); ++i) {
        const offload_replay_result alone = replay_offload(t, gpu, m, std::span(&points[p].systems[i], 1),
                                                           {.streams = B, .cache_experts = points[p].cache_experts});
        CHECK(alone.steps == swept[p].steps);
        CHECK(alone.peak_kv_tokens == swept[p].peak_kv_tokens);
        check_same(swept[p].systems[i], alone.systems[0]);
        differ = differ || swept[p].systems[i].decode_hits != swept[p].systems[0].decode_hits;
      }
    }
    CHECK(differ);  // the systems do differ: equal results are not trivially so
  }
}

TEST_CASE("a sweep on several threads equals the sweep on one, system by system") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost gpu = h100(m);
  offload_system_config markov = cxl_moe_system("markov");
  markov.prefetch.predictor = offload_predictor::markov;
  markov.prefetch.history = 1;
  offload_system_config oracle = cxl_moe_system("oracle");
  oracle.prefetch.predictor = offload_predictor::oracle;
  // Three tapes (CXL-MoE's, Markov's, the oracle's) recorded in parallel, and systems of
  // every kind stepping in parallel.
  const std::vector<offload_system_config> all{cxl_moe_system(),
                                               cpu_offload_system(),
                                               lru_system(offload_predictor::none),
                                               markov,
                                               oracle,
                                               {"hbm", offload_system_kind::hbm_only}};
  const decode_streams d = make_decode_streams(t, {.streams = 4});
  const std::array<offload_sweep_point, 2> points{{{48, all}, {96, all}}};
  // Windows of 5 steps: on more than one thread the tapes hold two, and the next window is
  // recorded while the systems run the current one (the last one short).
  constexpr std::size_t window = 5;
  REQUIRE(d.num_steps() > 2 * window);
  REQUIRE(d.num_steps() % window != 0);
  const std::vector<detail::recorded_prefill> no_prefills;
  const detail::prediction_tape tape(cxl_moe_system().prefetch, t.info(), d, no_prefills, false, window, 2);
  CHECK(tape.window() == window);
  CHECK(tape.held_steps() == 2 * window);
  replay_progress one_progress;
  const std::vector<offload_replay_result> one =
      replay_offload_sweep(t, d, gpu, m, points, {.progress = &one_progress, .jobs = 1});
  // Windows of any size give the same results.
  const std::vector<offload_replay_result> small =
      replay_offload_sweep(t, d, gpu, m, points, {.window_steps = window, .jobs = 1});
  for (std::size_t p = 0; p < points.size(); ++p) {
    for (std::size_t i = 0; i < one[p].systems.size(); ++i) check_same(small[p].systems[i], one[p].systems[i]);
  }
  // 2 and 3 threads, and more threads than systems (one per system).
  for (std::size_t jobs : {2u, 3u, 64u}) {
    CAPTURE(jobs);
    replay_progress progress;
    const std::vector<offload_replay_result> many =
        replay_offload_sweep(t, d, gpu, m, points, {.progress = &progress, .window_steps = window, .jobs = jobs});
    CHECK(progress.rows == one_progress.rows);
    REQUIRE(many.size() == one.size());
    for (std::size_t p = 0; p < points.size(); ++p) {
      REQUIRE(many[p].systems.size() == one[p].systems.size());
      for (std::size_t i = 0; i < one[p].systems.size(); ++i) check_same(many[p].systems[i], one[p].systems[i]);
    }
  }
  CHECK(one[0].systems[0].decode_hits != one[0].systems[2].decode_hits);  // not trivially equal
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload_sweep(t, d, gpu, m, points, {.jobs = 0})),
                       "moepolicy::replay_offload_sweep: jobs must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload_sweep(t, d, gpu, m, points, {.window_steps = 0})),
                       "moepolicy::replay_offload_sweep: window_steps must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload(t, gpu, m, all, {.window_steps = 0})),
                       "moepolicy::replay_offload: window_steps must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload(t, gpu, m, all, {.jobs = 0})),
                       "moepolicy::replay_offload: jobs must be >= 1, got 0", invalid_argument);
}

TEST_CASE("the price tape holds each decode pass's prices as the pass computes them, window after window") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 3);
  const roofline_cost gpu = h100(m);
  const forward_pass_config pc{};
  const forward_pass_cost<roofline_cost> pass(gpu, m, pc);
  for (std::size_t B : {1u, 4u}) {
    CAPTURE(B);
    const decode_streams d = make_decode_streams(t, {.streams = B});
    const routing_trace& b = d.batched();
    const std::size_t L = b.info().num_layers, E = b.info().num_experts;
    detail::pass_price_tape<roofline_cost> tape(gpu, m, pc, d, 3);
    REQUIRE(tape.window() == 3);
    std::size_t checked = 0, shared_steps = 0;
    for (std::size_t first = 0; first < d.num_steps(); first += tape.window()) {
      const std::size_t last = std::min(d.num_steps(), first + tape.window());
      for (std::size_t s = first; s < last; ++s) tape.record(s);
      for (std::size_t s = first; s < last; ++s) {
        CAPTURE(s);
        // What the pass computed for itself before the tape.
        const auto tokens = d.tokens(s);
        const std::size_t n = tokens.size();
        std::vector<std::uint64_t> contexts;
        for (const stream_token& tk : tokens) contexts.push_back(tk.context);
        const std::uint64_t reads = decode_cached_reads(contexts);
        CHECK(tape.router(s) == pass.router_seconds(n));
        CHECK(tape.output_head(s) == pass.output_head_seconds(n));
        for (std::uint32_t i = 0; i < m.num_dense_layers; ++i) {
          CHECK(tape.dense_layer(s, i) == pass.dense_layer_seconds(i, n, reads, n));
        }
        const auto batches = b.batches_of(b.steps()[s]);
        std::size_t bi = 0;
        for (std::size_t l = 0; l < L; ++l) {
          const auto p = tape.at(s, l);
          const auto model_layer = static_cast<std::uint32_t>(m.num_dense_layers + l);
          CHECK(p.attention == pass.attention_seconds(model_layer, n, reads, n));
          CHECK(p.shared == pass.shared_experts_seconds(static_cast<layer_id>(l), n));
          if (bi >= batches.size() || batches[bi].layer != l) {
            CHECK(p.batch == detail::pass_price_tape<roofline_cost>::none);
            CHECK(p.order.empty());
            continue;
          }
          REQUIRE(p.batch == bi);
          const batch_view v = b.view(batches[bi++]);
          std::vector<std::uint32_t> loads(E, 0);
          std::vector<expert_id> order;
          for (expert_id e : v.experts) {
            if (loads[e]++ == 0) order.push_back(e);
          }
          REQUIRE(std::vector<expert_id>(p.order.begin(), p.order.end()) == order);
          REQUIRE(p.compute.size() == order.size());
          for (std::size_t i = 0; i < order.size(); ++i) {
            CHECK(p.compute[i] == gpu.compute_seconds({static_cast<layer_id>(l), order[i]}, fp16, loads[order[i]]));
          }
          if (loads[order[0]] > 1) ++shared_steps;
          ++checked;
        }
      }
    }
    CHECK(checked > 0);
    if (B > 1) CHECK(shared_steps > 0);  // experts carrying several tokens were priced
  }
}

TEST_CASE("replay_offload_sweep: bad systems and streams of another trace are errors naming it") {
  const model_shape m = models::granite_3_1_1b_a400m();
  const routing_trace t = test::first_requests(test::granite_trace(), 1);
  const decode_streams d = make_decode_streams(t, {.streams = 1});
  offload_system_config s = lru_system(offload_predictor::none);
  s.policy = belady_config{};
  const std::array<offload_sweep_point, 1> bad{{{4, std::span(&s, 1)}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload_sweep(t, d, h100(m), m, bad)),
                       "moepolicy::replay_offload_sweep: system \"lru\": Belady's policy needs the future and cannot "
                       "run timed",
                       invalid_argument);
  const decode_streams other = make_decode_streams(toy(), {.streams = 1});
  const offload_system_config ok = lru_system(offload_predictor::none);
  const std::array<offload_sweep_point, 1> good{{{4, std::span(&ok, 1)}}};
  CHECK_THROWS_WITH_AS(static_cast<void>(replay_offload_sweep(t, other, h100(m), m, good)),
                       "moepolicy::replay_offload_sweep: the decode streams' layers x experts must match the trace's "
                       "24 x 32, streams 1 x 4",
                       invalid_argument);
}
