// `moepolicy bitwidth`, `place`, `schedule` and `balance`: read a problem file (or standard
// input, `-`), solve it (plan.cpp, schedule.cpp, balance.cpp) and print the answer as JSON.
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "commands.hpp"
#include "json_input.hpp"
#include "moepolicy/io/machine_json.hpp"
#include "problems.hpp"

namespace moepolicy::tool {

void add_plan_commands(CLI::App& app) {
  auto bw_path = std::make_shared<std::string>();
  auto* bw =
      app.add_subcommand("bitwidth", "Allocate NDP bitwidths for one layer (prefix split and the exact optimum)");
  bw->add_option("problem", *bw_path, "Problem JSON file, or - for standard input")->required();
  bw->callback([bw_path] { std::cout << solve(read_bitwidth_problem(load_json(*bw_path), *bw_path)).dump(2) << '\n'; });

  struct place_options {
    std::string path;
    std::string engine;
    std::string model;
  };
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
  pl->callback([po] {
    const place_problem p = read_place_problem(load_json(po->path), po->path);
    if (po->engine.empty()) {
      std::cout << solve(p).dump(2) << '\n';
      return;
    }
    std::optional<model_shape> model;
    if (!po->model.empty()) {
      model = models::find(po->model);
      if (!model) throw CLI::ValidationError("--model", "unknown model preset " + po->model);
    }
    std::cout << export_placement(p, po->engine, model);
  });
}

void add_schedule(CLI::App& app) {
  struct options {
    std::string path;
    std::string machine;
  };
  auto opt = std::make_shared<options>();
  auto* sc =
      app.add_subcommand("schedule", "Schedule one decode step's experts on GPU, CPU and DIMM-NDP (TriMoE solvers)");
  sc->add_option("problem", opt->path, "Problem JSON file, or - for standard input")->required();
  sc->add_option("--machine", opt->machine,
                 "JSON file of devices (docs/machine.md): its gpu, cpu and dimm_ndp roles replace the TriMoE presets")
      ->check(CLI::ExistingFile);
  sc->callback([opt] {
    std::optional<io::machine_description> m;
    if (!opt->machine.empty()) m = io::read_machine(opt->machine);
    std::cout << solve(read_schedule_problem(load_json(opt->path), opt->path, m ? &*m : nullptr)).dump(2) << '\n';
  });

  auto bopt = std::make_shared<options>();
  auto* ba = app.add_subcommand(
      "balance", "Split one layer's experts between loading to the GPU and the CPU (Edge-MoE §5.4, Alg. 2)");
  ba->add_option("problem", bopt->path, "Problem JSON file, or - for standard input")->required();
  ba->add_option("--machine", bopt->machine,
                 "JSON file of devices (docs/machine.md): its gpu and cpu roles price the experts")
      ->check(CLI::ExistingFile);
  ba->callback([bopt] {
    std::optional<io::machine_description> m;
    if (!bopt->machine.empty()) m = io::read_machine(bopt->machine);
    std::cout << solve(read_balance_problem(load_json(bopt->path), bopt->path, m ? &*m : nullptr)).dump(2) << '\n';
  });
}

}  // namespace moepolicy::tool
