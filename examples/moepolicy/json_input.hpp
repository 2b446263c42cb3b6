// Reading a problem given as JSON for the moepolicy subcommands, with errors that name the
// file and the line (syntax) or the field (shape).
#pragma once

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"

namespace moepolicy::tool {

/// The JSON of `path` (`-` for standard input), or a `parse_error` naming the file and
/// the line of a syntax error.
inline nlohmann::json load_json(const std::string& path) {
  std::string text;
  std::ostringstream ss;
  if (path == "-") {
    ss << std::cin.rdbuf();
  } else {
    std::ifstream in(path);
    if (!in) throw parse_error(path, {file_location::kind::none, 0}, "cannot open");
    ss << in.rdbuf();
  }
  text = ss.str();
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::uint64_t line = 1;
    for (std::size_t i = 0; i < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') ++line;
    }
    throw parse_error(path, {file_location::kind::line, line}, std::string("invalid JSON: ") + e.what());
  }
}

/// Throws a `parse_error` naming the file and the field.
[[noreturn]] inline void bad_field(const std::string& path, const std::string& field, const std::string& problem) {
  throw parse_error(path, {file_location::kind::none, 0}, field + ": " + problem);
}

}  // namespace moepolicy::tool
