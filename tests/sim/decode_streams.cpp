// B concurrent decode streams: continuous batching of whole requests, the split of a short
// trace's tokens (the same loads as sched/batched_steps.hpp), contexts and positions, and
// the same streams formed from a canonical file's map (once per B, or from its walks done once
// for every B), and the tokens alone.
#include "moepolicy/sim/decode_streams.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../cache/cache_test_support.hpp"
#include "moepolicy/sched/batched_steps.hpp"
#include "moepolicy/trace/canonical.hpp"
#include "trace_compare.hpp"

using namespace moepolicy;

namespace {

/// Requests with `prompt[r]` prefill tokens and `decode[r]` decode tokens, 2 layers, 4
/// experts, top-1; each decode token of request r selects expert r at layer 0 and expert
/// (index mod 4) at layer 1.
routing_trace requests(const std::vector<std::uint32_t>& prompt, const std::vector<std::uint32_t>& decode) {
  routing_trace_builder b({"m", "test", 2, 4, 1, false});
  const float w[1] = {1.0f};
  for (std::uint32_t r = 0; r < decode.size(); ++r) {
    b.add_request("r" + std::to_string(r));
    for (std::uint32_t p = 0; p < prompt[r]; ++p) {
      const expert_id e[1] = {static_cast<expert_id>(p % 4)};
      for (layer_id l = 0; l < 2; ++l) b.add({r, phase::prefill, 0, p, l, e, w, {}});
    }
    for (std::uint32_t i = 0; i < decode[r]; ++i) {
      const expert_id e0[1] = {static_cast<expert_id>(r % 4)};
      const expert_id e1[1] = {static_cast<expert_id>(i % 4)};
      b.add({r, phase::decode, i + 1, prompt[r] + i, 0, e0, w, {}});
      b.add({r, phase::decode, i + 1, prompt[r] + i, 1, e1, w, {}});
    }
  }
  return std::move(b).finish();
}

}  // namespace

TEST_CASE("whole requests: a free slot takes the next request, contexts count the prompt") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  const decode_streams d = make_decode_streams(t, {.streams = 2});
  CHECK(d.formation() == stream_formation::whole_requests);
  REQUIRE(d.num_steps() == 3);
  CHECK(d.num_tokens() == 6);
  // Step 0: r0 and r1 start; step 1: both continue; step 2: r0 is done, its slot takes r2.
  const auto s0 = d.tokens(0), s1 = d.tokens(1), s2 = d.tokens(2);
  REQUIRE(s0.size() == 2);
  CHECK((s0[0].request == 0 && s0[0].first && s0[0].context == 3));
  CHECK((s0[1].request == 1 && s0[1].first && s0[1].context == 0));
  CHECK((s1[0].request == 0 && !s1[0].first && s1[0].context == 4 && s1[0].decode_index == 1));
  REQUIRE(s2.size() == 2);
  CHECK((s2[0].stream == 0 && s2[0].request == 2 && s2[0].first && s2[0].context == 5));
  CHECK((s2[1].stream == 1 && s2[1].request == 1 && s2[1].decode_index == 2));
  REQUIRE(d.sequences().size() == 3);
  CHECK((d.sequences()[2].stream == 0 && d.sequences()[2].first_step == 2 && d.sequences()[2].tokens == 1));
  CHECK(d.sequences()[0].starts_request);
  CHECK(d.prompt_tokens()[2] == 5);
  // The batched trace: step 2's layer-0 batch holds r2's then r1's token, by stream.
  const routing_trace& b = d.batched();
  REQUIRE(b.steps().size() == 3);
  const batch_view v = b.view(b.batches_of(b.steps()[2])[0]);
  REQUIRE(v.tokens() == 2);
  CHECK(v.experts[0] == 2);
  CHECK(v.experts[1] == 1);
  CHECK(d.token_of(2, v, 1).request == 1);
  // More slots than requests leave slots idle.
  const decode_streams wide = make_decode_streams(t, {.streams = 5, .formation = stream_formation::whole_requests});
  CHECK(wide.num_steps() == 3);
  CHECK(wide.tokens(0).size() == 3);
}

