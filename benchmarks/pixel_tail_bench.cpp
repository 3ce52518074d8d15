// The per-pixel tail of the CPU forward that keeps the sensitivities (csrc/flip/cpu/pipeline.h's
// flip_row_sensitivities: both images' filtered responses -> the error and the 7 sensitivities of
// the test image), on one 512-pixel row of made-up but typical responses, repeated: ns per pixel,
// one thread. For measuring a change to the per-pixel code (pixel.h, color.h, fastmath.h) or its
// compile flags on its own.
//
//   g++ -std=c++17 -O3 -mavx2 -mfma -fno-math-errno -fno-trapping-math -ffp-contract=off \
//       -fno-tree-pre -fschedule-insns -fsched-pressure -Icsrc benchmarks/pixel_tail_bench.cpp \
//       -o /tmp/pixel_tail_bench && /tmp/pixel_tail_bench
//
// (Without -fschedule-insns -fsched-pressure it measures the tail as GCC schedules it by default.)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "flip/cpu/pipeline.h"

#include "serial_parallel_for.h"

int main(int argc, char** argv) {
  using namespace flip;
  using namespace flip::cpu;
  const int64_t W = 512, rows = argc > 1 ? std::atoll(argv[1]) : 4000;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> unit(0, 1), centred(-1, 1);
  // Per image, 7 rows: filtered Y (0..100), Cx and Cz (+-60), then 4 feature responses; the test
  // image is the reference plus small differences.
  std::vector<float> rt(7 * W), rr(7 * W);
  for (int64_t x = 0; x < W; ++x) {
    const float y = 100 * unit(rng), cx = 60 * centred(rng), cz = 60 * centred(rng);
    rr[x] = y, rr[W + x] = cx, rr[2 * W + x] = cz;
    rt[x] = y + 2 * centred(rng), rt[W + x] = cx + 2 * centred(rng), rt[2 * W + x] = cz + 2 * centred(rng);
    for (int k = 3; k < 7; ++k) {
      const float f = 0.1f * centred(rng);
      rr[k * W + x] = f;
      rt[k * W + x] = f + 0.02f * centred(rng);
    }
  }
  const ColorConsts<float> k = color_consts<float>();
  std::vector<float> map(W), sens(7 * W), unused(W, 1.f);
  double best = 1e9;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < rows; ++r)
      flip_row_sensitivities<true, false, false>(rt.data(), rr.data(), W, W, 0.f, k, unused.data(), map.data(),
                                                 sens.data(), static_cast<float*>(nullptr));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  double sum = 0;
  for (int64_t x = 0; x < W; ++x) sum += map[x] + sens[x] + sens[3 * W + x];
  std::printf("per-pixel tail with sensitivities: %.2f ns per pixel (checksum %.9g)\n", best / (rows * W) * 1e9, sum);
  return 0;
}
