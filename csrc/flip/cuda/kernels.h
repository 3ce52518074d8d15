// Launchers of the CUDA kernels (kernels.cu) on raw device pointers and a stream. No torch here:
// csrc/ops/cuda.cpp allocates the planes, builds the taps argument and calls these. A launcher
// throws std::runtime_error when a CUDA runtime call it makes fails (kernel launches themselves are
// checked by the caller).
#pragma once

#include <cuda_runtime_api.h>

#include "../passes.h"

// __grid_constant__ (CUDA 11.7+, sm_70+) lets a kernel take the address of a by-value parameter
// without copying it to per-thread local memory: the taps below are then read straight from the
// kernel's parameter space. Older toolkits still compile (with that copy).
#if defined(__CUDACC_VER_MAJOR__) && \
    (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7))
#define FLIP_GRID_CONSTANT __grid_constant__
#else
#define FLIP_GRID_CONSTANT
#endif

namespace flip {
namespace cuda {

// Bytes of filter taps a launch carries by value. With the rest of a kernel's arguments this stays
// under the 4 KB parameter limit of every toolkit. Seven filters of radius r take 7 * (4r + 2)
// values, so float32 fits up to ppd ~203 and float64 up to ppd ~97 (ppd 67: 282 values, 1.1 KB in
// float32); larger radii use device memory (KernelTaps::device).
constexpr size_t kInlineTapBytes = 3072;

// The seven filters of TapsView in one launch argument. Taps passed by value need no device
// allocation, so a first call under CUDA graph capture or inside torch.compile's cudagraph warm-up
// allocates nothing from PyTorch's caching allocator (whose memory would then belong to a graph's
// private pool) and never synchronises. Each filter is laid out as w (2r + 1), left (r), right (r).
template <class T>
struct KernelTaps {
  static constexpr int kInlineCapacity = static_cast<int>(kInlineTapBytes / sizeof(T));
  // Per filter of both banks (kBankFilters, plane_counts.h), in TapsView's order: y, cx, cz1,
  // cz2, g, dg, ddg.
  int offset[kBankFilters] = {};
  int radius[kBankFilters] = {};
  int rmax = 0;
  // Null: the taps are in `inline_taps`. Else: device memory owned by csrc/ops/cuda.cpp (outside
  // the caching allocator, alive for the process) holding the same layout.
  const T* device = nullptr;
  T inline_taps[kInlineCapacity] = {};

