// Tests of moepolicy/io/vllm_jsonl.hpp: the decode-only and prefill+decode vLLM routing
// JSONL importers — mapping, every rejection with its exact message, and the counts of
// the recorded Mixtral-8x7B traces.
#include "moepolicy/io/vllm_jsonl.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace {

namespace io = moepolicy::io;
using moepolicy::parse_error;
using moepolicy::phase;
using json = nlohmann::json;

json dec(int problem, int layer, long long token) {
  return {{"dataset", "humaneval"}, {"problem_id", problem},        {"layer", layer},
          {"experts", {6, 5}},      {"gating_probs", {0.75, 0.25}}, {"token_idx", token}};
}

json raw(int problem, int layer, long long pos) {
  return {{"dataset", "humaneval"}, {"problem_id", problem}, {"layer", layer},
          {"token_pos", pos},       {"experts", {6, 5}},     {"gating_probs", {0.75, 0.25}}};
}

std::string lines(const std::vector<json>& records) {
  std::string out;
  for (const auto& r : records) out += r.dump() + "\n";
  return out;
}

moepolicy::routing_trace decode(const std::string& text, const io::vllm_jsonl_options& opt = {}) {
  std::istringstream in(text);
  return io::read_vllm_decode_jsonl(in, "t", opt);
}

moepolicy::routing_trace prefill_decode(const std::string& text, const io::vllm_jsonl_options& opt = {}) {
  std::istringstream in(text);
  return io::read_vllm_raw_jsonl(in, "t", opt);
}

std::filesystem::path data(const char* name) { return moepolicy::test::test_data() / "io" / name; }

/// (step, layer, position) of every row of `t`'s request `r`, in trace order.
std::vector<std::tuple<std::uint32_t, int, std::uint32_t>> keys(const moepolicy::routing_trace& t, std::size_t r) {
  std::vector<std::tuple<std::uint32_t, int, std::uint32_t>> out;
  const auto& c = t.columns();
  for (std::size_t i = 0; i < t.num_rows(); ++i) {
    if (c.request[i] == r) out.emplace_back(c.step[i], c.layer[i], c.position[i]);
  }
  return out;
}

}  // namespace

TEST_CASE("vllm decode-only: one request per problem, step = position = token_idx") {
  const auto t = io::read_vllm_decode_jsonl(data("vllm_decode_small.jsonl"));
  CHECK(t.info().model == "neuralmagic/Mixtral-8x7B-Instruct-v0.1-FP8");
  CHECK(t.info().source == "vllm routing jsonl, decode-only (speculative-moe)");
  CHECK(t.info().num_layers == 32);
  CHECK(t.info().num_experts == 8);
  CHECK(t.info().top_k == 2);
  CHECK(t.num_rows() == 9);
  REQUIRE(t.requests().size() == 2);
  CHECK(t.requests()[0].name == "humaneval/0");
  CHECK(t.requests()[1].name == "humaneval/1");
  for (const auto& s : t.steps()) CHECK(s.kind == phase::decode);
  // Problem 0: layer 0 has tokens 0..2, layer 1 tokens 0..1 (the third was filtered).
  CHECK(keys(t, 0) == std::vector<std::tuple<std::uint32_t, int, std::uint32_t>>{
                          {0, 0, 0}, {0, 1, 0}, {1, 0, 1}, {1, 1, 1}, {2, 0, 2}});
  CHECK(keys(t, 1).size() == 4);
  const auto v = t.view(t.batches()[2]);  // problem 0, step 1, layer 0: the file's line 2
  CHECK(v.experts_of(0)[0] == 2);
  CHECK(v.experts_of(0)[1] == 3);
  CHECK(v.weights_of(0)[0] == 0.5f);
}

