// Helpers of the cache, route, predict and sim tests: seeded synthetic routing traces with
// full router scores, and the bundled Granite trace.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::test {

/// The shape of a synthetic trace.
struct synthetic_trace_shape {
  std::uint32_t layers = 4;
  std::uint32_t experts = 16;
  std::uint32_t top_k = 2;
  std::uint32_t requests = 3;
  std::uint32_t prompt_tokens = 5;
  std::uint32_t decode_steps = 20;
  /// Sequences decoded together (tokens per decode batch).
  std::uint32_t batch = 1;
  bool scores = true;
};

/// A seeded trace whose routing is skewed per layer (a Zipf-like popularity plus a slowly
/// drifting per-request bias), so that caching has something to find. Router scores are a
/// softmax over noisy logits; top-k ids by score, weights renormalised over the top-k.
inline routing_trace synthetic_trace(std::uint32_t seed, const synthetic_trace_shape& s = {}) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> noise(0.0, 1.0);
  routing_trace_builder b({"synthetic", "test", s.layers, s.experts, s.top_k, s.scores});
  std::vector<double> base(static_cast<std::size_t>(s.layers) * s.experts);
  for (std::size_t l = 0; l < s.layers; ++l) {
    std::vector<std::uint32_t> perm(s.experts);
    std::iota(perm.begin(), perm.end(), 0u);
    std::shuffle(perm.begin(), perm.end(), rng);
    for (std::size_t r = 0; r < s.experts; ++r) base[l * s.experts + perm[r]] = -std::log(1.0 + static_cast<double>(r));
  }
  std::vector<float> scores(s.experts);
  std::vector<expert_id> ids(s.top_k);
  std::vector<float> w(s.top_k);
  std::vector<std::uint32_t> order(s.experts);
  std::vector<double> bias(base.size());
  const auto add = [&](std::uint32_t req, phase ph, std::uint32_t step, std::uint32_t pos, layer_id l) {
    double z = 0.0;
    for (std::size_t e = 0; e < s.experts; ++e) {
      const double logit = 2.0 * (base[l * s.experts + e] + bias[l * s.experts + e]) + noise(rng);
      scores[e] = static_cast<float>(std::exp(logit));
      z += scores[e];
    }
    for (auto& x : scores) x = static_cast<float>(x / z);
    std::iota(order.begin(), order.end(), 0u);
    std::partial_sort(order.begin(), order.begin() + s.top_k, order.end(),
                      [&](std::uint32_t a, std::uint32_t c) { return scores[a] != scores[c] ? scores[a] > scores[c] : a < c; });
    float sum = 0.0f;
    for (std::size_t j = 0; j < s.top_k; ++j) ids[j] = static_cast<expert_id>(order[j]), sum += scores[order[j]];
    for (std::size_t j = 0; j < s.top_k; ++j) w[j] = scores[order[j]] / sum;
    trace_row row{req, ph, step, pos, l, ids, w, {}};
    if (s.scores) row.scores = scores;
    b.add(row);
  };
  for (std::uint32_t r = 0; r < s.requests; ++r) {
    const std::uint32_t req = b.add_request("request " + std::to_string(r));
    for (auto& x : bias) x = 0.5 * noise(rng);
    for (std::uint32_t p = 0; p < s.prompt_tokens; ++p) {
      for (std::uint32_t l = 0; l < s.layers; ++l) add(req, phase::prefill, 0, p, static_cast<layer_id>(l));
    }
    for (std::uint32_t st = 1; st <= s.decode_steps; ++st) {
      for (auto& x : bias) x += 0.05 * noise(rng);
      for (std::uint32_t q = 0; q < s.batch; ++q) {
        for (std::uint32_t l = 0; l < s.layers; ++l) {
          add(req, phase::decode, st, q * 100000 + s.prompt_tokens + st - 1, static_cast<layer_id>(l));
        }
      }
    }
  }
  return std::move(b).finish();
}

/// Requests [first, first + n) of `t` (fewer when it has fewer), renumbered from 0.
inline routing_trace request_range(const routing_trace& t, std::size_t first, std::size_t n) {
  const auto reqs = t.requests();
  first = std::min(first, reqs.size());
  n = std::min(n, reqs.size() - first);
  const auto row_of = [&](std::size_t r) { return r == reqs.size() ? t.num_rows() : std::size_t{reqs[r].first_row}; };
  const std::size_t begin = row_of(first), end = row_of(first + n);
  const trace_columns& c = t.columns();
  const std::size_t k = t.info().top_k;
  const std::size_t e = t.info().has_scores ? t.info().num_experts : 0;
  const auto slice = [&](const auto& v, std::size_t width) {
    return std::vector<typename std::decay_t<decltype(v)>::value_type>(
        v.begin() + static_cast<std::ptrdiff_t>(begin * width), v.begin() + static_cast<std::ptrdiff_t>(end * width));
  };
  trace_columns out{slice(c.request, 1), slice(c.step, 1), slice(c.position, 1), slice(c.layer, 1),
                    slice(c.kind, 1), slice(c.experts, k), slice(c.weights, k), slice(c.scores, e)};
  for (auto& r : out.request) r -= static_cast<std::uint32_t>(first);
  std::vector<std::string> names;
  for (std::size_t r = first; r < first + n; ++r) names.push_back(reqs[r].name);
  return routing_trace::from_sorted(t.info(), std::move(names), std::move(out));
}

/// The first `n` requests of `t` (all of them when it has fewer).
inline routing_trace first_requests(const routing_trace& t, std::size_t n) { return request_range(t, 0, n); }

/// The bundled Granite 3.1 1B-A400M trace.
inline routing_trace granite_trace() {
  return read_canonical(std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" /
                        "granite-3.1-1b-a400m.mtrace");
}

}  // namespace moepolicy::test
