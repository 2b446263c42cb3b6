// The dynaexq driver's replay — DynaExq ("Dynamic Expert Quantization for
// Scalable Mixture-of-Experts Inference", §3.2–3.5) on recorded Granite routing whose
// workload shifts.
//
// The trace's "cal-" requests are the calibration set and its "eval-" requests, in file order
// (factual, coding, math, summary, reasoning, conversation), the serving requests; every
// forward pass (one prefill step or one decode step of a request) is one step of the replay.
// Two serving streams are replayed, each after the calibration:
//   recorded  the serving requests once each, in file order (short requests, no phase lasts);
//   phased    each serving request replayed --phase-repeats times (default 8) back to back,
//             in file order: request 1 × R, request 2 × R, …; a phase is one request's R
//             replays (two adjacent requests of one domain make a phase of that domain 2R
//             long). The routing of each replay is the recorded routing, unchanged.
// For budgets that hold 25 %, 50 % and 75 % of a layer's experts at FP16 (the rest at 4 bits),
// four policies run side by side:
//   static        top-n_l of the calibration hotness, never changed;
//   online        plain top-n_l of the hotness EMA at every interval end (§3.5);
//   + margin      the same with the additive hysteresis margin (in shares of traffic);
//   + rank slack  the same with the rank slack (the symmetric reading).
// Every policy starts from the static set, loaded at FP16 before the stream; the online
// policies' hotness EMA has watched the calibration requests. They act through the real
// mechanism: `precision_target_selector` → requests to a `transition_pipeline` (budget
// reserved at enqueue, §3.4; refused requests deferred) → `step()` once per forward pass (on
// this thread; no worker) → every routed expert is served at the tier its handle resolves to
// in a window pinned for the pass (§3.1 window-level pinning: one version per expert per pass).
// Each replay keeps the tier every handle resolves to and, in each pass's window, re-resolves
// the experts whose publications that pass's step logged (a tier changes only by a logged
// publication); --resolve-each-access resolves every activation instead, with the same output.
//
// Modelling choices (printed with the results):
//   * Versions are scaled down: 256 B (FP16) and the 4-bit size at the same scale (68 B for
//     Granite) per block, so the budget bounds, pools and byte cap work in scaled bytes; the
//     bytes reported are the real footprints, `expert_bytes(shape, fp16)` and at 4 bits (GPTQ
//     layout), times the promotions and demotions.
//   * Capacities, pools and bounds come from `plan_precision_budget` (low version replaced, k
//     staging blocks, --staging, default 64): the expert region M − M_res is chosen as the
//     smallest that yields n_l = 8, 16, 24 of 32; the same plan at the scaled sizes sizes the
//     pools and the bounds M_hi, M_lo, M_stage. The driver prints each plan's arena beside
//     its region.
//   * Time: every forward pass, prefill or decode, takes a fixed modelled time (--step-ms,
//     default 2 ms); the replay clock advances by it, through calibration and stream alike.
//     The link moves --link-gbps (PCIe Gen5 x16: 64 GB/s), so a step may issue what the link
//     moves in one pass (the cap is set one high copy short, because the pipeline lets a step's
//     last copy overrun it); a copy issued at the start of a pass is published at the start of
//     the next. Queue delay runs from the request (at an interval end) to publication.
//   * Hotness: intervals are --interval-ms of modelled time (default 20 ms = 10 passes), the
//     EMA weighs the interval just ended by --alpha (default 0.2: a memory of about five
//     intervals, 100 ms or 50 passes — long against a request of about 17 passes) over shares
//     of each layer's selections (`interval_counts::share`), so the margin is a share of
//     traffic. Sweeps vary the margin, alpha and the interval.
//   * After the stream the pipeline runs until a step makes no progress (no iteration cap), so
//     every requested transition counts, at any trace length.
//   * Beside the share served at high precision, "target %" is the share of activations of
//     experts in the policy's target set at that moment, as if transitions were instantaneous:
//     it separates what the policy chooses from what the mechanism delivers in time.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "drivers/dynaexq.hpp"

#include "common/interval_points.hpp"
#include "common/model_match.hpp"
#include "common/table.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/predict/hotness.hpp"
#include "moepolicy/predict/precision_budget.hpp"
#include "moepolicy/predict/precision_target.hpp"
#include "moepolicy/residency/block_pool.hpp"
#include "moepolicy/residency/budget_tracker.hpp"
#include "moepolicy/residency/transition_queue.hpp"
#include "moepolicy/residency/versioned_expert.hpp"
#include "moepolicy/trace/canonical.hpp"

namespace moepolicy::examples::dynaexq {

namespace fs = std::filesystem;

namespace {

constexpr bitwidth low_bits{4};
constexpr bytes scaled_high_bytes = 256;
// Block granularity of the scaled pools (the real plan uses 256 B).
constexpr std::size_t scaled_alignment = 4;

// Real and scaled sizes of one expert's versions; scaled = real / scale.
struct version_sizes {
  bytes high = 0, low = 0, scale = 1, high_scaled = 0, low_scaled = 0;
};

// A serving stream: forward passes in serving order, each serving request's steps `repeats`
// times back to back. The passes are the trace's own steps, walked in place (no copy that
// grows with the stream).
struct stream_spec {
  std::string name, description;
  std::span<const std::span<const step_ref>> requests;
  std::size_t repeats = 1;
  std::size_t passes = 0;
  std::uint64_t selections = 0;

