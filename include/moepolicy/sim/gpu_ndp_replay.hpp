// moepolicy/sim/gpu_ndp_replay.hpp — the context-aware GPU + CXL-NDP system of
// Context-Aware GPU-NDP and its baselines, replayed request by request on the timed model
// of serving (sim/timeline.hpp): prefill, the placement copy, attention and decode, every
// second charged on a device and every byte on a link.
//
// Machine. A GPU and a CXL-NDP device given by `DeviceCost` models (the GPU also
// `DenseComputeCost`), with four resources on one timeline: the GPU, the NDP device (its
// systolic arrays run one expert at a time), and the two directions of the link between
// them (PCIe Gen4 ×16 in Context-Aware GPU-NDP Tab. 2): `to_gpu` carries weights fetched or
// copied from NDP memory and NDP results; `to_ndp` carries activations. Every expert's
// weights live in NDP memory at FP16 and, as §4.2 says, at every candidate low bitwidth
// (preloaded: changing an NDP expert's bitwidth moves nothing). A copy on the GPU exists only
// after a transfer brought it (sim/timed_residency.hpp).
//
// A forward pass of `t` tokens (a prefill of the prompt, or one decode token) runs, on the
// GPU, the dense layers, then per MoE layer attention over the KV cache and the router
// (sim/forward_pass.hpp), then the layer's MoE work, then the shared experts; the output head
// ends the pass. The MoE work of a layer, from the router's output at time t0:
//   - experts run on the GPU: those with a landed GPU copy at once, those the system fetches
//     after a demand transfer (the link for W / bandwidth + latency, the NDP memory for
//     `contention_seconds(W)`) has landed;
//   - experts run on the NDP device: the layer's activations cross `to_ndp` once (the half of
//     `activation_transfer_seconds` that goes out), the experts run one after another at
//     their bitwidths, and the results cross `to_gpu` (the other half);
//   - the layer ends when the GPU has finished and the results are back.
// Background copies (the placement copy, when it overlaps decoding) use only the idle time of
// the link and the NDP memory (`timeline::settle` at the end of every layer), and an expert
// switches to the GPU only once its copy has landed.
//
// Systems (`gpu_ndp_system_kind`), each with K experts per layer in GPU HBM:
//   context_aware     Context-Aware GPU-NDP Alg. 1: after a request's prefill, its activation
//                     counts P and routing-score sums W rank each layer's experts
//                     (S = α·norm(P) + (1 − α)·norm(W)); the top K go to the GPU at FP16, the
//                     rest run on the NDP device at prefix-split bitwidths for an average b̄
//                     (§4.2; needs a loss table). One copy per request: the experts of the new
//                     GPU set not already on the GPU; each goes into the slot of an expert
//                     leaving the set, which serves until that copy starts (then is dropped:
//                     free, its NDP copy remains).
//   uniform_bits      the same placement, every NDP expert at one bitwidth (no selector).
//   static_placement  top K by importance over a calibration set, fixed for every request,
//                     loaded once before the first request; NDP bits as context_aware when a
//                     loss table is given, else uniform.
//   monde             MoNDE as TriMoE §5.1.2 describes it: every expert at FP16; an activated
//                     expert not on the GPU is migrated on demand when its load makes that
//                     cheaper than running it in place (`gpu_ndp_system::fetch_is_cheaper`),
//                     and stays in a K-expert LRU cache per layer. At one decode token per
//                     step no expert is hot by this rule; in a prefill many are.
//   hobbit_like       a GPU-only mixed-precision offloading system after HOBBIT (its
//                     token-level dynamic loading): every expert runs on the GPU; a miss loads
//                     the expert at FP16 when its gate weight (the largest among the layer's
//                     tokens routed to it) is at least `hobbit_fp16_weight`, else at
//                     `hobbit_low_bits`, into a K-expert LRU cache per layer at that
//                     precision. HOBBIT's layer-level prefetching and sequence-level cache
//                     policy are left out, so it is labelled a variant.
// Prefill. A placement system runs the prefill where its experts currently are: on the GPU
// those with a landed copy (the previous request's placement), the rest on the NDP device at
// FP16 (bitwidths are chosen after prefill). MoNDE and HOBBIT-like follow their rules.
// Before the first request every system loads the same initial GPU set — top K by importance
// over the calibration set, or none without one — as a charged transfer at time 0 (the
// startup, reported apart from the requests).
//
// The placement copy (`placement_copy`). Context-Aware GPU-NDP §4.1 places once after the
// prefill ("each sequence undergoes only a single expert migration") and does not say whether
// decoding waits for the copy. `overlapped` (the default): decoding starts at once, the copy
// runs in the background, layer 0's experts first, and an expert joining the GPU set keeps
// running on the NDP device at the bitwidth it had there until its copy lands, while the
// expert whose slot it takes keeps serving from the GPU until the copy starts. `blocking`: the copy is a demand
// transfer and decoding starts when it has landed.
//
// Calibration (`gpu_ndp_calibration`): activation counts and routing-score sums of a set the
// replayed requests are not part of (the MC-MoE C4 statistics for Mixtral-8x7B), or, with
// `calibration_requests` = n, the first n requests of the trace, which are then not measured.
//
// Checks and statuses. HBM must hold the non-expert weights, K experts per layer at FP16 and
// the KV cache of the longest request (`hbm_needed_bytes`); when it does not, every system
// reports `does_not_fit` and nothing is priced. A prefix split that cannot meet the budget
// (`allocation_status::infeasible`) makes the system report `infeasible_budget` instead of
// running at a bitwidth it did not ask for. context_aware without a loss table reports
// `needs_loss_table`; static_placement without calibration `no_calibration`.
//
// Lengths. By default each request is replayed as recorded. `prompt_tokens` /
// `output_tokens` > 0 replay it at other lengths by looping its recorded prefill rows and
// decode steps (token i of the prompt is recorded token i mod P, decode step s recorded
// step s mod S): a projection from real routing, labelled as such by the drivers.
//
// Quantisation loss, with a loss table: the mean L(l, e, b) over the measured decode
// activations (0 at FP16; activations at a bitwidth the table lacks make the mean undefined).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/sim/forward_pass.hpp"
#include "moepolicy/sim/gpu_ndp.hpp"
#include "moepolicy/sim/timed_residency.hpp"
#include "moepolicy/sim/timeline.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/stats/routing_stats.hpp"
#include "moepolicy/trace/routing_trace.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy {

/// The systems `replay_gpu_ndp` compares; see the header comment.
enum class gpu_ndp_system_kind : std::uint8_t { context_aware, uniform_bits, static_placement, monde, hobbit_like };

