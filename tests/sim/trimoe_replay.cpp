// Tests of sim/trimoe_replay.hpp: every system, the per-layer and end-to-end figures, the
// utilisation and the prediction block on a hand-worked toy replay; the +Relayout window
// (both rows: the class-change and the benefit relayout rule); the configuration errors;
// and invariants on the bundled Granite trace, where `replay_step` is also checked to
// allocate nothing (this executable counts every global operator new).
#include "moepolicy/sim/trimoe_replay.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "moepolicy/trace/canonical.hpp"
#include "../residency/allocation_counter.hpp"
#include "test_support.hpp"


using namespace moepolicy;
using enum trimoe_system;

namespace {

// A toy machine with round numbers. Experts: 3 · 1000 · 1000 weights, W = 6 MB at FP16,
// 6 MFLOP per token.
//   GPU  6 TFLOP/s and 6 TB/s: f_gpu(L) = max(L, 1) µs; PCIe 6 GB/s: T_PCIe = 1 ms.
//   CPU  60 GFLOP/s and 60 GB/s: f_cpu(L) = max(0.1 L, 0.1) ms.
//   DIMM 2 units, 6 GFLOP/s and 6 GB/s inside: T_NDP(L) = max(L, 1) ms; host reads 6 GB/s
//        per DIMM: T_DRAM = 1 ms localized, 0.5 ms striped; DIMM-Link 6 GB/s: 1 ms.
const model_shape toy{"toy", 2, 0, 4, 2, 0, 1000, 1000};
constexpr double ms = 1e-3, us = 1e-6;

device_spec serial(const char* name, double flops) {
  device_spec d;
  d.name = name;
  d.capacity_bytes = 1'000'000'000ULL;
  d.compute = {.peak_flops = flops, .peak_bits = fp16, .bit_scaled_compute = false, .memory_bandwidth = flops,
               .launch_seconds = 0.0};
  return d;
}

trimoe_machine toy_machine() {
  trimoe_machine m;
  m.gpu = serial("toy GPU", 6e12);
  m.gpu.weight_link = {6e9, 0.0};
  m.cpu = serial("toy CPU", 6e10);
  m.ndp = serial("toy DIMM", 6e9);
  m.ndp.execution = execution_kind::parallel_units;
  m.ndp.num_units = 2;
  m.ndp.weight_link = {6e9, 0.0};
  m.ndp.host_read_bandwidth = 6e9;
  return m;
}

// Three steps of two layers, four experts. Layer 1 is idle throughout. Layer 0:
//   step 0  [6, 3, 1, 0]  warms the EMA: classes hot, warm, cold, cold, so step 1's class
//                         layout (and +Relayout's start) has e0 resident, e1 striped, e2 on
//                         DIMM (0·4 + 2) mod 2 = 0, e3 on DIMM 1;
//   step 1  [4, 3, 3, 0]  the EMA becomes [5.4, 3, 1.6, 0]: e2 turns warm;
//   step 2  [4, 3, 3, 0].
batched_steps toy_steps() {
  batched_steps s(3, 2, 4, 4);
  const std::uint32_t loads[3][4] = {{6, 3, 1, 0}, {4, 3, 3, 0}, {4, 3, 3, 0}};
  for (std::size_t t = 0; t < 3; ++t) std::copy(loads[t], loads[t] + 4, s.loads(t, 0).begin());
  return s;
}

void check_times(const trimoe_times& x, double makespan, double gpu, double cpu, double max_dimm, double mean_dimm) {
  CHECK(x.makespan == doctest::Approx(makespan).epsilon(1e-9));
  CHECK(x.gpu == doctest::Approx(gpu).epsilon(1e-9));
  CHECK(x.cpu == doctest::Approx(cpu).epsilon(1e-9));
  CHECK(x.max_dimm == doctest::Approx(max_dimm).epsilon(1e-9));
  CHECK(x.mean_dimm == doctest::Approx(mean_dimm).epsilon(1e-9));
}

}  // namespace

