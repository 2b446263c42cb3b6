// `moepolicy bitwidth`, `place`, `schedule` and `balance`: read a problem file (or standard
// input, `-`), solve it (plan.cpp, schedule.cpp, balance.cpp) and print the answer as JSON.
#include <iostream>
#include <optional>
#include <string>

#include "commands.hpp"
#include "json_input.hpp"
#include "moepolicy/io/machine_json.hpp"
#include "problems.hpp"

namespace moepolicy::tool {

void run_bitwidth(const std::string& problem) {
  std::cout << solve(read_bitwidth_problem(load_json(problem), problem)).dump(2) << '\n';
}

void run_place(const place_options& o) {
  const place_problem p = read_place_problem(load_json(o.path), o.path);
  if (o.engine.empty()) {
    std::cout << solve(p).dump(2) << '\n';
    return;
  }
  std::optional<model_shape> model;
  if (!o.model.empty()) {
    model = models::find(o.model);
    if (!model) throw option_error("--model", "unknown model preset " + o.model);
  }
  std::cout << export_placement(p, o.engine, model);
}

void run_schedule(const machine_problem_options& o) {
  std::optional<io::machine_description> m;
  if (!o.machine.empty()) m = io::read_machine(o.machine);
  std::cout << solve(read_schedule_problem(load_json(o.path), o.path, m ? &*m : nullptr)).dump(2) << '\n';
}

void run_balance(const machine_problem_options& o) {
  std::optional<io::machine_description> m;
  if (!o.machine.empty()) m = io::read_machine(o.machine);
  std::cout << solve(read_balance_problem(load_json(o.path), o.path, m ? &*m : nullptr)).dump(2) << '\n';
}

}  // namespace moepolicy::tool
