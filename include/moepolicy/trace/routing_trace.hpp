// moepolicy/trace/routing_trace.hpp — the in-memory routing trace and its views.
//
// A trace records, for every token of every forward pass of every request and every
// MoE layer, the router's top-k expert ids and gate weights (and optionally the full
// router scores). It is stored column by column and sorted by (request, step, layer,
// position), so that the rows a per-layer policy consumes in one call — one layer of one
// forward pass, a *batch* — are contiguous, and their ids and weights are spans.
//
// Vocabulary:
//   request  one prompt and its generation (a trace file may hold several);
//   step     a forward pass within a request, numbered from 0; a prefill pass covers
//            many tokens, a decode step one token per sequence;
//   position the token's index in its sequence (prompt then generated tokens) where the
//            source records it, otherwise the index the importer documents;
//   batch    the rows of one (request, step, layer).
//
// Build a trace with `routing_trace_builder`, which validates every row; importers
// (moepolicy/io/) and the canonical reader (trace/canonical.hpp) produce one.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// The phase of a forward pass.
enum class phase : std::uint8_t { prefill = 0, decode = 1 };

/// "prefill" or "decode".
[[nodiscard]] constexpr std::string_view to_string(phase p) noexcept {
  return p == phase::prefill ? "prefill" : "decode";
}

/// What a trace is of.
struct trace_info {
  /// Model identifier as the source gives it.
  std::string model;
  /// Where the trace came from (format and origin), free text.
  std::string source;
  /// MoE layers of the model; every row's layer is below it.
  std::uint32_t num_layers = 0;
  /// Routed experts per layer; every expert id is below it.
  std::uint32_t num_experts = 0;
  /// Experts per token; every row has exactly this many ids and weights.
  std::uint32_t top_k = 0;
  /// Whether every row also carries all `num_experts` router scores.
  bool has_scores = false;
};

/// One request of a trace and where its rows and steps lie.
struct request_ref {
  std::string name;
  std::uint32_t first_step = 0;
  std::uint32_t num_steps = 0;
  std::uint32_t first_row = 0;
  std::uint32_t num_rows = 0;
};

/// One forward pass of one request: a contiguous run of batches (one per layer present).
struct step_ref {
  std::uint32_t request = 0;
  std::uint32_t step = 0;
  phase kind = phase::prefill;
  std::uint32_t first_batch = 0;
  std::uint32_t num_batches = 0;
};

/// One layer of one forward pass: a contiguous run of rows.
struct batch_ref {
  std::uint32_t request = 0;
  std::uint32_t step = 0;
  layer_id layer = 0;
  phase kind = phase::prefill;
  std::uint32_t first_row = 0;
  std::uint32_t num_rows = 0;
};

/// The data of one batch, as a per-layer policy takes it: `num_rows × top_k` ids and
/// weights in row-major order, and `num_rows × num_experts` scores when present.
struct batch_view {
  batch_ref ref;
  std::uint32_t top_k = 0;
  std::span<const std::uint32_t> positions;
  std::span<const expert_id> experts;
  std::span<const float> weights;
  std::span<const float> scores;

  /// Tokens in the batch.
  [[nodiscard]] std::size_t tokens() const noexcept { return ref.num_rows; }
  /// Ids of the batch's `i`-th token.
  [[nodiscard]] std::span<const expert_id> experts_of(std::size_t i) const noexcept {
    return experts.subspan(i * top_k, top_k);
  }
  /// Gate weights of the batch's `i`-th token.
  [[nodiscard]] std::span<const float> weights_of(std::size_t i) const noexcept {
    return weights.subspan(i * top_k, top_k);
  }
};

namespace detail {

/// Where `batch_list` reads a trace's batches: the row columns a `batch_ref` is made of and
/// each batch's first row (`start`, one more entry than batches, the last the rows), or
/// none when every batch is one row (batch i is row i).
struct batch_source {
  const std::uint32_t* request = nullptr;
  const std::uint32_t* step = nullptr;
  const layer_id* layer = nullptr;
  const phase* kind = nullptr;
  const std::uint32_t* start = nullptr;

