// moepolicy/sim/offload_replay.hpp — CXL-MoE and its baselines on the timed model of serving
// (sim/timeline.hpp): a GPU that keeps a cache of experts in HBM and fetches the others from
// the memory that holds every expert — a CXL expander, or host DRAM behind PCIe — while B
// concurrent streams decode (sim/decode_streams.hpp).
//
// Machine. A GPU (a `DeviceCost` that is also `DenseComputeCost`) and the link from the
// expert memory, per system (`offload_system_config::link`). Full duplex (CXL-MoE §3:
// "CXL's full-duplex channels"): two link resources, `link in` carrying weights to the GPU
// and `link out` carrying the KV-cache entries each layer writes to the expert memory (the
// write traffic CXL-MoE §4 observed on its bus); half duplex (the host's DDR bus as
// CXL-MoE §1 describes CPU offloading): one resource `link` carries both, so the writes take
// link time from the fetches. Every expert lives in the expert memory at FP16; a GPU copy
// exists only after a transfer brought it (sim/timed_cache.hpp holds the hit definition: a
// hit is resident and landed).
//
// A forward pass of t tokens runs on the GPU the dense layers, then per MoE layer attention
// over the KV cache and the router (sim/forward_pass.hpp) — after which the layer's KV
// entries are written out, when `kv_writes` — then the layer's experts: each distinct
// expert the batch selected is served by the timed cache at the router's output t0 (hits at
// once; misses and late prefetches after their demand transfer, issued in order of first
// selection, first in first out on the link) and computed on the GPU on its tokens, hits
// first; then the shared experts; the output head ends the pass. Background prefetches are
// placed into the link's idle time up to each layer's t0 (`timeline::settle`).
//
// Passes. Each batched decode step is one pass of its tokens. A sequence that starts at its
// request's first decode token, when the request has a recorded prefill and `prefills` is
// on, first runs its prefill as a pass of the prompt (between decode steps, the other
// streams waiting, as a server without chunked prefill does); TTFT is that pass's end minus
// the end of the decode step before it.
//
// Systems (`offload_system_kind`):
//   hbm_only  every expert in HBM (CXL-MoE §4's upper bound): nothing crosses the link. It
//             needs HBM for the non-expert weights, every expert and the KV cache; when that
//             does not fit it reports `does_not_fit` (the paper's OOM).
//   cached    an HBM cache of `cache_experts` experts under an eviction policy, fetching
//             over the link, with a predictor feeding prefetches:
//     decode-stage prefetch (CXL-MoE §3): after each layer l of a pass, each continuing
//       stream's predictor (the frequency model, cf. `short_horizon_predictor`, or the
//       Markov model, `markov_predictor`; or the trace's own future, `oracle`) scores layer
//       l's experts for its next n tokens from its last m; the batch's score of e is the
//       chance that some stream needs it, 1 − Π_s (1 − score_s(e)). The `depth` best
//       (default n · top-k per stream, at most the layer's experts) are prefetched for layer
//       l of the next pass, nearer layers first; a prefetch still on its way for layer l
//       that the new prediction drops is stopped. The scores also flag experts for the
//       policy (`hint`) before the layer's next accesses (prediction-gated admission).
//     prefill-stage prefetch (CXL-MoE §3), when `prefill` is on: the paper's classifier
//       reads the prompt's pooled embedding; the traces hold routing, not embeddings, so a
//       STAND-IN takes its place — the prefill's own activation counts (known here when the
//       prompt arrives): at the start of the prefill pass the `prefill_depth` most activated
//       experts of every layer are prefetched, scored 1 − (1 − share)^n.
// The CXL-MoE system is `cached` over `presets::cxl2_x16`, full duplex, with the sticky LRU
// (cache/sticky_lru.hpp) and the frequency model at m = 8, n = 2 (`cxl_moe_system`); the
// CPU-offload baseline of CXL-MoE §4 (fMoE-like) is `cached` over host DRAM
// (`presets::host_pcie5_effective`), half duplex, LRU, with a long-horizon frequency model
// (m = 64 past tokens, n = 16 ahead, the k best per stream) and the same prefill stand-in
// (`cpu_offload_system`).
//
// Measures. TPOT: the mean over decoded tokens of the time from the end of the sequence's
// previous token (the start of its step, for a sequence's first token) to the end of its
// step — prefill passes that interrupt decoding count for every waiting stream. Throughput:
// decoded tokens over the run's time (first step start to last step end, prefills
// included). Hit ratio, late prefetches, stalls (the GPU's idle time waiting for weights),
// and bytes per link and purpose from the ledger.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
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

#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/cache/lru.hpp"
#include "moepolicy/cache/sticky_lru.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/predict/markov_predictor.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/prefetch_queue.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/sim/forward_pass.hpp"
#include "moepolicy/sim/timed_cache.hpp"
#include "moepolicy/sim/timeline.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// The systems `replay_offload` compares (see the header).
enum class offload_system_kind : std::uint8_t { hbm_only, cached };

/// Whether reads and writes of the expert memory have a link direction each.
enum class link_duplex : std::uint8_t { full, half };

/// The predictor of a cached system's decode-stage prefetch.
enum class offload_predictor : std::uint8_t { none, frequency, markov, oracle };

/// "none", "frequency", "markov" or "oracle".
[[nodiscard]] constexpr std::string_view to_string(offload_predictor p) noexcept {
  switch (p) {
    case offload_predictor::none:
      return "none";
    case offload_predictor::frequency:
      return "frequency";
    case offload_predictor::markov:
      return "markov";
    case offload_predictor::oracle:
      return "oracle";
  }
  return "?";
}

/// How a cached system prefetches.
struct offload_prefetch_config {
  offload_predictor predictor = offload_predictor::frequency;
  /// m, past tokens of a stream the predictor reads (frequency, Markov).
  std::uint32_t history = short_horizon_config{}.history;
  /// n, future tokens a prediction covers (the oracle: future passes).
  std::uint32_t horizon = short_horizon_config{}.horizon;
  /// Experts prefetched per layer and pass (0: n · top-k per predicting stream, at most the
  /// layer's experts).
  std::size_t depth = 0;
  /// Weight of each older token relative to the next newer one, in (0, 1].
  double recency_decay = 1.0;
  /// The prefill-stage prefetch with the prefill-counts stand-in (see the header).
  bool prefill = false;
  /// Experts per layer it prefetches (0: top-k).
  std::size_t prefill_depth = 0;
};

/// One system to replay.
struct offload_system_config {
  std::string label;
  offload_system_kind kind = offload_system_kind::cached;
  /// The path from the expert memory to the GPU (bandwidth per direction, latency per
  /// transfer).
  link_spec link = presets::cxl2_x16;
  link_duplex duplex = link_duplex::full;
  /// The cache's eviction policy (any but Belady's, which needs the future).
  any_eviction_config policy = sticky_lru_config{};
  offload_prefetch_config prefetch{};
};

/// CXL-MoE as §3 describes it: a CXL 2.0 ×16 expander, full duplex, the sticky LRU with
/// prediction-gated admission (sticky for n steps), the frequency model at m = 8, n = 2 and
/// the prefill-stage prefetch stand-in.
[[nodiscard]] inline offload_system_config cxl_moe_system(std::string label = "CXL-MoE") {
  const short_horizon_config h{};
  return {std::move(label),
          offload_system_kind::cached,
          presets::cxl2_x16,
          link_duplex::full,
          sticky_lru_config{.sticky_steps = h.horizon},
          {.predictor = offload_predictor::frequency, .history = h.history, .horizon = h.horizon, .prefill = true}};
}

/// The CPU-offload baseline of CXL-MoE §4 (fMoE-like): host DRAM over PCIe 5.0 at the
/// effective figures of §2, half duplex, LRU, a long-horizon frequency model (m = 64, n =
/// 16) prefetching the k likeliest experts per layer and stream, and the same prefill
/// stand-in.
[[nodiscard]] inline offload_system_config cpu_offload_system(std::string label = "CPU offload (fMoE-like)") {
  return {std::move(label),
          offload_system_kind::cached,
          presets::host_pcie5_effective,
          link_duplex::half,
          lru_config{},
          {.predictor = offload_predictor::frequency, .history = 64, .horizon = 16, .depth = 0, .prefill = true}};
}

