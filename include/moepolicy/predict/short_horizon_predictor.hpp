// moepolicy/predict/short_horizon_predictor.hpp — CXL-MoE's short-horizon predictor (CXL-MoE
// §3 "Decode Stage Prefetching"). Models `PrefetchPredictor`.
//
// "our model uses the expert routing decisions from the last m generated tokens to predict
// the experts needed for the next n tokens, where n is a small, configurable lookahead
// window (e.g., n = 2 to 4) … The prediction model can be extremely simple (e.g., a Markov
// model or a small recurrent network)". The paper names no model; this is the simplest
// one the text allows, a per-layer frequency model over the last m tokens (the Markov model
// it names is predict/markov_predictor.hpp):
//   p_l(e) = Σ_{j=1..m'} w_j [e selected by the j-th most recent token at layer l] / Σ w_j,
//   w_j = recency_decay^(j−1),  m' = min(m, tokens seen in this request),
// the estimated chance that one token selects e; and the score of e for the next n tokens
// is the chance that at least one of them does, treating tokens as independent:
//   score_l(e) = 1 − (1 − p_l(e))^n,
// which orders experts as p does and reads as a confidence for the n-token horizon (what
// `sticky_lru_policy`'s thresholds compare). History is per request (`begin_request`);
// every token of an observed batch counts, so a prefill batch leaves its last m tokens.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/predict/detail/token_history.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `short_horizon_predictor`.
struct short_horizon_config {
  /// MoE layers, experts per layer and top-k of the model, each >= 1 (k <= experts).
  std::uint32_t num_layers = 0;
  std::uint32_t num_experts = 0;
  std::uint32_t top_k = 0;
  /// m: past tokens the estimate uses, >= 1.
  std::uint32_t history = 8;
  /// n: future tokens the score covers, >= 1 (the paper's 2 to 4).
  std::uint32_t horizon = 2;
  /// Weight of each older token relative to the next newer one, in (0, 1]; 1 weighs the m
  /// tokens equally.
  double recency_decay = 1.0;
};

/// CXL-MoE's decode predictor as the library's defaults run it — the timed replays' CXL-MoE
/// system, `moepolicy replay` and the report use this one definition: the frequency model
/// over m = 8 past tokens scoring the next n = 2 (the low end of §3's n = 2 to 4).
[[nodiscard]] constexpr short_horizon_config cxl_moe_short_horizon(std::uint32_t num_layers, std::uint32_t num_experts,
                                                                   std::uint32_t top_k) noexcept {
  return {.num_layers = num_layers, .num_experts = num_experts, .top_k = top_k};
}

/// "short-horizon frequency model, m = 8, n = 2" (with ", decay d" when below 1): the
/// settings printed beside a figure.
[[nodiscard]] inline std::string describe(const short_horizon_config& c) {
  std::string s =
      "short-horizon frequency model, m = " + std::to_string(c.history) + ", n = " + std::to_string(c.horizon);
  if (c.recency_decay < 1.0) s += ", decay " + std::to_string(c.recency_decay);
  return s;
}

/// Predicts a layer's experts for the next n tokens from its last m tokens' routing.
class short_horizon_predictor {
 public:
  /// Throws: `invalid_argument` for a dimension of 0 (or above 65536), `top_k >
  /// num_experts`, `history` or `horizon` of 0, or `recency_decay` outside (0, 1].
  explicit short_horizon_predictor(const short_horizon_config& cfg)
      : cfg_(checked(cfg)),
        history_(cfg_.num_layers, cfg_.history, cfg_.top_k, cfg_.recency_decay, cfg_.num_experts),
        share_(cfg_.num_experts, 0.0) {
    if (history_.counting()) {
      full_.assign(std::size_t{cfg_.history} + 1, 0.0f);
      full_ready_.assign(std::size_t{cfg_.history} + 1, 0);
    }
  }

  [[nodiscard]] const short_horizon_config& config() const noexcept { return cfg_; }

