// The sRGB decoding of 8-bit images from a table. Images read from PNG or JPEG files reach the
// kernels as code values k / 255 (k = 0..255, each rounded once: what uint8 / 255 gives in torch and
// NumPy), or as the uint8 codes themselves (ldr_flip takes them), and decoding them costs a power
// per sample, about a tenth of a forward per image. A row whose samples are all such values is
// decoded from a table of the 256 values input_to_linear gives for them: the same function on the
// same inputs, so the same bits, and every other row takes the power. Which rows are which is
// decided row by row, so an image of mixed rows is still exact; uint8 codes always use the table.
#pragma once

#include <cstdint>

#include "../color.h"

namespace flip {
namespace cpu {

template <class T>
struct EightBitSrgb {
  T linear[256];  // input_to_linear(k / 255, sRGB)
  T slope[256];   // its derivative there
  EightBitSrgb() {
    for (int k = 0; k < 256; ++k) linear[k] = input_to_linear(T(k) / T(255), true, &slope[k]);
  }
};

// One table per type, built on first use (thread-safe: a function-local static).
template <class T>
const EightBitSrgb<T>& eight_bit_srgb() {
  static const EightBitSrgb<T> table;
  return table;
}

// The k of v's code value k / 255 if v is one: v * 255 rounded to the nearest integer after clamping
// to [0, 255] (NaN -> 0), so that it indexes the table for any v.
template <class T>
FLIP_HD int eight_bit_code(T v) {
  T s = v * T(255);
  s = s > T(0) ? s : T(0);
  s = s < T(255) ? s : T(255);
  return static_cast<int>(s + T(0.5));
}

// Whether the first n samples of each channel of an input row (3 channels HW apart) are code
// values k / 255: a cheap test that turns most rows of other images away before the table is tried.
template <class T>
__attribute__((noinline)) bool starts_on_eight_bit_codes(const T* __restrict src, int64_t HW, int64_t n) {
  int off = 0;
  for (int c = 0; c < 3; ++c) {
    const T* __restrict row = src + c * HW;
    for (int64_t x = 0; x < n; ++x) off |= row[x] != T(eight_bit_code(row[x])) / T(255);
  }
  return off == 0;
}

// convert_row's conversion (pipeline.h) from the table: a pixel's linear RGB, and whether a sample
// is not a code value (convert_row then refuses the row, its outputs incomplete).
template <class T>
struct EightBitSrgbInput {
  const EightBitSrgb<T>& table;
  int operator()(const T v[3], T lin[3]) const {
    int off = 0;
    FLIP_UNROLL
    for (int c = 0; c < 3; ++c) {
      const int k = eight_bit_code(v[c]);
      off |= v[c] != T(k) / T(255);
      lin[c] = table.linear[k];
    }
    return off;
  }
};

// input_row_vjp's slope (ldr_flip.inc) from the table: the derivative at a sample, and whether the
// sample is not a code value.
template <class T>
struct EightBitSrgbSlope {
  const EightBitSrgb<T>& table;
  int operator()(T v, T& d) const {
    const int k = eight_bit_code(v);
    d = table.slope[k];
    return v != T(k) / T(255);
  }
};

// convert_row's conversion of images stored as 8-bit codes (uint8 samples k, the values k / 255):
// from the table for sRGB input, k / 255 for linear input. The same values those codes give as
// floating-point samples (input_to_linear of T(k) / T(255)), so the same bits, with a quarter of
// the bytes to read and no test of each sample.
template <class T, bool kSrgb>
struct EightBitCodes {
  const EightBitSrgb<T>& table;  // read for sRGB input only
  int operator()(const uint8_t k[3], T lin[3]) const {
    FLIP_UNROLL
    for (int c = 0; c < 3; ++c) lin[c] = kSrgb ? table.linear[k[c]] : T(k[c]) / T(255);
    return 0;
  }
};

// Rows that start with code values are tried on the table; this many samples per channel decide.
constexpr int64_t kEightBitProbe = 16;

}  // namespace cpu
}  // namespace flip