/// Options of `replay_offload`.
struct offload_replay_config {
  /// B, concurrent decode streams, and how they are formed.
  std::size_t streams = 1;
  stream_formation formation = stream_formation::automatic;
  /// Experts the GPU cache holds (one pool shared by all layers).
  std::uint64_t cache_experts = 0;
  /// Non-expert weights, KV cache and activations.
  forward_pass_config pass{};
  /// Write each layer's new KV entries to the expert memory (cached systems).
  bool kv_writes = true;
  /// Run the prefill pass of each sequence that starts its request, when recorded.
  bool prefills = true;
  /// Background chunk size of the timeline.
  bytes chunk_bytes = bytes{8} << 20;
  /// When set, each system's steps add their rows to it (a progress line).
  replay_progress* progress = nullptr;
  /// Most batched steps a lockstep walk (`replay_offload_sweep`) records at once (fewer
  /// when a window of predictions or prices would outgrow about 256 KiB): each system runs
  /// the whole window before the next one does, so that its timeline and cache stay in the
  /// processor's caches. Any value >= 1 gives the same results.
  std::size_t window_steps = 64;
  /// Threads a replay's systems share, the caller's included (at most one per system): the
  /// systems step through a window of steps in parallel (one task per system, each on its
  /// own timeline and cache) while the next window's prediction tapes and prices are
  /// recorded (one task per tape, handed out first), so that a thread that finishes its
  /// system takes another's task rather than waiting for the tapes. `replay_offload` of a
  /// trace also forms its streams on them. The results are the same for every value.
  std::size_t jobs = 1;
};

/// How a system's replay ended.
enum class offload_status : std::uint8_t { ok, does_not_fit };

/// What one system did.
struct offload_system_result {
  offload_system_config config;
  offload_status status = offload_status::ok;
  std::string status_detail;
  /// HBM the system needs (non-expert weights, its experts, the peak KV cache).
  bytes hbm_needed_bytes = 0;
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  /// Σ over decoded tokens of their latency (see the header): TPOT's numerator.
  seconds token_seconds = 0.0;
  /// From the first pass's start to the last step's end.
  seconds run_seconds = 0.0;
  /// Prefill passes, and Σ of their TTFT.
  std::uint64_t prefills = 0;
  seconds ttft_seconds = 0.0;
  /// Expert accesses of the decode steps and of the prefill passes (a cached system's
  /// cache statistics cover both).
  std::uint64_t decode_accesses = 0;
  std::uint64_t decode_hits = 0;
  timed_cache_stats cache;
  cache_stats policy;
  /// Resources: `gpu`, and the link directions (the same resource when half duplex).
  resource_id gpu = 0, link_in = 0, link_out = 0;
  ledger accounts;

  [[nodiscard]] bool ok() const noexcept { return status == offload_status::ok; }
  /// Seconds per output token.
  [[nodiscard]] seconds tpot() const noexcept {
    return tokens == 0 ? 0.0 : token_seconds / static_cast<double>(tokens);
  }
  /// Decoded tokens per second.
  [[nodiscard]] double throughput() const noexcept {
    return run_seconds > 0.0 ? static_cast<double>(tokens) / run_seconds : 0.0;
  }
  [[nodiscard]] seconds mean_ttft() const noexcept {
    return prefills == 0 ? 0.0 : ttft_seconds / static_cast<double>(prefills);
  }
  /// Hits over the decode steps' expert accesses.
  [[nodiscard]] double decode_hit_ratio() const noexcept {
    return decode_accesses == 0 ? 0.0 : static_cast<double>(decode_hits) / static_cast<double>(decode_accesses);
  }
  /// The GPU's stall time (waiting for weights or activations), per decoded token.
  [[nodiscard]] seconds stall_per_token() const noexcept {
    return tokens == 0 || accounts.resources.empty() ? 0.0 : accounts[gpu].stall_seconds / static_cast<double>(tokens);
  }
};

/// Everything `replay_offload` measured.
struct offload_replay_result {
  std::size_t streams = 0;
  stream_formation formation = stream_formation::whole_requests;
  std::size_t steps = 0;
  std::size_t tokens = 0;
  std::size_t sequences = 0;
  /// Bytes of one expert at FP16; the cache size; HBM of the GPU.
  bytes expert_bytes = 0;
  std::uint64_t cache_experts = 0;
  bytes hbm_capacity_bytes = 0;
  /// The most tokens held in KV caches at once.
  std::uint64_t peak_kv_tokens = 0;
  std::vector<offload_system_result> systems;
};

namespace detail {

/// The recorded prefill of one request: its batches per layer and per-expert loads.
struct recorded_prefill {
  std::uint64_t tokens = 0;
  std::vector<std::vector<batch_view>> views;  // per layer
  std::vector<std::uint32_t> loads;            // layers × experts
};

inline std::vector<recorded_prefill> recorded_prefills(const routing_trace& t) {
  const std::size_t L = t.info().num_layers, E = t.info().num_experts;
  std::vector<recorded_prefill> out(t.requests().size());
  for (const step_ref& s : t.steps()) {
    if (s.kind != phase::prefill) continue;
    recorded_prefill& p = out[s.request];
    if (p.views.empty()) {
      p.views.resize(L);
      p.loads.assign(L * E, 0);
    }
    std::uint64_t rows = 0;
    for (const batch_ref& b : t.batches_of(s)) {
      const batch_view v = t.view(b);
      p.views[b.layer].push_back(v);
      for (expert_id e : v.experts) ++p.loads[b.layer * E + e];
      rows = std::max<std::uint64_t>(rows, b.num_rows);
    }
    p.tokens += rows;
  }
  return out;
}

/// Per-stream predictors (frequency or Markov), or one predictor of the whole batch (the
/// oracle), combined into one score per expert of a layer.
class stream_predictors {
 public:
  stream_predictors(const offload_prefetch_config& c, const trace_info& info, std::size_t streams,
                    const routing_trace& batched)
      : E_(info.num_experts), scores_(info.num_experts, 0.0f), miss_(info.num_experts, 1.0) {
    switch (c.predictor) {
      case offload_predictor::none:
        break;
      case offload_predictor::frequency:
        for (std::size_t s = 0; s < streams; ++s) {
          freq_.emplace_back(short_horizon_config{.num_layers = info.num_layers,
                                                  .num_experts = info.num_experts,
                                                  .top_k = info.top_k,
                                                  .history = c.history,
                                                  .horizon = c.horizon,
                                                  .recency_decay = c.recency_decay});
        }
        break;
      case offload_predictor::markov:
        for (std::size_t s = 0; s < streams; ++s) {
          markov_.emplace_back(markov_config{.num_layers = info.num_layers,
                                             .num_experts = info.num_experts,
                                             .top_k = info.top_k,
                                             .history = c.history,
                                             .horizon = c.horizon,
                                             .recency_decay = c.recency_decay});
        }
        break;
      case offload_predictor::oracle:
        oracle_.emplace(batched, oracle_config{.horizon = c.horizon, .prefill = false});
        break;
    }
  }

  [[nodiscard]] bool any() const noexcept { return !freq_.empty() || !markov_.empty() || oracle_.has_value(); }
  [[nodiscard]] bool per_stream() const noexcept { return !freq_.empty() || !markov_.empty(); }

  void begin_sequence(std::size_t stream) noexcept {
    if (!freq_.empty()) freq_[stream].begin_request();
    if (!markov_.empty()) markov_[stream].begin_request();
  }
  /// One stream's rows.
  void observe_stream(std::size_t stream, const batch_view& v) noexcept {
    if (!freq_.empty()) freq_[stream].observe(v);
    if (!markov_.empty()) markov_[stream].observe(v);
  }
  /// A whole decode batch of the batched trace (the oracle).
  void observe_batch(const batch_view& v) noexcept {
    if (oracle_) oracle_->observe(v);
  }
  void end_step() noexcept {
    for (auto& p : freq_) p.end_step();
    for (auto& p : markov_) p.end_step();
  }

