// moepolicy/io/trace_text.hpp — the moepolicy routing trace as text: JSONL and CSV, the
// format that `moepolicy convert` writes and that an engine can write directly.
//
// The full specification, with examples, is docs/trace-format.md. In short:
//
// Both forms start with one metadata object:
//   {"format": "moepolicy.routing-jsonl" | "moepolicy.routing-csv", "version": 1,
//    "model": "...", "source": "...", "num_layers": L, "num_experts": E, "top_k": k,
//    "has_weights": true, "has_scores": false, "requests": ["name", ...]}
// "format", "version", "num_layers", "num_experts" and "top_k" are required; "model" and
// "source" default to "", "has_weights" to true, "has_scores" to false; "requests" lists
// the requests in order (when absent, requests are numbered in order of first appearance).
//
// Then one row per (request, phase, step, token position, MoE layer):
//   JSONL  the metadata object on line 1, then one object per line:
//          {"request": "r", "phase": "prefill"|"decode", "step": s, "position": p,
//           "layer": l, "experts": [k ids], "weights": [k floats], "scores": [E floats]}
//          "weights" only when has_weights, "scores" only when has_scores.
//   CSV    line 1 is '#' followed by the metadata object; line 2 the header
//          request,phase,step,position,layer,e_0..e_{k-1}[,w_0..w_{k-1}][,s_0..s_{E-1}]
//          (exactly these columns, in this order); then one line per row. The request
//          field is quoted as RFC 4180 says when it holds a comma, a double quote, CR or LF.
// Without weights every id weighs 1/k, and the trace's source says so. Rows may come in
// any order; a trace is sorted by (request, step, layer, position) when read. Floats are
// written in the shortest decimal form that reads back to the same float (negative zero
// as -0.0 in JSONL, where "-0" would read as the integer 0). Rows in any order stream to
// the canonical format (`write_canonical_from_trace_jsonl` / `_csv`) without the trace
// ever being held: as they come when already in that order, else through an external
// merge sort of bounded runs.
//
// Unknown keys, a missing or repeated column, a field that is not a number in range, and
// every row rule of `routing_trace_builder::check` are errors naming the file and the
// 1-based line (`parse_error`); so are lines longer than `input_limits::max_line_bytes`,
// JSON nested deeper than `input_limits::max_json_depth` and files larger than
// `input_limits::max_file_bytes` (core/input_limits.hpp), as in io/jsonl_format.hpp.
#pragma once

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <ios>
#include <istream>
#include <limits>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/core/input_limits.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/json_document.hpp"
#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "moepolicy/trace/csv_export.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::io {

/// The "format" of the metadata object of each text form.
inline constexpr std::string_view trace_jsonl_format_name = "moepolicy.routing-jsonl";
inline constexpr std::string_view trace_csv_format_name = "moepolicy.routing-csv";
/// The version this header writes and reads.
inline constexpr std::uint32_t trace_text_version = 1;

/// What the text forms say about the trace before its rows.
struct trace_text_metadata {
  trace_info info;
  bool has_weights = true;
  /// Request names in order; empty when the file does not list them.
  std::vector<std::string> requests;
  bool requests_listed = false;
};

namespace detail {

using json = nlohmann::json;

/// The metadata object of `trace` for `format`.
inline std::string trace_text_metadata_line(const routing_trace& trace, std::string_view format) {
  const trace_info& info = trace.info();
  json names = json::array();
  for (const auto& r : trace.requests()) names.push_back(r.name);
  // Keys in the order the specification lists them (nlohmann's object sorts keys).
  std::string out = "{\"format\":" + json(format).dump() + ",\"version\":" + std::to_string(trace_text_version) +
                    ",\"model\":" + json(info.model).dump(-1, ' ', false, json::error_handler_t::replace) +
                    ",\"source\":" + json(info.source).dump(-1, ' ', false, json::error_handler_t::replace) +
                    ",\"num_layers\":" + std::to_string(info.num_layers) +
                    ",\"num_experts\":" + std::to_string(info.num_experts) +
                    ",\"top_k\":" + std::to_string(info.top_k) +
                    ",\"has_weights\":true,\"has_scores\":" + (info.has_scores ? "true" : "false") +
                    ",\"requests\":" + names.dump(-1, ' ', false, json::error_handler_t::replace) + "}";
  return out;
}

/// Reads the metadata object `j` (already parsed) of a file in `format`; `fail` throws
/// at the metadata's line.
template <class Fail>
trace_text_metadata parse_trace_text_metadata(const json& j, std::string_view format, Fail&& fail) {
  if (!j.is_object()) fail("the metadata must be a JSON object, got " + std::string(describe(j)));
  static constexpr std::array<std::string_view, 10> known = {"format",     "version",     "model", "source",
                                                             "num_layers", "num_experts", "top_k", "has_weights",
                                                             "has_scores", "requests"};
  for (const auto& [key, value] : j.items()) {
    bool ok = false;
    for (const auto k : known) ok = ok || key == k;
    if (!ok) {
      fail("unknown key " + quote_text(key) +
           " in the metadata (known: format, version, model, source, num_layers, num_experts, top_k, "
           "has_weights, has_scores, requests)");
    }
  }
  const auto field = [&](const char* key) -> const json* {
    const auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  };
  const json* f = field("format");
  if (f == nullptr || !f->is_string() || f->get_ref<const std::string&>() != format) {
    fail("metadata \"format\" must be " + json(format).dump() + ", got " + (f == nullptr ? "nothing" : f->dump()));
  }
  const auto uint_field = [&](const char* key, std::uint64_t lo, std::uint64_t hi, bool required,
                              std::uint64_t fallback) -> std::uint64_t {
    const json* v = field(key);
    if (v == nullptr) {
      if (required) fail(std::string("metadata misses \"") + key + '"');
      return fallback;
    }
    const bool negative = v->is_number_integer() && !v->is_number_unsigned() && v->get<std::int64_t>() < 0;
    if (!v->is_number_integer() || negative || v->get<std::uint64_t>() < lo || v->get<std::uint64_t>() > hi) {
      fail(std::string("metadata \"") + key + "\" must be an integer in [" + std::to_string(lo) + ", " +
           std::to_string(hi) + "], got " + v->dump());
    }
    return v->get<std::uint64_t>();
  };
  const auto bool_field = [&](const char* key, bool fallback) {
    const json* v = field(key);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) fail(std::string("metadata \"") + key + "\" must be true or false, got " + v->dump());
    return v->get<bool>();
  };
  const auto string_field = [&](const char* key) -> std::string {
    const json* v = field(key);
    if (v == nullptr) return {};
    if (!v->is_string())
      fail(std::string("metadata \"") + key + "\" must be a string, got " + std::string(describe(*v)));
    return v->get<std::string>();
  };
  const std::uint64_t version = uint_field("version", 0, std::numeric_limits<std::uint32_t>::max(), true, 0);
  if (version != trace_text_version) {
    fail("metadata \"version\" = " + std::to_string(version) + " is not supported (this reader reads version " +
         std::to_string(trace_text_version) + ")");
  }
  trace_text_metadata m;
  m.info.model = string_field("model");
  m.info.source = string_field("source");
  m.info.num_layers = static_cast<std::uint32_t>(uint_field("num_layers", 1, 65536, true, 0));
  m.info.num_experts = static_cast<std::uint32_t>(uint_field("num_experts", 1, 65536, true, 0));
  m.info.top_k = static_cast<std::uint32_t>(uint_field("top_k", 1, m.info.num_experts, true, 0));
  m.info.has_scores = bool_field("has_scores", false);
  m.has_weights = bool_field("has_weights", true);
  if (!m.has_weights) {
    if (!m.info.source.empty()) m.info.source += "; ";
    m.info.source += "no gate weights: every id weighs 1/k";
  }
  if (const json* r = field("requests")) {
    if (!r->is_array()) fail("metadata \"requests\" must be an array of names, got " + std::string(describe(*r)));
    m.requests_listed = true;
    for (std::size_t i = 0; i < r->size(); ++i) {
      if (!(*r)[i].is_string()) {
        fail("metadata \"requests\" must hold strings, got " + std::string(describe((*r)[i])) + " at index " +
             std::to_string(i));
      }
      m.requests.push_back((*r)[i].get<std::string>());
    }
  }
  return m;
}

