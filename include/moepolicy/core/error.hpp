// moepolicy/core/error.hpp — the library's exception types and its internal assertion.
//
// Bad caller input at a public entry point throws `moepolicy::invalid_argument` whose
// message names the function, the problem and the value; a malformed file throws
// `moepolicy::parse_error`, which also carries the file and the line (or byte offset).
// A valid problem without an answer is reported through a result's status, never an
// exception. Internal invariants use `MOEPOLICY_ASSERT`, which a user may redefine.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace moepolicy {

/// Bad input at a public entry point. The message reads
/// `moepolicy::<function>: <problem>, got <value>`.
class invalid_argument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

/// Where in a file a problem was found: a 1-based line for text, a byte offset for
/// binary data, or nowhere in particular (a file that cannot be opened), as `unit` says.
struct file_location {
  enum class kind : std::uint8_t { line, byte_offset, none };
  kind unit = kind::line;
  std::uint64_t value = 0;
};

/// A malformed or unreadable trace or table. The message reads `<file>:<line>: <problem>`,
/// `<file>: byte <offset>: <problem>`, or `<file>: <problem>` without a location.
class parse_error : public std::runtime_error {
 public:
  parse_error(std::string file, file_location where, const std::string& problem)
      : std::runtime_error(format(file, where, problem)),
        file_(std::move(file)),
        where_(where),
        problem_(problem) {}

  /// The file name as given to the reader (or a caller-chosen label for a stream).
  [[nodiscard]] const std::string& file() const noexcept { return file_; }
  /// The line or byte offset of the problem.
  [[nodiscard]] file_location where() const noexcept { return where_; }
  /// The problem alone, without the location.
  [[nodiscard]] const std::string& problem() const noexcept { return problem_; }

 private:
  static std::string format(const std::string& file, file_location where,
                            const std::string& problem) {
    std::string out = file;
    switch (where.unit) {
      case file_location::kind::line: out += ':' + std::to_string(where.value) + ": "; break;
      case file_location::kind::byte_offset: out += ": byte " + std::to_string(where.value) + ": "; break;
      case file_location::kind::none: out += ": "; break;
    }
    out += problem;
    return out;
  }

  std::string file_;
  file_location where_;
  std::string problem_;
};

namespace detail {

/// Writes any streamable value the way error messages show it.
template <class T>
std::string show(const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    std::string out = "\"";
    out += std::string_view(value);
    out += '"';
    return out;
  } else {
    std::ostringstream os;
    os.precision(17);
    os << value;
    return os.str();
  }
}

/// Throws `invalid_argument` with the library's message shape.
template <class T>
[[noreturn]] void throw_invalid(std::string_view function, std::string_view problem,
                                const T& value) {
  std::string msg = "moepolicy::";
  msg += function;
  msg += ": ";
  msg += problem;
  msg += ", got ";
  msg += show(value);
  throw invalid_argument(msg);
}

/// Throws `invalid_argument` for a problem that has no single offending value.
[[noreturn]] inline void throw_invalid(std::string_view function, std::string_view problem) {
  std::string msg = "moepolicy::";
  msg += function;
  msg += ": ";
  msg += problem;
  throw invalid_argument(msg);
}

[[noreturn]] inline void assertion_failed(const char* expr, const char* file, int line) noexcept {
  std::fprintf(stderr, "%s:%d: moepolicy assertion failed: %s\n", file, line, expr);
  std::abort();
}

}  // namespace detail
}  // namespace moepolicy

/// Checks an internal invariant. On unless `NDEBUG`; define `MOEPOLICY_ASSERT` before
/// including any moepolicy header to route failures elsewhere. Never an optimizer hint.
#ifndef MOEPOLICY_ASSERT
#ifdef NDEBUG
#define MOEPOLICY_ASSERT(expr) static_cast<void>(0)
#else
#define MOEPOLICY_ASSERT(expr) \
  ((expr) ? static_cast<void>(0) : ::moepolicy::detail::assertion_failed(#expr, __FILE__, __LINE__))
#endif
#endif
