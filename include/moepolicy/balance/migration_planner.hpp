// moepolicy/balance/migration_planner.hpp — TriMoE's prediction-driven migrations: hot
// expert prefetch, dynamic relayout (striped ↔ localized) and cold-expert rebalancing,
// ranked by predicted benefit and fitted into the overlap window of the current layer
// (TriMoE §4.3, "Expert Migration Decision").
//
// When a layer's experts finish, the runtime plans the background work for the next
// layer from its predicted loads and classes (predict/ema_load_predictor.hpp):
//   prefetch               a predicted-hot expert not in GPU HBM is copied there over PCIe;
//   relayout_to_striped    a predicted warm or hot expert localized on one DIMM is striped
//                          (the layout GPU and CPU reads prefer);
//   relayout_to_localized  a predicted-cold striped expert is localized on the DIMM with
//                          the least predicted cold NDP time (the layout NDP needs);
//   rebalance              a localized cold expert moves from the busiest DIMM to the most
//                          idle (balance/ndp_rebalance.hpp).
// (The two relayout rows are the default rule, `relayout_rule::class_change`; see below.)
// Every feasible task is ranked by predicted benefit and taken greedily until the tasks'
// estimated times fill the window (the time the current layer's attention and MLP run on
// the GPU, an input).
//
// Benefit, our definition (the paper ranks by "predicted benefit" without defining it):
// the predicted step is the layer's next step with loads = the predicted loads, priced by
// Eq. 1–4 (sched/gpu_cpu_ndp.hpp) and scheduled once by `local_search_scheduler`; a task's
// benefit is how much that step's makespan (Eq. 7) falls when the task alone is applied
// and its expert takes its best option under its new layout or residency, every other
// expert keeping its option (O(1) per task, sched/problem.hpp's incremental totals). So a
// cold expert that is cheaper on the CPU alone still gains from moving to a parallel
// DIMM when the CPU is the bottleneck, and contention (Eq. 6) is counted. Tasks that
// leave the makespan equal are ranked by how much they lower Σ_dev T_dev² (the balance
// measure of sched/local_search.hpp, `balance_gain`); a task that improves neither is
// not proposed.
//   - Predicted load x is fractional: each price is interpolated between its integer
//     neighbours with f(0) = 0 (x = 0.3 costs 0.3 · f(1), as if active with probability
//     0.3), and the DIMM read T_DRAM is scaled by min(1, x). Experts predicted at 0 are not
//     in the predicted step and get no task.
//   - Rebalancing (balance/ndp_rebalance.hpp) weighs each cold localized expert by its
//     predicted NDP seconds; each move's benefit is evaluated alone against the predicted
//     step (the moves form a chain: move k is taken only after move k − 1, its rank key
//     is the smallest benefit of the chain so far, and a move without benefit ends the
//     chain).
//   - A relayout to localized targets the DIMM with the least predicted cold NDP time
//     after the rebalance moves (each relayout adds its expert there for the next).
//   - Transfer time: prefetch `gpu.transfer_seconds(W)` (PCIe); rebalance
//     `dimm.transfer_seconds(W)` (DIMM-Link, 25 GB/s in presets::dimm_ndp); relayout, by
//     `relayout_estimate`: the whole expert over one link (`whole_expert`, the default,
//     conservative), or what the busiest DIMM-Link port carries when every DIMM's port moves
//     its share at once (`busiest_port`: striping from one DIMM sends (D−1)/D of the expert
//     from its port, localizing gathers as much into the home's port; TriMoE §5.5 credits
//     "the DIMM-Link's host-free, parallel inter-dimm transfer capability").
// Ranking and budget: benefit descending, then balance gain descending, then transfer time
// ascending, then kind (prefetch, relayout_to_striped, relayout_to_localized, rebalance),
// chain position and expert. A task that does not fit in what remains of the window is
// skipped and smaller ones are still tried (`stop_at_first_misfit` stops instead, the
// literal reading of "until their cumulative estimated time fills this window budget").
// PCIe and DIMM-Link share one budget, as the paper states; `separate_links` gives each
// link the whole window. Prefetches also need `gpu_free_bytes` of HBM between them.
//
// When to relayout (`migration_planner_config::relayout_when`). The paper: "Dynamic
// Relayout: If an expert's layout mismatches its optimal execution unit, the Relayout Unit
// uses the DIMM-Link to convert its data layout between localized and striped", motivated
// by a "Layout Preference Conflict [that] arises as an expert's identity can change. For
// instance, a cold expert may become warm, creating a mismatch with the CPU's preference
// for a striped layout." Two readings:
//   class_change  (default) the layout follows the predicted class: relayout_to_striped
//                 only for a predicted warm or hot expert that is localized,
//                 relayout_to_localized only for a predicted-cold one that is striped;
//   benefit       the layout follows the predicted step's best unit, whatever the class:
//                 every localized expert with predicted load > 0 is a relayout_to_striped
//                 candidate, and every striped expert not predicted hot a
//                 relayout_to_localized candidate (predicted-hot experts are the prefetch
//                 candidates and keep the striped host copy their PCIe fetch reads).
// Under both, a candidate is proposed only when it shows a benefit (the same test as
// above), and ranking, window and the rest are unchanged; an expert gets at most one
// relayout candidate either way.
// Why the second exists: on the Mixtral-8x7B decode trace (B = 64, 8 experts, 16 DIMMs,
// sim/trimoe_replay.hpp on the timed model with the window read as the layer's MoE span; the
// trimoe driver prints it beside the default reading) the class-change rule leaves
// predicted-cold experts localized although an activated one still carries a few tokens,
// and a single-DIMM read of a 352 MB expert takes 18 ms, so a DIMM bounds most layers:
// +Relayout measures 543.7 ms per batched step (580.7, 589.2, 523.6, 481.4 over steps 1–4)
// against 252.2 for the En-KTransformers-like GPU+CPU system. Under the benefit rule the same
// replay measures 469.3 ms per step (580.7 at step 1, which both rules run on the same initial
// layout, then 424.9, 438.5, 433.2). On the bundled Granite trace (32 experts) the benefit
// rule is also ahead, by less: 7.256 ms per step against 7.318.
//
// Cost per plan (details at `plan`): O(E) cost-model calls (each expert's compute times at
// the two loads around its prediction, its size; link and read times once per size; for
// models whose prices do not depend on the expert, `key_independent_cost` such as the
// roofline, once per token count over the planner's life), one pass over the experts that
// also builds the predicted step's greedy schedule and lower bound, the local search only
// when that schedule misses the bound, O(1) per candidate task, O(T log T) to rank.
// Measured at DeepSeek-V3 shape (E = 256, bench/shapes_bench.cpp, `migration_planner`
// beside `migration_planner_reference`): see the README's cost table.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "moepolicy/balance/ndp_rebalance.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"
#include "moepolicy/sched/bottleneck_refinement.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/sched/lower_bound.hpp"
#include "moepolicy/sched/problem.hpp"
#include "moepolicy/stats/analysis.hpp"