TEST_CASE("vllm decode-only: requests by first appearance, options, any record order") {
  const std::string text = lines({dec(7, 1, 0), dec(3, 0, 0), dec(7, 0, 0)});
  const auto t = decode(text, {.num_experts = 16, .num_layers = 2, .model = "mine"});
  CHECK(t.info().model == "mine");
  CHECK(t.info().num_layers == 2);
  CHECK(t.info().num_experts == 16);
  REQUIRE(t.requests().size() == 2);
  CHECK(t.requests()[0].name == "humaneval/7");
  CHECK(t.requests()[0].num_rows == 2);
  CHECK(t.requests()[1].name == "humaneval/3");

  json e = dec(0, 0, 0);
  e["experts"] = {15, 9};
  CHECK(decode(lines({e}), {.num_experts = 16}).num_rows() == 1);
  CHECK_THROWS_WITH_AS(decode(lines({e})), "t:1: expert id 15 >= num_experts 8", parse_error);

  json other = dec(0, 0, 0);
  other["dataset"] = "mbpp";
  const auto two = decode(lines({dec(0, 0, 0), other}));
  REQUIRE(two.requests().size() == 2);
  CHECK(two.requests()[1].name == "mbpp/0");

  json k3 = dec(0, 0, 0);
  k3["experts"] = {0, 1, 2};
  k3["gating_probs"] = {0.5, 0.25, 0.25};
  CHECK(decode(lines({k3})).info().top_k == 3);
}

TEST_CASE("vllm decode-only: rejections") {
  for (const char* key : {"dataset", "problem_id", "layer", "experts", "gating_probs", "token_idx"}) {
    CAPTURE(key);
    json r = dec(0, 0, 0);
    r.erase(key);
    CHECK_THROWS_WITH_AS(decode(lines({dec(0, 0, 1), r})), (std::string("t:2: missing field \"") + key + '"').c_str(),
                         parse_error);
  }
  const auto with = [](const char* key, json value) {
    json r = dec(0, 0, 0);
    r[key] = std::move(value);
    return lines({r});
  };
  CHECK_THROWS_WITH_AS(decode(with("dataset", 0)), "t:1: field \"dataset\" must be a string, got an integer",
                       parse_error);
  CHECK_THROWS_WITH_AS(decode(with("problem_id", "HumanEval/0")),
                       "t:1: field \"problem_id\" must be an integer, got a string", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("problem_id", -1)),
                       "t:1: field \"problem_id\" = -1 is out of range [0, 18446744073709551615]", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("layer", 32)), "t:1: layer 32 >= num_layers 32", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("layer", 70000)), "t:1: field \"layer\" = 70000 is out of range [0, 65535]",
                       parse_error);
  CHECK_THROWS_WITH_AS(decode(with("token_idx", 4294967296LL)),
                       "t:1: field \"token_idx\" = 4294967296 is out of range [0, 4294967295]", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("token_idx", 1.0)),
                       "t:1: field \"token_idx\" must be an integer, got a floating-point number", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("experts", json::array())),
                       "t:1: field \"experts\" is empty: top_k must be at least 1", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("experts", {0, 1, 2, 3, 4, 5, 6, 7, 8})),
                       "t:1: top_k = 9 (experts in the first record) exceeds num_experts = 8", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("experts", {8, 0})), "t:1: expert id 8 >= num_experts 8", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("experts", {2, 2})), "t:1: expert id 2 selected twice", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("experts", "6, 5")), "t:1: field \"experts\" must be an array, got a string",
                       parse_error);
  CHECK_THROWS_WITH_AS(decode(with("gating_probs", {0.5})), "t:1: expected 2 gate weights, got 1", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("gating_probs", {0.5, "0.5"})),
                       "t:1: field \"gating_probs\" must hold numbers, got a string at index 1", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("gating_probs", {-0.5, 1.5})),
                       "t:1: gate weight -0.5 of expert 6 is not a finite non-negative number", parse_error);
  CHECK_THROWS_WITH_AS(decode(with("gating_probs", {3.5e38, 0})),
                       "t:1: gate weight 3.5e+38 in \"gating_probs\" does not fit a float", parse_error);

  json k3 = dec(0, 3, 1);
  k3["experts"] = {0, 1, 2};
  CHECK_THROWS_WITH_AS(decode(lines({dec(0, 0, 0), k3})),
                       "t:2: k varying: layer 3 has 3 experts, the first record had 2", parse_error);
  CHECK_THROWS_WITH_AS(decode(lines({dec(0, 0, 0), dec(0, 0, 1), dec(1, 0, 1), dec(0, 0, 1)})),
                       "t:4: duplicate record for layer 0, token_idx 1 (first on line 2)", parse_error);

  CHECK_THROWS_WITH_AS(decode(""), "t:1: expected routing records, got end of input", parse_error);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_vllm_decode_jsonl(data("empty.jsonl"))),
                       (data("empty.jsonl").string() + ":1: expected routing records, got end of input").c_str(),
                       parse_error);
  CHECK_THROWS_WITH_AS(decode(lines({dec(0, 0, 0)}) + "\n" + lines({dec(0, 0, 1)})),
                       "t:2: blank line inside the input (only trailing blank lines are allowed)", parse_error);
  CHECK_THROWS_WITH_AS(decode(lines({dec(0, 0, 0)}) + "{\"dataset\": \"humaneval\", \"pro"),
                       "t:2: invalid JSON at column 30: syntax error while parsing object key - invalid string: "
                       "missing closing quote; last read: '\"pro'; expected string literal",
                       parse_error);
  CHECK_THROWS_WITH_AS(decode("42\n"), "t:1: expected a JSON object, got an integer", parse_error);
}

