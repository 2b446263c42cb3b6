#include "moepolicy/trace/routing_trace.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iterator>
#include <limits>
#include <string>
#include <thread>
#include <vector>

using moepolicy::expert_id;
using moepolicy::invalid_argument;
using moepolicy::phase;
using moepolicy::routing_trace;
using moepolicy::routing_trace_builder;
using moepolicy::trace_columns;
using moepolicy::trace_info;
using moepolicy::trace_row;

namespace {

/// 4 layers, 8 experts, top-2, no scores.
trace_info small_info(bool scores = false) {
  return trace_info{
      .model = "toy", .source = "hand-built", .num_layers = 4, .num_experts = 8, .top_k = 2, .has_scores = scores};
}

/// A row with owned ids, weights and scores, so that a `trace_row` can point at them.
struct owned_row {
  std::uint32_t request = 0;
  phase kind = phase::prefill;
  std::uint32_t step = 0;
  std::uint32_t position = 0;
  moepolicy::layer_id layer = 0;
  std::vector<expert_id> experts = {0, 1};
  std::vector<float> weights = {0.75f, 0.25f};
  std::vector<float> scores = {};

  [[nodiscard]] trace_row row() const {
    return trace_row{request, kind, step, position, layer, experts, weights, scores};
  }
};

void add(routing_trace_builder& b, const owned_row& r) { b.add(r.row()); }

std::string add_error(const trace_info& info, std::size_t requests, const owned_row& r) {
  routing_trace_builder b(info);
  for (std::size_t i = 0; i < requests; ++i) b.add_request("r" + std::to_string(i));
  try {
    b.add(r.row());
  } catch (const invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

/// Two requests: "a" (prefill of 2 tokens at layers 0 and 1, then one decode step at both
/// layers) and "b" (one decode step at layer 0).
routing_trace two_requests() {
  routing_trace_builder b(small_info());
  b.add_request("a");
  b.add_request("b");
  // Out of order on purpose.
  add(b, {.request = 1, .kind = phase::decode, .step = 0, .position = 5, .layer = 0, .experts = {6, 7}});
  add(b, {.request = 0, .kind = phase::decode, .step = 1, .position = 2, .layer = 1, .experts = {4, 5}});
  add(b, {.request = 0, .kind = phase::prefill, .step = 0, .position = 1, .layer = 1, .experts = {3, 2}});
  add(b, {.request = 0, .kind = phase::prefill, .step = 0, .position = 0, .layer = 1, .experts = {2, 3}});
  add(b, {.request = 0, .kind = phase::decode, .step = 1, .position = 2, .layer = 0, .experts = {5, 4}});
  add(b, {.request = 0, .kind = phase::prefill, .step = 0, .position = 1, .layer = 0, .experts = {1, 0}});
  add(b, {.request = 0, .kind = phase::prefill, .step = 0, .position = 0, .layer = 0, .experts = {0, 1}});
  return std::move(b).finish();
}

}  // namespace

TEST_CASE("builder sorts rows by request, step, layer, position") {
  const routing_trace t = two_requests();
  REQUIRE(t.num_rows() == 7);
  const trace_columns& c = t.columns();
  CHECK(c.request == std::vector<std::uint32_t>{0, 0, 0, 0, 0, 0, 1});
  CHECK(c.step == std::vector<std::uint32_t>{0, 0, 0, 0, 1, 1, 0});
  CHECK(c.layer == std::vector<moepolicy::layer_id>{0, 0, 1, 1, 0, 1, 0});
  CHECK(c.position == std::vector<std::uint32_t>{0, 1, 0, 1, 2, 2, 5});
  CHECK(c.kind == std::vector<phase>{phase::prefill, phase::prefill, phase::prefill, phase::prefill, phase::decode,
                                     phase::decode, phase::decode});
  // The ids travel with their rows.
  CHECK(c.experts == std::vector<expert_id>{0, 1, 1, 0, 2, 3, 3, 2, 5, 4, 4, 5, 6, 7});
  CHECK(c.weights.size() == 14);
  CHECK(t.info().model == "toy");
  CHECK(t.info().source == "hand-built");
}

TEST_CASE("builder sorting keeps each row's data with its row") {
  // finish() sorts stably, but a valid trace has no equal keys (finish() rejects them), so
  // what a caller can observe is that every column moves with its row.
  routing_trace_builder b(small_info());
  b.add_request("a");
  add(b, {.position = 3, .weights = {0.5f, 0.5f}});
  add(b, {.position = 1, .weights = {0.9f, 0.1f}});
  add(b, {.position = 2, .weights = {0.6f, 0.4f}});
  const routing_trace t = std::move(b).finish();
  CHECK(t.columns().position == std::vector<std::uint32_t>{1, 2, 3});
  CHECK(t.columns().weights == std::vector<float>{0.9f, 0.1f, 0.6f, 0.4f, 0.5f, 0.5f});
}

TEST_CASE("builder constructor checks the header fields") {
  CHECK_THROWS_WITH_AS(
      routing_trace_builder(trace_info{.model = "", .source = "", .num_layers = 0, .num_experts = 8, .top_k = 2}),
      "moepolicy::routing_trace_builder: num_layers must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(
      routing_trace_builder(trace_info{.model = "", .source = "", .num_layers = 65537, .num_experts = 8, .top_k = 2}),
      "moepolicy::routing_trace_builder: num_layers must be in [1, 65536], got 65537", invalid_argument);
  CHECK_THROWS_WITH_AS(
      routing_trace_builder(trace_info{.model = "", .source = "", .num_layers = 4, .num_experts = 0, .top_k = 2}),
      "moepolicy::routing_trace_builder: num_experts must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(
      routing_trace_builder(trace_info{.model = "", .source = "", .num_layers = 4, .num_experts = 8, .top_k = 9}),
      "moepolicy::routing_trace_builder: top_k must be in [1, num_experts], got 9", invalid_argument);
  CHECK_THROWS_WITH_AS(
      routing_trace_builder(trace_info{.model = "", .source = "", .num_layers = 4, .num_experts = 8, .top_k = 0}),
      "moepolicy::routing_trace_builder: top_k must be in [1, num_experts], got 0", invalid_argument);
}

TEST_CASE("builder add names every row problem") {
  const std::string p = "moepolicy::routing_trace_builder::add: ";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();

  CHECK(add_error(small_info(), 1, {.request = 1}) == p + "request 1 does not exist (1 requests)");
  CHECK(add_error(small_info(), 0, {}) == p + "request 0 does not exist (0 requests)");
  CHECK(add_error(small_info(), 1, {.kind = static_cast<phase>(2)}) ==
        p + "phase code 2 is neither prefill (0) nor decode (1)");
  CHECK(add_error(small_info(), 1, {.layer = 4}) == p + "layer 4 >= num_layers 4");
  CHECK(add_error(small_info(), 1, {.experts = {0}, .weights = {1.0f}}) ==
        p + "layer 0: expected top_k = 2 expert ids, got 1");
  CHECK(add_error(small_info(), 1, {.experts = {0, 1}, .weights = {1.0f}}) == p + "expected 2 gate weights, got 1");
  CHECK(add_error(small_info(), 1, {.experts = {0, 8}}) == p + "expert id 8 >= num_experts 8");
  CHECK(add_error(small_info(), 1, {.experts = {3, 3}}) == p + "expert id 3 selected twice");
  CHECK(add_error(small_info(), 1, {.weights = {0.5f, nan}}) ==
        p + "gate weight nan of expert 1 is not a finite non-negative number");
  CHECK(add_error(small_info(), 1, {.weights = {-0.5f, 1.0f}}) ==
        p + "gate weight -0.5 of expert 0 is not a finite non-negative number");
  CHECK(add_error(small_info(), 1, {.weights = {inf, 0.0f}}) ==
        p + "gate weight inf of expert 0 is not a finite non-negative number");
  CHECK(add_error(small_info(true), 1, {.scores = std::vector<float>(7, 0.0f)}) ==
        p + "expected 8 router scores, got 7");
  CHECK(add_error(small_info(true), 1, {.scores = {0, 0, 0, inf, 0, 0, 0, 0}}) == p + "router score inf is not finite");
  CHECK(add_error(small_info(true), 1, {.scores = {0, 0, 0, 0, 0, 0, 0, nan}}) == p + "router score nan is not finite");
  CHECK(add_error(small_info(false), 1, {.scores = std::vector<float>(8, 0.0f)}) ==
        p + "router scores given for a trace declared without scores");

  // The same through CHECK_THROWS_WITH_AS, for the type.
  routing_trace_builder b(small_info());
  b.add_request("a");
  const owned_row bad{.layer = 9};
  CHECK_THROWS_WITH_AS(b.add(bad.row()), "moepolicy::routing_trace_builder::add: layer 9 >= num_layers 4",
                       invalid_argument);
  CHECK(b.num_rows() == 0);
}

TEST_CASE("a repeated id is found whatever its value, ids 64 apart are not repeats") {
  const trace_info wide{.model = "", .source = "", .num_layers = 1, .num_experts = 200, .top_k = 3};
  CHECK(add_error(wide, 1, {.experts = {3, 67, 131}, .weights = {0.5f, 0.25f, 0.25f}}) == "(no error)");
  CHECK(add_error(wide, 1, {.experts = {67, 3, 67}, .weights = {0.5f, 0.25f, 0.25f}}) ==
        "moepolicy::routing_trace_builder::add: expert id 67 selected twice");
  CHECK(add_error(wide, 1, {.experts = {199, 135, 199}, .weights = {0.5f, 0.25f, 0.25f}}) ==
        "moepolicy::routing_trace_builder::add: expert id 199 selected twice");
}

TEST_CASE("k may not vary within a layer") {
  routing_trace_builder b(small_info());
  b.add_request("a");
  add(b, {.layer = 1});
  const owned_row three{.position = 1, .layer = 1, .experts = {0, 1, 2}, .weights = {0.5f, 0.25f, 0.25f}};
  CHECK_THROWS_WITH_AS(b.add(three.row()),
                       "moepolicy::routing_trace_builder::add: layer 1: expected top_k = 2 expert ids, got 3",
                       invalid_argument);
  CHECK(b.check(three.row()) == std::optional<std::string>("layer 1: expected top_k = 2 expert ids, got 3"));
  CHECK_FALSE(b.check(owned_row{.position = 1, .layer = 1}.row()).has_value());
}

TEST_CASE("finish rejects duplicate rows and steps that mix phases") {
  {
    routing_trace_builder b(small_info());
    b.add_request("a");
    add(b, {.position = 3});
    add(b, {.position = 3, .experts = {4, 5}});
    CHECK_THROWS_WITH_AS(
        std::move(b).finish(),
        "moepolicy::routing_trace::from_sorted: row 1 repeats the (request, step, layer, position) of the row before",
        invalid_argument);
  }
  {
    routing_trace_builder b(small_info());
    b.add_request("a");
    add(b, {.kind = phase::prefill, .position = 0});
    add(b, {.kind = phase::decode, .position = 1});
    CHECK_THROWS_WITH_AS(
        std::move(b).finish(),
        "moepolicy::routing_trace::from_sorted: row 1: step 0 of request 0 mixes prefill and decode rows",
        invalid_argument);
  }
  {
    // Mixed across layers of one step is also a mix.
    routing_trace_builder b(small_info());
    b.add_request("a");
    add(b, {.kind = phase::decode, .step = 2, .layer = 0});
    add(b, {.kind = phase::prefill, .step = 2, .layer = 3});
    CHECK_THROWS_WITH_AS(
        std::move(b).finish(),
        "moepolicy::routing_trace::from_sorted: row 1: step 2 of request 0 mixes prefill and decode rows",
        invalid_argument);
  }
}

TEST_CASE("views: requests, steps, batches") {
  const routing_trace t = two_requests();
  const auto requests = t.requests();
  REQUIRE(requests.size() == 2);
  CHECK(requests[0].name == "a");
  CHECK(requests[0].first_row == 0);
  CHECK(requests[0].num_rows == 6);
  CHECK(requests[0].first_step == 0);
  CHECK(requests[0].num_steps == 2);
  CHECK(requests[1].name == "b");
  CHECK(requests[1].first_row == 6);
  CHECK(requests[1].num_rows == 1);
  CHECK(requests[1].first_step == 2);
  CHECK(requests[1].num_steps == 1);

  const auto steps = t.steps();
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].request == 0);
  CHECK(steps[0].step == 0);
  CHECK(steps[0].kind == phase::prefill);
  CHECK(steps[0].first_batch == 0);
  CHECK(steps[0].num_batches == 2);
  CHECK(steps[1].step == 1);
  CHECK(steps[1].kind == phase::decode);
  CHECK(steps[1].first_batch == 2);
  CHECK(steps[1].num_batches == 2);
  CHECK(steps[2].request == 1);
  CHECK(steps[2].kind == phase::decode);
  CHECK(steps[2].num_batches == 1);

