// libFuzzer target of the FLAME-MoE CSV importer: every input is either read into a
// trace or rejected with moepolicy::parse_error; any other exception, crash or
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/flame_csv.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // The layer a stream stands for changes what a layer_id cell may hold; vary it with
  // the input so both the placeholder 0 and a real layer are exercised.
  const moepolicy::layer_id layer = size % 2 == 0 ? 2 : 0;
  std::istringstream in(text);
  try {
    const moepolicy::routing_trace t = moepolicy::io::read_flame_csv(in, "fuzz.csv", layer);
    // A trace that was accepted must be internally consistent.
    if (t.num_rows() == 0 || t.info().top_k == 0 || t.columns().scores.size() != t.num_rows() * t.info().num_experts) {
      __builtin_trap();
    }
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
