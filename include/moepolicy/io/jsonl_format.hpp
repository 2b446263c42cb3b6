// moepolicy/io/jsonl_format.hpp — telling the JSON-lines routing-trace formats apart,
// and the line reader and field checks that the JSONL importers share.
//
// Three JSONL formats are read (see the importers for each one's fields and mapping):
//   granite      moe-cache-lab.routing-jsonl: a metadata line, then routing_selection
//                records (io/granite_jsonl.hpp);
//   vllm_decode  vLLM Mixtral decode-only records with `token_idx` (io/vllm_jsonl.hpp);
//   vllm_raw     vLLM Mixtral prefill+decode records with `token_pos` (io/vllm_jsonl.hpp).
//
// Line rules common to the three readers (in `detail::jsonl_lines`): one JSON object per
// line, separated by '\n' (a trailing '\r' is JSON whitespace and accepted); the last
// line may lack its '\n'; blank lines (empty or whitespace only) are accepted only at
// the end of the input, where editors leave them: a blank line followed by a record
// is an error naming the blank line, because a hole in a trace is more often damage
// than intent. Fields a reader does not know are ignored; when a key appears twice in
// one object the last value counts (nlohmann-json's rule). A line may hold at most
// `input_limits::max_line_bytes` bytes, a record nest at most
// `input_limits::max_json_depth` levels, a file at most `input_limits::max_file_bytes`
// bytes (core/input_limits.hpp).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <istream>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/io/detail/flat_json.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/json_document.hpp"

namespace moepolicy::io {

/// A JSONL routing-trace format this library reads.
enum class jsonl_format : std::uint8_t { granite, vllm_decode, vllm_raw, warp, unknown };

/// "granite", "vllm_decode", "vllm_raw", "warp" or "unknown".
[[nodiscard]] constexpr std::string_view to_string(jsonl_format f) noexcept {
  switch (f) {
    case jsonl_format::granite:
      return "granite";
    case jsonl_format::vllm_decode:
      return "vllm_decode";
    case jsonl_format::vllm_raw:
      return "vllm_raw";
    case jsonl_format::warp:
      return "warp";
    case jsonl_format::unknown:
      break;
  }
  return "unknown";
}

/// Which importer reads a file whose first line is `first_line`.
///
/// Returns: `granite` for a JSON object with `"record_type": "metadata"` and
/// `"format": "moe-cache-lab.routing-jsonl"` (whatever its format_version: the reader
/// reports an unknown version); `vllm_decode` for an object with `experts` and
/// `token_idx`; `vllm_raw` for one with `experts` and `token_pos`; `warp` for one with
/// `tok` and `layers` (io/warp_jsonl.hpp); otherwise `unknown`
/// (also for text that is not JSON). Only the keys are looked at: the reader checks
/// the values.
[[nodiscard]] inline jsonl_format detect_jsonl_format(std::string_view first_line) {
  const std::uint32_t max_depth = active_input_limits().max_json_depth;
  nlohmann::json j;
  if (!detail::parse_flat_record(first_line, j, max_depth)) {
    j = nlohmann::json();
    detail::json_document::dom_builder builder(j, max_depth, /*reject_duplicates=*/false);
    if (!nlohmann::json::sax_parse(first_line.data(), first_line.data() + first_line.size(), &builder,
                                   nlohmann::json::input_format_t::json, true) ||
        !j.is_object()) {
      return jsonl_format::unknown;
    }
  }
  const auto text_is = [&](const char* key, std::string_view want) {
    const auto it = j.find(key);
    return it != j.end() && it->is_string() && it->get_ref<const std::string&>() == want;
  };
  if (text_is("record_type", "metadata") && text_is("format", "moe-cache-lab.routing-jsonl")) {
    return jsonl_format::granite;
  }
  if (j.contains("experts")) {
    if (j.contains("token_idx")) return jsonl_format::vllm_decode;
    if (j.contains("token_pos")) return jsonl_format::vllm_raw;
  }
  if (j.contains("tok") && j.contains("layers")) return jsonl_format::warp;
  return jsonl_format::unknown;
}

namespace detail {

using json = nlohmann::json;

/// A string value as a message quotes it: JSON-escaped, in quotes, cut to 64 bytes.
inline std::string quote_text(const std::string& s) {
  constexpr std::size_t max_bytes = 64;
  if (s.size() <= max_bytes) return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
  std::size_t cut = max_bytes;
  // Cut at a UTF-8 boundary: never between a lead byte and its continuation bytes.
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0u) == 0x80u) --cut;
  std::string out = json(s.substr(0, cut)).dump(-1, ' ', false, json::error_handler_t::replace);
  out.insert(out.size() - 1, "...");
  return out;
}

