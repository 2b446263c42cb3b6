// The dynaexq driver's replay — DynaExq ("Dynamic Expert Quantization for
// Scalable Mixture-of-Experts Inference", §3.2–3.5) on recorded Granite routing whose
// workload shifts.
//
// The trace's "cal-" requests are the calibration set and its "eval-" requests, in file order
// (factual, coding, math, summary, reasoning, conversation), the serving stream; every
// forward pass (one prefill step or one decode step of a request) is one step of the replay.
// For budgets that hold 25 %, 50 % and 75 % of a layer's experts at FP16 (the rest at 4 bits),
// four policies run side by side:
//   static        top-n_l of the calibration hotness, never changed;
//   online        plain top-n_l of the hotness EMA at every interval end (§3.5);
//   + margin      the same with the additive hysteresis margin (in shares of traffic);
//   + rank slack  the same with the rank slack (the symmetric reading).
// Online policies start from the static set with their hotness EMA warmed on the calibration
// requests, and act through the real mechanism: `precision_target_selector` → requests to a
// `transition_pipeline` → `step()` once per forward pass (on this thread; no worker) → every
// routed expert is served at the tier its handle resolves to, through a read guard pinned
// for the pass (§3.1 window-level pinning).
//
// Modelling choices (printed with the results):
//   * Versions are scaled down: 256 B (FP16) and the 4-bit size at the same scale (68 B for
//     Granite) per block, so the budget tracker, pools and byte cap work in scaled bytes;
//     the bytes reported are the real footprints, `expert_bytes(shape, fp16)` and at 4 bits
//     (GPTQ layout), times the promotions and demotions.
//   * Capacities come from `plan_precision_budget` (low version replaced, k staging
//     versions, --staging, default 64): the expert region M − M_res is chosen as the smallest
//     that yields n_l = 8, 16, 24 of 32; the same plan at the scaled sizes sizes the budget
//     tracker and the pools. A small k makes the budget, not the link, bound the transitions.
//   * Time: every forward pass, prefill or decode, takes a fixed modelled time (--step-ms,
//     default 2 ms); the replay clock advances by it. The link moves --link-gbps (PCIe Gen5
//     x16: 64 GB/s), so a step may issue what the link moves in one pass (the cap is set one
//     high copy short, because the pipeline lets a step's last copy overrun it); a copy
//     issued at the start of a pass is published at the start of the next. Queue delay runs
//     from the request (at an interval end) to publication.
//   * The EMA counts shares of each layer's selections per interval (`interval_counts::share`),
//     so the margin is a share of traffic; intervals are a fixed number of passes (--interval).
//   * After the stream the pipeline runs until idle, so every requested transition counts.
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
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "drivers/dynaexq.hpp"

#include "common/model_match.hpp"
#include "common/table.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/io/read_trace.hpp"
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

// Real and scaled sizes of one expert's versions; scaled = real / scale.
struct version_sizes {
  bytes high = 0, low = 0, scale = 1, high_scaled = 0, low_scaled = 0;
};

// The replay's input: forward passes of the calibration and of the stream, and the static
// (calibration) hotness as shares of each layer's selections.
struct workload {
  const routing_trace* trace = nullptr;
  std::size_t layers = 0, experts = 0;
  std::vector<step_ref> calibration, stream;
  std::vector<std::string> calibration_names, stream_names;
  std::vector<double> static_hotness;
  std::uint64_t stream_selections = 0;
};

struct budget_case {
  std::uint32_t n = 0;
  precision_budget real, scaled;
};

struct policy_spec {
  std::string label;
  bool online = true;
  precision_target_config target;
  double alpha = 0.5;
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
  /// Promotions still queued when the stream ended (published while the pipeline ran idle
  /// afterwards): their delay measures the drain, not the policy, so they are counted apart.
  std::uint64_t promotions_queued_at_end = 0;
  std::uint64_t admission_waits = 0;
  /// Per update interval of the stream: the share of its activations served at high
  /// precision, and the transitions published during it.
  std::vector<double> interval_high_share;
  std::vector<std::uint64_t> interval_transitions;
};

// The largest power of two dividing `b`, at most 256: a block alignment the pool accepts.
std::size_t alignment_for(bytes b) { return static_cast<std::size_t>(std::min<bytes>(b & (~b + 1), 256)); }

