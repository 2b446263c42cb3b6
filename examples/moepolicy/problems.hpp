// The problems `moepolicy bitwidth`, `place` and `schedule` solve, as read from their JSON
// (schemas at the top of plan.cpp and schedule.cpp), and their answers as JSON.
//
// Reading is apart from solving so that the readers can be tested and fuzzed on their own
// (tests/tool/, tests/fuzz/): a `read_*` function either returns a problem every solver
// takes without an `invalid_argument`, or throws a `parse_error` naming the file and the
// field (or line). The solvers may still refuse an instance too large for them
// (`exact_allocation`'s table limit) with `invalid_argument`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/place/prefill_placement.hpp"
#include "moepolicy/quant/bit_allocation.hpp"
#include "moepolicy/sched/gpu_cpu_ndp.hpp"
#include "moepolicy/trace/tables.hpp"

namespace moepolicy::tool {

/// One layer's bit allocation (`moepolicy bitwidth`).
struct bitwidth_problem {
  std::vector<bitwidth> bits;
  double average_bits = 0.0;
  /// Experts × bitwidths, rows in descending importance.
  Eigen::MatrixXd losses;
  std::vector<double> weights;
  std::vector<std::uint32_t> min_count;
  bit_allocation_config config;
  /// "prefix_split", "exact" or "both".
  std::string solver = "both";
};

/// Reads a `bitwidth` problem from its JSON `doc`; `file` names it in messages.
///
/// Throws: `parse_error` naming `file` and the field.
[[nodiscard]] bitwidth_problem read_bitwidth_problem(const nlohmann::json& doc, const std::string& file);

/// The answer of each solver the problem asks for.
///
/// Throws: `invalid_argument` when the exact solver's table would be too large.
[[nodiscard]] nlohmann::json solve(const bitwidth_problem& p);

/// A prefill-guided placement (`moepolicy place`).
struct place_problem {
  /// P and W, layers × experts.
  Eigen::MatrixXd counts;
  Eigen::MatrixXd weight_sums;
  prefill_placement_config config;
  /// The loss table when NDP bitwidths are selected.
  std::optional<loss_table> losses;
};

/// Reads a `place` problem from its JSON `doc`; `file` names it in messages.
///
/// Throws: `parse_error` naming `file` and the field.
[[nodiscard]] place_problem read_place_problem(const nlohmann::json& doc, const std::string& file);

/// The placement, layer by layer.
[[nodiscard]] nlohmann::json solve(const place_problem& p);

/// One decode step's makespan problem on the TriMoE machine (`moepolicy schedule`).
struct schedule_problem {
  model_shape model;
  /// The DIMM-NDP preset with the problem's number of DIMMs.
  device_spec dimms;
  std::vector<step_expert> experts;
  /// "paper", "improved", "exact" or "all".
  std::string solver = "all";
  std::optional<std::size_t> max_iterations;
};

/// Reads a `schedule` problem from its JSON `doc`; `file` names it in messages.
///
/// Throws: `parse_error` naming `file` and the field.
[[nodiscard]] schedule_problem read_schedule_problem(const nlohmann::json& doc, const std::string& file);

/// Each solver's schedule, in the documented key order.
[[nodiscard]] nlohmann::ordered_json solve(const schedule_problem& p);

}  // namespace moepolicy::tool
