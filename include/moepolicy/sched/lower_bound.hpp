// moepolicy/sched/lower_bound.hpp — a lower bound on the makespan (TriMoE, "TriMoE:
// Augmenting GPU with AMX-Enabled CPU and DIMM-NDP for High-Throughput MoE Inference via
// Offloading", §4.2, Eq. 5–7) that holds for every assignment of a `makespan_problem`.
//
// Notation. An assignment σ gives expert i one allowed option σ(i). Under option o the
// expert adds a non-negative vector c_i(o) to the device totals (sched/problem.hpp):
// g_i(o) = exec_i[gpu] to the GPU if o = gpu, u_i(o) = exec_i[cpu] to the CPU if o = cpu,
// and r_i(o) = dimm_seconds(o) to each DIMM of its home set H_i (all D DIMMs when striped,
// its one DIMM when localized). T_dev = Σ_i c_i(σ(i))_dev and M(σ) = max_dev T_dev (Eq. 7).
//
// Bound A (one expert). Every contribution is >= 0, so the device that executes expert i
// carries at least exec_i(σ(i)) and each home DIMM at least r_i(σ(i)). Hence
//   M(σ) >= max(exec_i(σ(i)), r_i(σ(i))) >= min_o max(exec_i(o), r_i(o))   for every i,
// and M(σ) >= A = max_i min_o max(exec_i(o), r_i(o)).
//
// Bound B (averaged work). For any weights λ_dev >= 0 over the 2 + D devices summing to 1,
// a maximum is at least a weighted mean, and the totals are sums over experts:
//   M(σ) >= Σ_dev λ_dev T_dev = Σ_i ⟨λ, c_i(σ(i))⟩ >= Σ_i min_o ⟨λ, c_i(o)⟩ =: B(λ).
// This holds for every λ; we take the maximum over the family
//   B1  λ uniform, 1/(2+D) on every device (total work over total capacity);
//   B2  λ = 1/2 on the GPU and on the CPU (serial work that cannot go to NDP);
//   B3  λ = 1 on DIMM d, for each d (reads and NDP work that must land on d);
//   B4  λ = 1/3 on the GPU, the CPU and DIMM d, for each d.
// Each B(λ) is an expert-by-expert minimum, so the whole family costs O(experts + D): a
// striped expert contributes the same to every d, a localized one only to its home.
//
// The bound is max(A, B1, B2, max_d B3(d), max_d B4(d)) <= M(σ) for every σ, hence <= the
// optimum. It is what the exact solver (sched/exact.hpp) prunes with, extended to partial
// assignments.
//
// A tighter, costlier bound: max_λ B(λ) over *all* weightings equals the optimum of the
// fractional relaxation (each expert split over its options), by the minimax theorem
// (the fractional assignments form a product of simplices, the objective is bilinear).
// `makespan_dual_bound` approaches it from below by multiplicative-weights rounds; every
// λ it visits gives a valid bound, and it returns max(that, the bound above). On real
// steps it narrows the gap to the optimum severalfold where NDP is widely available
// (tests/sched/real_traces.cpp), but costs O(rounds · (experts + D)) with exponentials,
// so the exact solver does not use it per node (measured: no fewer nodes there).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/sched/problem.hpp"

namespace moepolicy {

/// The parts of the lower bound, for reports and tests.
struct makespan_bound {
  /// max(all parts below): a lower bound on every schedule's makespan.
  seconds value = 0.0;
  /// Bound A: the most expensive expert at its best option.
  seconds single_expert = 0.0;
  /// Bound B1: total work over all 2 + D devices.
  seconds average_all = 0.0;
  /// Bound B2: serial work over the GPU and the CPU.
  seconds average_serial = 0.0;
  /// Bound B3: the largest over d of the work that must land on DIMM d.
  seconds per_dimm = 0.0;
  /// Bound B4: the largest over d of the GPU, CPU and DIMM d work over three.
  seconds serial_and_dimm = 0.0;
};

namespace detail {

/// Per-expert minima of the bound family. `r` is dimm_seconds, `g`/`u` the GPU/CPU parts.
struct bound_terms {
  seconds single = 0.0;     // A: min_o max(exec, r)
  seconds all = 0.0;        // B1 numerator: min_o (g + u + |H|·r)
  seconds serial = 0.0;     // B2 numerator: min_o (g + u)
  seconds dimm = 0.0;       // B3 on a home DIMM: min_o r
  seconds triple = 0.0;     // B4 numerator on a home DIMM: min_o (g + u + r)
};

[[nodiscard]] inline bound_terms terms_of(const expert_costs& e, std::size_t num_dimms) noexcept {
  bound_terms t{not_allowed, not_allowed, not_allowed, not_allowed, not_allowed};
  const double h = e.layout.is_striped() ? static_cast<double>(num_dimms) : 1.0;
  for (std::size_t k = 0; k < num_device_options; ++k) {
    const auto o = static_cast<device_option>(k);
    if (!e.allows(o)) continue;
    const seconds serial = o == device_option::ndp ? 0.0 : e.exec[k];
    const seconds r = e.dimm_seconds(o);
    t.single = std::min(t.single, std::max(e.exec[k], r));
    t.all = std::min(t.all, serial + h * r);
    t.serial = std::min(t.serial, serial);
    t.dimm = std::min(t.dimm, r);
    t.triple = std::min(t.triple, serial + r);
  }
  return t;
}

/// Device weights λ for bound B(λ), searched by multiplicative weights: the best of the
/// rounds' B(λ) is kept. max_λ B(λ) is the optimum of the fractional relaxation (each
/// expert split over its options) by the minimax theorem, so the rounds approach the LP
/// bound from below; every λ visited gives a valid bound.
struct dual_weights {
  /// The best weights found: GPU, CPU, DIMM 0 … D−1.
  std::vector<double> lambda;
  /// Σ_d lambda[2 + d]: what a striped expert's DIMM time is weighted by.
  double dimm_sum = 0.0;
  /// B(lambda).
  double value = 0.0;
  bool valid = false;

