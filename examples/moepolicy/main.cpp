// moepolicy — the command-line face of the library: inspect, convert and replay routing
// traces; solve placement, bit-allocation and scheduling problems given as JSON; report on
// every policy family with plots.
#include <exception>
#include <iostream>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "common/data_dir.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/version.hpp"

int main(int argc, char** argv) {
  CLI::App app{"moepolicy: expert placement, precision and scheduling policies for MoE serving"};
  app.set_version_flag("--version", "moepolicy " + std::to_string(MOEPOLICY_VERSION_MAJOR) + "." +
                                        std::to_string(MOEPOLICY_VERSION_MINOR) + "." +
                                        std::to_string(MOEPOLICY_VERSION_PATCH) + "\nbundled traces: " +
                                        moepolicy::examples::bundled_traces_dir(MOEPOLICY_SOURCE_DIR).string());
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
  } catch (const moepolicy::parse_error& e) {
    std::cerr << "moepolicy: " << e.what() << '\n';
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "moepolicy: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
