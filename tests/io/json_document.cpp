#include "moepolicy/io/json_document.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "moepolicy/core/input_limits.hpp"
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
  {
    std::ofstream(path) << "[" << std::string(100, ' ') << "]";
  }
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
