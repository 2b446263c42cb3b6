// moepolicy/sim/trimoe_replay.hpp — TriMoE's GPU + AMX-CPU + DIMM-NDP decode replayed on
// batched steps of a recorded trace, beside its baselines, its ablation, a lower bound and
// the exact optimum (seed 001 "TriMoE: Augmenting GPU with AMX-Enabled CPU and DIMM-NDP for
// High-Throughput MoE Inference via Offloading": §4.2 Eq. 1–7, §4.3 Eq. 8 and the migration
// decision, §5.2 Tab. 3, §5.3 Fig. 8).
//
// Machine. Three `device_spec`s (a serial GPU, a serial CPU, a parallel-units DIMM-NDP
// device whose unit count is the number of DIMMs D), presets::h100_pcie_gen5,
// xeon_8470_amx and dimm_ndp by default (seed 001 Tab. 1), each priced by the roofline
// model (cost/roofline.hpp) with the model's shape, weights at FP16. Every (step, layer)
// with at least one active expert is one makespan problem (sched/problem.hpp, Eq. 5–7)
// priced by sched/gpu_cpu_ndp.hpp (Eq. 1–4, 6). A step's time is the sum of its layers'
// makespans: MoE layers run one after another, and attention and the dense parts of the
// model are left out (the paper's Fig. 6 and 8 measure the MoE layers too).
//
// Steps. `batched_steps` (sched/batched_steps.hpp): B recorded decode tokens per step, by
// default B concurrent sequences; `replay_trimoe` on a trace uses B = `config.batch`, or 64
// for models of at most 8 experts and 32 otherwise. Step 0 only warms the predictors;
// steps 1 … S−1 are replayed, and every per-step figure is averaged over those S − 1.
//
// Prediction (§4.3, Eq. 8). An EMA load predictor (predict/ema_load_predictor.hpp, α =
// `config.alpha`, warm start) is updated with each layer's loads right after the layer
// runs; its classes (hot / warm / cold by token share, stats/analysis.hpp) for a layer's
// next step are what that step's layout is built from.
//
// Class layout (every system but the two +Relayout rows): at step t, layer l, from the
// classes the EMA predicted after step t − 1:
//   hot   resident in GPU HBM (and striped in host memory);
//   warm  striped over the D DIMMs;
//   cold  localized on DIMM (l · E + e) mod D (round robin).
// It is re-derived at every step at no charge: it is the layout an ideal, free migration
// mechanism would keep. GPU-only and GPU+CPU keep the residency but stripe every other
// expert, since localizing serves only NDP and would cut their host reads to one DIMM's
// bandwidth (19.2 GB/s with the preset).
//
// Systems (`trimoe_system`), as §5.3's ablation (Fig. 8) plus this project's solvers:
//   gpu_only   every expert on the GPU: hot ones hit HBM (Eq. 1), the rest are fetched
//              over PCIe (Eq. 2); Klotski-like (§5.1.2);
//   gpu_cpu    greedy per expert over GPU and CPU (Eq. 3); KTransformers-like;
//   gpu_ndp    greedy over GPU and NDP (Eq. 4); MoNDE-like, Fig. 8's base;
//   greedy     TriMoE "+CPU": greedy over all three (sched/bottleneck_refinement.hpp with
//              no refinement move);
//   refined    TriMoE "+Refinement": the paper's bottleneck-aware refinement (§4.2);
//   relayout   TriMoE "+Relayout": the paper's scheduler on a layout that evolves by the
//              migration planner (below), relayouts by predicted class (the planner's
//              `relayout_rule::class_change`, the paper's literal reading);
//   relayout_benefit  the same machinery with the planner's `relayout_rule::benefit`: any
//              localized expert may be striped and any striped expert not predicted hot
//              localized, each only when the predicted step gains
//              (balance/migration_planner.hpp says why);
//   improved   this project's local search (sched/local_search.hpp) on the class layout;
//   exact      the exact optimum on the class layout (sched/exact.hpp, seeded with the
//              improved schedule, `exact_max_experts` and `exact_nodes` bound it); a
//              problem it refuses (too many experts) keeps the improved schedule.
// Beside them: a lower bound on the class layout (sched/lower_bound.hpp's bound, raised by
// `bound_rounds` multiplicative-weights rounds of its dual).
//
// +Relayout (§4.3 "Expert Migration Decision"; balance/migration_planner.hpp). Each of
// the two +Relayout rows has its own planner and its own state per layer — each expert's
// layout and GPU residency — which starts as the class layout of step 1 (the EMA's classes
// after step 0) and from then on changes only by that row's planned migrations (the rows
// share the EMA and differ only in the planner's `relayout_when`):
//   1. after (t, l) runs under the paper's scheduler and the EMA has taken its loads, the
//      planner plans layer l's migrations for step t + 1 from the EMA's predicted loads and
//      classes (prefetch of predicted-hot experts over PCIe, relayout striped ↔ localized
//      and cold-expert rebalancing over DIMM-Link, ranked by predicted benefit, taken until
//      their transfer times fill the window);
//   2. the taken tasks are applied (`apply_migrations`), and step t + 1 of layer l runs on
//      the result. No plan is made after the last step or for a layer idle at step t.
// Window. The paper hides migrations behind "the current layer's MLP and Attention". The
// model has no attention time, so the window is the layer's just-executed MoE makespan
// under the row's own state, times `window_scale` (1 by default); leaving attention out
// only shortens the window, so this is conservative. `relayout_window::fixed` uses
// `window_seconds` instead. PCIe and DIMM-Link share the window unless the planner's
// `separate_links` says otherwise. Migration traffic is not charged to the DIMMs' Eq. 6
// time (the paper hides it).
// GPU HBM. A layer holds at most `slots` experts in HBM: `gpu_slots_per_layer`, or when 0
// (the default) as many as the experts predicted hot for the planned step, which is what
// the class layout holds there — so +Relayout never has more HBM than the other systems.
// Prefetches may fill `slots` minus the resident predicted-hot experts (the planner's
// `gpu_free_bytes`); after applying the plan, residents beyond `slots` are dropped, those
// not predicted hot first, then the least predicted load (lowest index among equals).
// Dropping costs nothing: the host copy stays.
//
// Per-layer figures. For each system and MoE layer, seconds per replayed step of: the
// makespan (Eq. 7), the GPU's and the CPU's Eq. 5 totals, the largest and the mean DIMM
// Eq. 6 total (NDP execution plus contention from GPU and CPU reads); a layer idle at a
// step adds 0. The end-to-end figures are their sums over layers: seconds per batched step.
//
// Utilisation (Tab. 3), per system over all replayed problems, each divided by Σ makespan:
//   busy     GPU: Σ T_GPU (Eq. 5, waits for PCIe and DIMM reads included); CPU: Σ T_CPU;
//            NDP: Σ mean over DIMMs of T_DIMM (Eq. 6, contention included);
//   compute  time the domain computes: Σ over its experts of the device's f_calc(L) (the
//            roofline max(arithmetic, weight stream from its own memory): Eq. 1 on the
//            GPU; on the CPU f_calc_cpu without the wait for a slower DIMM read; Eq. 4 on
//            NDP), NDP averaged over the D DIMMs;
//   flops    achieved FLOP/s over peak: Σ L · 2 · 3 · hidden · intermediate of the
//            domain's experts / (peak · Σ makespan), NDP's peak times D.
// The paper does not define its utilisation; `compute` is the closest reading of
// "compute utilization".
//
// Gap to the exact optimum, over the problems the exact solver proved: makespan / optimum
// − 1 of greedy, refined and improved against the class layout's optimum, and of each
// +Relayout row against the optimum of its own problems (solved too, seeded with its
// schedule).
//
// Prediction block. For the EMA, a last-value predictor (α = 1) and the oracle (the step's
// true classes): class accuracy against the true classes (the same share rule on the
// step's loads), migration-decision accuracy (prefetch = hot, localize = cold, each right
// or wrong per expert, averaged), and the improved solver's step time under each one's
// class layout.
//
// Cost. Construction sizes every buffer (problems, schedules, solvers, both planners,
// predictor tables, per-layer accumulators); `replay_step` allocates nothing after it
// (tested with a counting allocator). The exact solver is exponential in the worst case,
// bounded by `exact_nodes` per problem.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// The systems `trimoe_replayer` compares, in report order (see the header comment).
enum class trimoe_system : std::uint8_t {
  gpu_only,
  gpu_cpu,
  gpu_ndp,
  greedy,
  refined,
  relayout,
  relayout_benefit,
  improved,
  exact
};

