// moepolicy/predict/prefetch_queue.hpp — the prioritised load queue of expert prefetching
// (Edge-MoE, "Enabling MoE on the Edge via Importance-Driven Expert Scheduling", §5.2), and
// the `PrefetchPredictor` concept of the predictors that feed it.
//
// §5.2: "we identify and rank the top k experts based on their projected scores. These
// experts are then placed into the load queue. Subsequently, we initiate the loading of
// experts for the next layer, starting from the highest-scoring experts and progressively
// moving down the rank. When the inference process moves to the next layer and the gate
// computation is done, we get the actual scores … So we clear the load queue". Hence
// `prefetch_queue::plan` ranks a layer's predicted scores, keeps the `depth` best, drops
// those already resident (nothing to load), and `pop` hands them out best first until the
// caller `clear`s the queue when the layer's true routing arrives.
//
// Predictors that model `PrefetchPredictor` (each proves it where it is defined):
// `short_horizon_predictor` (CXL-MoE §3), `transition_predictor` (cross-layer counts),
// `oracle_predictor` (the trace's own future, the bound).
#pragma once

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Predicts, layer by layer, which experts the next batch will need.
///
/// For `P& p`, `const batch_view& b`, `layer_id l`, `std::span<float> out` with one entry
/// per expert of the layer:
///   1. `p.predict(l, out)` writes into every `out[e]` a score in [0, 1] — the predictor's
///      confidence that expert e of layer l is needed within its horizon, counting from the
///      next batch of layer l — and returns whether it had anything to go on (false: every
///      score is 0);
///   2. `p.observe(b)` gives the true routing of a batch, batches in trace order (request,
///      step, layer); `predict(l, …)` uses only batches observed before it;
///   3. `p.end_step()` closes a forward pass; `p.begin_request()` starts an independent
///      sequence (short-term history is forgotten; learned statistics may stay);
///   4. every call is noexcept and allocation-free after construction.
template <class P>
concept PrefetchPredictor = requires(P& p, const batch_view& b, layer_id l, std::span<float> out) {
  { p.predict(l, out) }
  noexcept->std::same_as<bool>;
  { p.observe(b) }
  noexcept;
  { p.end_step() }
  noexcept;
  { p.begin_request() }
  noexcept;
};

/// One expert waiting to be loaded, with its predicted score.
struct queued_expert {
  expert_key key;
  float score = 0.0f;
};

/// The load queue of one layer's prefetches, highest predicted score first.
class prefetch_queue {
 public:
  /// `capacity`: the most experts the queue holds (a layer's experts).
  ///
  /// Throws: `invalid_argument` when `capacity` is 0 or above 65536.
  explicit prefetch_queue(std::size_t capacity) {
    if (capacity == 0 || capacity > 65536) {
      detail::throw_invalid("prefetch_queue", "capacity must be in [1, 65536]", capacity);
    }
    entries_.reserve(capacity);
    order_.reserve(capacity);
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return entries_.capacity(); }
  /// Experts still waiting.
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size() - next_; }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// The experts still waiting, best first.
  [[nodiscard]] std::span<const queued_expert> pending() const noexcept {
    return std::span<const queued_expert>(entries_).subspan(next_);
  }

  /// Replaces the queue with layer `layer`'s `depth` highest predicted `scores` (one per
  /// expert; scores of 0 are never queued; ties: lower id first), leaving out the experts
  /// `skip(e)` names (already resident: nothing to load). Returns the experts queued.
  ///
  /// Preconditions: `scores.size() <= capacity()`.
  /// Complexity: O(E log depth); no allocation.
  template <class Skip>
  std::size_t plan(layer_id layer, std::span<const float> scores, std::size_t depth, Skip&& skip) noexcept {
    MOEPOLICY_ASSERT(scores.size() <= capacity());
    clear();
    order_.clear();
    for (std::size_t e = 0; e < scores.size(); ++e) {
      if (scores[e] > 0.0f) order_.push_back(static_cast<expert_id>(e));
    }
    const std::size_t n = std::min(depth, order_.size());
    // A total order (no score is NaN: those fail `> 0`), so any sort gives the same n
    // first: a few candidates are sorted whole by insertion, more partially.
    const auto before = [&](expert_id a, expert_id b) {
      return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
    };
    if (order_.size() <= 32) {
      for (std::size_t i = 1; i < order_.size(); ++i) {
        const expert_id x = order_[i];
        std::size_t j = i;
        for (; j > 0 && before(x, order_[j - 1]); --j) order_[j] = order_[j - 1];
        order_[j] = x;
      }
    } else {
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), order_.end(), before);
    }
    for (std::size_t i = 0; i < n; ++i) {
      if (skip(order_[i])) continue;
      entries_.push_back({expert_key{layer, order_[i]}, scores[order_[i]]});
    }
    return entries_.size();
  }
  /// As above, skipping nothing.
  std::size_t plan(layer_id layer, std::span<const float> scores, std::size_t depth) noexcept {
    return plan(layer, scores, depth, [](expert_id) { return false; });
  }

  /// Adds one expert in score order (after equal scores). Returns false when full.
  /// Complexity: O(size).
  bool push(expert_key key, float score) noexcept {
    if (entries_.size() == entries_.capacity()) {
      if (next_ == 0) return false;
      compact();
    }
    auto it = std::upper_bound(entries_.begin() + static_cast<std::ptrdiff_t>(next_), entries_.end(), score,
                               [](float s, const queued_expert& q) { return s > q.score; });
    entries_.insert(it, queued_expert{key, score});
    return true;
  }

  /// The best expert still waiting, removed from the queue; nothing when empty.
  std::optional<queued_expert> pop() noexcept {
    if (next_ == entries_.size()) return std::nullopt;
    return entries_[next_++];
  }

  /// Drops everything waiting: the layer's true scores arrived (§5.2).
  void clear() noexcept {
    entries_.clear();
    next_ = 0;
  }

 private:
  void compact() noexcept {
    entries_.erase(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(next_));
    next_ = 0;
  }

  std::vector<queued_expert> entries_;
  std::vector<expert_id> order_;
  std::size_t next_ = 0;
};

}  // namespace moepolicy
