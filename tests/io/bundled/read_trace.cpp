#include "moepolicy/io/read_trace.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "moepolicy/core/input_limits.hpp"

#include "test_support.hpp"

using namespace moepolicy;
namespace fs = std::filesystem;

TEST_CASE("detects every format by content") {
  const fs::path data = test::test_data();
  const fs::path bundled = test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  CHECK(io::detect_trace_format(bundled) == io::trace_format::canonical);
  CHECK(io::detect_trace_format(data / "trace" / "small.mtrace") == io::trace_format::canonical);
  CHECK(io::detect_trace_format(data / "io" / "granite_a.jsonl") == io::trace_format::granite_jsonl);
  CHECK(io::detect_trace_format(data / "io" / "vllm_decode_small.jsonl") == io::trace_format::vllm_decode_jsonl);
  CHECK(io::detect_trace_format(data / "io" / "vllm_raw_small.jsonl") == io::trace_format::vllm_raw_jsonl);
  CHECK(io::detect_trace_format(data / "io" / "flame_small") == io::trace_format::flame_directory);
  CHECK(io::detect_trace_format(data / "io" / "flame_small" / "prefill_layer1.csv") == io::trace_format::flame_csv);
}

TEST_CASE("reads each format and combines Granite files into one trace") {
  const fs::path data = test::test_data();
  CHECK(io::read_trace(data / "io" / "vllm_decode_small.jsonl").num_rows() > 0);
  CHECK(io::read_trace(data / "io" / "flame_small").info().has_scores);
  const std::vector<fs::path> two{data / "io" / "granite_a.jsonl", data / "io" / "granite_b.jsonl"};
  const routing_trace t = io::read_trace(std::span<const fs::path>(two));
  CHECK(t.requests().size() == 2);
  CHECK(t.requests()[0].name == "granite_a");
}

TEST_CASE("unknown formats and mixtures are rejected with the path") {
  const fs::path data = test::test_data();
  const fs::path readme = data / "trace" / "README.md";
  CHECK_PARSE_ERROR(static_cast<void>(io::detect_trace_format(readme)),
                    readme.string() + ": unknown trace format (expected .mtrace, .jsonl, .csv or a directory of them)");
  const fs::path empty = data / "io" / "empty.jsonl";
  CHECK_THROWS_AS(static_cast<void>(io::read_trace(empty)), parse_error);
  const std::vector<fs::path> mixed{data / "io" / "granite_a.jsonl", data / "io" / "vllm_decode_small.jsonl"};
  CHECK_PARSE_ERROR(static_cast<void>(io::read_trace(std::span<const fs::path>(mixed))),
                    mixed[1].string() + ": only moe-cache-lab Granite JSONL files can be combined into one trace");
  CHECK_PARSE_ERROR(static_cast<void>(io::read_trace(std::span<const fs::path>{})),
                    "(no input): no trace path given");
}

TEST_CASE("a first line longer than the bound is an error, not an allocation of its size") {
  const fs::path dir = fs::temp_directory_path() / "moepolicy-read-trace-limits";
  fs::create_directories(dir);
  const fs::path path = dir / "long.jsonl";
  {
    std::ofstream(path) << std::string(5000, ' ') << "{}\n";
  }
  scoped_input_limits small({.max_line_bytes = 1000});
  CHECK_PARSE_ERROR(static_cast<void>(io::detect_trace_format(path)),
                    path.string() + ":1: line longer than the limit of 1000 bytes (input_limits::max_line_bytes)");
  fs::remove_all(dir);
}

TEST_CASE("a folder of vLLM JSONL files is named as such, not read as Granite") {
  const fs::path dir = fs::temp_directory_path() / "moepolicy-read-trace-vllm-folder";
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::copy_file(test::test_data() / "io" / "vllm_decode_small.jsonl", dir / "a.jsonl");
  fs::copy_file(test::test_data() / "io" / "vllm_raw_small.jsonl", dir / "b.jsonl");
  CHECK_PARSE_ERROR(static_cast<void>(io::read_trace(dir)),
                    dir.string() +
                        ": directory of .jsonl files whose first, a.jsonl, is vLLM routing JSONL, decode only: only "
                        "moe-cache-lab Granite files combine into one trace; give the file itself");
  // Each file alone reads, and a failure says which reader read it and why.
  CHECK(io::read_trace(dir / "a.jsonl").num_rows() > 0);
  { std::ofstream(dir / "c.jsonl") << R"({"experts": [1, 2], "token_idx": "x"})" << '\n'; }
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_trace(dir / "c.jsonl")),
                       doctest::Contains("(read as vLLM routing JSONL, decode only: its first line has experts and "
                                         "token_idx)"),
                       parse_error);
  fs::remove_all(dir);
}
