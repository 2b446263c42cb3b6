// moepolicy/io/granite_jsonl.hpp — importer of moe-cache-lab's routing JSONL
// ("moe-cache-lab.routing-jsonl", format_version 1), the format of the IBM Granite
// 3.1 1B-A400M traces (../shared/traces/granite-3.1-1b-a400m/PROVENANCE.txt).
//
// The source format: one JSON object per line, one file per request.
//   line 1, record_type "metadata": format, format_version, model_id, num_experts,
//     experts_per_token; optionally model_revision, source_text (the prompt),
//     generated_text, capture_method, created_at, transformers_version;
//   then record_type "routing_selection": layer, phase ("prompt" or "generated"),
//     token_position (0-based over prompt then generated tokens), token_id,
//     selected_experts (experts_per_token ids), selected_probabilities (their gate
//     weights, renormalised over the top-k).
//   The recorder writes prompt records layer by layer, then generated records token by
//   token; the reader accepts any order within each phase (the trace is sorted), but
//   every prompt record must come before every generated one.
//
// Mapping to `routing_trace` (every choice the source leaves open):
//   request   one per file, named by the file's stem (the stream overload's `name`);
//   prompt    phase::prefill, step 0 (the one prefill pass), position = token_position;
//   generated phase::decode, position = token_position, step = token_position − P + 1
//             where P = (largest prompt token_position) + 1 of the same file: the
//             decode step whose forward pass feeds that token (the first generated
//             token is fed by step 1);
//   info      model = model_id, source = "moe-cache-lab.routing-jsonl v1",
//             num_experts from the metadata, top_k = experts_per_token,
//             num_layers = (largest layer seen over all files read together) + 1,
//             because the metadata does not state it (24 for every Granite file: each
//             records layers 0..23); no router scores.
//   token_id, source_text, generated_text and the other metadata strings are not
//   part of the trace; `read_granite_metadata` returns them.
//
// Errors: `moepolicy::parse_error` naming the file (or the stream's name) and the
// 1-based line: a first line that is not this format's metadata, an unknown format or
// format_version, a second metadata record, a missing field or one of the wrong type,
// an integer out of range (layer > 65535, token_position > 2^32 − 1, negative values),
// a phase other than "prompt"/"generated", a prompt record after a generated one, a
// generated record before any prompt record or at a prompt position, a row that
// `routing_trace_builder::check` rejects (expert id >= num_experts, an id twice, k !=
// experts_per_token, a gate weight negative or not finite), a weight that does not fit
// a float, the same (layer, token_position) twice, a file without routing records, and
// the line rules of io/jsonl_format.hpp (invalid JSON, blank lines before a record).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/io/detail/input.hpp"
#include "moepolicy/io/jsonl_format.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy::io {

/// The `format` value of a Granite routing file.
inline constexpr std::string_view granite_jsonl_format_name = "moe-cache-lab.routing-jsonl";
/// The `format_version` this reader knows.
inline constexpr std::uint64_t granite_jsonl_format_version = 1;

/// The metadata line of a Granite routing file: what a report on the request wants
/// beside its routing. Strings absent from the file are empty.
struct granite_metadata {
  std::string model_id;
  std::string model_revision;
  std::uint32_t num_experts = 0;
  std::uint32_t experts_per_token = 0;
  /// The prompt.
  std::string source_text;
  /// The model's answer.
  std::string generated_text;
  std::string capture_method;
  std::string created_at;
  std::string transformers_version;
};

