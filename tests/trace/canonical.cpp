#include "moepolicy/trace/canonical.hpp"

#include <doctest/doctest.h>

#include "large_decode_file.hpp"
#include "peak_rss.hpp"
#include "trace_compare.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "moepolicy/trace/routing_trace.hpp"
#include "test_support.hpp"

using moepolicy::expert_id;
using moepolicy::parse_error;
using moepolicy::phase;
using moepolicy::read_canonical;
using moepolicy::routing_trace;
using moepolicy::routing_trace_builder;
using moepolicy::trace_info;
using moepolicy::trace_row;
using moepolicy::write_canonical;

namespace {

using bytes = std::vector<std::byte>;

struct row_spec {
  std::uint32_t request;
  phase kind;
  std::uint32_t step;
  std::uint32_t position;
  moepolicy::layer_id layer;
  std::vector<expert_id> experts;
  std::vector<float> weights;
  std::vector<float> scores = {};
};

routing_trace build(const trace_info& info, const std::vector<std::string>& names, const std::vector<row_spec>& rows) {
  routing_trace_builder b(info);
  for (const auto& n : names) b.add_request(n);
  for (const auto& r : rows)
    b.add(trace_row{r.request, r.kind, r.step, r.position, r.layer, r.experts, r.weights, r.scores});
  return std::move(b).finish();
}

/// Two requests, prefill and decode, no scores: 4 layers, 8 experts, top-2, 5 rows.
/// Its file layout is pinned by "the layout of a small trace".
routing_trace trace_a() {
  return build({.model = "toy-moe", .source = "unit test", .num_layers = 4, .num_experts = 8, .top_k = 2},
               {"alpha", "beta"},
               {
                   {1, phase::decode, 0, 9, 3, {7, 0}, {0.125f, 0.875f}},
                   {0, phase::prefill, 0, 1, 0, {2, 3}, {0.5f, 0.5f}},
                   {0, phase::prefill, 0, 0, 0, {0, 1}, {0.75f, 0.25f}},
                   {0, phase::decode, 1, 2, 0, {6, 7}, {1.0f, 0.0f}},
                   {0, phase::prefill, 0, 0, 1, {4, 5}, {0.6f, 0.4f}},
               });
}

/// One request with router scores: 2 layers, 4 experts, top-2, 3 rows.
routing_trace trace_b() {
  return build({.model = "scored", .source = "", .num_layers = 2, .num_experts = 4, .top_k = 2, .has_scores = true},
               {"only"},
               {
                   {0, phase::prefill, 0, 0, 0, {3, 1}, {0.7f, 0.3f}, {-1.5f, 0.25f, 0.0f, 2.0f}},
                   {0, phase::prefill, 0, 0, 1, {0, 2}, {0.9f, 0.1f}, {3.0f, -0.125f, 1.0f, -7.0f}},
                   {0, phase::decode, 1, 1, 1, {2, 0}, {0.55f, 0.45f}, {0.5f, 0.0f, 1e-7f, 1e7f}},
               });
}

/// A larger trace of realistic shape: 24 layers, 32 experts, top-8, 3 requests.
routing_trace trace_random() {
  std::mt19937 rng(7);
  routing_trace_builder b({.model = "random", .source = "mt19937(7)", .num_layers = 24, .num_experts = 32, .top_k = 8});
  std::vector<expert_id> ids(32);
  std::vector<float> w(8);
  for (std::uint32_t q = 0; q < 3; ++q) {
    b.add_request("req" + std::to_string(q));
    const std::uint32_t prompt = 5 + q, decode = 4;
    for (std::uint32_t step = 0; step <= decode; ++step) {
      const std::uint32_t first = step == 0 ? 0 : prompt + step - 1;
      const std::uint32_t last = step == 0 ? prompt : first + 1;
      for (std::uint32_t pos = first; pos < last; ++pos) {
        for (moepolicy::layer_id l = 0; l < 24; ++l) {
          std::iota(ids.begin(), ids.end(), expert_id{0});
          std::shuffle(ids.begin(), ids.end(), rng);
          for (auto& x : w) x = std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
          b.add(trace_row{q,
                          step == 0 ? phase::prefill : phase::decode,
                          step,
                          pos,
                          l,
                          std::span<const expert_id>(ids).first(8),
                          w,
                          {}});
        }
      }
    }
  }
  return std::move(b).finish();
}

bytes to_bytes(const routing_trace& t) {
  std::ostringstream os(std::ios::binary);
  write_canonical(t, os);
  const std::string s = os.str();
  bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

bytes read_file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  const std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

template <class U>
void put(bytes& b, std::size_t at, U v) {
  moepolicy::detail::canonical::store<U>(b.data() + at, v);
}
template <class U>
U get(const bytes& b, std::size_t at) {
  return moepolicy::detail::canonical::load<U>(b.data() + at);
}
void put_float(bytes& b, std::size_t at, float v) { put<std::uint32_t>(b, at, std::bit_cast<std::uint32_t>(v)); }

/// Recomputes the checksum after an edit of the payload, so that the reader gets past it.
void reseal(bytes& b) {
  put<std::uint64_t>(b, 56, moepolicy::detail::canonical::checksum(std::span<const std::byte>(b).subspan(64)));
}

/// The message of the parse_error reading `b` throws, or "(no error)".
std::string error_of(const bytes& b, std::string_view name = "t.mtrace") {
  try {
    (void)read_canonical(std::span<const std::byte>(b), name);
  } catch (const parse_error& e) {
    return e.what();
  }
  return "(no error)";
}

/// A fresh, empty directory under the system temp dir.
std::filesystem::path temp_dir() {
  const auto dir =
      std::filesystem::temp_directory_path() / ("moepolicy_canonical_test_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace

TEST_CASE("the layout of a small trace") {
  const bytes b = to_bytes(trace_a());
  REQUIRE(b.size() == 416);
  CHECK(std::memcmp(b.data(), "MOEPTRC\0", 8) == 0);
  CHECK(get<std::uint32_t>(b, 8) == 2);
  CHECK(std::to_integer<int>(b[12]) == 0x04);  // byte-order mark 0x01020304, little-endian
  CHECK(std::to_integer<int>(b[15]) == 0x01);
  CHECK(get<std::uint64_t>(b, 16) == 5);    // rows
  CHECK(get<std::uint32_t>(b, 24) == 2);    // requests
  CHECK(get<std::uint32_t>(b, 28) == 4);    // layers
  CHECK(get<std::uint32_t>(b, 32) == 8);    // experts
  CHECK(get<std::uint32_t>(b, 36) == 2);    // top_k
  CHECK(get<std::uint32_t>(b, 40) == 0);    // flags
  CHECK(get<std::uint32_t>(b, 44) == 0);    // reserved
  CHECK(get<std::uint64_t>(b, 48) == 352);  // payload bytes
  CHECK(get<std::uint64_t>(b, 56) == moepolicy::detail::canonical::checksum(std::span<const std::byte>(b).subspan(64)));

  // Section headers: tag, element size, data bytes; data at +16, padded to 8.
  struct expect {
    std::size_t at;
    const char* tag;
    std::uint32_t element;
    std::uint64_t n;
  };
  const expect sections[] = {{64, "META", 1, 41},  {128, "REQU", 4, 20}, {168, "STEP", 4, 20},
                             {208, "POSN", 4, 20}, {248, "LAYR", 2, 10}, {280, "KIND", 1, 5},
                             {304, "EXPT", 2, 20}, {344, "WGHT", 4, 40}, {400, "SCOR", 4, 0}};
  for (const auto& s : sections) {
    CAPTURE(s.tag);
    CHECK(std::memcmp(b.data() + s.at, s.tag, 4) == 0);
    CHECK(get<std::uint32_t>(b, s.at + 4) == s.element);
    CHECK(get<std::uint64_t>(b, s.at + 8) == s.n);
  }
  // META: model, source, request names, each u32-length-prefixed.
  CHECK(get<std::uint32_t>(b, 80) == 7);
  CHECK(std::memcmp(b.data() + 84, "toy-moe", 7) == 0);
  CHECK(get<std::uint32_t>(b, 91) == 9);
  CHECK(std::memcmp(b.data() + 95, "unit test", 9) == 0);
  CHECK(get<std::uint32_t>(b, 104) == 5);
  CHECK(std::memcmp(b.data() + 108, "alpha", 5) == 0);
  CHECK(get<std::uint32_t>(b, 113) == 4);
  CHECK(std::memcmp(b.data() + 117, "beta", 4) == 0);
  // Columns in sorted row order.
  CHECK(get<std::uint32_t>(b, 144 + 4 * 4) == 1);  // request of row 4 (beta)
  CHECK(get<std::uint32_t>(b, 184 + 4 * 3) == 1);  // step of row 3
  CHECK(get<std::uint32_t>(b, 224 + 4 * 4) == 9);  // position of row 4
  CHECK(get<std::uint16_t>(b, 264 + 2 * 2) == 1);  // layer of row 2
  CHECK(std::to_integer<int>(b[296 + 3]) == 1);    // row 3 decodes
  CHECK(get<std::uint16_t>(b, 320 + 2 * 5) == 5);  // second id of row 2
  CHECK(get<std::uint32_t>(b, 360) == std::bit_cast<std::uint32_t>(0.75f));
}

TEST_CASE("round trip through a stream, a byte span and a file") {
  for (const routing_trace& t : {trace_a(), trace_b(), trace_random()}) {
    CAPTURE(t.info().model);
    const bytes b = to_bytes(t);

    moepolicy::test::check_same_trace(read_canonical(std::span<const std::byte>(b), "mem"), t);

    std::istringstream in(std::string(reinterpret_cast<const char*>(b.data()), b.size()), std::ios::binary);
    moepolicy::test::check_same_trace(read_canonical(in, "stream"), t);

    const auto dir = temp_dir();
    const auto path = dir / "t.mtrace";
    write_canonical(t, path);
    CHECK(read_file_bytes(path) == b);
    moepolicy::test::check_same_trace(read_canonical(path), t);
    std::filesystem::remove_all(dir);

    // Deterministic: writing what was read gives the same bytes.
    CHECK(to_bytes(read_canonical(std::span<const std::byte>(b), "mem")) == b);
  }
}

TEST_CASE("a buffer of any alignment reads") {
  const bytes b = to_bytes(trace_b());
  bytes shifted(b.size() + 3);
  std::memcpy(shifted.data() + 3, b.data(), b.size());
  moepolicy::test::check_same_trace(read_canonical(std::span<const std::byte>(shifted).subspan(3), "shifted"),
                                    trace_b());
}

TEST_CASE("a trace without rows, and requests without rows, round-trip") {
  const routing_trace none = build({.model = "m", .source = "", .num_layers = 1, .num_experts = 1, .top_k = 1}, {}, {});
  const routing_trace t = read_canonical(std::span<const std::byte>(to_bytes(none)), "none");
  CHECK(t.num_rows() == 0);
  CHECK(t.requests().empty());
  CHECK(t.info().model == "m");

  const routing_trace idle = build({.model = "", .source = "", .num_layers = 2, .num_experts = 4, .top_k = 1},
                                   {"", "x,y", "z"}, {{1, phase::decode, 3, 0, 1, {2}, {1.0f}}});
  moepolicy::test::check_same_trace(read_canonical(std::span<const std::byte>(to_bytes(idle)), "idle"), idle);
}

TEST_CASE("the committed version-2 files read and are what the writer writes") {
  const auto dir = moepolicy::test::test_data() / "trace";
  moepolicy::test::check_same_trace(read_canonical(dir / "small.mtrace"), trace_a());
  moepolicy::test::check_same_trace(read_canonical(dir / "scores.mtrace"), trace_b());
  CHECK(read_file_bytes(dir / "small.mtrace") == to_bytes(trace_a()));
  CHECK(read_file_bytes(dir / "scores.mtrace") == to_bytes(trace_b()));
}

TEST_CASE("the committed version-1 files still read, and differ from version 2 only in version and checksum") {
  const auto dir = moepolicy::test::test_data() / "trace";
  moepolicy::test::check_same_trace(read_canonical(dir / "small-v1.mtrace"), trace_a());
  moepolicy::test::check_same_trace(read_canonical(dir / "scores-v1.mtrace"), trace_b());
  for (const auto& [old_file, t] :
       {std::pair{"small-v1.mtrace", trace_a()}, std::pair{"scores-v1.mtrace", trace_b()}}) {
    bytes v1 = read_file_bytes(dir / old_file);
    const bytes v2 = to_bytes(t);
    REQUIRE(v1.size() == v2.size());
    CHECK(get<std::uint32_t>(v1, 8) == 1);
    CHECK(get<std::uint64_t>(v1, 56) ==
          moepolicy::detail::canonical::fnv_lanes(std::span<const std::byte>(v1).subspan(64)));
    put<std::uint32_t>(v1, 8, 2);
    put<std::uint64_t>(v1, 56, get<std::uint64_t>(v2, 56));
    CHECK(v1 == v2);
  }
}

TEST_CASE("canonical_version and canonical_checksum_name tell the versions apart") {
  const auto dir = moepolicy::test::test_data() / "trace";
  CHECK(moepolicy::canonical_version(read_file_bytes(dir / "small.mtrace")) == 2u);
  CHECK(moepolicy::canonical_version(read_file_bytes(dir / "small-v1.mtrace")) == 1u);
  CHECK(moepolicy::canonical_version(std::span<const std::byte>(to_bytes(trace_a())).first(12)) == 2u);
  CHECK_FALSE(moepolicy::canonical_version(std::span<const std::byte>(to_bytes(trace_a())).first(11)).has_value());
  CHECK_FALSE(moepolicy::canonical_version(std::as_bytes(std::span<const char>("{\"record_type\": 1}", 18))));
  CHECK(moepolicy::canonical_checksum_name(2) == "XXH64");
  CHECK(moepolicy::canonical_checksum_name(1) ==
        "FNV-1a in four 64-bit lanes (weak: two flips of the same high bit cancel)");
  CHECK(moepolicy::canonical_checksum_name(3).empty());
}

TEST_CASE("two flipped sign bits are caught in version 2 and were not in version 1") {
  // The review's finding: bit 63 flipped in two payload words of the same lane (four
  // words apart) left the version-1 checksum unchanged, and the router scores changed sign.
  const auto dir = moepolicy::test::test_data() / "trace";
  const routing_trace t = trace_b();
  const auto flip_two_sign_bits = [](bytes b) {
    // The SCOR column's data: its tag, then 16 header bytes; 12 floats of 4 bytes.
    const std::string_view tag = "SCOR";
    const auto at = std::search(b.begin(), b.end(), reinterpret_cast<const std::byte*>(tag.data()),
                                reinterpret_cast<const std::byte*>(tag.data()) + 4);
    REQUIRE(at != b.end());
    const auto data = static_cast<std::size_t>(at - b.begin()) + 16;  // word i and i + 4 share a lane
    b[data + 7] ^= std::byte{0x80};   // bit 63 of the column's word 0: the sign of score 1
    b[data + 39] ^= std::byte{0x80};  // bit 63 of word 4: the sign of score 9
    return b;
  };
  const bytes v2 = flip_two_sign_bits(to_bytes(t));
  CHECK(error_of(v2).starts_with("t.mtrace: byte 56: checksum mismatch: the header records "));

  const bytes v1 = flip_two_sign_bits(read_file_bytes(dir / "scores-v1.mtrace"));
  const routing_trace damaged = read_canonical(std::span<const std::byte>(v1), "v1");
  CHECK(damaged.columns().scores[1] == -t.columns().scores[1]);
  CHECK(damaged.columns().scores[9] == -t.columns().scores[9]);
}

TEST_CASE("write_canonical to a path replaces the file only once it is complete") {
  const auto dir = std::filesystem::temp_directory_path() / "moepolicy-canonical-atomic";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto path = dir / "t.mtrace";
  { std::ofstream(path) << "the old file"; }
  // A writer that fails midway leaves the old file and no temporary one.
  CHECK_THROWS_AS(moepolicy::detail::write_file_atomically(path, "test",
                                                           [](std::ostream& os) {
                                                             os << "half of a new file";
                                                             throw std::runtime_error("disk full");
                                                           }),
                  std::runtime_error);
  CHECK(moepolicy::detail::read_all(path) == "the old file");
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  // A stream that fails is an error naming the file, with the same outcome.
  try {
    moepolicy::detail::write_file_atomically(path, "test", [](std::ostream& os) { os.setstate(std::ios::badbit); });
    FAIL("no error");
  } catch (const std::filesystem::filesystem_error& e) {
    CHECK(e.path1() == path);
    CHECK(std::string(e.what()).find("test: write failed") != std::string::npos);
  }
  CHECK(moepolicy::detail::read_all(path) == "the old file");
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  // A complete write replaces it.
  write_canonical(trace_a(), path);
  CHECK(read_file_bytes(path) == to_bytes(trace_a()));
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 1);
  std::filesystem::remove_all(dir);
}

TEST_CASE("is_canonical looks at the magic") {
  const bytes b = to_bytes(trace_a());
  CHECK(moepolicy::is_canonical(b));
  CHECK(moepolicy::is_canonical(std::span<const std::byte>(b).first(8)));
  CHECK_FALSE(moepolicy::is_canonical(std::span<const std::byte>(b).first(7)));
  CHECK_FALSE(moepolicy::is_canonical(std::as_bytes(std::span<const char>("{\"record_type\": 1}", 18))));
  CHECK_FALSE(moepolicy::is_canonical({}));
}

TEST_CASE("header errors") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";

  bytes b = good;
  b[0] = std::byte{'X'};
  CHECK(error_of(b) == f + "0: not a moepolicy canonical trace (the magic bytes \"MOEPTRC\\0\" are missing)");
  const std::string jsonl = "{\"record_type\": \"metadata\"}\n";
  CHECK(error_of(bytes(reinterpret_cast<const std::byte*>(jsonl.data()),
                       reinterpret_cast<const std::byte*>(jsonl.data()) + jsonl.size())) ==
        f + "0: not a moepolicy canonical trace (the magic bytes \"MOEPTRC\\0\" are missing)");
  CHECK(error_of(bytes{std::byte{'M'}, std::byte{'X'}}) ==
        f + "0: not a moepolicy canonical trace (the magic bytes \"MOEPTRC\\0\" are missing)");

  CHECK(error_of(bytes(good.begin(), good.begin() + 20)) ==
        f + "20: truncated header: the data ends after 20 of the header's 64 bytes");
  CHECK(error_of(bytes(good.begin(), good.begin() + 5)) ==
        f + "5: truncated header: the data ends after 5 of the header's 64 bytes");
  CHECK(error_of(bytes{}) == f + "0: truncated header: the data ends after 0 of the header's 64 bytes");

  b = good;
  put<std::uint32_t>(b, 8, 7);
  CHECK(error_of(b) == f + "8: unsupported format version 7 (this reader knows 1 and 2)");
  put<std::uint32_t>(b, 8, 0);
  CHECK(error_of(b) == f + "8: unsupported format version 0 (this reader knows 1 and 2)");
  put<std::uint32_t>(b, 8, 3);
  CHECK(error_of(b) == f + "8: unsupported format version 3 (this reader knows 1 and 2)");

  b = good;
  b[12] = std::byte{1};
  b[13] = std::byte{2};
  b[14] = std::byte{3};
  b[15] = std::byte{4};
  CHECK(error_of(b) == f + "12: byte-order mark reads 0x04030201, expected 0x01020304 (little-endian)");

  b = good;
  put<std::uint32_t>(b, 40, 7);
  CHECK(error_of(b) == f + "40: unknown header flags 0x00000006 (this reader knows 0x00000001 = has_scores)");

  b = good;
  put<std::uint32_t>(b, 44, 3);
  CHECK(error_of(b) == f + "44: reserved header field is 3, must be 0");

  b = good;
  put<std::uint32_t>(b, 28, 0);
  CHECK(error_of(b) == f + "28: num_layers must be in [1, 65536], got 0");
  b = good;
  put<std::uint32_t>(b, 32, 70000);
  CHECK(error_of(b) == f + "32: num_experts must be in [1, 65536], got 70000");
  b = good;
  put<std::uint32_t>(b, 36, 9);
  CHECK(error_of(b) == f + "36: top_k must be in [1, num_experts = 8], got 9");
  put<std::uint32_t>(b, 36, 0);
  CHECK(error_of(b) == f + "36: top_k must be in [1, num_experts = 8], got 0");

  b = good;
  put<std::uint64_t>(b, 48, 351);
  CHECK(error_of(b) == f + "48: payload size 351 is not a multiple of 8");
}

TEST_CASE("counts that overflow or exceed the data") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";

  bytes b = good;
  put<std::uint64_t>(b, 16, std::uint64_t{1} << 62);
  CHECK(error_of(b) == f + "16: num_rows 4611686018427387904 at 27 bytes per row overflows a 64-bit size");
  put<std::uint64_t>(b, 16, std::numeric_limits<std::uint64_t>::max());
  CHECK(error_of(b) == f + "16: num_rows 18446744073709551615 at 27 bytes per row overflows a 64-bit size");
  // With scores, the per-row size includes num_experts floats.
  put<std::uint32_t>(b, 40, 1);
  put<std::uint32_t>(b, 32, 65536);
  put<std::uint64_t>(b, 16, std::uint64_t{1} << 46);
  CHECK(error_of(b) == f + "16: num_rows 70368744177664 at 262171 bytes per row overflows a 64-bit size");

  b = good;
  put<std::uint64_t>(b, 16, 1000);
  CHECK(error_of(b) ==
        f + "16: num_rows 1000 and num_requests 2 need at least 27160 payload bytes, the header declares 352");
  b = good;
  put<std::uint32_t>(b, 24, 1000000000);
  CHECK(error_of(b) == f + "16: num_rows 5 and num_requests 1000000000 need at least 4000000312 payload bytes, the "
                           "header declares 352");
  // Huge counts with a payload size to match: refused before anything is allocated.
  b = good;
  put<std::uint64_t>(b, 16, std::uint64_t{1} << 40);
  put<std::uint64_t>(b, 48, std::uint64_t{1} << 60);
  CHECK(error_of(b) == f + "16: num_rows 1099511627776 exceeds 4294967295, the most rows a trace holds");
  put<std::uint64_t>(b, 16, 1000);
  CHECK(error_of(b) == f + "136: section length mismatch: REQU holds 20 bytes, the header's counts give 4000");
}

TEST_CASE("trailing garbage") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";
  bytes b = good;
  b.insert(b.end(), 3, std::byte{0});
  CHECK(error_of(b) == f + "416: trailing garbage: 3 bytes after the end of the payload the header declares");