namespace moepolicy {

/// The kinds of background migration (TriMoE §4.3).
enum class migration_kind : std::uint8_t { prefetch, relayout_to_striped, relayout_to_localized, rebalance };

/// "prefetch", "relayout_to_striped", "relayout_to_localized" or "rebalance".
[[nodiscard]] constexpr std::string_view to_string(migration_kind k) noexcept {
  switch (k) {
    case migration_kind::prefetch:
      return "prefetch";
    case migration_kind::relayout_to_striped:
      return "relayout_to_striped";
    case migration_kind::relayout_to_localized:
      return "relayout_to_localized";
    case migration_kind::rebalance:
      return "rebalance";
  }
  return "?";
}

/// One candidate migration.
struct migration_task {
  migration_kind kind = migration_kind::prefetch;
  /// Index of the expert in the layer.
  expert_id expert = 0;
  /// Layout before and after (equal for a prefetch).
  expert_layout from{};
  expert_layout to{};
  /// Bytes moved.
  bytes size = 0;
  /// Estimated time on its link.
  seconds transfer_seconds = 0.0;
  /// Predicted fall of the next step's makespan, seconds (see the header).
  seconds benefit = 0.0;
  /// Predicted fall of Σ_dev T_dev² of the next step, seconds² (the tie-break).
  double balance_gain = 0.0;
  /// Position in the rebalance sequence, from 1; 0 for other kinds.
  std::uint32_t chain = 0;
  /// Whether the planner took it within the window.
  bool taken = false;
};

/// Which experts get a relayout candidate (see the header comment); every candidate must
/// still show a predicted benefit.
enum class relayout_rule : std::uint8_t {
  class_change,  ///< by predicted class: warm/hot localized -> striped, cold striped -> localized
  benefit,       ///< any localized expert with load > 0 -> striped, any striped not-hot -> localized
};

/// "class_change" or "benefit".
[[nodiscard]] constexpr std::string_view to_string(relayout_rule r) noexcept {
  switch (r) {
    case relayout_rule::class_change:
      return "class_change";
    case relayout_rule::benefit:
      return "benefit";
  }
  return "?";
}

/// How the planner estimates a relayout's time on DIMM-Link (see the header).
enum class relayout_estimate : std::uint8_t {
  whole_expert,  ///< W over one link
  busiest_port,  ///< (D − 1) · ⌈W / D⌉ over one port, the others moving their shares at once
};

/// Configuration of `migration_planner`.
struct migration_planner_config {
  /// The precision the experts' weights are stored at.
  bitwidth bits = fp16;
  bool prefetch = true;
  bool relayout = true;
  bool rebalance = true;
  /// Which experts get a relayout candidate: the paper's literal reading by default.
  relayout_rule relayout_when = relayout_rule::class_change;
  /// The rebalancer's thresholds.
  ndp_rebalance_config rebalancing{};
  /// Whether PCIe and DIMM-Link each get the whole window (else one shared budget).
  bool separate_links = false;
  /// Whether the first task that does not fit ends the plan (else smaller ones are tried).
  bool stop_at_first_misfit = false;
  /// How a relayout's DIMM-Link time is estimated.
  relayout_estimate relayout_time = relayout_estimate::whole_expert;
  /// The scheduler of the predicted step.
  local_search_config scheduling{.exact_max_experts = 0};
};

/// Plans one layer's background migrations on a GPU + CPU + DIMM-NDP system.
template <DeviceCost Gpu, DeviceCost Cpu, DeviceCost Dimm>
class migration_planner {
 public:
  using system_type = gpu_cpu_ndp_system<Gpu, Cpu, Dimm>;

  /// Throws: `invalid_argument` when `num_experts` is not in [1, 65536], or the
  /// rebalancing or scheduling configuration is invalid (see `ndp_rebalancer`,
  /// `local_search_scheduler`).
  migration_planner(system_type system, std::size_t num_experts, migration_planner_config config = {})
      : system_(std::move(system)),
        config_(config),
        rebalancer_(system_.num_dimms(), num_experts, config.rebalancing),
        scheduler_(config.scheduling),
        problem_(system_.num_dimms(), num_experts),
        schedule_(num_experts, system_.num_dimms()),
        experts_(num_experts) {
    // At most a prefetch and a relayout per expert, plus the rebalance moves.
    const std::size_t most = 2 * num_experts + config.rebalancing.max_moves;
    tasks_.reserve(most);
    ranked_.reserve(most);
    order_.reserve(most);
    keys_.reserve(most);
    ndp_weight_.assign(num_experts, 0.0);
    index_.assign(num_experts, none);
    candidates_.assign(num_experts, 0);
    // Whether an expert of the predicted step has a candidate depends on its class, its
    // layout's kind and its residency only (x > 0; the home does not matter).
    for (std::size_t c = 0; c < 4; ++c) {
      for (std::size_t loc = 0; loc < 2; ++loc) {
        for (std::size_t res = 0; res < 2; ++res) {
          const expert_layout here = loc != 0 ? expert_layout::localized(0) : expert_layout::striped();
          const unsigned kinds = candidate_kinds(1.0, static_cast<hotness>(c), here, res != 0,
                                                 config_.relayout_when == relayout_rule::class_change);
          has_candidate_[candidate_cell(static_cast<hotness>(c), loc != 0, res != 0)] = kinds != 0 ? 1 : 0;
        }
      }
    }
    prices_.assign(num_experts, {});
    projected_.reserve(system_.num_dimms());
    scheduler_.reserve(num_experts, system_.num_dimms());
    schedule_.dimm_seconds.reserve(system_.num_dimms());
    greedy_loads_.reset(system_.num_dimms());
    bound_scratch_.assign(2 * system_.num_dimms(), 0.0);
    if constexpr (key_independent_cost<Gpu>) memo_gpu_.assign(memo_tokens, unpriced);
    if constexpr (key_independent_cost<Cpu>) memo_cpu_.assign(memo_tokens, unpriced);
    if constexpr (key_independent_cost<Dimm>) {
      memo_ndp_.assign(memo_tokens, unpriced);
      size_ = system_.weight_bytes(key(0), config_.bits);
    }
  }

  [[nodiscard]] const system_type& system() const noexcept { return system_; }
  [[nodiscard]] const migration_planner_config& config() const noexcept { return config_; }
  /// The predicted step of the last plan and its schedule.
  [[nodiscard]] const makespan_problem& predicted_step() const noexcept { return problem_; }
  [[nodiscard]] const makespan_schedule& predicted_schedule() const noexcept { return schedule_; }