TEST_CASE("hand-worked toy replay: every system, the figures per layer and per step") {
  const batched_steps steps = toy_steps();
  const trimoe_result r = replay_trimoe(steps, toy, toy_machine());
  REQUIRE(r.num_steps == 3);
  CHECK(r.replayed_steps == 2);
  CHECK(r.num_layers == 2);
  CHECK(r.num_dimms == 2);
  CHECK(r.problems == 2);  // layer 1 is idle
  CHECK(r.exact_proven == 2);

  // Step 1 on the class layout (loads 4, 3, 3): e0 resident (hit 4 µs, CPU 0.5 ms),
  // e1 striped (miss 1 ms, CPU 0.5 ms, 0.5 ms read on each DIMM), e2 on DIMM 0 (miss 1 ms,
  // CPU 1 ms, NDP 3 ms; 1 ms read on DIMM 0). Greedy: e0 GPU, e1 CPU, e2 GPU (tie with the
  // CPU): GPU 1.004, CPU 0.5, DIMM 0 = 0.5 + 1 = 1.5, DIMM 1 = 0.5. No expert executes on
  // DIMM 0, so refinement stops; every option of e2 adds 1 ms to DIMM 0, so 1.5 is optimal.
  // Step 2's class layout has e2 striped (predicted warm): e2 on the CPU (0.5 ms): GPU 0.004,
  // CPU 1, every DIMM 1 (two striped reads): 1 ms, optimal.
  for (trimoe_system s : {greedy, refined, improved, exact}) {
    INFO(to_string(s));
    check_times(r[s].layers[0], (1.5 + 1.0) / 2 * ms, (1.004 + 0.004) / 2 * ms, (0.5 + 1.0) / 2 * ms,
                (1.5 + 1.0) / 2 * ms, (1.0 + 1.0) / 2 * ms);
    check_times(r[s].layers[1], 0, 0, 0, 0, 0);
    CHECK(r[s].step.makespan == doctest::Approx(1.25 * ms));
  }
  // GPU-only: every non-resident expert striped and fetched: 4 µs + 1 + 1 ms, reads 0.5 + 0.5.
  check_times(r[gpu_only].layers[0], 2.004 * ms, 2.004 * ms, 0, 1.0 * ms, 1.0 * ms);
  // GPU+CPU: e1 and e2 striped on the CPU at 0.5 ms each.
  check_times(r[gpu_cpu].layers[0], 1.0 * ms, 4 * us, 1.0 * ms, 1.0 * ms, 1.0 * ms);
  // GPU+NDP: e2's NDP run (3 ms) loses to the GPU (1 ms) at step 1; both misses on the GPU.
  check_times(r[gpu_ndp].layers[0], 2.004 * ms, 2.004 * ms, 0, (1.5 + 1.0) / 2 * ms, (1.0 + 1.0) / 2 * ms);
  // +Relayout: step 1 as the class layout, window 1.5 ms; the planner proposes striping e2
  // (predicted 1.6 tokens, warm): the predicted step falls from 1.5 to 1 ms, and the 1 ms
  // DIMM-Link move fits, so step 2 runs as the class layout's.
  check_times(r[relayout].layers[0], 1.25 * ms, 0.504 * ms, 0.75 * ms, 1.25 * ms, 1.0 * ms);
  CHECK(r.layer_bound[0] == doctest::Approx(1.25 * ms));
  CHECK(r.layer_bound[1] == 0.0);
  CHECK(r.step_bound == doctest::Approx(1.25 * ms));

  const auto& st = r.relayout;
  CHECK(st.plans == 1);
  CHECK(st.proposed == std::array<std::size_t, 4>{0, 1, 0, 0});
  CHECK(st.taken == std::array<std::size_t, 4>{0, 1, 0, 0});
  CHECK(st.link_bytes == 6'000'000);
  CHECK(st.pcie_bytes == 0);
  CHECK(st.window_seconds == doctest::Approx(1.5 * ms));
  CHECK(st.transfer_seconds == doctest::Approx(1.0 * ms));
  CHECK(st.max_fill == doctest::Approx(1.0 / 1.5));
  CHECK(st.evictions == 0);
  CHECK(st.localized_active == 1);  // e2 at step 1
  CHECK(st.localized_tokens == 3);
  CHECK(st.proven == 2);
  CHECK(st.exact_step_seconds == doctest::Approx(1.25 * ms));
  // +Relayout, benefit rule: besides striping e2, e1 (warm, striped, predicted 3 tokens) is a
  // candidate to localize on DIMM 0 (neither DIMM holds predicted cold NDP time; the first);
  // its 1 ms read there would lift DIMM 0 from 1.5 to 2 ms in the predicted step, so it is
  // not proposed, and the row makes the same move as +Relayout.
  check_times(r[relayout_benefit].layers[0], 1.25 * ms, 0.504 * ms, 0.75 * ms, 1.25 * ms, 1.0 * ms);
  const auto& sb = r.relayout_benefit;
  CHECK(sb.plans == 1);
  CHECK(sb.proposed == std::array<std::size_t, 4>{0, 1, 0, 0});
  CHECK(sb.taken == std::array<std::size_t, 4>{0, 1, 0, 0});
  CHECK(sb.link_bytes == 6'000'000);
  CHECK(sb.window_seconds == doctest::Approx(1.5 * ms));
  CHECK(sb.localized_active == 1);
  CHECK(sb.proven == 2);
  CHECK(sb.exact_step_seconds == doctest::Approx(1.25 * ms));
  for (trimoe_system s : {greedy, refined, improved, relayout, relayout_benefit}) {
    CHECK(r[s].has_gap);
    CHECK(r[s].proven == 2);
    CHECK(r[s].gap_max == doctest::Approx(0.0));
  }
  CHECK_FALSE(r[gpu_cpu].has_gap);
  CHECK_FALSE(r[exact].has_gap);

  // Utilisation of +Relayout over Σ makespan = 2.5 ms: GPU busy 1.008 ms, computing 4 + 3 + 4
  // µs; CPU busy 1.5 ms, computing 0.3 + 0.6 ms (each expert at 3 tokens, 0.3 ms of
  // arithmetic); the DIMMs' mean busy 1 + 1 ms, no NDP run.
  const auto& u = r[relayout];
  CHECK(u.gpu.busy == doctest::Approx(1.008 / 2.5));
  CHECK(u.gpu.compute == doctest::Approx(0.011 / 2.5));
  CHECK(u.gpu.flops == doctest::Approx(11 * 6e6 / (6e12 * 2.5 * ms)));
  CHECK(u.cpu.busy == doctest::Approx(1.5 / 2.5));
  CHECK(u.cpu.compute == doctest::Approx(0.9 / 2.5));
  CHECK(u.cpu.flops == doctest::Approx(9 * 6e6 / (6e10 * 2.5 * ms)));
  CHECK(u.ndp.busy == doctest::Approx(2.0 / 2.5));
  CHECK(u.ndp.compute == 0.0);
  CHECK(u.ndp.flops == 0.0);

  // Prediction. True classes of [4, 3, 3, 0]: hot, hot, warm, cold. The EMA predicts hot,
  // warm, cold, cold for step 1 and hot, warm, warm, cold for step 2: 5 of 8 classes; the
  // decisions (hot? cold?) score 1, 0.5, 0.5, 1 and 1, 0.5, 1, 1: 6.5 of 8. Last value
  // predicts step 2 exactly: 6 of 8 and 7 of 8.
  const auto& ema = r.prediction[static_cast<std::size_t>(trimoe_predictor::ema)];
  const auto& last = r.prediction[static_cast<std::size_t>(trimoe_predictor::last_value)];
  const auto& oracle = r.prediction[static_cast<std::size_t>(trimoe_predictor::oracle)];
  CHECK(ema.confusion.total() == 8);
  CHECK(ema.confusion.accuracy() == doctest::Approx(5.0 / 8));
  CHECK(ema.decision_accuracy == doctest::Approx(6.5 / 8));
  CHECK(last.confusion.accuracy() == doctest::Approx(6.0 / 8));
  CHECK(last.decision_accuracy == doctest::Approx(7.0 / 8));
  CHECK(oracle.confusion.accuracy() == 1.0);
  CHECK(oracle.decision_accuracy == 1.0);
  // Under the true classes e0 and e1 are resident and e2 striped on the CPU: 0.5 ms a step.
  CHECK(ema.step_seconds == doctest::Approx(1.25 * ms));
  CHECK(last.step_seconds == doctest::Approx((1.5 + 0.5) / 2 * ms));
  CHECK(oracle.step_seconds == doctest::Approx(0.5 * ms));
}

