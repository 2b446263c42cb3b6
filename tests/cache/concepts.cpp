// Compile-time tests of the eviction-policy concept and its traits: positive and negative
// archetypes; and the arithmetic of cache_shape.
#include "moepolicy/cache/concepts.hpp"

#include "moepolicy/cache/detail/orderings.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <optional>

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
