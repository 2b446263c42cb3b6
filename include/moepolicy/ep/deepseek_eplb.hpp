// moepolicy/ep/deepseek_eplb.hpp — DeepSeek's Expert Parallelism Load Balancer (EPLB,
// github.com/deepseek-ai/EPLB, `eplb.py`, `rebalance_experts`) reproduced as the reference
// baseline of the EP placement solvers (ep/rebalancer.hpp).
//
// EPLB's two policies (its README, "The Algorithm"):
//   - hierarchical, when the nodes divide the expert groups: (1) pack the groups to nodes,
//     K/N per node, balancing the nodes' loads; (2) within each node, replicate its E/N
//     experts into R/N physical experts, each extra replica going to the expert with the
//     largest load per replica; (3) pack each node's physical experts to its G/N GPUs,
//     R/G per GPU;
//   - global, otherwise: the same with one group and one node.
// Its packing ("balanced_packing") takes the items by load, largest first, each to the
// lightest pack that still has room; with one item per pack it is the identity.
//
// Reproduced to the output: loads are converted to float32 and every sum, quotient and
// comparison is made in float32 as the reference does on the CPU (`weight.float()`); the
// sort is the one PyTorch's CPU kernel makes (std::sort of (value, index) pairs comparing
// values, so ties fall where introsort puts them: in index order up to 16 items), and ties
// in "largest" and "lightest" take the first, as `torch.max` and Python's `min` do. So the
// outputs equal the reference's whenever its sums are exact in float32 (integer token
// counts below 2^24 per group): the tests check its README example array for array, and
// this code matched PyTorch 1.13 (Debian) running `eplb.py` on 600 random instances with
// ties (1 to 8 GPUs, 1 to 4 nodes, 1 to 8 groups).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/ep/problem.hpp"

namespace moepolicy {

namespace detail::ep {

/// A load and its index, sorted together as the reference sorts them.
struct eplb_sort_item {
  float value;
  std::uint32_t index;
};

/// EPLB's `balanced_packing` for one row: `n` items of `weight` into `packs` packs of n/packs
/// items each. Writes the pack and the rank in the pack of every item. `order` and the
/// pack accumulators are scratch of size >= n and >= packs.
inline void eplb_balanced_packing(std::span<const float> weight, std::size_t packs, std::span<std::int32_t> pack,
                                  std::span<std::int32_t> rank, std::span<eplb_sort_item> order,
                                  std::span<float> pack_weight, std::span<std::uint32_t> pack_items) noexcept {
  const std::size_t n = weight.size();
  const std::size_t per = n / packs;
  if (per == 1) {
    for (std::size_t i = 0; i < n; ++i) pack[i] = static_cast<std::int32_t>(i), rank[i] = 0;
    return;
  }
  // The reference sorts (value, index) pairs with std::sort comparing values only, so its
  // order of ties is introsort's: the same call on the same sequence reproduces it.
  for (std::size_t i = 0; i < n; ++i) order[i] = {weight[i], static_cast<std::uint32_t>(i)};
  std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n),
            [](const eplb_sort_item& a, const eplb_sort_item& b) { return a.value > b.value; });
  std::fill(pack_weight.begin(), pack_weight.begin() + static_cast<std::ptrdiff_t>(packs), 0.0f);
  std::fill(pack_items.begin(), pack_items.begin() + static_cast<std::ptrdiff_t>(packs), 0u);
  for (std::size_t k = 0; k < n; ++k) {
    const std::uint32_t item = order[k].index;
    std::size_t best = packs;
    for (std::size_t j = 0; j < packs; ++j) {
      if (pack_items[j] >= per) continue;
      if (best == packs || pack_weight[j] < pack_weight[best]) best = j;
    }
    pack[item] = static_cast<std::int32_t>(best);
    rank[item] = static_cast<std::int32_t>(pack_items[best]);
    pack_weight[best] += weight[item];
    ++pack_items[best];
  }
}

}  // namespace detail::ep

