// `moepolicy report`: every policy family of the library replayed on recorded traces, in one
// run, written as report/index.md with SVG plots beside it.
//
// For each trace (by default every bundled trace and, when ../shared/traces is present,
// the shared Mixtral-8x7B traces):
//   - the trace's shape and requests;
//   - expert activation heatmaps, one SVG per request: a panel per MoE layer, experts down,
//     decode steps across, the gate weight each expert received at each step;
//   - prefill ↔ decode cosine similarity of expert activation counts per layer, one line per
//     request with a prefill (Context-Aware GPU-NDP §3.2);
//   (these two per-request figures show the first `--requests-shown` requests, 32 by
//   default, and say how many they left out; the similarity adds a row over every request);
//   - demand hit ratio against cache capacity (per-layer pools) for every eviction policy of
//     cache/any_eviction_policy.hpp beside Belady's MIN; the sticky LRU and the gated policy
//     admit only predicted experts (CXL-MoE §3), so they hear the hints of CXL-MoE's predictor as the
//     library defines it (`cxl_moe_short_horizon`, the definition `moepolicy replay` uses,
//     printed with the figure); nothing is prefetched (that needs time: the CXL-MoE and
//     edge drivers replay on the timed model);
//   - the timed prefetching table of the reuse_eviction driver (LRU and the gated policy with
//     each predictor, and no prefetch, every transfer on the link) at a quarter of a layer;
//   - the five drivers' comparisons (drivers/*.hpp), their tables verbatim, with plots of the
//     TriMoE per-layer makespan by device and of DynaExq's high-precision share and
//     transitions per interval.
// A family that cannot run on a trace (no model preset matches it, no prefill, …) is listed
// with the reason, in the report and on stderr.
//
// Devices: each family prices on its paper's presets unless `--machine FILE` names others
// (docs/machine.md): a role given there (gpu, cpu, cxl_ndp, dimm_ndp, host_link, cxl_link)
// replaces that device in every family that uses one.
//
// The report holds no timings or absolute paths, so two runs on the same traces write the
// same files (the golden test pins index.md). Progress goes to stderr.
//
// Output (report_output.hpp): the report is written into a fresh folder beside --out, with
// a manifest of its files, and replaces --out only once complete; --out is replaced only
// when it holds nothing but an earlier report's files (else the report refuses, naming
// the others, unless --force).
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "../common/model_match.hpp"
#include "../common/table.hpp"
#include "commands.hpp"
#include "common/data_dir.hpp"
#include "common/driver_main.hpp"
#include "common/trace_input.hpp"
#include "drivers/context_aware_ndp.hpp"
#include "drivers/cxl_prefetch.hpp"
#include "drivers/dynaexq.hpp"
#include "drivers/edge_offload.hpp"
#include "drivers/reuse_eviction.hpp"
#include "drivers/trimoe.hpp"
#include "moepolicy/cache/any_eviction_policy.hpp"
#include "moepolicy/detail/span_meter.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/io/machine_json.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "moepolicy/sim/decode_streams.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "moepolicy/stats/routing_stats.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/summary.hpp"
#include "report/svg.hpp"
#include "report_output.hpp"
#include "report_progress.hpp"
#include "scratch_canonical.hpp"

namespace moepolicy::tool {
namespace {

namespace fs = std::filesystem;
namespace svg = examples::svg;
using examples::fixed;

const fs::path source_dir = MOEPOLICY_SOURCE_DIR;

/// `p` relative to the working directory when it lies below it, so the report names the
/// traces the same wherever the checkout is.
std::string shown(const fs::path& p) {
  const fs::path r = fs::proximate(p);
  return (r.empty() ? p : r).generic_string();
}

/// Every bundled trace, and the shared Mixtral-8x7B and WARP (OLMoE-1B-7B, Kimi-Linear)
/// decode traces when ../shared/traces is there; a shared WARP file whose conversion is
/// bundled (same name, .mtrace) is not reported twice.
std::vector<std::string> default_traces() {
  std::vector<std::string> out;
  const fs::path bundled = examples::bundled_traces_dir(source_dir);
  for (const auto& e : fs::recursive_directory_iterator(bundled)) {
    if (e.is_regular_file() && e.path().extension() == ".mtrace") out.push_back(shown(e.path()));
  }
  std::sort(out.begin(), out.end());
  const fs::path shared = source_dir / ".." / "shared" / "traces" / "mixtral-8x7b-decode";
  if (fs::is_directory(shared)) {
    out.push_back(shown(shared / "humaneval_2_routing.jsonl"));
    out.push_back(shown(shared / "routing_raw.jsonl"));
    const fs::path warp = shared.parent_path() / "warp-olmoe-kimi";
    std::vector<std::string> bundled_stems;
    for (const auto& t : out) bundled_stems.push_back(fs::path(t).stem().string());
    for (const char* name : {"trace_olmoe_299.jsonl", "trace_kimi_300.jsonl"}) {
      const bool is_bundled =
          std::find(bundled_stems.begin(), bundled_stems.end(), fs::path(name).stem().string()) != bundled_stems.end();
      if (!is_bundled && fs::exists(warp / name)) out.push_back(shown(warp / name));
    }
  } else {
    std::cerr << "report: " << shown(shared) << " not found; reporting on the bundled traces only\n";
  }
  return out;
}

/// The shared Mixtral-8x7B quantisation loss table; the context-aware family uses it when
/// its shape matches the trace's.
fs::path loss_table_for() {
  const fs::path p = source_dir / ".." / "shared" / "traces" / "mixtral-8x7b-mc" / "mixtral_quant_loss.json";
  return fs::exists(p) ? fs::path(shown(p)) : fs::path();
}

/// The shared Mixtral-8x7B calibration statistics (C4); the context-aware family uses them
/// when their shape matches the trace's.
fs::path calibration_for() {
  const fs::path p = source_dir / ".." / "shared" / "traces" / "mixtral-8x7b-mc" / "mixtral_c4_expert_activation.json";
  return fs::exists(p) ? fs::path(shown(p)) : fs::path();
}

/// The CPU time of every thread of the process, in seconds.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

/// Progress on stderr: one line per stage with its elapsed time and, for a stage longer
/// than `long_seconds`, the routing rows of its trace per second; while a stage runs, every
/// `every` seconds (0: never) a line with the rows its timed replays have processed out of
/// those they plan, and their rate (report_progress.hpp); at the end of a run longer than
/// `long_seconds`, the rows of all traces per second. With `span`, each stage's line and the
/// run's add their CPU time (every thread's) and their span: the CPU time of the longest
/// chain of work that runs one after another as the stage hands tasks to its pools
/// (detail/span_meter.hpp), so that on P cores a stage cannot take less than
/// max(CPU / P, span). Never in the report itself.
class progress {
 public:
  static constexpr double long_seconds = 2.0;

