// Compile-time tests of the eviction-policy concept and its traits: positive and negative
// archetypes; and the arithmetic of cache_shape.
#include "moepolicy/cache/concepts.hpp"

#include "moepolicy/cache/detail/orderings.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace {

using namespace moepolicy;

struct minimal_policy {
  struct config_type {};
  minimal_policy(const cache_shape&, const config_type&) {}
  void on_insert(expert_key, const access_info&) noexcept {}
  void on_hit(expert_key, const access_info&) noexcept {}
  void on_evict(expert_key) noexcept {}
  std::optional<expert_key> victim(std::size_t) const noexcept { return std::nullopt; }
};

struct full_policy : minimal_policy {
  using minimal_policy::minimal_policy;
  full_policy(const cache_shape& s, const config_type& c, const capacity_weights&) : minimal_policy(s, c) {}
  static constexpr bool needs_future = true;
  bool admit(expert_key, const access_info&, bool) const noexcept { return true; }
  void on_layer_begin(const batch_view&) noexcept {}
  void on_layer_end(layer_id) noexcept {}
  void on_step_end() noexcept {}
  void on_bypass(expert_key, const access_info&) noexcept {}
  void on_hint(expert_key, float) noexcept {}
  void on_prefetch(expert_key, const access_info&) noexcept {}
};

struct no_evict_event {
  struct config_type {};
  no_evict_event(const cache_shape&, const config_type&) {}
  void on_insert(expert_key, const access_info&) noexcept {}
  void on_hit(expert_key, const access_info&) noexcept {}
  std::optional<expert_key> victim(std::size_t) const noexcept { return std::nullopt; }
};

struct mutating_victim : minimal_policy {  // victim must be a const query
  using minimal_policy::minimal_policy;
  std::optional<expert_key> victim(std::size_t) noexcept { return std::nullopt; }
};

struct victim_without_optional : minimal_policy {  // "no victim" must be expressible
  using minimal_policy::minimal_policy;
  expert_key victim(std::size_t) const noexcept { return {}; }
};

struct throwing_events {  // events must be noexcept
  struct config_type {};
  throwing_events(const cache_shape&, const config_type&) {}
  void on_insert(expert_key, const access_info&) {}
  void on_hit(expert_key, const access_info&) {}
  void on_evict(expert_key) {}
  std::optional<expert_key> victim(std::size_t) const noexcept { return std::nullopt; }
};

struct no_config {  // a policy is built from a shape and its config aggregate
  no_config() = default;
  void on_insert(expert_key, const access_info&) noexcept {}
  void on_hit(expert_key, const access_info&) noexcept {}
  void on_evict(expert_key) noexcept {}
  std::optional<expert_key> victim(std::size_t) const noexcept { return std::nullopt; }
};

static_assert(EvictionPolicy<minimal_policy>);
static_assert(EvictionPolicy<full_policy>);
static_assert(!EvictionPolicy<no_evict_event>);
static_assert(!EvictionPolicy<mutating_victim>);
static_assert(!EvictionPolicy<victim_without_optional>);
static_assert(!EvictionPolicy<throwing_events>);
static_assert(!EvictionPolicy<no_config>);

// Traits default to "absent" and follow the members.
static_assert(!policy_traits<minimal_policy>::needs_future);
static_assert(!policy_traits<minimal_policy>::has_admission);
static_assert(!policy_traits<minimal_policy>::observes_layers);
static_assert(!policy_traits<minimal_policy>::observes_steps);
static_assert(!policy_traits<minimal_policy>::observes_bypass);
static_assert(!policy_traits<minimal_policy>::takes_hints);
static_assert(!policy_traits<minimal_policy>::observes_prefetch);
static_assert(!policy_traits<minimal_policy>::takes_capacity_weights);
static_assert(policy_traits<full_policy>::needs_future);
static_assert(policy_traits<full_policy>::has_admission);
static_assert(policy_traits<full_policy>::observes_layers);
static_assert(policy_traits<full_policy>::observes_steps);
static_assert(policy_traits<full_policy>::observes_bypass);
static_assert(policy_traits<full_policy>::takes_hints);
static_assert(policy_traits<full_policy>::observes_prefetch);
static_assert(policy_traits<full_policy>::takes_capacity_weights);

}  // namespace

TEST_CASE("cache_shape numbers slots layer-major and partitions by scope") {
  const cache_shape shared{3, 5, capacity_scope::shared};
  CHECK(shared.slots() == 15);
  CHECK(shared.partitions() == 1);
  CHECK(shared.partition_slots() == 15);
  CHECK(shared.partition_of({2, 4}) == 0);
  CHECK(shared.flat({2, 4}) == 14);
  CHECK(shared.key(7) == expert_key{1, 2});
  const cache_shape per{3, 5, capacity_scope::per_layer};
  CHECK(per.partitions() == 3);
  CHECK(per.partition_slots() == 5);
  CHECK(per.partition_of({2, 4}) == 2);
  CHECK(to_string(capacity_scope::per_layer) == "per-layer");
  CHECK_THROWS_WITH_AS((cache_shape{0, 5}.validate("f")), "moepolicy::f: num_layers must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS((cache_shape{1, 70000}.validate("f")),
                       "moepolicy::f: num_experts must be in [1, 65536], got 70000", invalid_argument);
}

