// Accuracy of csrc/flip/fastmath.h, the float pow / cbrt / x^1.4 / x^0.7 / log of the CPU kernels, against
// long double: every STRIDE-th float of the ranges FLIP feeds them, a sweep of the whole positive
// float range, random (base, exponent) pairs, and the special values (0, -0, subnormals,
// infinities, NaN), which must match the standard library's. Also checks that a loop the compiler
// vectorises gives the same bits as one it may not.
//
// Built and run by tests/cpu/test_fastmath.py; prints one line per check, "name worst_ulp count", and
// "special name ok|FAIL detail" lines.
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "flip/fastmath.h"

namespace {

using flip::fastmath::bits_float;
using flip::fastmath::float_bits;

// |got - exact| in units of the float spacing at the exact value (0 when got is its rounding;
// infinite when got is NaN, or infinite where the exact value rounds to a finite float, or finite
// where it overflows).
double ulp_error(float got, long double exact) {
  const float rounded = static_cast<float>(exact);
  if (rounded == got) return 0.0;
  if (!std::isfinite(got) || !std::isfinite(rounded)) return INFINITY;
  const float a = std::fabs(rounded);
  const long double spacing = static_cast<long double>(std::nextafter(a, INFINITY)) - a;
  return static_cast<double>(std::fabs(static_cast<long double>(got) - exact) / spacing);
}

struct Worst {
  const char* name;
  double ulp = 0;
  long count = 0;
  float at = 0;
  void add(float x, double e) {
    ++count;
    if (e > ulp) {
      ulp = e;
      at = x;
    }
  }
  void print() const { std::printf("%s %.4f %ld %.9g\n", name, ulp, count, static_cast<double>(at)); }
};

// Every stride-th float in [lo, hi].
template <class Fn>
void sweep(float lo, float hi, uint32_t stride, Fn fn) {
  for (uint32_t b = float_bits(lo); b <= float_bits(hi); b += stride) fn(bits_float(b));
}

bool same_float(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}

int failures = 0;

void special(const char* name, float got, float want) {
  const bool ok = same_float(got, want);
  if (!ok) ++failures;
  std::printf("special %s %s got=%.9g want=%.9g\n", name, ok ? "ok" : "FAIL", static_cast<double>(got),
              static_cast<double>(want));
}

__attribute__((noinline)) void cbrt_loop(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::cbrt(x[i]);
}
__attribute__((noinline, optimize("no-tree-vectorize"))) void cbrt_scalar(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::cbrt(x[i]);
}
__attribute__((noinline)) void pow_loop(const float* x, const float* y, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::pow(x[i], y[i]);
}
__attribute__((noinline, optimize("no-tree-vectorize"))) void pow_scalar(const float* x, const float* y, float* out,
                                                                         int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::pow(x[i], y[i]);
}
__attribute__((noinline)) void seven_fifths_loop(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::pow_seven_fifths(x[i]);
}
__attribute__((noinline, optimize("no-tree-vectorize"))) void seven_fifths_scalar(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::pow_seven_fifths(x[i]);
}

__attribute__((noinline)) void seven_tenths_loop(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::pow_seven_tenths(x[i]);
}
__attribute__((noinline, optimize("no-tree-vectorize"))) void seven_tenths_scalar(const float* x, float* out, int n) {
  for (int i = 0; i < n; ++i) out[i] = flip::fastmath::pow_seven_tenths(x[i]);
}

}  // namespace

