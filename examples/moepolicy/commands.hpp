// The subcommands of the `moepolicy` tool. Each registers itself on the app.
#pragma once

#include <CLI/CLI.hpp>

namespace moepolicy::tool {

void add_inspect(CLI::App& app);
void add_convert(CLI::App& app);
void add_plan_commands(CLI::App& app);
void add_schedule(CLI::App& app);
void add_replay(CLI::App& app);
void add_report(CLI::App& app);

}  // namespace moepolicy::tool
