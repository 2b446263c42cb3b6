// Tests of moepolicy/io/granite_jsonl.hpp: the mapping of moe-cache-lab routing JSONL to
// a routing trace, every rejection with its exact message, and the record counts of the
// recorded Granite traces.
#include "moepolicy/io/granite_jsonl.hpp"

#include <doctest/doctest.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

namespace {

namespace io = moepolicy::io;
using moepolicy::parse_error;
using moepolicy::phase;
using json = nlohmann::json;

json meta() {
  return {{"record_type", "metadata"}, {"format", "moe-cache-lab.routing-jsonl"},
          {"format_version", 1},       {"model_id", "m"},
          {"num_experts", 4},          {"experts_per_token", 2}};
}

json rec(int layer, const char* phase_name, long long position) {
  return {{"record_type", "routing_selection"},
          {"layer", layer},
          {"phase", phase_name},
          {"token_position", position},
          {"token_id", 7},
          {"selected_experts", {0, 1}},
          {"selected_probabilities", {0.75, 0.25}}};
}

std::string lines(const std::vector<json>& records) {
  std::string out;
  for (const auto& r : records) out += r.dump() + "\n";
  return out;
}

moepolicy::routing_trace granite(const std::string& text) {
  std::istringstream in(text);
  return io::read_granite_jsonl(in, "t");
}

/// Metadata plus one prompt record whose field `key` is replaced by `value`.
std::string with_record_field(const char* key, json value) {
  json r = rec(0, "prompt", 0);
  r[key] = std::move(value);
  return lines({meta(), r});
}

/// Metadata whose field `key` is replaced by `value`, plus one prompt record.
std::string with_meta_field(const char* key, json value) {
  json m = meta();
  m[key] = std::move(value);
  return lines({m, rec(0, "prompt", 0)});
}

std::filesystem::path data(const char* name) { return moepolicy::test::test_data() / "io" / name; }

}  // namespace

TEST_CASE("granite: prompt records map to step 0 prefill, generated ones to decode steps") {
  const auto t = io::read_granite_jsonl(data("granite_a.jsonl"));
  CHECK(t.info().model == "test/granite-tiny");
  CHECK(t.info().source == "moe-cache-lab.routing-jsonl v1");
  CHECK(t.info().num_layers == 2);
  CHECK(t.info().num_experts == 4);
  CHECK(t.info().top_k == 2);
  CHECK_FALSE(t.info().has_scores);
  CHECK(t.num_rows() == 10);
  REQUIRE(t.requests().size() == 1);
  CHECK(t.requests()[0].name == "granite_a");
  REQUIRE(t.steps().size() == 3);
  // P = 3 prompt positions: token_position 3 is fed by step 1, 4 by step 2.
  const std::array<phase, 3> kinds{phase::prefill, phase::decode, phase::decode};
  const std::array<std::vector<std::uint32_t>, 3> positions{{{0, 1, 2}, {3}, {4}}};
  for (std::size_t s = 0; s < 3; ++s) {
    CAPTURE(s);
    const auto& step = t.steps()[s];
    CHECK(step.step == s);
    CHECK(step.kind == kinds[s]);
    REQUIRE(step.num_batches == 2);
    for (const auto& b : t.batches_of(step)) {
      const auto v = t.view(b);
      CHECK(std::vector<std::uint32_t>(v.positions.begin(), v.positions.end()) == positions[s]);
    }
  }
  // Layer 1, prompt position 1 (the file's 6th record): experts [0, 2], weights [1, 0].
  const auto v = t.view(t.batches_of(t.steps()[0])[1]);
  CHECK(v.ref.layer == 1);
  CHECK(v.experts_of(1)[0] == 0);
  CHECK(v.experts_of(1)[1] == 2);
  CHECK(v.weights_of(1)[0] == 1.0f);
  CHECK(v.weights_of(1)[1] == 0.0f);
  // Generated position 4 at layer 1: (1 + 4) % 5 = 0 -> experts [0, 1], weights [0.75, 0.25].
  const auto d = t.view(t.batches_of(t.steps()[2])[1]);
  CHECK(d.experts_of(0)[0] == 0);
  CHECK(d.weights_of(0)[0] == 0.75f);
}