/// Request indices by name, for one reader: the listed requests, or new ones in order of
/// first appearance, registered with `b` (a `routing_trace_builder` or another sink of rows
/// with its `add_request`).
class trace_text_requests {
 public:
  template <class Sink>
  explicit trace_text_requests(const trace_text_metadata& m, Sink& b) : listed_(m.requests_listed) {
    for (const auto& name : m.requests) {
      if (!index_.emplace(name, b.add_request(name)).second) repeated_ = name;
    }
  }
  /// The name listed twice in the metadata, if any.
  [[nodiscard]] const std::optional<std::string>& repeated() const noexcept { return repeated_; }

  template <class Sink, class Fail>
  std::uint32_t find(const std::string& name, Sink& b, Fail&& fail) {
    if (const auto it = index_.find(name); it != index_.end()) return it->second;
    if (listed_) fail("request " + quote_text(name) + " is not in the metadata's \"requests\"");
    return index_.emplace(name, b.add_request(name)).first->second;
  }

 private:
  std::unordered_map<std::string, std::uint32_t> index_;
  bool listed_ = false;
  std::optional<std::string> repeated_;
};

inline std::optional<phase> parse_phase(std::string_view s) {
  if (s == "prefill") return phase::prefill;
  if (s == "decode") return phase::decode;
  return std::nullopt;
}

}  // namespace detail

// ---------------------------------------------------------------------------------------
// Writers

/// Writes `trace` as moepolicy routing JSONL (docs/trace-format.md).
///
/// Throws: `std::ios_base::failure` when the stream fails.
/// Complexity: linear in the rows × (top_k + scores per row); writes in 64 KiB blocks.
inline void write_trace_jsonl(const routing_trace& trace, std::ostream& os) {
  using detail::json;
  std::string buf = detail::trace_text_metadata_line(trace, trace_jsonl_format_name);
  buf += '\n';
  std::vector<std::string> names;
  names.reserve(trace.requests().size());
  for (const auto& r : trace.requests()) {
    names.push_back("{\"request\":" + json(r.name).dump(-1, ' ', false, json::error_handler_t::replace) +
                    ",\"phase\":\"");
  }
  constexpr std::size_t block = std::size_t{1} << 16;
  buf.reserve(2 * block);
  const trace_columns& c = trace.columns();
  const auto list = [&](auto values) {
    buf += '[';
    bool first = true;
    for (const auto v : values) {
      if (!first) buf += ',';
      first = false;
      // JSON readers take "-0" for the integer 0 and lose the sign: write -0.0.
      if constexpr (std::is_floating_point_v<decltype(v)>) {
        if (v == 0 && std::signbit(v)) {
          buf += "-0.0";
          continue;
        }
      }
      moepolicy::detail::csv::append(buf, v);
    }
    buf += ']';
  };
  for (std::size_t r = 0; r < trace.num_rows(); ++r) {
    buf += names[c.request[r]];
    buf += to_string(c.kind[r]);
    buf += "\",\"step\":";
    moepolicy::detail::csv::append(buf, c.step[r]);
    buf += ",\"position\":";
    moepolicy::detail::csv::append(buf, c.position[r]);
    buf += ",\"layer\":";
    moepolicy::detail::csv::append(buf, c.layer[r]);
    buf += ",\"experts\":";
    list(trace.experts(r));
    buf += ",\"weights\":";
    list(trace.weights(r));
    if (trace.info().has_scores) {
      buf += ",\"scores\":";
      list(trace.scores(r));
    }
    buf += "}\n";
    if (buf.size() >= block) {
      os.write(buf.data(), static_cast<std::streamsize>(buf.size()));
      buf.clear();
    }
  }
  os.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  if (!os) throw std::ios_base::failure("moepolicy::io::write_trace_jsonl: the stream failed while writing");
}

