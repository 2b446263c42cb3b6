// moepolicy/sim/decode_streams.hpp — B concurrent decode streams formed from a recorded
// trace, as a serving engine batches them: each batched step holds one token of every
// active stream, so a step's working set at a layer is the union of the streams' experts.
//
// The recorded traces decode one sequence at a time; the papers serve many at once
// (CXL-MoE Tab. 2 at 32 concurrent requests, Edge-MoE §6.2 at batch 1 and 3). A decode
// token is one decode `step_ref` of a request (its rows at every layer). How tokens become
// streams (`stream_formation`):
//   whole_requests  continuous batching of whole requests: the requests with decode steps,
//                   in trace order, fill B slots; a slot whose request has emitted its last
//                   token takes the next request before the following step. Every sequence
//                   is a real request from its first decode token; the last steps may hold
//                   fewer than B tokens (the tail), and B above the requests leaves slots
//                   idle.
//   split_tokens    for a trace with fewer requests than streams: the n decode tokens, in
//                   trace order, are cut into B segments of s = ⌊n/B⌋ tokens and step t
//                   holds token t of every segment (t = 0 … s−1; the n mod B tokens left
//                   over are not used) — exactly the `concurrent_sequences` rule of
//                   sched/batched_steps.hpp, so that both give the same per-expert loads. A
//                   segment that starts inside a request continues that request with its KV
//                   cache as if it had been running; a segment that crosses into the next
//                   request starts a new sequence there.
//   automatic       whole_requests when the trace has at least B requests with decode
//                   steps, else split_tokens.
// Every step is full in split_tokens; B = 1 with either rule replays the trace as recorded.
//
// The steps are a `routing_trace` of their own (`batched()`): one request, decode step s =
// batched step s, and at each layer one batch whose rows are the step's tokens in stream
// order (a token whose recorded step lacks the layer adds no row there). A row's position
// is `token × rows_per_token() + j` for the j-th row of the token's recorded batch (1 row
// per token in every recorded trace), so a policy that matches rows across layers by
// position (the transition predictor) sees each token's path, and `tokens(s)[position /
// rows_per_token()]` is the row's token.
//
// Per token: its stream, its sequence, the request it came from and its KV context — the
// tokens already cached for its sequence when it runs (the request's recorded prompt plus
// the decode tokens before it), which prices attention.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/trace/routing_trace.hpp"

namespace moepolicy {

/// How recorded decode tokens become concurrent streams (see the header).
enum class stream_formation : std::uint8_t { automatic, whole_requests, split_tokens };

/// "automatic", "whole_requests" or "split_tokens".
[[nodiscard]] constexpr std::string_view to_string(stream_formation f) noexcept {
  switch (f) {
    case stream_formation::automatic:
      return "automatic";
    case stream_formation::whole_requests:
      return "whole_requests";
    case stream_formation::split_tokens:
      return "split_tokens";
  }
  return "?";
}

/// Options of `make_decode_streams`.
struct decode_streams_config {
  /// B, concurrent streams, >= 1.
  std::size_t streams = 1;
  stream_formation formation = stream_formation::automatic;
};

/// One token of a batched step.
struct stream_token {
  /// Its stream slot, in [0, B).
  std::uint32_t stream = 0;
  /// Its sequence, an index into `decode_streams::sequences()`.
  std::uint32_t sequence = 0;
  /// The recorded request it comes from, and its decode index there (0: the first decode
  /// token after the prompt).
  std::uint32_t request = 0;
  std::uint32_t decode_index = 0;
  /// Tokens already in the sequence's KV cache when it runs: the request's recorded prompt
  /// plus `decode_index`.
  std::uint64_t context = 0;
  /// The first token of its sequence (a predictor's history restarts).
  bool first = false;
};

/// One sequence a stream serves: a run of consecutive decode tokens of one request.
struct stream_sequence {
  std::uint32_t stream = 0;
  std::uint32_t request = 0;
  /// The batched step of its first token, and its tokens.
  std::uint32_t first_step = 0;
  std::uint32_t tokens = 0;
  /// Whether it starts at its request's first decode token (so the request's prefill, if
  /// recorded, precedes it).
  bool starts_request = false;
};

/// The routing rows the timed replays have processed, for a progress line read from another
/// thread: a replay given one adds each batched step's rows to `rows` as the step ends
/// (relaxed order), and the rows of a system it does not run (does not fit) at once; a
/// caller that plans several replays sets `total` to their rows (passes × the batched
/// trace's rows) beforehand. Nothing else reads them.
struct replay_progress {
  std::atomic<std::uint64_t> rows{0};
  std::atomic<std::uint64_t> total{0};

