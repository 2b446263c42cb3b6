// Reading a problem given as JSON for the moepolicy subcommands, with errors that name the
// file and the line (syntax, nesting) or the field (shape).
//
// The document is read by io/json_document.hpp: bounded in size and nesting
// (core/input_limits.hpp), a repeated key rejected. Every number is checked as a double
// (range, wholeness) before it becomes an integer, and a message shows a value it rejects
// without copying or printing it recursively: a scalar as JSON writes it (a string
// escaped and cut), a container by its kind and size.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Core>
#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/json_document.hpp"

namespace moepolicy::tool {

using json = nlohmann::json;

/// The JSON of `path` (`-` for standard input).
///
/// Throws: `parse_error` naming the file: it cannot be read, it is larger than
/// `input_limits::max_json_bytes`, a syntax error or nesting deeper than
/// `input_limits::max_json_depth` (with the line), a repeated key (with its path).
inline json load_json(const std::string& path) {
  if (path == "-") return io::read_json_document(std::cin, "-");
  return io::read_json_document(std::filesystem::path(path));
}

/// Throws a `parse_error` naming the file and the field.
[[noreturn]] inline void bad_field(const std::string& path, const std::string& field, const std::string& problem) {
  throw parse_error(path, {file_location::kind::none, 0}, field.empty() ? problem : field + ": " + problem);
}

/// A value as "got ..." shows it: a number or literal as JSON writes it, a string quoted
/// and escaped and cut after 40 bytes, an array or object by its size. Never recursive.
inline std::string describe(const json& j) {
  switch (j.type()) {
    case json::value_t::array: return "an array of " + std::to_string(j.size());
    case json::value_t::object: return "an object of " + std::to_string(j.size()) + " keys";
    case json::value_t::string: {
      const auto& s = j.get_ref<const std::string&>();
      constexpr std::size_t max_shown = 40;
      std::size_t cut = std::min(s.size(), max_shown);
      // Never between a UTF-8 lead byte and its continuation bytes.
      while (cut < s.size() && cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0u) == 0x80u) --cut;
      std::string out = json(s.substr(0, cut)).dump(-1, ' ', true, json::error_handler_t::replace);
      if (cut < s.size()) out.insert(out.size() - 1, "...");
      return out;
    }
    case json::value_t::binary: return "binary data";
    case json::value_t::discarded: return "nothing";
    default: return j.dump();  // a number, a boolean or null
  }
}

/// `j[key]`, or a `parse_error` naming `prefix` + `key` as missing.
inline const json& need(const json& j, const std::string& path, const std::string& prefix, const char* key) {
  if (!j.is_object()) bad_field(path, prefix.empty() ? "problem" : prefix.substr(0, prefix.size() - 1),
                                "expected an object, got " + describe(j));
  const auto it = j.find(key);
  if (it == j.end()) bad_field(path, prefix + key, "missing");
  return *it;
}

/// Rejects a key of the object `j` that is not in `known`, naming it with its path
/// (`prefix` + key, e.g. "experts[2].tokns") and listing the keys allowed there: a typo
/// such as "solvr" must not fall back silently to a default. A non-object is left to the
/// field readers.
inline void only_keys(const json& j, const std::string& path, const std::string& prefix,
                      std::initializer_list<std::string_view> known) {
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || it.key() == k;
    if (ok) continue;
    std::string list;
    for (std::string_view k : known) list += (list.empty() ? "" : ", ") + std::string(k);
    bad_field(path, prefix + it.key(), "unknown key (allowed here: " + list + ")");
  }
}