  const auto batches = t.batches();
  REQUIRE(batches.size() == 5);
  CHECK(batches[0].layer == 0);
  CHECK(batches[0].first_row == 0);
  CHECK(batches[0].num_rows == 2);
  CHECK(batches[1].layer == 1);
  CHECK(batches[1].first_row == 2);
  CHECK(batches[1].num_rows == 2);
  CHECK(batches[2].step == 1);
  CHECK(batches[2].kind == phase::decode);
  CHECK(batches[4].request == 1);
  CHECK(batches[4].first_row == 6);

  const auto of_step1 = t.batches_of(steps[1]);
  REQUIRE(of_step1.size() == 2);
  CHECK(of_step1[0].first_row == 4);
  CHECK(of_step1[1].first_row == 5);

  const auto of_a = t.steps_of(requests[0]);
  REQUIRE(of_a.size() == 2);
  CHECK(of_a[1].step == 1);
  const auto of_b = t.steps_of(requests[1]);
  REQUIRE(of_b.size() == 1);
  CHECK(of_b[0].request == 1);
}

TEST_CASE("views: layer_batches, empty and out of range") {
  const routing_trace t = two_requests();
  const auto l0 = t.layer_batches(0);
  CHECK(std::vector<std::uint32_t>(l0.begin(), l0.end()) == std::vector<std::uint32_t>{0, 2, 4});
  const auto l1 = t.layer_batches(1);
  CHECK(std::vector<std::uint32_t>(l1.begin(), l1.end()) == std::vector<std::uint32_t>{1, 3});
  CHECK(t.layer_batches(2).empty());  // no rows
  CHECK(t.layer_batches(3).empty());
  CHECK(t.layer_batches(4).empty());  // out of range
  CHECK(t.layer_batches(65535).empty());

  const routing_trace empty;
  CHECK(empty.num_rows() == 0);
  CHECK(empty.layer_batches(0).empty());
  CHECK(empty.requests().empty());
}

