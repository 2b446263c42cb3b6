// Load-aware token dispatch among replicas: hand-worked batches, the engines' even split
// beside it, exhaustive search on tiny instances, the bound, GPUs of different speeds, no
// allocation per batch, and bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "../cache/count_allocations.hpp"
#include "moepolicy/ep/dispatch.hpp"
#include "test_support.hpp"

using namespace moepolicy;

namespace {

using u64 = std::uint64_t;

/// Max GPU token count of a split, checking it conserves every expert's tokens.
u64 max_gpu(const std::vector<std::int32_t>& slots, const std::vector<u64>& tokens, std::size_t gpus,
            const std::vector<u64>& out) {
  std::vector<u64> got(tokens.size(), 0), gpu(gpus, 0);
  const std::size_t per = slots.size() / gpus;
  for (std::size_t p = 0; p < slots.size(); ++p) {
    got[static_cast<std::size_t>(slots[p])] += out[p];
    gpu[p / per] += out[p];
  }
  CHECK(got == tokens);
  return *std::max_element(gpu.begin(), gpu.end());
}

/// The least max GPU token count over every integer split (exhaustive).
u64 brute_force(const std::vector<std::int32_t>& slots, const std::vector<u64>& tokens, std::size_t gpus) {
  const std::size_t per = slots.size() / gpus;
  std::vector<u64> gpu(gpus, 0);
  u64 best = ~u64{0};
  std::function<void(std::size_t, std::size_t, u64)> go = [&](std::size_t e, std::size_t from, u64 left) {
    if (e == tokens.size()) {
      best = std::min(best, *std::max_element(gpu.begin(), gpu.end()));
      return;
    }
    // Next slot of e at or after `from`.
    std::size_t p = from;
    while (p < slots.size() && static_cast<std::size_t>(slots[p]) != e) ++p;
    std::size_t q = p + 1;
    while (q < slots.size() && static_cast<std::size_t>(slots[q]) != e) ++q;
    if (q >= slots.size()) {  // last replica takes the rest
      gpu[p / per] += left;
      go(e + 1, 0, e + 1 < tokens.size() ? tokens[e + 1] : 0);
      gpu[p / per] -= left;
      return;
    }
    for (u64 x = 0; x <= left; ++x) {
      gpu[p / per] += x;
      go(e, p + 1, left - x);
      gpu[p / per] -= x;
    }
  };
  go(0, 0, tokens[0]);
  return best;
}

}  // namespace

TEST_CASE("hand-worked: the hot expert's tokens move to the replica on the idle GPU") {
  // GPU 0 holds experts 0 and 1, GPU 1 holds experts 0 and 2; a batch of 10, 6, 0 tokens.
  const std::vector<std::int32_t> slots{0, 1, 0, 2};
  const std::vector<u64> tokens{10, 6, 0};
  std::vector<u64> out(4);
  // The even split: 5 + 6 = 11 on GPU 0, 5 on GPU 1.
  CHECK(ep_uniform_dispatch(slots, tokens, 2, out) == 11);
  CHECK(out == std::vector<u64>{5, 6, 5, 0});
  // Optimal: 6 + x = 10 − x, x = 2: both GPUs at 8.
  ep_dispatcher d(3, 4, 2);
  CHECK(d.dispatch(slots, tokens, out) == 8.0);
  CHECK(out == std::vector<u64>{2, 6, 8, 0});
  CHECK(ep_dispatch_lower_bound(slots, tokens, 2) == 8.0);
}

TEST_CASE("hand-worked: integer rounding, two replicas on one GPU, and an even split that is already optimal") {
  std::vector<u64> out(2);
  ep_dispatcher one(1, 2, 2);
  // 5 tokens on two replicas: ⌈5/2⌉ = 3.
  CHECK(one.dispatch(std::vector<std::int32_t>{0, 0}, std::vector<u64>{5}, out) == 3.0);
  CHECK(out[0] + out[1] == 5);
  // GPU 0 holds expert 0 twice, GPU 1 holds experts 1 and 0; 9 and 3 tokens: 6 and 6.
  const std::vector<std::int32_t> slots{0, 0, 1, 0};
  const std::vector<u64> tokens{9, 3};
  std::vector<u64> four(4);
  ep_dispatcher d(2, 4, 2);
  CHECK(d.dispatch(slots, tokens, four) == 6.0);
  CHECK(four == std::vector<u64>{3, 3, 3, 3});
  CHECK(ep_uniform_dispatch(slots, tokens, 2, four) == 6);
}

TEST_CASE("GPUs of different speeds: the faster GPU takes more, time = tokens / speed") {
  // One expert on a GPU of speed 2 and one of speed 1; 9 tokens: x/2 = 9 − x at x = 6.
  const std::vector<double> speeds{2.0, 1.0};
  ep_dispatcher d(1, 2, 2, speeds);
  std::vector<u64> out(2);
  CHECK(d.dispatch(std::vector<std::int32_t>{0, 0}, std::vector<u64>{9}, out) == doctest::Approx(3.0));
  CHECK(out == std::vector<u64>{6, 3});
  CHECK(ep_dispatch_lower_bound(std::vector<std::int32_t>{0, 0}, std::vector<u64>{9}, 2, speeds) == 3.0);
}

