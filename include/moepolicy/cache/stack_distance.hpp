// moepolicy/cache/stack_distance.hpp — the LRU hit ratio at every capacity in one pass
// (Mattson, Gecsei, Slutz, Traiger, "Evaluation techniques for storage hierarchies",
// IBM Systems Journal 9(2), 1970).
//
// LRU is a stack algorithm: a cache of c experts holds exactly the c most recently used,
// so an access hits at capacity c iff its stack distance — the number of distinct experts
// used since the previous access to the same expert, itself included — is at most c. One
// pass computing every access's stack distance (bits over access positions mark the latest
// access of each expert, counted by popcounts and a Fenwick tree; O(log n) per access)
// gives the hit count at every capacity at once. With per-layer pools each layer's accesses form their own stack.
//
// Valid for a demand LRU cache counted in experts (`lru_policy` in an `expert_cache` of
// unit `experts`), as the tests check against replays at every capacity; not for bytes
// with unequal sizes, admission, or prefetching, which break the stack property.
#pragma once

#include <algorithm>
#include <bit>
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

/// The stack distances of a stream of dense keys below `slots`, fed one access at a time
/// into `histogram[d]` (grown as needed); first accesses are counted apart.
///
/// A bit marks the time of the last access of every key seen; the distance of an access is
/// the number of keys marked since its key's last access, plus one. The marks are counted
/// by a popcount within a 64-bit word and a Fenwick tree over the words' counts (O(log
/// (slots / 64)) per access). Times are renumbered 0, 1, … in order whenever they reach the
/// width (four times the keys, rounded up to a word, at least 256), so the bits, the tree
/// and the tables hold O(slots) entries — they stay in cache, and a stream of any length
/// costs no memory beyond them.
class stack_distance_counter {
 public:
  explicit stack_distance_counter(std::size_t slots)
      : width_(std::max<std::size_t>(256, (4 * slots + 63) / 64 * 64)),
        bits_(width_ / 64, 0),
        tree_(width_ / 64 + 1, 0),
        last_(slots, none),
        key_at_(width_, none) {}

  /// Adds the access to key `f` (< slots) to `histogram`.
  void push(std::uint32_t f, std::vector<std::uint64_t>& histogram) {
    if (now_ == width_) renumber();
    if (last_[f] == none) {
      ++cold_;
      ++live_;
    } else {
      // Distinct keys used strictly after the key's last access, plus this one.
      const std::uint64_t d = live_ - prefix(last_[f] + 1) + 1;
      if (d >= histogram.size()) histogram.resize(d + 1, 0);
      ++histogram[d];
      unmark(last_[f]);
      key_at_[last_[f]] = none;
    }
    mark(now_);
    key_at_[now_] = f;
    last_[f] = static_cast<std::uint32_t>(now_);
    ++now_;
  }

  /// First accesses so far.
  [[nodiscard]] std::uint64_t cold() const noexcept { return cold_; }

 private:
  static constexpr std::uint32_t none = static_cast<std::uint32_t>(-1);

