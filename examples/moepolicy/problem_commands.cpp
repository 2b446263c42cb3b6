// `moepolicy bitwidth`, `place` and `schedule`: read a problem file (or standard input,
// `-`), solve it (plan.cpp, schedule.cpp) and print the answer as JSON.
#include <iostream>
#include <memory>
#include <string>

#include "commands.hpp"
#include "json_input.hpp"
#include "problems.hpp"

namespace moepolicy::tool {

void add_plan_commands(CLI::App& app) {
  auto bw_path = std::make_shared<std::string>();
  auto* bw = app.add_subcommand("bitwidth", "Allocate NDP bitwidths for one layer (prefix split and the exact optimum)");
  bw->add_option("problem", *bw_path, "Problem JSON file, or - for standard input")->required();
  bw->callback([bw_path] {
    std::cout << solve(read_bitwidth_problem(load_json(*bw_path), *bw_path)).dump(2) << '\n';
  });

  auto pl_path = std::make_shared<std::string>();
  auto* pl = app.add_subcommand("place", "Place experts on GPU and NDP from prefill statistics (Context-Aware GPU-NDP Alg. 1)");
  pl->add_option("problem", *pl_path, "Problem JSON file, or - for standard input")->required();
  pl->callback([pl_path] { std::cout << solve(read_place_problem(load_json(*pl_path), *pl_path)).dump(2) << '\n'; });
}

void add_schedule(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto* sc = app.add_subcommand("schedule",
                                "Schedule one decode step's experts on GPU, CPU and DIMM-NDP (TriMoE solvers)");
  sc->add_option("problem", *path, "Problem JSON file, or - for standard input")->required();
  sc->callback([path] { std::cout << solve(read_schedule_problem(load_json(*path), *path)).dump(2) << '\n'; });
}

}  // namespace moepolicy::tool
