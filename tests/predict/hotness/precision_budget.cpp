#include "moepolicy/predict/precision_budget.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>

using namespace moepolicy;

namespace {
std::uint64_t count_of(const precision_budget& b, std::uint32_t n) {
  return static_cast<std::uint64_t>(std::count(b.capacity.begin(), b.capacity.end(), n));
}
}  // namespace

TEST_CASE("a small budget worked by hand") {
  // L = 2, E = 4, s_hi = 10, s_lo = 4, M = 100, M_res = 20, k = 1, blocks of exactly one version.
  // Expert region 80; the floor is every low version and the staging block: (8 + 1) · 4 = 36;
  // left 44. replaced: a slot costs 10 − 4 = 6, N = ⌊44 / 6⌋ = 7.
  precision_budget_config c{.usable_bytes = 100,
                            .reserved_bytes = 20,
                            .high_bytes = 10,
                            .low_bytes = 4,
                            .num_layers = 2,
                            .num_experts = 4,
                            .block_alignment = 1};
  const auto eq = plan_precision_budget(c);
  CHECK(eq.status == precision_budget_status::ok);
  CHECK(eq.expert_bytes == 80);
  CHECK(eq.high_block_bytes == 10);
  CHECK(eq.low_block_bytes == 4);
  CHECK(eq.capacity == std::vector<std::uint32_t>{3, 3});  // ⌊7 / 2⌋ each; one slot unused
  CHECK(eq.high_slots == 6);
  CHECK(eq.high_pool_blocks == 6);  // pool_hi: Σ n_l
  CHECK(eq.low_pool_blocks == 3);   // pool_lo: 8 − 6 low versions + 1 staging block
  CHECK(eq.staging_blocks == 1);
  CHECK(eq.high_region_bytes == 60);  // M_hi
  CHECK(eq.low_region_bytes == 8);    // M_lo: the two experts left low
  CHECK(eq.staging_bytes == 4);       // M_stage
  CHECK(eq.arena_bytes == 72);        // 6 · 10 + 3 · 4 <= 80
  const residency_budget_config bc = eq.budget_config();
  CHECK(bc.high_bytes == 60);
  CHECK(bc.low_bytes == 8);
  CHECK(bc.staging_bytes == 4);
  CHECK(bc.staging_tier == precision_tier::low);

  c.split = layer_split::spread_remainder;
  const auto sp = plan_precision_budget(c);
  CHECK(sp.capacity == std::vector<std::uint32_t>{4, 3});  // 7 = 3 + 3, remainder to layer 0
  CHECK(sp.high_slots == 7);
  CHECK(sp.low_pool_blocks == 2);
  CHECK(sp.arena_bytes == 78);  // 7 · 10 + 2 · 4: one more slot would need 84

  // kept: no staging, a slot costs s_hi = 10, left = 80 − 32 = 48, N = 4.
  c.low = low_version::kept;
  c.split = layer_split::equal;
  const auto kept = plan_precision_budget(c);
  CHECK(kept.staging_bytes == 0);
  CHECK(kept.staging_blocks == 0);
  CHECK(kept.capacity == std::vector<std::uint32_t>{2, 2});
  CHECK(kept.high_region_bytes == 40);
  CHECK(kept.low_region_bytes == 32);  // every low version stays
  CHECK(kept.low_pool_blocks == 8);
  CHECK(kept.arena_bytes == 72);
}

TEST_CASE("block bytes, not version bytes, are what the pools cost") {
  // The same experts with 8-byte blocks: s_hi = 10 → 16, s_lo = 4 → 8. Floor (8 + 1) · 8 = 72,
  // left 8, a slot costs 16 − 8 = 8: N = 1, and the arena 1 · 16 + 8 · 8 = 80 fills the region.
  const auto p = plan_precision_budget({.usable_bytes = 100,
                                        .reserved_bytes = 20,
                                        .high_bytes = 10,
                                        .low_bytes = 4,
                                        .num_layers = 2,
                                        .num_experts = 4,
                                        .split = layer_split::spread_remainder,
                                        .block_alignment = 8});
  CHECK(p.high_block_bytes == 16);
  CHECK(p.low_block_bytes == 8);
  CHECK(p.capacity == std::vector<std::uint32_t>{1, 0});
  CHECK(p.arena_bytes == 80);
  CHECK(p.arena_bytes <= p.expert_bytes);
  // Rounded to the same block, a "high" version costs nothing more: every expert fits high.
  const auto same = plan_precision_budget({.usable_bytes = 200,
                                           .high_bytes = 10,
                                           .low_bytes = 9,
                                           .num_layers = 2,
                                           .num_experts = 4,
                                           .block_alignment = 16});
  CHECK(same.status == precision_budget_status::saturated);
  CHECK(same.high_pool_blocks == 8);
  CHECK(same.low_pool_blocks == 1);  // the staging block
  CHECK(same.arena_bytes == 9 * 16);
}

