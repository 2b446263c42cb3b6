// moepolicy/predict/precision_budget.hpp — budget initialisation: per-layer high-precision
// capacities n_l from a device-memory budget (DynaExq, "Dynamic Expert Quantization for
// Scalable Mixture-of-Experts Inference", §3.1 "budget initialization", §3.3 "Budget model
// and OOM safety", §3.5 "Budget-feasible Selection").
//
// Reconstruction of the lost symbols, as we read the prose:
//   M        usable device memory of the process;
//   M_res    the fixed reserve for non-expert components (KV cache, non-expert weights,
//            activations, runtime overhead);
//   M − M_res  the expert region, split into M_hi (high-precision residency) and M_lo
//            (low-precision residency);
//   s_hi, s_lo  one expert's high- and low-precision footprints;
//   n_l      the most experts of layer l whose high versions may be resident at once.
//
// Every expert is always resident at some precision (the low version is the fallback), so
// the low versions of all L × E experts are paid first. With k transitions in flight the
// budget also keeps room for their transient second copy (§3.3 "temporary staging
// buffers", §3.4 "ensures that the temporary pool has sufficient capacity"): a promotion
// holds both versions until the old one is reclaimed. What is left buys high versions:
//
//   low_version::replaced  a high version replaces the low one: each slot costs s_hi − s_lo,
//                          staging costs k · s_lo (a transition holds the old copy, at most
//                          s_lo beyond a feasible plan, until its grace period ends);
//   low_version::kept      the low version stays: each slot costs s_hi, staging costs 0
//                          (a demotion switches to the resident low copy; a promotion
//                          beyond the plan waits for the reclamation it needs).
//
//   N   = min(L·E, ⌊(M − M_res − k·s_stage − L·E·s_lo) / slot cost⌋)   (total slots)
//   n_l = ⌊N / L⌋ for every layer (`layer_split::equal`, the paper's per-layer capacity,
//         local to each layer), or additionally +1 for the first N mod L layers
//         (`layer_split::spread_remainder`, which uses every affordable slot).
//
// Status, not exceptions, for budgets that do not fit: `infeasible` when the reserve,
// staging and every low version already exceed M (all n_l = 0), `saturated` when every
// expert fits at high precision (all n_l = E).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
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
  infeasible,  ///< the reserve, staging and the low versions alone exceed the budget
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
  /// Transitions in flight whose transient second copy the budget keeps room for (k).
  /// With `replaced`, 0 can deadlock a full budget: a demotion must copy its low version
  /// in before the high one is released.
  std::size_t staging_versions = 1;
  /// How total slots are divided among layers.
  layer_split split = layer_split::equal;
};

/// The outcome of budget initialisation.
struct precision_budget {
  precision_budget_status status = precision_budget_status::infeasible;
  /// M − M_res (0 when the reserve exceeds M): the cap of the residency budget tracker.
  bytes expert_bytes = 0;
  /// Room kept for transient copies: k · s_lo with `replaced`, 0 with `kept`.
  bytes staging_bytes = 0;
  /// M_hi = Σ n_l · s_hi.
  bytes high_region_bytes = 0;
  /// M_lo: the low versions resident under the capacities.
  bytes low_region_bytes = 0;
  /// Σ n_l.
  std::size_t high_slots = 0;
  /// n_l per layer.
  std::vector<std::uint32_t> capacity;
  /// Blocks a high-precision pool needs: Σ n_l plus k.
  std::size_t high_pool_blocks = 0;
  /// Blocks a low-precision pool needs: L · E (every expert starts low).
  std::size_t low_pool_blocks = 0;
};

/// Derives the per-layer high-precision capacities n_l from a device-memory budget
/// (DynaExq §3.3, §3.5).
///
/// Preconditions: none beyond the checks below.
/// Returns: the capacities, the regions and the status; `infeasible` leaves every n_l = 0.
/// Throws: `invalid_argument` when `num_layers`, `num_experts`, `high_bytes` or `low_bytes`
/// is 0, when `num_experts` exceeds 65536, or with `low_version::replaced` when
/// `high_bytes <= low_bytes` (a "high" version that is not larger needs no budget).
/// Complexity: O(L).
[[nodiscard]] inline precision_budget plan_precision_budget(const precision_budget_config& c) {
  constexpr std::string_view fn = "plan_precision_budget";
  if (c.num_layers == 0) detail::throw_invalid(fn, "num_layers must be > 0", c.num_layers);
  if (c.num_experts == 0 || c.num_experts > 65536) {
    detail::throw_invalid(fn, "num_experts must be in [1, 65536]", c.num_experts);
  }
  if (c.high_bytes == 0) detail::throw_invalid(fn, "high_bytes must be > 0", c.high_bytes);
  if (c.low_bytes == 0) detail::throw_invalid(fn, "low_bytes must be > 0", c.low_bytes);
  if (c.low == low_version::replaced && c.high_bytes <= c.low_bytes) {
    detail::throw_invalid(fn, "high_bytes must be > low_bytes when the high version replaces the low one",
                          c.high_bytes);
  }

  precision_budget out;
  out.capacity.assign(c.num_layers, 0);
  const std::uint64_t experts = static_cast<std::uint64_t>(c.num_layers) * c.num_experts;
  out.low_pool_blocks = static_cast<std::size_t>(experts);
  out.expert_bytes = c.usable_bytes > c.reserved_bytes ? c.usable_bytes - c.reserved_bytes : 0;
  out.staging_bytes = c.low == low_version::replaced ? c.staging_versions * c.low_bytes : 0;
  const bytes all_low = experts * c.low_bytes;
  out.low_region_bytes = all_low;
  out.high_pool_blocks = c.staging_versions;

  if (c.usable_bytes < c.reserved_bytes || out.expert_bytes < out.staging_bytes + all_low) {
    out.status = precision_budget_status::infeasible;
    return out;
  }
  const bytes left = out.expert_bytes - out.staging_bytes - all_low;
  const bytes slot_cost = c.low == low_version::replaced ? c.high_bytes - c.low_bytes : c.high_bytes;
  const std::uint64_t slots = std::min<std::uint64_t>(experts, left / slot_cost);

  const std::uint64_t per_layer = slots / c.num_layers;
  const std::uint64_t extra = c.split == layer_split::spread_remainder ? slots % c.num_layers : 0;
  for (std::size_t l = 0; l < c.num_layers; ++l) {
    out.capacity[l] = static_cast<std::uint32_t>(per_layer + (l < extra ? 1 : 0));
    out.high_slots += out.capacity[l];
  }
  out.high_region_bytes = out.high_slots * c.high_bytes;
  if (c.low == low_version::replaced) out.low_region_bytes = (experts - out.high_slots) * c.low_bytes;
  out.high_pool_blocks = out.high_slots + c.staging_versions;
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
