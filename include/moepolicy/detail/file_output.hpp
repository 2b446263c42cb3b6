// moepolicy/detail/file_output.hpp — writing a file so that it is either complete or not
// there: the data goes to a fresh temporary file in the target's folder, which is renamed
// over the target only once everything is written. A full disk, a failing stream or an
// exception leaves the target as it was and removes the temporary file. Standard library
// only.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>

namespace moepolicy::detail {

/// A name for a temporary file beside `path`: hidden, and unique enough that a collision
/// with another writer is retried, not silently shared.
inline std::filesystem::path temporary_beside(const std::filesystem::path& path, unsigned attempt) {
  const auto ticks = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::uint64_t mix = (ticks ^ (reinterpret_cast<std::uintptr_t>(&path) << 16)) + attempt * 0x9E3779B97F4A7C15ull;
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  return dir / ("." + path.filename().string() + ".tmp-" + std::to_string(mix % 1'000'000'007ull));
}

/// Writes the file `path` through `write(std::ostream&)` into a temporary file in the same
/// folder, then renames it over `path` (an atomic replacement on POSIX file systems). The
/// new file keeps the permissions of the file it replaces. `fn` names the caller in
/// messages.
///
/// Throws: `std::filesystem::filesystem_error` naming `path` when the temporary file
/// cannot be made, written or renamed (the target is then untouched); whatever `write`
/// throws, after removing the temporary file.
template <class Write>
void write_file_atomically(const std::filesystem::path& path, std::string_view fn, Write&& write) {
  namespace fs = std::filesystem;
  const auto fail = [&](std::string_view what, int err) {
    throw fs::filesystem_error(std::string(fn) + ": " + std::string(what), path,
                               std::error_code(err != 0 ? err : EIO, std::generic_category()));
  };
  fs::path tmp;
  int err = 0;
  for (unsigned attempt = 0; attempt < 64; ++attempt) {
    tmp = temporary_beside(path, attempt);
    errno = 0;
    // "x": created afresh or not at all (C11), so two writers never share a file.
    if (std::FILE* f = std::fopen(tmp.c_str(), "wbx")) {
      std::fclose(f);
      err = 0;
      break;
    }
    err = errno != 0 ? errno : EIO;
    if (err != EEXIST) break;
  }
  if (err != 0) fail("cannot open for writing", err);
  try {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("cannot open for writing", errno);
    write(static_cast<std::ostream&>(out));
    out.close();
    if (!out) fail("write failed", errno);
    std::error_code ec;
    const fs::file_status old = fs::status(path, ec);
    if (!ec && fs::is_regular_file(old)) fs::permissions(tmp, old.permissions(), ec);
    fs::rename(tmp, path, ec);
    if (ec) fail("cannot replace the file", ec.value());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
}

}  // namespace moepolicy::detail