TEST_CASE("views: batches of one row each are made from the rows, as longer ones") {
  // Decode steps of one token (every batch one row: the trace keeps no batch index), and
  // the mixed trace above (batches of two rows) through the same range operations.
  routing_trace_builder b(small_info());
  b.add_request("d");
  for (std::uint32_t step = 0; step < 3; ++step) {
    for (moepolicy::layer_id l = 0; l < 2; ++l) {
      add(b, {.request = 0, .kind = phase::decode, .step = step, .position = step, .layer = l});
    }
  }
  const routing_trace t = std::move(b).finish();
  const auto batches = t.batches();
  REQUIRE(batches.size() == 6);
  for (std::size_t i = 0; i < batches.size(); ++i) {
    CHECK(batches[i].first_row == i);
    CHECK(batches[i].num_rows == 1);
    CHECK(batches[i].step == i / 2);
    CHECK(batches[i].layer == i % 2);
    CHECK(batches[i].kind == phase::decode);
  }
  CHECK(batches.end() - batches.begin() == 6);
  CHECK((*std::prev(batches.end())).first_row == 5);
  CHECK(batches.back().first_row == 5);
  CHECK(std::count_if(batches.begin(), batches.end(), [](const moepolicy::batch_ref& r) { return r.layer == 1; }) == 3);
  const auto of_step2 = t.batches_of(t.steps()[2]);
  REQUIRE(of_step2.size() == 2);
  CHECK(of_step2.front().first_row == 4);
  CHECK(of_step2.begin()[1].first_row == 5);
  const auto l1 = t.layer_batches(1);
  CHECK(std::vector<std::uint32_t>(l1.begin(), l1.end()) == std::vector<std::uint32_t>{1, 3, 5});

  const routing_trace mixed = two_requests();
  std::vector<std::uint32_t> firsts;
  for (const moepolicy::batch_ref& r : mixed.batches()) firsts.push_back(r.first_row);
  CHECK(firsts == std::vector<std::uint32_t>{0, 2, 4, 5, 6});
}

