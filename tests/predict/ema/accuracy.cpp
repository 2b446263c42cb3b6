// The EMA load predictor (TriMoE §4.3, Eq. 8, α = 0.3) measured on real decode traces,
// beside a last-value baseline (α = 1: the next step looks like this one) and the oracle
// (the next step's true loads).
//
// Steps: B concurrent sequences (sched/batched_steps.hpp, concurrent_sequences): the
// decode-token stream cut into B segments, step t = token t of each, so step t + 1 holds
// each sequence's next token. Mixtral-8x7B, B = 16 is the headline (21 steps × 32 layers);
// B = 32 and 64, and Granite, for context. The predictor is updated after every step and
// predicts the next; steps 1 … S−1 are scored.
//
// Metrics, per (step, layer, expert), against the classes of the true loads
// (stats/analysis.hpp's share rule, defaults: hot = head with 50 % of tokens, cold = tail
// within 10 %):
//   class accuracy     the predicted hot/warm/cold class is the true one;
//   decision accuracy  the two migration decisions a class drives (§4.3) are right: prefetch
//                      (predicted hot = truly hot) and localize (predicted cold = truly
//                      cold), averaged — our reading of the paper's "78 % migration
//                      decision accuracy";
//   makespan ratio     the step's optimal-ish makespan (sched/local_search.hpp on the TriMoE
//                      presets) with the layout the prediction implies — cold localized on
//                      DIMM (l·E + e) mod 16, hot resident in HBM, warm striped — over the
//                      same with the oracle's layout. The oracle scores 1 on every metric
//                      (by definition for the first two), so the ratio is what imperfect
//                      prediction costs; migration time is not charged.
//
// Measured (pinned below; MOEPOLICY_PRINT_GOLDEN=1 prints them), EMA | last value:
//   Mixtral B = 16   class 50.7 % | 47.8 %   decisions 72.6 % | 70.6 %   makespan 1.156 | 1.297 × oracle
//   Mixtral B = 32   class 54.1 % | 54.9 %   decisions 74.9 % | 74.9 %   makespan 1.228 | 1.356
//   Mixtral B = 64   class 59.8 % | 58.8 %   decisions 78.6 % | 78.0 %   makespan 1.121 | 1.159
//   Granite B = 16   class 63.2 % | 58.9 %   decisions 80.9 % | 77.9 %   makespan 1.114 | 1.209
//   Granite B = 64   class 79.7 % | 77.9 %   decisions 89.8 % | 89.0 %   makespan 1.110 | 1.112
// The paper's ">78 %" is reached on Mixtral only at B = 64 (5 steps): with 8 experts and
// top-2, which experts hold the head of the tokens changes from step to step at small
// batches; on Granite's 32 experts the decisions are 81 % right at B = 16 and 90 % at 64.
// Mispredicted classes cost 11–23 % of makespan over the oracle's layout; the EMA always
// costs less than last value.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <span>
#include <vector>

#include "moepolicy/cost/presets.hpp"
#include "moepolicy/cost/roofline.hpp"
#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/predict/ema_load_predictor.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/sched/local_search.hpp"
#include "moepolicy/stats/analysis.hpp"
#include "test_support.hpp"

using namespace moepolicy;
namespace fs = std::filesystem;

