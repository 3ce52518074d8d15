// Host emulation of the CUDA kernels' launch sequences (csrc/flip/cuda/kernels.cu): the same
// per-thread functions of csrc/flip/passes.h, run block by block and thread by thread. Slow; it
// exists so that CPU-only CI checks the GPU formulation against the CPU kernels. Test-only: built
// by the test suite (tests/emulator/__init__.py), never part of the shipped libraries.
#pragma once

#include <memory>
#include <vector>

#include "flip/filters.h"
#include "flip/passes.h"

namespace flip_emulator {

using flip::Geometry;
using flip::TapsView;

// Host copies of the taps with a view over them. Gradient outputs may be null (not wanted).
template <class T>
struct HostTaps {
  std::shared_ptr<const flip::CsfTaps<T>> csf;
  std::shared_ptr<const flip::FeatureTaps<T>> feat;
  TapsView<T> view;
  explicit HostTaps(double ppd);
};

template <class T>
void ldr_flip_forward(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, bool srgb, T eps);
template <class T>
void ldr_flip_forward_fused(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, bool srgb,
                            T eps);
template <class T>
void hdr_flip_forward_fused(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                            T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t, flip::ToneMapper tm,
                            T eps);
template <class T>
void ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, const Geometry& g,
                       const TapsView<T>& t, bool srgb, T eps);
// The tiled backward (kernels 1 and 2 of passes.h, band by band as kernels.cu runs them), with the
// scratch of plan_backward(..., scratch_bytes).
template <class T>
void ldr_flip_backward_tiled(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, const Geometry& g,
                             const TapsView<T>& t, bool srgb, T eps, int64_t scratch_bytes);
template <class T>
void hdr_flip_backward_tiled(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,
                             int64_t E, const int32_t* index, T* g_test, T* g_ref, const Geometry& g,
                             const TapsView<T>& t, flip::ToneMapper tm, T eps, int64_t scratch_bytes);
template <class T>
void hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                      T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t, flip::ToneMapper tm, T eps);
template <class T>
void hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E,
                       const int32_t* index, T* g_test, T* g_ref, const Geometry& g, const TapsView<T>& t,
                       flip::ToneMapper tm, T eps);
template <class T>
void csf_filter_forward(const T* opp, T* out, const Geometry& g, const TapsView<T>& t);
template <class T>
void csf_filter_backward(const T* grad, const T* opp, T* g_opp, const Geometry& g, const TapsView<T>& t);
template <class T>
void feature_difference_forward(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, T eps);
template <class T>
void feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, const Geometry& g,
                                 const TapsView<T>& t, T eps);

}  // namespace flip_emulator
