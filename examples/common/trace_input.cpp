// The readers of common/trace_input.hpp, compiled once.
#include "common/trace_input.hpp"

#include "moepolicy/io/read_trace.hpp"

namespace moepolicy::examples {

routing_trace load_trace(const std::filesystem::path& path) { return io::read_trace(path); }

routing_trace load_trace(std::span<const std::filesystem::path> paths) { return io::read_trace(paths); }

std::string_view trace_format_name(const std::filesystem::path& path) {
  return io::to_string(io::detect_trace_format(path));
}

bool is_canonical_trace(const std::filesystem::path& path) {
  return io::detect_trace_format(path) == io::trace_format::canonical;
}

bool is_text_trace(const std::filesystem::path& path) {
  const io::trace_format f = io::detect_trace_format(path);
  return f == io::trace_format::moepolicy_jsonl || f == io::trace_format::moepolicy_csv;
}

std::optional<text_written> write_canonical_from_text(const std::filesystem::path& path,
                                                      const std::filesystem::path& out) {
  const auto done = io::write_canonical_from_text(path, out);
  if (!done) return std::nullopt;
  return text_written{.rows = done->rows, .requests = done->requests};
}

}  // namespace moepolicy::examples