/// "context_aware", "uniform_bits", "static_placement", "monde" or "hobbit_like".
[[nodiscard]] constexpr std::string_view to_string(gpu_ndp_system_kind k) noexcept {
  switch (k) {
    case gpu_ndp_system_kind::context_aware:
      return "context_aware";
    case gpu_ndp_system_kind::uniform_bits:
      return "uniform_bits";
    case gpu_ndp_system_kind::static_placement:
      return "static_placement";
    case gpu_ndp_system_kind::monde:
      return "monde";
    case gpu_ndp_system_kind::hobbit_like:
      return "hobbit_like";
  }
  return "?";
}

/// Whether decoding waits for a request's placement copy (see the header comment).
enum class placement_copy : std::uint8_t { overlapped, blocking };

/// How a system's replay ended.
enum class gpu_ndp_status : std::uint8_t {
  ok,
  does_not_fit,       ///< HBM cannot hold K experts per layer with the rest of the model
  infeasible_budget,  ///< prefix split cannot meet the average bitwidth
  needs_loss_table,   ///< the system selects bitwidths and no loss table was given
  no_calibration,     ///< a static placement without a calibration set
};

/// "ok", "does_not_fit", "infeasible_budget", "needs_loss_table" or "no_calibration".
[[nodiscard]] constexpr std::string_view to_string(gpu_ndp_status s) noexcept {
  switch (s) {
    case gpu_ndp_status::ok:
      return "ok";
    case gpu_ndp_status::does_not_fit:
      return "does_not_fit";
    case gpu_ndp_status::infeasible_budget:
      return "infeasible_budget";
    case gpu_ndp_status::needs_loss_table:
      return "needs_loss_table";
    case gpu_ndp_status::no_calibration:
      return "no_calibration";
  }
  return "?";
}

/// One system to replay.
struct gpu_ndp_system_config {
  std::string label;
  gpu_ndp_system_kind kind = gpu_ndp_system_kind::context_aware;
  /// b̄ for prefix split (context_aware, and static_placement with a loss table).
  double average_bits = 3.0;
  /// NDP bitwidth of uniform_bits, and of static_placement without a loss table.
  bitwidth uniform_bits = bitwidth{3};
  /// Whether decoding waits for the placement copy (context_aware, uniform_bits).
  placement_copy copy = placement_copy::overlapped;
};

/// Activation counts and routing-score sums (layers × experts) of a calibration set.
struct gpu_ndp_calibration {
  /// What the set is, for printing.
  std::string source;
  Eigen::MatrixXd counts;
  Eigen::MatrixXd weight_sums;
};

/// Options of `replay_gpu_ndp`.
struct gpu_ndp_replay_config {
  /// K, experts per layer in GPU HBM (placed, or cached).
  std::size_t gpu_experts_per_layer = 4;
  importance_config importance{};
  bit_allocation_config allocation{};
  /// Non-expert weights, KV cache and activations.
  forward_pass_config pass{};
  /// Bytes per activation element crossing the link (2: FP16/BF16).
  double activation_element_bytes = 2.0;
  /// Whether a placement system runs its prefill's NDP experts at FP16 (else at the
  /// bitwidths of the placement in effect when the prompt arrives).
  bool prefill_at_fp16 = false;
  /// HOBBIT-like: the gate weight at or above which a missed expert loads at FP16.
  double hobbit_fp16_weight = 0.5;
  /// HOBBIT-like: the precision of the other misses.
  bitwidth hobbit_low_bits = bitwidth{4};
  /// Leading requests of the trace used as the calibration set (and not measured) when no
  /// `gpu_ndp_calibration` is given.
  std::size_t calibration_requests = 0;
  /// Replay each request with this many prompt / decode tokens (0: as recorded), looping
  /// its recorded routing (see the header comment).
  std::size_t prompt_tokens = 0;
  std::size_t output_tokens = 0;
  /// Background chunk size of the timeline.
  bytes chunk_bytes = bytes{1} << 20;
};

/// What one system did for one request.
struct gpu_ndp_request_outcome {
  std::string request;
  std::uint64_t prompt_tokens = 0;
  std::uint64_t decode_steps = 0;
  /// Time to first token: from the request's start to the end of its prefill pass.
  seconds prefill_seconds = 0.0;
  /// From the end of the prefill to the end of the last decode step (a blocking copy
  /// included).
  seconds decode_seconds = 0.0;
  /// Bytes of the request's placement copy, and when its last expert landed, counted from
  /// the end of the prefill (0 without a copy; NaN when the next request's placement
  /// cancelled part of it before it landed). Copies still in flight when the run ends are
  /// completed then and charged in full.
  bytes copy_bytes = 0;
  seconds copy_landed_after = 0.0;
  /// Decode steps that started before the copy had fully landed.
  std::uint64_t steps_during_copy = 0;
  /// Bytes fetched on demand (MoNDE, HOBBIT-like) in prefill and decode.
  bytes fetched_bytes = 0;
  /// Σ L(l, e, b) over decode activations, the activations counted, and activations at a
  /// bitwidth the loss table lacks.
  double loss_sum = 0.0;
  std::uint64_t activations = 0;
  std::uint64_t activations_without_loss = 0;
  /// Σ over layers of prefix split's objective and of the exact optimum's (context_aware).
  double prefix_objective = 0.0;
  double exact_objective = 0.0;

  [[nodiscard]] seconds end_to_end_seconds() const noexcept { return prefill_seconds + decode_seconds; }
};

/// One system's replay over the measured requests.
struct gpu_ndp_system_result {
  gpu_ndp_system_config config;
  gpu_ndp_status status = gpu_ndp_status::ok;
  /// What went wrong, for a status other than `ok`.
  std::string status_detail;
  /// The initial GPU set's load before the first request.
  seconds startup_seconds = 0.0;
  bytes startup_bytes = 0;
  std::vector<gpu_ndp_request_outcome> requests;
  /// What the requests cost: the run after the startup (copies still in flight at the end
  /// completed and charged).
  ledger accounts;