TEST_CASE("granite: the stream overload names the request and accepts any order within a phase") {
  const std::string text = lines({meta(), rec(1, "prompt", 1), rec(0, "prompt", 1), rec(1, "prompt", 0),
                                  rec(0, "prompt", 0), rec(1, "generated", 2), rec(0, "generated", 2)});
  const auto t = granite(text);
  CHECK(t.requests()[0].name == "t");
  CHECK(t.num_rows() == 6);
  CHECK(t.steps().size() == 2);
  CHECK(t.batches()[0].layer == 0);
  CHECK(t.view(t.batches()[0]).positions[1] == 1);
}

TEST_CASE("granite: line endings and trailing blank lines") {
  const std::string crlf = meta().dump() + "\r\n" + rec(0, "prompt", 0).dump() + "\r\n";
  CHECK(granite(crlf).num_rows() == 1);
  const std::string no_final_newline = meta().dump() + "\n" + rec(0, "prompt", 0).dump();
  CHECK(granite(no_final_newline).num_rows() == 1);
  CHECK(granite(lines({meta(), rec(0, "prompt", 0)}) + "\n  \n\t\n").num_rows() == 1);
  CHECK_THROWS_WITH_AS(granite(meta().dump() + "\n\n" + rec(0, "prompt", 0).dump() + "\n"),
                       "t:2: blank line inside the input (only trailing blank lines are allowed)", parse_error);
  CHECK_THROWS_WITH_AS(granite("\n" + lines({meta(), rec(0, "prompt", 0)})),
                       "t:1: blank line inside the input (only trailing blank lines are allowed)", parse_error);
}

TEST_CASE("granite: unknown fields are ignored") {
  json r = rec(0, "prompt", 0);
  r["router_logits"] = {1, 2, 3};
  json m = meta();
  m["extra"] = {{"a", 1}};
  CHECK(granite(lines({m, r})).num_rows() == 1);
}

TEST_CASE("granite: metadata") {
  const auto m = io::read_granite_metadata(data("granite_a.jsonl"));
  CHECK(m.model_id == "test/granite-tiny");
  CHECK(m.model_revision == "r1");
  CHECK(m.num_experts == 4);
  CHECK(m.experts_per_token == 2);
  CHECK(m.source_text == "two plus two?");
  CHECK(m.generated_text == " four");
  CHECK(m.capture_method == "hand-made test input");
  CHECK(m.created_at == "2025-01-01T00:00:00+00:00");
  CHECK(m.transformers_version == "5.12.0");

  // Only line 1 is read, and absent optional strings are empty.
  std::istringstream in(meta().dump() + "\nnot json\n");
  const auto bare = io::read_granite_metadata(in, "s");
  CHECK(bare.model_id == "m");
  CHECK(bare.model_revision.empty());
  CHECK(bare.source_text.empty());

  std::istringstream bad(lines({rec(0, "prompt", 0)}));
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_metadata(bad, "s")),
                       "s:1: expected the metadata record on line 1, got record_type \"routing_selection\"",
                       parse_error);
}

