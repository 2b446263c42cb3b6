// moepolicy/sched/problem.hpp — the heterogeneous makespan problem of one MoE decode
// step on a GPU + CPU + DIMM-NDP system (TriMoE, "TriMoE: Augmenting GPU with
// AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE Inference via Offloading", §4.2,
// Eq. 5–7), in the flat form every solver of sched/ reads.
//
// A step's activated experts are rows of prices, one per expert, computed once per step
// (sched/gpu_cpu_ndp.hpp fills them from `DeviceCost` models; tests may write them by
// hand). Each expert runs on exactly one *option*:
//   gpu  the GPU, a serial processor: its time adds to T_GPU (Eq. 5);
//   cpu  the CPU, a serial processor: its time adds to T_CPU (Eq. 5);
//   ndp  the NDP unit of the DIMM that holds the expert, only for an expert *localized*
//        on one DIMM: its time adds to that DIMM's T_DIMM (Eq. 6).
// Reads of weights by the GPU (on a cache miss) and the CPU busy the DIMMs that hold them
// (Eq. 6's contention term): a striped expert's read busies every DIMM, a localized
// expert's read its home DIMM. So every option of expert i adds a vector to the device
// totals:
//   gpu: T_GPU += exec_gpu;  each home DIMM += (resident ? 0 : dram)
//   cpu: T_CPU += exec_cpu;  each home DIMM += dram
//   ndp: T_DIMM(home) += exec_ndp
// and the makespan of an assignment is Eq. 7, max(T_GPU, T_CPU, max_d T_DIMM(d)).
//
// This header holds the vocabulary (`device_option`, `expert_layout`, `expert_costs`),
// the problem (`makespan_problem`), a solver's output (`makespan_schedule`, `solve_status`),
// `evaluate` (the makespan of a given assignment), and the incremental state the solvers
// share (`detail::device_loads`), which keeps totals as sums and prices a move in O(1).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"

namespace moepolicy {

/// Where an activated expert runs in one step (TriMoE §4.2).
enum class device_option : std::uint8_t {
  gpu = 0,  ///< on the GPU: Eq. 1 when resident in HBM, Eq. 2 when fetched
  cpu = 1,  ///< on the AMX CPU, reading its weights from the DIMMs: Eq. 3
  ndp = 2,  ///< on the NDP unit of its home DIMM, localized experts only: Eq. 4
};

/// The number of `device_option` values.
inline constexpr std::size_t num_device_options = 3;

/// "gpu", "cpu" or "ndp".
[[nodiscard]] constexpr std::string_view to_string(device_option o) noexcept {
  return o == device_option::gpu ? "gpu" : o == device_option::cpu ? "cpu" : "ndp";
}

/// How an expert's weights lie in host memory (TriMoE §4.2, M_i): striped over all
/// DIMMs (the layout the GPU and CPU read fastest) or localized on one DIMM (the only
/// layout an NDP unit can compute on).
struct expert_layout {
  /// The `home` value of a striped expert.
  static constexpr std::uint16_t striped_home = 0xFFFF;
  /// The DIMM that holds a localized expert, or `striped_home`.
  std::uint16_t home = striped_home;

  /// A striped layout.
  [[nodiscard]] static constexpr expert_layout striped() noexcept { return {}; }
  /// A layout localized on DIMM `dimm` (< 65535).
  [[nodiscard]] static constexpr expert_layout localized(std::uint16_t dimm) noexcept { return {dimm}; }
  [[nodiscard]] constexpr bool is_striped() const noexcept { return home == striped_home; }
  [[nodiscard]] constexpr bool is_localized() const noexcept { return home != striped_home; }

