// moepolicy/balance/two_pointer.hpp — the two-pointer CPU-load balancer (Edge-MoE,
// "Enabling MoE on the Edge via Importance-Driven Expert Scheduling", §5.4 and Alg. 2), its
// exact counterpart, and a general form over device-cost models.
//
// The activated experts that are not GPU-resident after routing and prefetching are either
// loaded over PCIe and run on the GPU, or run on the CPU where their weights are. Loading
// and CPU work overlap, so the layer waits for max(T_load, T_CPU), which §5.4 minimises.
//
// Alg. 2 (uniform costs): with t_load per loaded expert and t_cpu per token on the CPU,
// sort the experts by batch size B (tokens routed to them) descending; a load pointer l
// from the largest and a CPU pointer r from the smallest; while l <= r: if C_load <= C_cpu,
// load expert l (C_load += t_load), else run expert r on the CPU (C_cpu += B_r · t_cpu).
// `two_pointer_balancer::balance` is that, line by line (ties in the sort keep input order).
//
// Exact counterpart (uniform costs): whatever set of j experts is loaded, T_load = j·t_load,
// and T_CPU is smallest when the j loaded ones are the j largest (swapping a loaded expert
// for a larger one on the CPU never raises T_CPU). So the optimum loads the j largest for
// some j: sort, prefix sums, and a sweep over j = 0..n of max(j·t_load, t_cpu·(Σ_{i>=j} B_i))
// (`balance_optimal`; ties prefer fewer loads). Alg. 2 also always loads a prefix of the
// sorted order, so its only error is its choice of j — the tests measure the gap.
//
// General form (`cost_balancer`): experts of different sizes or bitwidths, priced by
// `DeviceCost`-family models: load_i = gpu.transfer_seconds(gpu.footprint_bytes(key_i,
// bits_i)), cpu_i = cpu.compute_seconds(key_i, bits_i, tokens_i). The two-pointer loop runs
// unchanged over items sorted by cpu_i / load_i descending (the CPU time a load saves per
// second of link time; with uniform costs that is Alg. 2's order B descending). Its exact
// counterpart is a two-way partition problem (NP-hard); `balance_exact` enumerates all
// 2^n splits for n <= 24, and `balance_best_prefix` sweeps the prefixes of the same order
// (the two-pointer split is a prefix, so the sweep is never worse; O(n log n)).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/units.hpp"
#include "moepolicy/cost/concepts.hpp"

namespace moepolicy {

/// Where an expert runs: loaded to the GPU, or computed on the CPU.
enum class balance_side : std::uint8_t { load, cpu };

/// The totals of a split.
struct balance_result {
  /// C_load and C_cpu: total load time and total CPU time.
  seconds load_seconds = 0.0;
  seconds cpu_seconds = 0.0;
  /// Experts loaded and experts on the CPU.
  std::size_t loaded = 0;
  std::size_t on_cpu = 0;

  /// max(C_load, C_cpu): how long the layer waits.
  [[nodiscard]] seconds makespan() const noexcept { return std::max(load_seconds, cpu_seconds); }
};

/// Costs of Alg. 2: uniform load time, CPU time proportional to tokens.
struct two_pointer_config {
  /// t_cpu: CPU seconds per token of an expert, finite and >= 0.
  seconds cpu_seconds_per_token = 0.0;
  /// t_load: seconds to load one expert, finite and >= 0.
  seconds load_seconds = 0.0;
  /// The most experts one call splits, >= 1 (scratch is sized for it).
  std::size_t max_items = 256;
};

/// Alg. 2 and its exact counterpart, with uniform costs.
class two_pointer_balancer {
 public:
  /// Throws: `invalid_argument` when a time is negative or not finite, or `max_items` is 0
  /// or above 2^32 − 1.
  explicit two_pointer_balancer(const two_pointer_config& cfg)
      : cfg_(checked(cfg)), order_(cfg.max_items), keys_(cfg.max_items) {}

  [[nodiscard]] const two_pointer_config& config() const noexcept { return cfg_; }