  [[nodiscard]] bool ok() const noexcept { return status == gpu_ndp_status::ok; }
  [[nodiscard]] std::uint64_t decode_steps() const noexcept {
    std::uint64_t n = 0;
    for (const auto& r : requests) n += r.decode_steps;
    return n;
  }
  [[nodiscard]] seconds decode_seconds() const noexcept {
    seconds s = 0.0;
    for (const auto& r : requests) s += r.decode_seconds;
    return s;
  }
  [[nodiscard]] seconds prefill_seconds() const noexcept {
    seconds s = 0.0;
    for (const auto& r : requests) s += r.prefill_seconds;
    return s;
  }
  /// Decode time per token (batch 1: per decode step).
  [[nodiscard]] seconds seconds_per_token() const noexcept {
    const auto n = decode_steps();
    return n == 0 ? 0.0 : decode_seconds() / static_cast<double>(n);
  }
  /// Mean end-to-end latency of a request.
  [[nodiscard]] seconds mean_end_to_end() const noexcept {
    return requests.empty() ? 0.0 : (prefill_seconds() + decode_seconds()) / static_cast<double>(requests.size());
  }
  [[nodiscard]] bytes copy_bytes() const noexcept {
    bytes b = 0;
    for (const auto& r : requests) b += r.copy_bytes;
    return b;
  }
  [[nodiscard]] bytes fetched_bytes() const noexcept {
    bytes b = 0;
    for (const auto& r : requests) b += r.fetched_bytes;
    return b;
  }
  /// Mean loss per decode activation: NaN without a loss table or when some activation ran
  /// at a bitwidth the table lacks.
  [[nodiscard]] double mean_loss() const noexcept {
    double s = 0.0;
    std::uint64_t n = 0, missing = 0;
    for (const auto& r : requests) {
      s += r.loss_sum;
      n += r.activations;
      missing += r.activations_without_loss;
    }
    return n == 0 || missing > 0 ? std::nan("") : s / static_cast<double>(n);
  }
  [[nodiscard]] double prefix_over_exact() const noexcept {
    double p = 0.0, e = 0.0;
    for (const auto& r : requests) {
      p += r.prefix_objective;
      e += r.exact_objective;
    }
    return e > 0.0 ? p / e : std::nan("");
  }
};

/// A measured request's prefill ↔ decode similarity.
struct gpu_ndp_request_similarity {
  std::string name;
  std::uint64_t prefill_tokens = 0;
  /// Cosine similarity of prefill and decode activation counts per layer (NaN where a phase
  /// has no rows at that layer), and their mean over the layers that have both.
  std::vector<double> similarity;
  double mean_similarity = 0.0;
};

/// Everything `replay_gpu_ndp` measured.
struct gpu_ndp_replay_result {
  /// HBM the configuration needs (non-expert weights, K experts per layer at FP16, the
  /// longest request's KV cache) and what the GPU offers.
  bytes hbm_needed_bytes = 0;
  bytes hbm_capacity_bytes = 0;
  /// The calibration set ("" when none).
  std::string calibration;
  /// The requests measured, in trace order.
  std::vector<gpu_ndp_request_similarity> requests;
  /// One per system, in the order given.
  std::vector<gpu_ndp_system_result> systems;
};

namespace detail {

/// One request's routing as replayed: per layer prefill loads, and per decode step and layer
/// loads, each with the largest gate weight of the tokens routed to each expert.
struct gpu_ndp_routing {
  std::string name;
  std::size_t layers = 0, experts = 0;
  std::uint64_t prompt_tokens = 0;
  Eigen::MatrixXd P, W;
  std::vector<std::uint32_t> prefill_load;  // layers × experts
  std::vector<float> prefill_weight;
  std::vector<std::uint32_t> prefill_rows;  // per layer
  std::size_t steps = 0;
  std::vector<std::uint32_t> load;  // steps × layers × experts
  std::vector<float> weight;
  std::vector<std::uint32_t> rows;  // steps × layers

  [[nodiscard]] std::size_t at(std::size_t step, std::size_t l) const noexcept { return (step * layers + l) * experts; }
};

/// The rows of one request's prefill per layer, and its decode steps, as `batch_view`s.
inline gpu_ndp_routing make_routing(const routing_trace& trace, const request_ref& r, std::size_t prompt_tokens,
                                    std::size_t output_tokens) {
  const std::size_t L = trace.info().num_layers, E = trace.info().num_experts;
  gpu_ndp_routing out;
  out.name = r.name;
  out.layers = L;
  out.experts = E;
  // Prefill rows per layer, in order.
  std::vector<std::vector<batch_view>> prefill(L);
  std::vector<const step_ref*> decode;
  std::uint64_t recorded_prompt = 0;
  for (const auto& st : trace.steps_of(r)) {
    if (st.kind == phase::decode) {
      decode.push_back(&st);
      continue;
    }
    std::uint64_t step_rows = 0;
    for (const auto& b : trace.batches_of(st)) {
      prefill[b.layer].push_back(trace.view(b));
      step_rows = std::max<std::uint64_t>(step_rows, b.num_rows);
    }
    recorded_prompt += step_rows;
  }
  out.prompt_tokens = prompt_tokens > 0 ? prompt_tokens : recorded_prompt;
  out.P = Eigen::MatrixXd::Zero(static_cast<Eigen::Index>(L), static_cast<Eigen::Index>(E));
  out.W = out.P;
  out.prefill_load.assign(L * E, 0);
  out.prefill_weight.assign(L * E, 0.0f);
  out.prefill_rows.assign(L, 0);
  for (std::size_t l = 0; l < L; ++l) {
    std::size_t recorded = 0;
    for (const auto& v : prefill[l]) recorded += v.tokens();
    if (recorded == 0) continue;
    const std::size_t want = prompt_tokens > 0 ? prompt_tokens : recorded;
    for (std::size_t i = 0; i < want; ++i) {
      std::size_t k = i % recorded;
      const batch_view* v = nullptr;
      for (const auto& b : prefill[l]) {
        if (k < b.tokens()) {
          v = &b;
          break;
        }
        k -= b.tokens();
      }
      const auto ids = v->experts_of(k);
      const auto ws = v->weights_of(k);
      for (std::size_t j = 0; j < ids.size(); ++j) {
        const std::size_t e = ids[j];
        ++out.prefill_load[l * E + e];
        out.prefill_weight[l * E + e] = std::max(out.prefill_weight[l * E + e], ws[j]);
        out.P(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e)) += 1.0;
        out.W(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e)) += ws[j];
      }
    }
    out.prefill_rows[l] = static_cast<std::uint32_t>(want);
  }
  const std::size_t S = decode.size();
  out.steps = S == 0 ? 0 : (output_tokens > 0 ? output_tokens : S);
  out.load.assign(out.steps * L * E, 0);
  out.weight.assign(out.steps * L * E, 0.0f);
  out.rows.assign(out.steps * L, 0);
  for (std::size_t s = 0; s < out.steps; ++s) {
    for (const auto& b : trace.batches_of(*decode[s % S])) {
      const batch_view v = trace.view(b);
      const std::size_t base = out.at(s, b.layer);
      out.rows[s * L + b.layer] = static_cast<std::uint32_t>(v.tokens());
      for (std::size_t i = 0; i < v.tokens(); ++i) {
        const auto ids = v.experts_of(i);
        const auto ws = v.weights_of(i);
        for (std::size_t j = 0; j < ids.size(); ++j) {
          ++out.load[base + ids[j]];
          out.weight[base + ids[j]] = std::max(out.weight[base + ids[j]], ws[j]);
        }
      }
    }
  }
  return out;
}

