// Where `moepolicy report` writes: a fresh folder beside the target (--out), which replaces
// the target only once the whole report is in it, with a manifest listing every file the
// report wrote. A later report replaces a target only when everything in it is listed in
// its manifest, so it never deletes or overwrites a file it did not write; otherwise it
// refuses, naming those files, unless forced. A report that fails midway leaves the
// target as it was and removes its unfinished folder.
#pragma once

#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "printable.hpp"

namespace moepolicy::tool {

/// The manifest's file name, in the report's folder.
inline constexpr std::string_view report_manifest_name = "moepolicy-report.manifest";

namespace detail_report {

inline constexpr std::string_view manifest_heading =
    "# moepolicy report: the files it wrote here; a later report replaces this folder only when it holds no others";

/// The files the manifest in `dir` lists (relative, '/'-separated); empty when there is none.
inline std::set<std::string> manifest_of(const std::filesystem::path& dir) {
  std::set<std::string> listed;
  std::ifstream in(dir / report_manifest_name);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.front() != '#') listed.insert(line);
  }
  return listed;
}

/// Every regular file below `dir`, relative and '/'-separated, sorted.
inline std::vector<std::string> files_below(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) out.push_back(e.path().lexically_relative(dir).generic_string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// A fresh, empty folder beside `target`, named after it.
inline std::filesystem::path fresh_sibling(const std::filesystem::path& target, std::string_view tag) {
  std::random_device rd;
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::filesystem::path p =
        target.parent_path() / ("." + target.filename().string() + "." + std::string(tag) + "-" + std::to_string(rd()));
    if (std::filesystem::create_directory(p)) return p;
  }
  throw std::runtime_error("report: cannot make a fresh folder beside " + target.string());
}

/// `target` made absolute, without a trailing separator.
inline std::filesystem::path normal_target(const std::string& out) {
  if (out.empty()) throw std::runtime_error("report: --out is empty");
  std::filesystem::path p = std::filesystem::absolute(out).lexically_normal();
  if (!p.has_filename()) p = p.parent_path();
  if (!p.has_filename() || p == p.root_path()) throw std::runtime_error("report: --out names no folder: " + out);
  return p;
}

}  // namespace detail_report

/// What in the folder `dir` an earlier report did not write: every file (or other entry)
/// its manifest does not list, relative and '/'-separated, sorted; a folder counts when no
/// listed file lies below it. Empty when `dir` does not exist.
[[nodiscard]] inline std::vector<std::string> foreign_report_entries(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir, ec))) return {};
  const std::set<std::string> listed = detail_report::manifest_of(dir);
  std::set<std::string> listed_dirs;
  for (const auto& f : listed) {
    for (fs::path p = fs::path(f).parent_path(); !p.empty(); p = p.parent_path()) listed_dirs.insert(p.generic_string());
  }
  std::vector<std::string> foreign;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string rel = e.path().lexically_relative(dir).generic_string();
    if (rel == report_manifest_name) continue;
    const bool ours = e.is_directory(ec) && !e.is_symlink(ec) ? listed_dirs.contains(rel) : listed.contains(rel);
    if (!ours) foreign.push_back(rel);
  }
  std::sort(foreign.begin(), foreign.end());
  return foreign;
}

/// The folder a report is written into, standing in for the target `out` until `commit`.
class staged_report_dir {
 public:
  /// Checks that the report may replace `out` and makes the fresh folder beside it.
  ///
  /// Throws: `std::runtime_error` naming `out` and the files in it that an earlier report
  /// did not write (or saying that `out` is not a folder), unless `force`.
  staged_report_dir(const std::string& out, bool force) : shown_(out), target_(detail_report::normal_target(out)) {
    check(force);
    std::filesystem::create_directories(target_.parent_path());
    staging_ = detail_report::fresh_sibling(target_, "new");
    force_ = force;
  }
  staged_report_dir(const staged_report_dir&) = delete;
  staged_report_dir& operator=(const staged_report_dir&) = delete;

  /// Removes the unfinished folder unless committed.
  ~staged_report_dir() {
    std::error_code ec;
    if (!staging_.empty()) std::filesystem::remove_all(staging_, ec);
  }

  /// The folder to write the report into.
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return staging_; }

  /// Writes the manifest and puts the folder in the target's place; the target's old
  /// contents (only files an earlier report wrote, unless forced) are removed.
  ///
  /// Throws: `std::runtime_error` as the constructor when foreign files appeared in the
  /// target meanwhile; `std::filesystem::filesystem_error` when the folders cannot be
  /// renamed (the target is then as it was).
  void commit() {
    namespace fs = std::filesystem;
    {
      std::ofstream m(staging_ / report_manifest_name, std::ios::binary);
      m << detail_report::manifest_heading << '\n';
      for (const auto& f : detail_report::files_below(staging_)) {
        if (f != report_manifest_name) m << f << '\n';
      }
      m.close();
      if (!m) throw std::runtime_error("report: cannot write " + (staging_ / report_manifest_name).string());
    }
    check(force_);
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(target_, ec))) {
      fs::rename(staging_, target_);
      staging_.clear();
      return;
    }
    // The old target moves aside to a fresh name, the new folder takes its place, and
    // the old one is removed; a failure in between puts the old one back.
    const fs::path old = detail_report::fresh_sibling(target_, "old");
    fs::remove(old);
    fs::rename(target_, old);
    try {
      fs::rename(staging_, target_);
    } catch (...) {
      fs::rename(old, target_, ec);
      throw;
    }
    staging_.clear();
    fs::remove_all(old, ec);
  }

 private:
  void check(bool force) const {
    namespace fs = std::filesystem;
    if (force) return;
    std::error_code ec;
    const fs::file_status st = fs::symlink_status(target_, ec);
    if (!fs::exists(st)) return;
    if (!fs::is_directory(st)) {
      throw std::runtime_error("report: --out " + printable(shown_) +
                               " exists and is not a folder; pass --force to replace it with the report");
    }
    const std::vector<std::string> foreign = foreign_report_entries(target_);
    if (foreign.empty()) return;
    constexpr std::size_t max_named = 10;
    std::string names;
    for (std::size_t i = 0; i < foreign.size() && i < max_named; ++i) names += (i ? ", " : "") + printable(foreign[i]);
    if (foreign.size() > max_named) names += " and " + std::to_string(foreign.size() - max_named) + " more";
    throw std::runtime_error("report: --out " + printable(shown_) + " holds " + std::to_string(foreign.size()) +
                             " file(s) no earlier report wrote (none in its " + std::string(report_manifest_name) +
                             "): " + names + "; move them away, choose another --out, or pass --force to replace " +
                             "the whole folder");
  }

  std::string shown_;
  std::filesystem::path target_;
  std::filesystem::path staging_;
  bool force_ = false;
};

}  // namespace moepolicy::tool
