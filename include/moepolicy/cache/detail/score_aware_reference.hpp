// moepolicy/cache/detail/score_aware_reference.hpp — the first implementation of
// score-aware eviction (Edge-MoE §5.3), kept unchanged as the reference that tests and
// bench/shapes_bench.cpp compare cache/score_aware.hpp against: every event re-ranks
// eagerly — each batch re-ranks every resident of its layer in the heap (O(E log n)) and
// each step end rebuilds every pool. See cache/score_aware.hpp for the method.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/layer_shield.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::reference::detail {

/// Residents by (score, last use) per pool, with the in-layer shield.
class eager_shielded_ranking {
 public:
  explicit eager_shielded_ranking(const cache_shape& shape)
      : shape_(shape), heap_(shape), resident_(shape.slots(), 0), last_use_(shape.slots(), 0), shield_(shape) {}

  /// A resident's last insert or hit, in events (the tie-break after the score).
  [[nodiscard]] std::uint64_t last_use(std::size_t f) const noexcept { return last_use_[f]; }
  [[nodiscard]] bool shielded(std::size_t f) const noexcept { return shield_.shielded(f); }
  [[nodiscard]] bool ranked(std::size_t f) const noexcept { return heap_.contains(f); }

  /// Complexity of the events: O(log n) for n residents of the pool.
  template <class Rank>
  void insert(std::size_t f, Rank&& rank) noexcept {
    resident_[f] = 1;
    last_use_[f] = ++clock_;
    if (!shield_.shielded(f)) heap_.push(f, rank(f));
  }
  template <class Rank>
  void hit(std::size_t f, Rank&& rank) noexcept {
    last_use_[f] = ++clock_;
    if (heap_.contains(f)) heap_.update(f, rank(f));
  }
  void evict(std::size_t f) noexcept {
    resident_[f] = 0;
    if (heap_.contains(f)) heap_.erase(f);
  }

  /// Shields the `selected` experts of the layer whose slots start at `base`, then re-ranks
  /// every ranked expert of that layer (`experts` of them), whose scores the batch moved.
  /// Complexity: O((selected + experts) · log n).
  template <class Rank>
  void begin_layer(std::size_t base, std::size_t experts, std::span<const expert_id> selected, Rank&& rank) noexcept {
    shield_.shield(base, selected, [&](std::size_t f) {
      if (heap_.contains(f)) heap_.erase(f);
    });
    for (std::size_t f = base; f < base + experts; ++f) {
      if (heap_.contains(f)) heap_.update(f, rank(f));
    }
  }

  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  template <class Rank>
  void end_layer(layer_id l, Rank&& rank) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0) heap_.push(f, rank(f));
    });
  }

  /// Re-ranks every ranked resident (all scores moved at once). Complexity: O(slots).
  template <class Rank>
  void rerank_all(Rank&& rank) noexcept {
    for (std::size_t f = 0; f < shape_.slots(); ++f) {
      if (heap_.contains(f)) heap_.set_rank_unordered(f, rank(f));
    }
    heap_.rebuild();
  }

  /// The lowest-ranked unshielded resident of pool `part`, or nothing.
  [[nodiscard]] std::optional<std::size_t> top(std::size_t part) const noexcept { return heap_.top(part); }

 private:
  cache_shape shape_;
  moepolicy::detail::partitioned_heap heap_;
  std::vector<std::uint8_t> resident_;
  std::vector<std::uint64_t> last_use_;
  moepolicy::detail::layer_shield shield_;
  std::uint64_t clock_ = 0;
};

}  // namespace moepolicy::reference::detail

namespace moepolicy::reference {

/// Evicts the resident expert with the lowest windowed average score, never one selected
/// for the layer in progress.
///
/// Unshielded residents sit in a heap per pool ranked by (average, last use), so `victim`
/// is O(1); an average changes only when its layer's batch arrives (re-ranked then) or
/// when the window moves (every rank rebuilt at the step end).
class score_aware_policy {
 public:
  using config_type = score_aware_config;

  /// Throws: `invalid_argument` when `cfg.window` is 0.
  explicit score_aware_policy(const cache_shape& shape, const score_aware_config& cfg = {})
      : shape_(shape),
        window_(checked_window(cfg.window)),
        ranking_(shape),
        ring_(window_ * shape.slots(), 0),
        ring_tokens_(window_ * shape.num_layers, 0),
        sums_(shape.slots(), 0),
        tokens_(shape.num_layers, 0) {}

  [[nodiscard]] std::uint32_t window() const noexcept { return static_cast<std::uint32_t>(window_); }

  /// Complexity of the events: O(log n) for n residents of the pool.
  void on_insert(expert_key k, const access_info&) noexcept { ranking_.insert(shape_.flat(k), ranker()); }
  void on_hit(expert_key k, const access_info&) noexcept { ranking_.hit(shape_.flat(k), ranker()); }
  void on_evict(expert_key k) noexcept { ranking_.evict(shape_.flat(k)); }

