// Launchers of the CUDA kernels (kernels.cu) on raw device pointers and a stream: the launch
// sequences of op_launches.h on the GPU. No torch here: csrc/ops/cuda.cpp allocates the planes,
// builds the taps argument (launch_params.h) and calls these. A launcher throws std::runtime_error
// when a CUDA runtime call it makes fails, when an error of earlier work is pending before its
// first launch, or when a launch fails (launch_check.h); it leaves no error of its own pending.
#pragma once

#include <cuda_runtime_api.h>

#include "launch_params.h"

namespace flip {
namespace cuda {

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
// LDR-FLIP with kept sensitivities (sensitivities, plan = whole_batch_plan for the images kept):
// the forward -> out and sensitivities; the backward: grad, sensitivities -> g_test, g_ref (the
// images plan names). Row passes (planes; the backward also gplanes) or tiled (1 launch each).
template <class T>
void ldr_flip_forward_keep(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_forward_keep_tiled(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_backward_kept(const Params<T>& p, cudaStream_t s);
template <class T>
void ldr_flip_backward_kept_tiled(const Params<T>& p, cudaStream_t s);
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

// Whether the GPU can run this build at all, asked before its first op there (flip_loss/_ops.py
// sends a device that cannot to the portable path instead of failing mid-training).
// The compute capabilities the kernels were compiled for, as nvcc lists them ("750,800,860").
const char* compiled_architectures();
// The CUDA runtime's answer for `device`: cudaSuccess when the kernels have an image it runs (SASS
// of its generation or PTX it can JIT), with that image's SASS and PTX versions (major * 10 +
// minor), else why not (cudaErrorNoKernelImageForDevice, ...). The current device is restored and
// an error of this query is not left pending.
cudaError_t kernel_image(int device, int* binary_version, int* ptx_version);

}  // namespace cuda
}  // namespace flip
