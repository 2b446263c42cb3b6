// moepolicy/cache/sticky_lru.hpp — LRU with confidence stickiness and prediction-gated
// admission (CXL-MoE, "CXL-MoE: Accelerating Sparse Model Inference through Intelligent
// Expert Offloading to CXL Memory", §3 "On-GPU Expert Cache Management"). Models
// `EvictionPolicy`; takes prefetch hints, has admission, observes steps.
//
// The text gives two rules and no formula; this is the reconstruction, rule by rule:
//
//   Admission — "An expert is admitted into the on-GPU cache only when it is requested by
//   the predictive prefetcher. In the case of a prefetch miss, the required expert is
//   fetched on-demand to service the current token, but it is not admitted to the cache
//   unless the predictor flags it as likely to be used again in the near future."
//     → `expert_cache::prefetch` always inserts (the prefetcher's request is the
//       admission); a demand miss is cached only if the predictor flagged the expert —
//       an `on_hint(k, c)` with c >= `admit_threshold` — within the last `hint_steps`
//       step boundaries (a hint given after step t's end flags k during step t + 1 with
//       the default 1). Otherwise it is served and not cached, even when there is room
//       (the rule as written; `gated_admission = false` turns the gate off).
//
//   Replacement — "The baseline policy is Least Recently Used … augmented by the
//   prefetcher's confidence scores. Experts that are prefetched with high confidence are
//   given a higher priority ("stickiness") in the cache, preventing them from being
//   evicted prematurely even if they were used less recently than another,
//   lower-confidence expert."
//     → two classes, each in LRU order: an entry prefetched (inserted, or re-prefetched
//       while resident) with confidence >= `sticky_threshold` is sticky; the victim is the
//       least recently used non-sticky resident, and only when every resident of the pool
//       is sticky the least recently used sticky one. Recency is the last demand use, or
//       the prefetch that inserted the entry; a re-prefetch does not refresh recency
//       (the point of stickiness is to protect entries that were used *less* recently).
//       Stickiness ends when the entry is used ("prematurely": the prefetch paid off; a
//       new high-confidence prefetch makes it sticky again) or after `sticky_steps` step
//       ends without use (the predictor's lookahead n, so that a misprediction does not
//       pin an expert for ever). Ties go to the lower (layer, expert) (recency stamps are
//       unique, so none arise).
//
// The order. Every resident keeps its recency stamp (the clock at its last demand use or its
// inserting prefetch), and a change of class keeps the stamp. So each pool is one list in
// stamp order — an insertion or a use appends at its tail, a change of class moves nothing —
// with a cursor at its first non-sticky member: every member before the cursor is sticky.
// The victim is the cursor's member, or the list's head when the pool holds no non-sticky
// member. The cursor moves back to an entry whose stickiness lapses before it (one stamp
// comparison) and moves forward, over sticky members, only when its own member leaves or
// becomes sticky. Every event is O(1) but that forward walk, which passes only sticky
// members. The earlier order, a heap of (sticky, stamp) ranks, is kept in
// tests/cache/sticky_lru.cpp as the reference the list is checked against.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/orderings.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// Configuration of `sticky_lru_policy`.
struct sticky_lru_config {
  /// Cache a demand miss only when the predictor flagged it (the paper's rule).
  bool gated_admission = true;
  /// A hint at or above this confidence flags an expert for admission; in [0, 1].
  float admit_threshold = 0.5f;
  /// Whether high-confidence prefetches become sticky at all (the paper's rule); off, the
  /// policy is LRU with prediction-gated admission, for ablations.
  bool stickiness = true;
  /// A prefetch at or above this confidence makes the entry sticky; in [0, 1].
  float sticky_threshold = 0.8f;
  /// Step ends a hint survives; >= 1.
  std::uint32_t hint_steps = 1;
  /// Step ends a sticky entry stays sticky without being used; >= 1 (the lookahead n).
  std::uint32_t sticky_steps = 4;
};

/// LRU where high-confidence prefetches outrank recency, with prediction-gated admission.
class sticky_lru_policy {
 public:
  using config_type = sticky_lru_config;

