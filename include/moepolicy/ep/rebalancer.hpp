// moepolicy/ep/rebalancer.hpp — expert-parallel rebalancing: replication, packing with
// improving swaps, migration-aware placement and hysteresis, better balanced than DeepSeek
// EPLB (ep/deepseek_eplb.hpp) and allocation-free per call.
//
// One layer, fresh (no current placement):
//   1. Nodes (when the nodes divide the groups, DeepSeek EPLB's hierarchical case): groups
//      go to nodes K/N each. Two partitions are tried — EPLB's own (its balanced packing of
//      the group loads, in float32, so the same partition) and that one improved by
//      improving swaps (below) on the group loads — and the one whose final max GPU load
//      is lower is kept. Each node then holds its groups' experts, R/N slots, G/N GPUs.
//      Otherwise one block of all experts, slots and GPUs (EPLB's global case).
//   2. Replication in each block: the greedy of ep/lower_bound.hpp (each extra replica to
//      the largest load per replica), which minimises the largest replica (EPLB's rule).
//   2b. Optionally (`replica_search_rounds` > 0), a replica-count search with the packer in
//      the loop: the greedy minimises the largest replica, not the packed max. For up to 4
//      experts of the max-loaded GPU, largest replica first: (a) the expert gains a replica
//      taken from the expert whose per-replica load grows least (staying below that GPU's
//      load), or else (b) it gives up k = 1 … 4 replicas, each to the expert with the largest
//      load per replica (a count the GPUs cannot spread evenly, say 5 replicas on 4 GPUs,
//      doubles up on one GPU; 4 spread); after each move the block is packed again (step 3)
//      and the first move that lowers the max is kept. The search stops when none helps. It
//      starts from EPLB's counts and keeps only improvements, so it is never above step 2's
//      result. On 278 tiny instances against the exact optimum (tests/ep/rebalancer.cpp) it
//      is optimal on 260 and within 1.071× on all (the greedy alone: 216, 1.48×).
//   3. Packing: longest processing time first with a cardinality constraint (replicas
//      largest first, each to the lightest GPU with a free slot; EPLB's packing), then
//      improving swaps: while some swap of a replica on the max-loaded GPU with a smaller one
//      on a lighter GPU lowers the pair's max below the old max, make the best such swap
//      with the lightest GPU that has one (a local search for k-partitioning; at most
//      `max_swap_rounds` swaps per block).
//   3b. Hierarchical case: the nodes are solved from the heaviest (load ÷ speed) down, and a
//      node is polished (swaps, and the search of 2b) only when its LPT max is above the
//      layer's max so far. Polishing only ever lowers a node's max, so on the other nodes it
//      cannot lower the layer's max: the layer's max (and balancedness) is exactly the one
//      polishing every node gives (`polish_every_node`), at about half the time.
// Since the swaps only lower a block's max, and EPLB's partition is among those tried, the
// max GPU load is never above EPLB's up to float32 rounding (the tests check it on random
// and real matrices).
//
// With a current placement (migration-aware):
//   4. The fresh placement's GPUs are matched to the current GPUs (nodes to nodes first,
//      in the hierarchical case), greedily by how many of their replicas already sit there,
//      and each kept replica stays in its current slot. This only relabels GPUs and slots:
//      the balance is the fresh one's.
//   5. The knob `balance_tolerance` ε trades balance for movement: when the current
//      placement's max GPU load on the new loads is within (1 + ε) × the fresh max, the
//      layer keeps it (no moves); otherwise each moved slot is reverted to its current expert
//      when every expert keeps a replica and the max stays within (1 + ε) × the fresh max.
//      ε = 0 still reverts moves that cost nothing.
//   6. Hysteresis (vLLM's FlashLB policy, `flashlb.py`: update a layer only when its
//      imbalance max/mean is >= threshold × the imbalance last committed, threshold 1.15):
//      with `hysteresis` h > 0, a layer whose current imbalance is below h × the imbalance
//      of the placement last committed for it keeps its current placement.
// GPUs of different speeds (`gpu_speed`, e.g. from `DeviceCost` models): a GPU's load is its
// time, tokens ÷ speed. LPT then puts each replica where it would finish first (the rule for
// uniform machines), the swaps compare times (the pair's best exchange is where both times
// meet), nodes are weighed by their GPUs' summed speed, and balancedness is the ideal time
// W ÷ Σ speed over the max time. The bound is `ep_lower_bound(..., speeds)`.
// Moves are slots whose logical expert changes (each one expert's weights copied in);
// `expert_bytes` prices them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/problem.hpp"

