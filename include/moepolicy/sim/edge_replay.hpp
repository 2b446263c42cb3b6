// moepolicy/sim/edge_replay.hpp — the importance-driven expert scheduler of Edge-MoE
// (§4.2, §5.1–5.4) and its baselines on the timed model of serving (sim/timeline.hpp): an
// edge GPU whose memory holds a cache of experts, a CPU that computes the others where they
// are, and the PCIe link between them, while B streams decode (sim/decode_streams.hpp).
//
// Machine. Four resources: the GPU, the CPU (its cores run one expert at a time, each on
// all of its tokens), `link to GPU` (expert loads, prefetches, and the CPU's results coming
// back) and `link to CPU` (activations going out). Experts live in host memory at FP16/BF16;
// a GPU copy exists only after a transfer brought it (sim/timed_cache.hpp: a hit is
// resident and landed; a prefetch that has not landed is a late prefetch — a partial
// stall, or a full one when it had not started).
//
// A decode step (decode only: Edge-MoE's TPOT, §2.1) of t tokens runs, per MoE layer, on the
// GPU attention over the streams' KV caches and the router (sim/forward_pass.hpp); at the
// router's output t0:
//   route     (ours) the expert-cache router (Alg. 1, §5.4's batch-shared alternatives)
//             substitutes low-score experts with experts whose copies are usable at t0;
//   look up   each distinct expert of the routed batch: usable → computed on the GPU at t0;
//             otherwise missing — a started prefetch that has not landed with only its
//             remaining bytes to load;
//   misses    by the system's rule: all loaded, all on the CPU, or split by Alg. 2's
//             two-pointer loop (or the best prefix of its order, `best_prefix`) between loads
//             over PCIe and CPU compute (§5.4, min max(T_load, T_CPU)), in the order of
//             `cost_balancer` (CPU time per load time descending) with each expert's own load
//             time; loads are demand transfers issued in that order (a started prefetch
//             becomes a late prefetch: the rest is loaded), each computed on the GPU once
//             landed; an expert sent to the CPU stops its prefetch; the CPU experts'
//             activations cross `link to CPU`, the CPU computes them one after another, and
//             the results cross back on `link to GPU` (first in, first out behind the
//             layer's loads);
//   ends      when the GPU and the returned results are done; then the shared experts.
// Prefetch (§5.2). After the layer's resident experts are computed (the moment §5.2's
// prediction is ready, computed on the GPU from their outputs), the predictor scores layer
// l+1 and its top-k experts are queued as background jobs that use only the link's idle time
// (they never delay a demand load, §5.2: "we strictly ensure that prefetching-related PCIe
// loads overlap with computation and do not interfere with expert loading for the current
// layer"). When layer l+1's router output arrives the queue is cleared: the jobs still on
// their way that layer l+1 does not need are stopped (the bytes they moved are wasted), and
// those it needs are late prefetches. The transition predictor (predict/transition_predictor.hpp)
// stands in for §5.2's gate-on-partial-hidden-states prediction, which a routing trace cannot
// drive; the oracle (the trace's next batch) bounds what a predictor can add.
//
// Caches start empty (a static placement starts with its set, loaded at startup and not
// charged), hold experts of every layer in one pool, and never admit an expert computed on
// the CPU (its weights never reach the GPU).
//
// Systems (`edge_system_config`) reconstruct the paper's baselines minimally (the driver
// states each): LRU fetch on miss (Mixtral-Offloading style), LFU over the whole run
// (MoE-Infinity-like), a static layer-contiguous placement with the rest on the CPU
// (llama.cpp-like), the HybriMoE-like EMA cache (cache/ema_score.hpp) with the two-pointer
// split, and Edge-MoE itself (router + prefetch + score-aware eviction with the shield,
// cache/score_aware.hpp + the two-pointer balancer).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/ema_score.hpp"
#include "moepolicy/cache/lfu.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/score_aware.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/route/expert_cache_router.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/forward_pass.hpp"
#include "moepolicy/sim/timed_cache.hpp"
#include "moepolicy/sim/timeline.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// What happens to the experts of a layer that are not on the GPU.
enum class edge_miss_rule : std::uint8_t {
  load_all,     ///< every one is loaded over PCIe
  cpu_all,      ///< every one runs on the CPU
  balance,      ///< Alg. 2's two-pointer split between loads and the CPU (§5.4)
  best_prefix,  ///< the best prefix of Alg. 2's order (never worse than `balance`)
};

/// "load_all", "cpu_all", "balance" or "best_prefix".
[[nodiscard]] constexpr std::string_view to_string(edge_miss_rule r) noexcept {
  switch (r) {
    case edge_miss_rule::load_all:
      return "load_all";
    case edge_miss_rule::cpu_all:
      return "cpu_all";
    case edge_miss_rule::balance:
      return "balance";
    case edge_miss_rule::best_prefix:
      return "best_prefix";
  }
  return "?";
}

/// The predictor of the one-layer-ahead prefetch.
enum class edge_predictor : std::uint8_t { none, transition, oracle };

/// One system to replay.
struct edge_system_config {
  std::string label;
  /// The cache's eviction policy (any but Belady's).
  any_eviction_config policy = lru_config{};
  edge_miss_rule misses = edge_miss_rule::load_all;
  /// Run the expert-cache router (Alg. 1) with threshold `alpha`.
  bool route = false;
  double alpha = 0.3;
  edge_predictor predictor = edge_predictor::none;
  /// A static placement: the first `cache_experts` experts in layer-major order are on the
  /// GPU from the start and nothing is ever loaded (pair with `cpu_all`).
  bool static_placement = false;
};

/// Options of `replay_edge`.
struct edge_replay_config {
  std::size_t streams = 1;
  stream_formation formation = stream_formation::automatic;
  /// Experts the GPU holds (one pool shared by all layers).
  std::uint64_t cache_experts = 0;
  forward_pass_config pass{};
  /// Tokens of a batch the transition predictor uses.
  std::uint32_t predictor_tokens = 64;
  /// Background chunk size of the timeline.
  bytes chunk_bytes = bytes{1} << 20;
  /// When set, each system's steps add their rows to it (a progress line).
  replay_progress* progress = nullptr;
  /// Batched steps a lockstep walk (`replay_edge_sweep`) prepares at once: each system
  /// runs the whole block before the next one does, so that its timeline and cache stay in
  /// the processor's caches (24 systems stepping one step at a time ran about 50% slower
  /// than one after another). Any value >= 1 gives the same results.
  std::size_t block_steps = 64;
  /// Threads a replay's systems share, the caller's included (at most one per system): the
  /// systems step through a block in parallel (one task per system, each on its own
  /// timeline and cache) while the next block's prediction tapes and price tables are
  /// recorded (one task per tape, handed out first) and the inputs of the block after it
  /// gathered (one task), so that a thread that finishes its system takes another's task
  /// rather than waiting for the tapes, and no block waits for its inputs on one thread.
  /// `replay_edge` of a trace also forms its streams on them. The results are the same for
  /// every value.
  std::size_t jobs = 1;
};

