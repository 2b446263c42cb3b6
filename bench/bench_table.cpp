// bench_table — shapes_bench's Google Benchmark JSON as a Markdown table.
//
//   shapes_bench --benchmark_format=json [--benchmark_repetitions=N ...] > out.json
//   bench_table out.json          (or: shapes_bench ... | bench_table, or bench_table -)
//
// Reads the benchmarks named "policy:<policy>/floor:<floor>/shape:<shape>" and
// "floor:<floor>/shape:<shape>" (other segments, such as Google Benchmark's "repeats:N",
// are ignored; other benchmarks are skipped). Rows are policies and columns shapes, each in
// order of first appearance; each cell is the policy's CPU time per decision and, in
// parentheses, its ratio to its floor's at the same shape. Time per decision is cpu_time
// divided by the benchmark's `decisions` counter (1 when absent). With repetitions, the
// "median" aggregate is used when present; otherwise the median of the plain runs (one
// plain run: that run). A benchmark that reported an error shows "error". Google
// Benchmark's bare NaN and Infinity values (not JSON) are read as null.
//
// Exit status: 0 on success; 1 on unreadable or malformed input (the message names the
// file and the problem); 2 on a usage error.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

using json = nlohmann::json;

/// Bad input: the message says what is wrong; main prefixes the file name.
struct input_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A benchmark of the naming scheme: a policy (with its floor) or a floor.
struct bench_key {
  bool is_floor = false;
  std::string id;     // the policy, or the floor
  std::string floor;  // the policy's floor (policies only)
  std::string shape;
};

/// Parses "policy:P/floor:F/shape:S" or "floor:F/shape:S"; nothing for other names.
std::optional<bench_key> parse_name(std::string_view name) {
  std::map<std::string, std::string, std::less<>> parts;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t slash = std::min(name.find('/', start), name.size());
    const std::string_view seg = name.substr(start, slash - start);
    const std::size_t colon = seg.find(':');
    if (colon != std::string_view::npos && colon > 0 && colon + 1 < seg.size()) {
      parts.emplace(std::string(seg.substr(0, colon)), std::string(seg.substr(colon + 1)));
    }
    start = slash + 1;
  }
  const auto get = [&](std::string_view key) -> std::optional<std::string> {
    const auto it = parts.find(key);
    if (it == parts.end()) return std::nullopt;
    return it->second;
  };
  const auto shape = get("shape"), floor = get("floor"), policy = get("policy");
  if (!shape || !floor) return std::nullopt;
  if (name.starts_with("policy:")) {
    if (!policy) return std::nullopt;
    return bench_key{false, *policy, *floor, *shape};
  }
  if (name.starts_with("floor:")) return bench_key{true, *floor, {}, *shape};
  return std::nullopt;
}

/// Nanoseconds per unit of Google Benchmark's "time_unit".
double ns_per(const std::string& unit, const std::string& at) {
  if (unit == "ns") return 1.0;
  if (unit == "us") return 1e3;
  if (unit == "ms") return 1e6;
  if (unit == "s") return 1e9;
  throw input_error(at + ": unknown time_unit \"" + unit + "\" (expected ns, us, ms or s)");
}

/// What the input holds for one benchmark.
struct measurement {
  std::optional<double> median_ns;  // per decision, from the "median" aggregate
  std::vector<double> runs_ns;      // per decision, from plain runs
  bool error = false;
  std::string error_message;

  [[nodiscard]] bool has_value() const noexcept { return median_ns.has_value() || !runs_ns.empty(); }
  /// The median aggregate, else the median of the plain runs.
  [[nodiscard]] double value() const {
    if (median_ns) return *median_ns;
    std::vector<double> v = runs_ns;
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  }
};

struct table_data {
  std::vector<std::string> shapes;              // columns, in order of first appearance
  std::vector<std::string> policies;            // rows, in order of first appearance
  std::map<std::string, std::string> floor_of;  // policy → floor id
  std::map<std::pair<std::string, std::string>, measurement> policy_cells, floor_cells;  // (id, shape)
  std::size_t from_median = 0, from_runs = 0, max_runs = 0;
};

std::string where(std::size_t i, const json& entry) {
  std::string s = "benchmarks[" + std::to_string(i) + "]";
  if (entry.is_object() && entry.contains("name") && entry["name"].is_string()) {
    s += " (\"" + entry["name"].get<std::string>() + "\")";
  }
  return s;
}

double number_field(const json& entry, const char* field, const std::string& at) {
  if (!entry.contains(field)) throw input_error(at + ": field \"" + field + "\" is missing");
  const json& v = entry[field];
  if (!v.is_number()) throw input_error(at + ": field \"" + field + "\" is not a number");
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0.0) {
    throw input_error(at + ": field \"" + field + "\" must be finite and >= 0, got " + v.dump());
  }
  return x;
}