TEST_CASE("split tokens: segments of floor(n/B) tokens, a new sequence where a request starts") {
  const routing_trace t = requests({2, 2}, {3, 4});  // 7 tokens
  const decode_streams d = make_decode_streams(t, {.streams = 3});
  CHECK(d.formation() == stream_formation::split_tokens);
  REQUIRE(d.num_steps() == 2);  // 7 / 3; one token left over
  // Segments: (r0 0, r0 1), (r0 2, r1 0), (r1 1, r1 2).
  CHECK((d.tokens(0)[1].request == 0 && d.tokens(0)[1].decode_index == 2 && d.tokens(0)[1].first));
  CHECK((d.tokens(1)[1].request == 1 && d.tokens(1)[1].first && d.tokens(1)[1].context == 2));
  CHECK((d.tokens(1)[2].request == 1 && !d.tokens(1)[2].first));
  CHECK(d.sequences().size() == 4);
  CHECK(!d.sequences()[1].starts_request);  // (r0 2) continues r0
  CHECK(make_decode_streams(t, {.streams = 8}).num_steps() == 0);
  CHECK_THROWS_WITH_AS(static_cast<void>(make_decode_streams(t, {.streams = 0})),
                       "moepolicy::make_decode_streams: streams must be >= 1, got 0", invalid_argument);
}

TEST_CASE("one batched-steps rule: split tokens gives the loads of make_batched_decode_steps") {
  const routing_trace t = test::granite_trace();
  for (std::size_t B : {1u, 4u, 16u, 32u}) {
    CAPTURE(B);
    const decode_streams d = make_decode_streams(t, {.streams = B, .formation = stream_formation::split_tokens});
    const batched_steps ref = make_batched_decode_steps(t, B);
    REQUIRE(d.num_steps() == ref.num_steps());
    const routing_trace& b = d.batched();
    for (std::size_t s = 0; s < d.num_steps(); ++s) {
      std::vector<std::uint32_t> loads(24 * 32, 0);
      for (const batch_ref& r : b.batches_of(b.steps()[s])) {
        for (expert_id e : b.view(r).experts) ++loads[r.layer * 32u + e];
      }
      std::vector<std::uint32_t> want;
      for (std::size_t l = 0; l < 24; ++l) {
        const auto w = ref.loads(s, l);
        want.insert(want.end(), w.begin(), w.end());
      }
      CHECK(loads == want);
    }
  }
}

TEST_CASE("one stream replays the decode steps as recorded") {
  const routing_trace t = test::granite_trace();
  const decode_streams d = make_decode_streams(t, {.streams = 1});
  CHECK(d.formation() == stream_formation::whole_requests);
  CHECK(d.num_steps() == 192);
  CHECK(d.sequences().size() == 12);
  std::size_t s = 0;
  for (const step_ref& st : t.steps()) {
    if (st.kind != phase::decode) continue;
    const auto want = t.batches_of(st);
    const auto got = d.batched().batches_of(d.batched().steps()[s]);
    REQUIRE(want.size() == got.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const auto a = t.view(want[i]).experts;
      const auto c = d.batched().view(got[i]).experts;
      CHECK(std::vector<expert_id>(a.begin(), a.end()) == std::vector<expert_id>(c.begin(), c.end()));
    }
    CHECK(d.tokens(s)[0].context == d.prompt_tokens()[st.request] + d.tokens(s)[0].decode_index);
    ++s;
  }
}

