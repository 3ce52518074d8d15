// One 21-tap float32 filter of the CPU kernels (csrc/flip/cpu/separable.h), vertical against
// horizontal, on H x W planes of row stride S: how the vertical pass's cost depends on whether its
// (2r + 1)-row window fits the L1 cache (benchmarks/RESULTS.md). With a strip width and a band
// height, the vertical pass runs over tiles of `strip` columns by `band` rows, one of 8 planes at
// a time over the tile, as the tiled variant that was tried and dropped did.
//
//   g++ -O3 -std=c++17 -mavx2 -mfma -ffp-contract=off -fno-trapping-math -Icsrc \
//       benchmarks/vertical_filter_bench.cpp -o /tmp/vertical_filter_bench
//   /tmp/vertical_filter_bench H W [S]               one plane, whole rows, both directions
//   /tmp/vertical_filter_bench H W S strip band      8 planes in tiles, vertical only
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "flip/cpu/separable.h"

using namespace flip;
using namespace flip::cpu;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4 && argc != 6) {
    std::fprintf(stderr, "usage: %s H W [S [strip band]]\n", argv[0]);
    return 2;
  }
  const int64_t H = std::atoll(argv[1]), W = std::atoll(argv[2]), S = argc > 3 ? std::atoll(argv[3]) : W;
  Filter1D<float> f;
  f.radius = 10;  // the CSF radius at ppd 67
  f.w.assign(21, 0.05f);
  f.left.assign(10, 0.f);
  f.right.assign(10, 0.f);
  const int reps = 20;
  if (argc < 6) {
    std::vector<float> plane(H * S), out(W), pad(W + 2 * f.radius);
    for (auto& v : plane) v = std::rand() / float(RAND_MAX);
    auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      for (int64_t y = 0; y < H; ++y) vconv_tile(plane.data(), H, S, Tile{y, y + 1, 0, W}, f, out.data(), W);
    const double v = seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r)
      for (int64_t y = 0; y < H; ++y) hconv(plane.data() + y * S, W, f, pad.data(), out.data());
    const double h = seconds_since(t0);
    std::printf("H=%lld W=%lld stride=%lld: vertical %.3f ns/px, horizontal %.3f ns/px\n", (long long)H, (long long)W,
                (long long)S, v * 1e9 / (reps * H * W), h * 1e9 / (reps * H * W));
    return 0;
  }
  const int64_t strip = std::atoll(argv[4]), band = std::atoll(argv[5]);
  const int planes_n = 8;  // the vertical filters of one image
  std::vector<float> planes(planes_n * H * S), out(planes_n * band * strip);
  for (auto& v : planes) v = std::rand() / float(RAND_MAX);
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r)
    for (int64_t x0 = 0; x0 < W; x0 += strip)
      for (int64_t y0 = 0; y0 < H; y0 += band)
        for (int p = 0; p < planes_n; ++p) {
          const float* plane = planes.data() + p * H * S + x0;
          for (int64_t y = y0; y < std::min(H, y0 + band); ++y) {
            auto at = [&](int k) { return plane + std::min<int64_t>(std::max<int64_t>(y + k, 0), H - 1) * S; };
            correlate_rows<Form::kPlain>(at, f, std::min(strip, W - x0), out.data() + (p * band + y - y0) * strip,
                                         false);
          }
        }
  std::printf("H=%lld W=%lld stride=%lld strip=%lld band=%lld: vertical %.3f ns/px per plane\n", (long long)H,
              (long long)W, (long long)S, (long long)strip, (long long)band,
              seconds_since(t0) * 1e9 / (reps * H * W * planes_n));
  return 0;
}
