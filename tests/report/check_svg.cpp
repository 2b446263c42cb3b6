// check_svg <dir-or-file>... [--min-elements N]: checks that every *.svg given, or found
// under a given folder (recursively), is a well-formed XML document whose root element is
// <svg> with at least N elements (default 3). Prints one line per file and a summary line;
// exits 0 when all pass, 1 when any fails or no SVG was found, 2 on a usage error.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "xml_check.hpp"

namespace fs = std::filesystem;

namespace {

bool is_svg(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".svg";
}

/// An empty string when `p` passes, else why it fails.
std::string check_file(const fs::path& p, std::size_t min_elements, std::size_t& elements) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return "cannot be read";
  std::ostringstream buf;
  buf << in.rdbuf();
  const std::string doc = buf.str();
  if (doc.empty()) return "empty file";
  const auto r = moepolicy::test::check_xml(doc);
  elements = r.elements;
  if (!r.ok) return "line " + std::to_string(r.line) + ": " + r.error;
  if (r.root != "svg") return "root element is <" + r.root + ">, not <svg>";
  if (r.elements < min_elements) {
    return std::to_string(r.elements) + " element(s), fewer than " + std::to_string(min_elements);
  }
  return {};
}

int usage() {
  std::cerr << "usage: check_svg <dir-or-file>... [--min-elements N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_elements = 3;
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--min-elements") {
      if (i + 1 >= argc) return usage();
      try {
        std::size_t used = 0;
        const std::string v = argv[++i];
        min_elements = std::stoul(v, &used);
        if (used != v.size()) return usage();
      } catch (const std::exception&) {
        return usage();
      }
    } else if (a == "-h" || a == "--help") {
      return usage();
    } else {
      args.emplace_back(a);
    }
  }
  if (args.empty()) return usage();

  std::size_t passed = 0;
  std::size_t failed = 0;
  const auto report = [&](const fs::path& p) {
    std::size_t elements = 0;
    const std::string why = check_file(p, min_elements, elements);
    if (why.empty()) {
      std::cout << "ok    " << p.string() << " (" << elements << " elements)\n";
      ++passed;
    } else {
      std::cout << "FAIL  " << p.string() << ": " << why << '\n';
      ++failed;
    }
  };
  for (const auto& a : args) {
    const fs::path p = a;
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      std::vector<fs::path> found;
      for (fs::recursive_directory_iterator it(p, ec), end; !ec && it != end; it.increment(ec)) {
        if (it->is_regular_file(ec) && is_svg(it->path())) found.push_back(it->path());
      }
      if (ec) {
        std::cout << "FAIL  " << p.string() << ": " << ec.message() << '\n';
        ++failed;
      }
      std::sort(found.begin(), found.end());
      for (const auto& f : found) report(f);
    } else if (fs::exists(p, ec)) {
      report(p);
    } else {
      std::cout << "FAIL  " << p.string() << ": no such file or folder\n";
      ++failed;
    }
  }
  std::cout << "check_svg: " << passed << " passed, " << failed << " failed\n";
  if (passed + failed == 0) {
    std::cout << "check_svg: no SVG file found\n";
    return 1;
  }
  return failed == 0 ? 0 : 1;
}
