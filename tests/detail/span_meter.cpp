// The work/span meter of the pools' task graphs, on a clock the tests advance by hand (one
// per thread, as CPU time is): the span of serial code is its time, a batch adds its longest
// task, nested batches (in other pools) add to their task's span, a batch on one thread is
// the caller's own time, a throwing task still counts and restores the frames, a meter
// opened under another is one task there, the work is every piece on every thread, and
// without a meter nothing is measured.
#include "moepolicy/detail/span_meter.hpp"

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <thread>

#include "moepolicy/detail/task_pool.hpp"

using moepolicy::detail::current_span_frame;
using moepolicy::detail::span_batch;
using moepolicy::detail::span_meter;
using moepolicy::detail::task_pool;

namespace {

// Seconds of "CPU time" the calling thread has spent: advanced by `spend`.
thread_local double fake_seconds = 0.0;
double fake_clock() noexcept { return fake_seconds; }
void spend(double s) { fake_seconds += s; }

}  // namespace

TEST_CASE("serial code: the span is its time") {
  span_meter m(fake_clock);
  spend(1.5);
  CHECK(m.span() == doctest::Approx(1.5));
  spend(0.5);
  CHECK(m.stop() == doctest::Approx(2.0));
  spend(9.0);  // after stop: not counted
  CHECK(m.stop() == doctest::Approx(2.0));
  CHECK(m.span() == doctest::Approx(2.0));
  CHECK(current_span_frame == nullptr);
}

TEST_CASE("a batch adds its longest task to the caller's span") {
  task_pool pool(3);
  span_meter m(fake_clock);
  spend(1.0);
  const std::array<double, 3> cost{2.0, 5.0, 3.0};
  pool.for_each(cost.size(), [&](std::size_t i) { spend(cost[i]); });
  spend(1.0);
  // 1 + max(2, 5, 3) + 1, whichever threads ran the tasks (the caller's share of them is
  // not its own time); the work is every piece: 1 + 2 + 5 + 3 + 1.
  CHECK(m.stop() == doctest::Approx(7.0));
  CHECK(m.work() == doctest::Approx(12.0));
}

TEST_CASE("batches one after another, each adding its longest task") {
  task_pool pool(2);
  span_meter m(fake_clock);
  for (int b = 0; b < 10; ++b) {
    pool.for_each(4, [&](std::size_t i) { spend(i == 2 ? 1.0 : 0.25); });
    spend(0.5);
  }
  CHECK(m.stop() == doctest::Approx(10 * (1.0 + 0.5)));
  CHECK(m.work() == doctest::Approx(10 * (1.0 + 3 * 0.25 + 0.5)));
}

TEST_CASE("a batch handed out in a task adds to that task's span") {
  task_pool outer(2);
  span_meter m(fake_clock);
  spend(0.5);
  outer.for_each(2, [&](std::size_t i) {
    if (i == 0) {
      // 1 + max(4, 6) + 1 = 8 on a pool of its own, as the replays nest theirs.
      spend(1.0);
      task_pool inner(2);
      inner.for_each(2, [&](std::size_t j) { spend(j == 0 ? 4.0 : 6.0); });
      spend(1.0);
    } else {
      spend(7.0);
    }
  });
  CHECK(m.stop() == doctest::Approx(0.5 + 8.0));
  CHECK(m.work() == doctest::Approx(0.5 + 1.0 + 4.0 + 6.0 + 1.0 + 7.0));
}

TEST_CASE("a batch on one thread, or of one task, is the caller's own time") {
  span_meter m(fake_clock);
  task_pool one(1);
  one.for_each(3, [&](std::size_t) { spend(2.0); });
  task_pool two(2);
  two.for_each(1, [&](std::size_t) { spend(1.0); });
  CHECK(m.stop() == doctest::Approx(7.0));
  CHECK(m.work() == doctest::Approx(7.0));
}

TEST_CASE("a throwing task counts, and the frames are restored") {
  task_pool pool(2);
  span_meter m(fake_clock);
  CHECK_THROWS_AS(pool.for_each(2,
                                [&](std::size_t i) {
                                  spend(i == 0 ? 3.0 : 1.0);
                                  if (i == 0) throw std::runtime_error("task 0");
                                }),
                  std::runtime_error);
  CHECK(current_span_frame != nullptr);  // the meter's, again
  spend(1.0);
  // The pool still measures its next batch.
  pool.for_each(2, [&](std::size_t) { spend(2.0); });
  CHECK(m.stop() == doctest::Approx(3.0 + 1.0 + 2.0));
  CHECK(current_span_frame == nullptr);
  // The workers left no frame behind either.
  pool.for_each(2, [&](std::size_t) { CHECK(current_span_frame == nullptr); });
}

