// The moepolicy routing trace as text (moepolicy/io/trace_text.hpp, docs/trace-format.md):
// round trips canonical -> JSONL -> canonical and canonical -> CSV -> canonical on the
// bundled trace, detection by `read_trace`, and every error naming the file and line.
#include "moepolicy/io/trace_text.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/read_trace.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "test_support.hpp"

namespace io = moepolicy::io;
namespace fs = std::filesystem;
using moepolicy::expert_id;
using moepolicy::parse_error;
using moepolicy::phase;
using moepolicy::routing_trace;
using moepolicy::routing_trace_builder;
using moepolicy::trace_row;

namespace {

std::string canonical_bytes(const routing_trace& t) {
  std::ostringstream os;
  moepolicy::write_canonical(t, os);
  return os.str();
}

std::string jsonl(const routing_trace& t) {
  std::ostringstream os;
  io::write_trace_jsonl(t, os);
  return os.str();
}

std::string csv(const routing_trace& t) {
  std::ostringstream os;
  io::write_trace_csv(t, os);
  return os.str();
}

/// The lines of `text`, without their line ends.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

routing_trace from_jsonl(const std::string& text) {
  std::istringstream in(text);
  return io::read_trace_jsonl(in, "t.jsonl");
}

routing_trace from_csv(const std::string& text) {
  std::istringstream in(text);
  return io::read_trace_csv(in, "t.csv");
}

// Two requests with names that need quoting, both phases, scores.
routing_trace small_trace() {
  routing_trace_builder b(
      {.model = "m/x", .source = "test \"source\"", .num_layers = 2, .num_experts = 4, .top_k = 2, .has_scores = true});
  b.add_request("a,\"b\"\nc");
  b.add_request("plain");
  b.add_request("no rows");
  const std::vector<float> s1{-1.5f, 0.0f, 3.25f, 1e-30f};
  const std::vector<float> s2{16777216.0f, -0.0f, 0.1f, 2.5e-7f};
  const std::vector<expert_id> i1{3, 1}, i2{0, 2};
  const std::vector<float> w1{0.7f, 0.3f}, w2{1e-5f, 0.99999f};
  b.add(trace_row{0, phase::prefill, 0, 0, 0, i1, w1, s1});
  b.add(trace_row{0, phase::prefill, 0, 1, 1, i2, w2, s2});
  b.add(trace_row{1, phase::decode, 3, 9, 1, i2, w1, s1});
  return std::move(b).finish();
}

const char* meta_jsonl = R"({"format":"moepolicy.routing-jsonl","version":1,"num_layers":2,"num_experts":4,"top_k":2})";
const char* meta_csv = R"(#{"format":"moepolicy.routing-csv","version":1,"num_layers":2,"num_experts":4,"top_k":2})";

}  // namespace

TEST_CASE("trace_text: the bundled trace round-trips through JSONL and CSV to the same canonical bytes") {
  const fs::path bundled = moepolicy::test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = moepolicy::read_canonical(bundled);
  REQUIRE(t.num_rows() > 0);
  const std::string want = canonical_bytes(t);
  CHECK(canonical_bytes(from_jsonl(jsonl(t))) == want);
  CHECK(canonical_bytes(from_csv(csv(t))) == want);
}