TEST_CASE("granite: several files make one request each; num_layers is the largest over all") {
  const std::vector<std::filesystem::path> files{data("granite_a.jsonl"), data("granite_b.jsonl")};
  const auto t = io::read_granite_jsonl(files);
  CHECK(t.info().num_layers == 3);
  CHECK(t.num_rows() == 10 + 9);
  REQUIRE(t.requests().size() == 2);
  CHECK(t.requests()[0].name == "granite_a");
  CHECK(t.requests()[1].name == "granite_b");
  CHECK(t.requests()[1].num_rows == 9);
  const auto steps_b = t.steps_of(t.requests()[1]);
  REQUIRE(steps_b.size() == 2);
  CHECK(steps_b[0].kind == phase::prefill);
  CHECK(steps_b[0].num_batches == 3);
  CHECK(steps_b[1].step == 1);
  CHECK(t.view(t.batches_of(steps_b[1])[2]).positions[0] == 2);

  const std::vector<std::filesystem::path> mixed{data("granite_a.jsonl"), data("granite_other_model.jsonl")};
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(mixed)),
                       (data("granite_other_model.jsonl").string() + ":1: model_id \"test/other\" differs from " +
                        "\"test/granite-tiny\" of " + data("granite_a.jsonl").string())
                           .c_str(),
                       parse_error);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(std::span<const std::filesystem::path>{})),
                       "moepolicy::io::read_granite_jsonl: needs at least one file", moepolicy::invalid_argument);
}

TEST_CASE("granite: files that disagree on num_experts or experts_per_token") {
  const auto dir = std::filesystem::temp_directory_path() / "moepolicy_granite_jsonl_test";
  std::filesystem::create_directories(dir);
  const auto write = [&](const char* name, const std::string& text) {
    const auto p = dir / name;
    std::ofstream(p) << text;
    return p;
  };
  json m8 = meta();
  m8["num_experts"] = 8;
  json k3 = meta();
  k3["experts_per_token"] = 3;
  json r3 = rec(0, "prompt", 0);
  r3["selected_experts"] = {0, 1, 2};
  r3["selected_probabilities"] = {0.5, 0.25, 0.25};
  const std::vector<std::filesystem::path> a{write("a.jsonl", lines({meta(), rec(0, "prompt", 0)})),
                                             write("b.jsonl", lines({m8, rec(0, "prompt", 0)}))};
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(a)),
                       (a[1].string() + ":1: num_experts 8 differs from 4 of " + a[0].string()).c_str(), parse_error);
  const std::vector<std::filesystem::path> b{a[0], write("c.jsonl", lines({k3, r3}))};
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(b)),
                       (b[1].string() + ":1: experts_per_token 3 differs from 2 of " + a[0].string()).c_str(),
                       parse_error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("granite: files that cannot be read or are empty") {
  const auto missing = data("no_such_file.jsonl");
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(missing)),
                       (missing.string() + ": cannot open: No such file or directory").c_str(), parse_error);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(data("empty.jsonl"))),
                       (data("empty.jsonl").string() + ":1: expected the metadata record, got end of input").c_str(),
                       parse_error);
  CHECK_THROWS_WITH_AS(granite("\n \n"), "t:1: expected the metadata record, got end of input", parse_error);
  CHECK_THROWS_WITH_AS(granite(lines({meta()})),
                       "t:2: expected routing_selection records after the metadata, got end of input", parse_error);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(io::read_granite_jsonl(data("granite_version2.jsonl"))),
      (data("granite_version2.jsonl").string() + ":1: unsupported format_version 2 (this reader knows version 1)")
          .c_str(),
      parse_error);
  CHECK_THROWS_WITH_AS(static_cast<void>(io::read_granite_jsonl(data("granite_truncated.jsonl"))),
                       (data("granite_truncated.jsonl").string() +
                        ":3: invalid JSON at column 58: syntax error while parsing value - invalid string: missing "
                        "closing quote; last read: '\"routing_s'")
                           .c_str(),
                       parse_error);
}

TEST_CASE("granite: bad JSON") {
  CHECK_THROWS_WITH_AS(granite(meta().dump() + "\n{\"layer\": 0,\n"),
                       "t:2: invalid JSON at column 13: syntax error while parsing object key - unexpected end of "
                       "input; expected string literal",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(meta().dump() + "\n[1, 2]\n"), "t:2: expected a JSON object, got an array", parse_error);
  CHECK_THROWS_WITH_AS(granite(meta().dump() + "\n{} {}\n"),
                       "t:2: invalid JSON at column 4: syntax error while parsing value - unexpected '{'; expected "
                       "end of input",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(meta().dump() + "\n{\"a\": \"\xff\"}\n"),
                       "t:2: invalid JSON at column 8: syntax error while parsing value - invalid string: ill-formed "
                       "UTF-8 byte; last read: '\"\\xff'",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(meta().dump() + "\n{\"selected_probabilities\": [1e400]}\n"),
                       "t:2: invalid JSON: number overflow parsing '1e400'", parse_error);
}