TEST_CASE("+Relayout takes a move only when its transfer fits the window") {
  const batched_steps steps = toy_steps();
  SUBCASE("half the makespan, 0.75 ms: the 1 ms move waits, e2 stays on DIMM 0") {
    trimoe_replay_config c;
    c.relayout.window_scale = 0.5;
    trimoe_replayer rp(steps, toy, toy_machine(), c);
    rp.replay_all();
    const trimoe_result r = rp.result();
    CHECK(r.relayout.proposed == std::array<std::size_t, 4>{0, 1, 0, 0});
    CHECK(r.relayout.taken == std::array<std::size_t, 4>{0, 0, 0, 0});
    CHECK(r.relayout.window_seconds == doctest::Approx(0.75 * ms));
    CHECK(r.relayout_benefit.taken == std::array<std::size_t, 4>{0, 0, 0, 0});
    CHECK(rp.relayout_layouts(0, relayout_benefit)[2] == expert_layout::localized(0));
    CHECK(r.relayout.max_fill == 0.0);
    CHECK(rp.last_taken(0).empty());
    CHECK(rp.relayout_layouts(0)[2] == expert_layout::localized(0));
    check_times(r[relayout].layers[0], 1.5 * ms, 1.004 * ms, 0.5 * ms, 1.5 * ms, 1.0 * ms);
    CHECK(r[refined].step.makespan == doctest::Approx(1.25 * ms));
  }
  SUBCASE("a fixed window of exactly 1 ms: the move fits") {
    trimoe_replay_config c;
    c.relayout.window = relayout_window::fixed;
    c.relayout.window_seconds = 1.0 * ms;
    trimoe_replayer rp(steps, toy, toy_machine(), c);
    rp.replay_all();
    REQUIRE(rp.last_taken(0).size() == 1);
    const migration_task& t = rp.last_taken(0)[0];
    CHECK(t.kind == migration_kind::relayout_to_striped);
    CHECK(t.expert == 2);
    CHECK(t.benefit == doctest::Approx(0.5 * ms));
    CHECK(rp.last_window(0) == 1.0 * ms);
    CHECK(rp.relayout_layouts(0)[2] == expert_layout::striped());
    CHECK(rp.result()[relayout].step.makespan == doctest::Approx(1.25 * ms));
    REQUIRE(rp.last_taken(0, relayout_benefit).size() == 1);
    CHECK(rp.last_taken(0, relayout_benefit)[0].expert == 2);
    CHECK(rp.last_window(0, relayout_benefit) == 1.0 * ms);
    CHECK(rp.relayout_layouts(0, relayout_benefit)[2] == expert_layout::striped());
  }
  SUBCASE("a zero window moves nothing") {
    trimoe_replay_config c;
    c.relayout.window_scale = 0.0;
    const trimoe_result r = replay_trimoe(steps, toy, toy_machine(), c);
    CHECK(r.relayout.taken == std::array<std::size_t, 4>{0, 0, 0, 0});
    CHECK(r.relayout_benefit.taken == std::array<std::size_t, 4>{0, 0, 0, 0});
    CHECK(r[relayout].step.makespan == doctest::Approx(1.5 * ms));
    CHECK(r[relayout_benefit].step.makespan == doctest::Approx(1.5 * ms));
  }
}

