#include "moepolicy/trace/summary.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <span>
#include <sstream>
#include <string>
#include <vector>

using namespace moepolicy;

namespace {

// Two layers, four experts, top-2. Request "a": a 3-token prefill and 2 decode steps;
// request "b": 1 decode step that is missing at layer 1 (as when a recorder drops a row).
routing_trace make_trace() {
  routing_trace_builder b({.model = "toy", .source = "test", .num_layers = 2, .num_experts = 4, .top_k = 2});
  const auto a = b.add_request("a");
  const auto r = b.add_request("b");
  const std::array<float, 2> w{0.75f, 0.25f};
  const auto row = [&](std::uint32_t req, phase ph, std::uint32_t step, std::uint32_t pos, layer_id layer,
                       std::array<expert_id, 2> ids) {
    b.add({req, ph, step, pos, layer, ids, w, {}});
  };
  for (layer_id l = 0; l < 2; ++l) {
    row(a, phase::prefill, 0, 0, l, {0, 1});
    row(a, phase::prefill, 0, 1, l, {0, 2});
    row(a, phase::prefill, 0, 2, l, {0, 1});
    row(a, phase::decode, 1, 3, l, {0, 1});
    row(a, phase::decode, 2, 4, l, {1, 0});
  }
  row(r, phase::decode, 0, 0, 0, {3, 2});
  return std::move(b).finish();
}

}  // namespace

TEST_CASE("counts tokens per phase and selections per expert for each layer") {
  const auto s = summarize(make_trace());
  CHECK(s.rows == 11);
  REQUIRE(s.layers.size() == 2);
  const auto& l0 = s.layers[0];
  CHECK(l0.prefill_tokens == 3);
  CHECK(l0.decode_tokens == 3);
  CHECK(l0.selections == std::vector<std::uint64_t>{5, 4, 2, 1});
  CHECK(l0.experts_used == 4);
  CHECK(l0.max_share == doctest::Approx(5.0 / 12));
  CHECK(l0.min_share == doctest::Approx(1.0 / 12));
  CHECK(l0.max_min_ratio == doctest::Approx(5.0));
  const double h = -(5.0 / 12 * std::log2(5.0 / 12) + 4.0 / 12 * std::log2(4.0 / 12) + 2.0 / 12 * std::log2(2.0 / 12) +
                     1.0 / 12 * std::log2(1.0 / 12));
  CHECK(l0.entropy_bits == doctest::Approx(h));

  const auto& l1 = s.layers[1];
  CHECK(l1.decode_tokens == 2);
  CHECK(l1.selections == std::vector<std::uint64_t>{5, 4, 1, 0});
  CHECK(l1.experts_used == 3);
  CHECK(std::isinf(l1.max_min_ratio));
  CHECK(s.min_layer_tokens == 5);
  CHECK(s.max_layer_tokens == 6);
}

TEST_CASE("per-request tokens take the most populated layer") {
  const auto s = summarize(make_trace());
  REQUIRE(s.requests.size() == 2);
  CHECK(s.requests[0].name == "a");
  CHECK(s.requests[0].prefill_tokens == 3);
  CHECK(s.requests[0].decode_tokens == 2);
  CHECK(s.requests[0].steps == 3);
  CHECK(s.requests[0].rows == 10);
  CHECK(s.requests[1].decode_tokens == 1);
  CHECK(s.requests[1].steps == 1);
  CHECK(s.prefill_tokens == 3);
  CHECK(s.decode_tokens == 3);
}

TEST_CASE("entropy of a uniform distribution is log2 of its size; zero counts give zero") {
  CHECK(entropy_bits({3, 3, 3, 3}) == doctest::Approx(2.0));
  CHECK(entropy_bits({7, 0, 0}) == doctest::Approx(0.0));
  CHECK(entropy_bits({0, 0}) == 0.0);
}

TEST_CASE("a canonical file is summarised from its map as the trace in memory") {
  const auto check_same = [](const trace_summary& a, const trace_summary& b) {
    CHECK(a.rows == b.rows);
    CHECK(a.steps == b.steps);
    CHECK(a.prefill_tokens == b.prefill_tokens);
    CHECK(a.decode_tokens == b.decode_tokens);
    CHECK(a.min_layer_tokens == b.min_layer_tokens);
    CHECK(a.max_layer_tokens == b.max_layer_tokens);
    REQUIRE(a.requests.size() == b.requests.size());
    for (std::size_t i = 0; i < a.requests.size(); ++i) {
      CHECK(a.requests[i].name == b.requests[i].name);
      CHECK(a.requests[i].rows == b.requests[i].rows);
      CHECK(a.requests[i].prefill_tokens == b.requests[i].prefill_tokens);
      CHECK(a.requests[i].decode_tokens == b.requests[i].decode_tokens);
      CHECK(a.requests[i].steps == b.requests[i].steps);
    }
    REQUIRE(a.layers.size() == b.layers.size());
    for (std::size_t i = 0; i < a.layers.size(); ++i) {
      CHECK(a.layers[i].layer == b.layers[i].layer);
      CHECK(a.layers[i].selections == b.layers[i].selections);
      CHECK(a.layers[i].prefill_tokens == b.layers[i].prefill_tokens);
      CHECK(a.layers[i].decode_tokens == b.layers[i].decode_tokens);
      CHECK(a.layers[i].entropy_bits == b.layers[i].entropy_bits);
      CHECK(a.layers[i].experts_used == b.layers[i].experts_used);
    }
  };
  const routing_trace t = make_trace();
  std::ostringstream os(std::ios::binary);
  write_canonical(t, os);
  const std::string bytes = os.str();
  const canonical_file f(std::as_bytes(std::span<const char>(bytes)), "t");
  const trace_summary s = summarize(f);
  CHECK(s.steps == 4);
  check_same(s, summarize(t));
  const auto granite =
      std::filesystem::path(MOEPOLICY_BUNDLED_TRACES) / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  check_same(summarize(canonical_file(granite)), summarize(read_canonical(granite)));
}
