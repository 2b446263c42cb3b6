// moepolicy/trace/tables.hpp — aggregate routing and calibration tables per layer and
// expert: what a paper's offline profiling step produces instead of a token-level trace.
//
//   expert_table        one number per (saved layer, expert): activation counts, routing
//                       weight sums, top-1 counts. Its rows stand for model layers that
//                       need not be contiguous (OLMoE's analysis saved layers 0, 7, 15).
//   loss_table          L(layer, expert, bits): the output error of an expert quantised to
//                       each bitwidth of an ascending set (the loss table of the
//                       context-aware CXL-NDP paper's bit allocation, and MC-MoE's factors).
//   coactivation_table  one E × E count matrix per layer pair (a, b): M[i][j] counts tokens
//                       routed to expert i at layer a and to expert j at layer b.
//
// All three are immutable value types validated once by their constructors (which throw
// `moepolicy::invalid_argument`) and read through noexcept accessors whose indices are
// preconditions checked by `MOEPOLICY_ASSERT`. Values are doubles in row-major vectors,
// so a row is a `std::span<const double>`. File readers live in moepolicy/io/ (for the
// JSON files of MC-MoE and OLMoE: io/tables_json.hpp). This header models no extension
// point.
#pragma once

#include <cmath>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

namespace detail {

/// The largest number of layers or experts a table accepts (as `layer_id` and
/// `expert_id` can index).
inline constexpr std::size_t max_table_extent = 65536;

/// `a * b`, or throws `invalid_argument` from `fn` when it overflows `std::size_t`.
inline std::size_t checked_product(std::string_view fn, std::size_t a, std::size_t b) {
  if (a != 0 && b > static_cast<std::size_t>(-1) / a) throw_invalid(fn, "table size overflows std::size_t");
  return a * b;
}

}  // namespace detail

/// A named table of one double per (row, expert), each row standing for one model layer.
///
/// Rows are ordered by strictly ascending layer; layers need not be contiguous (a table
/// of layers 0, 7 and 15 has three rows), and `row_of` maps a layer back to its row.
/// Values are finite; what they mean (counts, sums of gate weights) is the source's.
class expert_table {
 public:
  /// An empty table: no rows, no experts.
  expert_table() = default;

  /// Adopts `values`, row-major: `values[r * num_experts + e]` belongs to layer
  /// `layers[r]` and expert `e`.
  ///
  /// Throws: `invalid_argument` naming `expert_table::expert_table` when `num_experts` is
  /// not in [1, 65536], `values.size() != layers.size() * num_experts`, `layers` is not
  /// strictly ascending, or a value is not finite (the message gives its row and expert).
  /// Complexity: linear in `values.size()`.
  expert_table(std::string name, std::vector<layer_id> layers, std::size_t num_experts, std::vector<double> values)
      : name_(std::move(name)), layers_(std::move(layers)), num_experts_(num_experts), values_(std::move(values)) {
    constexpr std::string_view fn = "expert_table::expert_table";
    if (num_experts_ == 0 || num_experts_ > detail::max_table_extent) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts_);
    }
    const std::size_t want = detail::checked_product(fn, layers_.size(), num_experts_);
    if (values_.size() != want) {
      detail::throw_invalid(fn, "values must hold layers.size() * num_experts = " + std::to_string(want) + " entries",
                            values_.size());
    }
    for (std::size_t r = 1; r < layers_.size(); ++r) {
      if (layers_[r] <= layers_[r - 1]) {
        detail::throw_invalid(fn, "layers must be strictly ascending; layers[" + std::to_string(r) + "] follows " +
                                      std::to_string(layers_[r - 1]),
                              layers_[r]);
      }
    }
    for (std::size_t i = 0; i < values_.size(); ++i) {
      if (!std::isfinite(values_[i])) {
        detail::throw_invalid(fn, "value of row " + std::to_string(i / num_experts_) + ", expert " +
                                      std::to_string(i % num_experts_) + " must be finite",
                              values_[i]);
      }
    }
  }

  /// What the table holds, as its source names it (e.g. "expert_counts").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Rows: one per saved layer.
  [[nodiscard]] std::size_t num_rows() const noexcept { return layers_.size(); }
  /// Experts per row.
  [[nodiscard]] std::size_t num_experts() const noexcept { return num_experts_; }
  /// The model layer of every row, strictly ascending.
  [[nodiscard]] std::span<const layer_id> layers() const noexcept { return layers_; }

  /// The model layer row `r` stands for.
  /// Preconditions: `r < num_rows()`.
  [[nodiscard]] layer_id layer_of(std::size_t r) const noexcept {
    MOEPOLICY_ASSERT(r < layers_.size());
    return layers_[r];
  }

  /// The row of model layer `layer`, or nothing when the table did not save that layer.
  /// Complexity: logarithmic in `num_rows()`.
  [[nodiscard]] std::optional<std::size_t> row_of(layer_id layer) const noexcept {
    std::size_t lo = 0;
    std::size_t hi = layers_.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (layers_[mid] < layer) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo < layers_.size() && layers_[lo] == layer) return lo;
    return std::nullopt;
  }

  /// The value of expert `e` in row `r`.
  /// Preconditions: `r < num_rows()`, `e < num_experts()`.
  [[nodiscard]] double value(std::size_t r, std::size_t e) const noexcept {
    MOEPOLICY_ASSERT(r < layers_.size() && e < num_experts_);
    return values_[r * num_experts_ + e];
  }

  /// All experts' values of row `r`.
  /// Preconditions: `r < num_rows()`.
  [[nodiscard]] std::span<const double> row(std::size_t r) const noexcept {
    MOEPOLICY_ASSERT(r < layers_.size());
    return std::span<const double>(values_).subspan(r * num_experts_, num_experts_);
  }

  /// Every value, row-major.
  [[nodiscard]] std::span<const double> values() const noexcept { return values_; }

 private:
  std::string name_;
  std::vector<layer_id> layers_;
  std::size_t num_experts_ = 0;
  std::vector<double> values_;
};