/// What one system did.
struct edge_system_result {
  edge_system_config config;
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  seconds token_seconds = 0.0;
  seconds run_seconds = 0.0;
  timed_cache_stats cache;
  cache_stats policy;
  /// The router's totals (all zero without routing).
  std::uint64_t substituted = 0;
  double original_mass = 0.0;
  double routed_mass = 0.0;
  resource_id gpu = 0, cpu = 0, to_gpu = 0, to_cpu = 0;
  ledger accounts;

  [[nodiscard]] seconds tpot() const noexcept {
    return tokens == 0 ? 0.0 : token_seconds / static_cast<double>(tokens);
  }
  [[nodiscard]] double throughput() const noexcept {
    return run_seconds > 0.0 ? static_cast<double>(tokens) / run_seconds : 0.0;
  }
  [[nodiscard]] double hit_ratio() const noexcept { return cache.hit_ratio(); }
  /// Whether no expert ever entered the GPU cache: every miss ran on the CPU and nothing
  /// was placed or prefetched, so a 0 hit ratio says the cache was bypassed, not that it
  /// missed.
  [[nodiscard]] bool cache_bypassed() const noexcept {
    return policy.admissions == 0 && policy.prefetches == 0 && policy.preloads == 0;
  }
  /// Router mass kept (1 without substitutions).
  [[nodiscard]] double mass_kept() const noexcept { return original_mass > 0.0 ? routed_mass / original_mass : 1.0; }
};

/// Everything `replay_edge` measured.
struct edge_replay_result {
  std::size_t streams = 0;
  stream_formation formation = stream_formation::whole_requests;
  std::size_t steps = 0;
  std::size_t tokens = 0;
  std::uint64_t cache_experts = 0;
  bytes expert_bytes = 0;
  std::vector<edge_system_result> systems;
};

/// Experts of `expert_size` bytes that fit the GPU's memory beside the non-expert weights, a
/// runtime reserve, `kv_tokens` tokens of KV cache and, in a hybrid model, the
/// linear-attention states of `sequences` sequences (0 when nothing fits).
template <class Gpu>
requires MemoryModel<Gpu>
[[nodiscard]] std::uint64_t experts_that_fit(const Gpu& gpu, const model_shape& shape, bytes reserve,
                                             std::uint64_t kv_tokens, const forward_pass_config& pass = {},
                                             std::uint64_t sequences = 1) {
  const bytes used = non_expert_weight_bytes(shape, pass) + reserve + kv_tokens * kv_bytes_per_token(shape, pass) +
                     sequences * linear_state_bytes_per_sequence(shape, pass);
  const bytes cap = gpu.capacity_bytes();
  if (used >= cap) return 0;
  return (cap - used) / gpu.footprint_bytes({0, 0}, fp16);
}

namespace detail {

/// What every system of a lockstep walk reads at one batched step: the streams' contexts,
/// the KV entries their attention reads and the step's batches in layer order (all
/// functions of the steps alone, made once per step), and the step's slot in its block
/// (where the tapes and the prices keep the step's predictions and prices).
struct edge_step_inputs {
  std::size_t slot = 0;
  std::span<const std::uint64_t> contexts;
  std::uint64_t reads = 0;
  std::span<const batch_view> batches;
  /// The step's batched rows (for the progress line).
  std::uint64_t rows = 0;
};

/// The one-layer-ahead predictions of one predictor, step by step. The transition
/// predictor and the oracle hear only the recorded routing (never a cache, a timeline or the
/// router's substitutions), so every system with the same predictor gets the same scores
/// and the same queue at every layer: a lockstep walk records them once per batched step
/// (`record`, before the systems run the step) and each such system reads layer l's queue
/// (`plan`) where it would have observed layer l and predicted layer l + 1.
class edge_prediction_tape {
 public:
  edge_prediction_tape(edge_predictor p, std::uint32_t predictor_tokens, std::size_t block, const decode_streams& d)
      : kind_(p),
        L_(d.batched().info().num_layers),
        E_(d.batched().info().num_experts),
        k_(d.batched().info().top_k),
        queue_(E_),
        scores_(E_, 0.0f),
        sizes_(block * L_, 0),
        plans_(block * L_ * k_) {
    if (p == edge_predictor::transition) {
      transition_.emplace(transition_config{.num_layers = static_cast<std::uint32_t>(L_),
                                            .num_experts = static_cast<std::uint32_t>(E_),
                                            .top_k = static_cast<std::uint32_t>(k_),
                                            .max_batch_tokens = predictor_tokens});
      transition_->begin_request();
    } else {
      oracle_.emplace(d.batched(), oracle_config{.horizon = 1, .prefill = false});
      oracle_->begin_request();
    }
  }

  [[nodiscard]] edge_predictor kind() const noexcept { return kind_; }

  /// Observes the batches of the next batched step (one per MoE layer, in layer order) and
  /// records in `slot` each one's queue for the next layer, as `edge_run` made them before.
  /// No allocation.
  void record(std::size_t slot, std::span<const batch_view> batches) noexcept {
    MOEPOLICY_ASSERT((slot + 1) * L_ <= sizes_.size());
    const std::size_t first = slot * L_;
    std::fill_n(sizes_.begin() + static_cast<std::ptrdiff_t>(first), L_, std::size_t{0});
    for (const batch_view& v : batches) {
      const std::size_t l = v.ref.layer;
      if (transition_) transition_->observe(v);
      if (oracle_) oracle_->observe(v);
      if (l + 1 >= L_) continue;
      bool any = false;
      if (transition_) any = transition_->predict(static_cast<layer_id>(l + 1), scores_);
      if (oracle_) any = oracle_->predict(static_cast<layer_id>(l + 1), scores_);
      if (!any) continue;
      queue_.plan(static_cast<layer_id>(l + 1), scores_, k_);
      const auto planned = queue_.pending();
      MOEPOLICY_ASSERT(planned.size() <= k_);
      std::copy(planned.begin(), planned.end(), plans_.begin() + static_cast<std::ptrdiff_t>((first + l) * k_));
      sizes_[first + l] = planned.size();
      queue_.clear();
    }
    if (transition_) transition_->end_step();
  }

