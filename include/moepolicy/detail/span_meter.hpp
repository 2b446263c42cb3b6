// The work and the span of what a thread runs with the tasks it hands to pools
// (detail/task_pool.hpp), in CPU seconds: the work is all the CPU time spent, the span the
// CPU time of the longest chain of pieces that must run one after another. A batch of
// tasks contributes its longest task's span to the span of whoever handed it out, each task
// its own span (its own CPU time outside the batches it hands out, plus each of their
// longest tasks'), and the caller's CPU time between batches adds to its span as it runs.
// Whatever the number of threads, a run of this task graph on P processors takes at least
// max(work / P, span) of CPU-bound time; with a greedy scheduler, at most work / P + span
// (Brent's bound), scheduling and memory contention aside.
//
// A `span_meter` measures the span and the work of the code that runs on its thread while
// it lives (the work: the CPU time of every task under it, so that stages run at once each
// have their own): it opens a frame there (the thread's current frame,
// `current_span_frame`), and `task_pool::for_each` called under a frame measures its batch
// with a `span_batch`, which opens a frame for each task on the thread that runs it.
// Without a frame nothing is measured and a batch costs one thread-local read. A meter opened under another frame (in
// a measured task) counts as a batch of one task in it.
//
// Chains that meet otherwise — a thread that waits until another releases what it needs —
// join by `span_position` (read by the releasing thread) and `span_wait_until` (called by
// the waiting one as it goes on): the waiter's chain then continues from the releaser's.
//
// The clock is a function of the calling thread's CPU time (`thread_cpu_seconds`, POSIX
// `CLOCK_THREAD_CPUTIME_ID`), or any other clock a test passes (each task reads it on its
// own thread). Reading it costs about a system call: twice per task and once per batch.
#pragma once

#include <atomic>
#include <ctime>

namespace moepolicy::detail {

/// The CPU time the calling thread has used, in seconds.
using thread_clock = double (*)() noexcept;

/// `CLOCK_THREAD_CPUTIME_ID` where POSIX has it, else the process's CPU time (`std::clock`:
/// on such a platform the span is then the work).
[[nodiscard]] inline double thread_cpu_seconds() noexcept {
#if defined(CLOCK_THREAD_CPUTIME_ID)
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
#else
  return static_cast<double>(std::clock()) / CLOCKS_PER_SEC;
#endif
}

/// Adds `x` to `to` (any thread).
inline void add_seconds(std::atomic<double>& to, double x) noexcept {
  double seen = to.load(std::memory_order_relaxed);
  while (!to.compare_exchange_weak(seen, seen + x, std::memory_order_relaxed)) {
  }
}

/// Raises `to` to `x` when `x` is larger (any thread).
inline void raise_seconds(std::atomic<double>& to, double x) noexcept {
  double seen = to.load(std::memory_order_relaxed);
  while (x > seen && !to.compare_exchange_weak(seen, x, std::memory_order_relaxed)) {
  }
}

/// What a thread measures while it runs a task (or a meter's code): the clock, the clock's
/// reading when its current serial stretch began, its span so far, the frame it
/// interrupted on this thread, and the work of the meter it belongs to (every stretch of
/// every frame under a meter adds to it).
struct span_frame {
  thread_clock clock = nullptr;
  double since = 0.0;
  double span = 0.0;
  span_frame* outer = nullptr;
  std::atomic<double>* work = nullptr;
  /// Where its chain stood when it began, from the outermost meter's start: the position of
  /// the frame that handed it out when its batch began.
  double start = 0.0;

  /// Ends the current stretch: its time joins the span and the work.
  void close_stretch() noexcept {
    const double d = clock() - since;
    span += d;
    add_seconds(*work, d);
  }
};

/// The calling thread's current frame, null when nothing is measured.
inline thread_local span_frame* current_span_frame = nullptr;

/// Measures one batch of tasks handed out under the current frame (none: `measured()` is
/// false and `run` just calls): construct it on the thread that hands out the batch, call
/// every task through `run` (on any thread), and `finish` once every task has returned
/// (the destructor finishes too). The handing thread's time from its last stretch to here
/// is added to its frame, then its longest task's span; its next stretch starts at
/// `finish`.
class span_batch {
 public:
  span_batch() noexcept : outer_(current_span_frame) {
    if (outer_ != nullptr) outer_->close_stretch();
  }
  span_batch(const span_batch&) = delete;
  span_batch& operator=(const span_batch&) = delete;
  ~span_batch() { finish(); }

  [[nodiscard]] bool measured() const noexcept { return outer_ != nullptr; }