/// Writes `trace` as moepolicy routing CSV (docs/trace-format.md): the metadata line,
/// then `write_csv`'s header and rows (trace/csv_export.hpp).
///
/// Throws: `std::ios_base::failure` when the stream fails.
inline void write_trace_csv(const routing_trace& trace, std::ostream& os) {
  const std::string meta = "#" + detail::trace_text_metadata_line(trace, trace_csv_format_name) + "\n";
  os.write(meta.data(), static_cast<std::streamsize>(meta.size()));
  write_csv(trace, os);
}

// ---------------------------------------------------------------------------------------
// Readers

namespace detail {

/// Float `v` (a JSON number) into `out`, or the reason it does not fit.
inline bool json_float(const json& v, float& out) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  if (!std::isfinite(d) || std::fabs(d) > static_cast<double>(std::numeric_limits<float>::max())) return false;
  out = static_cast<float>(d);
  return true;
}

inline void json_floats(const jsonl_lines& at, const json& row, const char* key, std::size_t want,
                        std::vector<float>& out) {
  const json& arr = require_array(at, row, key);
  if (arr.size() != want) {
    at.fail(std::string("field \"") + key + "\" must hold " + std::to_string(want) + " numbers, got " +
            std::to_string(arr.size()));
  }
  out.clear();
  for (std::size_t i = 0; i < arr.size(); ++i) {
    float f = 0.0f;
    if (!json_float(arr[i], f)) {
      at.fail(std::string("field \"") + key + "\" holds " + arr[i].dump() + " at index " + std::to_string(i) +
              ", not a number that fits a float");
    }
    out.push_back(f);
  }
}

/// Reads the moepolicy routing JSONL in `in` row by row, in file order, with every check
/// of the reader: `start(metadata)` returns the sink (`routing_trace_builder&` or one
/// with its `add_request`, `check` and `add`) that each checked row is added to.
template <class Start>
void parse_trace_jsonl(std::istream& in, std::string_view name, Start&& start) {
  jsonl_lines lines(in, name);
  json rec;
  if (!lines.next(rec)) fail_at_line(name, 1, "expected the moepolicy.routing-jsonl metadata object, got end of input");
  const auto fail = [&](const std::string& problem) { lines.fail(problem); };
  const trace_text_metadata meta = parse_trace_text_metadata(rec, trace_jsonl_format_name, fail);
  auto& builder = start(meta);
  trace_text_requests requests(meta, builder);
  if (requests.repeated()) fail("request " + quote_text(*requests.repeated()) + " is listed twice in \"requests\"");
  const std::uint32_t k = meta.info.top_k;
  std::vector<expert_id> ids;
  std::vector<float> weights(k, 1.0f / static_cast<float>(k));
  std::vector<float> scores;
  while (lines.next(rec)) {
    for (const auto& [key, value] : rec.items()) {
      const bool ok = key == "request" || key == "phase" || key == "step" || key == "position" || key == "layer" ||
                      key == "experts" || (key == "weights" && meta.has_weights) ||
                      (key == "scores" && meta.info.has_scores);
      if (!ok) {
        if (key == "weights") fail("field \"weights\" in a trace whose metadata says \"has_weights\": false");
        if (key == "scores") fail("field \"scores\" in a trace whose metadata says \"has_scores\": false");
        fail("unknown key " + quote_text(key) +
             " in a row (known: request, phase, step, position, layer, experts, weights, scores)");
      }
    }
    const std::uint32_t req = requests.find(require_string(lines, rec, "request"), builder, fail);
    const std::string& ph = require_string(lines, rec, "phase");
    const auto kind = parse_phase(ph);
    if (!kind) fail("field \"phase\" must be \"prefill\" or \"decode\", got " + quote_text(ph));
    constexpr std::uint64_t u32 = std::numeric_limits<std::uint32_t>::max();
    const auto step = static_cast<std::uint32_t>(require_uint(lines, rec, "step", 0, u32));
    const auto position = static_cast<std::uint32_t>(require_uint(lines, rec, "position", 0, u32));
    const auto layer = static_cast<layer_id>(require_uint(lines, rec, "layer", 0, meta.info.num_layers - 1u));
    require_expert_ids(lines, rec, "experts", ids);
    if (meta.has_weights) json_floats(lines, rec, "weights", ids.size(), weights);
    if (meta.info.has_scores) json_floats(lines, rec, "scores", meta.info.num_experts, scores);
    const trace_row row{req, *kind, step, position, layer, ids, weights, scores};
    if (auto why = builder.check(row)) fail(*why);
    builder.add(row);
  }
}

/// The trace of the rows in `builder`, sorted; a problem of the rows together (a repeated
/// row, a step of both phases) is an error naming `name`.
inline routing_trace finish_text_trace(routing_trace_builder& builder, std::string_view name) {
  try {
    return std::move(builder).finish();
  } catch (const invalid_argument& e) {
    fail_file(name, std::string("the rows do not form a trace: ") + e.what());
  }
}

inline routing_trace read_trace_jsonl_impl(std::istream& in, std::string_view name) {
  std::optional<routing_trace_builder> builder;
  parse_trace_jsonl(in, name,
                    [&](const trace_text_metadata& m) -> routing_trace_builder& { return builder.emplace(m.info); });
  return finish_text_trace(*builder, name);
}

