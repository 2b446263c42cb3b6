// moepolicy/trace/canonical.hpp — the project's canonical binary trace format (".mtrace"):
// writer, reader and format detection. Standard library only.
//
// A canonical trace stores a `routing_trace` column by column, as raw little-endian
// arrays behind a fixed header, so that loading is a bounds check and a copy per column
// instead of text parsing; the reader still re-validates every row (through
// `routing_trace::from_sorted`), so a file can never produce an invalid trace.
//
// File layout, format version 2 (version 1 differs only in its checksum, below).
// Integers are unsigned little-endian, floats IEEE-754
// binary32 little-endian; offsets are from the start of the file. Every section starts
// at a multiple of 8, so each column is aligned for its element type in a buffer aligned
// to 8 (a memory map, `numpy.frombuffer(data, "<f4", count, offset)`).
//
//   Header, 64 bytes:
//     0  u8[8]  magic "MOEPTRC\0" (4D 4F 45 50 54 52 43 00)
//     8  u32    format version: 2 (1 in files of version 1)
//    12  u32    byte-order mark 0x01020304 (file bytes 04 03 02 01)
//    16  u64    num_rows R
//    24  u32    num_requests Q
//    28  u32    num_layers L, in [1, 65536]
//    32  u32    num_experts E, in [1, 65536]
//    36  u32    top_k k, in [1, E]
//    40  u32    flags: bit 0 = has_scores; every other bit 0
//    44  u32    reserved, 0
//    48  u64    payload bytes P: the bytes after the header (file size − 64), a multiple of 8
//    56  u64    checksum of the P payload bytes (below)
//
//   Payload: nine sections, always all nine, in this order. Each section is
//     +0   u8[4]  tag, ASCII
//     +4   u32    element size in bytes
//     +8   u64    data bytes n (without padding)
//     +16  the n data bytes, then 0 to 7 zero bytes up to the next multiple of 8
//
//     tag   element  data                                                    n
//     META  1        strings, each a u32 byte length then the bytes (UTF-8,   ≥ 8 + 4·Q
//                    no terminator): model, source, then the Q request names
//                    in request order
//     REQU  4        u32 request index of each row, < Q                      4·R
//     STEP  4        u32 step of each row                                    4·R
//     POSN  4        u32 token position of each row                          4·R
//     LAYR  2        u16 layer of each row, < L                              2·R
//     KIND  1        u8 phase of each row: 0 prefill, 1 decode               R
//     EXPT  2        u16 expert ids, k per row, row-major, each < E          2·R·k
//     WGHT  4        f32 gate weights, k per row, row-major, finite, ≥ 0     4·R·k
//     SCOR  4        f32 router scores, E per row, row-major, finite;        4·R·E, or 0
//                    empty unless has_scores
//
//   Rows are in (request, step, layer, position) order, as `routing_trace` holds them,
//   each (request, step, layer, position) at most once, and all rows of one step of a
//   request have the same phase. Nothing follows the padding of SCOR.
//
//   Checksum, version 2: XXH64 of the P payload bytes with a seed of 0 (xxhash.com; in Python
//   `xxhash.xxh64(payload).intdigest()`), a strong 64-bit hash that runs near memory
//   speed: every change of the payload is missed with a chance of about 2^-64.
//
//   Checksum, version 1 (read, never written): FNV-1a over 64-bit words in four
//   interleaved lanes. With B = 0xcbf29ce484222325 and mix(h, w) = (h XOR w) ×
//   0x100000001b3 mod 2^64: lanes h0..h3 start at B; the i-th 8-byte little-endian word w
//   of the payload (i from 0) updates lane i mod 4: h[i mod 4] = mix(h[i mod 4], w); the
//   checksum is mix(mix(mix(mix(B, h0), h1), h2), h3). It catches any change confined to
//   one word, but not all changes of two: flipping the top bit of two words of the same
//   lane flips the top bit of the lane twice and cancels (sign flips of two floats go
//   unnoticed). `canonical_checksum_name` names each version's check; `moepolicy
//   inspect` prints it, and `moepolicy convert` rewrites a version-1 file as version 2.
//
// The writer is deterministic: equal traces give byte-identical files (always of version
// 2), and every version-2 file the reader accepts is exactly what the writer writes for
// the trace it reads.
//
// The reader checks, in this order, and reports the first problem: the magic, the header
// size, version (1 or 2), byte-order mark, flags, reserved field and shape fields; the counts
// against the declared payload size (with overflow checks); bytes past the declared
// payload; each section's tag, element size, length (from the counts) and zero padding,
// within the bytes present (a short file names the cut section); the checksum; the
// strings of META; then every row, through `routing_trace::from_sorted`.
//
// Errors: every problem with a file is a `parse_error` naming the file (or the name a
// caller gave a stream or buffer) and the byte offset of the offending field or row
// entry; no count is used to allocate before it has been checked against the bytes
// actually present.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <istream>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/detail/file_input.hpp"
#include "moepolicy/detail/file_output.hpp"
#include "moepolicy/detail/mapped_file.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// The columns of a canonical file used in place (`canonical_file::columns`), as
/// `trace_columns` holds them: one entry per row (ids and weights: `top_k` per row; scores:
/// `num_experts` per row, or none).
struct canonical_columns {
  std::span<const std::uint32_t> request;
  std::span<const std::uint32_t> step;
  std::span<const std::uint32_t> position;
  std::span<const layer_id> layer;
  std::span<const phase> kind;
  std::span<const expert_id> experts;
  std::span<const float> weights;
  std::span<const float> scores;
};

/// The format version this header writes.
inline constexpr std::uint32_t canonical_format_version = 2;

/// The oldest format version this header reads.
inline constexpr std::uint32_t canonical_oldest_version = 1;

/// The checksum of a canonical format version, as `moepolicy inspect` names it, or an
/// empty view for a version this header does not know.
[[nodiscard]] constexpr std::string_view canonical_checksum_name(std::uint32_t version) noexcept {
  switch (version) {
    case 1:
      return "FNV-1a in four 64-bit lanes (weak: two flips of the same high bit cancel)";
    case 2:
      return "XXH64";
    default:
      return {};
  }
}

namespace detail::canonical {

inline constexpr std::size_t header_size = 64;
inline constexpr std::size_t section_header_size = 16;
inline constexpr std::array<char, 8> magic = {'M', 'O', 'E', 'P', 'T', 'R', 'C', '\0'};
inline constexpr std::uint32_t byte_order_mark = 0x01020304u;
inline constexpr std::uint32_t flag_has_scores = 1u;
inline constexpr std::uint64_t fnv_offset_basis = 0xcbf29ce484222325ull;
inline constexpr std::uint64_t fnv_prime = 0x100000001b3ull;
inline constexpr std::uint64_t xxh_prime1 = 0x9E3779B185EBCA87ull;
inline constexpr std::uint64_t xxh_prime2 = 0xC2B2AE3D27D4EB4Full;
inline constexpr std::uint64_t xxh_prime3 = 0x165667B19E3779F9ull;
inline constexpr std::uint64_t xxh_prime4 = 0x85EBCA77C2B2AE63ull;
inline constexpr std::uint64_t xxh_prime5 = 0x27D4EB2F165667C5ull;

/// Offsets of the header fields.
namespace field {
inline constexpr std::size_t version = 8, byte_order = 12, num_rows = 16, num_requests = 24, num_layers = 28,
                             num_experts = 32, top_k = 36, flags = 40, reserved = 44, payload_bytes = 48, checksum = 56;
}  // namespace field

enum section : std::size_t { meta, request, step, position, layer, kind, experts, weights, scores, num_sections };
inline constexpr std::array<std::string_view, num_sections> tags = {"META", "REQU", "STEP", "POSN", "LAYR",
                                                                    "KIND", "EXPT", "WGHT", "SCOR"};
inline constexpr std::array<std::uint32_t, num_sections> element_size = {1, 4, 4, 4, 2, 1, 2, 4, 4};

[[nodiscard]] constexpr std::uint64_t pad8(std::uint64_t n) noexcept { return (n + 7u) & ~std::uint64_t{7}; }

template <class U>
[[nodiscard]] constexpr U byteswap(U v) noexcept {
  U out = 0;
  for (std::size_t i = 0; i < sizeof(U); ++i) {
    out = static_cast<U>((out << 8) | (v & 0xffu));
    v = static_cast<U>(v >> 8);
  }
  return out;
}

/// The unsigned integer of `T`'s size, the way a column element is stored.
template <class T>
using stored_t =
    std::conditional_t<sizeof(T) == 1, std::uint8_t,
                       std::conditional_t<sizeof(T) == 2, std::uint16_t,
                                          std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>>>;

/// Reads a little-endian unsigned integer from unaligned bytes.
template <class U>
[[nodiscard]] inline U load(const std::byte* p) noexcept {
  U v;
  std::memcpy(&v, p, sizeof v);
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  return v;
}

/// Writes a little-endian unsigned integer to unaligned bytes.
template <class U>
inline void store(std::byte* p, U v) noexcept {
  if constexpr (std::endian::native == std::endian::big) v = byteswap(v);
  std::memcpy(p, &v, sizeof v);
}

/// The version-1 payload checksum (see the file comment), fed in pieces of any size.
class fnv_lanes_state {
 public:
  void update(std::span<const std::byte> bytes) noexcept {
    if (bytes.empty()) return;
    const std::byte* p = bytes.data();
    std::size_t n = bytes.size();
    if (fill_ > 0) {
      const std::size_t take = std::min(n, 8 - fill_);
      std::memcpy(pending_.data() + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ < 8) return;
      mix_word(load<std::uint64_t>(pending_.data()));
      fill_ = 0;
    }
    for (; n >= 8 && (words_ & 3u) != 0; p += 8, n -= 8) mix_word(load<std::uint64_t>(p));
    // Four independent multiply chains: the loop runs at multiply throughput, not latency.
    for (; n >= 32; p += 32, n -= 32) {
      lane_[0] = mix(lane_[0], load<std::uint64_t>(p));
      lane_[1] = mix(lane_[1], load<std::uint64_t>(p + 8));
      lane_[2] = mix(lane_[2], load<std::uint64_t>(p + 16));
      lane_[3] = mix(lane_[3], load<std::uint64_t>(p + 24));
      words_ += 4;
    }
    for (; n >= 8; p += 8, n -= 8) mix_word(load<std::uint64_t>(p));
    if (n > 0) {
      std::memcpy(pending_.data(), p, n);
      fill_ = n;
    }
  }
  /// Preconditions: the bytes fed so far are a multiple of 8.
  [[nodiscard]] std::uint64_t value() const noexcept {
    MOEPOLICY_ASSERT(fill_ == 0);
    std::uint64_t h = fnv_offset_basis;
    for (const std::uint64_t l : lane_) h = mix(h, l);
    return h;
  }

