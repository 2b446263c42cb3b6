// Window pinning of the mapping (DynaExq §3.1, §3.4 "window-level pinning"): reader threads
// pin a window, resolve every handle several times in it (as gate, up and down launches,
// micro-batches or tensor-parallel shards of one forward pass would) with yields in between,
// while the caller's thread promotes and demotes as fast as the pipeline goes. Checks, per
// window: every resolve of a handle returns the same record, with intact bytes; across
// windows: a version published before a window was pinned is visible in it (the new version
// becomes visible at the next window), and versions never go backwards. Bounded to a few
// hundred milliseconds, so that it stays short under ThreadSanitizer.
#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "moepolicy/residency/transition_queue.hpp"
#include "random_versions.hpp"

using namespace moepolicy;

namespace {

constexpr std::size_t L = 1, E = 6, N = L * E;
constexpr std::size_t hi_size = 256, lo_size = 64;
constexpr std::size_t readers = 2;
constexpr int launches = 3;

struct reader_outcome {
  std::uint64_t windows = 0, resolves = 0, mixed = 0, torn = 0, stale = 0, backwards = 0, switched_windows = 0;
};

void run(low_version mode, std::uint32_t seed) {
  const test::random_versions versions(N, lo_size, hi_size, seed);
  const auto source_of = [&](expert_key k, precision_tier t) { return versions.source(k.flat(E), t); };
  // Room for every expert at both tiers: the budget never binds, so publications come as
  // fast as windows end.
  residency_budget budget({.high_bytes = N * hi_size, .low_bytes = N * lo_size});
  block_pool hi_pool(hi_size, N, 64), lo_pool(lo_size, N, 64);
  versioned_expert_table table(L, E, {.low = mode, .max_readers = readers});
  // The newest version number published per expert, stored after `step()` returns.
  std::array<std::atomic<std::uint64_t>, N> published{};
  {
    transition_pipeline<host_memcpy_mover> pipe(table, budget, lo_pool, hi_pool, source_of, {},
                                                {.max_in_flight = N});
    REQUIRE(pipe.load_all() == residency_load_status::ok);
    for (auto& p : published) p.store(1, std::memory_order_relaxed);

    std::atomic<bool> stop{false};
    std::atomic<std::size_t> ready{0};
    std::vector<reader_outcome> results(readers);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < readers; ++r) {
      threads.emplace_back([&, r] {
        auto slot = table.register_reader();
        reader_outcome& out = results[r];
        std::array<std::uint64_t, N> last{};
        std::array<const expert_version*, N> first{};
        std::array<std::uint64_t, N> floor{};
        bool announced = false;
        while (!stop.load(std::memory_order_relaxed)) {
          // Published before the pin, hence visible in the window.
          for (std::size_t i = 0; i < N; ++i) floor[i] = published[i].load(std::memory_order_acquire);
          const read_guard guard = slot.pin();
          bool changed = false;
          for (int launch = 0; launch < launches; ++launch) {
            for (std::size_t i = 0; i < N; ++i) {
              const expert_key key{0, static_cast<expert_id>(i)};
              const expert_version& v = guard.resolve(key);
              ++out.resolves;
              if (launch == 0) {
                first[i] = &v;
                if (v.version < floor[i] && mode == low_version::replaced) ++out.stale;
                if (v.version < last[i] && mode == low_version::replaced) ++out.backwards;
                changed = changed || v.version != last[i];
                last[i] = v.version;
              } else if (&v != first[i]) {
                ++out.mixed;
              }
              const std::uint64_t expect = versions.sum(i, v.tier);
              if (v.key != key || v.checksum != expect || fnv1a_checksum(v.data) != expect) ++out.torn;
            }
            std::this_thread::yield();  // let the writer publish inside the window
          }
          ++out.windows;
          out.switched_windows += changed;
          if (!announced) {
            ready.fetch_add(1);
            announced = true;
          }
        }
      });
    }

    while (ready.load() < readers) std::this_thread::yield();
    std::mt19937 pick(seed * 3 + 1);
    std::array<transition_record, 4 * N> log{};
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
    std::uint64_t rounds = 0;
    while (elapsed() < std::chrono::milliseconds(300) ||
           (pipe.stats().promotions < 20 && elapsed() < std::chrono::seconds(3))) {
      const auto e = static_cast<expert_id>(pick() % E);
      if (pick() % 2 == 0) {
        pipe.request_promote({0, e});
      } else {
        pipe.request_demote({0, e});
      }
      static_cast<void>(pipe.step());
      const std::size_t n = pipe.drain_log(log);
      for (std::size_t i = 0; i < n; ++i) {
        std::atomic<std::uint64_t>& p = published[log[i].key.flat(E)];
        if (log[i].version > p.load(std::memory_order_relaxed)) p.store(log[i].version, std::memory_order_release);
      }
      ++rounds;
      std::this_thread::yield();
    }
    stop = true;
    for (auto& t : threads) t.join();

    reader_outcome total;
    for (const auto& o : results) {
      total.windows += o.windows;
      total.resolves += o.resolves;
      total.mixed += o.mixed;
      total.torn += o.torn;
      total.stale += o.stale;
      total.backwards += o.backwards;
      total.switched_windows += o.switched_windows;
    }
    const auto s = pipe.stats();
    MESSAGE("mode=", to_string(mode), " rounds=", rounds, " windows=", total.windows, " resolves=", total.resolves,
            " windows seeing a new version=", total.switched_windows, " promotions=", s.promotions,
            " demotions=", s.demotions);
    CHECK(total.windows > 0);
    CHECK(s.promotions > 0);
    CHECK(s.demotions > 0);
    CHECK(total.switched_windows > 0);  // publications did reach later windows
    CHECK(total.mixed == 0);            // ... and never the window that was open
    CHECK(total.torn == 0);
    CHECK(total.stale == 0);
    CHECK(total.backwards == 0);
    pipe.shutdown();
  }
  CHECK(budget.reserved() == 0);
  CHECK(hi_pool.free_blocks() == hi_pool.num_blocks());
  CHECK(lo_pool.free_blocks() == lo_pool.num_blocks());
}

}  // namespace

