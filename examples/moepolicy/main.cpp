// moepolicy — the command-line face of the library: inspect, convert and replay routing
// traces; solve placement, bit-allocation and scheduling problems given as JSON; report on
// every policy family with plots. The command lines of all the subcommands are here, the one
// source of the tool that includes CLI11; each subcommand runs in its own source (commands.hpp).
#include <algorithm>
#include <charconv>
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common/data_dir.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/version.hpp"

namespace moepolicy::tool {
namespace {

/// The check of a whole-number option (give it to `transform`, which keeps its rewrite): decimal digits only, at least
/// `min`, at most 2^64 - 1. Run before CLI11 converts the text, so that "-1" is an error rather than 2^64 - 1 (CLI11's
/// conversion goes through strtoull, which wraps negatives) and "010" is ten rather than octal eight (leading zeros are
/// dropped).
CLI::Validator whole_number(std::uint64_t min = 0) {
  const std::string what = "a whole number >= " + std::to_string(min);
  return CLI::Validator(
      [min, what](std::string& v) -> std::string {
        const std::string got = "must be " + what + ", got '" + v + "'";
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return got;
        v.erase(0, std::min(v.find_first_not_of('0'), v.size() - 1));
        std::uint64_t n = 0;
        const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec == std::errc::result_out_of_range) return "must be at most 18446744073709551615, got '" + v + "'";
        if (ec != std::errc() || end != v.data() + v.size() || n < min) return got;
        return {};
      },
      "UINT>=" + std::to_string(min));
}

void add_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Print the shape, requests, tokens per phase and per-layer skew of traces");
  auto opt = std::make_shared<inspect_options>();
  cmd->add_option("traces", opt->traces,
                  "Trace files or directories (.mtrace, .jsonl, .csv); each is inspected on its own")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_flag("--combine", opt->combine, "Read all the given Granite JSONL files as one multi-request trace");
  cmd->add_flag("--per-request", opt->per_request, "Always list every request");
  cmd->callback([opt] { run_inspect(*opt); });
}

void add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "convert", "Convert traces to the canonical binary format (.mtrace) or to routing JSONL (.jsonl) or CSV (.csv)");
  auto opt = std::make_shared<convert_options>();
  cmd->add_option("inputs", opt->inputs, "Trace files or a directory; several Granite JSONL files make one trace")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("-o,--output", opt->output, "Output file: .mtrace (canonical), .jsonl or .csv (docs/trace-format.md)")
      ->required();
  cmd->callback([opt] { run_convert(*opt); });
}

void add_plan_commands(CLI::App& app) {
  auto bw_path = std::make_shared<std::string>();
  auto* bw =
      app.add_subcommand("bitwidth", "Allocate NDP bitwidths for one layer (prefix split and the exact optimum)");
  bw->add_option("problem", *bw_path, "Problem JSON file, or - for standard input")->required();
  bw->callback([bw_path] { run_bitwidth(*bw_path); });

  auto po = std::make_shared<place_options>();
  auto* pl = app.add_subcommand("place",
                                "Place experts on GPU and NDP from prefill statistics (Context-Aware GPU-NDP Alg. 1)");
  pl->add_option("problem", po->path, "Problem JSON file, or - for standard input")->required();
  pl->add_option("--export", po->engine,
                 "Print the GPU placement as an engine's settings instead of JSON: llamacpp (-ngl/--n-cpu-moe/-ot "
                 "arguments) or ktransformers (an optimize-rules YAML fragment); whole layers only")
      ->check(CLI::IsMember({"llamacpp", "ktransformers"}));
  pl->add_option("--model", po->model,
                 "Model preset for --export: the dense blocks before the first MoE layer and the experts' module");
  pl->callback([po] { run_place(*po); });
}

void add_schedule(CLI::App& app) {
  auto opt = std::make_shared<machine_problem_options>();
  auto* sc =
      app.add_subcommand("schedule", "Schedule one decode step's experts on GPU, CPU and DIMM-NDP (TriMoE solvers)");
  sc->add_option("problem", opt->path, "Problem JSON file, or - for standard input")->required();
  sc->add_option("--machine", opt->machine,
                 "JSON file of devices (docs/machine.md): its gpu, cpu and dimm_ndp roles replace the TriMoE presets")
      ->check(CLI::ExistingFile);
  sc->callback([opt] { run_schedule(*opt); });

  auto bopt = std::make_shared<machine_problem_options>();
  auto* ba = app.add_subcommand(
      "balance", "Split one layer's experts between loading to the GPU and the CPU (Edge-MoE §5.4, Alg. 2)");
  ba->add_option("problem", bopt->path, "Problem JSON file, or - for standard input")->required();
  ba->add_option("--machine", bopt->machine,
                 "JSON file of devices (docs/machine.md): its gpu and cpu roles price the experts")
      ->check(CLI::ExistingFile);
  ba->callback([bopt] { run_balance(*bopt); });
}

