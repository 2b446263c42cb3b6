// Tests of balance/migration_planner.hpp: benefits, ranking, the window budget and the two
// relayout rules on hand-worked cases, then invariants on random layers of the TriMoE
// machine under both rules.
#include "moepolicy/balance/migration_planner.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <vector>

#include "moepolicy/balance/detail/migration_planner_reference.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/trace/canonical.hpp"

using namespace moepolicy;

namespace {

using enum hotness;

// A toy machine with round numbers. Experts: 3 · 1000 · 1000 weights, W = 6 MB at FP16,
// 6 MFLOP per token.
//   GPU  6 TFLOP/s and 6 TB/s: f_gpu(L) = max(L, 1) µs; PCIe 6 GB/s: T_PCIe = 1 ms.
//   CPU  60 GFLOP/s and 60 GB/s: f_cpu(L) = max(0.1 L, 0.1) ms.
//   DIMM 2 units, 6 GFLOP/s and 6 GB/s inside: T_NDP(L) = max(L, 1) ms; host reads 6 GB/s
//        per DIMM: T_DRAM = 1 ms localized, 0.5 ms striped; DIMM-Link 6 GB/s: 1 ms.
const model_shape toy{"toy", 1, 0, 8, 1, 0, 1000, 1000};
constexpr double W = 6e6;
constexpr double ms = 1e-3;

device_spec serial(const char* name, double flops) {
  device_spec d;
  d.name = name;
  d.capacity_bytes = 1'000'000'000ULL;
  d.compute = {.peak_flops = flops,
               .peak_bits = fp16,
               .bit_scaled_compute = false,
               .memory_bandwidth = flops,
               .launch_seconds = 0.0};
  return d;
}

using toy_system = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;

toy_system make_toy(gpu_cpu_ndp_config c = {}) {
  device_spec gpu = serial("toy GPU", 6e12);
  gpu.weight_link = {6e9, 0.0};
  device_spec dimm = serial("toy DIMM", 6e9);
  dimm.execution = execution_kind::parallel_units;
  dimm.num_units = 2;
  dimm.weight_link = {6e9, 0.0};
  dimm.host_read_bandwidth = 6e9;
  return {roofline_cost{gpu, toy}, roofline_cost{serial("toy CPU", 6e10), toy}, roofline_cost{dimm, toy}, c};
}

constexpr auto loc = [](std::uint16_t d) { return expert_layout::localized(d); };
constexpr auto striped = expert_layout::striped();

}  // namespace

TEST_CASE("prefetch pays off, and relayouts that would load the bottleneck DIMM are not proposed") {
  // Predicted step (x = predicted load; prices per the toy machine, fractional x
  // interpolated from f(0) = 0, reads scaled by min(1, x)):
  //   e0 hot,  striped,  x = 4:   GPU miss 1, CPU 0.5, read 0.5 per DIMM
  //   e1 warm, DIMM 1,   x = 3:   GPU miss 1, CPU 1, NDP 3, read 1 on DIMM 1
  //   e2 cold, striped,  x = 0.5: GPU 0.5, CPU 0.25, read 0.25 per DIMM
  //   e3 cold, DIMM 0,   x = 1:   GPU 1, CPU 1, NDP 1, read 1 on DIMM 0           (ms)
  // Its schedule: greedy CPU, GPU, CPU, GPU (GPU 2, CPU 0.75, DIMMs 1.75 and 1.75), then
  // e3 -> NDP: GPU 1, CPU 0.75, DIMM0 0.75 + 1, DIMM1 0.75 + 1: makespan 1.75 = the
  // DIMM bound, so the search stops.
  // Tasks:
  //   prefetch e0: off the CPU (-0.5) and off the stripes (-0.5): DIMMs 1.25, GPU 1 + 4 µs:
  //     makespan 1.25, benefit 0.5 ms;
  //   relayout e1 to striped: its read becomes 0.5 on both DIMMs: DIMM0 = 0.75 + 0.5 + 1 =
  //     2.25 whether it runs on the GPU or the CPU: worse, not proposed;
  //   relayout e2 to localized (target DIMM 1, the least cold NDP time, 0 vs 1): its read
  //     or NDP run puts 0.5 on DIMM 1 alone: DIMM1 = 0.5 + 1 + 0.5 = 2: worse, not proposed;
  //   rebalance: one cold localized expert (e3, 1 ms on DIMM 0): 1 < gap 1 fails, no move.
  migration_planner planner(make_toy(), 4);
  const std::array<double, 4> predicted{4.0, 3.0, 0.5, 1.0};
  const std::array<hotness, 4> classes{hot, warm, cold, cold};
  const std::array<expert_layout, 4> layouts{striped, loc(1), striped, loc(0)};
  const std::array<std::uint8_t, 4> resident{0, 0, 0, 0};
  const auto tasks = planner.plan(0, predicted, classes, layouts, resident, 10 * ms, 100 * 1'000'000ULL);
  CHECK(planner.predicted_schedule().makespan == doctest::Approx(1.75 * ms));
  CHECK(planner.predicted_schedule().assignment ==
        std::vector<device_option>{device_option::cpu, device_option::gpu, device_option::cpu, device_option::ndp});
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].kind == migration_kind::prefetch);
  CHECK(tasks[0].expert == 0);
  CHECK(tasks[0].benefit == doctest::Approx(0.5 * ms));
  CHECK(tasks[0].size == 6'000'000ULL);
  CHECK(tasks[0].transfer_seconds == doctest::Approx(W / 6e9));
  CHECK(tasks[0].taken);
}