  /// The prefetches planned for layer l + 1 after layer `l` of the step recorded in `slot`,
  /// best first (empty: nothing predicted).
  [[nodiscard]] std::span<const queued_expert> plan(std::size_t slot, std::size_t l) const noexcept {
    const std::size_t c = slot * L_ + l;
    return std::span<const queued_expert>(plans_).subspan(c * k_, sizes_[c]);
  }

 private:
  edge_predictor kind_;
  std::size_t L_, E_, k_;
  std::optional<transition_predictor> transition_;
  std::optional<oracle_predictor> oracle_;
  prefetch_queue queue_;
  std::vector<float> scores_;
  std::vector<std::size_t> sizes_;
  std::vector<queued_expert> plans_;
};

/// The prices every system on one GPU pays alike: the step's forward pass (dense layers,
/// each MoE layer's attention, router and shared experts, the output head), priced once per
/// step for all of them, and, for cost models whose prices do not read the key
/// (`key_independent_cost`), an expert's GPU and CPU compute time by token count and the
/// load of a whole expert, priced once. Each price is the call it replaces, made with the
/// same arguments.
template <DeviceCost Gpu, DeviceCost Cpu>
requires DenseComputeCost<Gpu>
class edge_prices {
 public:
  edge_prices(const Gpu& gpu, const Cpu& cpu, const model_shape& shape, const forward_pass_config& pass,
              std::size_t block, const decode_streams& d)
      : gpu_(gpu),
        cpu_(cpu),
        pass_(gpu, shape, pass),
        dense_layers_(shape.num_dense_layers),
        L_(d.batched().info().num_layers),
        dense_(block * dense_layers_, 0.0),
        attention_(block * L_, 0.0),
        shared_(block * L_, 0.0),
        router_(block, 0.0),
        head_(block, 0.0),
        expert_bytes_(gpu.footprint_bytes({0, 0}, fp16)),
        full_load_(gpu.transfer_seconds(expert_bytes_)) {
    // An expert's tokens in a layer: at most the tokens of a batched step.
    const std::size_t most = static_cast<std::size_t>(d.num_streams()) * d.rows_per_token();
    if constexpr (key_independent_cost<Gpu>) {
      for (std::size_t t = 0; t <= most; ++t) gpu_expert_.push_back(gpu.compute_seconds({0, 0}, fp16, t));
    }
    if constexpr (key_independent_cost<Cpu>) {
      for (std::size_t t = 0; t <= most; ++t) cpu_expert_.push_back(cpu.compute_seconds({0, 0}, fp16, t));
    }
  }

  [[nodiscard]] const Gpu& gpu() const noexcept { return gpu_; }

  /// Prices into `slot` a step of `n` tokens whose attention reads `reads` cached entries.
  void price_step(std::size_t slot, std::size_t n, std::uint64_t reads) {
    MOEPOLICY_ASSERT(slot < router_.size());
    for (std::uint32_t i = 0; i < dense_layers_; ++i) {
      dense_[slot * dense_layers_ + i] = pass_.dense_layer_seconds(i, n, reads, n);
    }
    for (std::size_t l = 0; l < L_; ++l) {
      const auto model_layer = static_cast<std::uint32_t>(dense_layers_ + l);
      attention_[slot * L_ + l] = pass_.attention_seconds(model_layer, n, reads, n);
      shared_[slot * L_ + l] = pass_.shared_experts_seconds(static_cast<layer_id>(l), n);
    }
    router_[slot] = pass_.router_seconds(n);
    head_[slot] = pass_.output_head_seconds(n);
  }

  [[nodiscard]] seconds dense(std::size_t slot, std::size_t i) const noexcept {
    return dense_[slot * dense_layers_ + i];
  }
  [[nodiscard]] seconds attention(std::size_t slot, std::size_t l) const noexcept { return attention_[slot * L_ + l]; }
  [[nodiscard]] seconds shared(std::size_t slot, std::size_t l) const noexcept { return shared_[slot * L_ + l]; }
  [[nodiscard]] seconds router(std::size_t slot) const noexcept { return router_[slot]; }
  [[nodiscard]] seconds head(std::size_t slot) const noexcept { return head_[slot]; }

  [[nodiscard]] seconds gpu_expert(expert_key k, std::size_t tokens) const noexcept {
    if (tokens < gpu_expert_.size()) return gpu_expert_[tokens];
    return gpu_.compute_seconds(k, fp16, tokens);
  }
  [[nodiscard]] seconds cpu_expert(expert_key k, std::size_t tokens) const noexcept {
    if (tokens < cpu_expert_.size()) return cpu_expert_[tokens];
    return cpu_.compute_seconds(k, fp16, tokens);
  }
  /// The load of `rest` bytes of an expert.
  [[nodiscard]] seconds load(bytes rest) const noexcept {
    return rest == expert_bytes_ ? full_load_ : gpu_.transfer_seconds(rest);
  }

