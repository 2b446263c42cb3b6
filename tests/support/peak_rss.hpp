// Peak resident memory of the test process, for the tests that check a walk or a replay
// holds a bounded window of a large file.
#pragma once

#include <fstream>
#include <string>

namespace moepolicy::test {

/// Peak resident memory of this process in bytes (VmHWM), or -1 where /proc cannot say.
inline long long peak_rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
  }
  return -1;
}

/// Resets VmHWM to the current resident size; false where the system does not allow it.
inline bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

/// Whether this build runs under a sanitizer, whose shadow memory makes resident sizes
/// meaningless (and whose speed calls for smaller inputs).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(memory_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#else
inline constexpr bool sanitized = false;
#endif

}  // namespace moepolicy::test
