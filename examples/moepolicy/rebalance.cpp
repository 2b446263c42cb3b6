// `moepolicy rebalance LOADS --replicas R --gpus G [--groups K] [--nodes N] [--current FILE]
// [--algorithm ours|deepseek] [--format deepseek|vllm|sglang] [-o FILE] [--compare]`:
// expert-parallel placement of a load matrix (include/moepolicy/ep/). The four numbers mean
// what they mean in DeepSeek EPLB's `rebalance_experts`.
//
// LOADS is a CSV whose header names three columns — `layer`, `expert` and the load (any
// name: `load`, `decode_token_count`) — or a JSON array of per-layer arrays (`--select
// a/b/c` picks it inside a larger document, e.g. `datasets/olmoe/c4/expert_counts`).
// Output: with `--format deepseek` (the default) a JSON object with the three maps (layer
// first), `gpu_loads` [L][G], `balancedness` [L], `mean_balancedness`, `max_load` [L] and
// `experts_moved` (slots changed against `--current`, 0 without it); with `sglang` or `vllm`
// the engine's placement file (ep/formats.hpp). `--compare` prints ours, DeepSeek EPLB and
// the lower bound side by side instead.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "moepolicy/ep/deepseek_eplb.hpp"
#include "moepolicy/ep/formats.hpp"
#include "moepolicy/ep/lower_bound.hpp"
#include "moepolicy/ep/rebalancer.hpp"
#include "moepolicy/io/json_document.hpp"

namespace moepolicy::tool {
namespace {

struct loads_table {
  std::size_t layers = 0;
  std::size_t experts = 0;
  std::vector<double> values;
};

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out;
  std::string cell;
  std::istringstream is(line);
  while (std::getline(is, cell, ',')) {
    while (!cell.empty() && (cell.back() == '\r' || cell.back() == ' ')) cell.pop_back();
    while (!cell.empty() && cell.front() == ' ') cell.erase(cell.begin());
    out.push_back(cell);
  }
  return out;
}

loads_table read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  std::string line;
  if (!std::getline(in, line)) throw std::runtime_error(path.string() + ": empty file");
  const auto head = split_csv(line);
  if (head.size() != 3) {
    throw std::runtime_error(path.string() + ":1: header must name 3 columns (layer, expert, load), got " +
                             std::to_string(head.size()));
  }
  int li = -1, ei = -1;
  for (int i = 0; i < 3; ++i) {
    const auto h = lower(head[static_cast<std::size_t>(i)]);
    if (h == "layer") li = i;
    if (h == "expert") ei = i;
  }
  if (li < 0 || ei < 0)
    throw std::runtime_error(path.string() + ":1: header must name a `layer` and an `expert` column");
  const int wi = 3 - li - ei;
  struct row {
    std::size_t l, e;
    double w;
  };
  std::vector<row> rows;
  std::size_t line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty() || line == "\r") continue;
    const auto cells = split_csv(line);
    auto fail = [&](const std::string& what) {
      throw std::runtime_error(path.string() + ":" + std::to_string(line_no) + ": " + what);
    };
    if (cells.size() != 3) fail("expected 3 cells, got " + std::to_string(cells.size()));
    std::size_t used = 0;
    unsigned long l = 0, e = 0;
    double w = 0;
    try {
      l = std::stoul(cells[static_cast<std::size_t>(li)], &used);
      if (used != cells[static_cast<std::size_t>(li)].size()) fail("layer is not an integer");
      e = std::stoul(cells[static_cast<std::size_t>(ei)], &used);
      if (used != cells[static_cast<std::size_t>(ei)].size()) fail("expert is not an integer");
      w = std::stod(cells[static_cast<std::size_t>(wi)], &used);
      if (used != cells[static_cast<std::size_t>(wi)].size()) fail("load is not a number");
    } catch (const std::logic_error&) {
      fail("cannot read \"" + line + "\"");
    }
    if (l >= ep_max_dimension || e >= ep_max_dimension) fail("layer or expert above 2^20");
    rows.push_back({l, e, w});
  }
  loads_table t;
  for (const auto& r : rows) t.layers = std::max(t.layers, r.l + 1), t.experts = std::max(t.experts, r.e + 1);
  if (rows.empty()) throw std::runtime_error(path.string() + ": no rows");
  t.values.assign(t.layers * t.experts, 0.0);
  std::vector<std::uint8_t> seen(t.values.size(), 0);
  for (const auto& r : rows) {
    const std::size_t i = r.l * t.experts + r.e;
    if (seen[i] != 0) {
      throw std::runtime_error(path.string() + ": layer " + std::to_string(r.l) + ", expert " + std::to_string(r.e) +
                               " given twice");
    }
    seen[i] = 1;
    t.values[i] = r.w;
  }
  return t;
}