namespace {

/// Checks that `a` and `b` are the same streams: steps, tokens, sequences, prompts and
/// (unless `a` was formed with `tokens_only`, which holds no rows) the batched trace.
void check_same_streams(const decode_streams& a, const decode_streams& b, bool a_tokens_only = false) {
  CHECK(a.formation() == b.formation());
  CHECK(a.num_streams() == b.num_streams());
  CHECK(a.rows_per_token() == b.rows_per_token());
  REQUIRE(a.num_steps() == b.num_steps());
  CHECK(a.num_tokens() == b.num_tokens());
  // One check per table (the first difference named): the streams of the larger traces
  // hold some 100,000 tokens.
  std::size_t differ = 0, first = 0;
  for (std::size_t s = 0; s < a.num_steps(); ++s) {
    const auto x = a.tokens(s), y = b.tokens(s);
    bool same = x.size() == y.size();
    for (std::size_t i = 0; same && i < x.size(); ++i) {
      same = x[i].stream == y[i].stream && x[i].sequence == y[i].sequence && x[i].request == y[i].request &&
             x[i].decode_index == y[i].decode_index && x[i].context == y[i].context && x[i].first == y[i].first;
    }
    if (!same && differ++ == 0) first = s;
  }
  CHECK_MESSAGE(differ == 0, differ << " steps' tokens differ, the first at step " << first);
  REQUIRE(a.sequences().size() == b.sequences().size());
  differ = 0;
  for (std::size_t i = 0; i < a.sequences().size(); ++i) {
    const stream_sequence &x = a.sequences()[i], &y = b.sequences()[i];
    const bool same = x.stream == y.stream && x.request == y.request && x.first_step == y.first_step &&
                      x.tokens == y.tokens && x.starts_request == y.starts_request;
    if (!same && differ++ == 0) first = i;
  }
  CHECK_MESSAGE(differ == 0, differ << " sequences differ, the first is sequence " << first);
  CHECK(std::vector<std::uint64_t>(a.prompt_tokens().begin(), a.prompt_tokens().end()) ==
        std::vector<std::uint64_t>(b.prompt_tokens().begin(), b.prompt_tokens().end()));
  CHECK(a.num_rows() == b.batched().num_rows());
  CHECK(b.num_rows() == b.batched().num_rows());
  if (a_tokens_only) {
    CHECK(a.batched().num_rows() == 0);
    CHECK(a.batched().info().num_layers == b.batched().info().num_layers);
    CHECK(a.batched().info().num_experts == b.batched().info().num_experts);
  } else {
    test::check_same_trace(a.batched(), b.batched());
  }
}

}  // namespace

TEST_CASE("streams formed from a canonical file's map are those formed from the trace") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("moepolicy_decode_streams_test_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  // Prefills and several requests (the synthetic trace), a recorded trace with router
  // scores absent and many layers (Granite).
  const std::vector<routing_trace> traces = {requests({3, 0, 5, 2}, {2, 3, 1, 4}), requests({2, 2}, {3, 4}),
                                             test::granite_trace()};
  for (std::size_t i = 0; i < traces.size(); ++i) {
    const routing_trace& t = traces[i];
    const auto path = dir / ("t" + std::to_string(i) + ".mtrace");
    write_canonical(t, path);
    const canonical_file f(path, canonical_file::access::copy);
    // The file's walks done once, every B and formation formed from them in turn, with and
    // without their rows.
    const std::optional<file_decode_streams> source = file_decode_streams::open(f);
    REQUIRE(source.has_value());
    for (const std::size_t B : {1u, 2u, 3u, 5u, 16u}) {
      for (const auto how :
           {stream_formation::automatic, stream_formation::whole_requests, stream_formation::split_tokens}) {
        CAPTURE(i);
        CAPTURE(B);
        CAPTURE(to_string(how));
        const decode_streams whole = make_decode_streams(t, {.streams = B, .formation = how});
        const std::optional<decode_streams> got = make_decode_streams(f, {.streams = B, .formation = how});
        REQUIRE(got.has_value());
        check_same_streams(*got, whole);
        check_same_streams(source->form({.streams = B, .formation = how}), whole);
        check_same_streams(source->form({.streams = B, .formation = how, .tokens_only = true}), whole, true);
        check_same_streams(make_decode_streams(t, {.streams = B, .formation = how, .tokens_only = true}), whole, true);
      }
    }
    CHECK_THROWS_WITH_AS(static_cast<void>(make_decode_streams(f, {.streams = 0})),
                         "moepolicy::make_decode_streams: streams must be >= 1, got 0", invalid_argument);
    CHECK_THROWS_WITH_AS(static_cast<void>(source->form({.streams = 0})),
                         "moepolicy::file_decode_streams::form: streams must be >= 1, got 0", invalid_argument);
  }
  // Columns at an odd address cannot be used in place: nothing is formed, and the caller
  // reads the trace whole instead.
  std::vector<std::byte> shifted(std::filesystem::file_size(dir / "t0.mtrace") + 1);
  {
    std::ifstream in(dir / "t0.mtrace", std::ios::binary);
    in.read(reinterpret_cast<char*>(shifted.data() + 1), static_cast<std::streamsize>(shifted.size() - 1));
  }
  const canonical_file odd(std::span<const std::byte>(shifted).subspan(1), "odd.mtrace");
  CHECK_FALSE(make_decode_streams(odd, {.streams = 2}).has_value());
  CHECK_FALSE(file_decode_streams::open(odd).has_value());
  std::filesystem::remove_all(dir);
}

