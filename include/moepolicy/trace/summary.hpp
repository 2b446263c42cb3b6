// moepolicy/trace/summary.hpp — what a routing trace contains, at a glance.
//
// `summarize` counts, per layer and phase, the tokens routed and the selections each
// expert received, and derives the skew figures the papers use to motivate placement:
// the largest and smallest expert share of selections, their ratio, and the entropy of
// the activation distribution (log2; a uniform router reaches log2(num_experts)).
// A canonical file is summarised from its memory map in one walk, holding a chunk of it
// and O(layers × experts + requests) counters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// Skew of one layer's expert activations.
struct layer_skew {
  layer_id layer = 0;
  /// Tokens routed at this layer, by phase.
  std::uint64_t prefill_tokens = 0;
  std::uint64_t decode_tokens = 0;
  /// Selections per expert (each token contributes top_k), both phases.
  std::vector<std::uint64_t> selections;
  /// Largest and smallest share of selections over experts, in [0, 1].
  double max_share = 0.0;
  double min_share = 0.0;
  /// max_share / min_share; infinite when some expert was never selected.
  double max_min_ratio = 0.0;
  /// Shannon entropy of the selection shares in bits.
  double entropy_bits = 0.0;
  /// Experts selected at least once.
  std::uint32_t experts_used = 0;
};

/// One request's tokens by phase (counted at the request's most populated layer) and steps.
struct request_summary {
  std::string name;
  std::uint64_t rows = 0;
  std::uint64_t prefill_tokens = 0;
  std::uint64_t decode_tokens = 0;
  std::uint32_t steps = 0;
};

/// The whole-trace view that `moepolicy inspect` prints.
struct trace_summary {
  std::uint64_t rows = 0;
  /// Forward passes (steps of all requests).
  std::uint64_t steps = 0;
  std::vector<request_summary> requests;
  /// One entry per layer that has rows, ascending.
  std::vector<layer_skew> layers;
  /// Tokens by phase summed over requests, taking each request's most populated layer
  /// (layers can differ by a few tokens when a recording dropped rows).
  std::uint64_t prefill_tokens = 0;
  std::uint64_t decode_tokens = 0;
  /// Smallest and largest per-layer token counts over the layers that have rows.
  std::uint64_t min_layer_tokens = 0;
  std::uint64_t max_layer_tokens = 0;
};

/// Entropy in bits of a distribution given by non-negative counts; 0 for all zeros.
[[nodiscard]] inline double entropy_bits(const std::vector<std::uint64_t>& counts) noexcept {
  double total = 0.0;
  for (auto c : counts) total += static_cast<double>(c);
  if (total <= 0.0) return 0.0;
  double h = 0.0;
  for (auto c : counts) {
    if (c == 0) continue;
    const double p = static_cast<double>(c) / total;
    h -= p * std::log2(p);
  }
  return h;
}

namespace detail {

/// The per-layer figures of `per_layer` (selections and tokens counted), into `s`.
inline void finish_layers(std::vector<layer_skew>& per_layer, trace_summary& s) {
  bool first = true;
  for (auto& L : per_layer) {
    const std::uint64_t tokens = L.prefill_tokens + L.decode_tokens;
    if (tokens == 0) continue;
    std::uint64_t total = 0, hi = 0, lo = std::numeric_limits<std::uint64_t>::max();
    for (auto c : L.selections) {
      total += c;
      hi = std::max(hi, c);
      lo = std::min(lo, c);
      if (c > 0) ++L.experts_used;
    }
    L.max_share = static_cast<double>(hi) / static_cast<double>(total);
    L.min_share = static_cast<double>(lo) / static_cast<double>(total);
    L.max_min_ratio =
        lo == 0 ? std::numeric_limits<double>::infinity() : static_cast<double>(hi) / static_cast<double>(lo);
    L.entropy_bits = entropy_bits(L.selections);
    s.min_layer_tokens = first ? tokens : std::min(s.min_layer_tokens, tokens);
    s.max_layer_tokens = std::max(s.max_layer_tokens, tokens);
    first = false;
    s.layers.push_back(std::move(L));
  }
}

}  // namespace detail

