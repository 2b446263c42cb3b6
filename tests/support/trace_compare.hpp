// Comparing two routing traces field by field, for the tests of readers and writers.
#pragma once

#include <doctest/doctest.h>

#include <cstddef>

#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::test {

/// Checks that `a` and `b` hold the same info, requests, columns and views.
inline void check_same_trace(const routing_trace& a, const routing_trace& b) {
  CHECK(a.info().model == b.info().model);
  CHECK(a.info().source == b.info().source);
  CHECK(a.info().num_layers == b.info().num_layers);
  CHECK(a.info().num_experts == b.info().num_experts);
  CHECK(a.info().top_k == b.info().top_k);
  CHECK(a.info().has_scores == b.info().has_scores);
  REQUIRE(a.requests().size() == b.requests().size());
  for (std::size_t i = 0; i < a.requests().size(); ++i) {
    CHECK(a.requests()[i].name == b.requests()[i].name);
    CHECK(a.requests()[i].first_row == b.requests()[i].first_row);
    CHECK(a.requests()[i].num_rows == b.requests()[i].num_rows);
    CHECK(a.requests()[i].first_step == b.requests()[i].first_step);
    CHECK(a.requests()[i].num_steps == b.requests()[i].num_steps);
  }
  const auto& x = a.columns();
  const auto& y = b.columns();
  CHECK(x.request == y.request);
  CHECK(x.step == y.step);
  CHECK(x.position == y.position);
  CHECK(x.layer == y.layer);
  CHECK(x.kind == y.kind);
  CHECK(x.experts == y.experts);
  CHECK(x.weights == y.weights);
  CHECK(x.scores == y.scores);
  CHECK(a.steps().size() == b.steps().size());
  CHECK(a.batches().size() == b.batches().size());
}

}  // namespace moepolicy::test
