#include "moepolicy/trace/tables.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

using moepolicy::bitwidth;
using moepolicy::coactivation_table;
using moepolicy::expert_key;
using moepolicy::expert_table;
using moepolicy::invalid_argument;
using moepolicy::layer_pair;
using moepolicy::loss_table;

TEST_CASE("expert_table: rows stand for possibly non-contiguous layers") {
  const expert_table t("expert_counts", {0, 7, 15}, 2, {1, 2, 3, 4, 5, 6});
  CHECK(t.name() == "expert_counts");
  CHECK(t.num_rows() == 3);
  CHECK(t.num_experts() == 2);
  CHECK(t.layer_of(1) == 7);
  CHECK(t.row_of(0) == 0u);
  CHECK(t.row_of(7) == 1u);
  CHECK(t.row_of(15) == 2u);
  CHECK_FALSE(t.row_of(1).has_value());
  CHECK_FALSE(t.row_of(16).has_value());
  CHECK(t.value(2, 1) == 6);
  const auto row = t.row(1);
  REQUIRE(row.size() == 2);
  CHECK(row[0] == 3);
  CHECK(row[1] == 4);
  CHECK(t.values().size() == 6);
  CHECK(t.layers().size() == 3);
}

TEST_CASE("expert_table: empty and negative tables") {
  const expert_table empty;
  CHECK(empty.num_rows() == 0);
  CHECK(empty.num_experts() == 0);
  CHECK_FALSE(empty.row_of(0).has_value());
  // Values are only required to be finite: a table may hold signed statistics.
  const expert_table signed_values("delta", {3}, 2, {-1.5, 2});
  CHECK(signed_values.value(0, 0) == -1.5);
  const expert_table no_rows("none", {}, 4, {});
  CHECK(no_rows.num_rows() == 0);
  CHECK(no_rows.num_experts() == 4);
}