TEST_CASE("granite: bad metadata") {
  CHECK_THROWS_WITH_AS(granite(lines({rec(0, "prompt", 0)})),
                       "t:1: expected the metadata record on line 1, got record_type \"routing_selection\"",
                       parse_error);
  json no_type = meta();
  no_type.erase("record_type");
  CHECK_THROWS_WITH_AS(granite(lines({no_type})), "t:1: missing field \"record_type\"", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("format", "x")),
                       "t:1: unknown format \"x\" (this reader knows \"moe-cache-lab.routing-jsonl\")", parse_error);
  json no_format = meta();
  no_format.erase("format");
  CHECK_THROWS_WITH_AS(granite(lines({no_format})), "t:1: missing field \"format\"", parse_error);
  json no_version = meta();
  no_version.erase("format_version");
  CHECK_THROWS_WITH_AS(granite(lines({no_version})), "t:1: missing field \"format_version\"", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("format_version", 2)),
                       "t:1: unsupported format_version 2 (this reader knows version 1)", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("format_version", -1)),
                       "t:1: unsupported format_version -1 (this reader knows version 1)", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("format_version", "1")),
                       "t:1: field \"format_version\" must be an integer, got a string", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("model_id", nullptr)),
                       "t:1: field \"model_id\" must be a string, got null", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("num_experts", 0)),
                       "t:1: field \"num_experts\" = 0 is out of range [1, 65536]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("num_experts", 65537)),
                       "t:1: field \"num_experts\" = 65537 is out of range [1, 65536]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("experts_per_token", 5)),
                       "t:1: field \"experts_per_token\" = 5 is out of range [1, 4]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("experts_per_token", 2.0)),
                       "t:1: field \"experts_per_token\" must be an integer, got a floating-point number", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_meta_field("model_revision", 3)),
                       "t:1: field \"model_revision\" must be a string, got an integer", parse_error);
  CHECK_THROWS_WITH_AS(granite(lines({meta(), rec(0, "prompt", 0), meta()})),
                       "t:3: a second metadata record (one file holds one request, its metadata on line 1)",
                       parse_error);
}

