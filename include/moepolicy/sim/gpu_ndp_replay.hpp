// moepolicy/sim/gpu_ndp_replay.hpp — replay a routing trace on a GPU + CXL-NDP system under
// the context-aware placement of seed 000 and its baselines.
//
// For each request that has a prefill and decode steps, the request's prefill statistics
// (P, W) give a placement (place/prefill_placement.hpp), fixed for the request's decode;
// every decode step is then priced layer by layer on `gpu_ndp_system` (sim/gpu_ndp.hpp).
// Systems compared (`gpu_ndp_system_kind`):
//   context_aware     top-K by prefill importance on the GPU at FP16, NDP experts at
//                     prefix-split bitwidths for an average b̄ (needs a loss table);
//   uniform_bits      the same placement, every NDP expert at one bitwidth (no selector);
//   static_placement  top-K by importance over the whole trace (every request, both
//                     phases), fixed for all requests, NDP bits as context_aware when a loss
//                     table is given, else uniform;
//   on_demand         MoNDE's policy: NDP experts at FP16; an activated expert that is not
//                     on the GPU is fetched when transfer + GPU compute beats NDP compute +
//                     activation transfer, and then stays in a K-expert LRU GPU cache;
//   gpu_only          every activated expert runs on the GPU; misses in a K-expert LRU GPU
//                     cache are fetched over the GPU's link.
// The two cached systems start each request with the static placement's GPU set.
// Bytes migrated: for placement systems, the experts the request's plan copies onto the GPU
// (from all-on-NDP: one migration per sequence; 0 for the static placement, loaded once);
// for cached systems, every fetch. Quantisation loss, when a loss table is given: the mean
// L(l, e, b_e) over the decode's expert activations (0 for an activation at full precision),
// i.e. each expert's loss weighted by how often decode uses it.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/sim/gpu_ndp.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/stats/routing_stats.hpp"
#include "moepolicy/trace/routing_trace.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy {

/// The systems `replay_gpu_ndp` compares; see the header comment.
enum class gpu_ndp_system_kind : std::uint8_t { context_aware, uniform_bits, static_placement, on_demand, gpu_only };

/// One system to replay.
struct gpu_ndp_system_config {
  std::string label;
  gpu_ndp_system_kind kind = gpu_ndp_system_kind::context_aware;
  /// b̄ for prefix split (context_aware, and static_placement with a loss table).
  double average_bits = 3.0;
  /// NDP bitwidth of uniform_bits, and of static_placement without a loss table.
  bitwidth uniform_bits = bitwidth{3};
};

/// What one system did over one request's decode (or, summed, over a trace).
struct gpu_ndp_outcome {
  std::uint64_t decode_steps = 0;
  /// Σ over steps and layers of the layer time (GPU and NDP overlapped).
  seconds decode_seconds = 0.0;
  /// Σ of the NDP side's time.
  seconds ndp_seconds = 0.0;
  bytes migrated_bytes = 0;
  /// Σ L(l, e, b_e) over decode activations, and the activations counted.
  double loss_sum = 0.0;
  std::uint64_t activations = 0;
  /// Σ over layers of the prefix-split objective and of the exact optimum's, for the
  /// systems that run prefix split (0 otherwise).
  double prefix_objective = 0.0;
  double exact_objective = 0.0;

  /// Per-token decode time.
  [[nodiscard]] seconds seconds_per_token() const noexcept {
    return decode_steps == 0 ? 0.0 : decode_seconds / static_cast<double>(decode_steps);
  }
  [[nodiscard]] seconds ndp_seconds_per_token() const noexcept {
    return decode_steps == 0 ? 0.0 : ndp_seconds / static_cast<double>(decode_steps);
  }
  /// Mean quantisation loss per decode activation (NaN without a loss table).
  [[nodiscard]] double mean_loss() const noexcept {
    return activations == 0 ? std::nan("") : loss_sum / static_cast<double>(activations);
  }
  gpu_ndp_outcome& operator+=(const gpu_ndp_outcome& o) noexcept {
    decode_steps += o.decode_steps;
    decode_seconds += o.decode_seconds;
    ndp_seconds += o.ndp_seconds;
    migrated_bytes += o.migrated_bytes;
    loss_sum += o.loss_sum;
    activations += o.activations;
    prefix_objective += o.prefix_objective;
    exact_objective += o.exact_objective;
    return *this;
  }
};

/// One request's replay: its prefill↔decode similarity and every system's outcome.
struct gpu_ndp_request_result {
  std::string name;
  std::uint64_t prefill_tokens = 0;
  /// Cosine similarity of prefill and decode activation counts per layer (NaN where a
  /// phase has no rows at that layer), and their mean over the layers that have both.
  std::vector<double> similarity;
  double mean_similarity = 0.0;
  std::vector<gpu_ndp_outcome> outcomes;  // one per system, in the order given
};