/// Per-expert quantization loss L(layer, expert, b) for every layer 0..num_layers-1,
/// every expert and every bitwidth b of an ascending bit set: the input of bit
/// allocation (context-aware CXL-NDP paper, §4.2: experts of lower importance and lower
/// loss get fewer bits).
///
/// Loss usually falls as bits grow, but measured tables need not be monotone (a noisy
/// calibration can make 2 bits slightly worse than 1); the table accepts them and
/// `is_non_increasing` / `non_monotone_experts` report where.
class loss_table {
 public:
  /// An empty table: no layers, experts or bits.
  loss_table() = default;

  /// Adopts `losses` laid out `[layer][expert][bit index]`:
  /// `losses[(layer * num_experts + expert) * bits.size() + i]` is the loss at `bits[i]`.
  ///
  /// Throws: `invalid_argument` naming `loss_table::loss_table` when `num_layers` or
  /// `num_experts` is not in [1, 65536], `bits` is empty or not strictly ascending,
  /// `losses` has the wrong size, or a loss is negative or not finite (the message gives
  /// its layer, expert and bits).
  /// Complexity: linear in `losses.size()`.
  loss_table(std::size_t num_layers, std::size_t num_experts, std::vector<bitwidth> bits, std::vector<double> losses)
      : num_layers_(num_layers), num_experts_(num_experts), bits_(std::move(bits)), losses_(std::move(losses)) {
    constexpr std::string_view fn = "loss_table::loss_table";
    if (num_layers_ == 0 || num_layers_ > detail::max_table_extent) {
      detail::throw_invalid(fn, "num_layers must be in [1, 65536]", num_layers_);
    }
    if (num_experts_ == 0 || num_experts_ > detail::max_table_extent) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts_);
    }
    if (bits_.empty()) detail::throw_invalid(fn, "bits must not be empty");
    for (std::size_t i = 1; i < bits_.size(); ++i) {
      if (bits_[i] <= bits_[i - 1]) {
        detail::throw_invalid(fn, "bits must be strictly ascending; bits[" + std::to_string(i) + "] follows " +
                                      std::to_string(bits_[i - 1].bits()),
                              bits_[i].bits());
      }
    }
    const std::size_t want =
        detail::checked_product(fn, detail::checked_product(fn, num_layers_, num_experts_), bits_.size());
    if (losses_.size() != want) {
      detail::throw_invalid(fn, "losses must hold num_layers * num_experts * bits.size() = " + std::to_string(want) +
                                    " entries",
                            losses_.size());
    }
    for (std::size_t i = 0; i < losses_.size(); ++i) {
      if (!std::isfinite(losses_[i]) || losses_[i] < 0.0) {
        const std::size_t cell = i / bits_.size();
        detail::throw_invalid(fn, "loss of layer " + std::to_string(cell / num_experts_) + ", expert " +
                                      std::to_string(cell % num_experts_) + " at " +
                                      std::to_string(bits_[i % bits_.size()].bits()) +
                                      " bits must be finite and >= 0",
                              losses_[i]);
      }
    }
  }

  /// MoE layers, numbered 0..num_layers()-1.
  [[nodiscard]] std::size_t num_layers() const noexcept { return num_layers_; }
  /// Experts per layer.
  [[nodiscard]] std::size_t num_experts() const noexcept { return num_experts_; }
  /// Bitwidths of the table, strictly ascending.
  [[nodiscard]] std::span<const bitwidth> bits() const noexcept { return bits_; }
  /// Number of bitwidths.
  [[nodiscard]] std::size_t num_bits() const noexcept { return bits_.size(); }

  /// The index of `b` in `bits()`, or nothing when the table has no column for it.
  [[nodiscard]] std::optional<std::size_t> bit_index(bitwidth b) const noexcept {
    for (std::size_t i = 0; i < bits_.size(); ++i) {
      if (bits_[i] == b) return i;
    }
    return std::nullopt;
  }

  /// The loss of expert `e` of layer `l` at `bits()[i]`.
  /// Preconditions: `l < num_layers()`, `e < num_experts()`, `i < num_bits()`.
  [[nodiscard]] double loss(std::size_t l, std::size_t e, std::size_t i) const noexcept {
    MOEPOLICY_ASSERT(l < num_layers_ && e < num_experts_ && i < bits_.size());
    return losses_[(l * num_experts_ + e) * bits_.size() + i];
  }

  /// The losses of expert `e` of layer `l`, one per entry of `bits()`.
  /// Preconditions: `l < num_layers()`, `e < num_experts()`.
  [[nodiscard]] std::span<const double> losses_of(std::size_t l, std::size_t e) const noexcept {
    MOEPOLICY_ASSERT(l < num_layers_ && e < num_experts_);
    return std::span<const double>(losses_).subspan((l * num_experts_ + e) * bits_.size(), bits_.size());
  }

  /// The loss of expert `e` of layer `l` at bitwidth `b`.
  /// Preconditions: `l < num_layers()`, `e < num_experts()`.
  /// Throws: `invalid_argument` naming `loss_table::loss_at` and the bits when `b` is
  /// not one of `bits()`.
  [[nodiscard]] double loss_at(std::size_t l, std::size_t e, bitwidth b) const {
    const auto i = bit_index(b);
    if (!i) detail::throw_invalid("loss_table::loss_at", "bitwidth is not in the table's bit set", b.bits());
    return loss(l, e, *i);
  }

  /// Whether the loss of expert `e` of layer `l` never grows from one bitwidth to the
  /// next (equal neighbours count as non-increasing).
  /// Preconditions: `l < num_layers()`, `e < num_experts()`.
  [[nodiscard]] bool is_non_increasing(std::size_t l, std::size_t e) const noexcept {
    const auto row = losses_of(l, e);
    for (std::size_t i = 1; i < row.size(); ++i) {
      if (row[i] > row[i - 1]) return false;
    }
    return true;
  }

  /// The experts whose loss grows somewhere along `bits()`, in (layer, expert) order.
  /// Complexity: linear in the table size.
  [[nodiscard]] std::vector<expert_key> non_monotone_experts() const {
    std::vector<expert_key> out;
    for (std::size_t l = 0; l < num_layers_; ++l) {
      for (std::size_t e = 0; e < num_experts_; ++e) {
        if (!is_non_increasing(l, e)) out.push_back({static_cast<layer_id>(l), static_cast<expert_id>(e)});
      }
    }
    return out;
  }

  /// Every loss, laid out `[layer][expert][bit index]`.
  [[nodiscard]] std::span<const double> values() const noexcept { return losses_; }

 private:
  std::size_t num_layers_ = 0;
  std::size_t num_experts_ = 0;
  std::vector<bitwidth> bits_;
  std::vector<double> losses_;
};

