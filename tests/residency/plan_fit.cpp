// Property test: the pools a precision budget plans fit the expert region they serve
// (DynaExq §3.3: the pools are the preallocated device memory), over every model preset, both
// readings of the low version, several bitwidth pairs, staging counts and block granularities,
// and a sweep of budgets from below the infeasible floor to past saturation. Then the
// mechanism built from plans (budget bounds, pools, pipeline) runs random targets with
// concurrent readers: no reservation ever misses its block, no bound is exceeded, and
// everything comes back. Runs under ThreadSanitizer in CI.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/predict/precision_budget.hpp"
#include "moepolicy/residency/transition_queue.hpp"
#include "random_versions.hpp"

using namespace moepolicy;

namespace {

constexpr std::uint64_t GiB = 1ull << 30;

struct plan_stats {
  std::uint64_t plans = 0, infeasible = 0, ok = 0, saturated = 0;
};

// Checks every invariant of one plan; returns its slot count.
std::uint64_t check_plan(const precision_budget_config& c, const precision_budget& p) {
  const bool replaced = c.low == low_version::replaced;
  const std::uint64_t experts = static_cast<std::uint64_t>(c.num_layers) * c.num_experts;
  const std::uint64_t k = replaced ? c.staging_versions : 0;
  const auto a = static_cast<bytes>(c.block_alignment);
  // Block bytes: the version rounded up to the granularity.
  CHECK(p.high_block_bytes % a == 0);
  CHECK(p.low_block_bytes % a == 0);
  CHECK(p.high_block_bytes >= c.high_bytes);
  CHECK(p.high_block_bytes < c.high_bytes + a);
  CHECK(p.low_block_bytes >= c.low_bytes);
  CHECK(p.low_block_bytes < c.low_bytes + a);
  // The arena is the pools, and the pools are the three bounds.
  const std::uint64_t slots = std::accumulate(p.capacity.begin(), p.capacity.end(), std::uint64_t{0});
  CHECK(p.high_slots == slots);
  CHECK(p.high_pool_blocks == slots);
  CHECK(p.low_pool_blocks == (replaced ? experts - slots + k : experts));
  CHECK(p.staging_blocks == k);
  CHECK(p.arena_bytes == p.high_pool_blocks * p.high_block_bytes + p.low_pool_blocks * p.low_block_bytes);
  CHECK(p.arena_bytes == p.high_region_bytes + p.low_region_bytes + p.staging_bytes);
  const residency_budget_config b = p.budget_config();
  CHECK(b.high_bytes == p.high_pool_blocks * p.high_block_bytes);
  CHECK(b.low_bytes + b.staging_bytes == p.low_pool_blocks * p.low_block_bytes);
  for (std::uint32_t n : p.capacity) CHECK(n <= c.num_experts);
  const bytes region = c.usable_bytes > c.reserved_bytes ? c.usable_bytes - c.reserved_bytes : 0;
  CHECK(p.expert_bytes == region);
  const bytes floor_bytes = (experts + k) * p.low_block_bytes;
  if (region < floor_bytes) {
    CHECK(p.status == precision_budget_status::infeasible);
    CHECK(slots == 0);
    return 0;
  }
  // The property: the pools fit the expert region.
  CHECK(p.arena_bytes <= region);
  // Maximality (spread_remainder uses every affordable slot): one more high version would not fit.
  if (c.split == layer_split::spread_remainder && slots < experts) {
    const bytes one_more = replaced ? p.high_block_bytes - p.low_block_bytes : p.high_block_bytes;
    CHECK(p.arena_bytes + one_more > region);
  }
  CHECK(p.status == (slots == experts ? precision_budget_status::saturated : precision_budget_status::ok));
  return slots;
}

}  // namespace

