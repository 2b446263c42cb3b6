// A fixed set of threads that run batches of independent tasks: `for_each(n, f)` calls
// f(0) … f(n - 1), each exactly once, on the pool's workers and the calling thread, and
// returns when all have returned. The lockstep replays (sim/offload_replay.hpp,
// sim/edge_replay.hpp) hand it each window's systems: every system steps on its own
// timeline and cache, so the results do not depend on which thread runs which task.
//
// The workers start at construction and wait on a condition variable between batches; a
// batch hands out its indices through one atomic counter (a task that takes longer leaves
// the rest to the other threads). Neither the pool nor a batch allocates after
// construction (`f` is called through a pointer, never copied). The first exception a task
// throws stops the batch from handing out further indices and is rethrown by `for_each`
// once every thread has left the batch.
//
// On POSIX systems each worker gets a stack of `stack_bytes` (1 MiB by default) rather than
// the process's default for threads (RLIMIT_STACK, typically 8 MiB): a thread's stack is a
// private writable mapping, so a process that runs under a limit on its data segment
// (`prlimit --data`, as the memory tests run the tool) pays the whole reservation per
// worker, and the C library keeps the stacks of joined threads mapped for reuse. The
// replays' tasks hold their state on the heap; none recurses.
//
// Under a `span_meter` on the calling thread (detail/span_meter.hpp) a batch on more than
// one thread is measured: each task in a frame of its own on the thread that runs it, the
// batch's longest task added to the caller's span. A batch run on the calling thread alone
// is part of the caller's own time.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define MOEPOLICY_TASK_POOL_PTHREADS 1
#endif

#include "moepolicy/core/error.hpp"
#include "moepolicy/detail/span_meter.hpp"

namespace moepolicy::detail {

class task_pool {
 public:
  /// The stack each worker gets where the platform lets a pool choose it (POSIX).
  static constexpr std::size_t default_stack_bytes = std::size_t{1} << 20;

  /// A pool of `threads` threads in all, the caller of `for_each` included: `threads - 1`
  /// workers (none for 1), each with a stack of `stack_bytes` on POSIX systems.
  ///
  /// Throws: `invalid_argument` naming `task_pool` when `threads` is 0 or `stack_bytes` is
  /// below 64 KiB; `std::system_error` when a thread cannot start.
  explicit task_pool(std::size_t threads, std::size_t stack_bytes = default_stack_bytes) {
    if (threads == 0) detail::throw_invalid("task_pool", "threads must be >= 1", threads);
    if (stack_bytes < (std::size_t{64} << 10))
      detail::throw_invalid("task_pool", "a worker's stack must be >= 65536 bytes", stack_bytes);
    workers_.reserve(threads - 1);
    try {
      for (std::size_t i = 1; i < threads; ++i) start_worker(stack_bytes);
    } catch (...) {
      stop();
      throw;
    }
  }
  task_pool(const task_pool&) = delete;
  task_pool& operator=(const task_pool&) = delete;
  ~task_pool() { stop(); }

  /// Threads in all, the caller included.
  [[nodiscard]] std::size_t threads() const noexcept { return workers_.size() + 1; }

  /// Calls `f(i)` for every i in [0, n), each once, on the pool's threads and this one, and
  /// returns when every call has returned. Not reentrant: `f` may not call `for_each` of the
  /// same pool, and one thread at a time may call it.
  ///
  /// Throws: the first exception a call of `f` threw (the indices not yet handed out are
  /// then not run).
  template <class F>
  void for_each(std::size_t n, F&& f) {
    using fn_type = std::remove_reference_t<F>;
    if (workers_.empty() || n <= 1) {
      for (std::size_t i = 0; i < n; ++i) f(i);
      return;
    }
    span_batch measured;
    {
      const std::lock_guard lock(m_);
      batch_ = measured.measured() ? &measured : nullptr;
      task_ = const_cast<void*>(static_cast<const void*>(std::addressof(f)));
      call_ = [](void* t, std::size_t i) { (*static_cast<fn_type*>(t))(i); };
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      failed_ = nullptr;
      busy_ = workers_.size();
      ++generation_;
    }
    wake_.notify_all();
    run_batch();
    std::unique_lock lock(m_);
    done_.wait(lock, [this] { return busy_ == 0; });
    task_ = nullptr;
    batch_ = nullptr;
    measured.finish();
    if (failed_) {
      std::exception_ptr e = std::move(failed_);
      failed_ = nullptr;
      lock.unlock();
      std::rethrow_exception(e);
    }
  }

 private:
  /// Takes indices of the current batch until none is left.
  void run_batch() noexcept {
    span_batch* const measured = batch_;
    for (std::size_t i = next_.fetch_add(1, std::memory_order_relaxed); i < n_;
         i = next_.fetch_add(1, std::memory_order_relaxed)) {
      try {
        if (measured != nullptr) {
          measured->run([&] { call_(task_, i); });
        } else {
          call_(task_, i);
        }
      } catch (...) {
        const std::lock_guard lock(m_);
        if (!failed_) failed_ = std::current_exception();
        next_.store(n_, std::memory_order_relaxed);
      }
    }
  }

  void work() noexcept {
    std::uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(m_);
        wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
        if (stopping_) return;
        seen = generation_;
      }
      run_batch();
      bool last = false;
      {
        const std::lock_guard lock(m_);
        last = --busy_ == 0;
      }
      if (last) done_.notify_one();
    }
  }

#ifdef MOEPOLICY_TASK_POOL_PTHREADS
  using worker_type = pthread_t;

  static void* worker_entry(void* pool) {
    static_cast<task_pool*>(pool)->work();
    return nullptr;
  }

  void start_worker(std::size_t stack_bytes) {
    pthread_attr_t attr;
    int rc = pthread_attr_init(&attr);
    if (rc == 0) {
      rc = pthread_attr_setstacksize(&attr, stack_bytes);
      pthread_t t{};
      if (rc == 0) rc = pthread_create(&t, &attr, &task_pool::worker_entry, this);
      pthread_attr_destroy(&attr);
      if (rc == 0) {
        workers_.push_back(t);
        return;
      }
    }
    throw std::system_error(rc, std::generic_category(), "moepolicy::task_pool: cannot start a worker thread");
  }

  static void join(worker_type& t) noexcept { pthread_join(t, nullptr); }
#else
  using worker_type = std::thread;

  void start_worker(std::size_t) {
    workers_.emplace_back([this] { work(); });
  }

  static void join(worker_type& t) noexcept {
    if (t.joinable()) t.join();
  }
#endif

  void stop() noexcept {
    {
      const std::lock_guard lock(m_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (worker_type& t : workers_) join(t);
    workers_.clear();
  }

  std::vector<worker_type> workers_;
  std::mutex m_;
  std::condition_variable wake_, done_;
  std::uint64_t generation_ = 0;
  bool stopping_ = false;
  // The current batch: set under `m_` before the workers are woken, read by them after
  // they see the new generation (the mutex orders the two).
  void* task_ = nullptr;
  void (*call_)(void*, std::size_t) = nullptr;
  span_batch* batch_ = nullptr;  // the batch's measure, when the caller measures
  std::size_t n_ = 0;
  std::atomic<std::size_t> next_{0};
  std::size_t busy_ = 0;
  std::exception_ptr failed_;
};

}  // namespace moepolicy::detail
