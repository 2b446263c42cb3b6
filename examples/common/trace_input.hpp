// The trace readers of moepolicy/io (io/read_trace.hpp) behind plain functions, compiled
// once (trace_input.cpp, in the drivers' library) for the tool and the driver programs: a
// source that calls the readers itself compiles every importer again (about 10 s of
// g++ -O2 each).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>

#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::examples {

/// `io::read_trace(path)`: the trace at `path`, read by the importer its content calls for.
///
/// Throws: as `io::read_trace`.
[[nodiscard]] routing_trace load_trace(const std::filesystem::path& path);
/// `io::read_trace(paths)`: one trace from one file of any format, or from several Granite
/// JSONL files (one request each).
///
/// Throws: as `io::read_trace`.
[[nodiscard]] routing_trace load_trace(std::span<const std::filesystem::path> paths);

/// The name of the format `io::detect_trace_format(path)` finds (`io::to_string`).
[[nodiscard]] std::string_view trace_format_name(const std::filesystem::path& path);
/// Whether `io::detect_trace_format(path)` finds the canonical binary format.
[[nodiscard]] bool is_canonical_trace(const std::filesystem::path& path);
/// Whether it finds moepolicy routing JSONL or CSV (what `write_canonical_from_text` reads).
[[nodiscard]] bool is_text_trace(const std::filesystem::path& path);

/// What `write_canonical_from_text` wrote.
struct text_written {
  std::uint64_t rows = 0;
  std::size_t requests = 0;
};
/// `io::write_canonical_from_text(path, out)`: the moepolicy routing JSONL or CSV trace at
/// `path` written as the canonical file `out`; nothing, and nothing written, when `path`
/// is in another format.
///
/// Throws: as `io::write_canonical_from_text`.
[[nodiscard]] std::optional<text_written> write_canonical_from_text(const std::filesystem::path& path,
                                                                    const std::filesystem::path& out);

}  // namespace moepolicy::examples