 private:
  const Gpu& gpu_;
  const Cpu& cpu_;
  forward_pass_cost<Gpu> pass_;
  std::uint32_t dense_layers_;
  std::size_t L_;
  std::vector<seconds> dense_, attention_, shared_, router_, head_;
  bytes expert_bytes_;
  seconds full_load_;
  std::vector<seconds> gpu_expert_, cpu_expert_;
};

/// What a lockstep walk drives of one system's run: its steps (one virtual call per step,
/// not per access).
struct edge_run_steps {
  virtual ~edge_run_steps() = default;
  virtual void begin(edge_system_result& out) noexcept = 0;
  virtual void step(std::size_t s, const edge_step_inputs& in, edge_system_result& out) = 0;
  virtual void finish(edge_system_result& out) = 0;
};

/// One edge system's run on its own timeline (see the header comment), with a cache under
/// `Policy`: the policy type of the system's configuration where the replay knows it (LRU,
/// LFU, the EMA score, the score-aware policy: their events called directly instead of
/// through the variant's dispatch, same decisions), else `any_eviction_policy`.
template <DeviceCost Gpu, DeviceCost Cpu, EvictionPolicy Policy = any_eviction_policy>
requires DenseComputeCost<Gpu>
class edge_run final : public edge_run_steps {
 public:
  /// `tape`: the predictions of `sys`'s predictor (recorded for each step before `step`
  /// runs it), or none for a system that does not prefetch; `prices`: those of `gpu` and
  /// `cpu` (priced for each step before `step` runs it).
  edge_run(const Gpu& gpu, const Cpu& cpu, const model_shape& shape, const edge_system_config& sys,
           const edge_replay_config& cfg, std::uint64_t cache_experts, const decode_streams& d,
           const edge_prediction_tape* tape, const edge_prices<Gpu, Cpu>& prices)
      : cpu_dev_(cpu),
        prices_(prices),
        shape_(shape),
        sys_(sys),
        cfg_(cfg),
        L_(d.batched().info().num_layers),
        E_(d.batched().info().num_experts),
        k_(d.batched().info().top_k),
        tl_({.chunk_bytes = cfg.chunk_bytes}),
        gpu_(tl_.add_resource("gpu", resource_kind::processor)),
        cpu_(tl_.add_resource("cpu", resource_kind::processor)),
        to_gpu_(tl_.add_resource("link to GPU", resource_kind::link)),
        to_cpu_(tl_.add_resource("link to CPU", resource_kind::link)),
        cache_(tl_, to_gpu_, gpu, static_cast<std::uint32_t>(L_), static_cast<std::uint32_t>(E_), cache_experts,
               policy_of(sys), gpu.footprint_bytes({0, 0}, fp16)),
        tape_(tape),
        loads_(E_, 0),
        order_(E_, 0),
        sides_(E_, balance_side::load),
        order_of_(E_, 0),
        load_t_(E_, 0.0),
        cpu_t_(E_, 0.0),
        ratio_(E_, 0.0) {
    missing_.reserve(E_);
    ops_.reserve(E_);
    const std::size_t rows = static_cast<std::size_t>(d.num_streams()) * d.rows_per_token() * k_;
    ids_.resize(rows);
    weights_.resize(rows);
    if (sys.route) {
      router_.emplace(router_config{.num_experts = static_cast<std::uint32_t>(E_),
                                    .top_k = static_cast<std::uint32_t>(k_),
                                    .alpha = sys.alpha,
                                    .prefer_batch_shared = true});
    }
    MOEPOLICY_ASSERT((sys.predictor == edge_predictor::none) == (tape == nullptr));
    MOEPOLICY_ASSERT(tape == nullptr || tape->kind() == sys.predictor);
    if (sys.static_placement) {
      std::uint64_t placed = 0;
      for (std::size_t l = 0; l < L_ && placed < cache_experts; ++l) {
        for (std::size_t e = 0; e < E_ && placed < cache_experts; ++e) {
          if (cache_.preload(key(l, e))) ++placed;
        }
      }
    }
  }

  void begin(edge_system_result& out) noexcept override {
    out.gpu = gpu_;
    out.cpu = cpu_;
    out.to_gpu = to_gpu_;
    out.to_cpu = to_cpu_;
  }

  /// Runs batched step `s`, whose shared inputs are `in` (and whose predictions the tape
  /// holds).
  void step(std::size_t s, const edge_step_inputs& in, edge_system_result& out) override {
    const std::size_t n = in.contexts.size();
    const seconds start = now_;
    now_ = step(s, in, start, out);
    if (cfg_.progress != nullptr) cfg_.progress->add(in.rows);
    out.token_seconds += static_cast<double>(n) * (now_ - start);
    out.tokens += n;
    ++out.steps;
    cache_.end_step();
  }

  void finish(edge_system_result& out) override {
    out.run_seconds = now_;
    cache_.cancel_all_pending();
    tl_.drain();
    cache_.collect();
    out.cache = cache_.stats();
    out.policy = cache_.cache().stats();
    out.accounts = tl_.accounts();
  }

 private:
  [[nodiscard]] static expert_key key(std::size_t l, std::size_t e) noexcept {
    return {static_cast<layer_id>(l), static_cast<expert_id>(e)};
  }

  /// The system's policy configuration as `Policy` takes it.
  static const typename Policy::config_type& policy_of(const edge_system_config& sys) {
    if constexpr (std::is_same_v<Policy, any_eviction_policy>) {
      return sys.policy;
    } else {
      return std::get<typename Policy::config_type>(sys.policy);
    }
  }

  seconds step(std::size_t s, const edge_step_inputs& in, seconds t, edge_system_result& out) {
    const std::size_t n = in.contexts.size();
    const std::span<const batch_view> batches = in.batches;
    for (std::uint32_t i = 0; i < shape_.num_dense_layers; ++i) {
      t = tl_.run(t, gpu_, prices_.dense(in.slot, i), cost_kind::dense).end;
    }
    std::size_t bi = 0;
    for (std::size_t l = 0; l < L_; ++l) {
      t = tl_.run(t, gpu_, prices_.attention(in.slot, l), cost_kind::attention).end;
      t = tl_.run(t, gpu_, prices_.router(in.slot), cost_kind::dense).end;
      if (bi >= batches.size() || batches[bi].ref.layer != l) continue;
      t = layer(s, in.slot, l, t, batches[bi++], n, out);
    }
    return tl_.run(t, gpu_, prices_.head(in.slot), cost_kind::dense).end;
  }