/// DeepSeek EPLB, one layer at a time, with its workspace preallocated.
class deepseek_eplb {
 public:
  /// Throws: `invalid_argument` naming `deepseek_eplb` when the cluster does not fit
  /// `experts` logical experts (see `ep_cluster`).
  deepseek_eplb(std::size_t experts, const ep_cluster& cluster) : cluster_(cluster), experts_(experts) {
    detail::ep::check_cluster("deepseek_eplb", experts, cluster);
    groups_ = cluster.hierarchical() ? cluster.groups : 1;
    nodes_ = cluster.hierarchical() ? cluster.nodes : 1;
    const std::size_t n = std::max<std::size_t>(experts, cluster.replicas);
    w_.resize(experts);
    group_w_.resize(groups_);
    group_pack_.resize(groups_);
    group_rank_.resize(groups_);
    log2mlog_.resize(experts);
    mlog2log_.resize(experts);
    node_w_.resize(experts / nodes_);
    cnt_.resize(experts / nodes_);
    phy2mlog_.resize(cluster.replicas / nodes_);
    phyrank_.resize(cluster.replicas / nodes_);
    phy_w_.resize(cluster.replicas / nodes_);
    pack_.resize(n);
    rank_.resize(n);
    pphy2phy_.resize(cluster.replicas / nodes_);
    order_.resize(n);
    pack_weight_.resize(std::max<std::size_t>(cluster.gpus, groups_));
    pack_items_.resize(std::max<std::size_t>(cluster.gpus, groups_));
  }

  [[nodiscard]] const ep_cluster& cluster() const noexcept { return cluster_; }
  /// Whether the hierarchical policy is in force (else the global one).
  [[nodiscard]] bool hierarchical() const noexcept { return cluster_.hierarchical(); }

  /// Places one layer: writes the logical expert and the replica rank of every slot.
  ///
  /// Preconditions: `loads.size() == experts`, loads finite and >= 0,
  /// `slots.size() == rank.size() == replicas`. Complexity: O(E log E + (R − E)·E/N +
  /// R·G/N); no allocation.
  void solve_layer(std::span<const double> loads, std::span<std::int32_t> slots, std::span<std::int32_t> rank) noexcept {
    const std::size_t e_all = experts_;
    const std::size_t group_size = e_all / groups_;
    const std::size_t groups_per_node = groups_ / nodes_;
    const std::size_t epn = e_all / nodes_;
    const std::size_t rpn = cluster_.replicas / nodes_;
    const std::size_t gpn = cluster_.gpus / nodes_;
    const std::size_t per_gpu = cluster_.replicas / cluster_.gpus;
    for (std::size_t e = 0; e < e_all; ++e) w_[e] = static_cast<float>(loads[e]);

    // Step 1: groups to nodes.
    for (std::size_t k = 0; k < groups_; ++k) {
      float s = 0.0f;
      for (std::size_t j = 0; j < group_size; ++j) s += w_[k * group_size + j];
      group_w_[k] = s;
    }
    detail::ep::eplb_balanced_packing(group_w_, nodes_, group_pack_, group_rank_, order_, pack_weight_, pack_items_);
    for (std::size_t e = 0; e < e_all; ++e) {
      const std::size_t k = e / group_size;
      const auto mlog = (static_cast<std::size_t>(group_pack_[k]) * groups_per_node +
                         static_cast<std::size_t>(group_rank_[k])) * group_size + e % group_size;
      log2mlog_[e] = static_cast<std::int32_t>(mlog);
      mlog2log_[mlog] = static_cast<std::int32_t>(e);
    }

    for (std::size_t node = 0; node < nodes_; ++node) {
      // Step 2: replicate within the node.
      for (std::size_t i = 0; i < epn; ++i) {
        node_w_[i] = w_[static_cast<std::size_t>(mlog2log_[node * epn + i])];
        cnt_[i] = 1;
        phy2mlog_[i] = static_cast<std::int32_t>(i);
        phyrank_[i] = 0;
      }
      for (std::size_t p = epn; p < rpn; ++p) {
        std::size_t best = 0;
        float best_v = node_w_[0] / static_cast<float>(cnt_[0]);
        for (std::size_t i = 1; i < epn; ++i) {
          const float v = node_w_[i] / static_cast<float>(cnt_[i]);
          if (v > best_v) best_v = v, best = i;
        }
        phy2mlog_[p] = static_cast<std::int32_t>(best);
        phyrank_[p] = cnt_[best]++;
      }
      // Step 3: physical experts to the node's GPUs.
      for (std::size_t p = 0; p < rpn; ++p) {
        const auto m = static_cast<std::size_t>(phy2mlog_[p]);
        phy_w_[p] = node_w_[m] / static_cast<float>(cnt_[m]);
      }
      detail::ep::eplb_balanced_packing(std::span<const float>(phy_w_.data(), rpn), gpn, pack_, rank_, order_,
                                        pack_weight_, pack_items_);
      for (std::size_t p = 0; p < rpn; ++p) {
        pphy2phy_[static_cast<std::size_t>(pack_[p]) * per_gpu + static_cast<std::size_t>(rank_[p])] =
            static_cast<std::int32_t>(p);
      }
      for (std::size_t pp = 0; pp < rpn; ++pp) {
        const auto p = static_cast<std::size_t>(pphy2phy_[pp]);
        const auto mlog = node * epn + static_cast<std::size_t>(phy2mlog_[p]);
        slots[node * rpn + pp] = mlog2log_[mlog];
        rank[node * rpn + pp] = phyrank_[p];
      }
    }
  }