namespace {

/// Scores of one predictor: 0 = EMA α = 0.3, 1 = last value, 2 = oracle.
struct scores {
  double classes[3] = {0, 0, 0};
  double decisions[3] = {0, 0, 0};
  double makespan[3] = {0, 0, 0};
  double n = 0;
  [[nodiscard]] double class_accuracy(int k) const { return classes[k] / n; }
  [[nodiscard]] double decision_accuracy(int k) const { return decisions[k] / n; }
  [[nodiscard]] double makespan_ratio(int k) const { return makespan[k] / makespan[2]; }
};

scores measure(const routing_trace& trace, const model_shape& shape, std::size_t batch) {
  const auto steps = make_batched_decode_steps(trace, batch);
  const std::size_t L = steps.num_layers(), E = steps.num_experts();
  const gpu_cpu_ndp_system sys(roofline_cost{presets::h100_pcie_gen5(), shape},
                               roofline_cost{presets::xeon_8470_amx(), shape}, roofline_cost{presets::dimm_ndp(), shape});
  const std::size_t D = sys.num_dimms();
  ema_load_predictor ema(L, E), last(L, E, {.alpha = 1.0});
  local_search_scheduler solver;
  makespan_problem p(D, E);
  makespan_schedule out(E, D);
  std::vector<double> actual(E);
  std::vector<hotness> truth(E);
  std::vector<expert_layout> layout(E);
  std::vector<std::uint8_t> resident(E);
  scores s;
  for (std::size_t t = 0; t < steps.num_steps(); ++t) {
    for (std::size_t l = 0; l < L; ++l) {
      const auto lid = static_cast<layer_id>(l);
      const auto loads = steps.loads(t, l);
      if (t > 0) {
        for (std::size_t e = 0; e < E; ++e) actual[e] = loads[e];
        classify_by_share(actual, truth);
        const std::span<const hotness> predicted[3] = {ema.predicted_classes(lid), last.predicted_classes(lid), truth};
        for (int k = 0; k < 3; ++k) {
          for (std::size_t e = 0; e < E; ++e) {
            const hotness c = predicted[k][e];
            s.classes[k] += c == truth[e] ? 1.0 : 0.0;
            s.decisions[k] += 0.5 * (((c == hotness::hot) == (truth[e] == hotness::hot) ? 1.0 : 0.0) +
                                     ((c == hotness::cold) == (truth[e] == hotness::cold) ? 1.0 : 0.0));
            layout[e] = c == hotness::cold ? expert_layout::localized(static_cast<std::uint16_t>((l * E + e) % D))
                                           : expert_layout::striped();
            resident[e] = c == hotness::hot ? 1 : 0;
          }
          sys.build_layer(lid, loads, layout, resident, fp16, p);
          solver.solve(p, out);
          s.makespan[k] += out.makespan;
        }
        s.n += static_cast<double>(E);
      }
      ema.update(lid, loads);
      last.update(lid, loads);
    }
  }
  return s;
}

void report(const char* what, const scores& s) {
  if (std::getenv("MOEPOLICY_PRINT_GOLDEN") == nullptr) return;
  std::printf("%s: EMA class %.4f decisions %.4f makespan %.4f | last value class %.4f decisions %.4f makespan %.4f\n",
              what, s.class_accuracy(0), s.decision_accuracy(0), s.makespan_ratio(0), s.class_accuracy(1),
              s.decision_accuracy(1), s.makespan_ratio(1));
}

}  // namespace

TEST_CASE("EMA load predictor on the Mixtral decode trace, against last value and the oracle") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto trace = io::read_vllm_decode_jsonl(moepolicy::test::shared_traces() / "mixtral-8x7b-decode" /
                                                "humaneval_2_routing.jsonl");
  const auto m16 = measure(trace, models::mixtral_8x7b(), 16);
  const auto m32 = measure(trace, models::mixtral_8x7b(), 32);
  const auto m64 = measure(trace, models::mixtral_8x7b(), 64);
  report("mixtral B=16", m16);
  report("mixtral B=32", m32);
  report("mixtral B=64", m64);

  // The oracle is right by construction.
  CHECK(m16.class_accuracy(2) == 1.0);
  CHECK(m16.decision_accuracy(2) == 1.0);
  // The headline figures (B = 16).
  CHECK(m16.class_accuracy(0) == doctest::Approx(0.5066).epsilon(0.002));
  CHECK(m16.decision_accuracy(0) == doctest::Approx(0.7262).epsilon(0.002));
  CHECK(m16.makespan_ratio(0) == doctest::Approx(1.1559).epsilon(0.002));
  CHECK(m16.class_accuracy(1) == doctest::Approx(0.4777).epsilon(0.002));
  CHECK(m16.decision_accuracy(1) == doctest::Approx(0.7059).epsilon(0.002));
  CHECK(m16.makespan_ratio(1) == doctest::Approx(1.2972).epsilon(0.002));
  // EMA beats last value at B = 16 on every metric, and costs less makespan at every B.
  CHECK(m16.class_accuracy(0) > m16.class_accuracy(1));
  CHECK(m16.decision_accuracy(0) > m16.decision_accuracy(1));
  for (const auto* m : {&m16, &m32, &m64}) {
    CHECK(m->makespan_ratio(0) < m->makespan_ratio(1));
    CHECK(m->makespan_ratio(0) >= 1.0);
  }
}

TEST_CASE("EMA load predictor on the Granite traces") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  std::vector<fs::path> files;
  for (const auto& f : fs::directory_iterator(moepolicy::test::shared_traces() / "granite-3.1-1b-a400m")) {
    if (f.path().extension() == ".jsonl") files.push_back(f.path());
  }
  std::sort(files.begin(), files.end());
  const auto trace = io::read_granite_jsonl(files);
  const auto g16 = measure(trace, models::granite_3_1_1b_a400m(), 16);
  const auto g64 = measure(trace, models::granite_3_1_1b_a400m(), 64);
  report("granite B=16", g16);
  report("granite B=64", g64);
  CHECK(g16.decision_accuracy(0) == doctest::Approx(0.8085).epsilon(0.002));
  CHECK(g64.decision_accuracy(0) == doctest::Approx(0.8985).epsilon(0.002));
  CHECK(g16.decision_accuracy(0) > g16.decision_accuracy(1));
  CHECK(g16.makespan_ratio(0) < g16.makespan_ratio(1));
}