  [[nodiscard]] batch_ref at(std::size_t i) const noexcept {
    const auto first = start != nullptr ? start[i] : static_cast<std::uint32_t>(i);
    const auto end = start != nullptr ? start[i + 1] : static_cast<std::uint32_t>(i + 1);
    return batch_ref{request[first], step[first], layer[first], kind[first], first, end - first};
  }
};

}  // namespace detail

/// A run of a trace's batches (all of them, or one step's), in (request, step, layer)
/// order: a random-access range of `batch_ref` values, each made from the trace's columns
/// when it is read, so that a trace holds 4 bytes per batch for them (none when every
/// batch is one row, as in decode traces) rather than a `batch_ref` each. Valid while the
/// trace it came from lives (moving the trace keeps it valid, as a span of a column).
class batch_list {
 public:
  class iterator {
   public:
    // Random access with elements made on access (a value, not a reference), as
    // `std::vector<bool>`'s iterators: read-only algorithms and `std::prev`/`std::advance`
    // work as on a span.
    using iterator_category = std::random_access_iterator_tag;
    using iterator_concept = std::random_access_iterator_tag;
    using value_type = batch_ref;
    using difference_type = std::ptrdiff_t;
    using reference = batch_ref;
    /// What `->` gives: the element, held.
    struct pointer {
      batch_ref value;
      [[nodiscard]] const batch_ref* operator->() const noexcept { return &value; }
    };

    iterator() = default;
    iterator(const detail::batch_source& src, std::size_t i) noexcept : src_(src), i_(i) {}

    [[nodiscard]] batch_ref operator*() const noexcept { return src_.at(i_); }
    [[nodiscard]] pointer operator->() const noexcept { return {src_.at(i_)}; }
    [[nodiscard]] batch_ref operator[](difference_type n) const noexcept {
      return src_.at(static_cast<std::size_t>(static_cast<difference_type>(i_) + n));
    }
    iterator& operator++() noexcept { return ++i_, *this; }
    iterator operator++(int) noexcept { return std::exchange(*this, iterator(src_, i_ + 1)); }
    iterator& operator--() noexcept { return --i_, *this; }
    iterator operator--(int) noexcept { return std::exchange(*this, iterator(src_, i_ - 1)); }
    iterator& operator+=(difference_type n) noexcept {
      i_ = static_cast<std::size_t>(static_cast<difference_type>(i_) + n);
      return *this;
    }
    iterator& operator-=(difference_type n) noexcept { return *this += -n; }
    [[nodiscard]] friend iterator operator+(iterator it, difference_type n) noexcept { return it += n; }
    [[nodiscard]] friend iterator operator+(difference_type n, iterator it) noexcept { return it += n; }
    [[nodiscard]] friend iterator operator-(iterator it, difference_type n) noexcept { return it -= n; }
    [[nodiscard]] friend difference_type operator-(const iterator& a, const iterator& b) noexcept {
      return static_cast<difference_type>(a.i_) - static_cast<difference_type>(b.i_);
    }
    [[nodiscard]] friend bool operator==(const iterator& a, const iterator& b) noexcept { return a.i_ == b.i_; }
    [[nodiscard]] friend auto operator<=>(const iterator& a, const iterator& b) noexcept { return a.i_ <=> b.i_; }

   private:
    detail::batch_source src_{};
    std::size_t i_ = 0;
  };

  batch_list() = default;
  batch_list(const detail::batch_source& src, std::size_t first, std::size_t count) noexcept
      : src_(src), first_(first), count_(count) {}