namespace moepolicy {

/// How `ep_rebalancer` trades balance against movement.
struct ep_rebalance_config {
  /// ε in [0, 1e6]: accept a max GPU load up to (1 + ε) × the fresh placement's to keep
  /// replicas where they are (used with a current placement).
  double balance_tolerance = 0.0;
  /// h: 0 (off) or in [1, 1e6]: with a current placement, rebalance a layer only when its
  /// imbalance (max ÷ mean GPU load) is >= h × the imbalance last committed for it
  /// (FlashLB uses 1.15).
  double hysteresis = 0.0;
  /// Bytes of one expert's weights, to price the moves (0: not priced).
  std::uint64_t expert_bytes = 0;
  /// Improving swaps per block and layer, at most; 0 turns the swaps off (EPLB's packing).
  std::uint32_t max_swap_rounds = 1024;
  /// Rounds of the replica-count search per block and layer (step 2b), at most; 0 keeps
  /// EPLB's greedy replication.
  std::uint32_t replica_search_rounds = 0;
  /// Hierarchical case: polish (swaps and search) every node, not only those whose LPT max
  /// is above the layer's max so far (step 3b). The layer's max is the same either way; this
  /// only evens the GPUs inside the other nodes, at about twice the time.
  bool polish_every_node = false;
};

/// The placement of every layer and what it achieves on the loads it was made for: the
/// GPU loads, max loads, balancedness and slots moved of `ep_placement_stats` (moved against
/// the current placement), the bytes those moves copy, and which layers were updated.
/// With GPU speeds, `gpu_loads` and `max_load` are times (tokens ÷ speed) and balancedness
/// is the ideal time W ÷ Σ speed over the max time (mean ÷ max when the speeds are equal).
struct ep_rebalance_result : ep_placement_stats {
  ep_placement placement;
  std::uint64_t moved_bytes = 0;
  /// [L] 1 when the layer got a new placement, 0 when it kept the current one
  /// (hysteresis or tolerance).
  std::vector<std::uint8_t> updated;
};

/// The rebalancer, its workspace and its per-layer hysteresis history.
class ep_rebalancer {
 public:
  /// Throws: `invalid_argument` naming `ep_rebalancer` when `layers` is 0 or above 2^20, the
  /// cluster does not fit `experts` (see `ep_cluster`), or a config value is out of range.
  ///
  /// `gpu_speed` (empty: every GPU alike) gives each GPU's speed relative to the others
  /// (tokens per second, in any unit; `ep_gpu_speeds` derives them from `DeviceCost`
  /// models): a GPU's load is then its time, tokens ÷ speed, and every step above balances
  /// times; throws also when it is not `gpus` long or a speed is not finite and > 0.
  ep_rebalancer(std::size_t layers, std::size_t experts, const ep_cluster& cluster, const ep_rebalance_config& cfg = {},
                std::span<const double> gpu_speed = {})
      : cluster_(cluster), cfg_(cfg), layers_(layers), experts_(experts) {
    constexpr std::string_view fn = "ep_rebalancer";
    if (layers == 0 || layers > ep_max_dimension) detail::throw_invalid(fn, "layers must be in [1, 2^20]", layers);
    detail::ep::check_cluster(fn, experts, cluster);
    detail::ep::check_speeds(fn, gpu_speed, cluster.gpus);
    inv_speed_.assign(cluster.gpus, 1.0);
    speed_sum_ = static_cast<double>(cluster.gpus);
    uniform_ = true;
    if (!gpu_speed.empty()) {
      speed_sum_ = 0.0;
      for (std::size_t q = 0; q < cluster.gpus; ++q) {
        inv_speed_[q] = 1.0 / gpu_speed[q];
        speed_sum_ += gpu_speed[q];
        uniform_ = uniform_ && gpu_speed[q] == gpu_speed[0];
      }
      // Equal speeds other than 1 scale every time alike: the uniform path, in time units.
    }
    if (!(cfg.balance_tolerance >= 0.0 && cfg.balance_tolerance <= 1e6)) {
      detail::throw_invalid(fn, "balance_tolerance must be in [0, 1e6]", cfg.balance_tolerance);
    }
    if (!(cfg.hysteresis == 0.0 || (cfg.hysteresis >= 1.0 && cfg.hysteresis <= 1e6))) {
      detail::throw_invalid(fn, "hysteresis must be 0 (off) or in [1, 1e6]", cfg.hysteresis);
    }
    nodes_ = cluster.hierarchical() && cluster.nodes > 1 ? cluster.nodes : 1;
    const std::size_t r = cluster.replicas;
    const std::size_t g = cluster.gpus;
    const std::size_t k = cluster.groups;
    res_.placement = ep_placement(layers, experts, r);
    res_.gpu_loads.assign(layers * g, 0.0);
    res_.max_load.assign(layers, 0.0);
    res_.balancedness.assign(layers, 1.0);
    res_.moved.assign(layers, 0);
    res_.updated.assign(layers, 0);
    history_.assign(layers, 0.0);
    counts_.resize(experts);
    heap_.resize(experts);
    ids_.resize(experts);
    sorted_.resize(experts);
    layer_order_.resize(experts);
    radix_a_.resize(experts);
    radix_b_.resize(experts);
    radix_count_.resize(4 * 256);
    group_of_.resize(experts);
    for (std::size_t e = 0; e < experts; ++e) group_of_[e] = static_cast<std::uint32_t>(e / (experts / k));
    local_base_.resize(k);
    node_fill_.resize(cluster.nodes);
    node_rank_.resize(cluster.nodes);
    node_max_.resize(cluster.nodes);
    items_.resize(r);
    bin_load_.resize(std::max(g, k));
    bin_fill_.resize(std::max(g, k));
    bin_items_.resize(std::max(r, k));
    bin_size_.resize(std::max(r, k));
    order_.resize(std::max(g, k));
    gpu_heap_.resize(g);
    slots_a_.resize(r);
    slots_b_.resize(r);
    group_load_.resize(k);
    group_loadf_.resize(k);
    group_pack_.resize(k);
    group_rank_.resize(k);
    sort_scratch_.resize(k);
    packf_.resize(k);
    pack_items_.resize(k);
    part_.resize(k);
    item_size_.resize(std::max(r, k));
    cur_counts_.resize(experts);
    cur_loads_.resize(g);
    new_loads_.resize(g);
    head_.resize(experts);
    next_.resize(r);
    overlap_.resize(g * g);
    pairs_.resize(r * 2 + g * g);
    gpu_map_.resize(g);
    gpu_used_.resize(g);
    node_map_.resize(cluster.nodes);
    node_used_.resize(cluster.nodes);
    node_overlap_.resize(static_cast<std::size_t>(cluster.nodes) * cluster.nodes);
    node_count_.resize(static_cast<std::size_t>(cluster.nodes) * experts);
    taken_.resize(r);
    touched_.resize(r + 1);
    saved_.resize(r + 1);
    seen_.resize(experts);
    expert_load_.resize(experts);
    bin_expert_.resize(r);
    item_expert_.resize(r);
    by_load_.resize(experts);
    multi_.resize(experts);
    cand_.resize(search_candidates);
    counts_save_.resize(experts);
    slots_c_.resize(r);
    swap_buf_.resize(r);
    bin_time_.resize(std::max(g, k));
    bin_inv_speed_.resize(std::max(g, k));
  }

  [[nodiscard]] const ep_cluster& cluster() const noexcept { return cluster_; }
  [[nodiscard]] const ep_rebalance_config& config() const noexcept { return cfg_; }
  /// The last result (empty placement until the first call).
  [[nodiscard]] const ep_rebalance_result& result() const noexcept { return res_; }
  /// Forgets the imbalance committed for every layer (hysteresis starts over).
  void reset_history() noexcept { std::fill(history_.begin(), history_.end(), 0.0); }

  /// A fresh placement of every layer (no current one: nothing is counted as moved).
  ///
  /// Throws: `invalid_argument` naming `ep_rebalancer::rebalance` when the load matrix's
  /// shape differs from the solver's, or a load is negative or not finite.
  /// Complexity: per layer about O(E + R log G + (R − E) log E + swaps · (G + S)), the
  /// swaps on the polished nodes only (step 3b);
  /// no allocation.
  const ep_rebalance_result& rebalance(const ep_load_view& loads) {
    check(loads);
    for (std::size_t l = 0; l < layers_; ++l) {
      auto out = res_.placement.physical_to_logical_row(l);
      solve_fresh(loads.row(l), out);
      res_.placement.rank_by_slot(l);
      res_.updated[l] = 1;
    }
    finish(loads, {});
    return res_;
  }

  /// A migration-aware placement of every layer from `current` (a flat layers × R array of
  /// logical experts, DeepSeek EPLB's `physical_to_logical`).
  ///
  /// Throws: as `rebalance(loads)`, and when `current` has another size, names an expert
  /// outside [0, E), or leaves a logical expert without a slot in some layer.
  /// Complexity: as `rebalance(loads)` plus O(R · (max replicas + G)) per layer; no
  /// allocation.
  const ep_rebalance_result& rebalance(const ep_load_view& loads, std::span<const std::int32_t> current) {
    check(loads);
    detail::ep::check_current("ep_rebalancer::rebalance", current, layers_, experts_, cluster_.replicas, seen_);
    const std::size_t r = cluster_.replicas;
    for (std::size_t l = 0; l < layers_; ++l) {
      const auto w = loads.row(l);
      const std::span<const std::int32_t> cur = current.subspan(l * r, r);
      auto out = res_.placement.physical_to_logical_row(l);
      const double cur_max = max_load_of(w, cur, cur_counts_, cur_loads_);
      const double mean = total(w) / speed_sum_;
      const double cur_imbalance = mean > 0.0 ? cur_max / mean : 1.0;
      if (cfg_.hysteresis > 0.0 && history_[l] > 0.0 && cur_imbalance < cfg_.hysteresis * history_[l]) {
        std::copy(cur.begin(), cur.end(), out.begin());
        res_.updated[l] = 0;
      } else {
        const double fresh_max = solve_fresh(w, std::span<std::int32_t>(slots_b_.data(), r));
        const double limit = fresh_max * (1.0 + cfg_.balance_tolerance) + 1e-12 * fresh_max;
        if (cur_max <= limit) {
          std::copy(cur.begin(), cur.end(), out.begin());
          res_.updated[l] = 0;
        } else {
          match(cur, std::span<const std::int32_t>(slots_b_.data(), r), out);
          revert(w, cur, out, limit);
          res_.updated[l] = 1;
          history_[l] = mean > 0.0 ? max_load_of(w, out, cur_counts_, new_loads_) / mean : 1.0;
        }
      }
      res_.placement.rank_by_slot(l);
    }
    finish(loads, current);
    return res_;
  }

