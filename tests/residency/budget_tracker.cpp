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

TEST_CASE("try_release gives back whole amounts only") {
  budget_tracker t(100);
  REQUIRE(t.try_reserve(30));
  CHECK(t.try_release(20));
  CHECK_FALSE(t.try_release(20));  // only 10 left: nothing released
  CHECK(t.reserved() == 10);
  CHECK(t.try_release(10));
  CHECK(t.reserved() == 0);
}

TEST_CASE("residency_budget: separate high and low bounds, and a temporary pool for the staged tier") {
  // M_hi two blocks of 64, M_lo three blocks of 16, M_stage one block of 16.
  residency_budget b({.high_bytes = 128, .low_bytes = 48, .staging_bytes = 16});
  CHECK(b.cap() == 192);
  CHECK(b.try_reserve(precision_tier::high, 64) == budget_account::tier);
  CHECK(b.try_reserve(precision_tier::high, 64) == budget_account::tier);
  CHECK(b.try_reserve(precision_tier::high, 64) == budget_account::none);  // high never takes staging
  for (int i = 0; i < 3; ++i) CHECK(b.try_reserve(precision_tier::low, 16) == budget_account::tier);
  CHECK(b.try_reserve(precision_tier::low, 16) == budget_account::staging);  // a transient copy
  CHECK(b.try_reserve(precision_tier::low, 16) == budget_account::none);
  CHECK(b.try_reserve(precision_tier::low, 16, false) == budget_account::none);
  CHECK(b.reserved() == 192);
  CHECK(b.peak_reserved() == 192);
  CHECK(b.staged() == 1);
  // A low version given back ends the staged transient first: the blocks are fungible.
  b.release(precision_tier::low, 16);
  CHECK(b.staging().reserved() == 0);
  CHECK(b.low().reserved() == 48);
  b.release(precision_tier::low, 16);
  CHECK(b.low().reserved() == 32);
  b.release(precision_tier::high, 64);
  CHECK(b.high().reserved() == 64);
  CHECK(b.tier(precision_tier::high).available() == 64);
  CHECK(b.reserved() == 96);
  CHECK(b.try_reserve(precision_tier::low, 16, false) == budget_account::tier);
}

TEST_CASE("residency_budget: concurrent reservations never exceed any bound") {
  residency_budget b({.high_bytes = 640, .low_bytes = 160, .staging_bytes = 32});
  std::atomic<bool> over{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      std::mt19937 rng(static_cast<std::uint32_t>(k + 11));
      for (int i = 0; i < 4000; ++i) {
        const precision_tier t = rng() % 2 == 0 ? precision_tier::high : precision_tier::low;
        const bytes n = t == precision_tier::high ? 64 : 16;
        if (b.try_reserve(t, n) != budget_account::none) {
          if (b.high().reserved() > 640 || b.low().reserved() > 160 || b.staging().reserved() > 32 ||
              b.reserved() > b.cap()) {
            over = true;
          }
          b.release(t, n);
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_FALSE(over.load());
  CHECK(b.reserved() == 0);
  CHECK(b.high().reserved() == 0);
  CHECK(b.low().reserved() == 0);
  CHECK(b.staging().reserved() == 0);
  CHECK(b.peak_reserved() <= b.cap());
}