  /// See `PrefetchPredictor`. Complexity: O(num_experts) with equal weights (decay 1), else
  /// O(m · k + num_experts).
  bool predict(layer_id l, std::span<float> out) noexcept {
    MOEPOLICY_ASSERT(l < cfg_.num_layers && out.size() == cfg_.num_experts);
    std::fill(out.begin(), out.end(), 0.0f);
    const std::size_t held = history_.size(l);
    if (held == 0) return false;
    if (held == cfg_.history && history_.counting()) {
      // A full history of equal weights: p = count / m, so the score is a function of the
      // count alone, kept once computed.
      const auto counts = history_.counts(l);
      for (std::size_t e = 0; e < out.size(); ++e) {
        const std::size_t c = std::min<std::size_t>(counts[e], held);
        if (full_ready_[c] == 0) {
          full_[c] = score(static_cast<double>(c) / static_cast<double>(held));
          full_ready_[c] = 1;
        }
        out[e] = full_[c];
      }
      return true;
    }
    history_.weighted_share(l, share_);
    for (std::size_t e = 0; e < out.size(); ++e) out[e] = score(share_[e]);
    return true;
  }

  /// See `PrefetchPredictor`. Complexity: O(tokens · k).
  void observe(const batch_view& b) noexcept {
    const layer_id l = b.ref.layer;
    MOEPOLICY_ASSERT(l < cfg_.num_layers && b.top_k == cfg_.top_k);
    const std::size_t m = cfg_.history;
    const std::size_t tokens = b.tokens();
    // Only the last m tokens of the batch can stay in the history.
    for (std::size_t t = tokens > m ? tokens - m : 0; t < tokens; ++t) history_.push(l, b.experts_of(t));
  }

  /// Nothing to do between steps: history counts tokens.
  void end_step() noexcept {}

  /// Forgets every layer's history.
  void begin_request() noexcept { history_.clear(); }

 private:
  static short_horizon_config checked(const short_horizon_config& c) {
    constexpr const char* fn = "short_horizon_predictor";
    if (c.num_layers == 0 || c.num_layers > 65536)
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", c.num_layers);
    if (c.num_experts == 0 || c.num_experts > 65536) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", c.num_experts);
    }
    if (c.top_k == 0 || c.top_k > c.num_experts)
      detail::throw_invalid(fn, "top_k must be in [1, num_experts]", c.top_k);
    if (c.history == 0) detail::throw_invalid(fn, "history must be >= 1", c.history);
    if (c.horizon == 0) detail::throw_invalid(fn, "horizon must be >= 1", c.horizon);
    if (!(c.recency_decay > 0.0 && c.recency_decay <= 1.0)) {
      detail::throw_invalid(fn, "recency_decay must be in (0, 1]", c.recency_decay);
    }
    return c;
  }

  /// The score of an expert of share p (clamped to 1): 1 − (1 − p)^n.
  [[nodiscard]] float score(double share) noexcept {
    const double p = std::min(1.0, share);
    return static_cast<float>(1.0 - survival(1.0 - p));
  }

  /// q^n: shares take few values (weighted counts over m tokens), so the last results of
  /// `std::pow` are kept by their argument's bits (the same value, computed once).
  [[nodiscard]] double survival(double q) noexcept {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &q, sizeof bits);
    const std::size_t slot = static_cast<std::size_t>((bits * 0x9E3779B97F4A7C15ull) >> 60);
    if (memo_bits_[slot] != bits || !memo_used_[slot]) {
      memo_bits_[slot] = bits;
      memo_used_[slot] = true;
      memo_[slot] = std::pow(q, static_cast<double>(cfg_.horizon));
    }
    return memo_[slot];
  }

  short_horizon_config cfg_;
  detail::token_history history_;  // the last m tokens' selections, per layer
  std::vector<double> share_;
  /// With a full history of equal weights, the score of each count (when computed).
  std::vector<float> full_;
  std::vector<std::uint8_t> full_ready_;
  std::array<std::uint64_t, 16> memo_bits_{};
  std::array<double, 16> memo_{};
  std::array<bool, 16> memo_used_{};
};

static_assert(PrefetchPredictor<short_horizon_predictor>);

}  // namespace moepolicy