  /// Plans `layer`'s migrations.
  ///
  /// `predicted` and `classes`: the predictor's loads and classes for the layer's next
  /// step; `layouts` and `resident`: where its experts are now; `window`: the overlap
  /// window in seconds; `gpu_free_bytes`: HBM free for prefetched experts.
  /// Throws: `invalid_argument` when a span has not one entry per expert, a predicted load
  /// is negative, not finite or >= 4·10⁹, a localized home is >= D, or the window is
  /// negative or not finite.
  /// Returns: every proposed task, in rank order, with `taken` set on those planned
  /// (valid until the next call).
  /// Complexity: O(E) cost-model calls — per expert of the predicted step f_calc_gpu,
  /// f_calc_cpu and the NDP price at ⌊x⌋ and ⌊x⌋ + 1 (one of each for an integer x, none
  /// at ⌊x⌋ = 0) and W, and T_PCIe, T_DRAM and the DIMM-Link times once per distinct W;
  /// for a `key_independent_cost` model each compute price is taken once per token count
  /// below 1024 over the planner's life and W once. Every row, of the step and of each of
  /// the T ≤ 2E + moves candidate tasks, follows by O(1) arithmetic (the values the
  /// system's calls give), and each task is valued in O(1) against the step's totals. The
  /// pass that writes the step's rows also takes each row's greedy option, that
  /// assignment's totals and the step's lower bound (sched/lower_bound.hpp; the lean pass
  /// takes only its per-DIMM part B3, and a second O(E) pass over the rows takes the rest
  /// only when B3 does not prove the greedy schedule optimal); when the greedy schedule
  /// meets the bound, it is the local search's result (the search returns its greedy
  /// start unchanged then) and the search is not run; otherwise one local search of the
  /// predicted step (sched/local_search.hpp). Plus the rebalancing
  /// (O(E + moves · (D + m)), balance/ndp_rebalance.hpp) and O(T log T) to rank; no
  /// allocation after the first call. The first implementation
  /// (balance/detail/migration_planner_reference.hpp) called the cost models about three
  /// times as often per expert and again for every task, and ran the search on every
  /// plan; the plans are the same bit for bit (tests/balance/ndp/migration_planner.cpp).
  /// With key-independent models, no activation transfers and prices within `tame_limit`
  /// the pass is `price_lean`: the same values with no row checks and no branches on the
  /// data.
  std::span<const migration_task> plan(layer_id layer, std::span<const double> predicted,
                                       std::span<const hotness> classes, std::span<const expert_layout> layouts,
                                       std::span<const std::uint8_t> resident, seconds window, bytes gpu_free_bytes) {
    constexpr std::string_view fn = "migration_planner::plan";
    const auto need = [&](const char* what, std::size_t got) {
      if (got != experts_) {
        detail::throw_invalid(
            fn, std::string(what) + " must have one entry per expert (" + std::to_string(experts_) + ")", got);
      }
    };
    need("predicted", predicted.size());
    need("classes", classes.size());
    need("layouts", layouts.size());
    need("resident", resident.size());
    if (!(window >= 0.0) || !std::isfinite(window)) detail::throw_invalid(fn, "window must be finite and >= 0", window);
    // One pass without data-dependent branches finds whether any entry is bad; a second
    // names the first.
    // The loads' pass also takes the largest valid load (⌊max x⌋ = max ⌊x⌋) for
    // `fill_memos`; each pass reads one array, so that both vectorise.
    unsigned bad = 0;
    double largest = 0.0;
    for (std::size_t e = 0; e < experts_; ++e) {
      const double x = predicted[e];
      const bool ok = x >= 0.0 && x < 4.0e9;
      bad |= static_cast<unsigned>(!ok);
      largest = std::max(largest, ok ? x : 0.0);
    }
    const std::size_t homes = expert_layout::striped_home - system_.num_dimms();  // localized homes >= D
    for (std::size_t e = 0; e < experts_; ++e) {
      bad |= static_cast<unsigned>(static_cast<std::size_t>(layouts[e].home) - system_.num_dimms() < homes);
    }
    const auto top = static_cast<std::uint32_t>(largest);  // 0 <= largest < 4e9
    for (std::size_t e = 0; bad != 0 && e < experts_; ++e) {
      if (!(predicted[e] >= 0.0) || !(predicted[e] < 4.0e9)) {
        detail::throw_invalid(fn, "predicted loads must be finite, >= 0 and < 4e9", predicted[e]);
      }
      if (layouts[e].is_localized() && layouts[e].home >= system_.num_dimms()) {
        detail::throw_invalid(fn, "a localized home must be < the DIMMs " + std::to_string(system_.num_dimms()),
                              layouts[e].home);
      }
    }
    layer_ = layer;
    tasks_.clear();
    const std::size_t D = system_.num_dimms();

    // One pass prices every expert: its NDP seconds (its NDP price in every row below and
    // its weight in rebalancing), the GPU and CPU compute times at the two loads around
    // its predicted load, and its weights' size; the row of the predicted step follows
    // from them by max and interpolation. The same pass starts the local search's work
    // on the step: each row's greedy option (the search's first start), that
    // assignment's totals and the step's lower bound, added row by row in the order a
    // rebuild and `makespan_lower_bound` add them (the same values bit for bit). The
    // lean pass takes only the bound's part B3 (`per_dimm`); the others are taken from
    // the rows when B3 alone does not prove the greedy schedule optimal (see below).
    greedy_loads_.reset(D);
    detail::lower_bound_accumulator bound(D, bound_scratch_);
    const bool use_cpu = system_.config().use_cpu;
    // With key-independent models the memos are first filled up to the plan's largest
    // ⌊x⌋ + 1, so that the pass reads every price from them without a call or a branch.
    const bool direct = fill_memos(top);
    unsigned bad_row = 0;
    lean_ = lean_applies(direct);
    std::size_t gathered = 0;
    seconds per_dimm = 0.0;  // the lean pass's bound B3
    if (lean_) {
      const auto lean = [&]<bool U, bool N>() {
        return price_lean<U, N>(predicted, classes, layouts, resident, per_dimm);
      };
      const bool u = use_cpu, d = system_.config().use_ndp;
      gathered = u ? (d ? lean.template operator()<true, true>() : lean.template operator()<true, false>())
                   : (d ? lean.template operator()<false, true>() : lean.template operator()<false, false>());
    } else {
      problem_.clear();
      schedule_.assignment.clear();
      for (std::size_t e = 0; e < experts_; ++e) {
        const double x = predicted[e];
        index_[e] = none;
        if (!(x > 0.0)) {
          ndp_weight_[e] = 0.0;
          continue;
        }
        const expert_key k = key(e);
        expert_prices& q = prices_[e];
        // ⌊x⌋ by truncation, exact for 0 < x < 4·10⁹ < 2³² (checked above), without a call
        // to the C library's floor.
        const auto l = static_cast<std::uint32_t>(x);
        q.lo = static_cast<double>(l);
        q.whole = x == q.lo;
        // The prices at ⌊x⌋ (0 at ⌊x⌋ = 0) and ⌊x⌋ + 1 (0, unused, at x = ⌊x⌋).
        seconds ndp0 = 0.0, ndp1 = 0.0;
        if (direct) {  // the memos hold 0 at 0 tokens
          ndp0 = memo_ndp_[l];
          ndp1 = q.whole ? 0.0 : memo_ndp_[l + 1];
          q.gpu[0] = memo_gpu_[l];
          q.gpu[1] = q.whole ? 0.0 : memo_gpu_[l + 1];
          q.cpu[0] = memo_cpu_[l];
          q.cpu[1] = q.whole ? 0.0 : memo_cpu_[l + 1];
        } else {
          std::tie(ndp0, ndp1) = at_both(l, q.whole, [&](std::uint32_t t) { return ndp_at(k, t); });
          std::tie(q.gpu[0], q.gpu[1]) = at_both(l, q.whole, [&](std::uint32_t t) { return gpu_at(k, t); });
          if (use_cpu) {
            std::tie(q.cpu[0], q.cpu[1]) = at_both(l, q.whole, [&](std::uint32_t t) { return cpu_at(k, t); });
          }
        }
        ndp_weight_[e] = q.whole ? ndp0 : ndp0 + (x - q.lo) * (ndp1 - ndp0);  // `priced`
        q.size = weight_bytes(k);
        index_[e] = problem_.size();
        expert_costs& c = problem_.add_unchecked();
        fill_row(c, k, x, q, size_priced(e, q.size), layouts[e], resident[e] != 0, ndp_weight_[e]);
        // What `makespan_problem::add` accepts, checked without branches (a row failing it
        // goes through `add` below for its error).
        const auto no = [](bool ok) { return static_cast<unsigned>(!ok); };
        bad_row |= no(c.exec[0] >= 0.0) | no(c.exec[0] < not_allowed) | no(c.exec[1] >= 0.0) | no(c.exec[2] >= 0.0) |
                   no(c.dram >= 0.0) | no(c.dram < not_allowed);
        const device_option o = bottleneck_refinement_scheduler::greedy_option(c);
        schedule_.assignment.push_back(o);
        greedy_loads_.apply(c, o, 1.0);
        bound.add(c);
      }
    }
    if (bad_row != 0) recheck_rows();
    greedy_loads_.refresh();
    // The local search returns its greedy start unchanged, as optimal, when it meets the
    // lower bound (sched/local_search.hpp, step 4); it runs only otherwise. After the
    // lean pass, B3 is tried first: the bound is the largest of its parts and
    // `less_than(b, m)` can only turn false as b grows, so B3 meeting the greedy makespan
    // proves what the whole bound would; else the whole bound is taken from the rows (the
    // same value bit for bit as the accumulator's, in the same order).
    const seconds greedy_m = greedy_loads_.makespan();
    const double tol = config_.scheduling.tolerance;
    const bool proven =
        lean_ ? !detail::less_than(per_dimm, greedy_m, tol) ||
                    !detail::less_than(makespan_lower_bound(problem_, bound_scratch_).value, greedy_m, tol)
              : !detail::less_than(bound.result().value, greedy_m, tol);
    if (proven) {
      schedule_.status = solve_status::optimal;
      schedule_.iterations = 0;
      detail::write_totals(greedy_loads_, schedule_);
      loads_ = &greedy_loads_;
    } else {
      scheduler_.solve(problem_, schedule_);
      loads_ = &scheduler_.loads();  // the totals of its schedule (a rebuild from its assignment)
    }
    base_m_ = loads_->makespan();
    base_q_ = loads_->square_sum_after({});

    // Rebalancing on today's layout, in predicted NDP seconds.
    if (config_.rebalance) {
      std::uint32_t chain = 0;
      for (const auto& m : rebalancer_.plan(ndp_weight_, classes, layouts)) {
        migration_task t;
        t.kind = migration_kind::rebalance;
        t.expert = m.expert;
        t.from = expert_layout::localized(m.from);
        t.to = expert_layout::localized(m.to);
        if (!evaluate(t, predicted[m.expert], resident[m.expert] != 0, t.to)) break;  // no benefit ends the chain
        t.size = size_of(m.expert);
        t.transfer_seconds = size_priced(m.expert, t.size).move;  // dimm().transfer_seconds(W)
        t.chain = ++chain;
        tasks_.push_back(t);
      }
    }
    if (config_.rebalance) {
      const auto after = rebalancer_.dimm_loads();
      projected_.assign(after.begin(), after.end());
    } else {
      projected_.assign(D, 0.0);
      for (std::size_t e = 0; e < experts_; ++e) {
        if (classes[e] == hotness::cold && layouts[e].is_localized()) projected_[layouts[e].home] += ndp_weight_[e];
      }
    }

    // The experts with a candidate, gathered in index order without branches on the data
    // (a candidate of an expert outside the predicted step has no benefit), then valued.
    const bool by_class = config_.relayout_when == relayout_rule::class_change;
    std::size_t m = gathered;
    for (std::size_t e = 0; e < experts_ && !lean_; ++e) {
      candidates_[m] = static_cast<std::uint32_t>(e);
      m += static_cast<std::size_t>(index_[e] != none) &
           static_cast<std::size_t>(candidate_kinds(predicted[e], classes[e], layouts[e], resident[e] != 0, by_class) !=
                                    0);
    }
    for (std::size_t j = 0; j < m; ++j) {
      const std::size_t e = candidates_[j];
      const double x = predicted[e];
      const expert_layout here = layouts[e];
      const bool res = resident[e] != 0;
      const unsigned kinds = candidate_kinds(x, classes[e], here, res, by_class);
      const bool to_striped = (kinds & 2u) != 0, to_localized = (kinds & 4u) != 0;
      migration_task t;
      t.expert = static_cast<expert_id>(e);
      t.from = t.to = here;
      t.size = size_of(e);
      const size_prices& w = size_priced(e, t.size);
      if ((kinds & 1u) != 0) {
        t.kind = migration_kind::prefetch;
        t.transfer_seconds = w.pcie;  // gpu().transfer_seconds(W)
        if (evaluate(t, x, true, here)) tasks_.push_back(t);
      }
      if (!config_.relayout) continue;
      t.transfer_seconds = w.relayout;
      if (to_striped) {
        t.kind = migration_kind::relayout_to_striped;
        t.to = expert_layout::striped();
        if (evaluate(t, x, res, t.to)) tasks_.push_back(t);
      } else if (to_localized) {
        std::size_t target = 0;
        for (std::size_t d = 1; d < D; ++d) {
          if (projected_[d] < projected_[target]) target = d;
        }
        t.kind = migration_kind::relayout_to_localized;
        t.to = expert_layout::localized(static_cast<std::uint16_t>(target));
        if (evaluate(t, x, res, t.to)) {
          tasks_.push_back(t);
          projected_[target] += ndp_weight_[e];
        }
      }
    }

    rank();
    take(window, gpu_free_bytes);
    return ranked_;
  }