/// Splits one CSV record (RFC 4180) into `fields`; returns false when a quoted field is
/// still open at the end of `line` (the record continues on the next line).
inline bool split_csv_record(std::string_view line, std::vector<std::string>& fields, std::string& problem) {
  fields.clear();
  fields.emplace_back();
  bool quoted = false;
  bool was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          fields.back() += '"';
          ++i;
        } else {
          quoted = false;
        }
      } else {
        fields.back() += c;
      }
    } else if (c == ',') {
      fields.emplace_back();
      was_quoted = false;
    } else if (c == '"' && fields.back().empty() && !was_quoted) {
      quoted = true;
      was_quoted = true;
    } else if (was_quoted) {
      problem = "text after the closing quote of field " + std::to_string(fields.size());
      return true;
    } else {
      fields.back() += c;
    }
  }
  return !quoted;
}

template <class T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && end == s.data() + s.size() && !s.empty();
}

/// Reads the moepolicy routing CSV in `in` row by row, in file order, with every check
/// of the reader; `start` as for `parse_trace_jsonl`.
template <class Start>
void parse_trace_csv(std::istream& in, std::string_view name, Start&& start) {
  if (!in) fail_file(name, "the input stream is not readable");
  const input_limits& limits = active_input_limits();
  std::string buf;
  std::uint64_t line = 0;
  std::uint64_t bytes = 0;
  std::uint64_t blank = 0;
  std::uint64_t record_line = 0;
  const auto fail = [&](const std::string& problem) { fail_at_line(name, record_line, problem); };
  // Reads the next physical line into `buf`; false at the end.
  const auto next_line = [&]() {
    bool too_long = false;
    if (!read_line(in, buf, limits.max_line_bytes, too_long)) {
      if (in.bad()) fail_file(name, "read error after line " + std::to_string(line));
      return false;
    }
    ++line;
    if (too_long) {
      fail_at_line(name, line,
                   "line longer than the limit of " + std::to_string(limits.max_line_bytes) +
                       " bytes (input_limits::max_line_bytes)");
    }
    bytes += buf.size();
    if (bytes > limits.max_file_bytes) fail_too_large(name, file_limit());
    ++bytes;  // the '\n', counted with the next line's bytes
    if (!buf.empty() && buf.back() == '\r') buf.pop_back();
    return true;
  };

  if (!next_line()) fail_at_line(name, 1, "expected the moepolicy.routing-csv metadata line, got end of input");
  record_line = 1;
  if (buf.empty() || buf.front() != '#') {
    fail("expected the metadata line '#{\"format\": \"moepolicy.routing-csv\", ...}' (docs/trace-format.md)");
  }
  json meta_json;
  {
    json_document::dom_builder b(meta_json, limits.max_json_depth, /*reject_duplicates=*/true);
    if (!json::sax_parse(buf.data() + 1, buf.data() + buf.size(), &b, json::input_format_t::json, true)) {
      if (b.too_deep()) fail(json_document::too_deep_problem(limits.max_json_depth));
      if (b.duplicate()) fail("in the metadata: " + *b.duplicate());
      fail("the metadata line is not a JSON object after '#': " + printable(b.syntax_error().value_or("")));
    }
  }
  const trace_text_metadata meta = parse_trace_text_metadata(meta_json, trace_csv_format_name, fail);
  const std::uint32_t k = meta.info.top_k;
  const std::uint32_t e = meta.info.num_experts;

  if (!next_line()) fail_at_line(name, 2, "expected the header line, got end of input");
  record_line = 2;
  std::string header = "request,phase,step,position,layer";
  for (std::uint32_t i = 0; i < k; ++i) (header += ",e_") += std::to_string(i);
  if (meta.has_weights) {
    for (std::uint32_t i = 0; i < k; ++i) (header += ",w_") += std::to_string(i);
  }
  if (meta.info.has_scores) {
    for (std::uint32_t i = 0; i < e; ++i) (header += ",s_") += std::to_string(i);
  }
  if (buf != header) {
    std::string want = header.size() > 120 ? header.substr(0, 120) + "..." : header;
    fail("the header must be \"" + want + "\" for top_k = " + std::to_string(k) +
         (meta.has_weights ? ", with weights" : ", without weights") +
         (meta.info.has_scores ? ", with scores" : ", without scores") + "; got \"" + printable(buf, 120) + '"');
  }
  const std::size_t columns = 5 + k + (meta.has_weights ? k : 0) + (meta.info.has_scores ? e : 0);

  auto& builder = start(meta);
  trace_text_requests requests(meta, builder);
  if (requests.repeated()) {
    record_line = 1;
    fail("request " + quote_text(*requests.repeated()) + " is listed twice in \"requests\"");
  }
  std::vector<std::string> fields;
  std::vector<expert_id> ids(k);
  std::vector<float> weights(k, 1.0f / static_cast<float>(k));
  std::vector<float> scores(meta.info.has_scores ? e : 0);
  std::string record;
  std::string problem;
  while (next_line()) {
    if (buf.empty()) {
      if (blank == 0) blank = line;
      continue;
    }
    if (blank != 0) fail_at_line(name, blank, "blank line inside the input (only trailing blank lines are allowed)");
    record_line = line;
    record = buf;
    problem.clear();
    while (!split_csv_record(record, fields, problem)) {
      if (!next_line()) fail("a quoted field is not closed before the end of the input");
      record += '\n';
      record += buf;
    }
    if (!problem.empty()) fail(problem);
    if (fields.size() != columns) {
      fail("expected " + std::to_string(columns) + " fields, got " + std::to_string(fields.size()));
    }
    const std::uint32_t req = requests.find(fields[0], builder, fail);
    const auto kind = parse_phase(fields[1]);
    if (!kind) fail("phase must be \"prefill\" or \"decode\", got " + quote_text(fields[1]));
    std::uint32_t step = 0;
    std::uint32_t position = 0;
    std::uint32_t layer = 0;
    if (!parse_number(fields[2], step)) fail("step " + quote_text(fields[2]) + " is not an integer in [0, 2^32 - 1]");
    if (!parse_number(fields[3], position)) {
      fail("position " + quote_text(fields[3]) + " is not an integer in [0, 2^32 - 1]");
    }
    if (!parse_number(fields[4], layer) || layer >= meta.info.num_layers) {
      fail("layer " + quote_text(fields[4]) + " is not an integer in [0, " + std::to_string(meta.info.num_layers - 1) +
           "]");
    }
    std::size_t col = 5;
    for (std::uint32_t i = 0; i < k; ++i, ++col) {
      if (!parse_number(fields[col], ids[i])) {
        fail("e_" + std::to_string(i) + " = " + quote_text(fields[col]) + " is not an expert id in [0, 65535]");
      }
    }
    const auto float_at = [&](std::string_view column, std::uint32_t i, float& out) {
      if (!parse_number(fields[col], out) || !std::isfinite(out)) {
        fail(std::string(column) + std::to_string(i) + " = " + quote_text(fields[col]) +
             " is not a finite number that fits a float");
      }
      ++col;
    };
    if (meta.has_weights) {
      for (std::uint32_t i = 0; i < k; ++i) float_at("w_", i, weights[i]);
    }
    if (meta.info.has_scores) {
      for (std::uint32_t i = 0; i < e; ++i) float_at("s_", i, scores[i]);
    }
    const trace_row row{req, *kind, step, position, static_cast<layer_id>(layer), ids, weights, scores};
    if (auto why = builder.check(row)) fail(*why);
    builder.add(row);
  }
}

