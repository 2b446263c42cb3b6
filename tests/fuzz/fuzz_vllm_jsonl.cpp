// libFuzzer target of the vLLM JSONL importers (moepolicy/io/vllm_jsonl.hpp), both
// variants on the same input: each either reads a valid trace or rejects the input with
// moepolicy::parse_error; anything else escaping, a crash or a sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  static_cast<void>(moepolicy::io::detect_jsonl_format(std::string_view(text).substr(0, text.find('\n'))));
  try {
    std::istringstream in(text);
    const auto trace = moepolicy::io::read_vllm_decode_jsonl(in, "fuzz");
    if (trace.num_rows() > size) __builtin_trap();
  } catch (const moepolicy::parse_error&) {
  }
  try {
    std::istringstream in(text);
    const auto trace = moepolicy::io::read_vllm_raw_jsonl(in, "fuzz");
    if (trace.num_rows() > size) __builtin_trap();
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