TEST_CASE("vllm: bad options") {
  std::istringstream in(lines({dec(0, 0, 0)}));
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_vllm_decode_jsonl(in, "t", {.num_experts = 0})),
                       "moepolicy::io::read_vllm_decode_jsonl: options.num_experts must be in [1, 65536], got 0",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_vllm_raw_jsonl(in, "t", {.num_layers = 65537})),
                       "moepolicy::io::read_vllm_raw_jsonl: options.num_layers must be in [1, 65536], got 65537",
                       moepolicy::invalid_argument);
  // Options are checked before the file is opened.
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_vllm_raw_jsonl(data("no_such_file.jsonl"), {.num_experts = 70000})),
                       "moepolicy::io::read_vllm_raw_jsonl: options.num_experts must be in [1, 65536], got 70000",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_vllm_decode_jsonl(data("no_such_file.jsonl"), {.num_layers = 0})),
                       "moepolicy::io::read_vllm_decode_jsonl: options.num_layers must be in [1, 65536], got 0",
                       moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_vllm_decode_jsonl(data("no_such_file.jsonl"))),
                       (data("no_such_file.jsonl").string() + ": cannot open: No such file or directory").c_str(),
                       parse_error);
}

TEST_CASE("vllm raw: prefill batches, decode steps and positions") {
  const auto t = io::read_vllm_raw_jsonl(data("vllm_raw_small.jsonl"));
  CHECK(t.info().source == "vllm routing jsonl, prefill+decode (speculative-moe)");
  CHECK(t.num_rows() == 17);
  REQUIRE(t.requests().size() == 1);
  CHECK(t.requests()[0].name == "humaneval/0");
  // Prefill: layer 0 positions 0..3, layer 1 0,1,3 (2 dropped), layer 2 0..2; P = 4.
  // Decode: step 1 layers 0,1,2; step 2 layers 0,2; step 3 layers 1,2 -> positions 4, 5, 6.
  using key = std::tuple<std::uint32_t, int, std::uint32_t>;
  CHECK(keys(t, 0) == std::vector<key>{{0, 0, 0},
                                       {0, 0, 1},
                                       {0, 0, 2},
                                       {0, 0, 3},
                                       {0, 1, 0},
                                       {0, 1, 1},
                                       {0, 1, 3},
                                       {0, 2, 0},
                                       {0, 2, 1},
                                       {0, 2, 2},
                                       {1, 0, 4},
                                       {1, 1, 4},
                                       {1, 2, 4},
                                       {2, 0, 5},
                                       {2, 2, 5},
                                       {3, 1, 6},
                                       {3, 2, 6}});
  REQUIRE(t.steps().size() == 4);
  CHECK(t.steps()[0].kind == phase::prefill);
  CHECK(t.steps()[1].kind == phase::decode);
  CHECK(t.steps()[3].num_batches == 2);
  // Decode row of step 2, layer 2 (line 15): experts E[(2 + 3) % 5] = [0, 1].
  const auto v = t.view(t.batches_of(t.steps()[2])[1]);
  CHECK(v.ref.layer == 2);
  CHECK(v.experts_of(0)[0] == 0);
  CHECK(v.experts_of(0)[1] == 1);
  CHECK(v.weights_of(0)[0] == 0.75f);
}