  // Inside the declared payload, after the last section.
  b = good;
  b.insert(b.end(), 8, std::byte{0});
  put<std::uint64_t>(b, 48, 360);
  reseal(b);
  CHECK(error_of(b) == f + "416: trailing garbage: 8 bytes after the last section");
}

TEST_CASE("truncated columns and sections") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";
  const auto cut = [&](std::size_t n) {
    return error_of(bytes(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n)));
  };
  CHECK(cut(370) == f + "370: truncated column WGHT: it needs 40 bytes from byte 360, the data ends after 10");
  CHECK(cut(342) == f + "342: truncated column EXPT: it needs 24 bytes from byte 320, the data ends after 22");
  CHECK(cut(350) == f + "350: truncated column WGHT: the data ends inside its section header");
  CHECK(cut(100) == f + "100: truncated section META: it needs 41 bytes from byte 80, the data ends after 20");
  CHECK(cut(64) == f + "64: truncated section META: the data ends inside its section header");
  CHECK(cut(408) == f + "408: truncated column SCOR: the data ends inside its section header");
  // A payload size that agrees with the file but is too small for the sections in it.
  bytes b = bytes(good.begin(), good.begin() + 400);
  put<std::uint64_t>(b, 48, 336);
  CHECK(error_of(b) == f + "400: section SCOR is missing: the payload the header declares ends at byte 400");
  b.resize(384);
  put<std::uint64_t>(b, 48, 320);
  CHECK(error_of(b) == f + "352: section WGHT of 40 bytes runs past the end of the payload the header declares");
  // All sections present, but fewer bytes than the header declares.
  b = good;
  put<std::uint64_t>(b, 48, 400);
  CHECK(error_of(b) == f + "416: truncated data: the header declares 400 payload bytes, 352 follow it");
}