  /// The fresh placement of one layer's `loads` into `slots` (R entries); returns its max GPU
  /// load. Preconditions: shapes as the solver's, loads finite and >= 0. No allocation.
  double solve_fresh(std::span<const double> w, std::span<std::int32_t> slots) noexcept {
    const std::size_t r = cluster_.replicas;
    sort_layer(w);
    if (nodes_ == 1) {
      for (std::size_t e = 0; e < experts_; ++e) {
        ids_[e] = static_cast<std::int32_t>(e);
        sorted_[e] = static_cast<std::int32_t>(layer_order_[e]);
      }
      return solve_block(w, std::span<const std::int32_t>(ids_.data(), experts_),
                         std::span<const std::int32_t>(sorted_.data(), experts_), r, cluster_.gpus, slots);
    }
    const std::size_t k = cluster_.groups;
    const std::size_t gs = experts_ / k;
    for (std::size_t q = 0; q < k; ++q) {
      double s = 0.0;
      float sf = 0.0f;
      for (std::size_t j = 0; j < gs; ++j) s += w[q * gs + j], sf += static_cast<float>(w[q * gs + j]);
      group_load_[q] = s;
      group_loadf_[q] = sf;
    }
    // EPLB's partition of the groups to nodes.
    detail::ep::eplb_balanced_packing(std::span<const float>(group_loadf_.data(), k), nodes_, group_pack_, group_rank_,
                                      sort_scratch_, packf_, pack_items_);
    for (std::size_t q = 0; q < k; ++q) part_[q] = group_pack_[q];
    double best = solve_partition(w, std::span<std::int32_t>(slots_a_.data(), r));
    std::copy(slots_a_.begin(), slots_a_.begin() + static_cast<std::ptrdiff_t>(r), slots.begin());
    if (k > nodes_ && cfg_.max_swap_rounds > 0) {
      // The same partition improved by swaps on the group loads.
      const std::size_t per = k / nodes_;
      std::fill(bin_fill_.begin(), bin_fill_.begin() + static_cast<std::ptrdiff_t>(nodes_), 0u);
      std::fill(bin_load_.begin(), bin_load_.begin() + static_cast<std::ptrdiff_t>(nodes_), 0.0);
      // A node's time is its groups' load ÷ its GPUs' summed speed.
      const std::size_t gpn = cluster_.gpus / nodes_;
      for (std::size_t n = 0; n < nodes_; ++n) {
        double sp = 0.0;
        for (std::size_t q = n * gpn; q < (n + 1) * gpn; ++q) sp += 1.0 / inv_speed_[q];
        bin_inv_speed_[n] = 1.0 / sp;
      }
      for (std::size_t q = 0; q < k; ++q) {
        const auto n = static_cast<std::size_t>(part_[q]);
        bin_size_[n * per + bin_fill_[n]] = group_load_[q];
        bin_items_[n * per + bin_fill_[n]++] = static_cast<std::int32_t>(q);
        bin_load_[n] += group_load_[q];
        item_size_[q] = group_load_[q];
      }
      // Each node's groups largest first, as the swaps keep their bins (an insertion sort:
      // each group moves left past the smaller ones before it).
      for (std::size_t n = 0; n < nodes_; ++n) {
        std::int32_t* b = bin_items_.data() + n * per;
        double* z = bin_size_.data() + n * per;
        for (std::size_t j = 1; j < per; ++j) {
          const std::int32_t v = b[j];
          const double sv = z[j];
          std::size_t pos = j;
          for (; pos > 0 && z[pos - 1] < sv; --pos) b[pos] = b[pos - 1], z[pos] = z[pos - 1];
          b[pos] = v;
          z[pos] = sv;
        }
      }
      if (improve_by_swaps(nodes_, per) > 0) {
        for (std::size_t n = 0; n < nodes_; ++n) {
          for (std::size_t j = 0; j < per; ++j)
            part_[static_cast<std::size_t>(bin_items_[n * per + j])] = static_cast<std::int32_t>(n);
        }
        const double m = solve_partition(w, std::span<std::int32_t>(slots_a_.data(), r));
        if (m < best) {
          best = m;
          std::copy(slots_a_.begin(), slots_a_.begin() + static_cast<std::ptrdiff_t>(r), slots.begin());
        }
      }
    }
    return best;
  }

 private:
  /// Bins tried after the lightest in a swap round.
  static constexpr std::size_t swap_candidates = 8;

  struct item {
    double size;
    std::int32_t expert;  // the block's local index
  };
  /// Larger size first, ties to the lower expert (a function object, so sorts inline it).
  struct larger_first_t {
    bool operator()(const item& a, const item& b) const noexcept {
      return a.size > b.size || (a.size == b.size && a.expert < b.expert);
    }
  };
  static constexpr larger_first_t larger_first{};
  struct gpu_entry {
    double load;
    std::uint32_t gpu;
  };
  static bool before(const gpu_entry& a, const gpu_entry& b) noexcept {
    return a.load < b.load || (a.load == b.load && a.gpu < b.gpu);
  }
  struct pair_entry {
    std::uint32_t overlap;
    std::uint32_t a;
    std::uint32_t b;
  };

  void check(const ep_load_view& loads) const {
    constexpr std::string_view fn = "ep_rebalancer::rebalance";
    if (loads.layers() != layers_) {
      detail::throw_invalid(fn, "load matrix layers must equal the solver's " + std::to_string(layers_),
                            loads.layers());
    }
    if (loads.experts() != experts_) {
      detail::throw_invalid(fn, "load matrix experts must equal the solver's " + std::to_string(experts_),
                            loads.experts());
    }
    detail::ep::check_loads(fn, loads);
  }

  static double total(std::span<const double> w) noexcept {
    double s = 0.0;
    for (double x : w) s += x;
    return s;
  }

  /// Max GPU load of `slots` on `w`; fills `counts` and `loads`.
  double max_load_of(std::span<const double> w, std::span<const std::int32_t> slots, std::vector<std::int32_t>& counts,
                     std::vector<double>& loads) const noexcept {
    std::fill(counts.begin(), counts.end(), 0);
    for (auto e : slots) ++counts[static_cast<std::size_t>(e)];
    ep_gpu_loads(w, slots, counts, std::span<double>(loads.data(), cluster_.gpus));
    double mx = 0.0;
    for (std::size_t q = 0; q < cluster_.gpus; ++q) {
      loads[q] *= inv_speed_[q];
      mx = std::max(mx, loads[q]);
    }
    return mx;
  }

