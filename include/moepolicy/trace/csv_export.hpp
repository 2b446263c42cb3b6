// moepolicy/trace/csv_export.hpp — a routing trace as CSV, for spreadsheets, pandas and
// other tools that do not read the canonical format.
//
// Columns, in this order (k = top_k, E = num_experts):
//   request           the request's name, quoted as RFC 4180 says when it holds a comma,
//                     a double quote, CR or LF (quotes doubled inside);
//   phase             "prefill" or "decode";
//   step              the forward pass within the request, from 0;
//   position          the token's position;
//   layer             the MoE layer;
//   e_0 .. e_{k-1}    the selected expert ids, in the trace's order;
//   w_0 .. w_{k-1}    their gate weights;
//   s_0 .. s_{E-1}    the router scores of every expert, only when the trace has scores.
// One header line, then one line per row in the trace's (request, step, layer, position)
// order; lines end with "\n". Integers in decimal; floats in the shortest decimal form
// that reads back to the same float (`std::to_chars`), e.g. 0.1 for 0.1f, 1e-05 for 1e-5f.
#pragma once

#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <ios>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

namespace detail::csv {

/// `s` as one CSV field.
[[nodiscard]] inline std::string field(std::string_view s) {
  if (s.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

template <class T>
inline void append(std::string& out, T value) {
  std::array<char, 32> buf{};
  const auto [end, ec] = std::to_chars(buf.data(), buf.data() + buf.size(), value);
  MOEPOLICY_ASSERT(ec == std::errc{});
  out.append(buf.data(), end);
}

}  // namespace detail::csv

/// Writes `trace` as CSV with the columns listed at the top of this header.
///
/// Throws: `std::ios_base::failure` when the stream fails.
/// Complexity: linear in the rows × (top_k + scores per row); writes in 64 KiB blocks.
inline void write_csv(const routing_trace& trace, std::ostream& os) {
  const trace_info& info = trace.info();
  const std::size_t k = info.top_k;
  std::string buf = "request,phase,step,position,layer";
  for (std::size_t i = 0; i < k; ++i) (buf += ",e_") += std::to_string(i);
  for (std::size_t i = 0; i < k; ++i) (buf += ",w_") += std::to_string(i);
  if (info.has_scores) {
    for (std::size_t j = 0; j < info.num_experts; ++j) (buf += ",s_") += std::to_string(j);
  }
  buf += '\n';

  std::vector<std::string> names;
  names.reserve(trace.requests().size());
  for (const auto& r : trace.requests()) names.push_back(detail::csv::field(r.name));

  constexpr std::size_t block = std::size_t{1} << 16;
  buf.reserve(2 * block);
  const trace_columns& c = trace.columns();
  for (std::size_t r = 0; r < trace.num_rows(); ++r) {
    buf += names[c.request[r]];
    buf += ',';
    buf += to_string(c.kind[r]);
    buf += ',';
    detail::csv::append(buf, c.step[r]);
    buf += ',';
    detail::csv::append(buf, c.position[r]);
    buf += ',';
    detail::csv::append(buf, c.layer[r]);
    for (const expert_id e : trace.experts(r)) {
      buf += ',';
      detail::csv::append(buf, e);
    }
    for (const float w : trace.weights(r)) {
      buf += ',';
      detail::csv::append(buf, w);
    }
    for (const float s : trace.scores(r)) {
      buf += ',';
      detail::csv::append(buf, s);
    }
    buf += '\n';
    if (buf.size() >= block) {
      os.write(buf.data(), static_cast<std::streamsize>(buf.size()));
      buf.clear();
    }
  }
  os.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  if (!os) throw std::ios_base::failure("moepolicy::write_csv: the stream failed while writing");
}

}  // namespace moepolicy