  void add(std::uint64_t n) noexcept { rows.fetch_add(n, std::memory_order_relaxed); }
  void plan(std::uint64_t n) noexcept { total.fetch_add(n, std::memory_order_relaxed); }
};

class decode_streams;
inline decode_streams make_decode_streams(const routing_trace& t, const decode_streams_config& c);

/// Batched decode steps of B concurrent streams (see the header).
class decode_streams {
 public:
  decode_streams() = default;

  /// The steps as a trace: one request, step s = batched step s.
  [[nodiscard]] const routing_trace& batched() const noexcept { return batched_; }
  [[nodiscard]] std::size_t num_streams() const noexcept { return streams_; }
  /// The rule used (never `automatic`).
  [[nodiscard]] stream_formation formation() const noexcept { return formation_; }
  [[nodiscard]] std::size_t num_steps() const noexcept { return offsets_.empty() ? 0 : offsets_.size() - 1; }
  /// Tokens over all steps.
  [[nodiscard]] std::size_t num_tokens() const noexcept { return tokens_.size(); }
  /// Recorded rows per token (1 in every recorded trace): positions are token ×
  /// rows_per_token() + row.
  [[nodiscard]] std::uint32_t rows_per_token() const noexcept { return rows_per_token_; }
  /// The tokens of step `s`, in stream order.
  [[nodiscard]] std::span<const stream_token> tokens(std::size_t s) const noexcept {
    MOEPOLICY_ASSERT(s + 1 < offsets_.size());
    return std::span<const stream_token>(tokens_).subspan(offsets_[s], offsets_[s + 1] - offsets_[s]);
  }
  /// Every sequence, in order of their first step, then stream.
  [[nodiscard]] std::span<const stream_sequence> sequences() const noexcept { return sequences_; }
  /// The recorded prompt tokens of each request of the source trace (0 without a prefill).
  [[nodiscard]] std::span<const std::uint64_t> prompt_tokens() const noexcept { return prompts_; }
  /// The token row `i` of `view` (a batch of `batched()`) belongs to.
  [[nodiscard]] const stream_token& token_of(std::size_t step, const batch_view& view, std::size_t i) const noexcept {
    return tokens(step)[view.positions[i] / rows_per_token_];
  }

 private:
  friend decode_streams make_decode_streams(const routing_trace& t, const decode_streams_config& c);

