// python/src/cache.cpp — expert caching: an online cache with any policy by name (one
// `access` per layer of a forward pass), and the offline replays of a trace (cache replay,
// the LRU hit curve at every capacity, the demand access sequence).
#include <pybind11/stl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/expert_cache.hpp"
#include "moepolicy/cache/stack_distance.hpp"
#include "moepolicy/sim/cache_replay.hpp"

namespace moepolicy::python {
namespace {

py::dict stats_dict(const cache_stats& s) {
  py::dict d;
  d["accesses"] = s.accesses;
  d["hits"] = s.hits;
  d["misses"] = s.misses;
  d["admissions"] = s.admissions;
  d["rejections"] = s.rejections;
  d["overflows"] = s.overflows;
  d["evictions"] = s.evictions;
  d["prefetches"] = s.prefetches;
  d["preloads"] = s.preloads;
  d["dropped"] = s.dropped;
  d["hit_bytes"] = s.hit_bytes;
  d["demand_bytes"] = s.demand_bytes;
  d["hit_ratio"] = s.hit_ratio();
  return d;
}

cache_config make_config(std::string_view fn, std::uint32_t num_layers, std::uint32_t num_experts,
                         std::uint64_t capacity, bool per_layer, const std::string& unit, std::uint64_t expert_bytes,
                         py::handle footprints) {
  cache_config cc;
  cc.num_layers = num_layers;
  cc.num_experts = num_experts;
  cc.capacity = capacity;
  cc.scope = per_layer ? capacity_scope::per_layer : capacity_scope::shared;
  if (unit == "experts") {
    cc.unit = capacity_unit::experts;
  } else if (unit == "bytes") {
    cc.unit = capacity_unit::byte_count;
  } else {
    detail::throw_invalid(fn, "unit must be \"experts\" or \"bytes\"", unit);
  }
  cc.expert_bytes = expert_bytes;
  if (!footprints.is_none()) read_integers(footprints, fn, "footprints", 0, ~std::uint64_t{0} >> 1, cc.footprints);
  return cc;
}

any_eviction_config policy_by_name(const std::string& name) { return eviction_config_by_name(name); }

/// An expert cache over a policy chosen by name, driven one layer at a time.
class online_cache {
 public:
  online_cache(const std::string& policy, std::uint32_t num_layers, std::uint32_t num_experts, std::uint64_t capacity,
               bool per_layer, const std::string& unit, std::uint64_t expert_bytes, py::handle footprints)
      : cache_(make_config("ExpertCache", num_layers, num_experts, capacity, per_layer, unit, expert_bytes, footprints),
               checked_policy(policy)) {
    const auto n = cache_.policy().name();
    reads_weights_ = n == "score-aware" || n == "ema-score";
    hit_of_.assign(num_experts, 0);
    seen_.assign(num_experts, 0);
  }

