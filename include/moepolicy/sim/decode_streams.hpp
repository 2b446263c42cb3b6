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
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"
#include "moepolicy/detail/span_meter.hpp"
#include "moepolicy/detail/task_pool.hpp"
#include "moepolicy/trace/canonical.hpp"
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
  /// Form the steps' tokens, the sequences and the prompts but not the batched trace:
  /// `batched()` holds no rows (its info is the trace's), `num_rows()` still counts those it
  /// would hold. What a caller needs to size a replay before forming the streams it runs
  /// (their contexts, tokens and rows), at a small part of the cost and memory.
  bool tokens_only = false;
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
namespace detail {
struct decode_inputs;
template <class Source>
decode_streams form_decode_streams(const Source& src, const decode_inputs& in, const decode_streams_config& c,
                                   std::size_t jobs);
}  // namespace detail

/// Batched decode steps of B concurrent streams (see the header).
class decode_streams {
 public:
  decode_streams() = default;

  /// The steps as a trace: one request, step s = batched step s (no rows when formed with
  /// `tokens_only`).
  [[nodiscard]] const routing_trace& batched() const noexcept { return batched_; }
  /// The rows of the batched steps: `batched().num_rows()`, or the rows it would hold when
  /// formed with `tokens_only`.
  [[nodiscard]] std::uint64_t num_rows() const noexcept { return rows_; }
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
  template <class Source>
  friend decode_streams detail::form_decode_streams(const Source& src, const detail::decode_inputs& in,
                                                    const decode_streams_config& c, std::size_t jobs);

  routing_trace batched_;
  std::uint64_t rows_ = 0;
  std::size_t streams_ = 0;
  stream_formation formation_ = stream_formation::whole_requests;
  std::uint32_t rows_per_token_ = 1;
  std::vector<std::size_t> offsets_;
  std::vector<stream_token> tokens_;
  std::vector<stream_sequence> sequences_;
  std::vector<std::uint64_t> prompts_;
};

namespace detail {

/// `make_decode_streams` over a `routing_trace` (`form_decode_streams`'s source): its steps,
/// their batches and its rows.
struct trace_stream_source {
  const routing_trace& t;

  [[nodiscard]] const trace_info& info() const noexcept { return t.info(); }
  [[nodiscard]] std::size_t num_requests() const noexcept { return t.requests().size(); }
  [[nodiscard]] std::span<const step_ref> steps() const noexcept { return t.steps(); }
  /// Calls `f(layer, first_row, num_rows)` for every batch of `s`, in layer order.
  template <class F>
  void for_each_batch(const step_ref& s, F&& f) const {
    for (const batch_ref& b : t.batches_of(s)) f(b.layer, std::size_t{b.first_row}, b.num_rows);
  }
  [[nodiscard]] std::span<const expert_id> experts(std::size_t r) const noexcept { return t.experts(r); }
  [[nodiscard]] std::span<const float> weights(std::size_t r) const noexcept { return t.weights(r); }
  [[nodiscard]] std::span<const float> scores(std::size_t r) const noexcept { return t.scores(r); }
  /// Called with the rows read since the last call, and when every row has been read.
  void gathered(std::size_t) const noexcept {}
  void done() const noexcept {}
};

/// `make_decode_streams` over a canonical file's columns used in place: the steps found by
/// one walk (24 bytes per step), the batches of a step by its rows' layers, and the file's
/// pages given back every `release_rows` rows read, so that the file is held a part at a
/// time beside the batched trace.
class file_stream_source {
 public:
  struct step {
    std::uint32_t request = 0;
    phase kind = phase::prefill;
    std::uint32_t num_rows = 0;
    std::uint64_t first_row = 0;
  };

  /// `steps`: the file's steps, which a walk has counted (and so checked the rows).
  file_stream_source(const canonical_file& f, canonical_columns c, std::uint64_t steps) : f_(&f), c_(c) {
    const auto nothing = [](const auto&) {};
    steps_.reserve(static_cast<std::size_t>(steps));
    f.for_each_batch(
        nothing,
        [&](const batch_view& v) {
          if (steps_.empty() || !open_) {
            steps_.push_back({v.ref.request, v.ref.kind, 0, v.ref.first_row});
            open_ = true;
          }
          steps_.back().num_rows += v.ref.num_rows;
        },
        [&](const step_ref&) { open_ = false; });
    f.release_columns();
  }