  /// Solves every node of the partition `part_` (group → node) into `slots`.
  double solve_partition(std::span<const double> w, std::span<std::int32_t> slots) noexcept {
    const std::size_t k = cluster_.groups;
    const std::size_t gs = experts_ / k;
    const std::size_t epn = experts_ / nodes_;
    const std::size_t rpn = cluster_.replicas / nodes_;
    const std::size_t gpn = cluster_.gpus / nodes_;
    // Each node's experts (its groups in order; a node's local index follows the global
    // one), and the layer's load order split by node, in local indices: a stable split, so
    // each node's list is by load, ties to the lower expert.
    std::fill(node_fill_.begin(), node_fill_.begin() + static_cast<std::ptrdiff_t>(nodes_), 0u);
    for (std::size_t q = 0; q < k; ++q) {
      const auto n = static_cast<std::size_t>(part_[q]);
      local_base_[q] = node_fill_[n];
      for (std::size_t j = 0; j < gs; ++j) ids_[n * epn + node_fill_[n] + j] = static_cast<std::int32_t>(q * gs + j);
      node_fill_[n] += static_cast<std::uint32_t>(gs);
    }
    std::fill(node_fill_.begin(), node_fill_.begin() + static_cast<std::ptrdiff_t>(nodes_), 0u);
    for (std::size_t i = 0; i < experts_; ++i) {
      const std::uint32_t e = layer_order_[i];
      const std::uint32_t q = group_of_[e];
      const auto n = static_cast<std::size_t>(part_[q]);
      sorted_[n * epn + node_fill_[n]++] = static_cast<std::int32_t>(local_base_[q] + (e - q * gs));
    }
    // The nodes from the heaviest (load ÷ speed) down, each polished (improving swaps and
    // the replica-count search) only when its LPT max is above the layer's max so far: on
    // any other node polishing cannot lower the layer's max (it only ever lowers a node's
    // max), so the layer's max is the one polishing every node gives, at a fraction of the
    // work (usually one node in four is polished).
    for (std::size_t n = 0; n < nodes_; ++n) {
      MOEPOLICY_ASSERT(node_fill_[n] == epn);
      node_max_[n] = 0.0;
      node_rank_[n] = static_cast<std::uint32_t>(n);
    }
    for (std::size_t q = 0; q < k; ++q) node_max_[static_cast<std::size_t>(part_[q])] += group_load_[q];
    for (std::size_t n = 0; n < nodes_; ++n) {
      double sp = 0.0;
      for (std::size_t q = n * gpn; q < (n + 1) * gpn; ++q) sp += 1.0 / inv_speed_[q];
      node_max_[n] /= sp;
    }
    std::sort(node_rank_.begin(), node_rank_.begin() + static_cast<std::ptrdiff_t>(nodes_),
              [&](std::uint32_t a, std::uint32_t b) {
                return node_max_[a] > node_max_[b] || (node_max_[a] == node_max_[b] && a < b);
              });
    double mx = 0.0;
    for (std::size_t i = 0; i < nodes_; ++i) {
      const std::size_t n = node_rank_[i];
      mx = std::max(mx, solve_block(w, std::span<const std::int32_t>(ids_.data() + n * epn, epn),
                                    std::span<const std::int32_t>(sorted_.data() + n * epn, epn), rpn, gpn,
                                    slots.subspan(n * rpn, rpn), n * gpn, cfg_.polish_every_node ? -1.0 : mx));
    }
    return mx;
  }

  /// Replicates the experts `ids` into `r` slots and packs them on the `g` GPUs from
  /// `first_gpu` on; writes the slots (GPU-major) and returns the max GPU time (load ÷ speed).
  /// `sorted` lists the block's local indices (into `ids`) by load, largest first, ties to
  /// the lower index.
  /// The improving swaps and the replica-count search run only when the LPT max is above
  /// `polish_above` (the layer's max so far).
  double solve_block(std::span<const double> w, std::span<const std::int32_t> ids, std::span<const std::int32_t> sorted,
                     std::size_t r, std::size_t g, std::span<std::int32_t> slots, std::size_t first_gpu = 0,
                     double polish_above = -1.0) noexcept {
    const std::size_t m = ids.size();
    const std::size_t per = r / g;
    for (std::size_t b = 0; b < g; ++b) bin_inv_speed_[b] = inv_speed_[first_gpu + b];
    // Replication (counts_ and expert_load_ are indexed by the block's local expert).
    // The experts by load, largest first (ties to the lower expert), from the layer's one
    // sort: the greedy replication runs on the heaviest R − E of them only (the others can
    // never take an extra replica, see `ep_replicate`), and packing merges this order with
    // the few replicated experts instead of sorting again.
    for (std::size_t i = 0; i < m; ++i) {
      expert_load_[i] = w[static_cast<std::size_t>(ids[i])];
      counts_[i] = 1;
    }
    for (std::size_t i = 0; i < m; ++i) {
      const auto loc = static_cast<std::size_t>(sorted[i]);
      by_load_[i] = {expert_load_[loc], static_cast<std::int32_t>(loc)};
    }
    const std::size_t extra = r - m;
    const std::size_t k = std::min(extra, m);
    if (k > 0) {
      for (std::size_t i = 0; i < k; ++i) {
        heap_[i] = {by_load_[i].size, static_cast<std::uint32_t>(by_load_[i].expert)};
      }
      const auto end = heap_.begin() + static_cast<std::ptrdiff_t>(k);
      std::make_heap(heap_.begin(), end, detail::ep::replica_less{});
      for (std::size_t x = 0; x < extra; ++x) {
        std::pop_heap(heap_.begin(), end, detail::ep::replica_less{});
        auto& top = heap_[k - 1];
        const std::int32_t c = ++counts_[top.expert];
        top.per_replica = expert_load_[top.expert] / c;
        std::push_heap(heap_.begin(), end, detail::ep::replica_less{});
      }
    }
    double best = pack(ids, g, per, slots, polish_above);
    if (!(best > polish_above)) return best;
    // Replica-count search (step 2b): for each of up to `search_candidates` experts on the
    // max-time GPU (largest replica first), (a) it gains a replica, taken from the expert
    // that loses least by it, or else (b) it gives up k = 1 … `search_give` replicas, each
    // to the expert with the largest load per replica then; the block is packed again after
    // each move and the first move that lowers the max time is kept. The search ends when
    // none helps.
    auto try_counts = [&]() {
      const double now = pack(ids, g, per, std::span<std::int32_t>(slots_c_.data(), r));
      if (!(now < best * (1.0 - 1e-12))) return false;
      best = now;
      std::copy(slots_c_.begin(), slots_c_.begin() + static_cast<std::ptrdiff_t>(r), slots.begin());
      return true;
    };
    for (std::uint32_t round = 0; round < cfg_.replica_search_rounds && m < r; ++round) {
      const std::size_t nc = search_candidates_of(g, per);
      bool improved = false;
      for (std::size_t ci = 0; ci < nc && !improved; ++ci) {
        const auto x = static_cast<std::size_t>(cand_[ci]);
        const std::size_t lose = least_harm(m, x, cand_top_);
        if (lose != m) {
          ++counts_[x];
          --counts_[lose];
          improved = try_counts();
          if (improved) break;
          --counts_[x];
          ++counts_[lose];
        }
        // (b): a replica count that GPUs cannot spread evenly (say 5 on 4 GPUs) doubles up
        // on one GPU; fewer replicas of x and more of the others can spread better.
        std::copy(counts_.begin(), counts_.begin() + static_cast<std::ptrdiff_t>(m), counts_save_.begin());
        for (std::int32_t give = 1; give <= search_give && give < counts_save_[x] && !improved; ++give) {
          --counts_[x];
          std::size_t to = m;
          for (std::size_t e = 0; e < m; ++e) {
            if (e == x) continue;
            if (to == m || expert_load_[e] * counts_[to] > expert_load_[to] * counts_[e]) to = e;
          }
          if (to == m) break;  // x is the block's only expert (its counts are restored below)
          ++counts_[to];
          improved = try_counts();
        }
        if (!improved)
          std::copy(counts_save_.begin(), counts_save_.begin() + static_cast<std::ptrdiff_t>(m), counts_.begin());
      }
      if (!improved) break;
    }
    return best;
  }

