// Counts global allocations inside a window, to prove that per-decision calls allocate
// nothing after construction. Include from exactly one translation unit per test
// executable: it replaces the global operator new and delete — except under
// AddressSanitizer, whose own operator new the shared C++ runtime keeps calling (mixing the
// two is an alloc-dealloc mismatch); there `allocation_counting` is false and tests skip.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#if defined(__SANITIZE_ADDRESS__)
#define MOEPOLICY_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MOEPOLICY_TEST_ASAN 1
#endif
#endif

namespace moepolicy::test {

#ifdef MOEPOLICY_TEST_ASAN
inline constexpr bool allocation_counting = false;
#else
inline constexpr bool allocation_counting = true;
#endif

inline std::size_t allocations = 0;
inline bool counting_allocations = false;

/// Counts the allocations made while it lives.
class allocation_counter {
 public:
  allocation_counter() noexcept {
    allocations = 0;
    counting_allocations = true;
  }
  ~allocation_counter() { counting_allocations = false; }
  allocation_counter(const allocation_counter&) = delete;
  allocation_counter& operator=(const allocation_counter&) = delete;
  [[nodiscard]] std::size_t count() const noexcept { return allocations; }
};

}  // namespace moepolicy::test

#ifndef MOEPOLICY_TEST_ASAN
void* operator new(std::size_t n) {
  if (moepolicy::test::counting_allocations) ++moepolicy::test::allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
#endif