  friend constexpr bool operator==(const expert_layout&, const expert_layout&) = default;
};

/// An option an expert may not take is priced at infinity.
inline constexpr seconds not_allowed = std::numeric_limits<seconds>::infinity();

/// The prices of one activated expert on every option, for one step.
struct expert_costs {
  /// The expert (for the caller; the solvers do not read it).
  expert_key key{};
  /// L_i: tokens routed to it this step (for the caller; the solvers do not read it).
  std::uint32_t load = 0;
  /// M_i: where its weights lie.
  expert_layout layout{};
  /// Whether its weights are in GPU HBM (Eq. 1 rather than Eq. 2).
  bool gpu_resident = false;
  /// Time on the executing device, indexed by `device_option`: T_GPU_Hit or T_GPU_Miss
  /// (Eq. 1/2), T_CPU (Eq. 3), T_NDP (Eq. 4); `not_allowed` for an option it may not take.
  std::array<seconds, num_device_options> exec{0.0, 0.0, not_allowed};
  /// T_DRAM(W_i, M_i) as Eq. 6 counts it: the time each home DIMM is busy serving one read
  /// of the weights by the GPU or the CPU.
  seconds dram = 0.0;

  /// Whether option `o` is allowed.
  [[nodiscard]] constexpr bool allows(device_option o) const noexcept {
    return exec[static_cast<std::size_t>(o)] != not_allowed;
  }
  /// Time on the executing device under option `o`.
  [[nodiscard]] constexpr seconds exec_seconds(device_option o) const noexcept {
    return exec[static_cast<std::size_t>(o)];
  }
  /// What option `o` adds to each home DIMM (every DIMM when striped): the read on a GPU
  /// miss or by the CPU (contention, Eq. 6), or the NDP execution itself.
  [[nodiscard]] constexpr seconds dimm_seconds(device_option o) const noexcept {
    switch (o) {
      case device_option::gpu: return gpu_resident ? 0.0 : dram;
      case device_option::cpu: return dram;
      case device_option::ndp: return exec[2];
    }
    return 0.0;
  }
};

/// One step's activated experts and the number of DIMMs: the input of every solver.
class makespan_problem {
 public:
  /// Preconditions: `num_dimms` in [1, 65535].
  /// Throws: `invalid_argument` otherwise.
  /// Complexity: reserves room for `capacity` experts; `add` allocates only beyond it.
  explicit makespan_problem(std::size_t num_dimms, std::size_t capacity = 0) : dimms_(num_dimms) {
    if (num_dimms == 0 || num_dimms >= expert_layout::striped_home) {
      detail::throw_invalid("makespan_problem::makespan_problem", "num_dimms must be in [1, 65534]", num_dimms);
    }
    rows_.reserve(capacity);
  }

  /// DIMM-NDP units, D.
  [[nodiscard]] std::size_t num_dimms() const noexcept { return dimms_; }
  /// Activated experts.
  [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }
  [[nodiscard]] bool empty() const noexcept { return rows_.empty(); }
  /// The experts' prices, in the order added.
  [[nodiscard]] std::span<const expert_costs> experts() const noexcept { return rows_; }
  [[nodiscard]] const expert_costs& operator[](std::size_t i) const noexcept {
    MOEPOLICY_ASSERT(i < rows_.size());
    return rows_[i];
  }

  /// Forgets the experts (a new step). No allocation.
  void clear() noexcept { rows_.clear(); }

  /// Appends an expert.
  ///
  /// Preconditions: every `exec` entry and `dram` is finite and >= 0, or an `exec` entry
  /// is `not_allowed`; at least one option allowed; `ndp` allowed only for a localized
  /// expert; a localized home below `num_dimms()`.
  /// Throws: `invalid_argument` naming the first violated precondition.
  /// Complexity: O(1); allocates only beyond the capacity given at construction.
  void add(const expert_costs& e) {
    constexpr std::string_view fn = "makespan_problem::add";
    bool any = false;
    for (seconds v : e.exec) {
      if (v == not_allowed) continue;
      if (!(v >= 0.0) || !std::isfinite(v)) detail::throw_invalid(fn, "exec times must be finite and >= 0", v);
      any = true;
    }
    if (!any) detail::throw_invalid(fn, "at least one option must be allowed, expert index", rows_.size());
    if (!(e.dram >= 0.0) || !std::isfinite(e.dram)) detail::throw_invalid(fn, "dram must be finite and >= 0", e.dram);
    if (e.layout.is_localized() && e.layout.home >= dimms_) {
      detail::throw_invalid(fn, "a localized home must be < num_dimms " + std::to_string(dimms_), e.layout.home);
    }
    if (e.layout.is_striped() && e.allows(device_option::ndp)) {
      detail::throw_invalid(fn, "the ndp option needs a localized expert, expert index", rows_.size());
    }
    rows_.push_back(e);
  }