  // Calls `f(p, step)` for every pass p of the stream, in order.
  template <class F>
  void for_each_pass(F&& f) const {
    std::size_t p = 0;
    for (const std::span<const step_ref> req : requests) {
      for (std::size_t k = 0; k < repeats; ++k) {
        for (const step_ref& s : req) f(p++, s);
      }
    }
  }
};

// The replay's input: forward passes of the calibration, the serving requests, and the
// static (calibration) hotness as shares of each layer's selections.
struct workload {
  const routing_trace* trace = nullptr;
  std::size_t layers = 0, experts = 0;
  // The trace's steps of each calibration request, and of each serving request (in place).
  std::vector<std::span<const step_ref>> calibration, serving;
  std::size_t calibration_passes = 0;
  std::vector<std::string> calibration_names, serving_names;
  std::vector<double> static_hotness;
};

// Modelled time in whole microseconds, so that interval ends and pass times compare exactly.
struct clock_model {
  std::uint64_t step_us = 2000, interval_us = 20000;
  std::size_t calibration_passes = 0;
  // The start of pass q, counted from the first calibration pass.
  [[nodiscard]] std::uint64_t at(std::size_t q) const { return static_cast<std::uint64_t>(q) * step_us; }
  // The update interval pass q (of the stream) lies in.
  [[nodiscard]] std::uint64_t interval_of_stream_pass(std::size_t p) const {
    return at(calibration_passes + p) / interval_us;
  }
  // Whether an update interval ends with pass p of a stream of `passes` (its last pass ends
  // the last one).
  [[nodiscard]] bool interval_ends(std::size_t p, std::size_t passes) const {
    return p + 1 == passes || interval_of_stream_pass(p + 1) != interval_of_stream_pass(p);
  }
};

// The update intervals of `stream` (one ends with its last pass).
std::size_t count_intervals(const stream_spec& stream, const clock_model& clk) {
  std::size_t n = 0;
  for (std::size_t p = 0; p < stream.passes; ++p) {
    if (clk.interval_ends(p, stream.passes)) ++n;
  }
  return n;
}

struct budget_case {
  std::uint32_t n = 0;
  precision_budget real, scaled;
};

struct policy_spec {
  std::string label;
  bool online = true;
  precision_target_config target;
  double alpha = 0.2;
  double interval_ms = 20.0;
};

struct run_result {
  std::uint64_t selections = 0, high = 0;
  /// Activations of experts in the policy's target set at that moment: what the policy
  /// would get if transitions were instantaneous.
  std::uint64_t in_target = 0;
  std::uint64_t promotions = 0, demotions = 0;
  bytes scaled_moved = 0;
  /// The longest delay of a promotion published while the stream ran.
  seconds worst_promotion_delay = 0.0;
  /// Promotions still queued when the stream ended (published while the pipeline ran on
  /// afterwards): their delay measures the drain, not the policy, so they are counted apart.
  std::uint64_t promotions_queued_at_end = 0;
  /// Requests the pipeline could never serve (still deferred or queued when it stopped
  /// making progress).
  std::uint64_t left_unserved = 0;
  std::uint64_t admission_waits = 0;
  /// Per point of the stream's update intervals (`interval_points`: `options::series_points`
  /// at most): the share of their activations served at high precision, the transitions
  /// published per interval, and the stream time at the last one's end (ms). Kept only for
  /// the replays whose series are shown (no points otherwise).
  interval_points intervals;
};

// The largest power of two dividing `b`, at most 256: a block alignment the pool accepts.
std::size_t alignment_for(bytes b) { return static_cast<std::size_t>(std::min<bytes>(b & (~b + 1), 256)); }

std::uint64_t to_us(double ms) { return static_cast<std::uint64_t>(std::llround(ms * 1000.0)); }

workload load(const routing_trace& trace) {
  workload w;
  w.trace = &trace;
  w.layers = trace.info().num_layers;
  w.experts = trace.info().num_experts;
  hotness_estimator calibration(w.layers, w.experts, {.alpha = 1.0, .counts = interval_counts::share});
  // Requests named *-cal-* calibrate and *-eval-* serve; a trace without such names
  // calibrates on the first half of its requests (rounded down) and serves the rest.
  const auto& requests = trace.requests();
  const bool named = std::any_of(requests.begin(), requests.end(),
                                 [](const request_ref& r) { return r.name.find("-cal-") != std::string::npos; });
  if (!named && requests.size() < 2) {
    throw std::runtime_error("the trace needs requests named *-cal-* and *-eval-*, or at least 2 requests, has " +
                             std::to_string(requests.size()));
  }
  for (std::size_t ri = 0; ri < requests.size(); ++ri) {
    const request_ref& r = requests[ri];
    const bool cal = named ? r.name.find("-cal-") != std::string::npos : ri < requests.size() / 2;
    if (named && !cal && r.name.find("-eval-") == std::string::npos) continue;
    (cal ? w.calibration_names : w.serving_names).push_back(r.name);
    const std::span<const step_ref> steps = trace.steps_of(r);
    (cal ? w.calibration : w.serving).push_back(steps);
    if (cal) {
      w.calibration_passes += steps.size();
      for (const step_ref& s : steps) {
        for (const batch_ref& b : trace.batches_of(s)) calibration.observe(b.layer, trace.view(b).experts);
      }
    }
  }
  const bool any_serving = std::any_of(w.serving.begin(), w.serving.end(), [](const auto& s) { return !s.empty(); });
  if (w.calibration_passes == 0 || !any_serving) {
    throw std::runtime_error("the trace needs requests named *-cal-* (calibration) and *-eval-* (stream)");
  }
  calibration.end_interval();
  for (std::size_t l = 0; l < w.layers; ++l) {
    const auto h = calibration.hotness(static_cast<layer_id>(l));
    w.static_hotness.insert(w.static_hotness.end(), h.begin(), h.end());
  }
  return w;
}

std::uint64_t count_selections(const routing_trace& t, const stream_spec& stream) {
  std::uint64_t n = 0;
  stream.for_each_pass([&](std::size_t, const step_ref& s) {
    for (const batch_ref& b : t.batches_of(s)) n += t.view(b).experts.size();
  });
  return n;
}

std::vector<stream_spec> make_streams(const workload& w, std::size_t repeats) {
  std::vector<stream_spec> out(2);
  out[0].name = "recorded";
  out[0].description = "the " + std::to_string(w.serving_names.size()) + " serving requests once each, in file order";
  out[1].name = "phased";
  out[1].description = "each serving request replayed " + std::to_string(repeats) +
                       " times back to back, in file order (a phase = one request's " + std::to_string(repeats) +
                       " replays)";
  out[0].repeats = 1;
  out[1].repeats = repeats;
  for (auto& s : out) {
    s.requests = w.serving;
    for (const auto& req : w.serving) s.passes += s.repeats * req.size();
    s.selections = count_selections(*w.trace, s);
  }
  return out;
}

budget_case plan_budget(const model_shape& shape, const version_sizes& v, std::uint32_t n, std::size_t staging) {
  const std::uint64_t layers = shape.num_moe_layers(), cells = layers * shape.num_experts;
  budget_case b{n, {}, {}};
  // The smallest expert region M − M_res that buys n high versions per layer, in the plan's
  // block bytes: every low block, the staging blocks, and n slots per layer.
  const auto region = [&](bytes hi, bytes lo, std::size_t align) {
    const auto up = [&](bytes x) { return (x + align - 1) / align * align; };
    return (cells + staging) * up(lo) + layers * n * (up(hi) - up(lo));
  };
  b.real = plan_precision_budget(shape, fp16, low_bits,
                                 {.usable_bytes = region(v.high, v.low, 256),
                                  .reserved_bytes = 0,
                                  .staging_versions = staging,
                                  .block_alignment = 256});
  b.scaled = plan_precision_budget({.usable_bytes = region(v.high_scaled, v.low_scaled, scaled_alignment),
                                    .reserved_bytes = 0,
                                    .high_bytes = v.high_scaled,
                                    .low_bytes = v.low_scaled,
                                    .num_layers = layers,
                                    .num_experts = shape.num_experts,
                                    .staging_versions = staging,
                                    .block_alignment = scaled_alignment});
  for (const auto* p : {&b.real, &b.scaled}) {
    for (std::uint32_t c : p->capacity) {
      if (c != n)
        throw std::runtime_error("plan_precision_budget gave n_l = " + std::to_string(c) + ", not " +
                                 std::to_string(n));
    }
    if (p->arena_bytes > p->expert_bytes) throw std::runtime_error("the planned pools exceed the expert region");
  }
  return b;
}

// The host-side prepacked versions of every expert (scaled payloads), shared by all runs.
struct host_versions {
  std::vector<std::byte> high, low;
  version_sizes sizes;
  version_source source(expert_key k, precision_tier t, std::size_t experts) const {
    const std::size_t i = k.flat(experts);
    const bool hi = t == precision_tier::high;
    const auto size = static_cast<std::size_t>(hi ? sizes.high_scaled : sizes.low_scaled);
    const std::span<const std::byte> b = std::span<const std::byte>(hi ? high : low).subspan(i * size, size);
    return {b, fnv1a_checksum(b), static_cast<std::uint8_t>(hi ? fp16.bits() : low_bits.bits())};
  }
};

host_versions make_versions(const version_sizes& v, std::size_t cells) {
  host_versions h;
  h.sizes = v;
  h.high.resize(cells * v.high_scaled);
  h.low.resize(cells * v.low_scaled);
  for (std::size_t i = 0; i < h.high.size(); ++i) h.high[i] = static_cast<std::byte>((i * 7 + 1) & 0xFF);
  for (std::size_t i = 0; i < h.low.size(); ++i) h.low[i] = static_cast<std::byte>((i * 13 + 5) & 0xFF);
  return h;
}

// A group of replays (`replay_group`) steps its pipelines on its own thread: with a clock per
// thread, groups replayed at once on several threads (`options::jobs`) each see their own
// modelled time.
using group_clock = thread_replay_clock;
using pipeline = transition_pipeline<host_memcpy_mover, group_clock>;

// The static set: the calibration's top-n_l per layer, all experts eligible, so that every
// layer starts with exactly n_l high versions (the replaced pools hold no more low ones).
std::vector<std::uint8_t> static_set(const workload& w, const budget_case& b) {
  const std::size_t L = w.layers, E = w.experts;
  precision_target_selector pick(b.real.capacity, E, {.mode = target_hysteresis::none, .min_hotness = -1.0});
  std::vector<std::uint8_t> member(L * E, 0);
  const std::vector<std::uint8_t> none(E, 0);
  for (std::size_t l = 0; l < L; ++l) {
    const auto id = static_cast<layer_id>(l);
    static_cast<void>(pick.select(id, std::span<const double>(w.static_hotness).subspan(l * E, E), none));
    const auto m = pick.membership(id);
    std::copy(m.begin(), m.end(), member.begin() + static_cast<std::ptrdiff_t>(l * E));
  }
  return member;
}

// One replay of a group: a budget and a policy, with its own mechanism (table, budget, pools,
// pipeline), target sets and counters.
struct replay_state {
  replay_state(const workload& w, const host_versions& hv, const budget_case& b, const policy_spec& spec,
               const options& opt, bytes step_cap_scaled)
      : table(w.layers, w.experts, {.low = low_version::replaced, .max_readers = 1}),
        budget(b.scaled.budget_config()),
        low_pool(b.scaled.low_block_bytes, b.scaled.low_pool_blocks, alignment_for(b.scaled.low_block_bytes)),
        high_pool(b.scaled.high_block_bytes, b.scaled.high_pool_blocks, alignment_for(b.scaled.high_block_bytes)),
        // Every expert may be in flight at once, so the link's byte cap and the budget bind,
        // not the number of copy slots.
        pipe(table, budget, low_pool, high_pool,
             [&hv, E = w.experts](expert_key k, precision_tier t) { return hv.source(k, t, E); }, host_memcpy_mover{},
             {.max_in_flight = w.layers * w.experts,
              .max_issue_bytes_per_step = step_cap_scaled,
              .log_capacity = 2 * w.layers * w.experts,
              .admission = opt.admit_at_issue ? admission_point::issue : admission_point::enqueue}),
        member(static_set(w, b)),
        log(2 * w.layers * w.experts),
        selector(b.real.capacity, w.experts, spec.target),
        reader(table.register_reader()),
        experts(w.experts),
        high(w.layers * w.experts, 0) {
    const std::size_t E = w.experts;
    if (pipe.load_all([&](expert_key k) {
          return member[k.flat(E)] != 0 ? precision_tier::high : precision_tier::low;
        }) != residency_load_status::ok) {
      throw std::runtime_error("the planned pools do not hold the static set and every other expert's low version");
    }
    waits_before = pipe.stats().admission_waits;
    const read_guard guard = reader.pin();
    for (std::size_t i = 0; i < high.size(); ++i)
      refresh(guard, {static_cast<layer_id>(i / E), static_cast<expert_id>(i % E)});
  }

