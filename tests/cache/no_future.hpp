// SPDX-License-Identifier: Apache-2.0
// The check that an online eviction policy learns only from the past: two streams equal up
// to a cut and different after it must get identical decisions up to the cut, although
// each access carries its own stream's true `next_use`; and a run whose `next_use` is
// garbage must decide exactly as one fed the truth. `check_no_future_with_prefetch` does the
// same for a policy fed by a predictor (hints and prefetches before every batch), the
// prefetch outcomes counted among the decisions.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "cache_test_support.hpp"
#include "moepolicy/cache/belady.hpp"
#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::test {

/// One decision: the victim the policy named before the access, and what the access did.
struct decision {
  std::optional<expert_key> victim;
  bool hit = false;
  bool inserted = false;
  std::uint32_t evicted = 0;
  bool operator==(const decision&) const = default;
};

/// The batches of `t`'s steps, in order, and after each step's last batch a step end.
struct stream {
  std::vector<batch_view> batches;
  std::vector<std::uint8_t> step_end;
  void append(const routing_trace& t) {
    for (const step_ref& s : t.steps()) {
      for (const batch_ref& r : t.batches_of(s)) {
        batches.push_back(t.view(r));
        step_end.push_back(0);
      }
      step_end.back() = 1;
    }
  }
};

/// A predictor that predicts nothing (plain demand replays).
struct no_predictor {
  bool predict(layer_id, std::span<float>) noexcept { return false; }
  void observe(const batch_view&) noexcept {}
  void end_step() noexcept {}
  void begin_request() noexcept {}
};

/// Drives `s` through `expert_cache<P>` with the layer and step hooks; every access gets the
/// stream's true next use, or 0 (nonsense) with `garbage_future`. Before each batch of
/// layer l, `predictor` predicts l: every expert scored above 0 is hinted and the best
/// `prefetch_depth` are prefetched (each a decision: its outcome in `evicted`); after the
/// batch it observes it.
template <EvictionPolicy P, class Predictor = no_predictor>
std::vector<decision> decisions(const stream& s, const cache_config& cc, const typename P::config_type& pc,
                                bool garbage_future, Predictor predictor = {}, std::size_t prefetch_depth = 0) {
  std::vector<expert_key> accesses;
  std::vector<std::uint8_t> seen(cc.num_experts, 0);
  const auto each = [&](const batch_view& b, auto&& f) {
    for (expert_id e : b.experts) {
      if (seen[e] != 0) continue;
      seen[e] = 1;
      f(expert_key{b.ref.layer, e});
    }
    for (expert_id e : b.experts) seen[e] = 0;
  };
  for (const batch_view& b : s.batches) each(b, [&](expert_key k) { accesses.push_back(k); });
  const std::vector<std::uint64_t> next = next_use_positions(accesses, cc.num_layers, cc.num_experts);
  expert_cache<P> cache(cc, pc);
  std::vector<decision> out;
  std::size_t pos = 0;
  std::vector<float> scores(cc.num_experts, 0.0f);
  for (std::size_t i = 0; i < s.batches.size(); ++i) {
    const batch_view& b = s.batches[i];
    if (predictor.predict(b.ref.layer, scores)) {
      for (std::size_t e = 0; e < scores.size(); ++e) {
        if (scores[e] > 0.0f) cache.hint({b.ref.layer, static_cast<expert_id>(e)}, scores[e]);
      }
      for (std::size_t n = 0; n < prefetch_depth; ++n) {
        std::size_t best = 0;
        for (std::size_t e = 1; e < scores.size(); ++e) best = scores[e] > scores[best] ? e : best;
        if (scores[best] <= 0.0f) break;
        const prefetch_outcome o = cache.prefetch({b.ref.layer, static_cast<expert_id>(best)}, scores[best]);
        out.push_back({.victim = std::nullopt, .evicted = 100u + static_cast<std::uint32_t>(o)});
        scores[best] = 0.0f;
      }
    }
    cache.begin_layer(b);
    each(b, [&](expert_key k) {
      decision d{.victim = cache.victim_for(k)};
      const access_outcome o = cache.get(k, {.next_use = garbage_future ? 0 : next[pos]});
      ++pos;
      d.hit = o.hit, d.inserted = o.inserted, d.evicted = o.evicted;
      out.push_back(d);
    });
    cache.end_layer(b.ref.layer);
    predictor.observe(b);
    if (s.step_end[i] != 0) {
      cache.end_step();
      predictor.end_step();
    }
  }
  return out;
}

/// Checks that `P` with configuration `pc`, fed by a predictor that `make_predictor()`
/// builds (hints, and prefetches of its best `prefetch_depth`), decides from the past only
/// (see the header).
template <EvictionPolicy P, class MakePredictor>
void check_no_future_with_prefetch(const typename P::config_type& pc, MakePredictor make_predictor,
                                   std::size_t prefetch_depth);

/// Checks that `P` with configuration `pc` decides from the past only (see the header).
template <EvictionPolicy P>
void check_no_future(const typename P::config_type& pc) {
  check_no_future_with_prefetch<P>(
      pc, [] { return no_predictor{}; }, 0);
}

template <EvictionPolicy P, class MakePredictor>
void check_no_future_with_prefetch(const typename P::config_type& pc, MakePredictor make_predictor,
                                   std::size_t prefetch_depth) {
  const routing_trace granite = granite_trace();
  const routing_trace head = request_range(granite, 0, 2);
  const routing_trace tail_a = request_range(granite, 2, 2);
  const routing_trace tail_b = request_range(granite, 6, 2);
  stream a, b;
  a.append(head);
  b.append(head);
  a.append(tail_a);
  b.append(tail_b);
  stream prefix;
  prefix.append(head);
  const std::uint32_t L = granite.info().num_layers, E = granite.info().num_experts;
  for (const cache_config& cc :
       {cache_config{.num_layers = L, .num_experts = E, .capacity = 12, .scope = capacity_scope::per_layer},
        cache_config{.num_layers = L, .num_experts = E, .capacity = 300}}) {
    CAPTURE(to_string(cc.scope));
    // Decisions of the common prefix (accesses, and prefetches when there are any).
    const std::size_t cut = decisions<P>(prefix, cc, pc, false, make_predictor(), prefetch_depth).size();
    const std::vector<decision> da = decisions<P>(a, cc, pc, false, make_predictor(), prefetch_depth);
    const std::vector<decision> db = decisions<P>(b, cc, pc, false, make_predictor(), prefetch_depth);
    REQUIRE(da.size() > cut);
    REQUIRE(db.size() > cut);
    // The futures differ after the cut, so `next_use` differs inside the prefix too (the
    // last uses of the prefix point into different tails).
    bool same_prefix = true;
    for (std::size_t i = 0; i < cut; ++i) same_prefix = same_prefix && da[i] == db[i];
    CHECK(same_prefix);
    bool diverged = false;
    for (std::size_t i = cut; i < std::min(da.size(), db.size()); ++i) diverged = diverged || !(da[i] == db[i]);
    CHECK(diverged);
    CHECK(decisions<P>(a, cc, pc, true, make_predictor(), prefetch_depth) == da);
  }
}

}  // namespace moepolicy::test
