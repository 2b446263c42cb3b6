// SPDX-License-Identifier: Apache-2.0
// moepolicy/io/detail/flat_json.hpp — a fast path for the records of the JSONL importers
// (io/jsonl_format.hpp: the Granite, vLLM and WARP traces), whenever a line keeps to a
// plain subset of JSON.
//
// Why. Profiling the fuzzers of the JSONL readers (callgrind and perf on a 40-line Granite
// seed) put 55–75% of each input's instructions in nlohmann's parser, most of them in its
// lexer, whose per-character work (position tracking, a token buffer grown one character
// at a time, generic dispatch) is multiplied by the fuzzer's coverage and comparison
// instrumentation and ASan's checks.
// This scanner reads the common shape in one pass and builds the same DOM. Read into the
// previous record's DOM (as `jsonl_lines::next` does), it reuses that record's nodes,
// strings and arrays, so a file of same-shaped records allocates nothing per line once
// the first record is read.
//
// Records only. A line the scanner leaves to nlohmann is read twice up to where the scanner
// stopped; in a JSONL file a mutation or a typo spoils one line, so the rest still go fast.
// A whole document spoiled anywhere would be read twice: measured on the table fuzzer
// (mostly mutated, invalid documents) that cost 37% more CPU per execution, so whole
// documents (io/json_document.hpp) keep nlohmann's parser alone.
//
// Exactness. `parse_flat_record` either builds exactly the value nlohmann's parser builds
// through `json_document::dom_builder`, or returns false and leaves the text to nlohmann —
// which then produces the value or the error message as before. It returns false for anything
// outside the subset, never guessing:
//   - strings with \uXXXX escapes, control or non-ASCII bytes (nlohmann validates UTF-8);
//     the two-character escapes (\" \\ \/ \b \f \n \r \t) are read;
//   - containers nested deeper than the depth limit (`input_limits::max_json_depth`, the
//     outermost container at level 1) or than 16 levels (the scanner recurses; nlohmann's
//     parser does not);
//   - integers beyond 64 bits and numbers `std::from_chars` does not convert in range
//     (nlohmann then turns the first into a double and rejects infinities, as before);
//   - a leading byte-order mark, and any syntax error.
// Numbers follow JSON's grammar, -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?; an integer
// without fraction or exponent is unsigned when non-negative and signed when it has a minus
// sign (so "-0" is a signed 0, as nlohmann reads it); the others are doubles, converted by
// `std::from_chars` (correctly rounded, as glibc's `strtod` that nlohmann calls, and
// independent of the locale). Whitespace is JSON's: space, tab, CR, LF. A JSONL record
// keeps the last value of a repeated key, as nlohmann's DOM does.
#pragma once

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include <nlohmann/json.hpp>

namespace moepolicy::io::detail {

class flat_json_scanner {
 public:
  using json = nlohmann::json;

  flat_json_scanner(std::string_view text, std::uint32_t max_depth) noexcept
      : p_(text.data()), end_(text.data() + text.size()), max_depth_(max_depth) {}

  /// Builds the object `text` holds into `out`; false when the text is not an object or is
  /// outside the shape this scanner reads (see the header), with `out` unspecified.
  bool record(json& out) {
    skip_ws();
    if (p_ == end_ || *p_ != '{') return false;
    return value(out, 1) && at_end();
  }

 private:
  // A value whose containers (if it is one) open level `depth`.
  bool value(json& out, std::uint32_t depth) {
    if (p_ == end_) return false;
    if (*p_ == '{') {
      ++p_;
      return object(out, depth);
    }
    if (*p_ == '[') {
      ++p_;
      return array(out, depth);
    }
    return scalar(out);
  }

  // After the '{' that opens level `depth`. When `out` already holds an object (the
  // previous record, in a JSONL file), its nodes are reused for the keys that come again
  // (moved out and back in, keys and values keeping their storage), so a record shaped
  // like the one before allocates nothing; keys it lacks are dropped with the old map.
  bool object(json& out, std::uint32_t depth) {
    if (depth > max_depth_ || depth > max_fast_depth) return false;
    json::object_t old;
    if (out.is_object()) {
      old = std::move(out.get_ref<json::object_t&>());
      out.get_ref<json::object_t&>().clear();
    } else {
      out = json::object();
    }
    json::object_t& obj = out.get_ref<json::object_t&>();
    skip_ws();
    if (eat('}')) return true;
    for (;;) {
      if (!string(key_)) return false;
      skip_ws();
      if (!eat(':')) return false;
      skip_ws();
      json* slot = nullptr;
      if (const auto it = old.find(key_); it != old.end()) {
        slot = &obj.insert(old.extract(it)).position->second;
      } else if (const auto again = obj.find(key_); again != obj.end()) {
        slot = &again->second;  // a repeated key: its last value counts
      } else {
        slot = &obj.emplace(key_, json()).first->second;
      }
      if (!value(*slot, depth + 1)) return false;
      skip_ws();
      if (eat(',')) {
        skip_ws();
        continue;
      }
      return eat('}');
    }
  }

