// libFuzzer target of the moepolicy routing trace readers (moepolicy/io/trace_text.hpp),
// JSONL and CSV on the same input: each either reads a valid trace or rejects the input
// with moepolicy::parse_error; anything else escaping, a crash or a sanitizer report is a
// bug. A trace that reads must write back to text that reads to the same rows.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "moepolicy/io/trace_text.hpp"

namespace {

template <class Read, class Write>
void check(const std::string& text, Read read, Write write) {
  try {
    std::istringstream in(text);
    const moepolicy::routing_trace t = read(in);
    if (t.num_rows() > text.size()) __builtin_trap();
    std::ostringstream out;
    write(t, out);
    std::istringstream back(out.str());
    if (read(back).columns().experts != t.columns().experts) __builtin_trap();
  } catch (const moepolicy::parse_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  check(
      text, [](std::istream& in) { return moepolicy::io::read_trace_jsonl(in, "fuzz"); },
      [](const moepolicy::routing_trace& t, std::ostream& os) { moepolicy::io::write_trace_jsonl(t, os); });
  check(
      text, [](std::istream& in) { return moepolicy::io::read_trace_csv(in, "fuzz"); },
      [](const moepolicy::routing_trace& t, std::ostream& os) { moepolicy::io::write_trace_csv(t, os); });
  return 0;
}
