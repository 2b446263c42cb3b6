// moepolicy/io/json_document.hpp — reading a whole JSON document the way every JSON reader
// of the library does, and the DOM builder they share (the machine files of
// io/machine_json.hpp, the tables of io/tables_json.hpp, the records of the JSONL
// importers, the problems of the `moepolicy` tool).
//
// nlohmann-json parses without recursion, but copying, comparing or printing a value
// recurses once per level; so a document is built through nlohmann's SAX interface by
// `detail::json_document::dom_builder`, which stops at `input_limits::max_json_depth`
// levels of nested arrays and objects. A document read whole is also bounded in size
// (`input_limits::max_json_bytes`), and an object key given twice is an error (the DOM
// would keep only one of the values).
//
// Errors are `moepolicy::parse_error` only (no nlohmann exception escapes):
//   - text that is not JSON (a syntax error, a number too large for a double, trailing
//     content) → `<file>:<line>: invalid JSON: <nlohmann's reason>`, the line 1-based,
//     counted to the byte where the parser stopped, bytes of the reason outside printable
//     ASCII written `\xNN`;
//   - nesting too deep → `<file>:<line>: JSON nested deeper than <max> levels
//     (input_limits::max_json_depth)`, at the line of the bracket one level too deep;
//   - a repeated key → `<file>: <JSON path>: duplicate key "<key>"`, the path written with
//     dots and brackets (`datasets.olmoe[2]`), a key that is not a plain word quoted in
//     brackets (`datasets["a b"]`);
//   - a document over the size bound → `<file>: larger than the limit of <n> bytes
//     (input_limits::max_json_bytes)`.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <istream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/io/detail/input.hpp"

namespace moepolicy::io {

namespace detail::json_document {

using json = nlohmann::json;

/// `key` as a message shows it: JSON-escaped with control bytes as `\xNN`, in quotes, cut
/// after 40 bytes.
inline std::string quote_key(std::string_view key) {
  constexpr std::size_t max_shown = 40;
  std::string out = "\"";
  for (std::size_t i = 0; i < key.size() && i < max_shown; ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      constexpr char hex[] = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  if (key.size() > max_shown) out += "...";
  out += '"';
  return out;
}

/// `path` extended by object key `key`.
inline std::string key_path(const std::string& path, std::string_view key) {
  const bool plain = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (plain) return path.empty() ? std::string(key) : path + "." + std::string(key);
  return path + "[" + quote_key(key) + "]";
}

/// `path` extended by array index `i`.
inline std::string index_path(const std::string& path, std::size_t i) { return path + "[" + std::to_string(i) + "]"; }

/// Builds nlohmann's DOM through its SAX interface: a syntax error comes back as a
/// position instead of an exception, nesting stops at `max_depth` levels, and, when
/// `reject_duplicates`, a repeated object key is caught (else the last value counts, as
/// in `json::parse`).
class dom_builder {
 public:
  dom_builder(json& root, std::uint32_t max_depth, bool reject_duplicates) noexcept
      : root_(root), max_depth_(max_depth), reject_duplicates_(reject_duplicates) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json(std::move(v))); }
  bool start_object(std::size_t /*size*/) { return open(json::value_t::object); }
  bool start_array(std::size_t /*size*/) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(json::string_t& k) {
    frame& f = stack_.back();
    if (reject_duplicates_) {
      if (f.container->contains(k)) {
        duplicate_ = "duplicate key " + quote_key(k);
        duplicate_path_ = path_to_top();
        return false;
      }
      f.key = k;
    }
    f.slot = &(*f.container)[k];
    return true;
  }

  bool parse_error(std::size_t position, const std::string& /*last_token*/, const json::exception& ex) {
    syntax_position_ = position;
    // "[json.exception.parse_error.101] parse error at line 1, column 2: <reason>"
    std::string_view msg = ex.what();
    if (const auto bracket = msg.find("] "); msg.starts_with("[json.exception.") && bracket != msg.npos) {
      msg.remove_prefix(bracket + 2);
    }
    if (msg.starts_with("parse error")) {
      if (const auto colon = msg.find(": "); colon != msg.npos) msg.remove_prefix(colon + 2);
    }
    syntax_error_ = std::string(msg);
    syntax_error_id_ = ex.id;
    return false;
  }

  /// Set when the text is not JSON: nlohmann's reason (unquoted input included: print it
  /// with `printable`), its exception id and the characters read.
  [[nodiscard]] const std::optional<std::string>& syntax_error() const noexcept { return syntax_error_; }
  [[nodiscard]] int syntax_error_id() const noexcept { return syntax_error_id_; }
  [[nodiscard]] std::size_t syntax_position() const noexcept { return syntax_position_; }
  /// Whether the text nests deeper than the limit.
  [[nodiscard]] bool too_deep() const noexcept { return too_deep_; }
  /// Set when an object repeats a key: the problem and the JSON path of the object.
  [[nodiscard]] const std::optional<std::string>& duplicate() const noexcept { return duplicate_; }
  [[nodiscard]] const std::string& duplicate_path() const noexcept { return duplicate_path_; }