TEST_CASE("vllm raw: requests, prompt length from token_pos, decode without prefill") {
  // Two problems one after the other; problem 1's prefill of layer 0 lost its row 0.
  const auto t = prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1), raw(0, 0, 0), raw(1, 0, 1), raw(1, 0, 4),
                                       raw(1, 1, 0), raw(1, 1, 1), raw(1, 1, 0), raw(1, 0, 0), raw(1, 1, 0)}));
  REQUIRE(t.requests().size() == 2);
  using key = std::tuple<std::uint32_t, int, std::uint32_t>;
  CHECK(keys(t, 0) == std::vector<key>{{0, 0, 0}, {0, 0, 1}, {1, 0, 2}});
  CHECK(keys(t, 1) == std::vector<key>{{0, 0, 1}, {0, 0, 4}, {0, 1, 0}, {0, 1, 1}, {1, 1, 5}, {2, 0, 6}, {2, 1, 6}});

  // A request without prefill batches: P = 0, steps from 1.
  const auto d = prefill_decode(lines({raw(0, 0, 0), raw(0, 1, 0), raw(0, 1, 0), raw(0, 0, 0)}));
  CHECK(keys(d, 0) == std::vector<key>{{1, 0, 0}, {1, 1, 0}, {2, 1, 1}, {3, 0, 2}});
  for (const auto& s : d.steps()) CHECK(s.kind == phase::decode);

  // A batch breaks when the request changes, even at the same layer and a larger token_pos.
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), raw(1, 0, 1), raw(1, 1, 0)})),
                       "t:2: a one-row batch (a decode row) must have token_pos 0, got 1", parse_error);
}

TEST_CASE("vllm raw: rejections") {
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1), raw(0, 1, 3), raw(0, 2, 0)})),
                       "t:3: a one-row batch (a decode row) must have token_pos 0, got 3", parse_error);
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1), raw(0, 1, 5)})),
                       "t:3: a one-row batch (a decode row) must have token_pos 0, got 5", parse_error);
  CHECK_THROWS_WITH_AS(
      prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1), raw(0, 0, 0), raw(0, 1, 0), raw(0, 1, 1), raw(0, 1, 2)})),
      "t:4: prefill batch of layer 1 after decode rows (first on line 3)", parse_error);
  CHECK_THROWS_WITH_AS(
      prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1), raw(0, 1, 0), raw(0, 1, 1), raw(0, 0, 0), raw(0, 0, 2)})),
      "t:5: second prefill batch of layer 0 (the first starts on line 1)", parse_error);
  // Back-to-back batches of one layer: token_pos falls, so a new batch starts.
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1), raw(0, 0, 1), raw(0, 0, 2)})),
                       "t:3: second prefill batch of layer 0 (the first starts on line 1)", parse_error);
  for (const char* key : {"dataset", "problem_id", "layer", "token_pos", "experts", "gating_probs"}) {
    CAPTURE(key);
    json r = raw(0, 0, 1);
    r.erase(key);
    CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), r})),
                         (std::string("t:2: missing field \"") + key + '"').c_str(), parse_error);
  }
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, -1)})),
                       "t:1: field \"token_pos\" = -1 is out of range [0, 4294967295]", parse_error);
  json k1 = raw(0, 0, 1);
  k1["experts"] = {3};
  k1["gating_probs"] = {1.0};
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), k1})),
                       "t:2: k varying: layer 0 has 1 experts, the first record had 2", parse_error);
  CHECK(prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 1)}), {.num_layers = 1}).num_rows() == 2);
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 1, 0)}), {.num_layers = 1}), "t:1: layer 1 >= num_layers 1",
                       parse_error);
  CHECK_THROWS_WITH_AS(prefill_decode("\n"), "t:1: expected routing records, got end of input", parse_error);
  // The largest prompt position leaves no room for a decode position.
  CHECK_THROWS_WITH_AS(prefill_decode(lines({raw(0, 0, 0), raw(0, 0, 4294967295LL), raw(0, 0, 0)})),
                       "t:3: decode position 4294967296 exceeds 2^32 - 1", parse_error);
}