TEST_CASE("section errors") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";

  bytes b = good;
  put<std::uint64_t>(b, 312, 22);
  CHECK(error_of(b) == f + "312: section length mismatch: EXPT holds 22 bytes, the header's counts give 20");
  put<std::uint64_t>(b, 312, 18);
  CHECK(error_of(b) == f + "312: section length mismatch: EXPT holds 18 bytes, the header's counts give 20");
  b = good;
  put<std::uint64_t>(b, 408, 4);
  CHECK(error_of(b) == f + "408: section length mismatch: SCOR holds 4 bytes, the header's counts give 0");
  b = good;
  put<std::uint64_t>(b, 72, 10);
  CHECK(error_of(b) == f + "72: section length mismatch: META holds 10 bytes, the header's counts need at least 16");
  // A META longer than the payload.
  put<std::uint64_t>(b, 72, 1000);
  CHECK(error_of(b) == f + "72: section META of 1000 bytes runs past the end of the payload the header declares");
  put<std::uint64_t>(b, 72, std::numeric_limits<std::uint64_t>::max());
  CHECK(error_of(b) ==
        f + "72: section META of 18446744073709551615 bytes runs past the end of the payload the header declares");

  b = good;
  b[251] = std::byte{'X'};
  CHECK(error_of(b) == f + "248: expected section LAYR, found \"LAYX\"");
  b[248] = std::byte{0};
  CHECK(error_of(b) == f + "248: expected section LAYR, found \"\\x00AYX\"");

  b = good;
  put<std::uint32_t>(b, 252, 4);
  CHECK(error_of(b) == f + "252: section LAYR: element size is 4, expected 2");

  b = good;
  b[164] = std::byte{1};  // padding after REQU's 20 bytes
  CHECK(error_of(b) == f + "164: section REQU: padding byte is not zero");
}