namespace {

/// An empty folder `name` under the system's temporary folder.
fs::path fresh_dir(const char* name) {
  const fs::path dir = fs::temp_directory_path() / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

/// The number of entries in `dir`.
std::size_t files_in(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("trace_text: files that convert writes are detected and read by read_trace") {
  const fs::path dir = fresh_dir("moepolicy-trace-text-detect");
  const routing_trace t = small_trace();
  {
    std::ofstream(dir / "t.jsonl", std::ios::binary) << jsonl(t);
    std::ofstream(dir / "t.csv", std::ios::binary) << csv(t);
  }
  CHECK(io::detect_trace_format(dir / "t.jsonl") == io::trace_format::moepolicy_jsonl);
  CHECK(io::detect_trace_format(dir / "t.csv") == io::trace_format::moepolicy_csv);
  const std::string want = canonical_bytes(t);
  CHECK(canonical_bytes(io::read_trace(dir / "t.jsonl")) == want);
  CHECK(canonical_bytes(io::read_trace(dir / "t.csv")) == want);
  // A directory of non-Granite JSONL is named as such, not read as Granite.
  CHECK_PARSE_ERROR(static_cast<void>(io::detect_trace_format(dir)),
                    dir.string() +
                        ": directory of .jsonl files whose first, t.jsonl, is moepolicy routing JSONL "
                        "(docs/trace-format.md): only moe-cache-lab Granite files combine into one trace; give the "
                        "file itself");
  // An error says which format read_trace chose and why.
  { std::ofstream(dir / "bad.csv", std::ios::binary) << meta_csv << "\nrequest,phase\n"; }
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_trace(dir / "bad.csv")),
                       doctest::Contains("(read as moepolicy routing CSV (docs/trace-format.md): its first line is "
                                         "a moepolicy.routing-csv metadata line)"),
                       parse_error);
  { std::ofstream(dir / "flame.csv", std::ios::binary) << "request,phase\n"; }
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_trace(dir / "flame.csv")),
                       doctest::Contains("(read as FLAME-MoE router-probability CSV: a .csv file without the "
                                         "moepolicy metadata line)"),
                       parse_error);
  fs::remove_all(dir);
}

TEST_CASE("trace_text: names, scores, phases and empty requests round-trip") {
  const routing_trace t = small_trace();
  const std::string want = canonical_bytes(t);
  const routing_trace j = from_jsonl(jsonl(t));
  CHECK(canonical_bytes(j) == want);
  CHECK(j.requests().size() == 3);
  CHECK(j.requests()[0].name == "a,\"b\"\nc");
  CHECK(j.info().source == "test \"source\"");
  CHECK(canonical_bytes(from_csv(csv(t))) == want);
  CHECK(jsonl(t).substr(0, jsonl(t).find('\n')) ==
        R"({"format":"moepolicy.routing-jsonl","version":1,"model":"m/x","source":"test \"source\"",)"
        R"("num_layers":2,"num_experts":4,"top_k":2,"has_weights":true,"has_scores":true,)"
        R"("requests":["a,\"b\"\nc","plain","no rows"]})");
  CHECK(jsonl(t).find(R"({"request":"plain","phase":"decode","step":3,"position":9,"layer":1,"experts":[0,2],)"
                      R"("weights":[0.7,0.3],"scores":[-1.5,0,3.25,1e-30]})") != std::string::npos);
  CHECK(jsonl(t).find(R"("scores":[16777216,-0.0,0.1,2.5e-07]})") != std::string::npos);
}

TEST_CASE("trace_text: every float survives JSONL and CSV exactly") {
  // 128 rows x 512 scores of random bit patterns (finite ones), through both readers.
  std::mt19937 rng(5);
  routing_trace_builder b(
      {.model = "", .source = "", .num_layers = 1, .num_experts = 512, .top_k = 1, .has_scores = true});
  b.add_request("r");
  std::vector<float> scores(512);
  for (std::uint32_t pos = 0; pos < 128; ++pos) {
    for (auto& s : scores) {
      do {
        s = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
      } while (!std::isfinite(s));
    }
    const std::vector<float> w{std::abs(scores[0])};
    const std::vector<expert_id> id{static_cast<expert_id>(pos % 512)};
    b.add(trace_row{0, phase::prefill, 0, pos, 0, id, w, scores});
  }
  const routing_trace t = std::move(b).finish();
  const std::string want = canonical_bytes(t);
  CHECK(canonical_bytes(from_jsonl(jsonl(t))) == want);
  CHECK(canonical_bytes(from_csv(csv(t))) == want);
}