/// The number of `trimoe_system` values.
inline constexpr std::size_t num_trimoe_systems = 9;

/// "gpu_only", "gpu_cpu", "gpu_ndp", "greedy", "refined", "relayout", "relayout_benefit",
/// "improved" or "exact".
[[nodiscard]] constexpr std::string_view to_string(trimoe_system s) noexcept {
  switch (s) {
    case trimoe_system::gpu_only: return "gpu_only";
    case trimoe_system::gpu_cpu: return "gpu_cpu";
    case trimoe_system::gpu_ndp: return "gpu_ndp";
    case trimoe_system::greedy: return "greedy";
    case trimoe_system::refined: return "refined";
    case trimoe_system::relayout: return "relayout";
    case trimoe_system::relayout_benefit: return "relayout_benefit";
    case trimoe_system::improved: return "improved";
    case trimoe_system::exact: return "exact";
  }
  return "?";
}

/// The predictors of the prediction block.
enum class trimoe_predictor : std::uint8_t { ema, last_value, oracle };

/// The number of `trimoe_predictor` values.
inline constexpr std::size_t num_trimoe_predictors = 3;

/// Where the +Relayout overlap window comes from.
enum class relayout_window : std::uint8_t {
  moe_makespan,  ///< `window_scale` × the layer's just-executed MoE makespan
  fixed,         ///< `window_seconds` for every plan
};

/// The three devices, as published figures.
struct trimoe_machine {
  device_spec gpu = presets::h100_pcie_gen5();
  device_spec cpu = presets::xeon_8470_amx();
  /// A parallel-units device: one unit per DIMM.
  device_spec ndp = presets::dimm_ndp();
};

/// Whether `s` is one of the two +Relayout rows.
[[nodiscard]] constexpr bool is_relayout(trimoe_system s) noexcept {
  return s == trimoe_system::relayout || s == trimoe_system::relayout_benefit;
}

/// Configuration of the +Relayout systems.
struct trimoe_relayout_config {
  relayout_window window = relayout_window::moe_makespan;
  /// Multiplier of the executed makespan (`moe_makespan`), finite and >= 0.
  double window_scale = 1.0;
  /// The window of `fixed`, seconds, finite and >= 0.
  seconds window_seconds = 0.0;
  /// Experts per layer in GPU HBM at most; 0: as many as the experts predicted hot for the
  /// planned step (the class layout's residency).
  std::size_t gpu_slots_per_layer = 0;
  /// The planner's configuration (prefetch, relayout and rebalancing on; one shared budget)
  /// of the `relayout` row; the `relayout_benefit` row uses it with `relayout_when` =
  /// `relayout_rule::benefit`.
  migration_planner_config planner{};
};

