// moepolicy/cache/ema_score.hpp — a HybriMoE-like eviction policy: the resident expert with
// the lowest exponential moving average of its router score goes first. Models
// `EvictionPolicy`; observes layers.
//
// HybriMoE (the baseline Edge-MoE §6.1 compares against) caches by score; its paper is not
// among ours, so this is a minimal reconstruction, stated rule by rule:
//   - each time a layer's batch is routed (`on_layer_begin`), every expert e of that layer
//     gets S_e ← keep · S_e + (1 − keep) · s_e, where s_e is e's mean score over the batch's
//     tokens: all router scores when the batch carries them (`batch_view::scores`), else the
//     gate weights of the tokens that selected e and 0 for the others;
//   - experts selected for the layer in progress are shielded from eviction from
//     `on_layer_begin` until `on_layer_end` of that layer (as Edge-MoE §5.3's shield: an
//     expert about to be computed is never the victim);
//   - the victim is the unshielded resident with the lowest S; ties go to the least recently
//     used (last insert or hit), then to the lower (layer, expert).
// S starts at 0 and is kept for every expert, resident or not, so an expert that returns is
// ranked by its history. Unlike Edge-MoE's score-aware policy (cache/score_aware.hpp) the
// memory is an exponential decay per visit of the layer rather than a window of forward
// passes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/cache/detail/shielded_ranking.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Configuration of `ema_score_policy`.
struct ema_score_config {
  /// The weight of the old average at each visit of the layer, in [0, 1): S ← keep · S +
  /// (1 − keep) · s. 0 keeps only the last batch.
  double keep = 0.7;
};

/// Evicts the unshielded resident with the lowest moving average of its router score.
class ema_score_policy {
 public:
  using config_type = ema_score_config;

  /// Throws: `invalid_argument` when `keep` is outside [0, 1) or not a number.
  explicit ema_score_policy(const cache_shape& shape, const ema_score_config& cfg = {})
      : shape_(shape),
        keep_(checked_keep(cfg.keep)),
        ranking_(shape),
        score_(shape.slots(), 0.0),
        batch_(shape.num_experts, 0.0) {}

  [[nodiscard]] double keep() const noexcept { return keep_; }

  /// Complexity of the events: O(log n) for n residents of the pool.
  void on_insert(expert_key k, const access_info&) noexcept { ranking_.insert(shape_.flat(k), ranker()); }
  void on_hit(expert_key k, const access_info&) noexcept { ranking_.hit(shape_.flat(k), ranker()); }
  void on_evict(expert_key k) noexcept { ranking_.evict(shape_.flat(k)); }

  /// Folds the batch's scores into the layer's averages and shields its selected experts.
  ///
  /// Preconditions: `b.ref.layer` within the shape; ids below `num_experts`; `b.scores`
  /// empty or `tokens × num_experts`; scores and weights finite.
  /// Complexity: O(tokens · num_experts) with scores, O(tokens · k + num_experts) without,
  /// plus O(k · tokens) to shield (the layer's residents are ranked at the next victim).
  void on_layer_begin(const batch_view& b) noexcept {
    const layer_id l = b.ref.layer;
    MOEPOLICY_ASSERT(l < shape_.num_layers);
    const std::size_t E = shape_.num_experts;
    const std::size_t base = static_cast<std::size_t>(l) * E;
    const std::size_t tokens = b.tokens();
    if (tokens == 0) return;
    for (double& x : batch_) x = 0.0;
    if (!b.scores.empty()) {
      MOEPOLICY_ASSERT(b.scores.size() == tokens * E);
      for (std::size_t t = 0; t < tokens; ++t) {
        for (std::size_t e = 0; e < E; ++e) batch_[e] += static_cast<double>(b.scores[t * E + e]);
      }
    } else {
      for (std::size_t i = 0; i < b.experts.size(); ++i) {
        MOEPOLICY_ASSERT(b.experts[i] < E);
        batch_[b.experts[i]] += static_cast<double>(b.weights[i]);
      }
    }
    const double fresh = (1.0 - keep_) / static_cast<double>(tokens);
    for (std::size_t e = 0; e < E; ++e) score_[base + e] = keep_ * score_[base + e] + fresh * batch_[e];
    ranking_.begin_layer(base, E, b.experts, ranker());
  }
  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  void on_layer_end(layer_id l) noexcept { ranking_.end_layer(l, ranker()); }

  /// S of `k` (0 before its layer was first routed).
  [[nodiscard]] double score(expert_key k) const noexcept { return score_[shape_.flat(k)]; }
  /// Whether `k` is shielded now.
  [[nodiscard]] bool shielded(expert_key k) const noexcept { return ranking_.shielded(shape_.flat(k)); }

  /// Returns: the unshielded resident of pool `part` with the lowest S (ties: least
  /// recently used, then lower key), or nothing when every resident is shielded.
  /// Complexity: O(1) for a pool per layer, O(log L) per layer touched since the last
  /// victim in a shared pool; O(n) more for a layer whose scores moved since.
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = ranking_.top(part, ranker());
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  static double checked_keep(double keep) {
    if (!(keep >= 0.0 && keep < 1.0)) detail::throw_invalid("ema_score_policy", "keep must be in [0, 1)", keep);
    return keep;
  }
  /// Ranks a slot by (S, last use).
  struct ranker_fn {
    const ema_score_policy* policy;
    [[nodiscard]] detail::heap_rank operator()(std::size_t f) const noexcept {
      return {policy->score_[f], policy->ranking_.last_use(f)};
    }
  };
  [[nodiscard]] ranker_fn ranker() const noexcept { return {this}; }

  cache_shape shape_;
  double keep_;
  detail::shielded_ranking ranking_;  // unshielded residents by (S, last use); the shield
  std::vector<double> score_;
  std::vector<double> batch_;
};

static_assert(EvictionPolicy<ema_score_policy>);
static_assert(policy_traits<ema_score_policy>::observes_layers);

}  // namespace moepolicy
