// CUDA kernels of the FLIP ops: thin wrappers that run the per-thread functions of passes.h
// (shared with the test-only host emulator, tests/emulator) over a grid. Every launch goes
// on the caller's stream; nothing synchronises with the host.
#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernels.h"

namespace flip {
namespace cuda {
namespace {

constexpr int kMaxGridY = 65535, kMaxGridZ = 65535;

inline unsigned blocks_for(int64_t total) {
  // Grid-stride loops cover the rest; this many blocks saturate any current GPU.
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((total + kBlock - 1) / kBlock, 1 << 20)));
}

inline dim3 row_grid(const Geometry& g) {
  return dim3(static_cast<unsigned>((g.w + kBlock - 1) / kBlock),
              static_cast<unsigned>(std::min<int64_t>(g.h, kMaxGridY)),
              static_cast<unsigned>(std::min<int64_t>(g.n * g.images, kMaxGridZ)));
}

inline void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // these errors are not sticky: clear them so the next launch check is not misled
  throw std::runtime_error(std::string("flip: ") + what + " failed: " + cudaGetErrorString(err));
}

// Lets `kernel` launch with `bytes` of dynamic shared memory. Above the 48 KB default a kernel needs
// an opt-in, which is per (kernel, device) and process-wide: it is raised once to the device's
// opt-in maximum (never to the size of one launch, which another host thread launching with a
// different pixels_per_degree could lower between this thread's set and its launch). The caller
// checked `bytes` against that maximum.
inline void allow_shared_memory(const void* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> raised;
  std::lock_guard<std::mutex> lock(mu);
  if (raised.count({kernel, device}) != 0) return;
  int optin = 0;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  raised.insert({kernel, device});
}

template <class T>
__device__ T* shared_buffer() {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  return reinterpret_cast<T*>(smem_raw);
}

#define FLIP_GRID_STRIDE(i, total) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (total); i += (int64_t)gridDim.x * blockDim.x)

// H pass: one block per (x tile, row, image). src1 may equal src0 when images == 1.
template <class T>
__global__ void __launch_bounds__(kBlock)
    h_kernel(const T* src0, const T* src1, int channels, Geometry g, Input mode,
             FLIP_GRID_CONSTANT const KernelTaps<T> taps, T* planes, HdrStep<T> hs) {
  const TapsView<T> t = taps.view();
  T* smem = shared_buffer<T>();
  const int64_t x0 = (int64_t)blockIdx.x * kBlock;
  for (int64_t z = blockIdx.z; z < g.n * g.images; z += gridDim.z) {
    const int64_t n = z / g.images;
    const int im = static_cast<int>(z % g.images);
    T scale = T(1);
    if (mode == Input::kHdr) {
      if (!hs.active(n)) continue;  // uniform over the block
      scale = hs.scale(n);
    }
    const T* src = (im == 0 ? src0 : src1) + n * channels * g.hw();
    T* pl = planes + z * g.planes() * g.hw();
    for (int64_t y = blockIdx.y; y < g.h; y += gridDim.y) {
      h_load(src, g, mode, y, x0, kBlock, t.rmax, threadIdx.x, smem, scale, hs.tm);
      __syncthreads();
      h_compute(g, t, y, x0, kBlock, t.rmax, threadIdx.x, smem, pl);
      __syncthreads();
    }
  }
}

// The fused and tiled kernels build the taps' view (seven filters of three pointers each) for each
// phase from their parameter-space argument instead of once per kernel, so that it is not held in
// registers across phases and barriers, where it would raise the kernels' register use.

