// Tests of sched/problem.hpp and sched/gpu_cpu_ndp.hpp: the flat problem, its validation,
// Eq. 5–7 totals, the O(1) move pricing, and Eq. 1–4 priced from the TriMoE presets.
#include "moepolicy/sched/problem.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"

using namespace moepolicy;

namespace {

expert_costs row(std::array<seconds, 3> exec, seconds dram, expert_layout layout, bool resident) {
  expert_costs e;
  e.exec = exec;
  e.dram = dram;
  e.layout = layout;
  e.gpu_resident = resident;
  return e;
}

}  // namespace

TEST_CASE("expert_layout: striped and localized") {
  constexpr auto s = expert_layout::striped();
  constexpr auto l = expert_layout::localized(3);
  static_assert(s.is_striped() && !s.is_localized());
  static_assert(l.is_localized() && l.home == 3);
  CHECK(s != l);
  CHECK(to_string(device_option::ndp) == "ndp");
  CHECK(to_string(solve_status::too_large) == "too_large");
}

TEST_CASE("makespan_problem validates what it is given") {
  CHECK_THROWS_WITH_AS(makespan_problem(0), "moepolicy::makespan_problem::makespan_problem: num_dimms must be in [1, 65534], got 0",
                       invalid_argument);
  makespan_problem p(2, 4);
  CHECK_THROWS_WITH_AS(p.add(row({-1.0, 1.0, not_allowed}, 0.0, {}, false)),
                       "moepolicy::makespan_problem::add: exec times must be finite and >= 0, got -1", invalid_argument);
  CHECK_THROWS_WITH_AS(p.add(row({not_allowed, not_allowed, not_allowed}, 0.0, {}, false)),
                       "moepolicy::makespan_problem::add: at least one option must be allowed, expert index, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(p.add(row({1.0, 1.0, not_allowed}, -2.0, {}, false)),
                       "moepolicy::makespan_problem::add: dram must be finite and >= 0, got -2", invalid_argument);
  CHECK_THROWS_WITH_AS(p.add(row({1.0, 1.0, 1.0}, 0.0, expert_layout::localized(2), false)),
                       "moepolicy::makespan_problem::add: a localized home must be < num_dimms 2, got 2", invalid_argument);
  CHECK_THROWS_WITH_AS(p.add(row({1.0, 1.0, 1.0}, 0.0, expert_layout::striped(), false)),
                       "moepolicy::makespan_problem::add: the ndp option needs a localized expert, expert index, got 0",
                       invalid_argument);
  CHECK(p.empty());
  p.add(row({1.0, 2.0, not_allowed}, 0.5, {}, false));
  CHECK(p.size() == 1);
  p.clear();
  CHECK(p.empty());
}

TEST_CASE("makespan_problem: rows appended in a block and cut back") {
  makespan_problem p(2, 4);
  p.add(row({1.0, 2.0, not_allowed}, 0.5, {}, false));
  const std::span<expert_costs> rows = p.add_unchecked(3);
  REQUIRE(rows.size() == 3);
  CHECK(p.size() == 4);
  CHECK(rows[0].exec[2] == not_allowed);  // default rows
  rows[0] = row({3.0, 4.0, 5.0}, 1.0, expert_layout::localized(1), true);
  p.truncate(2);
  REQUIRE(p.size() == 2);
  CHECK(p[0].exec[0] == 1.0);
  CHECK(p[1].exec[2] == 5.0);
  CHECK(p[1].layout == expert_layout::localized(1));
  p.truncate(0);
  CHECK(p.empty());
}

TEST_CASE("makespan_problem: rows resized in place keep their values") {
  makespan_problem p(2, 4);
  p.add(row({1.0, 2.0, not_allowed}, 0.5, {}, false));
  p.add(row({3.0, 4.0, 5.0}, 1.0, expert_layout::localized(1), true));
  std::span<expert_costs> rows = p.resize_unchecked(4);
  REQUIRE(rows.size() == 4);
  CHECK(p.size() == 4);
  CHECK(rows[0].exec[0] == 1.0);  // kept, not rewritten as default rows
  CHECK(rows[1].exec[2] == 5.0);
  CHECK(rows[1].layout == expert_layout::localized(1));
  CHECK(rows[3].exec[2] == not_allowed);  // new rows are default rows
  rows[3] = row({6.0, 7.0, not_allowed}, 2.0, {}, false);
  rows = p.resize_unchecked(1);
  REQUIRE(rows.size() == 1);
  CHECK(p.size() == 1);
  CHECK(p[0].exec[1] == 2.0);
  rows = p.resize_unchecked(2);
  CHECK(p[1].exec[2] == not_allowed);  // grown again: a default row, not the old one
  CHECK(p[1].layout == expert_layout::striped());
}

