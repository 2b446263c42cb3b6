// Counts calls of the global operator new, to prove that hot-path calls allocate nothing.
// Include in exactly one translation unit of a test executable: it replaces the global
// (unaligned) operator new and delete. Under AddressSanitizer or ThreadSanitizer, whose
// runtimes own operator new, nothing is replaced and `counting_allocations` is false.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define MOEPOLICY_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define MOEPOLICY_TEST_SANITIZED 1
#endif
#endif

namespace moepolicy::test {
inline std::atomic<std::size_t> allocations{0};
#ifdef MOEPOLICY_TEST_SANITIZED
inline constexpr bool counting_allocations = false;
#else
inline constexpr bool counting_allocations = true;
#endif
}  // namespace moepolicy::test

#ifndef MOEPOLICY_TEST_SANITIZED
void* operator new(std::size_t n) {
  moepolicy::test::allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  moepolicy::test::allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
#endif

/// Runs `f` and returns how many times it called operator new (0 when not counting).
template <class F>
std::size_t count_allocations(F&& f) {
  const std::size_t before = moepolicy::test::allocations.load(std::memory_order_relaxed);
  f();
  return moepolicy::test::allocations.load(std::memory_order_relaxed) - before;
}
