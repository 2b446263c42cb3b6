#include "moepolicy/residency/block_pool.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <set>
#include <thread>
#include <vector>

using namespace moepolicy;

TEST_CASE("an owned pool hands out distinct aligned blocks of its arena until empty") {
  block_pool pool(512, 4, 256);
  CHECK(pool.num_blocks() == 4);
  CHECK(pool.block_bytes() == 512);
  CHECK(pool.free_blocks() == 4);
  std::set<std::uint32_t> seen;
  std::vector<pool_block> got;
  for (int i = 0; i < 4; ++i) {
    const pool_block b = pool.try_allocate();
    REQUIRE(b);
    CHECK(b.data.size() == 512);
    CHECK(reinterpret_cast<std::uintptr_t>(b.data.data()) % 256 == 0);
    CHECK(b.data.data() >= pool.arena().data());
    CHECK(b.data.data() + b.data.size() <= pool.arena().data() + pool.arena().size());
    CHECK(b.data.data() == pool.block_data(b.index).data());
    seen.insert(b.index);
    got.push_back(b);
  }
  CHECK(seen.size() == 4);
  CHECK(pool.free_blocks() == 0);
  CHECK_FALSE(pool.try_allocate());  // exhausted: an empty block, not an allocation
  CHECK(pool.exhausted() == 1);
  pool.deallocate(got[2]);
  const pool_block again = pool.try_allocate();  // the free list is LIFO
  CHECK(again.index == got[2].index);
  for (const auto& b : {got[0], got[1], again, got[3]}) pool.deallocate(b);
  CHECK(pool.free_blocks() == 4);
  CHECK(pool.peak_in_use() == 4);
}

TEST_CASE("a borrowed arena is cut into whole blocks") {
  std::vector<std::byte> arena(1000);
  block_pool pool(std::span<std::byte>(arena), 300);
  CHECK(pool.num_blocks() == 3);  // the last 100 bytes are unused
  const pool_block b = pool.try_allocate();
  CHECK(b.data.data() >= arena.data());
  CHECK(b.data.data() + 300 <= arena.data() + 900);
  pool.deallocate(b);
}

TEST_CASE("bad pools are rejected with the library's message") {
  CHECK_THROWS_WITH_AS(block_pool(0, 4), "moepolicy::block_pool: block_bytes must be > 0, got 0", invalid_argument);
  CHECK_THROWS_WITH_AS(block_pool(256, 0),
                       "moepolicy::block_pool: the pool must hold between 1 and 2^32 - 2 blocks, got 0",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(block_pool(256, 4, 3), "moepolicy::block_pool: alignment must be a power of two, got 3",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(block_pool(100, 4, 64),
                       "moepolicy::block_pool: block_bytes must be a multiple of alignment, got 100", invalid_argument);
  std::vector<std::byte> small(10);
  CHECK_THROWS_WITH_AS(block_pool(std::span<std::byte>(small), 16),
                       "moepolicy::block_pool: the pool must hold between 1 and 2^32 - 2 blocks, got 0",
                       invalid_argument);
}

TEST_CASE("concurrent allocation gives each block to one owner at a time") {
  block_pool pool(64, 8, 64);
  std::atomic<bool> clash{false};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      const auto mark = static_cast<std::byte>(k + 1);
      for (int i = 0; i < 3000; ++i) {
        const pool_block b = pool.try_allocate();
        if (!b) continue;
        std::fill(b.data.begin(), b.data.end(), mark);
        if (std::any_of(b.data.begin(), b.data.end(), [&](std::byte x) { return x != mark; })) clash = true;
        pool.deallocate(b);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK_FALSE(clash.load());
  CHECK(pool.free_blocks() == 8);
}
