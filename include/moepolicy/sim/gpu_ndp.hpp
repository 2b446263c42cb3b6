// moepolicy/sim/gpu_ndp.hpp — the time of one MoE layer on a GPU + CXL-NDP system.
//
// The context-aware GPU-NDP system (seed 000 §4, Fig. 1) runs each activated expert where
// it lives: GPU-resident experts on the GPU at full precision, the others in place on the
// NDP device at their bitwidth, the two sides overlapped within a layer. With per-expert
// token loads t_e of one forward pass:
//   GPU side  = Σ_{e on GPU, t_e > 0} compute_gpu(e, b_e, t_e)
//             + Σ_{e fetched}        transfer_gpu(bytes(e, b_e))   (on-demand policies)
//   NDP side  = Σ_{e on NDP, t_e > 0} compute_ndp(e, b_e, t_e)
//             + activation_transfer_ndp(tokens that reach an NDP expert)
//   layer     = max(GPU side, NDP side)
// The NDP device is one serial processor here (its systolic arrays work on one expert at a
// time); a fetch serialises with GPU compute (no prefetch overlap), which is the
// pessimistic reading for on-demand baselines, stated so that their numbers can be read.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <utility>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"

namespace moepolicy {

/// What one layer of one forward pass cost.
struct gpu_ndp_layer_time {
  seconds gpu_seconds = 0.0;
  seconds ndp_seconds = 0.0;
  /// max(gpu, ndp): the layer's time with both sides overlapped.
  seconds layer_seconds = 0.0;
  /// Bytes fetched onto the GPU during the layer.
  bytes fetched_bytes = 0;
};

/// How an activated expert is run in one layer.
enum class run_on : std::uint8_t {
  gpu_resident,  ///< on the GPU, weights already there
  gpu_fetched,   ///< fetched over the GPU's link first, then run on the GPU
  ndp,           ///< in place on the NDP device
};

/// Prices layers on a GPU and an NDP device given by `DeviceCost` models.
template <DeviceCost Gpu, DeviceCost Ndp>
class gpu_ndp_system {
 public:
  gpu_ndp_system(Gpu gpu, Ndp ndp) : gpu_(std::move(gpu)), ndp_(std::move(ndp)) {}

  [[nodiscard]] const Gpu& gpu() const noexcept { return gpu_; }
  [[nodiscard]] const Ndp& ndp() const noexcept { return ndp_; }

  /// The time of layer `layer` when expert `e` receives `loads[e]` tokens, runs as
  /// `how[e]` at `bits[e]`, and `tokens` tokens enter the layer.
  ///
  /// Preconditions: `loads`, `how` and `bits` have one entry per expert. No allocation.
  [[nodiscard]] gpu_ndp_layer_time price(layer_id layer, std::span<const std::uint32_t> loads,
                                         std::span<const run_on> how, std::span<const bitwidth> bits,
                                         std::size_t tokens) const noexcept {
    MOEPOLICY_ASSERT(loads.size() == how.size() && loads.size() == bits.size());
    gpu_ndp_layer_time t;
    bool ndp_used = false;
    for (std::size_t e = 0; e < loads.size(); ++e) {
      if (loads[e] == 0) continue;
      const expert_key key{layer, static_cast<expert_id>(e)};
      switch (how[e]) {
        case run_on::gpu_fetched: {
          const bytes b = gpu_.footprint_bytes(key, bits[e]);
          t.fetched_bytes += b;
          t.gpu_seconds += gpu_.transfer_seconds(b);
          [[fallthrough]];
        }
        case run_on::gpu_resident: t.gpu_seconds += gpu_.compute_seconds(key, bits[e], loads[e]); break;
        case run_on::ndp:
          t.ndp_seconds += ndp_.compute_seconds(key, bits[e], loads[e]);
          ndp_used = true;
          break;
      }
    }
    // Activations reach the NDP device once per layer for all its experts; with top-k
    // routing a token may visit several, so `tokens` bounds what crosses the link.
    if (ndp_used) t.ndp_seconds += ndp_.activation_transfer_seconds(tokens);
    t.layer_seconds = std::max(t.gpu_seconds, t.ndp_seconds);
    return t;
  }

  /// MoNDE's rule for an activated NDP expert (seed 001 §5.1.2 describes it as balancing
  /// weight migration against activation migration): fetch it to the GPU when
  /// transfer + GPU compute < NDP compute + activation transfer, at the same precision.
  [[nodiscard]] bool fetch_is_cheaper(expert_key key, bitwidth bits, std::uint32_t load) const noexcept {
    const seconds fetch =
        gpu_.transfer_seconds(gpu_.footprint_bytes(key, bits)) + gpu_.compute_seconds(key, bits, load);
    const seconds in_place = ndp_.compute_seconds(key, bits, load) + ndp_.activation_transfer_seconds(load);
    return fetch < in_place;
  }

 private:
  Gpu gpu_;
  Ndp ndp_;
};

}  // namespace moepolicy
