// moepolicy/sim/timed_residency.hpp — where each expert's weights are, and from when, on the
// timeline of the timed model (sim/timeline.hpp).
//
// A `timed_residency` records, for every expert of every layer and every *tier* (a place a
// copy can live: GPU HBM, the CXL-NDP device, host memory striped over the DIMMs, one DIMM —
// the replay names its tiers), whether a copy is there, at what bitwidth, and when it became
// usable. It enforces the rule the timed model is built on: after `seal()`, a copy appears
// only through `install`, which takes the `transfer_receipt` of the transfer that brought it
// and makes the copy usable only from the moment the receipt says it landed. Before `seal()`,
// `preload` places the copies that exist before the modelled run begins (the weights loaded
// from storage into host or NDP memory), at time 0. Dropping a copy is free: another copy
// remains where the weights came from. Per tier it counts installs, the bytes their receipts
// carried, and drops, so a test can check them against the ledger's link bytes.
//
// Cost. The table is layers × experts × tiers entries of 16 bytes, allocated at
// construction; every call is O(1) and allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/sim/timeline.hpp"

namespace moepolicy {

/// Index of a tier of a `timed_residency`.
using tier_id = std::uint8_t;

/// Counts of one tier.
struct tier_stats {
  std::size_t preloads = 0;
  std::size_t installs = 0;
  /// Σ of the installing receipts' payloads.
  bytes installed_bytes = 0;
  std::size_t drops = 0;
};

/// Copies of expert weights per tier, with the time each became usable (see the header).
class timed_residency {
 public:
  /// Never: the `ready_at` of an absent copy.
  static constexpr seconds never = std::numeric_limits<seconds>::infinity();

  /// Throws: `invalid_argument` unless layers, experts and tiers are >= 1 and tiers <= 255.
  timed_residency(std::size_t layers, std::size_t experts, std::size_t tiers)
      : layers_(layers), experts_(experts), tiers_(tiers) {
    constexpr std::string_view fn = "timed_residency::timed_residency";
    if (layers == 0) detail::throw_invalid(fn, "layers must be >= 1", layers);
    if (experts == 0) detail::throw_invalid(fn, "experts must be >= 1", experts);
    if (tiers == 0 || tiers > 255) detail::throw_invalid(fn, "tiers must be in [1, 255]", tiers);
    cells_.assign(layers * experts * tiers, cell{});
    stats_.assign(tiers, tier_stats{});
  }

  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }
  [[nodiscard]] std::size_t num_tiers() const noexcept { return tiers_; }
  [[nodiscard]] bool sealed() const noexcept { return sealed_; }

  /// Places a copy that exists before the run (usable at time 0).
  ///
  /// Throws: `invalid_argument` after `seal()`, or for an expert or tier out of range.
  void preload(expert_key key, tier_id tier, bitwidth bits) {
    constexpr std::string_view fn = "timed_residency::preload";
    if (sealed_)
      detail::throw_invalid(fn, "the run has begun (seal() was called): a copy needs a transfer, tier", int{tier});
    cell& c = at(key, tier, fn);
    c = {0.0, bits.bits(), true};
    ++stats_[tier].preloads;
  }

  /// Ends the preload: from now on copies appear only through `install`.
  void seal() noexcept { sealed_ = true; }

  /// Installs a copy that `receipt` brought, usable from `receipt.landed()`; replaces any
  /// copy already there. `must_cross` is the number of bytes the route had to move for this
  /// copy (the whole footprint over PCIe; (D−1)/D of it when striping from one DIMM).
  ///
  /// Throws: `invalid_argument` when the receipt is empty or crossed no link, carried fewer than `must_cross`
  /// bytes, `must_cross` is 0, or the expert or tier is out of range.
  void install(expert_key key, tier_id tier, bitwidth bits, bytes must_cross, const transfer_receipt& receipt) {
    constexpr std::string_view fn = "timed_residency::install";
    cell& c = at(key, tier, fn);
    if (!receipt.valid()) {
      detail::throw_invalid(fn, "a copy needs the receipt of its transfer, got an empty receipt for tier", int{tier});
    }
    if (!receipt.crossed_link()) {
      detail::throw_invalid(fn, "a copy needs a transfer that crossed a link, got a memory-only job's receipt for tier",
                            int{tier});
    }
    if (must_cross == 0) detail::throw_invalid(fn, "must_cross must be > 0", must_cross);
    if (receipt.size() < must_cross) {
      detail::throw_invalid(fn,
                            "the receipt carried fewer bytes than the copy needs (" + std::to_string(must_cross) + ")",
                            receipt.size());
    }
    c = {receipt.landed(), bits.bits(), true};
    ++stats_[tier].installs;
    stats_[tier].installed_bytes += receipt.size();
  }

  /// Removes the copy in `tier` (no cost); nothing when absent.
  void drop(expert_key key, tier_id tier) noexcept {
    cell& c = cells_[index(key, tier)];
    if (!c.present) return;
    c = cell{};
    ++stats_[tier].drops;
  }

  /// Whether a copy is in `tier`, landed or not.
  [[nodiscard]] bool present(expert_key key, tier_id tier) const noexcept { return cells_[index(key, tier)].present; }
  /// Whether the copy in `tier` exists and has landed by `now`.
  [[nodiscard]] bool usable(expert_key key, tier_id tier, seconds now) const noexcept {
    const cell& c = cells_[index(key, tier)];
    return c.present && c.ready <= now;
  }
  /// When the copy in `tier` became (or becomes) usable; `never` when absent.
  [[nodiscard]] seconds ready_at(expert_key key, tier_id tier) const noexcept {
    const cell& c = cells_[index(key, tier)];
    return c.present ? c.ready : never;
  }
  /// The copy's bitwidth.
  ///
  /// Preconditions: `present(key, tier)`.
  [[nodiscard]] bitwidth bits(expert_key key, tier_id tier) const noexcept {
    MOEPOLICY_ASSERT(present(key, tier));
    return bitwidth{cells_[index(key, tier)].bits};
  }
  /// Copies present in `tier` in `layer`.
  [[nodiscard]] std::size_t count(layer_id layer, tier_id tier) const noexcept {
    std::size_t n = 0;
    for (std::size_t e = 0; e < experts_; ++e)
      n += present({layer, static_cast<expert_id>(e)}, tier) ? std::size_t{1} : std::size_t{0};
    return n;
  }
  [[nodiscard]] const tier_stats& stats(tier_id tier) const noexcept {
    MOEPOLICY_ASSERT(tier < tiers_);
    return stats_[tier];
  }

 private:
  struct cell {
    seconds ready = never;
    int bits = 16;
    bool present = false;
  };

  [[nodiscard]] std::size_t index(expert_key key, tier_id tier) const noexcept {
    MOEPOLICY_ASSERT(key.layer < layers_ && key.expert < experts_ && tier < tiers_);
    return (static_cast<std::size_t>(key.layer) * experts_ + key.expert) * tiers_ + tier;
  }
  cell& at(expert_key key, tier_id tier, std::string_view fn) {
    if (key.layer >= layers_) detail::throw_invalid(fn, "layer out of range", key.layer);
    if (key.expert >= experts_) detail::throw_invalid(fn, "expert out of range", key.expert);
    if (tier >= tiers_) detail::throw_invalid(fn, "tier out of range", int{tier});
    return cells_[index(key, tier)];
  }

  std::size_t layers_, experts_, tiers_;
  std::vector<cell> cells_;
  std::vector<tier_stats> stats_;
  bool sealed_ = false;
};

}  // namespace moepolicy