  [[nodiscard]] const trace_info& info() const noexcept { return f_->info(); }
  [[nodiscard]] std::size_t num_requests() const noexcept { return f_->request_names().size(); }
  [[nodiscard]] std::span<const step> steps() const noexcept { return steps_; }
  template <class F>
  void for_each_batch(const step& s, F&& f) const {
    const std::size_t end = static_cast<std::size_t>(s.first_row) + s.num_rows;
    for (std::size_t r = static_cast<std::size_t>(s.first_row); r < end;) {
      const layer_id l = c_.layer[r];
      std::size_t e = r + 1;
      while (e < end && c_.layer[e] == l) ++e;
      f(l, r, static_cast<std::uint32_t>(e - r));
      r = e;
    }
  }
  [[nodiscard]] std::span<const expert_id> experts(std::size_t r) const noexcept {
    const std::size_t k = f_->info().top_k;
    return c_.experts.subspan(r * k, k);
  }
  [[nodiscard]] std::span<const float> weights(std::size_t r) const noexcept {
    const std::size_t k = f_->info().top_k;
    return c_.weights.subspan(r * k, k);
  }
  [[nodiscard]] std::span<const float> scores(std::size_t r) const noexcept {
    if (!f_->info().has_scores) return {};
    const std::size_t e = f_->info().num_experts;
    return c_.scores.subspan(r * e, e);
  }
  /// Safe to call from several threads at once (the parts of a formation on a pool): the
  /// pages go back once the rows gathered by all of them since the last release reach
  /// `release_rows`; a thread reading a page given back faults it in again from the page
  /// cache, so only memory use depends on the order.
  void gathered(std::size_t rows) const noexcept {
    const std::size_t before = since_release_.n.fetch_add(rows, std::memory_order_relaxed);
    if (before + rows >= release_rows) done();
  }
  /// Gives back every page read (the last part, otherwise held while the batched trace is
  /// replayed).
  void done() const noexcept {
    since_release_.n.store(0, std::memory_order_relaxed);
    f_->release_columns();
  }

  /// Rows gathered between two releases of the file's pages.
  static constexpr std::size_t release_rows = std::size_t{1} << 16;

 private:
  const canonical_file* f_;  // a pointer: the source is assignable
  canonical_columns c_;
  std::vector<step> steps_;
  bool open_ = false;
  /// Rows gathered since the last release; copied as its value (the source is copyable).
  struct release_count {
    std::atomic<std::size_t> n{0};
    release_count() = default;
    release_count(const release_count& o) noexcept : n(o.n.load(std::memory_order_relaxed)) {}
    release_count& operator=(const release_count& o) noexcept {
      n.store(o.n.load(std::memory_order_relaxed), std::memory_order_relaxed);
      return *this;
    }
    ~release_count() = default;
  };
  mutable release_count since_release_;
};

/// What forming streams reads of a source whatever B: each request's decode steps (indices
/// into the source's steps), the recorded prompts and the rows per token.
struct decode_inputs {
  std::vector<std::vector<std::size_t>> decode;  // per request
  std::vector<std::uint64_t> prompts;            // per request
  std::uint32_t rows_per_token = 1;
  std::vector<std::uint32_t> with_decode;  // the requests with decode steps, in order
  std::size_t tokens = 0;                  // decode tokens, all requests
};

/// `decode_inputs` of `src` (`trace_stream_source` or `file_stream_source`): one walk of its
/// steps' layers. A prompt is the most rows of a prefill step's batches, summed over the
/// request's prefill steps.
template <class Source>
decode_inputs read_decode_inputs(const Source& src) {
  decode_inputs in;
  in.decode.resize(src.num_requests());
  in.prompts.assign(src.num_requests(), 0);
  const auto steps = src.steps();
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& s = steps[i];
    std::uint32_t rows = 0;
    std::size_t seen = 0;
    src.for_each_batch(s, [&](layer_id, std::size_t, std::uint32_t count) {
      rows = std::max(rows, count);
      seen += count;
    });
    src.gathered(seen);
    if (s.kind == phase::decode) {
      in.decode[s.request].push_back(i);
      in.rows_per_token = std::max(in.rows_per_token, rows);
    } else {
      in.prompts[s.request] += rows;
    }
  }
  for (std::uint32_t r = 0; r < in.decode.size(); ++r) {
    if (in.decode[r].empty()) continue;
    in.with_decode.push_back(r);
    in.tokens += in.decode[r].size();
  }
  return in;
}

