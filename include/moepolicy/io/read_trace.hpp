// moepolicy/io/read_trace.hpp — read any trace the importers understand, by content.
//
// `read_trace` looks at what it is given and calls the matching importer:
//   - a file starting with the canonical magic (trace/canonical.hpp), any extension;
//   - a `.jsonl` file: the first line tells Granite moe-cache-lab records from vLLM
//     decode-only and vLLM prefill+decode records and WARP decode records
//     (io/jsonl_format.hpp; a WARP file must be one of the recorded ones, known by name,
//     io/warp_jsonl.hpp);
//   - moepolicy routing JSONL and CSV (io/trace_text.hpp, docs/trace-format.md), known by
//     their metadata line;
//   - a FLAME-MoE `prefill_layer<L>.csv` file (any other `.csv`), or a directory of them;
//   - a directory of Granite `.jsonl` files: one request per file, in name order (a
//     directory whose first `.jsonl` file is of another format is an error naming it);
//   - several paths at once: Granite `.jsonl` files, one request per file, in the
//     order given.
// Anything else is a `parse_error` naming the path and what was expected. Every error of
// `read_trace` ends with the format it chose and why, e.g. "(read as FLAME-MoE
// router-probability CSV: a .csv file without the moepolicy metadata line)".
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/flame_csv.hpp"
#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/io/trace_text.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/io/warp_jsonl.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::io {

/// The formats `read_trace` recognises.
enum class trace_format : std::uint8_t {
  canonical,
  granite_jsonl,
  vllm_decode_jsonl,
  vllm_raw_jsonl,
  warp_jsonl,
  moepolicy_jsonl,
  moepolicy_csv,
  flame_csv,
  granite_directory,
  flame_directory,
};

/// A short name of a format, as `moepolicy inspect` prints it.
[[nodiscard]] constexpr std::string_view to_string(trace_format f) noexcept {
  switch (f) {
    case trace_format::canonical:
      return "moepolicy canonical (.mtrace)";
    case trace_format::granite_jsonl:
      return "moe-cache-lab routing JSONL (Granite)";
    case trace_format::vllm_decode_jsonl:
      return "vLLM routing JSONL, decode only";
    case trace_format::vllm_raw_jsonl:
      return "vLLM routing JSONL, prefill + decode";
    case trace_format::warp_jsonl:
      return "WARP routing JSONL, decode (OLMoE, Kimi-Linear)";
    case trace_format::moepolicy_jsonl:
      return "moepolicy routing JSONL (docs/trace-format.md)";
    case trace_format::moepolicy_csv:
      return "moepolicy routing CSV (docs/trace-format.md)";
    case trace_format::flame_csv:
      return "FLAME-MoE router-probability CSV";
    case trace_format::granite_directory:
      return "directory of moe-cache-lab routing JSONL files";
    case trace_format::flame_directory:
      return "directory of FLAME-MoE CSV files";
  }
  return "unknown";
}

