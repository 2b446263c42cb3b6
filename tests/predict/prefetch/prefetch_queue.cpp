// The prioritised load queue of Edge-MoE §5.2.
#include "moepolicy/predict/prefetch_queue.hpp"

#include <doctest/doctest.h>

#include <vector>
#include "../../cache/count_allocations.hpp"

using namespace moepolicy;

TEST_CASE("plan keeps the depth best predicted experts, leaves out residents, pops best first") {
  prefetch_queue q(8);
  const std::vector<float> scores{0.1f, 0.0f, 0.7f, 0.3f, 0.7f, 0.05f, 0.2f, 0.0f};
  // Top 4: 2 (.7), 4 (.7, tie: higher id second), 3 (.3), 6 (.2); 4 is resident.
  CHECK(q.plan(5, scores, 4, [](expert_id e) { return e == 4; }) == 3);
  CHECK(q.size() == 3);
  CHECK(q.pending()[0].key == expert_key{5, 2});
  const auto a = q.pop();
  REQUIRE(a);
  CHECK(a->key == expert_key{5, 2});
  CHECK(a->score == 0.7f);
  CHECK(q.pop()->key == expert_key{5, 3});
  // The layer's true scores arrive: the rest is dropped.
  q.clear();
  CHECK(q.empty());
  CHECK(!q.pop());
  // Zero scores are never queued, whatever the depth.
  CHECK(q.plan(0, scores, 8) == 6);
}

TEST_CASE("push inserts in score order") {
  prefetch_queue q(3);
  CHECK(q.push({0, 1}, 0.2f));
  CHECK(q.push({0, 2}, 0.9f));
  CHECK(q.push({0, 3}, 0.5f));
  CHECK(!q.push({0, 4}, 1.0f));  // full
  CHECK(q.pop()->key == expert_key{0, 2});
  CHECK(q.push({0, 4}, 0.1f));  // room again
  CHECK(q.pop()->key == expert_key{0, 3});
  CHECK(q.pop()->key == expert_key{0, 1});
  CHECK(q.pop()->key == expert_key{0, 4});
  CHECK_THROWS_WITH_AS(prefetch_queue(0), "moepolicy::prefetch_queue: capacity must be in [1, 65536], got 0",
                       invalid_argument);
}

TEST_CASE("planning and popping allocate nothing after construction") {
  if (!test::allocation_counting) return;
  prefetch_queue q(8);
  const std::vector<float> scores{0.1f, 0.0f, 0.7f, 0.3f, 0.7f, 0.05f, 0.2f, 0.0f};
  test::allocation_counter counter;
  q.plan(1, scores, 4, [](expert_id e) { return e == 4; });
  while (q.pop()) {
  }
  q.push({0, 1}, 0.5f);
  q.clear();
  CHECK(counter.count() == 0);
}
