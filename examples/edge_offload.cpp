// edge_offload — the importance-driven expert scheduler of Edge-MoE against its baselines on
// recorded decode routing on the timed model, priced on the paper's three edge settings
// (drivers/edge_offload.hpp).
#include "programs.hpp"

int main(int argc, char** argv) { return moepolicy::examples::programs::edge_offload_main(argc, argv); }