// mode is kSrgb/kLinear (LDR-FLIP: out is the map) or kHdr (one exposure of HDR-FLIP: out, emap
// and index hold the running maximum).
template <class T>
__global__ void __launch_bounds__(kFusedThreads)
    fused_ldr_kernel(const T* test, const T* ref, T* out, Geometry g, FLIP_GRID_CONSTANT const KernelTaps<T> taps,
                     Input mode, T eps, ColorConsts<T> k, HdrStep<T> hs, T* emap, int32_t* index) {
  T* smem = shared_buffer<T>();
  const int R = taps.rmax;
  const bool hdr = mode == Input::kHdr;
  const int64_t x0 = (int64_t)blockIdx.x * kTileW;
  const int64_t tiles_y = (g.h + kTileH - 1) / kTileH;
  for (int64_t n = blockIdx.z; n < g.n; n += gridDim.z) {
    if (hdr && !hs.active(n)) continue;  // uniform over the block
    const T scale = hdr ? hs.scale(n) : T(1);
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
      const int64_t y0 = ty * kTileH;
      for (int im = 0; im < 2; ++im) {
        fused_load((im == 0 ? test : ref) + n * 3 * g.hw(), g, mode, y0, x0, R, threadIdx.x, kFusedThreads, smem, scale,
                   hs.tm);
        __syncthreads();
        fused_horizontal(taps.view(), R, threadIdx.x, kFusedThreads, smem);
        __syncthreads();
        fused_vertical(taps.view(), R, im, threadIdx.x, kFusedThreads, smem);
        __syncthreads();
      }
      const int64_t off = n * g.hw();
      fused_tail(g, y0, x0, R, threadIdx.x, kFusedThreads, smem, eps, k, out + off, hdr ? &hs : nullptr, n,
                 hdr ? emap + off : nullptr, hdr ? index + off : nullptr);
      __syncthreads();
    }
  }
}

// Tiled backward, kernel 1 (passes.h): for each tile of band b's gradient-plane rows, the fused
// forward of both images, then the adjoint into the wanted images' gradient planes in scratch.
// mode as in fused_ldr_kernel (kHdr: exposure hs, gradient only where index names it; a tile
// without such a pixel writes zero planes and skips the rest).
template <class T>
__global__ void __launch_bounds__(kFusedThreads)
    tiled_grad_kernel(const T* test, const T* ref, const T* grad, const int32_t* index, T* scratch, Geometry g,
                      BackwardBand b, FLIP_GRID_CONSTANT const KernelTaps<T> taps, Input mode, T eps, ColorConsts<T> k,
                      HdrStep<T> hs) {
  T* smem = shared_buffer<T>();
  const int R = taps.rmax;
  const bool hdr = mode == Input::kHdr;
  const int64_t x0 = (int64_t)blockIdx.x * kTileW;
  const int64_t tiles_y = tiled_grad_tiles_y(b);
  for (int64_t n = b.n0 + blockIdx.z; n < b.n1; n += gridDim.z) {
    if (hdr && !hs.active(n)) continue;  // uniform over the block
    const T scale = hdr ? hs.scale(n) : T(1);
    const int64_t off = n * g.hw();
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
      const int64_t y0 = b.g0 + ty * kTileH;
      if (hdr && !__syncthreads_or(tile_won(index + off, g, hs.i, y0, x0, b.g0, b.g1, 0, threadIdx.x, kFusedThreads))) {
        tiled_zero_planes(g, b, n, y0, x0, threadIdx.x, kFusedThreads, scratch);
        continue;  // no shared memory touched: the next tile starts at a barrier too
      }
      for (int im = 0; im < 2; ++im) {
        fused_load((im == 0 ? test : ref) + 3 * off, g, mode, y0, x0, R, threadIdx.x, kFusedThreads, smem, scale,
                   hs.tm);
        __syncthreads();
        fused_horizontal(taps.view(), R, threadIdx.x, kFusedThreads, smem);
        __syncthreads();
        fused_vertical(taps.view(), R, im, threadIdx.x, kFusedThreads, smem);
        __syncthreads();
      }
      tiled_tail_vjp(g, b, n, y0, x0, R, threadIdx.x, kFusedThreads, smem, eps, k, grad + off, scratch,
                     hdr ? &hs : nullptr, hdr ? index + off : nullptr);
      __syncthreads();
    }
  }
}

