// SPDX-License-Identifier: Apache-2.0
// moepolicy/sim/trimoe_replay.hpp — TriMoE's GPU + AMX-CPU + DIMM-NDP system and its
// baselines replayed on batched decode steps of a recorded trace, on the timed model of
// serving (sim/timeline.hpp): every second on a device, every byte on a link, every copy with
// the receipt of the transfer that made it (TriMoE §4.2 Eq. 1–7, §4.3 Eq. 8 and the migration
// decision, §5.1.2 the baselines, §5.2 Tab. 3, §5.3 Fig. 8).
//
// Devices. Three `DeviceCost` models (a serial GPU that is also `DenseComputeCost`, a serial
// CPU, a parallel-units DIMM-NDP device whose `num_units()` is the number of DIMMs D), any
// models: `any_device_cost` by default, so machine files, profiled tables
// (cost/trimoe_profiles.hpp, the default of `make_trimoe_devices`) and the roofline all work.
//
// Resources of each system's timeline: `gpu`, `cpu`, `pcie h2d` and `pcie d2h` (the two
// directions of the GPU's link), `dimm d` for each DIMM (a memory resource: its DRAM and its
// NDP unit, counted together as TriMoE Eq. 6 counts them) and `dimm-link d` (the DIMM's
// DIMM-Link port).
//
// Steps. `batched_steps` (sched/batched_steps.hpp): B recorded decode tokens per step, by
// default B concurrent sequences. Step 0 is the warm-up: its loads are the offline analysis
// every system's initial layout comes from (no hindsight), and it is not measured. Steps
// 1 … S−1 are forward passes on the timeline, one after another, and are measured.
//
// A forward pass (step t) runs, on the GPU, the dense layers (if any), then per MoE layer:
//   1. attention of the B query tokens over the KV cache, then the router (sim/forward_pass.hpp).
//      Context: each sequence has `prompt_tokens` + t tokens cached at step t (a configured
//      prompt, the same for every sequence, plus the steps decoded so far, warm-up included);
//      the KV cache stays in HBM (TriMoE §4.1 offloads it to the DIMMs: left out).
//   2. at the router's end (`moe_ready`), background work is settled up to that time
//      (`timeline::settle`) and what landed is installed (below); the system's solver then
//      schedules the layer's activated experts on the copies usable at `moe_ready`;
//   3. the MoE work, each operation backfilled into the earliest idle time its resources share
//      (`timeline::backfill`), issued in the order: GPU hits, GPU misses (their fetch is the
//      longest chain), CPU experts, NDP experts; the shared experts (if any) on the GPU first.
//      A weight read of a whole expert is served by each DIMM on its own (striped: every DIMM
//      its ⌈W/D⌉ share; localized: the home DIMM all of W; `contention_seconds`, charged as
//      weight reads), each share at the earliest idle time of its DIMM — so a DIMM busy with a
//      long NDP run delays only its own share, as Eq. 6 adds each DIMM's work up; the consumer
//      starts when the last share has begun (the weights stream) and is done when both its
//      compute and the last share are:
//        GPU hit   the GPU for f_gpu(L);
//        GPU miss  the read, and a demand transfer over `pcie h2d` (W / bandwidth + latency);
//                  then the GPU for f_gpu(L) once it has landed (Eq. 2 overlaps the fetch and
//                  the compute of one expert; here they overlap only across experts);
//        CPU       the tokens' activations over `pcie d2h`, then the CPU for f_cpu(L) beside
//                  the read (Eq. 3's max), then the results over `pcie h2d`;
//        NDP       the activations over `pcie d2h` and written into the home DIMM (half of
//                  the DIMM model's `activation_transfer_seconds`), the NDP unit for
//                  f_ndp(L) on that DIMM (Eq. 4), the results read back and over `pcie h2d`;
//      activations are shipped per expert (a token routed to two host experts crosses twice;
//      batched steps keep loads, not tokens), L · hidden · `activation_element_bytes` each way;
//   4. the layer ends when the GPU is done and every result is back; the next layer's
//      attention starts then. The output head ends the pass.
//
// Copies (sim/timed_residency.hpp). Tier 0 is GPU HBM, tier 1 host memory striped over the
// DIMMs, tier 2 + d host memory localized on DIMM d. Every expert has exactly one host copy,
// preloaded at its initial layout (the weights as loaded into host memory); the timeline is
// then sealed: every GPU copy and every layout change after that is installed only with the
// receipt of the transfer that made it, usable from its landing time. The initial GPU copies
// are loaded before step 1 as a charged `placement` (`pcie h2d` + DIMM reads, one after
// another): the startup, reported apart from the measured steps. Dropping a GPU copy (the host
// copy stays) and the old host copy after a relayout has landed is free. Demand-fetched
// weights go to a staging buffer and are not kept.
//
// Initial layout, from the warm-up step's loads and classes (the share rule of
// stats/analysis.hpp with `classes`): the GPU holds the warm-up's hot experts (capped by HBM,
// below); TriMoE's rows stripe hot and warm experts and localize cold ones, each layer's cold
// experts placed largest warm-up load first on the DIMM with the least warm-up load in that
// layer (then the fewest experts overall, then the lowest index) — the optimized initial
// layout "via offline trace analysis" of §4.3.
//
// HBM. The GPU holds the non-expert weights and the KV cache of B sequences at their longest
// context; what remains holds whole experts (`hbm_expert_slots`). The initial GPU set is the
// warm-up's hot experts, by warm-up load across layers when they do not all fit, or, with
// `gpu_slots_per_layer` > 0, that many of each layer's most-loaded warm-up experts. A layer
// never holds more GPU copies than it starts with (the systems differ in what they do with
// the HBM, not in how much they have).
//
// Systems (`trimoe_system`), every one from its own initial layout on its own timeline:
//   gpu_only  Klotski-like (§5.1.2: "prefetching hot experts and loading cold expert weights
//             during hot expert computation"): every expert on the GPU; GPU copies start as
//             the warm-up's hot experts and change only by prefetches of predicted-hot experts
//             (the migration planner with prefetch only, in the window below); misses are
//             fetched on demand while the hits compute. All host copies striped. A variant:
//             Klotski's multi-batch pipeline is left out.
//   gpu_cpu   En-KTransformers-like (§5.1.2: "prefetching and on-demand loading of hot
//             experts on top of its processing of all non-shared experts using AMX-CPU"):
//             experts with a GPU copy on the GPU; an expert hot by the step's own loads (the
//             router's output) and without a copy is loaded on demand and run on the GPU;
//             every other routed expert on the CPU. Prefetch as gpu_only. All striped.
//   gpu_ndp   MoNDE-like (§5.1.2: "balances load between GPU and NDP by modeling the cost
//             trade-off between weight migration (to GPU) and activation migration (to
//             NDP)"): experts with a GPU copy on the GPU; every other expert to the cheaper of
//             a GPU miss (Eq. 2) and NDP with its activations shipped (Eq. 4 plus
//             `activation_transfer_seconds`), greedy per expert; every expert localized (the
//             weights live on the NDP units), placed as the cold experts above. The GPU set is
//             fixed (no prefetch). Fig. 8's GPU-NDP base.
//   greedy    TriMoE "+CPU" (Fig. 8): the CPU added, with the three-class layout it needs (warm
//             experts striped for the CPU); the paper's cost-model greedy over GPU, CPU and
//             NDP (sched/bottleneck_refinement.hpp without refinement moves); layout and GPU
//             set fixed.
//   refined   "+Refinement": the paper's bottleneck-aware refinement (§4.2) on the same.
//   relayout  "+Relayout/rebalancing": the refined scheduler, and after each layer's expert
//             computation the migration planner (balance/migration_planner.hpp) plans the next
//             layer's prefetches (PCIe), relayouts and cold-expert rebalancing (DIMM-Link)
//             from the EMA's predictions, class-change relayout rule (§4.3's reading).
//   relayout_benefit  the same with the planner's benefit relayout rule (a variant).
//   improved  +Relayout machinery with this project's local search (sched/local_search.hpp).
//   exact     +Relayout machinery with the exact Eq. 7 optimum of every problem of at most
//             `exact_max_experts` experts (sched/exact.hpp, seeded with the improved schedule;
//             the best found within `exact_nodes`, the improved schedule on larger problems).
// Solvers are the policy; the timeline is the measurement: a schedule optimal for Eq. 7 need
// not be fastest on the timeline, which overlaps what Eq. 5 adds up and serializes what
// Eq. 2 overlaps.
//
// Migrations (§4.3), for the systems that plan (`gpu_only` and `gpu_cpu` prefetch only).
// When layer l's expert computation completes (the end of its MoE work at step t), the
// system plans layer l + 1 (at step t; after the last layer, layer 0 at step t + 1) from the
// EMA's predicted loads and classes for it, on the state it will have: copies present or in
// flight. The planner ranks tasks by predicted benefit and takes them until their estimated
// times fill the window minus the estimated remaining time of jobs still in flight. The
// window (`trimoe_window`):
//   attention_mlp  (default) the GPU's busy time in layer l: attention, router, shared
//                  experts and the experts it computed — "the current layer's MLP and
//                  Attention computations on the GPU" (§4.3; ≈0.68 ms in §5.5);
//   moe_span       `window_scale` × layer l's MoE span (router end to the last result);
//   fixed          `window_seconds`.
// The taken tasks become background jobs on the timeline, ready at the plan's time, placed
// only in idle time (they never delay demand work): prefetches first (priority 0; `pcie h2d`
// with the DIMM reads of the current host copy), relayouts and rebalances after (priority 1),
// over the DIMM-Link ports in parallel: striping an expert localized on DIMM a sends
// (D−1)·⌈W/D⌉ bytes from port a and ⌈W/D⌉ into each other port; localizing onto b gathers as
// much into port b; a rebalance from a to b holds ports a and b for W. The memory traffic
// beside each copy — the DIMM reads a prefetch makes (as a demand fetch's), and each DIMM's
// reads or writes for a relayout or rebalance at `relayout_memory_bandwidth` (the DIMM's
// internal bandwidth: the Relayout Unit sits on the buffer chip, §4.1) — is one memory-only
// job per DIMM, so that each DIMM serves its part in its own idle time (a DIMM busy with a
// long NDP run does not hold up the others). The planner estimates a relayout by its busiest
// port (`relayout_estimate::busiest_port`). A copy is installed, with the receipt of its link
// job, once that job and its memory-only jobs have all landed, and is used from the next layer
// that starts after (the old copy serves until then). A copy still in flight when its target
// layer starts is counted late. An expert has at most one copy in flight. After a plan, GPU
// copies beyond the layer's slots are dropped: not predicted hot first, then the least
// predicted load.
//
// Predictor. The EMA (Eq. 8, α = `alpha`, warm start on the warm-up step) is updated with
// each layer's loads right after the layer runs; its classes use `classes`. Scored per
// measured, active (step, layer) against the true classes of the step's loads (the same share
// rule): the EMA, last value (α = 1), never migrate (the warm-up classes forever) and the true
// classes themselves (a reference at 100 % by construction, not a predictor). Per expert:
// class accuracy, decision accuracy (prefetch = hot and localize = cold, each right or wrong,
// averaged: the paper's "migration decision accuracy" reading), and migration precision and
// recall: a predictor *moves* an expert when its class for step t differs from its class for
// step t − 1 (the layout it had set); the move is needed when the true class differs from that
// same previous class, and right when it is needed and lands on the true class.
//
// Figures (`trimoe_result`). Per system: the wall time of every measured step; per MoE layer
// (averaged over measured steps) its span, its MoE span, the demand busy time it issued on the
// GPU, the CPU and the DIMMs (largest and mean), and its schedule's Eq. 7 makespan; the
// ledger of the measured steps (timeline accounts minus the startup); the placement; the
// migrations. Utilisation, each over the measured wall time T:
//   GPU busy  its busy seconds (attention, router, dense, experts: it only computes) / T;
//   CPU busy  its busy seconds (expert compute) / T;
//   NDP compute  Σ_d seconds DIMM d's NDP unit computed experts / (D · T) — for systems that
//             run NDP; DIMM busy  Σ_d every busy second of DIMM d (NDP, weight reads for the
//             GPU and CPU, activations, prefetch reads, migrations) / (D · T);
//   FLOPs     Σ of the device's arithmetic (the caller divides by its peak · T).
// Solvers and bounds on +Relayout's problems (each measured, active (step, layer) of the
// `relayout` system as it ran): the Eq. 7 makespan of the paper's greedy, refined (its own),
// improved and exact schedules, the gap to the proven optimum, and a lower bound on the Eq. 7
// makespan of the MoE part on those layouts (sched/lower_bound.hpp and its dual). Also a lower
// bound on the *timed* span of each of its layers on the copies usable at `moe_ready`: the
// attention and router time plus the lower bound of the problem whose prices are each
// option's busy time on each resource (GPU f_gpu, CPU f_cpu, DIMM reads, NDP compute with its
// activations): every operation of the layer runs within its MoE span, so each resource's
// busy time there is at most that span, for every assignment (sched/lower_bound.hpp's proof).
//
// Cost. Construction makes the initial layouts, preloads, places and sizes every buffer
// (timelines with job slots for one copy per expert and its memory-only jobs, residency
// tables, problems, solvers, planners); `replay_step` allocates nothing after it (tested with
// a counting allocator). The `exact` system and the solver comparison are exponential in the
// worst case, bounded by `exact_nodes` per problem. Memory, whatever the trace's length: each
// system's timeline holds L·E job slots with room for max(D, 2) hops (the copies) and L·E·D
// slots of one hop (the memory-only jobs): about 1.4 MB a system at Mixtral-8x7B's shape
// with the 16 DIMMs of TriMoE's preset (a job 192 bytes, a hop 48 with its done time and
// bytes, and the allocator's headers), against 4.4 MB when every slot had max(D, 2) hops.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/balance/migration_planner.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/any_device.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/trimoe_profiles.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/exact.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"
#include "moepolicy/sim/forward_pass.hpp"
#include "moepolicy/sim/timed_residency.hpp"
#include "moepolicy/sim/timeline.hpp"
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
    case trimoe_system::gpu_only:
      return "gpu_only";
    case trimoe_system::gpu_cpu:
      return "gpu_cpu";
    case trimoe_system::gpu_ndp:
      return "gpu_ndp";
    case trimoe_system::greedy:
      return "greedy";
    case trimoe_system::refined:
      return "refined";
    case trimoe_system::relayout:
      return "relayout";
    case trimoe_system::relayout_benefit:
      return "relayout_benefit";
    case trimoe_system::improved:
      return "improved";
    case trimoe_system::exact:
      return "exact";
  }
  return "?";
}