  routing_trace batched_;
  std::size_t streams_ = 0;
  stream_formation formation_ = stream_formation::whole_requests;
  std::uint32_t rows_per_token_ = 1;
  std::vector<std::size_t> offsets_;
  std::vector<stream_token> tokens_;
  std::vector<stream_sequence> sequences_;
  std::vector<std::uint64_t> prompts_;
};

/// Forms B concurrent decode streams from the decode steps of `t` (see the header).
///
/// Returns: the batched steps; none when the trace has no decode steps, or fewer than B
/// decode tokens under `split_tokens`.
/// Throws: `invalid_argument` naming `make_decode_streams` when `streams` is 0.
/// Complexity: O(rows of the trace + steps × layers).
[[nodiscard]] inline decode_streams make_decode_streams(const routing_trace& t, const decode_streams_config& c) {
  constexpr std::string_view fn = "make_decode_streams";
  if (c.streams == 0) detail::throw_invalid(fn, "streams must be >= 1", c.streams);
  const trace_info& info = t.info();
  decode_streams out;
  out.streams_ = c.streams;

  // Decode tokens per request, and recorded prompts (the most rows of a prefill step's
  // batches, summed over its prefill steps).
  std::vector<std::vector<const step_ref*>> decode(t.requests().size());
  out.prompts_.assign(t.requests().size(), 0);
  std::uint32_t rows_per_token = 1;
  for (const step_ref& s : t.steps()) {
    std::uint32_t rows = 0;
    for (const batch_ref& b : t.batches_of(s)) rows = std::max(rows, b.num_rows);
    if (s.kind == phase::decode) {
      decode[s.request].push_back(&s);
      rows_per_token = std::max(rows_per_token, rows);
    } else {
      out.prompts_[s.request] += rows;
    }
  }
  out.rows_per_token_ = rows_per_token;
  std::vector<std::uint32_t> with_decode;
  std::size_t n = 0;
  for (std::uint32_t r = 0; r < decode.size(); ++r) {
    if (decode[r].empty()) continue;
    with_decode.push_back(r);
    n += decode[r].size();
  }
  stream_formation how = c.formation;
  if (how == stream_formation::automatic) {
    how = with_decode.size() >= c.streams ? stream_formation::whole_requests : stream_formation::split_tokens;
  }
  out.formation_ = how;

  // Which recorded token each (step, slot) runs: steps[s] lists (slot, request, index).
  struct slot_token {
    std::uint32_t stream, request, index;
    bool first;
  };
  std::vector<std::vector<slot_token>> steps;
  if (how == stream_formation::whole_requests) {
    struct active {
      bool busy = false;
      std::uint32_t request = 0, next = 0;
    };
    std::vector<active> slot(c.streams);
    std::size_t queued = 0;
    for (;;) {
      std::vector<slot_token> step;
      for (std::uint32_t j = 0; j < c.streams; ++j) {
        bool first = false;
        if (!slot[j].busy && queued < with_decode.size()) {
          slot[j] = {true, with_decode[queued++], 0};
          first = true;
        }
        if (!slot[j].busy) continue;
        step.push_back({j, slot[j].request, slot[j].next, first});
        if (++slot[j].next == decode[slot[j].request].size()) slot[j].busy = false;
      }
      if (step.empty()) break;
      steps.push_back(std::move(step));
    }
  } else {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> stream;  // (request, index) in trace order
    stream.reserve(n);
    for (std::uint32_t r : with_decode) {
      for (std::uint32_t i = 0; i < decode[r].size(); ++i) stream.emplace_back(r, i);
    }
    const std::size_t s = n / c.streams;
    steps.resize(s);
    for (std::size_t st = 0; st < s; ++st) {
      for (std::uint32_t j = 0; j < c.streams; ++j) {
        const auto [r, i] = stream[j * s + st];
        const bool first = st == 0 || stream[j * s + st - 1].first != r;
        steps[st].push_back({j, r, i, first});
      }
    }
  }

  // Tokens, sequences and the batched trace. Every column is reserved to its exact size
  // first (a counting pass over the same rows), so that none grows by doubling: at B = 1
  // the batched trace is the trace's decode rows again, and doubling held up to twice that.
  std::vector<std::uint32_t> current(c.streams, 0);
  trace_columns cols;
  const std::size_t L = info.num_layers;
  {
    std::size_t tokens = 0, rows = 0;
    for (const auto& step : steps) {
      tokens += step.size();
      for (const slot_token& x : step) {
        for (const batch_ref& b : t.batches_of(*decode[x.request][x.index])) {
          if (b.layer < L) rows += b.num_rows;
        }
      }
    }
    const std::size_t ids = rows * info.top_k;
    const std::size_t scores = info.has_scores ? rows * info.num_experts : 0;
    out.offsets_.reserve(steps.size() + 1);
    out.tokens_.reserve(tokens);
    cols.request.reserve(rows);
    cols.step.reserve(rows);
    cols.position.reserve(rows);
    cols.layer.reserve(rows);
    cols.kind.reserve(rows);
    cols.experts.reserve(ids);
    cols.weights.reserve(ids);
    cols.scores.reserve(scores);
  }
  out.offsets_.push_back(0);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    for (const slot_token& x : steps[s]) {
      if (x.first) {
        current[x.stream] = static_cast<std::uint32_t>(out.sequences_.size());
        out.sequences_.push_back({x.stream, x.request, static_cast<std::uint32_t>(s), 0, x.index == 0});
      }
      ++out.sequences_[current[x.stream]].tokens;
      out.tokens_.push_back(
          {x.stream, current[x.stream], x.request, x.index, out.prompts_[x.request] + x.index, x.first});
    }
    out.offsets_.push_back(out.tokens_.size());
    // Rows: layer-major, tokens in stream order within a layer.
    for (std::size_t l = 0; l < L; ++l) {
      for (std::size_t i = 0; i < steps[s].size(); ++i) {
        const slot_token& x = steps[s][i];
        for (const batch_ref& b : t.batches_of(*decode[x.request][x.index])) {
          if (b.layer != l) continue;
          for (std::uint32_t j = 0; j < b.num_rows; ++j) {
            const std::size_t r = b.first_row + j;
            cols.request.push_back(0);
            cols.step.push_back(static_cast<std::uint32_t>(s));
            cols.position.push_back(static_cast<std::uint32_t>(i * rows_per_token + j));
            cols.layer.push_back(static_cast<layer_id>(l));
            cols.kind.push_back(phase::decode);
            const auto ids = t.experts(r);
            const auto ws = t.weights(r);
            cols.experts.insert(cols.experts.end(), ids.begin(), ids.end());
            cols.weights.insert(cols.weights.end(), ws.begin(), ws.end());
            if (info.has_scores) {
              const auto sc = t.scores(r);
              cols.scores.insert(cols.scores.end(), sc.begin(), sc.end());
            }
          }
        }
      }
    }
  }
  steps = {};
  decode = {};
  out.batched_ = routing_trace::from_sorted(
      info, {std::to_string(c.streams) + " concurrent decode stream" + (c.streams == 1 ? "" : "s")}, std::move(cols));
  return out;
}

}  // namespace moepolicy