/// The fewest rows a part of a formation gathers on a thread of its own (about 1.7 MB of a
/// top-2 trace's columns): fewer would cost more in starting threads than they save.
inline constexpr std::size_t form_part_rows = std::size_t{1} << 16;
/// Rows a part reads between two calls of its source's `gathered`.
inline constexpr std::size_t gather_count_rows = std::size_t{1} << 12;

/// `make_decode_streams` over `src` (`trace_stream_source` or `file_stream_source`), whose
/// `decode_inputs` are `in`, the rows gathered on up to `jobs` threads (parts of the steps
/// of about equal rows, at least `form_part_rows` each; the streams do not depend on it).
template <class Source>
decode_streams form_decode_streams(const Source& src, const decode_inputs& in, const decode_streams_config& c,
                                   std::size_t jobs) {
  const trace_info& info = src.info();
  const auto src_steps = src.steps();
  decode_streams out;
  out.streams_ = c.streams;
  out.prompts_ = in.prompts;
  out.rows_per_token_ = in.rows_per_token;
  const std::uint32_t rows_per_token = in.rows_per_token;
  const std::vector<std::uint32_t>& with_decode = in.with_decode;
  const std::size_t n = in.tokens;
  const auto step_of = [&](const auto& x) -> decltype(auto) { return src_steps[in.decode[x.request][x.index]]; };
  stream_formation how = c.formation;
  if (how == stream_formation::automatic) {
    how = with_decode.size() >= c.streams ? stream_formation::whole_requests : stream_formation::split_tokens;
  }
  out.formation_ = how;

  // Which recorded token each (step, slot) runs: step s lists (slot, request, index) as
  // slots[step_start[s] .. step_start[s + 1]), held flat (no allocation per step).
  struct slot_token {
    std::uint32_t stream, request, index;
    bool first;
  };
  std::vector<slot_token> slots;
  std::vector<std::size_t> step_start{0};
  const auto end_step = [&] { step_start.push_back(slots.size()); };
  if (how == stream_formation::whole_requests) {
    struct active {
      bool busy = false;
      std::uint32_t request = 0, next = 0;
    };
    std::vector<active> slot(c.streams);
    std::size_t queued = 0;
    slots.reserve(n);
    for (;;) {
      const std::size_t before = slots.size();
      for (std::uint32_t j = 0; j < c.streams; ++j) {
        bool first = false;
        if (!slot[j].busy && queued < with_decode.size()) {
          slot[j] = {true, with_decode[queued++], 0};
          first = true;
        }
        if (!slot[j].busy) continue;
        slots.push_back({j, slot[j].request, slot[j].next, first});
        if (++slot[j].next == in.decode[slot[j].request].size()) slot[j].busy = false;
      }
      if (slots.size() == before) break;
      end_step();
    }
  } else {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> stream;  // (request, index) in trace order
    stream.reserve(n);
    for (std::uint32_t r : with_decode) {
      for (std::uint32_t i = 0; i < in.decode[r].size(); ++i) stream.emplace_back(r, i);
    }
    const std::size_t s = n / c.streams;
    slots.reserve(s * c.streams);
    for (std::size_t st = 0; st < s; ++st) {
      for (std::uint32_t j = 0; j < c.streams; ++j) {
        const auto [r, i] = stream[j * s + st];
        const bool first = st == 0 || stream[j * s + st - 1].first != r;
        slots.push_back({j, r, i, first});
      }
      end_step();
    }
  }

  // Tokens, sequences and the batched trace. The rows of every step are counted first (a
  // pass over the steps' layers), so that each column is sized once to its exact length —
  // at B = 1 the batched trace is the trace's decode rows again, and growing by doubling
  // held up to twice that — and each step's rows have their place before any is written.
  const std::size_t L = info.num_layers;
  const std::size_t steps = step_start.size() - 1;
  // The threads: parts of the steps of at least `form_part_rows` rows each (the rows of
  // one per token and layer, before they are counted).
  const std::size_t parts =
      c.tokens_only ? 1 : std::min(jobs, std::max<std::size_t>(1, slots.size() * L / form_part_rows));
  std::optional<task_pool> pool;
  if (parts > 1) pool.emplace(parts);
  // Calls `f(first, last)` for each part of the steps, [first, last) its steps, cut at
  // `at`'s cumulative sizes (each part about 1/parts of the last), on the pool's threads.
  const auto each_part = [&](std::span<const std::size_t> at, auto&& f) {
    if (parts == 1) {
      f(std::size_t{0}, steps);
      return;
    }
    std::vector<std::size_t> cut(parts + 1, steps);
    cut[0] = 0;
    for (std::size_t p = 1; p < parts; ++p) {
      const std::size_t target = at.back() / parts * p;
      cut[p] = static_cast<std::size_t>(std::lower_bound(at.begin(), at.end(), target) - at.begin());
      cut[p] = std::min(std::max(cut[p], cut[p - 1]), steps);
    }
    pool->for_each(parts, [&](std::size_t p) { f(cut[p], cut[p + 1]); });
  };
  std::vector<std::size_t> row_at(steps + 1, 0);  // the rows of the steps before step s
  each_part(step_start, [&](std::size_t first, std::size_t last) {
    std::size_t seen = 0;
    for (std::size_t s = first; s < last; ++s) {
      std::size_t rows = 0;
      for (std::size_t t = step_start[s]; t < step_start[s + 1]; ++t) {
        src.for_each_batch(step_of(slots[t]), [&](layer_id l, std::size_t, std::uint32_t count) {
          if (l < L) rows += count;
          seen += count;
        });
      }
      row_at[s + 1] = rows;
      if (seen >= gather_count_rows) {
        src.gathered(seen);
        seen = 0;
      }
    }
    src.gathered(seen);
  });
  for (std::size_t s = 0; s < steps; ++s) row_at[s + 1] += row_at[s];
  out.rows_ = row_at.back();
  std::vector<std::uint32_t> current(c.streams, 0);
  out.offsets_.reserve(steps + 1);
  out.tokens_.reserve(slots.size());
  out.offsets_.push_back(0);
  for (std::size_t s = 0; s < steps; ++s) {
    for (std::size_t t = step_start[s]; t < step_start[s + 1]; ++t) {
      const slot_token& x = slots[t];
      if (x.first) {
        current[x.stream] = static_cast<std::uint32_t>(out.sequences_.size());
        out.sequences_.push_back({x.stream, x.request, static_cast<std::uint32_t>(s), 0, x.index == 0});
      }
      ++out.sequences_[current[x.stream]].tokens;
      out.tokens_.push_back(
          {x.stream, current[x.stream], x.request, x.index, out.prompts_[x.request] + x.index, x.first});
    }
    out.offsets_.push_back(out.tokens_.size());
  }
  trace_columns cols;
  if (!c.tokens_only) {
    const std::size_t k = info.top_k, e = info.has_scores ? info.num_experts : 0;
    // Each column sized on a thread of its own: sizing writes every byte once, and the
    // memory's pages are first touched there.
    if (pool) {
      pool->for_each(trace_columns::column_count, [&](std::size_t i) { cols.resize_column(i, out.rows_, k, e); });
    } else {
      cols.resize(out.rows_, k, e);
    }
    // Steps [first, last) into their rows; each call writes only its steps' rows, so that
    // parts of the steps can be gathered on several threads at once.
    const auto gather = [&](std::size_t first, std::size_t last) {
      // A step's tokens' batches, each token's in layer order, read once per token;
      // `next[i]`: token i's first batch not yet written.
      struct token_batch {
        layer_id layer;
        std::size_t first;
        std::uint32_t count;
      };
      std::vector<token_batch> batches;
      std::vector<std::size_t> starts, next;
      std::size_t counted = 0;  // rows told to `gathered`
      for (std::size_t s = first; s < last; ++s) {
        const std::span<const slot_token> step(slots.data() + step_start[s], step_start[s + 1] - step_start[s]);
        batches.clear();
        starts.clear();
        for (const slot_token& x : step) {
          starts.push_back(batches.size());
          src.for_each_batch(step_of(x), [&](layer_id bl, std::size_t row, std::uint32_t count) {
            batches.push_back({bl, row, count});
          });
          // A step's rows are sorted by layer (`routing_trace::from_sorted`, which a
          // canonical file's rows pass too), so a token's batches come in layer order.
          MOEPOLICY_ASSERT(
              std::is_sorted(batches.begin() + static_cast<std::ptrdiff_t>(starts.back()), batches.end(),
                             [](const token_batch& a, const token_batch& b) { return a.layer < b.layer; }));
        }
        next = starts;
        starts.push_back(batches.size());
        // Rows: layer-major, tokens in stream order within a layer.
        std::size_t w = row_at[s];
        for (std::size_t l = 0; l < L; ++l) {
          for (std::size_t i = 0; i < step.size(); ++i) {
            for (; next[i] < starts[i + 1] && batches[next[i]].layer == l; ++next[i]) {
              const std::size_t from = batches[next[i]].first;
              const std::uint32_t count = batches[next[i]].count;
              for (std::uint32_t j = 0; j < count; ++j, ++w) {
                const std::size_t r = from + j;
                cols.request[w] = 0;
                cols.step[w] = static_cast<std::uint32_t>(s);
                cols.position[w] = static_cast<std::uint32_t>(i * rows_per_token + j);
                cols.layer[w] = static_cast<layer_id>(l);
                cols.kind[w] = phase::decode;
                const auto ids = src.experts(r);
                const auto ws = src.weights(r);
                std::copy(ids.begin(), ids.end(), cols.experts.begin() + static_cast<std::ptrdiff_t>(w * k));
                std::copy(ws.begin(), ws.end(), cols.weights.begin() + static_cast<std::ptrdiff_t>(w * k));
                if (e != 0) {
                  const auto sc = src.scores(r);
                  std::copy(sc.begin(), sc.end(), cols.scores.begin() + static_cast<std::ptrdiff_t>(w * e));
                }
              }
            }
          }
        }
        MOEPOLICY_ASSERT(w == row_at[s + 1]);
        // The pages read are counted a few thousand rows at a time (one count shared by
        // the threads).
        if (row_at[s + 1] - row_at[first] >= counted + gather_count_rows) {
          src.gathered(row_at[s + 1] - row_at[first] - counted);
          counted = row_at[s + 1] - row_at[first];
        }
      }
      src.gathered(row_at[last] - row_at[first] - counted);
    };
    each_part(row_at, gather);
  }
  src.done();
  slots = {};
  step_start = {};
  row_at = {};
  out.batched_ = routing_trace::from_sorted(
      info, {std::to_string(c.streams) + " concurrent decode stream" + (c.streams == 1 ? "" : "s")}, std::move(cols));
  return out;
}

}  // namespace detail

