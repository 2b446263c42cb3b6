// moepolicy/core/units.hpp — the units the library computes in.
//
// Times are `seconds` (double) and sizes are `bytes` (unsigned 64-bit); names carry the
// unit (`compute_seconds`, `capacity_bytes`). Bandwidths are bytes per second and
// throughputs FLOP per second, both doubles. `bitwidth` is a validated strong type,
// because a bit count that is 0 or 40 is a bug worth catching at the boundary.
#pragma once

#include <compare>
#include <cstdint>

#include "moepolicy/core/error.hpp"

namespace moepolicy {

/// A duration in seconds.
using seconds = double;
/// A size in bytes.
using bytes = std::uint64_t;

/// Decimal prefixes, as datasheets quote bandwidths and capacities (1 GB/s = 1e9 B/s).
inline constexpr double kilo = 1e3;
inline constexpr double mega = 1e6;
inline constexpr double giga = 1e9;
inline constexpr double tera = 1e12;
/// Binary prefix, for capacities quoted in GiB.
inline constexpr std::uint64_t gibi = std::uint64_t{1} << 30;

/// Bits per stored weight: 1 to 32.
///
/// Throws: `invalid_argument` from the constructor when `bits` is outside [1, 32].
class bitwidth {
 public:
  static constexpr int min_bits = 1;
  static constexpr int max_bits = 32;

  constexpr explicit bitwidth(int bits) : bits_(check(bits)) {}

  /// The number of bits.
  [[nodiscard]] constexpr int bits() const noexcept { return bits_; }

  friend constexpr auto operator<=>(const bitwidth&, const bitwidth&) = default;

 private:
  static constexpr std::uint8_t check(int bits) {
    if (bits < min_bits || bits > max_bits) {
      detail::throw_invalid("bitwidth::bitwidth", "bits must be in [1, 32]", bits);
    }
    return static_cast<std::uint8_t>(bits);
  }

  std::uint8_t bits_;
};

/// Half precision (FP16/BF16), the reference precision of the papers' models.
inline constexpr bitwidth fp16{16};
/// Single precision.
inline constexpr bitwidth fp32{32};
/// Eight-bit weights (FP8/INT8).
inline constexpr bitwidth int8{8};

}  // namespace moepolicy