TEST_CASE("evaluate: Eq. 5-7 with contention from striped and localized reads") {
  // D = 2. Experts:
  //   a: striped, GPU miss 3 (dram 1)      -> GPU 3, every DIMM +1
  //   b: striped, CPU 2 (dram 1)           -> CPU 2, every DIMM +1
  //   c: localized d1, CPU 4 (dram 2)      -> CPU +4, DIMM 1 +2
  //   d: localized d0, NDP 2.5             -> DIMM 0 +2.5
  //   e: localized d1, GPU resident 1      -> GPU +1, no read
  // GPU = 4, CPU = 6, DIMM0 = 1 + 1 + 2.5 = 4.5, DIMM1 = 1 + 1 + 2 = 4; makespan 6.
  makespan_problem p(2);
  p.add(row({3.0, 5.0, not_allowed}, 1.0, expert_layout::striped(), false));
  p.add(row({3.0, 2.0, not_allowed}, 1.0, expert_layout::striped(), false));
  p.add(row({9.0, 4.0, 7.0}, 2.0, expert_layout::localized(1), false));
  p.add(row({9.0, 9.0, 2.5}, 2.0, expert_layout::localized(0), false));
  p.add(row({1.0, 9.0, 9.0}, 2.0, expert_layout::localized(1), true));
  const std::vector<device_option> a{device_option::gpu, device_option::cpu, device_option::cpu, device_option::ndp,
                                     device_option::gpu};
  CHECK(is_valid_assignment(p, a));
  makespan_schedule s;
  evaluate(p, a, s);
  CHECK(s.gpu_seconds == doctest::Approx(4.0));
  CHECK(s.cpu_seconds == doctest::Approx(6.0));
  REQUIRE(s.dimm_seconds.size() == 2);
  CHECK(s.dimm_seconds[0] == doctest::Approx(4.5));
  CHECK(s.dimm_seconds[1] == doctest::Approx(4.0));
  CHECK(s.makespan == doctest::Approx(6.0));

  const std::vector<device_option> bad{device_option::ndp, device_option::cpu, device_option::cpu, device_option::ndp,
                                       device_option::gpu};
  CHECK_FALSE(is_valid_assignment(p, bad));  // a is striped: no NDP
  CHECK_THROWS_WITH_AS(evaluate(p, bad, s),
                       "moepolicy::evaluate: the assignment must give each expert one allowed option, its size, got 5",
                       invalid_argument);
}

