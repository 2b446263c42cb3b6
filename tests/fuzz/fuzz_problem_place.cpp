// libFuzzer target of the problem reader of `moepolicy place` (examples/moepolicy/
// problems.hpp): every input is either read or rejected with moepolicy::parse_error; a
// problem that reads and is small enough to solve quickly is solved, and the solver must
// take it. Anything else escaping, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/json_document.hpp"
#include "problems.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = moepolicy::tool::read_place_problem(moepolicy::io::parse_json_document(text, "fuzz.json"),
                                                       "fuzz.json");
    if (p.counts.rows() != p.weight_sums.rows() || p.counts.cols() != p.weight_sums.cols()) __builtin_trap();
    if (p.counts.size() <= 4096) static_cast<void>(moepolicy::tool::solve(p));
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
