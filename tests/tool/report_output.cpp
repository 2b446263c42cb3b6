// Where `moepolicy report` writes (examples/moepolicy/report_output.hpp): a fresh folder
// that replaces the target only when complete, and only when the target holds nothing but
// an earlier report's files.
#include "report_output.hpp"
#include "report_progress.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include <unistd.h>

namespace fs = std::filesystem;
using moepolicy::tool::foreign_report_entries;
using moepolicy::tool::progress_line;
using moepolicy::tool::progress_ticker;
using moepolicy::tool::staged_report_dir;

namespace {

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

/// The entries of `dir` itself, by name.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

/// A scratch folder of this process (ctest runs the test cases as separate processes, at
/// once), removed at the end.
struct scratch {
  fs::path dir = fs::temp_directory_path() / ("moepolicy-report-output-" + std::to_string(::getpid()));
  scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~scratch() { fs::remove_all(dir); }
};

void write_report(const fs::path& target, const std::string& index, bool force = false) {
  staged_report_dir staged(target.string(), force);
  write(staged.path() / "index.md", index);
  write(staged.path() / "trace" / "plot.svg", "<svg/>");
  staged.commit();
}

std::string refusal(const fs::path& target, bool force = false) {
  try {
    write_report(target, "refused", force);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a report goes into a fresh folder and takes the target's place with its manifest") {
  const scratch s;
  const fs::path target = s.dir / "report";
  write_report(target, "one");
  CHECK(read(target / "index.md") == "one");
  CHECK(read(target / "moepolicy-report.manifest").ends_with("\nindex.md\ntrace/plot.svg\n"));
  CHECK(names_in(s.dir) == std::vector<std::string>{"report"});
  CHECK(foreign_report_entries(target).empty());
  // An earlier report is replaced; nothing is left beside it.
  write_report(target, "two");
  CHECK(read(target / "index.md") == "two");
  CHECK(names_in(s.dir) == std::vector<std::string>{"report"});
}

TEST_CASE("a report that fails before its commit leaves the target as it was") {
  const scratch s;
  const fs::path target = s.dir / "report";
  write_report(target, "one");
  try {
    staged_report_dir staged(target.string(), false);
    write(staged.path() / "index.md", "half");
    throw std::runtime_error("disk full");
  } catch (const std::runtime_error&) {
  }
  CHECK(read(target / "index.md") == "one");
  CHECK(read(target / "trace" / "plot.svg") == "<svg/>");
  CHECK(names_in(s.dir) == std::vector<std::string>{"report"});
}

TEST_CASE("a target holding files no report wrote is refused, naming them, unless forced") {
  const scratch s;
  const fs::path target = s.dir / "report";
  write(target / "notes.txt", "mine");
  write(target / "index.md", "someone's index");
  CHECK(foreign_report_entries(target) == std::vector<std::string>{"index.md", "notes.txt"});
  const std::string why = refusal(target);
  CHECK(why.starts_with("report: --out " + target.string() +
                        " holds 2 file(s) no earlier report wrote (none in its moepolicy-report.manifest): "
                        "index.md, notes.txt; "));
  CHECK(read(target / "notes.txt") == "mine");
  CHECK(read(target / "index.md") == "someone's index");
  CHECK(names_in(s.dir) == std::vector<std::string>{"report"});

  // Beside an earlier report, only the files its manifest does not list count.
  fs::remove_all(target);
  write_report(target, "one");
  write(target / "trace" / "extra.svg", "mine");
  fs::create_directories(target / "empty");
  CHECK(foreign_report_entries(target) == std::vector<std::string>{"empty", "trace/extra.svg"});
  CHECK(refusal(target).find("holds 2 file(s) no earlier report wrote") != std::string::npos);

  // --force replaces the whole folder.
  CHECK(refusal(target, true).empty());
  CHECK(read(target / "index.md") == "refused");
  CHECK_FALSE(fs::exists(target / "trace" / "extra.svg"));
  CHECK(foreign_report_entries(target).empty());
}

TEST_CASE("a target that is a file is refused unless forced, and a missing one is made with its parents") {
  const scratch s;
  const fs::path file = s.dir / "report";
  write(file, "a file");
  CHECK(refusal(file).find("exists and is not a folder") != std::string::npos);
  CHECK(read(file) == "a file");
  CHECK(refusal(file, true).empty());
  CHECK(read(file / "index.md") == "refused");

  write_report(s.dir / "a" / "b" / "report", "deep");
  CHECK(read(s.dir / "a" / "b" / "report" / "index.md") == "deep");
  // A trailing separator names the same folder.
  write_report((s.dir / "a" / "b" / "report").string() + "/", "again");
  CHECK(read(s.dir / "a" / "b" / "report" / "index.md") == "again");
  CHECK(names_in(s.dir / "a" / "b") == std::vector<std::string>{"report"});
}

TEST_CASE("names of foreign files are printed with their control characters escaped") {
  const scratch s;
  const fs::path target = s.dir / "report";
  write(target / "evil\x1b[2Jname", "x");
  CHECK(refusal(target).find("evil\\x1b[2Jname") != std::string::npos);
}

TEST_CASE("the periodic progress line: stage, rows done of those planned, rows per second, elapsed time") {
  CHECK(progress_line("[10/10] t: caching on the edge", 2'500'000, 10'000'000, 4.0) ==
        "report:   [10/10] t: caching on the edge: 2500000 of 10000000 rows (25.0%), 625000 rows/s, 4.0 s");
  // Nothing done yet: no rate; no plan (an untimed stage): the elapsed time only.
  CHECK(progress_line("[2/9] t: heatmaps", 0, 800, 2.0) == "report:   [2/9] t: heatmaps: 0 of 800 rows (0.0%), 2.0 s");
  CHECK(progress_line("[2/9] t: heatmaps", 0, 0, 12.25) == "report:   [2/9] t: heatmaps: 12.2 s");
  // The line never matches the stage lines bench/report_cpu.py reads ("report: [").
  CHECK(progress_line("[1/9] x", 1, 2, 1.0).rfind("report: [", 0) == std::string::npos);
}

TEST_CASE("the progress ticker calls back with growing elapsed times until destroyed, and never at period 0") {
  std::mutex m;
  std::condition_variable cv;
  std::vector<double> seen;
  {
    const progress_ticker ticker(1e-4, [&](double elapsed) {
      const std::lock_guard lock(m);
      seen.push_back(elapsed);
      cv.notify_all();
    });
    std::unique_lock lock(m);
    cv.wait(lock, [&] { return seen.size() >= 3; });
  }
  const std::size_t ticks = seen.size();
  CHECK(ticks >= 3);
  for (std::size_t i = 1; i < seen.size(); ++i) CHECK(seen[i] > seen[i - 1]);
  CHECK(seen.front() > 0.0);
  int calls = 0;
  {
    const progress_ticker never(0.0, [&](double) { ++calls; });
  }
  CHECK(calls == 0);
}
