// The expert-cache router (Edge-MoE Alg. 1, §5.1, §5.4), hand-worked from the paper's
// description, plus invariants on random batches.
#include "moepolicy/route/expert_cache_router.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <vector>
#include "../cache/count_allocations.hpp"

using namespace moepolicy;

namespace {

/// A batch: per token, its top-k ids (by score) and the full scores.
struct batch {
  std::size_t E = 0, k = 0;
  std::vector<expert_id> ids = {};
  std::vector<float> weights = {};
  std::vector<float> scores = {};

  void token(std::vector<expert_id> sel, std::vector<float> s) {
    REQUIRE(sel.size() == k);
    REQUIRE(s.size() == E);
    for (expert_id e : sel) ids.push_back(e), weights.push_back(s[e]);
    scores.insert(scores.end(), s.begin(), s.end());
  }
};

struct routed {
  std::vector<expert_id> ids;
  std::vector<float> weights;
  route_result r;
};

routed route(expert_cache_router& router, const batch& b, const std::set<expert_id>& resident, bool with_scores = true) {
  routed out{std::vector<expert_id>(b.ids.size()), std::vector<float>(b.ids.size()), {}};
  out.r = router.route(b.ids, b.weights, with_scores ? std::span<const float>(b.scores) : std::span<const float>{},
                       [&](expert_id e) { return resident.count(e) != 0; }, out.ids, out.weights);
  return out;
}

std::vector<expert_id> row(const routed& r, std::size_t t, std::size_t k) {
  return {r.ids.begin() + static_cast<std::ptrdiff_t>(t * k), r.ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * k)};
}

}  // namespace

TEST_CASE("a low-score expert not on the GPU is replaced by the best resident alternative; the (k+1)-th qualifies") {
  // E = 8, k = 3, α = 0.25. Selected 0 (.30), 1 (.20), 2 (.12); β = .11 (expert 3),
  // T = .1375, R = .0825. Top-score: 0 and 1. Low-score: 2, not resident, not in C.
  // Alternatives in [R, β], resident: 3 (.11, the (k+1)-th) and 5 (.09); 4 (.085) is not
  // resident; 6 (.05) is below R.
  batch b{8, 3};
  b.token({0, 1, 2}, {0.30f, 0.20f, 0.12f, 0.11f, 0.085f, 0.09f, 0.05f, 0.045f});
  expert_cache_router router({.num_experts = 8, .top_k = 3, .alpha = 0.25});
  const routed o = route(router, b, {0, 3, 5, 6});
  CHECK(o.ids == std::vector<expert_id>{0, 1, 3});
  CHECK(o.weights == std::vector<float>{0.30f, 0.20f, 0.11f});
  CHECK(o.r.tokens == 1);
  CHECK(o.r.selections == 3);
  CHECK(o.r.top_score == 2);
  CHECK(o.r.low_score == 1);
  CHECK(o.r.substituted == 1);
  CHECK(o.r.unreplaced == 0);
  CHECK(o.r.full_scores);
  CHECK(o.r.original_mass == doctest::Approx(0.62));
  CHECK(o.r.routed_mass == doctest::Approx(0.61));
  CHECK(o.r.kept_mass == doctest::Approx(0.50));
  CHECK(o.r.mass_preserved() == doctest::Approx(0.61 / 0.62));
  CHECK(o.r.kept_fraction() == doctest::Approx(0.50 / 0.62));
  // If expert 2 is resident it stays.
  const routed kept = route(router, b, {2, 3});
  CHECK(kept.ids == std::vector<expert_id>{0, 1, 2});
  CHECK(kept.r.low_kept_resident == 1);
  CHECK(kept.r.substituted == 0);
}

TEST_CASE("fewer alternatives than low-score experts: the lowest-scoring are replaced, the rest stay") {
  // k = 4, α = 0.5: selected 0 (.30), 1 (.14), 2 (.13), 3 (.12); β = .11 (expert 4),
  // T = .165, R = .055. Low-score 1, 2, 3, none resident; one alternative, 4 (resident).
  batch b{8, 4};
  b.token({0, 1, 2, 3}, {0.30f, 0.14f, 0.13f, 0.12f, 0.11f, 0.05f, 0.10f, 0.05f});
  expert_cache_router router({.num_experts = 8, .top_k = 4, .alpha = 0.5});
  const routed o = route(router, b, {4});
  CHECK(o.ids == std::vector<expert_id>{0, 1, 2, 4});
  CHECK(o.r.low_score == 3);
  CHECK(o.r.substituted == 1);
  CHECK(o.r.unreplaced == 2);
  // Two alternatives (6 resident too, .10): the two lowest go, to the best alternatives.
  const routed two = route(router, b, {4, 6});
  CHECK(two.ids == std::vector<expert_id>{0, 1, 6, 4});
  CHECK(two.r.substituted == 2);
}

