// The walk that pools an error map (flip_loss/pooling.py): NVIDIA's evaluator sorts the map's
// values, accumulates them one after another in the map's float type, and reports the first value
// whose running sum passes a fraction of the map's total, itself accumulated one value after
// another in row-major order. pooling_order computes the sorted values, their running sums and
// that total in a few sweeps: a least-significant-digit radix sort of keys made from the floats'
// bits, a few times faster than a comparison sort on a 1080p map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <utility>

namespace flip::cpu {

// An unsigned key that orders as its float does, NaN aside: a float >= +0 gets its sign bit set,
// a negative one (-0 included) all its bits flipped, so -0 comes just before +0.
template <class Bits>
constexpr Bits order_key(Bits bits) {
  constexpr Bits kSign = Bits(1) << (8 * sizeof(Bits) - 1);
  return (bits & kSign) ? Bits(~bits) : Bits(bits | kSign);
}

template <class Bits>
constexpr Bits float_bits_of_key(Bits key) {
  constexpr Bits kSign = Bits(1) << (8 * sizeof(Bits) - 1);
  return (key & kSign) ? Bits(key & ~kSign) : Bits(~key);
}

// Writes the `count` values at `in` into `sorted` in ascending order and their running sums in
// that order into `running`; returns the sum of `in` in its own order. Both sums are accumulated
// one value after another in Float. The three buffers may not overlap.
template <class Float>
Float pooling_order(const Float* in, Float* sorted, Float* running, std::size_t count) {
  static_assert(std::is_floating_point_v<Float> && (sizeof(Float) == 4 || sizeof(Float) == 8));
  using Bits = std::conditional_t<sizeof(Float) == 4, std::uint32_t, std::uint64_t>;
  // 8-bit digits: 4 passes for a float, 8 for a double. A pass scatters into 256 places at once,
  // whose cache lines stay in the L1 cache; 11-bit digits (3 passes) took 1.6x as long on a 1080p map.
  constexpr int kDigitBits = 8;
  constexpr std::size_t kBuckets = std::size_t(1) << kDigitBits;
  constexpr int kPasses = (8 * sizeof(Bits) + kDigitBits - 1) / kDigitBits;
  Float total = 0;
  if (count == 0) return total;

  // The keys move between `sorted` and `running` (a float and its key have one size), pass by
  // pass; the last sweep turns them back into floats in `sorted` and sums them into `running`.
  Bits* const keys = reinterpret_cast<Bits*>(sorted);
  Bits* const spare = reinterpret_cast<Bits*>(running);
  std::unique_ptr<std::size_t[]> counts(new std::size_t[kPasses * kBuckets]());
  for (std::size_t i = 0; i < count; ++i) {
    total += in[i];
    Bits bits;
    std::memcpy(&bits, in + i, sizeof(Bits));
    const Bits key = order_key(bits);
    keys[i] = key;
    for (int pass = 0; pass < kPasses; ++pass)
      ++counts[pass * kBuckets + ((key >> (pass * kDigitBits)) & (kBuckets - 1))];
  }

  Bits* from = keys;
  Bits* to = spare;
  for (int pass = 0; pass < kPasses; ++pass) {
    std::size_t* bucket = counts.get() + pass * kBuckets;
    const int shift = pass * kDigitBits;
    if (bucket[(from[0] >> shift) & (kBuckets - 1)] == count) continue;  // one digit for all: order kept
    std::size_t start = 0;                                               // each bucket's first slot
    for (std::size_t b = 0; b < kBuckets; ++b) start += std::exchange(bucket[b], start);
    for (std::size_t i = 0; i < count; ++i) to[bucket[(from[i] >> shift) & (kBuckets - 1)]++] = from[i];
    std::swap(from, to);
  }
  Float sum = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Bits bits = float_bits_of_key(from[i]);  // read before `running` (maybe `from`) is written
    Float value;
    std::memcpy(&value, &bits, sizeof(Bits));
    keys[i] = bits;
    sum += value;
    std::memcpy(running + i, &sum, sizeof(Float));
  }
  return total;
}

}  // namespace flip::cpu
