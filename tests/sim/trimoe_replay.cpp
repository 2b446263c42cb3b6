// Tests of sim/trimoe_replay.hpp: a hand-worked single-layer step on a toy machine, timed for
// every baseline and TriMoE's scheduler; a relayout that lands in the background and is used
// only from then on; conservation (every GPU copy and layout change has a transfer, every
// byte moved is on a link, every busy second the replay issued is in the ledger and no
// resource is held twice at once); the generic device types; the configuration errors; and
// invariants on the bundled Granite trace, where `replay_step` is also checked to allocate
// nothing (this executable counts every global operator new).
#include "moepolicy/sim/trimoe_replay.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "../cache/count_allocations.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "test_support.hpp"

using namespace moepolicy;
using enum trimoe_system;

namespace {

// A toy machine with round numbers. Experts: 3 · 1000 · 1000 weights, W = 6 MB at FP16,
// 6 MFLOP per token; an activation of one token 2000 bytes.
//   GPU  6 TFLOP/s and 6 TB/s: f_gpu(L) = max(L, 1) µs; PCIe 6 GB/s both ways: a fetch 1 ms,
//        the activations of L tokens L/3 µs.
//   CPU  60 GFLOP/s and 60 GB/s: f_cpu(L) = max(0.1 L, 0.1) ms.
//   DIMM 2 units, 6 GFLOP/s and 6 GB/s inside: f_ndp(L) = max(L, 1) ms; host reads 6 GB/s per
//        DIMM: a localized read 1 ms, a striped share 0.5 ms; DIMM-Link 6 GB/s.
// The model has one MoE layer, 4 experts, a tiny attention block and vocabulary (their times
// are microseconds; the tests take them from forward_pass_cost).
model_shape toy_shape() {
  model_shape m{"toy", 1, 0, 4, 2, 0, 1000, 1000, 0, 8, {}};
  m.attention = {.kind = attention_kind::grouped_query, .num_heads = 1, .num_kv_heads = 1, .head_dim = 4};
  return m;
}
constexpr double ms = 1e-3, us = 1e-6;

device_spec serial(const char* name, double flops) {
  device_spec d;
  d.name = name;
  d.capacity_bytes = 100'000'000'000ULL;  // room for a long context's KV cache
  d.compute = {.peak_flops = flops,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = flops,
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
  m.ndp.activation_link = {6e9, 0.0};
  return m;
}

trimoe_replay_config toy_config() {
  trimoe_replay_config c;
  c.classes = {.hot_share = 0.5, .cold_share = 0.1};
  c.compute = trimoe_compute_model::roofline;
  c.relayout_memory_bandwidth = 6e9;
  c.prompt_tokens = 8;
  return c;
}

// Steps of one layer, four experts. Step 0 (the warm-up) [6, 3, 1, 0]: hot e0, warm e1, cold e2
// and e3; the TriMoE systems stripe e0 and e1 and localize e2 on DIMM 0 and e3 on DIMM 1 (by
// warm-up load); every system starts with e0 on the GPU. Then `measured` steps [4, 3, 3, 0].
batched_steps toy_steps(std::size_t measured) {
  batched_steps s(1 + measured, 1, 4, 10);
  const std::uint32_t warm[4] = {6, 3, 1, 0}, load[4] = {4, 3, 3, 0};
  std::copy(warm, warm + 4, s.loads(0, 0).begin());
  for (std::size_t t = 1; t <= measured; ++t) std::copy(load, load + 4, s.loads(t, 0).begin());
  return s;
}

/// The toy's attention + router time at step `t`, and its output head.
struct toy_pass {
  seconds pre = 0.0, head = 0.0;
};
toy_pass toy_pass_at(std::size_t t, const trimoe_replay_config& c) {
  const model_shape m = toy_shape();
  const forward_pass_cost<roofline_cost> pass(roofline_cost{toy_machine().gpu, m}, m);
  const std::uint64_t cached = 10 * (c.prompt_tokens + t + 1);
  return {pass.attention_seconds(10, cached) + pass.router_seconds(10), pass.output_head_seconds(10)};
}

}  // namespace

TEST_CASE("hand-worked single-layer step: every system's MoE span on the timeline") {
  const batched_steps steps = toy_steps(1);
  const trimoe_replay_config c = toy_config();
  trimoe_replayer<> r(steps, toy_shape(), make_trimoe_devices(toy_machine(), toy_shape(), c.compute), c);
  // The warm-up classes and the initial layouts.
  const auto cls = r.initial_classes(0);
  CHECK(cls[0] == hotness::hot);
  CHECK(cls[1] == hotness::warm);
  CHECK(cls[2] == hotness::cold);
  CHECK(cls[3] == hotness::cold);
  CHECK(r.layouts(refined, 0)[1] == expert_layout::striped());
  CHECK(r.layouts(refined, 0)[2] == expert_layout::localized(0));
  CHECK(r.layouts(refined, 0)[3] == expert_layout::localized(1));
  CHECK(r.layouts(gpu_cpu, 0)[2] == expert_layout::striped());
  // MoNDE-like: every expert localized, largest warm-up load first to the least-loaded DIMM.
  CHECK(r.layouts(gpu_ndp, 0)[0] == expert_layout::localized(0));
  CHECK(r.layouts(gpu_ndp, 0)[1] == expert_layout::localized(1));
  CHECK(r.layouts(gpu_ndp, 0)[2] == expert_layout::localized(1));
  CHECK(r.gpu_slots(refined, 0) == 1);
  CHECK(r.copies_of(refined).present(expert_key{0, 0}, 0));
  r.replay_all();
  const trimoe_result res = r.result();
  REQUIRE(res.measured_steps == 1);
  // The startup: e0 over PCIe (1 ms; its striped reads 0.5 ms beside), or from DIMM 0 for MoNDE.
  for (trimoe_system s : {gpu_only, gpu_cpu, gpu_ndp, refined, relayout}) {
    INFO(to_string(s));
    CHECK(res[s].placement_seconds == doctest::Approx(1.0 * ms));
    CHECK(res[s].placement_copies == 1);
    CHECK(res[s].placement_bytes == 6'000'000);
  }
  // After attention and the router (R), TriMoE's refined schedule (Eq. 7 1.5 ms on DIMM 0):
  //   e0 hit on the GPU [R, R + 4 µs];
  //   e2 (localized on DIMM 0) missed: DIMM 0 reads it [R, R + 1 ms] while PCIe carries it
  //     [R, R + 1 ms], the GPU computes [R + 1, R + 1.003 ms];
  //   e1 (striped) on the CPU: activations [R, R + 1 µs]; its shares: DIMM 1 [R + 1 µs,
  //     R + 0.501 ms], DIMM 0 after e2's read [R + 1, R + 1.5 ms]; the CPU starts when the
  //     last share begins [R + 1, R + 1.3 ms]; the results cross back [R + 1.5, R + 1.501 ms].
  const toy_pass p = toy_pass_at(1, c);
  CHECK(res[refined].layer_sum.moe == doctest::Approx(1.501 * ms).epsilon(1e-9));
  CHECK(res[refined].layer_sum.eq7 == doctest::Approx(1.5 * ms).epsilon(1e-9));
  CHECK(res[refined].layer_sum.span == doctest::Approx(p.pre + 1.501 * ms).epsilon(1e-9));
  CHECK(res[refined].step_seconds == doctest::Approx(p.pre + 1.501 * ms + p.head).epsilon(1e-9));
  CHECK(res[refined].layers[0].gpu == doctest::Approx(p.pre + 7 * us).epsilon(1e-9));
  CHECK(res[refined].layers[0].cpu == doctest::Approx(0.3 * ms).epsilon(1e-9));
  CHECK(res[refined].layers[0].max_dimm == doctest::Approx(1.5 * ms).epsilon(1e-9));
  CHECK(res[refined].layers[0].mean_dimm == doctest::Approx(1.0 * ms).epsilon(1e-9));
  // The timed lower bound: attention + router + 1.5 ms (DIMM 0 must serve e1's share and e2,
  // whatever the assignment).
  CHECK(res.step_bound == doctest::Approx(p.pre + 1.5 * ms).epsilon(1e-9));
  CHECK(res.step_bound <= res[relayout].layer_sum.span);
  // Klotski-like: e1 and e2 striped and missed; e2's reads follow e1's on both DIMMs (0.5 to
  // 1 ms) and its PCIe transfer follows e1's (1 to 2 ms): 2.003 ms.
  CHECK(res[gpu_only].layer_sum.moe == doctest::Approx(2.003 * ms).epsilon(1e-9));
  // En-KTransformers-like: the step's hot experts are e0 and e1 (7 of 10 tokens), so e1 is
  // loaded on demand (PCIe [R, R + 1 ms], GPU to R + 1.003) and e2 runs on the CPU from its
  // striped copy (reads 0.5 to 1 ms after e1's); its results wait for PCIe until R + 1 ms.
  CHECK(res[gpu_cpu].layer_sum.moe == doctest::Approx(1.003 * ms).epsilon(1e-9));
  // MoNDE-like: e1 and e2 on DIMM 1; a miss (1 ms) beats NDP (3 ms + activations), so both are
  // fetched, their reads one after the other on DIMM 1: 2.003 ms.
  CHECK(res[gpu_ndp].layer_sum.moe == doctest::Approx(2.003 * ms).epsilon(1e-9));
  // Every system's wall = pre + MoE + head on this one-layer model.
  for (trimoe_system s : {gpu_only, gpu_cpu, gpu_ndp, greedy, refined, relayout, relayout_benefit, improved, exact}) {
    INFO(to_string(s));
    CHECK(res[s].ran);
    CHECK(res[s].step_seconds == doctest::Approx(p.pre + res[s].layer_sum.moe + p.head).epsilon(1e-9));
  }
  // The solvers on +Relayout's problem: all at the optimum 1.5 ms, which the bound proves.
  CHECK(res.gaps.problems == 1);
  CHECK(res.gaps.proven == 1);
  CHECK(res.gaps.exact == doctest::Approx(1.5 * ms));
  CHECK(res.gaps.bound == doctest::Approx(1.5 * ms));
  // Utilisation: who computes where. GPU+CPU has no NDP; its DIMMs only serve reads.
  CHECK_FALSE(res[gpu_cpu].ndp.present);
  CHECK(res[gpu_cpu].dimm.busy > 0.0);
  CHECK(res[gpu_cpu].dimm.compute == 0.0);
  CHECK_FALSE(res[gpu_only].cpu.present);
  CHECK(res[gpu_ndp].ndp.present);
  CHECK(res[refined].cpu.busy == doctest::Approx(0.3 * ms / res[refined].step_seconds));
}

TEST_CASE("a relayout lands in the background and is used only from then on") {
  const batched_steps steps = toy_steps(3);
  trimoe_replay_config c = toy_config();
  c.window = trimoe_window::fixed;
  c.window_seconds = 1.0 * ms;
  c.systems = {false, false, false, false, true, true, false, false, false};
  const auto wall = [&](std::size_t t, seconds moe) {
    const toy_pass p = toy_pass_at(t, c);
    return p.pre + moe + p.head;
  };
  // After step 1 the EMA is [5.4, 3, 1.6, 0]: e2 turns warm, and the planner stripes it (the
  // predicted step falls from 1.5 to 1 ms); the busiest port carries 3 MB: 0.5 ms, within 1 ms.
  // The job: 3 MB from port 0 into port 1, beside it DIMM 0 reads and DIMM 1 writes 3 MB
  // (0.5 ms each at 6 GB/s), each in its own idle time. Step 3 on the striped e2: e1 and e2 on
  // the CPU, their shares one after the other on both DIMMs (to 0.501 and 1.001 ms), the
  // results back at 1.002 ms.
  const auto check_task = [](const trimoe_replayer<>& r) {
    const auto tasks = r.last_tasks(relayout);
    REQUIRE(tasks.size() == 1);
    CHECK(tasks[0].kind == migration_kind::relayout_to_striped);
    CHECK(tasks[0].expert == 2);
    CHECK(tasks[0].taken);
    CHECK(tasks[0].transfer_seconds == doctest::Approx(0.5 * ms));
  };
  SUBCASE("a long attention: the copy lands before step 2's MoE work and step 2 uses it") {
    // 30 M cached tokens a sequence: attention reads ~4.8 GB of KV cache, 0.8 ms, while PCIe,
    // the ports and the DIMMs are idle.
    c.prompt_tokens = 30'000'000;
    REQUIRE(toy_pass_at(2, c).pre > 0.6 * ms);
    trimoe_replayer<> r(steps, toy_shape(), make_trimoe_devices(toy_machine(), toy_shape(), c.compute), c);
    r.replay_step();
    check_task(r);
    CHECK(r.layouts(relayout, 0)[2] == expert_layout::localized(0));  // in flight: the old copy serves
    r.replay_all();
    const trimoe_result res = r.result();
    const auto& rl = res[relayout];
    CHECK(r.layouts(relayout, 0)[2] == expert_layout::striped());
    CHECK(rl.migrations.taken == std::array<std::size_t, 4>{0, 1, 0, 0});
    CHECK(rl.migrations.landed == std::array<std::size_t, 4>{0, 1, 0, 0});
    CHECK(rl.migrations.late == 0);
    CHECK(rl.migrations.pending_at_end == 0);
    CHECK(rl.migrations.job_bytes[1] == 3'000'000);
    REQUIRE(rl.step_walls.size() == 3);
    CHECK(rl.step_walls[0] == doctest::Approx(wall(1, 1.501 * ms)).epsilon(1e-9));
    CHECK(rl.step_walls[1] == doctest::Approx(wall(2, 1.002 * ms)).epsilon(1e-9));
    CHECK(rl.step_walls[2] == doctest::Approx(wall(3, 1.002 * ms)).epsilon(1e-9));
    CHECK(res[refined].step_walls[1] == doctest::Approx(wall(2, 1.501 * ms)).epsilon(1e-9));
    // The copy came with its receipt: one layout install of 3 MB, usable from its landing; the
    // ports carried it twice (sent and received), the DIMMs read and wrote it beside.
    CHECK(rl.layout_installs == 1);
    const timed_residency& copies = r.copies_of(relayout);
    CHECK(copies.present(expert_key{0, 2}, 1));
    CHECK_FALSE(copies.present(expert_key{0, 2}, 2));
    CHECK(copies.ready_at(expert_key{0, 2}, 1) > rl.placement_seconds);
    const ledger& all = r.timeline_of(relayout).accounts();
    CHECK(all[all.find("dimm-link 0")].moved(cost_kind::migration) == 3'000'000);
    CHECK(all[all.find("dimm-link 1")].moved(cost_kind::migration) == 3'000'000);
    CHECK(all[all.find("dimm 0")].busy(cost_kind::migration) == doctest::Approx(0.5 * ms));
    CHECK(all[all.find("dimm 1")].busy(cost_kind::migration) == doctest::Approx(0.5 * ms));
  }
  SUBCASE("a short attention: the ports move it, DIMM 0 never has the idle time, nothing installs") {
    // Step 2 starts microseconds after the job is queued and DIMM 0 is busy through its MoE
    // work (e2's read, then e1's share); the ports, idle, carry the copy, and DIMM 1 writes its
    // part, but DIMM 0's read finds no idle time long enough for a 1 MiB chunk (background
    // work never delays demand work): the copy is late, still in flight at the end, and every
    // step runs on the old layout.
    trimoe_replayer<> r(steps, toy_shape(), make_trimoe_devices(toy_machine(), toy_shape(), c.compute), c);
    r.replay_step();
    check_task(r);
    r.replay_all();
    const trimoe_result res = r.result();
    const auto& rl = res[relayout];
    CHECK(r.layouts(relayout, 0)[2] == expert_layout::localized(0));
    CHECK(rl.migrations.taken == std::array<std::size_t, 4>{0, 1, 0, 0});
    CHECK(rl.migrations.landed == std::array<std::size_t, 4>{0, 0, 0, 0});
    CHECK(rl.migrations.late == 1);
    CHECK(rl.migrations.pending_at_end == 1);
    CHECK(rl.layout_installs == 0);
    for (std::size_t t = 0; t < 3; ++t)
      CHECK(rl.step_walls[t] == doctest::Approx(wall(t + 1, 1.501 * ms)).epsilon(1e-9));
    const ledger& all = r.timeline_of(relayout).accounts();
    CHECK(all[all.find("dimm-link 0")].moved(cost_kind::migration) == 3'000'000);
    CHECK(all[all.find("dimm 1")].busy(cost_kind::migration) == doctest::Approx(0.5 * ms));
    CHECK(all[all.find("dimm 0")].busy(cost_kind::migration) == 0.0);
  }
}

TEST_CASE("under the paper's window the same move does not fit") {
  const batched_steps steps = toy_steps(3);
  trimoe_replay_config c = toy_config();
  c.systems = {false, false, false, false, true, true, false, false, false};
  const trimoe_result res = replay_trimoe(steps, toy_shape(), toy_machine(), c);
  // The window is the GPU's attention + router + expert time, microseconds; the move 0.5 ms.
  const auto& m = res[relayout].migrations;
  CHECK(m.proposed[1] >= 1);
  CHECK(m.taken == std::array<std::size_t, 4>{0, 0, 0, 0});
  CHECK(res[relayout].step_seconds == doctest::Approx(res[refined].step_seconds));
  CHECK(m.window_seconds < 0.1 * ms * static_cast<double>(m.plans));
}

TEST_CASE("generic device types: roofline models directly and through any_device_cost agree") {
  const batched_steps steps = toy_steps(2);
  const trimoe_replay_config c = toy_config();
  const model_shape m = toy_shape();
  const trimoe_machine mach = toy_machine();
  trimoe_devices<roofline_cost, roofline_cost, roofline_cost> direct{
      roofline_cost{mach.gpu, m}, roofline_cost{mach.cpu, m}, roofline_cost{mach.ndp, m}};
  const trimoe_result a = replay_trimoe(steps, m, direct, c);
  const trimoe_result b = replay_trimoe(steps, m, mach, c);
  for (std::size_t k = 0; k < num_trimoe_systems; ++k) {
    CHECK(a.systems[k].step_seconds == b.systems[k].step_seconds);
  }
  // The profiled tables change the prices, not the accounting.
  trimoe_replay_config p = c;
  p.compute = trimoe_compute_model::profiled;
  const trimoe_result q = replay_trimoe(steps, m, mach, p);
  CHECK(q[refined].ran);
  CHECK(q[refined].step_seconds > 0.0);
}

TEST_CASE("bad configurations are refused with the library's messages") {
  const batched_steps steps = toy_steps(1);
  const model_shape m = toy_shape();
  const auto dev = make_trimoe_devices(toy_machine(), m, trimoe_compute_model::roofline);
  const auto with = [](auto edit) {
    trimoe_replay_config c;
    edit(c);
    return c;
  };
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.alpha = 0.0; })),
                       "moepolicy::trimoe_replayer: alpha must be in (0, 1], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.exact_nodes = 0; })),
                       "moepolicy::trimoe_replayer: exact_nodes must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.exact_max_experts = 65; })),
                       "moepolicy::trimoe_replayer: exact_max_experts must be <= 64, got 65", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.window_scale = -1.0; })),
                       "moepolicy::trimoe_replayer: window_scale must be finite and >= 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) {
                                           c.window_seconds = std::numeric_limits<double>::infinity();
                                         })),
                       "moepolicy::trimoe_replayer: window_seconds must be finite and >= 0, got inf", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.classes.hot_share = 0.0; })),
                       "moepolicy::trimoe_replayer: classes need 0 < hot_share, 0 <= cold_share and hot_share + "
                       "cold_share <= 1, hot_share, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.chunk_bytes = 0; })),
                       "moepolicy::trimoe_replayer: chunk_bytes must be > 0, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, dev, with([](auto& c) { c.systems[5] = false; })),
                       "moepolicy::trimoe_replayer: solver_gaps needs the relayout system to run (systems[relayout] = "
                       "true)",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(batched_steps(2, 1, 5, 4), m, dev),
                       "moepolicy::trimoe_replayer: the steps' experts must equal the model's num_experts 4, got 5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(batched_steps(2, 0, 4, 4), m, dev),
                       "moepolicy::trimoe_replayer: the steps must have at least one layer, got 0", invalid_argument);
  model_shape no_attention = m;
  no_attention.attention = {};
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, no_attention, dev),
                       "moepolicy::forward_pass_cost: the model shape \"toy\" does not describe its attention, "
                       "vocabulary or dense FFN (attention.num_heads), got 0",
                       invalid_argument);
  trimoe_machine serial_ndp = toy_machine();
  serial_ndp.ndp.execution = execution_kind::serial;
  serial_ndp.ndp.num_units = 1;
  CHECK_THROWS_WITH_AS(trimoe_replayer<>(steps, m, make_trimoe_devices(serial_ndp, m, trimoe_compute_model::roofline)),
                       "moepolicy::gpu_cpu_ndp_system: the DIMM-NDP model must be parallel_units, got serial",
                       invalid_argument);
}