inline routing_trace read_trace_csv_impl(std::istream& in, std::string_view name) {
  std::optional<routing_trace_builder> builder;
  parse_trace_csv(in, name,
                  [&](const trace_text_metadata& m) -> routing_trace_builder& { return builder.emplace(m.info); });
  return finish_text_trace(*builder, name);
}

}  // namespace detail

/// The moepolicy routing JSONL trace read from `in`; `name` labels errors.
///
/// Throws: `parse_error` naming `name` and the line (see the header comment).
[[nodiscard]] inline routing_trace read_trace_jsonl(std::istream& in, std::string_view name) {
  return detail::read_trace_jsonl_impl(in, name);
}

/// The moepolicy routing JSONL file `file`.
[[nodiscard]] inline routing_trace read_trace_jsonl(const std::filesystem::path& file) {
  std::ifstream in = detail::open_input(file);
  return detail::read_trace_jsonl_impl(in, file.string());
}

/// The moepolicy routing CSV trace read from `in`; `name` labels errors.
///
/// Throws: `parse_error` naming `name` and the line (see the header comment).
[[nodiscard]] inline routing_trace read_trace_csv(std::istream& in, std::string_view name) {
  return detail::read_trace_csv_impl(in, name);
}

/// The moepolicy routing CSV file `file`.
[[nodiscard]] inline routing_trace read_trace_csv(const std::filesystem::path& file) {
  std::ifstream in = detail::open_input(file);
  return detail::read_trace_csv_impl(in, file.string());
}

// ---------------------------------------------------------------------------------------
// Streaming to the canonical format

/// What `write_canonical_from_trace_jsonl` and `write_canonical_from_trace_csv` wrote.
struct text_to_canonical {
  std::uint64_t rows = 0;
  std::size_t requests = 0;
  /// True when the rows were streamed as they came (the file holds them in (request, step,
  /// layer, position) order, as `convert` writes them); false when they were sorted (an
  /// external merge sort of `runs` sorted runs).
  bool streamed = false;
  /// Sorted runs merged: 0 when streamed, else at least 2 (or 1 when a single run held
  /// every row and was sorted in memory).
  std::uint64_t runs = 0;
};

/// Memory for one sorted run of an external sort (rows plus a 24-byte sort key per row).
inline constexpr std::uint64_t default_sort_run_bytes = std::uint64_t{16} << 20;
/// Memory for the read buffers of the k-way merge, shared by the runs.
inline constexpr std::uint64_t default_sort_merge_bytes = std::uint64_t{8} << 20;

namespace detail {

/// Throws the `parse_error` the whole reader (`finish_text_trace`) throws when
/// `routing_trace::from_sorted` rejects row `index` of the sorted rows for `problem`.
[[noreturn]] inline void fail_sorted_rows(std::string_view name, std::uint64_t index, const std::string& problem) {
  try {
    moepolicy::detail::throw_invalid("routing_trace::from_sorted", "row " + std::to_string(index) + problem);
  } catch (const invalid_argument& e) {
    fail_file(name, std::string("the rows do not form a trace: ") + e.what());
  }
}

/// A sink of rows (see `parse_trace_jsonl`) that appends each row to a scratch file of
/// fixed-size records: request, step, position (4 bytes each), layer (2), phase (1), the k
/// ids (2 each), the k weights and the scores (4 each), in native byte order; `fill` gives
/// them back in (request, step, layer, position) order a chunk at a time.
///
/// Rows already in that order are written as they come. Rows in any other order are
/// sorted by an external merge sort: rows are gathered into runs of bounded size
/// (`run_bytes`), each run is sorted in memory (stable: equal keys keep the file's order)
/// and written to the scratch file, and `finish` merges the runs (a k-way merge over a
/// heap, `merge_bytes` of read buffers shared by the runs) into a second scratch file.
/// Either way the sorted rows are checked as `routing_trace::from_sorted` checks them,
/// with its messages. Memory: one run, or the merge buffers, and the request names.
class trace_text_spill {
 public:
  /// Creates the scratch file beside `out`; it is removed when the spill is destroyed.
  ///
  /// Throws: `std::filesystem::filesystem_error` when no scratch file can be created.
  explicit trace_text_spill(const std::filesystem::path& out, std::uint64_t run_bytes = default_sort_run_bytes,
                            std::uint64_t merge_bytes = default_sort_merge_bytes)
      : out_(out), run_bytes_(run_bytes), merge_bytes_(merge_bytes) {
    rows_file_ = create(".rows");
  }
  trace_text_spill(const trace_text_spill&) = delete;
  trace_text_spill& operator=(const trace_text_spill&) = delete;
  ~trace_text_spill() {
    rows_file_.close();
    sorted_file_.close();
  }

