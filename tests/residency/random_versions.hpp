// Random version payloads for the concurrent residency tests: for each of `experts` experts
// a low version of `low_size` bytes and a high one of `high_size` bytes, random bytes from
// `seed`, with their FNV-1a checksums, so that readers can tell a torn or wrong version.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

#include "moepolicy/residency/transition_queue.hpp"
#include "moepolicy/residency/versioned_expert.hpp"

namespace moepolicy::test {

class random_versions {
 public:
  random_versions(std::size_t experts, std::size_t low_size, std::size_t high_size, std::uint64_t seed)
      : data_(2 * experts), sums_(2 * experts) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < data_.size(); ++i) {
      data_[i].resize(i % 2 == 1 ? high_size : low_size);
      for (auto& b : data_[i]) b = static_cast<std::byte>(rng());
      sums_[i] = fnv1a_checksum(data_[i]);
    }
  }

  /// The checksum of expert `flat`'s version at `tier`.
  [[nodiscard]] std::uint64_t sum(std::size_t flat, precision_tier tier) const {
    return sums_[2 * flat + static_cast<std::size_t>(tier)];
  }

  /// The source of expert `flat`'s version at `tier` (FP16 high, 4-bit low).
  [[nodiscard]] version_source source(std::size_t flat, precision_tier tier) const {
    const std::size_t i = 2 * flat + static_cast<std::size_t>(tier);
    return version_source{data_[i], sums_[i], static_cast<std::uint8_t>(tier == precision_tier::high ? 16 : 4)};
  }

 private:
  std::vector<std::vector<std::byte>> data_;
  std::vector<std::uint64_t> sums_;
};

}  // namespace moepolicy::test
