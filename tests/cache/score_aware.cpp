// Score-aware eviction (Edge-MoE §5.3): lowest windowed average score, inactive experts'
// scores counted, the in-layer shield.
#include "moepolicy/cache/score_aware.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "cache_test_support.hpp"
#include "moepolicy/cache/detail/score_aware_reference.hpp"
#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

namespace {

/// A one-token batch of layer `l` selecting `ids` with full `scores` (or none).
struct one_token {
  std::vector<expert_id> ids;
  std::vector<float> weights;
  std::vector<float> scores;
  layer_id layer = 0;
  [[nodiscard]] batch_view view() const {
    batch_ref ref{0, 0, layer, phase::decode, 0, 1};
    return batch_view{ref, static_cast<std::uint32_t>(ids.size()), {}, ids, weights, scores};
  }
};

}  // namespace

TEST_CASE("the victim has the lowest average score over the window, inactive experts' scores included") {
  expert_cache<score_aware_policy> c({.num_layers = 1, .num_experts = 4, .capacity = 2}, {.window = 2});
  // Step 1: experts 0 and 1 selected; expert 2 scores 0.15 without being selected.
  const one_token s1{{0, 1}, {0.6f, 0.4f}, {0.5f, 0.3f, 0.15f, 0.05f}};
  c.begin_layer(s1.view());
  c.get({0, 0});
  c.get({0, 1});
  c.end_layer(0);
  c.end_step();
  CHECK(c.policy().average_score({0, 0}) == doctest::Approx(0.5));
  CHECK(c.policy().average_score({0, 2}) == doctest::Approx(0.15));
  CHECK(c.policy().victim(0) == expert_key{0, 1});  // 0.3 < 0.5

  // Step 2: experts 2 and 1 selected. Window = steps 1 and 2: averages 0.3, 0.25, 0.375.
  const one_token s2{{2, 1}, {0.75f, 0.25f}, {0.1f, 0.2f, 0.6f, 0.1f}};
  c.begin_layer(s2.view());
  CHECK(c.policy().average_score({0, 1}) == doctest::Approx(0.25));
  // Expert 1 has the lowest average but is shielded for this layer: expert 0 goes.
  CHECK(c.policy().shielded({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 0});
  c.get({0, 2});
  CHECK(!c.contains({0, 0}));
  CHECK(c.get({0, 1}).hit);
  // Both residents shielded: no victim, a third expert would overflow.
  CHECK(!c.policy().victim(0).has_value());
  CHECK(!c.get({0, 3}).inserted);
  CHECK(c.stats().overflows == 1);
  c.end_layer(0);
  CHECK(!c.policy().shielded({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 1});
  c.end_step();

  // Step 3 retires step 1: expert 1 averages (0.2 + 0.9) / 2, expert 2 (0.6 + 0) / 2.
  const one_token s3{{1, 3}, {0.9f, 0.1f}, {0.0f, 0.9f, 0.0f, 0.1f}};
  c.begin_layer(s3.view());
  CHECK(c.policy().average_score({0, 1}) == doctest::Approx(0.55));
  CHECK(c.policy().average_score({0, 2}) == doctest::Approx(0.3));
  CHECK(c.policy().average_score({0, 0}) == doctest::Approx(0.05));
  CHECK(c.policy().victim(0) == expert_key{0, 2});
}

TEST_CASE("without full scores the gate weights count and unselected experts score 0") {
  score_aware_policy p({1, 4}, {.window = 4});
  const one_token a{{0, 1}, {0.75f, 0.25f}, {}};
  const one_token b{{2, 0}, {0.5f, 0.5f}, {}};
  p.on_layer_begin(a.view());
  p.on_layer_end(0);
  p.on_step_end();
  p.on_layer_begin(b.view());
  p.on_layer_end(0);
  CHECK(p.average_score({0, 0}) == doctest::Approx(0.625));
  CHECK(p.average_score({0, 1}) == doctest::Approx(0.125));
  CHECK(p.average_score({0, 2}) == doctest::Approx(0.25));
  CHECK(p.average_score({0, 3}) == doctest::Approx(0.0));
  p.on_insert({0, 0}, {});
  p.on_insert({0, 1}, {});
  p.on_insert({0, 3}, {});
  CHECK(p.victim(0) == expert_key{0, 3});
}

TEST_CASE("shields are per layer and ties go to the least recently used") {
  score_aware_policy p({2, 2}, {.window = 1});
  const one_token l0{{0}, {1.0f}, {}, 0};
  p.on_insert({1, 0}, {});
  p.on_insert({1, 1}, {});
  p.on_insert({0, 0}, {});
  p.on_layer_begin(l0.view());
  // Layer 1's experts both average 0: the one inserted first goes; layer 0's is shielded.
  CHECK(p.victim(0) == expert_key{1, 0});
  p.on_hit({1, 0}, {});
  CHECK(p.victim(0) == expert_key{1, 1});
  p.on_layer_end(1);  // ends another layer: layer 0's shield stays
  CHECK(p.shielded({0, 0}));
  p.on_layer_end(0);
  CHECK(!p.shielded({0, 0}));
  CHECK_THROWS_WITH_AS(score_aware_policy({1, 1}, {.window = 0}),
                       "moepolicy::score_aware_policy: window must be >= 1, got 0", invalid_argument);
}

namespace {

/// Drives the policy and its first implementation (eager re-ranking, kept as the
/// reference) through `t` in lockstep: the same victim before every access, the same
/// outcome of every access, the same victim of every pool after every step.
void same_as_reference(const routing_trace& t, const cache_config& cc, std::uint32_t window, bool gaps = false) {
  expert_cache<score_aware_policy> fast(cc, {.window = window});
  expert_cache<reference::score_aware_policy> ref(cc, {.window = window});
  const std::size_t pools = cc.scope == capacity_scope::per_layer ? cc.num_layers : 1;
  std::size_t accesses = 0, mismatches = 0;
  std::vector<std::uint8_t> seen(cc.num_experts, 0);
  std::size_t step = 0;
  for (const step_ref& s : t.steps()) {
    for (const batch_ref& r : t.batches_of(s)) {
      // With gaps, a layer sits out some steps, so iterations leave its window unread.
      if (gaps && (step + r.layer) % 3 != 0) continue;
      const batch_view b = t.view(r);
      fast.begin_layer(b);
      ref.begin_layer(b);
      for (expert_id e : b.experts) {
        if (seen[e] != 0) continue;
        seen[e] = 1;
        const expert_key k{r.layer, e};
        if (fast.victim_for(k) != ref.victim_for(k)) ++mismatches;
        const access_outcome x = fast.get(k), y = ref.get(k);
        if (x.hit != y.hit || x.inserted != y.inserted || x.evicted != y.evicted) ++mismatches;
        ++accesses;
      }
      for (expert_id e : b.experts) seen[e] = 0;
      fast.end_layer(r.layer);
      ref.end_layer(r.layer);
    }
    fast.end_step();
    ref.end_step();
    ++step;
    for (std::size_t p = 0; p < pools; ++p) {
      if (fast.policy().victim(p) != ref.policy().victim(p)) ++mismatches;
    }
    if (step % 5 == 0) {
      for (std::uint32_t l = 0; l < cc.num_layers; ++l) {
        for (std::uint32_t e = 0; e < cc.num_experts; ++e) {
          const expert_key k{static_cast<layer_id>(l), static_cast<expert_id>(e)};
          if (fast.policy().average_score(k) != ref.policy().average_score(k)) ++mismatches;
        }
      }
    }
  }
  CHECK(accesses > 0);
  CHECK(mismatches == 0);
  CHECK(fast.stats().hits == ref.stats().hits);
  CHECK(fast.stats().evictions == ref.stats().evictions);
}

}  // namespace

TEST_CASE("the lazily ranked pools evict exactly as the eager reference") {
  std::vector<routing_trace> traces;
  traces.push_back(test::synthetic_trace(5, {.layers = 4, .experts = 32, .top_k = 4}));
  traces.push_back(test::synthetic_trace(6, {.layers = 3, .experts = 16, .top_k = 2, .batch = 3}));
  traces.push_back(test::synthetic_trace(7, {.layers = 4, .experts = 16, .top_k = 2, .scores = false}));
  traces.push_back(test::first_requests(test::granite_trace(), 3));  // recorded: top-k weights only
  for (const routing_trace& t : traces) {
    const std::uint32_t L = t.info().num_layers, E = t.info().num_experts;
    for (const std::uint32_t window : {1u, 3u, 8u}) {
      for (const std::uint64_t c : {1u, 3u, E / 2}) {
        same_as_reference(t, {.num_layers = L, .num_experts = E, .capacity = c, .scope = capacity_scope::per_layer},
                          window);
      }
      for (const std::uint64_t c : {7u, 3u * E, L * E / 2}) {
        same_as_reference(t, {.num_layers = L, .num_experts = E, .capacity = c}, window);
      }
      same_as_reference(t, {.num_layers = L, .num_experts = E, .capacity = 3, .scope = capacity_scope::per_layer},
                        window, true);
      same_as_reference(t, {.num_layers = L, .num_experts = E, .capacity = 3u * E}, window, true);
    }
  }
}

TEST_CASE("scores become 2^-32 fixed point exactly as the double product truncates") {
  const auto want = [](float x) { return static_cast<std::int64_t>(static_cast<double>(x) * 4294967296.0); };
  std::vector<float> xs{0.0f,
                        -0.0f,
                        1.0f,
                        -1.0f,
                        0.5f,
                        -1.5f,
                        1e-7f,
                        -1e-7f,
                        1e-30f,
                        2.3283064e-10f,
                        1.0f - 1.0f / 16777216.0f,
                        65535.99f,
                        -65536.5f,
                        8388607.5f,
                        2147483520.0f,
                        -2147483520.0f};
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> bits;
  while (xs.size() < 200000) {
    const float x = std::bit_cast<float>(bits(rng));
    if (std::isfinite(x) && std::fabs(x) < 2147483648.0f) xs.push_back(x);
  }
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 100000; ++i) xs.push_back(unit(rng));
  std::size_t wrong = 0;
  for (const float x : xs) {
    if (moepolicy::detail::fixed_32(x) != want(x)) {
      if (wrong++ < 5) MESSAGE("fixed_32(" << x << ") = " << moepolicy::detail::fixed_32(x) << ", want " << want(x));
    }
  }
  CHECK(wrong == 0);

  // The row update (four at a time where the target allows, the tail one by one) gives
  // the same integers, in rows of every length mod 4, replacing and accumulating.
  std::vector<std::int64_t> row(xs.size(), 0), sum(xs.size(), 0), old(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) old[i] = row[i] = sum[i] = static_cast<std::int64_t>(i % 1000) - 500;
  std::size_t row_wrong = 0;
  float most_wrong = 0.0f;
  for (std::size_t at = 0, len = 1; at < xs.size(); at += len, len = len % 13 + 1) {
    const std::size_t n = std::min(len, xs.size() - at);
    const bool replace = (at / 7) % 2 == 0;
    const float most = replace ? moepolicy::detail::add_fixed_row<true>(&xs[at], &row[at], &sum[at], n)
                               : moepolicy::detail::add_fixed_row<false>(&xs[at], &row[at], &sum[at], n);
    float expect_most = 0.0f;
    for (std::size_t i = at; i < at + n; ++i) {
      const std::int64_t x = want(xs[i]);
      const std::int64_t want_row = replace ? x : old[i] + x;
      const std::int64_t want_sum = replace ? old[i] + x - old[i] : old[i] + x;
      row_wrong += static_cast<std::size_t>(row[i] != want_row) + static_cast<std::size_t>(sum[i] != want_sum);
      expect_most = std::max(expect_most, std::fabs(xs[i]));
    }
    most_wrong = std::max(most_wrong, std::fabs(most - expect_most));
  }
  CHECK(row_wrong == 0);
  CHECK(most_wrong == 0.0f);
}

TEST_CASE("large scores rank by the rounded averages, where the sums would not") {
  // One layer, one pool of 2, three tokens in one batch. Expert 0 scores 1.75 · 2^21 once,
  // a sum of S = 1.75 · 2^53 in units of 2^-32; expert 1 scores 2^-31 more, S + 2. Both
  // sums are exact doubles, but their averages S / 3 and (S + 2) / 3 round to the same
  // double, so the tie goes to the least recently used, expert 1, as in the first
  // implementation; ranking by the sums would evict expert 0.
  const float x = 3670016.0f;        // 1.75 · 2^21
  const float tiny = 4.656613e-10f;  // 2^-31
  const std::vector<float> scores{x, x, 0.0f, 0.0f, 0.0f, tiny};
  const std::vector<expert_id> ids{0, 0, 0};
  const std::vector<float> weights{1.0f, 1.0f, 1.0f};
  const std::vector<std::uint32_t> positions{0, 1, 2};
  const batch_view b{batch_ref{0, 0, 0, phase::decode, 0, 3}, 1, positions, ids, weights, scores};
  const cache_shape shape{.num_layers = 1, .num_experts = 2, .scope = capacity_scope::per_layer};
  score_aware_policy p(shape, {.window = 2});
  reference::score_aware_policy ref(shape, {.window = 2});
  for (const expert_id e : {expert_id{1}, expert_id{0}}) {  // expert 1 used first
    p.on_insert({0, e}, {});
    ref.on_insert({0, e}, {});
  }
  p.on_layer_begin(b);
  ref.on_layer_begin(b);
  p.on_layer_end(0);
  ref.on_layer_end(0);
  CHECK(p.average_score({0, 0}) == p.average_score({0, 1}));
  CHECK(ref.victim(0) == expert_key{0, 1});
  CHECK(p.victim(0) == expert_key{0, 1});
  // Within bounds, the same layer's sums decide: with small scores expert 0 goes.
  const std::vector<float> small{0.25f, 0.75f, 0.25f, 0.75f, 0.25f, 0.75f};
  const batch_view s{batch_ref{0, 1, 0, phase::decode, 0, 3}, 1, positions, ids, weights, small};
  score_aware_policy q(shape, {.window = 1});
  for (const expert_id e : {expert_id{1}, expert_id{0}}) q.on_insert({0, e}, {});
  q.on_layer_begin(s);
  q.on_layer_end(0);
  CHECK(q.victim(0) == expert_key{0, 0});
}

namespace {

/// Drives `detail::shielded_ranking` and the eager ranking of the first implementation
/// with the same random events over scores with many ties (a cache's order of calls: a
/// layer's begin, its accesses and evictions, its end; step ends when `steps`), and counts
/// the pools whose lowest member differs, asked after every event.
std::size_t ranking_mismatches(const cache_shape& shape, bool steps, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<double> score(shape.slots(), 0.0);
  detail::shielded_ranking fast(shape);
  reference::detail::eager_shielded_ranking eager(shape);
  const auto fast_rank = [&](std::size_t f) { return detail::heap_rank{score[f], fast.last_use(f)}; };
  const auto eager_rank = [&](std::size_t f) { return detail::heap_rank{score[f], eager.last_use(f)}; };
  std::vector<std::uint8_t> resident(shape.slots(), 0);
  const auto draw = [&](std::uint32_t n) { return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng); };
  std::size_t mismatches = 0;
  const auto compare = [&] {
    for (std::size_t p = 0; p < shape.partitions(); ++p) {
      if (fast.top(p, fast_rank) != eager.top(p)) ++mismatches;
    }
  };
  for (int step = 0; step < 40; ++step) {
    for (std::uint32_t l = 0; l < shape.num_layers; ++l) {
      const std::size_t base = std::size_t{l} * shape.num_experts;
      for (std::uint32_t e = 0; e < shape.num_experts; ++e) score[base + e] = draw(4) * 0.25;
      std::vector<expert_id> selected;
      for (std::uint32_t i = 0; i < 3; ++i) selected.push_back(static_cast<expert_id>(draw(shape.num_experts)));
      fast.begin_layer(base, shape.num_experts, selected, fast_rank);
      eager.begin_layer(base, shape.num_experts, selected, eager_rank);
      compare();
      for (int a = 0; a < 12; ++a) {
        // Accesses mostly to this layer, some to others (prefetches); evict the victim or
        // a random resident.
        const std::uint32_t layer = draw(4) == 0 ? draw(shape.num_layers) : l;
        const std::size_t f = std::size_t{layer} * shape.num_experts + draw(shape.num_experts);
        switch (draw(4)) {
          case 0:
            if (const auto v = eager.top(shape.scope == capacity_scope::per_layer ? layer : 0)) {
              fast.evict(*v);
              eager.evict(*v);
              resident[*v] = 0;
            }
            break;
          case 1:
            if (resident[f] != 0) {
              fast.evict(f);
              eager.evict(f);
              resident[f] = 0;
            }
            break;
          default:
            if (resident[f] != 0) {
              fast.hit(f, fast_rank);
              eager.hit(f, eager_rank);
            } else {
              fast.insert(f, fast_rank);
              eager.insert(f, eager_rank);
              resident[f] = 1;
            }
        }
        compare();
      }
      fast.end_layer(static_cast<layer_id>(l), fast_rank);
      eager.end_layer(static_cast<layer_id>(l), eager_rank);
      compare();
    }
    if (steps) {
      for (double& s : score) s = draw(4) * 0.25;
      fast.rerank_all(fast_rank);
      eager.rerank_all(eager_rank);
      compare();
    }
  }
  return mismatches;
}

}  // namespace

TEST_CASE("the ranking per layer, with a tree over layers for a shared pool, has the eager ranking's lowest") {
  for (const capacity_scope scope : {capacity_scope::shared, capacity_scope::per_layer}) {
    for (const std::uint32_t layers : {1u, 3u, 5u, 8u}) {
      for (const bool steps : {false, true}) {
        for (std::uint32_t seed = 0; seed < 4; ++seed) {
          CAPTURE(layers);
          CAPTURE(steps);
          CHECK(ranking_mismatches({.num_layers = layers, .num_experts = 6, .scope = scope}, steps, seed) == 0);
        }
      }
    }
  }
}
