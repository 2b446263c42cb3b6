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

#include <algorithm>
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

/// Writes ',' and `value` at `p`, which has room for `max_number_chars` + 1 bytes; returns
/// the end.
inline constexpr std::size_t max_number_chars = 32;  // a float's shortest form needs at most 15
template <class T>
inline char* put_field(char* p, T value) {
  *p++ = ',';
  const auto [end, ec] = std::to_chars(p, p + max_number_chars, value);
  MOEPOLICY_ASSERT(ec == std::errc{});
  return end;
}

}  // namespace detail::csv

/// Writes `trace` as CSV with the columns listed at the top of this header.
///
/// Throws: `std::ios_base::failure` when the stream fails.
/// Complexity: linear in the rows × (top_k + scores per row); writes in 64 KiB blocks.
/// Each row is formatted in place into a block sized for its longest possible form, with
/// no growth check per field (a string appended to one field at a time took 1.1-1.3 times
/// the CPU in Release builds: `trace_bench`'s csv_export on the bundled trace).
inline void write_csv(const routing_trace& trace, std::ostream& os) {
  const trace_info& info = trace.info();
  const std::size_t k = info.top_k;
  std::string header = "request,phase,step,position,layer";
  for (std::size_t i = 0; i < k; ++i) (header += ",e_") += std::to_string(i);
  for (std::size_t i = 0; i < k; ++i) (header += ",w_") += std::to_string(i);
  if (info.has_scores) {
    for (std::size_t j = 0; j < info.num_experts; ++j) (header += ",s_") += std::to_string(j);
  }
  header += '\n';
  os.write(header.data(), static_cast<std::streamsize>(header.size()));

  std::vector<std::string> names;
  names.reserve(trace.requests().size());
  std::size_t longest_name = 0;
  for (const auto& r : trace.requests()) {
    names.push_back(detail::csv::field(r.name));
    longest_name = std::max(longest_name, names.back().size());
  }

  // The longest row: its name, the phase word, three integers, the experts, the weights
  // and the scores, each number with its comma, then the '\n'.
  constexpr std::size_t number = detail::csv::max_number_chars + 1;
  const std::size_t scores_per_row = info.has_scores ? info.num_experts : 0;
  const std::size_t longest_row = longest_name + 1 + 8 + (3 + 2 * k + scores_per_row) * number + 1;
  constexpr std::size_t block = std::size_t{1} << 16;
  std::vector<char> buf(block + longest_row);
  char* const begin = buf.data();
  char* p = begin;
  const trace_columns& c = trace.columns();
  for (std::size_t r = 0; r < trace.num_rows(); ++r) {
    const std::string& name = names[c.request[r]];
    p = std::copy(name.begin(), name.end(), p);
    *p++ = ',';
    const std::string_view kind = to_string(c.kind[r]);
    p = std::copy(kind.begin(), kind.end(), p);
    p = detail::csv::put_field(p, c.step[r]);
    p = detail::csv::put_field(p, c.position[r]);
    p = detail::csv::put_field(p, c.layer[r]);
    for (const expert_id e : trace.experts(r)) p = detail::csv::put_field(p, e);
    for (const float w : trace.weights(r)) p = detail::csv::put_field(p, w);
    for (const float s : trace.scores(r)) p = detail::csv::put_field(p, s);
    *p++ = '\n';
    if (static_cast<std::size_t>(p - begin) >= block) {
      os.write(begin, p - begin);
      p = begin;
    }
  }
  os.write(begin, p - begin);
  if (!os) throw std::ios_base::failure("moepolicy::write_csv: the stream failed while writing");
}

}  // namespace moepolicy
