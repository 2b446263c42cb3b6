// The prioritised load queue of Edge-MoE §5.2.
#include "moepolicy/predict/prefetch_queue.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
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

TEST_CASE("plan's first depth experts equal a full sort's, below and above 32 candidates, with ties") {
  // The reference: every positive score sorted whole (score descending, then id).
  std::mt19937 rng(7);
  for (std::size_t E : {1u, 2u, 8u, 31u, 32u, 33u, 64u, 160u}) {
    prefetch_queue q(E);
    for (int round = 0; round < 40; ++round) {
      std::vector<float> scores(E);
      // Few distinct values, so that ties are common; about a fifth are 0 (never queued).
      for (float& s : scores) s = static_cast<float>(rng() % 6) * 0.125f;
      std::vector<expert_id> ref;
      for (std::size_t e = 0; e < E; ++e) {
        if (scores[e] > 0.0f) ref.push_back(static_cast<expert_id>(e));
      }
      std::sort(ref.begin(), ref.end(),
                [&](expert_id a, expert_id b) { return scores[a] != scores[b] ? scores[a] > scores[b] : a < b; });
      for (std::size_t depth : {std::size_t{1}, std::size_t{3}, E / 2, E, E + 5}) {
        const std::size_t n = std::min(depth, ref.size());
        REQUIRE(q.plan(3, scores, depth) == n);
        for (std::size_t i = 0; i < n; ++i) {
          const auto got = q.pop();
          REQUIRE(got);
          CHECK(got->key == expert_key{3, ref[i]});
          CHECK(got->score == scores[ref[i]]);
        }
        CHECK(!q.pop());
      }
    }
  }
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
