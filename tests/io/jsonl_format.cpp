// Tests of moepolicy/io/jsonl_format.hpp: telling the JSONL trace formats apart by their
// first line, the shared line reader's rules, and its fast path for plain records
// (io/detail/flat_json.hpp): exactly nlohmann's DOM, or nlohmann's own reading.
#include "moepolicy/io/jsonl_format.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/io/detail/flat_json.hpp"
#include "moepolicy/io/json_document.hpp"
#include "test_support.hpp"

namespace {

namespace io = moepolicy::io;
using io::jsonl_format;

}  // namespace

TEST_CASE("jsonl_format: names") {
  CHECK(io::to_string(jsonl_format::granite) == "granite");
  CHECK(io::to_string(jsonl_format::vllm_decode) == "vllm_decode");
  CHECK(io::to_string(jsonl_format::vllm_raw) == "vllm_raw");
  CHECK(io::to_string(jsonl_format::unknown) == "unknown");
}

TEST_CASE("jsonl_format: detection from the first line") {
  CHECK(io::detect_jsonl_format(
            R"({"record_type": "metadata", "format": "moe-cache-lab.routing-jsonl", "format_version": 1})") ==
        jsonl_format::granite);
  // The reader, not the detector, reports an unknown version.
  CHECK(io::detect_jsonl_format(
            R"({"record_type": "metadata", "format": "moe-cache-lab.routing-jsonl", "format_version": 7})") ==
        jsonl_format::granite);
  CHECK(io::detect_jsonl_format(R"({"record_type": "metadata", "format": "other"})") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format(R"({"record_type": "routing_selection", "layer": 0})") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format(R"({"format": "moe-cache-lab.routing-jsonl"})") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format(R"({"dataset": "humaneval", "layer": 0, "experts": [6, 5], "token_idx": 0})") ==
        jsonl_format::vllm_decode);
  CHECK(io::detect_jsonl_format(R"({"dataset": "humaneval", "layer": 0, "token_pos": 0, "experts": [5, 2]})") ==
        jsonl_format::vllm_raw);
  CHECK(io::detect_jsonl_format(R"({"token_pos": 0})") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format(R"({"experts": [1]})") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format("") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format("not json") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format("[1, 2]") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format(R"({"record_type": "metadata")") == jsonl_format::unknown);
  CHECK(io::detect_jsonl_format("{\"experts\": [], \"token_idx\": 0}\r") == jsonl_format::vllm_decode);
}

TEST_CASE("jsonl_format: detection from the first line of the test files") {
  const auto first_line = [](const char* name) {
    std::ifstream in(moepolicy::test::test_data() / "io" / name);
    std::string line;
    std::getline(in, line);
    return io::detect_jsonl_format(line);
  };
  CHECK(first_line("granite_a.jsonl") == jsonl_format::granite);
  CHECK(first_line("granite_version2.jsonl") == jsonl_format::granite);
  CHECK(first_line("vllm_decode_small.jsonl") == jsonl_format::vllm_decode);
  CHECK(first_line("vllm_raw_small.jsonl") == jsonl_format::vllm_raw);
  CHECK(first_line("empty.jsonl") == jsonl_format::unknown);
}

TEST_CASE("jsonl_format: the shared line reader") {
  std::istringstream in("{\"a\": 1}\r\n{}\n\n \n");
  io::detail::jsonl_lines lines(in, "s");
  nlohmann::json rec;
  REQUIRE(lines.next(rec));
  CHECK(lines.line() == 1);
  CHECK(rec["a"] == 1);
  REQUIRE(lines.next(rec));
  CHECK(lines.line() == 2);
  CHECK(rec.empty());
  CHECK_FALSE(lines.next(rec));
  CHECK_FALSE(lines.next(rec));

  std::istringstream bad;
  bad.setstate(std::ios::failbit);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::detail::jsonl_lines(bad, "s")), "s: the input stream is not readable",
                       moepolicy::parse_error);

  CHECK(io::detail::quote_text("a\"b\n") == "\"a\\\"b\\n\"");
  // Cut at 64 bytes, never inside a UTF-8 sequence: 63 ASCII bytes and a 2-byte "é".
  CHECK(io::detail::quote_text(std::string(63, 'x') + "\xc3\xa9" + "tail") == "\"" + std::string(63, 'x') + "...\"");
  CHECK(io::detail::printable("ok\x01\xff") == "ok\\x01\\xff");
  CHECK(io::detail::printable(std::string(300, 'a')) == std::string(200, 'a') + "...");
  CHECK(io::detail::printable("abc", 3) == "abc");
  CHECK(io::detail::printable("abcd", 3) == "abc...");
}