  /// Called once with the metadata, before the first row.
  trace_text_spill& start(const trace_info& info) {
    info_ = info;
    k_ = info.top_k;
    e_ = info.has_scores ? info.num_experts : 0;
    record_ = 15 + 2 * k_ + 4 * k_ + 4 * e_;
    run_rows_ = std::max<std::uint64_t>(2, run_bytes_ / (record_ + sizeof(sort_key)));
    return *this;
  }

  std::uint32_t add_request(std::string name) {
    names_.push_back(std::move(name));
    return static_cast<std::uint32_t>(names_.size() - 1);
  }
  [[nodiscard]] std::optional<std::string> check(const trace_row& row) const {
    return moepolicy::detail::check_row(info_, names_.size(), row);
  }
  /// Appends a checked row.
  ///
  /// Throws: `std::ios_base::failure` when the scratch file cannot be written.
  void add(const trace_row& row) {
    const sort_key key = key_of(row.request, row.step, row.layer, row.position, 0);
    if (rows_ > 0) {
      const bool before = key.hi < prev_.hi || (key.hi == prev_.hi && key.lo < prev_.lo);
      if (before) {
        if (in_order_) buf_.reserve(run_rows_ * record_);
        in_order_ = false;
        run_in_order_ = false;
      } else if (in_order_ && !problem_) {
        // The problems `from_sorted` finds, at the row's index in the sorted order (the
        // file's order while the rows are in order); reported after the last line, as the
        // whole read reports them.
        if (key.hi == prev_.hi && key.lo == prev_.lo) {
          problem_.emplace(rows_, " repeats the (request, step, layer, position) of the row before");
        } else if (key.hi == prev_.hi && prev_kind_ != row.kind) {
          problem_.emplace(rows_, mixes(row.step, row.request));
        }
      }
    }
    prev_ = key;
    prev_kind_ = row.kind;
    ++rows_;
    put(row.request);
    put(row.step);
    put(row.position);
    put(row.layer);
    put(row.kind);
    for (const auto id : row.experts) put(id);
    for (const auto w : row.weights) put(w);
    for (const auto s : row.scores) put(s);
    if (in_order_ ? buf_.size() >= block : buf_.size() >= run_rows_ * record_) end_run();
  }

  /// Ends the input: writes what is buffered and, when the rows were not in order, merges
  /// the sorted runs; `name` labels the errors.
  ///
  /// Throws: `parse_error` naming `name` as the whole read (`finish_text_trace`) does for
  /// a repeated row or a step of both phases; `std::ios_base::failure` when a scratch file
  /// cannot be written or read back.
  void finish(std::string_view name) {
    end_run();
    std::vector<char>().swap(buf_);
    std::vector<sort_key>().swap(keys_);
    if (in_order_) {
      if (problem_) fail_sorted_rows(name, problem_->first, problem_->second);
      runs_.clear();
      return;
    }
    merge(name);
  }

  /// Sets `cols` to the rows [first, first + count) (as `write_canonical_rows` asks).
  void fill(std::uint64_t first, std::uint64_t count, trace_columns& cols) {
    scratch& f = in_order_ ? rows_file_ : sorted_file_;
    buf_.resize(count * record_);
    f.read_at(first * record_, buf_.data(), buf_.size());
    cols.resize(count, k_, e_);
    const char* p = buf_.data();
    for (std::uint64_t i = 0; i < count; ++i) {
      get(p, cols.request[i]);
      get(p, cols.step[i]);
      get(p, cols.position[i]);
      get(p, cols.layer[i]);
      get(p, cols.kind[i]);
      for (std::uint64_t j = 0; j < k_; ++j) get(p, cols.experts[i * k_ + j]);
      for (std::uint64_t j = 0; j < k_; ++j) get(p, cols.weights[i * k_ + j]);
      for (std::uint64_t j = 0; j < e_; ++j) get(p, cols.scores[i * e_ + j]);
    }
    buf_.clear();
  }

  [[nodiscard]] const trace_info& info() const noexcept { return info_; }
  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }
  [[nodiscard]] std::uint64_t rows() const noexcept { return rows_; }
  /// Whether the rows came in order (written as they came, no sort).
  [[nodiscard]] bool in_order() const noexcept { return in_order_; }
  /// The sorted runs merged (0 when the rows came in order).
  [[nodiscard]] std::uint64_t runs() const noexcept { return merged_runs_; }

  /// Bytes buffered before a write to the scratch file while the rows are in order.
  static constexpr std::size_t block = std::size_t{1} << 20;

 private:
  /// (request, step) and (layer, position) packed, then the row's index in its run, which
  /// makes the sort stable.
  struct sort_key {
    std::uint64_t hi = 0;
    std::uint64_t lo = 0;
    std::uint64_t index = 0;
    friend bool operator<(const sort_key& a, const sort_key& b) noexcept {
      return a.hi != b.hi ? a.hi < b.hi : a.lo != b.lo ? a.lo < b.lo : a.index < b.index;
    }
  };
  static sort_key key_of(std::uint32_t request, std::uint32_t step, layer_id layer, std::uint32_t position,
                         std::uint64_t index) noexcept {
    return {(std::uint64_t{request} << 32) | step, (std::uint64_t{layer} << 32) | position, index};
  }
  /// The key of the record at `p`.
  static sort_key key_at(const char* p, std::uint64_t index) noexcept {
    std::uint32_t request = 0, step = 0, position = 0;
    layer_id layer = 0;
    std::memcpy(&request, p, 4);
    std::memcpy(&step, p + 4, 4);
    std::memcpy(&position, p + 8, 4);
    std::memcpy(&layer, p + 12, 2);
    return key_of(request, step, layer, position, index);
  }
  static phase kind_at(const char* p) noexcept {
    phase k{};
    std::memcpy(&k, p + 14, 1);
    return k;
  }
  static std::string mixes(std::uint32_t step, std::uint32_t request) {
    return ": step " + std::to_string(step) + " of request " + std::to_string(request) +
           " mixes prefill and decode rows";
  }

