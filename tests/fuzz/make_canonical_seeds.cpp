// Writes the small seeds of the canonical reader's depth campaign (tests/fuzz/seeds/canonical,
// described in its README.md): rows cut from the bundled Granite trace (Apache-2.0, see
// examples/traces/granite-3.1-1b-a400m/PROVENANCE.txt), kept in the trace's order and
// written as valid canonical files of both format versions, with and without router scores.
//
//   make_canonical_seeds GRANITE.mtrace OUT_DIR
//
// Each seed keeps the first `requests` requests; of each, the first `prefill_tokens` token
// positions of its prefill step and its first `decode_steps` decode steps; and of every
// kept token, the layers below `layers` (the header keeps the model's 24 layers, 32 experts
// and top-8). So each seed holds several requests, both phases, several steps, layers and
// positions, and every column, at a few hundred rows or fewer.
//
// The Granite trace records gate weights but no router scores; the seeds "with scores"
// add a score column derived from the weights (the log of each selected expert's weight,
// and for the other experts a value below every selected one), finite as the format asks.
// They exist to put the SCOR section and its checks under the fuzzer, not as data.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "moepolicy/trace/canonical.hpp"

namespace {

namespace c = moepolicy::detail::canonical;

struct cut {
  std::string name;
  std::uint32_t requests, prefill_tokens, decode_steps, layers;
  bool scores;
  std::uint32_t version;
};

moepolicy::routing_trace make_cut(const moepolicy::routing_trace& t, const cut& spec) {
  moepolicy::trace_info info = t.info();
  info.has_scores = spec.scores;
  info.source = "bundled Granite trace, cut for the fuzzer's seed corpus" +
                std::string(spec.scores ? " (router scores derived from the gate weights)" : "");
  std::vector<std::string> names;
  for (std::uint32_t q = 0; q < spec.requests; ++q) names.push_back(t.requests()[q].name);
  moepolicy::trace_columns cols;
  const std::size_t k = info.top_k;
  for (std::size_t r = 0; r < t.num_rows(); ++r) {
    const moepolicy::trace_row row = t.row(r);
    if (row.request >= spec.requests || row.layer >= spec.layers) continue;
    const std::uint32_t first_position = t.row(t.requests()[row.request].first_row).position;
    if (row.kind == moepolicy::phase::prefill && row.position >= first_position + spec.prefill_tokens) continue;
    if (row.kind == moepolicy::phase::decode && row.step > spec.decode_steps) continue;
    cols.request.push_back(row.request);
    cols.step.push_back(row.step);
    cols.position.push_back(row.position);
    cols.layer.push_back(row.layer);
    cols.kind.push_back(row.kind);
    cols.experts.insert(cols.experts.end(), row.experts.begin(), row.experts.end());
    cols.weights.insert(cols.weights.end(), row.weights.begin(), row.weights.end());
    if (spec.scores) {
      float lowest = 0.0f;
      std::vector<float> s(info.num_experts, 0.0f);
      for (std::size_t i = 0; i < k; ++i) {
        s[row.experts[i]] = std::log(std::max(row.weights[i], 1e-6f));
        lowest = std::min(lowest, s[row.experts[i]]);
      }
      std::vector<bool> chosen(info.num_experts, false);
      for (std::size_t i = 0; i < k; ++i) chosen[row.experts[i]] = true;
      for (std::size_t e = 0; e < info.num_experts; ++e) {
        if (!chosen[e]) s[e] = lowest - 1.0f - 0.125f * static_cast<float>((e * 7 + r) % 16);
      }
      cols.scores.insert(cols.scores.end(), s.begin(), s.end());
    }
  }
  return moepolicy::routing_trace::from_sorted(std::move(info), std::move(names), std::move(cols));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_canonical_seeds GRANITE.mtrace OUT_DIR\n";
    return 2;
  }
  try {
    const moepolicy::routing_trace t = moepolicy::read_canonical(std::filesystem::path(argv[1]));
    const std::filesystem::path out = argv[2];
    std::filesystem::create_directories(out);
    const std::vector<cut> cuts = {
        {"granite-2req-24layers.mtrace", 2, 3, 2, 24, false, 2},
        {"granite-2req-4layers-v1.mtrace", 2, 3, 2, 4, false, 1},
        {"granite-2req-4layers-scores.mtrace", 2, 3, 2, 4, true, 2},
        {"granite-2req-2layers-scores-v1.mtrace", 2, 2, 2, 2, true, 1},
    };
    for (const cut& spec : cuts) {
      const moepolicy::routing_trace s = make_cut(t, spec);
      std::ostringstream os;
      moepolicy::write_canonical(s, os);
      std::string bytes = std::move(os).str();
      if (spec.version == 1) {  // the same file in format version 1: its version and checksum
        auto* p = reinterpret_cast<std::byte*>(bytes.data());
        const std::span<const std::byte> payload(p + c::header_size, bytes.size() - c::header_size);
        c::store<std::uint32_t>(p + c::field::version, 1);
        c::store<std::uint64_t>(p + c::field::checksum, c::checksum(payload, 1));
      }
      // Every seed must read back to the trace it was written from.
      const moepolicy::routing_trace back =
          moepolicy::read_canonical(std::as_bytes(std::span(bytes.data(), bytes.size())), spec.name);
      if (back.num_rows() != s.num_rows()) throw std::runtime_error(spec.name + ": does not read back");
      std::ofstream(out / spec.name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
      std::cout << spec.name << ": " << s.num_rows() << " rows, " << s.requests().size() << " requests, "
                << bytes.size() << " bytes, version " << spec.version << '\n';
    }
  } catch (const std::exception& e) {
    std::cerr << "make_canonical_seeds: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
