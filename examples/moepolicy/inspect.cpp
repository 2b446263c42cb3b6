// `moepolicy inspect TRACE...`: the model shape, requests, tokens per phase and per-layer
// skew of each trace. A canonical file's format version is named with its checksum (the
// weak one of version 1 says so). Names from the trace are printed with their control
// characters escaped (printable.hpp). One canonical file is summarised in one walk of its
// memory map, in bounded memory whatever its size.
#include <array>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <span>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "../common/model_match.hpp"
#include "../common/table.hpp"
#include "commands.hpp"
#include "common/trace_input.hpp"
#include "moepolicy/core/model_shape.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/summary.hpp"
#include "printable.hpp"
#include "scratch_canonical.hpp"

namespace moepolicy::tool {
namespace {

using examples::fixed;

std::string ratio(double r) { return std::isinf(r) ? "inf" : fixed(r, 2) + "x"; }

/// The format of the file `p`; for a canonical file with its version and checksum.
std::string format_of(const std::filesystem::path& p) {
  std::string out(examples::trace_format_name(p));
  if (!examples::is_canonical_trace(p)) return out;
  std::array<std::byte, 12> head{};
  std::ifstream in(p, std::ios::binary);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  if (const auto v =
          canonical_version(std::span<const std::byte>(head.data(), static_cast<std::size_t>(in.gcount())))) {
    out += ", version " + std::to_string(*v) + ", checksum " + std::string(canonical_checksum_name(*v));
  }
  return out;
}

/// The info and summary of the traces `paths`: one canonical file is summarised in one walk
/// of its map (bounded memory), one routing JSONL or CSV file through a
/// scratch canonical file, anything else read whole.
std::pair<trace_info, trace_summary> read_summary(const std::vector<std::filesystem::path>& paths) {
  std::error_code ec;
  if (paths.size() == 1 && std::filesystem::is_regular_file(paths.front(), ec) &&
      examples::is_canonical_trace(paths.front())) {
    const canonical_file f(paths.front());
    return {f.info(), summarize(f)};
  }
  // Routing JSONL or CSV goes into a scratch canonical file in the temporary folder,
  // walked as above and then removed (scratch_canonical.hpp).
  if (const auto scratch = scratch_canonical(paths, "inspect")) {
    const canonical_file c(scratch->path());
    return {c.info(), summarize(c)};
  }
  const routing_trace trace = examples::load_trace(paths);
  return {trace.info(), summarize(trace)};
}

void inspect_one(const std::vector<std::filesystem::path>& paths, bool per_request) {
  const auto [info, s] = read_summary(paths);

  std::cout << "trace: " << printable(paths.front().string());
  if (paths.size() > 1) std::cout << " (+" << paths.size() - 1 << " more files)";
  std::cout << '\n';
  std::cout << "  format: " << format_of(paths.front()) << '\n';
  std::cout << "  model: " << (info.model.empty() ? "(not recorded)" : printable(info.model)) << '\n';
  std::cout << "  shape: " << info.num_layers << " MoE layers, " << info.num_experts << " experts, top-" << info.top_k
            << ", router scores " << (info.has_scores ? "recorded" : "not recorded") << '\n';
  if (auto preset = examples::preset_for(info)) {
    std::cout << "  preset " << preset->name << ": " << preset->num_layers << " layers, hidden " << preset->hidden_size
              << ", expert intermediate " << preset->expert_intermediate_size << ", FP16 expert "
              << fixed(static_cast<double>(expert_bytes(*preset, fp16)) / (1 << 20), 2) << " MiB\n";
  }
  std::cout << "  requests " << s.requests.size() << ", steps " << s.steps << ", rows " << s.rows << '\n';
  std::cout << "  tokens: prefill " << s.prefill_tokens << ", decode " << s.decode_tokens;
  if (s.min_layer_tokens != s.max_layer_tokens) {
    std::cout << " (per layer " << s.min_layer_tokens << " to " << s.max_layer_tokens << ")";
  }
  std::cout << '\n';
  if (per_request || s.requests.size() <= 16) {
    examples::text_table t({"request", "rows", "prefill", "decode", "steps"});
    for (const auto& r : s.requests) {
      t.add({printable(r.name), std::to_string(r.rows), std::to_string(r.prefill_tokens),
             std::to_string(r.decode_tokens), std::to_string(r.steps)});
    }
    t.print(std::cout, "    ");
  }
  std::cout << "  per-layer skew (shares of expert selections; entropy in bits, uniform = "
            << fixed(std::log2(static_cast<double>(info.num_experts)), 2) << "):\n";
  examples::text_table t({"layer", "tokens", "used", "max share", "min share", "max/min", "entropy"});
  for (const auto& L : s.layers) {
    t.add({std::to_string(L.layer), std::to_string(L.prefill_tokens + L.decode_tokens),
           std::to_string(L.experts_used) + "/" + std::to_string(info.num_experts), fixed(L.max_share, 4),
           fixed(L.min_share, 4), ratio(L.max_min_ratio), fixed(L.entropy_bits, 3)});
  }
  t.print(std::cout, "    ");
}

}  // namespace

void run_inspect(const inspect_options& o) {
  if (o.combine) {
    std::vector<std::filesystem::path> paths(o.traces.begin(), o.traces.end());
    inspect_one(paths, o.per_request);
    return;
  }
  bool first = true;
  for (const auto& p : o.traces) {
    if (!first) std::cout << '\n';
    first = false;
    inspect_one({std::filesystem::path(p)}, o.per_request);
  }
}

}  // namespace moepolicy::tool
