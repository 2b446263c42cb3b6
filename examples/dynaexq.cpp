// dynaexq — DynaExq replayed on recorded routing whose workload shifts: static,
// online and hysteresis policies through the residency mechanism, on the recorded serving
// stream and on a phased one built from it (drivers/dynaexq.hpp).
#include <filesystem>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "common/driver_main.hpp"
#include "drivers/dynaexq.hpp"

namespace fs = std::filesystem;
using namespace moepolicy;

int main(int argc, char** argv) {
  CLI::App app{"DynaExq: hotness-driven FP16/4-bit expert residency on recorded routing"};
  const fs::path here = fs::path(MOEPOLICY_SOURCE_DIR);
  std::string trace = examples::bundled_granite(here).string();
  examples::dynaexq::options opt;
  app.add_option("--trace", trace,
                 "Trace with *-cal-* and *-eval-* requests (else: the first half of the requests calibrate)")
      ->check(CLI::ExistingPath)
      ->capture_default_str();
  app.add_option("--interval-ms", opt.interval_ms, "Hotness update interval, ms of modelled time")
      ->check(CLI::Range(1e-3, 1e6))
      ->capture_default_str();
  app.add_option("--step-ms", opt.step_ms, "Modelled time of one forward pass, in ms")
      ->check(CLI::Range(1e-3, 1e3))
      ->capture_default_str();
  app.add_option("--link-gbps", opt.link_gbps, "Host-to-device link bandwidth, GB/s")
      ->check(CLI::Range(1e-3, 1e4))
      ->capture_default_str();
  app.add_option("--alpha", opt.alpha, "Hotness EMA weight of the interval just ended")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--margin", opt.margin, "Additive hysteresis margin, in shares of a layer's selections")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--slack", opt.slack, "Rank slack, in ranks")->capture_default_str();
  app.add_option("--staging", opt.staging,
                 "Staging blocks k of the temporary pool (demotions that may run ahead of promotions)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}))
      ->capture_default_str();
  app.add_option("--phase-repeats", opt.phase_repeats,
                 "Times each serving request is replayed back to back in the phased stream")
      ->check(CLI::Range(std::size_t{1}, std::size_t{1000}))
      ->capture_default_str();
  app.add_option("--series-points", opt.series_points,
                 "Most points of each per-interval series the plots draw (>= 1): more update intervals are merged, "
                 "consecutive ones, into each point")
      ->capture_default_str();
  app.add_flag("--admit-at-issue", opt.admit_at_issue,
               "Reserve a transition's budget when it is issued, not when it is requested (DynaExq §3.4)");
  app.add_flag("--resolve-each-access", opt.resolve_each_access,
               "Resolve every routed expert through its handle (the general path; the same results, slower)");
  bool no_shared_replays = false;
  app.add_flag("--no-shared-replays", no_shared_replays,
               "Run every table row's replay on its own, also where another row runs the same one (the general path; "
               "the same results, slower)");
  app.add_option("--sweep-margins", opt.sweep_margins, "Margins of the margin sweep")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--sweep-alphas", opt.sweep_alphas, "EMA factors of the EMA sweep")
      ->check(CLI::Range(1e-6, 1.0))
      ->capture_default_str();
  app.add_option("--sweep-intervals-ms", opt.sweep_intervals_ms, "Update intervals of the interval sweep, ms")
      ->check(CLI::Range(1e-3, 1e6))
      ->capture_default_str();
  opt.jobs = examples::default_jobs();
  app.add_option("--jobs", opt.jobs,
                 "Threads the groups of replays share (replays with the same hotness inputs step together as one "
                 "group; default: the machine's hardware threads); the output does not depend on it")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  CLI11_PARSE(app, argc, argv);
  opt.share_equal_replays = !no_shared_replays;
  try {
    static_cast<void>(examples::dynaexq::run(trace, opt, std::cout));
  } catch (const std::exception& e) {
    std::cerr << "dynaexq: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