  seconds layer(std::size_t s, std::size_t slot, std::size_t l, seconds t0, const batch_view& v, std::size_t tokens,
                edge_system_result& out) {
    tl_.settle(t0);
    cache_.collect();
    // Route with the copies usable now.
    batch_view routed = v;
    if (router_) {
      const std::size_t m = v.experts.size();
      const route_result r = router_->route(
          v, [&](expert_id e) { return cache_.state(key(l, e), t0) == copy_state::usable; },
          std::span<expert_id>(ids_).first(m), std::span<float>(weights_).first(m));
      out.substituted += r.substituted;
      out.original_mass += r.original_mass;
      out.routed_mass += r.routed_mass;
      routed.experts = std::span<const expert_id>(ids_).first(m);
      routed.weights = std::span<const float>(weights_).first(m);
    }
    cache_.begin_layer(routed);
    for (expert_id e : std::span<const expert_id>(order_).first(distinct_)) loads_[e] = 0;
    distinct_ = 0;
    for (expert_id e : routed.experts) {
      if (loads_[e]++ == 0) order_[distinct_++] = e;
    }
    // Hits are served; the others are missing, a started prefetch with only its remaining
    // bytes to load.
    ops_.clear();
    missing_.clear();
    for (expert_id e : std::span<const expert_id>(order_).first(distinct_)) {
      const expert_key k = key(l, e);
      const bytes rest = cache_.remaining(k, t0);
      if (rest == 0 && cache_.state(k, t0) == copy_state::usable) {
        ops_.push_back({e, cache_.serve(k, t0).ready});
        continue;
      }
      missing_.push_back({k, loads_[e], prices_.load(rest), prices_.cpu_expert(k, loads_[e])});
    }
    split();
    // Loads, in the split's order (largest CPU time per load time first), so that they
    // stream while the GPU computes the hits.
    for (const std::size_t i : std::span<const std::size_t>(order_of_).first(missing_.size())) {
      if (sides_[i] != balance_side::load) continue;
      const timed_access a = cache_.serve(missing_[i].key, t0);
      ops_.push_back({missing_[i].key.expert, a.ready});
    }
    // The GPU: hits first, then the rest as their weights land.
    detail::stable_insertion_sort(ops_, [](const op& a, const op& c) { return a.ready < c.ready; });
    seconds end = t0, resident_end = t0;
    for (const op& o : ops_) {
      const seconds done = tl_.run(o.ready, gpu_, prices_.gpu_expert(key(l, o.e), loads_[o.e]), cost_kind::expert).end;
      end = std::max(end, done);
      if (o.ready <= t0) resident_end = std::max(resident_end, done);
    }
    const seconds shared = prices_.shared(slot, l);
    if (shared > 0.0) {
      end = std::max(end, tl_.run(t0, gpu_, shared, cost_kind::dense).end);
      resident_end = std::max(resident_end, end);
    }
    // The CPU: activations out, its experts one after another, results back.
    std::uint64_t cpu_tokens = 0;
    for (std::size_t i = 0; i < missing_.size(); ++i) {
      if (sides_[i] != balance_side::cpu) continue;
      const expert_key k = missing_[i].key;
      if (cache_.pending(k)) cache_.cancel_pending(k.layer, [&](expert_id e) { return e != k.expert; });
      cache_.serve_elsewhere(k);
      cpu_tokens += missing_[i].tokens;
    }
    if (cpu_tokens > 0) {
      const std::uint64_t crossing = std::min<std::uint64_t>(cpu_tokens, tokens);
      const bytes act =
          static_cast<bytes>(static_cast<double>(crossing) * static_cast<double>(shape_.hidden_size) * 2.0);
      const seconds half = 0.5 * cpu_dev_.activation_transfer_seconds(crossing);
      const std::array<hop, 1> outward{{{to_cpu_, half, act}}};
      seconds t = tl_.transfer(t0, outward, std::max<bytes>(act, 1), cost_kind::activation).landed();
      for (std::size_t i = 0; i < missing_.size(); ++i) {
        if (sides_[i] != balance_side::cpu) continue;
        t = tl_.run(t, cpu_, missing_[i].cpu_seconds, cost_kind::expert).end;
      }
      const std::array<hop, 1> back{{{to_gpu_, half, act}}};
      end = std::max(end, tl_.transfer(t, back, std::max<bytes>(act, 1), cost_kind::activation).landed());
    }
    cache_.end_layer(static_cast<layer_id>(l));
    // §5.2's queue for this layer is cleared: its true routing is known.
    cache_.cancel_pending(static_cast<layer_id>(l), [](expert_id) { return false; });
    // The predictor saw the recorded routing (the tape); then layer l+1 is prefetched.
    const std::size_t next = l + 1;
    if (tape_ != nullptr && next < L_) {
      const int prio = static_cast<int>(s * L_ + next);
      for (const queued_expert& q : tape_->plan(slot, l))
        static_cast<void>(cache_.prefetch(q.key, q.score, resident_end, prio));
    }
    return end;
  }

  struct op {
    expert_id e;
    seconds ready;
  };
  /// An expert not usable on the GPU: its tokens, and the time to load what it lacks or to
  /// compute it on the CPU.
  struct item {
    expert_key key;
    std::uint32_t tokens = 0;
    seconds load_seconds = 0.0;
    seconds cpu_seconds = 0.0;
  };

  /// Splits `missing_` between loads and the CPU by the system's rule, as
  /// `cost_balancer` does (order: CPU time per load time descending, then tokens, then
  /// input order) but with each item's own load time, so that a started prefetch enters with
  /// the time of its remaining bytes. The split's arrays hold one entry per expert of a
  /// layer from construction; the first `missing_.size()` are this layer's.
  void split() {
    const std::size_t n = missing_.size();
    MOEPOLICY_ASSERT(n <= E_);
    for (std::size_t i = 0; i < n; ++i) {
      sides_[i] = balance_side::load;
      order_of_[i] = i;
      load_t_[i] = missing_[i].load_seconds;
      cpu_t_[i] = missing_[i].cpu_seconds;
      // CPU time per load time, each item's once (not per comparison).
      ratio_[i] = load_t_[i] > 0.0  ? cpu_t_[i] / load_t_[i]
                  : cpu_t_[i] > 0.0 ? std::numeric_limits<double>::infinity()
                                    : 0.0;
    }
    const std::span<std::size_t> order = std::span<std::size_t>(order_of_).first(n);
    const std::span<const double> load_t = std::span<const double>(load_t_).first(n);
    const std::span<const double> cpu_t = std::span<const double>(cpu_t_).first(n);
    const std::span<balance_side> sides = std::span<balance_side>(sides_).first(n);
    // The order decides which items load first; when every item runs on the CPU nothing
    // loads and the CPU takes them in input order, so no order is needed. The comparison
    // is a total order (ties end on the index), so the result is unique, whichever sort
    // gives it: insertion for the few items of a layer, else `std::sort`.
    if (sys_.misses != edge_miss_rule::cpu_all) {
      const auto before = [&](std::size_t a, std::size_t b) {
        const double ra = ratio_[a], rb = ratio_[b];
        if (ra != rb) return ra > rb;
        if (missing_[a].tokens != missing_[b].tokens) return missing_[a].tokens > missing_[b].tokens;
        return a < b;
      };
      if (n <= insertion_sort_max) {
        detail::stable_insertion_sort(order, before);
      } else {
        std::sort(order.begin(), order.end(), before);
      }
    }
    switch (sys_.misses) {
      case edge_miss_rule::load_all:
        break;
      case edge_miss_rule::cpu_all:
        std::fill(sides.begin(), sides.end(), balance_side::cpu);
        break;
      case edge_miss_rule::balance:
        static_cast<void>(detail::two_pointer_split(order, load_t, cpu_t, sides));
        break;
      case edge_miss_rule::best_prefix: {
        double cpu_rest = 0.0;
        for (double c : cpu_t) cpu_rest += c;
        double load = 0.0, best = cpu_rest;
        std::size_t best_j = 0;
        for (std::size_t j = 1; j <= n; ++j) {
          const std::size_t i = order[j - 1];
          load += load_t[i];
          cpu_rest -= cpu_t[i];
          if (std::max(load, cpu_rest) < best) best = std::max(load, cpu_rest), best_j = j;
        }
        for (std::size_t p = 0; p < n; ++p) sides[order[p]] = p < best_j ? balance_side::load : balance_side::cpu;
        break;
      }
    }
  }
  /// The most items `split` orders by insertion.
  static constexpr std::size_t insertion_sort_max = 16;