/// Prefix split's objective against the exact optimum's, summed over the layers of `plan`.
inline void prefix_vs_exact(const placement_plan& plan, const Eigen::MatrixXd& P, const Eigen::MatrixXd& W,
                            const loss_table& table, double average_bits, const gpu_ndp_replay_config& opt,
                            gpu_ndp_request_outcome& out) {
  const auto E = static_cast<std::size_t>(P.cols());
  std::vector<double> score(E), p(E), w(E);
  std::vector<expert_id> order(E);
  for (std::size_t l = 0; l < plan.num_layers(); ++l) {
    for (std::size_t e = 0; e < E; ++e) {
      p[e] = P(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e));
      w[e] = W(static_cast<Eigen::Index>(l), static_cast<Eigen::Index>(e));
    }
    importance_scores(p, w, score, opt.importance);
    rank_experts(score, order);
    std::vector<expert_id> ndp;
    for (expert_id e : order) {
      if (plan.at(l, e).where == tier::ndp) ndp.push_back(e);
    }
    Eigen::MatrixXd L(static_cast<Eigen::Index>(ndp.size()), static_cast<Eigen::Index>(table.num_bits()));
    double chosen = 0.0;
    for (std::size_t i = 0; i < ndp.size(); ++i) {
      const auto row = table.losses_of(l, ndp[i]);
      for (std::size_t j = 0; j < row.size(); ++j)
        L(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = row[j];
      chosen += table.loss_at(l, ndp[i], plan.at(l, ndp[i]).bits);
    }
    const bit_allocation exact = exact_allocation(table.bits(), L, average_bits, opt.allocation);
    if (exact.status == allocation_status::infeasible) continue;
    out.prefix_objective += chosen;
    out.exact_objective += exact.weighted_loss;
  }
}

/// One system's run on its own timeline (see the header comment).
template <DeviceCost Gpu, DeviceCost Ndp>
requires DenseComputeCost<Gpu>
class gpu_ndp_run {
 public:
  static constexpr tier_id ndp_tier = 0, gpu_tier = 1;
  static constexpr std::uint64_t no_job = std::numeric_limits<std::uint64_t>::max();
  static constexpr std::size_t none = std::numeric_limits<std::size_t>::max();

  gpu_ndp_run(const gpu_ndp_system<Gpu, Ndp>& sys, const model_shape& shape, const gpu_ndp_system_config& system,
              const gpu_ndp_replay_config& config, const loss_table* table)
      : sys_(sys),
        pass_(sys.gpu(), shape, config.pass),
        shape_(shape),
        system_(system),
        config_(config),
        table_(table),
        L_(shape.num_moe_layers()),
        E_(shape.num_experts),
        K_(config.gpu_experts_per_layer),
        tl_({.chunk_bytes = config.chunk_bytes}),
        gpu_(tl_.add_resource("gpu", resource_kind::processor)),
        ndp_(tl_.add_resource("ndp", resource_kind::processor)),
        to_gpu_(tl_.add_resource("link to GPU", resource_kind::link)),
        to_ndp_(tl_.add_resource("link to NDP", resource_kind::link)),
        res_(L_, E_, 2),
        in_set_(L_ * E_, 0),
        set_bits_(L_ * E_, fp16.bits()),
        flight_bits_(L_ * E_, fp16.bits()),
        job_(L_ * E_, no_job),
        replaces_(L_ * E_, none),
        owner_(L_ * E_, 0),
        stamp_(L_ * E_, 0) {
    ops_.reserve(E_);
    incoming_.reserve(E_);
    outgoing_.reserve(E_);
    for (std::size_t l = 0; l < L_; ++l) {
      for (std::size_t e = 0; e < E_; ++e) res_.preload(key(l, e), ndp_tier, fp16);
    }
    res_.seal();
  }

  [[nodiscard]] const ledger& accounts() const noexcept { return tl_.accounts(); }
  [[nodiscard]] const timed_residency& residency() const noexcept { return res_; }

  /// Loads `initial` (layers × experts flags) onto the GPU at FP16 before the first request.
  void startup(std::span<const std::uint8_t> initial, gpu_ndp_system_result& out) {
    seconds end = 0.0;
    for (std::size_t l = 0; l < L_; ++l) {
      for (std::size_t e = 0; e < E_; ++e) {
        const std::size_t i = l * E_ + e;
        if (initial[i] == 0) continue;
        const transfer_receipt r = copy(0.0, key(l, e), fp16, cost_kind::placement);
        end = std::max(end, r.landed());
        out.startup_bytes += r.size();
        in_set_[i] = 1;
        set_bits_[i] = fp16.bits();
        stamp_[i] = ++clock_;
      }
    }
    out.startup_seconds = end;
    now_ = end;
    tl_.settle(now_);
    startup_ = tl_.accounts();
  }

  /// What the requests cost (see `gpu_ndp_system_result::accounts`).
  [[nodiscard]] ledger request_accounts() const {
    ledger l = tl_.accounts();
    l -= startup_;
    return l;
  }

  /// The placement in effect before the first request: its NDP bitwidths (its GPU set is
  /// what `startup` loads).
  void set_initial_plan(const placement_plan& plan) {
    for (std::size_t l = 0; l < L_; ++l) {
      for (std::size_t e = 0; e < E_; ++e) set_bits_[l * E_ + e] = plan.at(l, e).bits.bits();
    }
  }