TEST_CASE("granite: bad record fields") {
  CHECK_THROWS_WITH_AS(granite(with_record_field("record_type", "selection")), "t:2: unknown record_type \"selection\"",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("record_type", 1)),
                       "t:2: field \"record_type\" must be a string, got an integer", parse_error);
  for (const char* key :
       {"layer", "phase", "token_position", "token_id", "selected_experts", "selected_probabilities"}) {
    CAPTURE(key);
    json r = rec(0, "prompt", 0);
    r.erase(key);
    CHECK_THROWS_WITH_AS(granite(lines({meta(), r})), (std::string("t:2: missing field \"") + key + '"').c_str(),
                         parse_error);
  }
  CHECK_THROWS_WITH_AS(granite(with_record_field("phase", "decode")),
                       "t:2: field \"phase\" must be \"prompt\" or \"generated\", got \"decode\"", parse_error);
  CHECK_THROWS_WITH_AS(
      granite(with_record_field("phase", std::string(100, 'a') + "\n")),
      ("t:2: field \"phase\" must be \"prompt\" or \"generated\", got \"" + std::string(64, 'a') + "...\"").c_str(),
      parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("phase", "\x01")),
                       "t:2: field \"phase\" must be \"prompt\" or \"generated\", got \"\\u0001\"", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("layer", -1)), "t:2: field \"layer\" = -1 is out of range [0, 65535]",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("layer", 65536)),
                       "t:2: field \"layer\" = 65536 is out of range [0, 65535]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("layer", 0.5)),
                       "t:2: field \"layer\" must be an integer, got a floating-point number", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("layer", "0")),
                       "t:2: field \"layer\" must be an integer, got a string", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("layer", true)),
                       "t:2: field \"layer\" must be an integer, got a boolean", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("token_position", 4294967296LL)),
                       "t:2: field \"token_position\" = 4294967296 is out of range [0, 4294967295]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("token_id", -5)),
                       "t:2: field \"token_id\" = -5 is out of range [0, 18446744073709551615]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", json::object())),
                       "t:2: field \"selected_experts\" must be an array, got an object", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", {0, "1"})),
                       "t:2: field \"selected_experts\" must hold integers, got a string at index 1", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", {0, 70000})),
                       "t:2: expert id 70000 in \"selected_experts\" is out of range [0, 65535]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", {-1, 0})),
                       "t:2: expert id -1 in \"selected_experts\" is out of range [0, 65535]", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_probabilities", {0.5, nullptr})),
                       "t:2: field \"selected_probabilities\" must hold numbers, got null at index 1", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_probabilities", {1e39, 0.0})),
                       "t:2: gate weight 1e+39 in \"selected_probabilities\" does not fit a float", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_probabilities", {0.5, -1e300})),
                       "t:2: gate weight -1e+300 in \"selected_probabilities\" does not fit a float", parse_error);
}

TEST_CASE("granite: rows the trace rejects") {
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", {0, 4})), "t:2: expert id 4 >= num_experts 4",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", {1, 1})), "t:2: expert id 1 selected twice",
                       parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_experts", {3})),
                       "t:2: layer 0: expected top_k = 2 expert ids, got 1", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_probabilities", {0.5, 0.25, 0.25})),
                       "t:2: expected 2 gate weights, got 3", parse_error);
  CHECK_THROWS_WITH_AS(granite(with_record_field("selected_probabilities", {1.25, -0.25})),
                       "t:2: gate weight -0.25 of expert 1 is not a finite non-negative number", parse_error);
}

TEST_CASE("granite: phase order, prompt length and duplicates") {
  CHECK_THROWS_WITH_AS(granite(lines({meta(), rec(0, "generated", 0)})),
                       "t:2: generated record before any prompt record", parse_error);
  CHECK_THROWS_WITH_AS(granite(lines({meta(), rec(0, "prompt", 0), rec(0, "generated", 1), rec(0, "prompt", 1)})),
                       "t:4: prompt record after generated records (all prompt records come first)", parse_error);
  CHECK_THROWS_WITH_AS(granite(lines({meta(), rec(0, "prompt", 0), rec(0, "prompt", 1), rec(0, "generated", 1)})),
                       "t:4: generated token_position 1 is inside the prompt (token_positions 0..1)", parse_error);
  CHECK_THROWS_WITH_AS(granite(lines({meta(), rec(0, "prompt", 0), rec(1, "prompt", 0), rec(0, "prompt", 0)})),
                       "t:4: duplicate record for layer 0, token_position 0 (first on line 2)", parse_error);
  CHECK_THROWS_WITH_AS(granite(lines({meta(), rec(0, "prompt", 0), rec(0, "generated", 3), rec(0, "generated", 3)})),
                       "t:4: duplicate record for layer 0, token_position 3 (first on line 3)", parse_error);
  // Generated positions may skip: the step follows the position.
  const auto t = granite(lines({meta(), rec(0, "prompt", 0), rec(0, "prompt", 1), rec(0, "generated", 5)}));
  REQUIRE(t.steps().size() == 2);
  CHECK(t.steps()[1].step == 4);
  // The largest positions a trace can hold.
  const auto far = granite(lines({meta(), rec(0, "prompt", 4294967294LL), rec(65535, "generated", 4294967295LL)}));
  CHECK(far.info().num_layers == 65536);
  CHECK(far.steps()[1].step == 1);
  CHECK(far.view(far.batches()[1]).positions[0] == 4294967295u);
}

