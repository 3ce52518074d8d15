// The C++ side of the ops' schema (schema.cpp), shared by their CPU and CUDA kernels: the types of
// `(Tensor, Tensor)` results and `bool[2] output_mask`, the shape of a per-pixel map (error map,
// exposure map, exposure index) and of the sensitivities that _ldr_flip_with_sensitivities and
// _ldr_flip_multiscale keep,
// and the dtype the kernels compute in. The kernels are written against PyTorch's stable C++ ABI
// (torch/csrc/stable, torch/headeronly), so that one binary serves every supported torch release.
#pragma once

#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "../flip/plane_counts.h"

namespace flip_ops {

using Tensor = torch::stable::Tensor;
using ScalarType = torch::headeronly::ScalarType;
using Pair = std::tuple<Tensor, Tensor>;  // gradients w.r.t. (test, reference)
using Triple = std::tuple<Tensor, Tensor, Tensor>;
using MaskArg = std::vector<bool>;  // how a `bool[2]` argument reaches a stable kernel
using Mask = std::array<bool, 2>;   // output_mask: which of the two are wanted

// A `bool[2]` argument. The dispatcher does not hold a list to the length its schema names, so a
// list of another length is refused here, before any other check (as flip_loss/op_checks.py does).
inline Mask mask_of(const MaskArg& m) {
  if (m.size() != 2)
    throw std::runtime_error("flip: output_mask must hold 2 values (test, reference), got " + std::to_string(m.size()));
  return {m[0], m[1]};
}

// N x 1 x H x W (or 1 x H x W) for an image shaped like `like`.
inline std::vector<int64_t> map_shape(const Tensor& like) {
  std::vector<int64_t> s(like.sizes().begin(), like.sizes().end());
  s[s.size() - 3] = 1;
  return s;
}

// float16/bfloat16 are computed (and their sensitivities kept) in float32.
inline ScalarType compute_dtype(ScalarType t) {
  return t == ScalarType::Double ? ScalarType::Double : ScalarType::Float;
}
inline ScalarType compute_dtype(const Tensor& t) { return compute_dtype(t.scalar_type()); }

// The dtype of an op's map for images of dtype t: theirs, float32 for uint8 codes (ldr_flip).
inline ScalarType map_dtype(ScalarType t) { return t == ScalarType::Byte ? ScalarType::Float : t; }

// Planes per image of the sensitivities: the gradient of a pixel's error w.r.t. each of its
// filtered responses, in the kernels' layout of per-response planes.
constexpr int64_t kSensitivityPlanesPerImage = flip::kResponsePlanesPerImage;

// N x 7k x H x W (or 7k x H x W) for images shaped like `like`, k = the number of images in mask.
inline std::vector<int64_t> sensitivities_shape(const Tensor& like, Mask mask) {
  std::vector<int64_t> s(like.sizes().begin(), like.sizes().end());
  s[s.size() - 3] = kSensitivityPlanesPerImage * (int64_t{mask[0]} + int64_t{mask[1]});
  return s;
}

// _ldr_flip_multiscale's: each scale's in turn, N x (scales * 7k) x H x W; (0) when mask has none.
inline std::vector<int64_t> multiscale_sensitivities_shape(const Tensor& like, Mask mask, int64_t scales) {
  if (!mask[0] && !mask[1]) return {0};
  std::vector<int64_t> s = sensitivities_shape(like, mask);
  s[s.size() - 3] *= scales;
  return s;
}

}  // namespace flip_ops