  [[nodiscard]] std::size_t size() const noexcept { return count_; }
  [[nodiscard]] bool empty() const noexcept { return count_ == 0; }
  /// Preconditions: `i < size()` (and `!empty()` for `front` and `back`).
  [[nodiscard]] batch_ref operator[](std::size_t i) const noexcept { return src_.at(first_ + i); }
  [[nodiscard]] batch_ref front() const noexcept { return (*this)[0]; }
  [[nodiscard]] batch_ref back() const noexcept { return (*this)[count_ - 1]; }
  [[nodiscard]] iterator begin() const noexcept { return {src_, first_}; }
  [[nodiscard]] iterator end() const noexcept { return {src_, first_ + count_}; }

 private:
  detail::batch_source src_{};
  std::size_t first_ = 0;
  std::size_t count_ = 0;
};

static_assert(std::random_access_iterator<batch_list::iterator>);

/// The columns of a trace, one entry per row (ids and weights: `top_k` per row;
/// scores: `num_experts` per row, or none).
struct trace_columns {
  std::vector<std::uint32_t> request;
  std::vector<std::uint32_t> step;
  std::vector<std::uint32_t> position;
  std::vector<layer_id> layer;
  std::vector<phase> kind;
  std::vector<expert_id> experts;
  std::vector<float> weights;
  std::vector<float> scores;

  /// Reserves room for `rows` rows of `k` experts and weights and `e` scores each (`e` = 0
  /// for a trace without scores).
  void reserve(std::size_t rows, std::size_t k, std::size_t e) {
    request.reserve(rows);
    step.reserve(rows);
    position.reserve(rows);
    layer.reserve(rows);
    kind.reserve(rows);
    experts.reserve(rows * k);
    weights.reserve(rows * k);
    scores.reserve(rows * e);
  }
  /// Sizes the columns to `rows` rows of `k` experts and weights and `e` scores each.
  void resize(std::size_t rows, std::size_t k, std::size_t e) {
    for (std::size_t i = 0; i < column_count; ++i) resize_column(i, rows, k, e);
  }
  /// The columns, `request` to `scores`.
  static constexpr std::size_t column_count = 8;
  /// Sizes column `i` (in the order above, i < `column_count`) as `resize` sizes it: one
  /// column at a time, so that several threads can size (and first touch) one each.
  void resize_column(std::size_t i, std::size_t rows, std::size_t k, std::size_t e) {
    switch (i) {
      case 0:
        request.resize(rows);
        break;
      case 1:
        step.resize(rows);
        break;
      case 2:
        position.resize(rows);
        break;
      case 3:
        layer.resize(rows);
        break;
      case 4:
        kind.resize(rows);
        break;
      case 5:
        experts.resize(rows * k);
        break;
      case 6:
        weights.resize(rows * k);
        break;
      default:
        scores.resize(rows * e);
        break;
    }
  }
};

/// One row to append: the routing of one token at one layer.
struct trace_row {
  std::uint32_t request = 0;
  phase kind = phase::prefill;
  std::uint32_t step = 0;
  std::uint32_t position = 0;
  layer_id layer = 0;
  std::span<const expert_id> experts;
  std::span<const float> weights;
  /// All router scores, or empty when the trace has none.
  std::span<const float> scores;
};

