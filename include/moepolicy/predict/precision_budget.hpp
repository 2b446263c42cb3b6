// moepolicy/predict/precision_budget.hpp — budget initialisation: per-layer high-precision
// capacities n_l from a device-memory budget, and the pools and bounds that hold them
// (DynaExq, "Dynamic Expert Quantization for Scalable Mixture-of-Experts Inference", §3.1
// "budget initialization", §3.3 "Partitioned pools", "Fixed-granularity allocation",
// "Budget model and OOM safety", §3.5 "Budget-feasible Selection").
//
// Reconstruction of the lost symbols, as we read the prose:
//   M        usable device memory of the process;
//   M_res    the fixed reserve for non-expert components (KV cache, non-expert weights,
//            activations, runtime overhead);
//   R = M − M_res  the expert region, divided into disjoint parts: M_hi (high-precision
//            residency, pool_hi), M_lo (low-precision residency, pool_lo) and M_stage (the
//            temporary pool of staging buffers, §3.3/§3.4);
//   s_hi, s_lo  one expert's high- and low-precision footprints; b_hi, b_lo the blocks that
//            hold them: s rounded up to `block_alignment` (§3.3 fixed-granularity blocks, one
//            version per block). Every byte below is a block byte;
//   n_l      the most experts of layer l whose high versions may be resident at once.
//
// In DynaExq the pools *are* the preallocated device memory (§3.3), so the plan sizes them and
// guarantees   arena_bytes = high_pool_blocks · b_hi + low_pool_blocks · b_lo <= R.
//
//   low_version::replaced  a high version replaces the low one. Every expert is resident at
//       some precision, so the L·E experts hold N = Σ n_l high blocks and L·E − N low ones. A
//       transition holds both versions of its expert until the old one is reclaimed; a
//       promotion fits while fewer than N experts are high (its low block is already
//       counted), and when all N are, the demotion that frees a high block must first copy
//       its low version in beside it. The temporary pool is that room: k staging blocks of
//       b_lo, so k demotions may run ahead of the promotions that free low blocks. Our reading
//       of §3.3 "temporary staging buffers whose peak demand depends on the concurrency of
//       in-flight promotions": the staging buffer is the transient second copy itself, not a
//       bounce buffer (the source is pre-packed in host memory, §3.4, so nothing is copied
//       twice). Staging blocks share pool_lo's block size and arena, so a staged version never
//       moves (residency/budget_tracker.hpp):
//         pool_hi = N blocks,   pool_lo = L·E − N + k blocks (k of them staging),
//         M_hi = N·b_hi,   M_lo = (L·E − N)·b_lo,   M_stage = k·b_lo,
//         N = min(L·E, ⌊(R − (L·E + k)·b_lo) / (b_hi − b_lo)⌋)   (every block if b_hi = b_lo);
//   low_version::kept      the low version stays resident: pool_lo = L·E blocks, pool_hi = N,
//       no staging (a demotion switches to the resident low copy; a promotion beyond N waits
//       for the reclamation of the high version it replaces), k is ignored:
//         M_hi = N·b_hi,   M_lo = L·E·b_lo,   N = min(L·E, ⌊(R − L·E·b_lo) / b_hi⌋).
//
// Arenas fit by construction: with `replaced`, arena = N·(b_hi − b_lo) + (L·E + k)·b_lo <= R
// by the choice of N; with `kept`, N·b_hi + L·E·b_lo <= R. (tests/residency/plan_fit.cpp
// checks it over every model preset and a sweep of budgets.)
//
//   n_l = ⌊N / L⌋ for every layer (`layer_split::equal`, the paper's per-layer capacity,
//         local to each layer), or additionally +1 for the first N mod L layers
//         (`layer_split::spread_remainder`, which uses every affordable slot); the pools are
//         sized for Σ n_l, so slots the split leaves unused are not allocated.
//
// Status, not exceptions, for budgets that do not fit: `infeasible` when every low version
// plus the staging blocks already exceed R (all n_l = 0; the pool sizes are then what N = 0
// would need, above R), `saturated` when every expert fits at high precision (all n_l = E).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/residency/budget_tracker.hpp"
#include "moepolicy/residency/precision_tier.hpp"