TEST_CASE("planned arenas fit the expert region: every preset, both readings, a sweep of budgets") {
  plan_stats st;
  struct bits_pair {
    int high, low;
  };
  const bits_pair pairs[] = {{16, 4}, {16, 2}, {8, 4}, {16, 3}};
  for (auto make : models::all) {
    const model_shape shape = make();
    for (const bits_pair bp : pairs) {
      for (const low_version mode : {low_version::replaced, low_version::kept}) {
        for (const std::size_t k : {std::size_t{0}, std::size_t{1}, std::size_t{4}, std::size_t{64}}) {
          for (const std::size_t align : {std::size_t{1}, std::size_t{256}, std::size_t{2} << 20}) {
            for (const layer_split split : {layer_split::equal, layer_split::spread_remainder}) {
              precision_budget_config c{.reserved_bytes = 6 * GiB,
                                        .low = mode,
                                        .staging_versions = k,
                                        .split = split,
                                        .block_alignment = align};
              // From the floor (every low version and the staging blocks) to past saturation,
              // in 24 steps, each nudged off the block grid; plus just below the floor.
              const precision_budget probe =
                  plan_precision_budget(shape, bitwidth{bp.high}, bitwidth{bp.low}, c);
              const std::uint64_t experts = static_cast<std::uint64_t>(shape.num_moe_layers()) * shape.num_experts;
              const bytes floor_bytes = (experts + probe.staging_blocks) * probe.low_block_bytes;
              const bytes top = floor_bytes + experts * probe.high_block_bytes + probe.high_block_bytes;
              std::uint64_t previous = 0;
              for (int i = -1; i <= 24; ++i) {
                const auto step = static_cast<bytes>(std::max(i, 0));
                const bytes region = i < 0 ? floor_bytes - 1 : floor_bytes + (top - floor_bytes) / 24 * step + 7 * step;
                c.usable_bytes = c.reserved_bytes + region;
                const precision_budget p = plan_precision_budget(shape, bitwidth{bp.high}, bitwidth{bp.low}, c);
                precision_budget_config full = c;
                full.num_layers = shape.num_moe_layers();
                full.num_experts = shape.num_experts;
                full.high_bytes = expert_bytes(shape, bitwidth{bp.high});
                full.low_bytes = expert_bytes(shape, bitwidth{bp.low});
                const std::uint64_t slots = check_plan(full, p);
                CHECK(slots >= previous);  // more memory never buys fewer slots
                previous = slots;
                ++st.plans;
                st.infeasible += p.status == precision_budget_status::infeasible;
                st.ok += p.status == precision_budget_status::ok;
                st.saturated += p.status == precision_budget_status::saturated;
              }
            }
          }
        }
      }
    }
  }
  MESSAGE("plans=", st.plans, " infeasible=", st.infeasible, " ok=", st.ok, " saturated=", st.saturated);
  CHECK(st.ok > st.plans / 2);
  CHECK(st.infeasible > 0);
  CHECK(st.saturated > 0);
}