TEST_CASE("the top-score set C is batch-wide: another token's top-score expert keeps or replaces a low-score one") {
  // E = 6, k = 2, α = 0.5. Token 0: 0 (.60) top, 1 (.12) low; β = .10 (expert 2).
  // Token 1: 2 (.50) top, 3 (.13) low; β = .11 (expert 1).
  // C = {0, 2}. Nothing is resident.
  batch b{6, 2};
  b.token({0, 1}, {0.60f, 0.12f, 0.10f, 0.08f, 0.05f, 0.05f});
  b.token({2, 3}, {0.10f, 0.11f, 0.50f, 0.13f, 0.08f, 0.08f});
  expert_cache_router router({.num_experts = 6, .top_k = 2, .alpha = 0.5});
  const routed o = route(router, b, {});
  // Token 0's low-score 1 is replaced by 2 (in C, .10 in [.05, .10]).
  CHECK(row(o, 0, 2) == std::vector<expert_id>{0, 2});
  // Token 1's low-score 3: alternatives in [.055, .11] in C: 0 (.10) → replaced. (1 at .11
  // is neither resident nor in C.)
  CHECK(row(o, 1, 2) == std::vector<expert_id>{2, 0});
  CHECK(o.r.top_score == 2);
  CHECK(o.r.substituted == 2);
  // A low-score expert that is in C stays: token 1 selecting 0 as its low-score expert.
  batch c{6, 2};
  c.token({0, 1}, {0.60f, 0.12f, 0.10f, 0.08f, 0.05f, 0.05f});
  c.token({2, 0}, {0.13f, 0.11f, 0.50f, 0.10f, 0.08f, 0.08f});
  const routed p = route(router, c, {});
  CHECK(row(p, 1, 2) == std::vector<expert_id>{2, 0});
  CHECK(p.r.low_kept_resident == 1);
}

TEST_CASE("§5.4: alternatives other tokens of the batch use rank first, by batch size") {
  // The paper's example: token 1 selects {1, 2, 4}, token 2 {1, 5, 4}, token 3 {2, 6, 7};
  // for token 3, 6 is low-score and 4 an alternative (inactive for it), neither on the GPU.
  // α = 0.5. Scores (E = 8, k = 3):
  //   token 1: 1 .35, 2 .30 top; 4 .115 low; β = .085 (expert 0)
  //   token 2: 1 .40, 5 .30 top; 4 .10 low;  β = .08 (expert 0)
  //   token 3: 2 .40, 7 .30 top; 6 .10 low;  β = .09 (expert 4), R = .045
  // C = {1, 2, 5, 7}; 4 is low-score for tokens 1 and 2, so not in C.
  const auto make = [](float five_for_token3) {
    batch b{8, 3};
    b.token({1, 2, 4}, {0.085f, 0.35f, 0.30f, 0.05f, 0.115f, 0.04f, 0.03f, 0.03f});
    b.token({1, 5, 4}, {0.08f, 0.40f, 0.03f, 0.05f, 0.10f, 0.30f, 0.02f, 0.02f});
    b.token({2, 6, 7}, {0.02f, 0.02f, 0.40f, 0.01f, 0.09f, five_for_token3, 0.10f, 0.30f});
    return b;
  };
  expert_cache_router plain({.num_experts = 8, .top_k = 3, .alpha = 0.5});
  expert_cache_router pref({.num_experts = 8, .top_k = 3, .alpha = 0.5, .prefer_batch_shared = true});
  // Token 3 scores 5 at .04 < R: Alg. 1 alone has no alternative for 6 (4 is neither
  // resident nor in C), and no token is changed.
  const batch only4 = make(0.04f);
  const routed o = route(plain, only4, {});
  CHECK(o.r.substituted == 0);
  CHECK(o.r.unreplaced == 3);
  // With the preference, token 3 takes 4, which two other tokens use: {2, 4, 7}.
  const routed q = route(pref, only4, {});
  CHECK(row(q, 2, 3) == std::vector<expert_id>{2, 4, 7});
  CHECK(row(q, 0, 3) == std::vector<expert_id>{1, 2, 4});
  CHECK(q.r.substituted == 1);
  // Token 3 scores 5 at .06 (in [R, β]; 5 is in C as token 2's top-score expert): Alg. 1
  // replaces 6 by 5; the preference still takes 4 (batch size 2) over 5 (batch size 1).
  const batch both = make(0.06f);
  const routed a = route(plain, both, {});
  CHECK(row(a, 2, 3) == std::vector<expert_id>{2, 5, 7});
  CHECK(a.r.substituted == 1);
  CHECK(a.r.unreplaced == 2);
  CHECK(row(route(pref, both, {}), 2, 3) == std::vector<expert_id>{2, 4, 7});
}