  /// Alg. 2: splits the experts with `batch_sizes[i]` tokens each, writing `out[i]`.
  ///
  /// Preconditions: `out.size() == batch_sizes.size() <= max_items`.
  /// Complexity: O(n + largest batch) when the largest batch is below 4096, else
  /// O(n log n); no allocation.
  balance_result balance(std::span<const std::uint32_t> batch_sizes, std::span<balance_side> out) noexcept {
    const std::size_t n = prepare(batch_sizes, out);
    balance_result r;
    std::size_t l = 0;
    std::size_t rr = n;  // one past the CPU pointer: r = rr − 1
    while (l < rr) {
      if (r.load_seconds <= r.cpu_seconds) {
        r.load_seconds += cfg_.load_seconds;
        out[order_[l++]] = balance_side::load;
        ++r.loaded;
      } else {
        const std::size_t i = order_[--rr];
        r.cpu_seconds += static_cast<double>(batch_sizes[i]) * cfg_.cpu_seconds_per_token;
        out[i] = balance_side::cpu;
        ++r.on_cpu;
      }
    }
    return r;
  }

  /// The optimum of the same problem: loads the j largest experts for the best j.
  ///
  /// Preconditions: as `balance`. Complexity: as `balance`; no allocation.
  balance_result balance_optimal(std::span<const std::uint32_t> batch_sizes, std::span<balance_side> out) noexcept {
    const std::size_t n = prepare(batch_sizes, out);
    double rest = 0.0;  // tokens of the experts after the first j, in order
    for (std::size_t i = 0; i < n; ++i) rest += static_cast<double>(batch_sizes[i]);
    std::size_t best_j = 0;
    double best = std::max(0.0, rest * cfg_.cpu_seconds_per_token);
    double tail = rest;
    for (std::size_t j = 1; j <= n; ++j) {
      tail -= static_cast<double>(batch_sizes[order_[j - 1]]);
      const double m = std::max(static_cast<double>(j) * cfg_.load_seconds, tail * cfg_.cpu_seconds_per_token);
      if (m < best) best = m, best_j = j;
    }
    balance_result r;
    for (std::size_t p = 0; p < n; ++p) {
      const std::size_t i = order_[p];
      if (p < best_j) {
        out[i] = balance_side::load;
        r.load_seconds += cfg_.load_seconds;
        ++r.loaded;
      } else {
        out[i] = balance_side::cpu;
        r.cpu_seconds += static_cast<double>(batch_sizes[i]) * cfg_.cpu_seconds_per_token;
        ++r.on_cpu;
      }
    }
    return r;
  }

 private:
  static two_pointer_config checked(const two_pointer_config& c) {
    constexpr const char* fn = "two_pointer_balancer";
    if (!(std::isfinite(c.cpu_seconds_per_token) && c.cpu_seconds_per_token >= 0.0)) {
      detail::throw_invalid(fn, "cpu_seconds_per_token must be finite and >= 0", c.cpu_seconds_per_token);
    }
    if (!(std::isfinite(c.load_seconds) && c.load_seconds >= 0.0)) {
      detail::throw_invalid(fn, "load_seconds must be finite and >= 0", c.load_seconds);
    }
    if (c.max_items == 0 || c.max_items > 0xffffffffu) {
      detail::throw_invalid(fn, "max_items must be in [1, 2^32 - 1]", c.max_items);
    }
    return c;
  }

  /// Sorts indices by batch size descending, ties in input order (Alg. 2 line 2): a stable
  /// counting sort when the largest batch is below `counting_sort_limit` (decode batches
  /// are small), else a sort of keys packing (~size, index) into one integer.
  std::size_t prepare(std::span<const std::uint32_t> sizes, std::span<balance_side> out) noexcept {
    MOEPOLICY_ASSERT(out.size() == sizes.size() && sizes.size() <= order_.size());
    static_cast<void>(out);
    const std::size_t n = sizes.size();
    std::uint32_t largest = 0;
    for (std::size_t i = 0; i < n; ++i) largest = std::max(largest, sizes[i]);
    if (largest < counting_sort_limit) {
      // Bucket b = largest − size holds the experts of that size; buckets in order are
      // sizes descending, and filling in input order keeps ties in input order.
      std::fill(counts_.begin(), counts_.begin() + largest + 2, std::size_t{0});
      for (std::size_t i = 0; i < n; ++i) ++counts_[largest - sizes[i] + 1];
      for (std::size_t b = 1; b <= largest + 1; ++b) counts_[b] += counts_[b - 1];
      for (std::size_t i = 0; i < n; ++i) order_[counts_[largest - sizes[i]]++] = i;
      return n;
    }
    for (std::size_t i = 0; i < n; ++i) keys_[i] = (std::uint64_t{~sizes[i]} << 32) | i;
    std::sort(keys_.begin(), keys_.begin() + static_cast<std::ptrdiff_t>(n));
    for (std::size_t i = 0; i < n; ++i) order_[i] = static_cast<std::size_t>(keys_[i] & 0xffffffffu);
    return n;
  }

  static constexpr std::uint32_t counting_sort_limit = 4096;