  [[nodiscard]] static constexpr std::uint64_t mix(std::uint64_t h, std::uint64_t w) noexcept {
    return (h ^ w) * fnv_prime;
  }

 private:
  void mix_word(std::uint64_t w) noexcept {
    auto& h = lane_[words_ & 3u];
    h = mix(h, w);
    ++words_;
  }

  std::array<std::uint64_t, 4> lane_ = {fnv_offset_basis, fnv_offset_basis, fnv_offset_basis, fnv_offset_basis};
  std::uint64_t words_ = 0;
  std::array<std::byte, 8> pending_{};
  std::size_t fill_ = 0;
};

/// XXH64 (xxhash.com, 64-bit, any seed), the version-2 payload checksum, fed in pieces of
/// any size.
class xxh64_state {
 public:
  explicit xxh64_state(std::uint64_t seed = 0) noexcept
      : v_{seed + xxh_prime1 + xxh_prime2, seed + xxh_prime2, seed, seed - xxh_prime1}, seed_(seed) {}

  void update(std::span<const std::byte> bytes) noexcept {
    const std::byte* p = bytes.data();
    std::size_t n = bytes.size();
    total_ += n;
    if (fill_ > 0) {
      const std::size_t take = std::min(n, stripe - fill_);
      if (take > 0) std::memcpy(buf_.data() + fill_, p, take);
      fill_ += take;
      p += take;
      n -= take;
      if (fill_ < stripe) return;
      consume(buf_.data());
      fill_ = 0;
    }
    for (; n >= stripe; p += stripe, n -= stripe) consume(p);
    if (n > 0) {
      std::memcpy(buf_.data(), p, n);
      fill_ = n;
    }
  }

  [[nodiscard]] std::uint64_t value() const noexcept {
    std::uint64_t h = 0;
    if (total_ >= stripe) {
      h = std::rotl(v_[0], 1) + std::rotl(v_[1], 7) + std::rotl(v_[2], 12) + std::rotl(v_[3], 18);
      for (const std::uint64_t v : v_) h = (h ^ round(0, v)) * xxh_prime1 + xxh_prime4;
    } else {
      h = seed_ + xxh_prime5;
    }
    h += total_;
    const std::byte* p = buf_.data();
    std::size_t n = fill_;
    for (; n >= 8; p += 8, n -= 8) h = std::rotl(h ^ round(0, load<std::uint64_t>(p)), 27) * xxh_prime1 + xxh_prime4;
    if (n >= 4) {
      h = std::rotl(h ^ (std::uint64_t{load<std::uint32_t>(p)} * xxh_prime1), 23) * xxh_prime2 + xxh_prime3;
      p += 4;
      n -= 4;
    }
    for (; n > 0; ++p, --n) h = std::rotl(h ^ (std::to_integer<std::uint64_t>(*p) * xxh_prime5), 11) * xxh_prime1;
    h ^= h >> 33;
    h *= xxh_prime2;
    h ^= h >> 29;
    h *= xxh_prime3;
    h ^= h >> 32;
    return h;
  }

 private:
  static constexpr std::size_t stripe = 32;

  [[nodiscard]] static constexpr std::uint64_t round(std::uint64_t acc, std::uint64_t input) noexcept {
    return std::rotl(acc + input * xxh_prime2, 31) * xxh_prime1;
  }

  // Four independent lanes: the loop runs at multiply throughput, not latency.
  void consume(const std::byte* p) noexcept {
    v_[0] = round(v_[0], load<std::uint64_t>(p));
    v_[1] = round(v_[1], load<std::uint64_t>(p + 8));
    v_[2] = round(v_[2], load<std::uint64_t>(p + 16));
    v_[3] = round(v_[3], load<std::uint64_t>(p + 24));
  }

  std::array<std::uint64_t, 4> v_;
  std::uint64_t seed_;
  std::uint64_t total_ = 0;
  std::array<std::byte, stripe> buf_{};
  std::size_t fill_ = 0;
};

/// XXH64 of `bytes` with `seed`.
[[nodiscard]] inline std::uint64_t xxh64(std::span<const std::byte> bytes, std::uint64_t seed = 0) noexcept {
  xxh64_state s(seed);
  s.update(bytes);
  return s.value();
}

/// The version-1 checksum of a payload.
///
/// Preconditions: `payload.size()` is a multiple of 8.
[[nodiscard]] inline std::uint64_t fnv_lanes(std::span<const std::byte> payload) noexcept {
  fnv_lanes_state s;
  s.update(payload);
  return s.value();
}

/// The checksum of a payload in format `version` (1 or 2).
///
/// Preconditions: `version` is 1 or 2; for version 1, `payload.size()` is a multiple of 8.
[[nodiscard]] inline std::uint64_t checksum(std::span<const std::byte> payload,
                                            std::uint32_t version = canonical_format_version) noexcept {
  return version == 1 ? fnv_lanes(payload) : xxh64(payload);
}

[[nodiscard]] inline std::string hex(std::uint64_t v, int digits) {
  std::array<char, 24> buf{};
  std::snprintf(buf.data(), buf.size(), "0x%0*llx", digits, static_cast<unsigned long long>(v));
  return buf.data();
}

/// A tag as found in a file: printable ASCII as is, other bytes as \xNN.
[[nodiscard]] inline std::string show_tag(const std::byte* p) {
  std::string out = "\"";
  for (std::size_t i = 0; i < 4; ++i) {
    const auto c = std::to_integer<unsigned>(p[i]);
    if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else {
      std::array<char, 8> buf{};
      std::snprintf(buf.data(), buf.size(), "\\x%02x", c);
      out += buf.data();
    }
  }
  return out + '"';
}

// ---------------------------------------------------------------------------------------
// Writer

inline constexpr std::string_view write_fn = "write_canonical";

[[nodiscard]] inline std::uint64_t meta_bytes(const routing_trace& t) {
  std::uint64_t n = 8 + t.info().model.size() + t.info().source.size();
  for (const auto& r : t.requests()) n += 4 + r.name.size();
  return n;
}

/// The data bytes of every section of `t`.
[[nodiscard]] inline std::array<std::uint64_t, num_sections> section_bytes(const routing_trace& t) {
  const trace_columns& c = t.columns();
  return {meta_bytes(t), c.request.size() * 4, c.step.size() * 4,    c.position.size() * 4, c.layer.size() * 2,
          c.kind.size(), c.experts.size() * 2, c.weights.size() * 4, c.scores.size() * 4};
}

/// Throws `invalid_argument` when `t` cannot be stored (a default-constructed trace, a
/// string longer than a u32 length can say).
inline void check_writable(const routing_trace& t) {
  check_info(t.info(), write_fn);
  constexpr std::size_t max_len = std::numeric_limits<std::uint32_t>::max();
  const auto check = [](std::string_view what, const std::string& s) {
    if (s.size() > max_len)
      throw_invalid(write_fn, std::string(what) + " must be at most 4294967295 bytes long", s.size());
  };
  check("the model name", t.info().model);
  check("the source", t.info().source);
  for (const auto& r : t.requests()) check("a request name", r.name);
}

template <class Sink>
void emit_section_header(Sink& sink, section s, std::uint64_t n) {
  std::array<std::byte, section_header_size> h{};
  std::memcpy(h.data(), tags[s].data(), 4);
  store<std::uint32_t>(h.data() + 4, element_size[s]);
  store<std::uint64_t>(h.data() + 8, n);
  sink.put(h);
}

template <class Sink>
void emit_padding(Sink& sink, std::uint64_t n) {
  static constexpr std::array<std::byte, 8> zeros{};
  sink.put(std::span<const std::byte>(zeros).first(static_cast<std::size_t>(pad8(n) - n)));
}

template <class Sink>
void emit_string(Sink& sink, const std::string& s) {
  std::array<std::byte, 4> len{};
  store<std::uint32_t>(len.data(), static_cast<std::uint32_t>(s.size()));
  sink.put(len);
  sink.put(std::as_bytes(std::span<const char>(s)));
}

/// The elements of `v`, little-endian, no header or padding.
template <class Sink, class T>
void emit_elements(Sink& sink, const std::vector<T>& v) {
  if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
    sink.put(std::as_bytes(std::span<const T>(v)));
  } else {
    using U = stored_t<T>;
    std::array<std::byte, 4096> buf{};
    constexpr std::size_t per_chunk = buf.size() / sizeof(T);
    for (std::size_t i = 0; i < v.size(); i += per_chunk) {
      const std::size_t m = std::min(per_chunk, v.size() - i);
      for (std::size_t j = 0; j < m; ++j) store<U>(buf.data() + j * sizeof(T), std::bit_cast<U>(v[i + j]));
      sink.put(std::span<const std::byte>(buf).first(m * sizeof(T)));
    }
  }
}