  /// Starts a layer's combined prediction.
  void begin_combine() noexcept { std::fill(miss_.begin(), miss_.end(), 1.0); }
  /// Folds stream `s`'s prediction of layer `l` in; returns whether it had any.
  bool add_stream(std::size_t s, layer_id l) noexcept {
    bool any = false;
    if (!freq_.empty()) any = freq_[s].predict(l, scores_);
    if (!markov_.empty()) any = markov_[s].predict(l, scores_);
    if (!any) return false;
    for (std::size_t e = 0; e < E_; ++e) miss_[e] *= 1.0 - static_cast<double>(scores_[e]);
    return true;
  }
  /// Folds the oracle's prediction of layer `l` in.
  bool add_batch(layer_id l) noexcept {
    if (!oracle_ || !oracle_->predict(l, scores_)) return false;
    for (std::size_t e = 0; e < E_; ++e) miss_[e] *= 1.0 - static_cast<double>(scores_[e]);
    return true;
  }
  /// Writes the combined scores.
  void combined(std::span<float> out) const noexcept {
    for (std::size_t e = 0; e < E_; ++e) out[e] = static_cast<float>(1.0 - miss_[e]);
  }

 private:
  std::size_t E_;
  std::vector<short_horizon_predictor> freq_;
  std::vector<markov_predictor> markov_;
  std::optional<oracle_predictor> oracle_;
  std::vector<float> scores_;
  std::vector<double> miss_;
};

/// The rows of token `i` of a decode batch of `d.batched()` as a view of their own.
[[nodiscard]] inline batch_view token_rows(const batch_view& v, std::size_t first, std::size_t n,
                                           std::size_t experts) noexcept {
  batch_view out = v;
  out.ref.first_row = v.ref.first_row + static_cast<std::uint32_t>(first);
  out.ref.num_rows = static_cast<std::uint32_t>(n);
  const std::size_t k = v.top_k;
  out.positions = v.positions.subspan(first, n);
  out.experts = v.experts.subspan(first * k, n * k);
  out.weights = v.weights.subspan(first * k, n * k);
  if (!v.scores.empty()) out.scores = v.scores.subspan(first * experts, n * experts);
  return out;
}

/// Whether the sequence that token `tk` starts runs its request's recorded prefill first.
[[nodiscard]] inline bool runs_prefill(const stream_token& tk, const decode_streams& d,
                                       const std::vector<recorded_prefill>& prefills, bool on) noexcept {
  if (!tk.first || !on) return false;
  const stream_sequence& q = d.sequences()[tk.sequence];
  return q.starts_request && prefills[q.request].tokens > 0;
}

/// Bit e set where `scores[e] > 0`, for a layer of at most 64 experts; 0 for a wider one
/// (whose users keep a loop over the layer's experts).
[[nodiscard]] inline std::uint64_t positive_scores(std::span<const float> scores) noexcept {
  std::uint64_t m = 0;
  if (scores.size() > 64) return m;
  for (std::size_t e = 0; e < scores.size(); ++e) m |= static_cast<std::uint64_t>(scores[e] > 0.0f) << e;
  return m;
}

/// The predictions of one prefetch configuration, step by step. A predictor's state
/// depends only on the routing it observes (never on a cache or a timeline), so every
/// cached system with the same predictor, m, n, decay and depth hears the same combined
/// scores and the same ranked prefetch list at every layer of every pass: a lockstep
/// replay records them once per batched step (`record`) and each such system reads them
/// (`at`) in the order its passes would have computed them. Segments of a step: its
/// prefill passes in token order, then its decode pass. The tape holds a window of
/// consecutive steps (`window()`, sized at construction so that the window stays small
/// beside a system's own state), or two (`held`): the replay records a window, then runs
/// each system through all of it before the next system, so that a system's timeline and
/// cache stay in the processor's caches for the window's steps instead of one; holding
/// two, it records the next window while the systems run the current one.
class prediction_tape {
 public:
  struct layer_prediction {
    /// Streams (or the oracle) that had anything to go on; 0: nothing is prefetched.
    std::size_t predicting = 0;
    std::span<const float> scores;
    /// The `depth` best of `scores`, best first (empty when `predicting` is 0).
    std::span<const queued_expert> plan;
    /// When a layer has at most 64 experts: bit e set when `scores[e] > 0` (else 0).
    std::uint64_t positive = 0;
  };

  /// The predictions of configuration `c` for the steps of `d`; windows of at most
  /// `window_steps` (>= 1) steps, fewer when a window would outgrow about 256 KiB; `held` (1
  /// or 2) windows at once. The replay validates both (asserted here).
  prediction_tape(const offload_prefetch_config& c, const trace_info& info, const decode_streams& d,
                  const std::vector<recorded_prefill>& prefills, bool prefills_on, std::size_t window_steps = 64,
                  std::size_t held = 1)
      : config_(c),
        d_(d),
        prefills_(prefills),
        prefills_on_(prefills_on),
        L_(info.num_layers),
        E_(info.num_experts),
        k_(info.top_k),
        predictors_(c, info, d.num_streams(), d.batched()),
        queue_(info.num_experts) {
    std::size_t most = 0;
    for (std::size_t s = 0; s < d.num_steps(); ++s) {
      std::size_t n = 0;
      for (const stream_token& tk : d.tokens(s)) {
        if (runs_prefill(tk, d, prefills, prefills_on)) ++n;
      }
      most = std::max(most, n);
    }
    step_cells_ = (most + 1) * L_;
    // About 256 KiB of scores and plans per window, 1 to `window_steps` steps.
    const std::size_t step_bytes = step_cells_ * E_ * (sizeof(float) + sizeof(queued_expert));
    window_ = std::clamp<std::size_t>((std::size_t{256} << 10) / std::max<std::size_t>(step_bytes, 1), 1,
                                      std::max<std::size_t>(window_steps, 1));
    MOEPOLICY_ASSERT(window_steps >= 1 && (held == 1 || held == 2));
    slots_ = window_ * held;
    const std::size_t cells = slots_ * step_cells_;
    predicting_.assign(cells, 0);
    plan_sizes_.assign(cells, 0);
    positive_.assign(cells, 0);
    scores_.assign(cells * E_, 0.0f);
    plans_.assign(cells * E_, queued_expert{});
  }

  /// Whether a system of prefetch configuration `c` hears exactly these predictions.
  [[nodiscard]] bool serves(const offload_prefetch_config& c) const noexcept {
    return c.predictor == config_.predictor && c.history == config_.history && c.horizon == config_.horizon &&
           c.depth == config_.depth && c.recency_decay == config_.recency_decay;
  }

  /// Steps of a window: `record` steps `first` to `first + window() - 1` before any is
  /// read.
  [[nodiscard]] std::size_t window() const noexcept { return window_; }
  /// Steps the tape holds at once: `window()` times the windows held (1 or 2).
  [[nodiscard]] std::size_t held_steps() const noexcept { return slots_; }

  /// Observes batched step `s` (its prefills, then its decode pass) and records each
  /// layer's prediction, as `offload_run` made them before, in the slot of `s`: steps are
  /// recorded in order, and `at` reads those of the last `held_steps()` recorded (a step
  /// being recorded is not read: its slot is another step's until then). No allocation.
  void record(std::size_t s) noexcept {
    const std::size_t base = slot(s);
    std::size_t seg = 0;
    const auto tokens = d_.tokens(s);
    for (const stream_token& tk : tokens) {
      if (!tk.first) continue;
      predictors_.begin_sequence(tk.stream);
      if (!runs_prefill(tk, d_, prefills_, prefills_on_)) continue;
      const recorded_prefill& p = prefills_[d_.sequences()[tk.sequence].request];
      for (std::size_t l = 0; l < L_; ++l) {
        const auto& views = p.views[l];
        if (views.empty()) continue;
        for (const batch_view& v : views) predictors_.observe_stream(tk.stream, v);
        predict(base + seg * L_ + l, l, [&](auto&& f) { f(tk.stream); });
      }
      ++seg;
    }
    const routing_trace& b = d_.batched();
    const auto batches = b.batches_of(b.steps()[s]);
    const std::uint32_t R = d_.rows_per_token();
    std::size_t bi = 0;
    for (std::size_t l = 0; l < L_; ++l) {
      if (bi >= batches.size() || batches[bi].layer != l) continue;
      const batch_view v = b.view(batches[bi++]);
      // Each stream's predictor sees its token's rows; the oracle the whole batch.
      for (std::size_t i = 0; i < v.tokens();) {
        const std::uint32_t tok = v.positions[i] / R;
        std::size_t j = i + 1;
        while (j < v.tokens() && v.positions[j] / R == tok) ++j;
        predictors_.observe_stream(tokens[tok].stream, token_rows(v, i, j - i, E_));
        i = j;
      }
      predictors_.observe_batch(v);
      predict(base + seg * L_ + l, l, [&](auto&& f) {
        for (const stream_token& tk : tokens) {
          const stream_sequence& q = d_.sequences()[tk.sequence];
          if (q.first_step + q.tokens > s + 1) f(tk.stream);  // it continues next step
        }
      });
    }
    predictors_.end_step();
  }