/// Options of `replay_gpu_ndp`.
struct gpu_ndp_replay_options {
  /// K, experts per layer on the GPU (placement systems) or in its cache (cached ones).
  std::size_t gpu_experts_per_layer = 4;
  importance_config importance{};
  bit_allocation_config allocation{};
};

namespace detail {

/// A per-layer LRU set of at most `capacity` GPU-resident experts.
class layer_lru {
 public:
  layer_lru(std::size_t layers, std::size_t experts, std::size_t capacity)
      : experts_(experts), capacity_(capacity), stamp_(layers * experts, 0) {}

  void load(const placement_plan& plan) {
    std::fill(stamp_.begin(), stamp_.end(), 0);
    for (std::size_t l = 0; l < plan.num_layers(); ++l) {
      for (std::size_t e = 0; e < experts_; ++e) {
        if (plan.at(l, e).where == tier::gpu) stamp_[l * experts_ + e] = 1;
      }
    }
    clock_ = 2;
  }
  [[nodiscard]] bool resident(std::size_t l, std::size_t e) const noexcept { return stamp_[l * experts_ + e] != 0; }
  void touch(std::size_t l, std::size_t e) noexcept { stamp_[l * experts_ + e] = clock_++; }
  /// Inserts `e`, evicting the least recently used expert of the layer when full.
  void insert(std::size_t l, std::size_t e) noexcept {
    std::size_t count = 0, victim = experts_;
    for (std::size_t i = 0; i < experts_; ++i) {
      const auto s = stamp_[l * experts_ + i];
      if (s == 0) continue;
      ++count;
      if (victim == experts_ || s < stamp_[l * experts_ + victim]) victim = i;
    }
    if (count >= capacity_ && victim != experts_) stamp_[l * experts_ + victim] = 0;
    if (capacity_ > 0) touch(l, e);
  }

 private:
  std::size_t experts_, capacity_;
  std::vector<std::uint64_t> stamp_;
  std::uint64_t clock_ = 2;
};

inline void prefix_vs_exact(const placement_plan& plan, const Eigen::MatrixXd& P, const Eigen::MatrixXd& W,
                            const loss_table& table, double average_bits, const gpu_ndp_replay_options& opt,
                            gpu_ndp_outcome& out) {
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
      for (std::size_t j = 0; j < row.size(); ++j) L(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = row[j];
      chosen += table.loss_at(l, ndp[i], plan.at(l, ndp[i]).bits);
    }
    const bit_allocation exact = exact_allocation(table.bits(), L, average_bits, opt.allocation);
    if (exact.status == allocation_status::infeasible) continue;
    out.prefix_objective += chosen;
    out.exact_objective += exact.weighted_loss;
  }
}

}  // namespace detail

