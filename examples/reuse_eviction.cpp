// SPDX-License-Identifier: Apache-2.0
// reuse_eviction — eviction that predicts reuse (Hawkeye-style learning from Belady's MIN on
// the past; predicted time to next use) beside LRU, LFU, score-aware, HybriMoE-like and MIN,
// per-layer and shared, at every capacity, on every real trace (drivers/reuse_eviction.hpp).
#include "programs.hpp"

int main(int argc, char** argv) { return moepolicy::examples::programs::reuse_eviction_main(argc, argv); }