 private:
  static constexpr std::size_t none = static_cast<std::size_t>(-1);

  /// What an expert of the predicted step costs at the integer loads ⌊x⌋ and ⌊x⌋ + 1
  /// around its predicted load x (index 0 unset when ⌊x⌋ = 0, index 1 when x = ⌊x⌋).
  struct expert_prices {
    double lo = 0.0;  // ⌊x⌋
    bool whole = false;
    std::array<seconds, 2> gpu{};  // f_calc_gpu
    std::array<seconds, 2> cpu{};  // T_CPU before its DIMM read: f_calc_cpu (+ activations when configured)
    bytes size = 0;                // W
  };
  /// The link and read times of an expert of W bytes: they depend only on W (the
  /// models' calls are deterministic), so they are priced once per distinct W.
  struct size_prices {
    bytes size = 0;
    bool valid = false;
    seconds pcie = 0.0;       // T_PCIe(W)
    seconds localized = 0.0;  // T_DRAM(W, localized)
    seconds striped = 0.0;    // T_DRAM(W, striped)
    seconds relayout = 0.0;   // a relayout on DIMM-Link (`relayout_port_bytes`)
    seconds move = 0.0;       // a rebalance move on DIMM-Link
  };

  [[nodiscard]] expert_key key(std::size_t e) const noexcept { return {layer_, static_cast<expert_id>(e)}; }