  // The tier `key` resolves to in `guard`'s window, kept for the passes until the next
  // publication of `key`.
  void refresh(const read_guard& guard, expert_key key) {
    high[key.flat(experts)] = guard.resolve(key).tier == precision_tier::high ? 1 : 0;
  }

  void account(std::size_t n, bool after_stream) {
    interval_transitions += n;
    for (std::size_t i = 0; i < n; ++i) {
      const transition_record& rec = log[i];
      if (rec.kind == transition_kind::promotion) {
        ++r.promotions;
        if (after_stream) {
          ++r.promotions_queued_at_end;
        } else {
          r.worst_promotion_delay = std::max(r.worst_promotion_delay, rec.queue_delay);
        }
      } else {
        ++r.demotions;
      }
      r.scaled_moved += rec.bytes_moved;
    }
  }

  versioned_expert_table table;
  residency_budget budget;
  block_pool low_pool, high_pool;
  pipeline pipe;
  std::vector<std::uint8_t> member;
  std::vector<transition_record> log;
  precision_target_selector selector;
  reader_slot reader;
  std::size_t experts = 0;
  /// Per expert (flat index): 1 when its handle resolves to the high tier, as of the last
  /// window that re-resolved it.
  std::vector<std::uint8_t> high;
  std::uint64_t waits_before = 0;
  /// Whether `r` keeps the per-interval series.
  bool series = false;
  run_result r;
  std::uint64_t interval_selections = 0, interval_high = 0, interval_transitions = 0;
};

// Replays calibration (warm-up) and one stream for several budgets and policies that share
// the hotness inputs (online or not, alpha, interval), in lockstep: the hotness EMA is
// updated once per pass for all of them and the trace's rows are read once per pass; each
// replay keeps its own mechanism and is exactly the replay it would be alone.
std::vector<run_result> replay_group(const workload& w, const stream_spec& stream, const host_versions& hv,
                                     std::span<const budget_case* const> budgets, std::span<const policy_spec> specs,
                                     std::span<const std::uint8_t> series, const options& opt, bytes step_cap_scaled) {
  const std::size_t L = w.layers, E = w.experts, G = specs.size();
  const policy_spec& spec = specs.front();
  for (const policy_spec& s : specs) {
    if (s.online != spec.online || s.alpha != spec.alpha || s.interval_ms != spec.interval_ms) {
      throw std::logic_error("replay_group: specs must share online, alpha and interval");
    }
  }
  const clock_model clk{to_us(opt.step_ms), to_us(spec.interval_ms), w.calibration_passes};
  const auto seconds_at = [&](std::size_t q) { return static_cast<double>(clk.at(q)) * 1e-6; };
  group_clock::set(0.0);

  // Replays of the group with the same budget and target rule are one replay (it is
  // deterministic, and a policy's label does not enter it): it runs once, and `run_of` gives
  // each replay of the group the one that runs for it.
  std::vector<std::unique_ptr<replay_state>> runs;
  std::vector<std::size_t> run_of(G);
  runs.reserve(G);
  for (std::size_t g = 0; g < G; ++g) {
    run_of[g] = runs.size();
    for (std::size_t h = 0; h < g && opt.share_equal_replays; ++h) {
      if (budgets[h] == budgets[g] && specs[h].target == specs[g].target) {
        run_of[g] = run_of[h];
        break;
      }
    }
    if (run_of[g] == runs.size()) {
      runs.push_back(std::make_unique<replay_state>(w, hv, *budgets[g], specs[g], opt, step_cap_scaled));
    }
  }
  // Only the replays whose per-interval series a caller keeps record them, in at most
  // `opt.series_points` points, so that no state of a replay grows with the stream.
  const std::size_t P = stream.passes, C = w.calibration_passes;
  const std::size_t intervals = count_intervals(stream, clk);
  const std::size_t per_point = intervals_per_point(intervals, opt.series_points);
  for (std::size_t g = 0; g < G; ++g) {
    if (series[g] == 0 || runs[run_of[g]]->series) continue;
    replay_state& s = *runs[run_of[g]];
    s.series = true;
    s.r.intervals = interval_points(intervals, per_point);
  }

  // The online policies' hotness EMA watches the calibration, in intervals of modelled time
  // (microseconds as its unit, so that interval ends fall exactly on pass starts).
  hotness_estimator hot(L, E,
                        {.alpha = spec.alpha,
                         .counts = interval_counts::share,
                         .interval_seconds = static_cast<double>(clk.interval_us)});
  if (spec.online) {
    std::size_t q = 0;
    for (const std::span<const step_ref> req : w.calibration) {
      for (const step_ref& st : req) {
        static_cast<void>(hot.advance_to(static_cast<double>(clk.at(q++))));
        for (const batch_ref& bt : w.trace->batches_of(st)) hot.observe(bt.layer, w.trace->view(bt).experts);
      }
    }
  }

  precision_target_selector ranker(1, E, 0, {.mode = target_hysteresis::none});
  // The pass's routed experts as flat indices, read from the trace once for every replay.
  std::vector<std::uint32_t> cells;
  stream.for_each_pass([&](const std::size_t p, const step_ref& pass) {
    const std::size_t q = C + p;
    group_clock::set(seconds_at(q));
    // Intervals that ended by the start of this pass: a new target set for every layer.
    const bool ended = spec.online && hot.advance_to(static_cast<double>(clk.at(q))) > 0;
    const auto batches = w.trace->batches_of(pass);
    if (!opt.resolve_each_access) {
      cells.clear();
      for (const batch_ref& bt : batches) {
        const auto base = static_cast<std::uint32_t>(static_cast<std::size_t>(bt.layer) * E);
        for (expert_id e : w.trace->view(bt).experts) cells.push_back(base + e);
      }
    }
    if (ended) {
      // One ranking per layer serves every replay of the group (it depends on the hotness
      // only).
      for (std::size_t l = 0; l < L; ++l) {
        const auto id = static_cast<layer_id>(l);
        const std::span<const double> h = hot.hotness(id);
        const std::span<const expert_id> order = ranker.rank_only(h);
        for (auto& run : runs) {
          replay_state& s = *run;
          const std::span<std::uint8_t> cur = std::span<std::uint8_t>(s.member).subspan(l * E, E);
          const layer_target t = s.selector.select_ranked(id, h, order, cur);
          const auto m = s.selector.membership(id);
          std::copy(m.begin(), m.end(), cur.begin());
          s.pipe.request(id, t.promote, t.demote);
        }
      }
    }
    for (auto& run : runs) {
      replay_state& s = *run;
      s.pipe.step();  // publishes last pass's copies, reclaims, admits, issues within the link's cap
      const std::size_t published = s.pipe.drain_log(s.log);
      s.account(published, false);
      const read_guard guard = s.reader.pin();  // the pass's window: one version per expert
      if (!opt.resolve_each_access) {
        for (std::size_t i = 0; i < published; ++i) s.refresh(guard, s.log[i].key);
        std::uint64_t high = 0, in_target = 0;
        for (const std::uint32_t c : cells) {
          high += s.high[c];
          in_target += s.member[c];
        }
        s.r.high += high;
        s.interval_high += high;
        s.r.in_target += in_target;
        s.r.selections += cells.size();
        s.interval_selections += cells.size();
        continue;
      }
      for (const batch_ref& bt : batches) {
        const batch_view v = w.trace->view(bt);
        const std::uint8_t* target = s.member.data() + static_cast<std::size_t>(bt.layer) * E;
        for (expert_id e : v.experts) {
          const bool high = guard.resolve(expert_key{bt.layer, e}).tier == precision_tier::high;
          s.r.high += high ? 1u : 0u;
          s.interval_high += high ? 1u : 0u;
          s.r.in_target += target[e];
        }
        s.r.selections += v.experts.size();
        s.interval_selections += v.experts.size();
      }
    }
    if (spec.online) {
      for (const batch_ref& bt : batches) hot.observe(bt.layer, w.trace->view(bt).experts);
    }
    if (clk.interval_ends(p, P)) {
      const double end_ms = static_cast<double>(clk.at(q + 1) - clk.at(C)) * 1e-3;
      for (auto& run : runs) {
        replay_state& s = *run;
        if (s.series) s.r.intervals.add(s.interval_high, s.interval_selections, s.interval_transitions, end_ms);
        s.interval_selections = s.interval_high = s.interval_transitions = 0;
      }
    }
  });
  for (auto& run : runs) {
    if (run->series) run->r.intervals.finish();
  }
  std::vector<run_result> ran;
  ran.reserve(runs.size());
  for (auto& run : runs) {
    replay_state& s = *run;
    // Run the pipeline on until a step makes no progress: every request it can serve is
    // served, whatever the stream's length.
    for (std::size_t q = C + P;; ++q) {
      group_clock::set(seconds_at(q));
      const transition_step_result st = s.pipe.step();
      s.account(s.pipe.drain_log(s.log), true);
      if (!st.progressed() && s.pipe.in_flight() == 0) break;
    }
    s.r.left_unserved = s.pipe.queued_promotions() + s.pipe.queued_demotions() + s.pipe.deferred_promotions() +
                        s.pipe.deferred_demotions();
    if (s.pipe.stats().log_overwritten != 0) throw std::runtime_error("transition log overflowed");
    // Every transition copied one whole scaled version, so the modelled bytes scale back
    // exactly.
    if (s.r.scaled_moved != s.r.promotions * hv.sizes.high_scaled + s.r.demotions * hv.sizes.low_scaled) {
      throw std::runtime_error("the pipeline's bytes moved disagree with its transitions");
    }
    if (s.high_pool.exhausted() != 0 || s.low_pool.exhausted() != 0) {
      throw std::runtime_error("a reservation did not find its block");
    }
    s.r.admission_waits = s.pipe.stats().admission_waits - s.waits_before;
    ran.push_back(std::move(s.r));
  }
  std::vector<run_result> out;
  out.reserve(G);
  for (std::size_t g = 0; g < G; ++g) {
    // Each replay of the group gets its run's figures, and the series only where it keeps them.
    run_result& src = ran[run_of[g]];
    interval_points kept = std::exchange(src.intervals, {});
    out.push_back(src);
    if (series[g] != 0) out.back().intervals = kept;
    src.intervals = std::move(kept);
  }
  return out;
}
// Share of the stream's selections that hit each interval's own top-n (the clairvoyant,
// instantaneous bound), and that hit the whole stream's top-n (the best static set in
// hindsight).
struct bound_result {
  double oracle = 0.0, hindsight = 0.0;
  /// The oracle's share in each point of `series_points` intervals (when asked for): the
  /// activations its intervals' own top-n would serve over its activations.
  std::vector<double> interval_oracle;
};

bound_result bounds(const workload& w, const stream_spec& stream, const clock_model& clk, std::uint32_t n,
                    bool keep_series, std::size_t series_points) {
  const std::size_t L = w.layers, E = w.experts;
  const auto top_sum = [&](std::vector<std::uint64_t> c) {
    std::sort(c.begin(), c.end(), std::greater<>());
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < n && i < c.size(); ++i) s += c[i];
    return s;
  };
  std::vector<std::uint64_t> window(L * E, 0), whole(L * E, 0);
  std::uint64_t oracle = 0, hindsight = 0, in_window = 0;
  interval_points series;
  if (keep_series) {
    const std::size_t intervals = count_intervals(stream, clk);
    series = interval_points(intervals, intervals_per_point(intervals, series_points));
  }
  const auto flush = [&] {
    std::uint64_t best = 0;
    for (std::size_t l = 0; l < L; ++l) {
      const auto first = window.begin() + static_cast<std::ptrdiff_t>(l * E);
      best += top_sum(std::vector<std::uint64_t>(first, first + static_cast<std::ptrdiff_t>(E)));
    }
    oracle += best;
    if (keep_series) series.add(best, in_window, 0, 0.0);
    in_window = 0;
    std::fill(window.begin(), window.end(), std::uint64_t{0});
  };
  const std::size_t P = stream.passes;
  stream.for_each_pass([&](const std::size_t p, const step_ref& pass) {
    for (const batch_ref& bt : w.trace->batches_of(pass)) {
      for (expert_id e : w.trace->view(bt).experts) {
        ++window[static_cast<std::size_t>(bt.layer) * E + e];
        ++whole[static_cast<std::size_t>(bt.layer) * E + e];
        ++in_window;
      }
    }
    if (clk.interval_ends(p, P)) flush();
  });
  series.finish();
  for (std::size_t l = 0; l < L; ++l) {
    const auto first = whole.begin() + static_cast<std::ptrdiff_t>(l * E);
    hindsight += top_sum(std::vector<std::uint64_t>(first, first + static_cast<std::ptrdiff_t>(E)));
  }
  const auto total = static_cast<double>(stream.selections);
  return {static_cast<double>(oracle) / total, static_cast<double>(hindsight) / total, series.take_ratio()};
}

double share(const run_result& r) { return static_cast<double>(r.high) / static_cast<double>(r.selections); }

std::vector<std::string> result_cells(const run_result& r, const version_sizes& v, double step_ms) {
  const double mb = static_cast<double>(r.promotions * v.high + r.demotions * v.low) / 1e6;
  const double ms = r.worst_promotion_delay * 1e3;
  const bool any = r.promotions > r.promotions_queued_at_end;
  const std::string passes = any ? std::to_string(std::lround(ms / step_ms)) : std::string("-");
  const auto pct = [&](std::uint64_t x) {
    return fixed(100.0 * static_cast<double>(x) / static_cast<double>(r.selections), 2);
  };
  return {pct(r.high),
          pct(r.in_target),
          std::to_string(r.promotions),
          std::to_string(r.demotions),
          fixed(mb, 1),
          std::to_string(r.admission_waits),
          passes,
          any ? fixed(ms, 1) : std::string("-"),
          std::to_string(r.promotions_queued_at_end),
          std::to_string(r.left_unserved)};
}

const std::vector<std::string> result_header{
    "high %", "target %",      "promotions", "demotions", "MB moved", "budget waits", "worst promo delay (passes)",
    "(ms)",   "queued at end", "unserved"};

policy_spec spec_static(const options& opt) {
  return {"static (calibration top-n)", false, {.mode = target_hysteresis::none}, opt.alpha, opt.interval_ms};
}
policy_spec spec_none(double alpha, double interval_ms) {
  return {"online top-n", true, {.mode = target_hysteresis::none}, alpha, interval_ms};
}
policy_spec spec_margin(double alpha, double margin, double interval_ms) {
  return {"online + margin " + fixed(margin, 3),
          true,
          {.mode = target_hysteresis::margin, .margin = margin},
          alpha,
          interval_ms};
}
policy_spec spec_slack(double alpha, std::size_t slack, double interval_ms) {
  return {"online + rank slack " + std::to_string(slack),
          true,
          {.mode = target_hysteresis::rank_slack, .rank_slack = slack},
          alpha,
          interval_ms};
}

std::string passes_of(double ms, double step_ms) {
  const double passes = ms / step_ms;
  return std::abs(passes - std::round(passes)) < 1e-9 ? std::to_string(std::llround(passes)) : fixed(passes, 2);
}

}  // namespace