  /// A scratch file, removed when closed.
  struct scratch {
    std::filesystem::path path;
    std::FILE* file = nullptr;
    void close() noexcept {
      if (file == nullptr) return;
      std::fclose(file);
      file = nullptr;
      std::error_code ec;
      std::filesystem::remove(path, ec);
    }
    void write(const char* p, std::size_t n) const {
      if (n != 0 && std::fwrite(p, 1, n, file) != n) {
        throw std::ios_base::failure("moepolicy: cannot write the scratch file " + path.string());
      }
    }
    void read_at(std::uint64_t at, char* p, std::size_t n) const {
      if (std::fseek(file, static_cast<long>(at), SEEK_SET) != 0 || std::fread(p, 1, n, file) != n) {
        throw std::ios_base::failure("moepolicy: cannot read back the scratch file " + path.string());
      }
    }
  };
  [[nodiscard]] scratch create(const char* suffix) const {
    scratch s;
    for (unsigned attempt = 0; attempt < 64 && s.file == nullptr; ++attempt) {
      s.path = moepolicy::detail::temporary_beside(out_, attempt);
      s.path += suffix;
      s.file = std::fopen(s.path.c_str(), "w+bx");
    }
    if (s.file == nullptr) {
      throw std::filesystem::filesystem_error("moepolicy: cannot create a scratch file beside", out_,
                                              std::error_code(errno, std::generic_category()));
    }
    return s;
  }

  /// Writes the buffered rows: as they came while every row so far is in order, else as
  /// a sorted run.
  void end_run() {
    const std::uint64_t n = buf_.size() / record_;
    if (n == 0) return;
    if (in_order_ || run_in_order_) {
      rows_file_.write(buf_.data(), buf_.size());
    } else {
      keys_.resize(n);
      for (std::uint64_t i = 0; i < n; ++i) keys_[i] = key_at(buf_.data() + i * record_, i);
      std::sort(keys_.begin(), keys_.end());
      std::vector<char> out;
      out.reserve(std::min<std::size_t>(block, buf_.size()));
      for (const sort_key& k : keys_) {
        const char* p = buf_.data() + k.index * record_;
        out.insert(out.end(), p, p + record_);
        if (out.size() >= block) {
          rows_file_.write(out.data(), out.size());
          out.clear();
        }
      }
      rows_file_.write(out.data(), out.size());
    }
    // While the rows are in order, the blocks form one run.
    if (in_order_ && !runs_.empty()) {
      runs_.back() += n;
    } else {
      runs_.push_back(n);
    }
    buf_.clear();
    run_in_order_ = true;
  }

  /// Merges the sorted runs of the rows file into the sorted file, checking the order as
  /// `routing_trace::from_sorted` does; then drops the rows file.
  void merge(std::string_view name) {
    sorted_file_ = create(".sorted");
    const std::size_t n_runs = runs_.size();
    merged_runs_ = n_runs;
    // Each run's read buffer: an equal share of `merge_bytes`, at least one row.
    const std::uint64_t per_run = std::max<std::uint64_t>(1, merge_bytes_ / (n_runs * record_));
    struct cursor {
      std::uint64_t next = 0;  // the run's next row in the file, not yet buffered
      std::uint64_t end = 0;   // one past the run's last row
      std::uint64_t at = 0;    // the buffered row at the front
      std::uint64_t have = 0;  // rows buffered
      std::vector<char> buf;
    };
    std::vector<cursor> cur(n_runs);
    std::uint64_t first = 0;
    for (std::size_t r = 0; r < n_runs; ++r) {
      cur[r].next = first;
      cur[r].end = first + runs_[r];
      first += runs_[r];
    }
    const auto refill = [&](cursor& c) {
      c.have = std::min(per_run, c.end - c.next);
      c.at = 0;
      c.buf.resize(c.have * record_);
      rows_file_.read_at(c.next * record_, c.buf.data(), c.buf.size());
      c.next += c.have;
    };
    // A min-heap of (key of the run's front row, run); ties go to the earlier run, so the
    // merge is stable.
    std::vector<sort_key> heap;
    heap.reserve(n_runs);
    const auto later = [](const sort_key& a, const sort_key& b) { return b < a; };
    for (std::size_t r = 0; r < n_runs; ++r) {
      refill(cur[r]);
      heap.push_back(key_at(cur[r].buf.data(), r));
    }
    std::make_heap(heap.begin(), heap.end(), later);
    std::vector<char> out;
    out.reserve(block);
    std::uint64_t index = 0;
    sort_key prev{};
    phase prev_kind{};
    while (!heap.empty()) {
      std::pop_heap(heap.begin(), heap.end(), later);
      const sort_key top = heap.back();
      heap.pop_back();
      cursor& c = cur[top.index];
      const char* p = c.buf.data() + c.at * record_;
      const phase kind = kind_at(p);
      if (index > 0) {
        if (top.hi == prev.hi && top.lo == prev.lo) {
          fail_sorted_rows(name, index, " repeats the (request, step, layer, position) of the row before");
        }
        if (top.hi == prev.hi && kind != prev_kind) {
          fail_sorted_rows(name, index,
                           mixes(static_cast<std::uint32_t>(top.hi), static_cast<std::uint32_t>(top.hi >> 32)));
        }
      }
      prev = top;
      prev_kind = kind;
      ++index;
      out.insert(out.end(), p, p + record_);
      if (out.size() >= block) {
        sorted_file_.write(out.data(), out.size());
        out.clear();
      }
      if (++c.at == c.have) {
        if (c.next == c.end) {
          std::vector<char>().swap(c.buf);
          continue;
        }
        refill(c);
      }
      heap.push_back(key_at(c.buf.data() + c.at * record_, top.index));
      std::push_heap(heap.begin(), heap.end(), later);
    }
    sorted_file_.write(out.data(), out.size());
    rows_file_.close();
  }