/// Replays every request of `trace` that has prefill and decode rows under each system.
///
/// `table` (may be null) must cover the trace's layers and experts; systems that select
/// bitwidths need it.
///
/// Throws: `invalid_argument` naming `replay_gpu_ndp` when K exceeds the experts, a system
/// needs a loss table that is missing, or the table's shape differs from the trace's.
template <DeviceCost Gpu, DeviceCost Ndp>
[[nodiscard]] std::vector<gpu_ndp_request_result> replay_gpu_ndp(const routing_trace& trace,
                                                                  const gpu_ndp_system<Gpu, Ndp>& system,
                                                                  const loss_table* table,
                                                                  std::span<const gpu_ndp_system_config> systems,
                                                                  const gpu_ndp_replay_options& opt = {}) {
  constexpr const char* fn = "replay_gpu_ndp";
  const auto& info = trace.info();
  const std::size_t Ls = info.num_layers, E = info.num_experts;
  if (opt.gpu_experts_per_layer > E) {
    detail::throw_invalid(fn, "gpu_experts_per_layer must be <= the experts per layer " + std::to_string(E),
                          opt.gpu_experts_per_layer);
  }
  if (table != nullptr && (table->num_layers() != Ls || table->num_experts() != E)) {
    detail::throw_invalid(fn, "the loss table must cover " + std::to_string(Ls) + " layers x " + std::to_string(E) +
                              " experts, its layers", table->num_layers());
  }
  for (const auto& s : systems) {
    if (s.kind == gpu_ndp_system_kind::context_aware && table == nullptr) {
      detail::throw_invalid(fn, "system \"" + s.label + "\" selects bitwidths and needs a loss table");
    }
  }

  // The static placement's statistics: the whole trace, both phases.
  routing_stats_collector whole(Ls, E);
  for (const auto& b : trace.batches()) whole.observe(trace.view(b));
  const Eigen::MatrixXd whole_P = whole.counts(phase::prefill) + whole.counts(phase::decode);
  const Eigen::MatrixXd whole_W = whole.weight_sums(phase::prefill) + whole.weight_sums(phase::decode);

  const auto gpu_bytes = [&](expert_key k, bitwidth b) { return system.gpu().footprint_bytes(k, b); };
  std::vector<gpu_ndp_request_result> results;
  routing_stats_collector req(Ls, E);
  std::vector<std::uint32_t> loads(E);
  std::vector<run_on> how(E);
  std::vector<bitwidth> bits(E, fp16);
  detail::layer_lru lru(Ls, E, opt.gpu_experts_per_layer);
  const placement_plan all_ndp = [&] {
    placement_plan p(Ls, E);
    for (std::size_t l = 0; l < Ls; ++l) {
      for (std::size_t e = 0; e < E; ++e) p.at(l, e) = {tier::ndp, fp16};
    }
    return p;
  }();

  for (const auto& r : trace.requests()) {
    req.reset();
    std::uint64_t prefill_tokens = 0, decode_steps = 0;
    for (const auto& st : trace.steps_of(r)) {
      for (const auto& b : trace.batches_of(st)) req.observe(trace.view(b));
      if (st.kind == phase::prefill) {
        prefill_tokens += trace.batches_of(st).empty() ? 0 : trace.batches_of(st).front().num_rows;
      } else {
        ++decode_steps;
      }
    }
    if (prefill_tokens == 0 || decode_steps == 0) continue;

    gpu_ndp_request_result rr;
    rr.name = r.name;
    rr.prefill_tokens = prefill_tokens;
    rr.similarity = layer_cosine_similarity(req.counts(phase::prefill), req.counts(phase::decode));
    rr.mean_similarity = summarize_defined(rr.similarity).mean;

    for (const auto& sys : systems) {
      gpu_ndp_outcome out;
      prefill_placement_config pc{.gpu_experts_per_layer = opt.gpu_experts_per_layer,
                                  .importance = opt.importance,
                                  .select_bitwidths = false,
                                  .ndp_average_bits = sys.average_bits,
                                  .uniform_bits = sys.uniform_bits,
                                  .allocation = opt.allocation};
      placement_plan plan;
      const bool cached = sys.kind == gpu_ndp_system_kind::on_demand || sys.kind == gpu_ndp_system_kind::gpu_only;
      switch (sys.kind) {
        case gpu_ndp_system_kind::context_aware:
          pc.select_bitwidths = true;
          plan = place_from_prefill(req.counts(phase::prefill), req.weight_sums(phase::prefill), table, pc);
          detail::prefix_vs_exact(plan, req.counts(phase::prefill), req.weight_sums(phase::prefill), *table,
                                  sys.average_bits, opt, out);
          out.migrated_bytes = moved_bytes(diff(all_ndp, plan, gpu_bytes));
          break;
        case gpu_ndp_system_kind::uniform_bits:
          plan = place_from_prefill(req.counts(phase::prefill), req.weight_sums(phase::prefill), nullptr, pc);
          out.migrated_bytes = moved_bytes(diff(all_ndp, plan, gpu_bytes));
          break;
        case gpu_ndp_system_kind::static_placement:
          pc.select_bitwidths = table != nullptr;
          plan = place_from_prefill(whole_P, whole_W, table, pc);
          break;
        case gpu_ndp_system_kind::on_demand:
        case gpu_ndp_system_kind::gpu_only:
          pc.select_bitwidths = false;
          pc.uniform_bits = fp16;
          plan = place_from_prefill(whole_P, whole_W, nullptr, pc);
          lru.load(plan);
          break;
      }

      for (const auto& st : trace.steps_of(r)) {
        if (st.kind != phase::decode) continue;
        ++out.decode_steps;
        for (const auto& b : trace.batches_of(st)) {
          const batch_view v = trace.view(b);
          std::fill(loads.begin(), loads.end(), 0u);
          for (expert_id e : v.experts) ++loads[e];
          for (std::size_t e = 0; e < E; ++e) {
            if (loads[e] == 0) continue;
            const expert_key key{b.layer, static_cast<expert_id>(e)};
            if (!cached) {
              const residence& res = plan.at(b.layer, e);
              how[e] = res.where == tier::gpu ? run_on::gpu_resident : run_on::ndp;
              bits[e] = res.bits;
            } else if (lru.resident(b.layer, e)) {
              how[e] = run_on::gpu_resident;
              bits[e] = fp16;
              lru.touch(b.layer, e);
            } else if (sys.kind == gpu_ndp_system_kind::gpu_only || system.fetch_is_cheaper(key, fp16, loads[e])) {
              how[e] = run_on::gpu_fetched;
              bits[e] = fp16;
              lru.insert(b.layer, e);
            } else {
              how[e] = run_on::ndp;
              bits[e] = fp16;
            }
            if (table != nullptr) {
              out.activations += loads[e];
              if (bits[e] < fp16) out.loss_sum += loads[e] * table->loss_at(b.layer, e, bits[e]);
            }
          }
          const gpu_ndp_layer_time t = system.price(b.layer, loads, how, bits, b.num_rows);
          out.decode_seconds += t.layer_seconds;
          out.ndp_seconds += t.ndp_seconds;
          out.migrated_bytes += t.fetched_bytes;
        }
      }
      rr.outcomes.push_back(out);
    }
    results.push_back(std::move(rr));
  }
  return results;
}

}  // namespace moepolicy
