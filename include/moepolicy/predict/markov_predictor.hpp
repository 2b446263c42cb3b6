// moepolicy/predict/markov_predictor.hpp — a first-order Markov model of a layer's expert
// selections from one token to the next: the second short-horizon model CXL-MoE §3 names
// ("The prediction model can be extremely simple (e.g., a Markov model …)"). Models
// `PrefetchPredictor`.
//
// Per layer l the model counts, over consecutive tokens of the same sequence,
//   N_l(f)      tokens that selected f (and whose next token was observed),
//   C_l(f, e)   of those, the ones whose next token selected e,
//   T_l(f, e) = C_l(f, e) / N_l(f),  the chance that the token after one with f selects e.
// The state is what the last m tokens selected: s_0(f) = the recency-weighted share of the
// last m tokens that selected f (m = 1: the last token's selection, the classic chain;
// weights as `short_horizon_predictor`'s). Each p_j below is the chance that the j-th next
// token selects e, and sums to k over the experts, as s_0 does. One step ahead,
//   p_1(e) = Σ_f s_0(f) · T'(f, e) / k,
// where T'(f, ·) = T_l(f, ·) for a state seen followed before, and for one never left
// before the persistence row T'(f, e) = k · [e = f] — so that a model with nothing learned
// predicts the last tokens' experts again, exactly as the frequency model does. Further
// steps propagate the same way, p_{j+1}(e) = Σ_f p_j(f) · T'(f, e) / k (clamped to 1 when
// persistence and learned rows overlap), and the score for the next n tokens treats them
// as independent:
//   score_l(e) = 1 − Π_{j=1..n} (1 − p_j(e)).
// Learning is online and per layer, from every token observed after another of the same
// sequence; counts survive `begin_request` (history does not). With several tokens in one
// observed batch (a prefill), each is the successor of the one before it in the batch.
//
// Cost. L · E² counts and L · m · k history, allocated at construction; `predict` is
// O(m · k + n · E²), `observe` O(tokens · k²); nothing allocates after construction.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/predict/detail/token_history.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `markov_predictor`.
struct markov_config {
  /// MoE layers, experts per layer (at most 4096) and top-k of the model, each >= 1 (k <=
  /// experts).
  std::uint32_t num_layers = 0;
  std::uint32_t num_experts = 0;
  std::uint32_t top_k = 0;
  /// m: past tokens that form the state, >= 1 (1: the last token).
  std::uint32_t history = 1;
  /// n: future tokens the score covers, >= 1.
  std::uint32_t horizon = 2;
  /// Weight of each older token of the state relative to the next newer one, in (0, 1].
  double recency_decay = 1.0;
  /// Learn from every observed pair of consecutive tokens (false: counts stay as they are).
  bool learn = true;
};

/// Predicts a layer's experts for the next n tokens with a learned token-to-token chain.
class markov_predictor {
 public:
  /// Throws: `invalid_argument` for a dimension of 0 (or above 65536; num_experts above
  /// 4096), `top_k > num_experts`, `history` or `horizon` of 0, or `recency_decay` outside
  /// (0, 1].
  explicit markov_predictor(const markov_config& cfg)
      : cfg_(checked(cfg)), learn_(cfg.learn), history_(cfg_.num_layers, cfg_.history, cfg_.top_k, cfg_.recency_decay) {
    const std::size_t L = cfg_.num_layers, E = cfg_.num_experts;
    pair_.assign(L * E * E, 0);
    from_.assign(L * E, 0);
    state_.assign(E, 0.0);
    next_.assign(E, 0.0);
    miss_.assign(E, 1.0);
  }

  [[nodiscard]] const markov_config& config() const noexcept { return cfg_; }
  void set_learning(bool on) noexcept { learn_ = on; }

  /// T_l(f, e): the learned chance that the token after one with f at layer l selects e (0
  /// before f was seen followed).
  [[nodiscard]] double transition(layer_id l, expert_id f, expert_id e) const noexcept {
    const std::size_t E = cfg_.num_experts;
    const std::uint64_t n = from_[static_cast<std::size_t>(l) * E + f];
    if (n == 0) return 0.0;
    return static_cast<double>(pair_[(static_cast<std::size_t>(l) * E + f) * E + e]) / static_cast<double>(n);
  }

