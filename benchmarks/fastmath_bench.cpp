// The cost of each float transcendental of the CPU kernels (csrc/flip/fastmath.h) in a vectorised
// loop over 4096 values in the L1 cache, one thread: ns per value, best of 30 runs of 200 loops.
// Inputs in [0.05, 1], the range the per-pixel code mostly sees. For benchmarks/RESULTS.md
// ("the hardware's limit"); compile with the flags of the level to measure, e.g. AVX-512:
//
//   g++ -std=c++17 -O3 -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma \
//       -mprefer-vector-width=512 -fno-math-errno -fno-trapping-math -ffp-contract=off \
//       -Icsrc benchmarks/fastmath_bench.cpp -o /tmp/fastmath_bench && /tmp/fastmath_bench
//
// (AVX2: -mavx2 -mfma alone.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "flip/fastmath.h"

namespace fm = flip::fastmath;

#define NOINLINE __attribute__((noinline))
NOINLINE void run_cbrt(const float* x, const float* e, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = fm::cbrt(x[i]);
}
NOINLINE void run_pow_seven_fifths(const float* x, const float* e, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = fm::pow_seven_fifths(x[i]);
}
NOINLINE void run_pow_seven_tenths(const float* x, const float* e, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = fm::pow_seven_tenths(x[i]);
}
NOINLINE void run_pow(const float* x, const float* e, float* y, int n) {  // exponents e in [0.05, 1], as c^(1 - f)
  for (int i = 0; i < n; ++i) y[i] = fm::pow(x[i], e[i]);
}
NOINLINE void run_log(const float* x, const float* e, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = fm::log(x[i]);
}
NOINLINE void run_sqrt(const float* x, const float* e, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
}

int main() {
  const int n = 4096;
  std::vector<float> x(n), y(n), exponents(n);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> unit(0.05f, 1.0f);
  for (float& v : x) v = unit(rng);
  for (float& v : exponents) v = unit(rng);
  struct Case {
    const char* name;
    void (*fn)(const float*, const float*, float*, int);
  } cases[] = {{"cbrt", run_cbrt},
               {"x^1.4 (pow_seven_fifths)", run_pow_seven_fifths},
               {"x^0.7 (pow_seven_tenths)", run_pow_seven_tenths},
               {"pow(x, y)", run_pow},
               {"log", run_log},
               {"sqrt (std::sqrt)", run_sqrt}};
  std::printf("| function | ns per value |\n| --- | --- |\n");
  for (const Case& c : cases) {
    double best = 1e9;
    for (int round = 0; round < 30; ++round) {
      const auto start = std::chrono::steady_clock::now();
      for (int loop = 0; loop < 200; ++loop) {
        c.fn(x.data(), exponents.data(), y.data(), n);
        asm volatile("" ::: "memory");
      }
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      best = std::min(best, s / (200.0 * n) * 1e9);
    }
    std::printf("| %s | %.3f |\n", c.name, best);
  }
}
