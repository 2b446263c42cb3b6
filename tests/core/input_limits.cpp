#include "moepolicy/core/input_limits.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "moepolicy/detail/file_input.hpp"

using moepolicy::input_limits;
using moepolicy::invalid_argument;
using moepolicy::parse_error;

TEST_CASE("input limits: the defaults, and per-thread, scoped replacement") {
  const input_limits d;
  CHECK(d.max_file_bytes == std::uint64_t{1} << 32);
  CHECK(d.max_json_bytes == std::uint64_t{1} << 26);
  CHECK(d.max_line_bytes == std::uint64_t{1} << 24);
  CHECK(d.max_json_depth == 64);
  CHECK(moepolicy::active_input_limits().max_line_bytes == d.max_line_bytes);
  {
    moepolicy::scoped_input_limits small({.max_line_bytes = 10, .max_json_depth = 3});
    CHECK(moepolicy::active_input_limits().max_line_bytes == 10);
    CHECK(moepolicy::active_input_limits().max_json_depth == 3);
    CHECK(moepolicy::active_input_limits().max_file_bytes == d.max_file_bytes);
    // Another thread keeps its own bounds.
    std::uint64_t other = 0;
    std::thread([&] { other = moepolicy::active_input_limits().max_line_bytes; }).join();
    CHECK(other == d.max_line_bytes);
  }
  CHECK(moepolicy::active_input_limits().max_line_bytes == d.max_line_bytes);
  const input_limits before = moepolicy::set_input_limits({.max_file_bytes = 5});
  CHECK(before.max_file_bytes == d.max_file_bytes);
  CHECK(moepolicy::active_input_limits().max_file_bytes == 5);
  moepolicy::set_input_limits(before);
}

TEST_CASE("input limits: a zero bound is an error naming the field") {
  CHECK_THROWS_WITH_AS(moepolicy::set_input_limits({.max_file_bytes = 0}),
                       "moepolicy::input_limits::validate: max_file_bytes must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(moepolicy::set_input_limits({.max_json_bytes = 0}),
                       "moepolicy::input_limits::validate: max_json_bytes must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(moepolicy::scoped_input_limits({.max_line_bytes = 0}),
                       "moepolicy::input_limits::validate: max_line_bytes must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(moepolicy::scoped_input_limits({.max_json_depth = 0}),
                       "moepolicy::input_limits::validate: max_json_depth must be >= 1, got 0", invalid_argument);
  CHECK(moepolicy::active_input_limits().max_file_bytes == input_limits{}.max_file_bytes);
}

TEST_CASE("reading a whole input stops one byte past its bound") {
  namespace d = moepolicy::detail;
  std::istringstream exact(std::string(100, 'x'));
  CHECK(d::read_rest<std::string>(exact, "s", {100, "max_json_bytes"}).size() == 100);
  std::istringstream over(std::string(101, 'x'));
  CHECK_THROWS_WITH_AS(d::read_rest<std::string>(over, "s", {100, "max_json_bytes"}),
                       "s: larger than the limit of 100 bytes (input_limits::max_json_bytes)", parse_error);
  // A stream that cannot tell its size is read in chunks, never far past the bound.
  std::stringstream pipe(std::string(1 << 20, 'z'));
  CHECK_THROWS_WITH_AS(d::read_rest<std::string>(pipe, "pipe", {1000, "max_file_bytes"}, 0),
                       "pipe: larger than the limit of 1000 bytes (input_limits::max_file_bytes)", parse_error);
  // The thread's bounds are the defaults of read_all and read_all_bytes.
  moepolicy::scoped_input_limits small({.max_file_bytes = 3});
  std::istringstream four("abcd");
  CHECK_THROWS_WITH_AS(d::read_all_bytes(four, "four"), "four: larger than the limit of 3 bytes (input_limits::max_file_bytes)",
                       parse_error);
}

TEST_CASE("read_line reads lines of any length up to its bound, and says when one is longer") {
  namespace d = moepolicy::detail;
  const std::string long_line(10000, 'a');
  std::istringstream in("one\n\n" + long_line + "\r\n" + std::string(4095, 'b') + "\n" + std::string(4096, 'c') +
                        "\nlast");
  std::string line;
  bool too_long = true;
  std::vector<std::string> lines;
  while (d::read_line(in, line, 20000, too_long)) {
    CHECK_FALSE(too_long);
    lines.push_back(line);
  }
  REQUIRE(lines.size() == 6);
  CHECK(lines[0] == "one");
  CHECK(lines[1].empty());
  CHECK(lines[2] == long_line + "\r");
  CHECK(lines[3] == std::string(4095, 'b'));
  CHECK(lines[4] == std::string(4096, 'c'));
  CHECK(lines[5] == "last");

  // A line longer than the bound: the reader stops after bound + 1 bytes of it at most
  // a buffer's worth later, and says so.
  std::istringstream huge(std::string(1 << 20, 'x') + "\nnext\n");
  CHECK(d::read_line(huge, line, 100, too_long));
  CHECK(too_long);
  CHECK(line.size() > 100);
  CHECK(line.size() <= 100 + 4096);
  std::istringstream at_bound(std::string(100, 'y') + "\n" + std::string(101, 'y'));
  CHECK(d::read_line(at_bound, line, 100, too_long));
  CHECK_FALSE(too_long);
  CHECK(d::read_line(at_bound, line, 100, too_long));
  CHECK(too_long);

  std::istringstream empty("");
  CHECK_FALSE(d::read_line(empty, line, 100, too_long));
  std::istringstream one_newline("\n");
  CHECK(d::read_line(one_newline, line, 100, too_long));
  CHECK(line.empty());
  CHECK_FALSE(d::read_line(one_newline, line, 100, too_long));
}
