// moepolicy/predict/transition_predictor.hpp — a cross-layer transition predictor: layer
// l's experts predict layer l+1's, from counts. Models `PrefetchPredictor`.
//
// The edge system (Edge-MoE, "Enabling MoE on the Edge via Importance-Driven Expert
// Scheduling", §5.2) predicts layer l+1's scores by running its gate on hidden states that
// only the model can produce; a routing trace cannot drive that. What a trace can drive is
// the dependence it exploits — a token's experts at layer l say much about its experts at
// layer l+1 — measured by counts (the FLAME-MoE provenance reports top-1 → top-1 accuracy
// of 0.17–0.28 against 0.016 by chance). Per adjacent pair of layers:
//   N_l(e)      tokens that selected e at layer l (and were seen at layer l+1),
//   C_l(e, f)   of those, the ones that selected f at layer l+1,
//   P_l(f | e) = C_l(e, f) / N_l(e).
// After observing a batch at layer l the predictor scores layer l+1 for each token t with
// selection S_t as p_t(f) = mean over e in S_t with N_l(e) > 0 of P_l(f | e), and for the
// batch as the chance that some token selects f, 1 − Π_t (1 − p_t(f)). Layer 0, and a
// layer whose previous layer was not observed in the same step, has no prediction.
//
// Learning is online (every observed pair of consecutive layers of a step updates the
// counts, tokens matched by position) unless `set_learning(false)` freezes the counts —
// e.g. after the calibration requests of the Granite trace. Counts survive
// `begin_request`. A batch's first `max_batch_tokens` tokens are used.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `transition_predictor`.
struct transition_config {
  /// MoE layers, experts per layer and top-k of the model, each >= 1 (k <= experts).
  std::uint32_t num_layers = 0;
  std::uint32_t num_experts = 0;
  std::uint32_t top_k = 0;
  /// Tokens of a batch used for learning and prediction, >= 1.
  std::uint32_t max_batch_tokens = 4096;
  /// Learn from every observed pair of layers (false: counts stay as they are).
  bool learn = true;
};

/// Predicts layer l+1's experts from layer l's, with learned transition counts.
class transition_predictor {
 public:
  /// Throws: `invalid_argument` for a dimension of 0 (or above 65536; num_experts above
  /// 4096), `top_k > num_experts`, or `max_batch_tokens` of 0.
  explicit transition_predictor(const transition_config& cfg) : cfg_(checked(cfg)), learn_(cfg.learn) {
    const std::size_t L = cfg_.num_layers;
    const std::size_t E = cfg_.num_experts;
    const std::size_t pairs = L > 1 ? L - 1 : 0;
    pair_counts_.assign(pairs * E * E, 0);
    from_counts_.assign(pairs * E, 0);
    prev_ids_.assign(static_cast<std::size_t>(cfg_.max_batch_tokens) * cfg_.top_k, 0);
    prev_pos_.assign(cfg_.max_batch_tokens, 0);
    next_.assign(E, 0.0f);
    miss_.assign(E, 0.0);
    token_.assign(E, 0.0);
  }

  [[nodiscard]] const transition_config& config() const noexcept { return cfg_; }
  /// Turns learning on or off.
  void set_learning(bool on) noexcept { learn_ = on; }
  [[nodiscard]] bool learning() const noexcept { return learn_; }

  /// P_l(f | e): the learned chance that a token with e at layer l selects f at l+1 (0
  /// without observations).
  [[nodiscard]] double transition(layer_id l, expert_id e, expert_id f) const noexcept {
    const std::size_t E = cfg_.num_experts;
    const std::uint64_t n = from_counts_[static_cast<std::size_t>(l) * E + e];
    if (n == 0) return 0.0;
    return static_cast<double>(pair_counts_[(static_cast<std::size_t>(l) * E + e) * E + f]) / static_cast<double>(n);
  }

  /// See `PrefetchPredictor`: layer l's scores from the batch of layer l − 1 observed in
  /// this step. Complexity: O(num_experts).
  bool predict(layer_id l, std::span<float> out) noexcept {
    MOEPOLICY_ASSERT(l < cfg_.num_layers && out.size() == cfg_.num_experts);
    if (have_next_ && next_layer_ == l) {
      std::copy(next_.begin(), next_.end(), out.begin());
      return next_any_;
    }
    std::fill(out.begin(), out.end(), 0.0f);
    return false;
  }