namespace moepolicy {

/// How the total number of high-precision slots is divided among layers.
enum class layer_split : std::uint8_t {
  equal,             ///< ⌊N / L⌋ per layer; the remainder stays unused
  spread_remainder,  ///< ⌊N / L⌋, plus one for each of the first N mod L layers
};

/// Whether a precision budget fits.
enum class precision_budget_status : std::uint8_t {
  ok,          ///< some experts, not all, can be high-precision
  saturated,   ///< every expert fits at high precision
  infeasible,  ///< the low versions and the staging blocks alone exceed the expert region
};

/// Inputs of `plan_precision_budget`.
struct precision_budget_config {
  /// M: device memory usable by the process.
  bytes usable_bytes = 0;
  /// M_res: KV cache, non-expert weights, activations and runtime overhead.
  bytes reserved_bytes = 0;
  /// s_hi: one expert's high-precision version.
  bytes high_bytes = 0;
  /// s_lo: one expert's low-precision version.
  bytes low_bytes = 0;
  /// MoE layers L.
  std::size_t num_layers = 0;
  /// Routed experts per layer E.
  std::size_t num_experts = 0;
  /// Whether a high version replaces the low one or sits beside it.
  low_version low = low_version::replaced;
  /// k: staging blocks of the temporary pool (`replaced` only): demotions that may copy
  /// their low version in before a promotion frees a low block. With `replaced`, 0 can
  /// deadlock a full budget: a demotion must copy its low version in before the high one is
  /// released.
  std::size_t staging_versions = 1;
  /// How total slots are divided among layers.
  layer_split split = layer_split::equal;
  /// Block granularity in bytes (a power of two): each version takes one block of its size
  /// rounded up to this (256 B is CUDA's allocation alignment; 2 MiB suits large pages).
  std::size_t block_alignment = 256;
};

/// The outcome of budget initialisation: capacities, pool sizes and the three bounds.
struct precision_budget {
  precision_budget_status status = precision_budget_status::infeasible;
  /// R = M − M_res (0 when the reserve exceeds M).
  bytes expert_bytes = 0;
  /// b_hi, b_lo: one block of pool_hi and of pool_lo.
  bytes high_block_bytes = 0;
  bytes low_block_bytes = 0;
  /// Σ n_l.
  std::size_t high_slots = 0;
  /// n_l per layer.
  std::vector<std::uint32_t> capacity;
  /// Blocks of pool_hi: Σ n_l.
  std::size_t high_pool_blocks = 0;
  /// Blocks of pool_lo: L·E − Σ n_l + k with `replaced` (k of them staging), L·E with `kept`.
  std::size_t low_pool_blocks = 0;
  /// k with `replaced`, 0 with `kept`: the temporary pool's blocks, inside pool_lo.
  std::size_t staging_blocks = 0;
  /// M_hi = Σ n_l · b_hi.
  bytes high_region_bytes = 0;
  /// M_lo: (L·E − Σ n_l) · b_lo with `replaced`, L·E · b_lo with `kept`.
  bytes low_region_bytes = 0;
  /// M_stage = k · b_lo with `replaced`, 0 with `kept`.
  bytes staging_bytes = 0;
  /// Device memory of the pools: high_pool_blocks · b_hi + low_pool_blocks · b_lo =
  /// M_hi + M_lo + M_stage; at most `expert_bytes` unless `infeasible`.
  bytes arena_bytes = 0;
  /// The tier the temporary pool stages (low).
  precision_tier staging_tier = precision_tier::low;

