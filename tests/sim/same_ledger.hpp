// A test helper of the timed replays (offload_replay, edge_replay): two ledgers agree on
// every resource's busy seconds and bytes by kind, operations and stall, bit for bit.
#pragma once

#include <cstddef>

#include <doctest/doctest.h>

#include "moepolicy/sim/timeline.hpp"

namespace moepolicy::test {

inline void check_same_ledger(const ledger& a, const ledger& b) {
  REQUIRE(a.resources.size() == b.resources.size());
  for (std::size_t i = 0; i < a.resources.size(); ++i) {
    const resource_account& x = a.resources[i];
    const resource_account& y = b.resources[i];
    CHECK(x.busy_by == y.busy_by);
    CHECK(x.bytes_by == y.bytes_by);
    CHECK(x.operations == y.operations);
    CHECK(x.stall_seconds == y.stall_seconds);
  }
}

}  // namespace moepolicy::test
