// libFuzzer target for the canonical trace reader (moepolicy/trace/canonical.hpp).
//
// Every input must either read or throw `moepolicy::parse_error`; anything else (another
// exception, a sanitizer report, a huge allocation) is a bug. Each input is read as it is
// and, when its checksum is wrong, again with the checksum made right for the version it
// declares (1 or 2), so that mutations also reach the checks behind the checksum. A trace that reads must
// write back to the very same bytes (the format is canonical; a version-1 file comes back
// as version 2, differing only in the version and checksum fields) and must export to
// CSV (written to a sink that discards it). The mapped reader (`canonical_file`) must open
// exactly the inputs whose header, sections, checksum and META the whole read accepts; its
// walk, in windows of a few rows and for half of the inputs from a misaligned copy, must
// fail where the whole read failed in the rows, and otherwise see the read trace's batches.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <ostream>
#include <span>
#include <streambuf>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/csv_export.hpp"

namespace {

namespace c = moepolicy::detail::canonical;

/// A stream buffer that compares what is written with `expected` as it comes, holding
/// nothing (a written copy of a large input cost more than reading it). Bytes in `skip`
/// (the version and checksum of a version-1 input) are not compared.
class compare_buf : public std::streambuf {
 public:
  compare_buf(std::span<const std::byte> expected, bool skip_version_and_checksum)
      : expected_(expected), skip_(skip_version_and_checksum) {}
  [[nodiscard]] bool same() const noexcept { return same_ && at_ == expected_.size(); }

 protected:
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    const auto len = static_cast<std::size_t>(n);
    if (at_ >= c::header_size && at_ + len <= expected_.size()) {  // the payload: compared whole
      if (std::memcmp(expected_.data() + at_, s, len) != 0) same_ = false;
      at_ += len;
      return n;
    }
    for (std::size_t i = 0; i < len; ++i) put(static_cast<unsigned char>(s[i]));
    return n;
  }
  int_type overflow(int_type ch) override {
    if (!traits_type::eq_int_type(ch, traits_type::eof())) put(static_cast<unsigned char>(ch));
    return traits_type::not_eof(ch);
  }

 private:
  void put(unsigned char b) noexcept {
    const bool skipped = skip_ && ((at_ >= c::field::version && at_ < c::field::version + 4) ||
                                   (at_ >= c::field::checksum && at_ < c::field::checksum + 8));
    if (at_ >= expected_.size() || (!skipped && std::to_integer<unsigned char>(expected_[at_]) != b)) same_ = false;
    ++at_;
  }
  std::span<const std::byte> expected_;
  bool skip_;
  std::size_t at_ = 0;
  bool same_ = true;
};

/// A stream buffer that discards what is written.
class null_buf : public std::streambuf {
 protected:
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
  int_type overflow(int_type ch) override { return traits_type::not_eof(ch); }
};

/// Walks `f` in windows of 1-5 rows, so that the walk crosses window boundaries (the
/// default window of 2^18 rows holds any input here whole), handing each batch to `check`.
template <class Check>
void walk(const moepolicy::canonical_file& f, std::size_t size, Check&& check) {
  const auto nothing = [](const auto&) {};
  f.for_each_batch(nothing, check, nothing, 1 + size % 5);
}

void read_one(std::span<const std::byte> in) {
  std::optional<moepolicy::routing_trace> read;
  try {
    read.emplace(moepolicy::read_canonical(in, "fuzz"));
  } catch (const moepolicy::parse_error&) {
  }
  // The mapped reader on the same bytes; for half of the inputs (by size: every file that
  // can open is a multiple of 8 bytes long) at an address one byte off, where it copies
  // each window of columns instead of using them in place.
  std::vector<std::byte> shifted;
  std::span<const std::byte> bytes = in;
  if (in.size() % 16 >= 8) {
    shifted.resize(in.size() + 1);
    std::copy(in.begin(), in.end(), shifted.begin() + 1);
    bytes = std::span<const std::byte>(shifted).subspan(1);
  }
  std::optional<moepolicy::canonical_file> f;
  try {
    f.emplace(bytes, "fuzz");
  } catch (const moepolicy::parse_error&) {
    if (read) std::abort();  // both check the same header, sections, checksum and META
    return;
  }
  if (!read) {
    // The whole read failed in the rows (the rest opened): the walk must fail too.
    try {
      walk(*f, in.size(), [](const moepolicy::batch_view&) {});
    } catch (const moepolicy::parse_error&) {
      return;
    }
    std::abort();
  }
  const moepolicy::routing_trace& t = *read;
  // The walk sees the same batches with the same rows; then the rows again as one range.
  const auto batches = t.batches();
  const std::size_t k = t.info().top_k;
  std::size_t seen = 0, rows = 0;
  walk(*f, in.size(), [&](const moepolicy::batch_view& b) {
    if (seen >= batches.size()) std::abort();
    const moepolicy::batch_ref want = batches[seen++];
    const moepolicy::batch_ref& got = b.ref;
    if (got.request != want.request || got.step != want.step || got.layer != want.layer || got.kind != want.kind ||
        got.first_row != want.first_row || got.num_rows != want.num_rows || b.experts.size() != want.num_rows * k ||
        !std::equal(b.experts.begin(), b.experts.end(),
                    t.columns().experts.begin() + static_cast<std::ptrdiff_t>(want.first_row * k))) {
      std::abort();
    }
    rows += b.tokens();
  });
  if (seen != batches.size() || rows != t.num_rows()) std::abort();
  std::size_t again = 0;
  f->for_each_batch_in_rows(0, t.num_rows(), [&](const moepolicy::batch_view& b) { again += b.tokens(); });
  if (again != t.num_rows()) std::abort();
  const bool v1 = c::load<std::uint32_t>(in.data() + c::field::version) == 1;
  compare_buf cmp(in, v1);
  std::ostream os(&cmp);
  moepolicy::write_canonical(t, os);
  if (!cmp.same()) std::abort();
  null_buf sink;
  std::ostream csv(&sink);
  moepolicy::write_csv(t, csv);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = std::as_bytes(std::span<const std::uint8_t>(data, size));
  read_one(in);
  if (size >= c::header_size) {
    const auto payload = c::load<std::uint64_t>(in.data() + c::field::payload_bytes);
    const auto version = c::load<std::uint32_t>(in.data() + c::field::version);
    if (payload == size - c::header_size && payload % 8 == 0 && (version == 1 || version == 2)) {
      // An input whose checksum is already right (the seeds, and most mutations of the
      // header) would be read a second time to the same result: skipped.
      const auto sum = c::checksum(in.subspan(c::header_size), version);
      if (sum != c::load<std::uint64_t>(in.data() + c::field::checksum)) {
        std::vector<std::byte> sealed(in.begin(), in.end());
        c::store<std::uint64_t>(sealed.data() + c::field::checksum, sum);
        read_one(sealed);
      }
    }
  }
  return 0;
}