/// Forms B concurrent decode streams from the decode steps of `t` (see the header).
///
/// `jobs`: the threads that gather the batched trace's rows (parts of its steps of at least
/// `detail::form_part_rows` rows each; the streams do not depend on it).
///
/// Returns: the batched steps; none when the trace has no decode steps, or fewer than B
/// decode tokens under `split_tokens`.
/// Throws: `invalid_argument` naming `make_decode_streams` when `streams` or `jobs` is 0.
/// Complexity: O(rows of the trace + steps × layers); the rows' gather, O(rows of the
/// streams), split over up to `jobs` threads.
[[nodiscard]] inline decode_streams make_decode_streams(const routing_trace& t, const decode_streams_config& c,
                                                        std::size_t jobs = 1) {
  if (c.streams == 0) detail::throw_invalid("make_decode_streams", "streams must be >= 1", c.streams);
  if (jobs == 0) detail::throw_invalid("make_decode_streams", "jobs must be >= 1", jobs);
  const detail::trace_stream_source src{t};
  return detail::form_decode_streams(src, detail::read_decode_inputs(src), c, jobs);
}

/// The decode streams of one canonical file at any B and formation, formed from the file's
/// columns used in place as `make_decode_streams(const canonical_file&, …)` forms them, with
/// what does not depend on B read once: the walks that check the rows and find the steps,
/// and each request's decode steps and prompt. A caller that forms several B (a sweep of
/// concurrency) walks the file once for each set of streams instead of four times. Holds 32
/// bytes per recorded step beside the streams it forms, and the file (referenced, not
/// copied), which must outlive it.
class file_decode_streams {
 public:
  /// Walks `f` twice (the first walk checks the rows unless one already has, the second
  /// finds the steps), then reads its steps' layers once.
  ///
  /// Returns: nothing when the file's columns cannot be used in place
  /// (`canonical_file::columns`).
  /// Throws: `parse_error` naming the file for a row the reader rejects.
  /// Complexity: O(rows of the file).
  [[nodiscard]] static std::optional<file_decode_streams> open(const canonical_file& f) {
    std::uint64_t steps = 0;
    const auto nothing = [](const auto&) {};
    f.for_each_batch(nothing, nothing, [&](const step_ref&) { ++steps; });
    const std::optional<canonical_columns> cols = f.columns();
    if (!cols) return std::nullopt;
    return file_decode_streams(f, *cols, steps);
  }

