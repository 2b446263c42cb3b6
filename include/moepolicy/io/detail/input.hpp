// moepolicy/io/detail/input.hpp — the file-reading helpers of moepolicy/detail/file_input.hpp,
// made visible in the importers' own `detail` namespace, and the quoting of input in messages.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <string_view>

#include "moepolicy/detail/file_input.hpp"

namespace moepolicy::io::detail {

using moepolicy::detail::byte_limit;
using moepolicy::detail::fail_at_byte;
using moepolicy::detail::fail_at_line;
using moepolicy::detail::fail_file;
using moepolicy::detail::fail_too_large;
using moepolicy::detail::file_limit;
using moepolicy::detail::json_limit;
using moepolicy::detail::open_input;
using moepolicy::detail::read_all;
using moepolicy::detail::read_all_bytes;
using moepolicy::detail::read_line;
using moepolicy::detail::read_rest;

/// `s` with control characters and non-ASCII bytes written as `\xNN`, for messages that
/// quote text nlohmann-json took from the input; cut after `max_bytes` bytes of `s`
/// (nlohmann repeats the whole token it failed on, which may be the whole line).
inline std::string printable(std::string_view s, std::size_t max_bytes = 200) {
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(std::min(s.size(), max_bytes) + 3);
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i == max_bytes) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 0xf];
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace moepolicy::io::detail
