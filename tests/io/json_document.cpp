#include "moepolicy/io/json_document.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>

#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/io/detail/flat_json.hpp"
#include "test_support.hpp"

namespace io = moepolicy::io;
using moepolicy::parse_error;

namespace {

nlohmann::json parse(const std::string& text) { return io::parse_json_document(text, "d.json"); }

}  // namespace

TEST_CASE("json document: a document reads into nlohmann's DOM") {
  const auto j = parse("{\"a\": [1, 2.5, \"x\"], \"b\": {\"c\": null, \"d\": true}}");
  CHECK(j.at("a").size() == 3);
  CHECK(j.at("a").at(1) == 2.5);
  CHECK(j.at("b").at("d") == true);
  CHECK(parse("7") == 7);
  CHECK(parse(std::string(64, '[') + std::string(64, ']')).is_array());
}

TEST_CASE("json document: syntax errors name the line, with the input's bytes escaped") {
  CHECK_THROWS_WITH_AS(parse("{\"a\":\n\n[1e999]}"), "d.json:3: invalid JSON: number overflow parsing '1e999'",
                       parse_error);
  CHECK_THROWS_WITH_AS(parse("{\"a\": \x1b[2J}"),
                       "d.json:1: invalid JSON: syntax error while parsing value - invalid literal; last read: "
                       "'\"a\": <U+001B>'",
                       parse_error);
  CHECK_THROWS_WITH_AS(parse(""),
                       "d.json:1: invalid JSON: syntax error while parsing value - unexpected end of input; expected "
                       "'[', '{', or a literal",
                       parse_error);
}

TEST_CASE("json document: nesting deeper than the bound stops at its line, without recursion") {
  // The review's finding: 100,000 levels crashed the tool (a stack overflow in code that
  // copied and printed the value recursively).
  const std::string deep = "{\n\"a\":\n" + std::string(100000, '[') + std::string(100000, ']') + "}";
  CHECK_THROWS_WITH_AS(parse(deep), "d.json:3: JSON nested deeper than 64 levels (input_limits::max_json_depth)",
                       parse_error);
  CHECK_THROWS_WITH_AS(parse(std::string(65, '[')),
                       "d.json:1: JSON nested deeper than 64 levels (input_limits::max_json_depth)", parse_error);
  // Brackets inside strings do not count.
  CHECK(parse("[\"" + std::string(100, '[') + "\\\"[\"]").size() == 1);
  moepolicy::scoped_input_limits shallow({.max_json_depth = 2});
  CHECK(parse("[[1]]").size() == 1);
  CHECK_THROWS_WITH_AS(parse("[\"[[[\",\n[[1]]]"),
                       "d.json:2: JSON nested deeper than 2 levels (input_limits::max_json_depth)", parse_error);
}

TEST_CASE("json document: a repeated key names its path") {
  CHECK_THROWS_WITH_AS(parse("{\"a\": {\"b\": 1, \"b\": 2}}"), "d.json: a: duplicate key \"b\"", parse_error);
  CHECK_THROWS_WITH_AS(parse("{\"x\": 1, \"x\": 1}"), "d.json: duplicate key \"x\"", parse_error);
  CHECK_THROWS_WITH_AS(parse("{\"a b\": [{}, {\"\\u001b\": 1, \"\\u001b\": 2}]}"),
                       "d.json: [\"a b\"][1]: duplicate key \"\\x1b\"", parse_error);
}

TEST_CASE("json document: a document larger than the bound is refused before it is parsed") {
  const auto dir = std::filesystem::temp_directory_path() / "moepolicy-json-document";
  std::filesystem::create_directories(dir);
  const auto path = dir / "big.json";
  { std::ofstream(path) << "[" << std::string(100, ' ') << "]"; }
  CHECK(io::read_json_document(path).empty());
  moepolicy::scoped_input_limits small({.max_json_bytes = 64});
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_json_document(path)),
                       (path.string() + ": larger than the limit of 64 bytes (input_limits::max_json_bytes)").c_str(),
                       parse_error);
  std::istringstream in("[" + std::string(100, ' ') + "]");
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_json_document(in, "-")),
                       "-: larger than the limit of 64 bytes (input_limits::max_json_bytes)", parse_error);
  std::filesystem::remove_all(dir);
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
  using moepolicy::io::detail::parse_flat_document;
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
  for (const std::string_view text : {R"([1, 2.5, "s", null, {"k": {"deep": [[1]]}}])", "12", R"("s")",
                                      R"({"datasets": {"c4": {"counts": [[1, 2], [3, 4]]}}})"}) {
    CAPTURE(text);
    nlohmann::json fast;
    REQUIRE(parse_flat_document(text, fast, 64));
    const auto slow = by_nlohmann(text, 64, true);
    REQUIRE(slow);
    CHECK(same_dom(fast, *slow));
  }
}

TEST_CASE("json fast path: what it does not read exactly is left to nlohmann") {
  using moepolicy::io::detail::parse_flat_document;
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
  // Duplicates are nlohmann's to report in whole documents; depth beyond the limit too.
  CHECK_FALSE(parse_flat_document(R"({"a": 1, "a": 2})", out, 64));
  CHECK_FALSE(parse_flat_record(R"({"a": [[1]]})", out, 2));
  CHECK(parse_flat_record(R"({"a": [[1]]})", out, 3));
  CHECK_FALSE(parse_flat_document("[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]", out, 64));  // 17 levels: nlohmann's
  // The readers' messages are nlohmann's path's, unchanged.
  CHECK_THROWS_WITH_AS(static_cast<void>(moepolicy::io::parse_json_document(R"({"a": 1, "a": 2})", "t.json")),
                       "t.json: duplicate key \"a\"", moepolicy::parse_error);
}