TEST_CASE("checksum mismatch") {
  const bytes good = to_bytes(trace_a());
  bytes b = good;
  b[361] ^= std::byte{0x10};  // one bit of the first weight
  const auto hex = [](std::uint64_t v) { return moepolicy::detail::canonical::hex(v, 16); };
  const std::uint64_t stored = get<std::uint64_t>(b, 56);
  const std::uint64_t actual = moepolicy::detail::canonical::checksum(std::span<const std::byte>(b).subspan(64));
  CHECK(stored != actual);
  CHECK(error_of(b) == "t.mtrace: byte 56: checksum mismatch: the header records " + hex(stored) +
                           ", the payload hashes to " + hex(actual));
  // A flipped bit in the stored checksum itself.
  b = good;
  b[60] ^= std::byte{0x01};
  CHECK(error_of(b).starts_with("t.mtrace: byte 56: checksum mismatch: the header records "));
  // Every single-bit flip anywhere in the payload is caught (by the checksum or a
  // structural check).
  for (std::size_t i = 64; i < good.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      b = good;
      b[i] ^= std::byte{static_cast<unsigned char>(1u << bit)};
      REQUIRE(error_of(b) != "(no error)");
    }
  }
}

TEST_CASE("the version-1 checksum is FNV-1a over 64-bit little-endian words in four lanes") {
  // Reference: the file comment's definition, word by word.
  const auto reference = [](const bytes& payload) {
    const auto mix = [](std::uint64_t h, std::uint64_t w) { return (h ^ w) * 0x100000001b3ull; };
    std::uint64_t lane[4] = {0xcbf29ce484222325ull, 0xcbf29ce484222325ull, 0xcbf29ce484222325ull,
                             0xcbf29ce484222325ull};
    for (std::size_t i = 0; i * 8 < payload.size(); ++i)
      lane[i % 4] = mix(lane[i % 4], get<std::uint64_t>(payload, i * 8));
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (const std::uint64_t l : lane) h = mix(h, l);
    return h;
  };
  bytes payload(16, std::byte{0});
  payload[0] = std::byte{1};
  payload[15] = std::byte{0x80};
  constexpr std::uint64_t basis = 0xcbf29ce484222325ull, prime = 0x100000001b3ull;
  const std::uint64_t lanes[4] = {(basis ^ 1u) * prime, (basis ^ 0x8000000000000000ull) * prime, basis, basis};
  std::uint64_t h = basis;
  for (const std::uint64_t l : lanes) h = (h ^ l) * prime;
  CHECK(moepolicy::detail::canonical::fnv_lanes(payload) == h);
  CHECK(moepolicy::detail::canonical::checksum(payload, 1) == h);
  CHECK(reference(payload) == h);

  // Any length, fed whole or in odd pieces.
  std::mt19937 rng(3);
  for (std::size_t words : {0u, 1u, 3u, 4u, 5u, 8u, 13u, 64u, 101u}) {
    bytes p(words * 8);
    for (auto& x : p) x = static_cast<std::byte>(rng());
    CAPTURE(words);
    CHECK(moepolicy::detail::canonical::fnv_lanes(p) == reference(p));
    moepolicy::detail::canonical::fnv_lanes_state s;
    std::size_t at = 0;
    for (std::size_t piece = 1; at < p.size(); piece = piece * 3 % 41 + 1) {
      const std::size_t n = std::min(piece, p.size() - at);
      s.update(std::span<const std::byte>(p).subspan(at, n));
      at += n;
    }
    CHECK(s.value() == reference(p));
  }
}

