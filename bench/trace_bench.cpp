// Trace loading: the canonical reader (from memory and from a file, and the mapped walk of
// a file), the canonical writer,
// the CSV export and the text importers, each beside its floor — a benchmark that only
// reads the same input's bytes once. Items are rows (one token at one layer); the figure
// to quote is reader time / floor time (equivalently floor items/s ÷ reader items/s).
//
// Inputs are built or loaded once, outside the timed loops:
//   - canonical: every *.mtrace under the bundled traces folder, merged into one trace;
//     without any, a synthetic trace of Granite's shape (24 layers, 32 experts, top-8,
//     12 requests, 10,080 rows), and the label says so;
//   - importers: the real files under the shared traces folder, held in memory and parsed
//     through an istream over that memory each iteration; skipped when the folder is absent.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <istream>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <span>
#include <sstream>
#include <streambuf>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/io/flame_csv.hpp"
#include "moepolicy/io/granite_jsonl.hpp"
#include "moepolicy/io/vllm_jsonl.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/csv_export.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace {

namespace fs = std::filesystem;
using moepolicy::expert_id;
using moepolicy::layer_id;
using moepolicy::phase;
using moepolicy::routing_trace;
using moepolicy::routing_trace_builder;
using moepolicy::trace_row;

// ---------------------------------------------------------------------------------------
// Helpers

/// A read-only streambuf over memory it does not own.
struct view_buf : std::streambuf {
  explicit view_buf(std::string_view text) {
    char* p = const_cast<char*>(text.data());
    setg(p, p, p + text.size());
  }
};

/// A streambuf that discards what it is given.
struct discard_buf : std::streambuf {
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  int_type overflow(int_type c) override { return traits_type::not_eof(c); }
};

/// Holds a stream's buffer so that it is built before the stream (base-from-member).
template <class Buf>
struct buf_holder {
  Buf buf;
};

/// An istream over memory it does not own (no copy, unlike istringstream).
class memory_istream : private buf_holder<view_buf>, public std::istream {
 public:
  explicit memory_istream(std::string_view text) : buf_holder<view_buf>{view_buf(text)}, std::istream(&buf) {}
};

/// An ostream that discards what it is given, so that writers are timed without memory
/// growth.
class null_ostream : private buf_holder<discard_buf>, public std::ostream {
 public:
  null_ostream() : std::ostream(&buf) {}
};

/// The floor: one pass over `bytes` that the compiler cannot skip (a sum of 64-bit words,
/// which vectorises to the speed of the memory).
std::uint64_t touch(std::span<const std::byte> bytes) {
  std::uint64_t sum = 0;
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, bytes.data() + i, 8);
    sum += w;
  }
  for (; i < bytes.size(); ++i) sum += std::to_integer<std::uint8_t>(bytes[i]);
  return sum;
}

std::uint64_t touch(std::string_view text) { return touch(std::as_bytes(std::span<const char>(text))); }

template <class T>
std::uint64_t touch(const std::vector<T>& v) {
  return touch(std::as_bytes(std::span<const T>(v)));
}

/// One pass over every column of a trace: the input of a writer.
std::uint64_t touch(const routing_trace& t) {
  const auto& c = t.columns();
  return touch(c.request) + touch(c.step) + touch(c.position) + touch(c.layer) + touch(c.kind) + touch(c.experts) +
         touch(c.weights) + touch(c.scores);
}

std::int64_t as_count(std::size_t n) { return static_cast<std::int64_t>(n); }

// ---------------------------------------------------------------------------------------
// Canonical input