void add_replay(CLI::App& app) {
  auto* cmd = app.add_subcommand("replay",
                                 "Replay a trace's routing through an expert cache: hit ratio per capacity beside "
                                 "Belady's MIN, or (--link) TPOT, throughput and stalls on the timed model");
  auto opt = std::make_shared<replay_options>();
  cmd->add_option("traces", opt->traces, "Trace file or directory; several Granite JSONL files combine into one trace")
      ->required()
      ->check(CLI::ExistingPath);
  cmd->add_option("--policy", opt->policy, "Eviction policy: " + known_policies())
      ->capture_default_str()
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            return is_known_policy(v) ? std::string() : "unknown policy '" + v + "' (known: " + known_policies() + ")";
          },
          "POLICY"));
  cmd->add_option("--capacity", opt->capacities, "Cache capacities in experts (per layer with --per-layer), >= 1")
      ->required()
      ->expected(1, -1)
      ->transform(whole_number(1));
  cmd->add_flag("--per-layer", opt->per_layer, "One pool per layer instead of one shared pool (untimed)");
  cmd->add_option("--predictor", opt->predictor,
                  "Predictor: none, short-horizon, markov, transition (untimed), oracle. Untimed it hints the "
                  "sticky LRU (default: short-horizon) and is scored; timed it drives prefetch (default: "
                  "short-horizon)")
      ->check(CLI::IsMember({"none", "short-horizon", "markov", "transition", "oracle"}));
  cmd->add_option("--lookahead", opt->lookahead,
                  "n: tokens (batches of a layer) a prediction covers, >= 1 (default: CXL-MoE's n = 2)")
      ->transform(whole_number(1));
  cmd->add_option("--history", opt->history, "m: past tokens the short-horizon or Markov model reads, >= 1")
      ->transform(whole_number(1));
  cmd->add_option("--router-alpha", opt->router_alpha,
                  "Run the expert-cache router (substitution threshold alpha in [0, 1]) before the cache (untimed)");
  cmd->add_option("--link", opt->link,
                  "Replay on the timed model, fetching experts over this link: cxl, pcie, or a link preset name");
  cmd->add_option("--concurrency", opt->concurrency, "Timed: concurrent decode streams B (default 1)")
      ->expected(1, -1)
      ->transform(whole_number(1));
  cmd->add_option("--gpu", opt->gpu, "Timed: the GPU's device preset")->capture_default_str();
  cmd->add_option("--duplex", opt->duplex, "Timed: full (reads and KV writes on separate directions) or half")
      ->capture_default_str()
      ->check(CLI::IsMember({"full", "half"}));
  cmd->add_option("--depth", opt->depth, "Timed: experts prefetched per layer and step (default: n x top-k per stream)")
      ->transform(whole_number(0));
  cmd->add_flag("--prefill-prefetch", opt->prefill_prefetch,
                "Timed: CXL-MoE's prefill-stage prefetch (stand-in: the prefill's own activation counts)");
  cmd->add_option("--reference", opt->reference,
                  "Untimed: the bound printed beside the policies: belady (MIN, the default) or none (the "
                  "policies alone, without the next-use pass and Belady's replays)")
      ->capture_default_str()
      ->check(CLI::IsMember({"belady", "none"}));
  cmd->add_flag("--json", opt->json_out, "Print the results as JSON");
  cmd->add_option("--jobs", opt->jobs,
                  "Untimed: replays (one per capacity and policy) run on this many threads, >= 1; the results do "
                  "not depend on it")
      ->capture_default_str()
      ->transform(whole_number(1));
  cmd->callback([opt] { run_replay(*opt); });
}