  progress(std::size_t total, double every, bool span = false)
      : total_(total), every_(every), span_(span), start_(std::chrono::steady_clock::now()) {}
  /// The routing rows of the trace the next stages work on.
  void rows(std::uint64_t n) {
    rows_ = n;
    all_rows_ += n;
  }
  /// What the current stage's timed replays feed (reset as each stage starts).
  [[nodiscard]] replay_progress& meter() noexcept { return meter_; }
  template <class F>
  void stage(const std::string& what, F&& f) {
    ++done_;
    const std::string head = "[" + std::to_string(done_) + "/" + std::to_string(total_) + "] " + what;
    std::cerr << "report: " << head << " ..." << std::flush;
    meter_.rows = 0;
    meter_.total = 0;
    bool ticked = false;  // written by the ticker's thread only, read after it has joined
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = span_ ? process_cpu_seconds() : 0.0;
    std::optional<detail::span_meter> chain;
    if (span_) chain.emplace();
    {
      const progress_ticker ticker(every_, [&](double elapsed) {
        std::cerr << (ticked ? "" : "\n")
                  << progress_line(head, meter_.rows.load(std::memory_order_relaxed),
                                   meter_.total.load(std::memory_order_relaxed), elapsed)
                  << '\n'
                  << std::flush;
        ticked = true;
      });
      f();
    }
    // After periodic lines the stage's line is repeated whole, with its time.
    end_line(ticked ? "report: " + head + " ..." : std::string(), t0, cpu0, chain);
  }
  /// A line printed under the current stage's (from any of the stages that run at once).
  void note(std::string line) {
    const std::lock_guard lock(notes_mutex_);
    notes_.push_back(std::move(line));
  }

  /// Stages `whats` (`run(i)` runs the i-th): one after another as `stage` runs each, or
  /// with `at_once` at the same time, each a task on a thread of its own (which hands out
  /// its own `--jobs` threads' tasks). Each prints its line as it ends, with the time since
  /// the group began and, with `span`, its CPU time and span as its own span meter measures
  /// them (the CPU time of its tasks on every thread: the process's cannot tell the stages
  /// apart); then a line with the group's time, CPU time (the process's) and span, the
  /// longest of theirs. While they run, every `every` seconds a line with the group's time,
  /// how many of its stages have ended and the rows their timed replays have fed the meter
  /// (all of theirs together). `before()` runs first: at once, inside the group's time before
  /// the stages start; one after another, inside the first stage's.
  template <class F, class Before>
  void stages(bool at_once, const std::vector<std::string>& whats, F&& run, Before&& before) {
    if (!at_once) {
      for (std::size_t i = 0; i < whats.size(); ++i) {
        stage(whats[i], [&] {
          if (i == 0) before();
          run(i);
        });
      }
      return;
    }
    const std::size_t first = done_ + 1;
    done_ += whats.size();
    const std::string head = "[" + std::to_string(first) + "-" + std::to_string(done_) + "/" + std::to_string(total_) +
                             "] " + std::to_string(whats.size()) + " stages at once";
    std::cerr << "report: " << head << " ...\n" << std::flush;
    meter_.rows = 0;
    meter_.total = 0;
    const auto t0 = std::chrono::steady_clock::now();
    const double cpu0 = span_ ? process_cpu_seconds() : 0.0;
    std::optional<detail::span_meter> chain;
    if (span_) chain.emplace();
    std::mutex lines;
    std::size_t ended = 0;  // under `lines`
    {
      const progress_ticker ticker(every_, [&](double elapsed) {
        const std::lock_guard lock(lines);
        std::cerr << progress_line(
                         head + " (" + std::to_string(ended) + " of " + std::to_string(whats.size()) + " ended)",
                         meter_.rows.load(std::memory_order_relaxed), meter_.total.load(std::memory_order_relaxed),
                         elapsed)
                  << '\n'
                  << std::flush;
      });
      before();
      // A whole stage on each thread: the stack the main thread would have (8 MiB), not a
      // replay task's 1 MiB.
      detail::task_pool pool(whats.size(), std::size_t{8} << 20);
      pool.for_each(whats.size(), [&](std::size_t i) {
        std::optional<detail::span_meter> own;
        if (span_) own.emplace();
        run(i);
        const double own_span = own ? own->stop() : 0.0;
        const double own_work = own ? own->work() : 0.0;
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
        const std::lock_guard lock(lines);
        ++ended;
        std::cerr << "report: [" << first + i << "/" << total_ << "] " << whats[i] << " ..."
                  << line_tail(dt.count(), own_work, own_span) << std::flush;
      });
    }
    end_line("report: " + head + " ...", t0, cpu0, chain);
  }
  /// The run's rate, when it was long.
  void finish() const {
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - start_;
    if (dt.count() > long_seconds && all_rows_ > 0) {
      std::cerr << "report: " << all_rows_ << " routing rows in " << fixed(dt.count(), 1) << " s"
                << rate(all_rows_, dt.count()) << '\n';
    }
    if (span_) {
      // The stages run one after another: the run's span is the sum of theirs.
      std::cerr << "report: stages' CPU " << fixed(cpu_, 2) << " s, span " << fixed(span_sum_, 2)
                << " s: on P cores no less than max(CPU / P, span)\n";
    }
  }

 private:
  /// Ends the line of a stage, or of stages run at once, that began at `t0` with `cpu0` of
  /// the process's CPU time under `chain` (when `span`): hands back what it freed, prints
  /// `prefix`, its time and rate, and with `span` its CPU time and span, then its notes.
  void end_line(const std::string& prefix, std::chrono::steady_clock::time_point t0, double cpu0,
                std::optional<detail::span_meter>& chain) {
#if defined(__GLIBC__)
    // What the stage freed goes back to the system before the next stage allocates its own:
    // glibc keeps freed heap below its top (and in other threads' arenas) resident, so a
    // stage's peak would otherwise stack on what the stages before it left.
    malloc_trim(0);
#endif
    const double span = chain ? chain->stop() : 0.0;
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    const double cpu = span_ ? process_cpu_seconds() - cpu0 : 0.0;
    cpu_ += cpu;
    span_sum_ += span;
    std::cerr << prefix << line_tail(dt.count(), cpu, span);
    for (const auto& n : notes_) std::cerr << "report:   " << n << '\n';
    notes_.clear();
  }

  /// The end of a stage's line: its time and rate, with `span` its CPU time and span.
  [[nodiscard]] std::string line_tail(double seconds, double cpu, double span) const {
    std::string s = " " + fixed(seconds, 1) + " s" + rate(rows_, seconds);
    if (span_) s += "; CPU " + fixed(cpu, 2) + " s, span " + fixed(span, 2) + " s";
    return s + '\n';
  }

  [[nodiscard]] static std::string rate(std::uint64_t rows, double seconds) {
    if (!(seconds > long_seconds) || rows == 0) return {};
    return ", " + std::to_string(std::llround(static_cast<double>(rows) / seconds)) + " rows/s";
  }

  std::size_t total_ = 0, done_ = 0;
  double every_ = 0.0;
  bool span_ = false;
  double cpu_ = 0.0, span_sum_ = 0.0;
  std::chrono::steady_clock::time_point start_;
  std::uint64_t rows_ = 0, all_rows_ = 0;
  std::vector<std::string> notes_;
  std::mutex notes_mutex_;
  replay_progress meter_;
};

/// A file name made of the safe characters of `s`.
std::string slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    const bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.';
    out += ok ? c : '_';
  }
  return out.empty() ? std::string("trace") : out;
}