TEST_CASE("granite: the recorded Granite 3.1 1B-A400M traces") {
  MOEPOLICY_REQUIRE_SHARED_TRACES();
  struct expected {
    const char* file;
    std::size_t records, prompt, generated;
  };
  // PROVENANCE.txt's table.
  const std::array<expected, 12> table{{{"00-cal-factual-01", 648, 11, 16},
                                        {"01-cal-coding-01", 624, 10, 16},
                                        {"02-cal-math-01", 720, 14, 16},
                                        {"03-cal-conversation-01", 672, 12, 16},
                                        {"04-eval-factual-01", 648, 11, 16},
                                        {"05-eval-factual-02", 600, 9, 16},
                                        {"06-eval-coding-01", 696, 13, 16},
                                        {"07-eval-coding-02", 648, 11, 16},
                                        {"08-eval-math-01", 840, 19, 16},
                                        {"09-eval-summary-01", 864, 20, 16},
                                        {"10-eval-reasoning-01", 768, 16, 16},
                                        {"11-eval-conversation-01", 768, 16, 16}}};
  const auto dir = moepolicy::test::shared_traces() / "granite-3.1-1b-a400m";
  std::vector<std::filesystem::path> files;
  for (const auto& e : table) files.push_back(dir / (std::string(e.file) + ".jsonl"));

  for (std::size_t i = 0; i < table.size(); ++i) {
    CAPTURE(table[i].file);
    const auto t = io::read_granite_jsonl(files[i]);
    CHECK(t.info().model == "ibm-granite/granite-3.1-1b-a400m-instruct");
    CHECK(t.info().num_layers == 24);
    CHECK(t.info().num_experts == 32);
    CHECK(t.info().top_k == 8);
    CHECK(t.num_rows() == table[i].records);
    CHECK(t.requests()[0].name == table[i].file);
    // One prefill pass over the prompt, then one decode step per generated token, every
    // step with all 24 layers.
    REQUIRE(t.steps().size() == 1 + table[i].generated);
    CHECK(t.batches().size() == 24 * (1 + table[i].generated));
    std::set<std::uint32_t> prompt, generated;
    for (const auto& s : t.steps()) {
      CHECK(s.num_batches == 24);
      for (const auto& b : t.batches_of(s)) {
        for (const auto p : t.view(b).positions) (s.kind == phase::prefill ? prompt : generated).insert(p);
        if (s.kind == phase::decode) {
          CHECK(b.num_rows == 1);
          CHECK(t.view(b).positions[0] == table[i].prompt + s.step - 1);
        }
      }
    }
    CHECK(prompt.size() == table[i].prompt);
    CHECK(*prompt.rbegin() == table[i].prompt - 1);
    CHECK(generated.size() == table[i].generated);
    CHECK(t.steps().back().step == table[i].generated);
  }

  const auto all = io::read_granite_jsonl(files);
  CHECK(all.num_rows() == 8496);
  CHECK(all.requests().size() == 12);
  CHECK(all.steps().size() == 12 * 17);
  CHECK(all.info().num_layers == 24);
  std::size_t prompt_rows = 0;
  for (const auto& s : all.steps()) {
    if (s.kind == phase::prefill) {
      for (const auto& b : all.batches_of(s)) prompt_rows += b.num_rows;
    }
  }
  CHECK(prompt_rows == 24 * 162);
  CHECK(all.num_rows() - prompt_rows == 24 * 192);

  const auto m = io::read_granite_metadata(files[0]);
  CHECK(m.model_revision == "0da7a48b0276d500ce5922fd2b33944091fc6c09");
  CHECK(m.source_text == "What is the capital of France? Answer briefly.");
  CHECK(m.transformers_version == "5.12.0");
}