TEST_CASE("bad configurations are refused with the library's messages") {
  const batched_steps steps = toy_steps();
  const trimoe_machine m = toy_machine();
  const auto with = [](auto edit) {
    trimoe_replay_config c;
    edit(c);
    return c;
  };
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, m, with([](auto& c) { c.alpha = 0.0; })),
                       "moepolicy::trimoe_replayer: alpha must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, m, with([](auto& c) { c.alpha = 1.5; })),
                       "moepolicy::trimoe_replayer: alpha must be in (0, 1], got 1.5", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, m, with([](auto& c) { c.exact_nodes = 0; })),
                       "moepolicy::trimoe_replayer: exact_nodes must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, m, with([](auto& c) { c.exact_max_experts = 65; })),
                       "moepolicy::trimoe_replayer: exact_max_experts must be <= 64, got 65", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, m, with([](auto& c) { c.relayout.window_scale = -1.0; })),
                       "moepolicy::trimoe_replayer: relayout.window_scale must be finite and >= 0, got -1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, m, with([](auto& c) {
                         c.relayout.window_seconds = std::numeric_limits<double>::infinity();
                       })),
                       "moepolicy::trimoe_replayer: relayout.window_seconds must be finite and >= 0, got inf",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(batched_steps(3, 2, 5, 4), toy, m),
                       "moepolicy::trimoe_replayer: the steps' experts must equal the model's num_experts 4, got 5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer(batched_steps(3, 0, 4, 4), toy, m),
                       "moepolicy::trimoe_replayer: the steps must have at least one layer, got 0", invalid_argument);
  trimoe_machine serial_ndp = m;
  serial_ndp.ndp.execution = execution_kind::serial;
  serial_ndp.ndp.num_units = 1;
  CHECK_THROWS_WITH_AS(trimoe_replayer(steps, toy, serial_ndp),
                       "moepolicy::gpu_cpu_ndp_system: the DIMM-NDP model must be parallel_units, got serial",
                       invalid_argument);
}