  two_pointer_config cfg_;
  std::vector<std::size_t> order_;
  std::vector<std::uint64_t> keys_;
  std::vector<std::size_t> counts_ = std::vector<std::size_t>(counting_sort_limit + 1);
};

/// One expert to place in the general form.
struct balance_item {
  expert_key key;
  /// Tokens routed to it in this layer (its batch size B).
  std::uint32_t tokens = 0;
  /// The precision its weights are stored, loaded and computed at.
  bitwidth bits = fp16;
};

namespace detail {

/// The two-pointer loop over per-item times, items taken in `order`.
inline balance_result two_pointer_split(std::span<const std::size_t> order, std::span<const double> load,
                                        std::span<const double> cpu, std::span<balance_side> out) noexcept {
  balance_result r;
  std::size_t l = 0;
  std::size_t rr = order.size();
  while (l < rr) {
    if (r.load_seconds <= r.cpu_seconds) {
      const std::size_t i = order[l++];
      r.load_seconds += load[i];
      out[i] = balance_side::load;
      ++r.loaded;
    } else {
      const std::size_t i = order[--rr];
      r.cpu_seconds += cpu[i];
      out[i] = balance_side::cpu;
      ++r.on_cpu;
    }
  }
  return r;
}

}  // namespace detail

/// The largest instance `balance_exact` enumerates.
inline constexpr std::size_t balance_exact_max_items = 24;

/// The exact optimum of min max(Σ_load load_i, Σ_cpu cpu_i) over all 2^n splits of items
/// with per-item `load` and `cpu` times; ties prefer the split found first in Gray-code
/// order from all-on-CPU.
///
/// Preconditions: equal sizes; times finite and >= 0.
/// Throws: `invalid_argument` when there are more than `balance_exact_max_items` items.
/// Complexity: O(2^n) (sums updated incrementally, recomputed every 4096 steps to bound
/// rounding).
inline balance_result balance_exact(std::span<const double> load, std::span<const double> cpu,
                                    std::span<balance_side> out) {
  MOEPOLICY_ASSERT(load.size() == cpu.size() && out.size() == load.size());
  const std::size_t n = load.size();
  if (n > balance_exact_max_items) {
    detail::throw_invalid("balance_exact", "at most 24 items can be enumerated", n);
  }
  const auto sums = [&](std::uint32_t mask, double& lo, double& cp) {
    lo = 0.0, cp = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      if ((mask >> i) & 1u) lo += load[i]; else cp += cpu[i];
    }
  };
  std::uint32_t mask = 0;  // bit i set: item i loaded
  double lo = 0.0, cp = 0.0;
  sums(mask, lo, cp);
  std::uint32_t best_mask = 0;
  double best = std::max(lo, cp);
  const std::uint64_t total = std::uint64_t{1} << n;
  for (std::uint64_t g = 1; g < total; ++g) {
    const auto bit = static_cast<std::size_t>(std::countr_zero(g));
    mask ^= (1u << bit);
    if ((g & 4095u) == 0) {
      sums(mask, lo, cp);
    } else if ((mask >> bit) & 1u) {
      lo += load[bit], cp -= cpu[bit];
    } else {
      lo -= load[bit], cp += cpu[bit];
    }
    const double m = std::max(lo, cp);
    if (m < best) best = m, best_mask = mask;
  }
  balance_result r;
  for (std::size_t i = 0; i < n; ++i) {
    if ((best_mask >> i) & 1u) {
      out[i] = balance_side::load;
      r.load_seconds += load[i];
      ++r.loaded;
    } else {
      out[i] = balance_side::cpu;
      r.cpu_seconds += cpu[i];
      ++r.on_cpu;
    }
  }
  return r;
}

/// The general two-pointer balancer: load times from the GPU's link and the experts'
/// footprints, CPU times from the CPU's compute model.
template <class Gpu, class Cpu>
  requires TransferCost<Gpu> && MemoryModel<Gpu> && ComputeCost<Cpu>
class cost_balancer {
 public:
  /// `max_items`: the most experts one call splits.
  ///
  /// Throws: `invalid_argument` when `max_items` is 0.
  cost_balancer(Gpu gpu, Cpu cpu, std::size_t max_items = 256)
      : gpu_(std::move(gpu)), cpu_(std::move(cpu)), order_(check(max_items)), load_(max_items), cpu_t_(max_items) {}

  [[nodiscard]] const Gpu& gpu() const noexcept { return gpu_; }
  [[nodiscard]] const Cpu& cpu() const noexcept { return cpu_; }

