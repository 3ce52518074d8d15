// The CPU kernels of LDR-FLIP without PyTorch: one thread, one image pair, the plain forward, the
// forward that keeps the sensitivities and the backward from them (as autograd runs them on the
// CPU), best of N calls each. For comparing two versions of the kernels without the Python and
// autograd around them; the map and gradient checksums show whether a change kept the bits.
//
//   g++ -std=c++17 -O3 -fno-math-errno -fno-trapping-math -ffp-contract=off -fno-tree-pre \
//       -fschedule-insns -fsched-pressure -fopenmp -Icsrc benchmarks/pipeline_bench.cpp \
//       csrc/flip/cpu/kernels_*.cpp csrc/flip/cpu/isa_dispatch.cpp csrc/flip/cpu/interrupt.cpp \
//       -o /tmp/pipeline_bench
//   /tmp/pipeline_bench [H W [calls]]        (default 512 512 10)
//
// Random sRGB reference, test = reference + N(0, 0.03) clamped, ppd 67.02, float32, gradient of
// the mean w.r.t. the test image. (Threads: none; the kernels' parallel_for runs serially here.)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "flip/cpu/kernels.h"

#include "serial_parallel_for.h"

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int main(int argc, char** argv) {
  using namespace flip::cpu;
  const int64_t H = argc > 2 ? std::atoll(argv[1]) : 512, W = argc > 2 ? std::atoll(argv[2]) : 512;
  const int calls = argc > 3 ? std::atoi(argv[3]) : 10;
  const Shape s{1, H, W};
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(0, 1);
  std::normal_distribution<float> noise(0, 0.03f);
  std::vector<float> ref(3 * H * W), test(3 * H * W), map(H * W), sens(7 * H * W), grad(H * W, 1.f / (H * W)),
      g_test(3 * H * W);
  for (size_t i = 0; i < ref.size(); ++i) {
    ref[i] = uniform(rng);
    test[i] = std::min(1.f, std::max(0.f, ref[i] + noise(rng)));
  }
  LdrFlipArgs<float> a;
  a.s = s;
  a.ppd = 67.02064327658225;
  a.eps = 0.0;
  a.srgb = true;
  a.test = test.data();
  a.ref = ref.data();
  a.out = map.data();
  a.sensitivities = sens.data();
  a.want_test = true;
  LdrFlipArgs<float> b = a;
  b.out = nullptr;
  b.grad = grad.data();
  b.g_test = g_test.data();
  double fwd = 1e9, keep = 1e9, bwd = 1e9;
  for (int c = 0; c < calls; ++c) {
    const double t0 = now();
    ldr_flip_forward(a);
    const double t1 = now();
    ldr_flip_forward_sensitivities(a);
    const double t2 = now();
    ldr_flip_backward_sensitivities(b);
    const double t3 = now();
    fwd = std::min(fwd, t1 - t0);
    keep = std::min(keep, t2 - t1);
    bwd = std::min(bwd, t3 - t2);
  }
  double map_sum = 0, grad_sum = 0;
  for (float v : map) map_sum += v;
  for (float v : g_test) grad_sum += std::fabs(v);
  std::printf(
      "%lldx%lld (%s): forward %.2f ms | forward keeping sensitivities %.2f ms + backward %.2f ms = %.2f ms"
      " (map sum %.9g, |gradient| sum %.9g)\n",
      (long long)W, (long long)H, capability(), fwd * 1e3, keep * 1e3, bwd * 1e3, (keep + bwd) * 1e3, map_sum,
      grad_sum);
  return 0;
}