TEST_CASE("fewer than two steps: nothing replayed, zero figures") {
  batched_steps one(1, 2, 4, 4);
  one.loads(0, 0)[0] = 4;
  const trimoe_result r = replay_trimoe(one, toy, toy_machine());
  CHECK(r.num_steps == 1);
  CHECK(r.replayed_steps == 0);
  CHECK(r.problems == 0);
  CHECK(r[relayout].step.makespan == 0.0);
  CHECK(r[relayout_benefit].step.makespan == 0.0);
  CHECK(r[gpu_only].gpu.busy == 0.0);
}

TEST_CASE("bundled Granite trace: invariants, both +Relayout rows' moves, and no allocation per step") {
  const routing_trace trace =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  const model_shape shape = models::granite_3_1_1b_a400m();
  const batched_steps steps = make_batched_decode_steps(trace, trimoe_default_batch(shape.num_experts));
  const std::size_t S = steps.num_steps(), L = steps.num_layers(), E = steps.num_experts();
  REQUIRE(S == 6);
  trimoe_replayer rp(steps, shape);
  const std::size_t D = rp.num_dimms();
  REQUIRE(D == 16);

  // An independent EMA, fed the same loads, for the expected classes.
  ema_load_predictor ema(L, E);
  constexpr trimoe_system rows[2] = {relayout, relayout_benefit};
  std::vector<expert_layout> before[2] = {std::vector<expert_layout>(L * E), std::vector<expert_layout>(L * E)};
  std::vector<std::uint8_t> before_res[2] = {std::vector<std::uint8_t>(L * E), std::vector<std::uint8_t>(L * E)};
  const bytes w = rp.system().weight_bytes(expert_key{0, 0}, fp16);
  std::size_t benefit_only = 0;  // relayouts of the benefit row the class rule would not propose
  long allocated = 0;
  for (std::size_t t = 0; t < S; ++t) {
    for (std::size_t k = 0; k < 2; ++k) {
      for (std::size_t l = 0; l < L; ++l) {
        const auto lid = static_cast<layer_id>(l);
        const auto at = static_cast<std::ptrdiff_t>(l * E);
        std::copy_n(rp.relayout_layouts(lid, rows[k]).begin(), E, before[k].begin() + at);
        std::copy_n(rp.relayout_resident(lid, rows[k]).begin(), E, before_res[k].begin() + at);
      }
    }
    allocated += static_cast<long>(count_allocations([&] { rp.replay_step(); }));
    for (std::size_t l = 0; l < L; ++l) {
      const auto lid = static_cast<layer_id>(l);
      const auto loads = steps.loads(t, l);
      ema.update(lid, loads);
      const auto classes = ema.predicted_classes(lid);
      const auto predicted = ema.predicted_loads(lid);
      const std::size_t hot = static_cast<std::size_t>(std::count(classes.begin(), classes.end(), hotness::hot));
      for (std::size_t k = 0; k < 2; ++k) {
        const trimoe_system row = rows[k];
        const auto lay = rp.relayout_layouts(lid, row);
        const auto res = rp.relayout_resident(lid, row);
        INFO("step ", t, " layer ", l, " ", to_string(row));
        if (t == 0) {
          // The start: step 1's class layout.
          for (std::size_t e = 0; e < E; ++e) {
            const bool cold = classes[e] == hotness::cold;
            CHECK(lay[e] == (cold ? expert_layout::localized(static_cast<std::uint16_t>((l * E + e) % D))
                                  : expert_layout::striped()));
            CHECK(res[e] == (classes[e] == hotness::hot ? 1 : 0));
          }
          continue;
        }
        const bool active = std::any_of(loads.begin(), loads.end(), [](std::uint32_t x) { return x > 0; });
        const bool planned = active && t + 1 < S;
        // The state after the plan is the state before with the taken tasks applied; the
        // taken tasks fit the window and follow the row's relayout rule; residents stay
        // within the slots (the hot count).
        const auto at = static_cast<std::ptrdiff_t>(l * E), to = static_cast<std::ptrdiff_t>((l + 1) * E);
        std::vector<expert_layout> expect(before[k].begin() + at, before[k].begin() + to);
        std::vector<std::uint8_t> grown(before_res[k].begin() + at, before_res[k].begin() + to);
        if (planned) {
          seconds used = 0.0;
          for (const auto& task : rp.last_taken(lid, row)) {
            CHECK(task.taken);
            used += task.transfer_seconds;
            const std::size_t e = task.expert;
            if (task.kind == migration_kind::relayout_to_striped) {
              CHECK(expect[e].is_localized());
              CHECK((row == relayout ? classes[e] != hotness::cold : predicted[e] > 0.0));
              if (row == relayout_benefit && classes[e] == hotness::cold) ++benefit_only;
            } else if (task.kind == migration_kind::relayout_to_localized) {
              CHECK(expect[e].is_striped());
              CHECK((row == relayout ? classes[e] == hotness::cold : classes[e] != hotness::hot));
              if (row == relayout_benefit && classes[e] != hotness::cold) ++benefit_only;
            }
          }
          CHECK(used <= rp.last_window(lid, row) * (1 + 1e-12));
          // The window is the layer's executed makespan of the row (the last layer's is at hand).
          if (l + 1 == L) CHECK(rp.last_window(lid, row) == rp.last_schedule(row).makespan);
          apply_migrations(rp.last_taken(lid, row), expect, grown);
          CHECK(static_cast<std::size_t>(std::count(res.begin(), res.end(), 1)) <= hot);
        }
        for (std::size_t e = 0; e < E; ++e) {
          CHECK(lay[e] == expect[e]);
          CHECK(res[e] <= grown[e]);  // residents are kept or dropped, never added outside the plan
        }
      }
    }
  }
  CHECK(allocated == 0);
  CHECK(benefit_only > 0);  // the benefit rule does move experts the class rule would leave

  const trimoe_result r = rp.result();
  CHECK(r.problems == (S - 1) * L);
  for (const trimoe_system row : rows) {
    INFO(to_string(row));
    const trimoe_relayout_stats& st = r.relayout_stats(row);
    CHECK(st.plans == (S - 2) * L);
    CHECK(st.max_fill <= 1.0 + 1e-12);
    std::size_t link_moves = 0;
    for (std::size_t k = 0; k < 4; ++k) {
      CHECK(st.taken[k] <= st.proposed[k]);
      link_moves += k == static_cast<std::size_t>(migration_kind::prefetch) ? 0 : st.taken[k];
    }
    CHECK(st.pcie_bytes == st.taken[static_cast<std::size_t>(migration_kind::prefetch)] * w);
    CHECK(st.link_bytes == link_moves * w);
    CHECK(st.transfer_seconds <= st.window_seconds * (1 + 1e-12));
    CHECK(st.proven == r.problems);
    CHECK(st.exact_step_seconds <= r[row].step.makespan * (1 + 1e-9));
  }
  // The default row is the class-change rule, the new row the benefit rule.
  CHECK(r.relayout.proposed != r.relayout_benefit.proposed);
  CHECK(&r.relayout_stats(relayout) == &r.relayout);
  CHECK(&r.relayout_stats(relayout_benefit) == &r.relayout_benefit);
  const double tol = 1e-9;
  for (const auto& s : r.systems) {
    INFO(to_string(s.system));
    double sum = 0.0;
    for (std::size_t l = 0; l < L; ++l) {
      const trimoe_times& x = s.layers[l];
      sum += x.makespan;
      CHECK(x.mean_dimm <= x.max_dimm * (1 + tol));
      CHECK(x.max_dimm <= x.makespan * (1 + tol));
      CHECK(x.gpu <= x.makespan * (1 + tol));
      CHECK(x.cpu <= x.makespan * (1 + tol));
      if (s.system == exact) CHECK(r.layer_bound[l] <= x.makespan * (1 + tol));
    }
    CHECK(s.step.makespan == doctest::Approx(sum).epsilon(1e-12));
    for (const trimoe_domain_use* d : {&s.gpu, &s.cpu, &s.ndp}) {
      CHECK(d->flops <= d->compute * (1 + tol));
      CHECK(d->compute <= d->busy * (1 + tol));
      CHECK(d->busy <= 1.0 + tol);
      CHECK(d->flops >= 0.0);
    }
    CHECK(s.has_gap == (s.system == greedy || s.system == refined || s.system == improved || is_relayout(s.system)));
    if (s.has_gap) {
      CHECK(s.proven == (is_relayout(s.system) ? r.relayout_stats(s.system).proven : r.exact_proven));
      CHECK(s.gap_mean >= 0.0);
      CHECK(s.gap_max >= s.gap_mean);
    }
  }
  // The solvers' order on the class layout, and the bound below them.
  CHECK(r[exact].step.makespan <= r[improved].step.makespan * (1 + tol));
  CHECK(r[exact].step.makespan <= r[refined].step.makespan * (1 + tol));
  CHECK(r[refined].step.makespan <= r[greedy].step.makespan * (1 + tol));
  CHECK(r.step_bound <= r[exact].step.makespan * (1 + tol));
  // Systems without a domain leave it idle.
  CHECK(r[gpu_only].gpu.busy == doctest::Approx(1.0));
  CHECK(r[gpu_only].cpu.busy == 0.0);
  CHECK(r[gpu_cpu].ndp.compute == 0.0);
  CHECK(r[gpu_ndp].cpu.busy == 0.0);
  const auto& oracle = r.prediction[static_cast<std::size_t>(trimoe_predictor::oracle)];
  CHECK(oracle.confusion.accuracy() == 1.0);
  CHECK(oracle.decision_accuracy == 1.0);
  CHECK(r.prediction[0].confusion.total() == r.problems * E);
}

