// Two independent parts of a driver, run at the same time when the driver has threads.
#pragma once

#include <cstddef>

#include "moepolicy/detail/task_pool.hpp"

namespace moepolicy::examples {

/// Calls `main()` and `side()` once each: at the same time, each on one thread of a pool of
/// two (`detail::task_pool`: its worker's stack is 1 MiB), when `jobs > 1`, else one after
/// the other. For a replay on `jobs` threads beside a short single-threaded bound on the
/// same read-only input (Belady's hit ratio), which would otherwise run alone while the
/// other threads wait: the two may read what neither writes, nothing more. Rethrows the
/// first exception either threw.
template <class Main, class Side>
void alongside(std::size_t jobs, Main&& main, Side&& side) {
  if (jobs <= 1) {
    main();
    side();
    return;
  }
  detail::task_pool pool(2);
  pool.for_each(2, [&](std::size_t i) {
    if (i == 0) {
      main();
    } else {
      side();
    }
  });
}

}  // namespace moepolicy::examples