  void mark(std::size_t pos) noexcept {
    bits_[pos / 64] |= std::uint64_t{1} << (pos % 64);
    add_word(pos / 64, +1);
  }
  void unmark(std::size_t pos) noexcept {
    bits_[pos / 64] &= ~(std::uint64_t{1} << (pos % 64));
    add_word(pos / 64, -1);
  }
  void add_word(std::size_t word, int delta) noexcept {
    for (std::size_t i = word + 1; i < tree_.size(); i += i & (~i + 1)) {
      tree_[i] = static_cast<std::uint32_t>(static_cast<int>(tree_[i]) + delta);
    }
  }
  [[nodiscard]] std::uint64_t prefix(std::size_t pos) const noexcept {  // marks at times [0, pos)
    const std::size_t word = pos / 64;
    std::uint64_t s = 0;
    for (std::size_t i = word; i > 0; i -= i & (~i + 1)) s += tree_[i];
    if (pos % 64 != 0)
      s += static_cast<std::uint64_t>(std::popcount(bits_[word] & ((std::uint64_t{1} << (pos % 64)) - 1)));
    return s;
  }
  void renumber() noexcept {  // the marked times become 0..live-1, keeping their order
    std::size_t t = 0;
    for (std::size_t old = 0; old < width_; ++old) {
      const std::uint32_t k = key_at_[old];
      if (k == none) continue;
      key_at_[old] = none;
      key_at_[t] = k;
      last_[k] = static_cast<std::uint32_t>(t);
      ++t;
    }
    std::fill(bits_.begin(), bits_.end(), std::uint64_t{0});
    for (std::size_t w = 0; w * 64 < t; ++w)
      bits_[w] = t - w * 64 >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << (t - w * 64)) - 1;
    std::fill(tree_.begin(), tree_.end(), 0u);
    for (std::size_t i = 1; i < tree_.size(); ++i) {  // linear build from the words' counts
      tree_[i] += static_cast<std::uint32_t>(std::popcount(bits_[i - 1]));
      const std::size_t up = i + (i & (~i + 1));
      if (up < tree_.size()) tree_[up] += tree_[i];
    }
    now_ = t;
  }

  std::size_t width_;
  std::vector<std::uint64_t> bits_;    // one bit per time: the last access of a key
  std::vector<std::uint32_t> tree_;    // Fenwick tree over the words' counts, 1..width/64
  std::vector<std::uint32_t> last_;    // time of each key's last access
  std::vector<std::uint32_t> key_at_;  // the key marked at each time
  std::size_t now_ = 0, live_ = 0;
  std::uint64_t cold_ = 0;
};

/// Adds the stack distances of `stream` (dense indices below `slots`) to `histogram[d]`;
/// returns the number of first accesses (see `stack_distance_counter`).
inline std::uint64_t add_stack_distances(std::span<const std::uint32_t> stream, std::size_t slots,
                                         std::vector<std::uint64_t>& histogram) {
  stack_distance_counter counter(slots);
  for (const std::uint32_t f : stream) counter.push(f, histogram);
  return counter.cold();
}

}  // namespace detail

/// The LRU hit curve of an access sequence fed one access at a time, in memory bounded by
/// the cache's shape (not the sequence's length): `add` every access in order, then
/// `curve`. With per-layer pools each layer keeps its own stack.
class lru_curve_builder {
 public:
  /// Throws: `invalid_argument` when `shape` has a dimension of 0 or above 65536.
  explicit lru_curve_builder(const cache_shape& shape) : shape_((shape.validate("lru_hit_curve"), shape)) {
    histogram_.assign(shape_.partition_slots() + 1, 0);
    if (shape_.scope == capacity_scope::shared) {
      counters_.emplace_back(shape_.slots());
    } else {
      counters_.assign(shape_.num_layers, detail::stack_distance_counter(shape_.num_experts));
    }
  }

  /// Adds the next access. Preconditions: `k` lies within the shape.
  void add(expert_key k) {
    ++accesses_;
    if (shape_.scope == capacity_scope::shared) {
      counters_.front().push(static_cast<std::uint32_t>(shape_.flat(k)), histogram_);
    } else {
      counters_[k.layer].push(k.expert, histogram_);
    }
  }

  /// The hits at every capacity of the accesses added so far.
  [[nodiscard]] hit_curve curve() const {
    hit_curve out;
    out.accesses = accesses_;
    for (const auto& c : counters_) out.cold_misses += c.cold();
    out.hits.assign(histogram_.size(), 0);
    for (std::size_t c = 1; c < histogram_.size(); ++c) out.hits[c] = out.hits[c - 1] + histogram_[c];
    return out;
  }

 private:
  cache_shape shape_;
  std::vector<detail::stack_distance_counter> counters_;
  std::vector<std::uint64_t> histogram_;
  std::uint64_t accesses_ = 0;
};

/// The hits of a demand LRU cache of shape `shape` on `accesses`, at every capacity.
///
/// Preconditions: every key lies within `shape`.
/// Throws: `invalid_argument` when `shape` has a dimension of 0 or above 65536.
/// Complexity: O(n log slots) time, O(slots) memory, for n accesses.
[[nodiscard]] inline hit_curve lru_hit_curve(std::span<const expert_key> accesses, const cache_shape& shape) {
  lru_curve_builder b(shape);
  for (const expert_key& k : accesses) b.add(k);
  return b.curve();
}

}  // namespace moepolicy
