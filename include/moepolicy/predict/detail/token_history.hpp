// moepolicy/predict/detail/token_history.hpp — what the last m tokens of each layer
// selected, kept in a ring per layer, and their recency-weighted share of each expert: the
// state of the short-horizon models of CXL-MoE §3 (predict/short_horizon_predictor.hpp,
// predict/markov_predictor.hpp). The j-th most recent token (j = 0 the newest) weighs
// decay^j. With `experts` given and decay 1 it also counts, per layer, how many held tokens
// selected each expert, so that the share is a count over the tokens held (the same value
// as the sum of ones, which is exact) without a walk over the ring. Allocates at
// construction only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/core/ids.hpp"

namespace moepolicy::detail {

class token_history {
 public:
  /// `layers` rings of `history` tokens of `top_k` ids; all >= 1, decay in (0, 1] (the
  /// predictors check their configurations). `experts` > 0 (ids below it) and decay 1: the
  /// counts are kept (`counting()`).
  token_history(std::size_t layers, std::size_t history, std::size_t top_k, double decay, std::size_t experts = 0)
      : m_(history),
        k_(top_k),
        E_(decay == 1.0 ? experts : 0),
        ring_(layers * history * top_k, 0),
        head_(layers, 0),
        filled_(layers, 0),
        weights_(history),
        counts_(layers * E_, 0) {
    double w = 1.0;
    for (auto& x : weights_) x = w, w *= decay;
  }

  /// Whether the per-layer counts are kept (`count`).
  [[nodiscard]] bool counting() const noexcept { return E_ != 0; }
  /// How many of layer `l`'s held tokens selected each expert (ids selected twice by one
  /// token count twice). Precondition: `counting()`.
  [[nodiscard]] std::span<const std::uint32_t> counts(layer_id l) const noexcept {
    return std::span<const std::uint32_t>(counts_).subspan(static_cast<std::size_t>(l) * E_, E_);
  }

  /// Tokens held for layer `l` (at most m).
  [[nodiscard]] std::size_t size(layer_id l) const noexcept { return filled_[l]; }

  /// The ids of layer `l`'s newest token. Precondition: `size(l) > 0`.
  [[nodiscard]] std::span<const expert_id> newest(layer_id l) const noexcept {
    const std::size_t slot = (head_[l] + m_ - 1) % m_;
    return std::span<const expert_id>(ring_).subspan((static_cast<std::size_t>(l) * m_ + slot) * k_, k_);
  }

  /// Appends a token's `ids` (top_k of them) to layer `l`, dropping its oldest beyond m.
  void push(layer_id l, std::span<const expert_id> ids) noexcept {
    const auto at = ring_.begin() + static_cast<std::ptrdiff_t>((l * m_ + head_[l]) * k_);
    if (E_ != 0) {
      std::uint32_t* c = counts_.data() + static_cast<std::size_t>(l) * E_;
      if (filled_[l] == m_) {
        for (std::size_t i = 0; i < k_; ++i) --c[at[static_cast<std::ptrdiff_t>(i)]];  // the oldest leaves
      }
      for (const expert_id e : ids) ++c[e];
    }
    std::copy(ids.begin(), ids.end(), at);
    head_[l] = head_[l] + 1 == m_ ? 0 : head_[l] + 1;
    filled_[l] = std::min(filled_[l] + 1, m_);
  }

  /// Sets `share[e]` to the recency-weighted share of layer `l`'s held tokens that selected
  /// e (Σ_e share[e] = k). Precondition: `size(l) > 0`, `share` covers every expert.
  /// Complexity: O(|share| + m · k).
  void weighted_share(layer_id l, std::span<double> share) const noexcept {
    if (E_ != 0) {
      // Every weight is 1: the sums of ones are the counts, exactly.
      const auto c = counts(l);
      const auto total = static_cast<double>(filled_[l]);
      for (std::size_t e = 0; e < share.size(); ++e) share[e] = static_cast<double>(c[e]) / total;
      return;
    }
    std::fill(share.begin(), share.end(), 0.0);
    double total = 0.0;
    const expert_id* ring = ring_.data() + static_cast<std::size_t>(l) * m_ * k_;
    // The j-th most recent token sits j slots behind the head.
    std::size_t slot = head_[l] == 0 ? m_ - 1 : head_[l] - 1;
    for (std::size_t j = 0; j < filled_[l]; ++j) {
      total += weights_[j];
      for (std::size_t i = 0; i < k_; ++i) share[ring[slot * k_ + i]] += weights_[j];
      slot = slot == 0 ? m_ - 1 : slot - 1;
    }
    for (double& x : share) x /= total;
  }

  /// Forgets every layer's tokens.
  void clear() noexcept {
    std::fill(head_.begin(), head_.end(), std::size_t{0});
    std::fill(filled_.begin(), filled_.end(), std::size_t{0});
    std::fill(counts_.begin(), counts_.end(), std::uint32_t{0});
  }

 private:
  std::size_t m_, k_;
  std::size_t E_;                      // experts per layer when counting, else 0
  std::vector<expert_id> ring_;        // layers × m × k
  std::vector<std::size_t> head_;      // next slot to write, per layer
  std::vector<std::size_t> filled_;    // tokens held, per layer
  std::vector<double> weights_;        // decay^j
  std::vector<std::uint32_t> counts_;  // layers × E_: held tokens that selected each expert
};

}  // namespace moepolicy::detail