namespace detail {

/// Why `row` does not fit a trace described by `info` with `num_requests` requests, or
/// nothing when it does.
[[nodiscard]] inline std::optional<std::string> check_row(const trace_info& info, std::size_t num_requests,
                                                          const trace_row& row) {
  if (row.request >= num_requests) {
    return "request " + std::to_string(row.request) + " does not exist (" + std::to_string(num_requests) + " requests)";
  }
  if (static_cast<unsigned>(row.kind) > 1u) {
    return "phase code " + std::to_string(static_cast<unsigned>(row.kind)) + " is neither prefill (0) nor decode (1)";
  }
  if (row.layer >= info.num_layers) {
    return "layer " + std::to_string(row.layer) + " >= num_layers " + std::to_string(info.num_layers);
  }
  if (row.experts.size() != info.top_k) {
    return "layer " + std::to_string(row.layer) + ": expected top_k = " + std::to_string(info.top_k) +
           " expert ids, got " + std::to_string(row.experts.size());
  }
  if (row.weights.size() != row.experts.size()) {
    return "expected " + std::to_string(row.experts.size()) + " gate weights, got " +
           std::to_string(row.weights.size());
  }
  // Bit (id mod 64) of every id so far: the exact scan for a repeat runs only on a hit,
  // so readers validate a top-8 row in a few compares instead of 28.
  std::uint64_t seen = 0;
  for (std::size_t i = 0; i < row.experts.size(); ++i) {
    if (row.experts[i] >= info.num_experts) {
      return "expert id " + std::to_string(row.experts[i]) + " >= num_experts " + std::to_string(info.num_experts);
    }
    const std::uint64_t bit = std::uint64_t{1} << (row.experts[i] & 63u);
    if ((seen & bit) != 0) {
      for (std::size_t j = 0; j < i; ++j) {
        if (row.experts[j] == row.experts[i]) return "expert id " + std::to_string(row.experts[i]) + " selected twice";
      }
    }
    seen |= bit;
    const float w = row.weights[i];
    if (!std::isfinite(w) || w < 0.0f) {
      return "gate weight " + show(w) + " of expert " + std::to_string(row.experts[i]) +
             " is not a finite non-negative number";
    }
  }
  if (info.has_scores) {
    if (row.scores.size() != info.num_experts) {
      return "expected " + std::to_string(info.num_experts) + " router scores, got " +
             std::to_string(row.scores.size());
    }
    for (float sc : row.scores) {
      if (!std::isfinite(sc)) return "router score " + show(sc) + " is not finite";
    }
  } else if (!row.scores.empty()) {
    return "router scores given for a trace declared without scores";
  }
  return std::nullopt;
}

/// Checks the header fields every trace needs; the message names `fn`.
inline void check_info(const trace_info& info, std::string_view fn) {
  if (info.num_layers == 0 || info.num_layers > 65536) {
    throw_invalid(fn, "num_layers must be in [1, 65536]", info.num_layers);
  }
  if (info.num_experts == 0 || info.num_experts > 65536) {
    throw_invalid(fn, "num_experts must be in [1, 65536]", info.num_experts);
  }
  if (info.top_k == 0 || info.top_k > info.num_experts) {
    throw_invalid(fn, "top_k must be in [1, num_experts]", info.top_k);
  }
}

}  // namespace detail

/// A validated, sorted, columnar routing trace. Immutable once built.
class routing_trace {
 public:
  routing_trace() = default;

  /// Adopts columns already sorted by (request, step, layer, position), validates every
  /// row and builds the views. Readers of stored traces use this; `routing_trace_builder`
  /// sorts arbitrary rows first.
  ///
  /// Throws: `invalid_argument` naming the first bad row (its index) and the problem: a
  /// column of the wrong length, a row that fails `detail::check_row`, rows out of order
  /// or repeated, a step that mixes prefill and decode rows.
  static routing_trace from_sorted(trace_info info, std::vector<std::string> request_names, trace_columns columns) {
    constexpr std::string_view fn = "routing_trace::from_sorted";
    detail::check_info(info, fn);
    const std::size_t n = columns.layer.size();
    const auto need = [&](std::size_t got, std::size_t want, const char* what) {
      if (got != want) {
        detail::throw_invalid(fn, std::string(what) + " column must have " + std::to_string(want) + " entries", got);
      }
    };
    need(columns.request.size(), n, "request");
    need(columns.step.size(), n, "step");
    need(columns.position.size(), n, "position");
    need(columns.kind.size(), n, "phase");
    need(columns.experts.size(), n * info.top_k, "experts");
    need(columns.weights.size(), n * info.top_k, "weights");
    need(columns.scores.size(), info.has_scores ? n * info.num_experts : 0, "scores");

    routing_trace t;
    t.info_ = std::move(info);
    t.c_ = std::move(columns);
    t.requests_.reserve(request_names.size());
    for (auto& name : request_names) t.requests_.push_back(request_ref{std::move(name), 0, 0, 0, 0});
    for (std::size_t r = 0; r < n; ++r) {
      if (auto why = detail::check_row(t.info_, t.requests_.size(), t.row(r))) {
        detail::throw_invalid(fn, "row " + std::to_string(r) + ": " + *why);
      }
    }
    t.build_index(fn);
    return t;
  }