TEST_CASE("vllm decode-only: the recorded Mixtral-8x7B HumanEval decode trace") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto t = io::read_vllm_decode_jsonl(moepolicy::test::shared_traces() / "mixtral-8x7b-decode" /
                                            "humaneval_2_routing.jsonl");
  CHECK(t.num_rows() == 10779);
  CHECK(t.info().top_k == 2);
  REQUIRE(t.requests().size() == 2);
  CHECK(t.requests()[0].name == "humaneval/0");
  CHECK(t.requests()[0].num_rows == 2648);
  CHECK(t.requests()[1].name == "humaneval/1");
  CHECK(t.requests()[1].num_rows == 8131);
  // Steps = largest token_idx + 1: 83 and 255; 81 and 252 of them have all 32 layers.
  CHECK(t.requests()[0].num_steps == 83);
  CHECK(t.requests()[1].num_steps == 255);
  // PROVENANCE: 81-83 decode tokens per layer for problem 0, 252-255 for problem 1.
  const std::array<std::pair<std::size_t, std::size_t>, 2> range{{{81, 83}, {252, 255}}};
  for (std::size_t r = 0; r < 2; ++r) {
    CAPTURE(r);
    std::map<int, std::size_t> per_layer;
    std::size_t full_steps = 0;
    for (const auto& s : t.steps_of(t.requests()[r])) {
      CHECK(s.kind == phase::decode);
      if (s.num_batches == 32) ++full_steps;
      for (const auto& b : t.batches_of(s)) per_layer[b.layer] += b.num_rows;
    }
    CHECK(per_layer.size() == 32);
    const auto [lo, hi] = std::minmax_element(per_layer.begin(), per_layer.end(),
                                              [](const auto& a, const auto& b) { return a.second < b.second; });
    CHECK(lo->second == range[r].first);
    CHECK(hi->second == range[r].second);
    CHECK(full_steps == range[r].first);
  }
}

TEST_CASE("vllm raw: the recorded Mixtral-8x7B prefill+decode trace") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto t =
      io::read_vllm_raw_jsonl(moepolicy::test::shared_traces() / "mixtral-8x7b-decode" / "routing_raw.jsonl");
  CHECK(t.num_rows() == 6777);  // every line
  REQUIRE(t.requests().size() == 1);
  CHECK(t.requests()[0].name == "humaneval/0");
  REQUIRE(t.steps().size() == 1 + 83);
  const auto& prefill = t.steps()[0];
  CHECK(prefill.kind == phase::prefill);
  REQUIRE(prefill.num_batches == 32);
  std::size_t prefill_rows = 0;
  std::size_t smallest = 1000;
  std::size_t largest = 0;
  std::uint32_t last_position = 0;
  for (const auto& b : t.batches_of(prefill)) {
    prefill_rows += b.num_rows;
    smallest = std::min<std::size_t>(smallest, b.num_rows);
    largest = std::max<std::size_t>(largest, b.num_rows);
    last_position = std::max(last_position, t.view(b).positions.back());
  }
  CHECK(prefill_rows == 4198);
  CHECK(smallest == 124);  // layer 6
  CHECK(largest == 135);   // layer 0
  CHECK(last_position == 134);
  CHECK(t.batches_of(prefill)[0].num_rows == 135);
  CHECK(t.batches_of(prefill)[6].num_rows == 124);

  // 83 decode steps of one row per layer present; 35 have all 32 layers; the first
  // lacks layer 2. Positions run from P = 135 to 135 + 83 - 1 = 217.
  std::size_t decode_rows = 0;
  std::size_t full = 0;
  for (std::size_t s = 1; s < t.steps().size(); ++s) {
    const auto& step = t.steps()[s];
    CHECK(step.kind == phase::decode);
    CHECK(step.step == s);
    if (step.num_batches == 32) ++full;
    for (const auto& b : t.batches_of(step)) {
      CHECK(b.num_rows == 1);
      CHECK(t.view(b).positions[0] == 135 + s - 1);
      ++decode_rows;
    }
  }
  CHECK(decode_rows == 2579);
  CHECK(full == 35);
  CHECK(t.steps()[1].num_batches == 31);
  CHECK(t.batches_of(t.steps()[1])[2].layer == 3);
  CHECK(t.steps()[83].num_batches == 32);
}