namespace {

/// `requests` decode requests of `tokens + r % 7` tokens each (every third with a prefill
/// of 5 tokens), 4 layers, 8 experts, top-2, with router scores: experts, weights and scores
/// drawn from a fixed seed.
routing_trace many_rows(std::uint32_t requests, std::uint32_t tokens) {
  routing_trace_builder b({"m", "test", 4, 8, 2, true});
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> expert(0, 7);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  const auto add = [&](std::uint32_t r, phase kind, std::uint32_t step, std::uint32_t pos, layer_id l) {
    const expert_id a = static_cast<expert_id>(expert(rng));
    const expert_id e[2] = {a, static_cast<expert_id>((a + 1 + expert(rng) % 7) % 8)};
    const float w[2] = {u(rng), u(rng)};
    float sc[8];
    for (float& x : sc) x = u(rng);
    b.add({r, kind, step, pos, l, e, w, sc});
  };
  for (std::uint32_t r = 0; r < requests; ++r) {
    b.add_request("r" + std::to_string(r));
    const std::uint32_t prompt = r % 3 == 0 ? 5 : 0;
    for (std::uint32_t p = 0; p < prompt; ++p) {
      for (layer_id l = 0; l < 4; ++l) add(r, phase::prefill, 0, p, l);
    }
    for (std::uint32_t i = 0; i < tokens + r % 7; ++i) {
      for (layer_id l = 0; l < 4; ++l) add(r, phase::decode, i + 1, prompt + i, l);
    }
  }
  return std::move(b).finish();
}

}  // namespace

