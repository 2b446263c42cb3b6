// cxl_prefetch — CXL-MoE replayed on recorded routing on the timed model of serving: the
// expert cache by size, its ablations, CXL against PCIe host DRAM, and concurrent streams
// (drivers/cxl_prefetch.hpp).
#include "programs.hpp"

int main(int argc, char** argv) { return moepolicy::examples::programs::cxl_prefetch_main(argc, argv); }
