// The subcommands of the `moepolicy` tool. Each registers itself on the app.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <string>
#include <system_error>

#include <CLI/CLI.hpp>

namespace moepolicy::tool {

/// The check of a whole-number option (give it to `transform`, which keeps its rewrite): decimal digits only, at least `min`, at most
/// 2^64 - 1. Run before CLI11 converts the text, so that "-1" is an error rather than
/// 2^64 - 1 (CLI11's conversion goes through strtoull, which wraps negatives) and "010" is
/// ten rather than octal eight (leading zeros are dropped).
inline CLI::Validator whole_number(std::uint64_t min = 0) {
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

void add_inspect(CLI::App& app);
void add_convert(CLI::App& app);
void add_plan_commands(CLI::App& app);
void add_schedule(CLI::App& app);
void add_replay(CLI::App& app);
void add_report(CLI::App& app);
void add_rebalance(CLI::App& app);

}  // namespace moepolicy::tool
