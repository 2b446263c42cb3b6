// trimoe — TriMoE's GPU + AMX-CPU + DIMM-NDP system (TriMoE §4.2–4.3, §5.1.2, §5.2 Tab. 3,
// §5.3 Fig. 8) replayed on batched decode steps of recorded traces on the timed model, beside
// its baselines (Klotski-, En-KTransformers- and MoNDE-like), its ablation (+CPU,
// +Refinement, +Relayout), the improved and exact solvers and the bounds. The replay and its
// modelling choices are in moepolicy/sim/trimoe_replay.hpp; the tables in drivers/trimoe.cpp.
#include "programs.hpp"

int main(int argc, char** argv) { return moepolicy::examples::programs::trimoe_main(argc, argv); }