TEST_CASE("views: layer_batches is built on first use, once, from any thread and for copies") {
  const routing_trace t = two_requests();
  const routing_trace copy = t;  // before the index is built
  std::vector<std::uint32_t> a, b;
  std::thread other([&] {
    const auto l0 = t.layer_batches(0);
    a.assign(l0.begin(), l0.end());
  });
  const auto l0 = copy.layer_batches(0);
  b.assign(l0.begin(), l0.end());
  other.join();
  CHECK(a == std::vector<std::uint32_t>{0, 2, 4});
  CHECK(b == a);
  const auto l1 = t.layer_batches(1);
  CHECK(std::vector<std::uint32_t>(l1.begin(), l1.end()) == std::vector<std::uint32_t>{1, 3});
}

TEST_CASE("views: a batch's spans") {
  const routing_trace t = two_requests();
  const auto v = t.view(t.batches()[1]);  // request a, step 0, layer 1, positions 0 and 1
  CHECK(v.tokens() == 2);
  CHECK(v.top_k == 2);
  CHECK(v.ref.layer == 1);
  CHECK(std::vector<std::uint32_t>(v.positions.begin(), v.positions.end()) == std::vector<std::uint32_t>{0, 1});
  REQUIRE(v.experts.size() == 4);
  CHECK(std::vector<expert_id>(v.experts_of(0).begin(), v.experts_of(0).end()) == std::vector<expert_id>{2, 3});
  CHECK(std::vector<expert_id>(v.experts_of(1).begin(), v.experts_of(1).end()) == std::vector<expert_id>{3, 2});
  CHECK(v.weights_of(1).size() == 2);
  CHECK(v.weights_of(1)[0] == 0.75f);
  CHECK(v.scores.empty());
  CHECK(t.scores(0).empty());
  CHECK(t.experts(6)[1] == 7);
  CHECK(t.row(6).request == 1);
  CHECK(t.row(6).kind == phase::decode);
}