TEST_CASE("both +Relayout rows keep at most the configured experts per layer in HBM") {
  const routing_trace trace =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  const model_shape shape = models::granite_3_1_1b_a400m();
  const batched_steps steps = make_batched_decode_steps(trace, 32);
  trimoe_replay_config c;
  c.relayout.gpu_slots_per_layer = 2;
  trimoe_replayer rp(steps, shape, {}, c);
  rp.replay_step();
  rp.replay_step();  // step 1: every layer plans and applies
  for (std::size_t l = 0; l < steps.num_layers(); ++l) {
    for (const trimoe_system row : {relayout, relayout_benefit}) {
      const auto res = rp.relayout_resident(static_cast<layer_id>(l), row);
      CHECK(std::count(res.begin(), res.end(), 1) <= 2);
    }
  }
  rp.replay_all();
  CHECK(rp.result().relayout.evictions > 0);
  CHECK(rp.result().relayout_benefit.evictions > 0);
}

TEST_CASE("the trace overload batches as the default rule says") {
  const routing_trace trace =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  const trimoe_result r = replay_trimoe(trace, models::granite_3_1_1b_a400m(), {}, {.exact_nodes = 10'000});
  CHECK(r.batch == 32);
  CHECK(r.num_steps == 6);
  CHECK(r.replayed_steps == 5);
  CHECK(trimoe_default_batch(8) == 64);
  CHECK(trimoe_default_batch(32) == 32);
  CHECK(to_string(trimoe_system::relayout) == "relayout");
  CHECK(to_string(trimoe_system::relayout_benefit) == "relayout_benefit");
  CHECK(num_trimoe_systems == 9);
  CHECK(static_cast<std::size_t>(trimoe_system::exact) + 1 == num_trimoe_systems);
  CHECK(is_relayout(trimoe_system::relayout_benefit));
  CHECK_FALSE(is_relayout(trimoe_system::refined));
}