  /// A price of a key-independent model at `t` tokens from `memo` (taken on first use),
  /// or the model's call.
  template <class Model, class F>
  [[nodiscard]] static seconds memoised(std::vector<seconds>& memo, std::uint32_t t, F&& f) {
    if constexpr (key_independent_cost<Model>) {
      if (t < memo.size()) {
        seconds& v = memo[t];
        if (!(v >= 0.0)) v = f();  // unpriced (a model breaking its contract is called again)
        return v;
      }
    }
    return f();
  }
  /// Whether every model is `key_independent_cost` and the memos now hold every price at
  /// 0 … `top` + 1 tokens (`top`: the plan's largest ⌊predicted⌋) (0 at 0 tokens, the models' calls elsewhere).
  bool fill_memos(std::uint32_t top) {
    if constexpr (key_independent_cost<Gpu> && key_independent_cost<Cpu> && key_independent_cost<Dimm>) {
      if (static_cast<std::size_t>(top) + 1 >= memo_tokens) return false;
      for (std::uint32_t t = filled_; t <= top + 1; ++t) {
        const expert_key k = key(0);
        memo_gpu_[t] = t == 0 ? 0.0 : system_.gpu().compute_seconds(k, config_.bits, t);
        memo_cpu_[t] = t == 0 ? 0.0 : cpu_compute(k, t);
        memo_ndp_[t] = t == 0 ? 0.0 : system_.ndp_seconds(k, config_.bits, t);
        memos_tame_ = memos_tame_ && tame(memo_gpu_[t]) && tame(memo_cpu_[t]) && tame(memo_ndp_[t]);
      }
      filled_ = std::max(filled_, top + 2);
      return true;
    } else {
      static_cast<void>(top);
      return false;
    }
  }

  /// Whether the lean pricing pass applies: key-independent models whose memos hold every
  /// price the plan needs (`fill_memos`), a CPU without activation transfers, and memo and
  /// link prices all finite, >= 0 and at most `tame_limit`. Then every row the pass builds
  /// is one `makespan_problem::add` accepts (an interpolation between two such prices
  /// lies between them, give or take a rounding that keeps it >= 0, and cannot overflow),
  /// so no row needs checking.
  [[nodiscard]] bool lean_applies(bool direct) const {
    if (!direct || system_.config().activation_transfer || !memos_tame_) return false;
    const size_prices& w = size_priced(0, size_);
    return tame(w.pcie) && tame(w.localized) && tame(w.striped);
  }
  [[nodiscard]] static bool tame(seconds v) noexcept { return v >= 0.0 && v <= tame_limit; }

  /// The pricing pass of `plan` when `lean_applies`: the same rows, prices, greedy
  /// options, totals and candidates as the general pass and the candidate gathering, and
  /// the lower bound's part B3 (`makespan_bound::per_dimm`, written to `per_dimm`), bit
  /// for bit, from the memos and the link and read times of the one weight
  /// size, with no row check and no call, its choices by layout, residency and greedy
  /// option written as selections (products by 0 or 1 measured slower); the options the
  /// system allows are template arguments. Each expert's `expert_prices` are not stored: `prices_of` takes them
  /// from the memos when asked. Returns the number of experts with a candidate, written
  /// to the front of `candidates_`.
  template <bool UseCpu, bool UseNdp>
  std::size_t price_lean(std::span<const double> predicted, std::span<const hotness> classes,
                         std::span<const expert_layout> layouts, std::span<const std::uint8_t> resident,
                         seconds& per_dimm) {
    const size_prices& w = size_priced(0, size_);
    const seconds dram_s = w.striped, dram_l = w.localized;
    // A miss reads max(T_PCIe, T_DRAM) (Eq. 2), by layout.
    const seconds read_s = std::max(w.pcie, dram_s), read_l = std::max(w.pcie, dram_l);
    const seconds* mg = memo_gpu_.data();
    const seconds* mc = memo_cpu_.data();
    const seconds* mn = memo_ndp_.data();
    seconds gpu = 0.0, cpu = 0.0, stripe = 0.0;
    seconds* local = greedy_loads_.local.data();
    const std::size_t D = system_.num_dimms();
    seconds b3_striped = 0.0;
    seconds* b3 = bound_scratch_.data();  // D sums of localized experts' terms
    std::fill_n(b3, D, 0.0);
    // The last plan's rows and options are overwritten, not cleared first (every field of
    // a row is written below); both are cut to the step's size at the end, within their
    // reserves.
    schedule_.assignment.resize(experts_);
    device_option* assigned = schedule_.assignment.data();
    const std::span<expert_costs> rows = problem_.resize_unchecked(experts_);
    std::size_t n = 0, m = 0;
    for (std::size_t e = 0; e < experts_; ++e) {
      const double x = predicted[e];
      if (!(x > 0.0)) {
        index_[e] = none;
        ndp_weight_[e] = 0.0;
        continue;
      }
      // ⌊x⌋ by truncation (0 < x < 4·10⁹, checked), and the prices at ⌊x⌋ and ⌊x⌋ + 1 (the
      // memos hold 0 at 0 tokens and every price up to the plan's largest ⌊x⌋ + 1; the
      // one at ⌊x⌋ + 1 is read and discarded when x = ⌊x⌋).
      const auto l = static_cast<std::uint32_t>(x);
      const double lo = static_cast<double>(l);
      const bool whole = x == lo, at0 = l == 0;
      const double frac = x - lo;
      const seconds n0 = mn[l];
      const seconds nw = whole ? n0 : n0 + frac * (mn[l + 1] - n0);  // `priced`
      ndp_weight_[e] = nw;
      index_[e] = n;
      const expert_layout layout = layouts[e];
      const bool loc = layout.is_localized(), res = resident[e] != 0;
      // `fill_row`: the interpolations of `gpu_price`, `cpu_price`, and the NDP price.
      const seconds dram = loc ? dram_l : dram_s;
      const seconds read = res ? 0.0 : (loc ? read_l : read_s);
      const seconds g_lo = at0 ? 0.0 : std::max(mg[l], read);
      const seconds g = whole ? g_lo : g_lo + frac * (std::max(mg[l + 1], read) - g_lo);
      seconds u = not_allowed;
      if constexpr (UseCpu) {
        const seconds c_lo = at0 ? 0.0 : std::max(mc[l], dram);
        u = whole ? c_lo : c_lo + frac * (std::max(mc[l + 1], dram) - c_lo);
      }
      const seconds d = (UseNdp && loc) ? nw : not_allowed;
      const seconds r = std::min(1.0, x) * dram;
      expert_costs& c = rows[n];
      c.key = key(e);
      c.load = l + static_cast<std::uint32_t>(!whole);  // ⌈x⌉
      c.layout = layout;
      c.gpu_resident = res;
      c.dram = r;
      c.exec = {g, u, d};
      // The greedy option (`greedy_option`: the first cheapest; g is finite).
      const bool to_u = UseCpu && u < g;
      const seconds best = to_u ? u : g;
      const bool to_d = UseNdp && d < best;
      assigned[n++] = to_d ? device_option::ndp : to_u ? device_option::cpu : device_option::gpu;
      // The greedy totals (`device_loads::apply`): a total the option leaves alone gets
      // + 0.0, which leaves a sum >= 0 as it is; a striped expert's goes to DIMM 0 so.
      const seconds gpu_dimm = res ? 0.0 : r;  // `dimm_seconds`
      const seconds on_dimm = to_d ? d : to_u ? r : gpu_dimm;
      gpu += (to_d || to_u) ? 0.0 : g;
      if constexpr (UseCpu) cpu += (to_u && !to_d) ? u : 0.0;
      stripe += loc ? 0.0 : on_dimm;
      local[loc ? layout.home : 0] += loc ? on_dimm : 0.0;
      // B3's term (`terms_of`'s `dimm`: the least any allowed option adds to the
      // expert's DIMMs; d is infinite when NDP is not allowed), added as
      // `lower_bound_accumulator` adds it: to the striped sum or to the home's, the other
      // getting + 0.0 as above.
      seconds least = std::min(gpu_dimm, d);
      if constexpr (UseCpu) least = std::min(least, r);
      b3_striped += loc ? 0.0 : least;
      b3[loc ? layout.home : 0] += loc ? least : 0.0;
      // The candidate gathering of `plan`, for the experts of the step.
      candidates_[m] = static_cast<std::uint32_t>(e);
      m += has_candidate_[candidate_cell(classes[e], loc, res)];
    }
    schedule_.assignment.resize(n);
    problem_.truncate(n);
    greedy_loads_.gpu = gpu;
    greedy_loads_.cpu = cpu;
    greedy_loads_.stripe = stripe;
    // `lower_bound_accumulator::result`'s B3.
    per_dimm = 0.0;
    for (std::size_t h = 0; h < D; ++h) per_dimm = std::max(per_dimm, b3_striped + b3[h]);
    return m;
  }

