#include "moepolicy/residency/budget_tracker.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

using namespace moepolicy;

TEST_CASE("reservations are admitted only within the cap") {
  budget_tracker t(100);
  CHECK(t.cap() == 100);
  CHECK(t.try_reserve(60));
  CHECK(t.reserved() == 60);
  CHECK(t.available() == 40);
  CHECK_FALSE(t.try_reserve(41));  // 101 > 100
  CHECK(t.reserved() == 60);       // a refusal reserves nothing
  CHECK(t.refused() == 1);
  CHECK(t.try_reserve(40));  // exactly the cap
  CHECK(t.available() == 0);
  CHECK_FALSE(t.try_reserve(1));
  t.release(60);
  CHECK(t.reserved() == 40);
  CHECK(t.peak_reserved() == 100);
  CHECK(t.try_reserve(0));  // an empty reservation always fits
  t.release(40);
  CHECK(t.reserved() == 0);
}

TEST_CASE("a reservation larger than the cap never fits, even with nothing reserved") {
  budget_tracker t(10);
  CHECK_FALSE(t.try_reserve(11));
  CHECK_FALSE(t.try_reserve(~bytes{0}));  // no overflow in the check
  CHECK(t.reserved() == 0);
}

TEST_CASE("concurrent reservations never exceed the cap") {
  budget_tracker t(1000);
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(static_cast<std::uint32_t>(k + 1));
      for (int i = 0; i < 5000; ++i) {
        const bytes n = 1 + rng() % 300;
        if (t.try_reserve(n)) {
          if (t.reserved() > t.cap()) over = true;
          t.release(n);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_FALSE(over.load());
  CHECK(t.reserved() == 0);
  CHECK(t.peak_reserved() <= 1000);
  CHECK(t.peak_reserved() > 0);
}