result run(const fs::path& path, const options& opt, std::ostream& out) {
  return run(path, examples::load_trace(path), opt, out);
}

result run(const fs::path& path, const routing_trace& trace, const options& opt, std::ostream& out) {
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  if (shape->num_moe_layers() != trace.info().num_layers) {
    throw std::runtime_error(path.string() + ": the trace's layers do not match the preset " + shape->name);
  }
  if (to_us(opt.step_ms) == 0 || to_us(opt.interval_ms) == 0) {
    throw std::runtime_error("the pass time and the update interval must be at least 1 us");
  }
  if (opt.series_points == 0) {
    throw std::invalid_argument("dynaexq::run: series_points must be >= 1, is 0");
  }
  const workload w = load(trace);
  const std::size_t E = w.experts;
  const std::vector<stream_spec> streams = make_streams(w, std::max<std::size_t>(1, opt.phase_repeats));

  version_sizes v;
  v.high = expert_bytes(*shape, fp16);
  v.low = expert_bytes(*shape, low_bits);
  v.scale = std::max<bytes>(1, v.high / scaled_high_bytes);
  v.high_scaled = (v.high + v.scale - 1) / v.scale;
  v.low_scaled = (v.low + v.scale - 1) / v.scale;
  const host_versions hv = make_versions(v, w.layers * E);

  const seconds dt = opt.step_ms * 1e-3;
  const double link_bytes = opt.link_gbps * 1e9 * dt;
  const auto link_scaled = static_cast<bytes>(std::floor(link_bytes / static_cast<double>(v.scale)));
  // The pipeline stops issuing once a step's bytes reach the cap, so the last copy of a step
  // may overrun it; a cap one high copy short keeps every step within the link.
  const bytes step_cap = link_scaled > v.high_scaled ? link_scaled - v.high_scaled + 1 : 1;
  // Every replay of the driver, so that what was never served is summed over all of them.
  std::uint64_t unserved_total = 0, runs = 0;
  // Each stream's replays, in the order the tables print them, run first in groups that share
  // the hotness inputs (see `replay_group`); the tables then take the results in order.
  std::vector<const budget_case*> job_budgets;
  std::vector<policy_spec> job_specs;
  // 1 for the replays whose per-interval series the result keeps.
  std::vector<std::uint8_t> job_series;
  std::vector<run_result> job_results;
  std::size_t next_job = 0;
  const auto run_jobs = [&](const stream_spec& stream) {
    job_results.assign(job_specs.size(), run_result{});
    // The groups, in the order of their first replay: each replayed as one task on `jobs`
    // threads (every group has its own mechanisms, estimator and clock), the results taken
    // in group order. On several threads a set of replays sharing the hotness inputs is split
    // into groups of at most `per` distinct replays (those one replay serves stay together),
    // so that the largest set does not hold the stage on one thread: each group then repeats
    // the hotness estimate (a small part of a replay's work), and every replay is the one it
    // is alone, so the output is the same.
    struct group {
      std::vector<std::size_t> members;
      std::vector<const budget_case*> budgets;
      std::vector<policy_spec> specs;
      std::vector<std::uint8_t> series;
      std::vector<run_result> results;
    };
    std::vector<std::vector<std::size_t>> sets;
    std::vector<bool> done(job_specs.size(), false);
    for (std::size_t i = 0; i < job_specs.size(); ++i) {
      if (done[i]) continue;
      std::vector<std::size_t>& set = sets.emplace_back();
      for (std::size_t j = i; j < job_specs.size(); ++j) {
        const policy_spec& a = job_specs[i];
        const policy_spec& c = job_specs[j];
        if (!done[j] && a.online == c.online && a.alpha == c.alpha && a.interval_ms == c.interval_ms) {
          set.push_back(j);
          done[j] = true;
        }
      }
    }
    // The replay that serves member j: the first of its set with the same budget and target
    // rule (`replay_group` runs them once).
    std::vector<std::size_t> served_by(job_specs.size());
    std::size_t distinct = 0;
    for (const std::vector<std::size_t>& set : sets) {
      for (std::size_t k = 0; k < set.size(); ++k) {
        const std::size_t j = set[k];
        served_by[j] = j;
        for (std::size_t h = 0; h < k && opt.share_equal_replays; ++h) {
          if (job_budgets[set[h]] == job_budgets[j] && job_specs[set[h]].target == job_specs[j].target) {
            served_by[j] = served_by[set[h]];
            break;
          }
        }
        if (served_by[j] == j) ++distinct;
      }
    }
    const std::size_t per = opt.jobs <= 1 ? distinct : std::max<std::size_t>(1, (distinct + opt.jobs - 1) / opt.jobs);
    std::vector<group> groups;
    std::vector<std::size_t> group_of(job_specs.size());
    for (const std::vector<std::size_t>& set : sets) {
      const std::size_t first = groups.size();
      std::size_t in_last = 0;  // distinct replays in the set's last group
      for (const std::size_t j : set) {
        if (served_by[j] == j) {
          if (groups.size() == first || in_last == per) {
            groups.emplace_back();
            in_last = 0;
          }
          ++in_last;
          group_of[j] = groups.size() - 1;
        } else {
          group_of[j] = group_of[served_by[j]];
        }
        group& g = groups[group_of[j]];
        g.members.push_back(j);
        g.budgets.push_back(job_budgets[j]);
        g.specs.push_back(job_specs[j]);
        g.series.push_back(job_series[j]);
      }
    }
    if (!groups.empty()) {
      // One thread runs them in order and stops at the first error; on several the first
      // error a group throws stops the groups not yet started.
      detail::task_pool pool(std::min(opt.jobs, groups.size()));
      pool.for_each(groups.size(), [&](std::size_t i) {
        group& g = groups[i];
        g.results = replay_group(w, stream, hv, g.budgets, g.specs, g.series, opt, step_cap);
      });
    }
    for (group& g : groups) {
      for (std::size_t k = 0; k < g.members.size(); ++k) {
        unserved_total += g.results[k].left_unserved;
        ++runs;
        job_results[g.members[k]] = std::move(g.results[k]);
      }
    }
    next_job = 0;
  };
  const auto run_one = [&](const stream_spec&, const budget_case& b, const policy_spec& spec, const options&, bytes) {
    if (next_job >= job_specs.size() || job_budgets[next_job] != &b || job_specs[next_job].label != spec.label ||
        job_specs[next_job].alpha != spec.alpha || job_specs[next_job].interval_ms != spec.interval_ms) {
      throw std::logic_error("dynaexq: the tables ask for a replay that was not planned");
    }
    return std::move(job_results[next_job++]);
  };

  out << "trace: " << path.string() << '\n'
      << "  model " << shape->name << ", " << w.layers << " layers x " << E << " experts, top-" << trace.info().top_k
      << '\n'
      << "  calibration: " << w.calibration_names.size() << " requests, " << w.calibration_passes << " forward passes ("
      << w.calibration_names.front() << " .. " << w.calibration_names.back() << ")\n"
      << "  serving streams (every forward pass of a request, its prefill step or a decode step, is one pass; "
         "both follow the calibration):\n";
  for (const auto& s : streams) {
    out << "    " << s.name << ": " << s.description << ": " << s.passes << " forward passes, " << s.selections
        << " expert activations (" << w.serving_names.front() << " .. " << w.serving_names.back() << ")\n";
  }
  out << "  versions: high FP16 " << v.high << " B, low 4-bit (groups of 128) " << v.low
      << " B per expert; the mechanism's blocks carry them scaled 1:" << v.scale << " (" << v.high_scaled << " B / "
      << v.low_scaled << " B), bytes below are modelled at the real sizes\n"
      << "  time: forward pass modelled (not measured) at " << fixed(opt.step_ms, 3) << " ms; link "
      << fixed(opt.link_gbps, 1) << " GB/s (PCIe Gen5 x16) moves " << fixed(link_bytes / 1e6, 1)
      << " MB per pass = " << fixed(link_bytes / static_cast<double>(v.high), 1)
      << " FP16 experts; hotness updated every " << fixed(opt.interval_ms, 3) << " ms of modelled time ("
      << passes_of(opt.interval_ms, opt.step_ms) << " passes)\n"
      << "  policy: hotness EMA alpha " << fixed(opt.alpha, 2)
      << " per interval over shares of each layer's selections (a memory of about "
      << fixed(opt.interval_ms / opt.alpha, 0) << " ms), warmed on the calibration; margin " << fixed(opt.margin, 3)
      << " (share); rank slack " << opt.slack << " (symmetric)\n"
      << "  mechanism: low versions replaced; budget reserved "
      << (opt.admit_at_issue ? "when a transition is issued (admission at issue)"
                             : "when a transition is requested (admission at enqueue, DynaExq §3.4; refused "
                               "requests deferred)")
      << "; each pass resolves its experts in one pinned window\n";

  std::vector<budget_case> budgets;
  for (std::uint32_t q : {1u, 2u, 3u}) {
    budgets.push_back(plan_budget(*shape, v, static_cast<std::uint32_t>(E * q / 4), opt.staging));
  }
  const auto mib = [](bytes x) { return fixed(static_cast<double>(x) / (1024.0 * 1024.0), 1); };
  out << "  budgets (plan_precision_budget: low versions replaced, k = " << opt.staging
      << " staging blocks, 256 B blocks, M_res = 0; the expert region is the smallest that buys n_l):\n";
  examples::text_table bt({"budget", "n_l", "expert region MiB", "arena MiB", "pool_hi blocks", "pool_lo blocks",
                           "high MiB", "low MiB", "staging MiB"});
  for (const auto& b : budgets) {
    bt.add({std::to_string(100 * b.n / E) + "%", std::to_string(b.n) + "/" + std::to_string(E),
            mib(b.real.expert_bytes), mib(b.real.arena_bytes), std::to_string(b.real.high_pool_blocks),
            std::to_string(b.real.low_pool_blocks) + " (" + std::to_string(b.real.staging_blocks) + " staging)",
            mib(b.real.high_region_bytes), mib(b.real.low_region_bytes), mib(b.real.staging_bytes)});
  }
  bt.print(out, "    ");
  for (const auto& b : budgets) {
    out << "    " << std::to_string(100 * b.n / E) << "%: arena " << b.real.arena_bytes << " B <= expert region "
        << b.real.expert_bytes << " B (" << (b.real.arena_bytes <= b.real.expert_bytes ? "fits" : "DOES NOT FIT")
        << "); scaled pools " << b.scaled.arena_bytes << " B <= " << b.scaled.expert_bytes << " B\n";
  }

  result res;
  res.high_experts = budgets[1].n;
  res.experts = E;
  const budget_case& half = budgets[1];
  std::vector<std::string> head;

  struct summary_row {
    std::string stream, budget;
    double static_share = 0, none = 0, margin = 0, slack = 0, hindsight = 0, oracle = 0;
  };
  std::vector<summary_row> summary;

  for (const auto& stream : streams) {
    const clock_model clk{to_us(opt.step_ms), to_us(opt.interval_ms), w.calibration_passes};
    out << "\n  == stream: " << stream.name << " (" << stream.passes << " passes, " << stream.selections
        << " activations)\n";
    const std::size_t intervals = count_intervals(stream, clk);
    const std::size_t per_point = intervals_per_point(intervals, opt.series_points);
    if (per_point > 1) {
      out << "  per-interval series (plots): " << intervals << " update intervals merged " << per_point
          << " per point, " << points_of(intervals, per_point) << " points (--series-points " << opt.series_points
          << ")\n";
    }
    out << "  bound: share of activations at high precision\n";
    examples::text_table ot({"budget", "oracle (each interval's own top-n_l)", "best static set in hindsight"});
    stream_result sr;
    sr.name = stream.name;
    sr.description = stream.description;
    sr.interval_ms = opt.interval_ms;
    sr.intervals = intervals;
    std::vector<bound_result> brs;
    for (const auto& b : budgets) {
      brs.push_back(bounds(w, stream, clk, b.n, &b == &half, opt.series_points));
      if (&b == &half) sr.oracle_high_share = std::move(brs.back().interval_oracle);
      ot.add({std::to_string(100 * b.n / E) + "%", fixed(100.0 * brs.back().oracle, 2),
              fixed(100.0 * brs.back().hindsight, 2)});
    }
    ot.print(out, "    ");

    out << "  policies (high % = activations served at high precision, as resolved through the handles;\n"
           "  target % = activations of experts in the policy's target set, as if transitions were instantaneous):\n";
    head = {"budget", "policy"};
    head.insert(head.end(), result_header.begin(), result_header.end());
    examples::text_table pt(head);
    const std::vector<policy_spec> specs{spec_static(opt), spec_none(opt.alpha, opt.interval_ms),
                                         spec_margin(opt.alpha, opt.margin, opt.interval_ms),
                                         spec_slack(opt.alpha, opt.slack, opt.interval_ms)};
    job_budgets.clear();
    job_specs.clear();
    job_series.clear();
    const auto plan = [&](const budget_case& b, policy_spec s, bool series = false) {
      job_budgets.push_back(&b);
      job_specs.push_back(std::move(s));
      job_series.push_back(series ? 1 : 0);
    };
    // The main table's replays at the 50% budget give the per-interval series.
    for (const budget_case& b : budgets) {
      for (const policy_spec& s : specs) plan(b, s, &b == &half);
    }
    for (double m : opt.sweep_margins) plan(half, spec_margin(opt.alpha, m, opt.interval_ms));
    for (double a : opt.sweep_alphas) {
      for (const auto& s : {spec_none(a, opt.interval_ms), spec_margin(a, opt.margin, opt.interval_ms),
                            spec_slack(a, opt.slack, opt.interval_ms)}) {
        plan(half, s);
      }
    }
    for (double ims : opt.sweep_intervals_ms) {
      if (to_us(ims) == 0) continue;
      for (const auto& s : {spec_none(opt.alpha, ims), spec_margin(opt.alpha, opt.margin, ims),
                            spec_slack(opt.alpha, opt.slack, ims)}) {
        plan(half, s);
      }
    }
    run_jobs(stream);
    for (std::size_t bi = 0; bi < budgets.size(); ++bi) {
      const budget_case& b = budgets[bi];
      summary_row row{stream.name, std::to_string(100 * b.n / E) + "%"};
      row.hindsight = brs[bi].hindsight;
      row.oracle = brs[bi].oracle;
      for (std::size_t si = 0; si < specs.size(); ++si) {
        const policy_spec& s = specs[si];
        std::vector<std::string> cells{std::to_string(100 * b.n / E) + "%", s.label};
        run_result rr = run_one(stream, b, s, opt, step_cap);
        const auto rc = result_cells(rr, v, opt.step_ms);
        cells.insert(cells.end(), rc.begin(), rc.end());
        pt.add(std::move(cells));
        (si == 0 ? row.static_share : si == 1 ? row.none : si == 2 ? row.margin : row.slack) = share(rr);
        if (&b == &half) {
          if (sr.interval_end_ms.empty()) {
            sr.interval_end_ms = rr.intervals.end();
            sr.intervals_per_point = rr.intervals.per_point();
          }
          sr.policies.push_back(
              {s.label, rr.intervals.take_ratio(), rr.intervals.take_events_per_interval(), share(rr)});
        }
      }
      summary.push_back(row);
    }
    pt.print(out, "    ");

    out << "  margin sweep at the 50% budget (alpha " << fixed(opt.alpha, 2) << ", interval "
        << fixed(opt.interval_ms, 1) << " ms):\n";
    head = {"margin"};
    head.insert(head.end(), result_header.begin(), result_header.end());
    examples::text_table mt(head);
    for (double m : opt.sweep_margins) {
      std::vector<std::string> row{fixed(m, 3)};
      const auto cells = result_cells(run_one(stream, half, spec_margin(opt.alpha, m, opt.interval_ms), opt, step_cap),
                                      v, opt.step_ms);
      row.insert(row.end(), cells.begin(), cells.end());
      mt.add(std::move(row));
    }
    mt.print(out, "    ");

    out << "  EMA sweep at the 50% budget (interval " << fixed(opt.interval_ms, 1) << " ms):\n";
    head = {"alpha", "policy"};
    head.insert(head.end(), result_header.begin(), result_header.end());
    examples::text_table at(head);
    for (double a : opt.sweep_alphas) {
      for (const auto& s : {spec_none(a, opt.interval_ms), spec_margin(a, opt.margin, opt.interval_ms),
                            spec_slack(a, opt.slack, opt.interval_ms)}) {
        std::vector<std::string> row{fixed(a, 2), s.label};
        const auto cells = result_cells(run_one(stream, half, s, opt, step_cap), v, opt.step_ms);
        row.insert(row.end(), cells.begin(), cells.end());
        at.add(std::move(row));
      }
    }
    at.print(out, "    ");

    out << "  interval sweep at the 50% budget (alpha " << fixed(opt.alpha, 2) << "):\n";
    head = {"interval ms", "passes", "policy"};
    head.insert(head.end(), result_header.begin(), result_header.end());
    examples::text_table it(head);
    for (double ims : opt.sweep_intervals_ms) {
      if (to_us(ims) == 0) continue;
      for (const auto& s : {spec_none(opt.alpha, ims), spec_margin(opt.alpha, opt.margin, ims),
                            spec_slack(opt.alpha, opt.slack, ims)}) {
        std::vector<std::string> row{fixed(ims, 1), passes_of(ims, opt.step_ms), s.label};
        const auto cells = result_cells(run_one(stream, half, s, opt, step_cap), v, opt.step_ms);
        row.insert(row.end(), cells.begin(), cells.end());
        it.add(std::move(row));
      }
    }
    it.print(out, "    ");
    if (next_job != job_specs.size()) throw std::logic_error("dynaexq: a planned replay was not printed");
    res.streams.push_back(std::move(sr));
  }

  out << "\n  what online residency buys over the static set (share of activations at high precision, %, "
         "defaults above):\n";
  examples::text_table st({"stream", "budget", "static", "online top-n", "+ margin", "+ rank slack",
                           "best online - static", "best static in hindsight", "oracle"});
  for (const auto& s : summary) {
    const double best = std::max({s.none, s.margin, s.slack});
    const double gain = 100.0 * (best - s.static_share);
    st.add({s.stream, s.budget, fixed(100.0 * s.static_share, 2), fixed(100.0 * s.none, 2), fixed(100.0 * s.margin, 2),
            fixed(100.0 * s.slack, 2), (gain >= 0 ? "+" : "") + fixed(gain, 2), fixed(100.0 * s.hindsight, 2),
            fixed(100.0 * s.oracle, 2)});
  }
  st.print(out, "    ");
  out << "  unserved requests over all " << runs << " replays: " << unserved_total << '\n';
  out << "  left out: the forward pass takes a fixed time whatever its precision mix and whatever the copies do\n"
         "  (no kernel time at 4 bits or FP16, no contention of the copies with the pass's own traffic); the\n"
         "  link carries only the transitions; the quality cost of 4-bit experts is not modelled (the share\n"
         "  served at FP16 stands for it).\n";
  out << "  MB moved: promotions x " << v.high << " B + demotions x " << v.low
      << " B (a demotion copies the 4-bit version back in);\n"
         "  budget waits: admission attempts the budget refused (backpressure: at the request, and at each retry\n"
         "  of a deferred one);\n"
         "  delay: from the request at an interval end to publication, over the promotions published while\n"
         "  the stream ran; queued at end: promotions still queued or deferred when it ended, published as the\n"
         "  pipeline then runs on until a step makes no progress (their bytes count in MB moved, their delay\n"
         "  measures that drain); unserved: requests it could never serve.\n";
  return res;
}

}  // namespace moepolicy::examples::dynaexq
