// moepolicy/place/prefill_placement.hpp — prefill-guided expert placement with
// mixed-precision NDP experts (Context-Aware GPU-NDP §4.1–4.2, Alg. 1 lines 9–22).
//
// After a request's prefill, each layer's experts are ranked by importance
// S = α P̃ + (1 − α) W̃ (score/importance.hpp); the top K go to the GPU at full precision,
// the rest stay on the CXL-NDP device, where prefix split (quant/prefix_split.hpp) gives
// each a bitwidth from the loss table under the layer's average budget b̄. The plan is
// fixed for the request's decode: one migration per sequence. `diff` turns two plans
// into the list of experts that move and the bytes that cross the link.
//
// Reading of the paper, documented: the NDP device caches every expert's replicas at
// every candidate bitwidth (§4.2), so demoting an expert from the GPU or changing its NDP
// bitwidth moves no bytes; only experts newly placed on the GPU are copied, at the GPU's
// precision. Without the bitwidth selector (`select_bitwidths = false`) every NDP expert
// runs at `uniform_bits`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/quant/bit_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/score/importance.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy {

/// Where an expert lives in the GPU + CXL-NDP system.
enum class tier : std::uint8_t { gpu, ndp };

/// An expert's tier and the bitwidth it runs at there.
struct residence {
  tier where = tier::ndp;
  bitwidth bits = fp16;
  friend constexpr bool operator==(const residence&, const residence&) = default;
};

/// Configuration of `place_from_prefill`.
struct prefill_placement_config {
  /// K: experts per layer on the GPU (the paper: 4 of Mixtral-8x7B's 8, 2 of 8x22B's 8).
  std::size_t gpu_experts_per_layer = 4;
  /// α and the normalisation of the importance score (the paper: α = 0.5).
  importance_config importance{};
  /// Whether NDP bitwidths come from prefix split (true) or are all `uniform_bits`.
  bool select_bitwidths = true;
  /// b̄: the average NDP bitwidth per layer for prefix split.
  double ndp_average_bits = 3.0;
  /// Bitwidth of every NDP expert when `select_bitwidths` is false.
  bitwidth uniform_bits = bitwidth{3};
  /// Budget form and rounding for prefix split.
  bit_allocation_config allocation{};
  /// Precision of GPU-resident experts.
  bitwidth gpu_bits = fp16;
};

/// A placement of every expert of every layer.
class placement_plan {
 public:
  placement_plan() = default;
  placement_plan(std::size_t num_layers, std::size_t num_experts)
      : layers_(num_layers), experts_(num_experts), cells_(num_layers * num_experts),
        status_(num_layers, allocation_status::ok) {}

  [[nodiscard]] std::size_t num_layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return experts_; }

  /// Where expert `e` of layer `l` lives and at what precision.
  [[nodiscard]] const residence& at(std::size_t l, std::size_t e) const noexcept {
    MOEPOLICY_ASSERT(l < layers_ && e < experts_);
    return cells_[l * experts_ + e];
  }
  [[nodiscard]] residence& at(std::size_t l, std::size_t e) noexcept {
    MOEPOLICY_ASSERT(l < layers_ && e < experts_);
    return cells_[l * experts_ + e];
  }
  /// The prefix-split status of layer `l` (`ok` when bitwidths were not selected).
  [[nodiscard]] allocation_status status(std::size_t l) const noexcept { return status_[l]; }
  void set_status(std::size_t l, allocation_status s) noexcept { status_[l] = s; }

  /// Experts of layer `l` on `t`, ascending.
  [[nodiscard]] std::vector<expert_id> experts_on(std::size_t l, tier t) const {
    std::vector<expert_id> out;
    for (std::size_t e = 0; e < experts_; ++e) {
      if (at(l, e).where == t) out.push_back(static_cast<expert_id>(e));
    }
    return out;
  }

 private:
  std::size_t layers_ = 0, experts_ = 0;
  std::vector<residence> cells_;
  std::vector<allocation_status> status_;
};