/// Configuration of `trimoe_replayer` and `replay_trimoe`.
struct trimoe_replay_config {
  /// B, decode tokens per batched step, for `replay_trimoe` on a trace; 0: 64 for models
  /// of at most 8 experts, else 32.
  std::size_t batch = 0;
  /// α of the EMA load predictor (Eq. 8), in (0, 1].
  double alpha = 0.3;
  /// Problems of more activated experts are not searched exactly (<= 64).
  std::size_t exact_max_experts = 64;
  /// Search nodes of the exact solver per problem, >= 1.
  std::size_t exact_nodes = 1'000'000;
  /// Multiplicative-weights rounds of the lower bound's dual (0: the closed-form bound only).
  std::size_t bound_rounds = 64;
  /// The +Relayout systems.
  trimoe_relayout_config relayout{};
};

/// B for a model of `num_experts` experts when `trimoe_replay_config::batch` is 0.
[[nodiscard]] constexpr std::size_t trimoe_default_batch(std::size_t num_experts) noexcept {
  return num_experts <= 8 ? 64 : 32;
}

/// Device times of one MoE layer (or their sum over layers), seconds per replayed step.
struct trimoe_times {
  /// Eq. 7.
  seconds makespan = 0.0;
  /// Eq. 5, GPU.
  seconds gpu = 0.0;
  /// Eq. 5, CPU.
  seconds cpu = 0.0;
  /// Eq. 6, the busiest DIMM.
  seconds max_dimm = 0.0;
  /// Eq. 6, averaged over the DIMMs.
  seconds mean_dimm = 0.0;
};

/// Utilisation of one compute domain, fractions of the makespan (see the header comment).
struct trimoe_domain_use {
  double busy = 0.0;
  double compute = 0.0;
  double flops = 0.0;
};

/// What one system did over the replay.
struct trimoe_system_result {
  trimoe_system system = trimoe_system::gpu_only;
  /// Per MoE layer, averaged over the replayed steps.
  std::vector<trimoe_times> layers;
  /// Σ over layers: one batched step.
  trimoe_times step;
  trimoe_domain_use gpu, cpu, ndp;
  /// Whether a gap to the exact optimum is defined for this system.
  bool has_gap = false;
  /// Problems whose optimum was proven (the gap's denominator).
  std::size_t proven = 0;
  /// makespan / optimum − 1, mean and maximum over the proven problems.
  double gap_mean = 0.0;
  double gap_max = 0.0;
};

/// The prediction block for one predictor.
struct trimoe_prediction_score {
  trimoe_predictor predictor = trimoe_predictor::ema;
  hotness_confusion confusion;
  /// Migration-decision accuracy: prefetch (hot) and localize (cold) decisions right,
  /// averaged over both and over the scored experts.
  double decision_accuracy = 0.0;
  /// The improved solver's time per batched step under this predictor's class layout.
  seconds step_seconds = 0.0;
};

/// What a +Relayout system's planner did.
struct trimoe_relayout_stats {
  /// Plans made ((step, layer) pairs followed by a next step).
  std::size_t plans = 0;
  /// Tasks proposed and taken, by `migration_kind`.
  std::array<std::size_t, 4> proposed{};
  std::array<std::size_t, 4> taken{};
  /// Bytes moved by the taken tasks, PCIe (prefetch) and DIMM-Link (the rest).
  bytes pcie_bytes = 0;
  bytes link_bytes = 0;
  /// Σ of the windows and of the taken tasks' transfer times.
  seconds window_seconds = 0.0;
  seconds transfer_seconds = 0.0;
  /// Largest share of a window the taken tasks filled (each link's when separate).
  double max_fill = 0.0;
  /// Residents dropped to stay within the HBM slots.
  std::size_t evictions = 0;
  /// Activated experts that ran from a localized layout in the row's problems, and their
  /// tokens (the loads the layout puts on one DIMM's NDP unit or host bandwidth).
  std::size_t localized_active = 0;
  std::uint64_t localized_tokens = 0;
  /// The row's problems proven optimal, and its optimum's time per batched step (the exact
  /// schedule on the row's layouts; the improved schedule where unproven).
  std::size_t proven = 0;
  seconds exact_step_seconds = 0.0;
};

/// Everything a replay measured.
struct trimoe_result {
  std::size_t batch = 0;
  std::size_t num_steps = 0;
  /// S − 1 (0 when fewer than 2 steps).
  std::size_t replayed_steps = 0;
  std::size_t num_layers = 0;
  std::size_t num_experts = 0;
  std::size_t num_dimms = 0;
  /// (step, layer) problems replayed.
  std::size_t problems = 0;
  /// Of those, proven optimal on the class layout.
  std::size_t exact_proven = 0;
  /// Indexed by `trimoe_system`.
  std::array<trimoe_system_result, num_trimoe_systems> systems{};
  /// The lower bound on the class layout, per layer and per step.
  std::vector<seconds> layer_bound;
  seconds step_bound = 0.0;
  /// Indexed by `trimoe_predictor`.
  std::array<trimoe_prediction_score, num_trimoe_predictors> prediction{};
  /// The planners of the `relayout` and the `relayout_benefit` rows.
  trimoe_relayout_stats relayout;
  trimoe_relayout_stats relayout_benefit;

  [[nodiscard]] const trimoe_system_result& operator[](trimoe_system s) const noexcept {
    return systems[static_cast<std::size_t>(s)];
  }
  /// The planner statistics of +Relayout row `s`.
  ///
  /// Preconditions: `is_relayout(s)`.
  [[nodiscard]] const trimoe_relayout_stats& relayout_stats(trimoe_system s) const noexcept {
    MOEPOLICY_ASSERT(is_relayout(s));
    return s == trimoe_system::relayout_benefit ? relayout_benefit : relayout;
  }
};

/// Replays batched decode steps through every system, step by step.
class trimoe_replayer {
 public:
  using system_type = gpu_cpu_ndp_system<roofline_cost, roofline_cost, roofline_cost>;

