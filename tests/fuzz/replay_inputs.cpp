// A plain `main` for a fuzz target's body, to time and profile it without libFuzzer or the
// sanitizers (`perf record` on an optimised build):
//
//   fuzz_canonical_replay ROUNDS FILE...
//
// runs `LLVMFuzzerTestOneInput` on every FILE, ROUNDS times over, and prints the CPU time
// per execution. The inputs are read into memory first, so the figure is the target's alone.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " ROUNDS FILE...\n";
    return 2;
  }
  const long rounds = std::strtol(argv[1], nullptr, 10);
  if (rounds < 1) {
    std::cerr << argv[0] << ": ROUNDS must be a whole number >= 1, got '" << argv[1] << "'\n";
    return 2;
  }
  std::vector<std::vector<std::uint8_t>> inputs;
  std::size_t bytes = 0;
  for (int i = 2; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::cerr << argv[0] << ": cannot open '" << argv[i] << "'\n";
      return 1;
    }
    inputs.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    bytes += inputs.back().size();
  }
  const std::clock_t start = std::clock();
  for (long r = 0; r < rounds; ++r) {
    for (const auto& in : inputs) LLVMFuzzerTestOneInput(in.data(), in.size());
  }
  const double cpu = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
  const double runs = static_cast<double>(rounds) * static_cast<double>(inputs.size());
  std::cout << inputs.size() << " inputs (" << bytes << " bytes) x " << rounds << " rounds: " << cpu << " s CPU, "
            << cpu / runs * 1e6 << " us per execution\n";
  return 0;
}