/// Summarises `trace`. Complexity: O(rows × top_k + layers × experts).
[[nodiscard]] inline trace_summary summarize(const routing_trace& trace) {
  const auto& info = trace.info();
  trace_summary s;
  s.rows = trace.num_rows();
  s.steps = trace.steps().size();

  std::vector<layer_skew> per_layer(info.num_layers);
  for (std::size_t l = 0; l < per_layer.size(); ++l) {
    per_layer[l].layer = static_cast<layer_id>(l);
    per_layer[l].selections.assign(info.num_experts, 0);
  }
  for (const auto& b : trace.batches()) {
    auto& L = per_layer[b.layer];
    (b.kind == phase::prefill ? L.prefill_tokens : L.decode_tokens) += b.num_rows;
    const auto v = trace.view(b);
    for (expert_id e : v.experts) ++L.selections[e];
  }
  detail::finish_layers(per_layer, s);

  for (const auto& r : trace.requests()) {
    request_summary rs{r.name, r.num_rows, 0, 0, r.num_steps};
    // Tokens per layer within this request, by phase; report the most populated layer.
    std::vector<std::uint64_t> pre(info.num_layers, 0), dec(info.num_layers, 0);
    for (const auto& st : trace.steps_of(r)) {
      for (const auto& b : trace.batches_of(st)) {
        (b.kind == phase::prefill ? pre : dec)[b.layer] += b.num_rows;
      }
    }
    rs.prefill_tokens = *std::max_element(pre.begin(), pre.end());
    rs.decode_tokens = *std::max_element(dec.begin(), dec.end());
    s.prefill_tokens += rs.prefill_tokens;
    s.decode_tokens += rs.decode_tokens;
    s.requests.push_back(std::move(rs));
  }
  return s;
}

/// Summarises the canonical file `file` in one walk of its map (bounded memory); equal to
/// `summarize(file.read())`.
///
/// Throws: `parse_error` as `canonical_file::for_each_batch`.
/// Complexity: O(rows × top_k + requests × layers + layers × experts).
[[nodiscard]] inline trace_summary summarize(const canonical_file& file) {
  const auto& info = file.info();
  trace_summary s;
  s.rows = file.num_rows();
  std::vector<layer_skew> per_layer(info.num_layers);
  for (std::size_t l = 0; l < per_layer.size(); ++l) {
    per_layer[l].layer = static_cast<layer_id>(l);
    per_layer[l].selections.assign(info.num_experts, 0);
  }
  std::vector<std::uint64_t> pre(info.num_layers, 0), dec(info.num_layers, 0);
  const auto names = file.request_names();
  const auto close_request = [&] {
    if (s.requests.empty()) return;
    request_summary& rs = s.requests.back();
    rs.prefill_tokens = *std::max_element(pre.begin(), pre.end());
    rs.decode_tokens = *std::max_element(dec.begin(), dec.end());
    s.prefill_tokens += rs.prefill_tokens;
    s.decode_tokens += rs.decode_tokens;
    std::fill(pre.begin(), pre.end(), 0);
    std::fill(dec.begin(), dec.end(), 0);
  };
  file.for_each_batch(
      [&](std::uint32_t q) {
        close_request();
        s.requests.push_back(request_summary{names[q], 0, 0, 0, 0});
      },
      [&](const batch_view& b) {
        auto& L = per_layer[b.ref.layer];
        (b.ref.kind == phase::prefill ? L.prefill_tokens : L.decode_tokens) += b.ref.num_rows;
        for (expert_id e : b.experts) ++L.selections[e];
        (b.ref.kind == phase::prefill ? pre : dec)[b.ref.layer] += b.ref.num_rows;
        s.requests.back().rows += b.ref.num_rows;
      },
      [&](const step_ref&) {
        ++s.steps;
        ++s.requests.back().steps;
      });
  close_request();
  detail::finish_layers(per_layer, s);
  return s;
}

}  // namespace moepolicy
