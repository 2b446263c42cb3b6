// The EP problem's shapes: the load view, the placement's three maps, the measures
// (GPU loads, balancedness, moves) and the checks of bad input.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/ep/problem.hpp"
#include "test_support.hpp"

using namespace moepolicy;

TEST_CASE("a placement derives counts and logical_to_physical from its slots") {
  ep_placement p(1, 3, 6);
  const std::vector<std::int32_t> slots = {0, 1, 0, 2, 0, 1};
  std::copy(slots.begin(), slots.end(), p.physical_to_logical_row(0).begin());
  p.rank_by_slot(0);
  p.finish();
  CHECK(p.max_replicas() == 3);
  CHECK(std::vector<std::int32_t>(p.logical_count(0).begin(), p.logical_count(0).end()) ==
        std::vector<std::int32_t>{3, 2, 1});
  CHECK(std::vector<std::int32_t>(p.logical_to_physical(0, 0).begin(), p.logical_to_physical(0, 0).end()) ==
        std::vector<std::int32_t>{0, 2, 4});
  CHECK(std::vector<std::int32_t>(p.logical_to_physical(0, 2).begin(), p.logical_to_physical(0, 2).end()) ==
        std::vector<std::int32_t>{3, -1, -1});
}

TEST_CASE("GPU loads split an expert's load evenly among its replicas; balancedness is mean over max") {
  ep_placement p(1, 3, 6);
  const std::vector<std::int32_t> slots = {0, 1, 0, 2, 0, 1};  // GPUs {0,1}, {0,2}, {0,1}
  std::copy(slots.begin(), slots.end(), p.physical_to_logical_row(0).begin());
  p.rank_by_slot(0);
  p.finish();
  const std::vector<double> w = {30, 10, 4};
  const ep_load_view loads(w, 1, 3);
  const std::vector<std::int32_t> before = {0, 1, 2, 0, 0, 1};
  const auto s = ep_evaluate(loads, p, 3, before);
  CHECK(s.gpu_loads == std::vector<double>{15, 14, 15});
  CHECK(s.max_load[0] == 15);
  CHECK(s.balancedness[0] == doctest::Approx(44.0 / 3.0 / 15.0));
  CHECK(s.moved[0] == 2);  // slots 2 and 3 changed
  CHECK(s.moved_total == 2);
  const std::vector<double> zero(3, 0.0);
  CHECK(ep_evaluate(ep_load_view(zero, 1, 3), p, 3).balancedness[0] == 1.0);
}

TEST_CASE("bad shapes and loads name the function, the problem and the value") {
  const std::vector<double> w(6, 1.0);
  CHECK_THROWS_WITH_AS(ep_load_view(w, 2, 4),
                       "moepolicy::ep_load_view: values must hold layers * experts = 8 loads, got 6", invalid_argument);
  CHECK_THROWS_WITH_AS(ep_load_view(w, 0, 6), "moepolicy::ep_load_view: layers must be in [1, 2^20], got 0",
                       invalid_argument);
  std::vector<double> bad = w;
  bad[4] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS(detail::ep::check_loads("f", ep_load_view(bad, 2, 3)),
                       "moepolicy::f: load of layer 1, expert 1 must be finite and >= 0, got nan", invalid_argument);
  bad[4] = std::numeric_limits<double>::infinity();
  CHECK_THROWS_AS(detail::ep::check_loads("f", ep_load_view(bad, 2, 3)), invalid_argument);
  ep_placement p(2, 3, 6);
  CHECK_THROWS_WITH_AS((void)ep_evaluate(ep_load_view(w, 1, 6), p, 3),
                       "moepolicy::ep_evaluate: placement layers must equal the load matrix's 1, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS((void)ep_evaluate(ep_load_view(w, 2, 3), p, 4),
                       "moepolicy::ep_evaluate: gpus must divide the 6 slots, got 4", invalid_argument);
  std::vector<std::uint32_t> seen;
  const std::vector<std::int32_t> missing = {0, 1, 1, 1};
  CHECK_THROWS_WITH_AS(detail::ep::check_current("g", missing, 1, 3, 4, seen),
                       "moepolicy::g: current placement of layer 0 must hold every logical expert; missing, got 2",
                       invalid_argument);
  const std::vector<std::int32_t> outside = {0, 1, 2, 7};
  CHECK_THROWS_WITH_AS(detail::ep::check_current("g", outside, 1, 3, 4, seen),
                       "moepolicy::g: current placement of layer 0, slot 3 must name a logical expert in [0, 3), got 7",
                       invalid_argument);
}

TEST_CASE("GPU speeds from DeviceCost models: tokens over the time the model prices") {
  const std::vector<roofline_cost> gpus{{presets::h100_sxm_gen4(), models::mixtral_8x7b()},
                                        {presets::rtx_a6000(), models::mixtral_8x7b()}};
  const auto speeds = ep_gpu_speeds(std::span<const roofline_cost>(gpus), 4096, bitwidth{16});
  REQUIRE(speeds.size() == 2);
  CHECK(speeds[0] == doctest::Approx(4096.0 / gpus[0].compute_seconds({}, bitwidth{16}, 4096)));
  CHECK(speeds[1] == doctest::Approx(4096.0 / gpus[1].compute_seconds({}, bitwidth{16}, 4096)));
  // The H100 computes a large batch faster than the A6000.
  CHECK(speeds[0] > 2.0 * speeds[1]);
  CHECK_THROWS_WITH_AS((void)ep_gpu_speeds(std::span<const roofline_cost>(gpus), 0, bitwidth{16}),
                       "moepolicy::ep_gpu_speeds: tokens must be > 0, got 0", invalid_argument);
}