  /// min_o ⟨λ, c_e(o)⟩ under `lambda`.
  [[nodiscard]] double min_cost(const expert_costs& e) const noexcept { return min_cost(e, lambda, dimm_sum); }

  [[nodiscard]] static double min_cost(const expert_costs& e, std::span<const double> l, double dsum) noexcept {
    const double w = e.layout.is_striped() ? dsum : l[2 + e.layout.home];
    double best = not_allowed;
    for (std::size_t k = 0; k < num_device_options; ++k) {
      const auto o = static_cast<device_option>(k);
      if (!e.allows(o)) continue;
      const double serial = k == 0 ? l[0] * e.exec[0] : k == 1 ? l[1] * e.exec[1] : 0.0;
      best = std::min(best, serial + w * e.dimm_seconds(o));
    }
    return best;
  }

  /// Runs `rounds` rounds on `p`, from uniform weights. Allocates on first use.
  void compute(const makespan_problem& p, std::size_t rounds) {
    const std::size_t D = p.num_dimms(), K = 2 + D;
    lambda.assign(K, 1.0 / static_cast<double>(K));
    cur_.assign(K, 1.0 / static_cast<double>(K));
    logw_.assign(K, 0.0);
    totals_.assign(K, 0.0);
    value = 0.0;
    dimm_sum = static_cast<double>(D) / static_cast<double>(K);
    valid = rounds > 0 && !p.empty();
    if (!valid) return;
    for (std::size_t round = 0; round < rounds; ++round) {
      double dsum = 0.0;
      for (std::size_t d = 0; d < D; ++d) dsum += cur_[2 + d];
      std::fill(totals_.begin(), totals_.end(), 0.0);
      double b = 0.0, stripe = 0.0;
      for (const auto& e : p.experts()) {
        const double w = e.layout.is_striped() ? dsum : cur_[2 + e.layout.home];
        double best = not_allowed;
        std::size_t arg = 0;
        for (std::size_t k = 0; k < num_device_options; ++k) {
          if (!e.allows(static_cast<device_option>(k))) continue;
          const double serial = k == 0 ? cur_[0] * e.exec[0] : k == 1 ? cur_[1] * e.exec[1] : 0.0;
          const double v = serial + w * e.dimm_seconds(static_cast<device_option>(k));
          if (v < best) {
            best = v;
            arg = k;
          }
        }
        b += best;
        // The totals of the minimising options: a supergradient of B at cur_.
        const auto o = static_cast<device_option>(arg);
        if (arg < 2) totals_[arg] += e.exec[arg];
        const double r = e.dimm_seconds(o);
        if (e.layout.is_striped()) {
          stripe += r;
        } else {
          totals_[2 + e.layout.home] += r;
        }
      }
      if (b > value) {
        value = b;
        lambda = cur_;
        dimm_sum = dsum;
      }
      for (std::size_t d = 0; d < D; ++d) totals_[2 + d] += stripe;
      const double top = *std::max_element(totals_.begin(), totals_.end());
      if (!(top > 0.0)) break;
      // Weight moves toward the devices the minimising options overload.
      const double eta = 1.0 / std::sqrt(static_cast<double>(round) + 1.0);
      double mx = -not_allowed;
      for (std::size_t k = 0; k < K; ++k) {
        logw_[k] += eta * totals_[k] / top;
        mx = std::max(mx, logw_[k]);
      }
      double sum = 0.0;
      for (std::size_t k = 0; k < K; ++k) sum += (cur_[k] = std::exp(logw_[k] - mx));
      for (auto& x : cur_) x /= sum;
    }
  }