std::string string_field(const json& entry, const char* field, const std::string& at) {
  if (!entry.contains(field)) throw input_error(at + ": field \"" + field + "\" is missing");
  const json& v = entry[field];
  if (!v.is_string()) throw input_error(at + ": field \"" + field + "\" is not a string");
  return v.get<std::string>();
}

table_data collect(const json& root) {
  if (!root.is_object())
    throw input_error("the top level is not a JSON object (expected Google Benchmark JSON output)");
  if (!root.contains("benchmarks")) {
    throw input_error("no \"benchmarks\" array (was the benchmark run with --benchmark_format=json?)");
  }
  const json& list = root["benchmarks"];
  if (!list.is_array()) throw input_error("\"benchmarks\" is not an array");

  table_data t;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& entry = list[i];
    const std::string at = where(i, entry);
    if (!entry.is_object()) throw input_error(at + ": not a JSON object");
    const std::string name = string_field(entry, "name", at);
    const std::string run_name = entry.contains("run_name") ? string_field(entry, "run_name", at) : name;
    const std::optional<bench_key> key = parse_name(run_name);
    if (!key) continue;  // not a shapes_bench benchmark

    const std::string run_type = entry.contains("run_type") ? string_field(entry, "run_type", at) : "iteration";
    bool is_median = false;
    if (run_type == "aggregate") {
      if (string_field(entry, "aggregate_name", at) != "median") continue;  // mean, stddev, cv
      is_median = true;
    } else if (run_type != "iteration") {
      throw input_error(at + ": unknown run_type \"" + run_type + "\"");
    }

    if (std::find(t.shapes.begin(), t.shapes.end(), key->shape) == t.shapes.end()) t.shapes.push_back(key->shape);
    if (!key->is_floor) {
      if (std::find(t.policies.begin(), t.policies.end(), key->id) == t.policies.end()) t.policies.push_back(key->id);
      const auto [it, fresh] = t.floor_of.emplace(key->id, key->floor);
      if (!fresh && it->second != key->floor) {
        throw input_error(at + ": policy \"" + key->id + "\" names floor \"" + key->floor + "\" here but \"" +
                          it->second + "\" elsewhere");
      }
    }
    measurement& m = (key->is_floor ? t.floor_cells : t.policy_cells)[{key->id, key->shape}];

    if (entry.contains("error_occurred") && entry["error_occurred"].is_boolean() &&
        entry["error_occurred"].get<bool>()) {
      m.error = true;
      if (entry.contains("error_message") && entry["error_message"].is_string()) {
        m.error_message = entry["error_message"].get<std::string>();
      }
      continue;
    }
    const double cpu_ns = number_field(entry, "cpu_time", at) * ns_per(string_field(entry, "time_unit", at), at);
    double decisions = 1.0;
    if (entry.contains("decisions")) {
      decisions = number_field(entry, "decisions", at);
      if (!(decisions > 0.0)) throw input_error(at + ": counter \"decisions\" must be > 0");
    }
    const double per_decision = cpu_ns / decisions;
    if (is_median) {
      m.median_ns = per_decision;
    } else {
      m.runs_ns.push_back(per_decision);
    }
  }
  if (t.policies.empty()) {
    throw input_error(
        "no benchmark named \"policy:<policy>/floor:<floor>/shape:<shape>\" (is this shapes_bench output?)");
  }
  for (const auto& cells : {&t.policy_cells, &t.floor_cells}) {
    for (const auto& [k, m] : *cells) {
      if (!m.has_value()) continue;
      if (m.median_ns) {
        ++t.from_median;
      } else {
        ++t.from_runs;
        t.max_runs = std::max(t.max_runs, m.runs_ns.size());
      }
    }
  }
  return t;
}

/// Three significant digits (at least the integer part).
std::string three_digits(double x) {
  char buf[64];
  const char* fmt = x >= 99.95 ? "%.0f" : (x >= 9.995 ? "%.1f" : "%.2f");
  std::snprintf(buf, sizeof buf, fmt, x);
  return buf;
}

/// A time in nanoseconds in the unit that suits it.
std::string format_time(double ns) {
  if (ns < 999.5) return three_digits(ns) + " ns";
  if (ns < 999.5e3) return three_digits(ns / 1e3) + " µs";
  if (ns < 999.5e6) return three_digits(ns / 1e6) + " ms";
  return three_digits(ns / 1e9) + " s";
}

