// The CPU's limits for the LDR-FLIP forward and where each of its phases stands against them: the
// rates of this CPU (float multiply + add as the filters use them, fused multiply-add, load and
// store bandwidth from each cache level and from memory) measured by small loops, then each phase
// of a 1080p forward timed on its own with its operations and DRAM bytes per pixel, giving its
// compute floor, its memory floor and how far above the higher one it runs. For
// benchmarks/RESULTS.md ("Roofline"); rerun on an idle machine: every figure is a wall time.
//
//   g++ -std=c++17 -O3 -mavx2 -mfma -fno-math-errno -fno-trapping-math -ffp-contract=off \
//       -fno-tree-pre -fschedule-insns -fsched-pressure -fopenmp -Icsrc \
//       benchmarks/roofline_bench.cpp -o /tmp/roofline_bench
//   /tmp/roofline_bench [threads [H W [repeats]]]     (default 1 thread, 1080 1920, 7)
//
// The kernels are those of the AVX2 level (the same source, compiled here with -mavx2 -mfma);
// parallel_for splits a range into one contiguous chunk per thread, as at::parallel_for does.
#include <omp.h>

#include <algorithm>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "flip/cpu/pipeline.h"

namespace flip {
namespace cpu {
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (begin >= end) return;
#pragma omp parallel
  {
    int64_t threads = omp_get_num_threads();
    if (grain > 0) threads = std::min<int64_t>(threads, (end - begin + grain - 1) / grain);
    const int64_t tid = omp_get_thread_num(), chunk = (end - begin + threads - 1) / threads;
    const int64_t b = begin + tid * chunk;
    if (tid < threads && b < end) fn(b, std::min(end, b + chunk));
  }
}
}  // namespace cpu
}  // namespace flip