template <class Sink, class T>
void emit_column(Sink& sink, section s, const std::vector<T>& v) {
  const std::uint64_t n = v.size() * sizeof(T);
  emit_section_header(sink, s, n);
  emit_elements(sink, v);
  emit_padding(sink, n);
}

/// Feeds the payload of `t` to `sink.put(std::span<const std::byte>)`.
template <class Sink>
void emit_payload(const routing_trace& t, Sink& sink) {
  const trace_columns& c = t.columns();
  const std::uint64_t m = meta_bytes(t);
  emit_section_header(sink, meta, m);
  emit_string(sink, t.info().model);
  emit_string(sink, t.info().source);
  for (const auto& r : t.requests()) emit_string(sink, r.name);
  emit_padding(sink, m);
  emit_column(sink, request, c.request);
  emit_column(sink, step, c.step);
  emit_column(sink, position, c.position);
  emit_column(sink, layer, c.layer);
  emit_column(sink, kind, c.kind);
  emit_column(sink, experts, c.experts);
  emit_column(sink, weights, c.weights);
  emit_column(sink, scores, c.scores);
}

struct checksum_sink {
  xxh64_state state;
  void put(std::span<const std::byte> b) noexcept { state.update(b); }
};

struct stream_sink {
  std::ostream& os;
  void put(std::span<const std::byte> b) {
    if (!b.empty()) os.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

/// Writes header and payload of an already checked trace.
inline void write_unchecked(const routing_trace& t, std::ostream& os) {
  std::uint64_t payload = 0;
  for (const std::uint64_t n : section_bytes(t)) payload += section_header_size + pad8(n);
  checksum_sink sum;
  emit_payload(t, sum);

  const trace_info& info = t.info();
  std::array<std::byte, header_size> h{};
  std::memcpy(h.data(), magic.data(), magic.size());
  store<std::uint32_t>(h.data() + field::version, canonical_format_version);
  store<std::uint32_t>(h.data() + field::byte_order, byte_order_mark);
  store<std::uint64_t>(h.data() + field::num_rows, t.num_rows());
  store<std::uint32_t>(h.data() + field::num_requests, static_cast<std::uint32_t>(t.requests().size()));
  store<std::uint32_t>(h.data() + field::num_layers, info.num_layers);
  store<std::uint32_t>(h.data() + field::num_experts, info.num_experts);
  store<std::uint32_t>(h.data() + field::top_k, info.top_k);
  store<std::uint32_t>(h.data() + field::flags, info.has_scores ? flag_has_scores : 0u);
  store<std::uint64_t>(h.data() + field::payload_bytes, payload);
  store<std::uint64_t>(h.data() + field::checksum, sum.state.value());

  stream_sink out{os};
  out.put(h);
  emit_payload(t, out);
}

// ---------------------------------------------------------------------------------------
// Reader

/// Reads one canonical trace from memory; see `read_canonical`.
class reader {
 public:
  /// `file`, when given, is the mapping `data` lies in: pages are given back to it as
  /// they have been read (by the checksum pass even for a small file when `give_back_all`).
  reader(std::span<const std::byte> data, std::string_view name, const mapped_file* file = nullptr,
         bool give_back_all = false) noexcept
      : d_(data), name_(name), file_(file), give_back_all_(give_back_all) {}

  /// Checks everything but the rows (header, counts, sections, checksum, META) and keeps
  /// the request names.
  void open() {
    check_header();
    check_counts();
    walk_sections();
    check_checksum();
    names_ = read_meta();
  }

  /// The whole trace. Preconditions: `open()` returned.
  routing_trace read_opened() {
    trace_columns columns = decode();
    try {
      return routing_trace::from_sorted(info_, std::move(names_), std::move(columns));
    } catch (const invalid_argument& e) {
      constexpr std::string_view prefix = "moepolicy::routing_trace::from_sorted: ";
      std::string_view problem = e.what();
      if (problem.starts_with(prefix)) problem.remove_prefix(prefix.size());
      fail(locate_bad_row(), std::string(problem));
    }
  }

  routing_trace read() {
    open();
    return read_opened();
  }

  [[nodiscard]] const trace_info& info() const noexcept { return info_; }
  [[nodiscard]] std::uint64_t num_rows() const noexcept { return rows_; }
  [[nodiscard]] std::uint32_t version() const noexcept { return version_; }
  [[nodiscard]] std::string_view name() const noexcept { return name_; }
  [[nodiscard]] std::span<const std::string> request_names() const noexcept { return names_; }
  [[nodiscard]] std::span<const std::byte> payload() const noexcept {
    return d_.subspan(header_size, static_cast<std::size_t>(payload_));
  }

  /// Walks the rows in file order; see `canonical_file::for_each_batch`.
  template <class OnRequest, class OnBatch, class OnStepEnd>
  void walk(std::uint64_t chunk_rows, OnRequest&& on_request, OnBatch&& on_batch, OnStepEnd&& on_step_end) const {
    const std::uint64_t k = info_.top_k, e = info_.num_experts;
    const bool scored = info_.has_scores;
    const bool in_place = columns_in_place();
    chunk_rows = std::max<std::uint64_t>(chunk_rows, 1);
    // Rows a complete walk has checked need no second check (the order is still followed).
    const bool checked = rows_checked_.load(std::memory_order_acquire);
    column_window w;
    std::uint32_t announced = 0;  // requests announced so far
    std::uint64_t batches = 0;
    step_ref cur_step{};
    bool in_step = false;
    row_key prev{};
    for (std::uint64_t r0 = 0; r0 < rows_;) {
      // The chunk ends at the end of a batch, so every batch lies in one window.
      std::uint64_t end = std::min(rows_, r0 + chunk_rows);
      while (end < rows_ && same_batch(end - 1, end)) ++end;
      w.load(*this, r0, end - r0, in_place);
      std::uint64_t batch_start = r0;
      for (std::uint64_t r = r0; r < end; ++r) {
        const std::uint64_t i = r - r0;
        const trace_row row{w.request[i],
                            w.kind[i],
                            w.step[i],
                            w.position[i],
                            w.layer[i],
                            std::span<const expert_id>(w.experts + i * k, k),
                            std::span<const float>(w.weights + i * k, k),
                            scored ? std::span<const float>(w.scores + i * e, e) : std::span<const float>()};
        if (auto why = checked ? std::nullopt : check_row(info_, requests_, row))
          fail(bad_entry(r, row), "row " + std::to_string(r) + ": " + *why);
        const row_key key{row.request, row.step, row.layer, row.position};
        const bool first = r == 0;
        if (!first && !(prev < key)) {
          fail(at(request, r),
               prev == key
                   ? "row " + std::to_string(r) + " repeats the (request, step, layer, position) of the row before"
                   : "row " + std::to_string(r) + " is out of (request, step, layer, position) order");
        }
        const bool new_request = first || row.request != std::get<0>(prev);
        const bool new_step = new_request || row.step != std::get<1>(prev);
        const bool new_batch = new_step || row.layer != std::get<2>(prev);
        if (!new_step && row.kind != cur_step.kind) {
          fail(at(kind, r), "row " + std::to_string(r) + ": step " + std::to_string(row.step) + " of request " +
                                std::to_string(row.request) + " mixes prefill and decode rows");
        }
        if (new_batch && r > batch_start) {
          emit(w, r0, batch_start, r, prev, cur_step.kind, on_batch);
          ++batches;
          ++cur_step.num_batches;
          batch_start = r;
        }
        if (new_step) {
          if (in_step) on_step_end(std::as_const(cur_step));
          if (new_request) {
            while (announced <= row.request) on_request(announced++);
          }
          cur_step = step_ref{row.request, row.step, row.kind, static_cast<std::uint32_t>(batches), 0};
          in_step = true;
        }
        prev = key;
      }
      emit(w, r0, batch_start, end, prev, cur_step.kind, on_batch);
      ++batches;
      ++cur_step.num_batches;
      if (in_place && file_ != nullptr) release_rows(r0, end);
      r0 = end;
    }
    if (in_step) on_step_end(std::as_const(cur_step));
    while (announced < requests_) on_request(announced++);
    rows_checked_.store(true, std::memory_order_release);
  }

  /// Calls `on_batch` for every batch of the rows [first, last); see
  /// `canonical_file::for_each_batch_in_rows`.
  template <class OnBatch>
  void walk_rows(std::uint64_t first, std::uint64_t last, std::uint64_t chunk_rows, OnBatch&& on_batch) const {
    constexpr std::string_view fn = "canonical_file::for_each_batch_in_rows";
    if (!rows_checked_.load(std::memory_order_acquire)) {
      throw_invalid(
          fn, "the rows are checked by a walk of the whole file, and none has completed yet on " + std::string(name_));
    }
    if (first > last || last > rows_) {
      throw_invalid(fn, "the rows [" + std::to_string(first) + ", " + std::to_string(last) + ") must lie within the " +
                            std::to_string(rows_) + " rows of " + std::string(name_));
    }
    const auto check_boundary = [&](std::uint64_t r) {
      if (r > 0 && r < rows_ && same_batch(r - 1, r)) {
        throw_invalid(
            fn, "row " + std::to_string(r) + " of " + std::string(name_) + " is inside a batch, not at its start");
      }
    };
    check_boundary(first);
    check_boundary(last);
    const bool in_place = columns_in_place();
    chunk_rows = std::max<std::uint64_t>(chunk_rows, 1);
    column_window w;
    for (std::uint64_t r0 = first; r0 < last;) {
      std::uint64_t end = std::min(last, r0 + chunk_rows);
      while (end < last && same_batch(end - 1, end)) ++end;
      w.load(*this, r0, end - r0, in_place);
      const auto key_of = [&](std::uint64_t r) {
        const std::size_t i = static_cast<std::size_t>(r - r0);
        return row_key{w.request[i], w.step[i], w.layer[i], w.position[i]};
      };
      std::uint64_t batch_start = r0;
      for (std::uint64_t r = r0 + 1; r < end; ++r) {
        const std::size_t i = static_cast<std::size_t>(r - r0);
        if (w.request[i] != w.request[i - 1] || w.step[i] != w.step[i - 1] || w.layer[i] != w.layer[i - 1]) {
          emit(w, r0, batch_start, r, key_of(batch_start), w.kind[batch_start - r0], on_batch);
          batch_start = r;
        }
      }
      emit(w, r0, batch_start, end, key_of(batch_start), w.kind[batch_start - r0], on_batch);
      if (in_place && file_ != nullptr) release_rows(r0, end);
      r0 = end;
    }
  }

  /// Every column of the file used in place, or nothing when they are not aligned
  /// little-endian data; see `canonical_file::columns`.
  [[nodiscard]] std::optional<canonical_columns> columns() const {
    constexpr std::string_view fn = "canonical_file::columns";
    if (!rows_checked_.load(std::memory_order_acquire)) {
      throw_invalid(
          fn, "the rows are checked by a walk of the whole file, and none has completed yet on " + std::string(name_));
    }
    if (!columns_in_place()) return std::nullopt;
    const std::size_t n = static_cast<std::size_t>(rows_), k = info_.top_k, e = info_.num_experts;
    canonical_columns c;
    c.request = {in_place<std::uint32_t>(request, 0), n};
    c.step = {in_place<std::uint32_t>(step, 0), n};
    c.position = {in_place<std::uint32_t>(position, 0), n};
    c.layer = {in_place<layer_id>(layer, 0), n};
    c.kind = {in_place<phase>(kind, 0), n};
    c.experts = {in_place<expert_id>(experts, 0), n * k};
    c.weights = {in_place<float>(weights, 0), n * k};
    if (info_.has_scores) c.scores = {in_place<float>(scores, 0), n * e};
    return c;
  }

  /// Gives back the mapped pages of every column, whatever the file's size.
  void release_columns() const noexcept {
    if (file_ != nullptr) file_->release(data_at_[request], d_.size() - data_at_[request], true);
  }

 private:
  /// Whether every column can be read in place: aligned little-endian data.
  [[nodiscard]] bool columns_in_place() const noexcept {
    return std::endian::native == std::endian::little && aligned<std::uint32_t>(request) &&
           aligned<std::uint32_t>(step) && aligned<std::uint32_t>(position) && aligned<layer_id>(layer) &&
           aligned<expert_id>(experts) && aligned<float>(weights) && aligned<float>(scores);
  }

  using row_key = std::tuple<std::uint32_t, std::uint32_t, layer_id, std::uint32_t>;

  template <class T>
  [[nodiscard]] bool aligned(section s) const noexcept {
    return reinterpret_cast<std::uintptr_t>(d_.data() + data_at_[s]) % alignof(T) == 0;
  }

  [[nodiscard]] bool same_batch(std::uint64_t a, std::uint64_t b) const noexcept {
    return get<std::uint32_t>(at(request, a)) == get<std::uint32_t>(at(request, b)) &&
           get<std::uint32_t>(at(step, a)) == get<std::uint32_t>(at(step, b)) &&
           get<std::uint16_t>(at(layer, a)) == get<std::uint16_t>(at(layer, b));
  }

  /// Rows [first, first + count) of every column: in place when the columns are aligned
  /// little-endian data, else decoded into buffers that are reused from chunk to chunk.
  struct column_window {
    const std::uint32_t* request = nullptr;
    const std::uint32_t* step = nullptr;
    const std::uint32_t* position = nullptr;
    const layer_id* layer = nullptr;
    const phase* kind = nullptr;
    const expert_id* experts = nullptr;
    const float* weights = nullptr;
    const float* scores = nullptr;
    trace_columns buf;

    void load(const reader& rd, std::uint64_t first, std::uint64_t count, bool in_place) {
      const std::uint64_t k = rd.info_.top_k, e = rd.info_.num_experts;
      if (in_place) {
        request = rd.in_place<std::uint32_t>(section::request, first);
        step = rd.in_place<std::uint32_t>(section::step, first);
        position = rd.in_place<std::uint32_t>(section::position, first);
        layer = rd.in_place<layer_id>(section::layer, first);
        kind = rd.in_place<phase>(section::kind, first);
        experts = rd.in_place<expert_id>(section::experts, first * k);
        weights = rd.in_place<float>(section::weights, first * k);
        scores = rd.info_.has_scores ? rd.in_place<float>(section::scores, first * e) : nullptr;
        return;
      }
      rd.load_range(buf.request, section::request, first, count);
      rd.load_range(buf.step, section::step, first, count);
      rd.load_range(buf.position, section::position, first, count);
      rd.load_range(buf.layer, section::layer, first, count);
      rd.load_range(buf.kind, section::kind, first, count);
      rd.load_range(buf.experts, section::experts, first * k, count * k);
      rd.load_range(buf.weights, section::weights, first * k, count * k);
      if (rd.info_.has_scores) rd.load_range(buf.scores, section::scores, first * e, count * e);
      request = buf.request.data();
      step = buf.step.data();
      position = buf.position.data();
      layer = buf.layer.data();
      kind = buf.kind.data();
      experts = buf.experts.data();
      weights = buf.weights.data();
      scores = buf.scores.data();
    }
  };

  template <class T>
  [[nodiscard]] const T* in_place(section s, std::uint64_t index) const noexcept {
    return reinterpret_cast<const T*>(d_.data() + data_at_[s] + index * sizeof(T));
  }

  template <class T>
  void load_range(std::vector<T>& v, section s, std::uint64_t first, std::uint64_t count) const {
    v.resize(static_cast<std::size_t>(count));
    const std::byte* p = d_.data() + data_at_[s] + first * sizeof(T);
    if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
      if (!v.empty()) std::memcpy(v.data(), p, v.size() * sizeof(T));
    } else {
      using U = stored_t<T>;
      for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::bit_cast<T>(load<U>(p + i * sizeof(T)));
    }
  }

  /// Calls `on_batch` with the rows [from, to) of the window that starts at row `first`.
  template <class OnBatch>
  void emit(const column_window& w, std::uint64_t first, std::uint64_t from, std::uint64_t to, const row_key& key,
            phase kind, OnBatch& on_batch) const {
    const std::uint64_t k = info_.top_k, e = info_.num_experts;
    const std::size_t i = static_cast<std::size_t>(from - first), n = static_cast<std::size_t>(to - from);
    batch_view v{batch_ref{std::get<0>(key), std::get<1>(key), std::get<2>(key), kind, static_cast<std::uint32_t>(from),
                           static_cast<std::uint32_t>(n)},
                 info_.top_k,
                 std::span<const std::uint32_t>(w.position + i, n),
                 std::span<const expert_id>(w.experts + i * k, n * k),
                 std::span<const float>(w.weights + i * k, n * k),
                 {}};
    if (info_.has_scores) v.scores = std::span<const float>(w.scores + i * e, n * e);
    on_batch(std::as_const(v));
  }

  /// Gives back the mapped pages of rows [from, to) of every column.
  void release_rows(std::uint64_t from, std::uint64_t to) const noexcept {
    const std::uint64_t k = info_.top_k, e = info_.num_experts;
    for (std::size_t s = request; s < num_sections; ++s) {
      const std::uint64_t per_row = element_size[s] * (s == experts || s == weights ? k : s == scores ? e : 1);
      if (s == scores && !info_.has_scores) continue;
      file_->release(data_at_[s] + from * per_row, (to - from) * per_row, give_back_all_);
    }
  }

  [[noreturn]] void fail(std::uint64_t at, const std::string& problem) const { fail_at_byte(name_, at, problem); }

  template <class U>
  [[nodiscard]] U get(std::uint64_t at) const noexcept {
    return load<U>(d_.data() + at);
  }

  void check_header() {
    const std::size_t size = d_.size();
    const std::size_t m = std::min(size, magic.size());
    if (m > 0 && std::memcmp(d_.data(), magic.data(), m) != 0) {
      fail(0, "not a moepolicy canonical trace (the magic bytes \"MOEPTRC\\0\" are missing)");
    }
    if (size < header_size) {
      fail(size, "truncated header: the data ends after " + std::to_string(size) + " of the header's " +
                     std::to_string(header_size) + " bytes");
    }
    version_ = get<std::uint32_t>(field::version);
    if (version_ < canonical_oldest_version || version_ > canonical_format_version) {
      fail(field::version, "unsupported format version " + std::to_string(version_) + " (this reader knows 1 and 2)");
    }
    if (const auto bom = get<std::uint32_t>(field::byte_order); bom != byte_order_mark) {
      fail(field::byte_order,
           "byte-order mark reads " + hex(bom, 8) + ", expected " + hex(byte_order_mark, 8) + " (little-endian)");
    }
    rows_ = get<std::uint64_t>(field::num_rows);
    requests_ = get<std::uint32_t>(field::num_requests);
    info_.num_layers = get<std::uint32_t>(field::num_layers);
    info_.num_experts = get<std::uint32_t>(field::num_experts);
    info_.top_k = get<std::uint32_t>(field::top_k);
    const auto flags = get<std::uint32_t>(field::flags);
    payload_ = get<std::uint64_t>(field::payload_bytes);
    if ((flags & ~flag_has_scores) != 0) {
      fail(field::flags, "unknown header flags " + hex(flags & ~flag_has_scores, 8) + " (this reader knows " +
                             hex(flag_has_scores, 8) + " = has_scores)");
    }
    info_.has_scores = (flags & flag_has_scores) != 0;
    if (const auto r = get<std::uint32_t>(field::reserved); r != 0) {
      fail(field::reserved, "reserved header field is " + std::to_string(r) + ", must be 0");
    }
    if (info_.num_layers == 0 || info_.num_layers > 65536) {
      fail(field::num_layers, "num_layers must be in [1, 65536], got " + std::to_string(info_.num_layers));
    }
    if (info_.num_experts == 0 || info_.num_experts > 65536) {
      fail(field::num_experts, "num_experts must be in [1, 65536], got " + std::to_string(info_.num_experts));
    }
    if (info_.top_k == 0 || info_.top_k > info_.num_experts) {
      fail(field::top_k, "top_k must be in [1, num_experts = " + std::to_string(info_.num_experts) + "], got " +
                             std::to_string(info_.top_k));
    }
    if (payload_ % 8 != 0)
      fail(field::payload_bytes, "payload size " + std::to_string(payload_) + " is not a multiple of 8");
  }

  /// Sets the expected column sizes from the counts, checked against overflow and against
  /// the payload size the header declares, and rejects bytes past the declared payload.
  void check_counts() {
    constexpr std::uint64_t max = std::numeric_limits<std::uint64_t>::max();
    const std::uint64_t k = info_.top_k, e = info_.num_experts;
    const std::uint64_t per_row = 4 + 4 + 4 + 2 + 1 + 2 * k + 4 * k + (info_.has_scores ? 4 * e : 0);
    // Slack for headers, padding and META's 8 + 4·Q bytes (Q < 2^32), so `need` below
    // cannot overflow either.
    if (rows_ > (max - (std::uint64_t{1} << 36)) / per_row) {
      fail(field::num_rows, "num_rows " + std::to_string(rows_) + " at " + std::to_string(per_row) +
                                " bytes per row overflows a 64-bit size");
    }
    expected_ = {8 + 4 * std::uint64_t{requests_},
                 4 * rows_,
                 4 * rows_,
                 4 * rows_,
                 2 * rows_,
                 rows_,
                 2 * k * rows_,
                 4 * k * rows_,
                 info_.has_scores ? 4 * e * rows_ : 0};
    std::uint64_t need = 0;
    for (const std::uint64_t n : expected_) need += section_header_size + pad8(n);
    if (need > payload_) {
      fail(field::num_rows, "num_rows " + std::to_string(rows_) + " and num_requests " + std::to_string(requests_) +
                                " need at least " + std::to_string(need) + " payload bytes, the header declares " +
                                std::to_string(payload_));
    }
    if (rows_ > std::numeric_limits<std::uint32_t>::max()) {
      fail(field::num_rows, "num_rows " + std::to_string(rows_) + " exceeds 4294967295, the most rows a trace holds");
    }
    const std::uint64_t avail = d_.size() - header_size;
    if (avail > payload_) {
      fail(header_size + payload_, "trailing garbage: " + std::to_string(avail - payload_) +
                                       " bytes after the end of the payload the header declares");
    }
  }

  /// Checks every section's tag, element size, length and padding, bounded by the bytes
  /// present, and records where each section's data starts.
  void walk_sections() {
    const std::uint64_t size = d_.size();
    const std::uint64_t avail = size - header_size;
    const bool truncated = payload_ > avail;
    const std::uint64_t end = header_size + std::min(payload_, avail);
    std::uint64_t off = header_size;
    for (std::size_t i = 0; i < num_sections; ++i) {
      const auto s = static_cast<section>(i);
      const std::string tag(tags[s]);
      const std::string what = s == meta ? "section" : "column";
      if (end - off < section_header_size) {
        if (truncated) fail(size, "truncated " + what + " " + tag + ": the data ends inside its section header");
        fail(off,
             "section " + tag + " is missing: the payload the header declares ends at byte " + std::to_string(off));
      }
      if (std::memcmp(d_.data() + off, tags[s].data(), 4) != 0) {
        fail(off, "expected section " + tag + ", found " + show_tag(d_.data() + off));
      }
      if (const auto el = get<std::uint32_t>(off + 4); el != element_size[s]) {
        fail(off + 4, "section " + tag + ": element size is " + std::to_string(el) + ", expected " +
                          std::to_string(element_size[s]));
      }
      const auto n = get<std::uint64_t>(off + 8);
      if (s == meta ? n < expected_[s] : n != expected_[s]) {
        fail(off + 8, "section length mismatch: " + tag + " holds " + std::to_string(n) +
                          " bytes, the header's counts " + (s == meta ? "need at least " : "give ") +
                          std::to_string(expected_[s]));
      }
      const std::uint64_t data = off + section_header_size;
      const std::uint64_t room = end - data;
      if (n > room || pad8(n) > room) {
        if (truncated) {
          fail(size, "truncated " + what + " " + tag + ": it needs " + std::to_string(n > room ? n : pad8(n)) +
                         " bytes from byte " + std::to_string(data) + ", the data ends after " + std::to_string(room));
        }
        fail(off + 8, "section " + tag + " of " + std::to_string(n) +
                          " bytes runs past the end of the payload the header declares");
      }
      for (std::uint64_t j = n; j < pad8(n); ++j) {
        if (d_[static_cast<std::size_t>(data + j)] != std::byte{0}) {
          fail(data + j, "section " + tag + ": padding byte is not zero");
        }
      }
      data_at_[s] = data;
      off = data + pad8(n);
    }
    if (truncated) {
      fail(size, "truncated data: the header declares " + std::to_string(payload_) + " payload bytes, " +
                     std::to_string(avail) + " follow it");
    }
    if (off != end) fail(off, "trailing garbage: " + std::to_string(end - off) + " bytes after the last section");
  }

  void check_checksum() const {
    const auto stored = get<std::uint64_t>(field::checksum);
    // In pieces, giving the pages of a mapped file back behind the hash.
    constexpr std::size_t piece = std::size_t{1} << 23;
    const auto payload = d_.subspan(header_size, static_cast<std::size_t>(payload_));
    xxh64_state x;
    fnv_lanes_state f;
    for (std::size_t at = 0; at < payload.size(); at += piece) {
      const auto part = payload.subspan(at, std::min(piece, payload.size() - at));
      if (version_ == 1) {
        f.update(part);
      } else {
        x.update(part);
      }
      if (file_ != nullptr) file_->release(header_size + at, part.size(), give_back_all_);
    }
    const std::uint64_t actual = version_ == 1 ? f.value() : x.value();
    if (stored != actual) {
      fail(field::checksum,
           "checksum mismatch: the header records " + hex(stored, 16) + ", the payload hashes to " + hex(actual, 16));
    }
  }

  std::vector<std::string> read_meta() {
    std::uint64_t off = data_at_[meta];
    const std::uint64_t end = off + get<std::uint64_t>(off - 8);
    const auto next = [&](const std::string& what) {
      if (end - off < 4) fail(off, "section META ends before the length of " + what);
      const auto len = get<std::uint32_t>(off);
      off += 4;
      if (len > end - off) {
        fail(off - 4,
             "section META: " + what + " of " + std::to_string(len) + " bytes runs past the end of the section");
      }
      std::string s(reinterpret_cast<const char*>(d_.data() + off), len);
      off += len;
      return s;
    };
    info_.model = next("the model name");
    info_.source = next("the source");
    std::vector<std::string> names;
    names.reserve(requests_);  // bounded: META holds at least 4 bytes per request
    for (std::uint32_t q = 0; q < requests_; ++q) names.push_back(next("request name " + std::to_string(q)));
    if (off != end) fail(off, "section META: " + std::to_string(end - off) + " bytes after the last request name");
    return names;
  }

  /// Decodes a whole column, in pieces of 8 MiB whose mapped pages are given back as soon
  /// as they are copied, whatever the file's size, so that a column is never held twice
  /// (copy and pages).
  template <class T>
  void load_column(std::vector<T>& v, section s, std::uint64_t count) const {
    v.resize(static_cast<std::size_t>(count));
    constexpr std::uint64_t piece = (std::uint64_t{1} << 23) / sizeof(T);
    for (std::uint64_t at = 0; at < count; at += piece) {
      const std::uint64_t n = std::min(piece, count - at);
      const std::byte* p = d_.data() + data_at_[s] + at * sizeof(T);
      if constexpr (std::endian::native == std::endian::little || sizeof(T) == 1) {
        std::memcpy(v.data() + at, p, static_cast<std::size_t>(n * sizeof(T)));
      } else {
        using U = stored_t<T>;
        for (std::uint64_t i = 0; i < n; ++i) v[at + i] = std::bit_cast<T>(load<U>(p + i * sizeof(T)));
      }
      if (file_ != nullptr) file_->release(data_at_[s] + at * sizeof(T), n * sizeof(T), true);
    }
  }

  trace_columns decode() const {
    trace_columns c;
    const std::uint64_t k = info_.top_k;
    load_column(c.request, request, rows_);
    load_column(c.step, step, rows_);
    load_column(c.position, position, rows_);
    load_column(c.layer, layer, rows_);
    load_column(c.kind, kind, rows_);
    load_column(c.experts, experts, rows_ * k);
    load_column(c.weights, weights, rows_ * k);
    if (info_.has_scores) load_column(c.scores, scores, rows_ * info_.num_experts);
    return c;
  }

  [[nodiscard]] std::uint64_t at(section s, std::uint64_t index) const noexcept {
    return data_at_[s] + index * element_size[s];
  }

  /// The byte offset of the column entry `routing_trace::from_sorted` objected to, found
  /// by repeating its checks; runs only when reading has already failed. One pass: the
  /// first row that fails `check_row` wins (from_sorted checks every row before the
  /// order), else the first row out of order, repeated, or of another phase than the row
  /// before it in its step.
  [[nodiscard]] std::uint64_t locate_bad_row() const {
    const std::uint64_t k = info_.top_k, e = info_.num_experts;
    std::vector<expert_id> ids(k);
    std::vector<float> w(k), sc(info_.has_scores ? e : 0);
    std::optional<std::uint64_t> first_order_problem;
    row_key prev{};
    phase prev_kind = phase::prefill;
    for (std::uint64_t r = 0; r < rows_; ++r) {
      const trace_row row = row_at(r, ids, w, sc);
      if (check_row(info_, requests_, row)) return bad_entry(r, row);
      const row_key key{row.request, row.step, row.layer, row.position};
      if (r > 0 && !first_order_problem) {
        if (!(prev < key)) {
          first_order_problem = at(request, r);
        } else if (std::get<0>(prev) == row.request && std::get<1>(prev) == row.step && row.kind != prev_kind) {
          first_order_problem = at(kind, r);
        }
      }
      prev = key;
      prev_kind = row.kind;
    }
    return first_order_problem.value_or(data_at_[request]);
  }

  /// The byte offset of the entry of row `r` that `check_row` objects to.
  [[nodiscard]] std::uint64_t bad_entry(std::uint64_t r, const trace_row& row) const {
    const std::uint64_t k = info_.top_k, e = info_.num_experts;
    if (row.request >= requests_) return at(request, r);
    if (static_cast<unsigned>(row.kind) > 1u) return at(kind, r);
    if (row.layer >= info_.num_layers) return at(layer, r);
    const auto ids = row.experts;
    for (std::uint64_t i = 0; i < k; ++i) {
      if (ids[i] >= e || std::find(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(i), ids[i]) !=
                             ids.begin() + static_cast<std::ptrdiff_t>(i)) {
        return at(experts, r * k + i);
      }
      if (!std::isfinite(row.weights[i]) || row.weights[i] < 0.0f) return at(weights, r * k + i);
    }
    for (std::uint64_t j = 0; j < row.scores.size(); ++j) {
      if (!std::isfinite(row.scores[j])) return at(scores, r * e + j);
    }
    return at(request, r);
  }

  [[nodiscard]] trace_row row_at(std::uint64_t r, std::vector<expert_id>& ids, std::vector<float>& w,
                                 std::vector<float>& sc) const {
    const std::uint64_t k = ids.size();
    for (std::uint64_t i = 0; i < k; ++i) {
      ids[i] = get<std::uint16_t>(at(experts, r * k + i));
      w[i] = std::bit_cast<float>(get<std::uint32_t>(at(weights, r * k + i)));
    }
    for (std::uint64_t j = 0; j < sc.size(); ++j) {
      sc[j] = std::bit_cast<float>(get<std::uint32_t>(at(scores, r * sc.size() + j)));
    }
    return trace_row{get<std::uint32_t>(at(request, r)),
                     static_cast<phase>(get<std::uint8_t>(at(kind, r))),
                     get<std::uint32_t>(at(step, r)),
                     get<std::uint32_t>(at(position, r)),
                     get<std::uint16_t>(at(layer, r)),
                     ids,
                     w,
                     sc};
  }

  std::span<const std::byte> d_;
  std::string_view name_;
  const mapped_file* file_ = nullptr;
  bool give_back_all_ = false;
  mutable std::atomic<bool> rows_checked_{false};
  std::vector<std::string> names_;
  trace_info info_;
  std::uint64_t rows_ = 0;
  std::uint32_t requests_ = 0;
  std::uint64_t payload_ = 0;
  std::uint32_t version_ = 0;
  std::array<std::uint64_t, num_sections> expected_{};
  std::array<std::uint64_t, num_sections> data_at_{};
};

}  // namespace detail::canonical