/// A synthetic trace of Granite 3.1 1B-A400M's shape: 12 requests of 19 prompt tokens
/// (one prefill pass) and 16 decode steps, 24 layers, 32 experts with skewed per-layer
/// popularity, top-8 with gate weights that sum to 1. Fixed seed.
routing_trace synthetic_trace() {
  constexpr std::uint32_t layers = 24, experts = 32, k = 8, requests = 12, prompt = 19, generated = 16;
  routing_trace_builder b({.model = "synthetic (Granite-3.1-1B-A400M shape)",
                           .source = "moepolicy trace_bench, mt19937(42)",
                           .num_layers = layers,
                           .num_experts = experts,
                           .top_k = k,
                           .has_scores = false});
  std::mt19937 rng(42);
  // Per layer: expert popularity ∝ 1 / (rank + 1)^0.8 under a random ranking.
  std::vector<std::vector<double>> popularity(layers, std::vector<double>(experts));
  for (auto& p : popularity) {
    std::vector<std::uint32_t> rank(experts);
    std::iota(rank.begin(), rank.end(), 0u);
    std::shuffle(rank.begin(), rank.end(), rng);
    for (std::uint32_t e = 0; e < experts; ++e) p[e] = 1.0 / std::pow(rank[e] + 1.0, 0.8);
  }
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<std::pair<double, expert_id>> keys(experts);
  std::vector<expert_id> ids(k);
  std::vector<float> w(k);
  for (std::uint32_t q = 0; q < requests; ++q) {
    b.add_request("synthetic-" + std::to_string(q));
    for (std::uint32_t step = 0; step <= generated; ++step) {
      const std::uint32_t first = step == 0 ? 0 : prompt + step - 1;
      const std::uint32_t last = step == 0 ? prompt : first + 1;
      for (std::uint32_t pos = first; pos < last; ++pos) {
        for (std::uint32_t l = 0; l < layers; ++l) {
          // Weighted sampling without replacement (Efraimidis–Spirakis keys u^(1/w)).
          for (std::uint32_t e = 0; e < experts; ++e) {
            keys[e] = {std::pow(u(rng), 1.0 / popularity[l][e]), static_cast<expert_id>(e)};
          }
          std::partial_sort(keys.begin(), keys.begin() + k, keys.end(), std::greater<>());
          float total = 0.0f;
          for (std::uint32_t i = 0; i < k; ++i) {
            ids[i] = keys[i].second;
            w[i] = static_cast<float>(std::exp(-0.4 * i) * (0.5 + u(rng)));
            total += w[i];
          }
          std::sort(w.begin(), w.end(), std::greater<>());
          for (auto& x : w) x /= total;
          b.add(trace_row{
              q, step == 0 ? phase::prefill : phase::decode, step, pos, static_cast<layer_id>(l), ids, w, {}});
        }
      }
    }
  }
  return std::move(b).finish();
}

/// The bundled *.mtrace files of the first one's shape, as one trace (one request per
/// request of each file), or nothing when there are none.
std::optional<routing_trace> bundled_trace(std::size_t& files) {
  const fs::path dir = MOEPOLICY_BUNDLED_TRACES;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return std::nullopt;
  std::vector<fs::path> paths;
  for (const auto& entry : fs::recursive_directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".mtrace") paths.push_back(entry.path());
  }
  if (paths.empty()) return std::nullopt;
  std::sort(paths.begin(), paths.end());
  std::vector<routing_trace> traces;
  for (const auto& p : paths) traces.push_back(moepolicy::read_canonical(p));
  const auto& shape = traces.front().info();
  routing_trace_builder b(shape);
  files = 0;
  for (const auto& t : traces) {
    const auto& i = t.info();
    if (i.num_layers != shape.num_layers || i.num_experts != shape.num_experts || i.top_k != shape.top_k ||
        i.has_scores != shape.has_scores) {
      continue;
    }
    ++files;
    const auto offset = static_cast<std::uint32_t>(b.num_requests());
    for (const auto& r : t.requests()) b.add_request(r.name);
    for (std::size_t r = 0; r < t.num_rows(); ++r) {
      trace_row row = t.row(r);
      row.request += offset;
      b.add(row);
    }
  }
  return std::move(b).finish();
}

struct canonical_input {
  routing_trace trace;
  std::vector<std::byte> bytes;
  fs::path file;
  std::string label;

  canonical_input() {
    std::size_t files = 0;
    if (auto bundled = bundled_trace(files)) {
      trace = std::move(*bundled);
      label = "bundled: " + std::to_string(files) + " .mtrace files, ";
    } else {
      trace = synthetic_trace();
      label = "SYNTHETIC (no bundled .mtrace): ";
    }
    const auto& i = trace.info();
    label += std::to_string(i.num_layers) + " layers, " + std::to_string(i.num_experts) + " experts, top-" +
             std::to_string(i.top_k) + ", " + std::to_string(trace.num_rows()) + " rows";
    std::ostringstream os(std::ios::binary);
    moepolicy::write_canonical(trace, os);
    const std::string s = os.str();
    bytes.resize(s.size());
    std::memcpy(bytes.data(), s.data(), s.size());
    file = fs::temp_directory_path() / ("moepolicy_trace_bench_" + std::to_string(std::random_device{}()) + ".mtrace");
    moepolicy::write_canonical(trace, file);
  }
  ~canonical_input() {
    std::error_code ec;
    fs::remove(file, ec);
  }
  canonical_input(const canonical_input&) = delete;
  canonical_input& operator=(const canonical_input&) = delete;
};

const canonical_input& canonical() {
  static const canonical_input input;
  return input;
}