  /// Places every layer of `loads` into `out` (resized when its shape differs).
  ///
  /// Throws: `invalid_argument` naming `deepseek_eplb::solve` when the load matrix has
  /// another number of experts, or a load is negative or not finite.
  void solve(const ep_load_view& loads, ep_placement& out) {
    constexpr std::string_view fn = "deepseek_eplb::solve";
    if (loads.experts() != experts_) {
      detail::throw_invalid(fn, "load matrix experts must equal the solver's " + std::to_string(experts_),
                            loads.experts());
    }
    detail::ep::check_loads(fn, loads);
    if (out.layers() != loads.layers() || out.experts() != experts_ || out.replicas() != cluster_.replicas) {
      out = ep_placement(loads.layers(), experts_, cluster_.replicas);
    }
    for (std::size_t l = 0; l < loads.layers(); ++l) {
      solve_layer(loads.row(l), out.physical_to_logical_row(l), out.replica_rank_row(l));
    }
    out.finish();
  }

 private:
  ep_cluster cluster_;
  std::size_t experts_;
  std::size_t groups_ = 1;
  std::size_t nodes_ = 1;
  std::vector<float> w_, group_w_, node_w_, phy_w_, pack_weight_;
  std::vector<std::int32_t> group_pack_, group_rank_, log2mlog_, mlog2log_, cnt_, phy2mlog_, phyrank_, pack_, rank_,
      pphy2phy_;
  std::vector<detail::ep::eplb_sort_item> order_;
  std::vector<std::uint32_t> pack_items_;
};

/// DeepSeek EPLB's `rebalance_experts(weight, replicas, groups, nodes, gpus)` on a whole
/// load matrix.
///
/// Throws: `invalid_argument` as `deepseek_eplb` and `deepseek_eplb::solve`.
[[nodiscard]] inline ep_placement deepseek_rebalance(const ep_load_view& loads, const ep_cluster& cluster) {
  deepseek_eplb solver(loads.experts(), cluster);
  ep_placement out(loads.layers(), loads.experts(), cluster.replicas);
  solver.solve(loads, out);
  return out;
}

}  // namespace moepolicy