  /// Layer `l`'s prediction in segment `seg` of step `s`, one of the last `held_steps()`
  /// recorded.
  [[nodiscard]] layer_prediction at(std::size_t s, std::size_t seg, std::size_t l) const noexcept {
    return at_slot(slot(s), seg, l);
  }
  /// Where step `s` (one of the last `held_steps()` recorded) is held: a pass reads its
  /// layers with `at_slot`, the step's position computed once per pass.
  [[nodiscard]] std::size_t slot(std::size_t s) const noexcept { return (s % slots_) * step_cells_; }
  /// `at(s, seg, l)` for `w = slot(s)`.
  [[nodiscard]] layer_prediction at_slot(std::size_t w, std::size_t seg, std::size_t l) const noexcept {
    MOEPOLICY_ASSERT(seg * L_ + l < step_cells_);
    const std::size_t c = w + seg * L_ + l;
    return {predicting_[c], std::span<const float>(scores_).subspan(c * E_, E_),
            std::span<const queued_expert>(plans_).subspan(c * E_, plan_sizes_[c]), positive_[c]};
  }

 private:
  /// Layer `l`'s prediction into cell `c`.
  template <class Streams>
  void predict(std::size_t c, std::size_t l, Streams&& streams) noexcept {
    predictors_.begin_combine();
    std::size_t predicting = 0;
    if (predictors_.per_stream()) {
      streams([&](std::size_t st) {
        if (predictors_.add_stream(st, static_cast<layer_id>(l))) ++predicting;
      });
    } else {
      if (predictors_.add_batch(static_cast<layer_id>(l))) ++predicting;
    }
    const std::span<float> scores = std::span<float>(scores_).subspan(c * E_, E_);
    predictors_.combined(scores);
    predicting_[c] = predicting;
    positive_[c] = positive_scores(scores);
    plan_sizes_[c] = 0;
    if (predicting == 0) return;
    const std::size_t per = static_cast<std::size_t>(config_.horizon) * k_;
    const std::size_t depth = config_.depth != 0 ? config_.depth : std::min(E_, per * predicting);
    queue_.plan(static_cast<layer_id>(l), scores, depth);
    const auto planned = queue_.pending();
    std::copy(planned.begin(), planned.end(), plans_.begin() + static_cast<std::ptrdiff_t>(c * E_));
    plan_sizes_[c] = planned.size();
    queue_.clear();
  }

  offload_prefetch_config config_;
  const decode_streams& d_;
  const std::vector<recorded_prefill>& prefills_;
  bool prefills_on_;
  std::size_t L_, E_, k_;
  /// Cells (segments × layers) of one step, steps of a window, and steps held.
  std::size_t step_cells_ = 0, window_ = 1, slots_ = 1;
  stream_predictors predictors_;
  prefetch_queue queue_;
  std::vector<std::size_t> predicting_, plan_sizes_;
  std::vector<std::uint64_t> positive_;
  std::vector<float> scores_;
  std::vector<queued_expert> plans_;
};

/// The GPU's side of each batched decode pass, step by step. Every system of a lockstep
/// replay runs on the same GPU for the same model shape and pass configuration, and a
/// decode pass's prices depend only on its tokens and their contexts, so the prices of its
/// dense layers, each MoE layer's attention, router and shared experts and the output
/// head, and each MoE layer's distinct experts (in order of first selection) with their
/// loads and compute times, are recorded once per step (`record`) and read by every
/// system (`at`), the same values each system computed for itself before. Holds a window
/// of consecutive steps, or two, as `prediction_tape` does; allocates at construction only.
template <DeviceCost Gpu>
requires DenseComputeCost<Gpu>
class pass_price_tape {
 public:
  /// One MoE layer of a step's decode pass.
  struct layer_price {
    seconds attention = 0.0;
    seconds shared = 0.0;
    /// The index of the layer's batch among the step's batches; none: no batch.
    std::size_t batch = none;
    /// The distinct experts the batch selected, in order of first selection, and the GPU
    /// time of each on its tokens.
    std::span<const expert_id> order;
    std::span<const seconds> compute;
  };
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

  /// Prices on `gpu` for a model of `shape`, the passes as `pass` configures them, for the
  /// steps of `d` (whose MoE layers are `shape`'s); windows of at most `most` steps (fewer
  /// when a window would outgrow about 256 KiB), `held` (1 or 2) of them at once (`most`
  /// >= 1 and `held` asserted).
  pass_price_tape(const Gpu& gpu, const model_shape& shape, const forward_pass_config& pass, const decode_streams& d,
                  std::size_t most, std::size_t held = 1)
      : gpu_(gpu), pass_(gpu, shape, pass), d_(d), L_(d.batched().info().num_layers), D_(shape.num_dense_layers) {
    const routing_trace& b = d.batched();
    const std::size_t k = b.info().top_k;
    // A step's distinct experts are at most its rows times k (and at most the experts of
    // each layer).
    for (const step_ref& st : b.steps()) {
      std::size_t n = 0;
      for (const batch_ref& br : b.batches_of(st)) n += std::min<std::size_t>(br.num_rows * k, b.info().num_experts);
      cap_ = std::max(cap_, n);
    }
    const std::size_t step_bytes =
        sizeof(step_price) + D_ * sizeof(seconds) + L_ * sizeof(cell) + cap_ * (sizeof(expert_id) + sizeof(seconds));
    MOEPOLICY_ASSERT(most >= 1 && (held == 1 || held == 2));
    window_ = std::clamp<std::size_t>((std::size_t{256} << 10) / step_bytes, 1, std::max<std::size_t>(most, 1));
    slots_ = window_ * held;
    steps_.assign(slots_, step_price{});
    dense_.assign(slots_ * D_, 0.0);
    layers_.assign(slots_ * L_, cell{});
    order_.assign(slots_ * cap_, 0);
    compute_.assign(slots_ * cap_, 0.0);
    loads_.assign(b.info().num_experts, 0);
    contexts_.reserve(d.num_streams());
  }

  [[nodiscard]] std::size_t window() const noexcept { return window_; }
  /// Steps held at once: `window()` times the windows held.
  [[nodiscard]] std::size_t held_steps() const noexcept { return slots_; }

