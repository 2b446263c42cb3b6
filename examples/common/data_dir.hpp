// Where the moepolicy tool finds its bundled traces: once installed, in
// <prefix>/share/moepolicy/traces beside <prefix>/bin/moepolicy (whatever the prefix); in a
// build tree, below the source tree it was built from.
#pragma once

#include <filesystem>
#include <system_error>

namespace moepolicy::examples {

/// The installed traces folder relative to the folder of the installed executable (set by
/// examples/CMakeLists.txt from GNUInstallDirs), e.g. "../share/moepolicy/traces".
#ifndef MOEPOLICY_INSTALLED_TRACES_REL
#define MOEPOLICY_INSTALLED_TRACES_REL "../share/moepolicy/traces"
#endif

/// The bundled traces: `<folder of this executable>/MOEPOLICY_INSTALLED_TRACES_REL` when it
/// exists (an installed tool), else `<source_dir>/examples/traces`.
inline std::filesystem::path bundled_traces_dir(const std::filesystem::path& source_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = fs::weakly_canonical(exe.parent_path() / MOEPOLICY_INSTALLED_TRACES_REL, ec);
    if (!ec && fs::is_directory(installed, ec)) return installed;
  }
  return source_dir / "examples" / "traces";
}

}  // namespace moepolicy::examples