TEST_CASE("a selected expert scoring exactly T is low-score (neither set in Alg. 1 as printed)") {
  // k = 2, α = 0.5, β = .25 → T = .375, R = .125. Expert 1 scores .375 exactly.
  batch b{4, 2};
  b.token({0, 1}, {0.5f, 0.375f, 0.25f, 0.125f});
  expert_cache_router router({.num_experts = 4, .top_k = 2, .alpha = 0.5});
  const routed o = route(router, b, {2});
  CHECK(o.r.low_score == 1);
  CHECK(o.ids == std::vector<expert_id>{0, 2});
}

TEST_CASE("α = 0 keeps every routing; without full scores nothing can be substituted") {
  batch b{8, 3};
  b.token({0, 1, 2}, {0.30f, 0.20f, 0.12f, 0.11f, 0.085f, 0.09f, 0.05f, 0.045f});
  expert_cache_router zero({.num_experts = 8, .top_k = 3, .alpha = 0.0});
  const routed o = route(zero, b, {3, 5});
  CHECK(o.ids == b.ids);
  CHECK(o.r.substituted == 0);
  CHECK(o.r.top_score == 3);
  // Top-k weights only (the Granite and Mixtral traces): β counts as 0.
  expert_cache_router router({.num_experts = 8, .top_k = 3, .alpha = 0.3});
  const routed w = route(router, b, {3, 5}, false);
  CHECK(w.ids == b.ids);
  CHECK(w.weights == b.weights);
  CHECK(!w.r.full_scores);
  CHECK(w.r.unscored == 3);
  CHECK(w.r.mass_preserved() == 1.0);
  // Full probability vectors that are zero outside the top-k (the FLAME-MoE CSVs): β = 0.
  batch z{8, 3};
  z.token({0, 1, 2}, {0.05f, 0.03f, 0.02f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
  const routed f = route(router, z, {3, 4, 5, 6, 7});
  CHECK(f.ids == z.ids);
  CHECK(f.r.full_scores);
  CHECK(f.r.unscored == 3);
}

TEST_CASE("without scores the batch passes unchanged with the totals of a zero-scored batch") {
  // Gate weights only: every token keeps its routing and the totals count its mass, the
  // same as routing the batch with scores that are the gate weights and 0 elsewhere.
  batch b{6, 2};
  const std::vector<std::vector<expert_id>> rows = {{0, 3}, {5, 1}, {3, 2}, {4, 0}, {1, 5}};
  const std::vector<std::vector<float>> gates = {
      {0.7f, 0.3f}, {0.55f, 0.45f}, {0.9f, 0.1f}, {0.6f, 0.4f}, {0.5f, 0.5f}};
  for (std::size_t t = 0; t < rows.size(); ++t) {
    std::vector<float> s(6, 0.0f);
    for (std::size_t j = 0; j < 2; ++j) s[rows[t][j]] = gates[t][j];
    b.token(rows[t], s);
  }
  expert_cache_router router({.num_experts = 6, .top_k = 2, .alpha = 0.4});
  const routed w = route(router, b, {1, 3}, false);
  const routed z = route(router, b, {1, 3}, true);
  CHECK(w.ids == b.ids);
  CHECK(w.weights == b.weights);
  CHECK(w.ids == z.ids);
  CHECK(w.weights == z.weights);
  CHECK(!w.r.full_scores);
  CHECK(w.r.tokens == 5);
  CHECK(w.r.selections == 10);
  CHECK(w.r.unscored == z.r.unscored);
  CHECK(w.r.unscored == 10);
  CHECK(w.r.top_score + w.r.low_score + w.r.substituted + w.r.unreplaced + w.r.low_kept_resident == 0);
  CHECK(w.r.original_mass == z.r.original_mass);
  CHECK(w.r.routed_mass == z.r.routed_mass);
  CHECK(w.r.kept_mass == z.r.kept_mass);
  CHECK(w.r.original_mass == doctest::Approx(5.0));
}

TEST_CASE("the output may overwrite the input") {
  batch b{8, 3};
  b.token({0, 1, 2}, {0.30f, 0.20f, 0.12f, 0.11f, 0.085f, 0.09f, 0.05f, 0.045f});
  expert_cache_router router({.num_experts = 8, .top_k = 3, .alpha = 0.25});
  std::vector<expert_id> ids = b.ids;
  std::vector<float> w = b.weights;
  const route_result r = router.route(ids, w, b.scores, [](expert_id e) { return e == 3; }, ids, w);
  CHECK(r.substituted == 1);
  CHECK(ids == std::vector<expert_id>{0, 1, 3});
}

TEST_CASE("invariants on random batches") {
  std::mt19937 rng(42);
  std::gamma_distribution<double> gamma(0.3, 1.0);
  for (std::size_t E : {8u, 32u, 64u}) {
    for (std::size_t k : {2u, 6u}) {
      for (double alpha : {0.0, 0.25, 0.5, 1.0}) {
        for (bool pref : {false, true}) {
          expert_cache_router router({.num_experts = static_cast<std::uint32_t>(E),
                                      .top_k = static_cast<std::uint32_t>(k), .alpha = alpha,
                                      .prefer_batch_shared = pref});
          batch b{E, k};
          const std::size_t tokens = 1 + rng() % 16;
          std::vector<std::size_t> order(E);
          for (std::size_t t = 0; t < tokens; ++t) {
            std::vector<float> s(E);
            double z = 0;
            for (auto& x : s) x = static_cast<float>(gamma(rng)), z += x;
            for (auto& x : s) x = static_cast<float>(x / z);
            std::iota(order.begin(), order.end(), std::size_t{0});
            std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t c) { return s[a] > s[c]; });
            std::vector<expert_id> sel;
            for (std::size_t j = 0; j < k; ++j) sel.push_back(static_cast<expert_id>(order[j]));
            b.token(sel, s);
          }
          std::set<expert_id> resident;
          for (std::size_t e = 0; e < E; ++e) {
            if (rng() % 3 == 0) resident.insert(static_cast<expert_id>(e));
          }
          const routed o = route(router, b, resident);
          CHECK(o.r.selections == o.r.top_score + o.r.low_score + o.r.unscored);
          CHECK(o.r.low_score == o.r.low_kept_resident + o.r.substituted + o.r.unreplaced);
          CHECK(o.r.routed_mass <= o.r.original_mass + 1e-9);
          std::size_t changed = 0;
          for (std::size_t t = 0; t < tokens; ++t) {
            const std::vector<expert_id> out = row(o, t, k);
            const float* st = b.scores.data() + t * E;
            double beta = 0.0;
            for (std::size_t e = 0; e < E; ++e) {
              if (std::find(b.ids.begin() + static_cast<std::ptrdiff_t>(t * k),
                            b.ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * k),
                            e) == b.ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * k)) {
                beta = std::max(beta, static_cast<double>(st[e]));
              }
            }
            CHECK(std::set<expert_id>(out.begin(), out.end()).size() == k);  // k distinct experts
            for (std::size_t j = 0; j < k; ++j) {
              if (out[j] != b.ids[t * k + j]) {
                ++changed;
                // A substitute was not selected by the token and scores at most β.
                CHECK(std::find(b.ids.begin() + static_cast<std::ptrdiff_t>(t * k),
                                b.ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * k), out[j]) ==
                      b.ids.begin() + static_cast<std::ptrdiff_t>((t + 1) * k));
                CHECK(!resident.count(b.ids[t * k + j]));
                // Only low-score experts are replaced, by experts scoring in [R, β].
                CHECK(static_cast<double>(st[b.ids[t * k + j]]) <= (1.0 + alpha) * beta);
                CHECK(static_cast<double>(st[out[j]]) <= beta);
                CHECK(static_cast<double>(st[out[j]]) >= (1.0 - alpha) * beta);
              }
            }
          }
          CHECK(changed == o.r.substituted);
          if (alpha == 0.0) CHECK(o.r.substituted == 0);
        }
      }
    }
  }
}

