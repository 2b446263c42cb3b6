// The exact solver on instances worked by hand, and its limits.
#include <doctest/doctest.h>

#include <vector>

#include "moepolicy/ep/exact.hpp"
#include "test_support.hpp"

using namespace moepolicy;

TEST_CASE("small instances worked by hand") {
  // No replication (R = E): 2 GPUs of 2 slots; {8, 1} and {5, 4} -> 9.
  CHECK(ep_exact_max_load(std::vector<double>{8, 5, 4, 1}, 4, 2) == 9);
  // One spare slot on 2 GPUs of 3 slots: replicating the 4 gives 8, 5, 4, 2, 2, 1, packed
  // {8, 2, 1} and {5, 4, 2}: 11 = W / G (replicating the 8 gives 12, the 5 gives 11.5).
  CHECK(ep_exact_max_load(std::vector<double>{8, 5, 4, 4, 1}, 6, 2) == 11);
  // Cardinality binds: 3 slots per GPU and one heavy expert that 1 spare replica halves.
  CHECK(ep_exact_max_load(std::vector<double>{100, 1, 1, 1, 1}, 6, 2) == doctest::Approx(52));
  // Zero loads.
  CHECK(ep_exact_max_load(std::vector<double>{0, 0}, 4, 2) == 0);
}

TEST_CASE("instances beyond the limits are refused by name") {
  CHECK_THROWS_WITH_AS((void)ep_exact_max_load(std::vector<double>(9, 1.0), 12, 2),
                       "moepolicy::ep_exact_max_load: experts must be <= 8, got 9", invalid_argument);
  CHECK_THROWS_WITH_AS((void)ep_exact_max_load(std::vector<double>(4, 1.0), 14, 2),
                       "moepolicy::ep_exact_max_load: replicas must be <= 12, got 14", invalid_argument);
  CHECK_THROWS_WITH_AS((void)ep_exact_max_load(std::vector<double>(4, 1.0), 8, 8),
                       "moepolicy::ep_exact_max_load: gpus must be <= 6, got 8", invalid_argument);
}