/// Plans a request's placement from its prefill statistics (Alg. 1 lines 13–22).
///
/// `counts` and `weight_sums` are the prefill's P and W (layers × experts); `losses`
/// holds L(l, e, b) for the candidate NDP bitwidths (its bit set), and may be null when
/// `select_bitwidths` is false.
///
/// Throws: `invalid_argument` naming `place_from_prefill` when the shapes disagree, K
/// exceeds the experts, α is out of [0, 1], a count is negative or not finite, or
/// bitwidths are to be selected without a loss table of matching shape.
/// Complexity: per layer O(E log E) plus prefix split's O(E_NDP^{m−2}).
[[nodiscard]] inline placement_plan place_from_prefill(const Eigen::Ref<const Eigen::MatrixXd>& counts,
                                                       const Eigen::Ref<const Eigen::MatrixXd>& weight_sums,
                                                       const loss_table* losses,
                                                       const prefill_placement_config& config = {}) {
  constexpr const char* fn = "place_from_prefill";
  if (counts.rows() != weight_sums.rows() || counts.cols() != weight_sums.cols()) {
    detail::throw_invalid(fn, "counts and weight_sums must have the same shape, weight_sums rows", weight_sums.rows());
  }
  const auto L = static_cast<std::size_t>(counts.rows());
  const auto E = static_cast<std::size_t>(counts.cols());
  if (config.gpu_experts_per_layer > E) {
    detail::throw_invalid(fn, "gpu_experts_per_layer must be <= the experts per layer " + std::to_string(E),
                          config.gpu_experts_per_layer);
  }
  check_importance_config(fn, config.importance);
  for (Eigen::Index l = 0; l < counts.rows(); ++l) {
    for (Eigen::Index e = 0; e < counts.cols(); ++e) {
      for (double v : {counts(l, e), weight_sums(l, e)}) {
        if (!(v >= 0.0) || !std::isfinite(v)) detail::throw_invalid(fn, "counts and weight sums must be finite and >= 0", v);
      }
    }
  }
  if (config.select_bitwidths) {
    if (losses == nullptr) detail::throw_invalid(fn, "selecting bitwidths needs a loss table");
    if (losses->num_layers() != L || losses->num_experts() != E) {
      detail::throw_invalid(fn, "the loss table must cover " + std::to_string(L) + " layers x " + std::to_string(E) +
                                    " experts, its layers",
                            losses->num_layers());
    }
  }

  placement_plan plan(L, E);
  std::vector<double> score(E), P(E), W(E);
  std::vector<expert_id> order(E);
  for (std::size_t l = 0; l < L; ++l) {
    for (std::size_t e = 0; e < E; ++e) {
      P[e] = counts(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e));
      W[e] = weight_sums(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e));
    }
    importance_scores(P, W, score, config.importance);
    rank_experts(score, order);
    const std::size_t K = config.gpu_experts_per_layer;
    for (std::size_t r = 0; r < K; ++r) plan.at(l, order[r]) = {tier::gpu, config.gpu_bits};
    const std::span<const expert_id> ndp = std::span<const expert_id>(order).subspan(K);
    if (!config.select_bitwidths) {
      for (expert_id e : ndp) plan.at(l, e) = {tier::ndp, config.uniform_bits};
      continue;
    }
    const auto bits = losses->bits();
    Eigen::MatrixXd layer_loss(static_cast<Eigen::Index>(ndp.size()), static_cast<Eigen::Index>(bits.size()));
    for (std::size_t i = 0; i < ndp.size(); ++i) {
      const auto row = losses->losses_of(l, ndp[i]);
      for (std::size_t j = 0; j < bits.size(); ++j) {
        layer_loss(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = row[j];
      }
    }
    const bit_allocation a = prefix_split(bits, layer_loss, config.ndp_average_bits, config.allocation);
    plan.set_status(l, a.status);
    if (a.status == allocation_status::infeasible) {
      // No split meets the budget exactly: the experts stay at the lowest bitwidth and
      // the status says so.
      for (expert_id e : ndp) plan.at(l, e) = {tier::ndp, bits.front()};
      continue;
    }
    for (std::size_t i = 0; i < ndp.size(); ++i) plan.at(l, ndp[i]) = {tier::ndp, bits[a.level_of[i]]};
  }
  return plan;
}

/// One expert that moves between two plans.
struct migration {
  expert_key key;
  residence from;
  residence to;
  /// Bytes copied over the link: the expert at `to.bits` when it lands on the GPU, else 0.
  bytes moved_bytes = 0;
};

/// The experts whose residence differs between `from` and `to`, in (layer, expert) order,
/// with the bytes each moves (see the header comment); `bytes_of(key, bits)` gives an
/// expert's footprint on the GPU, e.g. a `DeviceCost` model's `footprint_bytes`.
///
/// Throws: `invalid_argument` naming `diff` when the plans have different shapes.
template <class BytesOf>
  requires std::is_invocable_r_v<bytes, BytesOf, expert_key, bitwidth>
[[nodiscard]] std::vector<migration> diff(const placement_plan& from, const placement_plan& to, BytesOf&& bytes_of) {
  if (from.num_layers() != to.num_layers() || from.num_experts() != to.num_experts()) {
    detail::throw_invalid("diff", "plans must have the same shape, layers " + std::to_string(from.num_layers()) + " vs",
                          to.num_layers());
  }
  std::vector<migration> out;
  for (std::size_t l = 0; l < from.num_layers(); ++l) {
    for (std::size_t e = 0; e < from.num_experts(); ++e) {
      const residence& a = from.at(l, e);
      const residence& b = to.at(l, e);
      if (a == b) continue;
      const expert_key key{static_cast<layer_id>(l), static_cast<expert_id>(e)};
      const bytes moved = b.where == tier::gpu ? static_cast<bytes>(bytes_of(key, b.bits)) : 0;
      out.push_back({key, a, b, moved});
    }
  }
  return out;
}

/// `diff` with footprints from a model shape and quantisation format.
[[nodiscard]] inline std::vector<migration> diff(const placement_plan& from, const placement_plan& to,
                                                 const model_shape& shape, const quant_format& format = {}) {
  return diff(from, to, [&](expert_key, bitwidth b) { return expert_bytes(shape, b, format); });
}

/// Total bytes of a migration list.
[[nodiscard]] inline bytes moved_bytes(std::span<const migration> list) noexcept {
  bytes total = 0;
  for (const auto& m : list) total += m.moved_bytes;
  return total;
}

}  // namespace moepolicy