TEST_CASE("ranking by benefit, the window and the HBM budget") {
  // No NDP. Three hot striped experts, not resident: x = 30, 20, 9.
  //   GPU miss 1 ms each; CPU 3, 2 and 0.9 ms; each read 0.5 ms per DIMM.
  // Schedule: GPU {h1, h2} = 2, CPU {h3} = 0.9, DIMMs 1.5: makespan 2 (no move helps).
  // Prefetch h1: GPU 1 + 0.03, DIMMs 1.0: makespan 1.03, benefit 0.97 ms.
  // Prefetch h2: GPU 1 + 0.02: makespan 1.02, benefit 0.98 ms  -> ranked first.
  // Prefetch h3: on the GPU it would raise it to 2.009; on the CPU nothing changes: not proposed.
  // Each prefetch takes 1 ms of PCIe.
  migration_planner planner(make_toy({.use_ndp = false}), 3);
  const std::array<double, 3> predicted{30.0, 20.0, 9.0};
  const std::array<hotness, 3> classes{hot, hot, hot};
  const std::array<expert_layout, 3> layouts{striped, striped, striped};
  const std::array<std::uint8_t, 3> resident{0, 0, 0};
  const bytes lots = 1'000'000'000ULL;

  auto tasks = planner.plan(0, predicted, classes, layouts, resident, 2.5 * ms, lots);
  REQUIRE(tasks.size() == 2);
  CHECK(tasks[0].expert == 1);
  CHECK(tasks[0].benefit == doctest::Approx(0.98 * ms));
  CHECK(tasks[1].expert == 0);
  CHECK(tasks[1].benefit == doctest::Approx(0.97 * ms));
  CHECK(tasks[0].taken);
  CHECK(tasks[1].taken);

  tasks = planner.plan(0, predicted, classes, layouts, resident, 1.5 * ms, lots);  // room for one
  CHECK(tasks[0].taken);
  CHECK_FALSE(tasks[1].taken);

  tasks = planner.plan(0, predicted, classes, layouts, resident, 2.5 * ms, 6'000'000ULL);  // HBM for one
  CHECK(tasks[0].taken);
  CHECK_FALSE(tasks[1].taken);

  tasks = planner.plan(0, predicted, classes, layouts, resident, 0.5 * ms, lots);  // room for none
  CHECK_FALSE(tasks[0].taken);
  CHECK_FALSE(tasks[1].taken);

  // apply_migrations makes the taken prefetch resident.
  tasks = planner.plan(0, predicted, classes, layouts, resident, 1.0 * ms, lots);
  std::array<expert_layout, 3> lay = layouts;
  std::array<std::uint8_t, 3> res = resident;
  apply_migrations(tasks, lay, res);
  CHECK(res == std::array<std::uint8_t, 3>{0, 1, 0});
}