const nlohmann::json& select(const nlohmann::json& doc, const std::string& path, const std::string& file) {
  const nlohmann::json* at = &doc;
  std::istringstream is(path);
  std::string key;
  while (std::getline(is, key, '/')) {
    if (key.empty()) continue;
    if (!at->is_object() || !at->contains(key)) throw std::runtime_error(file + ": --select: no key \"" + key + "\"");
    at = &(*at)[key];
  }
  return *at;
}

loads_table read_json(const std::filesystem::path& path, const std::string& sel) {
  const nlohmann::json doc = io::read_json_document(path);
  const nlohmann::json& rows = select(doc, sel, path.string());
  const std::string where = path.string() + (sel.empty() ? "" : " (" + sel + ")");
  if (!rows.is_array() || rows.empty())
    throw std::runtime_error(where + ": loads must be a non-empty array of per-layer arrays");
  loads_table t;
  t.layers = rows.size();
  for (std::size_t l = 0; l < rows.size(); ++l) {
    const auto& row = rows[l];
    if (!row.is_array() || row.empty())
      throw std::runtime_error(where + ": layer " + std::to_string(l) + " is not a non-empty array");
    if (l == 0) t.experts = row.size();
    if (row.size() != t.experts) {
      throw std::runtime_error(where + ": mismatched layers: layer " + std::to_string(l) + " has " +
                               std::to_string(row.size()) + " experts, layer 0 has " + std::to_string(t.experts));
    }
    for (const auto& x : row) {
      if (!x.is_number()) throw std::runtime_error(where + ": layer " + std::to_string(l) + " holds a non-number");
      t.values.push_back(x.get<double>());
    }
  }
  return t;
}

loads_table read_loads(const std::filesystem::path& path, const std::string& sel) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  char c = ' ';
  while (in.get(c) && std::isspace(static_cast<unsigned char>(c))) {
  }
  return (c == '[' || c == '{') ? read_json(path, sel) : read_csv(path);
}

std::vector<std::int32_t> read_current(const std::filesystem::path& path, std::size_t layers, std::size_t replicas) {
  const nlohmann::json doc = io::read_json_document(path);
  const nlohmann::json* rows = &doc;
  for (const char* key : {"physical_to_logical", "physical_to_logical_map"}) {
    if (doc.is_object() && doc.contains(key)) rows = &doc[key];
  }
  if (!rows->is_array() || rows->size() != layers) {
    throw std::runtime_error(path.string() + ": current placement must hold " + std::to_string(layers) + " layers");
  }
  std::vector<std::int32_t> out;
  for (const auto& row : *rows) {
    if (!row.is_array() || row.size() != replicas) {
      throw std::runtime_error(path.string() + ": every layer of the current placement must hold " +
                               std::to_string(replicas) + " slots");
    }
    for (const auto& x : row) {
      if (!x.is_number_integer()) throw std::runtime_error(path.string() + ": slots must hold integers");
      out.push_back(x.get<std::int32_t>());
    }
  }
  return out;
}

void write_flat(std::ostream& os, const std::vector<double>& v) {
  os << '[';
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
}

template <class T>
void write_rows(std::ostream& os, const std::vector<T>& v, std::size_t width, std::size_t indent) {
  const std::string pad(indent, ' ');
  os << "[\n";
  for (std::size_t i = 0; i < v.size(); i += width) {
    os << pad << "  [";
    for (std::size_t j = 0; j < width; ++j) os << (j ? ", " : "") << v[i + j];
    os << (i + width < v.size() ? "],\n" : "]\n");
  }
  os << pad << "]";
}