TEST_CASE("the slot divider divides exactly: every dividend near the multiples, for every pool size") {
  std::size_t wrong = 0;
  for (std::uint32_t d = 1; d <= 65536; d += (d < 300 ? 1 : 997)) {
    const detail::slot_divider div(d);
    const std::uint64_t top = std::uint64_t{d} * 65536;  // the largest shape: 65536 layers of d experts
    for (std::uint64_t q :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{255}, std::uint64_t{4097}, top / d - 1}) {
      for (std::int64_t off : {-1, 0, 1}) {
        const std::int64_t n = static_cast<std::int64_t>(q * d) + off;
        if (n < 0 || static_cast<std::uint64_t>(n) >= top) continue;
        const auto u = static_cast<std::size_t>(n);
        if (div.divide(u) != u / d) ++wrong;
      }
    }
  }
  const detail::slot_divider big(65536);
  CHECK(big.divide(0xFFFFFFFFu) == 0xFFFFu);
  CHECK(wrong == 0);
}

namespace {

/// The order `partitioned_heap` keeps, by brute force: each pool's members with their
/// ranks, the lowest found by a scan over (primary, secondary, slot).
struct heap_model {
  cache_shape shape;
  std::vector<std::optional<detail::heap_rank>> rank;  // per slot, while a member
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part) const {
    std::optional<std::size_t> best;
    for (std::size_t f = 0; f < rank.size(); ++f) {
      if (!rank[f] || shape.partition_of(shape.key(f)) != part) continue;
      const detail::heap_rank& r = *rank[f];
      if (!best) {
        best = f;
        continue;
      }
      const detail::heap_rank& b = *rank[*best];
      if (r.primary < b.primary || (r.primary == b.primary && r.secondary < b.secondary)) best = f;
    }
    return best;
  }
  [[nodiscard]] std::size_t size(std::size_t part) const {
    std::size_t n = 0;
    for (std::size_t f = 0; f < rank.size(); ++f) {
      if (rank[f] && shape.partition_of(shape.key(f)) == part) ++n;
    }
    return n;
  }
};

/// Random events on a heap and on the model, with ranks drawn from a few values so that
/// ties on primary and on secondary are frequent; returns the events whose top, size,
/// membership or stored rank disagreed.
std::size_t heap_disagreements(const cache_shape& shape, std::uint64_t seed, std::size_t events) {
  detail::partitioned_heap heap(shape);
  heap_model model{shape, std::vector<std::optional<detail::heap_rank>>(shape.slots())};
  std::uint64_t x = seed;
  const auto next = [&x](std::uint64_t n) {
    x = x * 6364136223846793005ULL + 1442695040888963407ULL;
    return (x >> 33) % n;
  };
  const auto draw = [&] { return detail::heap_rank{static_cast<double>(next(5)) * 0.5, next(4)}; };
  std::size_t wrong = 0;
  for (std::size_t ev = 0; ev < events; ++ev) {
    const std::size_t f = next(shape.slots());
    const std::uint64_t op = next(20);
    if (!heap.contains(f)) {
      if (op < 16) {
        const detail::heap_rank r = draw();
        heap.push(f, r);
        model.rank[f] = r;
      }
    } else if (op < 9) {
      const detail::heap_rank r = draw();
      heap.update(f, r);
      model.rank[f] = r;
    } else if (op < 17) {
      heap.erase(f);
      model.rank[f].reset();
    } else {
      // A bulk change: members leave and join unordered, every member of the pool is
      // ranked afresh, and the pool is rebuilt.
      const std::size_t part = shape.partition_of(shape.key(f));
      heap.erase_unordered(f);
      model.rank[f].reset();
      for (std::size_t g = 0; g < shape.slots(); ++g) {
        if (shape.partition_of(shape.key(g)) == part && !heap.contains(g) && next(3) == 0) {
          heap.push_unordered(g);
          model.rank[g] = detail::heap_rank{};
        }
      }
      for (const std::uint32_t g : heap.members(part)) {
        const detail::heap_rank r = draw();
        heap.set_rank_unordered(g, r);
        model.rank[g] = r;
      }
      heap.rebuild(part);
    }
    bool same = true;
    for (std::size_t p = 0; p < shape.partitions(); ++p) {
      same = same && heap.top(p) == model.top(p) && heap.size(p) == model.size(p) &&
             heap.members(p).size() == heap.size(p);
      for (const std::uint32_t g : heap.members(p)) {
        same = same && model.rank[g] && heap.rank(g).primary == model.rank[g]->primary &&
               heap.rank(g).secondary == model.rank[g]->secondary;
      }
    }
    for (std::size_t g = 0; g < shape.slots(); ++g) same = same && heap.contains(g) == model.rank[g].has_value();
    if (!same) ++wrong;
  }
  return wrong;
}

}  // namespace

TEST_CASE("partitioned_heap: the top of every pool is the lowest (primary, secondary, slot) on random traffic") {
  // Pools of one layer and one pool over all layers; ranks tie often, so the slot decides.
  for (const cache_shape shape :
       {cache_shape{6, 8, capacity_scope::per_layer}, cache_shape{6, 8, capacity_scope::shared},
        cache_shape{2, 64, capacity_scope::shared}}) {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      CAPTURE(shape.partitions());
      CAPTURE(shape.num_experts);
      CAPTURE(seed);
      CHECK(heap_disagreements(shape, seed, 4000) == 0);
    }
  }
}