  /// The bounds for a `residency_budget` over these pools.
  [[nodiscard]] residency_budget_config budget_config() const noexcept {
    return {.high_bytes = high_region_bytes,
            .low_bytes = low_region_bytes,
            .staging_bytes = staging_bytes,
            .staging_tier = staging_tier};
  }
};

/// Derives the per-layer high-precision capacities n_l, the pool sizes and the bounds
/// M_hi, M_lo, M_stage from a device-memory budget (DynaExq §3.3, §3.5).
///
/// Preconditions: none beyond the checks below.
/// Returns: the plan; unless `infeasible`, `arena_bytes <= expert_bytes`.
/// Throws: `invalid_argument` when `num_layers`, `num_experts`, `high_bytes` or `low_bytes`
/// is 0, when `num_experts` exceeds 65536 or `num_layers` 65536, when `block_alignment` is
/// not a power of two, when the pools' bytes would overflow 64 bits, or with
/// `low_version::replaced` when `high_bytes <= low_bytes` (a
/// "high" version that is not larger needs no budget).
/// Complexity: O(L).
[[nodiscard]] inline precision_budget plan_precision_budget(const precision_budget_config& c) {
  constexpr std::string_view fn = "plan_precision_budget";
  if (c.num_layers == 0 || c.num_layers > 65536) {
    detail::throw_invalid(fn, "num_layers must be in [1, 65536]", c.num_layers);
  }
  if (c.num_experts == 0 || c.num_experts > 65536) {
    detail::throw_invalid(fn, "num_experts must be in [1, 65536]", c.num_experts);
  }
  if (c.high_bytes == 0) detail::throw_invalid(fn, "high_bytes must be > 0", c.high_bytes);
  if (c.low_bytes == 0) detail::throw_invalid(fn, "low_bytes must be > 0", c.low_bytes);
  if (c.low == low_version::replaced && c.high_bytes <= c.low_bytes) {
    detail::throw_invalid(fn, "high_bytes must be > low_bytes when the high version replaces the low one",
                          c.high_bytes);
  }
  if (c.block_alignment == 0 || (c.block_alignment & (c.block_alignment - 1)) != 0) {
    detail::throw_invalid(fn, "block_alignment must be a power of two", c.block_alignment);
  }

  const bool replaced = c.low == low_version::replaced;
  const std::uint64_t experts = static_cast<std::uint64_t>(c.num_layers) * c.num_experts;
  const std::uint64_t staging = replaced ? c.staging_versions : 0;
  constexpr bytes max_bytes = ~bytes{0};
  if (std::max(c.high_bytes, c.low_bytes) > (max_bytes - c.block_alignment) / (experts + staging + 1)) {
    detail::throw_invalid(fn, "high_bytes and low_bytes must keep the pools within 64 bits", std::max(c.high_bytes, c.low_bytes));
  }
  const auto round_up = [&](bytes b) { return (b + c.block_alignment - 1) / c.block_alignment * c.block_alignment; };
  precision_budget out;
  out.capacity.assign(c.num_layers, 0);
  out.high_block_bytes = round_up(c.high_bytes);
  out.low_block_bytes = round_up(c.low_bytes);
  const bytes bh = out.high_block_bytes, bl = out.low_block_bytes;
  out.expert_bytes = c.usable_bytes > c.reserved_bytes ? c.usable_bytes - c.reserved_bytes : 0;
  out.staging_blocks = static_cast<std::size_t>(staging);

  // Pools, bounds and arena for a total of `slots` high versions.
  const auto size_pools = [&](std::uint64_t slots) {
    out.high_slots = static_cast<std::size_t>(slots);
    out.high_pool_blocks = static_cast<std::size_t>(slots);
    out.low_pool_blocks = static_cast<std::size_t>(replaced ? experts - slots + staging : experts);
    out.high_region_bytes = slots * bh;
    out.low_region_bytes = (replaced ? experts - slots : experts) * bl;
    out.staging_bytes = staging * bl;
    out.arena_bytes = out.high_pool_blocks * bh + out.low_pool_blocks * bl;
    MOEPOLICY_ASSERT(out.arena_bytes == out.high_region_bytes + out.low_region_bytes + out.staging_bytes);
  };

  const bytes floor_bytes = (experts + staging) * bl;  // every low version, and the staging blocks
  if (out.expert_bytes < floor_bytes) {
    size_pools(0);
    out.status = precision_budget_status::infeasible;
    return out;
  }
  const bytes left = out.expert_bytes - floor_bytes;
  const bytes slot_cost = replaced ? bh - bl : bh;
  const std::uint64_t slots = slot_cost == 0 ? experts : std::min<std::uint64_t>(experts, left / slot_cost);

  const std::uint64_t per_layer = slots / c.num_layers;
  const std::uint64_t extra = c.split == layer_split::spread_remainder ? slots % c.num_layers : 0;
  std::uint64_t used = 0;
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    out.capacity[l] = static_cast<std::uint32_t>(per_layer + (l < extra ? 1 : 0));
    used += out.capacity[l];
  }
  size_pools(used);
  MOEPOLICY_ASSERT(out.arena_bytes <= out.expert_bytes);
  out.status = slots == experts ? precision_budget_status::saturated : precision_budget_status::ok;
  return out;
}

/// `plan_precision_budget` for a model: L, E, s_hi and s_lo come from `shape`
/// (`num_moe_layers()`, `num_experts`, `expert_bytes` at `high` and `low` in `format`) and
/// replace those fields of `config`.
///
/// Throws: as `plan_precision_budget`, and `invalid_argument` when `high` is not above `low`.
[[nodiscard]] inline precision_budget plan_precision_budget(const model_shape& shape, bitwidth high, bitwidth low,
                                                            precision_budget_config config,
                                                            const quant_format& format = {}) {
  if (!(low < high)) {
    detail::throw_invalid("plan_precision_budget", "the high bitwidth must be above the low one", high.bits());
  }
  config.num_layers = shape.num_moe_layers();
  config.num_experts = shape.num_experts;
  config.high_bytes = expert_bytes(shape, high, format);
  config.low_bytes = expert_bytes(shape, low, format);
  return plan_precision_budget(config);
}

}  // namespace moepolicy
