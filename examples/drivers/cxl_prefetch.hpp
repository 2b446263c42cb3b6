// The replay of the cxl_prefetch driver as a function: CXL-MoE (seed 002, "CXL-MoE:
// Accelerating Sparse Model Inference through Intelligent Expert Offloading to CXL
// Memory") on recorded decode routing — LRU, LRU with the short-horizon predictor, the
// sticky LRU and Belady's MIN at each cache size, priced with experts fetched over a CXL
// expander and over host PCIe. The modelling choices are stated in drivers/cxl_prefetch.cpp
// and printed with the tables.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <vector>

#include "moepolicy/cost/device_spec.hpp"
#include "moepolicy/cost/presets.hpp"
#include "moepolicy/predict/short_horizon_predictor.hpp"

namespace moepolicy::examples::cxl_prefetch {

struct options {
  /// GPU expert cache sizes in GB (10^9 bytes) of FP16 experts (empty: a list suited to
  /// the model, unless `cache_experts` is given).
  std::vector<double> cache_gb;
  /// GPU expert cache sizes in experts.
  std::vector<std::uint64_t> cache_experts;
  /// m, the last tokens the short-horizon predictor uses.
  std::uint32_t history = short_horizon_config{}.history;
  /// n, the lookahead windows of the LRU + prefetch rows.
  std::vector<std::uint32_t> lookaheads{2, 3, 4};
  /// n of the sticky-LRU rows (also its sticky steps).
  std::uint32_t sticky_lookahead = 2;
  /// Experts queued per layer (0: n x top-k).
  std::size_t depth = 0;
  /// The GPU whose missing experts come over CXL, and the same GPU fetching from host DRAM.
  device_spec cxl_gpu = presets::h100_cxl_expander();
  device_spec pcie_gpu = presets::h100_host_pcie5();
};

/// Replays the decode steps of `trace` and prints the tables to `out`.
///
/// Throws: what the trace readers throw; `std::runtime_error` when no model preset matches.
void run(const std::filesystem::path& trace, const options& opt, std::ostream& out);

}  // namespace moepolicy::examples::cxl_prefetch