  /// Adds the batch's scores to the current iteration and shields its selected experts.
  ///
  /// Preconditions: `b.ref.layer` within the shape; ids below `num_experts`; `b.scores`
  /// empty or `tokens × num_experts`; scores and weights finite, of magnitude below 2^31
  /// (they are probabilities; sums are kept in 2^-32 fixed point).
  /// Complexity: O(tokens · num_experts) with scores, O(tokens · k) without, plus
  /// O(num_experts · log n) to re-rank the layer's residents.
  void on_layer_begin(const batch_view& b) noexcept {
    const layer_id l = b.ref.layer;
    MOEPOLICY_ASSERT(l < shape_.num_layers);
    const std::size_t E = shape_.num_experts;
    const std::size_t base = static_cast<std::size_t>(l) * E;
    std::int64_t* slot = ring_.data() + cur_ * shape_.slots() + base;
    const std::size_t tokens = b.tokens();
    if (!b.scores.empty()) {
      MOEPOLICY_ASSERT(b.scores.size() == tokens * E);
      for (std::size_t t = 0; t < tokens; ++t) {
        const float* s = b.scores.data() + t * E;
        for (std::size_t e = 0; e < E; ++e) {
          const std::int64_t x = fixed(s[e]);
          slot[e] += x;
          sums_[base + e] += x;
        }
      }
    } else {
      for (std::size_t i = 0; i < b.experts.size(); ++i) {
        MOEPOLICY_ASSERT(b.experts[i] < E);
        const std::int64_t x = fixed(b.weights[i]);
        slot[b.experts[i]] += x;
        sums_[base + b.experts[i]] += x;
      }
    }
    ring_tokens_[cur_ * shape_.num_layers + l] += tokens;
    tokens_[l] += tokens;
    // Every average of the layer moved (its token count did).
    ranking_.begin_layer(base, E, b.experts, ranker());
  }
  /// Revokes the shields of layer `l`'s experts. Complexity: O(shielded · log n).
  void on_layer_end(layer_id l) noexcept { ranking_.end_layer(l, ranker()); }
  /// Closes the iteration and retires the one that leaves the window. Sums are kept in
  /// fixed point (units of 2^-32), so retiring subtracts exactly: an expert whose scores
  /// all left the window averages exactly 0, and rounding never reorders equal averages.
  /// Complexity: O(num_layers · num_experts).
  void on_step_end() noexcept {
    cur_ = (cur_ + 1) % window_;
    const std::size_t slots = shape_.slots();
    std::int64_t* oldest = ring_.data() + cur_ * slots;
    for (std::size_t f = 0; f < slots; ++f) {
      sums_[f] -= oldest[f];
      oldest[f] = 0;
    }
    std::uint64_t* oldest_tokens = ring_tokens_.data() + cur_ * shape_.num_layers;
    for (std::size_t l = 0; l < shape_.num_layers; ++l) {
      tokens_[l] -= oldest_tokens[l];
      oldest_tokens[l] = 0;
    }
    ranking_.rerank_all(ranker());
  }

  /// The average score of `k` over the window (0 when its layer saw no token in it).
  [[nodiscard]] double average_score(expert_key k) const noexcept { return average(shape_.flat(k)); }
  /// Whether `k` is shielded now.
  [[nodiscard]] bool shielded(expert_key k) const noexcept { return ranking_.shielded(shape_.flat(k)); }

  /// Returns: the unshielded resident of pool `part` with the lowest average score (ties:
  /// least recently used, then lower key), or nothing when every resident is shielded.
  /// Complexity: O(1).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const auto f = ranking_.top(part);
    if (!f) return std::nullopt;
    return shape_.key(*f);
  }

 private:
  static std::size_t checked_window(std::uint32_t w) {
    if (w == 0) moepolicy::detail::throw_invalid("score_aware_policy", "window must be >= 1", w);
    return w;
  }
  static constexpr double fixed_one = 4294967296.0;  // 2^32
  static std::int64_t fixed(float x) noexcept { return static_cast<std::int64_t>(static_cast<double>(x) * fixed_one); }
  [[nodiscard]] double average(std::size_t f) const noexcept {
    const std::uint64_t n = tokens_[f / shape_.num_experts];
    return n == 0 ? 0.0 : static_cast<double>(sums_[f]) / fixed_one / static_cast<double>(n);
  }
  /// Ranks a slot by (average, last use).
  struct ranker_fn {
    const score_aware_policy* policy;
    [[nodiscard]] moepolicy::detail::heap_rank operator()(std::size_t f) const noexcept {
      return {policy->average(f), policy->ranking_.last_use(f)};
    }
  };
  [[nodiscard]] ranker_fn ranker() const noexcept { return {this}; }

  cache_shape shape_;
  std::size_t window_;
  std::size_t cur_ = 0;
  detail::eager_shielded_ranking ranking_;  // unshielded residents by (average, last use); the shield
  std::vector<std::int64_t> ring_;          // window × slots score sums per iteration (fixed point)
  std::vector<std::uint64_t> ring_tokens_;  // window × layers tokens per iteration
  std::vector<std::int64_t> sums_;
  std::vector<std::uint64_t> tokens_;
};

static_assert(EvictionPolicy<score_aware_policy>);
static_assert(policy_traits<score_aware_policy>::observes_layers && policy_traits<score_aware_policy>::observes_steps);

}  // namespace moepolicy::reference