TEST_CASE("views: scores present") {
  routing_trace_builder b(small_info(true));
  b.add_request("s");
  std::vector<float> s0 = {0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f};
  std::vector<float> s1 = {-1.f, -2.f, -3.f, -4.f, -5.f, -6.f, -7.f, -8.f};
  add(b, {.position = 1, .experts = {7, 6}, .scores = s1});
  add(b, {.position = 0, .experts = {7, 6}, .scores = s0});
  const routing_trace t = std::move(b).finish();
  REQUIRE(t.info().has_scores);
  CHECK(t.columns().scores.size() == 16);
  const auto v = t.view(t.batches()[0]);
  REQUIRE(v.scores.size() == 16);
  CHECK(v.scores[0] == 0.f);
  CHECK(v.scores[8] == -1.f);  // sorted with its row
  CHECK(t.scores(1)[7] == -8.f);
}

TEST_CASE("from_sorted checks column lengths, rows and order") {
  const std::string p = "moepolicy::routing_trace::from_sorted: ";
  const auto columns = [] {
    trace_columns c;
    c.request = {0, 0};
    c.step = {0, 0};
    c.position = {0, 1};
    c.layer = {0, 0};
    c.kind = {phase::prefill, phase::prefill};
    c.experts = {0, 1, 2, 3};
    c.weights = {0.5f, 0.5f, 0.5f, 0.5f};
    return c;
  };
  const std::vector<std::string> names = {"a"};
  CHECK(routing_trace::from_sorted(small_info(), names, columns()).num_rows() == 2);

  auto c = columns();
  c.step.pop_back();
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "step column must have 2 entries, got 1").c_str(), invalid_argument);
  c = columns();
  c.request.push_back(0);
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "request column must have 2 entries, got 3").c_str(), invalid_argument);
  c = columns();
  c.position.clear();
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "position column must have 2 entries, got 0").c_str(), invalid_argument);
  c = columns();
  c.kind.pop_back();
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "phase column must have 2 entries, got 1").c_str(), invalid_argument);
  c = columns();
  c.experts.pop_back();
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "experts column must have 4 entries, got 3").c_str(), invalid_argument);
  c = columns();
  c.weights.push_back(1.0f);
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "weights column must have 4 entries, got 5").c_str(), invalid_argument);
  c = columns();
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(true), names, c),
                       (p + "scores column must have 16 entries, got 0").c_str(), invalid_argument);
  c = columns();
  c.scores = {1.0f};
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "scores column must have 0 entries, got 1").c_str(), invalid_argument);

  c = columns();
  c.position = {1, 0};
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "row 1 is out of (request, step, layer, position) order").c_str(), invalid_argument);
  c = columns();
  c.experts[3] = 9;
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), names, c),
                       (p + "row 1: expert id 9 >= num_experts 8").c_str(), invalid_argument);
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(small_info(), {}, columns()),
                       (p + "row 0: request 0 does not exist (0 requests)").c_str(), invalid_argument);
  CHECK_THROWS_WITH_AS(routing_trace::from_sorted(trace_info{}, names, columns()),
                       (p + "num_layers must be in [1, 65536], got 0").c_str(), invalid_argument);
}

