// LRU with confidence stickiness and prediction-gated admission (CXL-MoE §3).
#include "moepolicy/cache/sticky_lru.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/cache/expert_cache.hpp"

using namespace moepolicy;

namespace {

/// The policy's earlier order, the reference: one heap per pool over (sticky ? 1 : 0,
/// recency stamp) ranks, ties to the lower slot; the same rules otherwise.
class heap_sticky_lru {
 public:
  using config_type = sticky_lru_config;

  heap_sticky_lru(const cache_shape& shape, const sticky_lru_config& cfg)
      : shape_(shape),
        cfg_(cfg),
        heap_(shape),
        hint_conf_(shape.slots(), 0.0f),
        hint_step_(shape.slots(), never),
        sticky_until_(shape.slots(), never) {}

  void on_insert(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    const bool sticky = cfg_.stickiness && i.prefetch && i.confidence >= cfg_.sticky_threshold;
    if (sticky) sticky_until_[f] = steps_ + cfg_.sticky_steps;
    heap_.push(f, {sticky ? 1.0 : 0.0, ++clock_});
  }
  void on_hit(expert_key k, const access_info&) noexcept {
    const std::size_t f = shape_.flat(k);
    sticky_until_[f] = never;
    heap_.update(f, {0.0, ++clock_});
  }
  void on_evict(expert_key k) noexcept {
    const std::size_t f = shape_.flat(k);
    sticky_until_[f] = never;
    heap_.erase(f);
  }
  void on_prefetch(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    if (!cfg_.stickiness || i.confidence < cfg_.sticky_threshold) return;
    sticky_until_[f] = steps_ + cfg_.sticky_steps;
    heap_.update(f, {1.0, heap_.rank(f).secondary});
  }
  void on_hint(expert_key k, float confidence) noexcept {
    const std::size_t f = shape_.flat(k);
    hint_conf_[f] = confidence;
    hint_step_[f] = steps_;
  }
  void on_step_end() noexcept {
    ++steps_;
    for (std::size_t f = 0; f < sticky_until_.size(); ++f) {
      if (sticky_until_[f] == never || sticky_until_[f] > steps_) continue;
      sticky_until_[f] = never;
      if (heap_.contains(f)) heap_.update(f, {0.0, heap_.rank(f).secondary});
    }
  }
  [[nodiscard]] bool admit(expert_key k, const access_info&, bool) const noexcept {
    const std::size_t f = shape_.flat(k);
    return !cfg_.gated_admission || (hint_step_[f] != never && steps_ - hint_step_[f] < cfg_.hint_steps &&
                                     hint_conf_[f] >= cfg_.admit_threshold);
  }
  [[nodiscard]] bool sticky(expert_key k) const noexcept {
    const std::size_t f = shape_.flat(k);
    return heap_.contains(f) && heap_.rank(f).primary > 0.0;
  }
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = heap_.top(part);
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();
  cache_shape shape_;
  sticky_lru_config cfg_;
  detail::partitioned_heap heap_;
  std::uint64_t clock_ = 0, steps_ = 0;
  std::vector<float> hint_conf_;
  std::vector<std::uint64_t> hint_step_, sticky_until_;
};
static_assert(EvictionPolicy<heap_sticky_lru>);

}  // namespace

TEST_CASE("a demand miss is cached only when the predictor flagged it, within the hint's lifetime") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 4});
  CHECK(!c.get({0, 1}).inserted);  // not flagged: served, not cached (even with room)
  CHECK(c.stats().rejections == 1);
  c.hint({0, 1}, 0.6f);
  CHECK(c.policy().flagged({0, 1}));
  CHECK(c.get({0, 1}).inserted);
  c.hint({0, 2}, 0.4f);  // below admit_threshold 0.5
  CHECK(!c.get({0, 2}).inserted);
  c.hint({0, 3}, 0.9f);
  c.end_step();  // a hint lives for one step boundary by default
  CHECK(!c.policy().flagged({0, 3}));
  CHECK(!c.get({0, 3}).inserted);
  // Without the gate every miss is cached.
  expert_cache<sticky_lru_policy> open({.num_layers = 1, .num_experts = 8, .capacity = 4}, {.gated_admission = false});
  CHECK(open.get({0, 1}).inserted);
}

TEST_CASE("a high-confidence prefetch outranks a more recently used low-confidence entry") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 2});
  c.prefetch({0, 0}, 0.9f);  // sticky
  c.prefetch({0, 1}, 0.6f);  // admitted (a prefetch), not sticky
  CHECK(c.policy().sticky({0, 0}));
  CHECK(!c.policy().sticky({0, 1}));
  CHECK(c.get({0, 1}).hit);
  // Plain LRU would evict 0 (least recent); stickiness protects it.
  CHECK(c.policy().victim(0) == expert_key{0, 1});
  c.hint({0, 2}, 1.0f);
  c.get({0, 2});
  CHECK(c.contains({0, 0}));
  CHECK(!c.contains({0, 1}));
  // Using the sticky entry ends its protection: plain LRU again.
  CHECK(c.get({0, 0}).hit);
  CHECK(!c.policy().sticky({0, 0}));
  CHECK(c.policy().victim(0) == expert_key{0, 2});
}

TEST_CASE("with stickiness off the policy is LRU with gated admission") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 2}, {.stickiness = false});
  c.prefetch({0, 0}, 1.0f);  // would be sticky; here only admitted
  c.prefetch({0, 1}, 0.6f);
  CHECK(!c.policy().sticky({0, 0}));
  CHECK(c.get({0, 1}).hit);
  CHECK(c.policy().victim(0) == expert_key{0, 0});  // least recently used, unprotected
  c.prefetch({0, 0}, 1.0f);                         // a re-prefetch does not make it sticky either
  CHECK(!c.policy().sticky({0, 0}));
  CHECK(!c.get({0, 3}).inserted);  // the admission gate still holds
}