  /// Prices batched step `s` into its slot (another step's until then: `at` does not read
  /// it meanwhile).
  void record(std::size_t s) noexcept {
    const std::size_t w = slot(s);
    const auto tokens = d_.tokens(s);
    const std::size_t n = tokens.size();
    contexts_.clear();
    for (const stream_token& tk : tokens) contexts_.push_back(tk.context);
    const std::uint64_t reads = decode_cached_reads(contexts_);
    step_price& sp = steps_[w];
    sp.router = pass_.router_seconds(n);
    sp.head = pass_.output_head_seconds(n);
    for (std::uint32_t i = 0; i < D_; ++i) dense_[w * D_ + i] = pass_.dense_layer_seconds(i, n, reads, n);
    const routing_trace& b = d_.batched();
    const auto batches = b.batches_of(b.steps()[s]);
    std::size_t bi = 0, used = 0;
    for (std::size_t l = 0; l < L_; ++l) {
      cell& c = layers_[w * L_ + l];
      const auto model_layer = static_cast<std::uint32_t>(D_ + l);
      c.attention = pass_.attention_seconds(model_layer, n, reads, n);
      c.shared = pass_.shared_experts_seconds(static_cast<layer_id>(l), n);
      c.first = used;
      c.count = 0;
      c.batch = none;
      if (bi >= batches.size() || batches[bi].layer != l) continue;
      c.batch = bi;
      const batch_view v = b.view(batches[bi++]);
      expert_id* order = order_.data() + w * cap_ + used;
      std::size_t m = 0;
      for (const expert_id e : v.experts) {
        if (loads_[e]++ == 0) order[m++] = e;
      }
      seconds* compute = compute_.data() + w * cap_ + used;
      for (std::size_t i = 0; i < m; ++i) {
        compute[i] = gpu_.compute_seconds({static_cast<layer_id>(l), order[i]}, fp16, loads_[order[i]]);
        loads_[order[i]] = 0;
      }
      c.count = m;
      used += m;
    }
  }

  /// The router and the output head of step `s`'s pass (one of the last `held_steps()`
  /// recorded).
  [[nodiscard]] seconds router(std::size_t s) const noexcept { return steps_[slot(s)].router; }
  [[nodiscard]] seconds output_head(std::size_t s) const noexcept { return steps_[slot(s)].head; }
  /// Dense layer `i` of step `s`'s pass.
  [[nodiscard]] seconds dense_layer(std::size_t s, std::size_t i) const noexcept { return dense_[slot(s) * D_ + i]; }
  /// MoE layer `l` of step `s`'s pass.
  [[nodiscard]] layer_price at(std::size_t s, std::size_t l) const noexcept { return at_slot(slot(s), l); }
  /// Where step `s` (one of the last `held_steps()` recorded) is held: a pass reads its
  /// layers with `at_slot`, the step's position computed once per pass.
  [[nodiscard]] std::size_t slot(std::size_t s) const noexcept { return s % slots_; }
  /// `at(s, l)` for `w = slot(s)`.
  [[nodiscard]] layer_price at_slot(std::size_t w, std::size_t l) const noexcept {
    const cell& c = layers_[w * L_ + l];
    return {c.attention, c.shared, c.batch, std::span<const expert_id>(order_).subspan(w * cap_ + c.first, c.count),
            std::span<const seconds>(compute_).subspan(w * cap_ + c.first, c.count)};
  }

 private:
  struct step_price {
    seconds router = 0.0, head = 0.0;
  };
  struct cell {
    seconds attention = 0.0, shared = 0.0;
    std::size_t batch = none, first = 0, count = 0;
  };

  const Gpu& gpu_;
  forward_pass_cost<Gpu> pass_;
  const decode_streams& d_;
  std::size_t L_;
  std::uint32_t D_;
  std::size_t window_ = 1, slots_ = 1;
  std::size_t cap_ = 0;
  std::vector<step_price> steps_;
  std::vector<seconds> dense_;
  std::vector<cell> layers_;
  std::vector<expert_id> order_;
  std::vector<seconds> compute_;
  std::vector<std::uint32_t> loads_;
  std::vector<std::uint64_t> contexts_;
};

/// What a lockstep replay drives of one system's run: its steps (called once per step,
/// not per access).
struct offload_run_steps {
  virtual ~offload_run_steps() = default;
  virtual void begin(offload_system_result& out) = 0;
  virtual void step(std::size_t s, offload_system_result& out) = 0;
  virtual void finish(offload_system_result& out) = 0;
};

/// One system's run on its own timeline (see the header comment), with a cache under
/// `Policy`: the policy type of the system's configuration where the replay knows it
/// (sticky LRU, LRU: their events called directly), else `any_eviction_policy`.
template <DeviceCost Gpu, EvictionPolicy Policy>
requires DenseComputeCost<Gpu>
class offload_run final : public offload_run_steps {
 public:
  /// `tape`: the predictions of `sys`'s prefetch configuration (recorded for each step
  /// before `step` runs it), or none for a system that does not prefetch; `prices`: the
  /// decode passes' prices on `gpu` (recorded likewise).
  offload_run(const Gpu& gpu, const model_shape& shape, const offload_system_config& sys,
              const offload_replay_config& cfg, std::uint64_t cache_experts, const decode_streams& d,
              const std::vector<recorded_prefill>& prefills, const trace_info& info, const prediction_tape* tape,
              const pass_price_tape<Gpu>& prices)
      : gpu_dev_(gpu),
        pass_(gpu, shape, cfg.pass),
        shape_(shape),
        sys_(sys),
        cfg_(cfg),
        d_(d),
        prefills_(prefills),
        L_(info.num_layers),
        E_(info.num_experts),
        k_(info.top_k),
        tl_({.chunk_bytes = cfg.chunk_bytes}),
        gpu_(tl_.add_resource("gpu", resource_kind::processor)),
        in_(tl_.add_resource(sys.duplex == link_duplex::full ? "link in" : "link", resource_kind::link)),
        out_(sys.duplex == link_duplex::full ? tl_.add_resource("link out", resource_kind::link) : in_),
        tape_(sys.kind == offload_system_kind::cached ? tape : nullptr),
        prices_(prices),
        loads_(info.num_experts, 0),
        order_(),
        scores_(info.num_experts, 0.0f),
        stored_(static_cast<std::size_t>(info.num_layers) * info.num_experts, 0.0f),
        stored_bits_(info.num_experts <= 64 ? info.num_layers : 0, 0),
        wanted_(info.num_experts, 0),
        queue_(info.num_experts) {
    order_.reserve(E_);
    compute_.reserve(E_);
    ops_.reserve(E_);
    if (sys.kind == offload_system_kind::cached) {
      cache_.emplace(tl_, in_, link_cost{sys.link}, info.num_layers, info.num_experts, cache_experts, policy_of(sys),
                     gpu.footprint_bytes({0, 0}, fp16));
    }
    kv_layer_bytes_ =
        static_cast<bytes>(static_cast<double>(shape.attention.kv_elements_per_token()) * cfg.pass.kv_element_bytes);
  }

  /// Starts the run: `step` each batched step in order, then `finish`.
  void begin(offload_system_result& out) override {
    out.gpu = gpu_;
    out.link_in = in_;
    out.link_out = out_;
    now_ = 0.0;
    prev_end_ = 0.0;
  }

  /// Batched step `s`: the prefills of the sequences that start here (their predictors
  /// restarted on the tape), then the decode pass.
  void step(std::size_t s, offload_system_result& out) override {
    const auto tokens = d_.tokens(s);
    std::size_t seg = 0;
    for (const stream_token& tk : tokens) {
      if (!runs_prefill(tk, d_, prefills_, cfg_.prefills)) continue;
      now_ = prefill_pass(s, prefills_[d_.sequences()[tk.sequence].request], now_, seg++);
      ++out.prefills;
      out.ttft_seconds += now_ - prev_end_;
    }
    const seconds start = now_;
    now_ = decode_pass(s, out, seg);
    if (cfg_.progress != nullptr) cfg_.progress->add(step_rows(s));
    for (const stream_token& tk : tokens) out.token_seconds += now_ - (tk.first ? start : prev_end_);
    out.tokens += tokens.size();
    ++out.steps;
    prev_end_ = now_;
    if (cache_) cache_->end_step();
  }

  /// Ends the run: stops what is still pending and collects the measures.
  void finish(offload_system_result& out) override {
    const seconds now = now_;
    out.run_seconds = now;
    if (cache_) {
      cache_->cancel_all_pending();
      tl_.drain();
      cache_->collect();
      out.cache = cache_->stats();
      out.policy = cache_->cache().stats();
    } else {
      tl_.drain();
    }
    out.accounts = tl_.accounts();
  }

 private:
  [[nodiscard]] expert_key key(std::size_t l, std::size_t e) const noexcept {
    return {static_cast<layer_id>(l), static_cast<expert_id>(e)};
  }

  /// The system's policy configuration as `Policy` takes it.
  static const typename Policy::config_type& policy_of(const offload_system_config& sys) {
    if constexpr (std::is_same_v<Policy, any_eviction_policy>) {
      return sys.policy;
    } else {
      return std::get<typename Policy::config_type>(sys.policy);
    }
  }

