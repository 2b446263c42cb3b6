// moepolicy/residency/concepts.hpp — the residency mechanism's extension points (DynaExq,
// "Dynamic Expert Quantization for Scalable Mixture-of-Experts Inference", §3.4 and §4).
//
// The transition pipeline (residency/transition_queue.hpp) moves expert versions through a
// pluggable *mover*: an asynchronous copy that returns a completion the pipeline polls,
// and publishes a version only once its completion reports done (§3.4: "records a
// completion event on [the migration stream] ... Publication is performed only after the
// completion event"). They compose:
//
//   AsyncCopy && CompletionPoll  ->  Mover        (+ CompletionWait -> WaitableMover)
//
// Shipped models: `host_memcpy_mover` (residency/transition_queue.hpp), synchronous host
// memcpy for tests and examples. An engine plugs its device copy: `copy` issues
// cudaMemcpyAsync (or hipMemcpyAsync, or a DMA descriptor) on its migration stream and
// records an event; `done` is cudaEventQuery(event) == cudaSuccess; `wait` is
// cudaEventSynchronize. `TransitionClock` measures queue delays: a `std::chrono` clock, or
// a replay's simulated clock.
#pragma once

#include <chrono>
#include <concepts>
#include <cstddef>
#include <span>

namespace moepolicy {

/// Starts copying a version's bytes.
///
/// For `M& m`, `std::span<std::byte> dst` and `std::span<const std::byte> src` of equal size:
///   1. `m.copy(dst, src)` starts copying `src` into `dst` and returns a
///      `typename M::completion`; the copy may be complete on return (a host memcpy) or
///      finish later (an asynchronous device copy on a migration stream);
///   2. it writes nothing outside `dst` and reads nothing outside `src`; the caller keeps
///      both alive and untouched until the completion reports done;
///   3. it does not throw (the pipeline's worker calls it in a `noexcept` step).
template <class M>
concept AsyncCopy = requires(M& m, std::span<std::byte> dst, std::span<const std::byte> src) {
  typename M::completion;
  { m.copy(dst, src) } -> std::same_as<typename M::completion>;
};

/// Reports, without blocking, whether a copy is complete.
///
/// For `M& m` and a completion `c` returned by `m.copy`:
///   1. `m.done(c)` does not block; it returns true once every byte of the copy is written
///      and visible to whatever synchronises with a later release by the caller (for a
///      device copy: to kernels launched after the handle is published);
///   2. once true it stays true for `c`;
///   3. `typename M::completion` is movable (the pipeline keeps completions in a fixed
///      array of in-flight slots) and releases whatever it holds (an event) when destroyed;
///   4. it does not throw.
template <class M>
concept CompletionPoll = AsyncCopy<M> && std::movable<typename M::completion> &&
    requires(M& m, typename M::completion& c) {
  { m.done(c) } -> std::convertible_to<bool>;
};

/// Moves expert versions for the transition pipeline (DynaExq §3.4).
///
/// A `Mover` is an `AsyncCopy` whose completions can be polled (`CompletionPoll`). Its
/// calls come from one thread at a time — the pipeline's worker, under its step lock — so a
/// mover need not be thread-safe.
template <class M>
concept Mover = AsyncCopy<M> && CompletionPoll<M>;

/// A `Mover` that can also block until a copy completes.
///
/// For `M& m` and a completion `c`:
///   1. `m.wait(c)` returns once `m.done(c)` would return true;
///   2. it does not throw.
/// Without it, the pipeline's teardown polls `done` and yields between polls.
template <class M>
concept WaitableMover = Mover<M> && requires(M& m, typename M::completion& c) {
  m.wait(c);
};

/// A clock for queue delays.
///
/// For a type `C`:
///   1. `C::now()` returns a `C::time_point`, non-decreasing across calls, safe to call from
///      any thread;
///   2. `C::time_point` differences convert to `std::chrono::duration<double>` (seconds).
template <class C>
concept TransitionClock = requires {
  typename C::time_point;
  { C::now() } -> std::same_as<typename C::time_point>;
  {
    std::chrono::duration_cast<std::chrono::duration<double>>(C::now() - C::now())
    } -> std::same_as<std::chrono::duration<double>>;
};

static_assert(TransitionClock<std::chrono::steady_clock>);

}  // namespace moepolicy