TEST_CASE("the version-2 checksum is XXH64 with seed 0") {
  namespace c = moepolicy::detail::canonical;
  const auto of = [](std::string_view text) { return c::xxh64(std::as_bytes(std::span<const char>(text))); };
  // Reference values from the xxHash library (libxxhash 0.8.1, XXH64(data, size, 0)).
  CHECK(of("") == 0xef46db3751d8e999ull);
  CHECK(of("a") == 0xd24ec4f1a98c6e5bull);
  CHECK(of("abc") == 0x44bc2cf5ad770999ull);
  CHECK(of("0123456789abcdef0123456789abcdefxyz") == 0xe83667402afe0154ull);
  bytes ramp(768);
  for (std::size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<std::byte>(i % 256);
  CHECK(c::xxh64(ramp) == 0x8e03c838c596036full);
  CHECK(c::checksum(ramp) == 0x8e03c838c596036full);
  CHECK(c::checksum(ramp, 2) == 0x8e03c838c596036full);

  // Fed in pieces of any size, it gives the same value.
  std::mt19937 rng(5);
  for (std::size_t n : {0u, 1u, 7u, 31u, 32u, 33u, 64u, 100u, 1000u}) {
    bytes p(n);
    for (auto& x : p) x = static_cast<std::byte>(rng());
    CAPTURE(n);
    c::xxh64_state s;
    std::size_t at = 0;
    for (std::size_t piece = 1; at < p.size(); piece = piece * 3 % 41 + 1) {
      const std::size_t k = std::min(piece, p.size() - at);
      s.update(std::span<const std::byte>(p).subspan(at, k));
      at += k;
    }
    CHECK(s.value() == c::xxh64(p));
  }
}

TEST_CASE("META errors") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";
  bytes b = good;
  put<std::uint32_t>(b, 80, 100);
  reseal(b);
  CHECK(error_of(b) == f + "80: section META: the model name of 100 bytes runs past the end of the section");
  b = good;
  put<std::uint32_t>(b, 113, 5);
  reseal(b);
  CHECK(error_of(b) == f + "113: section META: request name 1 of 5 bytes runs past the end of the section");
  // One request fewer in the header: the second name is left over.
  b = good;
  put<std::uint32_t>(b, 24, 1);
  CHECK(error_of(b) == f + "113: section META: 8 bytes after the last request name");
}

TEST_CASE("rows that routing_trace rejects name the row and its entry") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";
  bytes b = good;
  b[296 + 2] = std::byte{7};
  reseal(b);
  CHECK(error_of(b) == f + "298: row 2: phase code 7 is neither prefill (0) nor decode (1)");

  b = good;
  b[296 + 1] = std::byte{1};
  reseal(b);
  CHECK(error_of(b) == f + "297: row 1: step 0 of request 0 mixes prefill and decode rows");

  b = good;
  put<std::uint16_t>(b, 320 + 2 * 7, 8);  // row 3, second id
  reseal(b);
  CHECK(error_of(b) == f + "334: row 3: expert id 8 >= num_experts 8");

  b = good;
  put<std::uint16_t>(b, 320 + 2 * 3, 2);  // row 1: {2, 2}
  reseal(b);
  CHECK(error_of(b) == f + "326: row 1: expert id 2 selected twice");

  b = good;
  put_float(b, 360 + 4 * 9, std::numeric_limits<float>::quiet_NaN());  // row 4, second weight
  reseal(b);
  CHECK(error_of(b) == f + "396: row 4: gate weight nan of expert 0 is not a finite non-negative number");
  put_float(b, 360 + 4 * 9, -0.5f);
  reseal(b);
  CHECK(error_of(b) == f + "396: row 4: gate weight -0.5 of expert 0 is not a finite non-negative number");

  b = good;
  put<std::uint32_t>(b, 144 + 4 * 4, 2);  // row 4: request 2 of 2
  reseal(b);
  CHECK(error_of(b) == f + "160: row 4: request 2 does not exist (2 requests)");

  b = good;
  put<std::uint16_t>(b, 264 + 2 * 4, 4);  // row 4: layer 4 of 4
  reseal(b);
  CHECK(error_of(b) == f + "272: row 4: layer 4 >= num_layers 4");

  b = good;
  put<std::uint32_t>(b, 224 + 4 * 1, 0);  // row 1 repeats row 0's key
  reseal(b);
  CHECK(error_of(b) == f + "148: row 1 repeats the (request, step, layer, position) of the row before");

  b = good;
  put<std::uint32_t>(b, 184 + 4 * 3, 0);  // row 3 moves to step 0: out of order
  reseal(b);
  CHECK(error_of(b) == f + "156: row 3 is out of (request, step, layer, position) order");

  // A row check anywhere comes before an order problem earlier on, as in from_sorted.
  put<std::uint16_t>(b, 320 + 2 * 9, 9);  // row 4, second id
  reseal(b);
  CHECK(error_of(b) == f + "338: row 4: expert id 9 >= num_experts 8");
}

TEST_CASE("a non-finite router score names its entry") {
  bytes b = to_bytes(trace_b());
  // Find SCOR by walking the sections.
  std::size_t at = 64;
  while (std::memcmp(b.data() + at, "SCOR", 4) != 0)
    at += 16 + ((get<std::uint64_t>(b, at + 8) + 7) & ~std::uint64_t{7});
  const std::size_t data = at + 16;
  put_float(b, data + 4 * (4 * 2 + 3), std::numeric_limits<float>::infinity());  // row 2, expert 3
  reseal(b);
  CHECK(error_of(b, "s") == "s: byte " + std::to_string(data + 44) + ": row 2: router score inf is not finite");
}