/// Two layers whose routing a cross-layer table relates: `from` first, then `to`.
struct layer_pair {
  layer_id from = 0;
  layer_id to = 0;

  friend constexpr auto operator<=>(const layer_pair&, const layer_pair&) = default;
};

/// A named set of E × E count matrices, one per layer pair: `count(p, i, j)` counts the
/// tokens routed to expert `i` at layer `pair(p).from` and to expert `j` at layer
/// `pair(p).to` (how the tokens are paired, e.g. by rank position, is the source's).
class coactivation_table {
 public:
  /// An empty table: no pairs, no experts.
  coactivation_table() = default;

  /// Adopts `counts` laid out `[pair][i][j]`:
  /// `counts[(p * num_experts + i) * num_experts + j]`.
  ///
  /// Throws: `invalid_argument` naming `coactivation_table::coactivation_table` when
  /// `num_experts` is not in [1, 65536], `counts` has the wrong size, a pair repeats an
  /// earlier one, or a count is negative or not finite (the message gives its pair and
  /// cell).
  /// Complexity: linear in `counts.size()` plus quadratic in `pairs.size()`.
  coactivation_table(std::string name, std::vector<layer_pair> pairs, std::size_t num_experts,
                     std::vector<double> counts)
      : name_(std::move(name)), pairs_(std::move(pairs)), num_experts_(num_experts), counts_(std::move(counts)) {
    constexpr std::string_view fn = "coactivation_table::coactivation_table";
    if (num_experts_ == 0 || num_experts_ > detail::max_table_extent) {
      detail::throw_invalid(fn, "num_experts must be in [1, 65536]", num_experts_);
    }
    const std::size_t cells = detail::checked_product(fn, num_experts_, num_experts_);
    const std::size_t want = detail::checked_product(fn, pairs_.size(), cells);
    if (counts_.size() != want) {
      detail::throw_invalid(fn, "counts must hold pairs.size() * num_experts^2 = " + std::to_string(want) + " entries",
                            counts_.size());
    }
    for (std::size_t p = 0; p < pairs_.size(); ++p) {
      for (std::size_t q = 0; q < p; ++q) {
        if (pairs_[q] == pairs_[p]) {
          detail::throw_invalid(fn, "pairs[" + std::to_string(p) + "] repeats pairs[" + std::to_string(q) + "] (" +
                                        std::to_string(pairs_[p].from) + ", " + std::to_string(pairs_[p].to) + ")");
        }
      }
    }
    for (std::size_t i = 0; i < counts_.size(); ++i) {
      if (!std::isfinite(counts_[i]) || counts_[i] < 0.0) {
        const std::size_t p = i / cells;
        const std::size_t cell = i % cells;
        detail::throw_invalid(fn, "count of pair " + std::to_string(p) + " at [" + std::to_string(cell / num_experts_) +
                                      "][" + std::to_string(cell % num_experts_) + "] must be finite and >= 0",
                              counts_[i]);
      }
    }
  }

