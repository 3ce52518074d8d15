// The C++ side of the ops' schema (schema.cpp), shared by their CPU, CUDA, Meta and Autograd
// kernels: the types of `(Tensor, Tensor)` results and `bool[2] output_mask`, the shape of a
// per-pixel map (error map, exposure map, exposure index) and of the sensitivities that
// _ldr_flip_with_sensitivities keeps, and the dtype the kernels compute in.
#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "../flip/plane_counts.h"
#include "../include/flip_loss/op_signatures.h"

namespace flip_ops {

using Pair = flip_loss::op::TensorPair;  // gradients w.r.t. (test, reference)
using Mask = flip_loss::op::OutputMask;  // output_mask: which of the two are wanted

// N x 1 x H x W (or 1 x H x W) for an image shaped like `like`; symbolic, for the meta kernels.
inline std::vector<c10::SymInt> map_shape(const at::Tensor& like) {
  auto s = like.sym_sizes().vec();
  s[s.size() - 3] = 1;
  return s;
}

// float16/bfloat16 are computed (and their sensitivities kept) in float32.
inline at::ScalarType compute_dtype(const at::Tensor& t) {
  return t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

// Planes per image of the sensitivities: the gradient of a pixel's error w.r.t. each of its
// filtered responses, in the kernels' layout of per-response planes.
constexpr int64_t kSensitivityPlanesPerImage = flip::kResponsePlanesPerImage;

// N x 7k x H x W (or 7k x H x W) for images shaped like `like`, k = the number of images in mask.
inline std::vector<c10::SymInt> sensitivities_shape(const at::Tensor& like, Mask mask) {
  auto s = like.sym_sizes().vec();
  s[s.size() - 3] = kSensitivityPlanesPerImage * (int64_t{mask[0]} + int64_t{mask[1]});
  return s;
}

}  // namespace flip_ops