int main(int argc, char** argv) {
  const uint32_t stride = argc > 1 ? static_cast<uint32_t>(std::atol(argv[1])) : 61;
  namespace fm = flip::fastmath;

  // The ranges FLIP uses: Lab's cube root of t >= 216/24389 (clamped RGB gives t up to ~1.09),
  // the sRGB decoding's u^1.4 for u = (c + 0.055) / 1.055 in [0.09, 1], HyAB's dE^0.7 (dE up to
  // ~310; pow_seven_tenths, and the general pow with the float exponent 0.7f), the final
  // c^(1 - f) and its log for c, f in [0, 1].
  Worst cbrt_flip{"cbrt_flip_range"}, cbrt_all{"cbrt_all_floats"};
  sweep(0.008f, 1.2f, stride, [&](float x) { cbrt_flip.add(x, ulp_error(fm::cbrt(x), cbrtl(x))); });
  sweep(1e-45f, 3.4e38f, stride * 97, [&](float x) { cbrt_all.add(x, ulp_error(fm::cbrt(x), cbrtl(x))); });
  Worst s75_flip{"pow_seven_fifths_flip_range"}, s75_all{"pow_seven_fifths_all_floats"};
  sweep(0.05f, 1.0f, stride, [&](float x) { s75_flip.add(x, ulp_error(fm::pow_seven_fifths(x), powl(x, 1.4L))); });
  // Up to FLT_MAX: above 2.6e27, x^1.4 overflows to infinity.
  sweep(1e-45f, 3.4e38f, stride * 97,
        [&](float x) { s75_all.add(x, ulp_error(fm::pow_seven_fifths(x), powl(x, 1.4L))); });
  Worst s710_flip{"pow_seven_tenths_hyab_range"}, s710_all{"pow_seven_tenths_all_floats"};
  sweep(1e-8f, 400.0f, stride, [&](float x) { s710_flip.add(x, ulp_error(fm::pow_seven_tenths(x), powl(x, 0.7L))); });
  sweep(1e-45f, 3.4e38f, stride * 97,
        [&](float x) { s710_all.add(x, ulp_error(fm::pow_seven_tenths(x), powl(x, 0.7L))); });
  Worst pow07{"pow_0.7_hyab_range"}, pow_cf{"pow_random_unit_pairs"}, pow_wide{"pow_random_wide_pairs"};
  const float qc = 0.7f;
  sweep(1e-8f, 400.0f, stride, [&](float x) { pow07.add(x, ulp_error(fm::pow(x, qc), powl(x, (long double)qc))); });
  uint64_t state = 12345;
  auto next_unit = [&]() {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<float>(state >> 40) * (1.0f / 16777216.0f);
  };
  for (int i = 0; i < 1000000; ++i) {
    const float c = next_unit(), e = next_unit();
    pow_cf.add(c, ulp_error(fm::pow(c, e), powl(c, (long double)e)));
    // Bases from 2^-40 to 2^40, exponents in [-3, 3], results kept within the normal range.
    const float x = std::ldexp(1.0f + next_unit(), static_cast<int>(next_unit() * 80) - 40);
    const float y = 6.0f * next_unit() - 3.0f;
    pow_wide.add(x, ulp_error(fm::pow(x, y), powl(x, (long double)y)));
  }
  Worst log_unit{"log_unit_range"}, log_all{"log_all_floats"};
  sweep(1e-6f, 1.0f, stride, [&](float x) { log_unit.add(x, ulp_error(fm::log(x), logl(x))); });
  sweep(1e-45f, 3.4e38f, stride * 97, [&](float x) {
    if (x != 1.0f) log_all.add(x, ulp_error(fm::log(x), logl(x)));
  });
  for (const Worst* w : {&cbrt_flip, &cbrt_all, &s75_flip, &s75_all, &s710_flip, &s710_all, &pow07, &pow_cf, &pow_wide,
                         &log_unit, &log_all})
    w->print();

  // Special values, as the standard library gives them.
  const float inf = INFINITY, nan = NAN, tiny = 1e-45f;
  special("cbrt(0)", fm::cbrt(0.0f), std::cbrt(0.0f));
  special("cbrt(-0)", fm::cbrt(-0.0f), std::cbrt(-0.0f));
  special("cbrt(-27)", fm::cbrt(-27.0f), std::cbrt(-27.0f));
  special("cbrt(inf)", fm::cbrt(inf), std::cbrt(inf));
  special("cbrt(-inf)", fm::cbrt(-inf), std::cbrt(-inf));
  special("cbrt(nan)", fm::cbrt(nan), std::cbrt(nan));
  special("cbrt(1)", fm::cbrt(1.0f), 1.0f);
  special("cbrt(8)", fm::cbrt(8.0f), 2.0f);
  special("cbrt(subnormal)", fm::cbrt(tiny), static_cast<float>(cbrtl(tiny)));
  // The ends of the float range, where y^3 or y^5 of the inner iteration would leave the normal range.
  special("cbrt(FLT_MAX)", fm::cbrt(FLT_MAX), static_cast<float>(cbrtl(FLT_MAX)));
  special("cbrt(-FLT_MAX)", fm::cbrt(-FLT_MAX), static_cast<float>(cbrtl(-FLT_MAX)));
  special("cbrt(FLT_MIN)", fm::cbrt(FLT_MIN), static_cast<float>(cbrtl(FLT_MIN)));
  special("pow(0,0.7)", fm::pow(0.0f, 0.7f), std::pow(0.0f, 0.7f));
  special("pow(0,0)", fm::pow(0.0f, 0.0f), std::pow(0.0f, 0.0f));
  special("pow(0,-1)", fm::pow(0.0f, -1.0f), std::pow(0.0f, -1.0f));
  special("pow(1,nan)", fm::pow(1.0f, nan), std::pow(1.0f, nan));
  special("pow(nan,0)", fm::pow(nan, 0.0f), std::pow(nan, 0.0f));
  special("pow(nan,0.5)", fm::pow(nan, 0.5f), std::pow(nan, 0.5f));
  special("pow(0.5,nan)", fm::pow(0.5f, nan), std::pow(0.5f, nan));
  special("pow(inf,0.7)", fm::pow(inf, 0.7f), std::pow(inf, 0.7f));
  special("pow(inf,-0.7)", fm::pow(inf, -0.7f), std::pow(inf, -0.7f));
  special("pow(-2,0.5)", fm::pow(-2.0f, 0.5f), std::pow(-2.0f, 0.5f));
  special("pow(2,200)", fm::pow(2.0f, 200.0f), std::pow(2.0f, 200.0f));
  special("pow(2,-200)", fm::pow(2.0f, -200.0f), std::pow(2.0f, -200.0f));
  special("pow(subnormal,0.5)", fm::pow(tiny, 0.5f), static_cast<float>(powl(tiny, 0.5L)));
  special("pow(0.25,0.5)", fm::pow(0.25f, 0.5f), 0.5f);
  special("pow_seven_fifths(0)", fm::pow_seven_fifths(0.0f), 0.0f);
  special("pow_seven_fifths(1)", fm::pow_seven_fifths(1.0f), 1.0f);
  special("pow_seven_fifths(inf)", fm::pow_seven_fifths(inf), inf);
  special("pow_seven_fifths(nan)", fm::pow_seven_fifths(nan), nan);
  special("pow_seven_fifths(-1)", fm::pow_seven_fifths(-1.0f), nan);
  special("pow_seven_fifths(subnormal)", fm::pow_seven_fifths(1e-40f), static_cast<float>(powl(1e-40f, 1.4L)));
  special("pow_seven_fifths(FLT_MIN)", fm::pow_seven_fifths(FLT_MIN), static_cast<float>(powl(FLT_MIN, 1.4L)));
  special("pow_seven_fifths(2.5e27)", fm::pow_seven_fifths(2.5e27f), static_cast<float>(powl(2.5e27f, 1.4L)));
  special("pow_seven_fifths(FLT_MAX)", fm::pow_seven_fifths(FLT_MAX), inf);
  special("pow_seven_tenths(0)", fm::pow_seven_tenths(0.0f), 0.0f);
  special("pow_seven_tenths(1)", fm::pow_seven_tenths(1.0f), 1.0f);
  special("pow_seven_tenths(inf)", fm::pow_seven_tenths(inf), inf);
  special("pow_seven_tenths(nan)", fm::pow_seven_tenths(nan), nan);
  special("pow_seven_tenths(-1)", fm::pow_seven_tenths(-1.0f), nan);
  special("pow_seven_tenths(subnormal)", fm::pow_seven_tenths(tiny), static_cast<float>(powl(tiny, 0.7L)));
  special("pow_seven_tenths(1e-40)", fm::pow_seven_tenths(1e-40f), static_cast<float>(powl(1e-40f, 0.7L)));
  special("pow_seven_tenths(FLT_MIN)", fm::pow_seven_tenths(FLT_MIN), static_cast<float>(powl(FLT_MIN, 0.7L)));
  special("pow_seven_tenths(FLT_MAX)", fm::pow_seven_tenths(FLT_MAX), static_cast<float>(powl(FLT_MAX, 0.7L)));
  special("pow_seven_tenths(1024)", fm::pow_seven_tenths(1024.0f), 128.0f);
  special("log(0)", fm::log(0.0f), std::log(0.0f));
  special("log(1)", fm::log(1.0f), 0.0f);
  special("log(inf)", fm::log(inf), std::log(inf));
  special("log(-1)", fm::log(-1.0f), std::log(-1.0f));
  special("log(nan)", fm::log(nan), std::log(nan));
  special("log(subnormal)", fm::log(tiny), static_cast<float>(logl(tiny)));

  // Vectorised and scalar loops over the same inputs (special values included) give the same bits.
  std::vector<float> x, y;
  for (int i = 0; i < 4099; ++i) {
    x.push_back(std::ldexp(1.0f + next_unit(), static_cast<int>(next_unit() * 60) - 30));
    y.push_back(4.0f * next_unit() - 2.0f);
  }
  for (float v : {0.0f, -0.0f, tiny, 1e-40f, FLT_MIN, inf, -inf, nan, -3.0f, 1.0f, 2.5e27f, FLT_MAX, -FLT_MAX}) {
    x.push_back(v);
    y.push_back(0.7f);
  }
  const int n = static_cast<int>(x.size());
  std::vector<float> a(n), b(n);
  int mismatches = 0;
  cbrt_loop(x.data(), a.data(), n);
  cbrt_scalar(x.data(), b.data(), n);
  for (int i = 0; i < n; ++i) mismatches += !same_float(a[i], b[i]);
  pow_loop(x.data(), y.data(), a.data(), n);
  pow_scalar(x.data(), y.data(), b.data(), n);
  for (int i = 0; i < n; ++i) mismatches += !same_float(a[i], b[i]);
  seven_fifths_loop(x.data(), a.data(), n);
  seven_fifths_scalar(x.data(), b.data(), n);
  for (int i = 0; i < n; ++i) mismatches += !same_float(a[i], b[i]);
  seven_tenths_loop(x.data(), a.data(), n);
  seven_tenths_scalar(x.data(), b.data(), n);
  for (int i = 0; i < n; ++i) mismatches += !same_float(a[i], b[i]);
  std::printf("vector_scalar_mismatches %d %d\n", mismatches, 4 * n);
  return failures == 0 && mismatches == 0 ? 0 : 1;
}
