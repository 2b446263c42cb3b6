// The report's periodic progress line (stderr only, never in the report's files): while a
// stage runs, a ticker thread prints every `period` seconds the stage, the routing rows its
// replays have processed out of those they plan (summed over the stage's passes, from a
// `replay_progress` the drivers feed) and the rows per second so far.
#pragma once

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "moepolicy/sim/decode_streams.hpp"

namespace moepolicy::tool {

/// "report:   [3/9] NAME: DONE of TOTAL rows (P%), R rows/s, S s": the periodic line of a
/// stage `elapsed` seconds in. Without a plan (`total` 0) it gives the elapsed time only;
/// the rate needs rows done and elapsed time > 0.
[[nodiscard]] inline std::string progress_line(std::string_view stage, std::uint64_t done, std::uint64_t total,
                                               double elapsed) {
  std::string s = "report:   " + std::string(stage) + ": ";
  if (total > 0) {
    const double pct = 100.0 * static_cast<double>(done) / static_cast<double>(total);
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f", pct);
    s += std::to_string(done) + " of " + std::to_string(total) + " rows (" + buf + "%), ";
    if (elapsed > 0.0 && done > 0) {
      s += std::to_string(std::llround(static_cast<double>(done) / elapsed)) + " rows/s, ";
    }
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", elapsed);
  return s + buf;
}

/// Calls `tick(elapsed seconds)` every `period` from a thread of its own until destroyed
/// (destruction wakes the thread at once). A `period` of zero or less starts no thread.
class progress_ticker {
 public:
  progress_ticker(double period, std::function<void(double)> tick) : tick_(std::move(tick)) {
    if (!(period > 0.0)) return;
    const auto start = std::chrono::steady_clock::now();
    const auto every = std::chrono::duration<double>(period);
    thread_ = std::thread([this, start, every] {
      std::unique_lock lock(m_);
      auto next = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(every);
      while (!cv_.wait_until(lock, next, [this] { return stop_; })) {
        const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - start;
        tick_(dt.count());
        next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(every);
      }
    });
  }
  progress_ticker(const progress_ticker&) = delete;
  progress_ticker& operator=(const progress_ticker&) = delete;
  ~progress_ticker() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(m_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::function<void(double)> tick_;
  std::mutex m_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace moepolicy::tool