namespace {

// Wall time; with one thread, the thread's CPU time instead (g_cpu_time), which a loaded machine
// disturbs far less (the other work takes the core away, and that time is not counted).
bool g_cpu_time = false;
double now() {
  timespec ts;
  clock_gettime(g_cpu_time ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

// Best of `repeats` timings of fn().
template <class Fn>
double best_of(int repeats, const Fn& fn) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const double t0 = now();
    fn();
    best = std::min(best, now() - t0);
  }
  return best;
}

typedef float V8 __attribute__((vector_size(32)));
volatile float g_sink;

// The three instruction mixes whose rate bounds the kernels, in assembly so that the compiler
// neither hoists nor merges anything: per iteration 16 multiply-then-adds (a product into a
// temporary, then added to one of 8 accumulators) or 24 fused multiply-adds or adds (into 12),
// 8 lanes each: more chains than latency x throughput on current x86 cores.
#define FLIP_R8(M) M(0) M(1) M(2) M(3) M(4) M(5) M(6) M(7)
#define FLIP_MUL_ADD(i) "vmulps %%ymm14, %%ymm15, %%ymm12\n vaddps %%ymm12, %%ymm" #i ", %%ymm" #i "\n"
#define FLIP_FMA(i) "vfmadd231ps %%ymm14, %%ymm15, %%ymm" #i "\n"
#define FLIP_ADD(i) "vaddps %%ymm14, %%ymm" #i ", %%ymm" #i "\n"
#define FLIP_CLOBBERS \
  "ymm0", "ymm1", "ymm2", "ymm3", "ymm4", "ymm5", "ymm6", "ymm7", "ymm8", "ymm9", "ymm10", "ymm11", "ymm12", "cc"
void mul_add_loop(int64_t n) {
  __asm__ volatile(
      "vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15\n"
      "1:\n" FLIP_R8(FLIP_MUL_ADD) FLIP_R8(FLIP_MUL_ADD) "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(n)
      :
      : FLIP_CLOBBERS, "ymm14", "ymm15");
}
void fma_loop(int64_t n) {
  __asm__ volatile(
      "vxorps %%ymm14, %%ymm14, %%ymm14\n vxorps %%ymm15, %%ymm15, %%ymm15\n"
      "1:\n" FLIP_R8(FLIP_FMA) FLIP_FMA(8) FLIP_FMA(9) FLIP_FMA(10) FLIP_FMA(11) FLIP_R8(FLIP_FMA) FLIP_FMA(8)
          FLIP_FMA(9) FLIP_FMA(10) FLIP_FMA(11) "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(n)
      :
      : FLIP_CLOBBERS, "ymm14", "ymm15");
}
void add_loop(int64_t n) {
  __asm__ volatile(
      "vxorps %%ymm14, %%ymm14, %%ymm14\n"
      "1:\n" FLIP_R8(FLIP_ADD) FLIP_ADD(8) FLIP_ADD(9) FLIP_ADD(10) FLIP_ADD(11) FLIP_R8(FLIP_ADD) FLIP_ADD(8)
          FLIP_ADD(9) FLIP_ADD(10) FLIP_ADD(11) "dec %0\n jnz 1b\n vzeroupper\n"
      : "+r"(n)
      :
      : FLIP_CLOBBERS, "ymm14");
}
// Float operations per second (all threads) of loop(n): ops 8-lane operations of flops_per_op each
// per iteration.
double flop_rate(int threads, int ops, double flops_per_op, void (*loop)(int64_t)) {
  constexpr int64_t kIters = 1000000;
  const double t = best_of(30, [&] {
#pragma omp parallel num_threads(threads)
    loop(kIters);
  });
  return threads * double(kIters) * ops * 8 * flops_per_op / t;
}

// Bytes per second (all threads) of reading (mode 0), writing (1) or copying (2: counted as
// read + written bytes) a buffer of `bytes` per thread, passes repeated to about 2 GB in all.
double bandwidth(int threads, size_t bytes, int mode) {
  const size_t n = bytes / sizeof(float);
  // 64-byte aligned (a vector's 16-byte alignment would split a third of the loads over two lines).
  std::vector<std::unique_ptr<flip::cpu::Workspace>> src, dst;
  for (int i = 0; i < threads; ++i) {
    src.push_back(std::make_unique<flip::cpu::Workspace>(bytes));
    dst.push_back(std::make_unique<flip::cpu::Workspace>(bytes));
    std::fill(src[i]->as<float>(), src[i]->as<float>() + n, 1.f);
    std::fill(dst[i]->as<float>(), dst[i]->as<float>() + n, 0.f);
  }
  const int passes = std::max<int>(1, int(2e8 / (bytes * threads)));
  const double t = best_of(10, [&] {
#pragma omp parallel num_threads(threads)
    {
      const int tid = omp_get_thread_num();
      const float* __restrict s = src[tid]->as<float>();
      float* __restrict d = dst[tid]->as<float>();
      for (int p = 0; p < passes; ++p) {
        if (mode == 0) {  // 8 loads of 32 bytes per step, in assembly: nothing else in the loop
          for (size_t i = 0; i + 64 <= n; i += 64)
            __asm__ volatile(
                "vmovups (%0), %%ymm0\n vmovups 32(%0), %%ymm1\n vmovups 64(%0), %%ymm2\n vmovups 96(%0), %%ymm3\n"
                "vmovups 128(%0), %%ymm0\n vmovups 160(%0), %%ymm1\n vmovups 192(%0), %%ymm2\n"
                "vmovups 224(%0), %%ymm3\n" ::"r"(s + i)
                : "ymm0", "ymm1", "ymm2", "ymm3");
        } else if (mode == 1) {
          const V8 x = V8{} + float(p);
          for (size_t i = 0; i + 8 <= n; i += 8) std::memcpy(d + i, &x, 32);
        } else {
          for (size_t i = 0; i + 8 <= n; i += 8) std::memcpy(d + i, s + i, 32);
        }
        __asm__ volatile("" ::: "memory");
      }
    }
  });
  return double(threads) * passes * bytes * (mode == 2 ? 2 : 1) / t;
}

// The LDR input conversion (ldr_flip.inc's LdrInput for sRGB input).
struct SrgbInput {
  int operator()(const float v[3], float lin[3]) const {
    for (int c = 0; c < 3; ++c) lin[c] = flip::input_to_linear(v[c], true);
    return 0;
  }
};

}  // namespace