  const Cpu& cpu_dev_;
  const edge_prices<Gpu, Cpu>& prices_;
  const model_shape& shape_;
  const edge_system_config& sys_;
  const edge_replay_config& cfg_;
  std::size_t L_, E_, k_;
  timeline tl_;
  resource_id gpu_, cpu_, to_gpu_, to_cpu_;
  timed_expert_cache<Gpu, Policy> cache_;
  std::optional<expert_cache_router> router_;
  const edge_prediction_tape* tape_;
  seconds now_ = 0.0;
  std::vector<std::uint32_t> loads_;
  std::vector<expert_id> order_;  // the layer's distinct experts, first seen first: the first `distinct_`
  std::size_t distinct_ = 0;
  std::vector<item> missing_;
  std::vector<balance_side> sides_;
  std::vector<std::size_t> order_of_;
  std::vector<double> load_t_, cpu_t_, ratio_;
  std::vector<op> ops_;
  std::vector<expert_id> ids_;
  std::vector<float> weights_;
};

/// The run of `sys`: with its policy's own type for LRU, LFU, the EMA score and the
/// score-aware policy, else (or when `typed` is false) with `any_eviction_policy`.
template <DeviceCost Gpu, DeviceCost Cpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] std::unique_ptr<edge_run_steps> make_edge_run(const Gpu& gpu, const Cpu& cpu, const model_shape& shape,
                                                            const edge_system_config& sys,
                                                            const edge_replay_config& cfg, std::uint64_t cache_experts,
                                                            const decode_streams& d, const edge_prediction_tape* tape,
                                                            const edge_prices<Gpu, Cpu>& prices, bool typed = true) {
  const auto make = [&]<class Policy>(std::type_identity<Policy>) -> std::unique_ptr<edge_run_steps> {
    return std::make_unique<edge_run<Gpu, Cpu, Policy>>(gpu, cpu, shape, sys, cfg, cache_experts, d, tape, prices);
  };
  if (typed) {
    if (std::holds_alternative<lru_config>(sys.policy)) return make(std::type_identity<lru_policy>{});
    if (std::holds_alternative<lfu_config>(sys.policy)) return make(std::type_identity<lfu_policy>{});
    if (std::holds_alternative<ema_score_config>(sys.policy)) return make(std::type_identity<ema_score_policy>{});
    if (std::holds_alternative<score_aware_config>(sys.policy)) return make(std::type_identity<score_aware_policy>{});
  }
  return make(std::type_identity<any_eviction_policy>{});
}

}  // namespace detail

namespace detail {

/// `replay_edge`'s checks of the trace's shape and of the systems.
inline void check_edge_systems(const trace_info& info, const model_shape& shape,
                               std::span<const edge_system_config> systems, std::string_view fn) {
  require_trace_matches(info.num_layers, info.num_experts, shape, fn);
  for (const auto& s : systems) {
    if (std::holds_alternative<belady_config>(s.policy)) {
      throw_invalid(fn, "system \"" + s.label + "\": Belady's policy needs the future and cannot run timed");
    }
    if (s.route && !(s.alpha >= 0.0 && s.alpha <= 1.0)) {
      throw_invalid(fn, "system \"" + s.label + "\": alpha must be in [0, 1]", s.alpha);
    }
  }
}

}  // namespace detail

/// One point of `replay_edge_sweep`: a GPU, the experts its cache holds and the systems
/// replayed there.
template <class Gpu>
struct edge_sweep_point {
  /// The GPU (not owned; it must outlive the call).
  const Gpu* gpu = nullptr;
  /// Experts the GPU holds (one pool shared by all layers).
  std::uint64_t cache_experts = 0;
  std::span<const edge_system_config> systems;
};