TEST_CASE("a rebalance move is valued by the makespan it saves") {
  // D = 2. c1 and c2 cold, localized on DIMM 0, x = 1: every option costs 1 ms and puts
  // 1 ms on DIMM 0. w warm, striped, x = 8: GPU miss 1, CPU 0.8, read 0.5 per DIMM.
  // Schedule: greedy GPU, GPU, CPU: GPU 2, CPU 0.8, DIMM0 0.5 + 1 + 1 = 2.5 = the DIMM
  // bound: makespan 2.5.
  // Rebalancer (predicted NDP ms): DIMM0 2, DIMM1 0, skew; c1 (1 < gap 2) moves to DIMM 1.
  // Benefit: c1 leaves the GPU (1) and DIMM 0 (1); on DIMM 1 its best option is NDP:
  //   GPU 1, CPU 0.8, DIMM0 1.5, DIMM1 0.5 + 1 = 1.5: makespan 1.5, benefit 1 ms.
  // It moves W over DIMM-Link: 1 ms.
  migration_planner planner(make_toy(), 3);
  const std::array<double, 3> predicted{1.0, 1.0, 8.0};
  const std::array<hotness, 3> classes{cold, cold, warm};
  const std::array<expert_layout, 3> layouts{loc(0), loc(0), striped};
  const std::array<std::uint8_t, 3> resident{0, 0, 0};
  auto tasks = planner.plan(0, predicted, classes, layouts, resident, 1.0 * ms, 0);
  CHECK(planner.predicted_schedule().makespan == doctest::Approx(2.5 * ms));
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].kind == migration_kind::rebalance);
  CHECK(tasks[0].expert == 0);
  CHECK(tasks[0].from == loc(0));
  CHECK(tasks[0].to == loc(1));
  CHECK(tasks[0].chain == 1);
  CHECK(tasks[0].benefit == doctest::Approx(1.0 * ms));
  CHECK(tasks[0].transfer_seconds == doctest::Approx(1.0 * ms));
  CHECK(tasks[0].taken);
  std::array<expert_layout, 3> lay = layouts;
  std::array<std::uint8_t, 3> res = resident;
  apply_migrations(tasks, lay, res);
  CHECK(lay[0] == loc(1));
  // 0.9 ms of window: it does not fit.
  tasks = planner.plan(0, predicted, classes, layouts, resident, 0.9 * ms, 0);
  CHECK_FALSE(tasks[0].taken);
}

TEST_CASE("relayout rule: class_change is the default, and benefit stripes a busy localized cold expert") {
  CHECK(migration_planner_config{}.relayout_when == relayout_rule::class_change);
  CHECK(to_string(relayout_rule::class_change) == "class_change");
  CHECK(to_string(relayout_rule::benefit) == "benefit");
  // e0 cold but busy, localized on DIMM 0, x = 4: GPU miss max(4 µs, 1, 1) = 1, CPU
  // max(0.4, 1) = 1, NDP 4, read 1 on DIMM 0; striped it would cost CPU max(0.4, 0.5) = 0.5
  // and read 0.5 per DIMM. e1 hot and resident, x = 20: GPU hit 20 µs, no read.
  // Predicted step: e1 GPU, e0 CPU: GPU 0.02, CPU 1, DIMM0 1, DIMM1 0: makespan 1 ms.
  // class_change: e0 is cold and localized, e1 hot and resident: no relayout, no prefetch;
  // rebalance: one cold expert (4 ms of NDP on DIMM 0), 4 < gap 4 fails: nothing at all.
  // benefit: e0 (localized, x > 0) may be striped: on the CPU at 0.5 ms with 0.5 per DIMM:
  // makespan 0.5, benefit 0.5 ms; Σ T² falls from 0.02² + 1 + 1 to 0.02² + 3 · 0.25.
  // e1 is predicted hot: no localizing candidate.
  const std::array<double, 2> predicted{4.0, 20.0};
  const std::array<hotness, 2> classes{cold, hot};
  const std::array<expert_layout, 2> layouts{loc(0), striped};
  const std::array<std::uint8_t, 2> resident{0, 1};

  migration_planner literal(make_toy(), 2);
  CHECK(literal.config().relayout_when == relayout_rule::class_change);
  CHECK(literal.plan(0, predicted, classes, layouts, resident, 10 * ms, 0).empty());
  CHECK(literal.predicted_schedule().makespan == doctest::Approx(1.0 * ms));

  migration_planner by_benefit(make_toy(), 2, {.relayout_when = relayout_rule::benefit});
  const auto tasks = by_benefit.plan(0, predicted, classes, layouts, resident, 1.0 * ms, 0);
  CHECK(by_benefit.predicted_schedule().makespan == doctest::Approx(1.0 * ms));
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].kind == migration_kind::relayout_to_striped);
  CHECK(tasks[0].expert == 0);
  CHECK(tasks[0].from == loc(0));
  CHECK(tasks[0].to == striped);
  CHECK(tasks[0].benefit == doctest::Approx(0.5 * ms));
  CHECK(tasks[0].balance_gain == doctest::Approx(1.25 * ms * ms));
  CHECK(tasks[0].transfer_seconds == doctest::Approx(1.0 * ms));
  CHECK(tasks[0].taken);  // 1 ms of DIMM-Link in a 1 ms window
  std::array<expert_layout, 2> lay = layouts;
  std::array<std::uint8_t, 2> res = resident;
  apply_migrations(tasks, lay, res);
  CHECK(lay[0] == striped);
  CHECK(res == resident);
}