namespace detail {

/// Validates the metadata record `rec`, read at the current line of `at`.
inline granite_metadata parse_granite_metadata(const jsonl_lines& at, const json& rec) {
  const std::string& type = require_string(at, rec, "record_type");
  if (type != "metadata") at.fail("expected the metadata record on line 1, got record_type " + quote_text(type));
  const std::string& format = require_string(at, rec, "format");
  if (format != granite_jsonl_format_name) {
    at.fail("unknown format " + quote_text(format) + " (this reader knows \"" + std::string(granite_jsonl_format_name) +
            "\")");
  }
  const json& version = require(at, rec, "format_version");
  if (!version.is_number_integer()) {
    at.fail("field \"format_version\" must be an integer, got " + std::string(describe(version)));
  }
  if (version != granite_jsonl_format_version) {
    at.fail("unsupported format_version " + version.dump() + " (this reader knows version " +
            std::to_string(granite_jsonl_format_version) + ")");
  }
  granite_metadata m;
  m.model_id = require_string(at, rec, "model_id");
  m.num_experts = static_cast<std::uint32_t>(require_uint(at, rec, "num_experts", 1, 65536));
  m.experts_per_token = static_cast<std::uint32_t>(require_uint(at, rec, "experts_per_token", 1, m.num_experts));
  m.model_revision = optional_string(at, rec, "model_revision");
  m.source_text = optional_string(at, rec, "source_text");
  m.generated_text = optional_string(at, rec, "generated_text");
  m.capture_method = optional_string(at, rec, "capture_method");
  m.created_at = optional_string(at, rec, "created_at");
  m.transformers_version = optional_string(at, rec, "transformers_version");
  return m;
}

/// Reads and validates the first record of `lines`.
inline granite_metadata read_granite_metadata_record(jsonl_lines& lines) {
  json rec;
  if (!lines.next(rec)) fail_at_line(lines.file(), 1, "expected the metadata record, got end of input");
  return parse_granite_metadata(lines, rec);
}

/// Reads Granite files one after another into staged rows, then builds the trace once
/// num_layers (the largest layer seen + 1) is known.
class granite_collector {
 public:
  void read(std::istream& in, std::string_view file, std::string request_name) {
    jsonl_lines lines(in, file);
    const granite_metadata meta = read_granite_metadata_record(lines);
    if (!checker_) {
      first_ = meta;
      first_file_ = std::string(file);
      // Rows are checked against the largest layer count a layer_id allows; the
      // trace's num_layers is set from the data in finish().
      checker_.emplace(
          trace_info{meta.model_id, std::string(source), 65536, meta.num_experts, meta.experts_per_token, false});
    } else {
      agree(lines, "model_id", quote_text(meta.model_id), quote_text(first_.model_id),
            meta.model_id == first_.model_id);
      agree(lines, "num_experts", std::to_string(meta.num_experts), std::to_string(first_.num_experts),
            meta.num_experts == first_.num_experts);
      agree(lines, "experts_per_token", std::to_string(meta.experts_per_token),
            std::to_string(first_.experts_per_token), meta.experts_per_token == first_.experts_per_token);
    }
    const std::uint32_t request = checker_->add_request(request_name);
    names_.push_back(std::move(request_name));

    // (layer << 32 | token_position) -> line, to name both lines of a duplicate.
    std::unordered_map<std::uint64_t, std::uint64_t> seen;
    std::uint64_t prompt_len = 0;  // P: largest prompt token_position + 1
    bool any_prompt = false;
    bool any_generated = false;
    json rec;
    while (lines.next(rec)) {
      const std::string& type = require_string(lines, rec, "record_type");
      if (type == "metadata") {
        lines.fail("a second metadata record (one file holds one request, its metadata on line 1)");
      }
      if (type != "routing_selection") lines.fail("unknown record_type " + quote_text(type));
      const auto layer = static_cast<layer_id>(require_uint(lines, rec, "layer", 0, 65535));
      const std::string& phase_name = require_string(lines, rec, "phase");
      const bool prompt = phase_name == "prompt";
      if (!prompt && phase_name != "generated") {
        lines.fail("field \"phase\" must be \"prompt\" or \"generated\", got " + quote_text(phase_name));
      }
      const auto position = static_cast<std::uint32_t>(
          require_uint(lines, rec, "token_position", 0, std::numeric_limits<std::uint32_t>::max()));
      static_cast<void>(require_uint(lines, rec, "token_id", 0, std::numeric_limits<std::uint64_t>::max()));
      require_expert_ids(lines, rec, "selected_experts", ids_);
      require_weights(lines, rec, "selected_probabilities", weights_);

      trace_row row{request, phase::prefill, 0, position, layer, ids_, weights_, {}};
      if (prompt) {
        if (any_generated) lines.fail("prompt record after generated records (all prompt records come first)");
        any_prompt = true;
        prompt_len = std::max<std::uint64_t>(prompt_len, std::uint64_t{position} + 1u);
      } else {
        if (!any_prompt) lines.fail("generated record before any prompt record");
        if (position < prompt_len) {
          lines.fail("generated token_position " + std::to_string(position) +
                     " is inside the prompt (token_positions 0.." + std::to_string(prompt_len - 1u) + ")");
        }
        any_generated = true;
        row.kind = phase::decode;
        row.step = static_cast<std::uint32_t>(position - prompt_len + 1u);
      }
      if (auto why = checker_->check(row)) lines.fail(*why);
      const std::uint64_t key = (std::uint64_t{layer} << 32) | position;
      if (const auto [it, fresh] = seen.emplace(key, lines.line()); !fresh) {
        lines.fail("duplicate record for layer " + std::to_string(layer) + ", token_position " +
                   std::to_string(position) + " (first on line " + std::to_string(it->second) + ")");
      }
      stage(row);
      num_layers_ = std::max<std::uint32_t>(num_layers_, std::uint32_t{layer} + 1u);
    }
    if (!any_prompt) fail_at_line(file, 2, "expected routing_selection records after the metadata, got end of input");
  }

