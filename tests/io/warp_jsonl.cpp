// The WARP decode routing importer (moepolicy/io/warp_jsonl.hpp): the mapping to rows, every
// error it names, detection by `read_trace`, and the two recorded files of
// ../shared/traces/warp-olmoe-kimi with the counts of their PROVENANCE.
#include "moepolicy/io/warp_jsonl.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "test_support.hpp"

namespace io = moepolicy::io;
using moepolicy::invalid_argument;
using moepolicy::parse_error;
using moepolicy::phase;

namespace {

io::warp_jsonl_options opts(std::uint32_t experts, std::uint32_t layers = 0) {
  return {.num_experts = experts, .num_layers = layers, .model = "m"};
}

moepolicy::routing_trace read(const std::string& text, const io::warp_jsonl_options& opt = opts(8)) {
  std::istringstream in(text);
  return io::read_warp_jsonl(in, "t", "r", opt);
}

}  // namespace

TEST_CASE("warp: one decode step per record, one row per layer list, equal weights") {
  const auto t = read(R"({"tok": 1, "layers": [[0, 3], [2, 7]]})"
                      "\n"
                      R"({"tok": 2, "layers": [[1, 3], [2, 6]]})"
                      "\n",
                      opts(8));
  CHECK(t.info().model == "m");
  CHECK(t.info().num_layers == 2);
  CHECK(t.info().num_experts == 8);
  CHECK(t.info().top_k == 2);
  CHECK_FALSE(t.info().has_scores);
  CHECK(t.info().source == io::warp_jsonl_source);
  REQUIRE(t.num_rows() == 4);
  REQUIRE(t.requests().size() == 1);
  CHECK(t.requests()[0].name == "r");
  CHECK(t.requests()[0].num_steps == 2);
  for (std::size_t r = 0; r < t.num_rows(); ++r) {
    const auto row = t.row(r);
    CHECK(row.kind == phase::decode);
    CHECK(row.step == row.position);
    CHECK(row.weights[0] == doctest::Approx(0.5));
    CHECK(row.weights[1] == doctest::Approx(0.5));
  }
  const auto last = t.row(3);
  CHECK(last.step == 2);
  CHECK(last.layer == 1);
  CHECK(last.experts[0] == 2);
  CHECK(last.experts[1] == 6);
  // The options may state more layers than a record lists: then every record must list them.
  CHECK_THROWS_WITH_AS(read(R"({"tok": 1, "layers": [[0, 3]]})", opts(8, 2)),
                       "t:1: \"layers\" has 1 lists, the trace has 2 MoE layers", parse_error);
}

TEST_CASE("warp: errors name the line and the value") {
  CHECK_THROWS_WITH_AS(read(R"({"layers": [[0]]})"), "t:1: missing field \"tok\"", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": -1, "layers": [[0]]})"),
                       "t:1: field \"tok\" = -1 is out of range [0, 4294967295]", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": 3})"), "t:1: field \"layers\" must be an array, got an integer",
                       parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": []})"), "t:1: field \"layers\" is empty", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": [[]]})"), "t:1: \"layers\"[0] is empty: top_k must be at least 1",
                       parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": [[0, "a"]]})"),
                       "t:1: \"layers\"[0] must hold integers, got a string at index 1", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": [[0, 70000]]})"),
                       "t:1: expert id 70000 in \"layers\"[0] is out of range [0, 65535]", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": [[0, 8]]})"), "t:1: expert id 8 >= num_experts 8", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": [[0, 0]]})"), "t:1: expert id 0 selected twice", parse_error);
  CHECK_THROWS_WITH_AS(read("{\"tok\": 0, \"layers\": [[0, 1], [2, 3]]}\n{\"tok\": 1, \"layers\": [[0, 1], [2]]}"),
                       "t:2: k varying: \"layers\"[1] has 1 ids, the first record's first list had 2", parse_error);
  CHECK_THROWS_WITH_AS(read("{\"tok\": 0, \"layers\": [[0, 1], [2, 3]]}\n{\"tok\": 1, \"layers\": [[0, 1]]}"),
                       "t:2: \"layers\" has 1 lists, the trace has 2 MoE layers", parse_error);
  CHECK_THROWS_WITH_AS(read("{\"tok\": 5, \"layers\": [[0]]}\n{\"tok\": 5, \"layers\": [[1]]}"),
                       "t:2: \"tok\" = 5 does not follow 5 (line 1): decode steps must increase", parse_error);
  CHECK_THROWS_WITH_AS(read(R"({"tok": 0, "layers": [[0, 1, 2]]})", opts(2)),
                       "t:1: top_k = 3 (ids in the first list) exceeds num_experts = 2", parse_error);
  CHECK_THROWS_WITH_AS(read(""), "t:1: expected routing records, got end of input", parse_error);
  CHECK_THROWS_AS(read(R"({"tok": 0, "layers": [[0]]})", opts(0)), invalid_argument);
  CHECK_THROWS_AS(read(R"({"tok": 0, "layers": [[0]]})", opts(8, 70000)), invalid_argument);
}

TEST_CASE("warp: the recorded files are known by name, others need options") {
  CHECK(io::warp_options_for("x/trace_olmoe_299.jsonl")->num_experts == 64);
  CHECK(io::warp_options_for("x/trace_kimi_300.jsonl")->num_experts == 256);
  CHECK_FALSE(io::warp_options_for("x/other.jsonl").has_value());
  CHECK(io::detect_jsonl_format(R"({"tok": 1, "layers": [[0]]})") == io::jsonl_format::warp);
  CHECK(io::to_string(io::jsonl_format::warp) == "warp");
}

TEST_CASE("warp: the recorded OLMoE-1B-7B and Kimi-Linear-48B-A3B decode traces") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto dir = moepolicy::test::shared_traces() / "warp-olmoe-kimi";
  const auto olmoe_path = dir / "trace_olmoe_299.jsonl";
  CHECK(io::detect_trace_format(olmoe_path) == io::trace_format::warp_jsonl);
  const auto olmoe = io::read_trace(olmoe_path);
  // PROVENANCE: tok = 1..299, 299 rows x 16 layers = 4,784 layer-events, 38,272 expert requests.
  CHECK(olmoe.info().num_layers == 16);
  CHECK(olmoe.info().num_experts == 64);
  CHECK(olmoe.info().top_k == 8);
  CHECK(olmoe.num_rows() == 4784);
  CHECK(olmoe.num_rows() * olmoe.info().top_k == 38272);
  REQUIRE(olmoe.requests().size() == 1);
  CHECK(olmoe.requests()[0].name == "trace_olmoe_299");
  CHECK(olmoe.requests()[0].num_steps == 299);
  CHECK(olmoe.row(0).step == 1);
  CHECK(olmoe.row(olmoe.num_rows() - 1).step == 299);

  const auto kimi = io::read_trace(dir / "trace_kimi_300.jsonl");
  // PROVENANCE: tok = 0..299; 300 rows x 26 layers = 7,800 layer-events, 62,400 expert requests.
  CHECK(kimi.info().num_layers == 26);
  CHECK(kimi.info().num_experts == 256);
  CHECK(kimi.num_rows() == 7800);
  CHECK(kimi.num_rows() * kimi.info().top_k == 62400);
  CHECK(kimi.requests()[0].num_steps == 300);
  // "the 8 selected expert ids, SORTED ascending".
  bool sorted = true;
  for (std::size_t r = 0; r < kimi.num_rows(); ++r) {
    const auto ids = kimi.row(r).experts;
    sorted = sorted && std::is_sorted(ids.begin(), ids.end());
  }
  CHECK(sorted);
}
