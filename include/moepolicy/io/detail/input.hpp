// moepolicy/io/detail/input.hpp — opening and reading input files with errors that name
// the file, shared by the importers.
#pragma once

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>

#include "moepolicy/core/error.hpp"

namespace moepolicy::io::detail {

/// Throws `parse_error` for `file` at 1-based `line`.
[[noreturn]] inline void fail_at_line(std::string_view file, std::uint64_t line, const std::string& problem) {
  throw parse_error(std::string(file), {file_location::kind::line, line}, problem);
}

/// Throws `parse_error` for `file` at byte `offset`.
[[noreturn]] inline void fail_at_byte(std::string_view file, std::uint64_t offset, const std::string& problem) {
  throw parse_error(std::string(file), {file_location::kind::byte_offset, offset}, problem);
}

/// Throws `parse_error` for `file` as a whole.
[[noreturn]] inline void fail_file(std::string_view file, const std::string& problem) {
  throw parse_error(std::string(file), {file_location::kind::none, 0}, problem);
}

/// Opens `path` for binary reading.
///
/// Throws: `parse_error` naming the file and the system's reason when it cannot be opened
/// or is a directory.
inline std::ifstream open_input(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail_file(path.string(), "is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail_file(path.string(), std::string("cannot open: ") + std::strerror(errno));
  return in;
}

/// The whole content of `path`.
///
/// Throws: `parse_error` as `open_input`, or when reading fails midway.
inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in = open_input(path);
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) fail_file(path.string(), "read error");
  return data;
}

}  // namespace moepolicy::io::detail
