// moepolicy/predict/precision_target.hpp — the budget-feasible high-precision target set per
// layer, with hysteresis, and the promote/demote candidates (DynaExq, "Dynamic Expert
// Quantization for Scalable Mixture-of-Experts Inference", §3.5 "Budget-feasible
// Selection" and "Hysteresis for Stability").
//
// Given the hotness h_{l,e} of one layer (predict/hotness.hpp), its capacity n_l
// (predict/precision_budget.hpp) and the set H_l currently pinned at high precision, the
// policy picks a target set T_l with |T_l| <= n_l; the promotion candidates are T_l \ H_l
// and the demotion candidates H_l \ T_l (§3.5). Experts are ranked by hotness descending,
// ties to the lower expert id; rank r is 0-based below (the hottest expert has r = 0).
//
// Modes (`target_hysteresis`), reconstructed from the prose:
//   none        T = the n_l best-ranked eligible experts: the paper's plain top-n_l rule.
//   margin      additive margin δ. "An expert is promoted only if its hotness exceeds that
//               of the lowest-ranked expert in the current set by a margin; symmetrically,
//               an expert is evicted only if its hotness falls below the highest-ranked
//               expert outside the set by the same margin." Both sentences state one
//               condition on a pair — outsider o displaces member m iff h_o > h_m + δ — so
//               T is built from H by (1) keeping the n_l best members (fewer when the
//               capacity shrank: the budget beats hysteresis), (2) filling free slots with
//               the best outsiders (nobody is displaced, so no margin applies), then
//               (3) pairing the i-th coldest member with the i-th hottest outsider and
//               swapping while h_o > h_m + δ. Afterwards no outsider is hotter than any
//               member by more than δ; with δ = 0 T is a top-n_l set whose ties stay with
//               the incumbents.
//   rank_slack  slack s in ranks: "an expert must enter a slightly wider candidate set
//               before it becomes eligible". Two readings, both offered (`rank_slack_form`):
//                 symmetric        members stay while r < n_l + s; outsiders enter only with
//                                  r < n_l − s (0 when s >= n_l). Entrants take precedence;
//                                  when stayers and entrants exceed n_l the worst-ranked
//                                  stayers go. A swap needs a rank gap of about 2s.
//                 protect_members  members stay while r < n_l + s; outsiders enter only
//                                  into free slots (left by members that fell to
//                                  r >= n_l + s). A swap needs a rank gap of about s.
//               In both, free slots are then filled with the best outsiders. s = 0 gives
//               the plain top-n_l rule.
//
// Eligibility (an extension, documented): an expert whose hotness is <= `min_hotness`
// never enters T, and a member at or below it is demoted. The default 0 keeps experts that
// have seen no traffic at low precision (promoting them moves bytes for no accuracy gain);
// a negative value gives the literal top-n_l rule over all experts.
//
// Outputs are views into buffers owned by the selector, one set per layer, valid until the
// next `select` for that layer: T in rank order (hottest first), promotions hottest first,
// demotions coldest first — the order in which a transition queue should serve them.
// Not synchronised; allocation-free after construction.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// How the target set resists churn.
enum class target_hysteresis : std::uint8_t {
  none,        ///< plain top-n_l
  margin,      ///< additive margin on hotness
  rank_slack,  ///< slack on ranks
};

/// The two readings of the rank slack; see the header comment.
enum class rank_slack_form : std::uint8_t { symmetric, protect_members };

/// Configuration of `precision_target_selector`.
struct precision_target_config {
  target_hysteresis mode = target_hysteresis::margin;
  /// δ for `target_hysteresis::margin`, in hotness units (selections, or shares of traffic with
  /// `interval_counts::share`); finite and >= 0.
  double margin = 0.0;
  /// s for `target_hysteresis::rank_slack`, in ranks.
  std::size_t rank_slack = 0;
  rank_slack_form slack_form = rank_slack_form::symmetric;
  /// Experts with hotness <= this never belong to the target set; finite.
  double min_hotness = 0.0;