namespace detail {

/// Every system of every point in one walk over the batched steps of `d` (see
/// `replay_edge_sweep`); `typed`: each cache under its configuration's policy type where
/// `make_edge_run` knows it (false: all under `any_eviction_policy`, the same results).
template <DeviceCost Gpu, DeviceCost Cpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] std::vector<edge_replay_result> replay_edge_points(const decode_streams& d, const Cpu& cpu,
                                                                 const model_shape& shape,
                                                                 std::span<const edge_sweep_point<Gpu>> points,
                                                                 const edge_replay_config& cfg, bool typed = true) {
  std::vector<edge_replay_result> results(points.size());
  std::size_t systems = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    edge_replay_result& r = results[i];
    r.streams = d.num_streams();
    r.formation = d.formation();
    r.steps = d.num_steps();
    r.tokens = d.num_tokens();
    r.cache_experts = points[i].cache_experts;
    r.expert_bytes = points[i].gpu->footprint_bytes({0, 0}, fp16);
    r.systems.reserve(points[i].systems.size());
    systems += points[i].systems.size();
  }
  // The runs, their results (stable: every `systems` vector is reserved) and one tape per
  // predictor in use.
  std::vector<std::unique_ptr<edge_run_steps>> runs;
  std::vector<edge_system_result*> outs;
  std::vector<std::unique_ptr<edge_prediction_tape>> tapes;
  std::vector<std::unique_ptr<edge_prices<Gpu, Cpu>>> prices;
  runs.reserve(systems);
  outs.reserve(systems);
  // On more than one thread the inputs, the tapes and the price tables hold three blocks:
  // the one after next is prepared and the next recorded while the systems run the current
  // one. A block is at most the walk (room for steps that never come is not reserved).
  const std::size_t block = std::max<std::size_t>(1, std::min(cfg.block_steps, d.num_steps()));
  const std::size_t blocks_held = std::min(cfg.jobs, systems) > 1 ? 3 : 1;
  for (std::size_t i = 0; i < points.size(); ++i) {
    for (const edge_system_config& sc : points[i].systems) {
      edge_system_result& out = results[i].systems.emplace_back();
      out.config = sc;
      const edge_prediction_tape* tape = nullptr;
      if (sc.predictor != edge_predictor::none) {
        const auto it =
            std::find_if(tapes.begin(), tapes.end(), [&](const auto& t) { return t->kind() == sc.predictor; });
        tape = it != tapes.end() ? it->get()
                                 : tapes
                                       .emplace_back(std::make_unique<edge_prediction_tape>(
                                           sc.predictor, cfg.predictor_tokens, blocks_held * block, d))
                                       .get();
      }
      const auto pi =
          std::find_if(prices.begin(), prices.end(), [&](const auto& q) { return &q->gpu() == points[i].gpu; });
      const edge_prices<Gpu, Cpu>& price = pi != prices.end()
                                               ? **pi
                                               : *prices.emplace_back(std::make_unique<edge_prices<Gpu, Cpu>>(
                                                     *points[i].gpu, cpu, shape, cfg.pass, blocks_held * block, d));
      runs.push_back(
          make_edge_run(*points[i].gpu, cpu, shape, sc, cfg, points[i].cache_experts, d, tape, price, typed));
      outs.push_back(&out);
    }
  }
  // Lockstep by blocks of steps: each step's inputs, predictions and prices once, then
  // every system's passes of the block, each on its own timeline and cache. On one thread
  // each block is prepared, recorded, then run. On more, the first block is prepared and
  // recorded (the tapes and price tables, each one task, in parallel) while the second is
  // prepared, then for each block one batch of tasks prepares the block after next (into
  // the third of three sets; its steps' slots in the tapes are the third part), records the
  // next block (these first tasks are handed out first: a tape is a long task) and runs the
  // current one (a task per system): a set or slot being written is never read, and no
  // block's inputs are gathered on the caller's thread between batches.
  const routing_trace& b = d.batched();
  const std::size_t L = b.info().num_layers;
  // A block's inputs; the vectors never grow past their reservations, so the spans into
  // them stay valid.
  struct block_inputs {
    std::vector<std::uint64_t> contexts;
    std::vector<batch_view> views;
    std::vector<edge_step_inputs> inputs;
    std::vector<std::size_t> context_at, view_at;
  };
  std::vector<block_inputs> sets(blocks_held);
  for (block_inputs& set : sets) {
    set.contexts.reserve(block * d.num_streams());
    set.views.reserve(block * L);
    set.inputs.resize(block);
    set.context_at.resize(block + 1);
    set.view_at.resize(block + 1);
  }
  // Block `k`'s inputs (from step `s0`, `n` steps) into its set, slots from `(k % blocks_held) × block`.
  const auto prepare = [&](std::size_t k, std::size_t s0, std::size_t n) {
    block_inputs& set = sets[k % blocks_held];
    set.contexts.clear();
    set.views.clear();
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t s = s0 + i;
      edge_step_inputs& in = set.inputs[i];
      in = edge_step_inputs{};
      in.slot = (k % blocks_held) * block + i;
      set.context_at[i] = set.contexts.size();
      for (const stream_token& tk : d.tokens(s)) set.contexts.push_back(tk.context);
      set.view_at[i] = set.views.size();
      const auto batches = b.batches_of(b.steps()[s]);
      for (const batch_ref& ref : batches) in.rows += ref.num_rows;
      // The batches a pass visits: one per MoE layer, in layer order.
      std::size_t bi = 0;
      for (std::size_t l = 0; l < L; ++l) {
        if (bi >= batches.size() || batches[bi].layer != l) continue;
        set.views.push_back(b.view(batches[bi++]));
      }
    }
    set.context_at[n] = set.contexts.size();
    set.view_at[n] = set.views.size();
    for (std::size_t i = 0; i < n; ++i) {
      edge_step_inputs& in = set.inputs[i];
      in.contexts = std::span<const std::uint64_t>(set.contexts)
                        .subspan(set.context_at[i], set.context_at[i + 1] - set.context_at[i]);
      in.reads = decode_cached_reads(in.contexts);
      in.batches = std::span<const batch_view>(set.views).subspan(set.view_at[i], set.view_at[i + 1] - set.view_at[i]);
    }
  };
  const std::size_t recorders = tapes.size() + prices.size();
  // Recorder `t` (a tape, then a price table) over block `k`'s `n` prepared steps.
  const auto record = [&](std::size_t t, std::size_t k, std::size_t n) {
    const block_inputs& set = sets[k % blocks_held];
    for (std::size_t i = 0; i < n; ++i) {
      const edge_step_inputs& in = set.inputs[i];
      if (t < tapes.size()) {
        tapes[t]->record(in.slot, in.batches);
      } else {
        prices[t - tapes.size()]->price_step(in.slot, in.contexts.size(), in.reads);
      }
    }
  };
  const auto run = [&](std::size_t r, std::size_t k, std::size_t s0, std::size_t n) {
    const block_inputs& set = sets[k % blocks_held];
    for (std::size_t i = 0; i < n; ++i) runs[r]->step(s0 + i, set.inputs[i], *outs[r]);
  };
  for (std::size_t r = 0; r < runs.size(); ++r) runs[r]->begin(*outs[r]);
  task_pool pool(std::max<std::size_t>(1, std::min(cfg.jobs, runs.size())));
  const std::size_t steps = d.num_steps();
  const auto block_size = [&](std::size_t s0) { return s0 < steps ? std::min(block, steps - s0) : std::size_t{0}; };
  // One batch of tasks: records block `k` (prepared before; its recorders first), with three
  // blocks held gathers block k + 1, and with `run_previous` runs block k − 1.
  const auto batch = [&](std::size_t k, bool run_previous) {
    const std::size_t s0 = k * block, n = block_size(s0);
    const std::size_t after = blocks_held == 3 ? block_size(s0 + block) : 0;
    const std::size_t ahead = n > 0 ? recorders : 0, gather = after > 0 ? 1 : 0;
    pool.for_each(ahead + gather + (run_previous ? runs.size() : 0), [&](std::size_t i) {
      if (i < ahead) {
        record(i, k, n);
      } else if (i < ahead + gather) {
        prepare(k + 1, s0 + block, after);
      } else {
        run(i - ahead - gather, k - 1, s0 - block, block_size(s0 - block));
      }
    });
  };
  if (steps > 0) {
    prepare(0, 0, block_size(0));
    batch(0, false);
  }
  if (blocks_held == 3) {
    for (std::size_t k = 1; (k - 1) * block < steps; ++k) batch(k, true);
  } else {
    for (std::size_t k = 0, s0 = 0; s0 < steps; ++k, s0 += block) {
      const std::size_t n = block_size(s0), next = block_size(s0 + block);
      pool.for_each(runs.size(), [&](std::size_t r) { run(r, k, s0, n); });
      if (next > 0) {
        prepare(k + 1, s0 + block, next);
        batch(k + 1, false);
      }
    }
  }
  for (std::size_t r = 0; r < runs.size(); ++r) runs[r]->finish(*outs[r]);
  return results;
}

}  // namespace detail