// Tiled backward, kernel 2: for each tile of band b's output rows and each wanted image (z), the
// gradient planes with their halo into shared memory, the transposed filters, the chain into
// g_test / g_ref (kHdr: accumulated, one exposure per launch; a tile whose pixels and halo the
// exposure won nowhere adds nothing and is skipped).
template <class T>
__global__ void __launch_bounds__(kFusedThreads)
    tiled_transpose_kernel(const T* scratch, const T* test, const T* ref, const int32_t* index, T* g_test, T* g_ref,
                           Geometry g, BackwardBand b, FLIP_GRID_CONSTANT const KernelTaps<T> taps, Input mode,
                           HdrStep<T> hs) {
  T* smem = shared_buffer<T>();
  const int R = taps.rmax;
  const int images = b.images();
  const int64_t x0 = (int64_t)blockIdx.x * kTileW;
  const int64_t tiles_y = (b.y1 - b.y0 + kTileH - 1) / kTileH;
  for (int64_t z = blockIdx.z; z < (b.n1 - b.n0) * images; z += gridDim.z) {
    const int64_t n = b.n0 + z / images;
    // The z-th wanted image: the reference when it is the only one or the second one.
    const int im = (b.wanted & 1) && z % images == 0 ? 0 : 1;
    T scale = T(1);
    if (mode == Input::kHdr) {
      if (!hs.active(n)) continue;  // uniform over the block
      scale = hs.scale(n);
    }
    const T* gp = b.planes(scratch, n, im, g.w);
    const T* src = (im == 0 ? test : ref) + n * 3 * g.hw();
    T* out = (im == 0 ? g_test : g_ref) + n * 3 * g.hw();
    for (int64_t ty = blockIdx.y; ty < tiles_y; ty += gridDim.y) {
      const int64_t y0 = b.y0 + ty * kTileH;
      if (mode == Input::kHdr &&
          !__syncthreads_or(tile_won(index + n * g.hw(), g, hs.i, y0, x0, b.g0, b.g1, R, threadIdx.x, kFusedThreads)))
        continue;
      tiled_load_t(gp, b, g, y0, x0, R, threadIdx.x, kFusedThreads, smem);
      __syncthreads();
      tiled_vertical_t(g, taps.view(), y0, b.y1, R, threadIdx.x, kFusedThreads, smem);
      __syncthreads();
      tiled_horizontal_t(g, taps.view(), y0, b.y1, x0, R, threadIdx.x, kFusedThreads, smem, mode, src, out, scale,
                         hs.tm);
      __syncthreads();
    }
  }
}

// wanted: bit im set when image im's gradient is wanted (HT skips the others too).
template <class T>
__global__ void vt_kernel(const T* gplanes, T* tplanes, Geometry g, FLIP_GRID_CONSTANT const KernelTaps<T> taps,
                          int wanted) {
  const TapsView<T> t = taps.view();
  const int64_t hw = g.hw();
  FLIP_GRID_STRIDE(i, g.n * g.images * hw) {
    const int64_t z = i / hw, p = i % hw;
    if (((wanted >> (z % g.images)) & 1) == 0) continue;
    vt_pixel(gplanes + z * g.gplanes() * hw, tplanes + z * g.planes() * hw, g, t, p / g.w, p % g.w);
  }
}

// HT pass + the chain to the op's input. What the input is decides the last step:
// images (sRGB/linear): gradient w.r.t. the 3 input channels; opponent: w.r.t. the 3 opponent
// channels; achromatic: w.r.t. the single channel.
template <class T>
__global__ void __launch_bounds__(kBlock)
    ht_kernel(const T* tplanes, const T* src0, const T* src1, T* out0, T* out1, int channels, Geometry g, Input mode,
              FLIP_GRID_CONSTANT const KernelTaps<T> taps, HdrStep<T> hs) {
  const TapsView<T> t = taps.view();
  T* smem = shared_buffer<T>();
  const int64_t x0 = (int64_t)blockIdx.x * kBlock;
  const int64_t hw = g.hw();
  for (int64_t z = blockIdx.z; z < g.n * g.images; z += gridDim.z) {
    const int64_t n = z / g.images;
    const int im = static_cast<int>(z % g.images);
    T* out = im == 0 ? out0 : out1;
    if (out == nullptr) continue;  // uniform over the block
    T scale = T(1);
    if (mode == Input::kHdr) {
      if (!hs.active(n)) continue;
      scale = hs.scale(n);
    }
    out += n * channels * hw;
    const T* src = (im == 0 ? src0 : src1) + n * channels * hw;
    const T* tpl = tplanes + z * g.planes() * hw;
    for (int64_t y = blockIdx.y; y < g.h; y += gridDim.y) {
      ht_load(tpl, g, y, x0, kBlock, t.rmax, threadIdx.x, smem);
      __syncthreads();
      T g_opp[3], g_yh;
      if (ht_compute(g, t, x0, kBlock, t.rmax, threadIdx.x, smem, g_opp, g_yh))
        ht_store(g, mode, y * g.w + x0 + threadIdx.x, g_opp, g_yh, src, out, scale, hs.tm);
      __syncthreads();
    }
  }
}