/// What kind of JSON value `v` is, as messages name it.
inline std::string_view describe(const json& v) noexcept {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a floating-point number";
    case json::value_t::binary:
      return "binary data";
    case json::value_t::discarded:
      break;
  }
  return "nothing";
}

/// Reads a JSONL stream record by record, counting lines for error messages and
/// enforcing the line rules of this header's opening comment.
class jsonl_lines {
 public:
  /// Throws: `parse_error` naming `file` when the stream is not readable.
  jsonl_lines(std::istream& in, std::string_view file) : in_(in), file_(file) {
    if (!in_) fail_file(file_, "the input stream is not readable");
  }

  /// Reads the next record into `out`, a JSON object. Returns false at the end.
  ///
  /// Throws: `parse_error` at the line for text that is not JSON, a value that is not
  /// an object, a blank line followed by a record, a line longer than
  /// `input_limits::max_line_bytes` or JSON nested deeper than
  /// `input_limits::max_json_depth`; at no line for a read error or input beyond
  /// `input_limits::max_file_bytes`.
  bool next(json& out) {
    const input_limits& limits = active_input_limits();
    bool too_long = false;
    while (read_line(in_, buf_, limits.max_line_bytes, too_long)) {
      ++line_;
      if (too_long) {
        fail("line longer than the limit of " + std::to_string(limits.max_line_bytes) +
             " bytes (input_limits::max_line_bytes)");
      }
      bytes_ += buf_.size();
      if (bytes_ > limits.max_file_bytes) fail_too_large(file_, file_limit());
      ++bytes_;  // the '\n', counted with the next line's bytes
      if (buf_.find_first_not_of(" \t\r") == std::string::npos) {
        if (blank_ == 0) blank_ = line_;
        continue;
      }
      if (blank_ != 0) {
        fail_at_line(file_, blank_, "blank line inside the input (only trailing blank lines are allowed)");
      }
      parse(out, limits.max_json_depth);
      if (!out.is_object()) fail(std::string("expected a JSON object, got ") + std::string(describe(out)));
      return true;
    }
    if (in_.bad()) fail_file(file_, "read error after line " + std::to_string(line_));
    return false;
  }

  /// The 1-based line of the last record `next` returned (0 before the first).
  [[nodiscard]] std::uint64_t line() const noexcept { return line_; }
  /// The file name used in messages.
  [[nodiscard]] std::string_view file() const noexcept { return file_; }

  /// Throws `parse_error` at the current line.
  [[noreturn]] void fail(const std::string& problem) const { fail_at_line(file_, line_, problem); }

 private:
  void parse(json& out, std::uint32_t max_depth) {
    namespace jd = json_document;
    // The records of every trace this library reads take the fast path; anything else (and
    // every error) is nlohmann's, as if the fast path did not exist (io/detail/flat_json.hpp).
    if (parse_flat_record(buf_, out, max_depth)) return;
    out = json();
    jd::dom_builder builder(out, max_depth, /*reject_duplicates=*/false);
    if (json::sax_parse(buf_.data(), buf_.data() + buf_.size(), &builder, json::input_format_t::json, true)) return;
    if (builder.too_deep()) fail(jd::too_deep_problem(max_depth));
    // A syntax error (nlohmann's parse_error) has a column; a number beyond a double
    // (out_of_range.406, 1e400) does not.
    const std::string reason = builder.syntax_error().value_or("");
    if (builder.syntax_error_id() >= 100 && builder.syntax_error_id() < 200) {
      fail("invalid JSON at column " + std::to_string(builder.syntax_position()) + ": " + printable(reason));
    }
    fail("invalid JSON: " + printable(reason));
  }

  std::istream& in_;
  std::string file_;
  std::string buf_;
  std::uint64_t line_ = 0;
  std::uint64_t blank_ = 0;
  std::uint64_t bytes_ = 0;
};