  /// See `PrefetchPredictor`. Complexity: O(tokens · k · (k + num_experts)).
  void observe(const batch_view& b) noexcept {
    const layer_id l = b.ref.layer;
    const std::size_t k = cfg_.top_k;
    const std::size_t E = cfg_.num_experts;
    MOEPOLICY_ASSERT(l < cfg_.num_layers && b.top_k == cfg_.top_k);
    const std::size_t tokens = std::min<std::size_t>(b.tokens(), cfg_.max_batch_tokens);

    if (learn_ && have_prev_ && prev_layer_ + 1 == l) learn_pair(b, tokens);

    // Scores for layer l + 1.
    have_next_ = false;
    if (static_cast<std::size_t>(l) + 1 < cfg_.num_layers) {
      std::fill(miss_.begin(), miss_.end(), 1.0);
      for (std::size_t t = 0; t < tokens; ++t) {
        std::fill(token_.begin(), token_.end(), 0.0);
        std::size_t known = 0;
        for (expert_id e : b.experts_of(t)) {
          const std::size_t row = static_cast<std::size_t>(l) * E + e;
          const std::uint64_t n = from_counts_[row];
          if (n == 0) continue;
          ++known;
          const std::uint32_t* c = pair_counts_.data() + row * E;
          const double inv = 1.0 / static_cast<double>(n);
          for (std::size_t f = 0; f < E; ++f) token_[f] += static_cast<double>(c[f]) * inv;
        }
        if (known == 0) continue;
        for (std::size_t f = 0; f < E; ++f) miss_[f] *= 1.0 - std::min(1.0, token_[f] / static_cast<double>(known));
      }
      next_any_ = false;
      for (std::size_t f = 0; f < E; ++f) {
        next_[f] = static_cast<float>(1.0 - miss_[f]);
        next_any_ = next_any_ || next_[f] > 0.0f;
      }
      next_layer_ = static_cast<layer_id>(l + 1);
      have_next_ = true;
    }

    // Keep this batch to pair with the next layer's.
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto ids = b.experts_of(t);
      std::copy(ids.begin(), ids.end(), prev_ids_.begin() + static_cast<std::ptrdiff_t>(t * k));
      prev_pos_[t] = b.positions[t];
    }
    prev_tokens_ = tokens;
    prev_layer_ = l;
    have_prev_ = true;
  }

  /// A step ended: nothing pairs across steps.
  void end_step() noexcept { have_prev_ = have_next_ = false; }
  /// A new sequence: as `end_step`; the counts stay.
  void begin_request() noexcept { end_step(); }

 private:
  static transition_config checked(const transition_config& c) {
    constexpr const char* fn = "transition_predictor";
    if (c.num_layers == 0 || c.num_layers > 65536) detail::throw_invalid(fn, "num_layers must be in [1, 65536]", c.num_layers);
    if (c.num_experts == 0 || c.num_experts > 4096) {
      detail::throw_invalid(fn, "num_experts must be in [1, 4096]", c.num_experts);
    }
    if (c.top_k == 0 || c.top_k > c.num_experts) detail::throw_invalid(fn, "top_k must be in [1, num_experts]", c.top_k);
    if (c.max_batch_tokens == 0) detail::throw_invalid(fn, "max_batch_tokens must be >= 1", c.max_batch_tokens);
    return c;
  }

  /// Counts the transitions from the kept batch (layer l − 1) to `b`, joining tokens on
  /// position (both batches are sorted by position).
  void learn_pair(const batch_view& b, std::size_t tokens) noexcept {
    const std::size_t k = cfg_.top_k;
    const std::size_t E = cfg_.num_experts;
    const std::size_t from = prev_layer_;
    std::size_t i = 0;
    for (std::size_t t = 0; t < tokens; ++t) {
      while (i < prev_tokens_ && prev_pos_[i] < b.positions[t]) ++i;
      if (i == prev_tokens_) break;
      if (prev_pos_[i] != b.positions[t]) continue;
      const auto to = b.experts_of(t);
      for (std::size_t a = 0; a < k; ++a) {
        const std::size_t row = from * E + prev_ids_[i * k + a];
        ++from_counts_[row];
        for (expert_id f : to) ++pair_counts_[row * E + f];
      }
    }
  }

  transition_config cfg_;
  bool learn_;
  std::vector<std::uint32_t> pair_counts_;   // (layers − 1) × E × E
  std::vector<std::uint64_t> from_counts_;   // (layers − 1) × E
  std::vector<expert_id> prev_ids_;
  std::vector<std::uint32_t> prev_pos_;
  std::size_t prev_tokens_ = 0;
  std::size_t prev_layer_ = 0;
  bool have_prev_ = false;
  std::vector<float> next_;
  layer_id next_layer_ = 0;
  bool have_next_ = false;
  bool next_any_ = false;
  std::vector<double> miss_;
  std::vector<double> token_;
};

static_assert(PrefetchPredictor<transition_predictor>);

}  // namespace moepolicy