  // The filters as TapsView (passes.h) pointing into this struct or into `device`. A kernel calls it
  // on its FLIP_GRID_CONSTANT parameter, so the pointers stay in parameter space.
  FLIP_HD TapsView<T> view() const {
    const T* base = device != nullptr ? device : inline_taps;
    FilterView<T> f[kBankFilters];
    for (int i = 0; i < kBankFilters; ++i) {
      const T* w = base + offset[i];
      const int r = radius[i];
      f[i] = FilterView<T>{w, w + 2 * r + 1, w + 3 * r + 1, r};
    }
    static_assert(kBankFilters == 7, "TapsView lists the seven filters of the banks");
    return TapsView<T>{f[0], f[1], f[2], f[3], f[4], f[5], f[6], rmax};
  }
};
// A kernel's other arguments take under 200 bytes, so every argument list stays within the 4 KB
// that toolkits before CUDA 12.1 allow.
static_assert(sizeof(KernelTaps<double>) + 512 <= 4096, "the taps argument leaves too little of the 4 KB");

// What the launchers read, in one struct (nvdiffrast's style) instead of long positional lists:
// csrc/ops/cuda.cpp fills the fields an op needs and leaves the rest null. All buffers are on
// the device, contiguous, N x C x H x W.
template <class T>
struct Params {
  Geometry g;          // batch and image size, images per item, which banks run
  KernelTaps<T> taps;  // the filter taps, by value or in device memory (unused by hunt_hyab)
  T eps = T(0);
  ColorConsts<T> k{};  // colour constants (LDR/HDR-FLIP, hunt_hyab)
  bool srgb = false;   // LDR-FLIP: sRGB (else linear) input
  // Inputs: the two images (csf_filter: the opponent image in test), the incoming gradient of a
  // backward.
  const T* test = nullptr;
  const T* ref = nullptr;
  const T* grad = nullptr;
  // HDR-FLIP: exposures N x E (stops), item n uses the first counts[n], with tone mapper tm.
  const T* exposures = nullptr;
  const int64_t* counts = nullptr;
  int64_t E = 0;
  ToneMapper tm = ToneMapper::kAces;
  // Outputs: the map; HDR-FLIP's exposure map and winning index (the forward writes the index, the
  // backward reads it); the gradients w.r.t. test and ref (null where not wanted).
  T* out = nullptr;
  T* emap = nullptr;
  int32_t* index = nullptr;
  T* g_test = nullptr;
  T* g_ref = nullptr;
  // Scratch of the plane-based kernels: planes n * images * g.planes() * H * W, gplanes
  // n * images * g.gplanes() * H * W (see passes.h).
  T* planes = nullptr;
  T* gplanes = nullptr;
  // The tiled backward: its bands (plan_backward, for the gradients g_test / g_ref asks for) and
  // their scratch of plan.scratch_elems(g) values.
  BackwardPlan plan{};
  T* scratch = nullptr;
  // A debugging aid (FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH, csrc/ops/cuda.cpp): fill the scratch with NaN
  // before each band's kernel 1, so that kernel 2 reading a value kernel 1 did not write gives NaN.
  bool nan_scratch = false;
};

// Shared memory the H and HT passes need; the caller checks it against the device limit.
template <class T>
size_t h_smem_bytes(int R) {
  return sizeof(T) * h_smem_len(kBlock, R);
}
template <class T>
size_t ht_smem_bytes(int R, int planes) {
  return sizeof(T) * ht_smem_len(kBlock, R, planes);
}

// The fused forward (no planes in global memory) needs this much shared memory per block; the
// caller uses it when the device offers that much (float32 at usual pixels-per-degree).
template <class T>
size_t fused_smem_bytes(int R) {
  return sizeof(T) * fused_smem_len(R);
}

// The tiled backward's two kernels need these (kernel 1 is the fused forward's layout); the
// caller uses it when the device offers both.
template <class T>
size_t tiled_t_smem_bytes(int R) {
  return sizeof(T) * tiled_t_smem_len(R);
}

// The launchers, each on stream s; the fields each reads besides g, taps, eps and k:
// LDR-FLIP: srgb, test, ref; forward -> out (fused: no planes; else planes), backward: grad ->
// g_test, g_ref with planes and gplanes.
template <class T>
void ldr_flip_forward_fused(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_backward(const Params<T>& p, cudaStream_t s);
// The tiled backward (no planes): grad -> g_test, g_ref (null where not wanted, and no work done
// for it) with plan and scratch. 2 launches per band.
template <class T>
void ldr_flip_backward_tiled(const Params<T>& p, cudaStream_t s);
// HDR-FLIP: test, ref, exposures, counts, E, tm; forward -> out, emap, index, which must arrive
// initialised to 0, 0, -1 (fused: no planes; else planes); backward: grad, index -> g_test, g_ref,
// which must arrive zeroed where not null, with planes and gplanes.
template <class T>
void hdr_flip_forward_fused(const Params<T>& p, cudaStream_t s);
template <class T>
void hdr_flip_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void hdr_flip_backward(const Params<T>& p, cudaStream_t s);
// Tiled: as ldr_flip_backward_tiled, 2 launches per band and exposure; g_test, g_ref zeroed.
template <class T>
void hdr_flip_backward_tiled(const Params<T>& p, cudaStream_t s);
// csf_filter: the opponent image in test -> out; backward: grad -> g_test. Planes (and gplanes).
template <class T>
void csf_filter_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void csf_filter_backward(const Params<T>& p, cudaStream_t s);
// feature_difference: test, ref -> out; backward: grad -> g_test, g_ref. Planes (and gplanes).
template <class T>
void feature_difference_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void feature_difference_backward(const Params<T>& p, cudaStream_t s);
// hunt_hyab: test, ref -> out; backward: grad -> g_test, g_ref. No taps, no planes.
template <class T>
void hunt_hyab_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void hunt_hyab_backward(const Params<T>& p, cudaStream_t s);

}  // namespace cuda
}  // namespace flip