TEST_CASE("expert_table: validation messages") {
  CHECK_THROWS_WITH_AS(expert_table("t", {0}, 0, {}),
                       "moepolicy::expert_table::expert_table: num_experts must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(expert_table("t", {0}, 65537, {}),
                       "moepolicy::expert_table::expert_table: num_experts must be in [1, 65536], got 65537",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(expert_table("t", {0, 1}, 2, {1, 2, 3}),
                       "moepolicy::expert_table::expert_table: values must hold layers.size() * num_experts = 4 "
                       "entries, got 3",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(expert_table("t", {0, 7, 7}, 1, {1, 2, 3}),
                       "moepolicy::expert_table::expert_table: layers must be strictly ascending; layers[2] follows 7, "
                       "got 7",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(expert_table("t", {7, 0}, 1, {1, 2}),
                       "moepolicy::expert_table::expert_table: layers must be strictly ascending; layers[1] follows 7, "
                       "got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(expert_table("t", {0, 1}, 2, {1, 2, 3, std::numeric_limits<double>::quiet_NaN()}),
                       "moepolicy::expert_table::expert_table: value of row 1, expert 1 must be finite, got nan",
                       invalid_argument);
}

TEST_CASE("loss_table: accessors over an ascending bit set") {
  // 2 layers x 2 experts x bits {2, 4}.
  const loss_table t(2, 2, {bitwidth{2}, bitwidth{4}}, {10, 4, 6, 2, 8, 1, 3, 3.5});
  CHECK(t.num_layers() == 2);
  CHECK(t.num_experts() == 2);
  CHECK(t.num_bits() == 2);
  REQUIRE(t.bits().size() == 2);
  CHECK(t.bits()[0] == bitwidth{2});
  CHECK(t.bits()[1] == bitwidth{4});
  CHECK(t.loss(0, 0, 0) == 10);
  CHECK(t.loss(0, 1, 1) == 2);
  CHECK(t.loss(1, 1, 1) == 3.5);
  CHECK(t.loss_at(1, 0, bitwidth{4}) == 1);
  CHECK(t.bit_index(bitwidth{4}) == 1u);
  CHECK_FALSE(t.bit_index(bitwidth{3}).has_value());
  const auto row = t.losses_of(1, 0);
  REQUIRE(row.size() == 2);
  CHECK(row[0] == 8);
  CHECK(row[1] == 1);
  CHECK(t.values().size() == 8);
  CHECK_THROWS_WITH_AS(static_cast<void>(t.loss_at(0, 0, bitwidth{3})),
                       "moepolicy::loss_table::loss_at: bitwidth is not in the table's bit set, got 3",
                       invalid_argument);
}

TEST_CASE("loss_table: monotonicity is reported, not enforced") {
  const loss_table t(2, 2, {bitwidth{2}, bitwidth{4}}, {10, 4, 6, 6, 8, 1, 3, 3.5});
  CHECK(t.is_non_increasing(0, 0));
  CHECK(t.is_non_increasing(0, 1));  // equal neighbours
  CHECK(t.is_non_increasing(1, 0));
  CHECK_FALSE(t.is_non_increasing(1, 1));
  const auto bad = t.non_monotone_experts();
  REQUIRE(bad.size() == 1);
  CHECK(bad[0] == expert_key{1, 1});
  const loss_table one_bit(1, 1, {bitwidth{3}}, {0});
  CHECK(one_bit.is_non_increasing(0, 0));
  CHECK(one_bit.non_monotone_experts().empty());
}

TEST_CASE("loss_table: validation messages") {
  const std::vector<bitwidth> b12{bitwidth{1}, bitwidth{2}};
  CHECK_THROWS_WITH_AS(loss_table(0, 1, b12, {}),
                       "moepolicy::loss_table::loss_table: num_layers must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(loss_table(1, 0, b12, {}),
                       "moepolicy::loss_table::loss_table: num_experts must be in [1, 65536], got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(loss_table(1, 1, {}, {}), "moepolicy::loss_table::loss_table: bits must not be empty",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(loss_table(1, 1, {bitwidth{2}, bitwidth{2}}, {1, 1}),
                       "moepolicy::loss_table::loss_table: bits must be strictly ascending; bits[1] follows 2, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(loss_table(1, 2, b12, {1, 2, 3}),
                       "moepolicy::loss_table::loss_table: losses must hold num_layers * num_experts * bits.size() = 4 "
                       "entries, got 3",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(loss_table(2, 2, b12, {1, 1, 1, 1, 1, 1, 1, -0.5}),
                       "moepolicy::loss_table::loss_table: loss of layer 1, expert 1 at 2 bits must be finite and >= 0, "
                       "got -0.5",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(loss_table(1, 1, b12, {std::numeric_limits<double>::infinity(), 1}),
                       "moepolicy::loss_table::loss_table: loss of layer 0, expert 0 at 1 bits must be finite and >= 0, "
                       "got inf",
                       invalid_argument);
}

TEST_CASE("coactivation_table: one square matrix per layer pair") {
  const coactivation_table t("expert_counts_crosslayer", {{0, 7}, {7, 15}}, 2, {1, 2, 3, 4, 5, 0, 0, 5});
  CHECK(t.name() == "expert_counts_crosslayer");
  CHECK(t.num_pairs() == 2);
  CHECK(t.num_experts() == 2);
  CHECK(t.pair(1) == layer_pair{7, 15});
  CHECK(t.pairs().size() == 2);
  CHECK(t.pair_of(0, 7) == 0u);
  CHECK(t.pair_of(7, 15) == 1u);
  CHECK_FALSE(t.pair_of(15, 7).has_value());
  CHECK(t.count(0, 1, 0) == 3);
  CHECK(t.count(1, 1, 1) == 5);
  const auto row = t.row(0, 1);
  REQUIRE(row.size() == 2);
  CHECK(row[0] == 3);
  CHECK(row[1] == 4);
  CHECK(t.matrix(1).size() == 4);
  CHECK(t.matrix(1)[0] == 5);
  CHECK(t.values().size() == 8);
}

TEST_CASE("coactivation_table: validation messages") {
  CHECK_THROWS_WITH_AS(coactivation_table("c", {{0, 1}}, 0, {}),
                       "moepolicy::coactivation_table::coactivation_table: num_experts must be in [1, 65536], got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(coactivation_table("c", {{0, 1}}, 2, {1, 2, 3}),
                       "moepolicy::coactivation_table::coactivation_table: counts must hold pairs.size() * "
                       "num_experts^2 = 4 entries, got 3",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(coactivation_table("c", {{0, 1}, {0, 1}}, 1, {1, 2}),
                       "moepolicy::coactivation_table::coactivation_table: pairs[1] repeats pairs[0] (0, 1)",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(coactivation_table("c", {{0, 1}, {1, 2}}, 2, {1, 2, 3, 4, 5, 6, -7, 8}),
                       "moepolicy::coactivation_table::coactivation_table: count of pair 1 at [1][0] must be finite and "
                       ">= 0, got -7",
                       invalid_argument);
}