/// `j[key]` when present, else null.
inline const json* optional_field(const json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

/// A number in [lo, hi]; `range` writes the bounds in messages ("[0, 1]").
inline double number_in(const json& j, const std::string& path, const std::string& field, double lo, double hi,
                        std::string_view range) {
  if (j.is_number()) {
    const double v = j.get<double>();
    if (v >= lo && v <= hi) return v;
  }
  bad_field(path, field, "expected a number in " + std::string(range) + ", got " + describe(j));
}

/// A whole number in [lo, hi]: checked as a double (range, then wholeness) before it is
/// converted; an integral float such as 4.0 is accepted.
inline std::uint64_t whole_in(const json& j, const std::string& path, const std::string& field, std::uint64_t lo,
                              std::uint64_t hi) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (v >= lo && v <= hi) return v;
  } else if (j.is_number_float()) {
    const double d = j.get<double>();
    // hi + 1 as a double: 2^64 for the largest hi, exactly representable; every whole
    // double below it converts.
    if (d >= static_cast<double>(lo) && d < static_cast<double>(hi) + 1.0 && d == std::floor(d)) {
      const auto v = static_cast<std::uint64_t>(d);
      if (v >= lo && v <= hi) return v;
    }
  } else if (j.is_number_integer() && lo == 0 && j.get<std::int64_t>() == 0) {
    return 0;  // "-0"
  }
  bad_field(path, field,
            "expected a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " + describe(j));
}

/// An array of numbers, each in [lo, hi].
inline std::vector<double> numbers_in(const json& j, const std::string& path, const std::string& field, double lo,
                                      double hi, std::string_view range) {
  if (!j.is_array()) bad_field(path, field, "expected an array of numbers, got " + describe(j));
  std::vector<double> out;
  out.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    out.push_back(number_in(j[i], path, field + "[" + std::to_string(i) + "]", lo, hi, range));
  }
  return out;
}

/// An array of rows of `cols` numbers (the first row's length when not given), each in
/// [lo, hi], at most `max_rows` rows and 65536 columns.
inline Eigen::MatrixXd matrix_in(const json& j, const std::string& path, const std::string& field,
                                 std::optional<std::size_t> cols, std::size_t max_rows, double lo, double hi,
                                 std::string_view range) {
  if (!j.is_array()) bad_field(path, field, "expected an array of rows, got " + describe(j));
  const std::size_t rows = j.size();
  if (rows > max_rows) {
    bad_field(path, field, "expected at most " + std::to_string(max_rows) + " rows, got " + std::to_string(rows));
  }
  std::size_t c = cols.value_or(0);
  if (!cols && rows > 0) {
    if (!j[0].is_array()) bad_field(path, field + "[0]", "expected an array of numbers, got " + describe(j[0]));
    c = j[0].size();
  }
  if (c > 65536) bad_field(path, field + "[0]", "expected at most 65536 numbers, got " + std::to_string(c));
  Eigen::MatrixXd m(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(c));
  for (std::size_t r = 0; r < rows; ++r) {
    const std::string at = field + "[" + std::to_string(r) + "]";
    const json& row = j[r];
    if (!row.is_array()) bad_field(path, at, "expected an array of numbers, got " + describe(row));
    if (row.size() != c) {
      bad_field(path, at, "expected " + std::to_string(c) + " numbers, got " + std::to_string(row.size()));
    }
    for (std::size_t k = 0; k < c; ++k) {
      m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(k)) =
          number_in(row[k], path, at + "[" + std::to_string(k) + "]", lo, hi, range);
    }
  }
  return m;
}

/// One of `names`, or a `parse_error` listing them.
inline std::string one_of(const json& j, const std::string& path, const std::string& field,
                          std::initializer_list<std::string_view> names) {
  if (j.is_string()) {
    const auto& s = j.get_ref<const std::string&>();
    for (std::string_view n : names) {
      if (s == n) return s;
    }
  }
  std::string list;
  std::size_t i = 0;
  for (std::string_view n : names) {
    list += i == 0 ? "" : i + 1 == names.size() ? " or " : ", ";
    list += '"';
    list += n;
    list += '"';
    ++i;
  }
  bad_field(path, field, "expected " + list + ", got " + describe(j));
}

}  // namespace moepolicy::tool