/// Whether `s` runs §4.3's relayout and rebalancing (the +Relayout machinery).
[[nodiscard]] constexpr bool is_relayout(trimoe_system s) noexcept {
  return s == trimoe_system::relayout || s == trimoe_system::relayout_benefit || s == trimoe_system::improved ||
         s == trimoe_system::exact;
}

/// Whether `s` prefetches predicted-hot experts (the +Relayout machinery, and the Klotski-
/// and En-KTransformers-like baselines).
[[nodiscard]] constexpr bool prefetches(trimoe_system s) noexcept {
  return is_relayout(s) || s == trimoe_system::gpu_only || s == trimoe_system::gpu_cpu;
}

/// Whether `s` may run experts on the CPU / on NDP units.
[[nodiscard]] constexpr bool uses_cpu(trimoe_system s) noexcept {
  return s != trimoe_system::gpu_only && s != trimoe_system::gpu_ndp;
}
[[nodiscard]] constexpr bool uses_ndp(trimoe_system s) noexcept {
  return s != trimoe_system::gpu_only && s != trimoe_system::gpu_cpu;
}

/// The predictors scored (see the header comment).
enum class trimoe_predictor : std::uint8_t { ema, last_value, never_migrate, true_classes };

/// The number of `trimoe_predictor` values.
inline constexpr std::size_t num_trimoe_predictors = 4;

/// "ema", "last_value", "never_migrate" or "true_classes".
[[nodiscard]] constexpr std::string_view to_string(trimoe_predictor p) noexcept {
  switch (p) {
    case trimoe_predictor::ema:
      return "ema";
    case trimoe_predictor::last_value:
      return "last_value";
    case trimoe_predictor::never_migrate:
      return "never_migrate";
    case trimoe_predictor::true_classes:
      return "true_classes";
  }
  return "?";
}

/// Where the overlap window of §4.3 comes from (see the header comment).
enum class trimoe_window : std::uint8_t { attention_mlp, moe_span, fixed };

/// "attention_mlp", "moe_span" or "fixed".
[[nodiscard]] constexpr std::string_view to_string(trimoe_window w) noexcept {
  switch (w) {
    case trimoe_window::attention_mlp:
      return "attention_mlp";
    case trimoe_window::moe_span:
      return "moe_span";
    case trimoe_window::fixed:
      return "fixed";
  }
  return "?";
}

/// The hot / warm / cold thresholds calibrated to TriMoE §3.1: the cold tail carries 8 % of
/// the tokens ("a long tail of cold experts constitutes over 70% of all experts but processes
/// only 8% of tokens"), warm experts up to 70 % ("20%–40% of warm experts handle up to 70% of
/// tokens"), so the hot head carries the remaining 22 %.
inline constexpr share_classes_config trimoe_paper_classes{.hot_share = 0.22, .cold_share = 0.08};

/// The three devices, as published figures.
struct trimoe_machine {
  device_spec gpu = presets::h100_pcie_gen5();
  device_spec cpu = presets::xeon_8470_amx();
  /// A parallel-units device: one unit per DIMM.
  device_spec ndp = presets::dimm_ndp();
};

/// The three devices as cost models.
template <DeviceCost Gpu = any_device_cost, DeviceCost Cpu = any_device_cost, DeviceCost Ndp = any_device_cost>
struct trimoe_devices {
  Gpu gpu;
  Cpu cpu;
  Ndp ndp;
};

/// The machine's devices priced as `model` says (cost/trimoe_profiles.hpp): the GPU and the
/// CPU profiled or roofline, the DIMM-NDP units roofline.
///
/// Throws: as the specs' validation and the profile builders.
[[nodiscard]] inline trimoe_devices<> make_trimoe_devices(const trimoe_machine& m, const model_shape& shape,
                                                          trimoe_compute_model model = trimoe_compute_model::profiled,
                                                          const trimoe_profile_config& profiles = {}) {
  return {trimoe_gpu_cost(m.gpu, shape, model, profiles), trimoe_cpu_cost(m.cpu, shape, model, profiles),
          trimoe_ndp_cost(m.ndp, shape)};
}

/// Configuration of `trimoe_replayer` and `replay_trimoe`.
struct trimoe_replay_config {
  /// B, decode tokens per batched step, for `replay_trimoe` on a trace; 0: 64 for models of
  /// at most 8 experts, else 32.
  std::size_t batch = 0;
  /// α of the EMA load predictor (Eq. 8), in (0, 1].
  double alpha = 0.3;
  /// The hot / warm / cold thresholds: layouts, the predictor's classes, the scores.
  share_classes_config classes = trimoe_paper_classes;
  /// Tokens each sequence had cached when the warm-up step ran (its prompt).
  std::size_t prompt_tokens = 512;
  /// The overlap window of §4.3.
  trimoe_window window = trimoe_window::attention_mlp;
  /// Multiplier of the MoE span (`moe_span`), finite and >= 0.
  double window_scale = 1.0;
  /// The window of `fixed`, seconds, finite and >= 0.
  seconds window_seconds = 0.0;
  /// GPU copies per layer; 0: the warm-up's hot experts (within HBM).
  std::size_t gpu_slots_per_layer = 0;
  /// The planner of the `relayout`, `improved` and `exact` systems (the `relayout_benefit`
  /// one with `relayout_when = benefit`; the Klotski- and En-KTransformers-like ones with
  /// prefetch only).
  migration_planner_config planner{.relayout_time = relayout_estimate::busiest_port};
  /// Bytes per second at which a DIMM's memory serves the Relayout Unit's reads and writes.
  double relayout_memory_bandwidth = 153.6 * giga;
  /// Bytes of one activation element crossing PCIe.
  double activation_element_bytes = 2.0;
  /// How the non-expert weights and the KV cache are stored.
  forward_pass_config forward{};
  /// Bytes per chunk of background work (timeline_config::chunk_bytes), > 0.
  bytes chunk_bytes = bytes{1} << 20;
  /// Problems of more activated experts are not searched exactly (<= 64).
  std::size_t exact_max_experts = 64;
  /// Search nodes of the exact solver per problem, >= 1.
  std::size_t exact_nodes = 1'000'000;
  /// Multiplicative-weights rounds of the lower bound's dual (0: the closed-form bound only).
  std::size_t bound_rounds = 64;
  /// Which systems run (all by default); `relayout` must run for the solver gaps and bounds.
  std::array<bool, num_trimoe_systems> systems{true, true, true, true, true, true, true, true, true};
  /// Whether to solve +Relayout's problems with every solver and bound them.
  bool solver_gaps = true;
  /// How `make_trimoe_devices` prices the machine in the overloads that take one.
  trimoe_compute_model compute = trimoe_compute_model::profiled;
  trimoe_profile_config profiles{};
};