void compare(const std::string& name, const loads_table& t, const ep_cluster& c, std::uint32_t search_rounds) {
  const ep_load_view loads(t.values, t.layers, t.experts);
  using clock = std::chrono::steady_clock;
  ep_rebalancer ours(t.layers, t.experts, c);
  const auto t0 = clock::now();
  const auto& r = ours.rebalance(loads);
  const auto t1 = clock::now();
  deepseek_eplb ref_solver(t.experts, c);
  ep_placement ref(t.layers, t.experts, c.replicas);
  const auto t2 = clock::now();
  ref_solver.solve(loads, ref);
  const auto t3 = clock::now();
  const auto rs = ep_evaluate(loads, ref, c.gpus);
  ep_rebalancer searched(t.layers, t.experts, c, {.replica_search_rounds = search_rounds});
  const auto t4 = clock::now();
  const auto& rq = searched.rebalance(loads);
  const auto t5 = clock::now();
  double search_max = 0.0;
  double bound_bal = 0.0, bound_max = 0.0, ours_max = 0.0, ref_max = 0.0;
  std::size_t ours_better = 0;
  for (std::size_t l = 0; l < t.layers; ++l) {
    const double lb = ep_lower_bound(loads.row(l), c.replicas, c.gpus);
    double total = 0.0;
    for (double x : loads.row(l)) total += x;
    bound_bal += lb > 0.0 ? total / c.gpus / lb : 1.0;
    bound_max += lb;
    ours_max += r.max_load[l];
    search_max += rq.max_load[l];
    ref_max += rs.max_load[l];
    ours_better += r.max_load[l] < rs.max_load[l] * (1 - 1e-9) ? 1u : 0u;
  }
  const double n = static_cast<double>(t.layers);
  std::cout << "loads: " << name << " (" << t.layers << " layers x " << t.experts << " experts); " << c.replicas
            << " slots on " << c.gpus << " GPUs, " << c.nodes << " nodes, " << c.groups << " groups ("
            << (c.hierarchical() ? "hierarchical" : "global") << " policy)\n";
  std::cout << std::fixed << std::setprecision(4);
  std::cout << "  algorithm        mean balancedness  mean max GPU load   time (ms)\n";
  std::cout << "  ours             " << std::setw(17) << r.mean_balancedness << "  " << std::setw(17)
            << std::setprecision(1) << ours_max / n << "   " << std::setprecision(3)
            << std::chrono::duration<double, std::milli>(t1 - t0).count() << "\n";
  std::cout << std::setprecision(4) << "  ours + search    " << std::setw(17) << rq.mean_balancedness << "  "
            << std::setw(17) << std::setprecision(1) << search_max / n << "   " << std::setprecision(3)
            << std::chrono::duration<double, std::milli>(t5 - t4).count() << "   (replica-count search, "
            << search_rounds << " rounds)\n";
  std::cout << std::setprecision(4) << "  DeepSeek EPLB    " << std::setw(17) << rs.mean_balancedness << "  "
            << std::setw(17) << std::setprecision(1) << ref_max / n << "   " << std::setprecision(3)
            << std::chrono::duration<double, std::milli>(t3 - t2).count() << "\n";
  std::cout << std::setprecision(4) << "  lower bound      " << std::setw(17) << bound_bal / n << "  " << std::setw(17)
            << std::setprecision(1) << bound_max / n << "\n";
  std::cout << "  ours below EPLB's max load on " << ours_better << " of " << t.layers << " layers\n";
  std::cout << "  model: a replica carries load / replicas and a GPU's time is its load; it leaves out "
               "token dispatch among replicas, attention and communication time, and the load's change "
               "over time (a bound for the global problem, so loose for hierarchical rows)\n";
}

}  // namespace

void run_rebalance(const rebalance_options& o) {
  const loads_table t = read_loads(o.loads, o.select);
  const ep_cluster c{.replicas = o.replicas, .gpus = o.gpus, .nodes = o.nodes, .groups = o.groups};
  const ep_load_view loads(t.values, t.layers, t.experts);
  if (o.compare) {
    compare(o.loads + (o.select.empty() ? "" : " " + o.select), t, c, o.search > 0 ? o.search : 16);
    return;
  }
  std::vector<std::int32_t> current;
  if (!o.current.empty()) current = read_current(o.current, t.layers, o.replicas);
  ep_placement placement;
  std::uint64_t moved = 0;
  if (o.algorithm == "deepseek") {
    placement = deepseek_rebalance(loads, c);
  } else {
    ep_rebalancer solver(
        t.layers, t.experts, c,
        {.balance_tolerance = o.tolerance, .expert_bytes = o.expert_bytes, .replica_search_rounds = o.search});
    placement = current.empty() ? solver.rebalance(loads).placement : solver.rebalance(loads, current).placement;
  }
  const auto stats = ep_evaluate(loads, placement, c.gpus, current);
  moved = stats.moved_total;
  std::ofstream file;
  if (!o.out.empty()) {
    file.open(o.out);
    if (!file) throw std::runtime_error(o.out + ": cannot write");
  }
  std::ostream& os = o.out.empty() ? std::cout : file;
  if (o.format == "sglang") {
    write_ep_sglang_json(os, placement);
  } else if (o.format == "vllm") {
    write_ep_vllm_json(os, placement, c.gpus);
  } else {
    os << "{\n";
    write_ep_maps_members(os, placement);
    os << ",\n  \"gpu_loads\": ";
    write_rows(os, stats.gpu_loads, c.gpus, 2);
    os << ",\n  \"max_load\": ";
    write_flat(os, stats.max_load);
    os << ",\n  \"balancedness\": ";
    write_flat(os, stats.balancedness);
    os << ",\n  \"mean_balancedness\": " << std::setprecision(6) << stats.mean_balancedness;
    os << ",\n  \"experts_moved\": " << moved;
    os << ",\n  \"bytes_moved\": " << moved * o.expert_bytes;
    os << ",\n  \"algorithm\": \"" << o.algorithm << "\"\n}\n";
  }
}

}  // namespace moepolicy::tool
