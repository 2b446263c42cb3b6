// The HybriMoE-like eviction policy: lowest moving average of the router score, the
// in-layer shield, ties by recency, and its configuration errors.
#include "moepolicy/cache/ema_score.hpp"

#include <doctest/doctest.h>

#include <vector>

#include "moepolicy/cache/any_eviction_policy.hpp"
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

TEST_CASE("each visit of a layer folds its batch into the moving average: S <- keep S + (1 - keep) s") {
  ema_score_policy p({1, 4}, {.keep = 0.5});
  const one_token a{{0, 1}, {0.75f, 0.25f}, {}};
  p.on_layer_begin(a.view());
  CHECK(p.score({0, 0}) == doctest::Approx(0.375));
  CHECK(p.score({0, 1}) == doctest::Approx(0.125));
  CHECK(p.score({0, 2}) == 0.0);  // unselected: s = 0
  p.on_layer_end(0);
  // Full scores count every expert, selected or not.
  const one_token b{{2, 0}, {0.5f, 0.5f}, {0.4f, 0.0f, 0.4f, 0.2f}};
  p.on_layer_begin(b.view());
  CHECK(p.score({0, 0}) == doctest::Approx(0.5 * 0.375 + 0.5 * 0.4));
  CHECK(p.score({0, 1}) == doctest::Approx(0.0625));
  CHECK(p.score({0, 3}) == doctest::Approx(0.1));
  p.on_layer_end(0);
}

TEST_CASE("the victim has the lowest average, never an expert of the layer in progress, ties by recency") {
  expert_cache<ema_score_policy> c({.num_layers = 2, .num_experts = 4, .capacity = 2}, {.keep = 0.7});
  const one_token l0{{0, 1}, {0.9f, 0.1f}, {}, 0};
  c.begin_layer(l0.view());
  c.get({0, 0});
  c.get({0, 1});
  // Both residents are shielded while layer 0 runs.
  CHECK(c.policy().shielded({0, 0}));
  CHECK(!c.policy().victim(0).has_value());
  CHECK(!c.get({0, 2}).inserted);
  CHECK(c.stats().overflows == 1);
  c.end_layer(0);
  CHECK(c.policy().victim(0) == expert_key{0, 1});  // 0.03 < 0.27
  // Layer 1's experts start at 0; a layer-1 expert displaces the lowest of layer 0.
  const one_token l1{{2, 3}, {0.5f, 0.5f}, {}, 1};
  c.begin_layer(l1.view());
  c.get({1, 2});
  CHECK(!c.contains({0, 1}));
  CHECK(c.contains({0, 0}));
  c.get({1, 3});  // evicts (0, 0): layer 1's (1, 2) is shielded
  CHECK(!c.contains({0, 0}));
  c.end_layer(1);
  // Equal averages: the least recently used goes first.
  CHECK(c.policy().score({1, 2}) == c.policy().score({1, 3}));
  CHECK(c.policy().victim(0) == expert_key{1, 2});
  c.get({1, 2});
  CHECK(c.policy().victim(0) == expert_key{1, 3});
}

TEST_CASE("ema-score by name, and a bad keep factor is an error naming the value") {
  CHECK(std::get<ema_score_config>(eviction_config_by_name("ema-score")).keep == 0.7);
  CHECK_THROWS_WITH_AS(ema_score_policy({1, 4}, {.keep = 1.0}),
                       "moepolicy::ema_score_policy: keep must be in [0, 1), got 1", invalid_argument);
  CHECK_THROWS_WITH_AS(ema_score_policy({1, 4}, {.keep = -0.5}),
                       "moepolicy::ema_score_policy: keep must be in [0, 1), got -0.5", invalid_argument);
}
