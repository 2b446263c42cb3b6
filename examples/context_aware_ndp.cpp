// context_aware_ndp — the context-aware GPU + CXL-NDP system of Context-Aware GPU-NDP replayed
// on recorded routing on the timed model, beside its baselines (what it computes:
// drivers/context_aware_ndp.hpp).
#include "programs.hpp"

int main(int argc, char** argv) { return moepolicy::examples::programs::context_aware_ndp_main(argc, argv); }