void add_report(CLI::App& app) {
  auto* cmd = app.add_subcommand("report",
                                 "Replay every policy family on the bundled traces (or --trace) and write "
                                 "OUT/index.md with SVG plots");
  auto opt = std::make_shared<report_options>();
  cmd->add_option("--trace", opt->traces,
                  "Traces to report on, each a file or directory any importer reads (default: the bundled traces, "
                  "and the shared Mixtral-8x7B traces when ../shared/traces is present)")
      ->check(CLI::ExistingPath);
  cmd->add_option("--machine", opt->machine, "JSON file of device presets (docs/machine.md)")->check(CLI::ExistingFile);
  cmd->add_option("--out", opt->out,
                  "Directory to write index.md and the plots to; replaced once the report is complete, and only "
                  "when it holds nothing but an earlier report's files (see " +
                      std::string(report_manifest()) + ")")
      ->capture_default_str();
  cmd->add_flag("--force", opt->force, "Replace --out even when it holds files no earlier report wrote");
  cmd->add_option("--requests-shown", opt->requests_shown,
                  "The most requests of each trace the per-request figures show, the first in trace order: the "
                  "activation heatmaps (one SVG each) and the prefill <-> decode similarity's lines and rows (with a "
                  "row over all requests when some are left out); the report says how many it left out")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--progress-every", opt->progress_every,
                  "Seconds between the progress lines a running stage prints on stderr (rows of its timed replays "
                  "done and planned, rows per second); 0 prints none")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--jobs", opt->jobs,
                  "Threads the independent replays of a stage share (the hit-ratio and timed prefetching walks, "
                  "TriMoE's replayers, DynaExq's groups of replays, the systems of the CXL-MoE and Edge-MoE replays; "
                  "default: the machine's hardware threads); the report "
                  "does not depend on it")
      ->check(CLI::Range(std::size_t{1}, std::size_t{4096}));
  cmd->add_flag_callback(
         "--stages-at-once", [opt] { opt->stages_at_once = true; },
         "Run the four stages that read the trace held in memory (hit ratio, timed prefetch, TriMoE, DynaExq) at "
         "the same time, then the two that read decode streams (CXL-MoE, Edge-MoE), each with --jobs threads: on "
         "many cores the report's span is then the longest of each group's rather than their sum, at the price of "
         "a higher peak (a group's state held at once); the report does not depend on it (default: at once with "
         "--jobs 4 or more)")
      ->excludes(cmd->add_flag_callback(
          "--stages-in-turn", [opt] { opt->stages_at_once = false; },
          "Run those stages one after another, whatever --jobs (each stage's CPU time can then be read from the "
          "process's, as bench/report_cpu.py does)"));
  cmd->add_flag("--span", opt->span,
                "Add to each stage's line on stderr, and to the run's, the CPU time of all threads and the span: the "
                "CPU time of the longest chain of work that runs one after another as the stage hands tasks to its "
                "threads (on P cores a stage takes at least max(CPU / P, span))");
  cmd->add_flag(
      "--skip-timed", opt->skip_timed,
      "Leave out the families priced on the timed model (timed prefetch, TriMoE, Context-Aware GPU-NDP, CXL-MoE, "
      "Edge-MoE); "
      "each is listed as not run");
  cmd->callback([opt] { run_report(*opt); });
}

void add_rebalance(CLI::App& app) {
  auto opt = std::make_shared<rebalance_options>();
  CLI::App* cmd = app.add_subcommand(
      "rebalance",
      "expert-parallel placement of a load matrix: replication, packing, migration (DeepSeek EPLB's shapes)");
  cmd->add_option("LOADS", opt->loads, "CSV (layer, expert, load) or JSON array of per-layer arrays")->required();
  cmd->add_option("--replicas", opt->replicas, "R: physical expert slots in all, a multiple of --gpus")->required();
  cmd->add_option("--gpus", opt->gpus, "G: GPUs in all")->required();
  cmd->add_option("--groups", opt->groups, "K: expert groups (group-limited routing)");
  cmd->add_option("--nodes", opt->nodes, "N: server nodes");
  cmd->add_option("--current", opt->current,
                  "current placement: JSON physical_to_logical [L][R] (or an object with it)");
  cmd->add_option("--algorithm", opt->algorithm, "ours | deepseek")->check(CLI::IsMember({"ours", "deepseek"}));
  cmd->add_option("--format", opt->format, "deepseek | vllm | sglang")
      ->check(CLI::IsMember({"deepseek", "vllm", "sglang"}));
  cmd->add_option("-o,--output", opt->out, "write here instead of standard output");
  cmd->add_option("--select", opt->select, "slash-separated keys to the loads inside a JSON document");
  cmd->add_option("--tolerance", opt->tolerance, "balance tolerance: accept (1 + t) x the best max load to move less");
  cmd->add_option("--expert-bytes", opt->expert_bytes, "bytes of one expert, to price the moves");
  cmd->add_option("--replica-search", opt->search,
                  "rounds of the replica-count search per block and layer (0: EPLB's greedy replication; "
                  "--compare shows 16 when 0)");
  cmd->add_flag("--compare", opt->compare, "print ours, DeepSeek EPLB and the lower bound side by side");
  cmd->callback([opt] { run_rebalance(*opt); });
}

}  // namespace
}  // namespace moepolicy::tool

int main(int argc, char** argv) {
  CLI::App app{"moepolicy: expert placement, precision and scheduling policies for MoE serving"};
  app.set_version_flag(
      "--version", "moepolicy " + std::to_string(MOEPOLICY_VERSION_MAJOR) + "." +
                       std::to_string(MOEPOLICY_VERSION_MINOR) + "." + std::to_string(MOEPOLICY_VERSION_PATCH) +
                       "\nbundled traces: " + moepolicy::examples::bundled_traces_dir(MOEPOLICY_SOURCE_DIR).string());
  app.require_subcommand(1);
  moepolicy::tool::add_inspect(app);
  moepolicy::tool::add_convert(app);
  moepolicy::tool::add_plan_commands(app);
  moepolicy::tool::add_schedule(app);
  moepolicy::tool::add_replay(app);
  moepolicy::tool::add_report(app);
  moepolicy::tool::add_rebalance(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const moepolicy::tool::option_error& e) {
    return app.exit(CLI::ValidationError(e.option(), e.what()));
  } catch (const moepolicy::parse_error& e) {
    std::cerr << "moepolicy: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "moepolicy: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