TEST_CASE("relayout rule benefit: nothing is proposed when no relayout helps") {
  // D = 2. e0 and e1 cold, x = 1, localized on DIMM 0 and DIMM 1: every option costs 1 ms
  // and puts 1 ms on its DIMM. e2 warm, striped, x = 2: GPU miss 1, CPU max(0.2, 0.5) =
  // 0.5, read 0.5 per DIMM. Every schedule leaves each DIMM at 1.5 ms: makespan 1.5.
  // Candidates under benefit:
  //   stripe e0: its 1 ms leaves DIMM 0 and 0.5 lands on each: DIMM1 = 2: worse (e1 alike);
  //   localize e2 (not hot) on DIMM 0 (the least predicted cold NDP time, 1 and 1: the
  //   first): its stripes leave, 1 ms lands on DIMM 0 (read or NDP 2): DIMM0 = 2: worse.
  // No hot expert, no skew (equal cold loads): the plan is empty under either rule.
  const std::array<double, 3> predicted{1.0, 1.0, 2.0};
  const std::array<hotness, 3> classes{cold, cold, warm};
  const std::array<expert_layout, 3> layouts{loc(0), loc(1), striped};
  const std::array<std::uint8_t, 3> resident{0, 0, 0};
  for (const relayout_rule rule : {relayout_rule::class_change, relayout_rule::benefit}) {
    INFO(to_string(rule));
    migration_planner planner(make_toy(), 3, {.relayout_when = rule});
    CHECK(planner.plan(0, predicted, classes, layouts, resident, 10 * ms, 0).empty());
    CHECK(planner.predicted_schedule().makespan == doctest::Approx(1.5 * ms));
  }
}

TEST_CASE("migration_planner: checks its inputs") {
  migration_planner planner(make_toy(), 3);
  const std::array<double, 2> short_pred{1.0, 1.0};
  const std::array<double, 3> pred{1.0, 1.0, 1.0};
  const std::array<hotness, 3> classes{cold, cold, cold};
  const std::array<expert_layout, 3> layouts{striped, striped, striped};
  const std::array<std::uint8_t, 3> resident{0, 0, 0};
  CHECK_THROWS_WITH_AS(static_cast<void>(planner.plan(0, short_pred, classes, layouts, resident, 1.0, 0)),
                       "moepolicy::migration_planner::plan: predicted must have one entry per expert (3), got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(planner.plan(0, pred, classes, layouts, resident, -1.0, 0)),
                       "moepolicy::migration_planner::plan: window must be finite and >= 0, got -1", invalid_argument);
  const std::array<double, 3> negative{1.0, -1.0, 1.0};
  CHECK_THROWS_WITH_AS(static_cast<void>(planner.plan(0, negative, classes, layouts, resident, 1.0, 0)),
                       "moepolicy::migration_planner::plan: predicted loads must be finite, >= 0 and < 4e9, got -1",
                       invalid_argument);
  const std::array<expert_layout, 3> far{striped, loc(2), striped};
  CHECK_THROWS_WITH_AS(static_cast<void>(planner.plan(0, pred, classes, far, resident, 1.0, 0)),
                       "moepolicy::migration_planner::plan: a localized home must be < the DIMMs 2, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(migration_planner(make_toy(), 0),
                       "moepolicy::ndp_rebalancer: num_experts must be in [1, 65536], got 0", invalid_argument);
  CHECK(to_string(migration_kind::relayout_to_localized) == "relayout_to_localized");
}