  /// The streams `make_decode_streams(f.read(), c)` forms, their rows gathered on up to
  /// `jobs` threads (as `make_decode_streams` gathers them). Not for calls at the same time
  /// on one object: each counts the file's pages it reads, to give them back.
  ///
  /// Throws: `invalid_argument` naming `file_decode_streams::form` when `streams` or `jobs`
  /// is 0.
  /// Complexity: O(rows of the streams + steps × layers), the rows' gather split over up to
  /// `jobs` threads; O(tokens + steps) with `tokens_only`, which reads only the file's layer
  /// column.
  [[nodiscard]] decode_streams form(const decode_streams_config& c, std::size_t jobs = 1) const {
    if (c.streams == 0) detail::throw_invalid("file_decode_streams::form", "streams must be >= 1", c.streams);
    if (jobs == 0) detail::throw_invalid("file_decode_streams::form", "jobs must be >= 1", jobs);
    return detail::form_decode_streams(src_, in_, c, jobs);
  }

 private:
  file_decode_streams(const canonical_file& f, canonical_columns c, std::uint64_t steps)
      : src_(f, c, steps), in_(detail::read_decode_inputs(src_)) {
    src_.done();
  }

  detail::file_stream_source src_;
  detail::decode_inputs in_;
};

/// Forms the same streams as `make_decode_streams(f.read(), c)` straight from the canonical
/// file's columns used in place (`canonical_file::columns`), without the trace: beside the
/// batched trace it holds 32 bytes per recorded step and a part of the file (its pages are
/// given back every `detail::file_stream_source::release_rows` rows gathered). Walks the
/// file twice first (the first walk checks the rows unless one already has, the second
/// finds the steps); `file_decode_streams` does these walks once for several B.
///
/// Returns: as `make_decode_streams`; nothing when the file's columns cannot be used in
/// place (`canonical_file::columns`).
/// Throws: `invalid_argument` naming `make_decode_streams` when `streams` or `jobs` is 0;
/// `parse_error` naming the file for a row the reader rejects.
/// Complexity: as `make_decode_streams`, the rows' gather on up to `jobs` threads.
[[nodiscard]] inline std::optional<decode_streams> make_decode_streams(const canonical_file& f,
                                                                       const decode_streams_config& c,
                                                                       std::size_t jobs = 1) {
  if (c.streams == 0) detail::throw_invalid("make_decode_streams", "streams must be >= 1", c.streams);
  if (jobs == 0) detail::throw_invalid("make_decode_streams", "jobs must be >= 1", jobs);
  const std::optional<file_decode_streams> s = file_decode_streams::open(f);
  if (!s) return std::nullopt;
  return s->form(c, jobs);
}