TEST_CASE("residency pinning: replaced low versions, one version per handle per window") {
  run(low_version::replaced, 5);
}
TEST_CASE("residency pinning: kept low versions, one version per handle per window") { run(low_version::kept, 6); }

TEST_CASE("residency pinning: a window pinned while a publication lands sees the old mapping throughout") {
  // Deterministic interleaving on one thread: pin, publish twice (promote, then demote is
  // refused until the window ends), resolve in between.
  std::vector<std::byte> hi(hi_size, std::byte{1}), lo(lo_size, std::byte{2});
  residency_budget budget({.high_bytes = hi_size, .low_bytes = 2 * lo_size});
  block_pool hi_pool(hi_size, 1, 64), lo_pool(lo_size, 2, 64);
  versioned_expert_table table(1, 1);
  transition_pipeline<host_memcpy_mover> pipe(table, budget, lo_pool, hi_pool, [&](expert_key, precision_tier t) {
    return t == precision_tier::high ? version_source{hi, 0, 16} : version_source{lo, 0, 4};
  });
  REQUIRE(pipe.load_all() == residency_load_status::ok);
  auto reader = table.register_reader();
  const expert_key k{0, 0};
  std::optional<read_guard> w(reader.pin());
  const expert_version* v1 = &w->resolve(k);
  pipe.request_promote(k);
  pipe.step();
  CHECK(pipe.step().published == 1);  // v2 is published while the window is open
  CHECK(&w->resolve(k) == v1);
  pipe.request_demote(k);
  for (int i = 0; i < 3; ++i) {
    const auto r = pipe.step();
    CHECK(r.issued == 0);  // the demotion waits: the expert has not settled
    CHECK(&w->resolve(k) == v1);
  }
  w.reset();
  w.emplace(reader.pin());
  CHECK(w->resolve(k).tier == precision_tier::high);
  CHECK(w->resolve(k).version == 2);
  w.reset();
  pipe.step();  // reclaims v1, issues the demotion
  pipe.step();
  w.emplace(reader.pin());
  CHECK(w->resolve(k).tier == precision_tier::low);
  CHECK(w->resolve(k).version == 3);
}
