// Tensor plumbing shared by the CPU and CUDA kernels of the ops (and the test-only emulator).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>

#include <array>
#include <tuple>
#include <vector>

#include "../flip/passes.h"
#include "signature.h"

namespace flip_ops {

// The compute dtype (signature.h), contiguous NCHW: what the kernels want.
inline at::Tensor compute_copy(const at::Tensor& t) { return t.to(compute_dtype(t)).contiguous(); }

inline int64_t batch_of(const at::Tensor& t) { return t.dim() == 4 ? t.size(0) : 1; }

// The kernels' view of an image batch: images per batch item and which filter banks run.
inline flip::Geometry geometry(const at::Tensor& t, int images, bool csf, bool feat) {
  return flip::Geometry{batch_of(t), t.size(-2), t.size(-1), images, csf, feat};
}

template <class T>
T* ptr_or_null(at::Tensor& t) {
  return t.numel() ? t.data_ptr<T>() : nullptr;
}

inline void check_finite(bool ok, const char* op) {
  TORCH_CHECK(ok, "flip::", op, ": an input contains NaN or infinite values");
}

// Gradient outputs: computed only where output_mask asks, else an empty tensor.
inline std::array<at::Tensor, 2> grad_buffers(const at::Tensor& like, Mask mask) {
  return {mask[0] ? at::empty_like(like) : at::empty({0}, like.options()),
          mask[1] ? at::empty_like(like) : at::empty({0}, like.options())};
}

inline Pair cast_back(std::array<at::Tensor, 2> g, const at::Tensor& a, const at::Tensor& b) {
  return {g[0].to(a.scalar_type()), g[1].to(b.scalar_type())};
}

}  // namespace flip_ops