  /// Appends a default row for the caller to fill in place, without `add`'s checks: for a
  /// caller that checks the row itself (or calls `add` with it when its own check fails,
  /// so that bad rows still get `add`'s error).
  ///
  /// Preconditions: once filled, the row meets those of `add`.
  /// Returns: the row added (valid until the next append or `clear`).
  /// Complexity: O(1); allocates only beyond the capacity given at construction.
  expert_costs& add_unchecked() { return rows_.emplace_back(); }

  /// Appends `count` default rows for the caller to fill in place, without `add`'s checks
  /// (as the other overload; `truncate` drops those left unused).
  /// Returns: the rows added (valid until the next append, `truncate` or `clear`).
  /// Complexity: O(count); allocates only beyond the capacity given at construction.
  std::span<expert_costs> add_unchecked(std::size_t count) {
    const std::size_t at = rows_.size();
    rows_.resize(at + count);
    return std::span<expert_costs>(rows_).subspan(at);
  }

  /// Resizes to `count` rows for the caller to fill in place, without `add`'s checks: for
  /// a caller that overwrites every field of every row, the rows already there keep their
  /// values instead of being rewritten as default rows first (as `clear` and
  /// `add_unchecked(count)` would); rows beyond the old size are default rows.
  /// Preconditions: once filled, every row meets those of `add`.
  /// Returns: every row (valid until the next append, `resize_unchecked`, `truncate` or
  /// `clear`).
  /// Complexity: O(1) plus O(count - size()) when growing; allocates only beyond the
  /// capacity given at construction.
  std::span<expert_costs> resize_unchecked(std::size_t count) {
    rows_.resize(count);
    return rows_;
  }

  /// Keeps the first `count` experts. No allocation.
  /// Preconditions: `count <= size()`.
  void truncate(std::size_t count) noexcept {
    MOEPOLICY_ASSERT(count <= rows_.size());
    rows_.resize(count);
  }

 private:
  std::size_t dimms_;
  std::vector<expert_costs> rows_;
};

/// How a solver ended.
enum class solve_status : std::uint8_t {
  optimal,     ///< proven optimal (exact search completed, or a heuristic met the lower bound)
  heuristic,   ///< a valid schedule without a proof of optimality
  node_limit,  ///< exact search stopped at its node limit: the best schedule found, unproven
  too_large,   ///< the exact solver refused: more experts than its cap; no schedule
};

/// "optimal", "heuristic", "node_limit" or "too_large".
[[nodiscard]] constexpr std::string_view to_string(solve_status s) noexcept {
  switch (s) {
    case solve_status::optimal: return "optimal";
    case solve_status::heuristic: return "heuristic";
    case solve_status::node_limit: return "node_limit";
    case solve_status::too_large: return "too_large";
  }
  return "?";
}

/// A solver's answer: one option per expert and the device totals it leads to. Reused
/// from step to step: solvers only resize its vectors, which allocates only when a step
/// has more experts or DIMMs than any before.
struct makespan_schedule {
  solve_status status = solve_status::heuristic;
  /// Eq. 7: max(gpu_seconds, cpu_seconds, max dimm_seconds); +inf when `too_large`.
  seconds makespan = 0.0;
  /// Eq. 5 for the GPU.
  seconds gpu_seconds = 0.0;
  /// Eq. 5 for the CPU.
  seconds cpu_seconds = 0.0;
  /// Eq. 6, one per DIMM.
  std::vector<seconds> dimm_seconds;
  /// The option of each expert, in the problem's order.
  std::vector<device_option> assignment;
  /// Refinement iterations (heuristics) or search nodes (exact).
  std::size_t iterations = 0;