  [[nodiscard]] const trace_info& info() const noexcept { return info_; }
  /// Rows: one per (token, layer) routing decision.
  [[nodiscard]] std::size_t num_rows() const noexcept { return c_.layer.size(); }
  /// All columns.
  [[nodiscard]] const trace_columns& columns() const noexcept { return c_; }

  /// Row `r` as the builder would take it.
  [[nodiscard]] trace_row row(std::size_t r) const noexcept {
    return trace_row{c_.request[r], c_.kind[r], c_.step[r], c_.position[r],
                     c_.layer[r],   experts(r), weights(r), scores(r)};
  }
  /// The ids of row `r`.
  [[nodiscard]] std::span<const expert_id> experts(std::size_t r) const noexcept {
    return std::span<const expert_id>(c_.experts).subspan(r * info_.top_k, info_.top_k);
  }
  /// The gate weights of row `r`.
  [[nodiscard]] std::span<const float> weights(std::size_t r) const noexcept {
    return std::span<const float>(c_.weights).subspan(r * info_.top_k, info_.top_k);
  }
  /// The router scores of row `r`; empty when the trace has none.
  [[nodiscard]] std::span<const float> scores(std::size_t r) const noexcept {
    if (!info_.has_scores) return {};
    return std::span<const float>(c_.scores).subspan(r * info_.num_experts, info_.num_experts);
  }

  /// Requests in the order they were added.
  [[nodiscard]] std::span<const request_ref> requests() const noexcept { return requests_; }
  /// Forward passes, by request then step.
  [[nodiscard]] std::span<const step_ref> steps() const noexcept { return steps_; }
  /// Batches, by request, step, layer (made from the columns on access; see `batch_list`).
  [[nodiscard]] batch_list batches() const noexcept { return {batch_source(), 0, num_batches_}; }
  /// Indices into `batches()` of the batches of layer `l`, in (request, step) order;
  /// empty for a layer with no rows or out of range. The index (4 bytes per batch) is
  /// built on the first call, on any thread.
  [[nodiscard]] std::span<const std::uint32_t> layer_batches(layer_id l) const {
    if (l >= info_.num_layers || !layers_) return {};
    std::call_once(layers_->once, [&] { build_layer_index(*layers_); });
    const auto& offset = layers_->offset;
    return std::span<const std::uint32_t>(layers_->index).subspan(offset[l], offset[l + 1u] - offset[l]);
  }
  /// The batches of a step.
  [[nodiscard]] batch_list batches_of(const step_ref& s) const noexcept {
    return {batch_source(), s.first_batch, s.num_batches};
  }
  /// The steps of a request.
  [[nodiscard]] std::span<const step_ref> steps_of(const request_ref& r) const noexcept {
    return std::span<const step_ref>(steps_).subspan(r.first_step, r.num_steps);
  }
  /// The data of a batch.
  [[nodiscard]] batch_view view(const batch_ref& b) const noexcept {
    const std::size_t k = info_.top_k;
    batch_view v{b,
                 info_.top_k,
                 std::span<const std::uint32_t>(c_.position).subspan(b.first_row, b.num_rows),
                 std::span<const expert_id>(c_.experts).subspan(b.first_row * k, b.num_rows * k),
                 std::span<const float>(c_.weights).subspan(b.first_row * k, b.num_rows * k),
                 {}};
    if (info_.has_scores) {
      const std::size_t e = info_.num_experts;
      v.scores = std::span<const float>(c_.scores).subspan(b.first_row * e, b.num_rows * e);
    }
    return v;
  }

