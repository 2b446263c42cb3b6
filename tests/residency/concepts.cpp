// Compile-time checks of the residency concepts with positive and negative archetypes.
#include "moepolicy/residency/concepts.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <cstddef>
#include <span>

#include "moepolicy/residency/transition_queue.hpp"

using namespace moepolicy;

namespace {

struct poll_only_mover {  // a Mover without wait
  struct completion {
    int id = 0;
  };
  completion copy(std::span<std::byte>, std::span<const std::byte>) noexcept { return {}; }
  bool done(const completion&) const noexcept { return true; }
};

struct no_completion_type {
  int copy(std::span<std::byte>, std::span<const std::byte>) { return 0; }
  bool done(int) const { return true; }
};

struct no_done {
  struct completion {};
  completion copy(std::span<std::byte>, std::span<const std::byte>) { return {}; }
};

struct wrong_return {
  struct completion {};
  int copy(std::span<std::byte>, std::span<const std::byte>) { return 0; }
  bool done(const completion&) const { return true; }
};

struct immovable_completion {
  struct completion {
    completion() = default;
    completion(completion&&) = delete;
  };
  completion copy(std::span<std::byte>, std::span<const std::byte>);
  bool done(const completion&) const { return true; }
};

struct tick_clock {
  using rep = long;
  using period = std::ratio<1>;
  using duration = std::chrono::duration<rep, period>;
  using time_point = std::chrono::time_point<tick_clock>;
  static time_point now() noexcept { return time_point{}; }
};

struct member_now_clock {
  using time_point = std::chrono::steady_clock::time_point;
  time_point now() const { return {}; }
};

}  // namespace

static_assert(Mover<host_memcpy_mover>);
static_assert(WaitableMover<host_memcpy_mover>);
static_assert(Mover<poll_only_mover>);
static_assert(!WaitableMover<poll_only_mover>);
static_assert(!AsyncCopy<no_completion_type>);
static_assert(AsyncCopy<no_done> && !Mover<no_done>);
static_assert(!AsyncCopy<wrong_return>);
static_assert(!Mover<immovable_completion>);

static_assert(TransitionClock<std::chrono::steady_clock>);
static_assert(TransitionClock<std::chrono::system_clock>);
static_assert(TransitionClock<tick_clock>);
static_assert(!TransitionClock<member_now_clock>);

TEST_CASE("the residency concepts accept their models and reject the archetypes") {
  CHECK(Mover<host_memcpy_mover>);
  CHECK_FALSE(Mover<no_done>);
}