// ---- per-op V kernels ----

template <class T>
__global__ void v_ldr_kernel(const T* planes, T* out, Geometry g, FLIP_GRID_CONSTANT const KernelTaps<T> taps, T eps,
                             ColorConsts<T> k) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) ldr_pixel(planes, out, g, t, i, eps, k);
}

template <class T>
__global__ void v_ldr_vjp_kernel(const T* grad, const T* planes, T* gplanes, Geometry g,
                                 FLIP_GRID_CONSTANT const KernelTaps<T> taps, T eps, ColorConsts<T> k) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) ldr_vjp_pixel(grad, planes, gplanes, g, t, i, eps, k);
}

template <class T>
__global__ void v_csf_kernel(const T* planes, T* out, Geometry g, FLIP_GRID_CONSTANT const KernelTaps<T> taps) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) csf_pixel(planes, out, g, t, i);
}

template <class T>
__global__ void v_csf_vjp_kernel(const T* grad, const T* planes, T* gplanes, Geometry g,
                                 FLIP_GRID_CONSTANT const KernelTaps<T> taps) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) csf_vjp_pixel(grad, planes, gplanes, g, t, i);
}

template <class T>
__global__ void v_feat_kernel(const T* planes, T* out, Geometry g, FLIP_GRID_CONSTANT const KernelTaps<T> taps, T eps) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) feat_pixel(planes, out, g, t, i, eps);
}

template <class T>
__global__ void v_feat_vjp_kernel(const T* grad, const T* planes, T* gplanes, Geometry g,
                                  FLIP_GRID_CONSTANT const KernelTaps<T> taps, T eps) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) feat_vjp_pixel(grad, planes, gplanes, g, t, i, eps);
}

template <class T>
__global__ void v_hdr_kernel(const T* planes, T* out, T* emap, int32_t* index, Geometry g,
                             FLIP_GRID_CONSTANT const KernelTaps<T> taps, T eps, ColorConsts<T> k, HdrStep<T> hs) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) hdr_max_pixel(planes, out, emap, index, g, t, i, eps, k, hs);
}

template <class T>
__global__ void v_hdr_vjp_kernel(const T* grad, const int32_t* index, const T* planes, T* gplanes, Geometry g,
                                 FLIP_GRID_CONSTANT const KernelTaps<T> taps, T eps, ColorConsts<T> k, HdrStep<T> hs) {
  const TapsView<T> t = taps.view();
  FLIP_GRID_STRIDE(i, g.n * g.hw()) hdr_vjp_pixel(grad, index, planes, gplanes, g, t, i, eps, k, hs);
}

template <class T>
__global__ void hunt_hyab_kernel(const T* test, const T* ref, T* out, int64_t n, int64_t hw, T eps, ColorConsts<T> k) {
  FLIP_GRID_STRIDE(i, n * hw) hunt_hyab_pixel(test, ref, out, hw, i, eps, k);
}

template <class T>
__global__ void hunt_hyab_vjp_kernel(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, int64_t n,
                                     int64_t hw, T eps, ColorConsts<T> k) {
  FLIP_GRID_STRIDE(i, n * hw) hunt_hyab_vjp_pixel(grad, test, ref, g_test, g_ref, hw, i, eps, k);
}

