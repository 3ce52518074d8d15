// Launchers of the CUDA kernels (kernels.cu) on raw device pointers and a stream. No torch here:
// csrc/ops/cuda.cpp allocates the planes, builds the device taps and calls these.
#pragma once

#include <cuda_runtime_api.h>

#include "../passes.h"

namespace flip {
namespace cuda {

constexpr int kBlock = 128;  // threads per H/HT block (one row tile) and per pixel-kernel block

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
template <class T>
void ldr_flip_forward_fused(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, bool srgb,
                            T eps, ColorConsts<T> k, cudaStream_t s);
// HDR-FLIP forward with the fused kernel, one launch per exposure (outputs initialised as below).
template <class T>
void hdr_flip_forward_fused(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                            T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t, int tm, T eps,
                            ColorConsts<T> k, cudaStream_t s);

// planes: n * images * g.planes() * H * W; gplanes: n * images * g.gplanes() * H * W.
template <class T>
void ldr_flip_forward(const T* test, const T* ref, T* out, T* planes, const Geometry& g, const TapsView<T>& t,
                      bool srgb, T eps, ColorConsts<T> k, cudaStream_t s);
template <class T>
void ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, T* planes, T* gplanes,
                       const Geometry& g, const TapsView<T>& t, bool srgb, T eps, ColorConsts<T> k, cudaStream_t s);

// HDR-FLIP over the E exposure columns (item n uses the first counts[n]); out/emap/index must be
// initialised to 0/0/-1, g_test/g_ref (where not null) to 0.
template <class T>
void hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                      T* emap, int32_t* index, T* planes, const Geometry& g, const TapsView<T>& t, int tm, T eps,
                      ColorConsts<T> k, cudaStream_t s);
template <class T>
void hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,
                       int64_t E, const int32_t* index, T* g_test, T* g_ref, T* planes, T* gplanes,
                       const Geometry& g, const TapsView<T>& t, int tm, T eps, ColorConsts<T> k, cudaStream_t s);

template <class T>
void csf_filter_forward(const T* opp, T* out, T* planes, const Geometry& g, const TapsView<T>& t, cudaStream_t s);
template <class T>
void csf_filter_backward(const T* grad, const T* opp, T* g_opp, T* planes, T* gplanes, const Geometry& g,
                         const TapsView<T>& t, cudaStream_t s);

template <class T>
void feature_difference_forward(const T* test, const T* ref, T* out, T* planes, const Geometry& g,
                                const TapsView<T>& t, T eps, cudaStream_t s);
template <class T>
void feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, T* planes,
                                 T* gplanes, const Geometry& g, const TapsView<T>& t, T eps, cudaStream_t s);

template <class T>
void hunt_hyab_forward(const T* test, const T* ref, T* out, int64_t n, int64_t hw, T eps, ColorConsts<T> k,
                       cudaStream_t s);
template <class T>
void hunt_hyab_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, int64_t n, int64_t hw,
                        T eps, ColorConsts<T> k, cudaStream_t s);

}  // namespace cuda
}  // namespace flip
