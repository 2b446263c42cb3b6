// moepolicy/cache/stack_distance.hpp — the LRU hit ratio at every capacity in one pass
// (Mattson, Gecsei, Slutz, Traiger, "Evaluation techniques for storage hierarchies",
// IBM Systems Journal 9(2), 1970).
//
// LRU is a stack algorithm: a cache of c experts holds exactly the c most recently used,
// so an access hits at capacity c iff its stack distance — the number of distinct experts
// used since the previous access to the same expert, itself included — is at most c. One
// pass computing every access's stack distance (a Fenwick tree over access positions marks
// the latest access of each expert; O(log n) per access) gives the hit count at every
// capacity at once. With per-layer pools each layer's accesses form their own stack.
//
// Valid for a demand LRU cache counted in experts (`lru_policy` in an `expert_cache` of
// unit `experts`), as the tests check against replays at every capacity; not for bytes
// with unequal sizes, admission, or prefetching, which break the stack property.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "moepolicy/cache/concepts.hpp"
#include "moepolicy/core/error.hpp"
#include "moepolicy/core/ids.hpp"

namespace moepolicy {

/// Hits of a demand LRU cache at every capacity.
struct hit_curve {
  /// `hits[c]`: hits with capacity c experts (per pool), for c = 0 … pool slots; more
  /// capacity than a pool's slots hits as much as the last entry.
  std::vector<std::uint64_t> hits;
  /// Accesses replayed.
  std::uint64_t accesses = 0;
  /// First accesses to an expert (misses at every capacity).
  std::uint64_t cold_misses = 0;

  /// Hits at capacity `c`.
  [[nodiscard]] std::uint64_t hits_at(std::size_t c) const noexcept {
    if (hits.empty()) return 0;
    return c < hits.size() ? hits[c] : hits.back();
  }
  /// Hit ratio at capacity `c` (0 without accesses).
  [[nodiscard]] double hit_ratio(std::size_t c) const noexcept {
    return accesses == 0 ? 0.0 : static_cast<double>(hits_at(c)) / static_cast<double>(accesses);
  }
};

namespace detail {

/// Adds the stack distances of `stream` (dense indices below `slots`) to `histogram[d]`;
/// returns the number of first accesses.
///
/// A Fenwick tree marks the time of the last access of every key seen; the distance of an
/// access is the number of keys marked since its key's last access, plus one. Times are
/// renumbered 0, 1, … in order whenever they reach the tree's width (twice the keys, at
/// least 64), so the tree and the tables hold O(slots) entries — they stay in cache, and a
/// stream of any length costs no memory beyond them.
inline std::uint64_t add_stack_distances(std::span<const std::uint32_t> stream, std::size_t slots,
                                         std::vector<std::uint64_t>& histogram) {
  const std::size_t width = std::max<std::size_t>(64, 2 * slots);
  std::vector<std::uint32_t> tree(width + 1, 0);  // Fenwick tree over times 1..width
  constexpr std::uint32_t none = static_cast<std::uint32_t>(-1);
  std::vector<std::uint32_t> last(slots, none);    // time of each key's last access
  std::vector<std::uint32_t> key_at(width, none);  // the key marked at each time
  const auto add = [&](std::size_t pos, int delta) {
    for (std::size_t i = pos + 1; i <= width; i += i & (~i + 1)) {
      tree[i] = static_cast<std::uint32_t>(static_cast<int>(tree[i]) + delta);
    }
  };
  const auto prefix = [&](std::size_t pos) {  // markers at times [0, pos)
    std::uint64_t s = 0;
    for (std::size_t i = pos; i > 0; i -= i & (~i + 1)) s += tree[i];
    return s;
  };
  std::size_t now = 0, live = 0;
  std::uint64_t cold = 0;
  for (const std::uint32_t f : stream) {
    if (now == width) {  // renumber the marked times 0..live-1, keeping their order
      std::size_t t = 0;
      for (std::size_t old = 0; old < width; ++old) {
        const std::uint32_t k = key_at[old];
        if (k == none) continue;
        key_at[old] = none;
        key_at[t] = k;
        last[k] = static_cast<std::uint32_t>(t);
        ++t;
      }
      std::fill(tree.begin(), tree.end(), 0u);
      for (std::size_t i = 1; i <= width; ++i) {  // linear build: the times below t are marked
        if (i <= t) tree[i] += 1;
        const std::size_t up = i + (i & (~i + 1));
        if (up <= width) tree[up] += tree[i];
      }
      now = t;
    }
    if (last[f] == none) {
      ++cold;
      ++live;
    } else {
      // Distinct keys used strictly after the key's last access, plus this one.
      const std::uint64_t d = live - prefix(last[f] + 1) + 1;
      if (d >= histogram.size()) histogram.resize(d + 1, 0);
      ++histogram[d];
      add(last[f], -1);
      key_at[last[f]] = none;
    }
    add(now, +1);
    key_at[now] = f;
    last[f] = static_cast<std::uint32_t>(now);
    ++now;
  }
  return cold;
}

}  // namespace detail

/// The hits of a demand LRU cache of shape `shape` on `accesses`, at every capacity.
///
/// Preconditions: every key lies within `shape`.
/// Throws: `invalid_argument` when `shape` has a dimension of 0 or above 65536.
/// Complexity: O(n log n) time, O(n + slots) memory, for n accesses.
[[nodiscard]] inline hit_curve lru_hit_curve(std::span<const expert_key> accesses, const cache_shape& shape) {
  shape.validate("lru_hit_curve");
  hit_curve out;
  out.accesses = accesses.size();
  std::vector<std::uint64_t> histogram(shape.partition_slots() + 1, 0);
  std::vector<std::uint32_t> stream;
  stream.reserve(accesses.size());
  if (shape.scope == capacity_scope::shared) {
    for (const expert_key& k : accesses) stream.push_back(static_cast<std::uint32_t>(shape.flat(k)));
    out.cold_misses = detail::add_stack_distances(stream, shape.slots(), histogram);
  } else {
    for (std::uint32_t l = 0; l < shape.num_layers; ++l) {
      stream.clear();
      for (const expert_key& k : accesses) {
        if (k.layer == l) stream.push_back(k.expert);
      }
      out.cold_misses += detail::add_stack_distances(stream, shape.num_experts, histogram);
    }
  }
  out.hits.assign(histogram.size(), 0);
  for (std::size_t c = 1; c < histogram.size(); ++c) out.hits[c] = out.hits[c - 1] + histogram[c];
  return out;
}

}  // namespace moepolicy
