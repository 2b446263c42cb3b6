// libFuzzer target of the JSON table readers (MC-MoE activation statistics and
// quantization loss, OLMoE expert counts and co-activation): every input is either read
// or rejected with moepolicy::parse_error by each reader; any other exception (an
// nlohmann one included), crash or sanitizer report is a bug.
//
// Each public reader is `read_rest` (the size limit), then the document parsed, then read
// as its table. The input is parsed once, as the readers parse it, and the four tables
// are read from that one DOM: parsing was two thirds of each reader's time, so reading it
// four times made an execution about twice as long for the same code reached.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "moepolicy/core/error.hpp"
#include "moepolicy/io/tables_json.hpp"

namespace {

template <class Read>
void reject_only_with_parse_error(Read read) {
  try {
    read();
  } catch (const moepolicy::parse_error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace t = moepolicy::io::detail::tables_json;
  const std::string name = "fuzz.json";
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  nlohmann::json root;
  try {
    root = t::parse(moepolicy::detail::read_rest<std::string>(in, name, moepolicy::detail::json_limit()), name);
  } catch (const moepolicy::parse_error&) {
    return 0;
  }
  reject_only_with_parse_error([&] {
    const auto s = t::activation_stats_from_root(root, name);
    if (s.frequency.num_rows() != s.weight_sum.num_rows()) __builtin_trap();
  });
  reject_only_with_parse_error([&] {
    const auto l = t::quant_loss_from_root(root, name);
    static_cast<void>(l.non_monotone_experts());
  });
  reject_only_with_parse_error([&] {
    const auto c = t::expert_counts_from_root(root, name);
    for (const auto& d : c.datasets) {
      if (d.counts.num_rows() != c.layers.size()) __builtin_trap();
    }
  });
  reject_only_with_parse_error([&] {
    const auto c = t::coactivation_from_root(root, name);
    for (const auto& d : c.datasets) {
      if (d.counts.num_pairs() != c.pairs.size()) __builtin_trap();
    }
  });
  return 0;
}