TEST_CASE("random tiny batches: optimal equals exhaustive search, <= the even split, >= the bound") {
  std::mt19937_64 rng(7);
  int strictly_better = 0;
  for (int trial = 0; trial < 150; ++trial) {
    const std::size_t gpus = 2 + rng() % 2;
    const std::size_t per = 1 + rng() % 2;
    const std::size_t r = gpus * per;
    const std::size_t e = 1 + rng() % r;
    std::vector<std::int32_t> slots(r);
    for (std::size_t p = 0; p < e; ++p) slots[p] = static_cast<std::int32_t>(p);
    for (std::size_t p = e; p < r; ++p) slots[p] = static_cast<std::int32_t>(rng() % e);
    std::shuffle(slots.begin(), slots.end(), rng);
    std::vector<u64> tokens(e);
    for (auto& t : tokens) t = rng() % 7;
    std::vector<u64> out(r), even(r);
    ep_dispatcher d(e, r, gpus);
    const double best = d.dispatch(slots, tokens, out);
    const u64 got = max_gpu(slots, tokens, gpus, out);
    CHECK(static_cast<double>(got) == best);
    CHECK(got == brute_force(slots, tokens, gpus));
    const u64 uniform = ep_uniform_dispatch(slots, tokens, gpus, even);
    CHECK(got <= uniform);
    CHECK(best >= ep_dispatch_lower_bound(slots, tokens, gpus) - 1e-9);
    strictly_better += got < uniform ? 1 : 0;
  }
  CHECK(strictly_better > 0);
}

TEST_CASE("a batch at DeepSeek-V3 width allocates nothing after construction") {
  std::mt19937_64 rng(3);
  const std::size_t e = 256, r = 288, gpus = 32;
  std::vector<std::int32_t> slots(r);
  for (std::size_t p = 0; p < r; ++p) slots[p] = static_cast<std::int32_t>(p < e ? p : rng() % e);
  std::shuffle(slots.begin(), slots.end(), rng);
  std::vector<u64> tokens(e);
  for (auto& t : tokens) t = rng() % 200;
  std::vector<u64> out(r), even(r);
  ep_dispatcher d(e, r, gpus);
  const u64 uniform = ep_uniform_dispatch(slots, tokens, gpus, even);
  double best = 0.0;
  {
    test::allocation_counter count;
    best = d.dispatch(slots, tokens, out);
    if (test::allocation_counting) CHECK(count.count() == 0);
  }
  CHECK(static_cast<double>(max_gpu(slots, tokens, gpus, out)) == best);
  CHECK(best <= static_cast<double>(uniform));
  CHECK(best >= ep_dispatch_lower_bound(slots, tokens, gpus) - 1e-9);
}

TEST_CASE("bad input names the function, the problem and the value") {
  std::vector<u64> out(4);
  CHECK_THROWS_WITH_AS(ep_uniform_dispatch(std::vector<std::int32_t>{0, 1, 0, 2}, std::vector<u64>{1, 1, 1}, 3, out),
                       "moepolicy::ep_uniform_dispatch: gpus must divide the 4 slots, got 3", invalid_argument);
  CHECK_THROWS_WITH_AS(ep_uniform_dispatch(std::vector<std::int32_t>{0, 1, 0, 5}, std::vector<u64>{1, 1, 1}, 2, out),
                       "moepolicy::ep_uniform_dispatch: slot 3 must name an expert in [0, 3), got 5", invalid_argument);
  CHECK_THROWS_WITH_AS(ep_uniform_dispatch(std::vector<std::int32_t>{0, 1, 0, 1}, std::vector<u64>{1, 1, 4}, 2, out),
                       "moepolicy::ep_uniform_dispatch: an expert with tokens has no slot: expert, got 2",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(ep_dispatcher(3, 4, 2, std::vector<double>{1.0, -1.0}),
                       "moepolicy::ep_dispatcher: speed of GPU 1 must be finite and > 0, got -1", invalid_argument);
  ep_dispatcher d(3, 4, 2);
  CHECK_THROWS_WITH_AS(d.dispatch(std::vector<std::int32_t>{0, 1, 0}, std::vector<u64>{1, 1, 1}, out),
                       "moepolicy::ep_dispatcher::dispatch: slots must number the dispatcher's 4, got 3",
                       invalid_argument);
  CHECK_THROWS_WITH_AS(d.dispatch(std::vector<std::int32_t>{0, 1, 0, 1}, std::vector<u64>{1, 1, 4}, out),
                       "moepolicy::ep_dispatcher::dispatch: an expert with tokens has no slot: expert, got 2",
                       invalid_argument);
}