TEST_CASE("trace_text: without weights every id weighs 1/k, and the source says so") {
  const routing_trace j =
      from_jsonl(std::string(R"({"format":"moepolicy.routing-jsonl","version":1,)") +
                 R"("num_layers":1,"num_experts":4,"top_k":2,"has_weights":false})" + "\n" +
                 R"({"request":"r","phase":"decode","step":0,"position":0,"layer":0,)" + R"("experts":[1,3]})" + "\n");
  REQUIRE(j.num_rows() == 1);
  CHECK(j.weights(0)[0] == 0.5f);
  CHECK(j.info().source == "no gate weights: every id weighs 1/k");
  const routing_trace c = from_csv(std::string(R"(#{"format":"moepolicy.routing-csv","version":1,)") +
                                   R"("num_layers":1,"num_experts":4,"top_k":2,"has_weights":false})" +
                                   "\nrequest,phase,step,position,layer,e_0,e_1\nr,decode,0,0,0,1,3\n");
  CHECK(canonical_bytes(c) == canonical_bytes(j));
}

TEST_CASE("trace_text: JSONL errors name the file and the line") {
  const std::string row = R"({"request":"r","phase":"decode","step":0,"position":0,"layer":0,"experts":[1,3],)"
                          R"("weights":[0.5,0.5]})";
  CHECK_PARSE_ERROR(from_jsonl(""),
                    "t.jsonl:1: expected the moepolicy.routing-jsonl metadata object, got end of input");
  CHECK_PARSE_ERROR(
      from_jsonl(R"({"format":"moepolicy.routing-jsonl","version":1,"num_layers":2,"num_experts":4,"top_k":2,)"
                 R"("top-k":2})"),
      "t.jsonl:1: unknown key \"top-k\" in the metadata (known: format, version, model, source, num_layers, "
      "num_experts, top_k, has_weights, has_scores, requests)");
  CHECK_PARSE_ERROR(from_jsonl(R"({"format":"moepolicy.routing-jsonl","version":2})"),
                    "t.jsonl:1: metadata \"version\" = 2 is not supported (this reader reads version 1)");
  CHECK_PARSE_ERROR(from_jsonl(R"({"format":"moepolicy.routing-jsonl","version":1,"num_layers":2,"top_k":2})"),
                    "t.jsonl:1: metadata misses \"num_experts\"");
  CHECK_PARSE_ERROR(
      from_jsonl(R"({"format":"moepolicy.routing-jsonl","version":1,"num_layers":2,"num_experts":4,"top_k":5})"),
      "t.jsonl:1: metadata \"top_k\" must be an integer in [1, 4], got 5");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n" + row + "\n" +
                               R"({"request":"r","phase":"decode","step":1,"position":1,"layer":0,"experts":[1,3],)"
                               R"("weights":[0.5,0.5],"score":[1]})"),
                    "t.jsonl:3: unknown key \"score\" in a row (known: request, phase, step, position, layer, "
                    "experts, weights, scores)");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n" +
                               R"({"request":"r","phase":"Decode","step":0,"position":0,"layer":0,"experts":[1,3],)"
                               R"("weights":[0.5,0.5]})"),
                    "t.jsonl:2: field \"phase\" must be \"prefill\" or \"decode\", got \"Decode\"");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n" +
                               R"({"request":"r","phase":"decode","step":0,"position":0,"layer":2,"experts":[1,3],)"
                               R"("weights":[0.5,0.5]})"),
                    "t.jsonl:2: field \"layer\" = 2 is out of range [0, 1]");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n" +
                               R"({"request":"r","phase":"decode","step":0,"position":0,"layer":0,"experts":[1,1],)"
                               R"("weights":[0.5,0.5]})"),
                    "t.jsonl:2: expert id 1 selected twice");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n" +
                               R"({"request":"r","phase":"decode","step":0,"position":0,"layer":0,"experts":[1,3],)"
                               R"("weights":[0.5]})"),
                    "t.jsonl:2: field \"weights\" must hold 2 numbers, got 1");
  CHECK_PARSE_ERROR(
      from_jsonl(R"({"format":"moepolicy.routing-jsonl","version":1,"num_layers":2,"num_experts":4,"top_k":2,)"
                 R"("requests":["q"]})"
                 "\n" +
                 row),
      "t.jsonl:2: request \"r\" is not in the metadata's \"requests\"");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n" + row + "\n" + row),
                    "t.jsonl: the rows do not form a trace: moepolicy::routing_trace::from_sorted: row 1 repeats the "
                    "(request, step, layer, position) of the row before");
}