/// B for a model of `num_experts` experts when `trimoe_replay_config::batch` is 0.
[[nodiscard]] constexpr std::size_t trimoe_default_batch(std::size_t num_experts) noexcept {
  return num_experts <= 8 ? 64 : 32;
}

/// One MoE layer's figures (or their sums over layers), seconds per measured step.
struct trimoe_layer_times {
  /// Attention start to every result back on the GPU.
  seconds span = 0.0;
  /// Router end (`moe_ready`) to every result back.
  seconds moe = 0.0;
  /// Demand busy time the layer issued: the GPU (attention, router, shared and routed experts),
  /// the CPU, the busiest DIMM and the DIMMs' mean.
  seconds gpu = 0.0;
  seconds cpu = 0.0;
  seconds max_dimm = 0.0;
  seconds mean_dimm = 0.0;
  /// The Eq. 7 makespan of the system's schedule (its solver's estimate of `moe`).
  seconds eq7 = 0.0;
};

/// A device's use over the measured steps (see the header comment).
struct trimoe_device_use {
  /// Whether the system runs experts there (GPU always).
  bool present = false;
  /// Busy seconds / measured seconds (per DIMM: the mean).
  double busy = 0.0;
  /// Seconds computing / measured seconds (NDP: experts on the DIMMs' units, mean per DIMM).
  double compute = 0.0;
  /// Σ of its arithmetic, FLOPs.
  double flops = 0.0;
};

/// What a system's migrations did.
struct trimoe_migration_stats {
  std::size_t plans = 0;
  /// By `migration_kind`.
  std::array<std::size_t, 4> proposed{};
  std::array<std::size_t, 4> taken{};
  std::array<std::size_t, 4> landed{};
  /// Bytes the taken tasks' jobs carry (prefetch: over PCIe; the rest: across DIMM-Link).
  std::array<bytes, 4> job_bytes{};
  /// Jobs still in flight when the layer they were planned for started.
  std::size_t late = 0;
  /// Jobs in flight when the replay ended.
  std::size_t pending_at_end = 0;
  /// Σ of the windows, and of the planner's estimates of the taken tasks.
  seconds window_seconds = 0.0;
  seconds estimated_seconds = 0.0;
  /// GPU copies dropped to stay within the slots.
  std::size_t evictions = 0;
};

/// What one system did over the replay.
struct trimoe_system_result {
  trimoe_system system = trimoe_system::gpu_only;
  bool ran = false;
  /// Per MoE layer, means over the measured steps.
  std::vector<trimoe_layer_times> layers;
  /// Σ over layers of those means.
  trimoe_layer_times layer_sum;
  /// Wall time per measured step (dense layers, every layer, the output head), mean and each.
  seconds step_seconds = 0.0;
  std::vector<seconds> step_walls;
  /// The startup: the initial GPU copies' transfer.
  seconds placement_seconds = 0.0;
  bytes placement_bytes = 0;
  std::size_t placement_copies = 0;
  /// The timeline's accounts over the measured steps (the startup subtracted).
  ledger accounts;
  trimoe_device_use gpu, cpu, ndp, dimm;
  trimoe_migration_stats migrations;
  /// Copies installed on the GPU and host layouts installed (relayouts, rebalances) after the
  /// seal, startup included, and the bytes their receipts carried.
  std::size_t gpu_installs = 0;
  std::size_t layout_installs = 0;
  bytes installed_bytes = 0;
};

/// The solvers on +Relayout's problems (Eq. 7), sums per measured step and gaps.
struct trimoe_solver_gaps {
  std::size_t problems = 0;
  /// Problems whose Eq. 7 optimum the exact solver proved.
  std::size_t proven = 0;
  seconds greedy = 0.0, refined = 0.0, improved = 0.0, exact = 0.0;
  /// The lower bound on the Eq. 7 makespan (closed form and dual).
  seconds bound = 0.0;
  /// makespan / optimum − 1 over the proven problems: greedy, refined, improved.
  std::array<double, 3> gap_mean{};
  std::array<double, 3> gap_max{};
};

/// One predictor's scores (see the header comment).
struct trimoe_prediction_score {
  trimoe_predictor predictor = trimoe_predictor::ema;
  hotness_confusion confusion;
  /// Prefetch (hot) and localize (cold) decisions right, averaged over both and the experts.
  double decision_accuracy = 0.0;
  std::uint64_t moves = 0, moves_needed = 0, moves_right = 0;
  /// moves_right / moves; 0 when it never moves.
  [[nodiscard]] double precision() const noexcept {
    return moves == 0 ? 0.0 : static_cast<double>(moves_right) / static_cast<double>(moves);
  }
  /// moves_right / moves_needed; 0 when no move was needed.
  [[nodiscard]] double recall() const noexcept {
    return moves_needed == 0 ? 0.0 : static_cast<double>(moves_right) / static_cast<double>(moves_needed);
  }
};

/// Everything a replay measured.
struct trimoe_result {
  std::size_t batch = 0;
  std::size_t num_steps = 0;
  /// S − 1 (0 when fewer than 2 steps).
  std::size_t measured_steps = 0;
  std::size_t num_layers = 0;
  std::size_t num_experts = 0;
  std::size_t num_dimms = 0;
  std::size_t prompt_tokens = 0;
  share_classes_config classes{};
  /// Means over the measured, active (step, layer)s of the true classes' share of the experts
  /// and of the tokens, by `hotness` (cold, warm, hot).
  std::array<double, 3> class_expert_share{};
  std::array<double, 3> class_token_share{};
  /// HBM: capacity, the non-expert weights, the KV cache at the longest context, what is
  /// left for experts, one expert's bytes, and the GPU copies the initial set holds.
  bytes hbm_capacity = 0, hbm_non_expert = 0, hbm_kv = 0, hbm_for_experts = 0, expert_bytes = 0;
  std::size_t gpu_copies = 0;
  /// Whether the non-expert weights and the KV cache fit at all.
  bool hbm_fits = true;
  /// Indexed by `trimoe_system`.
  std::array<trimoe_system_result, num_trimoe_systems> systems{};
  trimoe_solver_gaps gaps;
  /// The lower bound on each layer's timed span of the `relayout` system, per layer (mean
  /// per measured step) and its sum.
  std::vector<seconds> layer_bound;
  seconds step_bound = 0.0;
  /// Indexed by `trimoe_predictor`.
  std::array<trimoe_prediction_score, num_trimoe_predictors> prediction{};

  [[nodiscard]] const trimoe_system_result& operator[](trimoe_system s) const noexcept {
    return systems[static_cast<std::size_t>(s)];
  }
};

/// Replays batched decode steps through every configured system, step by step.
template <DeviceCost Gpu = any_device_cost, DeviceCost Cpu = any_device_cost, DeviceCost Ndp = any_device_cost>
requires DenseComputeCost<Gpu>
class trimoe_replayer {
 public:
  using system_type = gpu_cpu_ndp_system<Gpu, Cpu, Ndp>;
  using devices_type = trimoe_devices<Gpu, Cpu, Ndp>;
  using planner_type = migration_planner<Gpu, Cpu, Ndp>;

  /// `steps` must outlive the replayer.
  ///
  /// Throws: `invalid_argument` when `steps` has no layer or its experts differ from
  /// `shape.num_experts`, or a setting is out of range (`alpha`, `classes`, `exact_nodes`,
  /// `exact_max_experts`, a window setting, `relayout_memory_bandwidth`,
  /// `activation_element_bytes`, `chunk_bytes`, `relayout` off while `solver_gaps` is on);
  /// and as the device models (`gpu_cpu_ndp_system`), `forward_pass_cost` (a shape that does
  /// not describe its attention) and the planner do.
  /// Complexity: the initial layout and the startup placement, O(layers · experts · D), and
  /// every buffer of the replay.
  trimoe_replayer(const batched_steps& steps, const model_shape& shape, devices_type devices,
                  const trimoe_replay_config& config = {})
      : steps_(&steps),
        config_(check(steps, shape, config)),
        shape_(shape),
        L_(steps.num_layers()),
        E_(steps.num_experts()),
        B_(steps.batch_size()),
        full_(devices.gpu, devices.cpu, devices.ndp),
        D_(full_.num_dimms()),
        pass_(devices.gpu, shape, config.forward),
        greedy_({.max_iterations = 0}),
        exact_({.max_experts = config.exact_max_experts, .node_limit = config.exact_nodes}),
        ema_(L_, E_, {.alpha = config.alpha, .classes = config.classes}),
        last_(L_, E_, {.alpha = 1.0, .classes = config.classes}) {
    if (D_ + 2 > 255) detail::throw_invalid("trimoe_replayer", "the DIMM-NDP model's units must be <= 253", D_);
    W_ = full_.weight_bytes(expert_key{0, 0}, fp16);
    greedy_.reserve(E_, D_);
    refined_.reserve(E_, D_);
    improved_.reserve(E_, D_);
    exact_.reserve(E_, D_);
    busy_problem_ = makespan_problem(D_, E_);
    for (auto* s : {&gap_sched_, &gap_exact_}) *s = makespan_schedule(E_, D_);
    bound_scratch_.assign(2 * D_, 0.0);
    dual_.compute(busy_problem_, 0);  // sizes the dual's buffers (an empty problem: no rounds)
    dual_.lambda.reserve(2 + D_);
    actual_.assign(E_, 0.0);
    truth_.assign(E_, hotness::cold);
    order_.assign(E_, 0);
    layer_bound_.assign(L_, 0.0);
    initial_classes_.assign(L_ * E_, hotness::cold);
    for (auto& p : prev_) p.assign(L_ * E_, hotness::cold);
    dimm_busy_.assign(D_, 0.0);
    hops_.reserve(2 * D_ + 2);
    mem_hops_.reserve(2 * D_ + 2);

    initial_analysis();
    for (std::size_t k = 0; k < num_trimoe_systems; ++k) {
      if (!config_.systems[k]) continue;
      rows_[k].emplace(*this, static_cast<trimoe_system>(k), devices);
      place(*rows_[k]);
    }
    for (auto& p : prev_) std::copy(initial_classes_.begin(), initial_classes_.end(), p.begin());
  }

  [[nodiscard]] const trimoe_replay_config& config() const noexcept { return config_; }
  /// The three-device system (names, D, prices by Eq. 1–4).
  [[nodiscard]] const system_type& system() const noexcept { return full_; }
  [[nodiscard]] const model_shape& shape() const noexcept { return shape_; }
  [[nodiscard]] std::size_t num_steps() const noexcept { return steps_->num_steps(); }
  [[nodiscard]] std::size_t num_layers() const noexcept { return L_; }
  [[nodiscard]] std::size_t num_experts() const noexcept { return E_; }
  [[nodiscard]] std::size_t num_dimms() const noexcept { return D_; }
  /// The step `replay_step` replays next (from 1: step 0 is the warm-up).
  [[nodiscard]] std::size_t next_step() const noexcept { return next_; }
  [[nodiscard]] bool done() const noexcept { return next_ >= steps_->num_steps(); }
  /// Whether system `s` runs.
  [[nodiscard]] bool runs(trimoe_system s) const noexcept { return rows_[idx(s)].has_value(); }