int main(int argc, char** argv) {
  using namespace flip;
  using namespace flip::cpu;
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  const int64_t H = argc > 3 ? std::atoll(argv[2]) : 1080, W = argc > 3 ? std::atoll(argv[3]) : 1920;
  const int repeats = argc > 4 ? std::atoi(argv[4]) : 7;
  omp_set_num_threads(threads);
  g_cpu_time = threads == 1;

  std::printf("Machine rates, %d thread(s) (%s):\n", threads, g_cpu_time ? "thread CPU time" : "wall time");
  const double mul_add = flop_rate(threads, 16, 2, mul_add_loop);
  const double fma = flop_rate(threads, 24, 2, fma_loop);
  const double add = flop_rate(threads, 24, 1, add_loop);
  std::printf("  float multiply then add (the filters' tap): %.1f GFLOP/s = %.2f Gtap/s\n", mul_add / 1e9,
              mul_add / 2e9);
  std::printf("  float fused multiply-add: %.1f GFLOP/s; float add alone: %.1f GFLOP/s\n", fma / 1e9, add / 1e9);
  const size_t sizes[] = {16 << 10, 256 << 10, 4 << 20, 256 << 20};
  const char* names[] = {"16 KB (L1)", "256 KB (L2)", "4 MB (L3)", "256 MB (memory)"};
  double mem_read = 0, mem_write = 0, mem_copy = 0;
  for (int i = 0; i < 4; ++i) {
    const size_t bytes = i == 3 ? sizes[i] / threads : sizes[i];
    const double r = bandwidth(threads, bytes, 0), w = bandwidth(threads, bytes, 1), c = bandwidth(threads, bytes, 2);
    std::printf("  %-16s read %.1f GB/s, write %.1f GB/s, copy %.1f GB/s\n", names[i], r / 1e9, w / 1e9, c / 1e9);
    if (i == 3) mem_read = r, mem_write = w, mem_copy = c;
  }

  // ---- the forward's phases ----
  const int64_t HW = H * W;
  const double px = double(HW);
  std::mt19937 rng(0);
  std::uniform_real_distribution<float> uniform(0, 1);
  std::normal_distribution<float> noise(0, 0.03f);
  std::vector<float> ref(3 * HW), test(3 * HW), map(HW);
  for (int64_t i = 0; i < 3 * HW; ++i) {
    ref[i] = uniform(rng);
    test[i] = std::min(1.f, std::max(0.f, ref[i] + noise(rng)));
  }
  const float* img[2] = {test.data(), ref.data()};
  const Context<float> cx(67.02064327658225);
  Workspace ws_conv(sizeof(float) * 2 * 4 * HW);
  float* conv = ws_conv.as<float>();
  const int rc = cx.csf->y.radius, rf = cx.feat->g.radius;

  // Operations per pixel (both images). A tap of the plain form is a multiply and an add; of the
  // odd form (per pair of samples) a subtraction, a multiply and an add; of the centred form three
  // subtractions or additions, a multiply and an add. Adds and multiplies run on separate pipes
  // (Zen 3, and most x86 cores), so a filter's floor is its larger count over half the
  // multiply-then-add rate.
  struct Ops {
    double mul, add;
  };
  auto plain = [](int r) { return Ops{2.0 * r + 1, 2.0 * r + 1}; };
  auto odd = [](int r) { return Ops{double(r), 2.0 * r}; };
  auto centred = [](int r) { return Ops{double(r), 4.0 * r}; };
  auto sum = [](std::initializer_list<Ops> l) {
    Ops s{0, 0};
    for (auto o : l) s.mul += o.mul, s.add += o.add;
    return s;
  };
  const Ops h_ops = sum({plain(rc), plain(rc), plain(rc), plain(rc), plain(rf), odd(rf), centred(rf)});
  const Ops v_ops = sum({plain(rc), plain(rc), plain(rc), plain(rc), plain(rf), plain(rf), odd(rf), centred(rf)});
  auto floor_of = [&](Ops o) { return 2 * std::max(o.mul, o.add) * 2 / mul_add; };  // both images, seconds per pixel

  // Phase timings: the conversion alone; the horizontal rows (conversion and horizontal filters)
  // into a ring of rows as the pipeline keeps them; both stages with no tail; the whole forward.
  const double t_convert = best_of(repeats, [&] {
    parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
      for (int64_t idx = b; idx < e; ++idx) {
        const int im = int(idx / H);
        const int64_t row = idx % H;
        float* c = conv + im * 4 * HW + row * W;
        convert_row(img[im] + row * W, HW, W, SrgbInput{}, c, c + HW, c + 2 * HW, c + 3 * HW);
      }
    });
  });
  const int64_t ring_rows = std::min<int64_t>(H, kTileRows + 2 * cx.rmax), plane = ring_rows * W;
  const double t_hstage = best_of(repeats, [&] {
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Workspace ring(sizeof(float) * 2 * kHorizontalPlanesPerImage * plane);
      Scratch<float> sc(W, cx.rmax, 4);
      for (int64_t y = b; y < e; ++y)
        for (int im = 0; im < 2; ++im)
          horizontal_row(img[im] + y * W, HW, W, SrgbInput{}, cx, sc,
                         ring.as<float>() + im * kHorizontalPlanesPerImage * plane, plane, PlainRow{y % ring_rows * W});
    });
  });
  const double t_stages = best_of(
      repeats, [&] { image_stages(img, H, W, SrgbInput{}, cx, [](const float*, const float*, int64_t, int64_t) {}); });
  const double t_forward =
      best_of(repeats, [&] { image_stages(img, H, W, SrgbInput{}, cx, ForwardRows<float>{0.f, cx.k, map.data()}); });
  double map_sum = 0;
  for (float v : map) map_sum += v;

  // DRAM bytes per pixel of each phase: the conversion reads both images (24 B); the horizontal
  // rows and the vertical passes stay in the caches (a ring of kTileRows + 2 r rows per plane and
  // thread); the tail writes the map (4 B, plus as much read for ownership).
  const double b_in = 24, b_map = 4;
  struct Row {
    const char* name;
    double t, compute_floor, read_bytes, write_bytes;
  };
  const Row rows[] = {
      {"input conversion", t_convert, 0, b_in, 0},
      {"horizontal filters", t_hstage - t_convert, floor_of(h_ops), 0, 0},
      {"vertical filters", t_stages - t_hstage, floor_of(v_ops), 0, 0},
      {"per-pixel tail", t_forward - t_stages, 0, 0, b_map},
      {"forward", t_forward, floor_of(h_ops) + floor_of(v_ops), b_in, b_map},
  };
  std::printf(
      "\nLDR-FLIP forward, %lldx%lld, float32, ppd 67.02 (CSF radius %d, feature radius %d), %d thread(s), best of %d "
      "(map sum %.9g)\nfilter operations per pixel and image: horizontal %.0f multiplies + %.0f adds, vertical %.0f + "
      "%.0f\n",
      (long long)W, (long long)H, rc, rf, threads, repeats, map_sum, h_ops.mul, h_ops.add, v_ops.mul, v_ops.add);
  std::printf(
      "| phase | time | ns/pixel | compute floor | memory floor | time / higher floor |\n| --- | --- | --- | --- | --- "
      "| --- |\n");
  for (const Row& r : rows) {
    // Written bytes cost a read for ownership too; the copy rate counts both.
    const double mem = r.read_bytes / mem_read + 2 * r.write_bytes / mem_copy;
    const double floor = std::max(r.compute_floor, mem);
    std::printf("| %s | %.1f ms | %.1f | %.1f ms | %.1f ms (%.0f B/pixel) | %.1fx |\n", r.name, r.t * 1e3,
                r.t / px * 1e9, r.compute_floor * px * 1e3, mem * px * 1e3, r.read_bytes + 2 * r.write_bytes,
                floor > 0 ? r.t / (floor * px) : 0.0);
  }
  (void)mem_write;
  return 0;
}