void write_file(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary);
  f << text;
  f.close();
  if (!f) throw std::runtime_error("report: cannot write " + p.string());
}

std::string pct(double r) { return fixed(100.0 * r, 2) + "%"; }

/// Devices of every family: the papers' presets, with the machine's roles in their place.
struct family_devices {
  examples::context_aware_ndp::options context_aware;
  examples::trimoe::options trimoe;
  examples::cxl_prefetch::options cxl;
  examples::edge_offload::options edge;
  std::string description;  // Markdown
};

std::string device_line(const device_spec& d) {
  std::string s = d.name + ": " + fixed(d.compute.peak_flops / tera, 1) + " TFLOP/s, " +
                  fixed(d.compute.memory_bandwidth / giga, 1) + " GB/s memory";
  if (d.num_units > 1) s += ", " + std::to_string(d.num_units) + " units";
  if (std::isfinite(d.weight_link.bandwidth))
    s += ", weights in at " + fixed(d.weight_link.bandwidth / giga, 1) + " GB/s";
  return s;
}

family_devices devices_for(const std::string& machine_path) {
  family_devices f;
  std::ostringstream md;
  if (machine_path.empty()) {
    md << "Devices: each family on its paper's presets (`include/moepolicy/cost/presets.hpp`).\n\n";
  } else {
    const io::machine_description m = io::read_machine(machine_path);
    md << "Devices: `" << machine_path << "`" << (m.name.empty() ? std::string() : " (" + m.name + ")")
       << "; roles it does not give keep each family's paper preset.\n\n";
    if (m.gpu) {
      f.context_aware.gpu = *m.gpu;
      f.trimoe.gpu = *m.gpu;
      f.cxl.cxl_gpu = *m.gpu;
      f.cxl.pcie_gpu = *m.gpu;
      f.edge.gpu = *m.gpu;
    }
    if (m.cpu) {
      f.trimoe.cpu = *m.cpu;
      f.edge.cpu = *m.cpu;
    }
    if (m.cxl_ndp) f.context_aware.ndp = *m.cxl_ndp;
    if (m.dimm_ndp) f.trimoe.ndp = *m.dimm_ndp;
    if (m.cxl_link) f.cxl.cxl_gpu.weight_link = *m.cxl_link;
    if (m.host_link) f.cxl.pcie_gpu.weight_link = *m.host_link;
    if (m.gpu && !m.cxl_link) f.cxl.cxl_gpu.weight_link = presets::cxl2_x16;
    if (m.gpu && !m.host_link) f.cxl.pcie_gpu.weight_link = presets::host_pcie5_effective;
  }
  md << "| family | devices |\n|---|---|\n";
  md << "| context-aware GPU + CXL-NDP (Context-Aware GPU-NDP) | " << device_line(f.context_aware.gpu) << "; "
     << device_line(f.context_aware.ndp) << " |\n";
  md << "| TriMoE GPU + CPU + DIMM-NDP | " << device_line(f.trimoe.gpu) << "; " << device_line(f.trimoe.cpu) << "; "
     << device_line(f.trimoe.ndp) << " |\n";
  md << "| CXL-MoE caching | " << device_line(f.cxl.cxl_gpu) << "; " << device_line(f.cxl.pcie_gpu) << " |\n";
  md << "| Edge-MoE edge offload | "
     << (f.edge.gpu ? device_line(*f.edge.gpu) : std::string("the paper's three settings (Tab. 1)")) << "; "
     << (f.edge.cpu ? device_line(*f.edge.cpu) : std::string("6 cores of a Ryzen 9 5900X")) << " |\n";
  md << "| DynaExq residency (DynaExq) | modelled link and pass time (see its section) |\n\n";
  f.description = md.str();
  return f;
}

// ---------------------------------------------------------------------------------------
// Plots computed from the trace itself.

/// The heatmap of request `r` of `t`: panels per layer, experts × decode steps of gate
/// weight (empty when it has no decode steps). When L·E·S cells would exceed what one SVG
/// may hold (`svg::max_heatmap_cells`), consecutive decode steps share a column, which shows
/// their mean gate weight, and the labels say how many.
std::string activation_heatmap(const routing_trace& t, const request_ref& r) {
  const trace_info& info = t.info();
  const std::size_t L = info.num_layers, E = info.num_experts;
  std::vector<step_ref> decode;
  for (const step_ref& s : t.steps_of(r)) {
    if (s.kind == phase::decode) decode.push_back(s);
  }
  if (decode.empty()) return {};
  const std::size_t S = decode.size();
  const std::size_t per_column = (L * E * S + svg::max_heatmap_cells - 1) / svg::max_heatmap_cells;
  const std::size_t C = (S + per_column - 1) / per_column;
  svg::heatmap_grid_spec spec;
  spec.title = "Expert activations of " + r.name + " (" + std::to_string(S) + " decode steps" +
               (per_column > 1 ? ", " + std::to_string(per_column) + " per column" : std::string()) + ")";
  spec.x_label = per_column > 1 ? "decode steps (mean of " + std::to_string(per_column) + " per column)"
                                : std::string("decode step");
  spec.y_label = "expert";
  spec.value_label = per_column > 1 ? "mean gate weight" : "gate weight";
  spec.panels.resize(L);
  for (std::size_t l = 0; l < L; ++l) {
    spec.panels[l].title = "layer " + std::to_string(l);
    spec.panels[l].values.assign(E, std::vector<double>(C, 0.0));
  }
  for (std::size_t j = 0; j < S; ++j) {
    const std::size_t c = j / per_column;
    const std::size_t in_column = std::min(per_column, S - c * per_column);
    for (const batch_ref& b : t.batches_of(decode[j])) {
      const batch_view v = t.view(b);
      auto& m = spec.panels[b.layer].values;
      for (std::size_t i = 0; i < v.experts.size(); ++i) {
        m[v.experts[i]][c] +=
            (v.weights.empty() ? 1.0 : static_cast<double>(v.weights[i])) / static_cast<double>(in_column);
      }
    }
  }
  return svg::heatmap_grid(spec);
}

/// The most heatmaps drawn at once. An SVG of a long request is up to about 2.4 MB and is
/// held up to about three times over while it is built (its string grown by doubling, the
/// grid's pieces): drawn on 16 threads at once, they took the 10⁶-row report's peak to
/// 141.0 MB by the end of their stage (62.6 MB drawn four at a time) and the 10⁷-row
/// report's to 1.63 times the file, for a stage of under 0.5 s.
inline constexpr std::size_t max_heatmaps_at_once = 4;