 private:
  struct frame {
    json* container;
    std::string key;       // objects, when rejecting duplicates: the key being read
    json* slot = nullptr;  // objects: where the value of the key goes
  };

  // The slot for the next value. A parent never grows while a child is open, so the
  // pointers into it on the stack stay valid.
  json* target() {
    if (stack_.empty()) return &root_;
    frame& f = stack_.back();
    if (f.container->is_array()) {
      f.container->push_back(json());
      return &f.container->back();
    }
    return f.slot;
  }

  bool put(json&& v) {
    *target() = std::move(v);
    return true;
  }

  bool open(json::value_t type) {
    if (stack_.size() >= max_depth_) {
      too_deep_ = true;
      return false;
    }
    json* slot = target();
    *slot = json(type);
    stack_.push_back(frame{slot, {}, nullptr});
    return true;
  }

  bool close() {
    stack_.pop_back();
    return true;
  }

  std::string path_to_top() const {
    std::string path;
    for (std::size_t i = 0; i + 1 < stack_.size(); ++i) {
      const frame& f = stack_[i];
      path = f.container->is_array() ? index_path(path, f.container->size() - 1) : key_path(path, f.key);
    }
    return path;
  }

  json& root_;
  std::uint32_t max_depth_;
  bool reject_duplicates_;
  std::vector<frame> stack_;
  std::optional<std::string> syntax_error_;
  int syntax_error_id_ = 0;
  std::size_t syntax_position_ = 0;
  bool too_deep_ = false;
  std::optional<std::string> duplicate_;
  std::string duplicate_path_;
};

/// The 1-based line of the bracket that opens level `max_depth` + 1 of `text`, or of its
/// end when no bracket does (strings skipped; only asked once the builder said too deep).
inline std::uint64_t line_too_deep(std::string_view text, std::uint32_t max_depth) {
  std::uint64_t line = 1, depth = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (c == '\n') ++line;
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return line;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return line;
}

/// The problem of nesting deeper than `max_depth` levels.
inline std::string too_deep_problem(std::uint32_t max_depth) {
  return "JSON nested deeper than " + std::to_string(max_depth) + " levels (input_limits::max_json_depth)";
}

/// The 1-based line of the character at which the parser stopped.
inline std::uint64_t line_at(std::string_view text, std::size_t position) {
  // `position` counts the characters read, the offending one included.
  const std::size_t upto = std::min(position > 0 ? position - 1 : 0, text.size());
  return static_cast<std::uint64_t>(std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(upto), '\n')) +
         1;
}

/// Throws the `parse_error` of a failed parse other than a syntax error (too deep, a
/// repeated key).
[[noreturn]] inline void fail_structure(const dom_builder& builder, std::string_view text, std::string_view file,
                                        std::uint32_t max_depth) {
  if (builder.too_deep()) io::detail::fail_at_line(file, line_too_deep(text, max_depth), too_deep_problem(max_depth));
  if (builder.duplicate()) {
    const std::string& path = builder.duplicate_path();
    io::detail::fail_file(file, path.empty() ? *builder.duplicate() : path + ": " + *builder.duplicate());
  }
  io::detail::fail_file(file, "invalid JSON");  // not reached: the builder rejects nothing else
}

}  // namespace detail::json_document

/// Parses the JSON document `text`; `name` stands for the file in messages.
///
/// Returns: the document.
/// Throws: `parse_error` naming `name` (see the header comment): a syntax error (with
/// its line), nesting deeper than `active_input_limits().max_json_depth` (with the line),
/// an object key given twice (with its JSON path).
/// Complexity: linear in the text; no recursion.
[[nodiscard]] inline nlohmann::json parse_json_document(std::string_view text, std::string_view name) {
  namespace jd = detail::json_document;
  const std::uint32_t max_depth = active_input_limits().max_json_depth;
  nlohmann::json root;
  jd::dom_builder builder(root, max_depth, /*reject_duplicates=*/true);
  if (nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &builder,
                                nlohmann::json::input_format_t::json, true)) {
    return root;
  }
  if (builder.syntax_error()) {
    io::detail::fail_at_line(name, jd::line_at(text, builder.syntax_position()),
                             "invalid JSON: " + io::detail::printable(*builder.syntax_error()));
  }
  jd::fail_structure(builder, text, name, max_depth);
}

/// As `parse_json_document`, reading the rest of `in`.
///
/// Throws: also `parse_error` on a read error or when `in` holds more than
/// `active_input_limits().max_json_bytes` bytes.
[[nodiscard]] inline nlohmann::json read_json_document(std::istream& in, std::string_view name) {
  return parse_json_document(detail::read_rest<std::string>(in, name, detail::json_limit()), name);
}

/// As `parse_json_document`, reading the file `path`.
///
/// Throws: also `parse_error` when the file cannot be read or holds more than
/// `active_input_limits().max_json_bytes` bytes (checked before reading when its size is
/// known).
[[nodiscard]] inline nlohmann::json read_json_document(const std::filesystem::path& path) {
  return parse_json_document(detail::read_all(path, detail::json_limit()), path.string());
}

}  // namespace moepolicy::io