  /// See `PrefetchPredictor`. Complexity: O(m · k + n · E²).
  bool predict(layer_id l, std::span<float> out) noexcept {
    MOEPOLICY_ASSERT(l < cfg_.num_layers && out.size() == cfg_.num_experts);
    const std::size_t E = cfg_.num_experts, k = cfg_.top_k;
    std::fill(out.begin(), out.end(), 0.0f);
    if (history_.size(l) == 0) return false;
    // s_0(f): the weighted share of the last m tokens that selected f, the chance that a
    // token selects f; Σ_f s_0(f) = k, as for every p_j.
    history_.weighted_share(l, state_);
    std::fill(miss_.begin(), miss_.end(), 1.0);
    const std::uint64_t* pair = pair_.data() + static_cast<std::size_t>(l) * E * E;
    const std::uint64_t* from = from_.data() + static_cast<std::size_t>(l) * E;
    const auto kd = static_cast<double>(k);
    for (std::uint32_t step = 0; step < cfg_.horizon; ++step) {
      // p_{j+1}(e) = Σ_f p_j(f) · T'(f, e) / k; a state never left before persists
      // (T'(f, ·) = k on f: each of its tokens is followed by itself).
      std::fill(next_.begin(), next_.end(), 0.0);
      for (std::size_t f = 0; f < E; ++f) {
        const double mass = state_[f];
        if (mass <= 0.0) continue;
        if (from[f] == 0) {
          next_[f] += mass * kd;
          continue;
        }
        const double scale = mass / static_cast<double>(from[f]);
        const std::uint64_t* row = pair + f * E;
        for (std::size_t e = 0; e < E; ++e) next_[e] += scale * static_cast<double>(row[e]);
      }
      for (std::size_t e = 0; e < E; ++e) {
        next_[e] /= kd;
        miss_[e] *= 1.0 - std::min(1.0, next_[e]);
      }
      state_.swap(next_);
    }
    for (std::size_t e = 0; e < E; ++e) out[e] = static_cast<float>(1.0 - miss_[e]);
    return true;
  }

  /// See `PrefetchPredictor`. Complexity: O(tokens · k²).
  void observe(const batch_view& b) noexcept {
    const layer_id l = b.ref.layer;
    MOEPOLICY_ASSERT(l < cfg_.num_layers && b.top_k == cfg_.top_k);
    const std::size_t E = cfg_.num_experts;
    for (std::size_t t = 0; t < b.tokens(); ++t) {
      const auto ids = b.experts_of(t);
      if (learn_ && history_.size(l) > 0) {
        for (const expert_id f : history_.newest(l)) {
          ++from_[static_cast<std::size_t>(l) * E + f];
          std::uint64_t* row = pair_.data() + (static_cast<std::size_t>(l) * E + f) * E;
          for (expert_id e : ids) ++row[e];
        }
      }
      history_.push(l, ids);
    }
  }

  /// Nothing to do between steps: history counts tokens.
  void end_step() noexcept {}

  /// Forgets every layer's history (the next token has no predecessor); keeps the counts.
  void begin_request() noexcept { history_.clear(); }

 private:
  static markov_config checked(const markov_config& c) {
    constexpr const char* fn = "markov_predictor";
    if (c.num_layers == 0 || c.num_layers > 65536)
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", c.num_layers);
    if (c.num_experts == 0 || c.num_experts > 4096)
      detail::throw_invalid(fn, "num_experts must be in [1, 4096]", c.num_experts);
    if (c.top_k == 0 || c.top_k > c.num_experts)
      detail::throw_invalid(fn, "top_k must be in [1, num_experts]", c.top_k);
    if (c.history == 0) detail::throw_invalid(fn, "history must be >= 1", c.history);
    if (c.horizon == 0) detail::throw_invalid(fn, "horizon must be >= 1", c.horizon);
    if (!(c.recency_decay > 0.0 && c.recency_decay <= 1.0)) {
      detail::throw_invalid(fn, "recency_decay must be in (0, 1]", c.recency_decay);
    }
    return c;
  }

  markov_config cfg_;
  bool learn_;
  std::vector<std::uint64_t> pair_;  // layers × E × E: C_l(f, e)
  std::vector<std::uint64_t> from_;  // layers × E: N_l(f)
  detail::token_history history_;    // the last m tokens' selections, per layer
  std::vector<double> state_, next_, miss_;
};

static_assert(PrefetchPredictor<markov_predictor>);

}  // namespace moepolicy