  /// What the table holds, as its source names it (e.g. "expert_counts_crosslayer").
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  /// Layer pairs: one matrix each.
  [[nodiscard]] std::size_t num_pairs() const noexcept { return pairs_.size(); }
  /// Experts per layer: each matrix is num_experts × num_experts.
  [[nodiscard]] std::size_t num_experts() const noexcept { return num_experts_; }
  /// All layer pairs in matrix order.
  [[nodiscard]] std::span<const layer_pair> pairs() const noexcept { return pairs_; }

  /// The layers of matrix `p`.
  /// Preconditions: `p < num_pairs()`.
  [[nodiscard]] layer_pair pair(std::size_t p) const noexcept {
    MOEPOLICY_ASSERT(p < pairs_.size());
    return pairs_[p];
  }

  /// The matrix of layers (`from`, `to`), or nothing when the table has none.
  [[nodiscard]] std::optional<std::size_t> pair_of(layer_id from, layer_id to) const noexcept {
    for (std::size_t p = 0; p < pairs_.size(); ++p) {
      if (pairs_[p] == layer_pair{from, to}) return p;
    }
    return std::nullopt;
  }

  /// M_p[i][j].
  /// Preconditions: `p < num_pairs()`, `i < num_experts()`, `j < num_experts()`.
  [[nodiscard]] double count(std::size_t p, std::size_t i, std::size_t j) const noexcept {
    MOEPOLICY_ASSERT(p < pairs_.size() && i < num_experts_ && j < num_experts_);
    return counts_[(p * num_experts_ + i) * num_experts_ + j];
  }

  /// Row `i` of matrix `p`: the counts of `from`-layer expert `i` against every
  /// `to`-layer expert.
  /// Preconditions: `p < num_pairs()`, `i < num_experts()`.
  [[nodiscard]] std::span<const double> row(std::size_t p, std::size_t i) const noexcept {
    MOEPOLICY_ASSERT(p < pairs_.size() && i < num_experts_);
    return std::span<const double>(counts_).subspan((p * num_experts_ + i) * num_experts_, num_experts_);
  }

  /// Matrix `p`, row-major.
  /// Preconditions: `p < num_pairs()`.
  [[nodiscard]] std::span<const double> matrix(std::size_t p) const noexcept {
    MOEPOLICY_ASSERT(p < pairs_.size());
    return std::span<const double>(counts_).subspan(p * num_experts_ * num_experts_, num_experts_ * num_experts_);
  }

  /// Every count, laid out `[pair][i][j]`.
  [[nodiscard]] std::span<const double> values() const noexcept { return counts_; }

 private:
  std::string name_;
  std::vector<layer_pair> pairs_;
  std::size_t num_experts_ = 0;
  std::vector<double> counts_;
};

}  // namespace moepolicy