  /// The KV entries of `tokens` tokens of one layer, written to the expert memory.
  void write_kv(seconds ready, std::size_t tokens) {
    if (!cfg_.kv_writes || !cache_ || tokens == 0 || kv_layer_bytes_ == 0) return;
    const bytes n = kv_layer_bytes_ * tokens;
    const std::array<hop, 1> h{{{out_, sys_.link.seconds_for(n), n}}};
    static_cast<void>(tl_.transfer(ready, h, n, cost_kind::kv_cache));
  }

  /// The distinct experts of layer `l`'s views in order of first selection, and the GPU
  /// time of each on its tokens.
  void gather(std::size_t l, std::span<const batch_view> views) {
    for (expert_id e : order_) loads_[e] = 0;
    order_.clear();
    compute_.clear();
    for (const batch_view& v : views) {
      for (expert_id e : v.experts) {
        if (loads_[e]++ == 0) order_.push_back(e);
      }
    }
    for (expert_id e : order_) compute_.push_back(gpu_dev_.compute_seconds(key(l, e), fp16, loads_[e]));
  }

  /// One MoE layer's experts from `t0`: `order`, the distinct experts its batches (`views`,
  /// which the policy hears of when it observes layers) selected in order of first
  /// selection, each taking `compute[i]` on the GPU; `shared`, its shared experts' time.
  /// Returns when the layer ends.
  seconds moe_layer(std::size_t l, seconds t0, std::span<const batch_view> views, std::span<const expert_id> order,
                    std::span<const seconds> compute, seconds shared, bool decode, offload_system_result& out) {
    seconds end = t0;
    if (!cache_) {
      for (std::size_t i = 0; i < order.size(); ++i) {
        end = std::max(end, tl_.run(t0, gpu_, compute[i], cost_kind::expert).end);
        if (decode) ++out.decode_hits;
      }
      if (decode) out.decode_accesses += order.size();
    } else {
      tl_.settle(t0);
      cache_->collect();
      if (!stored_bits_.empty()) {
        // The experts whose stored score is > 0, in expert order.
        for (std::uint64_t m = stored_bits_[l]; m != 0; m &= m - 1) {
          const auto e = static_cast<std::size_t>(std::countr_zero(m));
          cache_->hint(key(l, e), stored_[l * E_ + e]);
        }
      } else {
        for (std::size_t e = 0; e < E_; ++e) {
          const float s = stored_[l * E_ + e];
          if (s > 0.0f) cache_->hint(key(l, e), s);
        }
      }
      for (const batch_view& v : views) cache_->begin_layer(v);
      // Transfers first (in order of first selection), so that they stream while the GPU
      // computes the hits; then the hits, then the rest as their weights land.
      ops_.clear();
      for (std::size_t i = 0; i < order.size(); ++i) {
        const timed_access a = cache_->serve(key(l, order[i]), t0);
        ops_.push_back({static_cast<std::uint32_t>(i), a.ready});
        if (decode) {
          ++out.decode_accesses;
          if (a.kind == timed_access_kind::hit) ++out.decode_hits;
        }
      }
      detail::stable_insertion_sort(ops_, [](const op& a, const op& b) { return a.ready < b.ready; });
      for (const op& o : ops_) end = std::max(end, tl_.run(o.ready, gpu_, compute[o.i], cost_kind::expert).end);
      cache_->end_layer(static_cast<layer_id>(l));
    }
    if (shared > 0.0) end = std::max(end, tl_.run(t0, gpu_, shared, cost_kind::dense).end);
    return end;
  }

  /// Prefetches layer `l` for the next pass as the tape's prediction `p` (made from the
  /// streams that continue, or the oracle) ranks it; `replace`: stop layer `l`'s prefetches
  /// the prediction drops.
  void prefetch_layer(std::size_t l, seconds ready, int priority, const prediction_tape::layer_prediction& p,
                      bool replace) {
    float* stored = stored_.data() + l * E_;
    if (replace) {
      std::copy(p.scores.begin(), p.scores.end(), stored);
      if (!stored_bits_.empty()) stored_bits_[l] = p.positive;
    } else {
      for (std::size_t e = 0; e < E_; ++e) stored[e] = std::max(stored[e], p.scores[e]);
      if (!stored_bits_.empty()) stored_bits_[l] = positive_scores(std::span<const float>(stored, E_));
    }
    if (p.predicting > 0) {
      // Experts already resident or on their way first (the policy hears of them), so that a
      // new prefetch cannot evict a predicted expert already there.
      for (const queued_expert& q : p.plan) {
        if (cache_->cache().contains(q.key)) {
          wanted_[q.key.expert] = 1;
          static_cast<void>(cache_->prefetch(q.key, q.score, ready, priority));
        }
      }
      for (const queued_expert& q : p.plan) {
        if (wanted_[q.key.expert] != 0) continue;
        wanted_[q.key.expert] = 1;
        static_cast<void>(cache_->prefetch(q.key, q.score, ready, priority));
      }
    }
    if (replace) cache_->cancel_pending(static_cast<layer_id>(l), [&](expert_id e) { return wanted_[e] != 0; });
    // Cleared where set (the plan's experts), for the next layer.
    if (p.predicting > 0) {
      for (const queued_expert& q : p.plan) wanted_[q.key.expert] = 0;
    }
  }

  /// The prefill of one sequence's request as a pass of its prompt, segment `seg` of the
  /// step's tape; returns its end.
  seconds prefill_pass(std::size_t step, const recorded_prefill& p, seconds t, std::size_t seg) {
    const std::size_t tokens = p.tokens;
    const std::uint64_t reads = prefill_cached_reads(tokens);
    // The prefill-stage prefetch: the stand-in ranks each layer's experts by the prefill's
    // own counts.
    if (cache_ && sys_.prefetch.prefill) {
      tl_.settle(t);
      cache_->collect();
      const std::size_t depth = sys_.prefetch.prefill_depth != 0 ? sys_.prefetch.prefill_depth : k_;
      const double n = static_cast<double>(sys_.prefetch.horizon);
      for (std::size_t l = 0; l < L_; ++l) {
        for (std::size_t e = 0; e < E_; ++e) {
          const double share = static_cast<double>(p.loads[l * E_ + e]) / static_cast<double>(tokens);
          scores_[e] = static_cast<float>(1.0 - std::pow(1.0 - std::min(1.0, share), n));
        }
        queue_.plan(static_cast<layer_id>(l), scores_, depth);
        while (const auto q = queue_.pop()) {
          static_cast<void>(cache_->prefetch(q->key, q->score, t, priority(step, l)));
        }
        queue_.clear();
      }
    }
    for (std::uint32_t i = 0; i < shape_.num_dense_layers; ++i) {
      t = tl_.run(t, gpu_, pass_.dense_layer_seconds(i, tokens, reads, 1), cost_kind::dense).end;
    }
    offload_system_result scratch;
    for (std::size_t l = 0; l < L_; ++l) {
      const auto model_layer = static_cast<std::uint32_t>(shape_.num_dense_layers + l);
      t = tl_.run(t, gpu_, pass_.attention_seconds(model_layer, tokens, reads, 1), cost_kind::attention).end;
      if (!shape_.is_linear_attention_layer(model_layer)) write_kv(t, tokens);
      t = tl_.run(t, gpu_, pass_.router_seconds(tokens), cost_kind::dense).end;
      const auto& views = p.views[l];
      if (views.empty()) continue;
      const seconds t0 = t;
      gather(l, views);
      t = moe_layer(l, t0, views, order_, compute_, pass_.shared_experts_seconds(static_cast<layer_id>(l), tokens),
                    false, scratch);
      if (tape_ != nullptr) prefetch_layer(l, t0, priority(step, l), tape_->at(step, seg, l), false);
    }
    t = tl_.run(t, gpu_, pass_.output_head_seconds(1), cost_kind::dense).end;
    if (cache_) cache_->end_step();
    return t;
  }