 private:
  std::vector<double> cur_, logw_, totals_;
};

}  // namespace detail

namespace detail {

/// The lower bound built expert by expert, for a caller that produces a problem's rows
/// one at a time and wants the bound of the rows added (in the order added) without a
/// second pass: `makespan_lower_bound` is this over `p.experts()`, so the two give the
/// same value bit for bit.
class lower_bound_accumulator {
 public:
  /// Starts a problem on `num_dimms` DIMMs, D. `scratch` holds at least 2 · D doubles
  /// (its first 2 · D are used) and outlives the accumulator.
  lower_bound_accumulator(std::size_t num_dimms, std::span<double> scratch) noexcept
      : D_(num_dimms), b3_(scratch.subspan(0, num_dimms)), b4_(scratch.subspan(num_dimms, num_dimms)) {
    MOEPOLICY_ASSERT(scratch.size() >= 2 * num_dimms);
    std::fill(b3_.begin(), b3_.end(), 0.0);
    std::fill(b4_.begin(), b4_.end(), 0.0);
  }

  /// Adds one expert. O(1).
  void add(const expert_costs& e) noexcept { add(terms_of(e, D_), e.layout); }

  /// Adds one expert of layout `layout` by its terms `t` (`terms_of` of its row, for a
  /// caller that has them at hand). O(1).
  void add(const bound_terms& t, expert_layout layout) noexcept {
    out_.single_expert = std::max(out_.single_expert, t.single);
    all_ += t.all;
    serial_ += t.serial;
    if (layout.is_striped()) {
      striped_dimm_ += t.dimm;
      striped_triple_ += t.triple;
    } else {
      // Off its home the expert adds only serial work; on its home, serial work and r.
      local_serial_ += t.serial;
      b3_[layout.home] += t.dimm;
      b4_[layout.home] += t.triple - t.serial;
    }
  }

  /// The bound of the experts added. O(D).
  [[nodiscard]] makespan_bound result() const noexcept {
    makespan_bound out = out_;
    out.average_all = all_ / static_cast<double>(2 + D_);
    out.average_serial = serial_ / 2.0;
    for (std::size_t d = 0; d < D_; ++d) {
      out.per_dimm = std::max(out.per_dimm, striped_dimm_ + b3_[d]);
      out.serial_and_dimm = std::max(out.serial_and_dimm, (striped_triple_ + local_serial_ + b4_[d]) / 3.0);
    }
    out.value = std::max({out.single_expert, out.average_all, out.average_serial, out.per_dimm, out.serial_and_dimm});
    return out;
  }

 private:
  std::size_t D_;
  std::span<double> b3_, b4_;
  makespan_bound out_{};
  double all_ = 0.0, serial_ = 0.0, striped_dimm_ = 0.0, striped_triple_ = 0.0, local_serial_ = 0.0;
};

}  // namespace detail

/// The lower bound and its parts, with caller-provided scratch.
///
/// Preconditions: `scratch.size() >= 2 * p.num_dimms()`.
/// Returns: a value <= the makespan of every assignment of `p` (proof at the top of this
/// header); 0 for an empty problem.
/// Complexity: O(experts + DIMMs); no allocation.
[[nodiscard]] inline makespan_bound makespan_lower_bound(const makespan_problem& p,
                                                         std::span<double> scratch) noexcept {
  detail::lower_bound_accumulator acc(p.num_dimms(), scratch);
  for (const auto& e : p.experts()) acc.add(e);
  return acc.result();
}

/// The lower bound and its parts.
///
/// Complexity: O(experts + DIMMs); allocates 2·D doubles of scratch.
[[nodiscard]] inline makespan_bound makespan_lower_bound(const makespan_problem& p) {
  std::vector<double> scratch(2 * p.num_dimms());
  return makespan_lower_bound(p, scratch);
}

/// max(`makespan_lower_bound(p).value`, the best B(λ) of `rounds` multiplicative-weights
/// rounds): a lower bound on every schedule's makespan, at most the fractional optimum.
///
/// Complexity: O(rounds · (experts + DIMMs)); allocates O(DIMMs).
[[nodiscard]] inline seconds makespan_dual_bound(const makespan_problem& p, std::size_t rounds = 64) {
  detail::dual_weights w;
  w.compute(p, rounds);
  return std::max(makespan_lower_bound(p).value, w.value);
}

}  // namespace moepolicy