TEST_CASE("Mixtral-8x7B, FP16 over 4-bit, on an 80 GB device with 12 GB reserved") {
  // One expert: 3 · 4096 · 14336 = 176,160,768 weights.
  //   FP16:  176,160,768 · 2 B                                    = 352,321,536 B (s_hi)
  //   4-bit: 176,160,768 / 2 B + 1,376,256 groups of 128 · 4 B    =  93,585,408 B (s_lo)
  // M = 80e9, M_res = 12e9 (KV cache, attention weights, activations): expert region 68e9.
  // 32 layers × 8 experts = 256 experts; every low version: 256 · 93,585,408 = 23,957,864,448.
  const model_shape mixtral = models::mixtral_8x7b();
  CHECK(expert_bytes(mixtral, fp16) == 352'321'536);
  CHECK(expert_bytes(mixtral, bitwidth{4}) == 93'585'408);
  precision_budget_config c{.usable_bytes = 80'000'000'000, .reserved_bytes = 12'000'000'000};

  SUBCASE("replaced, one staging slot") {
    // left = 68e9 − 93,585,408 − 23,957,864,448 = 43,948,550,144
    // slot = 352,321,536 − 93,585,408 = 258,736,128;  N = ⌊169.86⌋ = 169
    const auto b = plan_precision_budget(mixtral, fp16, bitwidth{4}, c);
    CHECK(b.status == precision_budget_status::ok);
    CHECK(b.expert_bytes == 68'000'000'000);
    CHECK(b.staging_bytes == 93'585'408);
    CHECK(b.capacity.size() == 32);
    CHECK(count_of(b, 5) == 32);  // ⌊169 / 32⌋ = 5 per layer
    CHECK(b.high_slots == 160);
    CHECK(b.high_region_bytes == 160ull * 352'321'536);  // 56,371,445,760
    CHECK(b.low_region_bytes == 96ull * 93'585'408);     //  8,984,199,168
    CHECK(b.high_pool_blocks == 160);
    CHECK(b.low_pool_blocks == 97);  // 96 low versions + 1 staging block
    // 56,371,445,760 + 8,984,199,168 + 93,585,408 = 65,449,230,336 <= 68e9.
    CHECK(b.arena_bytes == 65'449'230'336);
    CHECK(b.arena_bytes <= b.expert_bytes);

    c.split = layer_split::spread_remainder;
    const auto s = plan_precision_budget(mixtral, fp16, bitwidth{4}, c);
    CHECK(s.high_slots == 169);  // 169 = 32 · 5 + 9
    CHECK(count_of(s, 6) == 9);
    CHECK(count_of(s, 5) == 23);
    CHECK(s.capacity[0] == 6);
    CHECK(s.capacity[8] == 6);
    CHECK(s.capacity[9] == 5);
  }
  SUBCASE("kept low versions") {
    // left = 68e9 − 23,957,864,448 = 44,042,135,552; slot = 352,321,536; N = ⌊125.006⌋ = 125
    c.low = low_version::kept;
    c.split = layer_split::spread_remainder;
    const auto b = plan_precision_budget(mixtral, fp16, bitwidth{4}, c);
    CHECK(b.high_slots == 125);  // 32 · 3 + 29
    CHECK(count_of(b, 4) == 29);
    CHECK(count_of(b, 3) == 3);
  }
}

TEST_CASE("budgets that do not fit report a status") {
  const model_shape mixtral = models::mixtral_8x7b();
  SUBCASE("the low versions alone exceed the region") {
    const auto b = plan_precision_budget(mixtral, fp16, bitwidth{4},
                                         {.usable_bytes = 80'000'000'000, .reserved_bytes = 60'000'000'000});
    CHECK(b.status == precision_budget_status::infeasible);  // 20e9 < 23.96e9
    CHECK(b.high_slots == 0);
    CHECK(count_of(b, 0) == 32);
    CHECK(b.arena_bytes > b.expert_bytes);  // what N = 0 would need: every low version and k staging blocks
  }
  SUBCASE("the reserve exceeds the device") {
    const auto b = plan_precision_budget(mixtral, fp16, bitwidth{4}, {.usable_bytes = 10, .reserved_bytes = 20});
    CHECK(b.status == precision_budget_status::infeasible);
    CHECK(b.expert_bytes == 0);
  }
  SUBCASE("every expert fits at high precision") {
    const auto b = plan_precision_budget(mixtral, fp16, bitwidth{4}, {.usable_bytes = 200'000'000'000});
    CHECK(b.status == precision_budget_status::saturated);
    CHECK(count_of(b, 8) == 32);
    CHECK(b.low_region_bytes == 0);
  }
}

TEST_CASE("bad budget inputs are rejected with the library's message") {
  const precision_budget_config ok{.usable_bytes = 100,
                                   .high_bytes = 10,
                                   .low_bytes = 4,
                                   .num_layers = 2,
                                   .num_experts = 4,
                                   .block_alignment = 1};
  auto c = ok;
  c.num_layers = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: num_layers must be in [1, 65536], got 0", invalid_argument);
  c = ok;
  c.block_alignment = 48;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: block_alignment must be a power of two, got 48",
                       invalid_argument);
  c = ok;
  c.high_bytes = bytes{1} << 62;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: high_bytes and low_bytes must keep the pools within 64 "
                       "bits, got 4611686018427387904",
                       invalid_argument);
  c = ok;
  c.num_experts = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: num_experts must be in [1, 65536], got 0", invalid_argument);
  c = ok;
  c.high_bytes = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: high_bytes must be > 0, got 0", invalid_argument);
  c = ok;
  c.low_bytes = 0;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: low_bytes must be > 0, got 0", invalid_argument);
  c = ok;
  c.high_bytes = 4;
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(c)),
                       "moepolicy::plan_precision_budget: high_bytes must be > low_bytes when the high version "
                       "replaces the low one, got 4",
                       invalid_argument);
  c.low = low_version::kept;  // beside the low version, equal sizes are fine
  CHECK(plan_precision_budget(c).status != precision_budget_status::infeasible);
  CHECK_THROWS_WITH_AS(static_cast<void>(plan_precision_budget(models::mixtral_8x7b(), bitwidth{4}, bitwidth{4}, ok)),
                       "moepolicy::plan_precision_budget: the high bitwidth must be above the low one, got 4",
                       invalid_argument);
}