  /// Serves request number `q` from the current time. Returns false when the system cannot
  /// run (an infeasible budget: `result.status` says why).
  bool serve(std::size_t q, const gpu_ndp_routing& r, gpu_ndp_request_outcome& out, gpu_ndp_system_result& result) {
    copy_of_.push_back({});
    out.request = r.name;
    out.prompt_tokens = r.prompt_tokens;
    out.decode_steps = r.steps;
    const seconds start = now_;
    prefill_ = true;
    now_ = forward_pass(now_, r.prompt_tokens, prefill_cached_reads(r.prompt_tokens),
                        std::span<const std::uint32_t>(r.prefill_load), std::span<const float>(r.prefill_weight),
                        std::span<const std::uint32_t>(r.prefill_rows), out, false);
    prefill_ = false;
    out.prefill_seconds = now_ - start;
    const seconds prefill_end = now_;

    const bool placing =
        system_.kind == gpu_ndp_system_kind::context_aware || system_.kind == gpu_ndp_system_kind::uniform_bits;
    std::size_t copies = 0;
    seconds copy_end = prefill_end;
    if (placing) {
      prefill_placement_config pc{.gpu_experts_per_layer = K_,
                                  .importance = config_.importance,
                                  .select_bitwidths = system_.kind == gpu_ndp_system_kind::context_aware,
                                  .ndp_average_bits = system_.average_bits,
                                  .uniform_bits = system_.uniform_bits,
                                  .allocation = config_.allocation};
      const placement_plan plan = place_from_prefill(r.P, r.W, pc.select_bitwidths ? table_ : nullptr, pc);
      std::size_t infeasible = 0;
      for (std::size_t l = 0; l < L_; ++l)
        infeasible += plan.status(l) == allocation_status::infeasible ? std::size_t{1} : std::size_t{0};
      if (infeasible > 0) {
        result.status = gpu_ndp_status::infeasible_budget;
        result.status_detail = "prefix split cannot meet an average of " + detail::show(system_.average_bits) +
                               " bits on " + std::to_string(infeasible) + " of " + std::to_string(L_) + " layers";
        return false;
      }
      if (pc.select_bitwidths) prefix_vs_exact(plan, r.P, r.W, *table_, system_.average_bits, config_, out);
      // The new GPU set. Per layer, each arriving expert is copied into the slot of a leaving
      // one, which keeps serving until that copy starts (a blocking copy starts at once).
      for (std::size_t l = 0; l < L_; ++l) {
        incoming_.clear();
        outgoing_.clear();
        for (std::size_t e = 0; e < E_; ++e) {
          const std::size_t i = l * E_ + e;
          const bool want = plan.at(l, e).where == tier::gpu;
          // An expert joining the GPU set runs on the NDP device at the bitwidth it had there
          // until its copy lands.
          if (want && in_set_[i] == 0 && !res_.present(key(l, e), gpu_tier)) flight_bits_[i] = set_bits_[i];
          set_bits_[i] = plan.at(l, e).bits.bits();
          replaces_[i] = none;
          if (!want) {
            if (job_[i] != no_job) {
              tl_.cancel(static_cast<timeline::job_id>(job_[i]));
              copy_of_[owner_[i]].cancelled = true;
              --copy_of_[owner_[i]].pending;
              job_[i] = no_job;
            }
            in_set_[i] = 0;
            if (res_.present(key(l, e), gpu_tier)) outgoing_.push_back(i);
            continue;
          }
          if (job_[i] != no_job) {
            incoming_.push_back(i);  // on its way since an earlier request
            continue;
          }
          if (res_.present(key(l, e), gpu_tier)) {
            in_set_[i] = 1;  // already there (perhaps a leaving expert wanted again)
            continue;
          }
          in_set_[i] = 1;
          ++copies;
          const bytes w = sys_.gpu().footprint_bytes(key(l, e), fp16);
          out.copy_bytes += w;
          if (system_.copy == placement_copy::blocking) {
            const transfer_receipt rc = copy(prefill_end, key(l, e), fp16, cost_kind::placement);
            copy_end = std::max(copy_end, rc.landed());
          } else {
            const std::array<hop, 1> link{{{to_gpu_, sys_.gpu().transfer_seconds(w), w}}};
            const std::array<hop, 1> read{{{ndp_, sys_.ndp().contention_seconds(w), 0}}};
            job_[i] = tl_.enqueue(prefill_end, link, w, cost_kind::placement, 0, i);
            tl_.enqueue(prefill_end, read, w, cost_kind::placement, 0, i);
            owner_[i] = q;
            ++copy_of_[q].pending;
            incoming_.push_back(i);
          }
        }
        // Pair arrivals with departures; departures without an arrival to wait for go now.
        std::size_t k = 0;
        for (std::size_t i : incoming_) {
          if (k < outgoing_.size()) replaces_[i] = outgoing_[k++];
        }
        for (; k < outgoing_.size(); ++k) res_.drop(key(outgoing_[k] / E_, outgoing_[k] % E_), gpu_tier);
      }
      if (system_.copy == placement_copy::blocking) now_ = copy_end;
    }
    bool copy_pending = placing && system_.copy == placement_copy::overlapped && copies > 0;

    for (std::size_t s = 0; s < r.steps; ++s) {
      if (copy_pending) {
        ++out.steps_during_copy;
      }
      const std::uint64_t cached = r.prompt_tokens + s;
      now_ = forward_pass(now_, 1, cached + 1, std::span<const std::uint32_t>(r.load).subspan(r.at(s, 0), L_ * E_),
                          std::span<const float>(r.weight).subspan(r.at(s, 0), L_ * E_),
                          std::span<const std::uint32_t>(r.rows).subspan(s * L_, L_), out, true);
      if (copy_pending) {
        copy_pending = false;
        for (std::size_t i = 0; i < L_ * E_; ++i) {
          if (in_set_[i] != 0 && !res_.present(key(i / E_, i % E_), gpu_tier)) copy_pending = true;
        }
      }
    }
    copy_of_[q].prefill_end = prefill_end;
    if (placing && copies > 0 && system_.copy == placement_copy::blocking)
      out.copy_landed_after = copy_end - prefill_end;
    out.decode_seconds = now_ - prefill_end;
    return true;
  }

  /// Ends the run: the background copies still queued are placed and charged in full, and
  /// each request's copy gets the time its last expert landed (NaN when a later placement
  /// cancelled part of it).
  void finish(std::span<gpu_ndp_request_outcome> outs) {
    tl_.drain();
    collect();
    retire();
    for (std::size_t q = 0; q < outs.size() && q < copy_of_.size(); ++q) {
      const copy_state& c = copy_of_[q];
      if (system_.copy == placement_copy::blocking || outs[q].copy_bytes == 0) continue;
      outs[q].copy_landed_after = c.cancelled || c.pending > 0 ? std::nan("") : c.last_landed - c.prefill_end;
    }
  }

 private:
  [[nodiscard]] static expert_key key(std::size_t l, std::size_t e) noexcept {
    return {static_cast<layer_id>(l), static_cast<expert_id>(e)};
  }

  /// A demand copy of expert `k` at `bits` from NDP memory to the GPU, installed when it
  /// lands: the link carries it at its bandwidth; the NDP memory serves the read
  /// (`contention_seconds`) as a separate operation, so that a busy NDP unit delays its own
  /// work by the read rather than stopping the link.
  transfer_receipt copy(seconds ready, expert_key k, bitwidth bits, cost_kind why) {
    const bytes w = sys_.gpu().footprint_bytes(k, bits);
    const std::array<hop, 1> link{{{to_gpu_, sys_.gpu().transfer_seconds(w), w}}};
    const transfer_receipt r = tl_.transfer(ready, link, w, why, k.flat(E_));
    tl_.run(ready, ndp_, sys_.ndp().contention_seconds(w), why);
    res_.install(k, gpu_tier, bits, w, r);
    return r;
  }

