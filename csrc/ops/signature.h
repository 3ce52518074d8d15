// The C++ side of the ops' schema (schema.cpp), shared by their CPU, CUDA, Meta and Autograd
// kernels: the types of `(Tensor, Tensor)` results and `bool[2] output_mask`, and the shape of a
// per-pixel map (error map, exposure map, exposure index).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <tuple>
#include <vector>

namespace flip_ops {

using Pair = std::tuple<at::Tensor, at::Tensor>;  // gradients w.r.t. (test, reference)
using Mask = std::array<bool, 2>;                 // output_mask: which of the two are wanted

// N x 1 x H x W (or 1 x H x W) for an image shaped like `like`; symbolic, for the meta kernels.
inline std::vector<c10::SymInt> map_shape(const at::Tensor& like) {
  auto s = like.sym_sizes().vec();
  s[s.size() - 3] = 1;
  return s;
}

}  // namespace flip_ops