/// Writes `trace` in the canonical format (see the top of this header) to `os`.
///
/// Throws: `invalid_argument` for a trace that cannot be stored (default-constructed,
/// or a string over 4 GiB), before writing anything; `std::ios_base::failure` when the
/// stream fails.
/// Complexity: two passes over the columns (checksum, then write); no copy of them.
inline void write_canonical(const routing_trace& trace, std::ostream& os) {
  detail::canonical::check_writable(trace);
  detail::canonical::write_unchecked(trace, os);
  if (!os) throw std::ios_base::failure("moepolicy::write_canonical: the stream failed while writing");
}

/// Writes `trace` in the canonical format to the file `path`, replacing it atomically:
/// the file is written beside it under a temporary name and renamed over it when
/// complete, so a failure (a full disk) leaves any earlier file at `path` as it was.
///
/// Throws: `invalid_argument` as the stream overload, before the file is touched;
/// `std::filesystem::filesystem_error` naming `path` when it cannot be written or replaced.
inline void write_canonical(const routing_trace& trace, const std::filesystem::path& path) {
  detail::canonical::check_writable(trace);
  detail::write_file_atomically(path, "moepolicy::write_canonical",
                                [&](std::ostream& out) { detail::canonical::write_unchecked(trace, out); });
}

/// Reads a canonical trace held in memory; `name` labels it in errors. Any alignment.
///
/// Returns: the trace, equal column by column to the one written.
/// Throws: `parse_error` naming `name` and the byte offset of the problem: bad magic,
/// unsupported version, truncation, section sizes that disagree with the counts,
/// counts too large for the data, trailing bytes, checksum mismatch, or a row that
/// `routing_trace::from_sorted` rejects (the offset of the row's offending entry).
/// Complexity: one pass for the checksum, one copy per column, `from_sorted`'s checks.
[[nodiscard]] inline routing_trace read_canonical(std::span<const std::byte> data, std::string_view name) {
  return detail::canonical::reader(data, name).read();
}