TEST_CASE("on several threads: the streams formed on one, from the trace and from the file") {
  // 26 requests of about 1,900 decode tokens at 4 layers: some 198,000 rows, cut into up to
  // 3 parts of at least `detail::form_part_rows` (65,536) rows.
  const routing_trace t = many_rows(26, 1900);
  REQUIRE(t.num_rows() >= 3 * detail::form_part_rows);
  const auto dir = std::filesystem::temp_directory_path() /
                   ("moepolicy_decode_streams_jobs_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  const auto path = dir / "t.mtrace";
  write_canonical(t, path);
  const canonical_file f(path, canonical_file::access::copy);
  const std::optional<file_decode_streams> source = file_decode_streams::open(f);
  REQUIRE(source.has_value());
  for (const std::size_t B : {1u, 3u, 64u}) {
    CAPTURE(B);
    const decode_streams one = make_decode_streams(t, {.streams = B});
    CHECK(one.formation() == (B == 64 ? stream_formation::split_tokens : stream_formation::whole_requests));
    // Two and three parts from each source; eight threads make three parts as three do
    // (checked from the trace), and the tokens alone are formed on one thread whatever
    // `jobs` (checked once).
    for (const std::size_t jobs : {2u, 3u}) {
      CAPTURE(jobs);
      check_same_streams(make_decode_streams(t, {.streams = B}, jobs), one);
      check_same_streams(source->form({.streams = B}, jobs), one);
      const std::optional<decode_streams> mapped = make_decode_streams(f, {.streams = B}, jobs);
      REQUIRE(mapped.has_value());
      check_same_streams(*mapped, one);
    }
    check_same_streams(make_decode_streams(t, {.streams = B}, 8), one);
    check_same_streams(source->form({.streams = B, .tokens_only = true}, 8), one, true);
  }
  CHECK_THROWS_WITH_AS(static_cast<void>(make_decode_streams(t, {.streams = 2}, 0)),
                       "moepolicy::make_decode_streams: jobs must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(make_decode_streams(f, {.streams = 2}, 0)),
                       "moepolicy::make_decode_streams: jobs must be >= 1, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(source->form({.streams = 2}, 0)),
                       "moepolicy::file_decode_streams::form: jobs must be >= 1, got 0", invalid_argument);
  std::filesystem::remove_all(dir);
}

TEST_CASE("prefill_steps: a canonical file's prefill rows alone, every request kept") {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("moepolicy_prefill_steps_test_" + std::to_string(std::random_device{}()));
  std::filesystem::create_directories(dir);
  // Prefills in some requests only (a request without one keeps its name and no row), and
  // a trace with no prefill at all, and a recorded trace.
  const std::vector<routing_trace> traces = {requests({3, 0, 5, 2}, {2, 3, 1, 4}), requests({0, 0}, {3, 4}),
                                             test::granite_trace()};
  for (std::size_t i = 0; i < traces.size(); ++i) {
    CAPTURE(i);
    const routing_trace& t = traces[i];
    const auto path = dir / ("t" + std::to_string(i) + ".mtrace");
    write_canonical(t, path);
    // The expected trace: the prefill batches of `t`, row by row, through the builder.
    routing_trace_builder b(t.info());
    for (const request_ref& r : t.requests()) b.add_request(r.name);
    std::size_t prefill_rows = 0;
    for (const step_ref& s : t.steps()) {
      if (s.kind != phase::prefill) continue;
      for (const batch_ref& br : t.batches_of(s)) {
        const batch_view v = t.view(br);
        const std::size_t k = t.info().top_k, e = t.info().has_scores ? t.info().num_experts : 0;
        for (std::size_t j = 0; j < v.tokens(); ++j) {
          b.add({br.request, phase::prefill, br.step, v.positions[j], br.layer, v.experts.subspan(j * k, k),
                 v.weights.subspan(j * k, k), e == 0 ? std::span<const float>() : v.scores.subspan(j * e, e)});
          ++prefill_rows;
        }
      }
    }
    const routing_trace expected = std::move(b).finish();
    const canonical_file f(path, canonical_file::access::copy);
    const routing_trace got = prefill_steps(f);
    CHECK(got.num_rows() == prefill_rows);
    CHECK(got.requests().size() == t.requests().size());
    test::check_same_trace(got, expected);
  }
  CHECK(prefill_steps(canonical_file(dir / "t0.mtrace")).num_rows() == 2 * (3 + 5 + 2));
  CHECK(prefill_steps(canonical_file(dir / "t1.mtrace")).num_rows() == 0);
  std::filesystem::remove_all(dir);
}

namespace {

/// A former over `t` that counts its calls (formations, tokens-only included).
struct counting_former {
  const routing_trace* t;
  std::atomic<int>* calls;
  decode_streams operator()(const decode_streams_config& c) const {
    calls->fetch_add(1);
    return make_decode_streams(*t, c);
  }
};

}  // namespace

TEST_CASE("shared_decode_streams: one configuration formed once while held, again after release") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  std::atomic<int> calls{0};
  shared_decode_streams shared(counting_former{&t, &calls});
  {
    const auto a = shared.acquire({.streams = 1});
    const auto b = shared.acquire({.streams = 1});
    CHECK(a.get() == b.get());
    CHECK(shared.formations() == 1);
    CHECK(shared.held() == 1);
    check_same_streams(*a, make_decode_streams(t, {.streams = 1}));
    // A copy of a handle keeps the streams too.
    const auto copy = a;
    CHECK(calls.load() == 1);
  }
  CHECK(shared.held() == 0);
  const auto again = shared.acquire({.streams = 1});
  CHECK(shared.formations() == 2);
  CHECK(calls.load() == 2);
  // Another formation rule is another configuration (and waits for none: this thread holds
  // B = 1, and max_held is 1, so it refuses instead).
  CHECK_THROWS_WITH_AS(
      static_cast<void>(shared.acquire({.streams = 1, .formation = stream_formation::split_tokens})),
      "moepolicy::shared_decode_streams::acquire: the calling thread holds streams and would wait for itself "
      "(max_held 1, streams 1)",
      std::logic_error);
}

