// Launchers of the CUDA kernels (kernels.cu) on raw device pointers and a stream. No torch here:
// csrc/ops/cuda.cpp allocates the planes, builds the device taps and calls these.
#pragma once

#include <cuda_runtime_api.h>

#include "../passes.h"

namespace flip {
namespace cuda {

// What the launchers read, in one struct (nvdiffrast's style) instead of long positional lists:
// csrc/ops/cuda.cpp fills the fields an op needs and leaves the rest null. All buffers are on
// the device, contiguous, N x C x H x W.
template <class T>
struct Params {
  Geometry g;                 // batch and image size, images per item, which banks run
  TapsView<T> taps;           // device-resident taps (unused by hunt_hyab)
  T eps = T(0);
  ColorConsts<T> k{};         // colour constants (LDR/HDR-FLIP, hunt_hyab)
  bool srgb = false;          // LDR-FLIP: sRGB (else linear) input
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

// The launchers, each on stream s; the fields each reads besides g, taps, eps and k:
// LDR-FLIP: srgb, test, ref; forward -> out (fused: no planes; else planes), backward: grad ->
// g_test, g_ref with planes and gplanes.
template <class T>
void ldr_flip_forward_fused(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_backward(const Params<T>& p, cudaStream_t s);
// HDR-FLIP: test, ref, exposures, counts, E, tm; forward -> out, emap, index, which must arrive
// initialised to 0, 0, -1 (fused: no planes; else planes); backward: grad, index -> g_test, g_ref,
// which must arrive zeroed where not null, with planes and gplanes.
template <class T>
void hdr_flip_forward_fused(const Params<T>& p, cudaStream_t s);
template <class T>
void hdr_flip_forward(const Params<T>& p, cudaStream_t s);
template <class T>
void hdr_flip_backward(const Params<T>& p, cudaStream_t s);
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