  /// A model's prices at `l` and `l + 1` tokens, as `f` gives them, except 0 for the
  /// first when `l` = 0 and for the second when `whole` (no call for those).
  template <class F>
  [[nodiscard]] static std::pair<seconds, seconds> at_both(std::uint32_t l, bool whole, F&& f) {
    return {l == 0 ? 0.0 : f(l), whole ? 0.0 : f(l + 1)};
  }

  /// f_calc_gpu, f_calc_cpu (T_CPU before its DIMM read) and Eq. 4 at `t` tokens.
  [[nodiscard]] seconds gpu_at(expert_key k, std::uint32_t t) {
    return memoised<Gpu>(memo_gpu_, t, [&] { return system_.gpu().compute_seconds(k, config_.bits, t); });
  }
  [[nodiscard]] seconds cpu_at(expert_key k, std::uint32_t t) {
    return memoised<Cpu>(memo_cpu_, t, [&] { return cpu_compute(k, t); });
  }
  [[nodiscard]] seconds ndp_at(expert_key k, std::uint32_t t) {
    return memoised<Dimm>(memo_ndp_, t, [&] { return system_.ndp_seconds(k, config_.bits, t); });
  }
  /// W of expert key `k`.
  [[nodiscard]] bytes weight_bytes(expert_key k) const noexcept {
    if constexpr (key_independent_cost<Dimm>) return size_;
    return system_.weight_bytes(k, config_.bits);
  }

  /// Calls `makespan_problem::add` on every row of the predicted step, for its error when
  /// a cost model gave a price `add` refuses (allocates; only on that path).
  void recheck_rows() const {
    makespan_problem check(problem_.num_dimms(), problem_.size());
    for (const auto& r : problem_.experts()) check.add(r);
  }

  /// W of expert `e`: priced with the predicted step when it is in it.
  [[nodiscard]] bytes size_of(std::size_t e) const noexcept {
    if (lean_) return size_;
    return index_[e] != none ? prices_[e].size : weight_bytes(key(e));
  }

  /// The prices of expert `e` of the predicted step at its predicted load `x`: those the
  /// general pass stored, or after `price_lean` the same values from the memos.
  [[nodiscard]] expert_prices prices_of(std::size_t e, double x) const noexcept {
    if (!lean_) return prices_[e];
    expert_prices q;
    const auto l = static_cast<std::uint32_t>(x);
    q.lo = static_cast<double>(l);
    q.whole = x == q.lo;
    q.gpu = {memo_gpu_[l], q.whole ? 0.0 : memo_gpu_[l + 1]};
    q.cpu = {memo_cpu_[l], q.whole ? 0.0 : memo_cpu_[l + 1]};
    q.size = size_;
    return q;
  }

  /// The cell of `has_candidate_` of an expert of the predicted step (x > 0) of class `c`
  /// (a value other than cold and hot is taken as warm, as `candidate_kinds` takes it).
  [[nodiscard]] static std::size_t candidate_cell(hotness c, bool localized, bool res) noexcept {
    const auto v = static_cast<std::size_t>(std::min(static_cast<std::uint8_t>(c), std::uint8_t{3}));
    return 4 * v + 2 * static_cast<std::size_t>(localized) + static_cast<std::size_t>(res);
  }

  /// The candidate tasks of an expert at predicted load `x` (see the header): bit 0 a
  /// prefetch, bit 1 a relayout to striped, bit 2 a relayout to localized.
  [[nodiscard]] unsigned candidate_kinds(double x, hotness c, expert_layout here, bool res,
                                         bool by_class) const noexcept {
    const bool prefetch = config_.prefetch && c == hotness::hot && !res;
    const bool to_striped = config_.relayout && here.is_localized() && (by_class ? c != hotness::cold : x > 0.0);
    const bool to_localized =
        config_.relayout && !to_striped && here.is_striped() && (by_class ? c == hotness::cold : c != hotness::hot);
    return static_cast<unsigned>(prefetch) | (static_cast<unsigned>(to_striped) << 1) |
           (static_cast<unsigned>(to_localized) << 2);
  }

  /// Bytes the busiest DIMM-Link port carries in a relayout of `w` bytes.
  [[nodiscard]] bytes relayout_port_bytes(bytes w) const noexcept {
    if (config_.relayout_time == relayout_estimate::whole_expert) return w;
    const auto D = static_cast<bytes>(system_.num_dimms());
    return D <= 1 ? w : (D - 1) * ((w + D - 1) / D);
  }

  /// A price at predicted load x, interpolated between ⌊x⌋ and ⌊x⌋ + 1 with f(0) = 0, from
  /// prices at ⌊x⌋ and ⌊x⌋ + 1 already taken: `f(i)` for i = 0, 1.
  /// Both prices are taken and the result selected, without branches on the data (the
  /// same value as the branching form: f(0) and f(1) are pure).
  template <class F>
  [[nodiscard]] static seconds interpolated(double x, const expert_prices& q, F&& f) {
    const seconds f0 = f(0), f1 = f(1);
    const seconds c_lo = q.lo == 0.0 ? 0.0 : f0;
    const seconds mixed = c_lo + (x - q.lo) * (f1 - c_lo);
    return q.whole ? c_lo : mixed;
  }

  /// T_CPU's part before the DIMM read: `cpu_seconds` is max(f_calc_cpu, T_DRAM), plus the
  /// activations after the max when configured.
  [[nodiscard]] seconds cpu_compute(expert_key k, std::uint32_t n) const noexcept {
    return system_.cpu().compute_seconds(k, config_.bits, n);
  }
  [[nodiscard]] seconds cpu_price(double x, const expert_prices& q, seconds dram) const {
    if (!system_.config().activation_transfer) {
      return interpolated(x, q, [&](std::size_t i) { return std::max(q.cpu[i], dram); });
    }
    return interpolated(x, q, [&](std::size_t i) {
      const auto n = static_cast<std::uint32_t>(q.lo) + static_cast<std::uint32_t>(i);
      return std::max(q.cpu[i], dram) + system_.cpu().activation_transfer_seconds(n);
    });
  }