  /// Throws: `invalid_argument` when a threshold is outside [0, 1] or a step count is 0.
  explicit sticky_lru_policy(const cache_shape& shape, const sticky_lru_config& cfg = {})
      : shape_(shape),
        cfg_(checked(cfg)),
        layer_of_(shape.num_experts),
        prev_(shape.slots(), detail::no_slot),
        next_(shape.slots(), detail::no_slot),
        stamp_(shape.slots(), 0),
        in_(shape.slots(), 0),
        head_(shape.partitions(), detail::no_slot),
        tail_(shape.partitions(), detail::no_slot),
        first_plain_(shape.partitions(), detail::no_slot),
        hint_conf_(shape.slots(), 0.0f),
        hint_step_(shape.slots(), never),
        sticky_until_(shape.slots(), never),
        sticky_list_(shape.slots(), 0),
        listed_(shape.slots(), 0) {}

  [[nodiscard]] const sticky_lru_config& config() const noexcept { return cfg_; }

  /// Complexity of the events: O(1), but a resident that leaves or turns sticky at the
  /// cursor walks it over the sticky members after it (see the header).
  void on_insert(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    const bool sticky = cfg_.stickiness && i.prefetch && i.confidence >= cfg_.sticky_threshold;
    if (sticky) make_sticky(f);
    append(f);
  }
  void on_hit(expert_key k, const access_info&) noexcept {
    const std::size_t f = shape_.flat(k);
    unlink(f);
    sticky_until_[f] = never;  // used: the prefetch paid off
    append(f);
  }
  void on_evict(expert_key k) noexcept {
    const std::size_t f = shape_.flat(k);
    unlink(f);
    sticky_until_[f] = never;
  }
  /// A prefetch of a resident entry: sticky again at high confidence; recency unchanged.
  void on_prefetch(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    if (!cfg_.stickiness || i.confidence < cfg_.sticky_threshold) return;
    MOEPOLICY_ASSERT(in_[f] != 0);
    make_sticky(f);
    const std::size_t p = part_of(f);
    if (first_plain_[p] == f) first_plain_[p] = first_plain_from(next_[f]);
  }
  /// The predictor flags `k` with `confidence`.
  void on_hint(expert_key k, float confidence) noexcept {
    const std::size_t f = shape_.flat(k);
    hint_conf_[f] = confidence;
    hint_step_[f] = steps_;
  }
  /// Ages hints and stickiness. Complexity: O(sticky entries).
  void on_step_end() noexcept {
    ++steps_;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < sticky_count_; ++i) {
      const std::uint32_t f = sticky_list_[i];
      if (sticky_until_[f] != never && sticky_until_[f] <= steps_) {
        sticky_until_[f] = never;
        if (in_[f] != 0) {
          // Ordinary again at its stamp: the pool's first ordinary member if before the
          // cursor (every member before the cursor is sticky).
          const std::size_t p = part_of(f);
          if (first_plain_[p] == detail::no_slot || stamp_[f] < stamp_[first_plain_[p]]) {
            first_plain_[p] = static_cast<std::uint32_t>(f);
          }
        }
      }
      if (sticky_until_[f] == never) {  // lapsed now, or used or evicted since
        listed_[f] = 0;
        continue;
      }
      sticky_list_[kept++] = f;
    }
    sticky_count_ = kept;
  }

  /// Returns: whether a demand miss of `k` is cached: always without the gate, else
  /// whether a hint of at least `admit_threshold` flagged `k` within `hint_steps` steps.
  [[nodiscard]] bool admit(expert_key k, const access_info&, bool) const noexcept {
    return !cfg_.gated_admission || flagged(k);
  }
  /// Whether the predictor's hints currently flag `k` for admission.
  [[nodiscard]] bool flagged(expert_key k) const noexcept {
    const std::size_t f = shape_.flat(k);
    return hint_step_[f] != never && steps_ - hint_step_[f] < cfg_.hint_steps && hint_conf_[f] >= cfg_.admit_threshold;
  }
  /// Whether `k` is resident and sticky.
  [[nodiscard]] bool sticky(expert_key k) const noexcept {
    const std::size_t f = shape_.flat(k);
    return in_[f] != 0 && sticky_until_[f] != never;
  }

  /// Returns: the least recently used non-sticky resident of pool `part`, else the least
  /// recently used sticky one, or nothing when the pool is empty. Complexity: O(1).
  [[nodiscard]] std::optional<expert_key> victim(std::size_t part) const noexcept {
    const std::uint32_t f = first_plain_[part] != detail::no_slot ? first_plain_[part] : head_[part];
    if (f == detail::no_slot) return std::nullopt;
    return shape_.key(f);
  }

 private:
  static constexpr std::uint64_t never = std::numeric_limits<std::uint64_t>::max();

  static sticky_lru_config checked(const sticky_lru_config& c) {
    constexpr const char* fn = "sticky_lru_policy";
    if (!(c.admit_threshold >= 0.0f && c.admit_threshold <= 1.0f)) {
      detail::throw_invalid(fn, "admit_threshold must be in [0, 1]", c.admit_threshold);
    }
    if (!(c.sticky_threshold >= 0.0f && c.sticky_threshold <= 1.0f)) {
      detail::throw_invalid(fn, "sticky_threshold must be in [0, 1]", c.sticky_threshold);
    }
    if (c.hint_steps == 0) detail::throw_invalid(fn, "hint_steps must be >= 1", c.hint_steps);
    if (c.sticky_steps == 0) detail::throw_invalid(fn, "sticky_steps must be >= 1", c.sticky_steps);
    return c;
  }

  void make_sticky(std::size_t f) noexcept {
    // Listed at most once, so the list never outgrows the slots.
    if (listed_[f] == 0) {
      listed_[f] = 1;
      sticky_list_[sticky_count_++] = static_cast<std::uint32_t>(f);
    }
    sticky_until_[f] = steps_ + cfg_.sticky_steps;
  }

  [[nodiscard]] std::size_t part_of(std::size_t f) const noexcept {
    return shape_.scope == capacity_scope::per_layer ? layer_of_.divide(f) : 0;
  }
  [[nodiscard]] bool sticky_slot(std::size_t f) const noexcept { return sticky_until_[f] != never; }
  /// The first ordinary member at or after `f` in its pool's list (`no_slot`: none).
  [[nodiscard]] std::uint32_t first_plain_from(std::uint32_t f) const noexcept {
    while (f != detail::no_slot && sticky_slot(f)) f = next_[f];
    return f;
  }
  /// Stamps `f` (a new resident, or one just used) and appends it to its pool's list.
  void append(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(in_[f] == 0);
    const std::size_t p = part_of(f);
    const auto s = static_cast<std::uint32_t>(f);
    stamp_[f] = ++clock_;
    prev_[f] = tail_[p];
    next_[f] = detail::no_slot;
    if (tail_[p] != detail::no_slot)
      next_[tail_[p]] = s;
    else
      head_[p] = s;
    tail_[p] = s;
    in_[f] = 1;
    // The newest member: the first ordinary one only when the pool had none.
    if (first_plain_[p] == detail::no_slot && !sticky_slot(f)) first_plain_[p] = s;
  }
  /// Takes `f` out of its pool's list, moving the cursor past it when it is there.
  void unlink(std::size_t f) noexcept {
    MOEPOLICY_ASSERT(in_[f] != 0);
    const std::size_t p = part_of(f);
    if (first_plain_[p] == f) first_plain_[p] = first_plain_from(next_[f]);
    if (prev_[f] != detail::no_slot)
      next_[prev_[f]] = next_[f];
    else
      head_[p] = next_[f];
    if (next_[f] != detail::no_slot)
      prev_[next_[f]] = prev_[f];
    else
      tail_[p] = prev_[f];
    prev_[f] = next_[f] = detail::no_slot;
    in_[f] = 0;
  }

  cache_shape shape_;
  sticky_lru_config cfg_;
  detail::slot_divider layer_of_;  // slot → layer (its pool when pools are per layer)
  /// Per pool: the residents in stamp order (`prev_`, `next_`, `head_`, `tail_`) and the
  /// first non-sticky one (`first_plain_`, `no_slot`: none).
  std::vector<std::uint32_t> prev_, next_;
  std::vector<std::uint64_t> stamp_;
  std::vector<std::uint8_t> in_;
  std::vector<std::uint32_t> head_, tail_, first_plain_;
  std::uint64_t clock_ = 0;
  std::uint64_t steps_ = 0;
  std::vector<float> hint_conf_;
  std::vector<std::uint64_t> hint_step_;
  std::vector<std::uint64_t> sticky_until_;
  std::vector<std::uint32_t> sticky_list_;  // a superset of the sticky entries
  std::vector<std::uint8_t> listed_;
  std::size_t sticky_count_ = 0;
};

static_assert(EvictionPolicy<sticky_lru_policy>);
static_assert(policy_traits<sticky_lru_policy>::has_admission && policy_traits<sticky_lru_policy>::takes_hints &&
              policy_traits<sticky_lru_policy>::observes_prefetch && policy_traits<sticky_lru_policy>::observes_steps);

}  // namespace moepolicy