  py::array access(std::uint32_t layer, py::handle experts, py::handle weights, py::handle scores) {
    constexpr std::string_view fn = "ExpertCache.access";
    const auto& cfg = cache_.config();
    if (layer >= cfg.num_layers) {
      detail::throw_invalid(fn, "layer must be < num_layers " + std::to_string(cfg.num_layers), layer);
    }
    py::array ea = read_integers(experts, fn, "experts", 0, cfg.num_experts - 1u, ids_);
    if (ea.ndim() != 1 && ea.ndim() != 2) need_ndim(ea, 2, fn, "experts (tokens x top_k, or one token's ids)");
    const std::size_t tokens = ea.ndim() == 2 ? static_cast<std::size_t>(ea.shape(0)) : 1;
    const std::size_t n = ids_.size();
    const std::size_t k = tokens == 0 ? 0 : n / tokens;
    std::span<const float> w, s;
    std::optional<py::array_t<float, py::array::c_style>> wa, sa;
    if (!weights.is_none()) {
      wa = read_reals<float>(weights, fn, "weights");
      need_size(*wa, n, fn, "weights (one per expert id)");
      w = span_of(*wa);
      need_finite(w, fn, "weights", true);
    }
    if (!scores.is_none()) {
      sa = read_reals<float>(scores, fn, "scores");
      need_size(*sa, tokens * cfg.num_experts, fn, "scores (tokens x num_experts)");
      s = span_of(*sa);
      need_finite(s, fn, "scores", false);
    }
    if (w.empty() && s.empty()) {
      if (reads_weights_ && n > 0) {
        detail::throw_invalid(fn, "the policy ranks experts by router score: pass weights or scores, policy",
                              cache_.policy().name());
      }
      zeros_.assign(n, 0.0f);
      w = zeros_;
    } else if (w.empty()) {
      zeros_.assign(n, 0.0f);
      w = zeros_;
    }
    ids16_.resize(n);
    for (std::size_t i = 0; i < n; ++i) ids16_[i] = static_cast<expert_id>(ids_[i]);
    py::array_t<bool> out(ea.ndim() == 2 ? std::vector<py::ssize_t>{ea.shape(0), ea.shape(1)}
                                         : std::vector<py::ssize_t>{ea.shape(0)});
    bool* hit = out.mutable_data();
    {
      maybe_release unlock(n);
      batch_view b{
          batch_ref{0, steps_, static_cast<layer_id>(layer), phase::decode, 0, static_cast<std::uint32_t>(tokens)},
          static_cast<std::uint32_t>(k),
          {},
          ids16_,
          w,
          s};
      cache_.begin_layer(b);
      for (expert_id e : ids16_) {
        if (seen_[e] != 0) continue;
        seen_[e] = 1;
        hit_of_[e] = cache_.get(expert_key{static_cast<layer_id>(layer), e}).hit ? 1 : 0;
      }
      for (std::size_t i = 0; i < n; ++i) {
        hit[i] = hit_of_[ids16_[i]] != 0;
        seen_[ids16_[i]] = 0;
      }
      cache_.end_layer(static_cast<layer_id>(layer));
    }
    return out;
  }

  void hint(std::uint32_t layer, py::handle experts, py::handle confidence) {
    constexpr std::string_view fn = "ExpertCache.hint";
    const auto& cfg = cache_.config();
    if (layer >= cfg.num_layers) {
      detail::throw_invalid(fn, "layer must be < num_layers " + std::to_string(cfg.num_layers), layer);
    }
    read_integers(experts, fn, "experts", 0, cfg.num_experts - 1u, ids_);
    auto c = read_reals<float>(confidence, fn, "confidence");
    if (c.size() != 1) need_size(c, ids_.size(), fn, "confidence (one, or one per expert)");
    const auto conf = span_of(c);
    for (std::size_t i = 0; i < conf.size(); ++i) {
      if (!(conf[i] >= 0.0f && conf[i] <= 1.0f)) {
        detail::throw_invalid(fn, "confidence must be in [0, 1], element " + std::to_string(i), conf[i]);
      }
    }
    for (std::size_t i = 0; i < ids_.size(); ++i) {
      cache_.hint(expert_key{static_cast<layer_id>(layer), static_cast<expert_id>(ids_[i])},
                  conf.size() == 1 ? conf[0] : conf[i]);
    }
  }

  void end_step() {
    cache_.end_step();
    ++steps_;
  }

  std::optional<std::pair<std::uint32_t, std::uint32_t>> victim(std::uint32_t layer) const {
    const auto& cfg = cache_.config();
    if (layer >= cfg.num_layers) {
      detail::throw_invalid("ExpertCache.victim", "layer must be < num_layers " + std::to_string(cfg.num_layers),
                            layer);
    }
    const std::size_t part = cfg.scope == capacity_scope::per_layer ? layer : 0;
    const auto v = cache_.policy().victim(part);
    if (!v) return std::nullopt;
    return std::pair<std::uint32_t, std::uint32_t>{v->layer, v->expert};
  }

  bool contains(std::uint32_t layer, std::uint32_t expert) const {
    const auto& cfg = cache_.config();
    if (layer >= cfg.num_layers || expert >= cfg.num_experts) {
      detail::throw_invalid("ExpertCache.contains",
                            "(layer, expert) must lie within (" + std::to_string(cfg.num_layers) + ", " +
                                std::to_string(cfg.num_experts) + "), expert",
                            expert);
    }
    return cache_.contains(expert_key{static_cast<layer_id>(layer), static_cast<expert_id>(expert)});
  }

