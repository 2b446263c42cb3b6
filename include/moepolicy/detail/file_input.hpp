// moepolicy/detail/file_input.hpp — opening and reading input files with errors that name
// the file, shared by the core's canonical trace reader and the importers (io/).
//
// Every failure is a `moepolicy::parse_error` carrying the file name as given and, where
// there is one, the line or byte offset of the problem.
#pragma once

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <istream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "moepolicy/core/error.hpp"

namespace moepolicy::detail {

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

/// Everything left in `in`, in a `std::string` or a `std::vector<std::byte>`. `size_hint`
/// (the expected size, 0 when unknown) sizes the first read; the buffer otherwise grows
/// with the data actually read, so a stream never makes it allocate more than about
/// twice what it delivers. (Chunked `read` rather than `istreambuf_iterator`: faster, and
/// free of GCC 12's -Wnull-dereference false positive at -O2 and above.)
///
/// Throws: `parse_error` naming `name` when the stream reports a read error.
template <class Buffer>
Buffer read_rest(std::istream& in, std::string_view name, std::size_t size_hint = 0) {
  static_assert(sizeof(typename Buffer::value_type) == 1);
  Buffer data;
  std::size_t used = 0;
  std::size_t chunk = size_hint > 0 ? size_hint + 1 : std::size_t{1} << 16;  // +1: see the end at once
  while (in) {
    data.resize(used + chunk);
    in.read(reinterpret_cast<char*>(data.data() + used), static_cast<std::streamsize>(chunk));
    used += static_cast<std::size_t>(in.gcount());
    chunk = std::max(chunk, used);
  }
  if (in.bad()) fail_file(name, "read error");
  data.resize(used);
  return data;
}

/// Everything left in `in`, as bytes; see `read_rest`.
inline std::vector<std::byte> read_all_bytes(std::istream& in, std::string_view name, std::size_t size_hint = 0) {
  return read_rest<std::vector<std::byte>>(in, name, size_hint);
}

/// The size of `path` when the file system knows it, else 0.
inline std::size_t file_size_or_zero(const std::filesystem::path& path) noexcept {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<std::size_t>(size);
}

/// The whole content of `path`, read with one allocation when the file's size is known.
///
/// Throws: `parse_error` as `open_input`, or when reading fails midway.
inline std::string read_all(const std::filesystem::path& path) {
  std::ifstream in = open_input(path);
  return read_rest<std::string>(in, path.string(), file_size_or_zero(path));
}

/// The whole content of `path`, as bytes; see `read_all`.
inline std::vector<std::byte> read_all_bytes(const std::filesystem::path& path) {
  std::ifstream in = open_input(path);
  return read_rest<std::vector<std::byte>>(in, path.string(), file_size_or_zero(path));
}

}  // namespace moepolicy::detail