  template <class T>
  void put(T v) {
    const std::size_t at = buf_.size();
    buf_.resize(at + sizeof(T));
    std::memcpy(buf_.data() + at, &v, sizeof(T));
  }
  template <class T>
  static void get(const char*& p, T& v) {
    std::memcpy(&v, p, sizeof(T));
    p += sizeof(T);
  }

  std::filesystem::path out_;
  std::uint64_t run_bytes_ = 0;
  std::uint64_t merge_bytes_ = 0;
  scratch rows_file_;
  scratch sorted_file_;
  trace_info info_;
  std::uint64_t k_ = 0;
  std::uint64_t e_ = 0;
  std::uint64_t record_ = 0;
  std::uint64_t run_rows_ = 0;
  std::vector<std::string> names_;
  std::vector<char> buf_;
  std::vector<sort_key> keys_;
  std::vector<std::uint64_t> runs_;  // rows per run, in file order
  std::uint64_t merged_runs_ = 0;
  std::uint64_t rows_ = 0;
  sort_key prev_{};
  phase prev_kind_ = phase::prefill;
  bool in_order_ = true;
  bool run_in_order_ = true;
  std::optional<std::pair<std::uint64_t, std::string>> problem_;
};

/// Streams the text trace `file` (read by `parse`) into the canonical file `out`, sorting
/// its rows by an external merge sort when they are not in the canonical order.
template <class Parse>
text_to_canonical write_canonical_from_text(const std::filesystem::path& file, const std::filesystem::path& out,
                                            std::uint64_t chunk_rows, std::uint64_t run_bytes,
                                            std::uint64_t merge_bytes, Parse&& parse) {
  trace_text_spill spill(out, run_bytes, merge_bytes);
  {
    std::ifstream in = open_input(file);
    parse(in, file.string(), [&](const trace_text_metadata& m) -> trace_text_spill& { return spill.start(m.info); });
  }
  spill.finish(file.string());
  write_canonical_rows(
      out, spill.info(), spill.names(), spill.rows(),
      [&](std::uint64_t first, std::uint64_t count, trace_columns& cols) { spill.fill(first, count, cols); },
      chunk_rows);
  return {spill.rows(), spill.names().size(), spill.in_order(), spill.runs()};
}

}  // namespace detail

/// Writes the moepolicy routing JSONL file `file` as the canonical file `out` (replaced
/// atomically), the same bytes as `write_canonical(read_trace_jsonl(file), out)`, without
/// ever holding the trace. One pass reads and checks the rows into a scratch file beside
/// `out` (the canonical rows' size), then `write_canonical_rows` writes the columns from
/// it. Rows in (request, step, layer, position) order (as `convert` writes them) are
/// written as they come; rows in any other order are sorted by an external merge sort:
/// runs of at most `run_bytes` (rows and their sort keys) sorted in memory and written to
/// the scratch file, then merged with `merge_bytes` of read buffers into a second scratch
/// file (disk: twice the canonical rows at the peak). The sort is stable and its result,
/// and every error, is the whole read's. Memory: a run or the merge buffers, a chunk of
/// `chunk_rows` rows and the request names.
///
/// Throws: `parse_error` exactly as `read_trace_jsonl(file)`; `std::filesystem::
/// filesystem_error` and `std::ios_base::failure` when `out` or a scratch file cannot be
/// written.
inline text_to_canonical write_canonical_from_trace_jsonl(const std::filesystem::path& file,
                                                          const std::filesystem::path& out,
                                                          std::uint64_t chunk_rows = std::uint64_t{1} << 16,
                                                          std::uint64_t run_bytes = default_sort_run_bytes,
                                                          std::uint64_t merge_bytes = default_sort_merge_bytes) {
  return detail::write_canonical_from_text(
      file, out, chunk_rows, run_bytes, merge_bytes,
      [](std::istream& in, std::string_view name, auto&& start) { detail::parse_trace_jsonl(in, name, start); });
}

/// The moepolicy routing CSV file `file` as the canonical file `out`; see
/// `write_canonical_from_trace_jsonl`.
///
/// Throws: `parse_error` exactly as `read_trace_csv(file)`; as
/// `write_canonical_from_trace_jsonl` otherwise.
inline text_to_canonical write_canonical_from_trace_csv(const std::filesystem::path& file,
                                                        const std::filesystem::path& out,
                                                        std::uint64_t chunk_rows = std::uint64_t{1} << 16,
                                                        std::uint64_t run_bytes = default_sort_run_bytes,
                                                        std::uint64_t merge_bytes = default_sort_merge_bytes) {
  return detail::write_canonical_from_text(
      file, out, chunk_rows, run_bytes, merge_bytes,
      [](std::istream& in, std::string_view name, auto&& start) { detail::parse_trace_csv(in, name, start); });
}

/// Whether `first_line` is the metadata line of a moepolicy routing JSONL file (a JSON
/// object whose "format" is "moepolicy.routing-jsonl").
[[nodiscard]] inline bool is_trace_jsonl_start(std::string_view first_line) {
  nlohmann::json j;
  detail::json_document::dom_builder builder(j, active_input_limits().max_json_depth, /*reject_duplicates=*/false);
  if (!nlohmann::json::sax_parse(first_line.data(), first_line.data() + first_line.size(), &builder,
                                 nlohmann::json::input_format_t::json, true) ||
      !j.is_object()) {
    return false;
  }
  const auto it = j.find("format");
  return it != j.end() && it->is_string() && it->get_ref<const std::string&>() == trace_jsonl_format_name;
}

/// Whether `first_line` starts a moepolicy routing CSV file (a '#' and the metadata's
/// "format"); only the start is looked at, the reader checks the rest.
[[nodiscard]] inline bool is_trace_csv_start(std::string_view first_line) noexcept {
  if (first_line.empty() || first_line.front() != '#') return false;
  return first_line.find(trace_csv_format_name) != std::string_view::npos;
}

}  // namespace moepolicy::io
