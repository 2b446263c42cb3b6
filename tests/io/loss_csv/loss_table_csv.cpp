#include "moepolicy/io/loss_table_csv.hpp"

#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "moepolicy/io/tables_json.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {
loss_table read(const std::string& text) {
  std::istringstream in(text);
  return io::read_loss_table_csv(in, "l.csv");
}
const std::string head = "layer,expert,bits,loss\n";
}  // namespace

TEST_CASE("reads rows in any order into L(layer, expert, bits)") {
  const loss_table t = read(head + "0,1,2,4\n0,0,1,10\n0,1,1,8\r\n0,0,2,5\n");
  CHECK(t.num_layers() == 1);
  CHECK(t.num_experts() == 2);
  CHECK(t.num_bits() == 2);
  CHECK(t.loss_at(0, 0, bitwidth{1}) == 10.0);
  CHECK(t.loss_at(0, 1, bitwidth{2}) == 4.0);
}

TEST_CASE("every malformed row is named by file and line") {
  CHECK_PARSE_ERROR(static_cast<void>(read("l,e,b,x\n")),
                    "l.csv:1: expected the header \"layer,expert,bits,loss\", got \"l,e,b,x\"");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,1\n")), "l.csv:2: expected 4 cells, got 3");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,x,1,2\n")), "l.csv:2: expert \"x\" is not a whole number");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,33,2\n")), "l.csv:2: bits 33 exceeds 32");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,0,2\n")), "l.csv:2: bits must be in [1, 32], got 0");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,1,-2\n")), "l.csv:2: loss must be finite and >= 0, got -2");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,1,abc\n")), "l.csv:2: loss \"abc\" is not a number");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,1,2\n0,0,1,3\n")),
                    "l.csv:3: layer 0, expert 0 at 1 bits appears twice");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,1,2\n\n")), "l.csv:3: empty line; expected layer,expert,bits,loss");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "0,0,1,2\n0,1,2,3\n")),
                    "l.csv: no loss for layer 0, expert 0 at 2 bits (the table has layers 0..0, experts 0..1)");
  CHECK_PARSE_ERROR(static_cast<void>(read(head + "65535,65535,32,1\n")),
                    "l.csv: the rows name layers 0..65535, experts 0..65535 and 1 bitwidths, 4294967296 losses in "
                    "all, but the file holds only 1");
  CHECK_PARSE_ERROR(static_cast<void>(read("")), "l.csv: empty file; expected the header \"layer,expert,bits,loss\"");
  CHECK_PARSE_ERROR(static_cast<void>(read(head)), "l.csv: no rows after the header");
}

TEST_CASE("the real Mixtral-8x7B table survives CSV exactly") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const loss_table json = io::read_quant_loss_json(test::shared_traces() / "mixtral-8x7b-mc" / "mixtral_quant_loss.json");
  std::stringstream csv;
  io::write_loss_table_csv(json, csv);
  const loss_table back = io::read_loss_table_csv(csv, "round trip");
  REQUIRE(back.num_layers() == 32);
  REQUIRE(back.num_experts() == 8);
  REQUIRE(back.num_bits() == 3);
  for (std::size_t l = 0; l < 32; ++l) {
    for (std::size_t e = 0; e < 8; ++e) {
      for (std::size_t i = 0; i < 3; ++i) CHECK(back.loss(l, e, i) == json.loss(l, e, i));
    }
  }
}

TEST_CASE("lines are bounded, and quoted cells are escaped") {
  {
    scoped_input_limits small({.max_line_bytes = 30});
    CHECK_THROWS_WITH_AS(read(head + "0,0,1," + std::string(40, '1') + "\n"),
                         "l.csv:2: line longer than the limit of 30 bytes (input_limits::max_line_bytes)",
                         parse_error);
  }
  CHECK_THROWS_WITH_AS(read(head + "0,0,1,\x1b[2J\n"), "l.csv:2: loss \"\\x1b[2J\" is not a number", parse_error);
  CHECK_THROWS_WITH_AS(read("\x1b]0;title\x07\n"),
                       "l.csv:1: expected the header \"layer,expert,bits,loss\", got \"\\x1b]0;title\\x07\"", parse_error);
}
