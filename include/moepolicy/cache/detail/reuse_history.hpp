// moepolicy/cache/detail/reuse_history.hpp — the demand history and the events shared by the
// policies that predict reuse distances from it (cache/predicted_reuse.hpp,
// cache/size_aware_reuse.hpp): per pool a clock of demand accesses; per expert its last
// demand access, its last touch (demand or prefetch) and the exponential moving average I of
// its demand intervals (see cache/predicted_reuse.hpp for the rules); which experts are
// resident; and the in-layer shield of Edge-MoE §5.3. The policy keeps its own ordering of
// the residents: `Derived` provides `rank_in(slot)` and `rank_out(slot)` (a slot enters or
// leaves the ordering) and `reorder(slot)` (an unshielded resident's history changed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/detail/layer_shield.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::detail {

template <class Derived>
class reuse_history {
 public:
  /// Complexity of the events: those of `Derived`'s ordering (O(log n) for n residents of
  /// the pool in both policies).
  void on_insert(expert_key k, const access_info& i) noexcept {
    const std::size_t f = shape_.flat(k);
    if (i.prefetch) {
      touch(f, shape_.partition_of(k));
    } else {
      demand(f, shape_.partition_of(k));
    }
    resident_[f] = 1;
    if (!shield_.shielded(f)) self().rank_in(f);
  }
  void on_hit(expert_key k, const access_info&) noexcept {
    const std::size_t f = shape_.flat(k);
    demand(f, shape_.partition_of(k));
    rerank(f);
  }
  void on_bypass(expert_key k, const access_info&) noexcept { demand(shape_.flat(k), shape_.partition_of(k)); }
  void on_prefetch(expert_key k, const access_info&) noexcept {
    const std::size_t f = shape_.flat(k);
    touch(f, shape_.partition_of(k));
    rerank(f);
  }
  void on_evict(expert_key k) noexcept {
    const std::size_t f = shape_.flat(k);
    resident_[f] = 0;
    if (!shield_.shielded(f)) self().rank_out(f);
  }

  /// Shields the batch's selected experts — their next use is now, so Belady would keep
  /// them — until `on_layer_end` of the layer (Edge-MoE §5.3's protection shield).
  void on_layer_begin(const batch_view& b) noexcept {
    const std::size_t base = static_cast<std::size_t>(b.ref.layer) * shape_.num_experts;
    shield_.shield(base, b.experts, [&](std::size_t f) {
      if (resident_[f] != 0) self().rank_out(f);
    });
  }
  /// Revokes the shields of layer `l`.
  void on_layer_end(layer_id l) noexcept {
    shield_.release(l, [&](std::size_t f) {
      if (resident_[f] != 0) self().rank_in(f);
    });
  }

 protected:
  /// `smoothing`: the weight a of the newest interval, already checked to be in (0, 1].
  reuse_history(const cache_shape& shape, double smoothing)
      : shape_(shape),
        a_(smoothing),
        interval_(shape.slots(), 0.0),
        last_demand_(shape.slots(), 0),
        last_touch_(shape.slots(), 0),
        clock_(shape.partitions(), 0),
        resident_(shape.slots(), 0),
        shield_(shape) {}

  /// Accesses to pool `p` since slot `f` was last touched.
  [[nodiscard]] double idle(std::size_t f, std::size_t p) const noexcept {
    return static_cast<double>(clock_[p] - last_touch_[f]);
  }
  /// I of slot `f` with a demand access now (the pool's next clock tick) folded in; for a
  /// slot with a demand history (`last_demand_[f] != 0`).
  [[nodiscard]] double interval_with_access(std::size_t f, std::size_t p) const noexcept {
    const double gap = static_cast<double>(clock_[p] + 1 - last_demand_[f]);
    return interval_[f] == 0.0 ? gap : interval_[f] + a_ * (gap - interval_[f]);
  }

  cache_shape shape_;
  double a_;
  std::vector<double> interval_;            // I per slot, 0 before its second demand access
  std::vector<std::uint64_t> last_demand_;  // pool time of the last demand access, 0 never
  std::vector<std::uint64_t> last_touch_;   // pool time of the last demand access or prefetch
  std::vector<std::uint64_t> clock_;        // per pool, demand accesses so far
  std::vector<std::uint8_t> resident_;
  layer_shield shield_;

 private:
  Derived& self() noexcept { return static_cast<Derived&>(*this); }

  void demand(std::size_t f, std::size_t p) noexcept {
    const std::uint64_t now = ++clock_[p];
    if (last_demand_[f] != 0) {
      const double gap = static_cast<double>(now - last_demand_[f]);
      interval_[f] = interval_[f] == 0.0 ? gap : interval_[f] + a_ * (gap - interval_[f]);
    }
    last_demand_[f] = now;
    last_touch_[f] = now;
  }
  void touch(std::size_t f, std::size_t p) noexcept { last_touch_[f] = clock_[p]; }
  void rerank(std::size_t f) noexcept {
    if (shield_.shielded(f)) return;
    self().reorder(f);
  }
};

}  // namespace moepolicy::detail
