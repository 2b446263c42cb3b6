// The bundled sample trace: its contents, and that it is exactly what the importer and
// the canonical writer make of the source files; real traces survive the canonical
// format unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "moepolicy/detail/file_input.hpp"
#include "moepolicy/io/flame_csv.hpp"
#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/io/warp_jsonl.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/summary.hpp"
#include "test_support.hpp"
#include "trace_compare.hpp"

using namespace moepolicy;
namespace fs = std::filesystem;

namespace {

const fs::path bundled = test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";

std::vector<fs::path> granite_sources() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(test::shared_traces() / "granite-3.1-1b-a400m")) {
    if (e.path().extension() == ".jsonl") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void check_round_trip(const routing_trace& t) {
  std::stringstream buf;
  write_canonical(t, buf);
  test::check_same_trace(t, read_canonical(buf, "round trip"));
}

}  // namespace

TEST_CASE("the bundled Granite trace holds what its PROVENANCE states") {
  const routing_trace t = read_canonical(bundled);
  CHECK(t.info().model == "ibm-granite/granite-3.1-1b-a400m-instruct");
  CHECK(t.info().num_layers == 24);
  CHECK(t.info().num_experts == 32);
  CHECK(t.info().top_k == 8);
  CHECK(t.num_rows() == 8496);
  CHECK(t.requests().size() == 12);
  CHECK(t.steps().size() == 204);
  const trace_summary s = summarize(t);
  CHECK(s.prefill_tokens == 162);
  CHECK(s.decode_tokens == 192);
  CHECK(t.requests()[0].name == "00-cal-factual-01");
  CHECK(t.requests()[11].name == "11-eval-conversation-01");
}

TEST_CASE("the bundled Granite trace is byte for byte the conversion of its sources") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto files = granite_sources();
  REQUIRE(files.size() == 12);
  std::stringstream made;
  write_canonical(io::read_granite_jsonl(std::span<const fs::path>(files)), made);
  const std::string expected = moepolicy::detail::read_all(bundled);
  CHECK(made.str().size() == expected.size());
  CHECK(made.str() == expected);
}

TEST_CASE("real traces survive the canonical format unchanged") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const fs::path shared = test::shared_traces();
  check_round_trip(io::read_granite_jsonl(std::span<const fs::path>(granite_sources())));
  check_round_trip(io::read_vllm_decode_jsonl(shared / "mixtral-8x7b-decode" / "humaneval_2_routing.jsonl"));
  check_round_trip(io::read_vllm_raw_jsonl(shared / "mixtral-8x7b-decode" / "routing_raw.jsonl"));
  check_round_trip(io::read_flame_csv(shared / "flame-moe-290m"));
}

TEST_CASE("the bundled WARP traces hold what their PROVENANCE states") {
  const fs::path dir = test::bundled_traces() / "warp-olmoe-kimi";
  const routing_trace olmoe = read_canonical(dir / "trace_olmoe_299.mtrace");
  CHECK(olmoe.info().model == "allenai/OLMoE-1B-7B");
  CHECK(olmoe.info().num_layers == 16);
  CHECK(olmoe.info().num_experts == 64);
  CHECK(olmoe.info().top_k == 8);
  CHECK(olmoe.num_rows() == 4784);
  CHECK(olmoe.steps().size() == 299);
  CHECK(olmoe.requests().size() == 1);
  const routing_trace kimi = read_canonical(dir / "trace_kimi_300.mtrace");
  CHECK(kimi.info().model == "moonshotai/Kimi-Linear-48B-A3B");
  CHECK(kimi.info().num_layers == 26);
  CHECK(kimi.info().num_experts == 256);
  CHECK(kimi.num_rows() == 7800);
  CHECK(kimi.steps().size() == 300);
  CHECK(summarize(kimi).decode_tokens == 300);
}

TEST_CASE("the bundled WARP traces are byte for byte the conversion of their sources") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  for (const char* name : {"trace_olmoe_299", "trace_kimi_300"}) {
    std::stringstream made;
    write_canonical(io::read_warp_jsonl(test::shared_traces() / "warp-olmoe-kimi" / (std::string(name) + ".jsonl")),
                    made);
    const std::string expected =
        moepolicy::detail::read_all(test::bundled_traces() / "warp-olmoe-kimi" / (std::string(name) + ".mtrace"));
    CHECK_MESSAGE(made.str() == expected, name);
  }
}
