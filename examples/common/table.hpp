// A small fixed-width text table for the example drivers (left-aligned first column,
// right-aligned numbers), so their output reads the same everywhere.
#pragma once

#include <algorithm>
#include <cstdio>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <vector>

namespace moepolicy::examples {

class text_table {
 public:
  explicit text_table(std::vector<std::string> header) : rows_{std::move(header)} {}

  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void print(std::ostream& os, const std::string& indent = "  ") const {
    std::vector<std::size_t> width;
    for (const auto& r : rows_) {
      width.resize(std::max(width.size(), r.size()), 0);
      for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
    }
    for (const auto& r : rows_) {
      os << indent;
      for (std::size_t i = 0; i < r.size(); ++i) {
        if (i > 0) os << "  ";
        if (i == 0) {
          os << std::left << std::setw(static_cast<int>(width[i])) << r[i];
        } else {
          os << std::right << std::setw(static_cast<int>(width[i])) << r[i];
        }
      }
      os << '\n';
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

/// `value` with `digits` digits after the point.
inline std::string fixed(double value, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << value;
  return os.str();
}

}  // namespace moepolicy::examples