  /// Batched decode step `s`, segment `seg` of the step's tape; returns its end. Its
  /// prices come from the price tape.
  seconds decode_pass(std::size_t s, offload_system_result& out, std::size_t seg) {
    const std::size_t n = d_.tokens(s).size();
    const routing_trace& b = d_.batched();
    // The pass starts when the GPU is free.
    seconds t = tl_.free_at(gpu_);
    for (std::uint32_t i = 0; i < shape_.num_dense_layers; ++i) {
      t = tl_.run(t, gpu_, prices_.dense_layer(s, i), cost_kind::dense).end;
    }
    const seconds router = prices_.router(s);
    const std::size_t pw = prices_.slot(s), tw = tape_ != nullptr ? tape_->slot(s) : 0;
    for (std::size_t l = 0; l < L_; ++l) {
      const auto model_layer = static_cast<std::uint32_t>(shape_.num_dense_layers + l);
      const auto p = prices_.at_slot(pw, l);
      t = tl_.run(t, gpu_, p.attention, cost_kind::attention).end;
      if (!shape_.is_linear_attention_layer(model_layer)) write_kv(t, n);
      t = tl_.run(t, gpu_, router, cost_kind::dense).end;
      if (p.batch == pass_price_tape<Gpu>::none) continue;
      const seconds t0 = t;
      if constexpr (policy_traits<Policy>::observes_layers) {
        const batch_view v = b.view(b.batches_of(b.steps()[s])[p.batch]);
        t = moe_layer(l, t0, std::span<const batch_view>(&v, 1), p.order, p.compute, p.shared, true, out);
      } else {
        t = moe_layer(l, t0, {}, p.order, p.compute, p.shared, true, out);
      }
      if (tape_ != nullptr) prefetch_layer(l, t0, priority(s + 1, l), tape_->at_slot(tw, seg, l), true);
    }
    return tl_.run(t, gpu_, prices_.output_head(s), cost_kind::dense).end;
  }

  [[nodiscard]] int priority(std::size_t step, std::size_t l) const noexcept { return static_cast<int>(step * L_ + l); }

  /// The rows of batched step `s`.
  [[nodiscard]] std::uint64_t step_rows(std::size_t s) const noexcept {
    std::uint64_t n = 0;
    for (const batch_ref& b : d_.batched().batches_of(d_.batched().steps()[s])) n += b.num_rows;
    return n;
  }

  struct op {
    std::uint32_t i;  // in the layer's order
    seconds ready;
  };

  const Gpu& gpu_dev_;
  forward_pass_cost<Gpu> pass_;
  const model_shape& shape_;
  const offload_system_config& sys_;
  const offload_replay_config& cfg_;
  const decode_streams& d_;
  const std::vector<recorded_prefill>& prefills_;
  std::size_t L_, E_, k_;
  timeline tl_;
  resource_id gpu_, in_, out_;
  std::optional<timed_expert_cache<link_cost, Policy>> cache_;
  const prediction_tape* tape_;
  const pass_price_tape<Gpu>& prices_;
  seconds now_ = 0.0, prev_end_ = 0.0;
  std::vector<std::uint32_t> loads_;
  std::vector<expert_id> order_;
  std::vector<seconds> compute_;
  std::vector<op> ops_;
  std::vector<float> scores_;
  /// The last prediction of each layer (hints before its next accesses).
  std::vector<float> stored_;
  /// When a layer has at most 64 experts: per layer, bit e set when `stored_` of e is > 0.
  std::vector<std::uint64_t> stored_bits_;
  std::vector<std::uint8_t> wanted_;
  prefetch_queue queue_;
  bytes kv_layer_bytes_ = 0;
};

/// The run of `sys`: with its policy's own type for the sticky LRU and LRU, else with
/// `any_eviction_policy`.
template <DeviceCost Gpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] std::unique_ptr<offload_run_steps> make_offload_run(
    const Gpu& gpu, const model_shape& shape, const offload_system_config& sys, const offload_replay_config& cfg,
    std::uint64_t cache_experts, const decode_streams& d, const std::vector<recorded_prefill>& prefills,
    const trace_info& info, const prediction_tape* tape, const pass_price_tape<Gpu>& prices) {
  if (std::holds_alternative<sticky_lru_config>(sys.policy)) {
    return std::make_unique<offload_run<Gpu, sticky_lru_policy>>(gpu, shape, sys, cfg, cache_experts, d, prefills, info,
                                                                 tape, prices);
  }
  if (std::holds_alternative<lru_config>(sys.policy)) {
    return std::make_unique<offload_run<Gpu, lru_policy>>(gpu, shape, sys, cfg, cache_experts, d, prefills, info, tape,
                                                          prices);
  }
  return std::make_unique<offload_run<Gpu, any_eviction_policy>>(gpu, shape, sys, cfg, cache_experts, d, prefills, info,
                                                                 tape, prices);
}

}  // namespace detail

/// One cache size of `replay_offload_sweep` and the systems replayed at it.
struct offload_sweep_point {
  /// Experts the GPU cache holds (one pool shared by all layers).
  std::uint64_t cache_experts = 0;
  std::span<const offload_system_config> systems;
};