  /// `steps` must outlive the replayer.
  ///
  /// Throws: `invalid_argument` when `steps` has no layer, its experts differ from
  /// `shape.num_experts`, `alpha` is not in (0, 1], `exact_nodes` is 0,
  /// `exact_max_experts` > 64, or a window setting is negative or not finite; and as the
  /// device models (`device_spec::validate`, `gpu_cpu_ndp_system`) and the planner do.
  /// Complexity: allocates every buffer the replay needs, O(layers · experts + experts · D).
  trimoe_replayer(const batched_steps& steps, const model_shape& shape, const trimoe_machine& machine = {},
                  const trimoe_replay_config& config = {})
      : steps_(&steps),
        config_(check(steps, shape, config)),
        shape_(shape),
        L_(steps.num_layers()),
        E_(steps.num_experts()),
        full_(make_system(machine, shape, true, true)),
        gpu_only_(make_system(machine, shape, false, false)),
        gpu_cpu_(make_system(machine, shape, true, false)),
        gpu_ndp_(make_system(machine, shape, false, true)),
        D_(full_.num_dimms()),
        greedy_({.max_iterations = 0}),
        exact_({.max_experts = config.exact_max_experts, .node_limit = config.exact_nodes}),
        relay_{{relay_state(full_, L_, E_, config_.relayout.planner),
                relay_state(full_, L_, E_, with_rule(config_.relayout.planner, relayout_rule::benefit))}},
        ema_(L_, E_, {.alpha = config.alpha}),
        last_(L_, E_, {.alpha = 1.0}) {
    for (auto* p : {&p_gpu_, &p_gc_, &p_gn_, &p_full_, &p_pred_}) *p = makespan_problem(D_, E_);
    for (auto& o : out_) o = makespan_schedule(E_, D_);
    scratch_sched_ = makespan_schedule(E_, D_);
    greedy_.reserve(E_, D_);
    refined_.reserve(E_, D_);
    improved_.reserve(E_, D_);
    exact_.reserve(E_, D_);
    bound_scratch_.assign(2 * D_, 0.0);
    dual_.compute(p_full_, 0);  // sizes the dual's buffers (an empty problem: no rounds)
    dual_.lambda.reserve(2 + D_);

    class_layout_.assign(E_, expert_layout{});
    striped_layout_.assign(E_, expert_layout{});
    class_resident_.assign(E_, 0);
    pred_resident_.assign(E_, 0);
    actual_.assign(E_, 0.0);
    truth_.assign(E_, hotness::cold);
    order_.assign(E_, 0);

    for (auto& a : acc_) a.layers.assign(L_, trimoe_times{});
    layer_bound_.assign(L_, 0.0);
  }

  [[nodiscard]] const trimoe_replay_config& config() const noexcept { return config_; }
  /// The three-device system (names, D, prices).
  [[nodiscard]] const system_type& system() const noexcept { return full_; }
  [[nodiscard]] const model_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t num_steps() const noexcept { return steps_->num_steps(); }
  [[nodiscard]] std::size_t num_layers() const noexcept { return L_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return E_; }
  [[nodiscard]] std::size_t num_dimms() const noexcept { return D_; }
  /// The step `replay_step` replays next.
  [[nodiscard]] std::size_t next_step() const noexcept { return next_; }
  [[nodiscard]] bool done() const noexcept { return next_ >= steps_->num_steps(); }

  /// The state of +Relayout row `row` at `layer`: each expert's layout and GPU residency,
  /// as the next step of the layer will run on them.
  ///
  /// Preconditions: `layer` < the layers; `is_relayout(row)`.
  [[nodiscard]] std::span<const expert_layout> relayout_layouts(
      layer_id layer, trimoe_system row = trimoe_system::relayout) const noexcept {
    MOEPOLICY_ASSERT(layer < L_ && is_relayout(row));
    return std::span<const expert_layout>(relay_[relay_index(row)].layout)
        .subspan(static_cast<std::size_t>(layer) * E_, E_);
  }
  [[nodiscard]] std::span<const std::uint8_t> relayout_resident(
      layer_id layer, trimoe_system row = trimoe_system::relayout) const noexcept {
    MOEPOLICY_ASSERT(layer < L_ && is_relayout(row));
    return std::span<const std::uint8_t>(relay_[relay_index(row)].resident)
        .subspan(static_cast<std::size_t>(layer) * E_, E_);
  }
  /// The tasks row `row`'s planner took in `layer`'s last plan (none before its first
  /// plan), in rank order, and that plan's window in seconds.
  ///
  /// Preconditions: as `relayout_layouts`.
  [[nodiscard]] std::span<const migration_task> last_taken(layer_id layer,
                                                           trimoe_system row = trimoe_system::relayout) const noexcept {
    MOEPOLICY_ASSERT(layer < L_ && is_relayout(row));
    const relay_state& r = relay_[relay_index(row)];
    return std::span<const migration_task>(r.last_tasks)
        .subspan(static_cast<std::size_t>(layer) * r.task_cap, r.last_count[layer]);
  }
  [[nodiscard]] seconds last_window(layer_id layer, trimoe_system row = trimoe_system::relayout) const noexcept {
    MOEPOLICY_ASSERT(layer < L_ && is_relayout(row));
    return relay_[relay_index(row)].last_window[layer];
  }
  /// The schedule of `s` at the last replayed (step, layer) problem.
  [[nodiscard]] const makespan_schedule& last_schedule(trimoe_system s) const noexcept {
    return out_[static_cast<std::size_t>(s)];
  }

  /// Replays step `next_step()` on every layer: step 0 warms the predictors and sets the
  /// +Relayout state; later steps solve every system and plan +Relayout's next step.
  ///
  /// Preconditions: `!done()`.
  /// Complexity: per (step, layer), the solvers (the exact one bounded by `exact_nodes`),
  /// one plan and O(E log E) for the classes; no allocation.
  void replay_step() {
    MOEPOLICY_ASSERT(!done());
    const std::size_t t = next_;
    for (std::size_t l = 0; l < L_; ++l) replay_layer(t, l);
    ++next_;
  }

