// The problems `moepolicy bitwidth`, `place`, `schedule` and `balance` solve, as read from
// their JSON (schemas at the top of plan.cpp, schedule.cpp and balance.cpp), and their
// answers as JSON.
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
#include <string_view>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "moepolicy/balance/two_pointer.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/io/machine_json.hpp"
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

/// The placement of `p` as an engine's settings (place/engine_export.hpp), with comment
/// lines saying what whole-layer granularity left out: `engine` "llamacpp" (a shell-ready
/// argument line) or "ktransformers" (an optimize-rules YAML fragment). `model`, when
/// given, supplies the dense blocks before MoE layer 0 and the experts' module path, and
/// must have the problem's layers and experts.
///
/// Throws: `invalid_argument` naming the mismatch or the engine.
[[nodiscard]] std::string export_placement(const place_problem& p, std::string_view engine,
                                           const std::optional<model_shape>& model);

/// One decode step's makespan problem on the TriMoE machine, or on the roles a machine
/// file gives (`moepolicy schedule [--machine FILE]`).
struct schedule_problem {
  model_shape model;
  /// The GPU and the CPU: the TriMoE presets unless the machine gives the role.
  device_spec gpu;
  device_spec cpu;
  /// The DIMM-NDP preset (or the machine's "dimm_ndp") with the problem's number of DIMMs.
  device_spec dimms;
  std::vector<step_expert> experts;
  /// "paper", "improved", "exact" or "all".
  std::string solver = "all";
  std::optional<std::size_t> max_iterations;
};

/// Reads a `schedule` problem from its JSON `doc`; `file` names it in messages. The
/// machine's "gpu", "cpu" and "dimm_ndp" roles, when given, replace the TriMoE presets
/// (its DIMM count is the default of "num_dimms").
///
/// Throws: `parse_error` naming `file` and the field.
[[nodiscard]] schedule_problem read_schedule_problem(const nlohmann::json& doc, const std::string& file,
                                                     const io::machine_description* machine = nullptr);

/// Each solver's schedule, in the documented key order.
[[nodiscard]] nlohmann::ordered_json solve(const schedule_problem& p);

/// One layer's load-or-CPU split (`moepolicy balance`): uniform costs (Alg. 2) when
/// `model` is empty, else experts priced by the GPU's and CPU's roofline models.
struct balance_problem {
  /// Uniform form: batch sizes and t_load, t_cpu.
  std::vector<std::uint32_t> tokens;
  two_pointer_config uniform;
  /// Priced form.
  std::optional<model_shape> model;
  std::vector<balance_item> items;
  device_spec gpu;
  device_spec cpu;
  /// "two_pointer", "best_prefix", "exact" or "all".
  std::string solver = "all";
};

/// Reads a `balance` problem from its JSON `doc`; `file` names it in messages. The
/// machine's "gpu" and "cpu" roles, when given, price the priced form.
///
/// Throws: `parse_error` naming `file` and the field.
[[nodiscard]] balance_problem read_balance_problem(const nlohmann::json& doc, const std::string& file,
                                                   const io::machine_description* machine = nullptr);

/// Each solver's split, in the documented key order.
[[nodiscard]] nlohmann::ordered_json solve(const balance_problem& p);

}  // namespace moepolicy::tool