/// One heatmap per request with decode steps (`activation_heatmap`), for the first `shown`
/// of them in trace order: calls `each(request name, svg)` for each, in order, and returns
/// how many requests have decode steps. The heatmaps are drawn min(`jobs`,
/// `max_heatmaps_at_once`) requests at a time, one task each, so that at most that many SVGs
/// are held at once rather than one per request.
template <class Each>
std::size_t activation_heatmaps(const routing_trace& t, std::size_t jobs, std::size_t shown, Each&& each) {
  std::vector<const request_ref*> requests;
  for (const request_ref& r : t.requests()) {
    const auto steps = t.steps_of(r);
    if (std::any_of(steps.begin(), steps.end(), [](const step_ref& s) { return s.kind == phase::decode; }))
      requests.push_back(&r);
  }
  const std::size_t drawn = std::min(shown, requests.size());
  std::vector<std::string> svgs(std::max<std::size_t>(1, std::min({jobs, max_heatmaps_at_once, drawn})));
  detail::task_pool pool(svgs.size());
  for (std::size_t first = 0; first < drawn; first += svgs.size()) {
    const std::size_t n = std::min(svgs.size(), drawn - first);
    pool.for_each(n, [&](std::size_t i) { svgs[i] = activation_heatmap(t, *requests[first + i]); });
    for (std::size_t i = 0; i < n; ++i) {
      each(requests[first + i]->name, svgs[i]);
      std::string().swap(svgs[i]);
    }
  }
  return requests.size();
}

struct similarity_data {
  std::vector<std::string> requests;
  std::vector<std::vector<double>> per_layer;  // NaN where a phase has no activation
};

similarity_data prefill_decode_similarity(const routing_trace& t) {
  const trace_info& info = t.info();
  similarity_data d;
  routing_stats_collector c(info.num_layers, info.num_experts);
  for (const request_ref& r : t.requests()) {
    c.reset();
    bool prefill = false, decode = false;
    for (const step_ref& s : t.steps_of(r)) {
      (s.kind == phase::prefill ? prefill : decode) = true;
      for (const batch_ref& b : t.batches_of(s)) c.observe(t.view(b));
    }
    if (!prefill || !decode) continue;
    d.requests.push_back(r.name);
    d.per_layer.push_back(layer_cosine_similarity(c.counts(phase::prefill), c.counts(phase::decode)));
  }
  return d;
}

struct hit_ratio_data {
  std::vector<std::uint64_t> capacities;   // per layer
  std::vector<std::string> policies;       // the last one is Belady
  std::vector<std::vector<double>> ratio;  // [policy][capacity]
  std::uint64_t accesses = 0;
  std::string hints;  // the sticky LRU's predictor
};

/// Capacities per layer pool: every one up to 16 experts, else 16 evenly spaced ones.
std::vector<std::uint64_t> capacity_points(std::uint32_t E) {
  std::vector<std::uint64_t> c;
  if (E <= 16) {
    for (std::uint64_t i = 1; i <= E; ++i) c.push_back(i);
  } else {
    for (std::uint64_t i = 1; i <= 16; ++i) c.push_back(std::max<std::uint64_t>(1, (i * E + 8) / 16));
    c.erase(std::unique(c.begin(), c.end()), c.end());
  }
  return c;
}

/// One deque of caches per shipped policy type, in the order of `any_eviction_config`.
template <std::size_t... I>
auto caches_by_policy_of(std::index_sequence<I...>)
    -> std::tuple<std::deque<expert_cache<std::variant_alternative_t<I, any_eviction_policy::variant_type>>>...>;
using caches_by_policy =
    decltype(caches_by_policy_of(std::make_index_sequence<std::variant_size_v<any_eviction_config>>{}));

/// Calls `f(std::integral_constant<std::size_t, I>{})` for each alternative I of
/// `any_eviction_config` (the name table's order).
template <class F>
void for_each_policy_index(F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) { (f(std::integral_constant<std::size_t, I>{}), ...); }
  (std::make_index_sequence<std::variant_size_v<any_eviction_config>>{});
}

/// Whether a cache of policy `P` with configuration `c` caches every miss when caching it
/// evicts nothing: then a pool that holds all its layer's experts never evicts, and its
/// hits are every access but each expert's first, whatever the policy — the LRU curve's
/// hits at that capacity. True without admission; with it, for the policies whose `admit`
/// returns true when `must_evict` is false (Belady's MIN, Hawkeye, pred-reuse, and the gated
/// policy unless `gate_free_room`); not for the sticky LRU, whose gate holds always.
template <class P>
bool caches_misses_with_room(const typename P::config_type& c) {
  if constexpr (!policy_traits<P>::has_admission) {
    return true;
  } else if constexpr (std::is_same_v<P, belady_policy> || std::is_same_v<P, hawkeye_policy> ||
                       std::is_same_v<P, predicted_reuse_policy>) {
    return true;
  } else if constexpr (std::is_same_v<P, gated_prefetch_policy>) {
    return !c.gate_free_room;
  } else {
    static_cast<void>(c);
    return false;
  }
}

