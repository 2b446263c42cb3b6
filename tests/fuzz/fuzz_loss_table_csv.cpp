// libFuzzer target of the loss-table CSV reader: every input is either read into a table
// or rejected with moepolicy::parse_error; any other exception, crash or sanitizer report
// is a bug. An accepted table must write back to CSV that reads to the same table.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/loss_table_csv.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    const moepolicy::loss_table t = moepolicy::io::read_loss_table_csv(in, "fuzz.csv");
    std::stringstream again;
    moepolicy::io::write_loss_table_csv(t, again);
    const moepolicy::loss_table back = moepolicy::io::read_loss_table_csv(again, "again");
    if (back.num_layers() != t.num_layers() || back.num_experts() != t.num_experts() || back.num_bits() != t.num_bits()) {
      __builtin_trap();
    }
  } catch (const moepolicy::parse_error&) {
  }
  return 0;
}