/// The value of `key` in `obj`.
///
/// Throws: `parse_error` at the current line of `at` when the field is missing.
inline const json& require(const jsonl_lines& at, const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) at.fail(std::string("missing field \"") + key + '"');
  return *it;
}

/// The integer field `key`, in [`lo`, `hi`].
///
/// Throws: `parse_error` when missing, not an integer, or out of range.
inline std::uint64_t require_uint(const jsonl_lines& at, const json& obj, const char* key, std::uint64_t lo,
                                  std::uint64_t hi) {
  const json& v = require(at, obj, key);
  if (!v.is_number_integer()) {
    at.fail(std::string("field \"") + key + "\" must be an integer, got " + std::string(describe(v)));
  }
  // nlohmann stores non-negative literals as unsigned, except "-0".
  const bool negative = !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
  if (negative || v.get<std::uint64_t>() < lo || v.get<std::uint64_t>() > hi) {
    at.fail(std::string("field \"") + key + "\" = " + v.dump() + " is out of range [" + std::to_string(lo) + ", " +
            std::to_string(hi) + "]");
  }
  return v.get<std::uint64_t>();
}

/// The string field `key`.
///
/// Throws: `parse_error` when missing or not a string.
inline const std::string& require_string(const jsonl_lines& at, const json& obj, const char* key) {
  const json& v = require(at, obj, key);
  if (!v.is_string()) at.fail(std::string("field \"") + key + "\" must be a string, got " + std::string(describe(v)));
  return v.get_ref<const std::string&>();
}

/// The string field `key`, or "" when absent.
///
/// Throws: `parse_error` when present and not a string.
inline std::string optional_string(const jsonl_lines& at, const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end()) return {};
  if (!it->is_string()) {
    at.fail(std::string("field \"") + key + "\" must be a string, got " + std::string(describe(*it)));
  }
  return it->get<std::string>();
}

/// The array field `key`.
inline const json& require_array(const jsonl_lines& at, const json& obj, const char* key) {
  const json& v = require(at, obj, key);
  if (!v.is_array()) at.fail(std::string("field \"") + key + "\" must be an array, got " + std::string(describe(v)));
  return v;
}

/// The expert ids of the array field `key`, into `out`. Whether they fit the model
/// (below num_experts, none twice, as many as top_k) is `routing_trace_builder::check`'s
/// part.
///
/// Throws: `parse_error` when missing, not an array, or holding anything but integers
/// in [0, 65535].
inline void require_expert_ids(const jsonl_lines& at, const json& obj, const char* key, std::vector<expert_id>& out) {
  const json& arr = require_array(at, obj, key);
  out.clear();
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    if (!v.is_number_integer()) {
      at.fail(std::string("field \"") + key + "\" must hold integers, got " + std::string(describe(v)) + " at index " +
              std::to_string(i));
    }
    const bool negative = !v.is_number_unsigned() && v.get<std::int64_t>() < 0;
    if (negative || v.get<std::uint64_t>() > 65535u) {
      at.fail("expert id " + v.dump() + " in \"" + key + "\" is out of range [0, 65535]");
    }
    out.push_back(static_cast<expert_id>(v.get<std::uint64_t>()));
  }
}

/// The gate weights of the array field `key`, into `out` as float. Whether they are
/// non-negative is `routing_trace_builder::check`'s part.
///
/// Throws: `parse_error` when missing, not an array, holding anything but numbers, or
/// holding a number whose magnitude exceeds the largest float.
inline void require_weights(const jsonl_lines& at, const json& obj, const char* key, std::vector<float>& out) {
  const json& arr = require_array(at, obj, key);
  out.clear();
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const json& v = arr[i];
    if (!v.is_number()) {
      at.fail(std::string("field \"") + key + "\" must hold numbers, got " + std::string(describe(v)) + " at index " +
              std::to_string(i));
    }
    const double d = v.get<double>();
    // The parser rejects infinities, but a finite double may still not fit a float
    // (and converting it would be undefined behaviour).
    if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(FLT_MAX)) {
      at.fail("gate weight " + v.dump() + " in \"" + key + "\" does not fit a float");
    }
    out.push_back(static_cast<float>(d));
  }
}

}  // namespace detail
}  // namespace moepolicy::io
