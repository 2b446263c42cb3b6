// libFuzzer target of the machine description reader: every input is either read or
// rejected with moepolicy::parse_error; any other exception (an nlohmann one or
// moepolicy::invalid_argument included), a device that fails device_spec::validate(), a
// link that is not priced, a crash or a sanitizer report is a bug.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/machine_json.hpp"

namespace {

void check(const std::optional<moepolicy::device_spec>& d) {
  if (d) d->validate();  // throws invalid_argument, which libFuzzer reports, when not valid
}

void check(const std::optional<moepolicy::link_spec>& l) {
  if (l && (!(l->bandwidth > 0.0) || !(l->latency_seconds >= 0.0) || !std::isfinite(l->latency_seconds))) {
    __builtin_trap();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    const auto m = moepolicy::io::parse_machine(text, "fuzz.json");
    check(m.gpu);
    check(m.cpu);
    check(m.cxl_ndp);
    check(m.dimm_ndp);
    check(m.host_link);
    check(m.cxl_link);
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
