// libFuzzer target of the Granite JSONL importer (moepolicy/io/granite_jsonl.hpp): any
// input is either read into a valid trace or rejected with moepolicy::parse_error;
// anything else escaping, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/jsonl_format.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static_cast<void>(moepolicy::io::detect_jsonl_format(std::string_view(text).substr(0, text.find('\n'))));
  try {
    std::istringstream in(text);
    const auto meta = moepolicy::io::read_granite_metadata(in, "fuzz");
    if (meta.experts_per_token == 0 || meta.experts_per_token > meta.num_experts) __builtin_trap();
  } catch (const moepolicy::parse_error&) {
  }
  try {
    std::istringstream in(text);
    const auto trace = moepolicy::io::read_granite_jsonl(in, "fuzz");
    // One row per record line, at most; one request.
    if (trace.num_rows() > size || trace.requests().size() != 1) __builtin_trap();
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