TEST_CASE("a meter under another counts as one task there") {
  span_meter outer(fake_clock);
  spend(1.0);
  {
    span_meter inner(fake_clock);
    spend(2.0);
    CHECK(inner.stop() == doctest::Approx(2.0));
    CHECK(inner.work() == doctest::Approx(2.0));
    spend(5.0);  // after the inner meter stopped: the outer's time again
  }
  CHECK(outer.stop() == doctest::Approx(8.0));
  CHECK(outer.work() == doctest::Approx(8.0));
}

TEST_CASE("meters in the tasks of a batch: each its own span and work, the outer's their longest and sum") {
  // As the report runs stages at once: a meter in each task.
  task_pool pool(3);
  span_meter outer(fake_clock);
  std::array<double, 3> span{}, work{};
  pool.for_each(3, [&](std::size_t i) {
    span_meter m(fake_clock);
    spend(1.0);
    task_pool inner(2);
    inner.for_each(2, [&](std::size_t j) { spend(static_cast<double>(i + j + 1)); });
    span[i] = m.stop();
    work[i] = m.work();
  });
  // Task i: 1 + max(i + 1, i + 2) = i + 3 of span, 1 + (i + 1) + (i + 2) = 2i + 4 of work.
  CHECK(span == std::array<double, 3>{3.0, 4.0, 5.0});
  CHECK(work == std::array<double, 3>{4.0, 6.0, 8.0});
  CHECK(outer.stop() == doctest::Approx(5.0));
  CHECK(outer.work() == doctest::Approx(18.0));
}

TEST_CASE("without a meter nothing is measured") {
  CHECK(current_span_frame == nullptr);
  span_batch b;
  CHECK_FALSE(b.measured());
  int calls = 0;
  b.run([&] { ++calls; });
  CHECK(calls == 1);
  task_pool pool(2);
  pool.for_each(4, [&](std::size_t) { CHECK(current_span_frame == nullptr); });
}

TEST_CASE("the thread's CPU clock: a span within the thread's CPU time") {
  const double before = moepolicy::detail::thread_cpu_seconds();
  span_meter m;
  volatile double x = 0.0;
  for (int i = 0; i < 1000000; ++i) x = x + 1.0;
  const double span = m.stop();
  const double after = moepolicy::detail::thread_cpu_seconds();
  CHECK(span >= 0.0);
  CHECK(span <= after - before);
  CHECK(x == 1000000.0);
}

TEST_CASE("span_position: where the chain stands, tasks starting where their batch began") {
  using moepolicy::detail::span_position;
  CHECK(span_position() == 0.0);  // nothing measured
  span_meter m(fake_clock);
  spend(1.0);
  CHECK(span_position() == doctest::Approx(1.0));
  span_batch b;
  double in_task = -1.0;
  std::thread t([&] { b.run([&] { spend(0.5), in_task = span_position(); }); });
  t.join();
  b.finish();
  // The task began where the caller stood (1) and ran 0.5.
  CHECK(in_task == doctest::Approx(1.5));
  CHECK(span_position() == doctest::Approx(1.5));
  // A meter under another frame goes on from it too.
  {
    span_meter inner(fake_clock);
    spend(0.25);
    CHECK(span_position() == doctest::Approx(1.75));
  }
  CHECK(m.stop() == doctest::Approx(1.75));
}

TEST_CASE("span_wait_until: a task that waits for another's chain goes on from it") {
  using moepolicy::detail::span_position;
  using moepolicy::detail::span_wait_until;
  span_wait_until(9.0);  // nothing measured: nothing happens
  CHECK(current_span_frame == nullptr);
  span_meter m(fake_clock);
  spend(1.0);
  span_batch b;
  std::atomic<double> released{-1.0};
  // Task 0 runs 1 s and releases; task 1 runs 0.5 s, waits for the release, then runs 1 s:
  // its chain is 1 (task 0's, to the release) + 1 = 2, longer than task 0's.
  std::thread t0([&] {
    b.run([&] {
      spend(1.0);
      released = span_position();
    });
  });
  std::thread t1([&] {
    b.run([&] {
      spend(0.5);
      while (released.load() < 0.0) std::this_thread::yield();
      span_wait_until(released.load());
      CHECK(span_position() == doctest::Approx(2.0));
      span_wait_until(1.0);  // already past it: nothing
      CHECK(span_position() == doctest::Approx(2.0));
      spend(1.0);
    });
  });
  t0.join();
  t1.join();
  b.finish();
  CHECK(m.stop() == doctest::Approx(3.0));
  // Waiting is no work: 1 + 1 + 0.5 + 1.
  CHECK(m.work() == doctest::Approx(3.5));
}
