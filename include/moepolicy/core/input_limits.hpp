// moepolicy/core/input_limits.hpp — the bounds every reader of the library puts on what it
// takes in: the size of a file, the length of a line of text and the nesting of JSON.
//
// A reader that meets input beyond a bound stops there with a `parse_error` naming the
// file, the line where there is one, and the bound (`input_limits::max_line_bytes`), so a
// 1 GiB line, a never-ending device such as /dev/zero or JSON nested 100,000 levels deep
// costs at most the bound in memory and time, never a crash or an exhausted machine.
//
// The bounds in force are per thread: `active_input_limits()` gives them (the defaults
// below until changed), `set_input_limits` replaces them and `scoped_input_limits`
// replaces them for a scope. A program sets them once, before reading, from its options.
#pragma once

#include <cstdint>

#include "moepolicy/core/error.hpp"

namespace moepolicy {

/// Bounds on the input a reader accepts. Every field must be at least 1.
struct input_limits {
  /// Bytes of a trace file (canonical, JSONL or CSV), or of the data left in a stream a
  /// trace is read from. Default 4 GiB.
  std::uint64_t max_file_bytes = std::uint64_t{1} << 32;
  /// Bytes of a JSON document read whole: a problem, a machine file, a count or loss
  /// table. Default 64 MiB (the largest table the papers publish is under 2 MB).
  std::uint64_t max_json_bytes = std::uint64_t{1} << 26;
  /// Bytes of one line of a JSONL or CSV file, without its terminator. Default 16 MiB.
  std::uint64_t max_line_bytes = std::uint64_t{1} << 24;
  /// Levels of nested arrays and objects in a JSON value (the top-level value is level
  /// 1). Default 64; no schema of the library nests deeper than 5.
  std::uint32_t max_json_depth = 64;

  /// Throws: `invalid_argument` naming `input_limits::validate` when a field is 0.
  void validate() const {
    constexpr std::string_view fn = "input_limits::validate";
    if (max_file_bytes == 0) detail::throw_invalid(fn, "max_file_bytes must be >= 1", max_file_bytes);
    if (max_json_bytes == 0) detail::throw_invalid(fn, "max_json_bytes must be >= 1", max_json_bytes);
    if (max_line_bytes == 0) detail::throw_invalid(fn, "max_line_bytes must be >= 1", max_line_bytes);
    if (max_json_depth == 0) detail::throw_invalid(fn, "max_json_depth must be >= 1", max_json_depth);
  }
};

namespace detail {

inline input_limits& thread_input_limits() noexcept {
  thread_local input_limits limits{};
  return limits;
}

}  // namespace detail

/// The bounds the readers apply on the calling thread.
[[nodiscard]] inline const input_limits& active_input_limits() noexcept { return detail::thread_input_limits(); }

/// Makes `limits` the bounds of the readers on the calling thread.
///
/// Returns: the bounds in force before.
/// Throws: `invalid_argument` as `input_limits::validate`, leaving the bounds unchanged.
inline input_limits set_input_limits(const input_limits& limits) {
  limits.validate();
  const input_limits before = detail::thread_input_limits();
  detail::thread_input_limits() = limits;
  return before;
}

/// Applies `limits` on the calling thread for its lifetime, then restores the bounds that
/// were in force before.
class scoped_input_limits {
 public:
  /// Throws: `invalid_argument` as `input_limits::validate`.
  explicit scoped_input_limits(const input_limits& limits) : before_(set_input_limits(limits)) {}
  ~scoped_input_limits() { detail::thread_input_limits() = before_; }
  scoped_input_limits(const scoped_input_limits&) = delete;
  scoped_input_limits& operator=(const scoped_input_limits&) = delete;

 private:
  input_limits before_;
};

}  // namespace moepolicy
