// The lockstep replays' thread pool: every index of a batch runs exactly once, batches after
// batches on the same workers, the threads do run at the same time, the first exception a
// task throws reaches the caller and leaves the pool usable, a pool of 0 threads or with
// workers' stacks below 64 KiB is an error, and workers run on the stack size asked.
#include "moepolicy/detail/task_pool.hpp"

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

using moepolicy::detail::task_pool;

TEST_CASE("every index of every batch runs exactly once") {
  for (std::size_t threads : {1u, 2u, 4u}) {
    CAPTURE(threads);
    task_pool pool(threads);
    CHECK(pool.threads() == threads);
    for (std::size_t n : {0u, 1u, 2u, 3u, 7u, 1000u}) {
      CAPTURE(n);
      std::vector<std::atomic<int>> runs(n);
      // Many batches on the same workers, each waiting for the one before.
      for (int batch = 0; batch < 20; ++batch) {
        pool.for_each(n, [&](std::size_t i) { runs[i].fetch_add(1, std::memory_order_relaxed); });
      }
      for (std::size_t i = 0; i < n; ++i) CHECK(runs[i].load() == 20);
    }
  }
}

TEST_CASE("the threads of a pool run a batch's tasks at the same time") {
  task_pool pool(3);
  // Each of the three tasks waits until all three have started: a pool that ran them one
  // after another would time out (and fail) rather than hang.
  std::atomic<int> started{0};
  std::vector<int> saw(3, 0);
  std::mutex m;
  std::set<std::thread::id> ids;
  pool.for_each(3, [&](std::size_t i) {
    {
      const std::lock_guard lock(m);
      ids.insert(std::this_thread::get_id());
    }
    started.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (started.load() < 3 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    saw[i] = started.load();
  });
  CHECK(saw == std::vector<int>{3, 3, 3});
  CHECK(ids.size() == 3);
  CHECK(ids.count(std::this_thread::get_id()) == 1);  // the caller takes tasks too
}

TEST_CASE("the first exception a task throws reaches the caller, and the pool stays usable") {
  task_pool pool(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH_AS(pool.for_each(100,
                                     [&](std::size_t i) {
                                       ran.fetch_add(1);
                                       if (i == 3) throw std::runtime_error("task 3 failed");
                                     }),
                       "task 3 failed", std::runtime_error);
  // Every index handed out before index 3 ran to its end (the caller waits for every
  // thread); how many after it ran depends on the threads' timing.
  CHECK(ran.load() >= 4);
  std::atomic<int> after{0};
  pool.for_each(10, [&](std::size_t) { after.fetch_add(1); });
  CHECK(after.load() == 10);
  // On one thread the exception leaves directly: no index after it runs.
  task_pool alone(1);
  int alone_ran = 0;
  CHECK_THROWS_WITH_AS(alone.for_each(100,
                                      [&](std::size_t i) {
                                        ++alone_ran;
                                        if (i == 3) throw std::runtime_error("alone");
                                      }),
                       "alone", std::runtime_error);
  CHECK(alone_ran == 4);
}

TEST_CASE("a pool needs at least one thread, and workers a stack of at least 64 KiB") {
  CHECK_THROWS_WITH_AS(task_pool(0), "moepolicy::task_pool: threads must be >= 1, got 0", moepolicy::invalid_argument);
  CHECK_THROWS_WITH_AS(task_pool(2, 4096), "moepolicy::task_pool: a worker's stack must be >= 65536 bytes, got 4096",
                       moepolicy::invalid_argument);
  // Workers on a stack of their own size run tasks that use some of it.
  task_pool pool(3, std::size_t{256} << 10);
  std::vector<int> sums(6, 0);
  pool.for_each(sums.size(), [&](std::size_t i) {
    std::array<int, 4096> local{};  // 16 KiB of the worker's stack
    for (std::size_t j = 0; j < local.size(); ++j) local[j] = static_cast<int>(i + j);
    int s = 0;
    for (int x : local) s += x % 7;
    sums[i] = s;
  });
  for (std::size_t i = 1; i < sums.size(); ++i) CHECK(sums[i] != 0);
}