  /// Replays every remaining step.
  void replay_all() {
    while (!done()) replay_step();
  }

  /// The figures of the steps replayed so far.
  ///
  /// Complexity: O(systems · layers); allocates the result.
  [[nodiscard]] trimoe_result result() const {
    trimoe_result r;
    r.batch = steps_->batch_size();
    r.num_steps = steps_->num_steps();
    r.replayed_steps = next_ > 1 ? next_ - 1 : 0;
    r.num_layers = L_;
    r.num_experts = E_;
    r.num_dimms = D_;
    r.problems = problems_;
    r.exact_proven = exact_proven_;
    const double n = r.replayed_steps > 0 ? static_cast<double>(r.replayed_steps) : 1.0;
    for (std::size_t s = 0; s < num_trimoe_systems; ++s) {
      const accumulator& a = acc_[s];
      trimoe_system_result& o = r.systems[s];
      o.system = static_cast<trimoe_system>(s);
      o.layers.resize(L_);
      for (std::size_t l = 0; l < L_; ++l) {
        const trimoe_times& x = a.layers[l];
        o.layers[l] = {x.makespan / n, x.gpu / n, x.cpu / n, x.max_dimm / n, x.mean_dimm / n};
        o.step.makespan += o.layers[l].makespan;
        o.step.gpu += o.layers[l].gpu;
        o.step.cpu += o.layers[l].cpu;
        o.step.max_dimm += o.layers[l].max_dimm;
        o.step.mean_dimm += o.layers[l].mean_dimm;
      }
      const double m = a.makespan;
      const auto share = [&](double x) { return m > 0.0 ? x / m : 0.0; };
      o.gpu = {share(a.gpu_busy), share(a.gpu_calc), share(a.gpu_flops / gpu_peak())};
      o.cpu = {share(a.cpu_busy), share(a.cpu_calc), share(a.cpu_flops / cpu_peak())};
      const double d = static_cast<double>(D_);
      o.ndp = {share(a.mean_dimm), share(a.ndp_calc / d), share(a.ndp_flops / (d * ndp_peak()))};
      const trimoe_system sys = o.system;
      o.has_gap = sys == trimoe_system::greedy || sys == trimoe_system::refined || sys == trimoe_system::improved ||
                  is_relayout(sys);
      o.proven = o.has_gap ? a.proven : 0;
      o.gap_mean = o.proven > 0 ? a.gap_sum / static_cast<double>(o.proven) : 0.0;
      o.gap_max = o.proven > 0 ? a.gap_max : 0.0;
    }
    r.layer_bound.resize(L_);
    for (std::size_t l = 0; l < L_; ++l) {
      r.layer_bound[l] = layer_bound_[l] / n;
      r.step_bound += r.layer_bound[l];
    }
    for (std::size_t k = 0; k < num_trimoe_predictors; ++k) {
      auto& p = r.prediction[k];
      p.predictor = static_cast<trimoe_predictor>(k);
      p.confusion = scores_[k].confusion;
      const auto total = static_cast<double>(scores_[k].confusion.total());
      p.decision_accuracy = total > 0.0 ? scores_[k].decisions / total : 0.0;
      p.step_seconds = scores_[k].step_seconds / n;
    }
    trimoe_relayout_stats* stats_of[num_relays] = {&r.relayout, &r.relayout_benefit};
    for (std::size_t k = 0; k < num_relays; ++k) {
      *stats_of[k] = relay_[k].stats;
      stats_of[k]->exact_step_seconds = relay_[k].stats.exact_step_seconds / n;
    }
    return r;
  }

 private:
  struct accumulator {
    std::vector<trimoe_times> layers;  // sums over steps
    double makespan = 0.0, gpu_busy = 0.0, cpu_busy = 0.0, mean_dimm = 0.0;
    double gpu_calc = 0.0, cpu_calc = 0.0, ndp_calc = 0.0;
    double gpu_flops = 0.0, cpu_flops = 0.0, ndp_flops = 0.0;
    std::size_t proven = 0;
    double gap_sum = 0.0, gap_max = 0.0;
  };
  struct score {
    hotness_confusion confusion;
    double decisions = 0.0;
    seconds step_seconds = 0.0;
  };

  /// One +Relayout row: its planner, its state per layer (layouts and residency), its
  /// problem, optimum and last plans, and its statistics.
  struct relay_state {
    relay_state(const system_type& sys, std::size_t L, std::size_t E, const migration_planner_config& c)
        : planner(sys, E, c),
          problem(sys.num_dimms(), E),
          exact(E, sys.num_dimms()),
          layout(L * E, expert_layout{}),
          resident(L * E, 0),
          task_cap(2 * E + c.rebalancing.max_moves),
          last_tasks(L * task_cap, migration_task{}),
          last_count(L, 0),
          last_window(L, 0.0) {}

    migration_planner<roofline_cost, roofline_cost, roofline_cost> planner;
    makespan_problem problem;
    makespan_schedule exact;
    std::vector<expert_layout> layout;
    std::vector<std::uint8_t> resident;
    std::size_t task_cap;
    std::vector<migration_task> last_tasks;
    std::vector<std::size_t> last_count;
    std::vector<seconds> last_window;
    trimoe_relayout_stats stats;
  };

  /// The +Relayout rows, in `relay_` order.
  static constexpr std::size_t num_relays = 2;
  static constexpr trimoe_system relay_systems[num_relays] = {trimoe_system::relayout,
                                                              trimoe_system::relayout_benefit};

  [[nodiscard]] static constexpr std::size_t idx(trimoe_system s) noexcept { return static_cast<std::size_t>(s); }
  [[nodiscard]] static constexpr std::size_t relay_index(trimoe_system s) noexcept {
    return s == trimoe_system::relayout_benefit ? 1 : 0;
  }
  [[nodiscard]] static migration_planner_config with_rule(migration_planner_config c, relayout_rule r) noexcept {
    c.relayout_when = r;
    return c;
  }

