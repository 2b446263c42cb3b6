#include "moepolicy/sim/timed_residency.hpp"

#include <doctest/doctest.h>

#include <array>

using namespace moepolicy;

namespace {
constexpr tier_id host = 0, gpu = 1;
}

TEST_CASE("copies exist before the run only by preload, and after it only by a transfer's receipt") {
  timed_residency res(2, 4, 2);
  res.preload({0, 1}, host, fp16);
  CHECK(res.usable({0, 1}, host, 0.0));
  CHECK(res.stats(host).preloads == 1);
  res.seal();
  CHECK_THROWS_WITH_AS(res.preload({0, 2}, gpu, fp16),
                       "moepolicy::timed_residency::preload: the run has begun (seal() was called): a copy needs a "
                       "transfer, tier, got 1",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(res.install({0, 2}, gpu, fp16, 100, transfer_receipt{}),
                       "moepolicy::timed_residency::install: a copy needs the receipt of its transfer, got an empty "
                       "receipt for tier, got 1",
                       invalid_argument);

  timeline tl;
  const resource_id pcie = tl.add_resource("pcie", resource_kind::link);
  const std::array<hop, 1> route{{{pcie, 2.0, 100}}};
  const transfer_receipt r = tl.transfer(1.0, route, 100, cost_kind::prefetch);
  CHECK_THROWS_WITH_AS(res.install({0, 2}, gpu, fp16, 200, r),
                       "moepolicy::timed_residency::install: the receipt carried fewer bytes than the copy needs "
                       "(200), got 100",
                       invalid_argument);
  const std::array<hop, 1> read_only{{{tl.add_resource("dram", resource_kind::memory), 1.0, 0}}};
  tl.enqueue(0.0, read_only, 100, cost_kind::prefetch, 0);
  tl.drain();
  REQUIRE(tl.landed().size() == 1);
  CHECK_THROWS_WITH_AS(res.install({0, 2}, gpu, fp16, 100, tl.landed()[0]),
                       "moepolicy::timed_residency::install: a copy needs a transfer that crossed a link, got a "
                       "memory-only job's receipt for tier, got 1",
                       invalid_argument);
  res.install({0, 2}, gpu, fp16, 100, r);
  // Usable only once it has landed, at 3.
  CHECK(res.present({0, 2}, gpu));
  CHECK_FALSE(res.usable({0, 2}, gpu, 2.9));
  CHECK(res.usable({0, 2}, gpu, 3.0));
  CHECK(res.ready_at({0, 2}, gpu) == 3.0);
  CHECK(res.bits({0, 2}, gpu) == fp16);
  CHECK(res.count(0, gpu) == 1);
  CHECK(res.stats(gpu).installs == 1);
  CHECK(res.stats(gpu).installed_bytes == tl.accounts().link_bytes(cost_kind::prefetch));
  res.drop({0, 2}, gpu);
  CHECK_FALSE(res.present({0, 2}, gpu));
  CHECK(res.ready_at({0, 2}, gpu) == timed_residency::never);
  CHECK(res.stats(gpu).drops == 1);
  res.drop({0, 2}, gpu);  // absent: nothing
  CHECK(res.stats(gpu).drops == 1);
}

TEST_CASE("the residency table checks its shape and its keys") {
  CHECK_THROWS_WITH_AS(timed_residency(0, 4, 2),
                       "moepolicy::timed_residency::timed_residency: layers must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(timed_residency(1, 4, 256),
                       "moepolicy::timed_residency::timed_residency: tiers must be in [1, 255], got 256",
                       invalid_argument);
  timed_residency res(2, 4, 2);
  CHECK_THROWS_WITH_AS(res.preload({2, 0}, host, fp16),
                       "moepolicy::timed_residency::preload: layer out of range, got 2", invalid_argument);
  CHECK_THROWS_WITH_AS(res.preload({0, 4}, host, fp16),
                       "moepolicy::timed_residency::preload: expert out of range, got 4", invalid_argument);
  CHECK_THROWS_WITH_AS(res.preload({0, 0}, 2, fp16), "moepolicy::timed_residency::preload: tier out of range, got 2",
                       invalid_argument);
}