  /// Drops each leaving expert whose replacement's copy has started (or landed).
  void retire() {
    for (std::size_t i = 0; i < replaces_.size(); ++i) {
      if (replaces_[i] == none) continue;
      if (job_[i] != no_job && tl_.placed_bytes(static_cast<timeline::job_id>(job_[i])) == 0) continue;
      res_.drop(key(replaces_[i] / E_, replaces_[i] % E_), gpu_tier);
      replaces_[i] = none;
    }
  }

  /// Installs the background copies that landed.
  void collect() {
    for (const transfer_receipt& r : tl_.landed()) {
      if (!r.crossed_link()) continue;  // the NDP memory's side of a copy
      const std::size_t i = static_cast<std::size_t>(r.tag());
      job_[i] = no_job;
      copy_state& c = copy_of_[owner_[i]];
      --c.pending;
      c.last_landed = std::max(c.last_landed, r.landed());
      const expert_key k = key(i / E_, i % E_);
      res_.install(k, gpu_tier, fp16, sys_.gpu().footprint_bytes(k, fp16), r);
    }
    tl_.clear_landed();
  }

  /// Where an activated expert runs in this layer.
  struct decision {
    enum class where : std::uint8_t { gpu, fetch, ndp } at = where::ndp;
    bitwidth bits = fp16;
  };

  [[nodiscard]] bool on_gpu(std::size_t l, std::size_t e, seconds t) const noexcept {
    return res_.usable(key(l, e), gpu_tier, t);
  }

  /// Evicts the least recently used GPU copy of layer `l` when its K slots are full.
  void make_room(std::size_t l) {
    std::size_t count = 0, victim = E_;
    for (std::size_t e = 0; e < E_; ++e) {
      const std::size_t i = l * E_ + e;
      if (in_set_[i] == 0) continue;
      ++count;
      if (victim == E_ || stamp_[i] < stamp_[l * E_ + victim]) victim = e;
    }
    if (count >= K_ && victim != E_) {
      in_set_[l * E_ + victim] = 0;
      res_.drop(key(l, victim), gpu_tier);
    }
  }

  decision decide(std::size_t l, std::size_t e, std::uint32_t load, float weight, seconds t0) const noexcept {
    const std::size_t i = l * E_ + e;
    const bitwidth planned{set_bits_[i]};
    switch (system_.kind) {
      case gpu_ndp_system_kind::context_aware:
      case gpu_ndp_system_kind::uniform_bits:
        if (on_gpu(l, e, t0)) return {decision::where::gpu, res_.bits(key(l, e), gpu_tier)};
        if (prefill_ && config_.prefill_at_fp16) return {decision::where::ndp, fp16};
        if (in_set_[i] != 0) return {decision::where::ndp, bitwidth{flight_bits_[i]}};
        return {decision::where::ndp, planned};
      case gpu_ndp_system_kind::static_placement:
        if (on_gpu(l, e, t0)) return {decision::where::gpu, fp16};
        return {decision::where::ndp, planned};
      case gpu_ndp_system_kind::monde:
        if (on_gpu(l, e, t0)) return {decision::where::gpu, fp16};
        if (K_ > 0 && sys_.fetch_is_cheaper(key(l, e), fp16, load)) return {decision::where::fetch, fp16};
        return {decision::where::ndp, fp16};
      case gpu_ndp_system_kind::hobbit_like:
        if (on_gpu(l, e, t0)) return {decision::where::gpu, res_.bits(key(l, e), gpu_tier)};
        return {decision::where::fetch, weight >= config_.hobbit_fp16_weight ? fp16 : config_.hobbit_low_bits};
    }
    return {};
  }

  /// One layer's MoE work from `t0`; returns when it ends.
  seconds moe_layer(std::size_t l, seconds t0, std::span<const std::uint32_t> loads, std::span<const float> weights,
                    std::size_t tokens, gpu_ndp_request_outcome& out, bool decode) {
    std::uint64_t ndp_tokens = 0;
    std::size_t n_ndp = 0;
    ops_.clear();
    for (std::size_t e = 0; e < E_; ++e) {
      if (loads[e] == 0) continue;
      const decision d = decide(l, e, loads[e], weights[e], t0);
      ops_.push_back({e, d});
      if (d.at == decision::where::ndp) {
        ndp_tokens += loads[e];
        ++n_ndp;
      }
      if (decode && table_ != nullptr) {
        out.activations += loads[e];
        if (d.bits < fp16) {
          if (table_->bit_index(d.bits)) {
            out.loss_sum += loads[e] * table_->loss_at(l, e, d.bits);
          } else {
            out.activations_without_loss += loads[e];
          }
        }
      }
    }
    seconds end = t0;
    // Activations out to the NDP device.
    seconds ndp_ready = t0;
    const auto crossing = static_cast<std::uint64_t>(std::min<std::uint64_t>(ndp_tokens, tokens));
    if (n_ndp > 0) {
      const bytes act = static_cast<bytes>(static_cast<double>(crossing) * static_cast<double>(shape_.hidden_size) *
                                           config_.activation_element_bytes);
      const std::array<hop, 1> out_hop{{{to_ndp_, 0.5 * sys_.ndp().activation_transfer_seconds(crossing), act}}};
      ndp_ready = tl_.transfer(t0, out_hop, std::max<bytes>(act, 1), cost_kind::activation).landed();
    }
    // Demand fetches first, so that they stream while the GPU computes resident experts.
    for (auto& op : ops_) {
      if (op.d.at != decision::where::fetch) continue;
      make_room(l);
      const transfer_receipt rc = copy(t0, key(l, op.e), op.d.bits, cost_kind::demand_fetch);
      out.fetched_bytes += rc.size();
      op.ready = rc.landed();
      const std::size_t i = l * E_ + op.e;
      in_set_[i] = 1;
      stamp_[i] = ++clock_;
    }
    for (const auto& op : ops_) {
      if (op.d.at != decision::where::gpu) continue;
      stamp_[l * E_ + op.e] = ++clock_;
      end = std::max(
          end,
          tl_.run(t0, gpu_, sys_.gpu().compute_seconds(key(l, op.e), op.d.bits, loads[op.e]), cost_kind::expert).end);
    }
    for (const auto& op : ops_) {
      if (op.d.at != decision::where::fetch) continue;
      end = std::max(end, tl_.run(op.ready, gpu_, sys_.gpu().compute_seconds(key(l, op.e), op.d.bits, loads[op.e]),
                                  cost_kind::expert)
                              .end);
    }
    const seconds shared = pass_.shared_experts_seconds(static_cast<layer_id>(l), tokens);
    if (shared > 0.0) end = std::max(end, tl_.run(t0, gpu_, shared, cost_kind::dense).end);
    // NDP experts, then the results back to the GPU.
    seconds ndp_end = ndp_ready;
    for (const auto& op : ops_) {
      if (op.d.at != decision::where::ndp) continue;
      ndp_end =
          tl_.run(ndp_ready, ndp_, sys_.ndp().compute_seconds(key(l, op.e), op.d.bits, loads[op.e]), cost_kind::expert)
              .end;
    }
    if (n_ndp > 0) {
      const bytes act = static_cast<bytes>(static_cast<double>(crossing) * static_cast<double>(shape_.hidden_size) *
                                           config_.activation_element_bytes);
      const std::array<hop, 1> back{{{to_gpu_, 0.5 * sys_.ndp().activation_transfer_seconds(crossing), act}}};
      end = std::max(end, tl_.transfer(ndp_end, back, std::max<bytes>(act, 1), cost_kind::activation).landed());
    }
    return end;
  }