/// `replay_edge` at several points (a GPU, a cache size and its systems each) on the decode
/// streams `d` (`make_decode_streams`): one result per point, each identical to
/// `replay_edge(d, *p.gpu, cpu, shape, p.systems, cfg)` with `p.cache_experts`
/// (`cfg.cache_experts`, `cfg.streams` and `cfg.formation` are not read). Every system runs
/// on its own timeline and cache, but all of them walk the steps in lockstep, so each step's
/// contexts, batches and predictions (one tape per predictor: it hears only the recorded
/// routing) are made once for every system.
///
/// Throws: as `replay_edge`, naming `replay_edge_sweep`; also when a point has no GPU.
/// Complexity: O(systems × the timed replay of `d`'s steps); `d` is not copied.
template <DeviceCost Gpu, DeviceCost Cpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] std::vector<edge_replay_result> replay_edge_sweep(const decode_streams& d, const Cpu& cpu,
                                                                const model_shape& shape,
                                                                std::span<const edge_sweep_point<Gpu>> points,
                                                                const edge_replay_config& cfg = {}) {
  constexpr std::string_view fn = "replay_edge_sweep";
  if (cfg.block_steps == 0) detail::throw_invalid(fn, "block_steps must be >= 1", cfg.block_steps);
  if (cfg.jobs == 0) detail::throw_invalid(fn, "jobs must be >= 1", cfg.jobs);
  for (std::size_t i = 0; i < points.size(); ++i) {
    if (points[i].gpu == nullptr) detail::throw_invalid(fn, "point " + std::to_string(i) + " has no GPU");
    detail::check_edge_systems(d.batched().info(), shape, points[i].systems, fn);
  }
  if (points.empty())
    detail::require_trace_matches(d.batched().info().num_layers, d.batched().info().num_experts, shape, fn);
  return detail::replay_edge_points(d, cpu, shape, points, cfg);
}

/// Replays the decode streams `d` (`make_decode_streams`) through each edge system, on `gpu`
/// and `cpu` for a model of `shape`: the same as `replay_edge` on the trace `d` was formed
/// from with `cfg.streams` and `cfg.formation` equal to `d`'s, which this overload does not
/// read. A caller that replays the same streams many times (several machines, cache sizes
/// or system sets) forms them once, or runs them in one `replay_edge_sweep`.
///
/// Throws: `invalid_argument` naming `replay_edge` when `d`'s layers or experts differ from
/// the shape's MoE layers and experts, the shape does not describe its forward pass, a
/// system uses Belady's policy, routes a trace of fewer than 2 experts or has an `alpha`
/// outside [0, 1], or `cfg.block_steps` or `cfg.jobs` is 0; `std::system_error` when a
/// thread cannot start.
/// Complexity: O(systems × the timed replay of `d`'s steps); `d` is not copied.
template <DeviceCost Gpu, DeviceCost Cpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] edge_replay_result replay_edge(const decode_streams& d, const Gpu& gpu, const Cpu& cpu,
                                             const model_shape& shape, std::span<const edge_system_config> systems,
                                             const edge_replay_config& cfg = {}) {
  detail::check_edge_systems(d.batched().info(), shape, systems, "replay_edge");
  if (cfg.block_steps == 0) detail::throw_invalid("replay_edge", "block_steps must be >= 1", cfg.block_steps);
  if (cfg.jobs == 0) detail::throw_invalid("replay_edge", "jobs must be >= 1", cfg.jobs);
  const edge_sweep_point<Gpu> point{&gpu, cfg.cache_experts, systems};
  return std::move(detail::replay_edge_points(d, cpu, shape, std::span(&point, 1), cfg).front());
}

/// Replays the decode steps of `trace` as B concurrent streams through each edge system, on
/// `gpu` and `cpu` for a model of `shape` (the streams formed by `make_decode_streams` with
/// `cfg.streams` and `cfg.formation`, then the overload above).
///
/// Throws: `invalid_argument` naming `replay_edge` when the trace's layers or experts differ
/// from the shape's MoE layers and experts, the shape does not describe its forward pass, a
/// system uses Belady's policy, routes a trace of fewer than 2 experts or has an `alpha`
/// outside [0, 1], or `cfg.block_steps` or `cfg.jobs` is 0; what the stream formation throws;
/// `std::system_error` when a thread cannot start.
template <DeviceCost Gpu, DeviceCost Cpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] edge_replay_result replay_edge(const routing_trace& trace, const Gpu& gpu, const Cpu& cpu,
                                             const model_shape& shape, std::span<const edge_system_config> systems,
                                             const edge_replay_config& cfg = {}) {
  detail::check_edge_systems(trace.info(), shape, systems, "replay_edge");
  if (cfg.jobs == 0) detail::throw_invalid("replay_edge", "jobs must be >= 1", cfg.jobs);
  const decode_streams d = make_decode_streams(trace, {.streams = cfg.streams, .formation = cfg.formation}, cfg.jobs);
  edge_replay_result r = replay_edge(d, gpu, cpu, shape, systems, cfg);
  r.streams = cfg.streams;
  return r;
}

}  // namespace moepolicy