TEST_CASE("the reviewed case: Qwen3-30B-A3B at 48 GB with 8 GB reserved and k = 4 fits in 40 GB") {
  // s_hi = 3 · 2048 · 768 · 2 = 9,437,184 B; s_lo = 2,359,296 + 36,864 groups · 4 B = 2,506,752 B
  // (both multiples of 256). L · E = 48 · 128 = 6144.
  //   floor = (6144 + 4) · 2,506,752 = 15,411,511,296;  left = 40e9 − floor = 24,588,488,704
  //   slot = 9,437,184 − 2,506,752 = 6,930,432;  N = ⌊3547.88⌋ = 3547 → n_l = 73 (equal split),
  //   Σ n_l = 3504.
  //   arena = 3504 · 9,437,184 + (6144 − 3504 + 4) · 2,506,752 = 33,067,892,736 + 6,627,852,288
  //         = 39,695,745,024 <= 40e9. The earlier pools — L·E low blocks and Σ n_l + k high ones,
  //         6144 · 2,506,752 + 3508 · 9,437,184 — took 48,507,125,760.
  const auto p = plan_precision_budget(models::qwen3_30b_a3b(), fp16, bitwidth{4},
                                       {.usable_bytes = 48'000'000'000,
                                        .reserved_bytes = 8'000'000'000,
                                        .staging_versions = 4});
  CHECK(p.status == precision_budget_status::ok);
  CHECK(p.high_block_bytes == 9'437'184);
  CHECK(p.low_block_bytes == 2'506'752);
  CHECK(p.capacity.front() == 73);
  CHECK(p.high_pool_blocks == 3504);
  CHECK(p.low_pool_blocks == 2644);
  CHECK(p.staging_bytes == 4 * 2'506'752);
  CHECK(p.arena_bytes == 39'695'745'024);
  CHECK(p.arena_bytes <= p.expert_bytes);
}

namespace {

// The mechanism built from a plan: L = 2 layers of 8 experts, versions 448 B and 112 B in
// blocks of 64-byte granularity, a region that buys 3 high slots per layer.
void run_from_plan(low_version mode, std::uint32_t seed) {
  constexpr std::size_t L = 2, E = 8, N = L * E, hi_size = 448, lo_size = 112, k = 2;
  precision_budget_config c{.high_bytes = hi_size,
                            .low_bytes = lo_size,
                            .num_layers = L,
                            .num_experts = E,
                            .low = mode,
                            .staging_versions = k,
                            .block_alignment = 64};
  const bytes bh = 448, bl = 128;
  const bytes slot = mode == low_version::replaced ? bh - bl : bh;
  c.usable_bytes = (N + (mode == low_version::replaced ? k : 0)) * bl + 6 * slot + slot / 2;
  const precision_budget plan = plan_precision_budget(c);
  REQUIRE(plan.status == precision_budget_status::ok);
  REQUIRE(plan.capacity == std::vector<std::uint32_t>{3, 3});
  REQUIRE(plan.arena_bytes <= plan.expert_bytes);

  const test::random_versions versions(N, lo_size, hi_size, seed);
  residency_budget budget(plan.budget_config());
  block_pool hi_pool(plan.high_block_bytes, plan.high_pool_blocks, 64);
  block_pool lo_pool(plan.low_block_bytes, plan.low_pool_blocks, 64);
  CHECK(hi_pool.arena().size() + lo_pool.arena().size() == plan.arena_bytes);
  versioned_expert_table table(L, E, {.low = mode, .max_readers = 2});
  {
    transition_pipeline<host_memcpy_mover> pipe(
        table, budget, lo_pool, hi_pool,
        [&](expert_key key, precision_tier t) { return versions.source(key.flat(E), t); },
        {}, {.max_in_flight = 3});
    // Start from a static set of n_l per layer at high (the replaced pools hold no more lows).
    REQUIRE(pipe.load_all([&](expert_key key) {
      return mode == low_version::replaced && key.expert < plan.capacity[key.layer] ? precision_tier::high
                                                                                    : precision_tier::low;
    }) == residency_load_status::ok);

    std::atomic<bool> stop{false};
    std::atomic<std::uint64_t> torn{0}, reads{0};
    std::vector<std::thread> readers;
    for (int r = 0; r < 2; ++r) {
      readers.emplace_back([&, r] {
        auto slot_r = table.register_reader();
        std::mt19937 pick(seed + static_cast<std::uint32_t>(r));
        while (!stop.load(std::memory_order_relaxed)) {
          const read_guard g = slot_r.pin();
          for (int i = 0; i < 8; ++i) {
            const std::size_t flat = pick() % N;
            const expert_version& v = g.resolve(table.key_of(flat));
            const std::uint64_t expect = versions.sum(flat, v.tier);
            if (fnv1a_checksum(v.data) != expect) torn.fetch_add(1, std::memory_order_relaxed);
            reads.fetch_add(1, std::memory_order_relaxed);
          }
        }
      });
    }
    // Random targets of n_l per layer, the way the policy hands them over: demotions first.
    std::mt19937 targets(seed * 5 + 3);
    const auto start = std::chrono::steady_clock::now();
    // At least 20 rounds whatever the machine's load; more while time allows.
    for (int round = 0;
         round < 300 && (round < 20 || std::chrono::steady_clock::now() - start < std::chrono::milliseconds(400));
         ++round) {
      for (layer_id l = 0; l < L; ++l) {
        std::vector<expert_id> ids(E);
        std::iota(ids.begin(), ids.end(), expert_id{0});
        std::shuffle(ids.begin(), ids.end(), targets);
        const std::size_t n = plan.capacity[l];
        pipe.request(l, std::span<const expert_id>(ids).first(n), std::span<const expert_id>(ids).subspan(n));
      }
      for (int s = 0; s < 4; ++s) static_cast<void>(pipe.step());
      CHECK(budget.high().reserved() <= budget.high().cap());
      CHECK(budget.low().reserved() <= budget.low().cap());
      CHECK(budget.staging().reserved() <= budget.staging().cap());
    }
    // Let the last targets land while the readers still read (a loaded machine may have
    // left them queued); the pipeline must drain.
    const auto drain_start = std::chrono::steady_clock::now();
    while (!pipe.idle() && std::chrono::steady_clock::now() - drain_start < std::chrono::seconds(20)) {
      if (!pipe.step().progressed()) std::this_thread::yield();
    }
    CHECK(pipe.idle());
    stop = true;
    for (auto& t : readers) t.join();
    const auto s = pipe.stats();
    MESSAGE("mode=", to_string(mode), " promotions=", s.promotions, " demotions=", s.demotions, " staged=", s.staged,
            " deferred=", s.deferred, " reads=", reads.load());
    CHECK(s.promotions > 0);
    CHECK(hi_pool.exhausted() == 0);  // a reservation always found its block
    CHECK(lo_pool.exhausted() == 0);
    CHECK(hi_pool.peak_in_use() <= plan.high_pool_blocks);
    CHECK(lo_pool.peak_in_use() <= plan.low_pool_blocks);
    CHECK(budget.peak_reserved() <= plan.arena_bytes);
    CHECK(torn.load() == 0);
    if (mode == low_version::replaced) CHECK(s.staged > 0);  // the temporary pool was used
    pipe.shutdown();
  }
  CHECK(budget.reserved() == 0);
  CHECK(hi_pool.free_blocks() == hi_pool.num_blocks());
  CHECK(lo_pool.free_blocks() == lo_pool.num_blocks());
}

}  // namespace

TEST_CASE("the mechanism on a planned budget: replaced low versions") { run_from_plan(low_version::replaced, 7); }
TEST_CASE("the mechanism on a planned budget: kept low versions") { run_from_plan(low_version::kept, 8); }