workload load(const routing_trace& trace) {
  workload w;
  w.trace = &trace;
  w.layers = trace.info().num_layers;
  w.experts = trace.info().num_experts;
  hotness_estimator calibration(w.layers, w.experts, {.alpha = 1.0, .counts = interval_counts::share});
  // Requests named *-cal-* calibrate and *-eval-* form the stream; a trace without such
  // names calibrates on the first half of its requests (rounded down) and streams the rest.
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
    (cal ? w.calibration_names : w.stream_names).push_back(r.name);
    for (const step_ref& s : trace.steps_of(r)) {
      (cal ? w.calibration : w.stream).push_back(s);
      for (const batch_ref& b : trace.batches_of(s)) {
        const batch_view v = trace.view(b);
        if (cal) {
          calibration.observe(b.layer, v.experts);
        } else {
          w.stream_selections += v.experts.size();
        }
      }
    }
  }
  if (w.calibration.empty() || w.stream.empty()) {
    throw std::runtime_error("the trace needs requests named *-cal-* (calibration) and *-eval-* (stream)");
  }
  calibration.end_interval();
  for (std::size_t l = 0; l < w.layers; ++l) {
    const auto h = calibration.hotness(static_cast<layer_id>(l));
    w.static_hotness.insert(w.static_hotness.end(), h.begin(), h.end());
  }
  return w;
}