template <class T>
void launch_h(const T* src0, const T* src1, int channels, const Geometry& g, Input mode, const KernelTaps<T>& t,
              T* planes, cudaStream_t s, HdrStep<T> hs = HdrStep<T>::none()) {
  const size_t smem = h_smem_bytes<T>(t.rmax);
  allow_shared_memory(reinterpret_cast<const void*>(&h_kernel<T>), smem);
  h_kernel<T><<<row_grid(g), kBlock, smem, s>>>(src0, src1, channels, g, mode, t, planes, hs);
}

template <class T>
void launch_vt_ht(const T* gplanes, T* tplanes, const T* src0, const T* src1, T* out0, T* out1, int channels,
                  const Geometry& g, Input mode, const KernelTaps<T>& t, cudaStream_t s,
                  HdrStep<T> hs = HdrStep<T>::none()) {
  const int wanted = (out0 != nullptr ? 1 : 0) | (out1 != nullptr ? 2 : 0);
  vt_kernel<T><<<blocks_for(g.n * g.images * g.hw()), kBlock, 0, s>>>(gplanes, tplanes, g, t, wanted);
  const size_t smem = ht_smem_bytes<T>(t.rmax, g.planes());
  allow_shared_memory(reinterpret_cast<const void*>(&ht_kernel<T>), smem);
  ht_kernel<T><<<row_grid(g), kBlock, smem, s>>>(tplanes, src0, src1, out0, out1, channels, g, mode, t, hs);
}

template <class T>
Input ldr_input(const Params<T>& p) {
  return p.srgb ? Input::kSrgb : Input::kLinear;
}

template <class T>
void launch_fused(const T* test, const T* ref, T* out, const Geometry& g, const KernelTaps<T>& t, Input mode, T eps,
                  ColorConsts<T> k, cudaStream_t s, HdrStep<T> hs, T* emap, int32_t* index) {
  const size_t smem = fused_smem_bytes<T>(t.rmax);
  allow_shared_memory(reinterpret_cast<const void*>(&fused_ldr_kernel<T>), smem);
  const dim3 grid(static_cast<unsigned>((g.w + kTileW - 1) / kTileW),
                  static_cast<unsigned>(std::min<int64_t>((g.h + kTileH - 1) / kTileH, kMaxGridY)),
                  static_cast<unsigned>(std::min<int64_t>(g.n, kMaxGridZ)));
  fused_ldr_kernel<T><<<grid, kFusedThreads, smem, s>>>(test, ref, out, g, t, mode, eps, k, hs, emap, index);
}

template <class T>
HdrStep<T> hdr_step(const Params<T>& p, int64_t i) {
  return HdrStep<T>{p.exposures, p.counts, p.E, i, p.tm};
}

inline dim3 tile_grid(const Geometry& g, int64_t tiles_y, int64_t z) {
  return dim3(static_cast<unsigned>((g.w + kTileW - 1) / kTileW),
              static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(tiles_y, kMaxGridY))),
              static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(z, kMaxGridZ))));
}

// One band of the tiled backward for one step (LDR-FLIP: hs none; HDR-FLIP: one exposure): kernel 1
// writes the band's gradient planes, kernel 2, queued after it on the same stream, reads them.
template <class T>
void launch_tiled_band(const Params<T>& p, const BackwardBand& b, Input mode, HdrStep<T> hs, cudaStream_t s) {
  const int R = p.taps.rmax;
  const size_t smem1 = fused_smem_bytes<T>(R), smem2 = tiled_t_smem_bytes<T>(R);
  // Kernel 1 writes every gradient-plane value kernel 2 of the same band reads (zeros in the tiles
  // an exposure won nowhere), so nothing may come from a band or exposure before: with the whole
  // scratch NaN (all-ones bytes are a NaN in float and double) a read of anything else poisons the
  // gradient.
  if (p.nan_scratch)
    check_cuda(cudaMemsetAsync(p.scratch, 0xFF, static_cast<size_t>(p.plan.scratch_elems(p.g)) * sizeof(T), s),
               "cudaMemsetAsync (FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH)");
  allow_shared_memory(reinterpret_cast<const void*>(&tiled_grad_kernel<T>), smem1);
  allow_shared_memory(reinterpret_cast<const void*>(&tiled_transpose_kernel<T>), smem2);
  tiled_grad_kernel<T><<<tile_grid(p.g, tiled_grad_tiles_y(b), b.n1 - b.n0), kFusedThreads, smem1, s>>>(
      p.test, p.ref, p.grad, p.index, p.scratch, p.g, b, p.taps, mode, p.eps, p.k, hs);
  tiled_transpose_kernel<T>
      <<<tile_grid(p.g, (b.y1 - b.y0 + kTileH - 1) / kTileH, (b.n1 - b.n0) * b.images()), kFusedThreads, smem2, s>>>(
          p.scratch, p.test, p.ref, p.index, p.g_test, p.g_ref, p.g, b, p.taps, mode, hs);
}

}  // namespace