TEST_CASE("migration_planner on random layers of the TriMoE machine: budget, ranking, kinds") {
  const model_shape m = models::qwen3_30b_a3b();
  const toy_system sys(roofline_cost{presets::h100_pcie_gen5(), m}, roofline_cost{presets::xeon_8470_amx(), m},
                       roofline_cost{presets::dimm_ndp(), m});
  const std::size_t E = 128;
  std::mt19937 rng(11);
  std::exponential_distribution<double> load(0.25);
  for (int trial = 0; trial < 40; ++trial) {
    const bool separate = trial % 2 == 0;
    const relayout_rule rule = trial % 3 == 1 ? relayout_rule::benefit : relayout_rule::class_change;
    const bool by_class = rule == relayout_rule::class_change;
    migration_planner planner(
        sys, E, {.relayout_when = rule, .separate_links = separate, .stop_at_first_misfit = trial % 5 == 0});
    std::vector<double> predicted(E);
    for (auto& x : predicted) x = rng() % 3 == 0 ? 0.0 : load(rng);
    std::vector<hotness> classes(E);
    classify_by_share(predicted, classes);
    std::vector<expert_layout> layouts(E);
    std::vector<std::uint8_t> resident(E);
    for (std::size_t e = 0; e < E; ++e) {
      layouts[e] = rng() % 2 ? expert_layout::localized(static_cast<std::uint16_t>(rng() % 16)) : striped;
      resident[e] = rng() % 8 == 0 ? 1 : 0;
    }
    const seconds window = 0.68e-3 * (1 + trial % 4);
    const auto tasks = planner.plan(3, predicted, classes, layouts, resident, window, bytes{2'400'000'000});
    seconds pcie = 0.0, link = 0.0;
    std::uint32_t last_chain = 0;
    for (std::size_t i = 0; i < tasks.size(); ++i) {
      const auto& t = tasks[i];
      CHECK((t.benefit > 0.0 || t.balance_gain > 0.0));
      const std::size_t e = t.expert;
      switch (t.kind) {
        case migration_kind::prefetch:
          CHECK((classes[e] == hot && resident[e] == 0));
          break;
        case migration_kind::relayout_to_striped:
          CHECK(
              ((by_class ? classes[e] != cold : predicted[e] > 0.0) && layouts[e].is_localized() && t.to.is_striped()));
          break;
        case migration_kind::relayout_to_localized:
          CHECK(
              ((by_class ? classes[e] == cold : classes[e] != hot) && layouts[e].is_striped() && t.to.is_localized()));
          break;
        case migration_kind::rebalance:
          CHECK((classes[e] == cold && t.from.is_localized() && t.to.is_localized()));
          CHECK(t.chain == last_chain + 1);  // chains are ranked in order
          last_chain = t.chain;
          break;
      }
      if (i > 0 && tasks[i - 1].kind != migration_kind::rebalance && t.kind != migration_kind::rebalance) {
        CHECK(tasks[i - 1].benefit >= t.benefit);
      }
      if (!t.taken) continue;
      (separate && t.kind == migration_kind::prefetch ? pcie : link) += t.transfer_seconds;
    }
    CHECK(pcie <= window * (1 + 1e-12));
    CHECK(link <= window * (1 + 1e-12));
  }
}

TEST_CASE("relayout estimate: the busiest DIMM-Link port carries (D - 1) of D shares") {
  // The benefit-rule case above: striping e0 (W = 6 MB) over D = 2 DIMMs. Over one link the
  // whole expert takes 1 ms; with the ports moving their shares at once, e0's home port sends
  // (D − 1) · ⌈W / D⌉ = 3 MB: 0.5 ms, which fits a 0.6 ms window.
  CHECK(migration_planner_config{}.relayout_time == relayout_estimate::whole_expert);
  const std::array<double, 2> predicted{4.0, 20.0};
  const std::array<hotness, 2> classes{cold, hot};
  const std::array<expert_layout, 2> layouts{loc(0), striped};
  const std::array<std::uint8_t, 2> resident{0, 1};
  migration_planner whole(make_toy(), 2, {.relayout_when = relayout_rule::benefit});
  auto tasks = whole.plan(0, predicted, classes, layouts, resident, 0.6 * ms, 0);
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].transfer_seconds == doctest::Approx(1.0 * ms));
  CHECK_FALSE(tasks[0].taken);
  migration_planner ports(make_toy(), 2,
                          {.relayout_when = relayout_rule::benefit, .relayout_time = relayout_estimate::busiest_port});
  tasks = ports.plan(0, predicted, classes, layouts, resident, 0.6 * ms, 0);
  REQUIRE(tasks.size() == 1);
  CHECK(tasks[0].transfer_seconds == doctest::Approx(0.5 * ms));
  CHECK(tasks[0].size == 6'000'000);
  CHECK(tasks[0].taken);
}