 private:
  using row_key = std::tuple<std::uint32_t, std::uint32_t, layer_id, std::uint32_t>;
  [[nodiscard]] row_key key(std::size_t r) const noexcept {
    return {c_.request[r], c_.step[r], c_.layer[r], c_.position[r]};
  }

  [[nodiscard]] detail::batch_source batch_source() const noexcept {
    return {c_.request.data(), c_.step.data(), c_.layer.data(), c_.kind.data(),
            batch_start_.empty() ? nullptr : batch_start_.data()};
  }

  // Two passes: the first checks the order and counts steps and batches, so the second
  // allocates each index once, at its size (no growth, no slack at the peak).
  void build_index(std::string_view fn) {
    const std::size_t n = c_.layer.size();
    std::size_t steps = 0, batches = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool new_request = i == 0 || c_.request[i] != c_.request[i - 1];
      const bool new_step = new_request || c_.step[i] != c_.step[i - 1];
      const bool new_batch = new_step || c_.layer[i] != c_.layer[i - 1];
      if (i > 0 && !(key(i - 1) < key(i))) {
        detail::throw_invalid(
            fn, key(i - 1) == key(i)
                    ? "row " + std::to_string(i) + " repeats the (request, step, layer, position) of the row before"
                    : "row " + std::to_string(i) + " is out of (request, step, layer, position) order");
      }
      if (!new_step && c_.kind[i] != c_.kind[i - 1]) {
        detail::throw_invalid(fn, "row " + std::to_string(i) + ": step " + std::to_string(c_.step[i]) + " of request " +
                                      std::to_string(c_.request[i]) + " mixes prefill and decode rows");
      }
      steps += new_step ? 1 : 0;
      batches += new_batch ? 1 : 0;
    }
    steps_.reserve(steps);
    num_batches_ = batches;
    if (batches != n) batch_start_.assign(batches + 1, static_cast<std::uint32_t>(n));
    std::size_t b = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const bool new_request = i == 0 || c_.request[i] != c_.request[i - 1];
      const bool new_step = new_request || c_.step[i] != c_.step[i - 1];
      const bool new_batch = new_step || c_.layer[i] != c_.layer[i - 1];
      if (new_request) {
        auto& r = requests_[c_.request[i]];
        r.first_row = static_cast<std::uint32_t>(i);
        r.first_step = static_cast<std::uint32_t>(steps_.size());
      }
      if (new_step) {
        steps_.push_back(step_ref{c_.request[i], c_.step[i], c_.kind[i], static_cast<std::uint32_t>(b), 0});
        ++requests_[c_.request[i]].num_steps;
      }
      if (new_batch) {
        if (!batch_start_.empty()) batch_start_[b] = static_cast<std::uint32_t>(i);
        ++b;
        ++steps_.back().num_batches;
      }
      ++requests_[c_.request[i]].num_rows;
    }
    layers_ = std::make_shared<layer_index>();
  }

  /// Which batches each layer has (`layer_batches`), built on first use.
  struct layer_index {
    std::once_flag once;
    std::vector<std::uint32_t> index;
    std::vector<std::uint32_t> offset;
  };

  void build_layer_index(layer_index& li) const {
    const std::size_t layers = info_.num_layers;
    const batch_list all = batches();
    li.offset.assign(layers + 1, 0);
    for (const batch_ref b : all) ++li.offset[b.layer + 1u];
    for (std::size_t l = 0; l < layers; ++l) li.offset[l + 1] += li.offset[l];
    li.index.assign(all.size(), 0);
    std::vector<std::uint32_t> fill(li.offset.begin(), li.offset.end() - 1);
    for (std::size_t i = 0; i < all.size(); ++i) li.index[fill[all[i].layer]++] = static_cast<std::uint32_t>(i);
  }

  trace_info info_;
  trace_columns c_;
  std::vector<request_ref> requests_;
  std::vector<step_ref> steps_;
  std::size_t num_batches_ = 0;
  std::vector<std::uint32_t> batch_start_;  // each batch's first row, then the rows; empty when batch i is row i
  std::shared_ptr<layer_index> layers_;     // shared by copies, which have the same batches
};