template <class T>
void ldr_flip_forward_fused(const Params<T>& p, cudaStream_t s) {
  launch_fused(p.test, p.ref, p.out, p.g, p.taps, ldr_input(p), p.eps, p.k, s, HdrStep<T>::none(),
               static_cast<T*>(nullptr), static_cast<int32_t*>(nullptr));
}

template <class T>
void ldr_flip_forward(const Params<T>& p, cudaStream_t s) {
  launch_h(p.test, p.ref, 3, p.g, ldr_input(p), p.taps, p.planes, s);
  v_ldr_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.planes, p.out, p.g, p.taps, p.eps, p.k);
}

template <class T>
void ldr_flip_backward(const Params<T>& p, cudaStream_t s) {
  launch_h(p.test, p.ref, 3, p.g, ldr_input(p), p.taps, p.planes, s);
  v_ldr_vjp_kernel<T>
      <<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.grad, p.planes, p.gplanes, p.g, p.taps, p.eps, p.k);
  // The H planes are dead now: they hold the transposed-vertical planes.
  launch_vt_ht(p.gplanes, p.planes, p.test, p.ref, p.g_test, p.g_ref, 3, p.g, ldr_input(p), p.taps, s);
}

template <class T>
void ldr_flip_backward_tiled(const Params<T>& p, cudaStream_t s) {
  for (int64_t j = 0; j < p.plan.count(); ++j)
    launch_tiled_band(p, p.plan.band(p.g, j), ldr_input(p), HdrStep<T>::none(), s);
}

template <class T>
void hdr_flip_forward_fused(const Params<T>& p, cudaStream_t s) {
  for (int64_t i = 0; i < p.E; ++i)
    launch_fused(p.test, p.ref, p.out, p.g, p.taps, Input::kHdr, p.eps, p.k, s, hdr_step(p, i), p.emap, p.index);
}

template <class T>
void hdr_flip_forward(const Params<T>& p, cudaStream_t s) {
  // out, emap and index arrive initialised (0, 0, -1); one exposure per step, all on the stream.
  for (int64_t i = 0; i < p.E; ++i) {
    const HdrStep<T> hs = hdr_step(p, i);
    launch_h(p.test, p.ref, 3, p.g, Input::kHdr, p.taps, p.planes, s, hs);
    v_hdr_kernel<T>
        <<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.planes, p.out, p.emap, p.index, p.g, p.taps, p.eps, p.k, hs);
  }
}

template <class T>
void hdr_flip_backward(const Params<T>& p, cudaStream_t s) {
  // g_test and g_ref arrive zeroed; each exposure adds the gradient of the pixels it won.
  for (int64_t i = 0; i < p.E; ++i) {
    const HdrStep<T> hs = hdr_step(p, i);
    launch_h(p.test, p.ref, 3, p.g, Input::kHdr, p.taps, p.planes, s, hs);
    v_hdr_vjp_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.grad, p.index, p.planes, p.gplanes, p.g,
                                                                        p.taps, p.eps, p.k, hs);
    launch_vt_ht(p.gplanes, p.planes, p.test, p.ref, p.g_test, p.g_ref, 3, p.g, Input::kHdr, p.taps, s, hs);
  }
}

