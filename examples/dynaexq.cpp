// dynaexq — DynaExq replayed on recorded routing whose workload shifts: static,
// online and hysteresis policies through the residency mechanism, on the recorded serving
// stream and on a phased one built from it (drivers/dynaexq.hpp).
#include "programs.hpp"

int main(int argc, char** argv) { return moepolicy::examples::programs::dynaexq_main(argc, argv); }
