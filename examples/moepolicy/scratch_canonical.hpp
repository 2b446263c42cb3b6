// A routing JSONL or CSV trace written as a scratch canonical file in the temporary folder,
// so that a command walks it from its memory map (`canonical_file`) in bounded memory, as it
// walks an .mtrace, or reads it whole from the map at the canonical file's size. The rows
// are streamed into the file (`io::write_canonical_from_text`): as they come when they are
// in canonical order, else through an external merge sort of bounded runs. The scratch
// file costs the size of the canonical rows on disk (twice that while rows are sorted) and
// is removed when the command is done with it. Used by `inspect`, `replay` and `report`.
#pragma once

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <ios>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/trace_input.hpp"
#include "moepolicy/detail/file_output.hpp"

namespace moepolicy::tool {

/// A file in the temporary folder, removed when this goes out of scope.
class scratch_file {
 public:
  explicit scratch_file(std::filesystem::path path) : path_(std::move(path)) {}
  scratch_file(const scratch_file&) = delete;
  scratch_file& operator=(const scratch_file&) = delete;
  ~scratch_file() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// The trace `paths` as a scratch canonical file when it is one routing JSONL or CSV file
/// (`moepolicy-COMMAND.mtrace` in the temporary folder, under a unique hidden name); null
/// for anything else (an .mtrace, a Granite or vLLM trace, several files, a directory).
///
/// Throws: `std::runtime_error` naming the command, the trace and TMPDIR when there is no
/// temporary folder, or when the scratch files cannot be created or written there (the
/// writer's message follows); `parse_error` exactly as `io::read_trace(paths.front())`
/// would, naming the file and the line (the partial scratch files are removed).
[[nodiscard]] inline std::unique_ptr<scratch_file> scratch_canonical(const std::vector<std::filesystem::path>& paths,
                                                                     std::string_view command) {
  std::error_code ec;
  if (paths.size() != 1 || !std::filesystem::is_regular_file(paths.front(), ec)) return nullptr;
  if (!examples::is_text_trace(paths.front())) return nullptr;
  std::error_code tec;
  const std::filesystem::path dir = std::filesystem::temp_directory_path(tec);
  if (tec) {
    const char* env = std::getenv("TMPDIR");
    throw std::runtime_error(std::string(command) + ": " + paths.front().string() +
                             ": no temporary folder for the scratch canonical file (TMPDIR=" +
                             (env != nullptr ? std::string(env) : std::string("unset")) + ": " + tec.message() +
                             "); set TMPDIR to a writable folder, or convert the trace to .mtrace first");
  }
  auto tmp = std::make_unique<scratch_file>(
      detail::temporary_beside(dir / ("moepolicy-" + std::string(command) + ".mtrace"), 0));
  // A folder that takes no file, or a disk that fills up, is named with the trace.
  const auto cannot_write = [&](const std::exception& e) {
    const char* env = std::getenv("TMPDIR");
    return std::runtime_error(std::string(command) + ": " + paths.front().string() +
                              ": cannot write the scratch canonical file in the temporary folder " + dir.string() +
                              " (TMPDIR=" + (env != nullptr ? std::string(env) : std::string("unset")) +
                              "): " + e.what() +
                              "; set TMPDIR to a writable folder with room for the canonical rows (twice that "
                              "when they must be sorted), or convert the trace to .mtrace first");
  };
  try {
    if (!examples::write_canonical_from_text(paths.front(), tmp->path())) return nullptr;
  } catch (const std::filesystem::filesystem_error& e) {
    throw cannot_write(e);
  } catch (const std::ios_base::failure& e) {
    throw cannot_write(e);
  }
  return tmp;
}

}  // namespace moepolicy::tool