template <class T>
void hdr_flip_backward_tiled(const Params<T>& p, cudaStream_t s) {
  // g_test and g_ref arrive zeroed; in each band, each exposure adds the gradient of the pixels it
  // won, in exposure order.
  for (int64_t j = 0; j < p.plan.count(); ++j) {
    const BackwardBand b = p.plan.band(p.g, j);
    for (int64_t i = 0; i < p.E; ++i) launch_tiled_band(p, b, Input::kHdr, hdr_step(p, i), s);
  }
}

template <class T>
void csf_filter_forward(const Params<T>& p, cudaStream_t s) {
  launch_h(p.test, p.test, 3, p.g, Input::kOpponent, p.taps, p.planes, s);
  v_csf_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.planes, p.out, p.g, p.taps);
}

template <class T>
void csf_filter_backward(const Params<T>& p, cudaStream_t s) {
  launch_h(p.test, p.test, 3, p.g, Input::kOpponent, p.taps, p.planes, s);
  v_csf_vjp_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.grad, p.planes, p.gplanes, p.g, p.taps);
  launch_vt_ht(p.gplanes, p.planes, p.test, p.test, p.g_test, static_cast<T*>(nullptr), 3, p.g, Input::kOpponent,
               p.taps, s);
}

template <class T>
void feature_difference_forward(const Params<T>& p, cudaStream_t s) {
  launch_h(p.test, p.ref, 1, p.g, Input::kAchromatic, p.taps, p.planes, s);
  v_feat_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.planes, p.out, p.g, p.taps, p.eps);
}

template <class T>
void feature_difference_backward(const Params<T>& p, cudaStream_t s) {
  launch_h(p.test, p.ref, 1, p.g, Input::kAchromatic, p.taps, p.planes, s);
  v_feat_vjp_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.grad, p.planes, p.gplanes, p.g, p.taps, p.eps);
  launch_vt_ht(p.gplanes, p.planes, p.test, p.ref, p.g_test, p.g_ref, 1, p.g, Input::kAchromatic, p.taps, s);
}

template <class T>
void hunt_hyab_forward(const Params<T>& p, cudaStream_t s) {
  hunt_hyab_kernel<T>
      <<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.test, p.ref, p.out, p.g.n, p.g.hw(), p.eps, p.k);
}

template <class T>
void hunt_hyab_backward(const Params<T>& p, cudaStream_t s) {
  hunt_hyab_vjp_kernel<T><<<blocks_for(p.g.n * p.g.hw()), kBlock, 0, s>>>(p.grad, p.test, p.ref, p.g_test, p.g_ref,
                                                                          p.g.n, p.g.hw(), p.eps, p.k);
}

#define FLIP_INSTANTIATE(T)                                                     \
  template void ldr_flip_forward_fused<T>(const Params<T>&, cudaStream_t);      \
  template void ldr_flip_forward<T>(const Params<T>&, cudaStream_t);            \
  template void ldr_flip_backward<T>(const Params<T>&, cudaStream_t);           \
  template void ldr_flip_backward_tiled<T>(const Params<T>&, cudaStream_t);     \
  template void hdr_flip_forward_fused<T>(const Params<T>&, cudaStream_t);      \
  template void hdr_flip_forward<T>(const Params<T>&, cudaStream_t);            \
  template void hdr_flip_backward<T>(const Params<T>&, cudaStream_t);           \
  template void hdr_flip_backward_tiled<T>(const Params<T>&, cudaStream_t);     \
  template void csf_filter_forward<T>(const Params<T>&, cudaStream_t);          \
  template void csf_filter_backward<T>(const Params<T>&, cudaStream_t);         \
  template void feature_difference_forward<T>(const Params<T>&, cudaStream_t);  \
  template void feature_difference_backward<T>(const Params<T>&, cudaStream_t); \
  template void hunt_hyab_forward<T>(const Params<T>&, cudaStream_t);           \
  template void hunt_hyab_backward<T>(const Params<T>&, cudaStream_t);
FLIP_INSTANTIATE(float)
FLIP_INSTANTIATE(double)
#undef FLIP_INSTANTIATE

}  // namespace cuda
}  // namespace flip