  /// Field by field: equal configurations select alike on equal inputs.
  friend bool operator==(const precision_target_config&, const precision_target_config&) = default;
};

/// One layer's result: views into the selector, valid until its next `select` of the layer.
struct layer_target {
  /// T_l, hottest first; size <= n_l.
  std::span<const expert_id> target;
  /// T_l \ H_l, hottest first.
  std::span<const expert_id> promote;
  /// H_l \ T_l, coldest first.
  std::span<const expert_id> demote;
};

/// Picks each layer's high-precision target set and its promote/demote candidates
/// (DynaExq §3.5).
class precision_target_selector {
 public:
  /// One capacity n_l per layer.
  ///
  /// Throws: `invalid_argument` when `capacity` is empty or longer than 65536, when
  /// `num_experts` is 0 or above 65536, when a capacity exceeds `num_experts`, when
  /// `margin` is negative or not finite, or when `min_hotness` is not finite.
  /// Complexity: O(L · E) time and memory, the only allocation.
  precision_target_selector(std::span<const std::uint32_t> capacity, std::size_t num_experts,
                            const precision_target_config& config = {})
      : experts_(num_experts), config_(config), capacity_(capacity.begin(), capacity.end()) {
    init();
  }

  /// The same capacity for every layer.
  ///
  /// Throws: as the other constructor; also when `num_layers` is 0.
  precision_target_selector(std::size_t num_layers, std::size_t num_experts, std::uint32_t capacity,
                            const precision_target_config& config = {})
      : experts_(num_experts), config_(config), capacity_(num_layers, capacity) {
    init();
  }