hit_ratio_data hit_ratios(const routing_trace& t, std::size_t jobs) {
  const trace_info& info = t.info();
  hit_ratio_data d;
  d.capacities = capacity_points(info.num_experts);
  // The next uses Belady's MIN reads, the same at every capacity: indexed once and rebuilt
  // a chunk at a time as the walk goes (`next_use_index`), a few bytes per key and chunk
  // held rather than 8 bytes per access beside the whole trace. No policy that hears the
  // predictor's hints reads the future.
  const auto keys = static_cast<std::uint64_t>(info.num_layers) * info.num_experts;
  const next_use_index next_uses(t, cache_replay_config{},
                                 next_use_index::balanced_chunk_accesses(t.num_rows() * info.top_k, keys));
  d.accesses = next_uses.accesses();
  const short_horizon_config hints = cxl_moe_short_horizon(info.num_layers, info.num_experts, info.top_k);
  d.hints = describe(hints);
  const auto config_at = [&](std::uint64_t c) {
    return cache_config{.num_layers = info.num_layers,
                        .num_experts = info.num_experts,
                        .capacity = c,
                        .scope = capacity_scope::per_layer};
  };
  // Every cache of a policy at every capacity in one walk: LRU from one stack-distance
  // pass (exactly its hits at every capacity), the policies that hear the predictor's hints
  // in one walk sharing one predictor, each other policy (Belady among them) in its own. Each
  // policy's caches keep their own type, so no event goes through `any_eviction_policy`'s
  // dispatch. Not replayed, their hits being known: a pool holding every expert of its
  // layer, for a policy that caches every miss with room (`caches_misses_with_room`), and
  // size-aware at its defaults, which with every expert weighing one slot decides exactly
  // as pred-reuse (cache/size_aware_reuse.hpp; its test checks the two replays agree).
  const auto sticky = [](std::string_view name) { return name == "sticky-lru" || name == "gated-prefetch"; };
  constexpr std::size_t num_policies = std::variant_size_v<any_eviction_config>;
  constexpr std::size_t size_aware = 9, pred_reuse = 7;
  static_assert(std::is_same_v<std::variant_alternative_t<size_aware, any_eviction_config>, size_aware_reuse_config> &&
                std::is_same_v<std::variant_alternative_t<pred_reuse, any_eviction_config>, predicted_reuse_config>);
  const auto& sa = std::get<size_aware>(eviction_policies[size_aware].defaults);
  const auto& pr = std::get<pred_reuse>(eviction_policies[pred_reuse].defaults);
  const bool size_aware_as_pred_reuse = sa.footprints.empty() && sa.smoothing == pr.smoothing && !pr.bypass;
  std::array<std::vector<bool>, num_policies> replayed;  // [policy][capacity]
  caches_by_policy plain, hinted;
  const auto fill = [&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    const auto& e = eviction_policies[I];
    replayed[I].assign(d.capacities.size(), false);
    if (e.name == "lru" || (I == size_aware && size_aware_as_pred_reuse)) return;
    using policy = std::variant_alternative_t<I, any_eviction_policy::variant_type>;
    const bool with_room = caches_misses_with_room<policy>(std::get<I>(e.defaults));
    auto& set = std::get<I>(sticky(e.name) ? hinted : plain);
    for (std::size_t i = 0; i < d.capacities.size(); ++i) {
      const std::uint64_t c = d.capacities[i];
      if (with_room && c >= info.num_experts) continue;
      set.emplace_back(config_at(c), std::get<I>(e.defaults));
      replayed[I][i] = true;
    }
  };
  for_each_policy_index(fill);
  // The walks are independent, each a task on `jobs` threads: the policies that hear the
  // hints together (they share one predictor), each other policy on its own (a walk's own
  // cost, reading the trace, is about the LRU curve's, 1% of the stage), Belady's MIN (the
  // only one that reads the next uses) first, and the LRU curve last.
  constexpr std::size_t hinted_walk = num_policies, lru_walk = num_policies + 1;
  std::vector<std::size_t> walks;  // a policy walked on its own, `hinted_walk` or `lru_walk`
  for_each_policy_index([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    if (!std::get<I>(plain).empty()) walks.push_back(I);
  });
  const auto belady =
      std::find_if(walks.begin(), walks.end(), [](std::size_t I) { return eviction_policies[I].name == "belady"; });
  if (belady != walks.end()) std::rotate(walks.begin(), belady, belady + 1);
  walks.insert(walks.begin() + (walks.empty() ? 0 : 1), hinted_walk);
  walks.push_back(lru_walk);
  hit_curve lru;
  detail::task_pool pool(std::min(jobs, walks.size()));
  pool.for_each(walks.size(), [&](std::size_t i) {
    const std::size_t w = walks[i];
    if (w == hinted_walk) {
      short_horizon_predictor p(hints);
      std::apply([&](auto&... set) { static_cast<void>(replay_caches_with_hints(t, {}, {}, p, set...)); }, hinted);
      return;
    }
    if (w == lru_walk) {
      lru = lru_hit_curve(t, cache_shape{info.num_layers, info.num_experts, capacity_scope::per_layer});
      return;
    }
    for_each_policy_index([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
      if (I != w) return;
      auto& set = std::get<I>(plain);
      if (eviction_policies[I].name == "belady") {
        static_cast<void>(replay_caches(t, {}, next_uses, set));
      } else {
        static_cast<void>(replay_caches(t, {}, std::span<const std::uint64_t>{}, set));  // none reads ahead
      }
    });
  });
  std::array<std::vector<double>, num_policies> by_policy;
  for_each_policy_index([&]<std::size_t I>(std::integral_constant<std::size_t, I>) {
    std::vector<double> ran;
    for (const auto* set : {&std::get<I>(plain), &std::get<I>(hinted)}) {
      for (const auto& c : *set) ran.push_back(c.stats().hit_ratio());
    }
    std::size_t next = 0;
    for (std::size_t i = 0; i < d.capacities.size(); ++i) {
      by_policy[I].push_back(replayed[I][i] ? ran[next++] : lru.hit_ratio(d.capacities[i]));
    }
  });
  if (size_aware_as_pred_reuse) by_policy[size_aware] = by_policy[pred_reuse];
  for (std::size_t i = 0; i < eviction_policies.size(); ++i) {
    const auto& e = eviction_policies[i];
    if (e.name == "belady") continue;
    // The policies whose admission reads the predictor's flags hear its hints.
    d.policies.push_back(sticky(e.name) ? std::string(e.name) + " + predictor hints" : std::string(e.name));
    d.ratio.push_back(by_policy[i]);
  }
  d.policies.emplace_back("Belady (MIN)");
  d.ratio.push_back(by_policy[num_policies - 1]);
  return d;
}

/// Labels of the TriMoE systems, in `trimoe_system` order.
constexpr const char* trimoe_labels[num_trimoe_systems] = {
    "GPU-only (Klotski-like)",      "GPU+CPU (En-KTransformers-like)",
    "GPU+NDP (MoNDE-like)",         "TriMoE +CPU (greedy)",
    "TriMoE +Refinement",           "TriMoE +Relayout",
    "+Relayout, benefit rule",      "+Relayout, improved solver",
    "+Relayout, exact Eq. 7 solver"};

/// TriMoE: each system's timed span per MoE layer, with the lower bound on +Relayout's.
std::string trimoe_makespan_plot(const examples::trimoe::result& r) {
  svg::line_chart_spec spec;
  spec.title = "Time per MoE layer of a batched decode step on the timeline (B = " + std::to_string(r.batch) + ")";
  spec.x_label = "MoE layer";
  spec.y_label = "attention start to last result back, ms per step";
  for (std::size_t k = 0; k < num_trimoe_systems; ++k) {
    if (!r.systems[k].ran) continue;
    svg::series line{trimoe_labels[k], {}, {}};
    for (std::size_t l = 0; l < r.systems[k].layers.size(); ++l) {
      line.x.push_back(static_cast<double>(l));
      line.y.push_back(r.systems[k].layers[l].span * 1e3);
    }
    spec.lines.push_back(std::move(line));
  }
  svg::series bound{"lower bound on +Relayout's layer time", {}, {}};
  for (std::size_t l = 0; l < r.layer_bound.size(); ++l) {
    bound.x.push_back(static_cast<double>(l));
    bound.y.push_back(r.layer_bound[l] * 1e3);
  }
  bound.style = svg::line_style::dashed;
  spec.lines.push_back(std::move(bound));
  return svg::line_chart(spec);
}

/// TriMoE: busy time of each device per MoE layer, for each system (the devices run in
/// parallel, so a layer's makespan is its tallest segment, not the stack).
std::string trimoe_device_plot(const examples::trimoe::result& r) {
  const trimoe_system shown_systems[] = {
      trimoe_system::gpu_only, trimoe_system::gpu_cpu,          trimoe_system::gpu_ndp, trimoe_system::refined,
      trimoe_system::relayout, trimoe_system::relayout_benefit, trimoe_system::improved};
  svg::stacked_bars_spec spec;
  spec.title =
      "Demand busy time per device and MoE layer (devices run in parallel: a layer takes at least its largest "
      "segment)";
  spec.x_label = "MoE layer";
  spec.y_label = "ms per step";
  spec.segments = {"GPU", "CPU", "NDP (busiest DIMM)"};
  for (trimoe_system k : shown_systems) {
    if (r[k].ran) spec.bars.emplace_back(trimoe_labels[static_cast<std::size_t>(k)]);
  }
  for (std::size_t l = 0; l < r.num_layers; ++l) {
    spec.categories.push_back(std::to_string(l));
    std::vector<std::vector<double>> bars;
    for (trimoe_system k : shown_systems) {
      if (!r[k].ran) continue;
      const trimoe_layer_times& t = r[k].layers[l];
      bars.push_back({t.gpu * 1e3, t.cpu * 1e3, t.max_dimm * 1e3});
    }
    spec.values.push_back(std::move(bars));
  }
  return svg::stacked_bars(spec);
}