/// Decode streams shared by replays that run at the same time (the report's CXL-MoE and
/// Edge-MoE stages, which both replay B = 1): the streams of one configuration are formed
/// once while any caller holds them, and at most `max_held` configurations' streams are held
/// at once — a caller that asks for another waits until a holder releases one — so that
/// replays run at once hold no more streams than they would one after another. Streams
/// formed with `tokens_only` are small and are neither shared nor counted: each call forms
/// its own. Every formation (shared or not) runs on the calling thread, one at a time: the
/// former need not be safe to call at once (`file_decode_streams::form` is not).
///
/// Under a span meter (detail/span_meter.hpp), a caller that waited goes on from where the
/// chain it waited for stood: the formation's end, or the release that made room.
///
/// `acquire` returns a handle: the streams stay held while any handle to them (or a copy)
/// lives. A thread that holds a handle and asks for another configuration's streams while
/// `max_held` are held would wait for itself: `acquire` throws instead. Handles must not
/// outlive the object. Thread-safe.
class shared_decode_streams {
 public:
  /// What forms a configuration's streams (`file_decode_streams::form`, or
  /// `make_decode_streams` on a trace).
  using former = std::function<decode_streams(const decode_streams_config&)>;

  /// Throws: `invalid_argument` naming `shared_decode_streams` when `form` is empty or
  /// `max_held` is 0.
  explicit shared_decode_streams(former form, std::size_t max_held = 1) : form_(std::move(form)), max_held_(max_held) {
    if (!form_) detail::throw_invalid("shared_decode_streams", "the former must not be empty");
    if (max_held_ == 0) detail::throw_invalid("shared_decode_streams", "max_held must be >= 1", max_held_);
  }
  shared_decode_streams(const shared_decode_streams&) = delete;
  shared_decode_streams& operator=(const shared_decode_streams&) = delete;