  [[nodiscard]] std::size_t num_layers() const noexcept { return capacity_.size(); }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }
  [[nodiscard]] const precision_target_config& config() const noexcept { return config_; }

  /// n_l of `layer`.
  [[nodiscard]] std::uint32_t capacity(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < capacity_.size());
    return capacity_[layer];
  }

  /// Changes n_l (after a re-budgeting); the next `select` of the layer enforces it.
  ///
  /// Throws: `invalid_argument` when `layer` is out of range or `n > num_experts()`.
  void set_capacity(layer_id layer, std::uint32_t n) {
    constexpr std::string_view fn = "precision_target_selector::set_capacity";
    if (layer >= capacity_.size()) detail::throw_invalid(fn, "layer must be < num_layers", layer);
    if (n > experts_) detail::throw_invalid(fn, "capacity must be <= num_experts", n);
    capacity_[layer] = n;
  }

  /// Computes T_l from `hotness` against the current set H_l given as `current` (one byte
  /// per expert, nonzero = in H_l), and remembers T_l as the layer's membership.
  ///
  /// Preconditions: `layer < num_layers()`; `hotness.size() == current.size() ==
  /// num_experts()`; hotness not NaN (asserted). `current` may alias `membership(layer)`.
  /// Returns: T_l, T_l \ H_l and H_l \ T_l, views valid until the next `select` of `layer`.
  /// Complexity: O(E log E) for the ranking below 128 experts, O(E) (radix) from 128 up;
  /// O(E) for the rest; no allocation.
  layer_target select(layer_id layer, std::span<const double> hotness, std::span<const std::uint8_t> current) noexcept {
    MOEPOLICY_ASSERT(layer < capacity_.size());
    MOEPOLICY_ASSERT(hotness.size() == experts_ && current.size() == experts_);
    for (std::size_t e = 0; e < experts_; ++e) cur_[e] = current[e] != 0 ? 1 : 0;
    rank(hotness);
    decide(hotness, capacity_[layer], order_);
    return publish(layer, order_);
  }

  /// The ranking `select` makes of `hotness`: every expert, hottest first, ties to the lower
  /// id. Selectors of any configuration and capacity rank alike, so one ranking may serve
  /// several of them through `select_ranked`.
  ///
  /// Preconditions: `hotness.size() == num_experts()`; not NaN (asserted).
  /// Returns: a view valid until the next `rank_only` or `select` of this selector.
  /// Complexity: as `select`'s ranking; no allocation.
  [[nodiscard]] std::span<const expert_id> rank_only(std::span<const double> hotness) noexcept {
    MOEPOLICY_ASSERT(hotness.size() == experts_);
    rank(hotness);
    return order_;
  }

  /// `select` with the ranking of `hotness` given as `order` (from `rank_only` of a selector
  /// with as many experts, on the same hotness): the same result, without ranking again.
  ///
  /// Preconditions: as `select`; `order` is `hotness`'s ranking, size `num_experts()`.
  /// Complexity: O(E); no allocation.
  layer_target select_ranked(layer_id layer, std::span<const double> hotness, std::span<const expert_id> order,
                             std::span<const std::uint8_t> current) noexcept {
    MOEPOLICY_ASSERT(layer < capacity_.size());
    MOEPOLICY_ASSERT(hotness.size() == experts_ && current.size() == experts_ && order.size() == experts_);
    for (std::size_t e = 0; e < experts_; ++e) cur_[e] = current[e] != 0 ? 1 : 0;
    decide(hotness, capacity_[layer], order);
    return publish(layer, order);
  }

  /// `select` against the layer's previous target (its `membership`), the usual call when
  /// the selector's own targets stand for the pinned sets. Initially every set is empty.
  layer_target select(layer_id layer, std::span<const double> hotness) noexcept {
    MOEPOLICY_ASSERT(layer < capacity_.size());
    return select(layer, hotness, membership(layer));
  }

  /// The layer's last target set as one byte per expert (1 = member).
  [[nodiscard]] std::span<const std::uint8_t> membership(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < capacity_.size());
    return std::span<const std::uint8_t>(member_).subspan(static_cast<std::size_t>(layer) * experts_, experts_);
  }

  /// The layer's last result (empty before its first `select`).
  [[nodiscard]] layer_target last(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < capacity_.size());
    const std::size_t base = static_cast<std::size_t>(layer) * experts_;
    const std::size_t s = 3 * static_cast<std::size_t>(layer);
    const std::span<const expert_id> t(target_), p(promote_), d(demote_);
    return {t.subspan(base, sizes_[s]), p.subspan(base, sizes_[s + 1]), d.subspan(base, sizes_[s + 2])};
  }

  /// Empties every layer's membership. No allocation.
  void reset() noexcept {
    std::fill(member_.begin(), member_.end(), std::uint8_t{0});
    std::fill(sizes_.begin(), sizes_.end(), std::uint32_t{0});
  }

 private:
  void init() {
    constexpr std::string_view fn = "precision_target_selector";
    if (capacity_.empty() || capacity_.size() > 65536) {
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", capacity_.size());
    }
    if (experts_ == 0 || experts_ > 65536) detail::throw_invalid(fn, "num_experts must be in [1, 65536]", experts_);
    for (std::uint32_t n : capacity_) {
      if (n > experts_) detail::throw_invalid(fn, "capacity must be <= num_experts", n);
    }
    if (!(std::isfinite(config_.margin) && config_.margin >= 0.0)) {
      detail::throw_invalid(fn, "margin must be finite and >= 0", config_.margin);
    }
    if (!std::isfinite(config_.min_hotness))
      detail::throw_invalid(fn, "min_hotness must be finite", config_.min_hotness);
    const std::size_t cells = capacity_.size() * experts_;
    member_.assign(cells, 0);
    target_.assign(cells, 0);
    promote_.assign(cells, 0);
    demote_.assign(cells, 0);
    sizes_.assign(3 * capacity_.size(), 0);
    order_.assign(experts_, 0);
    order_tmp_.assign(experts_, 0);
    key_.assign(experts_, 0);
    key_tmp_.assign(experts_, 0);
    cur_.assign(experts_, 0);
    next_.assign(experts_, 0);
  }

  // Orders experts by hotness descending, ties to the lower id. Small layers use a
  // comparison sort; from 128 experts up, a stable LSD radix sort on order-preserving keys
  // (one histogram pass, then one scatter pass per byte that is not the same in every key)
  // avoids the branch mispredictions that dominate comparison sorts of fresh keys (measured
  // in bench/residency_bench: 2× faster at E = 128, 4× at E = 512; slower below 128, where
  // its fixed 8 × 256-bucket cost dominates). Stability keeps ties in ascending id order.
  // Partial selection would suffice, but measured slower here. `none` and `margin` read only
  // the order of the members of H and of the n + 1 best outsiders (`take` keeps members,
  // then fills free slots with the best outsiders; the margin's swaps bring in the next
  // best, and its stopping test reads one more; T holds at most n), so that subset alone
  // could be ordered, after an `std::nth_element` of the outsiders' keys. With the same
  // outputs on random inputs and on real decode heat, that ran 4.96–5.14 µs per layer
  // against 4.22–4.78 µs for this full radix ranking at DeepSeek-V3 shape (E = 256,
  // n = 64: 129 experts ordered), and 2.92–3.14 against 2.79–2.82 µs at Qwen3-235B shape
  // (bench/shapes_bench, interleaved, loaded machine): the radix's fixed cost (8 × 256
  // buckets) does not shrink with the subset and the selection adds a pass. (`rank_slack`
  // needs absolute ranks, so all experts' order.) An earlier variant ordering the 2n + s
  // + 1 best ranks and the members beyond them by comparisons measured 9.7 against 4.4 µs.
  void rank(std::span<const double> h) noexcept {
    std::iota(order_.begin(), order_.end(), expert_id{0});
    if (experts_ < radix_threshold) {
      std::sort(order_.begin(), order_.end(), [&](expert_id a, expert_id b) {
        MOEPOLICY_ASSERT(!std::isnan(h[a]) && !std::isnan(h[b]));
        return h[a] > h[b] || (h[a] == h[b] && a < b);
      });
      return;
    }
    std::array<std::array<std::uint32_t, 256>, 8> count{};
    for (std::size_t e = 0; e < experts_; ++e) {
      MOEPOLICY_ASSERT(!std::isnan(h[e]));
      const std::uint64_t k = descending_key(h[e]);
      key_[e] = k;
      for (std::size_t d = 0; d < 8; ++d) ++count[d][(k >> (8 * d)) & 0xFF];
    }
    std::uint64_t* keys = key_.data();
    std::uint64_t* keys_out = key_tmp_.data();
    expert_id* ids = order_.data();
    expert_id* ids_out = order_tmp_.data();
    for (std::size_t d = 0; d < 8; ++d) {
      auto& c = count[d];
      const unsigned shift = 8 * static_cast<unsigned>(d);
      if (c[(keys[0] >> shift) & 0xFF] == experts_) continue;  // every key has this byte
      std::uint32_t sum = 0;
      for (auto& x : c) sum += std::exchange(x, sum);
      for (std::size_t i = 0; i < experts_; ++i) {
        const std::uint32_t at = c[(keys[i] >> shift) & 0xFF]++;
        keys_out[at] = keys[i];
        ids_out[at] = ids[i];
      }
      std::swap(keys, keys_out);
      std::swap(ids, ids_out);
    }
    if (ids != order_.data()) std::copy(ids, ids + experts_, order_.begin());
  }

  // Maps hotness to an unsigned key whose ascending order is the hotness's descending order
  // (−0 and +0 map alike, as they compare equal).
  static std::uint64_t descending_key(double x) noexcept {
    if (x == 0.0) x = 0.0;
    const auto bits = std::bit_cast<std::uint64_t>(x);
    const std::uint64_t ascending = (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
    return ~ascending;
  }

  static constexpr std::size_t radix_threshold = 128;

  // Writes next_ from cur_, order_ and the hotness.
  void decide(std::span<const double> h, std::size_t n, std::span<const expert_id> order) noexcept {
    std::fill(next_.begin(), next_.end(), std::uint8_t{0});
    const auto eligible = [&](expert_id e) { return h[e] > config_.min_hotness; };
    std::size_t count = 0;
    // Adds, in rank order, the experts `want` accepts, until n are in.
    const auto take = [&](auto&& want) {
      for (std::size_t r = 0; r < experts_ && count < n; ++r) {
        const expert_id e = order[r];
        if (next_[e] == 0 && eligible(e) && want(r, e)) {
          next_[e] = 1;
          ++count;
        }
      }
    };
    const auto any = [](std::size_t, expert_id) { return true; };

    switch (config_.mode) {
      case target_hysteresis::none:
        take(any);
        break;
      case target_hysteresis::margin: {
        take([&](std::size_t, expert_id e) { return cur_[e] != 0; });  // keep the best n members
        take(any);                                                     // fill free slots
        // Swap the i-th coldest member with the i-th hottest outsider while the outsider is
        // hotter by more than δ. A swapped-in outsider ranks before the member it displaces,
        // so the two cursors only move towards each other.
        std::size_t lo = 0, hi = experts_;
        for (;;) {
          while (hi > 0 && next_[order[hi - 1]] == 0) --hi;
          while (lo < experts_ && (next_[order[lo]] != 0 || !eligible(order[lo]))) ++lo;
          if (hi == 0 || lo >= hi - 1) break;
          const expert_id m = order[hi - 1], o = order[lo];
          if (!(h[o] > h[m] + config_.margin)) break;
          next_[o] = 1;
          next_[m] = 0;
          --hi;
          ++lo;
        }
        break;
      }
      case target_hysteresis::rank_slack: {
        const std::size_t s = config_.rank_slack;
        const std::size_t stay = n + s;
        if (config_.slack_form == rank_slack_form::symmetric) {
          const std::size_t enter = n > s ? n - s : 0;
          take([&](std::size_t r, expert_id e) { return cur_[e] != 0 ? r < stay : r < enter; });
        } else {
          take([&](std::size_t r, expert_id e) { return cur_[e] != 0 && r < stay; });
        }
        take(any);  // free slots go to the best remaining experts
        break;
      }
    }
  }

  layer_target publish(layer_id layer, std::span<const expert_id> order) noexcept {
    const std::size_t base = static_cast<std::size_t>(layer) * experts_;
    std::uint32_t nt = 0, np = 0, nd = 0;
    for (std::size_t r = 0; r < experts_; ++r) {
      const expert_id e = order[r];
      if (next_[e] != 0) {
        target_[base + nt++] = e;
        if (cur_[e] == 0) promote_[base + np++] = e;
      }
      const expert_id c = order[experts_ - 1 - r];
      if (cur_[c] != 0 && next_[c] == 0) demote_[base + nd++] = c;
    }
    std::copy(next_.begin(), next_.end(), member_.begin() + static_cast<std::ptrdiff_t>(base));
    const std::size_t s = 3 * static_cast<std::size_t>(layer);
    sizes_[s] = nt;
    sizes_[s + 1] = np;
    sizes_[s + 2] = nd;
    return last(layer);
  }

  std::size_t experts_;
  precision_target_config config_;
  std::vector<std::uint32_t> capacity_;
  std::vector<std::uint8_t> member_;
  std::vector<expert_id> target_, promote_, demote_;
  std::vector<std::uint32_t> sizes_;
  std::vector<expert_id> order_, order_tmp_;
  std::vector<std::uint64_t> key_, key_tmp_;
  std::vector<std::uint8_t> cur_, next_;
};

}  // namespace moepolicy