void finish(benchmark::State& state, std::size_t rows, std::size_t bytes, const std::string& label) {
  state.SetItemsProcessed(as_count(rows) * state.iterations());
  state.SetBytesProcessed(as_count(bytes) * state.iterations());
  state.SetLabel(label);
}

// ---------------------------------------------------------------------------------------
// Canonical reader and writer, CSV export

void canonical_read_memory(benchmark::State& state) {
  const auto& in = canonical();
  for (auto _ : state) {
    routing_trace t = moepolicy::read_canonical(std::span<const std::byte>(in.bytes), "bench");
    benchmark::DoNotOptimize(t.num_rows());
  }
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(canonical_read_memory)->Unit(benchmark::kMicrosecond);

void canonical_read_memory_floor(benchmark::State& state) {
  const auto& in = canonical();
  for (auto _ : state) benchmark::DoNotOptimize(touch(std::span<const std::byte>(in.bytes)));
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(canonical_read_memory_floor)->Unit(benchmark::kMicrosecond);

void canonical_read_file(benchmark::State& state) {
  const auto& in = canonical();
  for (auto _ : state) {
    routing_trace t = moepolicy::read_canonical(in.file);
    benchmark::DoNotOptimize(t.num_rows());
  }
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(canonical_read_file)->Unit(benchmark::kMicrosecond);

void canonical_read_file_floor(benchmark::State& state) {
  const auto& in = canonical();
  std::vector<char> buf(in.bytes.size());
  for (auto _ : state) {
    std::ifstream f(in.file, std::ios::binary);
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    benchmark::DoNotOptimize(buf.data());
    benchmark::ClobberMemory();
  }
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(canonical_read_file_floor)->Unit(benchmark::kMicrosecond);

/// The mapped reader: open (header, sections, checksum, names) and one walk of every
/// batch from the map, the rows checked; its floor is `canonical_read_file_floor`.
void canonical_walk_file(benchmark::State& state) {
  const auto& in = canonical();
  for (auto _ : state) {
    const moepolicy::canonical_file f(in.file);
    std::size_t rows = 0;
    const auto nothing = [](const auto&) {};
    f.for_each_batch(
        nothing, [&](const moepolicy::batch_view& b) { rows += b.tokens(); }, nothing);
    benchmark::DoNotOptimize(rows);
  }
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(canonical_walk_file)->Unit(benchmark::kMicrosecond);

void canonical_write(benchmark::State& state) {
  const auto& in = canonical();
  null_ostream os;
  for (auto _ : state) moepolicy::write_canonical(in.trace, os);
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(canonical_write)->Unit(benchmark::kMicrosecond);

void csv_export(benchmark::State& state) {
  const auto& in = canonical();
  null_ostream os;
  for (auto _ : state) moepolicy::write_csv(in.trace, os);
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(csv_export)->Unit(benchmark::kMicrosecond);

/// The floor of both writers: one pass over the trace's columns.
void trace_columns_floor(benchmark::State& state) {
  const auto& in = canonical();
  for (auto _ : state) benchmark::DoNotOptimize(touch(in.trace));
  finish(state, in.trace.num_rows(), in.bytes.size(), in.label);
}
BENCHMARK(trace_columns_floor)->Unit(benchmark::kMicrosecond);

// ---------------------------------------------------------------------------------------
// Text importers over the shared traces

struct text_file {
  std::string name;
  std::string text;
  layer_id layer = 0;  // FLAME files only
};

struct text_input {
  std::vector<text_file> files;
  std::size_t bytes = 0;
  std::size_t rows = 0;
  std::string label;
  std::string error;  // why the benchmark cannot run, or empty
};

/// Loads `names` (relative to the shared traces folder) and counts the rows `parse` gives.
template <class Parse>
text_input load_text(const std::vector<std::pair<std::string, layer_id>>& names, Parse parse) {
  text_input in;
  const fs::path dir = MOEPOLICY_SHARED_TRACES;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    in.error = "shared traces not found at " MOEPOLICY_SHARED_TRACES;
    return in;
  }
  for (const auto& [name, layer] : names) {
    std::ifstream f(dir / name, std::ios::binary);
    if (!f) {
      in.error = "cannot open " + (dir / name).string();
      return in;
    }
    std::string text(static_cast<std::size_t>(fs::file_size(dir / name)), '\0');
    f.read(text.data(), static_cast<std::streamsize>(text.size()));
    in.bytes += text.size();
    in.files.push_back({name, std::move(text), layer});
  }
  try {
    for (const auto& f : in.files) {
      memory_istream s(f.text);
      in.rows += parse(s, f).num_rows();
    }
  } catch (const std::exception& e) {
    in.error = e.what();
    return in;
  }
  in.label = std::to_string(in.files.size()) + " file(s), " + std::to_string(in.rows) + " rows";
  return in;
}

template <class Parse>
void run_import(benchmark::State& state, const text_input& in, Parse parse) {
  if (!in.error.empty()) {
    state.SkipWithError(in.error.c_str());
    return;
  }
  for (auto _ : state) {
    for (const auto& f : in.files) {
      memory_istream s(f.text);
      routing_trace t = parse(s, f);
      benchmark::DoNotOptimize(t.num_rows());
    }
  }
  finish(state, in.rows, in.bytes, in.label);
}

void run_import_floor(benchmark::State& state, const text_input& in) {
  if (!in.error.empty()) {
    state.SkipWithError(in.error.c_str());
    return;
  }
  for (auto _ : state) {
    for (const auto& f : in.files) benchmark::DoNotOptimize(touch(f.text));
  }
  finish(state, in.rows, in.bytes, in.label);
}

const auto parse_granite = [](std::istream& s, const text_file& f) {
  return moepolicy::io::read_granite_jsonl(s, f.name);
};
const auto parse_vllm_decode = [](std::istream& s, const text_file& f) {
  return moepolicy::io::read_vllm_decode_jsonl(s, f.name);
};
const auto parse_vllm_raw = [](std::istream& s, const text_file& f) {
  return moepolicy::io::read_vllm_raw_jsonl(s, f.name);
};
const auto parse_flame = [](std::istream& s, const text_file& f) {
  return moepolicy::io::read_flame_csv(s, f.name, f.layer);
};

const text_input& granite_input() {
  static const text_input in = [] {
    std::vector<std::pair<std::string, layer_id>> names;
    for (const char* n : {"00-cal-factual-01", "01-cal-coding-01", "02-cal-math-01", "03-cal-conversation-01",
                          "04-eval-factual-01", "05-eval-factual-02", "06-eval-coding-01", "07-eval-coding-02",
                          "08-eval-math-01", "09-eval-summary-01", "10-eval-reasoning-01", "11-eval-conversation-01"}) {
      names.emplace_back(std::string("granite-3.1-1b-a400m/") + n + ".jsonl", layer_id{0});
    }
    return load_text(names, parse_granite);
  }();
  return in;
}

const text_input& vllm_decode_input() {
  static const text_input in = load_text({{"mixtral-8x7b-decode/humaneval_2_routing.jsonl", 0}}, parse_vllm_decode);
  return in;
}

const text_input& vllm_raw_input() {
  static const text_input in = load_text({{"mixtral-8x7b-decode/routing_raw.jsonl", 0}}, parse_vllm_raw);
  return in;
}

const text_input& flame_input() {
  static const text_input in = load_text({{"flame-moe-290m/prefill_layer2.csv", 2},
                                          {"flame-moe-290m/prefill_layer3.csv", 3},
                                          {"flame-moe-290m/prefill_layer4.csv", 4},
                                          {"flame-moe-290m/prefill_layer5.csv", 5}},
                                         parse_flame);
  return in;
}

void granite_jsonl(benchmark::State& state) { run_import(state, granite_input(), parse_granite); }
void granite_jsonl_floor(benchmark::State& state) { run_import_floor(state, granite_input()); }
void vllm_decode_jsonl(benchmark::State& state) { run_import(state, vllm_decode_input(), parse_vllm_decode); }
void vllm_decode_jsonl_floor(benchmark::State& state) { run_import_floor(state, vllm_decode_input()); }
void vllm_raw_jsonl(benchmark::State& state) { run_import(state, vllm_raw_input(), parse_vllm_raw); }
void vllm_raw_jsonl_floor(benchmark::State& state) { run_import_floor(state, vllm_raw_input()); }
void flame_csv(benchmark::State& state) { run_import(state, flame_input(), parse_flame); }
void flame_csv_floor(benchmark::State& state) { run_import_floor(state, flame_input()); }

BENCHMARK(granite_jsonl)->Unit(benchmark::kMillisecond);
BENCHMARK(granite_jsonl_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(vllm_decode_jsonl)->Unit(benchmark::kMillisecond);
BENCHMARK(vllm_decode_jsonl_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(vllm_raw_jsonl)->Unit(benchmark::kMillisecond);
BENCHMARK(vllm_raw_jsonl_floor)->Unit(benchmark::kMillisecond);
BENCHMARK(flame_csv)->Unit(benchmark::kMillisecond);
BENCHMARK(flame_csv_floor)->Unit(benchmark::kMillisecond);

}  // namespace
