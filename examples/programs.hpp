// The driver programs' command lines (programs.cpp): `<name>_main(argc, argv)` parses the
// options of examples/<name>.cpp, runs its driver and returns the exit status.
#pragma once

namespace moepolicy::examples::programs {

int context_aware_ndp_main(int argc, char** argv);
int cxl_prefetch_main(int argc, char** argv);
int dynaexq_main(int argc, char** argv);
int edge_offload_main(int argc, char** argv);
int reuse_eviction_main(int argc, char** argv);
int trimoe_main(int argc, char** argv);

}  // namespace moepolicy::examples::programs