TEST_CASE("shared_decode_streams: tokens-only streams are formed for each call, neither shared nor counted") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  std::atomic<int> calls{0};
  shared_decode_streams shared(counting_former{&t, &calls});
  const auto held = shared.acquire({.streams = 2});
  const auto a = shared.acquire({.streams = 2, .tokens_only = true});
  const auto b = shared.acquire({.streams = 2, .tokens_only = true});
  CHECK(a.get() != b.get());
  CHECK(a->batched().num_rows() == 0);
  CHECK(a->num_rows() == held->num_rows());
  CHECK(shared.held() == 1);
  CHECK(shared.formations() == 1);
  CHECK(calls.load() == 3);
}

TEST_CASE("shared_decode_streams: max_held configurations at once, each of a thread's own") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  std::atomic<int> calls{0};
  shared_decode_streams two(counting_former{&t, &calls}, 2);
  const auto one = two.acquire({.streams = 1});
  const auto other = two.acquire({.streams = 3});
  CHECK(two.held() == 2);
  CHECK(one->num_streams() == 1);
  CHECK(other->num_streams() == 3);
  CHECK_THROWS_WITH_AS(
      static_cast<void>(two.acquire({.streams = 2})),
      "moepolicy::shared_decode_streams::acquire: the calling thread holds streams and would wait for itself "
      "(max_held 2, streams 2)",
      std::logic_error);
}

TEST_CASE("shared_decode_streams: a failed formation is not held, and the next caller forms again") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  int calls = 0;
  shared_decode_streams shared([&](const decode_streams_config& c) {
    if (++calls == 1) throw std::runtime_error("formation failed");
    return make_decode_streams(t, c);
  });
  CHECK_THROWS_WITH_AS(static_cast<void>(shared.acquire({.streams = 2})), "formation failed", std::runtime_error);
  CHECK(shared.held() == 0);
  CHECK(shared.formations() == 0);
  CHECK(shared.acquire({.streams = 2})->num_streams() == 2);
  CHECK(shared.formations() == 1);
  // The former's own errors pass through: B = 0.
  CHECK_THROWS_WITH_AS(static_cast<void>(shared.acquire({.streams = 0})),
                       "moepolicy::make_decode_streams: streams must be >= 1, got 0", std::invalid_argument);
}

TEST_CASE("shared_decode_streams: an empty former or max_held 0 is refused") {
  CHECK_THROWS_WITH_AS(shared_decode_streams(shared_decode_streams::former{}),
                       "moepolicy::shared_decode_streams: the former must not be empty", std::invalid_argument);
  const routing_trace t = requests({1}, {1});
  CHECK_THROWS_WITH_AS(
      shared_decode_streams([&](const decode_streams_config& c) { return make_decode_streams(t, c); }, 0),
      "moepolicy::shared_decode_streams: max_held must be >= 1, got 0", std::invalid_argument);
}