  static trimoe_replay_config check(const batched_steps& steps, const model_shape& shape,
                                    const trimoe_replay_config& c) {
    constexpr std::string_view fn = "trimoe_replayer";
    if (steps.num_layers() == 0) detail::throw_invalid(fn, "the steps must have at least one layer", steps.num_layers());
    if (steps.num_experts() != shape.num_experts) {
      detail::throw_invalid(fn, "the steps' experts must equal the model's num_experts " + std::to_string(shape.num_experts),
                            steps.num_experts());
    }
    if (!(c.alpha > 0.0 && c.alpha <= 1.0)) detail::throw_invalid(fn, "alpha must be in (0, 1]", c.alpha);
    if (c.exact_nodes == 0) detail::throw_invalid(fn, "exact_nodes must be >= 1", c.exact_nodes);
    if (c.exact_max_experts > 64) detail::throw_invalid(fn, "exact_max_experts must be <= 64", c.exact_max_experts);
    const auto& r = c.relayout;
    if (!(r.window_scale >= 0.0) || !std::isfinite(r.window_scale)) {
      detail::throw_invalid(fn, "relayout.window_scale must be finite and >= 0", r.window_scale);
    }
    if (!(r.window_seconds >= 0.0) || !std::isfinite(r.window_seconds)) {
      detail::throw_invalid(fn, "relayout.window_seconds must be finite and >= 0", r.window_seconds);
    }
    return c;
  }

  static system_type make_system(const trimoe_machine& m, const model_shape& shape, bool cpu, bool ndp) {
    return system_type{roofline_cost{m.gpu, shape}, roofline_cost{m.cpu, shape}, roofline_cost{m.ndp, shape},
                       {.use_cpu = cpu, .use_ndp = ndp}};
  }

  [[nodiscard]] double gpu_peak() const noexcept { return full_.gpu().peak_flops(fp16); }
  [[nodiscard]] double cpu_peak() const noexcept { return full_.cpu().peak_flops(fp16); }
  [[nodiscard]] double ndp_peak() const noexcept { return full_.dimm().peak_flops(fp16); }

  /// The class layout of `classes` into `layout` and `resident`: hot resident, cold
  /// localized round robin (unless `stripe_all`), the rest striped.
  void layout_from(std::span<const hotness> classes, std::size_t layer, bool stripe_all, std::span<expert_layout> layout,
                   std::span<std::uint8_t> resident) const noexcept {
    for (std::size_t e = 0; e < E_; ++e) {
      resident[e] = classes[e] == hotness::hot ? 1 : 0;
      layout[e] = (!stripe_all && classes[e] == hotness::cold)
                      ? expert_layout::localized(static_cast<std::uint16_t>((layer * E_ + e) % D_))
                      : expert_layout::striped();
    }
  }

  [[nodiscard]] std::span<expert_layout> relay_layout(std::size_t k, std::size_t l) noexcept {
    return std::span<expert_layout>(relay_[k].layout).subspan(l * E_, E_);
  }
  [[nodiscard]] std::span<std::uint8_t> relay_resident(std::size_t k, std::size_t l) noexcept {
    return std::span<std::uint8_t>(relay_[k].resident).subspan(l * E_, E_);
  }

  /// Adds schedule `s` of problem `p` to system `k`'s sums at layer `l`.
  void add(std::size_t k, std::size_t l, const makespan_problem& p, const makespan_schedule& s) noexcept {
    accumulator& a = acc_[k];
    seconds max_dimm = 0.0, sum_dimm = 0.0;
    for (seconds x : s.dimm_seconds) {
      max_dimm = std::max(max_dimm, x);
      sum_dimm += x;
    }
    const seconds mean_dimm = sum_dimm / static_cast<double>(D_);
    trimoe_times& t = a.layers[l];
    t.makespan += s.makespan;
    t.gpu += s.gpu_seconds;
    t.cpu += s.cpu_seconds;
    t.max_dimm += max_dimm;
    t.mean_dimm += mean_dimm;
    a.makespan += s.makespan;
    a.gpu_busy += s.gpu_seconds;
    a.cpu_busy += s.cpu_seconds;
    a.mean_dimm += mean_dimm;
    const double fpt = shape_.flops_per_token();
    for (std::size_t i = 0; i < p.size(); ++i) {
      const expert_costs& e = p[i];
      const double flops = static_cast<double>(e.load) * fpt;
      switch (s.assignment[i]) {
        case device_option::gpu:
          a.gpu_calc += full_.gpu().compute_seconds(e.key, fp16, e.load);
          a.gpu_flops += flops;
          break;
        case device_option::cpu:
          a.cpu_calc += full_.cpu().compute_seconds(e.key, fp16, e.load);
          a.cpu_flops += flops;
          break;
        case device_option::ndp:
          a.ndp_calc += full_.dimm().compute_seconds(e.key, fp16, e.load);
          a.ndp_flops += flops;
          break;
      }
    }
  }

  void add_gap(std::size_t k, seconds m, seconds opt) noexcept {
    accumulator& a = acc_[k];
    const double g = opt > 0.0 ? m / opt - 1.0 : 0.0;
    ++a.proven;
    a.gap_sum += g;
    a.gap_max = std::max(a.gap_max, g);
  }

  static void copy_schedule(const makespan_schedule& from, makespan_schedule& to) noexcept {
    to.makespan = from.makespan;
    to.gpu_seconds = from.gpu_seconds;
    to.cpu_seconds = from.cpu_seconds;
    to.iterations = from.iterations;
    to.dimm_seconds.assign(from.dimm_seconds.begin(), from.dimm_seconds.end());
    to.assignment.assign(from.assignment.begin(), from.assignment.end());
  }