/// The x axis of DynaExq's series: interval ends, or the ends of each point's last interval
/// when a point merges several (a long stream: `dynaexq::options::series_points`).
std::string residency_time_label(const examples::dynaexq::stream_result& st) {
  return st.intervals_per_point == 1
             ? "modelled time of the stream, ms (interval ends)"
             : "modelled time of the stream, ms (ends of each " + std::to_string(st.intervals_per_point) +
                   " intervals: one point each, of " + std::to_string(st.intervals) + " intervals)";
}

/// DynaExq's per-interval high-precision share of each policy on one serving stream,
/// beside the oracle.
std::string residency_share_plot(const examples::dynaexq::result& r, const examples::dynaexq::stream_result& st) {
  svg::line_chart_spec spec;
  spec.title = "Share of activations served at high precision, " + st.name + " stream, budget " +
               std::to_string(r.high_experts) + " of " + std::to_string(r.experts) + " experts per layer";
  spec.x_label = residency_time_label(st);
  spec.y_label = "high-precision share";
  spec.y_range = svg::value_range{0.0, 1.0};
  for (const auto& p : st.policies) {
    svg::series line{p.label, {}, {}};
    for (std::size_t i = 0; i < p.high_share.size() && i < st.interval_end_ms.size(); ++i) {
      line.x.push_back(st.interval_end_ms[i]);
      line.y.push_back(p.high_share[i]);
    }
    spec.lines.push_back(std::move(line));
  }
  svg::series oracle{"oracle (each interval's own top-n)", {}, {}};
  for (std::size_t i = 0; i < st.oracle_high_share.size() && i < st.interval_end_ms.size(); ++i) {
    oracle.x.push_back(st.interval_end_ms[i]);
    oracle.y.push_back(st.oracle_high_share[i]);
  }
  oracle.style = svg::line_style::dashed;
  spec.lines.push_back(std::move(oracle));
  return svg::line_chart(spec);
}

/// DynaExq's promotions and demotions per interval on one serving stream, each policy.
std::string residency_churn_plot(const examples::dynaexq::stream_result& st) {
  svg::line_chart_spec spec;
  spec.title = "Precision transitions (promotions + demotions) published per interval, " + st.name + " stream";
  spec.x_label = residency_time_label(st);
  spec.y_label =
      st.intervals_per_point == 1 ? "transitions" : "transitions per interval (mean of each point's intervals)";
  for (const auto& p : st.policies) {
    svg::series line{p.label, {}, {}};
    for (std::size_t i = 0; i < p.transitions.size() && i < st.interval_end_ms.size(); ++i) {
      line.x.push_back(st.interval_end_ms[i]);
      line.y.push_back(p.transitions[i]);
    }
    spec.lines.push_back(std::move(line));
  }
  return svg::line_chart(spec);
}

// ---------------------------------------------------------------------------------------

/// Runs `f(out)` and returns what it printed, or the reason it could not run.
struct section_text {
  bool ok = true;
  std::string text;
};

/// Stages `whats` whose `bodies` each write a section of the page apart, run by
/// `bar.stages` (at once or one after another, `before` first), and their sections joined in
/// order.
template <class Before>
std::string sections(progress& bar, bool at_once, const std::vector<std::string>& whats,
                     const std::vector<std::function<void(std::ostream&)>>& bodies, Before&& before) {
  std::vector<std::ostringstream> parts(bodies.size());
  bar.stages(
      at_once, whats, [&](std::size_t i) { bodies[i](parts[i]); }, std::forward<Before>(before));
  std::string joined;
  for (const auto& part : parts) joined += part.str();
  return joined;
}

template <class F>
section_text capture(progress& bar, const std::string& family, F&& f) {
  std::ostringstream os;
  try {
    f(os);
    return {true, os.str()};
  } catch (const std::exception& e) {
    bar.note(family + " did not run: " + e.what());
    return {false, e.what()};
  }
}

void code_block(std::ostream& md, const section_text& s) {
  if (!s.ok) {
    md << "Not run on this trace: " << s.text << "\n\n";
    return;
  }
  md << "```text\n" << s.text << (s.text.empty() || s.text.back() == '\n' ? "" : "\n") << "```\n\n";
}

/// `p` when it is one canonical trace file, else empty.
fs::path canonical_path(const fs::path& p) {
  std::error_code ec;
  const bool canonical = fs::is_regular_file(p, ec) && examples::is_canonical_trace(p);
  return canonical ? p : fs::path();
}

/// Decode streams formed from a canonical file's map in place of the trace read whole,
/// for the families that read nothing else of the trace but its recorded prefills, and
/// shared by them.
class stream_source {
 public:
  /// Call once before `former()`. When `file` names a canonical file (the trace's own, or
  /// its scratch copy), replaces `trace` (read whole from it) by its prefill steps alone
  /// (`prefill_steps`), so that the streams are formed from the file's map and held without
  /// the whole trace beside them; else they are formed from `trace`, which stays whole.
  /// Each set of streams is formed on up to `jobs` threads.
  void prepare(std::optional<routing_trace>& trace, const fs::path& file, std::size_t jobs) {
    if (file.empty()) {
      trace_ = &*trace;
    } else {
      file_ = file;
      mapped_.emplace(file, canonical_file::access::copy);
      trace.reset();
      trace.emplace(prefill_steps(*mapped_));
    }
    shared_.emplace([this, jobs](const decode_streams_config& c) {
      if (trace_ != nullptr) return make_decode_streams(*trace_, c, jobs);
      if (!whole_ && !source_) {
        source_ = file_decode_streams::open(*mapped_);
        if (!source_) whole_ = examples::load_trace(file_);
      }
      return source_ ? source_->form(c, jobs) : make_decode_streams(*whole_, c, jobs);
    });
  }
  /// `streams(c)`: decode streams from the file's map (from the file read whole where its
  /// columns cannot be used in place), or from the trace; empty before `prepare`. The file's
  /// walks that do not depend on B are done at the first call, for every family's streams.
  /// The families share them (`shared_decode_streams`): a configuration's streams are formed
  /// once while any family holds them (CXL-MoE's and Edge-MoE's B = 1, run at once), and one
  /// configuration's streams are held at a time, as when the families run one after another
  /// (a set of streams costs about as much memory as the trace). Safe to call from the
  /// families' threads at once.
  [[nodiscard]] std::function<std::shared_ptr<const decode_streams>(const decode_streams_config&)> former() {
    if (!shared_) return {};
    return [this](const decode_streams_config& c) { return shared_->acquire(c); };
  }

 private:
  const routing_trace* trace_ = nullptr;
  fs::path file_;
  std::optional<canonical_file> mapped_;
  std::optional<file_decode_streams> source_;
  std::optional<routing_trace> whole_;
  std::optional<shared_decode_streams> shared_;  // last: its handles go before what forms them
};

