// Measured figures on the recorded traces: predictor precision and recall, and the demand
// hit ratio of CXL-MoE's sticky LRU fed its predictor's hints beside LRU and Belady — on
// the bundled Granite trace and the shared Mixtral decode trace (skipped without
// ../shared). What prefetching gains needs time: tests/sim/offload_replay.cpp. Run with
// MOEPOLICY_PRINT_GOLDEN=1 to print the tables the project quotes.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "../../cache/cache_test_support.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/predict/oracle_predictor.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"
#include "moepolicy/predict/transition_predictor.hpp"
#include "moepolicy/sim/cache_replay.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

bool print_golden() { return std::getenv("MOEPOLICY_PRINT_GOLDEN") != nullptr; }

void report(const char* trace, const char* predictor, const char* truth, const prediction_quality& q) {
  if (!print_golden()) return;
  std::printf("%s | %-34s | %-22s | precision %.3f recall %.3f (%llu predicted, %llu needed, %llu empty of %llu)\n",
              trace, predictor, truth, q.precision(), q.recall(), static_cast<unsigned long long>(q.predicted),
              static_cast<unsigned long long>(q.actual), static_cast<unsigned long long>(q.empty_predictions),
              static_cast<unsigned long long>(q.predictions));
}

/// Scores the predictors on decode steps of `t`, and the sticky LRU with their hints.
void measure(const char* name, const routing_trace& t, std::uint32_t history, std::uint32_t horizon,
             std::uint64_t per_layer, std::uint64_t shared, bytes expert_size) {
  const std::uint32_t L = t.info().num_layers, E = t.info().num_experts, k = t.info().top_k;
  const double chance = static_cast<double>(k) / static_cast<double>(E);
  const cache_replay_config decode{.prefill = false};
  const prediction_eval_config next{.horizon = 1, .prefill = false};
  const prediction_eval_config next_n{.horizon = horizon, .prefill = false};

  short_horizon_predictor sh({.num_layers = L, .num_experts = E, .top_k = k, .history = history, .horizon = horizon});
  const prediction_quality sh1 = evaluate_predictor(t, sh, next);
  const prediction_quality shn = evaluate_predictor(t, sh, next_n);
  report(name, "short-horizon (last m tokens)", "next token", sh1);
  report(name, "short-horizon (last m tokens)", "next n tokens", shn);
  CHECK(sh1.precision() > chance);
  CHECK(shn.precision() >= sh1.precision());

  transition_predictor tr({.num_layers = L, .num_experts = E, .top_k = k});
  const prediction_quality tr1 = evaluate_predictor(t, tr, next);
  report(name, "transition l->l+1 (online)", "this token, next layer", tr1);
  CHECK(tr1.precision() > chance);

  oracle_predictor oracle(t, {.prefill = false});
  const prediction_quality or1 = evaluate_predictor(t, oracle, next);
  report(name, "oracle", "next token", or1);
  CHECK(or1.precision() == 1.0);
  CHECK(or1.recall() == 1.0);

  for (const cache_config& cc :
       {cache_config{.num_layers = L,
       .num_experts = E,
       .capacity = per_layer,
       .scope = capacity_scope::per_layer,
       .expert_bytes = expert_size},
        cache_config{.num_layers = L, .num_experts = E, .capacity = shared, .expert_bytes = expert_size}}) {
    const std::string label = std::string(to_string(cc.scope)) + " " + std::to_string(cc.capacity);
    // CXL-MoE's cache: sticky LRU hinted by its own short-horizon predictor.
    short_horizon_predictor p4({.num_layers = L, .num_experts = E, .top_k = k, .history = history, .horizon = horizon});
    const cache_replay_result cxl = replay_cache_with_hints<sticky_lru_policy>(t, cc, {}, p4, decode);
    const cache_replay_result lru = replay_cache<lru_policy>(t, cc, {}, decode);
    const cache_replay_result belady = replay_cache<belady_policy>(t, cc, {}, decode);
    if (print_golden()) {
      std::printf(
          "%s | %-24s | demand LRU %.4f, demand Belady %.4f, sticky-lru + short-horizon hints %.4f "
          "(%llu rejections)\n",
          name, label.c_str(), lru.stats.hit_ratio(), belady.stats.hit_ratio(), cxl.stats.hit_ratio(),
          static_cast<unsigned long long>(cxl.stats.rejections));
    }
    CHECK(belady.stats.hits >= cxl.stats.hits);
    CHECK(belady.stats.hits >= lru.stats.hits);
  }
}

}  // namespace

TEST_CASE("predictors and prefetching on the bundled Granite trace (decode steps)") {
  const routing_trace t = test::granite_trace();
  measure("granite", t, 8, 2, 8, 256, expert_bytes(models::granite_3_1_1b_a400m(), fp16));

  // Transition counts learned on the four calibration requests, frozen on the eight others.
  const routing_trace cal = test::request_range(t, 0, 4);
  const routing_trace eval = test::request_range(t, 4, 8);
  transition_predictor tr({.num_layers = 24, .num_experts = 32, .top_k = 8});
  static_cast<void>(evaluate_predictor(cal, tr, {}));
  tr.set_learning(false);
  const prediction_quality frozen = evaluate_predictor(eval, tr, {.prefill = false});
  transition_predictor online({.num_layers = 24, .num_experts = 32, .top_k = 8});
  const prediction_quality fresh = evaluate_predictor(eval, online, {.prefill = false});
  report("granite", "transition (trained on cal-*, frozen)", "eval-* next layer", frozen);
  report("granite", "transition (online from scratch)", "eval-* next layer", fresh);
  CHECK(frozen.precision() > 0.25);
}

TEST_CASE("predictors and prefetching on the shared Mixtral decode trace") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const routing_trace t =
      io::read_vllm_decode_jsonl(test::shared_traces() / "mixtral-8x7b-decode" / "humaneval_2_routing.jsonl");
  measure("mixtral", t, 8, 2, 2, 64, expert_bytes(models::mixtral_8x7b(), fp16));
}
