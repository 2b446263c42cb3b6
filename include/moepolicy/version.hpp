// moepolicy/version.hpp — the library version, the one source of truth (CMake parses it).
#pragma once

#define MOEPOLICY_VERSION_MAJOR 0
#define MOEPOLICY_VERSION_MINOR 2
#define MOEPOLICY_VERSION_PATCH 0

/// The version as one integer, `major * 10000 + minor * 100 + patch`.
#define MOEPOLICY_VERSION \
  (MOEPOLICY_VERSION_MAJOR * 10000 + MOEPOLICY_VERSION_MINOR * 100 + MOEPOLICY_VERSION_PATCH)