void write_report(const report_options& o) {
#if defined(__GLIBC__)
  // Freed memory at the top of each thread's arena goes back to the system above 128 KiB.
  // Otherwise glibc raises that threshold (to twice the largest block it has mapped and
  // freed, up to 64 MiB) and keeps up to that much per arena, where `malloc_trim` between
  // stages does not reach (it trims the main arena's top only): on sixteen threads the
  // TriMoE stage's replayers left about 30 MB for the next stages to stack on (the 10⁷-row
  // report peaked at 1.41 times the file, 1.24 with this). Measured at 10⁶ rows on two
  // threads, the CPU is within the runs' noise.
  mallopt(M_TRIM_THRESHOLD, 128 * 1024);
#endif
  // Written into a fresh folder beside --out, which takes its place once complete.
  staged_report_dir staged(o.out, o.force);
  const fs::path out = staged.path();
  const family_devices dev = devices_for(o.machine);

  std::ostringstream md;
  md << "# moepolicy report\n\n"
     << "Every policy family replayed on recorded routing traces by `moepolicy report`; the tables are the drivers' "
        "outputs (examples/), the plots are SVG files beside this page.\n\n"
     << dev.description;

  constexpr std::size_t stages_per_trace = 10;
  progress bar(o.traces.size() * stages_per_trace, o.progress_every, o.span);
  std::vector<std::string> used;
  for (const auto& trace_path : o.traces) {
    const fs::path path = trace_path;
    std::string name =
        slug(path.has_stem() && !fs::is_directory(path) ? path.stem().string() : path.filename().string());
    while (std::find(used.begin(), used.end(), name) != used.end()) name += "_";
    used.push_back(name);
    const fs::path dir = out / name;
    fs::create_directories(dir);

    std::optional<routing_trace> trace;
    bar.rows(0);  // unknown until read
    // A routing JSONL or CSV file is read from the scratch canonical file it is first
    // written as (scratch_canonical.hpp), at the canonical rows' size; the drivers below
    // take the trace read here. The scratch file is kept for the trace's last two
    // families, which form their decode streams from it (`stream_source::prepare`).
    std::unique_ptr<scratch_file> scratch;
    bar.stage(name + ": reading " + trace_path, [&] {
      scratch = scratch_canonical({path}, "report");
      trace = scratch ? examples::load_trace(scratch->path()) : examples::load_trace(path);
    });
    // A copy: the trace read whole is released before the last two families.
    const trace_info info = trace->info();
    const trace_summary sum = summarize(*trace);
    bar.rows(sum.rows);
    const auto shape = examples::preset_for(info);

    md << "## " << name << "\n\n"
       << "`" << trace_path << "`: " << (info.model.empty() ? std::string("model not recorded") : info.model) << "; "
       << info.num_layers << " MoE layers x " << info.num_experts << " experts, top-" << info.top_k << "; "
       << sum.requests.size() << " request(s), " << trace->steps().size() << " steps, " << sum.rows
       << " rows; tokens: prefill " << sum.prefill_tokens << ", decode " << sum.decode_tokens
       << "; model preset: " << (shape ? shape->name : std::string("none (the priced families do not run)")) << ".\n\n";

    // Heatmaps.
    bar.stage(name + ": activation heatmaps", [&] {
      md << "### Expert activations over decode steps\n\n";
      const std::size_t with_decode =
          activation_heatmaps(*trace, o.jobs, o.requests_shown, [&](const std::string& req, const std::string& svg) {
            const std::string file = "activations-" + slug(req) + ".svg";
            write_file(dir / file, svg);
            md << "![activations of " << req << "](" << name << "/" << file << ")\n\n";
          });
      if (with_decode == 0) {
        md << "No request has decode steps.\n\n";
      } else if (with_decode > o.requests_shown) {
        md << "Heatmaps of the first " << o.requests_shown << " of the " << with_decode
           << " requests with decode steps (`--requests-shown` sets how many).\n\n";
      }
    });

    // Similarity.
    bar.stage(name + ": prefill <-> decode similarity", [&] {
      const similarity_data s = prefill_decode_similarity(*trace);
      md << "### Prefill <-> decode similarity per layer\n\n";
      if (s.requests.empty()) {
        md << "No request has both prefill and decode steps.\n\n";
        return;
      }
      svg::line_chart_spec spec;
      spec.title = "Prefill <-> decode cosine similarity of expert activations";
      spec.x_label = "MoE layer";
      spec.y_label = "cosine similarity";
      spec.y_range = svg::value_range{0.0, 1.0};
      const std::size_t shown = std::min(o.requests_shown, s.requests.size());
      for (std::size_t i = 0; i < shown; ++i) {
        svg::series line{s.requests[i], {}, {}};
        for (std::size_t l = 0; l < s.per_layer[i].size(); ++l) {
          line.x.push_back(static_cast<double>(l));
          line.y.push_back(s.per_layer[i][l]);
        }
        spec.lines.push_back(std::move(line));
      }
      if (shown != 0) {
        write_file(dir / "similarity.svg", svg::line_chart(spec));
        md << "![prefill-decode similarity](" << name << "/similarity.svg)\n\n";
      }
      md << "| request | mean over layers | min layer | max layer |\n|---|---:|---:|---:|\n";
      // Every request's figures, its row only for the first `shown`; beyond them a row over
      // all: the mean of their means, the lowest layer and the highest of any.
      std::vector<double> means, mins, maxes;
      for (std::size_t i = 0; i < s.requests.size(); ++i) {
        const defined_summary d = summarize_defined(s.per_layer[i]);
        means.push_back(d.mean);
        mins.push_back(d.min);
        maxes.push_back(d.max);
        if (i >= shown) continue;
        md << "| " << s.requests[i] << " | " << fixed(d.mean, 3) << " | " << fixed(d.min, 3) << " | " << fixed(d.max, 3)
           << " |\n";
      }
      if (s.requests.size() > shown) {
        md << "| all " << s.requests.size() << " requests | " << fixed(summarize_defined(means).mean, 3) << " | "
           << fixed(summarize_defined(mins).min, 3) << " | " << fixed(summarize_defined(maxes).max, 3) << " |\n\n"
           << "Lines and rows of the first " << shown << " of the " << s.requests.size()
           << " requests with both phases, and a row over all of them (`--requests-shown` sets how many).\n";
      }
      md << "\nContext-Aware GPU-NDP §3.2 reports 0.89 on Mixtral-8x7B.\n\n";
    });

    // The four stages that read the trace held in memory (caching, then the drivers), one
    // after another or, with --stages-at-once, at the same time: each writes its section
    // apart, and the sections join the page in this order.
    const auto timed = [&](const std::string& family, auto&& f) -> section_text {
      if (!o.skip_timed) return capture(bar, family, f);
      bar.note(family + " did not run: --skip-timed");
      return {false, "left out (--skip-timed)"};
    };
    // Caching.
    const auto hit_ratio_stage = [&](std::ostream& sec) {
      const hit_ratio_data h = hit_ratios(*trace, o.jobs);
      svg::line_chart_spec spec;
      spec.title = "Demand hit ratio against cache capacity (one pool per layer)";
      spec.x_label = "capacity, experts per layer (of " + std::to_string(info.num_experts) + ")";
      spec.y_label = "hit ratio";
      spec.y_range = svg::value_range{0.0, 1.0};
      for (std::size_t p = 0; p < h.policies.size(); ++p) {
        svg::series line{h.policies[p], {}, {}};
        for (std::size_t c = 0; c < h.capacities.size(); ++c) {
          line.x.push_back(static_cast<double>(h.capacities[c]));
          line.y.push_back(h.ratio[p][c]);
        }
        if (p + 1 == h.policies.size()) line.style = svg::line_style::dashed;
        spec.lines.push_back(std::move(line));
      }
      write_file(dir / "hit-ratio.svg", svg::line_chart(spec));
      sec << "### Expert caching: hit ratio against capacity\n\n"
          << "![hit ratio against capacity](" << name << "/hit-ratio.svg)\n\n"
          << h.accesses << " demand accesses (one per distinct expert of each layer's batch), untimed; the sticky "
          << "LRU admits only experts its predictor flagged, and the gated policy those whose caching would evict, "
          << "so both hear the hints of CXL-MoE's predictor (" << h.hints
          << "; the same definition as `moepolicy replay`); nothing is prefetched here — the CXL-MoE and edge "
             "sections below replay prefetching on the timed model. Capacity counts experts, so every expert "
             "weighs one slot and size-aware decides as pred-reuse.\n\n| capacity |";
      for (const auto& p : h.policies) sec << ' ' << p << " |";
      sec << "\n|---:|";
      for (std::size_t p = 0; p < h.policies.size(); ++p) sec << "---:|";
      sec << '\n';
      for (std::size_t c = 0; c < h.capacities.size(); ++c) {
        sec << "| " << h.capacities[c] << " |";
        for (std::size_t p = 0; p < h.policies.size(); ++p) sec << ' ' << pct(h.ratio[p][c]) << " |";
        sec << '\n';
      }
      sec << '\n';
    };

    const auto prefetch_stage = [&](std::ostream& sec) {
      // The reuse_eviction driver's timed prefetching table at a quarter of a layer.
      examples::reuse_eviction::options opt;
      opt.capacities = {std::max<std::uint64_t>(1, info.num_experts / 4)};
      opt.per_layer = opt.shared = opt.prefetch = opt.byte_capacity = false;
      opt.jobs = o.jobs;
      const section_text s = timed("reuse_eviction", [&](std::ostream& os) {
        examples::reuse_eviction::run(*trace, path.filename().string(), opt, os);
      });
      sec << "### Prefetch with confidence-gated admission on the timed model (reuse_eviction)\n\n";
      code_block(sec, s);
    };
    const auto trimoe_stage = [&](std::ostream& sec) {
      examples::trimoe::result r;
      examples::trimoe::options opt = dev.trimoe;
      opt.jobs = o.jobs;
      const section_text s =
          timed("trimoe", [&](std::ostream& os) { r = examples::trimoe::run(path, *trace, opt, os); });
      sec << "### GPU + CPU + DIMM-NDP serving on the timed model (TriMoE)\n\n";
      if (s.ok && r.measured_steps > 0) {
        write_file(dir / "makespan-per-layer.svg", trimoe_makespan_plot(r));
        write_file(dir / "devices-per-layer.svg", trimoe_device_plot(r));
        sec << "![makespan per layer](" << name << "/makespan-per-layer.svg)\n\n"
            << "![busy time per device and layer](" << name << "/devices-per-layer.svg)\n\n";
      }
      code_block(sec, s);
    };
    const auto dynaexq_stage = [&](std::ostream& sec) {
      examples::dynaexq::result r;
      examples::dynaexq::options opt;
      opt.jobs = o.jobs;
      const section_text s =
          capture(bar, "dynaexq", [&](std::ostream& os) { r = examples::dynaexq::run(path, *trace, opt, os); });
      sec << "### Precision residency (DynaExq)\n\n";
      if (s.ok) {
        for (const auto& st : r.streams) {
          const std::string share = "residency-share-" + st.name + ".svg",
                            churn = "residency-churn-" + st.name + ".svg";
          write_file(dir / share, residency_share_plot(r, st));
          write_file(dir / churn, residency_churn_plot(st));
          sec << "![high-precision share over time, " << st.name << " stream](" << name << "/" << share << ")\n\n"
              << "![transitions over time, " << st.name << " stream](" << name << "/" << churn << ")\n\n";
        }
      }
      code_block(sec, s);
    };
    md << sections(bar, o.at_once(),
                   {name + ": hit ratio against capacity", name + ": prefetch on the timed model",
                    name + ": TriMoE scheduling", name + ": DynaExq residency"},
                   {hit_ratio_stage, prefetch_stage, trimoe_stage, dynaexq_stage}, [] {});

    bar.stage(name + ": context-aware GPU + CXL-NDP", [&] {
      examples::context_aware_ndp::options opt = dev.context_aware;
      opt.loss_table = loss_table_for();
      opt.calibration = calibration_for();
      const section_text s = timed("context_aware_ndp",
                                   [&](std::ostream& os) { examples::context_aware_ndp::run(path, *trace, opt, os); });
      md << "### Context-aware placement and mixed precision on GPU + CXL-NDP on the timed model (Context-Aware "
            "GPU-NDP)\n\n";
      code_block(md, s);
    });
    // CXL-MoE and Edge-MoE read only decode streams and the recorded prefills: for a
    // canonical file (or a text trace's scratch one) they form their streams from the
    // file's map, and the trace read whole gives way to its prefill steps before them. One
    // after another, or at once as the four stages above (each writing its section apart),
    // sharing their B = 1 streams and holding one batch size's streams at a time.
    stream_source streams;
    const auto cxl_stage = [&](std::ostream& sec) {
      examples::cxl_prefetch::options cxl = dev.cxl;
      cxl.progress = &bar.meter();
      cxl.jobs = o.jobs;
      cxl.streams = streams.former();
      const section_text c =
          timed("cxl_prefetch", [&](std::ostream& os) { examples::cxl_prefetch::run(path, *trace, cxl, os); });
      sec << "### Expert cache and prefetch over CXL vs PCIe on the timed model (CXL-MoE)\n\n";
      code_block(sec, c);
    };
    const auto edge_stage = [&](std::ostream& sec) {
      examples::edge_offload::options edge = dev.edge;
      edge.progress = &bar.meter();
      edge.jobs = o.jobs;
      edge.streams = streams.former();
      const section_text e = timed("edge_offload", [&](std::ostream& os) {
        examples::edge_offload::print_settings(edge, os);
        examples::edge_offload::run(path, *trace, edge, os);
      });
      sec << "### Importance-driven scheduling on edge GPUs on the timed model (Edge-MoE)\n\n";
      code_block(sec, e);
    };
    md << sections(bar, o.at_once(), {name + ": caching over CXL", name + ": caching on the edge"},
                   {cxl_stage, edge_stage}, [&] {
                     if (!o.skip_timed)
                       streams.prepare(trace, scratch ? scratch->path() : canonical_path(path), o.jobs);
                   });
  }
  write_file(out / "index.md", md.str());
  staged.commit();
  bar.finish();
  std::cerr << "report: wrote " << (fs::path(o.out) / "index.md").string() << '\n';
}

}  // namespace

std::string_view report_manifest() { return report_manifest_name; }

void run_report(const report_options& o) {
  if (!o.traces.empty()) {
    write_report(o);
    return;
  }
  report_options with = o;
  with.traces = default_traces();
  write_report(with);
}

}  // namespace moepolicy::tool