namespace detail {

inline std::vector<std::filesystem::path> files_with(const std::filesystem::path& dir, std::string_view ext,
                                                     std::string_view prefix = {}) {
  std::vector<std::filesystem::path> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    const auto name = entry.path().filename().string();
    if (entry.path().extension() == ext && name.starts_with(prefix)) out.push_back(entry.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace detail

/// Which importer `read_trace` would use for `path`.
///
/// Throws: `parse_error` naming the path when it cannot be read or is of no known format.
[[nodiscard]] inline trace_format detect_trace_format(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (!detail::files_with(path, ".csv", "prefill_layer").empty()) return trace_format::flame_directory;
    if (const auto files = detail::files_with(path, ".jsonl"); !files.empty()) {
      // Only Granite files combine into one trace; a directory of any other JSONL
      // (vLLM, WARP, moepolicy) is named as such instead of failing in the Granite reader.
      const trace_format first = detect_trace_format(files.front());
      if (first == trace_format::granite_jsonl) return trace_format::granite_directory;
      detail::fail_file(path.string(), "directory of .jsonl files whose first, " + files.front().filename().string() +
                                           ", is " + std::string(to_string(first)) +
                                           ": only moe-cache-lab Granite files combine into one trace; give the "
                                           "file itself");
    }
    detail::fail_file(path.string(), "directory holds neither prefill_layer*.csv nor *.jsonl trace files");
  }
  std::ifstream in = detail::open_input(path);
  std::array<char, 8> head{};
  in.read(head.data(), head.size());
  const auto got = static_cast<std::size_t>(in.gcount());
  if (is_canonical(std::as_bytes(std::span<const char>(head.data(), got)))) return trace_format::canonical;
  const auto ext = path.extension();
  if (ext != ".csv" && ext != ".jsonl") {
    detail::fail_file(path.string(), "unknown trace format (expected .mtrace, .jsonl, .csv or a directory of them)");
  }
  in.clear();
  in.seekg(0);
  std::string first;
  bool too_long = false;
  const std::uint64_t max_line = active_input_limits().max_line_bytes;
  detail::read_line(in, first, max_line, too_long);
  if (too_long) {
    detail::fail_at_line(
        path.string(), 1,
        "line longer than the limit of " + std::to_string(max_line) + " bytes (input_limits::max_line_bytes)");
  }
  if (ext == ".csv") return is_trace_csv_start(first) ? trace_format::moepolicy_csv : trace_format::flame_csv;
  {
    if (is_trace_jsonl_start(first)) return trace_format::moepolicy_jsonl;
    switch (detect_jsonl_format(first)) {
      case jsonl_format::granite:
        return trace_format::granite_jsonl;
      case jsonl_format::vllm_decode:
        return trace_format::vllm_decode_jsonl;
      case jsonl_format::vllm_raw:
        return trace_format::vllm_raw_jsonl;
      case jsonl_format::warp:
        return trace_format::warp_jsonl;
      case jsonl_format::unknown:
        break;
    }
    detail::fail_at_line(path.string(), 1,
                         "not a known routing JSONL format (expected a moepolicy.routing-jsonl or moe-cache-lab "
                         "metadata record, a vLLM routing record with token_idx or token_pos, or a WARP record "
                         "with tok and layers)");
  }
}

namespace detail {

/// Why `read_trace` chose `f`, as its errors say.
[[nodiscard]] constexpr std::string_view why_chosen(trace_format f) noexcept {
  switch (f) {
    case trace_format::canonical:
      return "the file starts with the canonical magic";
    case trace_format::moepolicy_jsonl:
      return "its first line is a moepolicy.routing-jsonl metadata object";
    case trace_format::moepolicy_csv:
      return "its first line is a moepolicy.routing-csv metadata line";
    case trace_format::granite_jsonl:
      return "its first line is a moe-cache-lab metadata record";
    case trace_format::vllm_decode_jsonl:
      return "its first line has experts and token_idx";
    case trace_format::vllm_raw_jsonl:
      return "its first line has experts and token_pos";
    case trace_format::warp_jsonl:
      return "its first line has tok and layers";
    case trace_format::flame_csv:
      return "a .csv file without the moepolicy metadata line";
    case trace_format::granite_directory:
      return "a directory whose first .jsonl file is Granite";
    case trace_format::flame_directory:
      return "a directory holding prefill_layer*.csv files";
  }
  return "unknown";
}

inline routing_trace read_as(const std::filesystem::path& path, trace_format format) {
  switch (format) {
    case trace_format::canonical:
      return read_canonical(path);
    case trace_format::moepolicy_jsonl:
      return read_trace_jsonl(path);
    case trace_format::moepolicy_csv:
      return read_trace_csv(path);
    case trace_format::granite_jsonl:
      return read_granite_jsonl(path);
    case trace_format::vllm_decode_jsonl:
      return read_vllm_decode_jsonl(path);
    case trace_format::vllm_raw_jsonl:
      return read_vllm_raw_jsonl(path);
    case trace_format::warp_jsonl:
      return read_warp_jsonl(path);
    case trace_format::flame_csv:
    case trace_format::flame_directory:
      return read_flame_csv(path);
    case trace_format::granite_directory: {
      const auto files = files_with(path, ".jsonl");
      return read_granite_jsonl(std::span<const std::filesystem::path>(files));
    }
  }
  fail_file(path.string(), "unknown trace format");
}

/// What `read(...)` returns; its `parse_error` ends with " (read as FORMAT: WHY)".
template <class Read>
auto as_read_as(trace_format format, Read&& read) {
  try {
    return read();
  } catch (const parse_error& e) {
    throw parse_error(
        e.file(), e.where(),
        e.problem() + " (read as " + std::string(to_string(format)) + ": " + std::string(why_chosen(format)) + ")");
  }
}

}  // namespace detail

/// Reads the trace at `path` with the importer its content calls for.
///
/// Throws: `parse_error` from the importer, naming the file and line or byte offset, its
/// problem followed by " (read as FORMAT: WHY)", the format `detect_trace_format` chose.
[[nodiscard]] inline routing_trace read_trace(const std::filesystem::path& path) {
  const trace_format format = detect_trace_format(path);
  return detail::as_read_as(format, [&] { return detail::read_as(path, format); });
}

/// Writes the moepolicy routing JSONL or CSV trace at `path` as the canonical file `out`
/// through `write_canonical_from_trace_jsonl` / `_csv` (io/trace_text.hpp: streamed when
/// its rows are in canonical order), the same bytes as `write_canonical(read_trace(path),
/// out)`; returns nothing and writes nothing when `path` is in another format.
///
/// Throws: `parse_error` exactly as `read_trace(path)`; as the writers otherwise.
[[nodiscard]] inline std::optional<text_to_canonical> write_canonical_from_text(const std::filesystem::path& path,
                                                                                const std::filesystem::path& out) {
  const trace_format format = detect_trace_format(path);
  if (format == trace_format::moepolicy_jsonl) {
    return detail::as_read_as(format, [&] { return write_canonical_from_trace_jsonl(path, out); });
  }
  if (format == trace_format::moepolicy_csv) {
    return detail::as_read_as(format, [&] { return write_canonical_from_trace_csv(path, out); });
  }
  return std::nullopt;
}

/// Reads several Granite JSONL files as one trace, one request per file, in the order
/// given; a single path of any format is read as `read_trace(path)`.
///
/// Throws: `parse_error` when more than one path is given and one is not Granite JSONL.
[[nodiscard]] inline routing_trace read_trace(std::span<const std::filesystem::path> paths) {
  if (paths.size() == 1) return read_trace(paths.front());
  if (paths.empty()) detail::fail_file("(no input)", "no trace path given");
  for (const auto& p : paths) {
    if (detect_trace_format(p) != trace_format::granite_jsonl) {
      detail::fail_file(p.string(), "only moe-cache-lab Granite JSONL files can be combined into one trace");
    }
  }
  return read_granite_jsonl(paths);
}

}  // namespace moepolicy::io
