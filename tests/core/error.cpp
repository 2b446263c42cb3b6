#include "moepolicy/core/error.hpp"

#include <doctest/doctest.h>

#include <string>

using moepolicy::file_location;
using moepolicy::parse_error;

TEST_CASE("throw_invalid names the function, the problem and the value") {
  CHECK_THROWS_WITH_AS(moepolicy::detail::throw_invalid("plan_makespan", "num_devices must be > 0", 0),
                       "moepolicy::plan_makespan: num_devices must be > 0, got 0",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(moepolicy::detail::throw_invalid("f", "name must be known", std::string("gpu0")),
                       "moepolicy::f: name must be known, got \"gpu0\"", moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(moepolicy::detail::throw_invalid("f", "alpha must be in [0, 1]", 1.5),
                       "moepolicy::f: alpha must be in [0, 1], got 1.5", moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(moepolicy::detail::throw_invalid("f", "no value here"), "moepolicy::f: no value here",
                       moepolicy::invalid_argument);
}

TEST_CASE("invalid_argument is a std::invalid_argument") {
  CHECK_THROWS_AS(moepolicy::detail::throw_invalid("f", "p", 1), std::invalid_argument);
}

TEST_CASE("parse_error carries file and line or byte offset") {
  const parse_error by_line("trace.jsonl", {file_location::kind::line, 12}, "expert id 40 >= num_experts 32");
  CHECK(std::string(by_line.what()) == "trace.jsonl:12: expert id 40 >= num_experts 32");
  CHECK(by_line.file() == "trace.jsonl");
  CHECK(by_line.where().value == 12);
  CHECK(by_line.problem() == "expert id 40 >= num_experts 32");

  const parse_error by_offset("t.mtrace", {file_location::kind::byte_offset, 64}, "truncated column");
  CHECK(std::string(by_offset.what()) == "t.mtrace: byte 64: truncated column");
  CHECK(by_offset.where().unit == file_location::kind::byte_offset);
}
