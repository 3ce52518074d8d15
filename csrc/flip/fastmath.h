// The transcendental functions of FLIP's per-pixel code: pow, cbrt, x^1.4, x^0.7 and log.
//
// float on the host: our own branch-free versions, written with plain arithmetic, selects and
// integer bit operations, so that GCC vectorises the per-pixel loops that call them (libm's powf
// and cbrtf are opaque calls that kept every loop scalar; they were about half of the CPU time).
// Each is computed in double and rounded to float once, within 1 ulp of the exact value (0.51 ulp
// at most for normal results; each function says how); tests/cpu/test_fastmath.py checks this over
// the ranges FLIP uses and the whole float range, with the standard library's special values. Only
// IEEE +, -, *, / and conversions, never contracted (-ffp-contract=off): scalar and vector code,
// and every CPU instruction-set level, give identical bits. docs/algorithm.md §7.13 says why this
// route (and not SLEEF, Highway or at::vec).
//
// float on GPUs whose double arithmetic runs at half the float rate (sm_80, sm_90: A100, H100,
// H200): x^1.4 and x^0.7 as on the host (FLIP_FASTMATH_ON_DEVICE), about a third of the
// instructions of CUDA's powf, and the CPU's values: the same IEEE operations, since device code
// is compiled with -fmad=false (docs/algorithm.md §9.2). Double, and everything else in device
// code: the standard library (CUDA's own pow/cbrt/log on the GPU).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define FLIP_MATH_HD __host__ __device__ __forceinline__
#define FLIP_MATH_INLINE __host__ __device__ __forceinline__
#define FLIP_MATH_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define FLIP_MATH_HD inline __attribute__((always_inline))
#define FLIP_MATH_INLINE inline __attribute__((always_inline))
#define FLIP_MATH_UNROLL _Pragma("GCC unroll 4")
#else
#define FLIP_MATH_HD inline
#define FLIP_MATH_INLINE inline
#define FLIP_MATH_UNROLL
#endif

// Device code compiled for a GPU with half-rate double arithmetic uses fastmath's x^1.4 and x^0.7
// for float (above); elsewhere double is 1/32 or 1/64 of the float rate and CUDA's powf is cheaper.
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900)
#define FLIP_FASTMATH_ON_DEVICE 1
#else
#define FLIP_FASTMATH_ON_DEVICE 0
#endif