  /// The streams of `c`: those another caller holds, else formed here once fewer than
  /// `max_held` configurations are held (waiting until then).
  ///
  /// Throws: what the former throws (the next caller of `c` forms again); `logic_error`
  /// naming `shared_decode_streams::acquire` when the calling thread holds streams and would
  /// wait for a configuration to be released.
  /// Complexity: O(held configurations × their holders) besides the formation.
  [[nodiscard]] std::shared_ptr<const decode_streams> acquire(const decode_streams_config& c) {
    if (c.tokens_only) {
      const std::lock_guard forming(form_mutex_);
      return std::make_shared<const decode_streams>(form_(c));
    }
    const std::thread::id me = std::this_thread::get_id();
    std::unique_lock lock(mutex_);
    bool waited = false;
    for (;;) {
      const auto found = std::find_if(held_.begin(), held_.end(), [&](const auto& h) { return same(h->config, c); });
      if (found != held_.end()) {
        const std::shared_ptr<entry> e = *found;
        if (!e->streams) {
          wait(lock);  // being formed by another caller
          continue;
        }
        // A span meter's chain (detail/span_meter.hpp) goes on from the formation's end.
        detail::span_wait_until(e->formed_at);
        const std::uint64_t id = add_holder(*e, me);
        lock.unlock();
        return handle(e, id);
      }
      if (held_.size() < max_held_) {
        // ... or from the release that made room.
        if (waited) detail::span_wait_until(released_at_);
        break;
      }
      if (holds(me)) {
        throw std::logic_error(
            "moepolicy::shared_decode_streams::acquire: the calling thread holds streams and would wait for itself "
            "(max_held " +
            std::to_string(max_held_) + ", streams " + std::to_string(c.streams) + ")");
      }
      wait(lock);
      waited = true;
    }
    const auto e = std::make_shared<entry>();
    e->config = c;
    held_.push_back(e);
    lock.unlock();
    std::optional<decode_streams> formed;
    try {
      const std::lock_guard forming(form_mutex_);
      formed.emplace(form_(c));
    } catch (...) {
      lock.lock();
      held_.erase(std::find(held_.begin(), held_.end(), e));
      changed_.notify_all();
      throw;
    }
    lock.lock();
    e->streams = std::make_unique<const decode_streams>(std::move(*formed));
    e->formed_at = detail::span_position();
    formed.reset();
    ++formations_;
    changed_.notify_all();
    const std::uint64_t id = add_holder(*e, me);
    lock.unlock();
    return handle(e, id);
  }

  /// Configurations whose streams are held (or being formed) now.
  [[nodiscard]] std::size_t held() const {
    const std::lock_guard lock(mutex_);
    return held_.size();
  }
  /// Callers waiting now (for a configuration to be released, or formed by another).
  [[nodiscard]] std::size_t waiting() const {
    const std::lock_guard lock(mutex_);
    return waiting_;
  }
  /// Streams formed for sharing so far (each configuration once while it stays held).
  [[nodiscard]] std::size_t formations() const {
    const std::lock_guard lock(mutex_);
    return formations_;
  }