TEST_CASE("shared_decode_streams: on several threads, one set held at a time, each formed once while held") {
  const routing_trace t = requests({3, 0, 5, 2, 1}, {20, 30, 10, 25, 5});
  std::atomic<int> calls{0};
  shared_decode_streams shared(counting_former{&t, &calls});
  // Six threads: each asks for B = 1 (shared by all that hold it at once), drops it, then
  // asks for its own B (2, 3 or 4: two threads each), and checks them against the trace's.
  // With one configuration held at a time, no thread ever sees two held.
  std::atomic<int> most_held{0};
  std::atomic<bool> ok{true};
  const auto note_held = [&] {
    const int h = static_cast<int>(shared.held());
    int seen = most_held.load();
    while (h > seen && !most_held.compare_exchange_weak(seen, h)) {
    }
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&, i] {
      for (const std::size_t B : {std::size_t{1}, static_cast<std::size_t>(2 + i % 3)}) {
        const auto d = shared.acquire({.streams = B});
        note_held();
        const decode_streams want = make_decode_streams(t, {.streams = B});
        if (d->num_streams() != B || d->num_tokens() != want.num_tokens() || d->num_steps() != want.num_steps() ||
            d->batched().num_rows() != want.batched().num_rows()) {
          ok = false;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(ok.load());
  CHECK(most_held.load() == 1);
  CHECK(shared.held() == 0);
  // Each formation was of a configuration no one held then: at most one per thread and B.
  CHECK(shared.formations() >= 4);
  CHECK(shared.formations() <= 12);
  CHECK(calls.load() == static_cast<int>(shared.formations()));
}

TEST_CASE("shared_decode_streams: a caller waits while another configuration is held, until it is released") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  std::atomic<int> calls{0};
  shared_decode_streams shared(counting_former{&t, &calls});
  auto held = shared.acquire({.streams = 1});
  std::atomic<bool> got{false};
  std::atomic<bool> released{false};
  bool before_release = false;
  std::thread waiter([&] {
    const auto d = shared.acquire({.streams = 2});
    before_release = !released.load();
    got = true;
  });
  // It cannot hold B = 2 before B = 1 is released.
  while (shared.waiting() == 0) std::this_thread::yield();
  CHECK_FALSE(got.load());
  released = true;
  held.reset();
  waiter.join();
  CHECK(got.load());
  CHECK_FALSE(before_release);
  CHECK(shared.held() == 0);
}

namespace {
// Seconds of "CPU time" the calling thread has spent, advanced by hand.
thread_local double fake_seconds = 0.0;
double fake_clock() noexcept { return fake_seconds; }
}  // namespace

TEST_CASE("shared_decode_streams: under a span meter, a waiter's chain goes on from the release it waited for") {
  const routing_trace t = requests({3, 0, 5}, {2, 3, 1});
  shared_decode_streams shared([&](const decode_streams_config& c) { return make_decode_streams(t, c); });
  detail::span_meter m(fake_clock);
  fake_seconds += 1.0;
  detail::span_batch b;
  std::atomic<bool> holding{false};
  double after_wait = -1.0;
  // Task 0 holds B = 1 for 2 s of its chain; task 1 runs 0.5 s, then waits for B = 2 until
  // task 0 releases B = 1: its chain goes on from the release (1 + 2 = 3), then runs 1 s.
  std::thread t0([&] {
    b.run([&] {
      auto d = shared.acquire({.streams = 1});
      holding = true;
      fake_seconds += 2.0;
      while (shared.waiting() == 0) std::this_thread::yield();  // task 1 waits for B = 2
      d.reset();
    });
  });
  std::thread t1([&] {
    b.run([&] {
      while (!holding.load()) std::this_thread::yield();
      fake_seconds += 0.5;
      const auto d = shared.acquire({.streams = 2});
      after_wait = detail::span_position();
      fake_seconds += 1.0;
    });
  });
  t0.join();
  t1.join();
  b.finish();
  CHECK(after_wait == doctest::Approx(3.0));
  CHECK(m.stop() == doctest::Approx(4.0));
  CHECK(m.work() == doctest::Approx(4.5));  // 1 + 2 + 0.5 + 1: waiting is no work
}
