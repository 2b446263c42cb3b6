#include "moepolicy/trace/csv_export.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "moepolicy/trace/routing_trace.hpp"

using moepolicy::expert_id;
using moepolicy::phase;
using moepolicy::routing_trace;
using moepolicy::routing_trace_builder;
using moepolicy::trace_row;

namespace {

std::string csv(const routing_trace& t) {
  std::ostringstream os;
  moepolicy::write_csv(t, os);
  return os.str();
}

void add(routing_trace_builder& b, std::uint32_t request, phase kind, std::uint32_t step, std::uint32_t position,
         moepolicy::layer_id layer, std::vector<expert_id> ids, std::vector<float> weights,
         std::vector<float> scores = {}) {
  b.add(trace_row{request, kind, step, position, layer, ids, weights, scores});
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out(1);
  for (const char c : line) {
    if (c == sep) {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("write_csv: header, quoting, phases, shortest round-trip floats") {
  routing_trace_builder b({.model = "m", .source = "", .num_layers = 2, .num_experts = 4, .top_k = 2});
  b.add_request("plain");
  b.add_request("a,\"b\"");
  add(b, 1, phase::decode, 4, 17, 1, {2, 0}, {1e-5f, 0.99999f});
  add(b, 0, phase::prefill, 0, 1, 0, {0, 2}, {0.1f, 0.9f});
  add(b, 0, phase::prefill, 0, 0, 0, {3, 1}, {0.7f, 0.3f});
  CHECK(csv(std::move(b).finish()) ==
        "request,phase,step,position,layer,e_0,e_1,w_0,w_1\n"
        "plain,prefill,0,0,0,3,1,0.7,0.3\n"
        "plain,prefill,0,1,0,0,2,0.1,0.9\n"
        "\"a,\"\"b\"\"\",decode,4,17,1,2,0,1e-05,0.99999\n");
}

TEST_CASE("write_csv: scores columns when the trace has them") {
  routing_trace_builder b(
      {.model = "m", .source = "", .num_layers = 1, .num_experts = 3, .top_k = 1, .has_scores = true});
  b.add_request("line\nbreak");
  add(b, 0, phase::prefill, 0, 0, 0, {2}, {1.0f}, {-1.5f, 0.0f, 3.25f});
  add(b, 0, phase::decode, 1, 1, 0, {0}, {0.5f}, {16777216.0f, -0.0f, 1e-30f});
  CHECK(csv(std::move(b).finish()) ==
        "request,phase,step,position,layer,e_0,w_0,s_0,s_1,s_2\n"
        "\"line\nbreak\",prefill,0,0,0,2,1,-1.5,0,3.25\n"
        "\"line\nbreak\",decode,1,1,0,0,0.5,16777216,-0,1e-30\n");
}

TEST_CASE("write_csv: an empty trace is its header") {
  routing_trace_builder b({.model = "", .source = "", .num_layers = 1, .num_experts = 2, .top_k = 2});
  CHECK(csv(std::move(b).finish()) == "request,phase,step,position,layer,e_0,e_1,w_0,w_1\n");
  CHECK(csv(routing_trace{}) == "request,phase,step,position,layer\n");
}

TEST_CASE("write_csv: a large trace reads back to the same numbers") {
  std::mt19937 rng(11);
  routing_trace_builder b({.model = "", .source = "", .num_layers = 24, .num_experts = 32, .top_k = 8});
  b.add_request("r");
  std::vector<expert_id> ids(32);
  std::vector<float> w(8);
  for (std::uint32_t pos = 0; pos < 200; ++pos) {
    for (moepolicy::layer_id l = 0; l < 24; ++l) {
      for (expert_id e = 0; e < 32; ++e) ids[e] = e;
      std::shuffle(ids.begin(), ids.end(), rng);
      for (auto& x : w) x = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
      b.add(trace_row{0, phase::prefill, 0, pos, l, std::span<const expert_id>(ids).first(8), w, {}});
    }
  }
  const routing_trace t = std::move(b).finish();
  std::istringstream in(csv(t));
  std::string line;
  REQUIRE(std::getline(in, line));
  CHECK(split(line, ',').size() == 5 + 16);
  std::size_t r = 0;
  while (std::getline(in, line)) {
    REQUIRE(r < t.num_rows());
    const auto cells = split(line, ',');
    REQUIRE(cells.size() == 21);
    CHECK(cells[0] == "r");
    CHECK(cells[4] == std::to_string(t.columns().layer[r]));
    for (std::size_t i = 0; i < 8; ++i) {
      CHECK(cells[5 + i] == std::to_string(t.experts(r)[i]));
      float v = -1.0f;
      const auto& s = cells[13 + i];
      REQUIRE(std::from_chars(s.data(), s.data() + s.size(), v).ec == std::errc{});
      CHECK(v == t.weights(r)[i]);
    }
    ++r;
  }
  CHECK(r == t.num_rows());
  CHECK(r == 4800);
}

TEST_CASE("write_csv: a failed stream throws") {
  routing_trace_builder b({.model = "", .source = "", .num_layers = 1, .num_experts = 2, .top_k = 1});
  std::ostringstream os;
  os.setstate(std::ios::badbit);
  CHECK_THROWS_AS(moepolicy::write_csv(std::move(b).finish(), os), std::ios_base::failure);
}