  const expert_cache<any_eviction_policy>& cache() const { return cache_; }
  expert_cache<any_eviction_policy>& cache() { return cache_; }

 private:
  static any_eviction_config checked_policy(const std::string& name) {
    auto cfg = policy_by_name(name);
    if (std::holds_alternative<belady_config>(cfg)) {
      detail::throw_invalid("ExpertCache",
                            "belady reads the future, which an online cache does not have; replay a trace with "
                            "replay_cache instead, policy",
                            name);
    }
    return cfg;
  }

  expert_cache<any_eviction_policy> cache_;
  bool reads_weights_ = false;
  std::uint32_t steps_ = 0;
  std::vector<std::uint32_t> ids_;
  std::vector<expert_id> ids16_;
  std::vector<float> zeros_;
  std::vector<std::uint8_t> hit_of_, seen_;
};

cache_replay_config replay_config(std::string_view fn, bool prefill, bool decode, bool reset) {
  if (!prefill && !decode) detail::throw_invalid(fn, "replay prefill, decode or both");
  return cache_replay_config{prefill, decode, reset};
}

}  // namespace

void bind_cache(py::module_& m) {
  m.def(
      "eviction_policies",
      [] {
        std::vector<std::pair<std::string, std::string>> out;
        for (const auto& e : eviction_policies) out.emplace_back(std::string(e.name), std::string(e.summary));
        return out;
      },
      "Every eviction policy by name, with a one-line summary: the names ExpertCache and replay_cache take.");

  py::class_<online_cache>(m, "ExpertCache",
                           "An expert cache with an eviction policy chosen by name (see eviction_policies()),\n"
                           "driven online: one access() per MoE layer of a forward pass, end_step() after each pass.")
      .def(py::init<const std::string&, std::uint32_t, std::uint32_t, std::uint64_t, bool, const std::string&,
                    std::uint64_t, py::handle>(),
           py::arg("policy"), py::arg("num_layers"), py::arg("num_experts"), py::arg("capacity"), py::kw_only(),
           py::arg("per_layer") = false, py::arg("unit") = "experts", py::arg("expert_bytes") = 0,
           py::arg("footprints") = py::none(),
           "capacity counts experts (unit='experts') or bytes (unit='bytes', with expert_bytes or one footprint\n"
           "per (layer, expert), layer-major), shared by all layers or per layer.")
      .def("access", &online_cache::access, py::arg("layer"), py::arg("experts"), py::arg("weights") = py::none(),
           py::arg("scores") = py::none(),
           "One layer of a forward pass: the router's top-k ids (tokens x top_k, or one token's ids), optional\n"
           "gate weights of the same shape and all router scores (tokens x num_experts). Each distinct expert is\n"
           "accessed once, in order of first selection. Returns whether each id was a hit (bool, ids' shape).")
      .def("hint", &online_cache::hint, py::arg("layer"), py::arg("experts"), py::arg("confidence") = 1.0,
           "A predictor's hint that these experts of the layer will be needed, with a confidence in [0, 1] (one,\n"
           "or one per expert): policies that take hints use it (sticky-lru admits only hinted misses).")
      .def("end_step", &online_cache::end_step, "Ends a forward pass (policies that count steps take note).")
      .def("victim", &online_cache::victim, py::arg("layer") = 0,
           "The (layer, expert) the policy would evict next from layer's pool (the shared pool unless per_layer),\n"
           "or None when nothing may be evicted.")
      .def("contains", &online_cache::contains, py::arg("layer"), py::arg("expert"))
      .def("reset_stats", [](online_cache& c) { c.cache().reset_stats(); })
      .def(
          "clear", [](online_cache& c) { c.cache().clear(); }, "Empties the cache.")
      .def_property_readonly("policy", [](const online_cache& c) { return std::string(c.cache().policy().name()); })
      .def_property_readonly("capacity", [](const online_cache& c) { return c.cache().capacity(); })
      .def_property_readonly("resident_count", [](const online_cache& c) { return c.cache().resident_count(); })
      .def_property_readonly(
          "stats", [](const online_cache& c) { return stats_dict(c.cache().stats()); },
          "Counts since construction or reset_stats(): accesses, hits, misses, admissions, rejections, overflows,\n"
          "evictions, prefetches, preloads, dropped, hit_bytes, demand_bytes, hit_ratio.");

  m.def(
      "replay_cache",
      [](const routing_trace& t, const std::string& policy, std::uint64_t capacity, bool per_layer,
         const std::string& unit, std::uint64_t expert_bytes, py::handle footprints, bool prefill, bool decode,
         bool reset_between_requests) {
        const auto cc = make_config("replay_cache", t.info().num_layers, t.info().num_experts, capacity, per_layer,
                                    unit, expert_bytes, footprints);
        const auto pc = policy_by_name(policy);
        const auto rc = replay_config("replay_cache", prefill, decode, reset_between_requests);
        cache_replay_result r;
        {
          py::gil_scoped_release unlock;
          r = replay_cache(t, cc, pc, rc);
        }
        py::dict d = stats_dict(r.stats);
        std::vector<std::uint64_t> acc, hits;
        for (const auto& l : r.layers) acc.push_back(l.accesses), hits.push_back(l.hits);
        d["layer_accesses"] = to_numpy<std::uint64_t>(acc);
        d["layer_hits"] = to_numpy<std::uint64_t>(hits);
        d["steps"] = r.steps;
        d["batches"] = r.batches;
        return d;
      },
      py::arg("trace"), py::arg("policy"), py::arg("capacity"), py::kw_only(), py::arg("per_layer") = false,
      py::arg("unit") = "experts", py::arg("expert_bytes") = 0, py::arg("footprints") = py::none(),
      py::arg("prefill") = true, py::arg("decode") = true, py::arg("reset_between_requests") = false,
      "Replays the trace's demand accesses (each batch's distinct experts) through a cache of the named policy,\n"
      "as `moepolicy replay` does; Belady is fed the future. Returns the cache statistics (as ExpertCache.stats)\n"
      "with per-layer accesses and hits (numpy) and the steps and batches replayed.");

  m.def(
      "lru_hit_curve",
      [](const routing_trace& t, bool per_layer, bool prefill, bool decode) {
        const auto rc = replay_config("lru_hit_curve", prefill, decode, false);
        const cache_shape shape{t.info().num_layers, t.info().num_experts,
                                per_layer ? capacity_scope::per_layer : capacity_scope::shared};
        hit_curve c;
        {
          py::gil_scoped_release unlock;
          c = lru_hit_curve(t, shape, rc);
        }
        py::dict d;
        d["accesses"] = c.accesses;
        d["cold_misses"] = c.cold_misses;
        d["hits"] = adopt(std::move(c.hits), {static_cast<py::ssize_t>(c.hits.size())});
        return d;
      },
      py::arg("trace"), py::kw_only(), py::arg("per_layer") = false, py::arg("prefill") = true,
      py::arg("decode") = true,
      "The hits of a demand LRU cache at every capacity c (hits[c], c = 0 .. pool slots) in one pass\n"
      "(Mattson's stack distances), with the accesses and cold misses.");

  m.def(
      "replay_accesses",
      [](const routing_trace& t, bool prefill, bool decode) {
        const auto rc = replay_config("replay_accesses", prefill, decode, false);
        std::vector<expert_key> keys;
        {
          py::gil_scoped_release unlock;
          keys = replay_accesses(t, rc);
        }
        std::vector<std::uint16_t> layers(keys.size()), experts(keys.size());
        for (std::size_t i = 0; i < keys.size(); ++i) layers[i] = keys[i].layer, experts[i] = keys[i].expert;
        const auto n = static_cast<py::ssize_t>(keys.size());
        return py::make_tuple(adopt(std::move(layers), {n}), adopt(std::move(experts), {n}));
      },
      py::arg("trace"), py::kw_only(), py::arg("prefill") = true, py::arg("decode") = true,
      "The demand access sequence of a replay, as (layer, expert) arrays: each kept batch's distinct experts\n"
      "in order of first selection.");
}

}  // namespace moepolicy::python
