// libFuzzer target of the JSON table readers (MC-MoE activation statistics and
// quantization loss, OLMoE expert counts and co-activation): every input is either read
// or rejected with moepolicy::parse_error by each reader; any other exception (an
// nlohmann one included), crash or sanitizer report is a bug.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/tables_json.hpp"

namespace {

template <class Read>
void reject_only_with_parse_error(const std::string& text, Read read) {
  std::istringstream in(text);
  try {
    read(in);
  } catch (const moepolicy::parse_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace io = moepolicy::io;
  const std::string text(reinterpret_cast<const char*>(data), size);
  reject_only_with_parse_error(text, [](std::istream& in) {
    const auto s = io::read_activation_stats_json(in, "fuzz.json");
    if (s.frequency.num_rows() != s.weight_sum.num_rows()) __builtin_trap();
  });
  reject_only_with_parse_error(text, [](std::istream& in) {
    const auto t = io::read_quant_loss_json(in, "fuzz.json");
    static_cast<void>(t.non_monotone_experts());
  });
  reject_only_with_parse_error(text, [](std::istream& in) {
    const auto c = io::read_olmoe_expert_counts_json(in, "fuzz.json");
    for (const auto& d : c.datasets) {
      if (d.counts.num_rows() != c.layers.size()) __builtin_trap();
    }
  });
  reject_only_with_parse_error(text, [](std::istream& in) {
    const auto c = io::read_olmoe_coactivation_json(in, "fuzz.json");
    for (const auto& d : c.datasets) {
      if (d.counts.num_pairs() != c.pairs.size()) __builtin_trap();
    }
  });
  return 0;
}