std::string cell(const table_data& t, const std::string& policy, const std::string& shape) {
  const auto p = t.policy_cells.find({policy, shape});
  if (p == t.policy_cells.end()) return "–";
  if (p->second.error) return "error";
  if (!p->second.has_value()) return "–";
  const double time = p->second.value();
  std::string out = format_time(time);
  const auto f = t.floor_cells.find({t.floor_of.at(policy), shape});
  if (f == t.floor_cells.end() || f->second.error || !f->second.has_value()) return out + " (no floor)";
  const double floor = f->second.value();
  if (!(floor > 0.0)) return out + " (floor 0)";
  return out + " (" + three_digits(time / floor) + "×)";
}

void print_table(const table_data& t, std::ostream& os) {
  os << "| policy | floor |";
  for (const auto& s : t.shapes) os << ' ' << s << " |";
  os << "\n|---|---|";
  for (std::size_t i = 0; i < t.shapes.size(); ++i) os << "---|";
  os << '\n';
  for (const auto& p : t.policies) {
    os << "| " << p << " | " << t.floor_of.at(p) << " |";
    for (const auto& s : t.shapes) os << ' ' << cell(t, p, s) << " |";
    os << '\n';
  }
  os << "\nCPU time per decision; ratio = policy / floor at the same shape. Source: ";
  if (t.from_runs == 0) {
    os << "the median aggregate of each benchmark.\n";
  } else if (t.from_median == 0) {
    os << (t.max_runs > 1 ? "the median of the plain runs of each benchmark.\n" : "one run of each benchmark.\n");
  } else {
    os << "the median aggregate where present, else the median of the plain runs.\n";
  }
  // Errors, named below the table.
  for (const auto& cells : {&t.policy_cells, &t.floor_cells}) {
    for (const auto& [k, m] : *cells) {
      if (m.error) {
        os << "\nerror in " << (cells == &t.floor_cells ? "floor " : "policy ") << k.first << " at " << k.second << ": "
           << (m.error_message.empty() ? "(no message)" : m.error_message) << '\n';
      }
    }
  }
}

/// Google Benchmark writes non-finite values as bare NaN, -NaN, Infinity and -Infinity
/// (for instance the "cv" aggregate of a counter that is 0 in every repetition), which is
/// not JSON. Outside strings, those literals become null; the fields the table reads are
/// then reported as not numbers, and other fields are never read.
std::string null_non_finite(const std::string& text) {
  static constexpr std::string_view literals[] = {"-Infinity", "Infinity", "-NaN", "NaN"};
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const std::string_view lit : literals) {
      if (text.compare(i, lit.size(), lit) == 0) {
        out += "null";
        i += lit.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

int usage(std::ostream& os, int status) {
  os << "usage: bench_table [FILE | -]\n"
        "Reads shapes_bench's JSON output (--benchmark_format=json) from FILE, or from stdin when\n"
        "FILE is '-' or absent, and prints a Markdown table: policies by shapes, each cell the\n"
        "CPU time per decision and its ratio to the floor.\n";
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 1 && (args[0] == "-h" || args[0] == "--help")) return usage(std::cout, 0);
  if (args.size() > 1) return usage(std::cerr, 2);
  const bool from_stdin = args.empty() || args[0] == "-";
  const std::string label = from_stdin ? "<stdin>" : args[0];

  std::string text;
  if (from_stdin) {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (std::cin.bad()) {
      std::cerr << "bench_table: " << label << ": read error\n";
      return 1;
    }
  } else {
    std::error_code ec;
    if (std::filesystem::is_directory(args[0], ec)) {
      std::cerr << "bench_table: " << label << ": is a directory, not a file\n";
      return 1;
    }
    std::ifstream in(args[0], std::ios::binary);
    if (!in) {
      std::cerr << "bench_table: " << label << ": cannot open the file: " << std::strerror(errno) << '\n';
      return 1;
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) {
      std::cerr << "bench_table: " << label << ": read error\n";
      return 1;
    }
    text = ss.str();
  }
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) {
    std::cerr << "bench_table: " << label << ": empty input (expected Google Benchmark JSON output)\n";
    return 1;
  }

  try {
    const json root = json::parse(null_non_finite(text));
    const table_data t = collect(root);
    print_table(t, std::cout);
  } catch (const json::parse_error& e) {
    std::cerr << "bench_table: " << label << ": not valid JSON: " << e.what() << '\n';
    return 1;
  } catch (const input_error& e) {
    std::cerr << "bench_table: " << label << ": " << e.what() << '\n';
    return 1;
  } catch (const json::exception& e) {
    std::cerr << "bench_table: " << label << ": unexpected JSON content: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