  void replay_layer(std::size_t t, std::size_t l) {
    const auto lid = static_cast<layer_id>(l);
    const auto loads = steps_->loads(t, l);
    const bool active = std::any_of(loads.begin(), loads.end(), [](std::uint32_t x) { return x > 0; });
    if (t > 0 && active) solve_layer(l, loads);
    ema_.update(lid, loads);
    last_.update(lid, loads);
    if (t == 0) {
      // Both +Relayout rows start from the class layout of step 1.
      for (std::size_t k = 0; k < num_relays; ++k) {
        layout_from(ema_.predicted_classes(lid), l, false, relay_layout(k, l), relay_resident(k, l));
      }
    } else if (active && t + 1 < steps_->num_steps()) {
      for (std::size_t k = 0; k < num_relays; ++k) plan_layer(k, l);
    }
  }

  void solve_layer(std::size_t l, std::span<const std::uint32_t> loads) {
    using enum trimoe_system;
    const auto lid = static_cast<layer_id>(l);
    ++problems_;
    const std::span<const hotness> classes = ema_.predicted_classes(lid);
    layout_from(classes, l, false, class_layout_, class_resident_);
    layout_from(classes, l, true, striped_layout_, class_resident_);
    gpu_only_.build_layer(lid, loads, striped_layout_, class_resident_, fp16, p_gpu_);
    gpu_cpu_.build_layer(lid, loads, striped_layout_, class_resident_, fp16, p_gc_);
    gpu_ndp_.build_layer(lid, loads, class_layout_, class_resident_, fp16, p_gn_);
    full_.build_layer(lid, loads, class_layout_, class_resident_, fp16, p_full_);
    for (std::size_t k = 0; k < num_relays; ++k) {
      full_.build_layer(lid, loads, relay_layout(k, l), relay_resident(k, l), fp16, relay_[k].problem);
    }

    greedy_.solve(p_gpu_, out_[idx(gpu_only)]);
    greedy_.solve(p_gc_, out_[idx(gpu_cpu)]);
    greedy_.solve(p_gn_, out_[idx(gpu_ndp)]);
    greedy_.solve(p_full_, out_[idx(greedy)]);
    refined_.solve(p_full_, out_[idx(refined)]);
    for (std::size_t k = 0; k < num_relays; ++k) refined_.solve(relay_[k].problem, out_[idx(relay_systems[k])]);
    improved_.solve(p_full_, out_[idx(improved)]);
    exact_.solve_from(p_full_, out_[idx(improved)].assignment, out_[idx(exact)]);
    const bool proven = out_[idx(exact)].status == solve_status::optimal;
    if (out_[idx(exact)].status == solve_status::too_large) copy_schedule(out_[idx(improved)], out_[idx(exact)]);
    for (std::size_t k = 0; k < num_relays; ++k) {
      relay_state& rs = relay_[k];
      exact_.solve_from(rs.problem, out_[idx(relay_systems[k])].assignment, rs.exact);
      if (rs.exact.status == solve_status::too_large) {
        improved_.solve(rs.problem, rs.exact);
        rs.exact.status = solve_status::too_large;
      }
    }

    const makespan_problem* problem_of[num_trimoe_systems] = {
        &p_gpu_, &p_gc_, &p_gn_, &p_full_, &p_full_, &relay_[0].problem, &relay_[1].problem, &p_full_, &p_full_};
    for (std::size_t k = 0; k < num_trimoe_systems; ++k) add(k, l, *problem_of[k], out_[k]);
    if (proven) {
      ++exact_proven_;
      for (trimoe_system s : {greedy, refined, improved}) add_gap(idx(s), out_[idx(s)].makespan, out_[idx(exact)].makespan);
    }
    for (std::size_t k = 0; k < num_relays; ++k) {
      relay_state& rs = relay_[k];
      if (rs.exact.status == solve_status::optimal) {
        add_gap(idx(relay_systems[k]), out_[idx(relay_systems[k])].makespan, rs.exact.makespan);
        ++rs.stats.proven;
      }
      rs.stats.exact_step_seconds += rs.exact.makespan;
      for (const auto& e : rs.problem.experts()) {
        if (!e.layout.is_localized()) continue;
        ++rs.stats.localized_active;
        rs.stats.localized_tokens += e.load;
      }
    }

    dual_.compute(p_full_, config_.bound_rounds);
    layer_bound_[l] += std::max(makespan_lower_bound(p_full_, bound_scratch_).value, dual_.valid ? dual_.value : 0.0);

    // Prediction: classes against the true ones, and the step under each one's layout.
    for (std::size_t e = 0; e < E_; ++e) actual_[e] = loads[e];
    detail::classify_by_share_into(actual_, truth_, order_, ema_.config().classes);
    const std::span<const hotness> predicted[num_trimoe_predictors] = {classes, last_.predicted_classes(lid), truth_};
    for (std::size_t k = 0; k < num_trimoe_predictors; ++k) {
      score& s = scores_[k];
      s.confusion.observe(predicted[k], truth_);
      for (std::size_t e = 0; e < E_; ++e) {
        const hotness c = predicted[k][e];
        s.decisions += 0.5 * (((c == hotness::hot) == (truth_[e] == hotness::hot) ? 1.0 : 0.0) +
                              ((c == hotness::cold) == (truth_[e] == hotness::cold) ? 1.0 : 0.0));
      }
      if (k == 0) {
        s.step_seconds += out_[idx(improved)].makespan;
        continue;
      }
      layout_from(predicted[k], l, false, class_layout_, pred_resident_);
      full_.build_layer(lid, loads, class_layout_, pred_resident_, fp16, p_pred_);
      improved_.solve(p_pred_, scratch_sched_);
      s.step_seconds += scratch_sched_.makespan;
    }
  }