  /// The warm-up step's classes of `layer` (the initial layouts' input).
  [[nodiscard]] std::span<const hotness> initial_classes(layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < L_);
    return std::span<const hotness>(initial_classes_).subspan(static_cast<std::size_t>(layer) * E_, E_);
  }
  /// System `s`'s timeline (its accounts, resources, receipts).
  ///
  /// Preconditions: `runs(s)`.
  [[nodiscard]] const timeline& timeline_of(trimoe_system s) const noexcept { return rows_[idx(s)]->tl; }
  /// Logs every hold of system `s`'s resources from now on into `*log` (none when null), as
  /// `timeline::record_into` does.
  ///
  /// Preconditions: `runs(s)`.
  void record_into(trimoe_system s, std::vector<occupation>* log) noexcept { rows_[idx(s)]->tl.record_into(log); }
  /// System `s`'s copies (tier 0: GPU; 1: striped; 2 + d: localized on DIMM d).
  [[nodiscard]] const timed_residency& copies_of(trimoe_system s) const noexcept { return rows_[idx(s)]->copies; }
  /// System `s`'s current host layout of `layer`'s experts (what its next step reads).
  [[nodiscard]] std::span<const expert_layout> layouts(trimoe_system s, layer_id layer) const noexcept {
    MOEPOLICY_ASSERT(layer < L_);
    return std::span<const expert_layout>(rows_[idx(s)]->layout).subspan(static_cast<std::size_t>(layer) * E_, E_);
  }
  /// GPU copies system `s` may hold in `layer`.
  [[nodiscard]] std::size_t gpu_slots(trimoe_system s, layer_id layer) const noexcept {
    return rows_[idx(s)]->slots[layer];
  }
  /// The schedule of `s` at the last (step, layer) it replayed with an active expert, and its
  /// problem.
  [[nodiscard]] const makespan_schedule& last_schedule(trimoe_system s) const noexcept { return rows_[idx(s)]->sched; }
  [[nodiscard]] const makespan_problem& last_problem(trimoe_system s) const noexcept { return rows_[idx(s)]->problem; }
  /// The tasks `s`'s planner returned at its last plan (taken flagged), and the budget that
  /// plan filled (its window less the estimated rest of the copies in flight).
  [[nodiscard]] std::span<const migration_task> last_tasks(trimoe_system s) const noexcept {
    const auto& r = *rows_[idx(s)];
    return std::span<const migration_task>(r.last_tasks).first(r.last_count);
  }
  [[nodiscard]] seconds last_window(trimoe_system s) const noexcept { return rows_[idx(s)]->last_window; }

  /// Replays step `next_step()` on every system (see the header comment).
  ///
  /// Preconditions: `!done()`.
  /// Complexity: per (layer, system) the solver (the exact one bounded by `exact_nodes`), the
  /// timeline's operations, one plan and O(E log E) for the classes; no allocation.
  void replay_step() {
    MOEPOLICY_ASSERT(!done());
    const std::size_t t = next_;
    for (auto& r : rows_) {
      if (r) r->step_start = r->now;
    }
    for (std::size_t l = 0; l < L_; ++l) {
      const auto loads = steps_->loads(t, l);
      for (auto& r : rows_) {
        if (r) run_layer(*r, t, l, loads);
      }
      score_layer(l, loads);
      ema_.update(static_cast<layer_id>(l), loads);
      last_.update(static_cast<layer_id>(l), loads);
      const std::size_t n = l + 1 < L_ ? l + 1 : 0;
      const std::size_t target = l + 1 < L_ ? t : t + 1;
      if (target < steps_->num_steps()) {
        for (auto& r : rows_) {
          if (r && r->planner) plan(*r, n, target);
        }
      }
    }
    for (auto& r : rows_) {
      if (!r) continue;
      const interval head = r->tl.run(r->now, gpu_, pass_.output_head_seconds(B_), cost_kind::dense);
      r->gpu_flops += output_head_work(shape_, B_, config_.forward).flops;
      r->now = head.end;
      r->walls[t - 1] = r->now - r->step_start;
    }
    ++next_;
  }

  /// Replays every remaining step.
  void replay_all() {
    while (!done()) replay_step();
  }

  /// The figures of the steps replayed so far.
  ///
  /// Complexity: O(systems · (layers + resources)); allocates the result.
  [[nodiscard]] trimoe_result result() const {
    trimoe_result res;
    res.batch = B_;
    res.num_steps = steps_->num_steps();
    res.measured_steps = next_ > 1 ? next_ - 1 : 0;
    res.num_layers = L_;
    res.num_experts = E_;
    res.num_dimms = D_;
    res.prompt_tokens = config_.prompt_tokens;
    res.classes = config_.classes;
    const double problems = static_cast<double>(class_problems_);
    for (std::size_t c = 0; c < 3; ++c) {
      res.class_expert_share[c] = problems > 0.0 ? class_experts_[c] / problems : 0.0;
      res.class_token_share[c] = problems > 0.0 ? class_tokens_[c] / problems : 0.0;
    }
    res.hbm_capacity = hbm_capacity_;
    res.hbm_non_expert = hbm_non_expert_;
    res.hbm_kv = hbm_kv_;
    res.hbm_for_experts = hbm_for_experts_;
    res.expert_bytes = W_;
    res.gpu_copies = gpu_copies_;
    res.hbm_fits = hbm_fits_;
    const std::size_t measured = res.measured_steps;
    const double n = measured > 0 ? static_cast<double>(measured) : 1.0;
    for (std::size_t k = 0; k < num_trimoe_systems; ++k) {
      trimoe_system_result& o = res.systems[k];
      o.system = static_cast<trimoe_system>(k);
      if (!rows_[k]) continue;
      const row& r = *rows_[k];
      o.ran = true;
      o.layers.resize(L_);
      for (std::size_t l = 0; l < L_; ++l) {
        const trimoe_layer_times& x = r.layer_sum[l];
        o.layers[l] = {x.span / n, x.moe / n, x.gpu / n, x.cpu / n, x.max_dimm / n, x.mean_dimm / n, x.eq7 / n};
        trimoe_layer_times& s = o.layer_sum;
        s.span += o.layers[l].span;
        s.moe += o.layers[l].moe;
        s.gpu += o.layers[l].gpu;
        s.cpu += o.layers[l].cpu;
        s.max_dimm += o.layers[l].max_dimm;
        s.mean_dimm += o.layers[l].mean_dimm;
        s.eq7 += o.layers[l].eq7;
      }
      o.step_walls.assign(r.walls.begin(), r.walls.begin() + static_cast<std::ptrdiff_t>(measured));
      const seconds total = r.now - r.start;
      o.step_seconds = measured > 0 ? total / n : 0.0;
      o.placement_seconds = r.start;
      o.placement_bytes = r.placement_bytes;
      o.placement_copies = r.placement_copies;
      o.accounts = r.tl.accounts();
      o.accounts -= r.at_start;
      o.migrations = r.stats;
      o.migrations.pending_at_end = 0;
      for (std::uint8_t p : r.pend) o.migrations.pending_at_end += p != 0 ? std::size_t{1} : std::size_t{0};
      o.gpu_installs = r.copies.stats(gpu_tier).installs;
      for (std::size_t tier = 1; tier < 2 + D_; ++tier) {
        o.layout_installs += r.copies.stats(static_cast<tier_id>(tier)).installs;
      }
      for (std::size_t tier = 0; tier < 2 + D_; ++tier) {
        o.installed_bytes += r.copies.stats(static_cast<tier_id>(tier)).installed_bytes;
      }
      const double T = total > 0.0 ? total : 1.0;
      const auto& a = o.accounts;
      o.gpu = {true, a[gpu_].busy() / T, a[gpu_].busy() / T, r.gpu_flops};
      o.cpu = {uses_cpu(o.system), a[cpu_].busy() / T, a[cpu_].busy(cost_kind::expert) / T, r.cpu_flops};
      seconds ndp = 0.0, dimm = 0.0;
      for (std::size_t d = 0; d < D_; ++d) {
        ndp += a[dimm_res(d)].busy(cost_kind::expert);
        dimm += a[dimm_res(d)].busy();
      }
      const double DT = static_cast<double>(D_) * T;
      o.ndp = {uses_ndp(o.system), ndp / DT, ndp / DT, r.ndp_flops};
      o.dimm = {true, dimm / DT, ndp / DT, r.ndp_flops};
    }
    res.gaps = gaps_;
    res.gaps.greedy /= n;
    res.gaps.refined /= n;
    res.gaps.improved /= n;
    res.gaps.exact /= n;
    res.gaps.bound /= n;
    for (std::size_t i = 0; i < 3; ++i) {
      res.gaps.gap_mean[i] = gaps_.proven > 0 ? gaps_.gap_mean[i] / static_cast<double>(gaps_.proven) : 0.0;
    }
    res.layer_bound.resize(L_);
    for (std::size_t l = 0; l < L_; ++l) {
      res.layer_bound[l] = layer_bound_[l] / n;
      res.step_bound += res.layer_bound[l];
    }
    for (std::size_t k = 0; k < num_trimoe_predictors; ++k) {
      auto& p = res.prediction[k];
      p = scores_[k];
      p.predictor = static_cast<trimoe_predictor>(k);
      const auto total = static_cast<double>(p.confusion.total());
      p.decision_accuracy = total > 0.0 ? decisions_[k] / total : 0.0;
    }
    return res;
  }

 private:
  static constexpr tier_id gpu_tier = 0;
  static constexpr tier_id striped_tier = 1;
  static constexpr std::uint8_t no_job = 0;
  /// The bit that marks a memory-only job's tag (the reads and writes beside a copy; the low
  /// bits name the expert slot, as a copy's tag does).
  static constexpr std::uint64_t memory_bit = std::uint64_t{1} << 63;
  static constexpr resource_id gpu_ = 0, cpu_ = 1, h2d_ = 2, d2h_ = 3;
  [[nodiscard]] resource_id dimm_res(std::size_t d) const noexcept { return static_cast<resource_id>(4 + d); }
  [[nodiscard]] resource_id port_res(std::size_t d) const noexcept { return static_cast<resource_id>(4 + D_ + d); }
  [[nodiscard]] static constexpr std::size_t idx(trimoe_system s) noexcept { return static_cast<std::size_t>(s); }
  [[nodiscard]] static tier_id tier_of(expert_layout x) noexcept {
    return x.is_striped() ? striped_tier : static_cast<tier_id>(2 + x.home);
  }
  [[nodiscard]] static expert_layout layout_of(tier_id t) noexcept {
    return t == striped_tier ? expert_layout::striped() : expert_layout::localized(static_cast<std::uint16_t>(t - 2));
  }
  [[nodiscard]] expert_key key(std::size_t l, std::size_t e) const noexcept {
    return {static_cast<layer_id>(l), static_cast<expert_id>(e)};
  }

  /// One system's state: its devices' prices, timeline, copies, jobs, solver buffers and sums.
  struct row {
    row(const trimoe_replayer& o, trimoe_system s, const devices_type& dev)
        : sys(s),
          pricing(dev.gpu, dev.cpu, dev.ndp,
                  {.use_cpu = uses_cpu(s), .use_ndp = uses_ndp(s), .activation_transfer = s == trimoe_system::gpu_ndp}),
          // Room for every job `enqueue` can have in flight: per expert slot one copy over
          // its link(s), with room for the longest copy's hops (a relayout's D port hops, a
          // rebalance's 2, a prefetch's 1), and one memory-only job of one hop per DIMM. A
          // job of one hop takes a one-hop slot while any is free, so at most L·E jobs ever
          // take the longer slots.
          tl({.chunk_bytes = o.config_.chunk_bytes,
              .reserved_gaps = 8 * o.E_ + 64,
              .reserved_jobs = o.L_ * o.E_,
              .reserved_hops = std::max<std::size_t>(o.D_, 2),
              .reserved_one_hop_jobs = o.L_ * o.E_ * o.D_}),
          copies(o.L_, o.E_, 2 + o.D_),
          problem(o.D_, o.E_),
          sched(o.E_, o.D_),
          fallback(o.E_, o.D_) {
      const std::size_t L = o.L_, E = o.E_, D = o.D_;
      tl.add_resource("gpu", resource_kind::processor);
      tl.add_resource("cpu", resource_kind::processor);
      tl.add_resource("pcie h2d", resource_kind::link);
      tl.add_resource("pcie d2h", resource_kind::link);
      for (std::size_t d = 0; d < D; ++d) tl.add_resource("dimm " + std::to_string(d), resource_kind::memory);
      for (std::size_t d = 0; d < D; ++d) tl.add_resource("dimm-link " + std::to_string(d), resource_kind::link);
      layout.assign(L * E, expert_layout{});
      resident.assign(L * E, 0);
      pend.assign(L * E, no_job);
      pend_tier.assign(L * E, 0);
      pend_job.assign(L * E, 0);
      pend_target.assign(L * E, 0);
      pend_est.assign(L * E, 0.0);
      pend_payload.assign(L * E, 0);
      pend_parts.assign(L * E, 0);
      pend_receipt.assign(L * E, transfer_receipt{});
      pend_must.assign(L * E, 0);
      slots.assign(L, 0);
      plan_layout.assign(E, expert_layout{});
      plan_resident.assign(E, 0);
      layer_sum.assign(L, trimoe_layer_times{});
      walls.assign(std::max<std::size_t>(o.steps_->num_steps(), 1), 0.0);
      order.reserve(E);
      loads.reset(D);
      if (prefetches(s)) {
        migration_planner_config c = o.config_.planner;
        if (!is_relayout(s)) {
          c.relayout = false;
          c.rebalance = false;
        }
        if (s == trimoe_system::relayout_benefit) c.relayout_when = relayout_rule::benefit;
        planner.emplace(pricing, E, c);
        last_tasks.assign(2 * E + c.rebalancing.max_moves, migration_task{});
      }
    }

    trimoe_system sys;
    system_type pricing;
    timeline tl;
    timed_residency copies;
    std::optional<planner_type> planner;
    /// Per (layer, expert): the current host layout, whether the GPU copy is usable at the
    /// layer's `moe_ready`, and the job in flight (kind + 1, target tier, id, target step,
    /// estimate, payload, bytes it must carry).
    std::vector<expert_layout> layout;
    std::vector<std::uint8_t> resident;
    std::vector<std::uint8_t> pend, pend_tier;
    std::vector<timeline::job_id> pend_job;
    std::vector<std::size_t> pend_target;
    std::vector<seconds> pend_est;
    std::vector<bytes> pend_payload, pend_must;
    /// Jobs of the copy still to land (its link job and its memory-only jobs), and the link
    /// job's receipt once it has.
    std::vector<std::uint32_t> pend_parts;
    std::vector<transfer_receipt> pend_receipt;
    std::vector<std::size_t> slots;
    std::vector<expert_layout> plan_layout;
    std::vector<std::uint8_t> plan_resident;
    std::vector<std::size_t> order;
    makespan_problem problem;
    makespan_schedule sched, fallback;
    detail::device_loads loads;
    std::vector<migration_task> last_tasks;
    std::size_t last_count = 0;
    seconds last_window = 0.0;
    /// The last layer's timing: MoE start, end, and the GPU busy time it issued.
    seconds moe_ready = 0.0, layer_end = 0.0, layer_gpu = 0.0;
    seconds start = 0.0, now = 0.0, step_start = 0.0;
    ledger at_start;
    bytes placement_bytes = 0;
    std::size_t placement_copies = 0;
    std::vector<trimoe_layer_times> layer_sum;
    std::vector<seconds> walls;
    trimoe_migration_stats stats;
    double gpu_flops = 0.0, cpu_flops = 0.0, ndp_flops = 0.0;
  };

  static trimoe_replay_config check(const batched_steps& steps, const model_shape& shape,
                                    const trimoe_replay_config& c) {
    constexpr std::string_view fn = "trimoe_replayer";
    if (steps.num_layers() == 0)
      detail::throw_invalid(fn, "the steps must have at least one layer", steps.num_layers());
    if (steps.num_experts() != shape.num_experts) {
      detail::throw_invalid(
          fn, "the steps' experts must equal the model's num_experts " + std::to_string(shape.num_experts),
          steps.num_experts());
    }
    if (!(c.alpha > 0.0 && c.alpha <= 1.0)) detail::throw_invalid(fn, "alpha must be in (0, 1]", c.alpha);
    const auto& k = c.classes;
    if (!(k.cold_share >= 0.0) || !(k.hot_share > 0.0) || k.hot_share + k.cold_share > 1.0 + 1e-12) {
      detail::throw_invalid(
          fn, "classes need 0 < hot_share, 0 <= cold_share and hot_share + cold_share <= 1, hot_share", k.hot_share);
    }
    if (c.exact_nodes == 0) detail::throw_invalid(fn, "exact_nodes must be >= 1", c.exact_nodes);
    if (c.exact_max_experts > 64) detail::throw_invalid(fn, "exact_max_experts must be <= 64", c.exact_max_experts);
    if (!(c.window_scale >= 0.0) || !std::isfinite(c.window_scale)) {
      detail::throw_invalid(fn, "window_scale must be finite and >= 0", c.window_scale);
    }
    if (!(c.window_seconds >= 0.0) || !std::isfinite(c.window_seconds)) {
      detail::throw_invalid(fn, "window_seconds must be finite and >= 0", c.window_seconds);
    }
    if (!(c.relayout_memory_bandwidth > 0.0)) {
      detail::throw_invalid(fn, "relayout_memory_bandwidth must be > 0", c.relayout_memory_bandwidth);
    }
    if (!(c.activation_element_bytes > 0.0) || !std::isfinite(c.activation_element_bytes)) {
      detail::throw_invalid(fn, "activation_element_bytes must be finite and > 0", c.activation_element_bytes);
    }
    if (c.chunk_bytes == 0) detail::throw_invalid(fn, "chunk_bytes must be > 0", c.chunk_bytes);
    if (c.solver_gaps && !c.systems[static_cast<std::size_t>(trimoe_system::relayout)]) {
      detail::throw_invalid(fn, "solver_gaps needs the relayout system to run (systems[relayout] = true)");
    }
    return c;
  }

  /// The warm-up step's classes, the HBM budget and the initial GPU set.
  void initial_analysis() {
    const bool any = steps_->num_steps() > 0;
    std::vector<double> warm(L_ * E_, 0.0);
    for (std::size_t l = 0; l < L_; ++l) {
      if (any) {
        const auto loads = steps_->loads(0, l);
        for (std::size_t e = 0; e < E_; ++e) warm[l * E_ + e] = loads[e];
        ema_.update(static_cast<layer_id>(l), loads);
        last_.update(static_cast<layer_id>(l), loads);
      }
      detail::classify_by_share_into(std::span<const double>(warm).subspan(l * E_, E_),
                                     std::span<hotness>(initial_classes_).subspan(l * E_, E_), order_, config_.classes);
    }
    // HBM: the non-expert weights, the KV cache of B sequences at the longest context (and
    // their linear-attention states in a hybrid model), the rest for whole experts.
    hbm_capacity_ = full_.gpu().capacity_bytes();
    hbm_non_expert_ = non_expert_weight_bytes(shape_, config_.forward);
    const std::size_t longest = config_.prompt_tokens + std::max<std::size_t>(steps_->num_steps(), 1);
    hbm_kv_ = kv_bytes_per_token(shape_, config_.forward) * static_cast<bytes>(B_) * static_cast<bytes>(longest) +
              linear_state_bytes_per_sequence(shape_, config_.forward) * static_cast<bytes>(B_);
    hbm_fits_ = hbm_non_expert_ + hbm_kv_ <= hbm_capacity_;
    hbm_for_experts_ = hbm_fits_ ? hbm_capacity_ - hbm_non_expert_ - hbm_kv_ : 0;
    const std::size_t room = static_cast<std::size_t>(hbm_for_experts_ / std::max<bytes>(W_, 1));
    // Candidates: each layer's hot experts, or its `gpu_slots_per_layer` most loaded.
    struct candidate {
      double load;
      std::size_t l, e;
    };
    std::vector<candidate> cand;
    std::vector<std::uint32_t> by_load(E_);
    for (std::size_t l = 0; l < L_; ++l) {
      std::iota(by_load.begin(), by_load.end(), std::uint32_t{0});
      const double* w = warm.data() + l * E_;
      std::sort(by_load.begin(), by_load.end(),
                [&](std::uint32_t a, std::uint32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
      for (std::size_t i = 0; i < E_; ++i) {
        const std::size_t e = by_load[i];
        const bool pick = config_.gpu_slots_per_layer > 0 ? i < config_.gpu_slots_per_layer
                                                          : initial_classes_[l * E_ + e] == hotness::hot;
        if (pick) cand.push_back({w[e], l, e});
      }
    }
    std::stable_sort(cand.begin(), cand.end(), [](const candidate& a, const candidate& b) { return a.load > b.load; });
    if (cand.size() > room) cand.resize(room);
    initial_gpu_.assign(L_ * E_, 0);
    for (const auto& c : cand) initial_gpu_[c.l * E_ + c.e] = 1;
    gpu_copies_ = cand.size();
    // Localized homes: per layer, largest warm-up load first to the least-loaded DIMM (then the
    // DIMM with fewest experts overall, then the lowest index); for the cold experts
    // (`cold_home_`) and for every expert (`all_home_`, MoNDE-like).
    cold_home_.assign(L_ * E_, expert_layout::striped_home);
    all_home_.assign(L_ * E_, expert_layout::striped_home);
    for (int pass = 0; pass < 2; ++pass) {
      std::vector<std::size_t> count(D_, 0);
      std::vector<double> load(D_, 0.0);
      auto& home = pass == 0 ? cold_home_ : all_home_;
      for (std::size_t l = 0; l < L_; ++l) {
        std::fill(load.begin(), load.end(), 0.0);
        std::iota(by_load.begin(), by_load.end(), std::uint32_t{0});
        const double* w = warm.data() + l * E_;
        std::sort(by_load.begin(), by_load.end(),
                  [&](std::uint32_t a, std::uint32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); });
        for (std::uint32_t e : by_load) {
          if (pass == 0 && initial_classes_[l * E_ + e] != hotness::cold) continue;
          std::size_t best = 0;
          for (std::size_t d = 1; d < D_; ++d) {
            if (load[d] < load[best] || (load[d] == load[best] && count[d] < count[best])) best = d;
          }
          load[best] += w[e];
          ++count[best];
          home[l * E_ + e] = static_cast<std::uint16_t>(best);
        }
      }
    }
  }

  /// The initial host layout of expert (l, e) in system `s`.
  [[nodiscard]] expert_layout initial_layout(trimoe_system s, std::size_t l, std::size_t e) const noexcept {
    const std::size_t i = l * E_ + e;
    if (s == trimoe_system::gpu_only || s == trimoe_system::gpu_cpu) return expert_layout::striped();
    if (s == trimoe_system::gpu_ndp) return expert_layout::localized(all_home_[i]);
    return cold_home_[i] == expert_layout::striped_home ? expert_layout::striped()
                                                        : expert_layout::localized(cold_home_[i]);
  }

  /// The DIMM hops of a read of `w` bytes of an expert laid out as `x`, into `hops_`.
  void add_reads(expert_layout x, bytes w, std::optional<cost_kind> as) {
    const auto& dimm = full_.dimm();
    if (x.is_localized()) {
      hops_.push_back({dimm_res(x.home), dimm.contention_seconds(w), w, as});
      return;
    }
    const auto D = static_cast<bytes>(D_);
    const bytes share = (w + D - 1) / D;
    const seconds t = dimm.contention_seconds(share);
    for (std::size_t d = 0; d < D_; ++d) hops_.push_back({dimm_res(d), t, share, as});
  }

  /// Preloads `r`'s host layouts, seals, and loads its initial GPU copies (the startup).
  void place(row& r) {
    for (std::size_t l = 0; l < L_; ++l) {
      r.slots[l] = 0;
      for (std::size_t e = 0; e < E_; ++e) {
        const expert_layout x = initial_layout(r.sys, l, e);
        r.layout[l * E_ + e] = x;
        r.copies.preload(key(l, e), tier_of(x), fp16);
        r.slots[l] += initial_gpu_[l * E_ + e];
      }
    }
    r.copies.seal();
    for (std::size_t l = 0; l < L_; ++l) {
      for (std::size_t e = 0; e < E_; ++e) {
        if (initial_gpu_[l * E_ + e] == 0) continue;
        hops_.clear();
        hops_.push_back({h2d_, full_.gpu().transfer_seconds(W_), W_, std::nullopt});
        add_reads(r.layout[l * E_ + e], W_, std::nullopt);
        const transfer_receipt rc = r.tl.transfer(0.0, hops_, W_, cost_kind::placement);
        r.copies.install(key(l, e), gpu_tier, fp16, W_, rc);
        r.placement_bytes += W_;
        ++r.placement_copies;
      }
    }
    r.start = r.now = r.tl.horizon();
    // Every resource was idle while the startup ran: that is not a stall of the measured steps.
    for (std::size_t k = 0; k < r.tl.num_resources(); ++k) {
      const hop h{static_cast<resource_id>(k), 0.0, 0, std::nullopt};
      if (r.tl.free_at(h.resource) < r.start) r.tl.occupy(r.start, std::span<const hop>(&h, 1), cost_kind::placement);
    }
    r.tl.settle(r.start);
    r.at_start = r.tl.accounts();
    // Planners allocate their scratch on a first plan: make it here, on an empty prediction.
    if (r.planner) {
      std::fill(actual_.begin(), actual_.end(), 0.0);
      std::fill(truth_.begin(), truth_.end(), hotness::cold);
      static_cast<void>(r.planner->plan(0, actual_, truth_, std::span<const expert_layout>(r.layout).first(E_),
                                        std::span<const std::uint8_t>(r.resident).first(E_), 0.0, 0));
    }
  }

  /// Installs what landed on `r`'s timeline.
  void land(row& r) {
    for (const transfer_receipt& rc : r.tl.landed()) {
      const auto i = static_cast<std::size_t>(rc.tag() & ~memory_bit);
      MOEPOLICY_ASSERT(i < L_ * E_ && r.pend[i] != no_job && r.pend_parts[i] > 0);
      if ((rc.tag() & memory_bit) == 0) r.pend_receipt[i] = rc;
      if (--r.pend_parts[i] > 0) continue;
      // The copy and the memory traffic beside it are done: install it with its receipt.
      const auto kind = static_cast<migration_kind>(r.pend[i] - 1);
      const expert_key k = key(i / E_, i % E_);
      if (kind == migration_kind::prefetch) {
        r.copies.install(k, gpu_tier, fp16, r.pend_must[i], r.pend_receipt[i]);
      } else {
        r.copies.install(k, r.pend_tier[i], fp16, r.pend_must[i], r.pend_receipt[i]);
        r.copies.drop(k, tier_of(r.layout[i]));
        r.layout[i] = layout_of(r.pend_tier[i]);
      }
      ++r.stats.landed[static_cast<std::size_t>(kind)];
      r.pend[i] = no_job;
    }
    r.tl.clear_landed();
  }

  /// Layer `l` of step `t` on system `r` (see the header comment).
  void run_layer(row& r, std::size_t t, std::size_t l, std::span<const std::uint32_t> loads) {
    timeline& tl = r.tl;
    const auto lid = static_cast<layer_id>(l);
    const std::uint64_t ctx = config_.prompt_tokens + t;
    const std::uint64_t cached = static_cast<std::uint64_t>(B_) * (ctx + 1);
    seconds at = r.now;
    seconds gpu_busy = 0.0;
    if (l == 0) {
      for (std::uint32_t d = 0; d < shape_.num_dense_layers; ++d) {
        const seconds s = pass_.dense_layer_seconds(d, B_, cached, B_);
        at = tl.run(at, gpu_, s, cost_kind::dense).end;
        r.gpu_flops += attention_work(shape_, d, B_, cached, B_, config_.forward).flops +
                       dense_ffn_work(shape_, B_, config_.forward).flops;
      }
    }
    const seconds layer_start = at;
    const auto model_layer = static_cast<std::uint32_t>(shape_.num_dense_layers + l);
    const seconds attn = pass_.attention_seconds(model_layer, B_, cached, B_), router = pass_.router_seconds(B_);
    at = tl.run(at, gpu_, attn, cost_kind::attention).end;
    at = tl.run(at, gpu_, router, cost_kind::dense).end;
    gpu_busy += attn + router;
    r.gpu_flops += attention_work(shape_, model_layer, B_, cached, B_, config_.forward).flops +
                   router_work(shape_, B_, config_.forward).flops;
    const seconds ready = at;
    tl.settle(ready);
    land(r);
    // Jobs planned for this (step, layer) that have not landed are late.
    for (std::size_t e = 0; e < E_; ++e) {
      const std::size_t i = l * E_ + e;
      if (r.pend[i] != no_job && r.pend_target[i] == t) {
        ++r.stats.late;
        r.pend_target[i] = std::numeric_limits<std::size_t>::max();
      }
      r.resident[i] = r.copies.usable(key(l, e), gpu_tier, ready) ? 1 : 0;
    }
    seconds end = ready;
    std::fill(dimm_busy_.begin(), dimm_busy_.end(), 0.0);
    seconds cpu_busy = 0.0;
    if (shape_.num_shared_experts > 0) {
      const seconds s = pass_.shared_experts_seconds(lid, B_);
      const hop h{gpu_, s, 0, std::nullopt};
      end = std::max(end, tl.backfill(ready, std::span<const hop>(&h, 1), cost_kind::dense).end);
      gpu_busy += s;
      r.gpu_flops +=
          static_cast<double>(shape_.num_shared_experts) * static_cast<double>(B_) * shape_.flops_per_token();
    }
    const auto lay = std::span<const expert_layout>(r.layout).subspan(l * E_, E_);
    const auto res = std::span<const std::uint8_t>(r.resident).subspan(l * E_, E_);
    r.pricing.build_layer(lid, loads, lay, res, fp16, r.problem);
    if (!r.problem.empty()) {
      solve(r, loads);
      end = std::max(end, issue(r, ready, gpu_busy, cpu_busy));
      if (r.sys == trimoe_system::relayout && config_.solver_gaps) compare_solvers(r, l, attn + router);
    }
    r.moe_ready = ready;
    r.layer_end = end;
    r.layer_gpu = gpu_busy;
    r.now = end;
    trimoe_layer_times& x = r.layer_sum[l];
    x.span += end - layer_start;
    x.moe += end - ready;
    x.gpu += gpu_busy;
    x.cpu += cpu_busy;
    seconds mx = 0.0, sum = 0.0;
    for (seconds v : dimm_busy_) {
      mx = std::max(mx, v);
      sum += v;
    }
    x.max_dimm += mx;
    x.mean_dimm += sum / static_cast<double>(D_);
    x.eq7 += r.problem.empty() ? 0.0 : r.sched.makespan;
  }

  /// `r`'s solver on `r.problem` into `r.sched` (see the header comment).
  void solve(row& r, std::span<const std::uint32_t> loads) {
    using enum trimoe_system;
    makespan_problem& p = r.problem;
    makespan_schedule& s = r.sched;
    switch (r.sys) {
      case gpu_only:
      case gpu_ndp:
      case greedy:
        greedy_.solve(p, s);
        break;
      case gpu_cpu: {
        // Resident on the GPU; hot by the step's own loads and absent: loaded on demand to the
        // GPU; every other expert on the CPU.
        for (std::size_t e = 0; e < E_; ++e) actual_[e] = loads[e];
        detail::classify_by_share_into(actual_, truth_, order_, config_.classes);
        s.assignment.resize(p.size());
        for (std::size_t i = 0; i < p.size(); ++i) {
          const bool gpu = p[i].gpu_resident || truth_[p[i].key.expert] == hotness::hot;
          s.assignment[i] = gpu ? device_option::gpu : device_option::cpu;
        }
        s.status = solve_status::heuristic;
        s.iterations = 0;
        r.loads.reset(D_);
        r.loads.rebuild(p, s.assignment, p.size());
        detail::write_totals(r.loads, s);
        break;
      }
      case refined:
      case relayout:
      case relayout_benefit:
        refined_.solve(p, s);
        break;
      case improved:
        improved_.solve(p, s);
        break;
      case exact:
        improved_.solve(p, r.fallback);
        exact_.solve_from(p, r.fallback.assignment, s);
        if (s.status == solve_status::too_large) copy_schedule(r.fallback, s);
        break;
    }
  }

  static void copy_schedule(const makespan_schedule& from, makespan_schedule& to) noexcept {
    to.status = from.status;
    to.makespan = from.makespan;
    to.gpu_seconds = from.gpu_seconds;
    to.cpu_seconds = from.cpu_seconds;
    to.iterations = from.iterations;
    to.dimm_seconds.assign(from.dimm_seconds.begin(), from.dimm_seconds.end());
    to.assignment.assign(from.assignment.begin(), from.assignment.end());
  }

  /// A demand read of a whole expert laid out as `x`, each DIMM serving its share at the
  /// earliest idle time at or after `ready`, charged as weight reads; returns when the last
  /// share began and when the last one ended.
  interval read_shares(timeline& tl, seconds ready, expert_layout x) {
    hops_.clear();
    add_reads(x, W_, std::nullopt);
    interval out{ready, ready};
    for (const hop& h : hops_) {
      const interval i = tl.backfill(ready, std::span<const hop>(&h, 1), cost_kind::weight_read);
      out.start = std::max(out.start, i.start);
      out.end = std::max(out.end, i.end);
      dimm_busy_[h.resource - dimm_res(0)] += h.duration;
    }
    return out;
  }

  /// Adds `hops_`'s DIMM time to the layer's DIMM busy figures.
  void count_dimms() noexcept {
    for (const hop& h : hops_) {
      if (h.resource >= dimm_res(0) && h.resource < dimm_res(D_)) dimm_busy_[h.resource - dimm_res(0)] += h.duration;
    }
  }

  /// Issues `r`'s schedule at `ready` (see the header comment); returns the layer's end.
  seconds issue(row& r, seconds ready, seconds& gpu_busy, seconds& cpu_busy) {
    timeline& tl = r.tl;
    const makespan_problem& p = r.problem;
    const auto& asg = r.sched.assignment;
    const auto& gpu = full_.gpu();
    const auto& cpu = full_.cpu();
    const auto& ndp = full_.dimm();
    const double fpt = shape_.flops_per_token();
    seconds end = ready;
    for (int phase = 0; phase < 4; ++phase) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        const expert_costs& x = p[i];
        const device_option o = asg[i];
        const bool hit = o == device_option::gpu && x.gpu_resident;
        const bool miss = o == device_option::gpu && !x.gpu_resident;
        const int want = hit ? 0 : miss ? 1 : o == device_option::cpu ? 2 : 3;
        if (want != phase) continue;
        const double flops = static_cast<double>(x.load) * fpt;
        const bytes act = static_cast<bytes>(static_cast<double>(x.load) * static_cast<double>(shape_.hidden_size) *
                                             config_.activation_element_bytes);
        const seconds act_link = gpu.transfer_seconds(std::max<bytes>(act, 1));
        if (o == device_option::gpu) {
          seconds from = ready;
          if (miss) {
            const interval rd = read_shares(tl, ready, x.layout);
            const hop h{h2d_, gpu.transfer_seconds(W_), W_, std::nullopt};
            const transfer_receipt rc = tl.backfill_transfer(std::max(ready, rd.start), std::span<const hop>(&h, 1), W_,
                                                             cost_kind::demand_fetch);
            from = std::max(rc.landed(), rd.end);
          }
          const seconds f = gpu.compute_seconds(x.key, fp16, x.load);
          const hop h{gpu_, f, 0, std::nullopt};
          end = std::max(end, tl.backfill(from, std::span<const hop>(&h, 1), cost_kind::expert).end);
          gpu_busy += f;
          r.gpu_flops += flops;
          continue;
        }
        if (o == device_option::cpu) {
          hops_.clear();
          hops_.push_back({d2h_, act_link, act, std::nullopt});
          const seconds in =
              tl.backfill_transfer(ready, hops_, std::max<bytes>(act, 1), cost_kind::activation).landed();
          const seconds f = cpu.compute_seconds(x.key, fp16, x.load);
          const interval rd = read_shares(tl, in, x.layout);
          const hop h{cpu_, f, 0, std::nullopt};
          const seconds done =
              std::max(tl.backfill(std::max(in, rd.start), std::span<const hop>(&h, 1), cost_kind::expert).end, rd.end);
          hops_.clear();
          hops_.push_back({h2d_, act_link, act, std::nullopt});
          end =
              std::max(end, tl.backfill_transfer(done, hops_, std::max<bytes>(act, 1), cost_kind::activation).landed());
          cpu_busy += f;
          r.cpu_flops += flops;
          continue;
        }
        // NDP on the home DIMM.
        const resource_id home = dimm_res(x.layout.home);
        const seconds half = ndp.activation_transfer_seconds(x.load) / 2.0;
        hops_.clear();
        hops_.push_back({d2h_, act_link, act, std::nullopt});
        hops_.push_back({home, half, act, std::nullopt});
        count_dimms();
        const seconds in = tl.backfill_transfer(ready, hops_, std::max<bytes>(act, 1), cost_kind::activation).landed();
        const seconds f = ndp.compute_seconds(x.key, fp16, x.load);
        const hop h{home, f, 0, std::nullopt};
        const seconds done = tl.backfill(in, std::span<const hop>(&h, 1), cost_kind::expert).end;
        dimm_busy_[x.layout.home] += f;
        hops_.clear();
        hops_.push_back({home, half, act, std::nullopt});
        hops_.push_back({h2d_, act_link, act, std::nullopt});
        count_dimms();
        end = std::max(end, tl.backfill_transfer(done, hops_, std::max<bytes>(act, 1), cost_kind::activation).landed());
        r.ndp_flops += flops;
      }
    }
    return end;
  }

  /// The solvers and the bounds on the `relayout` system's problem of layer `l` (see the
  /// header comment); `pre` is the layer's attention and router time.
  void compare_solvers(row& r, std::size_t l, seconds pre) {
    const makespan_problem& p = r.problem;
    ++gaps_.problems;
    greedy_.solve(p, gap_sched_);
    const seconds g = gap_sched_.makespan, f = r.sched.makespan;
    improved_.solve(p, gap_sched_);
    const seconds im = gap_sched_.makespan;
    exact_.solve_from(p, gap_sched_.assignment, gap_exact_);
    const bool proven = gap_exact_.status == solve_status::optimal;
    const seconds ex = gap_exact_.status == solve_status::too_large ? im : std::min(im, gap_exact_.makespan);
    gaps_.greedy += g;
    gaps_.refined += f;
    gaps_.improved += im;
    gaps_.exact += ex;
    dual_.compute(p, config_.bound_rounds);
    gaps_.bound += std::max(makespan_lower_bound(p, bound_scratch_).value, dual_.valid ? dual_.value : 0.0);
    if (proven) {
      ++gaps_.proven;
      const seconds v[3] = {g, f, im};
      for (std::size_t k = 0; k < 3; ++k) {
        const double gap = ex > 0.0 ? v[k] / ex - 1.0 : 0.0;
        gaps_.gap_mean[k] += gap;
        gaps_.gap_max[k] = std::max(gaps_.gap_max[k], gap);
      }
    }
    // The timed bound: each option's busy time on each resource.
    busy_problem_.clear();
    const auto& dimm = full_.dimm();
    for (const expert_costs& x : p.experts()) {
      expert_costs c;
      c.key = x.key;
      c.load = x.load;
      c.layout = x.layout;
      c.gpu_resident = x.gpu_resident;
      c.dram = full_.dram_seconds(x.key, fp16, x.layout);
      c.exec[0] = full_.gpu().compute_seconds(x.key, fp16, x.load);
      c.exec[1] = full_.cpu().compute_seconds(x.key, fp16, x.load);
      c.exec[2] = x.layout.is_localized()
                      ? dimm.compute_seconds(x.key, fp16, x.load) + dimm.activation_transfer_seconds(x.load)
                      : not_allowed;
      busy_problem_.add(c);
    }
    dual_.compute(busy_problem_, config_.bound_rounds);
    layer_bound_[l] +=
        pre + std::max(makespan_lower_bound(busy_problem_, bound_scratch_).value, dual_.valid ? dual_.value : 0.0);
  }

  /// The predictors' scores and the class shares at layer `l` of the step (before the EMA
  /// takes its loads).
  void score_layer(std::size_t l, std::span<const std::uint32_t> loads) {
    double total = 0.0;
    for (std::size_t e = 0; e < E_; ++e) {
      actual_[e] = loads[e];
      total += actual_[e];
    }
    if (!(total > 0.0)) return;
    detail::classify_by_share_into(actual_, truth_, order_, config_.classes);
    ++class_problems_;
    for (std::size_t e = 0; e < E_; ++e) {
      const auto c = static_cast<std::size_t>(truth_[e]);
      class_experts_[c] += 1.0 / static_cast<double>(E_);
      class_tokens_[c] += actual_[e] / total;
    }
    const auto lid = static_cast<layer_id>(l);
    const std::span<const hotness> predicted[num_trimoe_predictors] = {
        ema_.predicted_classes(lid), last_.predicted_classes(lid),
        std::span<const hotness>(initial_classes_).subspan(l * E_, E_), truth_};
    for (std::size_t k = 0; k < num_trimoe_predictors; ++k) {
      trimoe_prediction_score& s = scores_[k];
      s.confusion.observe(predicted[k], truth_);
      const std::span<hotness> prev = std::span<hotness>(prev_[k]).subspan(l * E_, E_);
      for (std::size_t e = 0; e < E_; ++e) {
        const hotness c = predicted[k][e], want = truth_[e];
        decisions_[k] += 0.5 * (((c == hotness::hot) == (want == hotness::hot) ? 1.0 : 0.0) +
                                ((c == hotness::cold) == (want == hotness::cold) ? 1.0 : 0.0));
        const bool moves = c != prev[e], needed = want != prev[e];
        s.moves += moves ? 1 : 0;
        s.moves_needed += needed ? 1 : 0;
        s.moves_right += (moves && c == want) ? 1 : 0;
        prev[e] = c;
      }
    }
  }

  /// Plans layer `n`'s migrations (for step `target`) on system `r` after its last layer's
  /// expert computation (see the header comment).
  void plan(row& r, std::size_t n, std::size_t target) {
    const auto lid = static_cast<layer_id>(n);
    seconds window = 0.0;
    switch (config_.window) {
      case trimoe_window::attention_mlp:
        window = r.layer_gpu;
        break;
      case trimoe_window::moe_span:
        window = config_.window_scale * (r.layer_end - r.moe_ready);
        break;
      case trimoe_window::fixed:
        window = config_.window_seconds;
        break;
    }
    seconds in_flight = 0.0;
    for (std::size_t i = 0; i < L_ * E_; ++i) {
      if (r.pend[i] == no_job || r.pend_receipt[i].valid()) continue;  // no job, or its copy crossed
      const double left =
          1.0 - static_cast<double>(r.tl.placed_bytes(r.pend_job[i])) / static_cast<double>(r.pend_payload[i]);
      in_flight += left * r.pend_est[i];
    }
    const seconds budget = std::max(0.0, window - in_flight);
    const std::span<const double> predicted = ema_.predicted_loads(lid);
    const std::span<const hotness> classes = ema_.predicted_classes(lid);
    std::size_t hot_held = 0;
    for (std::size_t e = 0; e < E_; ++e) {
      const std::size_t i = n * E_ + e;
      const bool pre = r.pend[i] == 1 + static_cast<std::uint8_t>(migration_kind::prefetch);
      const bool moving = r.pend[i] != no_job && !pre;
      r.plan_layout[e] = moving ? layout_of(r.pend_tier[i]) : r.layout[i];
      r.plan_resident[e] = (pre || r.copies.present(key(n, e), gpu_tier)) ? 1 : 0;
      hot_held += (classes[e] == hotness::hot && r.plan_resident[e] != 0) ? std::size_t{1} : std::size_t{0};
    }
    const std::size_t slots = r.slots[n];
    const bytes gpu_free = slots > hot_held ? static_cast<bytes>(slots - hot_held) * W_ : 0;
    const auto tasks = r.planner->plan(lid, predicted, classes, r.plan_layout, r.plan_resident, budget, gpu_free);
    ++r.stats.plans;
    r.stats.window_seconds += window;
    r.last_window = budget;
    r.last_count = 0;
    for (const migration_task& task : tasks) {
      const auto k = static_cast<std::size_t>(task.kind);
      ++r.stats.proposed[k];
      if (r.last_count < r.last_tasks.size()) r.last_tasks[r.last_count++] = task;
      if (!task.taken) continue;
      const std::size_t i = n * E_ + task.expert;
      if (r.pend[i] != no_job) continue;                              // a second task for an expert in flight waits
      if (task.kind != migration_kind::prefetch && D_ < 2) continue;  // one DIMM: nothing to relayout
      if (task.kind != migration_kind::prefetch && task.from != r.layout[i]) continue;
      ++r.stats.taken[k];
      r.stats.estimated_seconds += task.transfer_seconds;
      enqueue(r, i, task, target);
    }
    // Keep the GPU copies within the slots: drop present copies, not predicted hot first, then
    // the least predicted load.
    std::size_t held = 0;
    for (std::size_t e = 0; e < E_; ++e) {
      const std::size_t i = n * E_ + e;
      held += (r.copies.present(key(n, e), gpu_tier) ||
               r.pend[i] == 1 + static_cast<std::uint8_t>(migration_kind::prefetch))
                  ? std::size_t{1}
                  : std::size_t{0};
    }
    while (held > slots) {
      std::size_t victim = E_;
      for (std::size_t e = 0; e < E_; ++e) {
        if (!r.copies.present(key(n, e), gpu_tier)) continue;
        if (victim == E_) {
          victim = e;
          continue;
        }
        const bool hv = classes[victim] == hotness::hot, he = classes[e] == hotness::hot;
        if ((hv && !he) || (hv == he && predicted[e] < predicted[victim])) victim = e;
      }
      if (victim == E_) break;
      r.copies.drop(key(n, victim), gpu_tier);
      --held;
      ++r.stats.evictions;
    }
  }

  /// Queues the background jobs of `task` for expert slot `i` of `r` (see the header
  /// comment): the copy over its link(s), whose receipt installs it, and beside it one
  /// memory-only job per DIMM it reads or writes, which each DIMM serves in its own idle time.
  void enqueue(row& r, std::size_t i, const migration_task& task, std::size_t target) {
    const auto& ndp = full_.dimm();
    const double mem_bw = config_.relayout_memory_bandwidth;
    const auto mem = [&](bytes b) { return static_cast<double>(b) / mem_bw; };
    hops_.clear();
    mem_hops_.clear();
    bytes payload = W_;
    tier_id to = gpu_tier;
    int priority = 0;
    cost_kind why = cost_kind::prefetch;
    const auto D = static_cast<bytes>(D_);
    const bytes share = (W_ + D - 1) / D, gathered = (D - 1) * share;
    switch (task.kind) {
      case migration_kind::prefetch: {
        hops_.push_back({h2d_, full_.gpu().transfer_seconds(W_), W_, std::nullopt});
        std::swap(hops_, mem_hops_);
        add_reads(r.layout[i], W_, std::nullopt);
        std::swap(hops_, mem_hops_);
        break;
      }
      case migration_kind::relayout_to_striped:
      case migration_kind::relayout_to_localized: {
        // One DIMM (the localized home) sends or gathers (D−1) shares; every other DIMM
        // receives or sends one share.
        const std::size_t one = task.kind == migration_kind::relayout_to_striped ? task.from.home : task.to.home;
        for (std::size_t d = 0; d < D_; ++d) {
          const bytes b = d == one ? gathered : share;
          hops_.push_back({port_res(d), ndp.transfer_seconds(b), b, std::nullopt});
          mem_hops_.push_back({dimm_res(d), mem(b), b, std::nullopt});
        }
        payload = gathered;
        to = tier_of(task.to);
        priority = 1;
        why = cost_kind::migration;
        break;
      }
      case migration_kind::rebalance:
        hops_.push_back({port_res(task.from.home), ndp.transfer_seconds(W_), W_, std::nullopt});
        hops_.push_back({port_res(task.to.home), ndp.transfer_seconds(W_), W_, std::nullopt});
        mem_hops_.push_back({dimm_res(task.from.home), mem(W_), W_, std::nullopt});
        mem_hops_.push_back({dimm_res(task.to.home), mem(W_), W_, std::nullopt});
        to = tier_of(task.to);
        priority = 1;
        why = cost_kind::migration;
        break;
    }
    r.pend_job[i] = r.tl.enqueue(r.layer_end, hops_, payload, why, priority, i);
    r.pend_parts[i] = static_cast<std::uint32_t>(1 + mem_hops_.size());
    r.pend_receipt[i] = transfer_receipt{};
    for (const hop& h : mem_hops_) {
      r.tl.enqueue(r.layer_end, std::span<const hop>(&h, 1), std::max<bytes>(h.moved, 1), why, priority,
                   i | memory_bit);
    }
    r.pend[i] = static_cast<std::uint8_t>(1 + static_cast<std::uint8_t>(task.kind));
    r.pend_tier[i] = to;
    r.pend_target[i] = target;
    r.pend_est[i] = task.transfer_seconds;
    r.pend_payload[i] = payload;
    r.pend_must[i] = payload;
    r.stats.job_bytes[static_cast<std::size_t>(task.kind)] += payload;
  }

  const batched_steps* steps_;
  trimoe_replay_config config_;
  model_shape shape_;
  std::size_t L_, E_, B_;
  system_type full_;
  std::size_t D_;
  forward_pass_cost<Gpu> pass_;
  bytes W_ = 0;
  bottleneck_refinement_scheduler greedy_, refined_;
  local_search_scheduler improved_;
  exact_makespan_scheduler exact_;
  detail::dual_weights dual_;
  std::vector<double> bound_scratch_;
  ema_load_predictor ema_, last_;

  std::array<std::optional<row>, num_trimoe_systems> rows_{};
  std::vector<hop> hops_, mem_hops_;
  std::vector<seconds> dimm_busy_;
  makespan_problem busy_problem_{1};
  makespan_schedule gap_sched_, gap_exact_;
  std::vector<double> actual_;
  std::vector<hotness> truth_;
  std::vector<std::uint32_t> order_;
  std::vector<hotness> initial_classes_;
  std::array<std::vector<hotness>, num_trimoe_predictors> prev_{};
  std::vector<std::uint8_t> initial_gpu_;
  std::vector<std::uint16_t> cold_home_, all_home_;

  bytes hbm_capacity_ = 0, hbm_non_expert_ = 0, hbm_kv_ = 0, hbm_for_experts_ = 0;
  std::size_t gpu_copies_ = 0;
  bool hbm_fits_ = true;
  trimoe_solver_gaps gaps_;
  std::vector<seconds> layer_bound_;
  std::array<trimoe_prediction_score, num_trimoe_predictors> scores_{};
  std::array<double, num_trimoe_predictors> decisions_{};
  std::array<double, 3> class_experts_{}, class_tokens_{};
  std::size_t class_problems_ = 0;
  std::size_t next_ = 1;
};

/// Replays every step of `steps` on `devices` (see the header comment).
///
/// Throws: as `trimoe_replayer`.
template <DeviceCost Gpu, DeviceCost Cpu, DeviceCost Ndp>
requires DenseComputeCost<Gpu>
[[nodiscard]] trimoe_result replay_trimoe(const batched_steps& steps, const model_shape& shape,
                                          trimoe_devices<Gpu, Cpu, Ndp> devices,
                                          const trimoe_replay_config& config = {}) {
  trimoe_replayer<Gpu, Cpu, Ndp> r(steps, shape, std::move(devices), config);
  r.replay_all();
  return r.result();
}

/// Replays every step of `steps` on `machine`, priced as `config.compute` says.
///
/// Throws: as `make_trimoe_devices` and `trimoe_replayer`.
[[nodiscard]] inline trimoe_result replay_trimoe(const batched_steps& steps, const model_shape& shape,
                                                 const trimoe_machine& machine = {},
                                                 const trimoe_replay_config& config = {}) {
  return replay_trimoe(steps, shape, make_trimoe_devices(machine, shape, config.compute, config.profiles), config);
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