namespace detail {

inline void check_offload_systems(std::span<const offload_system_config> systems, std::string_view fn) {
  for (const auto& s : systems) {
    if (s.kind == offload_system_kind::cached && std::holds_alternative<belady_config>(s.policy)) {
      detail::throw_invalid(fn, "system \"" + s.label + "\": Belady's policy needs the future and cannot run timed");
    }
    if (s.prefetch.history == 0 || s.prefetch.horizon == 0) {
      detail::throw_invalid(fn, "system \"" + s.label + "\": a predictor's history and horizon must be >= 1");
    }
  }
}

/// Every system of every point in one walk over the batched steps of `d` (see
/// `replay_offload_sweep`).
template <DeviceCost Gpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] std::vector<offload_replay_result> replay_offload_points(const routing_trace& trace,
                                                                       const decode_streams& d, const Gpu& gpu,
                                                                       const model_shape& shape,
                                                                       std::span<const offload_sweep_point> points,
                                                                       const offload_replay_config& cfg) {
  const trace_info& info = trace.info();
  const std::vector<recorded_prefill> prefills = recorded_prefills(trace);
  const std::size_t B = d.num_streams();
  offload_replay_result shared;
  shared.streams = B;
  shared.formation = d.formation();
  shared.steps = d.num_steps();
  shared.tokens = d.num_tokens();
  shared.sequences = d.sequences().size();
  shared.expert_bytes = gpu.footprint_bytes({0, 0}, fp16);
  shared.hbm_capacity_bytes = gpu.capacity_bytes();
  for (std::size_t s = 0; s < d.num_steps(); ++s) {
    std::uint64_t kv = 0;
    for (const stream_token& tk : d.tokens(s)) kv += tk.context + 1;
    shared.peak_kv_tokens = std::max(shared.peak_kv_tokens, kv);
  }
  // A hybrid model's linear layers hold a fixed state per concurrent sequence.
  const bytes base = non_expert_weight_bytes(shape, cfg.pass) +
                     shared.peak_kv_tokens * kv_bytes_per_token(shape, cfg.pass) +
                     static_cast<bytes>(B) * linear_state_bytes_per_sequence(shape, cfg.pass);
  const std::uint64_t all = std::uint64_t{info.num_layers} * info.num_experts;

  std::vector<offload_replay_result> results(points.size(), shared);
  std::size_t systems = 0;
  for (std::size_t i = 0; i < points.size(); ++i) {
    results[i].cache_experts = points[i].cache_experts;
    results[i].systems.reserve(points[i].systems.size());
    systems += points[i].systems.size();
  }
  // The runs, their results (stable: every `systems` vector is reserved) and one tape per
  // distinct prefetch configuration of the cached systems that predict.
  std::vector<std::unique_ptr<offload_run_steps>> runs;
  std::vector<offload_system_result*> outs;
  std::vector<std::unique_ptr<prediction_tape>> tapes;
  // On more than one thread the tapes hold two windows: the next is recorded while the
  // systems run the current one.
  const std::size_t threads = std::max<std::size_t>(1, std::min(cfg.jobs, systems));
  const std::size_t windows_held = threads > 1 ? 2 : 1;
  pass_price_tape<Gpu> prices(gpu, shape, cfg.pass, d, cfg.window_steps, windows_held);
  runs.reserve(systems);
  outs.reserve(systems);
  for (std::size_t i = 0; i < points.size(); ++i) {
    for (const offload_system_config& sc : points[i].systems) {
      offload_system_result& out = results[i].systems.emplace_back();
      out.config = sc;
      const std::uint64_t held =
          sc.kind == offload_system_kind::hbm_only ? all : std::min(points[i].cache_experts, all);
      out.hbm_needed_bytes = base + held * shared.expert_bytes;
      if (out.hbm_needed_bytes > shared.hbm_capacity_bytes) {
        out.status = offload_status::does_not_fit;
        char buf[160];
        std::snprintf(buf, sizeof buf, "needs %.2f GB of HBM (%llu experts, peak KV cache of %llu tokens), has %.2f GB",
                      static_cast<double>(out.hbm_needed_bytes) / 1e9, static_cast<unsigned long long>(held),
                      static_cast<unsigned long long>(shared.peak_kv_tokens),
                      static_cast<double>(shared.hbm_capacity_bytes) / 1e9);
        out.status_detail = buf;
        if (cfg.progress != nullptr) cfg.progress->add(d.batched().num_rows());
        continue;
      }
      const prediction_tape* tape = nullptr;
      if (sc.kind == offload_system_kind::cached && sc.prefetch.predictor != offload_predictor::none) {
        const auto it = std::find_if(tapes.begin(), tapes.end(), [&](const auto& t) { return t->serves(sc.prefetch); });
        if (it != tapes.end()) {
          tape = it->get();
        } else {
          tape = tapes
                     .emplace_back(std::make_unique<prediction_tape>(sc.prefetch, info, d, prefills, cfg.prefills,
                                                                     cfg.window_steps, windows_held))
                     .get();
        }
      }
      runs.push_back(
          make_offload_run(gpu, shape, out.config, cfg, points[i].cache_experts, d, prefills, info, tape, prices));
      outs.push_back(&out);
    }
  }
  // Lockstep by windows of steps: each step's predictions and prices once, then every
  // system's passes of the window's steps, each on its own timeline and cache (a system's
  // state stays in the processor's caches for the window). On one thread each window is
  // recorded, then run. On more, the first window is recorded (the tapes, each one task,
  // in parallel), then each batch of tasks records the next window (tasks 0 to
  // `tapes.size()`, handed out first: a tape is a long task) and runs the current one (a
  // task per system): the tapes hold both, and a step being recorded is never read.
  for (std::size_t r = 0; r < runs.size(); ++r) runs[r]->begin(*outs[r]);
  std::size_t window = prices.window();
  for (const auto& t : tapes) window = std::min(window, t->window());
  task_pool pool(std::max<std::size_t>(1, std::min(cfg.jobs, runs.size())));
  const std::size_t n = runs.empty() ? 0 : d.num_steps();
  const std::size_t recorders = tapes.size() + 1;
  const auto record = [&](std::size_t i, std::size_t from, std::size_t to) {
    for (std::size_t s = from; s < to; ++s) {
      if (i < tapes.size()) {
        tapes[i]->record(s);
      } else {
        prices.record(s);
      }
    }
  };
  const auto run = [&](std::size_t r, std::size_t from, std::size_t to) {
    for (std::size_t s = from; s < to; ++s) runs[r]->step(s, *outs[r]);
  };
  if (n > 0) pool.for_each(recorders, [&](std::size_t i) { record(i, 0, std::min(n, window)); });
  for (std::size_t first = 0; first < n; first += window) {
    const std::size_t last = std::min(n, first + window), next = std::min(n, last + window);
    if (windows_held == 2) {
      const std::size_t ahead = next > last ? recorders : 0;
      pool.for_each(ahead + runs.size(), [&](std::size_t i) {
        if (i < ahead) {
          record(i, last, next);
        } else {
          run(i - ahead, first, last);
        }
      });
    } else {
      pool.for_each(runs.size(), [&](std::size_t r) { run(r, first, last); });
      if (next > last) pool.for_each(recorders, [&](std::size_t i) { record(i, last, next); });
    }
  }
  for (std::size_t r = 0; r < runs.size(); ++r) runs[r]->finish(*outs[r]);
  return results;
}

}  // namespace detail

/// Replays the decode steps of `trace` as B concurrent streams (and the prefills of the
/// sequences that start their requests) through each system, on `gpu` for a model of
/// `shape`.
///
/// Throws: `invalid_argument` naming `replay_offload` when the trace's layers or experts
/// differ from the shape's MoE layers and experts, the shape does not describe its forward
/// pass, a cached system uses Belady's policy, a predictor's configuration is bad, or
/// `cfg.jobs` or `cfg.window_steps` is 0; what the stream formation throws;
/// `std::system_error` when a thread cannot start.
template <DeviceCost Gpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] offload_replay_result replay_offload(const routing_trace& trace, const Gpu& gpu, const model_shape& shape,
                                                   std::span<const offload_system_config> systems,
                                                   const offload_replay_config& cfg = {}) {
  constexpr std::string_view fn = "replay_offload";
  const trace_info& info = trace.info();
  detail::require_trace_matches(info.num_layers, info.num_experts, shape, fn);
  detail::check_offload_systems(systems, fn);
  if (cfg.jobs == 0) detail::throw_invalid(fn, "jobs must be >= 1", cfg.jobs);
  if (cfg.window_steps == 0) detail::throw_invalid(fn, "window_steps must be >= 1", cfg.window_steps);
  const decode_streams d = make_decode_streams(trace, {.streams = cfg.streams, .formation = cfg.formation}, cfg.jobs);
  const offload_sweep_point point{cfg.cache_experts, systems};
  return std::move(detail::replay_offload_points(trace, d, gpu, shape, std::span(&point, 1), cfg).front());
}

/// `replay_offload` at several cache sizes, each with its own systems, on decode streams
/// `d` already formed from `trace` (`make_decode_streams`; its B and formation replace
/// `cfg.streams` and `cfg.formation`, and `cfg.cache_experts` is not read): one result per
/// point, each identical to `replay_offload(trace, gpu, shape, p.systems, cfg)` with B, the
/// formation and `p.cache_experts`. Every system runs on its own timeline and cache, but
/// all of them walk the steps in lockstep, so the steps are formed once and the
/// predictions of each prefetch configuration (predictor, m, n, decay, depth) are made once
/// per step for every system that uses it (a predictor hears only the routing).
///
/// Throws: as `replay_offload`, naming `replay_offload_sweep`; also when `d` has other
/// layers or experts than `trace`.
template <DeviceCost Gpu>
requires DenseComputeCost<Gpu>
[[nodiscard]] std::vector<offload_replay_result> replay_offload_sweep(const routing_trace& trace,
                                                                      const decode_streams& d, const Gpu& gpu,
                                                                      const model_shape& shape,
                                                                      std::span<const offload_sweep_point> points,
                                                                      const offload_replay_config& cfg = {}) {
  constexpr std::string_view fn = "replay_offload_sweep";
  const trace_info& info = trace.info();
  detail::require_trace_matches(info.num_layers, info.num_experts, shape, fn);
  for (const offload_sweep_point& p : points) detail::check_offload_systems(p.systems, fn);
  if (cfg.jobs == 0) detail::throw_invalid(fn, "jobs must be >= 1", cfg.jobs);
  if (cfg.window_steps == 0) detail::throw_invalid(fn, "window_steps must be >= 1", cfg.window_steps);
  const trace_info& di = d.batched().info();
  if (d.num_steps() > 0 && (di.num_layers != info.num_layers || di.num_experts != info.num_experts)) {
    detail::throw_invalid(fn, "the decode streams' layers x experts must match the trace's " +
                                  std::to_string(info.num_layers) + " x " + std::to_string(info.num_experts) +
                                  ", streams " + std::to_string(di.num_layers) + " x " +
                                  std::to_string(di.num_experts));
  }
  return detail::replay_offload_points(trace, d, gpu, shape, points, cfg);
}

}  // namespace moepolicy
