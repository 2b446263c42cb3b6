// The subcommands of the `moepolicy` tool: each one's options and the function that runs
// it. Their command lines are defined in main.cpp, the one source of the tool that includes
// CLI11: CLI11 is header-only, and each source that includes it compiles its parser again
// (about 10 s of g++ -O2 each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/driver_main.hpp"

namespace moepolicy::tool {

/// An option whose value a subcommand refuses once it runs: main() reports it as CLI11
/// reports a value that fails its check ("OPTION: what", the exit status of a
/// `CLI::ValidationError`).
class option_error : public std::runtime_error {
 public:
  option_error(std::string option, const std::string& what) : std::runtime_error(what), option_(std::move(option)) {}
  [[nodiscard]] const std::string& option() const noexcept { return option_; }

 private:
  std::string option_;
};

/// `moepolicy inspect` (inspect.cpp).
struct inspect_options {
  std::vector<std::string> traces;
  bool combine = false;
  bool per_request = false;
};
void run_inspect(const inspect_options& o);

/// `moepolicy convert` (convert.cpp).
struct convert_options {
  std::vector<std::string> inputs;
  std::string output;
};
void run_convert(const convert_options& o);

/// `moepolicy bitwidth`, `place`, `schedule` and `balance` (problem_commands.cpp): the
/// problem file (or `-`), and what each adds.
void run_bitwidth(const std::string& problem);
struct place_options {
  std::string path;
  std::string engine;
  std::string model;
};
void run_place(const place_options& o);
struct machine_problem_options {
  std::string path;
  std::string machine;
};
void run_schedule(const machine_problem_options& o);
void run_balance(const machine_problem_options& o);

/// `moepolicy replay` (replay.cpp).
struct replay_options {
  std::vector<std::string> traces;
  std::string policy = "lru";
  std::vector<std::uint64_t> capacities;
  bool per_layer = false;
  std::string predictor;  // "": the mode's default
  std::optional<std::uint32_t> lookahead;
  std::optional<std::uint32_t> history;
  std::optional<double> router_alpha;
  std::string reference = "belady";  // untimed: the bound printed beside the policies
  // Timed mode.
  std::string link;
  std::vector<std::size_t> concurrency{1};
  std::string gpu = "h100_pcie_gen5";
  std::string duplex = "full";
  std::size_t depth = 0;
  bool prefill_prefetch = false;
  bool json_out = false;
  std::size_t jobs = 1;
};
/// The eviction policies `--policy` names, and "all".
[[nodiscard]] std::string known_policies();
[[nodiscard]] bool is_known_policy(std::string_view name);
/// Throws `option_error` for options that do not go together, or a value out of range.
void run_replay(const replay_options& o);

/// `moepolicy report` (report.cpp).
struct report_options {
  std::vector<std::string> traces;  // empty: the bundled traces, and the shared ones when present
  std::string machine;
  std::string out = "report";
  bool force = false;
  /// Leave out the families priced on the timed model (TriMoE, Context-Aware GPU-NDP,
  /// CXL-MoE, Edge-MoE), the slow part on a large trace.
  bool skip_timed = false;
  /// The most requests of each trace the per-request figures show (the first in trace
  /// order): the activation heatmaps, one SVG each, and the prefill <-> decode similarity's
  /// lines and rows (with a row over every request when some are left out). A production
  /// trace holds thousands of requests: at 10^8 rows of the synthetic traces, 3,125 heatmaps
  /// took 7.1 GB.
  std::size_t requests_shown = 32;
  /// Seconds between the periodic progress lines of a running stage (0: none).
  double progress_every = 2.0;
  /// Threads the independent replays of a stage share: the hit-ratio walks, the timed
  /// prefetching walks, and the systems of the CXL-MoE and Edge-MoE lockstep replays.
  std::size_t jobs = examples::default_jobs();
  /// Print each stage's CPU time (all threads) and span on stderr, and the run's.
  bool span = false;
  /// Run the four stages that read the trace held in memory (hit ratio, timed prefetch,
  /// TriMoE, DynaExq) at the same time, each with `jobs` threads, and then the two that read
  /// decode streams (CXL-MoE, Edge-MoE) at the same time: the report's span is then the
  /// longest of each group's spans rather than their sum, and its peak holds a group's state
  /// at once (the two timed families share their B = 1 streams and hold one batch size's
  /// streams at a time, as one after another). Unset: at once when `jobs` is at least
  /// `stages_at_once_from`.
  std::optional<bool> stages_at_once;

  /// The threads from which the stages run at once by default: each keeps about 2.6 to 8.6
  /// threads busy on average (its CPU time over its span), so on fewer they fill the machine
  /// one after another and at once would only hold more memory.
  static constexpr std::size_t stages_at_once_from = 4;
  [[nodiscard]] bool at_once() const noexcept { return stages_at_once.value_or(jobs >= stages_at_once_from); }
};
/// The name of the file in which a report lists the files it wrote (report_output.hpp).
[[nodiscard]] std::string_view report_manifest();
void run_report(const report_options& o);

/// `moepolicy rebalance` (rebalance.cpp).
struct rebalance_options {
  std::string loads, current, algorithm = "ours", format = "deepseek", out, select;
  std::uint32_t replicas = 0, groups = 1, nodes = 1, gpus = 0;
  double tolerance = 0.0;
  std::uint64_t expert_bytes = 0;
  std::uint32_t search = 0;
  bool compare = false;
};
void run_rebalance(const rebalance_options& o);

}  // namespace moepolicy::tool