  routing_trace finish() && {
    routing_trace_builder b(trace_info{first_.model_id, std::string(source), num_layers_, first_.num_experts,
                                       first_.experts_per_token, false});
    for (auto& name : names_) b.add_request(std::move(name));
    const std::size_t k = first_.experts_per_token;
    const std::span<const expert_id> ids(rows_.experts);
    const std::span<const float> weights(rows_.weights);
    for (std::size_t r = 0; r < rows_.layer.size(); ++r) {
      b.add(trace_row{rows_.request[r],
                      rows_.kind[r],
                      rows_.step[r],
                      rows_.position[r],
                      rows_.layer[r],
                      ids.subspan(r * k, k),
                      weights.subspan(r * k, k),
                      {}});
    }
    rows_ = {};
    return std::move(b).finish();
  }

  static constexpr std::string_view source = "moe-cache-lab.routing-jsonl v1";

 private:
  void agree(const jsonl_lines& at, const char* what, const std::string& got, const std::string& first,
             bool same) const {
    if (!same) at.fail(std::string(what) + ' ' + got + " differs from " + first + " of " + first_file_);
  }

  void stage(const trace_row& row) {
    rows_.request.push_back(row.request);
    rows_.step.push_back(row.step);
    rows_.position.push_back(row.position);
    rows_.layer.push_back(row.layer);
    rows_.kind.push_back(row.kind);
    rows_.experts.insert(rows_.experts.end(), row.experts.begin(), row.experts.end());
    rows_.weights.insert(rows_.weights.end(), row.weights.begin(), row.weights.end());
  }

  std::optional<routing_trace_builder> checker_;
  granite_metadata first_;
  std::string first_file_;
  std::vector<std::string> names_;
  trace_columns rows_;
  std::uint32_t num_layers_ = 0;
  std::vector<expert_id> ids_;
  std::vector<float> weights_;
};

}  // namespace detail

/// The metadata (line 1) of the Granite routing file `file`; the rest is not read.
///
/// Throws: `parse_error` naming the file when it cannot be opened, or at line 1 when
/// the metadata record is missing or invalid (see the header comment).
[[nodiscard]] inline granite_metadata read_granite_metadata(const std::filesystem::path& file) {
  std::ifstream in = detail::open_input(file);
  detail::jsonl_lines lines(in, file.string());
  return detail::read_granite_metadata_record(lines);
}

/// The metadata of the Granite routing data read from `in`; `name` labels errors.
///
/// Throws: as the path overload.
[[nodiscard]] inline granite_metadata read_granite_metadata(std::istream& in, std::string_view name) {
  detail::jsonl_lines lines(in, name);
  return detail::read_granite_metadata_record(lines);
}

/// The routing of one Granite request, read from `in`; `name` is the request's name and
/// the file name in errors.
///
/// Throws: `parse_error` naming `name` and the line (see the header comment).
/// Complexity: linear in the input; the rows are staged once before the trace is built.
[[nodiscard]] inline routing_trace read_granite_jsonl(std::istream& in, std::string_view name) {
  detail::granite_collector c;
  c.read(in, name, std::string(name));
  return std::move(c).finish();
}

/// The routing of the Granite request in `file`, named by the file's stem.
///
/// Throws: `parse_error` naming the file (as given) and the line.
[[nodiscard]] inline routing_trace read_granite_jsonl(const std::filesystem::path& file) {
  std::ifstream in = detail::open_input(file);
  detail::granite_collector c;
  c.read(in, file.string(), file.stem().string());
  return std::move(c).finish();
}

/// One trace of several Granite files, one request per file in the order given, each
/// named by its file's stem; num_layers is the largest layer over all files + 1.
///
/// Throws: `invalid_argument` when `files` is empty; `parse_error` as the one-file
/// overload, or at line 1 of a file whose model_id, num_experts or experts_per_token
/// differs from the first file's.
[[nodiscard]] inline routing_trace read_granite_jsonl(std::span<const std::filesystem::path> files) {
  if (files.empty()) moepolicy::detail::throw_invalid("io::read_granite_jsonl", "needs at least one file");
  detail::granite_collector c;
  for (const auto& file : files) {
    std::ifstream in = detail::open_input(file);
    c.read(in, file.string(), file.stem().string());
  }
  return std::move(c).finish();
}

}  // namespace moepolicy::io