TEST_CASE("requests without rows are kept") {
  routing_trace_builder b(small_info());
  b.add_request("empty");
  b.add_request("full");
  add(b, {.request = 1});
  const routing_trace t = std::move(b).finish();
  REQUIRE(t.requests().size() == 2);
  CHECK(t.requests()[0].num_rows == 0);
  CHECK(t.steps_of(t.requests()[0]).empty());
  CHECK(t.requests()[1].num_rows == 1);
  CHECK(t.steps_of(t.requests()[1]).size() == 1);
}

TEST_CASE("trace_columns reserve and resize size every column by rows, k and e") {
  trace_columns c;
  c.reserve(5, 2, 8);
  CHECK(c.request.capacity() >= 5);
  CHECK(c.step.capacity() >= 5);
  CHECK(c.position.capacity() >= 5);
  CHECK(c.layer.capacity() >= 5);
  CHECK(c.kind.capacity() >= 5);
  CHECK(c.experts.capacity() >= 10);
  CHECK(c.weights.capacity() >= 10);
  CHECK(c.scores.capacity() >= 40);
  CHECK(c.request.empty());
  CHECK(c.experts.empty());

  c.resize(3, 2, 0);
  CHECK(c.request.size() == 3);
  CHECK(c.step.size() == 3);
  CHECK(c.position.size() == 3);
  CHECK(c.layer.size() == 3);
  CHECK(c.kind.size() == 3);
  CHECK(c.experts.size() == 6);
  CHECK(c.weights.size() == 6);
  CHECK(c.scores.empty());
  // Sized columns are a valid input of `from_sorted` once filled.
  for (std::uint32_t i = 0; i < 3; ++i) {
    c.request[i] = 0;
    c.step[i] = 0;
    c.position[i] = 0;
    c.layer[i] = static_cast<moepolicy::layer_id>(i);
    c.kind[i] = phase::prefill;
    c.experts[2 * i] = 0;
    c.experts[2 * i + 1] = 1;
    c.weights[2 * i] = 0.5f;
    c.weights[2 * i + 1] = 0.5f;
  }
  const routing_trace t = routing_trace::from_sorted(small_info(), {"r"}, c);
  CHECK(t.num_rows() == 3);
}

TEST_CASE("trace_columns: resize_column sizes one column as resize sizes them all") {
  trace_columns all;
  all.resize(5, 2, 4);
  trace_columns each;
  for (std::size_t i = 0; i < trace_columns::column_count; ++i) {
    CHECK(each.scores.empty());  // the last column is sized last
    each.resize_column(i, 5, 2, 4);
  }
  const auto sizes = [](const trace_columns& c) {
    return std::vector<std::size_t>{c.request.size(), c.step.size(),    c.position.size(), c.layer.size(),
                                    c.kind.size(),    c.experts.size(), c.weights.size(),  c.scores.size()};
  };
  const std::vector<std::size_t> want{5, 5, 5, 5, 5, 10, 10, 20};
  CHECK(sizes(all) == want);
  CHECK(sizes(each) == want);
  // Without scores (e = 0) the scores column stays empty.
  trace_columns none;
  none.resize(3, 1, 0);
  CHECK(none.experts.size() == 3);
  CHECK(none.scores.empty());
}
