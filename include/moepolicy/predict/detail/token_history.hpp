// moepolicy/predict/detail/token_history.hpp — what the last m tokens of each layer
// selected, kept in a ring per layer, and their recency-weighted share of each expert: the
// state of the short-horizon models of CXL-MoE §3 (predict/short_horizon_predictor.hpp,
// predict/markov_predictor.hpp). The j-th most recent token (j = 0 the newest) weighs
// decay^j. Allocates at construction only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

#include "moepolicy/core/ids.hpp"

namespace moepolicy::detail {

class token_history {
 public:
  /// `layers` rings of `history` tokens of `top_k` ids; all >= 1, decay in (0, 1] (the
  /// predictors check their configurations).
  token_history(std::size_t layers, std::size_t history, std::size_t top_k, double decay)
      : m_(history), k_(top_k), ring_(layers * history * top_k, 0), head_(layers, 0), filled_(layers, 0),
        weights_(history) {
    double w = 1.0;
    for (auto& x : weights_) x = w, w *= decay;
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
    std::copy(ids.begin(), ids.end(), ring_.begin() + static_cast<std::ptrdiff_t>((l * m_ + head_[l]) * k_));
    head_[l] = (head_[l] + 1) % m_;
    filled_[l] = std::min(filled_[l] + 1, m_);
  }

  /// Sets `share[e]` to the recency-weighted share of layer `l`'s held tokens that selected
  /// e (Σ_e share[e] = k). Precondition: `size(l) > 0`, `share` covers every expert.
  /// Complexity: O(|share| + m · k).
  void weighted_share(layer_id l, std::span<double> share) const noexcept {
    std::fill(share.begin(), share.end(), 0.0);
    double total = 0.0;
    const expert_id* ring = ring_.data() + static_cast<std::size_t>(l) * m_ * k_;
    for (std::size_t j = 0; j < filled_[l]; ++j) {
      // The j-th most recent token sits j slots behind the head.
      const std::size_t slot = (head_[l] + m_ - 1 - j) % m_;
      total += weights_[j];
      for (std::size_t i = 0; i < k_; ++i) share[ring[slot * k_ + i]] += weights_[j];
    }
    for (double& x : share) x /= total;
  }

  /// Forgets every layer's tokens.
  void clear() noexcept {
    std::fill(head_.begin(), head_.end(), std::size_t{0});
    std::fill(filled_.begin(), filled_.end(), std::size_t{0});
  }

 private:
  std::size_t m_, k_;
  std::vector<expert_id> ring_;      // layers × m × k
  std::vector<std::size_t> head_;    // next slot to write, per layer
  std::vector<std::size_t> filled_;  // tokens held, per layer
  std::vector<double> weights_;      // decay^j
};

}  // namespace moepolicy::detail