  /// Calls `f()` in a frame of its own on the calling thread (when measured): its span
  /// joins the batch's longest, also when `f` throws.
  template <class F>
  void run(F&& f) {
    if (outer_ == nullptr) {
      f();
      return;
    }
    span_frame frame{outer_->clock,      outer_->clock(), 0.0,
                     current_span_frame, outer_->work,    outer_->start + outer_->span};
    current_span_frame = &frame;
    struct closer {
      span_batch& b;
      span_frame& frame;
      ~closer() {
        frame.close_stretch();
        current_span_frame = frame.outer;
        raise_seconds(b.longest_, frame.span);
      }
    } close{*this, frame};
    f();
  }

  /// Adds the longest task's span to the handing thread's frame and starts its next
  /// stretch; once (later calls do nothing). Call it on the handing thread after every task
  /// has returned.
  void finish() noexcept {
    if (outer_ == nullptr) return;
    outer_->span += longest_.load(std::memory_order_relaxed);
    outer_->since = outer_->clock();
    outer_ = nullptr;
  }

 private:
  span_frame* outer_;
  std::atomic<double> longest_{0.0};
};

/// Measures the span and the work of the code run on the constructing thread until `stop`
/// (or the destructor), batches handed to pools included: the work is the CPU time of every
/// task under it on every thread (what the pools' own threads spend outside tasks, waking
/// and waiting, is not in it). Under another frame it is a batch of one task there, its work
/// part of the outer meter's. Not copyable or movable: the thread's frame points into it.
class span_meter {
 public:
  /// Starts measuring on the calling thread with `clock`.
  explicit span_meter(thread_clock clock = thread_cpu_seconds) noexcept
      : frame_{clock, 0.0, 0.0, current_span_frame, &work_, 0.0} {
    // Under another frame the outer stretch ends here, and this meter's chain goes on from it.
    if (frame_.outer != nullptr) {
      frame_.outer->close_stretch();
      frame_.start = frame_.outer->start + frame_.outer->span;
    }
    frame_.since = clock();
    current_span_frame = &frame_;
  }
  span_meter(const span_meter&) = delete;
  span_meter& operator=(const span_meter&) = delete;
  ~span_meter() { stop(); }

  /// Stops measuring and returns the span; later calls return the same. Call it on the
  /// constructing thread, where this meter's frame is current (every batch opened under it
  /// has finished).
  double stop() noexcept {
    if (!stopped_) {
      stopped_ = true;
      frame_.close_stretch();
      current_span_frame = frame_.outer;
      // Under another frame: this meter's code was one task of a batch of one there.
      if (frame_.outer != nullptr) {
        frame_.outer->span += frame_.span;
        add_seconds(*frame_.outer->work, work_.load(std::memory_order_relaxed));
        frame_.outer->since = frame_.outer->clock();
      }
    }
    return frame_.span;
  }
  /// The span measured so far, read on the measuring thread (the current stretch included).
  [[nodiscard]] double span() const noexcept {
    return stopped_ ? frame_.span : frame_.span + frame_.clock() - frame_.since;
  }
  /// The work measured so far: after `stop`, or read on the measuring thread between
  /// batches (the current stretch included).
  [[nodiscard]] double work() const noexcept {
    const double done = work_.load(std::memory_order_relaxed);
    return stopped_ ? done : done + frame_.clock() - frame_.since;
  }

 private:
  std::atomic<double> work_{0.0};  // before `frame_`, which points to it
  span_frame frame_;
  bool stopped_ = false;
};

/// Where the calling thread's chain stands now: the span from the outermost meter's start
/// along the chain of batches and tasks that leads to here (0 when nothing is measured).
/// For a dependency between chains that no batch expresses — a thread that waits until
/// another releases something (`span_wait_until`) — whose chains, under one outermost meter,
/// share its origin.
[[nodiscard]] inline double span_position() noexcept {
  const span_frame* f = current_span_frame;
  return f == nullptr ? 0.0 : f->start + f->span + (f->clock() - f->since);
}

/// Moves the calling thread's chain on to `position` when it stands before it: the thread
/// waited for something that another chain reached at `position` (`span_position` read there),
/// so what it does next follows both. The work does not change (waiting is none). Nothing
/// when nothing is measured.
inline void span_wait_until(double position) noexcept {
  span_frame* f = current_span_frame;
  if (f == nullptr) return;
  const double now = f->start + f->span + (f->clock() - f->since);
  if (position > now) f->span += position - now;
}

}  // namespace moepolicy::detail