TEST_CASE("router configuration errors") {
  CHECK_THROWS_WITH_AS(expert_cache_router({.num_experts = 1, .top_k = 1}),
                       "moepolicy::expert_cache_router: num_experts must be in [2, 65536], got 1", invalid_argument);
  CHECK_THROWS_WITH_AS(expert_cache_router({.num_experts = 8, .top_k = 8}),
                       "moepolicy::expert_cache_router: top_k must be in [1, min(num_experts - 1, 64)], got 8",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(expert_cache_router({.num_experts = 8, .top_k = 2, .alpha = 1.5}),
                       "moepolicy::expert_cache_router: alpha must be in [0, 1], got 1.5", invalid_argument);
}

TEST_CASE("routing a batch allocates nothing after construction") {
  if (!test::allocation_counting) return;
  batch b{8, 3};
  for (int t = 0; t < 16; ++t) b.token({0, 1, 2}, {0.30f, 0.20f, 0.12f, 0.11f, 0.085f, 0.09f, 0.05f, 0.045f});
  expert_cache_router router({.num_experts = 8, .top_k = 3, .alpha = 0.25, .prefer_batch_shared = true});
  std::vector<expert_id> ids(b.ids.size());
  std::vector<float> w(b.ids.size());
  test::allocation_counter counter;
  const route_result r = router.route(b.ids, b.weights, b.scores, [](expert_id e) { return e == 3; }, ids, w);
  CHECK(counter.count() == 0);
  CHECK(r.substituted == 16);
}