/// Reads a canonical trace from the rest of `in`; `name` labels it in errors.
///
/// Throws: `parse_error` as the span overload, or on a read error.
[[nodiscard]] inline routing_trace read_canonical(std::istream& in, std::string_view name) {
  const std::vector<std::byte> data = detail::read_all_bytes(in, name);
  return read_canonical(std::span<const std::byte>(data), name);
}

namespace detail::canonical {

/// A header for a payload of `payload` bytes with checksum `sum`.
[[nodiscard]] inline std::array<std::byte, header_size> make_header(const trace_info& info, std::uint64_t rows,
                                                                    std::uint32_t requests, std::uint64_t payload,
                                                                    std::uint64_t sum) noexcept {
  std::array<std::byte, header_size> h{};
  std::memcpy(h.data(), magic.data(), magic.size());
  store<std::uint32_t>(h.data() + field::version, canonical_format_version);
  store<std::uint32_t>(h.data() + field::byte_order, byte_order_mark);
  store<std::uint64_t>(h.data() + field::num_rows, rows);
  store<std::uint32_t>(h.data() + field::num_requests, requests);
  store<std::uint32_t>(h.data() + field::num_layers, info.num_layers);
  store<std::uint32_t>(h.data() + field::num_experts, info.num_experts);
  store<std::uint32_t>(h.data() + field::top_k, info.top_k);
  store<std::uint32_t>(h.data() + field::flags, info.has_scores ? flag_has_scores : 0u);
  store<std::uint64_t>(h.data() + field::payload_bytes, payload);
  store<std::uint64_t>(h.data() + field::checksum, sum);
  return h;
}

/// A sink that hashes what it writes.
struct hashing_stream_sink {
  std::ostream& os;
  xxh64_state state;
  void put(std::span<const std::byte> b) {
    state.update(b);
    if (!b.empty()) os.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

}  // namespace detail::canonical

/// A canonical trace file opened for reading through a memory map (detail/mapped_file.hpp):
/// the header, counts, sections, checksum and request names are checked when it opens,
/// the rows when they are read. Two ways to read it:
///
///   - `read()`: the whole `routing_trace` (what `read_canonical` returns), its columns
///     copied straight from the map, with no buffer of the file in between;
///   - `for_each_batch`: a walk over the batches in file order, each a `batch_view` of
///     the file's columns used in place (or decoded a chunk at a time where the data is
///     not aligned little-endian), validated row by row as `routing_trace::from_sorted`
///     validates them; the pages read are given back as the walk goes, so it holds a
///     bounded window of the file (a chunk of rows) however large the file is. No index
///     is built.
///
/// The walk makes the calls a replay over `routing_trace` makes: `on_request(q)` for
/// every request in order (also those without rows), before its first batch;
/// `on_batch(const batch_view&)` for every batch; `on_step_end(const step_ref&)` after
/// the last batch of every step. `batch_ref::first_row` and `step_ref::first_batch` are
/// the indices `routing_trace` would give.
class canonical_file {
 public:
  /// How the file will be read, which decides when its mapped pages are given back.
  enum class access : std::uint8_t {
    /// Walks (`for_each_batch`): a file under `detail::mapped_file::keep_whole` bytes stays
    /// mapped whole from the checksum pass on, so that walks do not fault it in again.
    walk,
    /// Copied (`read()`, or rows gathered from `columns()`): every page is given back once
    /// read (by the checksum pass and by walks too), whatever the file's size, so that the
    /// copy and the pages are not both held.
    copy,
  };