  /// One forward pass of `tokens` tokens reading `cached_reads` KV entries per layer.
  seconds forward_pass(seconds t, std::size_t tokens, std::uint64_t cached_reads, std::span<const std::uint32_t> loads,
                       std::span<const float> weights, std::span<const std::uint32_t> rows,
                       gpu_ndp_request_outcome& out, bool decode) {
    // One sequence per pass: a request's prefill or one of its decode tokens.
    for (std::uint32_t d = 0; d < shape_.num_dense_layers; ++d) {
      t = tl_.run(t, gpu_, pass_.dense_layer_seconds(d, tokens, cached_reads, 1), cost_kind::dense).end;
    }
    for (std::size_t l = 0; l < L_; ++l) {
      const auto model_layer = static_cast<std::uint32_t>(shape_.num_dense_layers + l);
      t = tl_.run(t, gpu_, pass_.attention_seconds(model_layer, tokens, cached_reads, 1), cost_kind::attention).end;
      t = tl_.run(t, gpu_, pass_.router_seconds(tokens), cost_kind::dense).end;
      if (rows[l] > 0) {
        t = moe_layer(l, t, loads.subspan(l * E_, E_), weights.subspan(l * E_, E_), rows[l], out, decode);
      }
      tl_.settle(t);
      collect();
      retire();
    }
    return tl_.run(t, gpu_, pass_.output_head_seconds(1), cost_kind::dense).end;
  }

  /// A request's placement copy in the background.
  struct copy_state {
    seconds prefill_end = 0.0;
    seconds last_landed = 0.0;
    std::size_t pending = 0;
    bool cancelled = false;
  };

  struct op_t {
    std::size_t e = 0;
    decision d;
    seconds ready = 0.0;
  };

  const gpu_ndp_system<Gpu, Ndp>& sys_;
  forward_pass_cost<Gpu> pass_;
  const model_shape& shape_;
  gpu_ndp_system_config system_;
  gpu_ndp_replay_config config_;
  const loss_table* table_;
  std::size_t L_, E_, K_;
  timeline tl_;
  resource_id gpu_, ndp_, to_gpu_, to_ndp_;
  timed_residency res_;
  /// In the GPU set (placement systems) or the cache (MoNDE, HOBBIT-like): present or on
  /// its way.
  std::vector<std::uint8_t> in_set_;
  /// The planned bitwidth of each expert (NDP bits for NDP experts).
  std::vector<int> set_bits_;
  /// The NDP bitwidth of an expert whose GPU copy is in flight.
  std::vector<int> flight_bits_;
  std::vector<std::uint64_t> job_;
  /// The leaving expert an arriving one replaces, until the arrival's copy starts.
  std::vector<std::size_t> replaces_;
  std::vector<std::size_t> incoming_, outgoing_;
  /// The request whose copy a background job belongs to.
  std::vector<std::size_t> owner_;
  std::vector<copy_state> copy_of_;
  std::vector<std::uint64_t> stamp_;
  std::uint64_t clock_ = 0;
  std::vector<op_t> ops_;
  ledger startup_;
  seconds now_ = 0.0;
  bool prefill_ = false;
};

}  // namespace detail