budget_case plan_budget(const model_shape& shape, const version_sizes& v, std::uint32_t n, std::size_t staging) {
  const std::uint64_t layers = shape.num_moe_layers(), cells = layers * shape.num_experts;
  // The smallest expert region M − M_res that buys n high versions per layer.
  const auto region = [&](bytes hi, bytes lo) { return cells * lo + layers * n * (hi - lo) + staging * lo; };
  budget_case b{n, {}, {}};
  b.real = plan_precision_budget(
      shape, fp16, low_bits, {.usable_bytes = region(v.high, v.low), .reserved_bytes = 0, .staging_versions = staging});
  b.scaled = plan_precision_budget({.usable_bytes = region(v.high_scaled, v.low_scaled),
                                    .reserved_bytes = 0,
                                    .high_bytes = v.high_scaled,
                                    .low_bytes = v.low_scaled,
                                    .num_layers = layers,
                                    .num_experts = shape.num_experts,
                                    .staging_versions = staging});
  for (const auto* p : {&b.real, &b.scaled}) {
    for (std::uint32_t c : p->capacity) {
      if (c != n)
        throw std::runtime_error("plan_precision_budget gave n_l = " + std::to_string(c) + ", not " +
                                 std::to_string(n));
    }
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

using pipeline = transition_pipeline<host_memcpy_mover, replay_clock>;

// Replays calibration (warm-up) and stream for one budget and policy.
run_result replay(const workload& w, const host_versions& hv, const budget_case& b, const policy_spec& spec,
                  const options& opt, bytes step_cap_scaled) {
  const std::size_t L = w.layers, E = w.experts, cells = L * E;
  const seconds dt = opt.step_ms * 1e-3;
  replay_clock::set(0.0);

  versioned_expert_table table(L, E, {.low = low_version::replaced, .max_readers = 1});
  budget_tracker tracker(b.scaled.expert_bytes);
  block_pool low_pool(hv.sizes.low_scaled, b.scaled.low_pool_blocks, alignment_for(hv.sizes.low_scaled));
  block_pool high_pool(hv.sizes.high_scaled, b.scaled.high_pool_blocks, alignment_for(hv.sizes.high_scaled));
  // Every expert may be in flight at once, so the link's byte cap and the budget bind, not
  // the number of copy slots.
  pipeline pipe(table, tracker, low_pool, high_pool, [&](expert_key k, precision_tier t) { return hv.source(k, t, E); },
                host_memcpy_mover{},
                {.max_in_flight = cells, .max_issue_bytes_per_step = step_cap_scaled, .log_capacity = 2 * cells});
  if (pipe.load_all(precision_tier::low) != residency_load_status::ok) {
    throw std::runtime_error("the budget does not hold every expert's low version");
  }
  std::vector<transition_record> log(2 * cells);
  const auto step_until_idle = [&](std::size_t& passes, auto&& on_records) {
    while (!pipe.idle()) {
      if (++passes > 100000) throw std::runtime_error("the transition pipeline does not drain");
      pipe.step();
      on_records(pipe.drain_log(log));
    }
  };

  // The static set: top-n_l of the calibration hotness, loaded before the stream starts.
  precision_target_selector selector(b.real.capacity, E, spec.target);
  const std::vector<std::uint8_t> none(E, 0);
  for (std::size_t l = 0; l < L; ++l) {
    const auto id = static_cast<layer_id>(l);
    const auto t = selector.select(id, std::span<const double>(w.static_hotness).subspan(l * E, E), none);
    pipe.request(id, t.promote, t.demote);
  }
  std::size_t warm_passes = 0;
  step_until_idle(warm_passes, [](std::size_t) {});
  const std::uint64_t waits_before = pipe.stats().admission_waits;

  // The online policies' hotness EMA has watched the calibration requests, in intervals.
  hotness_estimator hot(L, E, {.alpha = spec.alpha, .counts = interval_counts::share});
  if (spec.online) {
    for (std::size_t p = 0; p < w.calibration.size(); ++p) {
      for (const batch_ref& bt : w.trace->batches_of(w.calibration[p]))
        hot.observe(bt.layer, w.trace->view(bt).experts);
      if ((p + 1) % opt.interval == 0) hot.end_interval();
    }
    if (w.calibration.size() % opt.interval != 0) hot.end_interval();
  }

  run_result r;
  std::uint64_t interval_selections = 0, interval_high = 0, interval_transitions = 0;
  const auto account = [&](std::size_t n, bool after_stream) {
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
  };
  const reader_slot reader = table.register_reader();
  const std::size_t P = w.stream.size();
  for (std::size_t p = 0; p < P; ++p) {
    replay_clock::set(static_cast<double>(p) * dt);
    pipe.step();  // publishes last pass's copies, reclaims, issues within the link's cap
    account(pipe.drain_log(log), false);
    {
      const read_guard guard = reader.pin();  // the pass's window: nothing it resolves is reclaimed
      for (const batch_ref& bt : w.trace->batches_of(w.stream[p])) {
        const batch_view v = w.trace->view(bt);
        const auto target = selector.membership(bt.layer);
        for (expert_id e : v.experts) {
          const bool high = guard.resolve(expert_key{bt.layer, e}).tier == precision_tier::high;
          r.high += high ? 1u : 0u;
          interval_high += high ? 1u : 0u;
          r.in_target += target[e];
        }
        r.selections += v.experts.size();
        interval_selections += v.experts.size();
        if (spec.online) hot.observe(bt.layer, v.experts);
      }
    }
    if ((p + 1) % opt.interval == 0 || p + 1 == P) {
      r.interval_high_share.push_back(interval_selections == 0 ? std::nan("")
                                                               : static_cast<double>(interval_high) /
                                                                     static_cast<double>(interval_selections));
      r.interval_transitions.push_back(interval_transitions);
      interval_selections = interval_high = interval_transitions = 0;
    }
    // An interval ends with this pass; the last pass starts no window, so it selects nothing.
    if (spec.online && (p + 1) % opt.interval == 0 && p + 1 < P) {
      replay_clock::set(static_cast<double>(p + 1) * dt);
      hot.end_interval();
      for (std::size_t l = 0; l < L; ++l) {
        const auto id = static_cast<layer_id>(l);
        const layer_target t = selector.select(id, hot.hotness(id));
        pipe.request(id, t.promote, t.demote);
      }
    }
  }
  std::size_t tail = P;
  step_until_idle(tail, [&](std::size_t n) {
    replay_clock::set(static_cast<double>(tail) * dt);
    account(n, true);
  });
  if (pipe.stats().log_overwritten != 0) throw std::runtime_error("transition log overflowed");
  // Every transition copied one whole scaled version, so the modelled bytes scale back exactly.
  if (r.scaled_moved != r.promotions * hv.sizes.high_scaled + r.demotions * hv.sizes.low_scaled) {
    throw std::runtime_error("the pipeline's bytes moved disagree with its transitions");
  }
  r.admission_waits = pipe.stats().admission_waits - waits_before;
  return r;
}

// Share of the stream's selections that hit each interval's own top-n (the clairvoyant,
// instantaneous bound), and that hit the whole stream's top-n (the best static set in
// hindsight).
struct bound_result {
  double oracle = 0.0, hindsight = 0.0;
  /// The oracle's share in each interval.
  std::vector<double> interval_oracle;
};

bound_result bounds(const workload& w, std::size_t interval, std::uint32_t n) {
  const std::size_t L = w.layers, E = w.experts;
  const auto top_sum = [&](std::vector<std::uint64_t> c) {
    std::sort(c.begin(), c.end(), std::greater<>());
    std::uint64_t s = 0;
    for (std::size_t i = 0; i < n && i < c.size(); ++i) s += c[i];
    return s;
  };
  std::vector<std::uint64_t> window(L * E, 0), whole(L * E, 0);
  std::uint64_t oracle = 0, hindsight = 0, in_window = 0;
  std::vector<double> series;
  const auto flush = [&] {
    std::uint64_t best = 0;
    for (std::size_t l = 0; l < L; ++l) {
      const auto first = window.begin() + static_cast<std::ptrdiff_t>(l * E);
      best += top_sum(std::vector<std::uint64_t>(first, first + static_cast<std::ptrdiff_t>(E)));
    }
    oracle += best;
    series.push_back(in_window == 0 ? std::nan("") : static_cast<double>(best) / static_cast<double>(in_window));
    in_window = 0;
    std::fill(window.begin(), window.end(), std::uint64_t{0});
  };
  for (std::size_t p = 0; p < w.stream.size(); ++p) {
    for (const batch_ref& bt : w.trace->batches_of(w.stream[p])) {
      for (expert_id e : w.trace->view(bt).experts) {
        ++window[static_cast<std::size_t>(bt.layer) * E + e];
        ++whole[static_cast<std::size_t>(bt.layer) * E + e];
        ++in_window;
      }
    }
    if ((p + 1) % interval == 0 || p + 1 == w.stream.size()) flush();
  }
  for (std::size_t l = 0; l < L; ++l) {
    const auto first = whole.begin() + static_cast<std::ptrdiff_t>(l * E);
    hindsight += top_sum(std::vector<std::uint64_t>(first, first + static_cast<std::ptrdiff_t>(E)));
  }
  const auto total = static_cast<double>(w.stream_selections);
  return {static_cast<double>(oracle) / total, static_cast<double>(hindsight) / total, std::move(series)};
}

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
          std::to_string(r.promotions_queued_at_end)};
}

