// moepolicy/detail/file_input.hpp — opening and reading input files with errors that name
// the file, shared by the core's canonical trace reader and the importers (io/).
//
// Every failure is a `moepolicy::parse_error` carrying the file name as given and, where
// there is one, the line or byte offset of the problem.
#pragma once

#include <algorithm>
#include <array>
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
#include "moepolicy/core/input_limits.hpp"

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

/// A bound on the bytes a reader takes in, and the `input_limits` field it comes from.
struct byte_limit {
  std::uint64_t bytes;
  std::string_view field;
};

/// The bound on a trace file: `input_limits::max_file_bytes` of this thread.
[[nodiscard]] inline byte_limit file_limit() noexcept { return {active_input_limits().max_file_bytes, "max_file_bytes"}; }

/// The bound on a JSON document read whole: `input_limits::max_json_bytes` of this thread.
[[nodiscard]] inline byte_limit json_limit() noexcept { return {active_input_limits().max_json_bytes, "max_json_bytes"}; }

/// Throws the `parse_error` of input beyond `limit`.
[[noreturn]] inline void fail_too_large(std::string_view file, const byte_limit& limit) {
  fail_file(file, "larger than the limit of " + std::to_string(limit.bytes) + " bytes (input_limits::" +
                      std::string(limit.field) + ")");
}

/// The bytes left in `in` when it can tell them (a file, a string stream), else 0.
inline std::size_t remaining_bytes(std::istream& in) {
  if (!in) return 0;
  const std::istream::pos_type here = in.tellg();
  if (here == std::istream::pos_type(-1)) return 0;
  in.seekg(0, std::ios::end);
  const std::istream::pos_type end = in.tellg();
  in.seekg(here);
  if (!in || end == std::istream::pos_type(-1) || end < here) {
    in.clear();
    in.seekg(here);
    return 0;
  }
  return static_cast<std::size_t>(end - here);
}

/// Everything left in `in`, in a `std::string` or a `std::vector<std::byte>`, at most
/// `limit.bytes` of it. `size_hint` (the expected size, 0 when unknown: the stream is
/// then asked) sizes the first read; the buffer otherwise grows with the data actually
/// read, so a stream never makes it allocate more than about twice what it delivers, and
/// never much more than the limit. (Chunked `read` rather than `istreambuf_iterator`:
/// faster, and free of GCC 12's -Wnull-dereference false positive at -O2 and above.)
///
/// Throws: `parse_error` naming `name` when the stream reports a read error or holds more
/// than `limit.bytes` bytes.
template <class Buffer>
Buffer read_rest(std::istream& in, std::string_view name, const byte_limit& limit, std::size_t size_hint = 0) {
  static_assert(sizeof(typename Buffer::value_type) == 1);
  if (size_hint == 0) size_hint = remaining_bytes(in);
  if (size_hint > limit.bytes) fail_too_large(name, limit);
  // One byte past the limit tells a stream at the limit from one beyond it.
  const std::uint64_t most = limit.bytes + 1;
  Buffer data;
  std::size_t used = 0;
  std::size_t chunk = size_hint > 0 ? size_hint + 1 : std::size_t{1} << 16;  // +1: see the end at once
  while (in && used < most) {
    chunk = static_cast<std::size_t>(std::min<std::uint64_t>(chunk, most - used));
    data.resize(used + chunk);
    in.read(reinterpret_cast<char*>(data.data() + used), static_cast<std::streamsize>(chunk));
    used += static_cast<std::size_t>(in.gcount());
    chunk = std::max(chunk, used);
  }
  if (in.bad()) fail_file(name, "read error");
  if (used > limit.bytes) fail_too_large(name, limit);
  data.resize(used);
  return data;
}

/// Everything left in `in`, as bytes; see `read_rest`.
inline std::vector<std::byte> read_all_bytes(std::istream& in, std::string_view name,
                                             const byte_limit& limit = file_limit(), std::size_t size_hint = 0) {
  return read_rest<std::vector<std::byte>>(in, name, limit, size_hint);
}

/// The size of `path` when the file system knows it, else 0.
inline std::size_t file_size_or_zero(const std::filesystem::path& path) noexcept {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  return ec ? 0 : static_cast<std::size_t>(size);
}

/// The whole content of `path`, read with one allocation when the file's size is known,
/// at most `limit.bytes` of it.
///
/// Throws: `parse_error` as `open_input`, when reading fails midway, or when the file
/// holds more than `limit.bytes` bytes (before reading any when its size is known).
inline std::string read_all(const std::filesystem::path& path, const byte_limit& limit = file_limit()) {
  std::ifstream in = open_input(path);
  return read_rest<std::string>(in, path.string(), limit, file_size_or_zero(path));
}

/// The whole content of `path`, as bytes; see `read_all`.
inline std::vector<std::byte> read_all_bytes(const std::filesystem::path& path, const byte_limit& limit = file_limit()) {
  std::ifstream in = open_input(path);
  return read_rest<std::vector<std::byte>>(in, path.string(), limit, file_size_or_zero(path));
}

/// Reads the next line of `in` into `line`, without its '\n', reading at most
/// `max_bytes` + 1 bytes of it (the rest of an overlong line stays unread). Like
/// `std::getline`: returns false at the end of the input, true for a last line that
/// lacks its '\n'.
///
/// Returns: true when a line was read; `too_long` is set when the line holds more than
/// `max_bytes` bytes (`line` then holds the first of them).
inline bool read_line(std::istream& in, std::string& line, std::uint64_t max_bytes, bool& too_long) {
  line.clear();
  too_long = false;
  std::array<char, 4096> buf;
  bool any = false;
  for (;;) {
    in.getline(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto n = static_cast<std::size_t>(in.gcount());
    if (in.bad()) return false;
    if (!in.fail()) {
      // The line ended: at a '\n', which getline counted but did not store, or at the
      // end of the input.
      const std::size_t stored = in.eof() ? n : n - 1;
      line.append(buf.data(), stored);
      if (line.size() > max_bytes) too_long = true;
      return true;
    }
    if (in.eof()) {  // nothing read: the input ended before this line began
      in.clear(std::ios::eofbit);
      if (any) return true;
      in.setstate(std::ios::failbit);
      return false;
    }
    // The buffer filled up before the line ended.
    any = true;
    in.clear();
    line.append(buf.data(), n);
    if (line.size() > max_bytes) {
      too_long = true;
      return true;
    }
  }
}

}  // namespace moepolicy::detail