namespace {

/// Whether two plans are the same, field by field and bit for bit.
void check_same_plan(std::span<const migration_task> a, std::span<const migration_task> b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].kind == b[i].kind);
    CHECK(a[i].expert == b[i].expert);
    CHECK(a[i].from.home == b[i].from.home);
    CHECK(a[i].to.home == b[i].to.home);
    CHECK(a[i].size == b[i].size);
    CHECK(a[i].transfer_seconds == b[i].transfer_seconds);
    CHECK(a[i].benefit == b[i].benefit);
    CHECK(a[i].balance_gain == b[i].balance_gain);
    CHECK(a[i].chain == b[i].chain);
    CHECK(a[i].taken == b[i].taken);
  }
}

/// Whether two planners' predicted steps and schedules are the same, bit for bit; true
/// when the local search moved from its greedy start (or did not prove it optimal).
template <class P, class R>
bool check_same_step(const P& planner, const R& ref) {
  const auto a = planner.predicted_step().experts();
  const auto b = ref.predicted_step().experts();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].key == b[i].key);
    CHECK(a[i].load == b[i].load);
    CHECK(a[i].layout == b[i].layout);
    CHECK(a[i].gpu_resident == b[i].gpu_resident);
    CHECK(a[i].exec == b[i].exec);
    CHECK(a[i].dram == b[i].dram);
  }
  const makespan_schedule& x = planner.predicted_schedule();
  const makespan_schedule& y = ref.predicted_schedule();
  CHECK(x.status == y.status);
  CHECK(x.makespan == y.makespan);
  CHECK(x.gpu_seconds == y.gpu_seconds);
  CHECK(x.cpu_seconds == y.cpu_seconds);
  CHECK(x.dimm_seconds == y.dimm_seconds);
  CHECK(x.assignment == y.assignment);
  CHECK(x.iterations == y.iterations);
  return x.iterations > 0 || x.status != solve_status::optimal;
}

/// A roofline whose experts differ: expert e computes (1 + (e mod 3) / 4) times as long
/// and weighs (1 + (e mod 2) / 8) times as much, so that no price may be shared between
/// experts (the planner's path for models that are not `key_independent_cost`).
class keyed_roofline : public roofline_cost {
 public:
  static constexpr bool key_independent = false;
  using roofline_cost::roofline_cost;
  [[nodiscard]] seconds compute_seconds(expert_key k, bitwidth b, std::size_t tokens) const noexcept {
    return roofline_cost::compute_seconds(k, b, tokens) * (1.0 + static_cast<double>(k.expert % 3) / 4.0);
  }
  [[nodiscard]] bytes footprint_bytes(expert_key k, bitwidth b) const noexcept {
    const bytes w = roofline_cost::footprint_bytes(k, b);
    return k.expert % 2 == 0 ? w : w + w / 8;
  }
};
static_assert(DeviceCost<keyed_roofline> && !key_independent_cost<keyed_roofline>);

}  // namespace

