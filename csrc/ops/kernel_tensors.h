// The tensors the ops' CPU and CUDA kernels (and the test-only emulator) take and make, on the stable
// ABI's tensors: compute-dtype copies, outputs and gradient buffers, the dtype dispatch.
#pragma once

#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../flip/cuda/filter_sums.h"
#include "schema_types.h"

namespace flip_ops {

// The compute dtype (schema_types.h), contiguous NCHW: what the kernels want.
inline Tensor compute_copy(const Tensor& t) {
  return torch::stable::contiguous(torch::stable::to(t, compute_dtype(t)));
}

inline Tensor to_dtype(const Tensor& t, ScalarType dtype) {
  return t.scalar_type() == dtype ? t : torch::stable::to(t, dtype);
}

inline Tensor contiguous_as(const Tensor& t, ScalarType dtype) { return torch::stable::contiguous(to_dtype(t, dtype)); }

inline int64_t batch_of(const Tensor& t) { return t.dim() == 4 ? t.size(0) : 1; }

// The kernels' view of an image batch: images per batch item and which filter banks run.
inline flip::Geometry geometry(const Tensor& t, int images, bool csf, bool feat) {
  return flip::Geometry{batch_of(t), t.size(-2), t.size(-1), images, csf, feat};
}

template <class T>
T* data(const Tensor& t) {
  return static_cast<T*>(t.data_ptr());
}

template <class T>
T* ptr_or_null(const Tensor& t) {
  return t.numel() ? data<T>(t) : nullptr;
}

// An uninitialised tensor like `like` (its dtype and device) with the given sizes.
inline Tensor empty_as(const Tensor& like, const std::vector<int64_t>& sizes) {
  return torch::stable::new_empty(like, torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()));
}
inline Tensor empty_as(const Tensor& like, const std::vector<int64_t>& sizes, ScalarType dtype) {
  return torch::stable::new_empty(like, torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()), dtype);
}
inline Tensor nothing_like(const Tensor& like) { return empty_as(like, {0}); }

// Images of 8-bit codes (uint8, ldr_flip's) as the float32 values k / 255 that the CUDA kernels and
// their emulator take. The divisor is a tensor on the images' device: divided by a number, torch's
// CUDA kernels multiply by its rounded reciprocal, which gives other values for some codes (the CPU
// kernels' values, and flip_loss.image_checks.code_values, are k / 255 correctly rounded).
inline Tensor code_values(const Tensor& codes) {
  const Tensor values = torch::stable::to(codes, ScalarType::Float);
  Tensor divisor = empty_as(values, {});
  torch::stable::fill_(divisor, 255.0);
  std::array<StableIValue, 2> stack{torch::stable::detail::from(values), torch::stable::detail::from(divisor)};
  // The shim's own error macro has another name in each release: its status is checked here.
  if (torch_call_dispatcher("aten::div", "Tensor", stack.data(), TORCH_ABI_VERSION) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error("flip: dividing 8-bit codes by 255 failed");
  return torch::stable::contiguous(torch::stable::detail::to<Tensor>(stack[0]));
}

// An LDR-FLIP image as those kernels take it: its compute-dtype copy, or the values of its codes.
inline Tensor ldr_values(const Tensor& image) {
  return image.scalar_type() == ScalarType::Byte ? code_values(image) : compute_copy(image);
}

// Runs f(T{}) with T the C++ type of a compute dtype (float32 or float64).
template <class F>
void dispatch_compute_dtype(ScalarType t, F&& f) {
  if (t == ScalarType::Double) {
    f(double{});
  } else {
    f(float{});
  }
}

// NaN/Inf image data found by a kernel: RuntimeError in Python.
inline void check_finite(bool ok, const char* op) {
  if (!ok) throw std::runtime_error(std::string("flip::") + op + ": an input contains NaN or infinite values");
}

// Gradient outputs: computed only where output_mask asks, else an empty tensor.
inline std::array<Tensor, 2> grad_buffers(const Tensor& like, Mask mask) {
  return {mask[0] ? torch::stable::empty_like(like) : nothing_like(like),
          mask[1] ? torch::stable::empty_like(like) : nothing_like(like)};
}

inline Pair cast_back(const std::array<Tensor, 2>& g, const Tensor& a, const Tensor& b) {
  return {to_dtype(g[0], a.scalar_type()), to_dtype(g[1], b.scalar_type())};
}

}  // namespace flip_ops
