// libFuzzer target of the problem reader of `moepolicy schedule` (examples/moepolicy/
// problems.hpp): every input is either read or rejected with moepolicy::parse_error; a
// problem that reads and is small enough to solve quickly (few experts, DIMMs and moves)
// is solved, and every solver must take it. Anything else escaping, a crash or a
// sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/json_document.hpp"
#include "problems.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = moepolicy::tool::read_schedule_problem(moepolicy::io::parse_json_document(text, "fuzz.json"),
                                                          "fuzz.json");
    if (p.experts.size() <= 10 && p.dimms.num_units <= 64 && p.max_iterations.value_or(0) <= 10'000) {
      static_cast<void>(moepolicy::tool::solve(p));
    }
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