// The planner against its first implementation on the bundled Granite trace: its decode
// tokens batched 16 at a time (concurrent sequences), the EMA predictor updated layer by
// layer, each layer planned from the prediction and the taken tasks applied, so that the
// layouts and residency evolve as in a run; both relayout rules.
TEST_CASE("migration_planner equals the reference implementation on the bundled Granite trace") {
  const routing_trace trace = read_canonical(std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" /
                                             "granite-3.1-1b-a400m.mtrace");
  const model_shape m = models::granite_3_1_1b_a400m();
  const toy_system sys(roofline_cost{presets::h100_pcie_gen5(), m}, roofline_cost{presets::xeon_8470_amx(), m},
                       roofline_cost{presets::dimm_ndp(), m});
  const batched_steps steps = make_batched_decode_steps(trace, 16);
  const std::size_t L = steps.num_layers(), E = steps.num_experts();
  REQUIRE(steps.num_steps() > 10);
  std::size_t tasks_seen = 0, taken = 0, searched = 0;
  for (const relayout_rule rule : {relayout_rule::class_change, relayout_rule::benefit}) {
    const migration_planner_config cfg{.relayout_when = rule};
    migration_planner planner(sys, E, cfg);
    reference::migration_planner ref(sys, E, cfg);
    ema_load_predictor pred(L, E);
    // Start: by each layer's load over the first step, the top quarter striped and a
    // tenth resident, the rest localized round robin on the 16 DIMMs.
    std::vector<std::vector<expert_layout>> layouts(L, std::vector<expert_layout>(E));
    std::vector<std::vector<std::uint8_t>> resident(L, std::vector<std::uint8_t>(E, 0));
    std::vector<std::size_t> order(E);
    for (std::size_t l = 0; l < L; ++l) {
      const auto first = steps.loads(0, l);
      std::iota(order.begin(), order.end(), std::size_t{0});
      std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return first[a] > first[b]; });
      for (std::size_t r = 0; r < E; ++r) {
        const std::size_t e = order[r];
        layouts[l][e] =
            r < E / 4 ? expert_layout::striped() : expert_layout::localized(static_cast<std::uint16_t>(e % 16));
        resident[l][e] = r < E / 10 ? 1 : 0;
      }
    }
    for (std::size_t t = 0; t < steps.num_steps(); ++t) {
      for (std::size_t l = 0; l < L; ++l) {
        const auto layer = static_cast<layer_id>(l);
        pred.update(layer, steps.loads(t, l));
        const auto a = planner.plan(layer, pred.predicted_loads(layer), pred.predicted_classes(layer), layouts[l],
                                    resident[l], 0.68e-3, bytes{200'000'000});
        const auto b = ref.plan(layer, pred.predicted_loads(layer), pred.predicted_classes(layer), layouts[l],
                                resident[l], 0.68e-3, bytes{200'000'000});
        CAPTURE(t);
        CAPTURE(l);
        check_same_plan(a, b);
        searched += check_same_step(planner, ref) ? 1U : 0U;
        tasks_seen += a.size();
        taken += static_cast<std::size_t>(std::count_if(a.begin(), a.end(), [](const auto& x) { return x.taken; }));
        apply_migrations(a, layouts[l], resident[l]);
      }
    }
  }
  CHECK(tasks_seen > 100);
  CHECK(taken > 10);
  MESSAGE("Granite: the local search moved on ", searched, " predicted steps");
}