 private:
  struct entry {
    decode_streams_config config;
    std::unique_ptr<const decode_streams> streams;  // null while being formed
    std::vector<std::pair<std::uint64_t, std::thread::id>> holders;
    double formed_at = 0.0;  // `detail::span_position` as its formation ended
  };

  void wait(std::unique_lock<std::mutex>& lock) {
    ++waiting_;
    changed_.wait(lock);
    --waiting_;
  }
  [[nodiscard]] static bool same(const decode_streams_config& a, const decode_streams_config& b) noexcept {
    return a.streams == b.streams && a.formation == b.formation && a.tokens_only == b.tokens_only;
  }
  [[nodiscard]] bool holds(std::thread::id t) const noexcept {
    for (const auto& e : held_) {
      for (const auto& h : e->holders) {
        if (h.second == t) return true;
      }
    }
    return false;
  }
  // Registers a holder of `e` on thread `t` (under the lock); returns its id.
  std::uint64_t add_holder(entry& e, std::thread::id t) {
    const std::uint64_t id = ++next_handle_;
    e.holders.emplace_back(id, t);
    return id;
  }
  // The handle of holder `id` of `e` (not under the lock: when making it fails, its deleter
  // runs, which takes the lock): its release removes the holder, and the streams with the
  // last.
  std::shared_ptr<const decode_streams> handle(const std::shared_ptr<entry>& e, std::uint64_t id) {
    return std::shared_ptr<const decode_streams>(e->streams.get(), [this, e, id](const decode_streams*) {
      std::unique_ptr<const decode_streams> last;  // freed outside the lock
      {
        const std::lock_guard lock(mutex_);
        e->holders.erase(
            std::find_if(e->holders.begin(), e->holders.end(), [&](const auto& h) { return h.first == id; }));
        if (!e->holders.empty()) return;
        last = std::move(e->streams);
        held_.erase(std::find(held_.begin(), held_.end(), e));
        released_at_ = detail::span_position();
        changed_.notify_all();
      }
    });
  }

  former form_;
  std::size_t max_held_;
  mutable std::mutex mutex_;
  std::mutex form_mutex_;
  std::condition_variable changed_;
  std::vector<std::shared_ptr<entry>> held_;
  std::uint64_t next_handle_ = 0;
  std::size_t formations_ = 0;
  std::size_t waiting_ = 0;
  double released_at_ = 0.0;  // `detail::span_position` of the last release
};

/// The prefill steps of `f` alone, as a trace of the same requests (every request named,
/// its prefill rows as recorded, no decode row): what a timed replay reads of the recorded
/// trace beside decode streams formed from the file (its recorded prefills), without the
/// trace read whole. Walks the file twice (the first counts the rows, so that the columns
/// are reserved to their size).
///
/// Throws: `parse_error` naming the file for a row the reader rejects.
/// Complexity: O(rows of the file); holds the prefill rows and a window of the file.
[[nodiscard]] inline routing_trace prefill_steps(const canonical_file& f) {
  const trace_info& info = f.info();
  const std::size_t k = info.top_k, e = info.has_scores ? info.num_experts : 0;
  const auto nothing = [](const auto&) {};
  std::size_t rows = 0;
  f.for_each_batch(
      nothing, [&](const batch_view& v) { rows += v.ref.kind == phase::prefill ? v.tokens() : 0; }, nothing);
  trace_columns c;
  c.reserve(rows, k, e);
  f.for_each_batch(
      nothing,
      [&](const batch_view& v) {
        if (v.ref.kind != phase::prefill) return;
        for (std::size_t i = 0; i < v.tokens(); ++i) {
          c.request.push_back(v.ref.request);
          c.step.push_back(v.ref.step);
          c.position.push_back(v.positions[i]);
          c.layer.push_back(v.ref.layer);
          c.kind.push_back(phase::prefill);
        }
        c.experts.insert(c.experts.end(), v.experts.begin(), v.experts.end());
        c.weights.insert(c.weights.end(), v.weights.begin(), v.weights.end());
        c.scores.insert(c.scores.end(), v.scores.begin(), v.scores.end());
      },
      nothing);
  const auto names = f.request_names();
  return routing_trace::from_sorted(info, std::vector<std::string>(names.begin(), names.end()), std::move(c));
}

}  // namespace moepolicy