  makespan_schedule() = default;
  /// Reserves room for `max_experts` experts and `num_dimms` DIMMs.
  makespan_schedule(std::size_t max_experts, std::size_t num_dimms) {
    dimm_seconds.reserve(num_dimms);
    assignment.reserve(max_experts);
  }
};

/// Whether `assignment` gives every expert of `p` exactly one allowed option.
[[nodiscard]] inline bool is_valid_assignment(const makespan_problem& p,
                                              std::span<const device_option> assignment) noexcept {
  if (assignment.size() != p.size()) return false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (static_cast<std::size_t>(assignment[i]) >= num_device_options) return false;
    if (!p[i].allows(assignment[i])) return false;
  }
  return true;
}

namespace detail {

/// Device totals of a (partial) assignment, kept as sums: T_GPU, T_CPU, and each DIMM's
/// total as `stripe` (what striped experts add to every DIMM) plus `local[d]`. Prices a
/// single move or a swap in O(1) from the three largest `local` entries; `rebuild`
/// recomputes everything from the assignment, which solvers call after each applied move
/// so that rounding never accumulates.
class device_loads {
 public:
  void reset(std::size_t num_dimms) {
    gpu = cpu = stripe = 0.0;
    local.assign(num_dimms, 0.0);
    refresh();
  }

  /// Adds (`sign` = +1) or removes (-1) expert `e` under option `o`.
  void apply(const expert_costs& e, device_option o, double sign) noexcept {
    if (o == device_option::gpu) gpu += sign * e.exec[0];
    if (o == device_option::cpu) cpu += sign * e.exec[1];
    const seconds d = sign * e.dimm_seconds(o);
    if (e.layout.is_striped()) {
      stripe += d;
    } else {
      local[e.layout.home] += d;
    }
  }

  /// Totals of `assignment` over the first `count` experts of `p`, from scratch.
  void rebuild(const makespan_problem& p, std::span<const device_option> assignment, std::size_t count) noexcept {
    gpu = cpu = stripe = 0.0;
    std::fill(local.begin(), local.end(), 0.0);
    for (std::size_t i = 0; i < count; ++i) apply(p[i], assignment[i], 1.0);
    refresh();
  }

  /// Recomputes the three largest `local` entries and the sums of `local` and `local²`.
  void refresh() noexcept {
    top = {{{-1.0, npos}, {-1.0, npos}, {-1.0, npos}}};
    sum_local = sum_local_sq = 0.0;
    for (std::size_t d = 0; d < local.size(); ++d) {
      const double v = local[d];
      sum_local += v;
      sum_local_sq += v * v;
      if (v > top[0].value) {
        top[2] = top[1];
        top[1] = top[0];
        top[0] = {v, d};
      } else if (v > top[1].value) {
        top[2] = top[1];
        top[1] = {v, d};
      } else if (v > top[2].value) {
        top[2] = {v, d};
      }
    }
  }

  [[nodiscard]] seconds max_local() const noexcept { return local.empty() ? 0.0 : top[0].value; }
  /// Eq. 7.
  [[nodiscard]] seconds makespan() const noexcept { return std::max({gpu, cpu, stripe + max_local()}); }
  /// T_DIMM(d).
  [[nodiscard]] seconds dimm(std::size_t d) const noexcept { return stripe + local[d]; }

  /// The device with the largest total: 0 = GPU, 1 = CPU, 2 + d = DIMM d; the first in
  /// that order among equals.
  [[nodiscard]] std::size_t bottleneck() const noexcept {
    const seconds m = makespan();
    if (gpu == m) return 0;
    if (cpu == m) return 1;
    for (std::size_t d = 0; d < local.size(); ++d) {
      if (stripe + local[d] == m) return 2 + d;
    }
    return 0;
  }

  /// A change to the totals: GPU, CPU, stripe, and up to two `local` entries.
  struct delta {
    seconds gpu = 0.0, cpu = 0.0, stripe = 0.0;
    std::size_t at[2] = {npos, npos};
    seconds local[2] = {0.0, 0.0};