  /// Plans layer `l`'s migrations for its next step in +Relayout row `k`, applies the taken
  /// ones, and keeps the residents within the slots.
  void plan_layer(std::size_t k, std::size_t l) {
    const auto lid = static_cast<layer_id>(l);
    const auto& rc = config_.relayout;
    relay_state& rs = relay_[k];
    trimoe_relayout_stats& stats = rs.stats;
    const std::span<const double> predicted = ema_.predicted_loads(lid);
    const std::span<const hotness> classes = ema_.predicted_classes(lid);
    const std::span<expert_layout> layouts = relay_layout(k, l);
    const std::span<std::uint8_t> resident = relay_resident(k, l);

    const seconds window = rc.window == relayout_window::fixed ? rc.window_seconds
                                                               : rc.window_scale * out_[idx(relay_systems[k])].makespan;
    std::size_t hot = 0, resident_hot = 0;
    for (std::size_t e = 0; e < E_; ++e) {
      const bool h = classes[e] == hotness::hot;
      hot += h ? std::size_t{1} : std::size_t{0};
      resident_hot += (h && resident[e] != 0) ? std::size_t{1} : std::size_t{0};
    }
    const std::size_t slots = rc.gpu_slots_per_layer != 0 ? rc.gpu_slots_per_layer : hot;
    const bytes w = full_.weight_bytes(expert_key{lid, 0}, rc.planner.bits);
    const bytes gpu_free = slots > resident_hot ? static_cast<bytes>(slots - resident_hot) * w : 0;

    const auto tasks = rs.planner.plan(lid, predicted, classes, layouts, resident, window, gpu_free);
    ++stats.plans;
    stats.window_seconds += window;
    std::size_t n = 0;
    seconds pcie = 0.0, link = 0.0;
    migration_task* keep = rs.last_tasks.data() + l * rs.task_cap;
    for (const auto& task : tasks) {
      const auto kind = static_cast<std::size_t>(task.kind);
      ++stats.proposed[kind];
      if (!task.taken) continue;
      ++stats.taken[kind];
      if (task.kind == migration_kind::prefetch) {
        stats.pcie_bytes += task.size;
        pcie += task.transfer_seconds;
      } else {
        stats.link_bytes += task.size;
        link += task.transfer_seconds;
      }
      if (n < rs.task_cap) keep[n++] = task;
    }
    rs.last_count[l] = n;
    rs.last_window[l] = window;
    stats.transfer_seconds += pcie + link;
    if (window > 0.0) {
      const double fill = rc.planner.separate_links ? std::max(pcie, link) / window : (pcie + link) / window;
      stats.max_fill = std::max(stats.max_fill, fill);
    }
    apply_migrations(tasks, layouts, resident);

    // Keep the residents within the slots: not-hot first, then the least predicted load.
    std::size_t count = 0;
    for (std::size_t e = 0; e < E_; ++e) count += resident[e] != 0 ? std::size_t{1} : std::size_t{0};
    while (count > slots) {
      std::size_t victim = E_;
      for (std::size_t e = 0; e < E_; ++e) {
        if (resident[e] == 0) continue;
        if (victim == E_) {
          victim = e;
          continue;
        }
        const bool hv = classes[victim] == hotness::hot, he = classes[e] == hotness::hot;
        if ((hv && !he) || (hv == he && predicted[e] < predicted[victim])) victim = e;
      }
      resident[victim] = 0;
      --count;
      ++stats.evictions;
    }
  }

  const batched_steps* steps_;
  trimoe_replay_config config_;
  model_shape shape_;
  std::size_t L_, E_;
  system_type full_, gpu_only_, gpu_cpu_, gpu_ndp_;
  std::size_t D_;
  bottleneck_refinement_scheduler greedy_, refined_;
  local_search_scheduler improved_;
  exact_makespan_scheduler exact_;
  detail::dual_weights dual_;
  std::vector<double> bound_scratch_;
  std::array<relay_state, num_relays> relay_;
  ema_load_predictor ema_, last_;

  makespan_problem p_gpu_{1}, p_gc_{1}, p_gn_{1}, p_full_{1}, p_pred_{1};
  std::array<makespan_schedule, num_trimoe_systems> out_{};
  makespan_schedule scratch_sched_;

  std::vector<expert_layout> class_layout_, striped_layout_;
  std::vector<std::uint8_t> class_resident_, pred_resident_;
  std::vector<double> actual_;
  std::vector<hotness> truth_;
  std::vector<std::uint32_t> order_;

  std::array<accumulator, num_trimoe_systems> acc_{};
  std::vector<seconds> layer_bound_;
  std::array<score, num_trimoe_predictors> scores_{};
  std::size_t problems_ = 0, exact_proven_ = 0;
  std::size_t next_ = 0;
};

/// Replays every step of `steps` (see the header comment).
///
/// Throws: as `trimoe_replayer`.
[[nodiscard]] inline trimoe_result replay_trimoe(const batched_steps& steps, const model_shape& shape,
                                                 const trimoe_machine& machine = {},
                                                 const trimoe_replay_config& config = {}) {
  trimoe_replayer r(steps, shape, machine, config);
  r.replay_all();
  return r.result();
}

/// Replays the decode steps of `trace` batched to `config.batch` concurrent sequences (or
/// `trimoe_default_batch`). The result's `num_steps` is 0 when the trace has fewer decode
/// tokens than B.
///
/// Throws: `invalid_argument` when the trace's experts differ from the model's; as
/// `trimoe_replayer`.
[[nodiscard]] inline trimoe_result replay_trimoe(const routing_trace& trace, const model_shape& shape,
                                                 const trimoe_machine& machine = {},
                                                 const trimoe_replay_config& config = {}) {
  const std::size_t B = config.batch != 0 ? config.batch : trimoe_default_batch(trace.info().num_experts);
  const batched_steps steps = make_batched_decode_steps(trace, B);
  return replay_trimoe(steps, shape, machine, config);
}

}  // namespace moepolicy