  bool at_end() noexcept {
    skip_ws();
    return p_ == end_;
  }
  void skip_ws() noexcept {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\n' || *p_ == '\r')) ++p_;
  }
  bool eat(char c) noexcept {
    if (p_ == end_ || *p_ != c) return false;
    ++p_;
    return true;
  }

  // After the '[' that opens level `depth`. An array already in `out` keeps its elements'
  // storage (see `object`), the surplus dropped at the end.
  bool array(json& out, std::uint32_t depth) {
    if (depth > max_depth_ || depth > max_fast_depth) return false;
    if (!out.is_array()) out = json::array();
    json::array_t& arr = out.get_ref<json::array_t&>();
    std::size_t n = 0;
    skip_ws();
    if (!eat(']')) {
      for (;;) {
        if (n == arr.size()) arr.emplace_back();
        if (!value(arr[n++], depth + 1)) return false;
        skip_ws();
        if (eat(',')) {
          skip_ws();
          continue;
        }
        if (!eat(']')) return false;
        break;
      }
    }
    arr.erase(arr.begin() + static_cast<std::ptrdiff_t>(n), arr.end());
    return true;
  }

  bool scalar(json& out) {
    if (p_ == end_) return false;
    switch (*p_) {
      case '"': {
        if (out.is_string()) return string(out.get_ref<std::string&>());  // its storage reused
        std::string s;
        if (!string(s)) return false;
        out = std::move(s);
        return true;
      }
      case 't':
        return literal("true") && (out = true, true);
      case 'f':
        return literal("false") && (out = false, true);
      case 'n':
        return literal("null") && (out = nullptr, true);
      default:
        return number(out);
    }
  }

  bool literal(std::string_view word) noexcept {
    if (static_cast<std::size_t>(end_ - p_) < word.size() || std::string_view(p_, word.size()) != word) return false;
    p_ += word.size();
    return true;
  }

  // Printable ASCII, with the two-character escapes of JSON (not \uXXXX).
  bool string(std::string& out) {
    if (!eat('"')) return false;
    out.clear();
    const char* start = p_;
    while (p_ != end_) {
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        out.append(start, p_);
        ++p_;
        return true;
      }
      if (c < 0x20 || c >= 0x7f) return false;
      if (c == '\\') {
        out.append(start, p_);
        if (++p_ == end_) return false;
        switch (*p_) {
          case '"':
          case '\\':
          case '/':
            out += *p_;
            break;
          case 'b':
            out += '\b';
            break;
          case 'f':
            out += '\f';
            break;
          case 'n':
            out += '\n';
            break;
          case 'r':
            out += '\r';
            break;
          case 't':
            out += '\t';
            break;
          default:
            return false;
        }
        start = ++p_;
        continue;
      }
      ++p_;
    }
    return false;
  }

  bool number(json& out) {
    const char* start = p_;
    const bool negative = eat('-');
    if (p_ == end_) return false;
    if (*p_ == '0') {
      ++p_;
    } else if (*p_ >= '1' && *p_ <= '9') {
      while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    } else {
      return false;
    }
    bool integer = true;
    if (p_ != end_ && *p_ == '.') {
      integer = false;
      ++p_;
      if (!digits()) return false;
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      integer = false;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digits()) return false;
    }
    if (integer) {
      if (negative) {
        std::int64_t v = 0;
        const auto r = std::from_chars(start, p_, v);
        if (r.ec != std::errc() || r.ptr != p_) return false;
        out = static_cast<json::number_integer_t>(v);
      } else {
        std::uint64_t v = 0;
        const auto r = std::from_chars(start, p_, v);
        if (r.ec != std::errc() || r.ptr != p_) return false;
        out = static_cast<json::number_unsigned_t>(v);
      }
      return true;
    }
    double v = 0.0;
    const auto r = std::from_chars(start, p_, v);
    if (r.ec != std::errc() || r.ptr != p_) return false;
    out = static_cast<json::number_float_t>(v);
    return true;
  }

  bool digits() noexcept {
    const char* start = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ != start;
  }

  /// Deeper arrays go to nlohmann's parser, which does not recurse.
  static constexpr std::uint32_t max_fast_depth = 16;

  const char* p_;
  const char* end_;
  std::uint32_t max_depth_;
  std::string key_;  // the key being read; free again once its value starts
};

/// Parses the JSONL record `text` into `out` when it is an object of the shape this
/// scanner reads, nested at most `max_depth` levels (see the header), a repeated key's last
/// value counting; returns false otherwise, `out` then unspecified. Recursion: at most 16
/// frames (deeper values are left to nlohmann).
[[nodiscard]] inline bool parse_flat_record(std::string_view text, nlohmann::json& out, std::uint32_t max_depth) {
  return flat_json_scanner(text, max_depth).record(out);
}

}  // namespace moepolicy::io::detail
