// Stress test of the residency mechanism: reader threads pin windows, resolve handles
// (each several times per window) and verify every version's bytes against its checksum
// while the worker promotes and demotes under random targets (fixed seed) and a tight
// budget shaped as the plan shapes it (three high slots, one staging block). Checks: no torn
// or reclaimed-under-a-reader read, one version per handle per window, no bound exceeded
// (each tracker asserts it on every reservation and keeps the peak) and no pool exhausted,
// versions never go backwards for a reader (with replaced low versions), and every block
// and byte returned at the end. Bounded: 400 rounds or about half a second per
// configuration (3 s at most on a loaded machine), so that it stays short under
// ThreadSanitizer.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "moepolicy/residency/transition_queue.hpp"
#include "random_versions.hpp"

using namespace moepolicy;

namespace {

// Copies half of a version when the copy starts and the rest on the first poll, reporting
// done only on the second: a version published before its copy completed would fail its
// checksum.
struct two_phase_mover {
  struct completion {
    std::span<std::byte> dst;
    std::span<const std::byte> src;
    int polls = 0;
  };
  completion copy(std::span<std::byte> dst, std::span<const std::byte> src) noexcept {
    const std::size_t half = src.size() / 2;
    std::memcpy(dst.data(), src.data(), half);
    return {dst, src, 0};
  }
  bool done(completion& c) const noexcept {
    if (c.polls == 0) {
      const std::size_t half = c.src.size() / 2;
      std::memcpy(c.dst.data() + half, c.src.data() + half, c.src.size() - half);
    }
    return ++c.polls >= 2;
  }
};
static_assert(Mover<two_phase_mover>);

constexpr std::size_t L = 2, E = 8, N = L * E;
constexpr std::size_t hi_size = 512, lo_size = 128;
constexpr std::size_t readers = 2;

struct outcome {
  std::uint64_t reads = 0, torn = 0, backwards = 0, high_reads = 0, mixed = 0;
};

void run(low_version mode, bool background, std::uint32_t seed) {
  const test::random_versions versions(N, lo_size, hi_size, seed);
  const auto source_of = [&](expert_key k, precision_tier t) { return versions.source(k.flat(E), t); };

  // A tight budget as a plan gives it for three high slots (of 8 wanted at a time) and, with
  // replaced low versions, one staging block: M_hi = 3 high blocks; M_lo = N − 3 low blocks
  // (replaced) or N (kept); M_stage = one low block (replaced). The pools hold exactly that.
  const bool replaced = mode == low_version::replaced;
  constexpr std::size_t slots = 3;
  residency_budget budget({.high_bytes = slots * hi_size,
                           .low_bytes = (replaced ? N - slots : N) * lo_size,
                           .staging_bytes = replaced ? lo_size : 0});
  block_pool hi_pool(hi_size, slots, 64);
  block_pool lo_pool(lo_size, replaced ? N - slots + 1 : N, 64);
  versioned_expert_table table(L, E, {.low = mode, .max_readers = readers});
  {
    transition_pipeline<two_phase_mover> pipe(table, budget, lo_pool, hi_pool, source_of, {}, {.max_in_flight = 2});
    REQUIRE(pipe.load_all([&](expert_key k) {
      return replaced && k.flat(E) < slots ? precision_tier::high : precision_tier::low;
    }) == residency_load_status::ok);

    std::atomic<bool> stop{false};
    std::atomic<std::size_t> ready{0};
    std::vector<outcome> results(readers);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < readers; ++r) {
      threads.emplace_back([&, r] {
        auto slot_r = table.register_reader();
        std::mt19937 pick(seed + static_cast<std::uint32_t>(r) + 1);
        std::vector<std::uint64_t> last(N, 0);
        std::vector<const expert_version*> seen(N, nullptr);
        outcome& out = results[r];
        while (!stop.load(std::memory_order_relaxed)) {
          auto guard = slot_r.pin();
          std::fill(seen.begin(), seen.end(), nullptr);
          for (int i = 0; i < 16; ++i) {
            const std::size_t flat = pick() % N;
            const expert_key key{static_cast<layer_id>(flat / E), static_cast<expert_id>(flat % E)};
            const expert_version& v = guard.resolve(table.handle(key));
            if (seen[flat] != nullptr && seen[flat] != &v) ++out.mixed;  // two versions in one window
            seen[flat] = &v;
            const std::size_t want = v.tier == precision_tier::high ? hi_size : lo_size;
            const std::uint64_t expect = versions.sum(flat, v.tier);
            if (v.key != key || v.data.size() != want || v.checksum != expect || fnv1a_checksum(v.data) != expect) {
              ++out.torn;
            }
            if (mode == low_version::replaced) {
              if (v.version < last[flat]) ++out.backwards;
              last[flat] = v.version;
            }
            out.high_reads += v.tier == precision_tier::high;
            if (out.reads++ == 0) ready.fetch_add(1);
          }
        }
      });
    }

    // Random targets: each round picks 4 experts per layer to be high (more than fit).
    // Rounds start once every reader reads, and run for 400 rounds or 500 ms, whichever
    // comes first, but at least until a few demotions happened (at most 3 s, for a loaded
    // machine).
    while (ready.load() < readers) std::this_thread::yield();
    if (background) pipe.start();
    std::mt19937 targets(seed * 7 + 1);
    const auto start = std::chrono::steady_clock::now();
    const auto elapsed = [&] { return std::chrono::steady_clock::now() - start; };
    bytes worst = 0;
    for (int round = 0;; ++round) {
      const bool enough = round >= 400 || elapsed() > std::chrono::milliseconds(500);
      if ((enough && pipe.stats().demotions >= 3) || elapsed() > std::chrono::seconds(3)) break;
      for (layer_id l = 0; l < L; ++l) {
        std::vector<expert_id> ids(E);
        for (std::size_t e = 0; e < E; ++e) ids[e] = static_cast<expert_id>(e);
        std::shuffle(ids.begin(), ids.end(), targets);
        pipe.request(l, std::span<const expert_id>(ids).first(4), std::span<const expert_id>(ids).subspan(4));
      }
      if (background) {
        std::this_thread::sleep_for(std::chrono::microseconds(300));
      } else {
        for (int s = 0; s < 6; ++s) {
          static_cast<void>(pipe.step());
          std::this_thread::yield();
        }
      }
      worst = std::max(worst, budget.reserved());
    }
    pipe.stop();
    stop = true;
    for (auto& t : threads) t.join();

    outcome total;
    for (const auto& o : results) {
      total.reads += o.reads;
      total.torn += o.torn;
      total.backwards += o.backwards;
      total.high_reads += o.high_reads;
      total.mixed += o.mixed;
    }
    const auto s = pipe.stats();
    MESSAGE("mode=", to_string(mode), " background=", background, " reads=", total.reads, " high=", total.high_reads,
            " promotions=", s.promotions, " demotions=", s.demotions, " admission_waits=", s.admission_waits,
            " staged=", s.staged, " peak=", budget.peak_reserved(), "/", budget.cap(),
            " max_promotion_delay=", s.max_promotion_delay);
    CHECK(total.reads > 0);
    CHECK(total.torn == 0);
    CHECK(total.backwards == 0);
    CHECK(total.mixed == 0);
    CHECK(s.promotions > 0);
    CHECK(s.demotions > 0);
    CHECK(worst <= budget.cap());
    CHECK(budget.peak_reserved() <= budget.cap());
    CHECK(hi_pool.exhausted() == 0);  // every reservation found its block
    CHECK(lo_pool.exhausted() == 0);
    CHECK(budget.high().peak_reserved() <= budget.high().cap());
    CHECK(budget.low().peak_reserved() <= budget.low().cap());
    pipe.shutdown();
  }
  CHECK(budget.reserved() == 0);
  CHECK(hi_pool.free_blocks() == hi_pool.num_blocks());
  CHECK(lo_pool.free_blocks() == lo_pool.num_blocks());
}

}  // namespace

TEST_CASE("residency stress: replaced low versions, background worker") { run(low_version::replaced, true, 1); }
TEST_CASE("residency stress: replaced low versions, caller-driven steps") { run(low_version::replaced, false, 2); }
TEST_CASE("residency stress: kept low versions, background worker") { run(low_version::kept, true, 3); }
TEST_CASE("residency stress: kept low versions, caller-driven steps") { run(low_version::kept, false, 4); }