TEST_CASE("trace_text: CSV errors name the file and the line") {
  const std::string header = "request,phase,step,position,layer,e_0,e_1,w_0,w_1\n";
  CHECK_PARSE_ERROR(from_csv("request,phase\n"),
                    "t.csv:1: expected the metadata line '#{\"format\": \"moepolicy.routing-csv\", ...}' "
                    "(docs/trace-format.md)");
  CHECK_PARSE_ERROR(from_csv(R"(#{"format":"moepolicy.routing-jsonl","version":1})"),
                    "t.csv:1: metadata \"format\" must be \"moepolicy.routing-csv\", got \"moepolicy.routing-jsonl\"");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\nrequest,phase,step,position,layer,e_0,e_1\n"),
                    "t.csv:2: the header must be \"request,phase,step,position,layer,e_0,e_1,w_0,w_1\" for top_k = 2, "
                    "with weights, without scores; got \"request,phase,step,position,layer,e_0,e_1\"");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n" + header + "r,decode,0,0,0,1,3,0.5,0.5\nr,decode,1,1,0,1\n"),
                    "t.csv:4: expected 9 fields, got 6");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n" + header + "r,decode,x,0,0,1,3,0.5,0.5\n"),
                    "t.csv:3: step \"x\" is not an integer in [0, 2^32 - 1]");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n" + header + "r,decode,0,0,0,1,3,0.5,nan\n"),
                    "t.csv:3: w_1 = \"nan\" is not a finite number that fits a float");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n" + header + "r,decode,0,0,0,1,9,0.5,0.5\n"),
                    "t.csv:3: expert id 9 >= num_experts 4");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n" + header + "\"r,decode,0,0,0,1,3,0.5,0.5\n"),
                    "t.csv:3: a quoted field is not closed before the end of the input");
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n" + header + "\n" + "r,decode,0,0,0,1,3,0.5,0.5\n"),
                    "t.csv:3: blank line inside the input (only trailing blank lines are allowed)");
}

TEST_CASE("trace_text: lines beyond input_limits::max_line_bytes are errors") {
  moepolicy::input_limits small = moepolicy::active_input_limits();
  small.max_line_bytes = 64;
  const moepolicy::scoped_input_limits guard(small);
  CHECK_PARSE_ERROR(from_csv(std::string(meta_csv) + "\n"),
                    "t.csv:1: line longer than the limit of 64 bytes (input_limits::max_line_bytes)");
  CHECK_PARSE_ERROR(from_jsonl(std::string(meta_jsonl) + "\n"),
                    "t.jsonl:1: line longer than the limit of 64 bytes (input_limits::max_line_bytes)");
}