  /// The load and CPU time of `item`.
  [[nodiscard]] double load_seconds(const balance_item& item) const noexcept {
    return gpu_.transfer_seconds(gpu_.footprint_bytes(item.key, item.bits));
  }
  [[nodiscard]] double cpu_seconds(const balance_item& item) const noexcept {
    return cpu_.compute_seconds(item.key, item.bits, item.tokens);
  }

  /// The two-pointer split of `items` (order: cpu/load descending, then tokens descending,
  /// then input order), written to `out`.
  ///
  /// Preconditions: `out.size() == items.size() <= max_items`.
  /// Complexity: O(n log n); no allocation.
  balance_result balance(std::span<const balance_item> items, std::span<balance_side> out) noexcept {
    const std::size_t n = prepare(items, out);
    return detail::two_pointer_split(std::span<const std::size_t>(order_).first(n),
                                     std::span<const double>(load_).first(n), std::span<const double>(cpu_t_).first(n),
                                     out);
  }

  /// The best prefix split in the same order: load the first j experts for the j that
  /// minimises the makespan (ties: fewer loads). The two-pointer split is one such prefix,
  /// so this is never worse; with uniform costs it is the optimum (`balance_optimal`).
  ///
  /// Preconditions: as `balance`. Complexity: O(n log n); no allocation.
  balance_result balance_best_prefix(std::span<const balance_item> items, std::span<balance_side> out) noexcept {
    const std::size_t n = prepare(items, out);
    double cpu_rest = 0.0;
    for (std::size_t p = 0; p < n; ++p) cpu_rest += cpu_t_[order_[p]];
    double load = 0.0;
    double best = cpu_rest;
    std::size_t best_j = 0;
    for (std::size_t j = 1; j <= n; ++j) {
      const std::size_t i = order_[j - 1];
      load += load_[i];
      cpu_rest -= cpu_t_[i];
      const double m = std::max(load, cpu_rest);
      if (m < best) best = m, best_j = j;
    }
    balance_result r;
    for (std::size_t p = 0; p < n; ++p) {
      const std::size_t i = order_[p];
      if (p < best_j) {
        out[i] = balance_side::load;
        r.load_seconds += load_[i];
        ++r.loaded;
      } else {
        out[i] = balance_side::cpu;
        r.cpu_seconds += cpu_t_[i];
        ++r.on_cpu;
      }
    }
    return r;
  }

  /// The exact optimum by enumeration; see the free `balance_exact`.
  ///
  /// Throws: `invalid_argument` for more than `balance_exact_max_items` items.
  balance_result balance_exact(std::span<const balance_item> items, std::span<balance_side> out) {
    const std::size_t n = items.size();
    MOEPOLICY_ASSERT(out.size() == n && n <= order_.size());
    for (std::size_t i = 0; i < n; ++i) {
      load_[i] = load_seconds(items[i]);
      cpu_t_[i] = cpu_seconds(items[i]);
    }
    return moepolicy::balance_exact(std::span<const double>(load_).first(n), std::span<const double>(cpu_t_).first(n),
                                    out);
  }

 private:
  /// Prices the items and orders them by cpu/load descending (then tokens descending, then
  /// input order).
  std::size_t prepare(std::span<const balance_item> items, std::span<balance_side> out) noexcept {
    const std::size_t n = items.size();
    MOEPOLICY_ASSERT(out.size() == n && n <= order_.size());
    static_cast<void>(out);
    for (std::size_t i = 0; i < n; ++i) {
      load_[i] = load_seconds(items[i]);
      cpu_t_[i] = cpu_seconds(items[i]);
    }
    const auto ratio = [&](std::size_t i) {
      if (load_[i] > 0.0) return cpu_t_[i] / load_[i];
      return cpu_t_[i] > 0.0 ? std::numeric_limits<double>::infinity() : 0.0;
    };
    std::iota(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), std::size_t{0});
    std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(n), [&](std::size_t a, std::size_t b) {
      const double ra = ratio(a), rb = ratio(b);
      if (ra != rb) return ra > rb;
      if (items[a].tokens != items[b].tokens) return items[a].tokens > items[b].tokens;
      return a < b;
    });
    return n;
  }

  static std::size_t check(std::size_t max_items) {
    if (max_items == 0) detail::throw_invalid("cost_balancer", "max_items must be >= 1", max_items);
    return max_items;
  }

  Gpu gpu_;
  Cpu cpu_;
  std::vector<std::size_t> order_;
  std::vector<double> load_;
  std::vector<double> cpu_t_;
};

}  // namespace moepolicy
