// Text from an input file (a trace's model name, a request name, a file name) made safe to
// print on a terminal: control characters, which could move the cursor, recolour or
// retitle the terminal, are written as escapes instead.
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <string_view>

namespace moepolicy::tool {

/// `s` with every C0 control byte and DEL written as `\xNN`, every C1 control character
/// (U+0080 to U+009F) as `\u00NN`, every byte that is not part of valid UTF-8 as `\xNN`
/// and a backslash as `\\`; all other text, UTF-8 included, as it is.
[[nodiscard]] inline std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  const auto hex = [&](const char* format, unsigned v) {
    char buf[8];
    std::snprintf(buf, sizeof buf, format, v);
    out += buf;
  };
  const auto byte = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  for (std::size_t i = 0; i < s.size();) {
    const unsigned char c = byte(i);
    if (c < 0x20 || c == 0x7f) {
      hex("\\x%02x", c);
      ++i;
      continue;
    }
    if (c == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    if (c < 0x80) {
      out += static_cast<char>(c);
      ++i;
      continue;
    }
    // The length of a well-formed UTF-8 sequence starting here (RFC 3629), or 0.
    std::size_t n = 0;
    if (c >= 0xc2 && c <= 0xdf) n = 2;
    else if (c >= 0xe0 && c <= 0xef) n = 3;
    else if (c >= 0xf0 && c <= 0xf4) n = 4;
    bool ok = n > 0 && i + n <= s.size();
    for (std::size_t k = 1; ok && k < n; ++k) ok = (byte(i + k) & 0xc0) == 0x80;
    if (ok && n == 3) {
      const unsigned c1 = byte(i + 1);
      ok = !(c == 0xe0 && c1 < 0xa0) && !(c == 0xed && c1 >= 0xa0);  // overlong; surrogates
    }
    if (ok && n == 4) {
      const unsigned c1 = byte(i + 1);
      ok = !(c == 0xf0 && c1 < 0x90) && !(c == 0xf4 && c1 >= 0x90);  // overlong; above U+10FFFF
    }
    if (!ok) {
      hex("\\x%02x", c);
      ++i;
    } else if (n == 2 && c == 0xc2 && byte(i + 1) < 0xa0) {
      hex("\\u%04x", byte(i + 1));  // U+0080 to U+009F
      i += 2;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

}  // namespace moepolicy::tool