TEST_CASE("file errors") {
  const auto dir = temp_dir();
  const auto missing = dir / "missing.mtrace";
  CHECK_THROWS_WITH_AS((void)read_canonical(missing),
                       (missing.string() + ": cannot open: No such file or directory").c_str(), parse_error);
  CHECK_THROWS_WITH_AS((void)read_canonical(dir), (dir.string() + ": is a directory, not a file").c_str(), parse_error);

  // Errors in a file name the file.
  bytes b = to_bytes(trace_a());
  put<std::uint32_t>(b, 8, 3);
  const auto path = dir / "v3.mtrace";
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
  CHECK_THROWS_WITH_AS((void)read_canonical(path),
                       (path.string() + ": byte 8: unsupported format version 3 (this reader knows 1 and 2)").c_str(),
                       parse_error);
  try {
    (void)read_canonical(path);
  } catch (const parse_error& e) {
    CHECK(e.file() == path.string());
    CHECK(e.where().unit == moepolicy::file_location::kind::byte_offset);
    CHECK(e.where().value == 8);
    CHECK(e.problem() == "unsupported format version 3 (this reader knows 1 and 2)");
  }

  // Writing where no file can be made.
  const auto nowhere = dir / "no" / "such" / "dir" / "t.mtrace";
  try {
    write_canonical(trace_a(), nowhere);
    FAIL("write_canonical did not throw");
  } catch (const std::filesystem::filesystem_error& e) {
    CHECK(e.path1() == nowhere);
    CHECK(std::string(e.what()).find("moepolicy::write_canonical: cannot open for writing") != std::string::npos);
    CHECK(std::string(e.what()).find(nowhere.string()) != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("writer errors") {
  std::ostringstream os;
  CHECK_THROWS_WITH_AS(write_canonical(routing_trace{}, os),
                       "moepolicy::write_canonical: num_layers must be in [1, 65536], got 0",
                       moepolicy::invalid_argument);
  CHECK(os.str().empty());
  std::ostringstream failed;
  failed.setstate(std::ios::badbit);
  CHECK_THROWS_AS(write_canonical(trace_a(), failed), std::ios_base::failure);
}

TEST_CASE("a stream read names the stream and reads the rest of it") {
  const bytes b = to_bytes(trace_a());
  std::string text = "prefix";
  text.append(reinterpret_cast<const char*>(b.data()), b.size());
  std::istringstream in(text, std::ios::binary);
  in.ignore(6);
  moepolicy::test::check_same_trace(read_canonical(in, "pipe"), trace_a());
  std::istringstream bad(text.substr(6, 100), std::ios::binary);
  CHECK_THROWS_WITH_AS((void)read_canonical(bad, "pipe"),
                       "pipe: byte 100: truncated section META: it needs 41 bytes from byte 80, the data ends after 20",
                       parse_error);
}

// ---------------------------------------------------------------------------------------
// The mapped reader: canonical_file, its walk, and the streaming writers.

namespace {

using moepolicy::batch_view;
using moepolicy::canonical_file;
using moepolicy::step_ref;

/// What a walk reports, flattened for comparison: one line per call.
struct walk_log {
  std::vector<std::string> lines;
  void request(std::uint32_t q) { lines.push_back("request " + std::to_string(q)); }
  void batch(const batch_view& b) {
    std::string s = "batch " + std::to_string(b.ref.request) + " " + std::to_string(b.ref.step) + " " +
                    std::to_string(b.ref.layer) + " " + std::to_string(static_cast<int>(b.ref.kind)) + " " +
                    std::to_string(b.ref.first_row) + " " + std::to_string(b.ref.num_rows) + " k" +
                    std::to_string(b.top_k) + " |";
    for (auto p : b.positions) s += " " + std::to_string(p);
    s += " |";
    for (auto e : b.experts) s += " " + std::to_string(e);
    s += " |";
    for (auto w : b.weights) s += " " + std::to_string(std::bit_cast<std::uint32_t>(w));
    s += " |";
    for (auto w : b.scores) s += " " + std::to_string(std::bit_cast<std::uint32_t>(w));
    lines.push_back(s);
  }
  void step_end(const step_ref& st) {
    lines.push_back("end " + std::to_string(st.request) + " " + std::to_string(st.step) + " " +
                    std::to_string(static_cast<int>(st.kind)) + " " + std::to_string(st.first_batch) + " " +
                    std::to_string(st.num_batches));
  }
};

/// The calls a replay over `t` makes (the reference for the walk).
walk_log reference_walk(const routing_trace& t) {
  walk_log log;
  for (std::size_t q = 0; q < t.requests().size(); ++q) {
    log.request(static_cast<std::uint32_t>(q));
    for (const auto& st : t.steps_of(t.requests()[q])) {
      for (const auto& b : t.batches_of(st)) log.batch(t.view(b));
      log.step_end(st);
    }
  }
  return log;
}

walk_log file_walk(const canonical_file& f, std::uint64_t chunk) {
  walk_log log;
  f.for_each_batch([&](std::uint32_t q) { log.request(q); }, [&](const batch_view& b) { log.batch(b); },
                   [&](const step_ref& s) { log.step_end(s); }, chunk);
  return log;
}

/// The message of the parse_error a walk of `b` throws, or "(no error)".
std::string walk_error_of(const bytes& b, std::string_view name = "t.mtrace") {
  try {
    const canonical_file f(std::span<const std::byte>(b), name);
    const auto nothing = [](const auto&) {};
    f.for_each_batch(nothing, nothing, nothing, 2);
  } catch (const parse_error& e) {
    return e.what();
  }
  return "(no error)";
}

using moepolicy::test::peak_rss_bytes;
using moepolicy::test::reset_peak_rss;
using moepolicy::test::sanitized;

}  // namespace

TEST_CASE("canonical_file walks every batch as routing_trace holds it, in place, decoded and in any chunk") {
  for (const routing_trace& t : {trace_a(), trace_b(), trace_random()}) {
    const walk_log want = reference_walk(t);
    const bytes b = to_bytes(t);
    const canonical_file aligned(std::span<const std::byte>(b), "t");
    CHECK(aligned.num_rows() == t.num_rows());
    CHECK(aligned.version() == 2);
    CHECK(aligned.info().model == t.info().model);
    REQUIRE(aligned.request_names().size() == t.requests().size());
    // An odd address: the columns are decoded a chunk at a time.
    bytes shifted(b.size() + 1);
    std::memcpy(shifted.data() + 1, b.data(), b.size());
    const canonical_file odd(std::span<const std::byte>(shifted).subspan(1), "t");
    for (const std::uint64_t chunk :
         {std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{7}, canonical_file::default_chunk_rows}) {
      CAPTURE(chunk);
      CHECK(file_walk(aligned, chunk).lines == want.lines);
      CHECK(file_walk(odd, chunk).lines == want.lines);
    }
  }
}

TEST_CASE("canonical_file walks the batches of a range of rows as the whole walk passes them") {
  for (const routing_trace& t : {trace_a(), trace_b(), trace_random()}) {
    const bytes b = to_bytes(t);
    bytes shifted(b.size() + 1);
    std::memcpy(shifted.data() + 1, b.data(), b.size());
    const canonical_file aligned(std::span<const std::byte>(b), "t.mtrace");
    const canonical_file odd(std::span<const std::byte>(shifted).subspan(1), "t.mtrace");
    // Rows are checked by a whole walk first.
    CHECK_THROWS_WITH_AS(aligned.for_each_batch_in_rows(0, t.num_rows(), [](const batch_view&) {}),
                         "moepolicy::canonical_file::for_each_batch_in_rows: the rows are checked by a walk of the "
                         "whole file, and none has completed yet on t.mtrace",
                         moepolicy::invalid_argument);
    walk_log whole;
    std::vector<std::uint64_t> starts;  // every batch's first row
    aligned.for_each_batch([](std::uint32_t) {},
                           [&](const batch_view& v) {
                             whole.batch(v);
                             starts.push_back(v.ref.first_row);
                           },
                           [](const step_ref&) {});
    static_cast<void>(file_walk(odd, 5));
    starts.push_back(t.num_rows());
    // Any cut at batch starts, any chunk: the pieces' batches, in order, are the walk's.
    for (const std::size_t cut : {std::size_t{1}, std::size_t{2}, std::size_t{3}}) {
      for (const std::uint64_t chunk : {std::uint64_t{1}, std::uint64_t{4}, canonical_file::default_chunk_rows}) {
        CAPTURE(cut);
        CAPTURE(chunk);
        walk_log a, o;
        for (std::size_t i = 0; i + 1 < starts.size(); i += cut) {
          const std::uint64_t first = starts[i], last = starts[std::min(i + cut, starts.size() - 1)];
          aligned.for_each_batch_in_rows(
              first, last, [&](const batch_view& v) { a.batch(v); }, chunk);
          odd.for_each_batch_in_rows(
              first, last, [&](const batch_view& v) { o.batch(v); }, chunk);
        }
        CHECK(a.lines == whole.lines);
        CHECK(o.lines == whole.lines);
      }
    }
    aligned.for_each_batch_in_rows(starts[1], starts[1],
                                   [](const batch_view&) { FAIL("an empty range has no batch"); });
    // A bound inside a batch, or past the rows, is refused.
    for (std::size_t i = 0; i + 1 < starts.size(); ++i) {
      if (starts[i + 1] - starts[i] < 2) continue;
      const std::uint64_t inside = starts[i] + 1;
      CHECK_THROWS_WITH_AS(aligned.for_each_batch_in_rows(inside, t.num_rows(), [](const batch_view&) {}),
                           ("moepolicy::canonical_file::for_each_batch_in_rows: row " + std::to_string(inside) +
                            " of t.mtrace is inside a batch, not at its start")
                               .c_str(),
                           moepolicy::invalid_argument);
      break;
    }
    CHECK_THROWS_WITH_AS(
        aligned.for_each_batch_in_rows(0, t.num_rows() + 1, [](const batch_view&) {}),
        ("moepolicy::canonical_file::for_each_batch_in_rows: the rows [0, " + std::to_string(t.num_rows() + 1) +
         ") must lie within the " + std::to_string(t.num_rows()) + " rows of t.mtrace")
            .c_str(),
        moepolicy::invalid_argument);
  }
}

TEST_CASE("canonical_file reads a file through its map as read_canonical does") {
  const auto dir = temp_dir();
  const auto path = dir / "r.mtrace";
  const routing_trace t = trace_random();
  write_canonical(t, path);
  canonical_file f(path);
  CHECK(f.name() == path.string());
  CHECK(file_walk(f, 100).lines == reference_walk(t).lines);
  moepolicy::test::check_same_trace(f.read(), t);
  // Rewriting gives the writer's bytes, from version 1 too.
  const auto v1 = std::filesystem::path(MOEPOLICY_TEST_DATA) / "trace" / "small-v1.mtrace";
  const auto v2 = std::filesystem::path(MOEPOLICY_TEST_DATA) / "trace" / "small.mtrace";
  canonical_file(v1).write_current_version(dir / "from-v1.mtrace");
  CHECK(read_file_bytes(dir / "from-v1.mtrace") == read_file_bytes(v2));
  canonical_file(path).write_current_version(dir / "copy.mtrace");
  CHECK(read_file_bytes(dir / "copy.mtrace") == read_file_bytes(path));
  // A missing file names itself.
  CHECK_THROWS_WITH_AS(canonical_file(dir / "missing.mtrace"),
                       ((dir / "missing.mtrace").string() + ": cannot open: No such file or directory").c_str(),
                       parse_error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a walk names the byte and row of a bad row, checking rows in file order") {
  const bytes good = to_bytes(trace_a());
  const std::string f = "t.mtrace: byte ";
  CHECK(walk_error_of(good) == "(no error)");
  bytes b = good;
  b[296 + 2] = std::byte{7};
  reseal(b);
  CHECK(walk_error_of(b) == f + "298: row 2: phase code 7 is neither prefill (0) nor decode (1)");
  b = good;
  b[296 + 1] = std::byte{1};
  reseal(b);
  CHECK(walk_error_of(b) == f + "297: row 1: step 0 of request 0 mixes prefill and decode rows");
  b = good;
  put<std::uint16_t>(b, 320 + 2 * 3, 2);
  reseal(b);
  CHECK(walk_error_of(b) == f + "326: row 1: expert id 2 selected twice");
  b = good;
  put_float(b, 360 + 4 * 9, -0.5f);
  reseal(b);
  CHECK(walk_error_of(b) == f + "396: row 4: gate weight -0.5 of expert 0 is not a finite non-negative number");
  b = good;
  put<std::uint32_t>(b, 224 + 4 * 1, 0);
  reseal(b);
  CHECK(walk_error_of(b) == f + "148: row 1 repeats the (request, step, layer, position) of the row before");
  b = good;
  put<std::uint32_t>(b, 184 + 4 * 3, 0);
  reseal(b);
  CHECK(walk_error_of(b) == f + "156: row 3 is out of (request, step, layer, position) order");
  // Rows are checked in file order: the order problem of row 3 comes before the bad id of row 4.
  put<std::uint16_t>(b, 320 + 2 * 9, 9);
  reseal(b);
  CHECK(walk_error_of(b) == f + "156: row 3 is out of (request, step, layer, position) order");
  // The checksum is checked when the file opens.
  b = good;
  b[300] ^= std::byte{1};
  CHECK(walk_error_of(b).find("checksum mismatch") != std::string::npos);
}

TEST_CASE("write_canonical_rows writes what write_canonical writes, and refuses bad rows") {
  const routing_trace t = trace_random();
  const auto dir = temp_dir();
  const auto& c = t.columns();
  const std::uint64_t k = t.info().top_k;
  const auto fill = [&](std::uint64_t first, std::uint64_t n, moepolicy::trace_columns& out) {
    const auto slice = [&](const auto& v, std::uint64_t w, auto& to) {
      to.assign(v.begin() + static_cast<std::ptrdiff_t>(first * w),
                v.begin() + static_cast<std::ptrdiff_t>((first + n) * w));
    };
    slice(c.request, 1, out.request);
    slice(c.step, 1, out.step);
    slice(c.position, 1, out.position);
    slice(c.layer, 1, out.layer);
    slice(c.kind, 1, out.kind);
    slice(c.experts, k, out.experts);
    slice(c.weights, k, out.weights);
    out.scores.clear();
  };
  std::vector<std::string> names;
  for (const auto& r : t.requests()) names.push_back(r.name);
  for (const std::uint64_t chunk : {std::uint64_t{1}, std::uint64_t{5}, std::uint64_t{1000}}) {
    moepolicy::write_canonical_rows(dir / "rows.mtrace", t.info(), names, t.num_rows(), fill, chunk);
    CHECK(read_file_bytes(dir / "rows.mtrace") == to_bytes(t));
  }
  const auto bad = [&](std::uint64_t first, std::uint64_t n, moepolicy::trace_columns& out) {
    fill(first, n, out);
    if (first <= 3 && 3 < first + n) out.experts[(3 - first) * k] = 40;
  };
  std::filesystem::remove(dir / "rows.mtrace");
  CHECK_THROWS_WITH_AS(moepolicy::write_canonical_rows(dir / "rows.mtrace", t.info(), names, t.num_rows(), bad, 2),
                       "moepolicy::write_canonical_rows: row 3: expert id 40 >= num_experts 32",
                       moepolicy::invalid_argument);
  CHECK(!std::filesystem::exists(dir / "rows.mtrace"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a 10^7-row file: a walk holds a bounded window of it, a whole read at most 1.3 times it") {
  // A synthetic decode trace (4 layers, 8 experts, top-1; 21 bytes a row), generated into
  // the working folder and removed afterwards. Sanitizer builds walk 10^6 rows and skip
  // the memory figure (their shadow memory is not the reader's).
  const std::uint64_t rows = sanitized ? 1'000'000 : 10'000'000;
  const auto path = std::filesystem::current_path() / "canonical_walk_1e7.mtrace";
  moepolicy::test::write_large_decode_file(path, rows);
  const auto file_bytes = static_cast<long long>(std::filesystem::file_size(path));
  CHECK(file_bytes == static_cast<long long>(64 + 9 * 16 + 32 + 21 * rows));
  const bool measured = !sanitized && reset_peak_rss() && peak_rss_bytes() > 0;
  const long long before = measured ? peak_rss_bytes() : 0;
  std::uint64_t batches = 0, steps = 0, sum = 0;
  {
    const canonical_file f(path);
    f.for_each_batch([](std::uint32_t) {},
                     [&](const batch_view& b) {
                       ++batches;
                       sum += b.experts[0];
                     },
                     [&](const step_ref&) { ++steps; });
  }
  std::uint64_t want = 0;
  for (std::uint64_t r = 0; r < rows; ++r) want += moepolicy::test::large_decode_expert(r);
  CHECK(batches == rows);
  CHECK(steps == rows / 4);
  CHECK(sum == want);
  if (measured) {
    const long long grew = peak_rss_bytes() - before;
    MESSAGE("walk of a " << file_bytes << "-byte file: peak resident memory grew by " << grew << " bytes");
    CHECK(grew < 64ll << 20);  // the file is 210 MB; the walk holds a chunk (about 5 MB), the checksum an 8 MiB piece
    // Chunks of 100 rows span less than a page of most columns: the pages they touch are
    // still given back.
    static_cast<void>(reset_peak_rss());
    const long long small_before = peak_rss_bytes();
    std::uint64_t small_batches = 0;
    {
      const canonical_file f(path);
      f.for_each_batch([](std::uint32_t) {}, [&](const batch_view&) { ++small_batches; }, [](const step_ref&) {}, 100);
    }
    CHECK(small_batches == rows);
    const long long small_grew = peak_rss_bytes() - small_before;
    MESSAGE("walk in chunks of 100 rows: peak resident memory grew by " << small_grew << " bytes");
    CHECK(small_grew < 64ll << 20);
    // Reading the file whole holds its columns (each decoded in pieces whose pages are given
    // back) and the step index; a decode trace's batches are its rows (no batch index) and
    // the layer index is built on first use: the bound is 1.3 times the file.
    static_cast<void>(reset_peak_rss());
    const long long whole_before = peak_rss_bytes();
    {
      canonical_file f(path);
      const routing_trace t = f.read();
      const long long whole_grew = peak_rss_bytes() - whole_before;
      MESSAGE("reading the file whole: peak resident memory grew by "
              << whole_grew << " bytes, " << static_cast<double>(whole_grew) / static_cast<double>(file_bytes)
              << " times the file");
      CHECK(whole_grew * 10 <= file_bytes * 13);
      CHECK(t.num_rows() == rows);
      CHECK(t.batches().size() == rows);
      CHECK(t.steps().size() == rows / 4);
      CHECK(t.layer_batches(3).size() == rows / 4);
      CHECK(t.batches()[rows - 1].first_row == rows - 1);
      CHECK(t.experts(rows - 1)[0] == moepolicy::test::large_decode_expert(rows - 1));
    }
  } else {
    MESSAGE("peak resident memory not measured (sanitizer build or no /proc)");
  }
  std::filesystem::remove(path);
}

TEST_CASE("canonical_file's columns in place are the trace's once a walk has checked them; none at an odd address") {
  for (const routing_trace& t : {trace_a(), trace_b(), trace_random()}) {
    const bytes b = to_bytes(t);
    const canonical_file aligned(std::span<const std::byte>(b), "t.mtrace");
    CHECK_THROWS_WITH_AS(static_cast<void>(aligned.columns()),
                         "moepolicy::canonical_file::columns: the rows are checked by a walk of the whole file, and "
                         "none has completed yet on t.mtrace",
                         moepolicy::invalid_argument);
    const auto nothing = [](const auto&) {};
    aligned.for_each_batch(nothing, nothing, nothing);
    const auto c = aligned.columns();
    REQUIRE(c.has_value());
    const auto as_vector = [](auto s) { return std::vector<typename decltype(s)::value_type>(s.begin(), s.end()); };
    const auto& want = t.columns();
    CHECK(as_vector(c->request) == want.request);
    CHECK(as_vector(c->step) == want.step);
    CHECK(as_vector(c->position) == want.position);
    CHECK(as_vector(c->layer) == want.layer);
    CHECK(as_vector(c->kind) == want.kind);
    CHECK(as_vector(c->experts) == want.experts);
    CHECK(as_vector(c->weights) == want.weights);
    CHECK(as_vector(c->scores) == want.scores);
    aligned.release_columns();  // a buffer, not a map: nothing to give back, nothing changes
    CHECK(as_vector(aligned.columns()->experts) == want.experts);
    bytes shifted(b.size() + 1);
    std::memcpy(shifted.data() + 1, b.data(), b.size());
    const canonical_file odd(std::span<const std::byte>(shifted).subspan(1), "t.mtrace");
    odd.for_each_batch(nothing, nothing, nothing);
    CHECK_FALSE(odd.columns().has_value());
  }
}

TEST_CASE("a file under the size kept mapped whole is read whole within 1.3 times it") {
  // 10^6 rows of the synthetic decode trace: 21 MB, under mapped_file::keep_whole, whose
  // pages a walk keeps. A whole read (`read_canonical`: access::copy) gives them back as
  // it reads them, in the checksum pass and as it copies the columns, so that the file is
  // not held twice (it was: about 2 times the file).
  const std::uint64_t rows = 1'000'000;
  const auto path = std::filesystem::current_path() / "canonical_whole_1e6.mtrace";
  moepolicy::test::write_large_decode_file(path, rows);
  const auto file_bytes = static_cast<long long>(std::filesystem::file_size(path));
  REQUIRE(static_cast<std::uint64_t>(file_bytes) < moepolicy::detail::mapped_file::keep_whole);
  if (!sanitized && reset_peak_rss() && peak_rss_bytes() > 0) {
    const long long before = peak_rss_bytes();
    {
      const routing_trace t = moepolicy::read_canonical(path);
      const long long grew = peak_rss_bytes() - before;
      MESSAGE("read_canonical of a " << file_bytes << "-byte file: peak resident memory grew by " << grew << " bytes, "
                                     << static_cast<double>(grew) / static_cast<double>(file_bytes)
                                     << " times the file");
      CHECK(grew * 10 <= file_bytes * 13);
      CHECK(t.num_rows() == rows);
    }
  } else {
    MESSAGE("peak resident memory not measured (sanitizer build or no /proc)");
  }
  std::filesystem::remove(path);
}