/// Replays every request of `trace` that has a prefill and decode steps (after the
/// calibration requests) through each system, on `system`'s devices for a model of `shape`.
///
/// `table` (may be null) must cover the trace's layers and experts; `calibration` (may be
/// null) must have the trace's layers × experts.
///
/// Throws: `invalid_argument` naming `replay_gpu_ndp` when the trace's layers or experts
/// differ from the shape's MoE layers and experts, K exceeds the experts, the table or the
/// calibration has another shape, `calibration_requests` leaves no request to measure, or
/// the shape does not describe its forward pass; what the timeline and the placement throw.
template <DeviceCost Gpu, DeviceCost Ndp>
requires DenseComputeCost<Gpu>
[[nodiscard]] gpu_ndp_replay_result replay_gpu_ndp(const routing_trace& trace, const gpu_ndp_system<Gpu, Ndp>& system,
                                                   const model_shape& shape, const loss_table* table,
                                                   const gpu_ndp_calibration* calibration,
                                                   std::span<const gpu_ndp_system_config> systems,
                                                   const gpu_ndp_replay_config& opt = {}) {
  constexpr const char* fn = "replay_gpu_ndp";
  const auto& info = trace.info();
  const std::size_t L = info.num_layers, E = info.num_experts;
  detail::require_trace_matches(L, E, shape, fn);
  if (opt.gpu_experts_per_layer > E) {
    detail::throw_invalid(fn, "gpu_experts_per_layer must be <= the experts per layer " + std::to_string(E),
                          opt.gpu_experts_per_layer);
  }
  if (table != nullptr && (table->num_layers() != L || table->num_experts() != E)) {
    detail::throw_invalid(
        fn,
        "the loss table must cover " + std::to_string(L) + " layers x " + std::to_string(E) + " experts, its layers",
        table->num_layers());
  }
  if (calibration != nullptr && (calibration->counts.rows() != static_cast<Eigen::Index>(L) ||
                                 calibration->counts.cols() != static_cast<Eigen::Index>(E) ||
                                 calibration->weight_sums.rows() != calibration->counts.rows() ||
                                 calibration->weight_sums.cols() != calibration->counts.cols())) {
    detail::throw_invalid(fn,
                          "the calibration must have " + std::to_string(L) + " x " + std::to_string(E) +
                              " counts and weight sums, its rows",
                          calibration->counts.rows());
  }

  // Requests with a prefill and decode steps; the first `calibration_requests` calibrate.
  std::vector<const request_ref*> usable;
  for (const auto& r : trace.requests()) {
    bool prefill = false, decode = false;
    for (const auto& st : trace.steps_of(r)) (st.kind == phase::prefill ? prefill : decode) = true;
    if (prefill && decode) usable.push_back(&r);
  }
  gpu_ndp_replay_result result;
  std::optional<gpu_ndp_calibration> calib;
  if (calibration != nullptr) {
    calib = *calibration;
  } else if (opt.calibration_requests > 0) {
    if (opt.calibration_requests >= usable.size()) {
      detail::throw_invalid(fn,
                            "calibration_requests must leave a request to measure; requests with prefill and decode " +
                                std::to_string(usable.size()) + ", calibration_requests",
                            opt.calibration_requests);
    }
    routing_stats_collector c(L, E);
    std::string names;
    for (std::size_t i = 0; i < opt.calibration_requests; ++i) {
      for (const auto& st : trace.steps_of(*usable[i])) {
        for (const auto& b : trace.batches_of(st)) c.observe(trace.view(b));
      }
      names += (i ? ", " : "") + usable[i]->name;
    }
    calib = gpu_ndp_calibration{"requests " + names, c.counts(phase::prefill) + c.counts(phase::decode),
                                c.weight_sums(phase::prefill) + c.weight_sums(phase::decode)};
    usable.erase(usable.begin(), usable.begin() + static_cast<std::ptrdiff_t>(opt.calibration_requests));
  }
  result.calibration = calib ? calib->source : std::string();

  std::vector<detail::gpu_ndp_routing> routings;
  routings.reserve(usable.size());
  routing_stats_collector req(L, E);
  std::uint64_t longest = 0;
  for (const request_ref* r : usable) {
    routings.push_back(detail::make_routing(trace, *r, opt.prompt_tokens, opt.output_tokens));
    longest = std::max<std::uint64_t>(longest, routings.back().prompt_tokens + routings.back().steps);
    req.reset();
    for (const auto& st : trace.steps_of(*r)) {
      for (const auto& b : trace.batches_of(st)) req.observe(trace.view(b));
    }
    gpu_ndp_request_similarity s;
    s.name = r->name;
    s.prefill_tokens = routings.back().prompt_tokens;
    s.similarity = layer_cosine_similarity(req.counts(phase::prefill), req.counts(phase::decode));
    s.mean_similarity = summarize_defined(s.similarity).mean;
    result.requests.push_back(std::move(s));
  }

  const std::size_t K = opt.gpu_experts_per_layer;
  result.hbm_capacity_bytes = system.gpu().capacity_bytes();
  result.hbm_needed_bytes = non_expert_weight_bytes(shape, opt.pass) +
                            static_cast<bytes>(K * L) * system.gpu().footprint_bytes({0, 0}, fp16) +
                            longest * kv_bytes_per_token(shape, opt.pass) +
                            linear_state_bytes_per_sequence(shape, opt.pass);
  const bool fits = result.hbm_needed_bytes <= result.hbm_capacity_bytes;

  // The initial GPU set: top K over the calibration set, or none.
  std::vector<std::uint8_t> initial(L * E, 0);
  placement_plan static_plan;
  if (calib) {
    prefill_placement_config pc{.gpu_experts_per_layer = K,
                                .importance = opt.importance,
                                .select_bitwidths = false,
                                .uniform_bits = fp16,
                                .allocation = opt.allocation};
    const placement_plan p = place_from_prefill(calib->counts, calib->weight_sums, nullptr, pc);
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t e = 0; e < E; ++e) initial[l * E + e] = p.at(l, e).where == tier::gpu ? 1 : 0;
    }
  }

  for (const auto& sc : systems) {
    gpu_ndp_system_result out;
    out.config = sc;
    if (!fits) {
      out.status = gpu_ndp_status::does_not_fit;
      const bytes rest =
          result.hbm_needed_bytes - static_cast<bytes>(K * L) * system.gpu().footprint_bytes({0, 0}, fp16);
      const bytes per_k = static_cast<bytes>(L) * system.gpu().footprint_bytes({0, 0}, fp16);
      const std::size_t most = rest >= result.hbm_capacity_bytes ? 0 : (result.hbm_capacity_bytes - rest) / per_k;
      const auto gb = [](bytes b) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(b) / 1e9);
        return std::string(buf);
      };
      out.status_detail = "HBM holds " + gb(result.hbm_capacity_bytes) + " GB; K = " + std::to_string(K) + " needs " +
                          gb(result.hbm_needed_bytes) + " GB; at most K = " + std::to_string(most) + " fits";
      result.systems.push_back(std::move(out));
      continue;
    }
    if (sc.kind == gpu_ndp_system_kind::context_aware && table == nullptr) {
      out.status = gpu_ndp_status::needs_loss_table;
      out.status_detail = "the bitwidth selector needs a loss table";
      result.systems.push_back(std::move(out));
      continue;
    }
    if (sc.kind == gpu_ndp_system_kind::static_placement && !calib) {
      out.status = gpu_ndp_status::no_calibration;
      out.status_detail = "a static placement needs a calibration set";
      result.systems.push_back(std::move(out));
      continue;
    }
    detail::gpu_ndp_run<Gpu, Ndp> run(system, shape, sc, opt, table);
    if (sc.kind != gpu_ndp_system_kind::monde && sc.kind != gpu_ndp_system_kind::hobbit_like) {
      // The placement in effect before the first request: the calibration set's, at the
      // system's bitwidths (without calibration every expert on the NDP device, ranked alike).
      const bool select = table != nullptr && sc.kind != gpu_ndp_system_kind::uniform_bits;
      prefill_placement_config pc{.gpu_experts_per_layer = calib ? K : 0,
                                  .importance = opt.importance,
                                  .select_bitwidths = select,
                                  .ndp_average_bits = sc.average_bits,
                                  .uniform_bits = sc.uniform_bits,
                                  .allocation = opt.allocation};
      const Eigen::MatrixXd ones = Eigen::MatrixXd::Ones(static_cast<Eigen::Index>(L), static_cast<Eigen::Index>(E));
      const placement_plan p = place_from_prefill(calib ? calib->counts : ones, calib ? calib->weight_sums : ones,
                                                  select ? table : nullptr, pc);
      std::size_t infeasible = 0;
      for (std::size_t l = 0; l < L; ++l)
        infeasible += p.status(l) == allocation_status::infeasible ? std::size_t{1} : std::size_t{0};
      if (infeasible > 0) {
        out.status = gpu_ndp_status::infeasible_budget;
        out.status_detail = "prefix split cannot meet an average of " + detail::show(sc.average_bits) + " bits on " +
                            std::to_string(infeasible) + " of " + std::to_string(L) + " layers";
        result.systems.push_back(std::move(out));
        continue;
      }
      run.set_initial_plan(p);
    }
    run.startup(initial, out);
    for (std::size_t q = 0; q < routings.size(); ++q) {
      gpu_ndp_request_outcome o;
      if (!run.serve(q, routings[q], o, out)) break;
      out.requests.push_back(std::move(o));
    }
    run.finish(out.requests);
    if (!out.ok()) out.requests.clear();
    out.accounts = run.request_accounts();
    result.systems.push_back(std::move(out));
  }
  return result;
}

}  // namespace moepolicy