  /// Layers of at least this many experts are sorted by radix, smaller ones by comparison.
  static constexpr std::size_t radix_min_experts = 48;

  /// The experts of `w` by load, largest first, ties to the lower expert, into
  /// `layer_order_`. Large layers: an LSD radix sort (4 passes of 8 bits) on the upper 32 bits
  /// of each load (sign, exponent and 20 mantissa bits; loads are >= 0 so their bits order
  /// as the values do), stable so that equal keys keep the expert order, then an insertion
  /// pass that orders the loads whose upper bits agree (none, for counts below 2^21; the pass
  /// costs one comparison per expert on the nearly sorted result). A comparison sort of
  /// random loads mispredicts about half its branches; the radix sort has none to miss.
  void sort_layer(std::span<const double> w) noexcept {
    const std::size_t n = experts_;
    std::uint32_t* out = layer_order_.data();
    auto first = [&](std::uint32_t a, std::uint32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    if (n < radix_min_experts) {
      for (std::size_t e = 0; e < n; ++e) out[e] = static_cast<std::uint32_t>(e);
      std::sort(out, out + n, first);
      return;
    }
    std::uint64_t* a = radix_a_.data();
    std::uint64_t* b = radix_b_.data();
    std::uint32_t* count = radix_count_.data();
    std::fill(radix_count_.begin(), radix_count_.end(), 0u);
    for (std::size_t e = 0; e < n; ++e) {
      // Ascending keys: the complement of the upper bits (larger loads first); -0 made +0.
      const auto key = static_cast<std::uint32_t>(~(std::bit_cast<std::uint64_t>(w[e] + 0.0) >> 32));
      a[e] = (std::uint64_t{key} << 32) | e;
      ++count[key & 255u];
      ++count[256 + ((key >> 8) & 255u)];
      ++count[512 + ((key >> 16) & 255u)];
      ++count[768 + (key >> 24)];
    }
    for (unsigned d = 0; d < 4; ++d) {
      std::uint32_t* c = count + 256 * d;
      const unsigned shift = 32 + 8 * d;
      if (c[(a[0] >> shift) & 255u] == n) continue;  // a digit every key shares orders nothing
      std::uint32_t sum = 0;
      for (std::size_t v = 0; v < 256; ++v) {
        const std::uint32_t t = c[v];
        c[v] = sum;
        sum += t;
      }
      for (std::size_t i = 0; i < n; ++i) b[c[(a[i] >> shift) & 255u]++] = a[i];
      std::swap(a, b);
    }
    for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::uint32_t>(a[i]);
    for (std::size_t i = 1; i < n; ++i) {
      const std::uint32_t v = out[i];
      std::size_t j = i;
      for (; j > 0 && first(v, out[j - 1]); --j) out[j] = out[j - 1];
      out[j] = v;
    }
  }

  /// Experts tried per round of the replica-count search.
  static constexpr std::size_t search_candidates = 4;
  /// The most replicas one expert gives up in one move of the search.
  static constexpr std::int32_t search_give = 4;

  /// The distinct experts on the max-time GPU of the last packing, largest replica first
  /// (at most `search_candidates`), into `cand_`; sets `cand_top_` to that GPU's load.
  std::size_t search_candidates_of(std::size_t g, std::size_t per) noexcept {
    std::size_t hi = 0;
    for (std::size_t b = 1; b < g; ++b) {
      if (bin_load_[b] * bin_inv_speed_[b] > bin_load_[hi] * bin_inv_speed_[hi]) hi = b;
    }
    cand_top_ = bin_load_[hi];
    std::size_t nc = 0;
    // The bin keeps its items largest first.
    for (std::size_t j = 0; j < per && nc < search_candidates; ++j) {
      const std::int32_t e = bin_expert_[hi * per + j];
      if (std::find(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(nc), e) !=
          cand_.begin() + static_cast<std::ptrdiff_t>(nc))
        continue;
      if (!(expert_load_[static_cast<std::size_t>(e)] > 0.0)) continue;
      cand_[nc++] = e;
    }
    return nc;
  }

  /// The expert other than `gain` with >= 2 replicas whose per-replica load grows least by
  /// losing one, if that load stays below `top`; else `m`.
  std::size_t least_harm(std::size_t m, std::size_t gain, double top) const noexcept {
    std::size_t lose = m;
    double lose_size = std::numeric_limits<double>::infinity();
    for (std::size_t e = 0; e < m; ++e) {
      if (e == gain || counts_[e] < 2) continue;
      const double sz = expert_load_[e] / (counts_[e] - 1);
      if (sz < lose_size) lose_size = sz, lose = e;
    }
    return lose_size < top ? lose : m;
  }

  /// Packs the replicas given by `counts_` (block-local) onto `g` GPUs of `per` slots: LPT
  /// with cardinality, then improving swaps when the LPT max is above `swaps_above`; writes
  /// the slots and returns the max GPU time.
  double pack(std::span<const std::int32_t> ids, std::size_t g, std::size_t per, std::span<std::int32_t> slots,
              double swaps_above = -1.0) noexcept {
    const std::size_t m = ids.size();
    // The experts by replica size, largest first (ties to the lower expert), then each
    // expert's replicas in a row: the replicas sorted without sorting them one by one. The
    // unreplicated experts keep the load order of `by_load_`; the replicated ones (at most
    // R − E) are sorted apart and merged in.
    std::size_t nb = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const auto e = static_cast<std::size_t>(by_load_[i].expert);
      if (counts_[e] > 1) multi_[nb++] = {expert_load_[e] / counts_[e], static_cast<std::int32_t>(e)};
    }
    std::sort(multi_.begin(), multi_.begin() + static_cast<std::ptrdiff_t>(nb), larger_first);
    {
      std::size_t a = 0, b = 0, o = 0;
      while (a < m || b < nb) {
        while (a < m && counts_[static_cast<std::size_t>(by_load_[a].expert)] > 1) ++a;
        if (a == m && b == nb) break;
        if (b == nb || (a < m && larger_first(by_load_[a], multi_[b]))) {
          items_[o++] = by_load_[a++];
        } else {
          items_[o++] = multi_[b++];
        }
      }
      MOEPOLICY_ASSERT(o == m);
    }
    std::size_t n = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const auto e = static_cast<std::size_t>(items_[i].expert);
      for (std::int32_t c = 0; c < counts_[e]; ++c)
        item_size_[n] = items_[i].size, item_expert_[n++] = static_cast<std::int32_t>(e);
    }
    for (std::size_t b = 0; b < g; ++b) bin_fill_[b] = 0, bin_load_[b] = 0.0;
    if (uniform_) {
      lpt_uniform(n, g, per);
    } else {
      lpt_speeds(n, g, per);
    }
    double mx = 0.0;
    for (std::size_t b = 0; b < g; ++b) mx = std::max(mx, bin_load_[b] * bin_inv_speed_[b]);
    if (mx > swaps_above) {
      for (std::size_t s = 0; s < n; ++s) bin_size_[s] = item_size_[static_cast<std::size_t>(bin_items_[s])];
      if (improve_by_swaps(g, per) > 0) {
        mx = 0.0;
        for (std::size_t b = 0; b < g; ++b) mx = std::max(mx, bin_load_[b] * bin_inv_speed_[b]);
      }
    }
    for (std::size_t b = 0; b < g; ++b) {
      for (std::size_t j = 0; j < per; ++j) {
        const std::int32_t e = item_expert_[static_cast<std::size_t>(bin_items_[b * per + j])];
        slots[b * per + j] = ids[static_cast<std::size_t>(e)];
        bin_expert_[b * per + j] = e;
      }
    }
    return mx;
  }