TEST_CASE("fewer than two steps: nothing measured, the startup still charged") {
  batched_steps one(1, 1, 4, 4);
  one.loads(0, 0)[0] = 4;
  const trimoe_result r = replay_trimoe(one, toy_shape(), toy_machine(), toy_config());
  CHECK(r.num_steps == 1);
  CHECK(r.measured_steps == 0);
  CHECK(r[refined].step_seconds == 0.0);
  CHECK(r[refined].placement_copies == 1);
}

TEST_CASE("bundled Granite trace: conservation, invariants, and no allocation per step") {
  const routing_trace trace =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  const model_shape shape = models::granite_3_1_1b_a400m();
  const batched_steps steps = make_batched_decode_steps(trace, trimoe_default_batch(shape.num_experts));
  REQUIRE(steps.num_steps() == 6);
  trimoe_replay_config c;
  c.exact_nodes = 20'000;
  c.window = trimoe_window::moe_span;  // wide enough for migrations to happen
  trimoe_replayer<> r(steps, shape, make_trimoe_devices({}, shape), c);
  std::array<std::vector<occupation>, num_trimoe_systems> logs;
  for (std::size_t k = 0; k < num_trimoe_systems; ++k) {
    logs[k].reserve(1 << 18);  // about 64 k holds per system here: the log must not allocate in a step
    r.record_into(static_cast<trimoe_system>(k), &logs[k]);
  }
  std::size_t allocated = 0;
  while (!r.done()) {
    const test::allocation_counter count;
    r.replay_step();
    allocated += count.count();
  }
  if (test::allocation_counting) CHECK(allocated == 0);
  const trimoe_result res = r.result();
  CHECK(res.measured_steps == 5);
  const double n = static_cast<double>(res.measured_steps);
  const std::size_t D = res.num_dimms;
  std::size_t moved = 0;
  for (std::size_t k = 0; k < num_trimoe_systems; ++k) {
    const auto s = static_cast<trimoe_system>(k);
    INFO(to_string(s));
    const auto& a = res[s];
    REQUIRE(a.ran);
    const ledger& l = a.accounts;
    // Busy time per resource equals what the replay issued: the layers' demand work plus the
    // output head on the GPU; every DIMM's demand work (NDP, reads, activations).
    const forward_pass_cost<any_device_cost> pass(r.system().gpu(), shape);
    const double head = pass.output_head_seconds(res.batch) * n;
    CHECK(l[l.find("gpu")].busy() == doctest::Approx(a.layer_sum.gpu * n + head).epsilon(1e-9));
    CHECK(l[l.find("cpu")].busy() == doctest::Approx(a.layer_sum.cpu * n).epsilon(1e-9));
    seconds dimm_demand = 0.0;
    for (std::size_t d = 0; d < D; ++d) {
      const auto& m = l[l.find("dimm " + std::to_string(d))];
      dimm_demand += m.busy(cost_kind::expert) + m.busy(cost_kind::weight_read) + m.busy(cost_kind::activation);
    }
    CHECK(dimm_demand == doctest::Approx(a.layer_sum.mean_dimm * static_cast<double>(D) * n).epsilon(1e-9));
    // Every copy has a transfer: GPU copies are the startup's and the landed prefetches; layouts
    // change only by landed relayouts and rebalances; nothing else installs.
    const auto& m = a.migrations;
    CHECK(a.gpu_installs == a.placement_copies + m.landed[0]);
    CHECK(a.layout_installs == m.landed[1] + m.landed[2] + m.landed[3]);
    if (!is_relayout(s)) CHECK(a.layout_installs == 0);
    if (!prefetches(s)) CHECK(a.gpu_installs == a.placement_copies);
    // Every byte moved is charged on a link: PCIe carried every GPU copy (the startup before the
    // measured ledger), the DIMM-Link ports every layout change, sent and received.
    const ledger& whole = r.timeline_of(s).accounts();
    const auto& h2d = whole[whole.find("pcie h2d")];
    CHECK(h2d.moved(cost_kind::placement) == a.placement_bytes);
    CHECK(h2d.moved(cost_kind::prefetch) >= static_cast<bytes>(m.landed[0]) * res.expert_bytes);
    bytes ports = 0;
    for (std::size_t d = 0; d < D; ++d) ports += whole[whole.find("dimm-link " + std::to_string(d))].moved();
    CHECK(ports >= 2 * (a.installed_bytes - a.placement_bytes - static_cast<bytes>(m.landed[0]) * res.expert_bytes));
    if (m.pending_at_end == 0) CHECK(ports == 2 * (m.job_bytes[1] + m.job_bytes[2] + m.job_bytes[3]));
    moved += m.landed[0] + m.landed[1] + m.landed[2] + m.landed[3];
    // No resource is held by two operations at once.
    std::vector<std::vector<occupation>> by(r.timeline_of(s).num_resources());
    for (const auto& o : logs[k]) by[o.resource].push_back(o);
    std::size_t overlaps = 0;
    for (auto& v : by) {
      std::sort(v.begin(), v.end(), [](const occupation& x, const occupation& y) { return x.start < y.start; });
      for (std::size_t i = 1; i < v.size(); ++i)
        overlaps += v[i].start < v[i - 1].end - 1e-12 ? std::size_t{1} : std::size_t{0};
    }
    CHECK(overlaps == 0);
    CHECK(!logs[k].empty());
    // Per-layer figures add up; utilisation is a share.
    double span = 0.0;
    for (const auto& x : a.layers) {
      span += x.span;
      CHECK(x.moe <= x.span * (1 + 1e-12));
      CHECK(x.mean_dimm <= x.max_dimm * (1 + 1e-12));
    }
    CHECK(a.layer_sum.span == doctest::Approx(span));
    CHECK(a.step_seconds >= a.layer_sum.span);
    for (const trimoe_device_use* u : {&a.gpu, &a.cpu, &a.ndp, &a.dimm}) {
      CHECK(u->busy >= 0.0);
      CHECK(u->busy <= 1.0 + 1e-9);
    }
  }
  CHECK(moved > 0);  // the migrations did happen
  // The bounds hold: the Eq. 7 bound below every solver on +Relayout's problems, the timed
  // bound below +Relayout's timed layers, the optimum below the heuristics.
  const auto& g = res.gaps;
  CHECK(g.bound <= g.exact * (1 + 1e-9));
  CHECK(g.exact <= g.improved * (1 + 1e-9));
  CHECK(g.exact <= g.refined * (1 + 1e-9));
  CHECK(g.refined <= g.greedy * (1 + 1e-9));
  for (std::size_t l = 0; l < res.num_layers; ++l)
    CHECK(res.layer_bound[l] <= res[relayout].layers[l].span * (1 + 1e-9));
  // The predictor block: the true classes are the reference; never-migrate never moves.
  const auto& truth = res.prediction[static_cast<std::size_t>(trimoe_predictor::true_classes)];
  CHECK(truth.confusion.accuracy() == 1.0);
  CHECK(truth.precision() == 1.0);
  CHECK(truth.recall() == 1.0);
  const auto& never = res.prediction[static_cast<std::size_t>(trimoe_predictor::never_migrate)];
  CHECK(never.moves == 0);
  CHECK(never.recall() == 0.0);
  CHECK(res.prediction[0].confusion.total() == res.measured_steps * res.num_layers * res.num_experts);
  const double shares = res.class_token_share[0] + res.class_token_share[1] + res.class_token_share[2];
  CHECK(shares == doctest::Approx(1.0));
}

TEST_CASE("the trace overload batches as the default rule says, and the names") {
  const routing_trace trace =
      read_canonical(test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace");
  trimoe_replay_config c;
  c.exact_nodes = 1'000;
  const trimoe_result r = replay_trimoe(trace, models::granite_3_1_1b_a400m(), {}, c);
  CHECK(r.batch == 32);
  CHECK(r.num_steps == 6);
  CHECK(r.measured_steps == 5);
  CHECK(trimoe_default_batch(8) == 64);
  CHECK(to_string(relayout_benefit) == "relayout_benefit");
  CHECK(to_string(trimoe_predictor::never_migrate) == "never_migrate");
  CHECK(to_string(trimoe_window::attention_mlp) == "attention_mlp");
  CHECK(is_relayout(exact));
  CHECK_FALSE(is_relayout(refined));
  CHECK(prefetches(gpu_only));
  CHECK_FALSE(prefetches(gpu_ndp));
  CHECK(trimoe_paper_classes.hot_share == 0.22);
  CHECK(trimoe_paper_classes.cold_share == 0.08);
}