  /// T_PCIe, T_DRAM and the DIMM-Link times of an expert of `w` bytes (memoised by W).
  [[nodiscard]] const size_prices& size_priced(std::size_t e, bytes w) const {
    if (!sized_.valid || sized_.size != w) price_size(e, w);
    return sized_;
  }
  /// Fills `sized_` for W = `w` (expert `e` stands for every expert of that size).
  void price_size(std::size_t e, bytes w) const {
    const expert_key k = key(e);
    sized_.size = w;
    sized_.valid = true;
    sized_.pcie = system_.gpu().transfer_seconds(w);
    sized_.localized = system_.dram_seconds(k, config_.bits, expert_layout::localized(0));
    sized_.striped = system_.dram_seconds(k, config_.bits, expert_layout::striped());
    sized_.relayout = system_.dimm().transfer_seconds(relayout_port_bytes(w));
    sized_.move = system_.dimm().transfer_seconds(w);
  }

  /// The prices of expert `e` at predicted load `x` with `layout` and residency `res`, from
  /// its `prices_` (the same values as the system's calls: Eq. 1–4 interpolated).
  /// (Written into `c` in place: a row returned by value and copied costs more than the
  /// arithmetic.)
  void expected_row(expert_costs& c, std::size_t e, double x, expert_layout layout, bool res) const {
    const expert_prices q = prices_of(e, x);
    fill_row(c, key(e), x, q, size_priced(e, q.size), layout, res, ndp_weight_[e]);
  }
  /// `expected_row` from the expert's prices `q`, its size's `w` and its NDP seconds `ndp`
  /// (small enough to be inlined in the pricing pass).
  void fill_row(expert_costs& c, expert_key k, double x, const expert_prices& q, const size_prices& w,
                expert_layout layout, bool res, seconds ndp) const {
    const seconds dram = layout.is_localized() ? w.localized : w.striped;
    c.key = k;
    c.load = static_cast<std::uint32_t>(q.lo) + static_cast<std::uint32_t>(!q.whole);  // ⌈x⌉
    c.layout = layout;
    c.gpu_resident = res;
    c.dram = std::min(1.0, x) * dram;
    c.exec[0] = gpu_price(x, q, res, w.pcie, dram);
    c.exec[1] = system_.config().use_cpu ? cpu_price(x, q, dram) : not_allowed;
    c.exec[2] = (system_.config().use_ndp && layout.is_localized()) ? ndp : not_allowed;
  }

  /// The GPU price at predicted load `x`: a hit (Eq. 1) when resident, else a miss
  /// (Eq. 2) reading the weights in `pcie` over PCIe and `dram` from the DIMMs.
  [[nodiscard]] static seconds gpu_price(double x, const expert_prices& q, bool res, seconds pcie, seconds dram) {
    // A hit reads nothing from the host: the miss's read terms drop out (Eq. 1 vs Eq. 2).
    const seconds read = res ? 0.0 : std::max(pcie, dram);
    return interpolated(x, q, [&](std::size_t i) { return std::max(q.gpu[i], read); });
  }

  /// After `price_lean`: expert `e`'s row at predicted load `x` with `layout` and residency
  /// `res`, by `price_lean`'s arithmetic (the same values as `expected_row`'s).
  void lean_row(expert_costs& c, std::size_t e, double x, expert_layout layout, bool res) const {
    const size_prices& w = sized_;  // priced for `size_`, the only W, by `lean_applies`
    const auto l = static_cast<std::uint32_t>(x);
    const double lo = static_cast<double>(l);
    const bool whole = x == lo, at0 = l == 0, loc = layout.is_localized();
    const double frac = x - lo;
    const seconds dram = loc ? w.localized : w.striped;
    const seconds read = res ? 0.0 : std::max(w.pcie, dram);
    const seconds g_lo = at0 ? 0.0 : std::max(memo_gpu_[l], read);
    c.exec[0] = whole ? g_lo : g_lo + frac * (std::max(memo_gpu_[l + 1], read) - g_lo);
    const seconds c_lo = at0 ? 0.0 : std::max(memo_cpu_[l], dram);
    c.exec[1] = !system_.config().use_cpu ? not_allowed
                : whole                   ? c_lo
                                          : c_lo + frac * (std::max(memo_cpu_[l + 1], dram) - c_lo);
    c.exec[2] = (system_.config().use_ndp && loc) ? ndp_weight_[e] : not_allowed;
    c.key = key(e);
    c.load = l + static_cast<std::uint32_t>(!whole);
    c.layout = layout;
    c.gpu_resident = res;
    c.dram = std::min(1.0, x) * dram;
  }

  /// `old`'s row with residency `res` and `layout`: the prices that depend on neither
  /// change are kept (the same calls give the same values), the others priced afresh.
  [[nodiscard]] expert_costs moved_row(const expert_costs& old, std::size_t e, double x, expert_layout layout,
                                       bool res) const {
    expert_costs c;
    if (lean_) {
      lean_row(c, e, x, layout, res);  // every price as `price_lean` takes it (the kept ones too)
      return c;
    }
    if (layout.home != old.layout.home) {
      expected_row(c, e, x, layout, res);
      return c;
    }
    c = old;
    if (res != old.gpu_resident) {
      const expert_prices q = prices_of(e, x);
      const size_prices& w = size_priced(e, q.size);
      c.gpu_resident = res;
      c.exec[0] = gpu_price(x, q, res, w.pcie, layout.is_localized() ? w.localized : w.striped);
    }
    return c;
  }
  /// Fills `t.benefit` and `t.balance_gain` for expert `t.expert` moving to `layout` with
  /// residency `res`; false when the task improves neither.
  ///
  /// Each option of the moved row is valued against the predicted schedule's totals as
  /// `device_loads::makespan_after` and `square_sum_after` value the delta "remove the old
  /// row under its option, add the moved row under this one", with the work every option
  /// shares done once: the old row's removal, the largest total of the DIMMs the move
  /// leaves alone, and the touched DIMMs' totals. The values are those of the deltas bit
  /// for bit: the sums are formed in the same order, and where a delta leaves out a
  /// change of 0 (a DIMM it does not touch) this adds 0.0, which changes neither a total
  /// >= 0 nor the maximum.
  bool evaluate(migration_task& t, double x, bool res, expert_layout layout) const {
    const std::size_t i = index_[t.expert];
    if (i == none) return false;
    const expert_costs& old = problem_[i];
    const expert_costs now = moved_row(old, t.expert, x, layout, res);
    const detail::device_loads& L = *loads_;
    constexpr std::size_t npos = detail::device_loads::npos;
    // The old row's removal.
    const device_option was = schedule_.assignment[i];
    const seconds out_g = was == device_option::gpu ? -old.exec[0] : 0.0;
    const seconds out_c = was == device_option::cpu ? -old.exec[1] : 0.0;
    const seconds out_d = -old.dimm_seconds(was);
    // The homes the move touches (npos for striped), and the largest total of the others
    // (`makespan_after`: one of the top three when there are three DIMMs or more, else 0).
    const std::size_t ho = old.layout.is_localized() ? old.layout.home : npos;
    const std::size_t hn = now.layout.is_localized() ? now.layout.home : npos;
    seconds rest = -1.0;
    for (const auto& top : L.top) {
      if (top.index == npos) break;
      if (top.index != ho && top.index != hn) {
        rest = top.value;
        break;
      }
    }
    rest = std::max(rest, 0.0);
    const seconds v_o = ho != npos ? L.local[ho] : 0.0, v_n = hn != npos ? L.local[hn] : 0.0;
    const double D = static_cast<double>(L.local.size());
    bool found = false;
    seconds best_m = 0.0;
    double best_q = 0.0;
    for (std::size_t k = 0; k < num_device_options; ++k) {
      const auto o = static_cast<device_option>(k);
      if (!now.allows(o)) continue;
      const seconds in_d = now.dimm_seconds(o);
      const seconds cg = o == device_option::gpu ? out_g + now.exec[0] : out_g;
      const seconds cc = o == device_option::cpu ? out_c + now.exec[1] : out_c;
      seconds cs = ho == npos ? out_d : 0.0;  // the stripe's change
      if (hn == npos) cs += in_d;
      seconds m_local = rest;
      double sl = L.sum_local, sq = L.sum_local_sq;
      if (ho != npos && ho == hn) {  // one home: the delta's one entry, -old + new
        const seconds c = out_d + in_d;
        m_local = std::max(m_local, v_o + c);
        sl += c;
        sq += (v_o + c) * (v_o + c) - v_o * v_o;
      } else {  // the old home's entry first, as the delta takes them
        if (ho != npos) {
          m_local = std::max(m_local, v_o + out_d);
          sl += out_d;
          sq += (v_o + out_d) * (v_o + out_d) - v_o * v_o;
        }
        if (hn != npos) {
          m_local = std::max(m_local, v_n + in_d);
          sl += in_d;
          sq += (v_n + in_d) * (v_n + in_d) - v_n * v_n;
        }
      }
      const seconds s = L.stripe + cs, g = L.gpu + cg, u = L.cpu + cc;
      const seconds m = std::max({g, u, s + m_local});
      const double q = g * g + u * u + D * s * s + 2.0 * s * sl + sq;
      if (!found || m < best_m || (m == best_m && q < best_q)) {
        found = true;
        best_m = m;
        best_q = q;
      }
    }
    t.benefit = base_m_ - best_m;
    t.balance_gain = base_q_ - best_q;
    const double tol = detail::default_tolerance * base_m_;
    if (t.benefit > tol) return true;
    if (t.benefit < -tol) return false;
    t.benefit = std::max(t.benefit, 0.0);
    return t.balance_gain > detail::default_tolerance * base_q_;
  }