const std::vector<std::string> result_header{
    "high %",       "target %",   "promotions", "demotions", "MB moved", "budget waits", "worst promo delay (passes)",
    "(ms)",         "queued at end"};

policy_spec spec_none(double alpha) { return {"online top-n", true, {.mode = target_hysteresis::none}, alpha}; }
policy_spec spec_margin(double alpha, double margin) {
  return {"online + margin " + fixed(margin, 3), true, {.mode = target_hysteresis::margin, .margin = margin}, alpha};
}
policy_spec spec_slack(double alpha, std::size_t slack) {
  return {"online + rank slack " + std::to_string(slack),
          true,
          {.mode = target_hysteresis::rank_slack, .rank_slack = slack},
          alpha};
}

}  // namespace

result run(const fs::path& path, const options& opt, std::ostream& out) {
  const routing_trace trace = io::read_trace(path);
  const auto shape = examples::preset_for(trace.info());
  if (!shape) throw std::runtime_error(path.string() + ": no model preset matches this trace's model");
  if (shape->num_moe_layers() != trace.info().num_layers) {
    throw std::runtime_error(path.string() + ": the trace's layers do not match the preset " + shape->name);
  }
  const workload w = load(trace);
  const std::size_t E = w.experts;

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

  out << "trace: " << path.string() << '\n'
      << "  model " << shape->name << ", " << w.layers << " layers x " << E << " experts, top-" << trace.info().top_k
      << '\n'
      << "  calibration: " << w.calibration_names.size() << " requests, " << w.calibration.size() << " forward passes ("
      << w.calibration_names.front() << " .. " << w.calibration_names.back() << ")\n"
      << "  stream: " << w.stream_names.size() << " requests, " << w.stream.size() << " forward passes, "
      << w.stream_selections << " expert activations (" << w.stream_names.front() << " .. " << w.stream_names.back()
      << ")\n"
      << "  versions: high FP16 " << v.high << " B, low 4-bit (groups of 128) " << v.low
      << " B per expert; the mechanism's blocks carry them scaled 1:" << v.scale << " (" << v.high_scaled << " B / "
      << v.low_scaled << " B), bytes below are modelled at the real sizes\n"
      << "  time: forward pass modelled (not measured) at " << fixed(opt.step_ms, 3) << " ms; link "
      << fixed(opt.link_gbps, 1) << " GB/s (PCIe Gen5 x16) moves " << fixed(link_bytes / 1e6, 1)
      << " MB per pass = " << fixed(link_bytes / static_cast<double>(v.high), 1) << " FP16 experts; update interval "
      << opt.interval << " passes (" << fixed(opt.step_ms * static_cast<double>(opt.interval), 3) << " ms)\n"
      << "  policy: hotness EMA alpha " << fixed(opt.alpha, 2)
      << " over shares of each layer's selections, warmed on the calibration; margin " << fixed(opt.margin, 3)
      << " (share); rank slack " << opt.slack << " (symmetric)\n";

  std::vector<budget_case> budgets;
  for (std::uint32_t q : {1u, 2u, 3u}) {
    budgets.push_back(plan_budget(*shape, v, static_cast<std::uint32_t>(E * q / 4), opt.staging));
  }
  out << "  budgets (plan_precision_budget: low versions replaced, k = " << opt.staging
      << " staging versions, M_res = 0):\n";
  examples::text_table bt({"budget", "n_l", "expert region MiB", "high MiB", "low MiB", "staging MiB"});
  for (const auto& b : budgets) {
    const auto mib = [](bytes x) { return fixed(static_cast<double>(x) / (1024.0 * 1024.0), 1); };
    bt.add({std::to_string(100 * b.n / E) + "%", std::to_string(b.n) + "/" + std::to_string(E),
            mib(b.real.expert_bytes), mib(b.real.high_region_bytes), mib(b.real.low_region_bytes),
            mib(b.real.staging_bytes)});
  }
  bt.print(out, "    ");

  out << "  bound: share of activations at high precision\n";
  examples::text_table ot({"budget", "oracle (each interval's own top-n_l)", "best static set in hindsight"});
  result res;
  res.interval_passes = opt.interval;
  res.high_experts = budgets[1].n;
  res.experts = E;
  for (const auto& b : budgets) {
    const bound_result br = bounds(w, opt.interval, b.n);
    if (&b == &budgets[1]) res.oracle_high_share = br.interval_oracle;
    ot.add({std::to_string(100 * b.n / E) + "%", fixed(100.0 * br.oracle, 2), fixed(100.0 * br.hindsight, 2)});
  }
  ot.print(out, "    ");

  out << "  policies (high % = activations served at high precision, as resolved through the handles;\n"
         "  target % = activations of experts in the policy's target set, as if transitions were instantaneous):\n";
  std::vector<std::string> head{"budget", "policy"};
  head.insert(head.end(), result_header.begin(), result_header.end());
  examples::text_table pt(head);
  const std::vector<policy_spec> specs{
      {"static (calibration top-n)", false, {.mode = target_hysteresis::none}, opt.alpha},
      spec_none(opt.alpha),
      spec_margin(opt.alpha, opt.margin),
      spec_slack(opt.alpha, opt.slack)};
  for (const auto& b : budgets) {
    for (const auto& s : specs) {
      std::vector<std::string> row{std::to_string(100 * b.n / E) + "%", s.label};
      run_result rr = replay(w, hv, b, s, opt, step_cap);
      const auto cells = result_cells(rr, v, opt.step_ms);
      row.insert(row.end(), cells.begin(), cells.end());
      pt.add(std::move(row));
      if (&b == &budgets[1]) {
        res.policies.push_back({s.label, std::move(rr.interval_high_share), std::move(rr.interval_transitions),
                                static_cast<double>(rr.high) / static_cast<double>(rr.selections)});
      }
    }
  }
  pt.print(out, "    ");

  const budget_case& half = budgets[1];
  out << "  margin sweep at the 50% budget (alpha " << fixed(opt.alpha, 2) << "):\n";
  head = {"margin"};
  head.insert(head.end(), result_header.begin(), result_header.end());
  examples::text_table mt(head);
  for (double m : opt.sweep_margins) {
    std::vector<std::string> row{fixed(m, 3)};
    const auto cells = result_cells(replay(w, hv, half, spec_margin(opt.alpha, m), opt, step_cap), v, opt.step_ms);
    row.insert(row.end(), cells.begin(), cells.end());
    mt.add(std::move(row));
  }
  mt.print(out, "    ");

  out << "  EMA sweep at the 50% budget:\n";
  head = {"alpha", "policy"};
  head.insert(head.end(), result_header.begin(), result_header.end());
  examples::text_table at(head);
  for (double a : opt.sweep_alphas) {
    for (const auto& s : {spec_none(a), spec_margin(a, opt.margin), spec_slack(a, opt.slack)}) {
      std::vector<std::string> row{fixed(a, 2), s.label};
      const auto cells = result_cells(replay(w, hv, half, s, opt, step_cap), v, opt.step_ms);
      row.insert(row.end(), cells.begin(), cells.end());
      at.add(std::move(row));
    }
  }
  at.print(out, "    ");
  out << "  MB moved: promotions x " << v.high << " B + demotions x " << v.low
      << " B (a demotion copies the 4-bit version back in);\n"
         "  budget waits: admissions the budget tracker or a pool refused (backpressure);\n"
         "  delay: from the request at an interval end to publication, over the promotions published while\n"
         "  the stream ran; queued at end: promotions still queued when it ended, published as the pipeline\n"
         "  then runs until idle (their bytes count in MB moved, their delay measures that drain).\n";
  return res;
}

}  // namespace moepolicy::examples::dynaexq
