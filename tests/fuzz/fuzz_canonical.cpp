// libFuzzer target for the canonical trace reader (moepolicy/trace/canonical.hpp).
//
// Every input must either read or throw `moepolicy::parse_error`; anything else (another
// exception, a sanitizer report, a huge allocation) is a bug. Each input is read twice:
// as it is, and with its checksum made right for the version it declares (1 or 2), so
// that mutations also reach the checks behind the checksum. A trace that reads must
// write back to the very same bytes (the format is canonical; a version-1 file comes back
// as version 2, differing only in the version and checksum fields) and must export to
// CSV.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <sstream>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/csv_export.hpp"

namespace {

namespace c = moepolicy::detail::canonical;

void read_one(std::span<const std::byte> in) {
  try {
    const moepolicy::routing_trace t = moepolicy::read_canonical(in, "fuzz");
    std::ostringstream os(std::ios::binary);
    moepolicy::write_canonical(t, os);
    const std::string out = os.str();
    if (out.size() != in.size()) std::abort();
    std::vector<std::byte> expected(in.begin(), in.end());
    if (c::load<std::uint32_t>(in.data() + c::field::version) == 1) {
      c::store<std::uint32_t>(expected.data() + c::field::version, 2);
      std::memcpy(expected.data() + c::field::checksum, out.data() + c::field::checksum, 8);
    }
    if (std::memcmp(out.data(), expected.data(), expected.size()) != 0) std::abort();
    std::ostringstream csv;
    moepolicy::write_csv(t, csv);
  } catch (const moepolicy::parse_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto in = std::as_bytes(std::span<const std::uint8_t>(data, size));
  read_one(in);
  if (size >= c::header_size) {
    const auto payload = c::load<std::uint64_t>(in.data() + c::field::payload_bytes);
    const auto version = c::load<std::uint32_t>(in.data() + c::field::version);
    if (payload == size - c::header_size && payload % 8 == 0 && (version == 1 || version == 2)) {
      std::vector<std::byte> sealed(in.begin(), in.end());
      c::store<std::uint64_t>(sealed.data() + c::field::checksum, c::checksum(in.subspan(c::header_size), version));
      read_one(sealed);
    }
  }
  return 0;
}