/// Collects rows in any order, validates each, and builds a sorted `routing_trace`.
class routing_trace_builder {
 public:
  /// Throws: `invalid_argument` if `num_layers`, `num_experts` or `top_k` is 0, if
  /// `top_k > num_experts`, or if `num_layers` or `num_experts` exceeds 65536.
  explicit routing_trace_builder(trace_info info) : info_(std::move(info)) {
    detail::check_info(info_, "routing_trace_builder");
  }

  [[nodiscard]] const trace_info& info() const noexcept { return info_; }

  /// Registers a request and returns its index.
  std::uint32_t add_request(std::string name) {
    names_.push_back(std::move(name));
    return static_cast<std::uint32_t>(names_.size() - 1);
  }
  /// Requests registered so far.
  [[nodiscard]] std::size_t num_requests() const noexcept { return names_.size(); }

  /// Why `row` cannot be appended, or nothing if it can. Importers call this to report
  /// the problem with a file and line; `add` calls it and throws.
  [[nodiscard]] std::optional<std::string> check(const trace_row& row) const {
    return detail::check_row(info_, names_.size(), row);
  }

  /// Appends a row.
  ///
  /// Throws: `invalid_argument` with the reason `check` gives.
  void add(const trace_row& row) {
    if (auto why = check(row)) detail::throw_invalid("routing_trace_builder::add", *why);
    c_.request.push_back(row.request);
    c_.step.push_back(row.step);
    c_.position.push_back(row.position);
    c_.layer.push_back(row.layer);
    c_.kind.push_back(row.kind);
    c_.experts.insert(c_.experts.end(), row.experts.begin(), row.experts.end());
    c_.weights.insert(c_.weights.end(), row.weights.begin(), row.weights.end());
    c_.scores.insert(c_.scores.end(), row.scores.begin(), row.scores.end());
  }

  /// Rows appended so far.
  [[nodiscard]] std::size_t num_rows() const noexcept { return c_.layer.size(); }

  /// Sorts the rows by (request, step, layer, position), keeping the order of equal
  /// keys, and returns the trace.
  ///
  /// Throws: `invalid_argument` if two rows share (request, step, layer, position), or
  /// if one step mixes prefill and decode rows (see `routing_trace::from_sorted`).
  routing_trace finish() && {
    const std::size_t n = c_.layer.size();
    std::vector<std::uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    const auto key = [&](std::uint32_t r) {
      return std::tuple(c_.request[r], c_.step[r], c_.layer[r], c_.position[r]);
    };
    std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return key(a) < key(b); });
    trace_columns sorted;
    permute(c_.request, sorted.request, order, 1);
    permute(c_.step, sorted.step, order, 1);
    permute(c_.position, sorted.position, order, 1);
    permute(c_.layer, sorted.layer, order, 1);
    permute(c_.kind, sorted.kind, order, 1);
    permute(c_.experts, sorted.experts, order, info_.top_k);
    permute(c_.weights, sorted.weights, order, info_.top_k);
    if (info_.has_scores) permute(c_.scores, sorted.scores, order, info_.num_experts);
    return routing_trace::from_sorted(std::move(info_), std::move(names_), std::move(sorted));
  }

 private:
  template <class T>
  static void permute(std::vector<T>& in, std::vector<T>& out, const std::vector<std::uint32_t>& order,
                      std::size_t width) {
    out.resize(in.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      std::copy_n(in.begin() + static_cast<std::ptrdiff_t>(order[i] * width), width,
                  out.begin() + static_cast<std::ptrdiff_t>(i * width));
    }
    std::vector<T>().swap(in);
  }

  trace_info info_;
  std::vector<std::string> names_;
  trace_columns c_;
};

}  // namespace moepolicy
