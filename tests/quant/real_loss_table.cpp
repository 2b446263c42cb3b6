// Prefix split and the exact allocation on the real Mixtral-8x7B loss table (MC-MoE,
// C4 calibration), with experts ordered by the C4 activation frequency of the same
// repository: the heuristic never beats the optimum, both respect the budget, and the
// prefix constraint's cost is what the driver prints.
#include <doctest/doctest.h>

#include <vector>

#include "moepolicy/io/tables_json.hpp"
#include "moepolicy/quant/detail/exact_allocation_reference.hpp"
#include "moepolicy/quant/detail/prefix_split_reference.hpp"
#include "moepolicy/quant/exact_allocation.hpp"
#include "moepolicy/quant/prefix_split.hpp"
#include "moepolicy/score/importance.hpp"
#include "test_support.hpp"

using namespace moepolicy;

TEST_CASE("prefix split against the exact optimum on every Mixtral layer") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  const auto dir = test::shared_traces() / "mixtral-8x7b-mc";
  const loss_table table = io::read_quant_loss_json(dir / "mixtral_quant_loss.json");
  const auto act = io::read_activation_stats_json(dir / "mixtral_c4_expert_activation.json");
  double prefix_total = 0.0, exact_total = 0.0;
  for (double avg : {1.5, 2.0, 2.5}) {
    for (std::size_t l = 0; l < table.num_layers(); ++l) {
      std::vector<double> P(8), W(8), S(8);
      for (std::size_t e = 0; e < 8; ++e) {
        P[e] = act.frequency.value(l, e);
        W[e] = act.weight_sum.value(l, e);
      }
      importance_scores(P, W, S);
      std::vector<expert_id> order(8);
      rank_experts(S, order);
      Eigen::MatrixXd L(8, 3);
      for (std::size_t i = 0; i < 8; ++i) {
        for (std::size_t j = 0; j < 3; ++j)
          L(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = table.loss(l, order[i], j);
      }
      const auto p = prefix_split(table.bits(), L, avg);
      const auto x = exact_allocation(table.bits(), L, avg);
      CAPTURE(l);
      CAPTURE(avg);
      REQUIRE(p.status == allocation_status::ok);
      REQUIRE(x.status == allocation_status::ok);
      CHECK(p.used_increments == p.budget_increments);
      CHECK(x.used_increments == x.budget_increments);
      CHECK(x.weighted_loss <= p.weighted_loss + 1e-9);
      // The reference implementations give the same allocations (the DP identically; the
      // greedy, where the layer's losses are convex, the same least loss).
      for (budget_form form : {budget_form::exact, budget_form::at_most}) {
        const auto rp = reference::prefix_split(table.bits(), L, avg, {.form = form});
        const auto np = prefix_split(table.bits(), L, avg, {.form = form});
        CHECK(np.level_of == rp.level_of);
        CHECK(np.weighted_loss == rp.weighted_loss);
        const auto rx = reference::exact_allocation(table.bits(), L, avg, {.form = form});
        const auto dp =
            exact_allocation(table.bits(), L, avg, {.form = form}, {}, {}, exact_method::dynamic_programming);
        const auto nx = exact_allocation(table.bits(), L, avg, {.form = form});
        CHECK(dp.level_of == rx.level_of);
        CHECK(dp.weighted_loss == rx.weighted_loss);
        CHECK(nx.weighted_loss == doctest::Approx(rx.weighted_loss).epsilon(1e-12));
      }
      prefix_total += p.weighted_loss;
      exact_total += x.weighted_loss;
    }
  }
  // The prefix constraint costs something on real losses, but not an order of magnitude.
  CHECK(prefix_total > exact_total);
  CHECK(prefix_total < 2.0 * exact_total);
}