    void add(const expert_costs& e, device_option o, double sign) noexcept {
      if (o == device_option::gpu) gpu += sign * e.exec[0];
      if (o == device_option::cpu) cpu += sign * e.exec[1];
      const seconds d = sign * e.dimm_seconds(o);
      if (d == 0.0) return;
      if (e.layout.is_striped()) {
        stripe += d;
        return;
      }
      const std::size_t h = e.layout.home;
      for (int k = 0; k < 2; ++k) {
        if (at[k] == h) {
          local[k] += d;
          return;
        }
        if (at[k] == npos) {
          at[k] = h;
          local[k] = d;
          return;
        }
      }
      MOEPOLICY_ASSERT(false);  // a move or a swap touches at most two homes
    }
  };

  /// The makespan after `c`. O(1).
  [[nodiscard]] seconds makespan_after(const delta& c) const noexcept {
    seconds m_local = -1.0;
    for (const auto& t : top) {
      if (t.index == npos) break;
      if (t.index != c.at[0] && t.index != c.at[1]) {
        m_local = t.value;
        break;
      }
    }
    // Every DIMM's total is >= 0 > -1, so with three or more DIMMs one of the top three
    // is untouched; with fewer, all may be touched and only the changed ones remain.
    if (m_local < 0.0) m_local = 0.0;
    for (int k = 0; k < 2; ++k) {
      if (c.at[k] != npos) m_local = std::max(m_local, local[c.at[k]] + c.local[k]);
    }
    return std::max({gpu + c.gpu, cpu + c.cpu, stripe + c.stripe + m_local});
  }

  /// Σ over every device of its total squared, after `c` (the solvers' tie-breaking
  /// measure of balance). O(1).
  [[nodiscard]] double square_sum_after(const delta& c) const noexcept {
    const double D = static_cast<double>(local.size());
    double sl = sum_local, sq = sum_local_sq;
    for (int k = 0; k < 2; ++k) {
      if (c.at[k] == npos) continue;
      const double v = local[c.at[k]];
      sl += c.local[k];
      sq += (v + c.local[k]) * (v + c.local[k]) - v * v;
    }
    const double s = stripe + c.stripe, g = gpu + c.gpu, u = cpu + c.cpu;
    return g * g + u * u + D * s * s + 2.0 * s * sl + sq;
  }

  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  struct entry {
    double value;
    std::size_t index;
  };

  seconds gpu = 0.0, cpu = 0.0, stripe = 0.0;
  std::vector<seconds> local;
  std::array<entry, 3> top{};
  double sum_local = 0.0, sum_local_sq = 0.0;
};

/// Writes the totals of `loads` and the makespan into `out`.
inline void write_totals(const device_loads& loads, makespan_schedule& out) {
  out.gpu_seconds = loads.gpu;
  out.cpu_seconds = loads.cpu;
  out.dimm_seconds.resize(loads.local.size());
  for (std::size_t d = 0; d < loads.local.size(); ++d) out.dimm_seconds[d] = loads.dimm(d);
  out.makespan = loads.makespan();
}

/// Relative tolerance for "equal" and "better" makespans: moves that change a makespan by
/// less than this fraction are ties, so that rounding never decides.
inline constexpr double default_tolerance = 1e-12;

[[nodiscard]] inline bool less_than(seconds a, seconds b, double tol) noexcept {
  return a < b - tol * std::max(std::abs(a), std::abs(b));
}

}  // namespace detail

/// The device totals and the makespan (Eq. 5–7) of `assignment` on `p`.
///
/// Preconditions: `is_valid_assignment(p, assignment)`.
/// Throws: `invalid_argument` when it is not.
/// Complexity: O(experts + DIMMs); allocates `out`'s vectors only when they are too small.
inline void evaluate(const makespan_problem& p, std::span<const device_option> assignment, makespan_schedule& out) {
  if (!is_valid_assignment(p, assignment)) {
    detail::throw_invalid("evaluate", "the assignment must give each expert one allowed option, its size",
                          assignment.size());
  }
  detail::device_loads loads;
  loads.reset(p.num_dimms());
  loads.rebuild(p, assignment, p.size());
  out.assignment.assign(assignment.begin(), assignment.end());
  detail::write_totals(loads, out);
}

}  // namespace moepolicy