  /// LPT with cardinality on equal GPUs: each replica, largest first, to the lightest GPU
  /// with a free slot (ties to the lower GPU). A min-heap keyed (load, GPU) whose top is
  /// replaced in place: one sift per replica.
  void lpt_uniform(std::size_t n, std::size_t g, std::size_t per) noexcept {
    if (g <= 16) {
      // Few GPUs: the GPUs with a free slot kept in (load, GPU) order; the lightest takes the
      // replica and slides to its new place (far right, usually: the loop's branch is
      // predictable, unlike a heap's).
      gpu_entry* a = gpu_heap_.data();
      for (std::size_t b = 0; b < g; ++b) a[b] = {0.0, static_cast<std::uint32_t>(b)};
      std::size_t live = g;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t b = a[0].gpu;
        bin_items_[b * per + bin_fill_[b]++] = static_cast<std::int32_t>(i);
        bin_load_[b] += item_size_[i];
        if (bin_fill_[b] == per) {
          --live;
          for (std::size_t j = 0; j < live; ++j) a[j] = a[j + 1];
          continue;
        }
        const gpu_entry x{bin_load_[b], static_cast<std::uint32_t>(b)};
        std::size_t j = 0;
        while (j + 1 < live && before(a[j + 1], x)) a[j] = a[j + 1], ++j;
        a[j] = x;
      }
      return;
    }
    for (std::size_t b = 0; b < g; ++b) gpu_heap_[b] = {0.0, static_cast<std::uint32_t>(b)};
    std::size_t live = g;
    gpu_entry* h = gpu_heap_.data();
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t b = h[0].gpu;
      bin_items_[b * per + bin_fill_[b]++] = static_cast<std::int32_t>(i);
      h[0].load += item_size_[i];
      bin_load_[b] = h[0].load;
      if (bin_fill_[b] == per) h[0] = h[--live];
      // Sift the top down.
      const gpu_entry x = h[0];
      std::size_t at = 0;
      for (;;) {
        std::size_t c = 2 * at + 1;
        if (c >= live) break;
        if (c + 1 < live && before(h[c + 1], h[c])) ++c;
        if (!before(h[c], x)) break;
        h[at] = h[c];
        at = c;
      }
      h[at] = x;
    }
  }

  /// LPT with cardinality on GPUs of different speeds (the uniform-machines rule): each
  /// replica, largest first, to the GPU with a free slot where it would finish earliest,
  /// (load + size) ÷ speed (ties to the lower GPU).
  void lpt_speeds(std::size_t n, std::size_t g, std::size_t per) noexcept {
    for (std::size_t i = 0; i < n; ++i) {
      std::size_t best = g;
      double t_best = std::numeric_limits<double>::infinity();
      for (std::size_t b = 0; b < g; ++b) {
        if (bin_fill_[b] == per) continue;
        const double t = (bin_load_[b] + item_size_[i]) * bin_inv_speed_[b];
        if (t < t_best) t_best = t, best = b;
      }
      bin_items_[best * per + bin_fill_[best]++] = static_cast<std::int32_t>(i);
      bin_load_[best] += item_size_[i];
    }
  }

  /// Improving swaps between the max-time bin and faster-finishing ones over `bins` bins of
  /// `per` items (bin_items_, bin_load_, item_size_, bin_inv_speed_). Returns the swaps made.
  std::size_t improve_by_swaps(std::size_t bins, std::size_t per) noexcept {
    std::size_t swaps = 0;
    if (bins < 2) return 0;
    while (swaps < cfg_.max_swap_rounds) {
      std::size_t hi = 0;
      std::size_t lo = 0;
      for (std::size_t b = 0; b < bins; ++b) bin_time_[b] = bin_load_[b] * bin_inv_speed_[b];
      for (std::size_t b = 1; b < bins; ++b) {
        hi = bin_time_[b] > bin_time_[hi] ? b : hi;
        lo = bin_time_[b] < bin_time_[lo] ? b : lo;
      }
      // The lightest bin usually takes a swap; when not, the next lightest few are tried
      // (a bound on the work of the last rounds, where most pairs cannot improve).
      bool done = try_swap(hi, lo, per);
      if (!done) {
        std::size_t n = 0;
        for (std::size_t b = 0; b < bins; ++b) {
          if (b != hi && b != lo) order_[n++] = static_cast<std::uint32_t>(b);
        }
        const std::size_t tries = std::min<std::size_t>(n, swap_candidates);
        std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(tries),
                          order_.begin() + static_cast<std::ptrdiff_t>(n),
                          [&](std::uint32_t a, std::uint32_t b) { return bin_time_[a] < bin_time_[b]; });
        for (std::size_t o = 0; o < tries && !done; ++o) done = try_swap(hi, order_[o], per);
      }
      if (!done) break;
      ++swaps;
    }
    return swaps;
  }

  /// Makes the swap between bins `hi` (the max-time one) and `j` that lowers their max time
  /// the most below `hi`'s, if any. Each bin's items are kept by size, largest first, so the
  /// search is one merge-like pass: the pair's max time after moving d = a − b from `hi` to
  /// `j` is convex in d with its least at d* (where both times meet), so for each item a the
  /// best partner is one of the two items of `j` nearest to a − d*.
  bool try_swap(std::size_t hi, std::size_t j, std::size_t per) noexcept {
    const double top = bin_time_[hi];
    if (j == hi || bin_time_[j] >= top * (1.0 - 1e-12)) return false;
    const double load_hi = bin_load_[hi];
    const double load_j = bin_load_[j];
    const double inv_hi = bin_inv_speed_[hi];
    const double inv_j = bin_inv_speed_[j];
    const double d_star = (load_hi * inv_hi - load_j * inv_j) / (inv_hi + inv_j);
    double best = top * (1.0 - 1e-12);
    const double* s_hi = bin_size_.data() + hi * per;
    const double* s_j = bin_size_.data() + j * per;
    std::size_t ba = per;
    std::size_t bb = per;
    auto consider = [&](std::size_t x, double sa, std::size_t y) {
      const double d = sa - s_j[y];
      if (!(d > 0.0)) return;
      const double now = std::max((load_hi - d) * inv_hi, (load_j + d) * inv_j);
      if (now < best) best = now, ba = x, bb = y;
    };
    // y: the first item of j (sizes falling) at or below the target a − d*; the targets
    // fall with a, so y only moves forward.
    std::size_t y = 0;
    for (std::size_t x = 0; x < per; ++x) {
      const double sa = s_hi[x];
      const double target = sa - d_star;
      while (y < per && s_j[y] > target) ++y;
      if (y < per) consider(x, sa, y);
      if (y > 0) consider(x, sa, y - 1);
    }
    if (ba == per) return false;
    const std::int32_t a = bin_items_[hi * per + ba];
    const std::int32_t b = bin_items_[j * per + bb];
    const double sa = s_hi[ba];
    const double sb = s_j[bb];
    const double d = sa - sb;
    bin_items_[hi * per + ba] = b;
    bin_items_[j * per + bb] = a;
    bin_load_[hi] -= d;
    bin_load_[j] += d;
    resort(hi * per, ba, per, b, sb);
    resort(j * per, bb, per, a, sa);
    return true;
  }

  /// Puts item `v` of size `sv` at `pos` of the bin at `base` and restores the bin's
  /// largest-first order (items and their sizes in `bin_size_`).
  void resort(std::size_t base, std::size_t pos, std::size_t per, std::int32_t v, double sv) noexcept {
    std::int32_t* b = bin_items_.data() + base;
    double* z = bin_size_.data() + base;
    while (pos > 0 && z[pos - 1] < sv) b[pos] = b[pos - 1], z[pos] = z[pos - 1], --pos;
    while (pos + 1 < per && z[pos + 1] > sv) b[pos] = b[pos + 1], z[pos] = z[pos + 1], ++pos;
    b[pos] = v;
    z[pos] = sv;
  }

  /// Relabels the GPUs (and nodes) of `fresh` to match `cur`, keeping replicas in their
  /// current slots; writes `out`.
  void match(std::span<const std::int32_t> cur, std::span<const std::int32_t> fresh,
             std::span<std::int32_t> out) noexcept {
    const std::size_t r = cluster_.replicas;
    const std::size_t g = cluster_.gpus;
    const std::size_t per = r / g;
    const std::size_t blocks = nodes_;
    const std::size_t gpb = g / blocks;
    const std::size_t rpb = r / blocks;
    // Nodes to nodes by the replicas they share.
    for (std::size_t n = 0; n < blocks; ++n) node_map_[n] = static_cast<std::int32_t>(n);
    if (blocks > 1) {
      std::fill(node_count_.begin(), node_count_.end(), 0);
      for (std::size_t p = 0; p < r; ++p) ++node_count_[(p / rpb) * experts_ + static_cast<std::size_t>(cur[p])];
      std::fill(node_overlap_.begin(), node_overlap_.end(), 0u);
      for (std::size_t n = 0; n < blocks; ++n) {
        for (std::size_t p = n * rpb; p < (n + 1) * rpb; ++p) {
          const auto e = static_cast<std::size_t>(fresh[p]);
          for (std::size_t o = 0; o < blocks; ++o)
            node_overlap_[n * blocks + o] += node_count_[o * experts_ + e] > 0 ? 1u : 0u;
        }
      }
      greedy_assign(node_overlap_, blocks, node_map_, node_used_);
    }
    // Experts' current slots as lists.
    std::fill(head_.begin(), head_.end(), -1);
    for (std::size_t p = r; p-- > 0;) {
      const auto e = static_cast<std::size_t>(cur[p]);
      next_[p] = head_[e];
      head_[e] = static_cast<std::int32_t>(p);
    }
    for (std::size_t n = 0; n < blocks; ++n) {
      const auto o = static_cast<std::size_t>(node_map_[n]);
      std::fill(overlap_.begin(), overlap_.begin() + static_cast<std::ptrdiff_t>(gpb * gpb), 0u);
      for (std::size_t b = 0; b < gpb; ++b) {
        for (std::size_t j = 0; j < per; ++j) {
          const auto e = static_cast<std::size_t>(fresh[(n * gpb + b) * per + j]);
          for (std::int32_t p = head_[e]; p >= 0; p = next_[static_cast<std::size_t>(p)]) {
            const std::size_t gpu = static_cast<std::size_t>(p) / per;
            if (gpu / gpb == o) ++overlap_[b * gpb + (gpu - o * gpb)];
          }
        }
      }
      greedy_assign(overlap_, gpb, gpu_map_, gpu_used_);
      for (std::size_t b = 0; b < gpb; ++b) {
        const std::size_t target = o * gpb + static_cast<std::size_t>(gpu_map_[b]);
        const std::size_t src = (n * gpb + b) * per;
        std::fill(taken_.begin(), taken_.begin() + static_cast<std::ptrdiff_t>(per), 0);
        for (std::size_t k = 0; k < per; ++k) out[target * per + k] = -1;
        // Keep replicas already in this GPU's slots.
        for (std::size_t k = 0; k < per; ++k) {
          const std::int32_t e = cur[target * per + k];
          for (std::size_t j = 0; j < per; ++j) {
            if (taken_[j] == 0 && fresh[src + j] == e) {
              taken_[j] = 1;
              out[target * per + k] = e;
              break;
            }
          }
        }
        std::size_t j = 0;
        for (std::size_t k = 0; k < per; ++k) {
          if (out[target * per + k] >= 0) continue;
          while (taken_[j] != 0) ++j;
          taken_[j] = 1;
          out[target * per + k] = fresh[src + j];
        }
      }
    }
  }

  /// Greedy maximum-overlap assignment of `n` rows to `n` columns of `ov` (row-major).
  void greedy_assign(std::span<const std::uint32_t> ov, std::size_t n, std::vector<std::int32_t>& row_to_col,
                     std::vector<std::uint8_t>& col_used) noexcept {
    std::size_t np = 0;
    for (std::size_t a = 0; a < n; ++a) {
      for (std::size_t b = 0; b < n; ++b) {
        if (ov[a * n + b] > 0)
          pairs_[np++] = {ov[a * n + b], static_cast<std::uint32_t>(a), static_cast<std::uint32_t>(b)};
      }
    }
    std::sort(pairs_.begin(), pairs_.begin() + static_cast<std::ptrdiff_t>(np),
              [](const pair_entry& x, const pair_entry& y) {
                return x.overlap > y.overlap || (x.overlap == y.overlap && (x.a < y.a || (x.a == y.a && x.b < y.b)));
              });
    std::fill(row_to_col.begin(), row_to_col.begin() + static_cast<std::ptrdiff_t>(n), -1);
    std::fill(col_used.begin(), col_used.begin() + static_cast<std::ptrdiff_t>(n), std::uint8_t{0});
    for (std::size_t i = 0; i < np; ++i) {
      const auto& p = pairs_[i];
      if (row_to_col[p.a] >= 0 || col_used[p.b] != 0) continue;
      row_to_col[p.a] = static_cast<std::int32_t>(p.b);
      col_used[p.b] = 1;
    }
    std::size_t free_col = 0;
    for (std::size_t a = 0; a < n; ++a) {
      if (row_to_col[a] >= 0) continue;
      while (col_used[free_col] != 0) ++free_col;
      row_to_col[a] = static_cast<std::int32_t>(free_col);
      col_used[free_col] = 1;
    }
  }

  /// Reverts moved slots of `out` to `cur` while every expert keeps a replica and the max
  /// GPU load stays <= `limit`.
  void revert(std::span<const double> w, std::span<const std::int32_t> cur, std::span<std::int32_t> out,
              double limit) noexcept {
    const std::size_t r = cluster_.replicas;
    const std::size_t per = r / cluster_.gpus;
    max_load_of(w, out, counts_, new_loads_);
    std::fill(head_.begin(), head_.end(), -1);
    for (std::size_t p = r; p-- > 0;) {
      const auto e = static_cast<std::size_t>(out[p]);
      next_[p] = head_[e];
      head_[e] = static_cast<std::int32_t>(p);
    }
    for (std::size_t s = 0; s < r; ++s) {
      if (out[s] == cur[s]) continue;
      const auto a = static_cast<std::size_t>(out[s]);
      const auto b = static_cast<std::size_t>(cur[s]);
      const std::int32_t ca = counts_[a];
      const std::int32_t cb = counts_[b];
      if (ca < 2) continue;
      std::size_t nt = 0;
      auto touch = [&](std::size_t gpu, double delta) {
        touched_[nt] = static_cast<std::uint32_t>(gpu);
        saved_[nt++] = new_loads_[gpu];
        new_loads_[gpu] += delta * inv_speed_[gpu];
      };
      const double da = w[a] / (ca - 1) - w[a] / ca;
      const double db = w[b] / (cb + 1) - (cb > 0 ? w[b] / cb : 0.0);
      for (std::int32_t p = head_[a]; p >= 0; p = next_[static_cast<std::size_t>(p)]) {
        if (static_cast<std::size_t>(p) != s) touch(static_cast<std::size_t>(p) / per, da);
      }
      for (std::int32_t p = head_[b]; p >= 0; p = next_[static_cast<std::size_t>(p)])
        touch(static_cast<std::size_t>(p) / per, db);
      touch(s / per, w[b] / (cb + 1) - w[a] / ca);
      double mx = 0.0;
      for (std::size_t q = 0; q < cluster_.gpus; ++q) mx = std::max(mx, new_loads_[q]);
      if (mx > limit) {
        for (std::size_t t = nt; t-- > 0;) new_loads_[touched_[t]] = saved_[t];
        continue;
      }
      // Commit: move slot s from a's list to b's.
      if (head_[a] == static_cast<std::int32_t>(s)) {
        head_[a] = next_[s];
      } else {
        for (std::int32_t p = head_[a]; p >= 0; p = next_[static_cast<std::size_t>(p)]) {
          if (next_[static_cast<std::size_t>(p)] == static_cast<std::int32_t>(s)) {
            next_[static_cast<std::size_t>(p)] = next_[s];
            break;
          }
        }
      }
      next_[s] = head_[b];
      head_[b] = static_cast<std::int32_t>(s);
      --counts_[a];
      ++counts_[b];
      out[s] = cur[s];
    }
  }

  void finish(const ep_load_view& loads, std::span<const std::int32_t> current) noexcept {
    res_.placement.finish();
    const std::size_t g = cluster_.gpus;
    double sum = 0.0;
    res_.moved_total = 0;
    for (std::size_t l = 0; l < layers_; ++l) {
      std::span<double> row(res_.gpu_loads.data() + l * g, g);
      ep_gpu_loads(loads.row(l), res_.placement.physical_to_logical(l), res_.placement.logical_count(l), row);
      double mx = 0.0;
      double tot = 0.0;
      for (std::size_t q = 0; q < g; ++q) {
        tot += row[q];
        row[q] *= inv_speed_[q];
        mx = std::max(mx, row[q]);
      }
      res_.max_load[l] = mx;
      res_.balancedness[l] = mx > 0.0 ? tot / speed_sum_ / mx : 1.0;
      sum += res_.balancedness[l];
      std::uint32_t moved = 0;
      if (!current.empty()) {
        const auto now = res_.placement.physical_to_logical(l);
        for (std::size_t p = 0; p < now.size(); ++p) moved += now[p] != current[l * now.size() + p] ? 1u : 0u;
      } else {
        history_[l] = res_.balancedness[l] > 0.0 ? 1.0 / res_.balancedness[l] : 1.0;
      }
      res_.moved[l] = moved;
      res_.moved_total += moved;
    }
    res_.mean_balancedness = sum / static_cast<double>(layers_);
    res_.moved_bytes = res_.moved_total * cfg_.expert_bytes;
  }

  ep_cluster cluster_;
  ep_rebalance_config cfg_;
  std::size_t layers_;
  std::size_t experts_;
  std::size_t nodes_ = 1;
  ep_rebalance_result res_;
  std::vector<double> history_;
  std::vector<double> inv_speed_, expert_load_, swap_buf_, bin_time_, bin_inv_speed_;
  std::vector<std::int32_t> bin_expert_, slots_c_, item_expert_, cand_;
  double cand_top_ = 0.0;
  double speed_sum_ = 1.0;
  bool uniform_ = true;
  std::vector<std::uint32_t> layer_order_, radix_count_, group_of_, local_base_, node_fill_, node_rank_;
  std::vector<double> node_max_;
  std::vector<std::uint64_t> radix_a_, radix_b_;
  std::vector<std::int32_t> counts_save_;
  std::vector<std::int32_t> counts_, ids_, sorted_, bin_items_, slots_a_, slots_b_, group_pack_, group_rank_, part_,
      cur_counts_, head_, next_, gpu_map_, node_map_;
  std::vector<detail::ep::replica_entry> heap_;
  std::vector<item> items_, by_load_, multi_;
  std::vector<double> bin_load_, bin_size_, group_load_, item_size_, cur_loads_, new_loads_, saved_;
  std::vector<std::uint32_t> bin_fill_, order_, pack_items_, overlap_, node_overlap_, touched_;
  std::vector<float> group_loadf_, packf_;
  std::vector<detail::ep::eplb_sort_item> sort_scratch_;
  std::vector<gpu_entry> gpu_heap_;
  std::vector<pair_entry> pairs_;
  std::vector<std::uint8_t> gpu_used_, node_used_, taken_;
  std::vector<std::int32_t> node_count_;
  std::vector<std::uint32_t> seen_;
};

}  // namespace moepolicy