namespace flip {
namespace fastmath {

FLIP_MATH_INLINE uint32_t float_bits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

FLIP_MATH_INLINE float bits_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// log2(x) for a positive finite float (normal or subnormal), in double with relative error below
// 2^-33. x = 2^e m with m in [sqrt(1/2), sqrt(2)); log2(m) = 2/ln(2) atanh(s), s = (m - 1) / (m + 1),
// |s| <= 0.1716, and the series s + s^3/3 + ... + s^11/11 leaves s^13/13 < 5e-11 s.
FLIP_MATH_INLINE double log2_positive(float x) {
  const bool subnormal = x < 1.17549435e-38f;        // FLT_MIN
  const float xs = subnormal ? x * 16777216.0f : x;  // times 2^24: normal
  const uint32_t b = float_bits(xs);
  // The exponent that brings the mantissa into [sqrt(1/2), sqrt(2)): 0x3f3504f3 is sqrt(1/2).
  const int32_t e = static_cast<int32_t>(b - 0x3f3504f3u) >> 23;
  const double m = static_cast<double>(bits_float(b - (static_cast<uint32_t>(e) << 23)));
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  // Estrin's scheme (pairs of terms, then powers of s^4) rather than Horner's: the same series with
  // a shorter chain of dependent operations, which the per-pixel tail waits on.
  const double s4 = s2 * s2;
  const double series =
      ((1.0 + s2 * (1.0 / 3)) + (1.0 / 5 + s2 * (1.0 / 7)) * s4) + (1.0 / 9 + s2 * (1.0 / 11)) * (s4 * s4);
  constexpr double kTwoOverLn2 = 2.8853900817779268147;  // 2 / ln(2)
  return static_cast<double>(e - (subnormal ? 24 : 0)) + kTwoOverLn2 * s * series;
}

// 2^y rounded to float, for a finite double y (clamped to +-300, beyond which the float result
// is 0 or infinity anyway). y = n + f with n integer and |f| <= 1/2; 2^f = e^t, t = f ln(2),
// |t| <= 0.3466, from its Taylor series to t^8 (remainder < 2^-32).
FLIP_MATH_INLINE float exp2_to_float(double y) {
  // Written so that a NaN y (from pow(x, NaN) or inf * 0; its result is replaced by the caller's
  // special cases) also becomes -300: converting a NaN to an integer would be undefined.
  y = y >= -300.0 ? (y <= 300.0 ? y : 300.0) : -300.0;
  constexpr double kRound = 6755399441055744.0;  // 1.5 * 2^52: adding it rounds to an integer
  const double n = (y + kRound) - kRound;
  constexpr double kLn2 = 0.69314718055994530942;
  const double t = (y - n) * kLn2;
  const double t2 = t * t, t4 = t2 * t2;  // Estrin's scheme, as in log2_positive
  const double p = ((1.0 + t) + (1.0 / 2 + t * (1.0 / 6)) * t2) +
                   (((1.0 / 24 + t * (1.0 / 120)) + (1.0 / 720 + t * (1.0 / 5040)) * t2) + (1.0 / 40320) * t4) * t4;
  // Scale by 2^n in two exact steps of at most 2^127 each (n in [-300, 300], clamped to
  // [-252, 254] where the float is already 0 or infinite), so each factor is a normal float.
  int32_t ni = static_cast<int32_t>(n);
  ni = ni < -252 ? -252 : (ni > 254 ? 254 : ni);
  const int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = bits_float(static_cast<uint32_t>(n1 + 127) << 23);
  const float s2 = bits_float(static_cast<uint32_t>(n2 + 127) << 23);
  return static_cast<float>(p) * s1 * s2;
}

// x^(-1/N) (N = 3, 5 or 10) to about float precision, for a float x in [2^-125, 2^128) (cbrt and
// x^0.7 scale subnormals up, x^1.4 replaces them): Newton's iteration y <- y (N + 1 - x y^N) / N
// from a guess read off the float's bits (relative error below 3.5% for N = 3, 4% for N = 5 and
// 3% for N = 10 over every normal float), in float, which has twice the vector lanes of double.
// Done exactly, a step takes an error e to -(N + 1)/2 e^2 (1 + O(e)); done in float, its roundings
// add at most 4.2 * 2^-24 = 2.5e-7 (those in x y^N and in the subtraction reach y divided by about
// N; measured 3.6 * 2^-24). So the error squares as in double until it nears that floor: 3.5% ->
// 2.4e-3 -> 1.2e-5 after two steps for N = 3, 4% -> 4.9e-3 -> 7.1e-5 -> 2.7e-7 after three for
// N = 5, 3% -> 5.3e-3 -> 1.5e-4 -> 2.5e-7 after three for N = 10 (measured over every 101st normal
// float); the callers finish in double (inverse_root_correction). x y^N is formed as (x y) y^2,
// (x y) (y^2)^2 or ((x y) y) (y^4)^2, every factor between x^((N - 1)/N) and x^(-(N - 1)/N) and so
// a normal float, where y^N alone falls into the subnormals (losing bits) for x above about
// 2^126. Any other x (0, infinity, NaN, negative) gives some value, without undefined behaviour,
// for the caller to replace.
template <int N>
FLIP_MATH_INLINE float inverse_root(float x) {
  static_assert(N == 3 || N == 5 || N == 10, "guess constants for N = 3, 5 and 10 only");
  constexpr uint32_t kGuess = N == 3 ? 0x54a23354u : (N == 5 ? 0x4c2d18b3u : 0x45d2f14au);
  // bits / N through float arithmetic: vector integer division has no instruction, and the guess
  // needs no exact quotient (every step of it is covered by the error bounds above). Every bit
  // pattern, read as int32, divided by N fits int32 again.
  const int32_t quotient = static_cast<int32_t>(static_cast<float>(static_cast<int32_t>(float_bits(x))) * (1.0f / N));
  float y = bits_float(kGuess - static_cast<uint32_t>(quotient));
  FLIP_MATH_UNROLL
  for (int step = 0; step < (N == 3 ? 2 : 3); ++step) {
    const float xy = x * y, y2 = y * y;
    const float y4 = y2 * y2;
    const float xyn = N == 3 ? xy * y2 : (N == 5 ? xy * y4 : (xy * y) * (y4 * y4));
    y = y * ((N + 1) - xyn) * (1.0f / N);
  }
  return y;
}

// x^A y^K (x y^N)^(-K/N) = x^(A - K/N) in double, given p = x^A y^K and x y^N for y from
// inverse_root<N>(x): the last step, folded into the power the callers want. With the relative
// error e of y, d = 1 - x y^N = 1 - (1 + e)^N is small (|d| <= 3.6e-5 for N = 3, 1.4e-6 for
// N = 5, 2.5e-6 for N = 10), and (x y^N)^(-q) = (1 - d)^(-q), q = K/N, is its binomial series to
// d^2, leaving q (q + 1) (q + 2)/6 |d|^3: below 2.2e-14 for cbrt, 2e-18 for x^1.4 and 3e-18 for
// x^0.7. 1 - x y^N is exact, and
// the callers form p and x y^N within two double roundings, so the result is within 2.3e-14 of
// exact; rounded to float once, it is the correctly rounded float unless the exact value lies
// within 4e-7 ulp of a midpoint between two floats.
template <int K, int N>
FLIP_MATH_INLINE double inverse_root_correction(double p, double xyn) {
  constexpr double q = static_cast<double>(K) / N;
  const double d = 1.0 - xyn;
  return p + p * d * (q + d * (q * (q + 1) / 2));
}

// The special cases are applied one float select at a time (no && or || between conditions), a
// form the vectoriser accepts.

// x^y for float x >= 0, with std::pow's special values: x^0 = 1 and 1^y = 1 (even for NaN),
// 0^y = 0 for y > 0 and inf for y < 0, inf^y = inf for y > 0 and 0 for y < 0; other NaNs stay NaN,
// and a negative x gives NaN (FLIP never passes one). 2^(y log2 x) from log2_positive and
// exp2_to_float: within 0.51 ulp for normal results; subnormal ones are rounded twice (up to 0.78
// ulp), and one at the very top of the float range may give FLT_MAX where the exact value rounds to
// infinity. About 4 times the cost of cbrt, x^1.4 and x^0.7 (inverse_root), which need no double
// logarithm or exponential.
FLIP_MATH_INLINE float pow(float x, float y) {
  const float regular = x > 0.0f ? (x < INFINITY ? x : 1.0f) : 1.0f;
  float r = exp2_to_float(static_cast<double>(y) * log2_positive(regular));
  r = x == 0.0f ? (y > 0.0f ? 0.0f : INFINITY) : r;
  r = x == INFINITY ? (y > 0.0f ? INFINITY : 0.0f) : r;
  r = x < 0.0f ? NAN : r;
  r = x != x ? x : r;
  r = y != y ? y : r;
  r = y == 0.0f ? 1.0f : r;
  return x == 1.0f ? 1.0f : r;
}

// Cube root of any float (odd: cbrt(-x) = -cbrt(x); 0, infinities and NaN pass through):
// x y^2 for y = x^(-1/3), subnormals scaled by 2^24 first (and the root by 2^-8, exactly: it is a
// normal float).
FLIP_MATH_INLINE float cbrt(float x) {
  const float a = std::fabs(x);
  const bool subnormal = a < 1.17549435e-38f;
  const float as = subnormal ? a * 16777216.0f : a;
  const double y = inverse_root<3>(as), asd = as;
  const double c = asd * (y * y);  // y * y is exact in double
  float r = static_cast<float>(inverse_root_correction<2, 3>(c, c * y)) * (subnormal ? 0.00390625f : 1.0f);
  r = a == INFINITY ? INFINITY : r;
  r = x < 0.0f ? -r : r;
  return x == 0.0f ? x : (x != x ? x : r);  // keeps the sign of -0 and passes NaN
}

// x^1.4 = x^(7/5) for float x >= 0 (the sRGB decoding's power): x^2 z^3 for z = x^(-1/5).
// 0 and subnormal x give 0 (x^1.4 < 2^-176 rounds to 0; no scaling needed), inf -> inf, NaN and
// negatives -> NaN.
FLIP_MATH_INLINE float pow_seven_fifths(float x) {
  const double z = inverse_root<5>(x), xd = x;
  const double xz = xd * z, z2 = z * z;  // both exact in double
  float r = static_cast<float>(inverse_root_correction<3, 5>(xz * xz * z, xz * (z2 * z2)));
  r = x < 1.17549435e-38f ? 0.0f : r;
  r = x == INFINITY ? INFINITY : r;
  r = x < 0.0f ? NAN : r;
  return x != x ? x : r;
}

// x^0.7 = x^(7/10) for float x >= 0 (HyAB's exponent qc): x z^3 for z = x^(-1/10), subnormals
// scaled by 2^30 first (and the power by 2^-21, exactly: x^0.7 of a subnormal is a normal float).
// 0 -> 0, inf -> inf, NaN and negatives -> NaN. Unlike pow(x, 0.7f), whose exponent is the float
// nearest 0.7 (0.699999988), this is x to exactly 7/10.
FLIP_MATH_INLINE float pow_seven_tenths(float x) {
  const bool subnormal = x < 1.17549435e-38f;
  const float xs = subnormal ? x * 1073741824.0f : x;  // times 2^30
  const double z = inverse_root<10>(xs), xd = xs;
  const double xz = xd * z, z2 = z * z;  // both exact in double
  const double z4 = z2 * z2;
  float r = static_cast<float>(inverse_root_correction<3, 10>(xz * z2, (xz * z) * (z4 * z4))) *
            (subnormal ? 4.76837158203125e-07f : 1.0f);  // 2^-21
  r = x == 0.0f ? 0.0f : r;
  r = x == INFINITY ? INFINITY : r;
  r = x < 0.0f ? NAN : r;
  return x != x ? x : r;
}

// Natural logarithm of float x (log(0) = -inf, negative x and NaN give NaN, log(inf) = inf).
FLIP_MATH_INLINE float log(float x) {
  const float regular = x > 0.0f ? (x < INFINITY ? x : 1.0f) : 1.0f;
  constexpr double kLn2 = 0.69314718055994530942;
  float r = static_cast<float>(log2_positive(regular) * kLn2);
  r = x == 0.0f ? -INFINITY : r;
  r = x == INFINITY ? INFINITY : r;
  r = x < 0.0f ? NAN : r;
  return x != x ? x : r;
}

}  // namespace fastmath

// The functions FLIP's per-pixel code calls: fastmath's for float on the host (and x^1.4, x^0.7 on
// the GPUs above), else the standard library's (double everywhere, the rest of CUDA device code).
namespace math {

template <class T>
FLIP_MATH_HD T pow(T x, T y) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same<T, float>::value) return fastmath::pow(x, y);
#endif
  return std::pow(x, y);
}

template <class T>
FLIP_MATH_HD T cbrt(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same<T, float>::value) return fastmath::cbrt(x);
#endif
  return std::cbrt(x);
}

// x^1.4 (x >= 0), the power of the sRGB decoding.
template <class T>
FLIP_MATH_HD T pow_seven_fifths(T x) {
#if !defined(__CUDA_ARCH__) || FLIP_FASTMATH_ON_DEVICE
  if constexpr (std::is_same<T, float>::value) return fastmath::pow_seven_fifths(x);
#endif
  return std::pow(x, T(1.4));
}

// x^0.7 (x >= 0), HyAB's exponent.
template <class T>
FLIP_MATH_HD T pow_seven_tenths(T x) {
#if !defined(__CUDA_ARCH__) || FLIP_FASTMATH_ON_DEVICE
  if constexpr (std::is_same<T, float>::value) return fastmath::pow_seven_tenths(x);
#endif
  return std::pow(x, T(0.7));
}

template <class T>
FLIP_MATH_HD T log(T x) {
#if !defined(__CUDA_ARCH__)
  if constexpr (std::is_same<T, float>::value) return fastmath::log(x);
#endif
  return std::log(x);
}

}  // namespace math
}  // namespace flip