namespace {

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// The message of the parse_error `f` throws, or "" when it throws none.
template <class F>
std::string parse_error_of(F&& f) {
  try {
    f();
  } catch (const parse_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("trace_text: streaming to the canonical format writes the whole read's bytes") {
  const fs::path dir = fresh_dir("moepolicy-trace-text-stream");
  const fs::path bundled = moepolicy::test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = moepolicy::read_canonical(bundled);
  REQUIRE(t.num_rows() > 1000);
  const std::string want = file_bytes(bundled);
  REQUIRE(want == canonical_bytes(t));
  {
    std::ofstream(dir / "t.jsonl", std::ios::binary) << jsonl(t);
    std::ofstream(dir / "t.csv", std::ios::binary) << csv(t);
  }
  // Chunks of 1000 rows: many fills of the canonical writer, a last one shorter.
  const io::text_to_canonical j = io::write_canonical_from_trace_jsonl(dir / "t.jsonl", dir / "j.mtrace", 1000);
  CHECK(j.streamed);
  CHECK(j.rows == t.num_rows());
  CHECK(j.requests == t.requests().size());
  CHECK(file_bytes(dir / "j.mtrace") == want);
  const io::text_to_canonical c = io::write_canonical_from_trace_csv(dir / "t.csv", dir / "c.mtrace", 1000);
  CHECK(c.streamed);
  CHECK(file_bytes(dir / "c.mtrace") == want);
  const auto via = io::write_canonical_from_text(dir / "t.csv", dir / "v.mtrace");
  REQUIRE(via.has_value());
  CHECK(via->streamed);
  CHECK(file_bytes(dir / "v.mtrace") == want);
  CHECK_FALSE(io::write_canonical_from_text(bundled, dir / "no.mtrace").has_value());
  CHECK_FALSE(fs::exists(dir / "no.mtrace"));

  // Names, scores, both phases and a request without rows; rows in another order are
  // sorted (external merge sort), to the same bytes.
  const routing_trace s = small_trace();
  std::string lines = jsonl(s);
  {
    std::ofstream(dir / "s.jsonl", std::ios::binary) << lines;
    std::ofstream(dir / "s.csv", std::ios::binary) << csv(s);
    // Swap the last two rows.
    const std::size_t last = lines.rfind('\n', lines.size() - 2) + 1;
    const std::size_t before = lines.rfind('\n', last - 2) + 1;
    std::ofstream(dir / "swapped.jsonl", std::ios::binary)
        << lines.substr(0, before) << lines.substr(last) << lines.substr(before, last - before);
  }
  const std::string small = canonical_bytes(s);
  CHECK(io::write_canonical_from_trace_jsonl(dir / "s.jsonl", dir / "s1.mtrace").streamed);
  CHECK(file_bytes(dir / "s1.mtrace") == small);
  CHECK(io::write_canonical_from_trace_csv(dir / "s.csv", dir / "s2.mtrace").streamed);
  CHECK(file_bytes(dir / "s2.mtrace") == small);
  const io::text_to_canonical swapped = io::write_canonical_from_trace_jsonl(dir / "swapped.jsonl", dir / "s3.mtrace");
  CHECK_FALSE(swapped.streamed);
  CHECK(swapped.runs == 1);
  CHECK(swapped.rows == s.num_rows());
  CHECK(file_bytes(dir / "s3.mtrace") == small);
  // Only the outputs and inputs are left: the scratch files are gone.
  CHECK(files_in(dir) == 11);
  fs::remove_all(dir);
}

TEST_CASE("trace_text: streaming to the canonical format fails as the whole read does") {
  const fs::path dir = fresh_dir("moepolicy-trace-text-stream-errors");
  const fs::path bundled = moepolicy::test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = moepolicy::read_canonical(bundled);
  const std::string text[2] = {jsonl(t), csv(t)};
  const char* ext[2] = {".jsonl", ".csv"};
  for (int f = 0; f < 2; ++f) {
    CAPTURE(ext[f]);
    // The line at the middle of the file, changed in three ways: a bad field, a repeat
    // of the line before, and a line moved there from the start (out of order).
    const std::vector<std::string> rows = lines_of(text[f]);
    const std::size_t first_row = f == 0 ? 1 : 2;
    const std::size_t mid = rows.size() / 2;
    std::vector<std::vector<std::string>> bad(3, rows);
    bad[0][mid] = f == 0 ? rows[mid].substr(0, rows[mid].find("\"phase\":")) + "\"phase\":\"Decode\"}"
                         : rows[mid].substr(0, rows[mid].find(',')) + ",Decode";
    bad[1][mid] = rows[mid - 1];
    bad[2][mid] = rows[first_row];
    for (std::size_t b = 0; b < bad.size(); ++b) {
      CAPTURE(b);
      const fs::path file = dir / ("bad" + std::to_string(b) + ext[f]);
      {
        std::ofstream os(file, std::ios::binary);
        for (const auto& l : bad[b]) os << l << '\n';
      }
      const fs::path out = dir / "out.mtrace";
      const std::string want = parse_error_of([&] { static_cast<void>(io::read_trace(file)); });
      REQUIRE_FALSE(want.empty());
      if (b == 0) CHECK(want.find(file.string() + ":" + std::to_string(mid + 1) + ": ") == 0);
      CHECK(parse_error_of([&] { static_cast<void>(io::write_canonical_from_text(file, out)); }) == want);
      CHECK_FALSE(fs::exists(out));
      const std::string plain =
          parse_error_of([&] { static_cast<void>(f == 0 ? io::read_trace_jsonl(file) : io::read_trace_csv(file)); });
      CHECK(parse_error_of([&] {
              static_cast<void>(f == 0 ? io::write_canonical_from_trace_jsonl(file, out, 1000)
                                       : io::write_canonical_from_trace_csv(file, out, 1000));
            }) == plain);
      CHECK_FALSE(fs::exists(out));
    }
  }
  CHECK(files_in(dir) == 6);
  fs::remove_all(dir);
}

namespace {

/// `text` with its rows (the lines after the first `header` lines) reordered by `order`
/// (`order(rows)` permutes them in place).
template <class Order>
std::string reordered(const std::string& text, std::size_t header, Order&& order) {
  const std::vector<std::string> lines = lines_of(text);
  std::vector<std::string> rows(lines.begin() + static_cast<std::ptrdiff_t>(header), lines.end());
  order(rows);
  std::string out;
  for (std::size_t i = 0; i < header; ++i) (out += lines[i]) += '\n';
  for (const auto& r : rows) (out += r) += '\n';
  return out;
}

}  // namespace

TEST_CASE("trace_text: rows out of order are sorted by an external merge sort into the whole read's bytes") {
  const fs::path dir = fresh_dir("moepolicy-trace-text-sort");
  const fs::path bundled = moepolicy::test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = moepolicy::read_canonical(bundled);
  const std::string want = file_bytes(bundled);
  const std::string text[2] = {jsonl(t), csv(t)};
  const char* ext[2] = {".jsonl", ".csv"};
  const std::size_t header[2] = {1, 2};
  for (int f = 0; f < 2; ++f) {
    CAPTURE(ext[f]);
    // Shuffled (a fixed seed); the first half in order and the second reversed.
    const fs::path shuffled = dir / (std::string("shuffled") + ext[f]);
    const fs::path tail = dir / (std::string("tail") + ext[f]);
    std::ofstream(shuffled, std::ios::binary) << reordered(text[f], header[f], [](std::vector<std::string>& r) {
      std::mt19937 gen(16);
      std::shuffle(r.begin(), r.end(), gen);
    });
    std::ofstream(tail, std::ios::binary) << reordered(text[f], header[f], [](std::vector<std::string>& r) {
      std::reverse(r.begin() + static_cast<std::ptrdiff_t>(r.size() / 2), r.end());
    });
    const auto convert = [&](const fs::path& in, const fs::path& out, std::uint64_t run, std::uint64_t merge) {
      return f == 0 ? io::write_canonical_from_trace_jsonl(in, out, 1000, run, merge)
                    : io::write_canonical_from_trace_csv(in, out, 1000, run, merge);
    };
    // Runs of about 300 rows (29 runs), of 2 rows (every row a run's worth of buffer:
    // 4,248 runs) with one row of merge buffer per run, and one run for the whole file.
    const std::uint64_t row_bytes = 15 + 6 * t.info().top_k + 24;
    struct sizes {
      std::uint64_t run, merge, runs;
    };
    for (const sizes z :
         {sizes{300 * row_bytes, 1 << 16, 29}, sizes{1, 1, 4248}, sizes{std::uint64_t{1} << 30, 1, 1}}) {
      CAPTURE(z.run);
      const fs::path out = dir / "out.mtrace";
      const io::text_to_canonical s = convert(shuffled, out, z.run, z.merge);
      CHECK_FALSE(s.streamed);
      CHECK(s.runs + 1 >= z.runs);  // the first run may take a row more: it starts in order
      CHECK(s.runs <= z.runs);
      CHECK(s.rows == t.num_rows());
      CHECK(s.requests == t.requests().size());
      CHECK(file_bytes(out) == want);
      fs::remove(out);
      if (z.runs != 29) continue;  // the half-reversed file once (each conversion costs a parse)
      const io::text_to_canonical h = convert(tail, out, z.run, z.merge);
      CHECK_FALSE(h.streamed);
      CHECK(h.runs >= 1);
      CHECK(file_bytes(out) == want);
      fs::remove(out);
    }
    // The whole file in order, in runs of 2 rows: streamed, no sort.
    const fs::path plain = dir / (std::string("plain") + ext[f]);
    std::ofstream(plain, std::ios::binary) << text[f];
    const io::text_to_canonical p = convert(plain, dir / "out.mtrace", 1, 1);
    CHECK(p.streamed);
    CHECK(p.runs == 0);
    CHECK(file_bytes(dir / "out.mtrace") == want);
    fs::remove(dir / "out.mtrace");
  }
  // Only the inputs are left: the runs and the merged rows are removed.
  CHECK(files_in(dir) == 6);
  fs::remove_all(dir);
}

TEST_CASE("trace_text: the external merge sort fails as the whole read does, naming the file and the line") {
  const fs::path dir = fresh_dir("moepolicy-trace-text-sort-errors");
  const fs::path bundled = moepolicy::test::bundled_traces() / "granite-3.1-1b-a400m" / "granite-3.1-1b-a400m.mtrace";
  const routing_trace t = moepolicy::read_canonical(bundled);
  const std::string text[2] = {jsonl(t), csv(t)};
  const char* ext[2] = {".jsonl", ".csv"};
  for (int f = 0; f < 2; ++f) {
    CAPTURE(ext[f]);
    const std::vector<std::string> rows = lines_of(text[f]);
    const std::size_t first_row = f == 0 ? 1 : 2;
    std::vector<std::string> shuffled = rows;
    std::mt19937 gen(17);
    std::shuffle(shuffled.begin() + static_cast<std::ptrdiff_t>(first_row), shuffled.end(), gen);
    const std::size_t last = shuffled.size() - 1;
    // A bad field on the last line (in the last run), a row repeated far from its twin
    // (in another run), and a decode row turned prefill in a decode step (its step then
    // mixes phases, found only by the merge).
    std::vector<std::vector<std::string>> bad(3, shuffled);
    const std::string& l = shuffled[last];
    bad[0][last] =
        f == 0 ? l.substr(0, l.find("\"phase\":")) + "\"phase\":\"Decode\"}" : l.substr(0, l.find(',')) + ",Decode";
    bad[1].push_back(shuffled[first_row]);
    std::size_t decode = first_row;
    const std::string marker = f == 0 ? "\"phase\":\"decode\"" : ",decode,";
    while (shuffled[decode].find(marker) == std::string::npos) ++decode;
    const std::string prefill = f == 0 ? "\"phase\":\"prefill\"" : ",prefill,";
    bad[2][decode].replace(bad[2][decode].find(marker), marker.size(), prefill);
    for (std::size_t b = 0; b < bad.size(); ++b) {
      CAPTURE(b);
      const fs::path file = dir / ("bad" + std::to_string(b) + ext[f]);
      {
        std::ofstream os(file, std::ios::binary);
        for (const auto& line : bad[b]) os << line << '\n';
      }
      const fs::path out = dir / "out.mtrace";
      const std::string plain =
          parse_error_of([&] { static_cast<void>(f == 0 ? io::read_trace_jsonl(file) : io::read_trace_csv(file)); });
      REQUIRE_FALSE(plain.empty());
      if (b == 0) CHECK(plain.find(file.string() + ":" + std::to_string(last + 1) + ": ") == 0);
      if (b == 1) CHECK(plain.find("repeats the (request, step, layer, position)") != std::string::npos);
      if (b == 2) CHECK(plain.find("mixes prefill and decode rows") != std::string::npos);
      // Runs of about 100 rows, and for the repeated row runs of 2 rows (thousands of runs).
      for (const std::uint64_t run : {std::uint64_t{1}, std::uint64_t{100 * (15 + 6 * t.info().top_k + 24)}}) {
        if (run == 1 && b != 1) continue;
        CAPTURE(run);
        CHECK(parse_error_of([&] {
                static_cast<void>(f == 0 ? io::write_canonical_from_trace_jsonl(file, out, 1000, run, 1 << 12)
                                         : io::write_canonical_from_trace_csv(file, out, 1000, run, 1 << 12));
              }) == plain);
        CHECK_FALSE(fs::exists(out));
      }
    }
  }
  CHECK(files_in(dir) == 6);
  fs::remove_all(dir);
}
