// moepolicy/sim/gpu_ndp.hpp — the two devices of a GPU + CXL-NDP system, and MoNDE's rule
// for an expert that is not on the GPU.
//
// The context-aware GPU-NDP system (Context-Aware GPU-NDP §4, Fig. 1) runs each activated
// expert where it lives: GPU-resident experts on the GPU at full precision, the others in
// place on the CXL-NDP device at their bitwidth. `gpu_ndp_system` holds the two `DeviceCost`
// models; the timed replay of such systems (sim/gpu_ndp_replay.hpp) prices every piece of
// work with them on a timeline (sim/timeline.hpp).
//
// MoNDE's rule (as TriMoE §5.1.2 describes it: it "balances load between GPU and NDP by
// modeling the cost trade-off between weight migration (to GPU) and activation migration
// (to NDP)"): an activated expert that is not on the GPU is migrated to it when
//   transfer(W) + GPU compute(load) < NDP compute(load) + activation transfer(load),
// both at the same precision — an expert is *hot* when its load makes moving its weights
// cheaper than moving its activations.
#pragma once

#include <cstdint>
#include <utility>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"

namespace moepolicy {

/// The GPU and the NDP device of a GPU + CXL-NDP system, as `DeviceCost` models.
template <DeviceCost Gpu, DeviceCost Ndp>
class gpu_ndp_system {
 public:
  gpu_ndp_system(Gpu gpu, Ndp ndp) : gpu_(std::move(gpu)), ndp_(std::move(ndp)) {}

  [[nodiscard]] const Gpu& gpu() const noexcept { return gpu_; }
  [[nodiscard]] const Ndp& ndp() const noexcept { return ndp_; }

  /// MoNDE's rule (see the header): whether moving the expert's weights to the GPU beats
  /// running it in place for `load` tokens, at `bits` on both sides.
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