namespace {

/// Plans random layers of `E` experts with `planner` and the reference on `sys` under
/// every relayout rule and budget reading and checks that they agree; `ties` draws every
/// predicted load from {0, 1, 2} (many experts priced alike); `scale` multiplies the
/// others (above 1023 tokens the planner prices without its memo). Returns the plans on
/// which the local search moved and the tasks seen.
template <class System>
std::array<std::size_t, 2> random_layers_agree(const System& sys, std::size_t E, unsigned seed, bool ties,
                                               double scale = 1.0) {
  std::mt19937 rng(seed);
  std::exponential_distribution<double> load(0.25);
  std::size_t tasks_seen = 0, searched = 0;
  for (int trial = 0; trial < 30; ++trial) {
    migration_planner_config cfg{.relayout_when = trial % 3 == 1 ? relayout_rule::benefit : relayout_rule::class_change,
                                 .separate_links = trial % 2 == 0,
                                 .stop_at_first_misfit = trial % 5 == 0};
    if (trial % 4 == 2) cfg.relayout_time = relayout_estimate::busiest_port;
    if (trial % 7 == 3) cfg.scheduling.list_start = false;
    migration_planner planner(sys, E, cfg);
    reference::migration_planner ref(sys, E, cfg);
    for (int round = 0; round < 2; ++round) {  // the second plan reuses the planners' scratch
      std::vector<double> predicted(E);
      for (auto& x : predicted) {
        if (ties) {
          x = static_cast<double>(rng() % 3);
        } else {
          x = rng() % 3 == 0 ? 0.0 : (rng() % 4 == 0 ? std::floor(scale * load(rng)) : scale * load(rng));
        }
      }
      std::vector<hotness> classes(E);
      classify_by_share(predicted, classes);
      std::vector<expert_layout> layouts(E);
      std::vector<std::uint8_t> resident(E);
      for (std::size_t e = 0; e < E; ++e) {
        layouts[e] = rng() % 2 ? expert_layout::localized(static_cast<std::uint16_t>(rng() % 16)) : striped;
        resident[e] = rng() % 8 == 0 ? 1 : 0;
      }
      const seconds window = 0.68e-3 * (1 + trial % 4);
      const auto layer = static_cast<layer_id>(round + 2);
      const auto a = planner.plan(layer, predicted, classes, layouts, resident, window, bytes{2'400'000'000});
      const auto b = ref.plan(layer, predicted, classes, layouts, resident, window, bytes{2'400'000'000});
      CAPTURE(trial);
      check_same_plan(a, b);
      searched += check_same_step(planner, ref) ? 1U : 0U;
      tasks_seen += a.size();
    }
  }
  return {searched, tasks_seen};
}

}  // namespace

// The planner against its first implementation, kept as the reference: the same tasks, in
// the same order, with the same benefits, times and choices, bit for bit, and the same
// predicted step and schedule, on random layers under every relayout rule and budget
// reading; on systems without the CPU or with activation transfers, with prices that
// differ by expert, with loads that make many experts tie and with loads of thousands of
// tokens. Both of the planner's paths to the predicted schedule are taken (the greedy
// start proven optimal, and the local search).
TEST_CASE("migration_planner equals the reference implementation on random layers") {
  const model_shape m = models::qwen3_30b_a3b();
  const auto gpu = presets::h100_pcie_gen5();
  const auto cpu = presets::xeon_8470_amx();
  const auto dimm = presets::dimm_ndp();
  std::size_t searched = 0, plans = 0;
  for (const gpu_cpu_ndp_config c :
       {gpu_cpu_ndp_config{}, gpu_cpu_ndp_config{.use_cpu = false}, gpu_cpu_ndp_config{.use_ndp = false},
        gpu_cpu_ndp_config{.use_cpu = false, .use_ndp = false}, gpu_cpu_ndp_config{.activation_transfer = true}}) {
    const toy_system sys(roofline_cost{gpu, m}, roofline_cost{cpu, m}, roofline_cost{dimm, m}, c);
    for (const bool ties : {false, true}) {
      const auto [s, tasks] = random_layers_agree(sys, 96, 12 + (ties ? 1u : 0u), ties);
      CHECK(tasks > 20);
      searched += s;
      plans += 60;
    }
  }
  {
    const toy_system sys(roofline_cost{gpu, m}, roofline_cost{cpu, m}, roofline_cost{dimm, m});
    const auto [s, tasks] = random_layers_agree(sys, 96, 15, false, 300.0);
    CHECK(tasks > 20);
    searched += s;
    plans += 60;
  }
  using keyed_system = gpu_cpu_ndp_system<keyed_roofline, keyed_roofline, keyed_roofline>;
  const keyed_system keyed(keyed_roofline{gpu, m}, keyed_roofline{cpu, m}, keyed_roofline{dimm, m});
  const auto [s, tasks] = random_layers_agree(keyed, 96, 14, false);
  CHECK(tasks > 100);
  searched += s;
  plans += 60;
  // Both paths: the local search moved on some plans and not on others.
  CHECK(searched > 0);
  CHECK(searched < plans);
}
