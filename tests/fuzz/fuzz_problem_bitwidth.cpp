// libFuzzer target of the problem reader of `moepolicy bitwidth` (examples/moepolicy/
// problems.hpp): every input is either read or rejected with moepolicy::parse_error; a
// problem that reads and is small enough to solve quickly is solved, where only the exact
// solver's table limit may refuse it (moepolicy::invalid_argument). Anything else
// escaping, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/json_document.hpp"
#include "problems.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto p = moepolicy::tool::read_bitwidth_problem(moepolicy::io::parse_json_document(text, "fuzz.json"),
                                                          "fuzz.json");
    if (p.bits.empty() || static_cast<std::size_t>(p.losses.cols()) != p.bits.size()) __builtin_trap();
    if (p.losses.rows() <= 64) {
      try {
        static_cast<void>(moepolicy::tool::solve(p));
      } catch (const moepolicy::invalid_argument&) {
      }
    }
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