  /// Opens the file `path`, mapped. Unlike `read_canonical`, no limit applies to the
  /// file's size (`input_limits::max_file_bytes` bounds what is held in memory; a walk
  /// holds a chunk). The checksum pass reads the file once.
  ///
  /// Throws: `parse_error` naming `path` as `read_canonical` does for the header, counts,
  /// sections, checksum and META, or when the file cannot be opened or mapped.
  explicit canonical_file(const std::filesystem::path& path, access how = access::walk)
      : file_(std::make_unique<detail::mapped_file>(path)), name_(path.string()) {
    file_->sequential();
    reader_.emplace(file_->bytes(), name_, file_.get(), how == access::copy);
    reader_->open();
  }

  /// Opens a canonical trace held in memory (any alignment; not copied: `data` must
  /// outlive this object); `name` labels it in errors.
  canonical_file(std::span<const std::byte> data, std::string_view name) : name_(name) {
    reader_.emplace(data, name_, nullptr);
    reader_->open();
  }

  canonical_file(canonical_file&&) = delete;
  canonical_file& operator=(canonical_file&&) = delete;

  [[nodiscard]] const trace_info& info() const noexcept { return reader_->info(); }
  [[nodiscard]] std::uint64_t num_rows() const noexcept { return reader_->num_rows(); }
  [[nodiscard]] std::span<const std::string> request_names() const noexcept { return reader_->request_names(); }
  /// The format version of the file (1 or 2).
  [[nodiscard]] std::uint32_t version() const noexcept { return reader_->version(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  /// The whole trace; may be called once.
  ///
  /// Throws: `parse_error` as `read_canonical`.
  [[nodiscard]] routing_trace read() {
    MOEPOLICY_ASSERT(!read_);
    read_ = true;
    return reader_->read_opened();
  }

  /// Walks every batch (see the class comment), `chunk_rows` rows at a time (the window
  /// held, extended to the end of a batch). Safe to run from several threads at once.
  /// Rows are checked until one walk has completed; later walks skip the per-row check.
  ///
  /// Throws: `parse_error` naming the file, the byte offset of the offending entry and the
  /// row, for a row `routing_trace::from_sorted` would reject (rows are checked in file
  /// order, so where a file has several problems the first in file order is named);
  /// anything the callbacks throw. Batches before the problem have been walked.
  template <class OnRequest, class OnBatch, class OnStepEnd>
  void for_each_batch(OnRequest&& on_request, OnBatch&& on_batch, OnStepEnd&& on_step_end,
                      std::uint64_t chunk_rows = default_chunk_rows) const {
    reader_->walk(chunk_rows, on_request, on_batch, on_step_end);
  }

  /// Walks the batches of the rows [first, last) alone, in file order, as `for_each_batch`
  /// passes them to `on_batch` (the same views, `batch_ref` included), `chunk_rows` rows at a
  /// time: a window onto a part of the file, for a reader that looks ahead of (or back
  /// behind) a walk. The rows are not checked again: a walk of the whole file must have
  /// completed first. Safe to run from several threads at once.
  ///
  /// Throws: `invalid_argument` naming the function and the file when no whole walk has
  /// completed, when the rows lie outside the file, or when `first` or `last` is inside a
  /// batch (not at its first row); anything `on_batch` throws.
  template <class OnBatch>
  void for_each_batch_in_rows(std::uint64_t first, std::uint64_t last, OnBatch&& on_batch,
                              std::uint64_t chunk_rows = default_chunk_rows) const {
    reader_->walk_rows(first, last, chunk_rows, on_batch);
  }

  /// Writes this trace as a canonical file of the current version to `out` in bounded
  /// memory: every row is checked by a walk first, then the payload (the same bytes in
  /// every version) is copied from the map under a fresh header and checksum, replacing
  /// `out` atomically. What `write_canonical(read(), out)` writes, without holding the trace.
  ///
  /// Throws: `parse_error` as `for_each_batch`; `std::filesystem::filesystem_error` as
  /// `write_canonical`.
  void write_current_version(const std::filesystem::path& out) const {
    namespace c = detail::canonical;
    const auto nothing = [](const auto&) {};
    for_each_batch(nothing, nothing, nothing);
    const auto payload = reader_->payload();
    detail::write_file_atomically(out, "moepolicy::write_canonical", [&](std::ostream& os) {
      const std::array<std::byte, c::header_size> blank{};
      os.write(reinterpret_cast<const char*>(blank.data()), static_cast<std::streamsize>(blank.size()));
      c::hashing_stream_sink sink{os, c::xxh64_state(0)};
      constexpr std::size_t piece = std::size_t{1} << 24;
      for (std::size_t at = 0; at < payload.size(); at += piece) {
        const auto part = payload.subspan(at, std::min(piece, payload.size() - at));
        sink.put(part);
        if (file_) file_->release(c::header_size + at, part.size());
      }
      const auto h = c::make_header(info(), num_rows(), static_cast<std::uint32_t>(request_names().size()),
                                    payload.size(), sink.state.value());
      os.seekp(0);
      os.write(reinterpret_cast<const char*>(h.data()), static_cast<std::streamsize>(h.size()));
      if (!os) throw std::ios_base::failure("moepolicy::write_canonical: the stream failed while writing");
    });
  }

  /// The file's columns used in place, for a reader that gathers rows in any order (the
  /// rows of several requests at once): valid while this object lives. Their pages are
  /// faulted in as they are read and held until `release_columns()`, which a reader calls
  /// every so many rows to hold a bounded part of the file. Nothing when the columns are
  /// not aligned little-endian data (a buffer of odd alignment, a big-endian machine):
  /// then `read()` the trace instead. The rows are not checked again: a walk of the whole
  /// file must have completed first.
  ///
  /// Throws: `invalid_argument` naming the function and the file when no whole walk has
  /// completed.
  [[nodiscard]] std::optional<canonical_columns> columns() const { return reader_->columns(); }

  /// Gives back the mapped pages of every column, whatever the file's size (a later read
  /// faults them in again from the page cache).
  void release_columns() const noexcept { reader_->release_columns(); }

  /// Rows per chunk of a walk unless told: 2^18 (about 7 MB of a top-2 trace).
  static constexpr std::uint64_t default_chunk_rows = std::uint64_t{1} << 18;

 private:
  std::unique_ptr<detail::mapped_file> file_;
  std::string name_;
  std::optional<detail::canonical::reader> reader_;
  bool read_ = false;
};

/// Reads the canonical trace file `path`, through a memory map: the columns are copied
/// from the map, never through a buffer of the whole file.
///
/// Throws: `parse_error` naming `path` as the span overload, when the file cannot be
/// opened or read, or when it is larger than `input_limits::max_file_bytes`.
[[nodiscard]] inline routing_trace read_canonical(const std::filesystem::path& path) {
  if (const std::size_t size = detail::file_size_or_zero(path); size > detail::file_limit().bytes) {
    detail::fail_too_large(path.string(), detail::file_limit());
  }
  canonical_file f(path, canonical_file::access::copy);
  return f.read();
}

/// Writes a canonical file of `num_rows` rows that `fill` produces in order, without ever
/// holding the trace: `fill(first, count, columns)` sets `columns` to the rows [first,
/// first + count) (every column, `count` entries per row). The file is written column by
/// column, so `fill` is called for every chunk once per column (nine passes; it must give
/// the same rows each time); rows are checked as `routing_trace::from_sorted` checks them
/// on the first pass. The file replaces `path` atomically once complete. Memory: one
/// chunk of `chunk_rows` rows.
///
/// Throws: `invalid_argument` naming `write_canonical_rows` and the row for a row the
/// reader would reject, or for `fill` giving columns of the wrong length (the file is then
/// not written); `std::filesystem::filesystem_error` as `write_canonical`.
template <class Fill>
void write_canonical_rows(const std::filesystem::path& path, const trace_info& info,
                          std::span<const std::string> request_names, std::uint64_t num_rows, Fill&& fill,
                          std::uint64_t chunk_rows = std::uint64_t{1} << 16) {
  namespace c = detail::canonical;
  constexpr std::string_view fn = "write_canonical_rows";
  detail::check_info(info, fn);
  if (num_rows > std::numeric_limits<std::uint32_t>::max()) {
    detail::throw_invalid(fn, "num_rows must be at most 4294967295", num_rows);
  }
  chunk_rows = std::max<std::uint64_t>(chunk_rows, 1);
  const std::uint64_t k = info.top_k, e = info.num_experts;
  std::uint64_t meta = 8 + info.model.size() + info.source.size();
  for (const auto& n : request_names) meta += 4 + n.size();
  const std::array<std::uint64_t, c::num_sections> section_bytes = {meta,
                                                                    4 * num_rows,
                                                                    4 * num_rows,
                                                                    4 * num_rows,
                                                                    2 * num_rows,
                                                                    num_rows,
                                                                    2 * k * num_rows,
                                                                    4 * k * num_rows,
                                                                    info.has_scores ? 4 * e * num_rows : 0};
  std::uint64_t payload = 0;
  for (const std::uint64_t n : section_bytes) payload += c::section_header_size + c::pad8(n);
  detail::write_file_atomically(path, fn, [&](std::ostream& os) {
    const std::array<std::byte, c::header_size> blank{};
    os.write(reinterpret_cast<const char*>(blank.data()), static_cast<std::streamsize>(blank.size()));
    c::hashing_stream_sink sink{os, c::xxh64_state(0)};
    c::emit_section_header(sink, c::meta, meta);
    c::emit_string(sink, info.model);
    c::emit_string(sink, info.source);
    for (const auto& n : request_names) c::emit_string(sink, n);
    c::emit_padding(sink, meta);
    trace_columns cols;
    using row_key_t = std::tuple<std::uint32_t, std::uint32_t, layer_id, std::uint32_t>;
    row_key_t prev{};
    phase prev_kind = phase::prefill;
    for (std::size_t s = c::request; s < c::num_sections; ++s) {
      const auto sec = static_cast<c::section>(s);
      c::emit_section_header(sink, sec, section_bytes[s]);
      for (std::uint64_t first = 0; first < num_rows; first += chunk_rows) {
        const std::uint64_t n = std::min(chunk_rows, num_rows - first);
        fill(first, n, cols);
        const auto need = [&](std::size_t got, std::uint64_t want, const char* what) {
          if (got != want) {
            detail::throw_invalid(fn,
                                  std::string(what) + " column of rows from " + std::to_string(first) + " must have " +
                                      std::to_string(want) + " entries",
                                  got);
          }
        };
        need(cols.request.size(), n, "request");
        need(cols.step.size(), n, "step");
        need(cols.position.size(), n, "position");
        need(cols.layer.size(), n, "layer");
        need(cols.kind.size(), n, "phase");
        need(cols.experts.size(), n * k, "experts");
        need(cols.weights.size(), n * k, "weights");
        need(cols.scores.size(), info.has_scores ? n * e : 0, "scores");
        if (sec == c::request) {
          for (std::uint64_t i = 0; i < n; ++i) {
            const trace_row row{
                cols.request[i],
                cols.kind[i],
                cols.step[i],
                cols.position[i],
                cols.layer[i],
                std::span<const expert_id>(cols.experts).subspan(i * k, k),
                std::span<const float>(cols.weights).subspan(i * k, k),
                info.has_scores ? std::span<const float>(cols.scores).subspan(i * e, e) : std::span<const float>()};
            const std::uint64_t r = first + i;
            if (auto why = detail::check_row(info, request_names.size(), row)) {
              detail::throw_invalid(fn, "row " + std::to_string(r) + ": " + *why);
            }
            const row_key_t key{row.request, row.step, row.layer, row.position};
            if (r > 0 && !(prev < key)) {
              detail::throw_invalid(fn, "row " + std::to_string(r) +
                                            " is out of (request, step, layer, position) order "
                                            "or repeats the row before");
            }
            if (r > 0 && std::get<0>(prev) == row.request && std::get<1>(prev) == row.step && prev_kind != row.kind) {
              detail::throw_invalid(fn, "row " + std::to_string(r) + ": step " + std::to_string(row.step) +
                                            " of request " + std::to_string(row.request) +
                                            " mixes prefill and decode rows");
            }
            prev = key;
            prev_kind = row.kind;
          }
        }
        switch (sec) {
          case c::request:
            c::emit_elements(sink, cols.request);
            break;
          case c::step:
            c::emit_elements(sink, cols.step);
            break;
          case c::position:
            c::emit_elements(sink, cols.position);
            break;
          case c::layer:
            c::emit_elements(sink, cols.layer);
            break;
          case c::kind:
            c::emit_elements(sink, cols.kind);
            break;
          case c::experts:
            c::emit_elements(sink, cols.experts);
            break;
          case c::weights:
            c::emit_elements(sink, cols.weights);
            break;
          default:
            c::emit_elements(sink, cols.scores);
            break;
        }
      }
      c::emit_padding(sink, section_bytes[s]);
    }
    const auto h =
        c::make_header(info, num_rows, static_cast<std::uint32_t>(request_names.size()), payload, sink.state.value());
    os.seekp(0);
    os.write(reinterpret_cast<const char*>(h.data()), static_cast<std::streamsize>(h.size()));
    if (!os) throw std::ios_base::failure("moepolicy::write_canonical_rows: the stream failed while writing");
  });
}

/// Whether `first_bytes` (at least the first 8 bytes of a file) start with the canonical
/// magic; for format detection.
[[nodiscard]] inline bool is_canonical(std::span<const std::byte> first_bytes) noexcept {
  const auto& m = detail::canonical::magic;
  return first_bytes.size() >= m.size() && std::memcmp(first_bytes.data(), m.data(), m.size()) == 0;
}

/// The format version a canonical file declares, from at least its first 12 bytes; empty
/// when they do not start with the canonical magic or are too few. Whether the reader
/// takes that version is `read_canonical`'s part.
[[nodiscard]] inline std::optional<std::uint32_t> canonical_version(std::span<const std::byte> first_bytes) noexcept {
  namespace c = detail::canonical;
  if (!is_canonical(first_bytes) || first_bytes.size() < c::field::version + 4) return std::nullopt;
  return c::load<std::uint32_t>(first_bytes.data() + c::field::version);
}

}  // namespace moepolicy