TEST_CASE("when every resident is sticky the least recently used sticky one goes; stickiness lapses") {
  expert_cache<sticky_lru_policy> c({.num_layers = 1, .num_experts = 8, .capacity = 2}, {.sticky_steps = 2});
  c.prefetch({0, 0}, 0.95f);
  c.prefetch({0, 1}, 0.85f);
  CHECK(c.policy().victim(0) == expert_key{0, 0});
  c.hint({0, 5}, 1.0f);
  c.get({0, 5});  // evicts 0: both sticky, 0 older
  CHECK(!c.contains({0, 0}));
  c.end_step();
  CHECK(c.policy().sticky({0, 1}));
  c.end_step();  // two step ends without use: 1 is ordinary again
  CHECK(!c.policy().sticky({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 1});
  // A re-prefetch of a resident at high confidence makes it sticky without refreshing recency.
  c.prefetch({0, 1}, 0.9f);
  CHECK(c.policy().sticky({0, 1}));
  CHECK(c.policy().victim(0) == expert_key{0, 5});
  c.prefetch({0, 5}, 0.9f);
  CHECK(c.policy().victim(0) == expert_key{0, 1});  // both sticky: 1 is older
}

TEST_CASE("sticky LRU configuration errors") {
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.admit_threshold = 1.5f}),
                       "moepolicy::sticky_lru_policy: admit_threshold must be in [0, 1], got 1.5", invalid_argument);
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.sticky_threshold = -0.5f}),
                       "moepolicy::sticky_lru_policy: sticky_threshold must be in [0, 1], got -0.5", invalid_argument);
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.hint_steps = 0}),
                       "moepolicy::sticky_lru_policy: hint_steps must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(sticky_lru_policy({1, 1}, {.sticky_steps = 0}),
                       "moepolicy::sticky_lru_policy: sticky_steps must be >= 1, got 0", invalid_argument);
}

TEST_CASE("the stamp-ordered lists choose the victims of the reference heap, event for event") {
  // Random demand uses, prefetches (resident ones re-stick), hints, erasures and step ends
  // on small pools, so that every pool often holds only sticky members, stickiness lapses
  // before and after the cursor, and the cursor's own member leaves or turns sticky.
  constexpr std::uint32_t L = 3, E = 6;
  const std::vector<sticky_lru_config> configs{
      {},
      {.sticky_steps = 1},
      {.gated_admission = false, .sticky_threshold = 0.3f, .sticky_steps = 3},
      {.stickiness = false},
      {.admit_threshold = 0.2f, .sticky_threshold = 0.6f, .hint_steps = 2, .sticky_steps = 5}};
  std::size_t runs = 0;
  for (const capacity_scope scope : {capacity_scope::shared, capacity_scope::per_layer}) {
    for (const std::uint64_t capacity : {1u, 2u, 4u, 5u}) {
      for (const sticky_lru_config& pc : configs) {
        const cache_config cc{.num_layers = L, .num_experts = E, .capacity = capacity, .scope = scope};
        expert_cache<sticky_lru_policy> fast(cc, pc);
        expert_cache<heap_sticky_lru> ref(cc, pc);
        std::mt19937 rng(static_cast<std::uint32_t>(1000 * runs + 7));
        std::uniform_int_distribution<std::uint32_t> layer(0, L - 1), expert(0, E - 1), op(0, 99);
        std::uniform_real_distribution<float> conf(0.0f, 1.0f);
        std::size_t differ = 0;
        for (int i = 0; i < 2000; ++i) {
          const expert_key k{static_cast<layer_id>(layer(rng)), static_cast<expert_id>(expert(rng))};
          const std::uint32_t o = op(rng);
          if (o < 40) {
            const access_outcome a = fast.get(k), b = ref.get(k);
            if (a.hit != b.hit || a.inserted != b.inserted || a.evicted != b.evicted) ++differ;
          } else if (o < 70) {
            const float c = conf(rng);
            if (fast.prefetch(k, c) != ref.prefetch(k, c)) ++differ;
          } else if (o < 88) {
            const float c = conf(rng);
            fast.hint(k, c);
            ref.hint(k, c);
          } else if (o < 92) {
            if (fast.contains(k) != ref.contains(k)) ++differ;
            if (fast.contains(k)) {
              fast.erase(k);
              ref.erase(k);
            }
          } else {
            fast.end_step();
            ref.end_step();
          }
          for (std::size_t part = 0; part < cc.shape().partitions(); ++part) {
            if (fast.policy().victim(part) != ref.policy().victim(part)) ++differ;
          }
          for (std::uint32_t l = 0; l < L; ++l) {
            for (std::uint32_t e = 0; e < E; ++e) {
              const expert_key x{static_cast<layer_id>(l), static_cast<expert_id>(e)};
              if (fast.contains(x) != ref.contains(x) || fast.policy().sticky(x) != ref.policy().sticky(x)) ++differ;
            }
          }
        }
        CHECK_MESSAGE(differ == 0, "scope ", static_cast<int>(scope), ", capacity ", capacity, ", config ",
                      &pc - configs.data());
        CHECK(fast.stats().evictions == ref.stats().evictions);
        CHECK(fast.stats().hits == ref.stats().hits);
        CHECK(fast.stats().evictions > 0);
        ++runs;
      }
    }
  }
  CHECK(runs == 40);
}