TEST_CASE("jsonl_format: lines, records and files are bounded") {
  // The review's finding: a 1 GiB line took 2–4 GB of memory before an answer.
  {
    moepolicy::scoped_input_limits small({.max_line_bytes = 1024});
    std::istringstream in("{\"a\": 1}\n{\"b\": \"" + std::string(1 << 20, 'x') + "\"}\n");
    io::detail::jsonl_lines lines(in, "s");
    nlohmann::json rec;
    REQUIRE(lines.next(rec));
    CHECK_THROWS_WITH_AS(lines.next(rec),
                         "s:2: line longer than the limit of 1024 bytes (input_limits::max_line_bytes)",
                         moepolicy::parse_error);
  }
  {
    const std::string deep = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
    std::istringstream in("{}\n" + deep + "\n");
    io::detail::jsonl_lines lines(in, "s");
    nlohmann::json rec;
    REQUIRE(lines.next(rec));
    CHECK_THROWS_WITH_AS(lines.next(rec), "s:2: JSON nested deeper than 64 levels (input_limits::max_json_depth)",
                         moepolicy::parse_error);
    CHECK(io::detect_jsonl_format(deep) == jsonl_format::unknown);
  }
  {
    moepolicy::scoped_input_limits small({.max_file_bytes = 20});
    std::istringstream in("{\"a\": 1}\n{\"a\": 2}\n{\"a\": 3}\n");
    io::detail::jsonl_lines lines(in, "s");
    nlohmann::json rec;
    REQUIRE(lines.next(rec));
    REQUIRE(lines.next(rec));
    CHECK_THROWS_WITH_AS(lines.next(rec), "s: larger than the limit of 20 bytes (input_limits::max_file_bytes)",
                         moepolicy::parse_error);
  }
  // Input bytes quoted in a syntax error are escaped.
  std::istringstream esc("{\"a\": \x1b[31m}\n");
  io::detail::jsonl_lines lines(esc, "s");
  nlohmann::json rec;
  CHECK_THROWS_WITH_AS(lines.next(rec),
                       "s:1: invalid JSON at column 7: syntax error while parsing value - invalid literal; last read: "
                       "'\"a\": <U+001B>'",
                       moepolicy::parse_error);
}

namespace {

/// nlohmann's DOM of `text` through the builder every reader uses, or nothing on failure.
std::optional<nlohmann::json> by_nlohmann(std::string_view text, std::uint32_t depth, bool reject_duplicates) {
  nlohmann::json j;
  moepolicy::io::detail::json_document::dom_builder b(j, depth, reject_duplicates);
  if (!nlohmann::json::sax_parse(text.data(), text.data() + text.size(), &b, nlohmann::json::input_format_t::json,
                                 true)) {
    return std::nullopt;
  }
  return j;
}

/// Whether `a` and `b` are the same DOM, number types included.
bool same_dom(const nlohmann::json& a, const nlohmann::json& b) {
  if (a.type() != b.type() || a != b) return false;
  if (a.is_object()) {
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!same_dom(it.value(), b.at(it.key()))) return false;
    }
  }
  if (a.is_array()) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (!same_dom(a[i], b[i])) return false;
    }
  }
  return true;
}

}  // namespace

TEST_CASE("json fast path: plain JSON is read by the fast path into exactly nlohmann's DOM") {
  using moepolicy::io::detail::parse_flat_record;
  for (const std::string_view text : {
           R"({"layer": 0, "phase": "prompt", "ids": [7, 31], "p": [0.3230019807815552, 1e-5, 2.5E+3]})",
           R"({"a": -0, "b": 0, "c": -9223372036854775808, "d": 18446744073709551615, "e": 1.0})",
           R"({"s": "tab\there \"q\" \\ \/ \b\f\n\r", "t": true, "f": false, "n": null, "x": [], "o": {}})",
           R"(  {"tok": 0, "layers": [[36, 38], [51, 139], []]}  )",
           R"({"a": 1, "a": [2]})",
           "{}",
       }) {
    CAPTURE(text);
    nlohmann::json fast;
    REQUIRE(parse_flat_record(text, fast, 64));
    const auto slow = by_nlohmann(text, 64, false);
    REQUIRE(slow);
    CHECK(same_dom(fast, *slow));
  }
  for (const std::string_view text : {R"({"a": [1, 2.5, "s", null, {"k": {"deep": [[1]]}}]})",
                                      R"({"datasets": {"c4": {"counts": [[1, 2], [3, 4]]}}})"}) {
    CAPTURE(text);
    nlohmann::json fast;
    REQUIRE(parse_flat_record(text, fast, 64));
    const auto slow = by_nlohmann(text, 64, false);
    REQUIRE(slow);
    CHECK(same_dom(fast, *slow));
  }
}