  void rank() {
    // Chain keys: the running minimum of benefits along the rebalance sequence.
    keys_.resize(tasks_.size());
    seconds run = not_allowed;
    for (std::size_t i = 0; i < tasks_.size(); ++i) {
      if (tasks_[i].kind == migration_kind::rebalance) {
        run = std::min(run, tasks_[i].benefit);
        keys_[i] = run;
      } else {
        keys_[i] = tasks_[i].benefit;
      }
    }
    order_.resize(tasks_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) order_[i] = i;
    std::sort(order_.begin(), order_.end(), [&](std::size_t a, std::size_t b) {
      const auto& x = tasks_[a];
      const auto& y = tasks_[b];
      if (keys_[a] != keys_[b]) return keys_[a] > keys_[b];
      if (x.kind == migration_kind::rebalance && y.kind == migration_kind::rebalance) return x.chain < y.chain;
      if (x.balance_gain != y.balance_gain) return x.balance_gain > y.balance_gain;
      if (x.transfer_seconds != y.transfer_seconds) return x.transfer_seconds < y.transfer_seconds;
      if (x.kind != y.kind) return x.kind < y.kind;
      if (x.chain != y.chain) return x.chain < y.chain;
      return x.expert < y.expert;
    });
    ranked_.resize(tasks_.size());
    for (std::size_t i = 0; i < order_.size(); ++i) ranked_[i] = tasks_[order_[i]];
  }

  void take(seconds window, bytes gpu_free) {
    seconds pcie = 0.0, link = 0.0;
    bytes gpu_used = 0;
    std::uint32_t chain_done = 0;
    for (auto& t : ranked_) {
      const bool on_pcie = t.kind == migration_kind::prefetch;
      seconds& used = (config_.separate_links && on_pcie) ? pcie : link;
      const bool fits = used + t.transfer_seconds <= window && (!on_pcie || gpu_used + t.size <= gpu_free) &&
                        (t.kind != migration_kind::rebalance || t.chain == chain_done + 1);
      if (!fits) {
        if (config_.stop_at_first_misfit) break;
        continue;
      }
      t.taken = true;
      used += t.transfer_seconds;
      if (on_pcie) gpu_used += t.size;
      if (t.kind == migration_kind::rebalance) chain_done = t.chain;
    }
  }

  system_type system_;
  migration_planner_config config_;
  ndp_rebalancer rebalancer_;
  local_search_scheduler scheduler_;
  makespan_problem problem_;
  makespan_schedule schedule_;
  std::size_t experts_;
  layer_id layer_ = 0;
  seconds base_m_ = 0.0;
  double base_q_ = 0.0;
  std::vector<migration_task> tasks_, ranked_;
  std::vector<std::size_t> order_, index_;
  std::vector<std::uint32_t> candidates_;         // the experts with a candidate task
  std::array<std::uint8_t, 16> has_candidate_{};  // by `candidate_cell`
  std::vector<seconds> keys_;
  std::vector<double> ndp_weight_, projected_;
  std::vector<expert_prices> prices_;  // per expert of the predicted step (`index_` != none)
  mutable size_prices sized_;          // the last W priced
  // The predicted step's greedy assignment's totals, the lower bound's scratch, and the
  // totals of the predicted schedule (these or the local search's).
  detail::device_loads greedy_loads_;
  std::vector<double> bound_scratch_;
  const detail::device_loads* loads_ = nullptr;  // set by each `plan`
  // Prices of key-independent models by token count (`memoised`), and their W.
  static constexpr std::size_t memo_tokens = 1024;
  static constexpr seconds unpriced = -1.0;
  std::vector<seconds> memo_gpu_, memo_cpu_, memo_ndp_;
  std::uint32_t filled_ = 0;  // the memos hold every price below this token count
  bool memos_tame_ = true;    // every price in the memos is `tame`
  bool lean_ = false;         // the last plan's pass was `price_lean`
  // The largest price the lean pass takes without checking its rows: far from overflow.
  static constexpr seconds tame_limit = 1e300;
  bytes size_ = 0;
};

/// Applies the taken tasks of a plan to the layer's state: layouts change for relayouts
/// and rebalance moves, `resident` is set for prefetches.
///
/// Preconditions: `layouts` and `resident` are the spans the plan was made from.
/// Complexity: O(tasks); no allocation.
inline void apply_migrations(std::span<const migration_task> tasks, std::span<expert_layout> layouts,
                             std::span<std::uint8_t> resident) noexcept {
  for (const auto& t : tasks) {
    if (!t.taken) continue;
    MOEPOLICY_ASSERT(t.expert < layouts.size() && t.expert < resident.size());
    if (t.kind == migration_kind::prefetch) {
      resident[t.expert] = 1;
    } else {
      layouts[t.expert] = t.to;
    }
  }
}

}  // namespace moepolicy