TEST_CASE("device_loads prices moves and pairs of moves exactly as a rebuild does") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> t(0.0, 10.0);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t D = 1 + static_cast<std::size_t>(trial % 5);
    makespan_problem p(D);
    const std::size_t n = 2 + static_cast<std::size_t>(trial % 7);
    for (std::size_t i = 0; i < n; ++i) {
      const bool loc = (rng() % 2) == 0;
      const auto lay = loc ? expert_layout::localized(static_cast<std::uint16_t>(rng() % D)) : expert_layout::striped();
      p.add(row({t(rng), t(rng), loc ? t(rng) : not_allowed}, t(rng), lay, (rng() % 3) == 0));
    }
    std::vector<device_option> a(n, device_option::gpu);
    detail::device_loads loads;
    loads.reset(D);
    loads.rebuild(p, a, n);
    for (std::size_t i = 0; i < n; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const auto oi = p[i].allows(device_option::ndp) ? device_option::ndp : device_option::cpu;
        detail::device_loads::delta c;
        c.add(p[i], a[i], -1.0);
        c.add(p[i], oi, 1.0);
        std::vector<device_option> b = a;
        b[i] = oi;
        if (j != i) {
          c.add(p[j], a[j], -1.0);
          c.add(p[j], device_option::cpu, 1.0);
          b[j] = device_option::cpu;
        }
        makespan_schedule s;
        evaluate(p, b, s);
        CHECK(loads.makespan_after(c) == doctest::Approx(s.makespan));
        double sq = s.gpu_seconds * s.gpu_seconds + s.cpu_seconds * s.cpu_seconds;
        for (double v : s.dimm_seconds) sq += v * v;
        CHECK(loads.square_sum_after(c) == doctest::Approx(sq));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Eq. 1-4 on the TriMoE machine (TriMoE Tab. 1): H100 PCIe, Xeon 8470 AMX, 16 DIMM-NDPs,
// Mixtral-8x7B at FP16. W = 3 * 4096 * 14336 * 2 B = 352,321,536 B; FLOPs per token 2W/2·2.

namespace {

const model_shape mixtral = models::mixtral_8x7b();
using system3 = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;
system3 trimoe(gpu_cpu_ndp_config c = {}) {
  return {roofline_cost{presets::h100_pcie_gen5(), mixtral}, roofline_cost{presets::xeon_8470_amx(), mixtral},
          roofline_cost{presets::dimm_ndp(), mixtral}, c};
}
constexpr double W = 352'321'536.0;          // bytes of one FP16 expert
constexpr double flops = 352'321'536.0;      // 2 * 3 * 4096 * 14336 per token

}  // namespace

TEST_CASE("gpu_cpu_ndp_system: each term of Eq. 1-4 from the presets") {
  const auto sys = trimoe();
  REQUIRE(sys.num_dimms() == 16);
  const expert_key k{0, 0};
  CHECK(sys.weight_bytes(k, fp16) == 352'321'536ULL);
  // T_DRAM: striped reads see 16 × 19.2 GB/s, localized ones one DIMM's 19.2 GB/s.
  CHECK(sys.dram_seconds(k, fp16, expert_layout::striped()) == doctest::Approx(W / 16.0 / 19.2e9));
  CHECK(sys.dram_seconds(k, fp16, expert_layout::localized(5)) == doctest::Approx(W / 19.2e9));
  // Eq. 1: 4 tokens on the H100 stream HBM once: W / 2.04 TB/s (arithmetic 4·flops/819.6T is less).
  CHECK(sys.gpu_hit_seconds(k, fp16, 4) == doctest::Approx(W / 2.04e12));
  // Eq. 2: the PCIe copy dominates, 1 µs + W / 64 GB/s = 5.506 ms.
  CHECK(sys.gpu_miss_seconds(k, fp16, 4, expert_layout::striped()) == doctest::Approx(1e-6 + W / 64e9));
  // ... and a localized read (18.35 ms) dominates PCIe.
  CHECK(sys.gpu_miss_seconds(k, fp16, 4, expert_layout::localized(0)) == doctest::Approx(W / 19.2e9));
  // Eq. 3: the CPU streams at 307.2 GB/s (its roofline) = T_DRAM striped; 1000 tokens are compute-bound.
  CHECK(sys.cpu_seconds(k, fp16, 4, expert_layout::striped()) == doctest::Approx(W / 307.2e9));
  CHECK(sys.cpu_seconds(k, fp16, 1000, expert_layout::striped()) == doctest::Approx(1000 * flops / 90.1e12));
  CHECK(sys.cpu_seconds(k, fp16, 4, expert_layout::localized(3)) == doctest::Approx(W / 19.2e9));
  // Eq. 4: T_Internal = W / 153.6 GB/s (2.29 ms) inside the roofline, versus 256 GFLOP/s.
  CHECK(sys.ndp_seconds(k, fp16, 1) == doctest::Approx(W / 153.6e9));  // T_Internal: 2.29 ms > 1.38 ms of compute
  CHECK(sys.ndp_seconds(k, fp16, 4) == doctest::Approx(4 * flops / 256e9));

  const auto c = sys.price({k, 4, expert_layout::localized(7), false, fp16});
  CHECK(c.exec[0] == doctest::Approx(W / 19.2e9));
  CHECK(c.exec[1] == doctest::Approx(W / 19.2e9));
  CHECK(c.exec[2] == doctest::Approx(4 * flops / 256e9));
  CHECK(c.dram == doctest::Approx(W / 19.2e9));
  CHECK(c.dimm_seconds(device_option::gpu) == doctest::Approx(W / 19.2e9));
  const auto r = sys.price({k, 4, expert_layout::striped(), true, fp16});
  CHECK(r.exec[0] == doctest::Approx(W / 2.04e12));
  CHECK(r.dimm_seconds(device_option::gpu) == 0.0);  // resident: no DIMM read
  CHECK_FALSE(r.allows(device_option::ndp));
}

TEST_CASE("gpu_cpu_ndp_system: switches and activations") {
  const expert_key k{0, 0};
  const auto no_cpu = trimoe({.use_cpu = false});
  CHECK_FALSE(no_cpu.price({k, 4, expert_layout::localized(0), false, fp16}).allows(device_option::cpu));
  const auto no_ndp = trimoe({.use_ndp = false});
  CHECK_FALSE(no_ndp.price({k, 4, expert_layout::localized(0), false, fp16}).allows(device_option::ndp));
  // Activations: 2 · 4 tokens · 4096 · 2 B over PCIe 5 (CPU) and one DIMM's 19.2 GB/s (NDP).
  const auto act = trimoe({.activation_transfer = true});
  CHECK(act.cpu_seconds(k, fp16, 4, expert_layout::striped()) ==
        doctest::Approx(W / 307.2e9 + 2e-6 + 2 * 4 * 4096 * 2.0 / 64e9));
  CHECK(act.ndp_seconds(k, fp16, 4) == doctest::Approx(4 * flops / 256e9 + 2 * 4 * 4096 * 2.0 / 19.2e9));
}

TEST_CASE("gpu_cpu_ndp_system: model kinds and build inputs are checked") {
  const auto gpu = roofline_cost{presets::h100_pcie_gen5(), mixtral};
  const auto cpu = roofline_cost{presets::xeon_8470_amx(), mixtral};
  const auto dimm = roofline_cost{presets::dimm_ndp(), mixtral};
  CHECK_THROWS_WITH_AS(system3(dimm, cpu, dimm), "moepolicy::gpu_cpu_ndp_system: the GPU model must be serial, got parallel_units",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(system3(gpu, dimm, dimm), "moepolicy::gpu_cpu_ndp_system: the CPU model must be serial, got parallel_units",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(system3(gpu, cpu, cpu), "moepolicy::gpu_cpu_ndp_system: the DIMM-NDP model must be parallel_units, got serial",
                       invalid_argument);
  const auto sys = trimoe();
  makespan_problem wrong(4);
  const std::array<step_expert, 1> one{step_expert{{0, 1}, 3, expert_layout::striped(), false, fp16}};
  CHECK_THROWS_WITH_AS(sys.build(one, wrong),
                       "moepolicy::gpu_cpu_ndp_system::build: the problem's num_dimms must equal the DIMM model's 16, got 4",
                       invalid_argument);
  makespan_problem p(16, 8);
  const std::array<step_expert, 1> zero{step_expert{{0, 1}, 0, expert_layout::striped(), false, fp16}};
  CHECK_THROWS_WITH_AS(sys.build(zero, p), "moepolicy::gpu_cpu_ndp_system::build: every load must be >= 1, expert, got 1",
                       invalid_argument);
  sys.build(one, p);
  CHECK(p.size() == 1);
  CHECK(p[0].key == expert_key{0, 1});

  // build_layer skips experts without tokens and keeps their ids.
  const std::array<std::uint32_t, 4> loads{0, 5, 0, 2};
  const std::array<expert_layout, 4> lay{expert_layout::striped(), expert_layout::localized(3), expert_layout::striped(),
                                         expert_layout::striped()};
  const std::array<std::uint8_t, 4> res{0, 0, 0, 1};
  sys.build_layer(9, loads, lay, res, fp16, p);
  REQUIRE(p.size() == 2);
  CHECK(p[0].key == expert_key{9, 1});
  CHECK(p[0].load == 5);
  CHECK(p[0].allows(device_option::ndp));
  CHECK(p[1].key == expert_key{9, 3});
  CHECK(p[1].gpu_resident);
  const std::array<std::uint8_t, 3> short_res{0, 0, 0};
  CHECK_THROWS_WITH_AS(sys.build_layer(0, loads, lay, short_res, fp16, p),
                       "moepolicy::gpu_cpu_ndp_system::build_layer: resident must have one entry per load (4), got 3",
                       invalid_argument);
}