TEST_CASE("json fast path: one DOM read record after record is each record's own DOM") {
  // The scanner reuses the previous record's nodes: keys that go away, arrays that shrink
  // or grow, values that change type and repeated keys must leave exactly nlohmann's DOM.
  using moepolicy::io::detail::parse_flat_record;
  nlohmann::json out;
  for (
      const std::string_view text : {
          R"({"layer": 0, "phase": "prompt", "experts": [7, 31, 28], "p": [0.5, 0.25, 0.25], "meta": {"a": 1, "b": [1, 2]}})",
          R"({"layer": 1, "phase": "prompt", "experts": [7, 31, 28], "p": [0.5, 0.25, 0.25], "meta": {"a": 1, "b": [1, 2]}})",
          R"({"layer": 2, "phase": "decode", "experts": [3], "meta": {"b": []}})",
          R"({"layer": 3, "phase": "a much longer phase name than before", "experts": [1, 2, 3, 4, 5]})",
          R"({"layer": "x", "phase": 4, "experts": {"0": [1]}, "meta": [{"a": 1}, 2, "s"]})",
          R"({"layer": -1, "layer": [1, 2], "experts": [[1, [2]], {}], "meta": [{"b": 2}]})",
          R"({"layer": -1, "experts": [null, true, false], "meta": {"a": {"c": 1}}})",
          R"({"z": 1, "a": 2, "z": 3})",
          "{}",
          R"({"layer": 9, "experts": [7, 31, 28], "p": [0.5, 0.25, 0.25], "meta": {"a": 1, "b": [1, 2]}})",
      }) {
    CAPTURE(text);
    REQUIRE(parse_flat_record(text, out, 64));
    const auto slow = by_nlohmann(text, 64, false);
    REQUIRE(slow);
    CHECK(same_dom(out, *slow));
  }
  // A record the scanner gives up on halfway leaves `out` unspecified; the next one read
  // into it is still exact.
  CHECK_FALSE(parse_flat_record(R"({"layer": 5, "experts": [1, 2, "\u00e9"]})", out, 64));
  const std::string_view next = R"({"layer": 6, "experts": [1]})";
  REQUIRE(parse_flat_record(next, out, 64));
  CHECK(same_dom(out, *by_nlohmann(next, 64, false)));
}

TEST_CASE("json fast path: what it does not read exactly is left to nlohmann") {
  using moepolicy::io::detail::parse_flat_record;
  nlohmann::json out;
  for (const std::string_view text : {
           R"({"s": "\u00e9"})",              // \u escapes
           "{\"s\": \"caf\xc3\xa9\"}",        // non-ASCII (nlohmann validates UTF-8)
           "{\"s\": \"a\tb\"}",               // a raw control character
           R"({"x": 1e400})",                 // beyond a double: nlohmann's error
           R"({"x": 18446744073709551616})",  // beyond 64 bits: nlohmann makes it a double
           R"({"x": -9223372036854775809})",
           R"({"x": 01})",
           R"({"x": 1.})",
           R"({"x": .5})",
           R"({"x": +1})",
           R"({"x": 1e})",
           R"({"x": tru})",
           R"({"x": 1,})",
           R"({"x": 1} {})",
           R"({"x" 1})",
           R"({"x": [1,]})",
           "\xef\xbb\xbf{\"x\": 1}",  // a byte-order mark
           "[1]",                     // a record must be an object
           R"({"x": {"y": 1}})",      // kept: an object inside a record is fine too
       }) {
    CAPTURE(text);
    const bool fast = parse_flat_record(text, out, 64);
    if (text == R"({"x": {"y": 1}})") {
      CHECK(fast);
    } else {
      CHECK_FALSE(fast);
    }
  }
  // Depth beyond the limit is nlohmann's to report, and beyond 16 levels its to read.
  CHECK_FALSE(parse_flat_record(R"({"a": [[1]]})", out, 2));
  CHECK(parse_flat_record(R"({"a": [[1]]})", out, 3));
  CHECK_FALSE(parse_flat_record(R"({"a": [[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]})", out, 64));  // 17 levels
  CHECK(parse_flat_record(R"({"a": [[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]})", out, 64));          // 16 levels
}

TEST_CASE("json fast path: the records' messages are still nlohmann's") {
  std::istringstream in("{\"x\": 1e400}\n");
  moepolicy::io::detail::jsonl_lines lines(in, "r.jsonl");
  nlohmann::json rec;
  CHECK_THROWS_WITH_AS(static_cast<void>(lines.next(rec)), "r.jsonl:1: invalid JSON: number overflow parsing '1e400'",
                       moepolicy::parse_error);
}
