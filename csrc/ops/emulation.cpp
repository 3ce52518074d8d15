// flip::_gpu_emulation: runs the CUDA kernels' per-thread code (csrc/flip/passes.h) on the CPU,
// block by block, so that tests on machines without a GPU check the GPU formulation against the
// CPU kernels. For tests only; slow.
#include <ATen/Dispatch.h>
#include <torch/library.h>

#include <string>
#include <vector>

#include "../flip/cpu/emulate.h"
#include "checks.h"
#include "common.h"

namespace flip_ops {
namespace {

namespace em = flip::emulate;
using flip::Geometry;

std::vector<at::Tensor> gpu_emulation(c10::string_view op_name, at::TensorList inputs, at::ArrayRef<double> scalars,
                                      c10::string_view space) {
  const std::string op(op_name.data(), op_name.size());
  TORCH_CHECK(!inputs.empty() && !scalars.empty(), "flip::_gpu_emulation: missing inputs");
  std::vector<at::Tensor> x;
  for (const auto& t : inputs) x.push_back(t.is_floating_point() ? compute_copy(t) : t);
  const double ppd = scalars[0];
  const double eps = scalars.size() > 1 ? scalars[1] : 0.0;
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(x[0].scalar_type(), "flip::_gpu_emulation", [&] {
    using T = scalar_t;
    em::HostTaps<T> taps(ppd);
    const auto& tv = taps.view;
    auto p = [](at::Tensor& t) { return t.data_ptr<T>(); };
    const T e = static_cast<T>(eps);
    if (op == "ldr_flip") {
      auto o = at::empty(map_sizes(x[0]), x[0].options());
      em::ldr_flip_forward<T>(p(x[0]), p(x[1]), p(o), geometry(x[0], 2, true, true), tv, parse_input_space(space), e);
      out = {o};
    } else if (op == "ldr_flip_fused") {
      auto o = at::empty(map_sizes(x[0]), x[0].options());
      em::ldr_flip_forward_fused<T>(p(x[0]), p(x[1]), p(o), geometry(x[0], 2, true, true), tv,
                                    parse_input_space(space), e);
      out = {o};
    } else if (op == "ldr_flip_backward") {
      auto gt = at::empty_like(x[1]), gr = at::empty_like(x[2]);
      em::ldr_flip_backward<T>(p(x[0]), p(x[1]), p(x[2]), p(gt), p(gr), geometry(x[1], 2, true, true), tv,
                               parse_input_space(space), e);
      out = {gt, gr};
    } else if (op == "hdr_flip" || op == "hdr_flip_fused" || op == "hdr_flip_backward") {
      // inputs: [grad,] test, reference, exposures (N x E), counts (N), [index]; input_space = tone mapper.
      const bool bwd = op == "hdr_flip_backward";
      const size_t o = bwd ? 1 : 0;
      auto ex = inputs[o + 2].to(x[o].scalar_type()).contiguous();
      auto cn = inputs[o + 3].to(at::kLong).contiguous();
      const Geometry g = geometry(x[o], 2, true, true);
      const int tm = parse_tone_mapper(space);
      if (!bwd) {
        auto m = at::empty(map_sizes(x[0]), x[0].options()), em = at::empty_like(m);
        auto ix = at::empty(map_sizes(x[0]), x[0].options().dtype(at::kInt));
        if (op == "hdr_flip_fused")
          em::hdr_flip_forward_fused<T>(p(x[0]), p(x[1]), p(ex), cn.data_ptr<int64_t>(), ex.size(1), p(m), p(em),
                                        ix.data_ptr<int32_t>(), g, tv, tm, e);
        else
          em::hdr_flip_forward<T>(p(x[0]), p(x[1]), p(ex), cn.data_ptr<int64_t>(), ex.size(1), p(m), p(em),
                                  ix.data_ptr<int32_t>(), g, tv, tm, e);
        out = {m, em, ix};
      } else {
        auto ix = inputs[5].contiguous();
        auto gt = at::empty_like(x[1]), gr = at::empty_like(x[2]);
        em::hdr_flip_backward<T>(p(x[0]), p(x[1]), p(x[2]), p(ex), cn.data_ptr<int64_t>(), ex.size(1),
                                 ix.data_ptr<int32_t>(), p(gt), p(gr), g, tv, tm, e);
        out = {gt, gr};
      }
    } else if (op == "csf_filter") {
      auto o = at::empty_like(x[0]);
      em::csf_filter_forward<T>(p(x[0]), p(o), geometry(x[0], 1, true, false), tv);
      out = {o};
    } else if (op == "csf_filter_backward") {
      auto go = at::empty_like(x[1]);
      em::csf_filter_backward<T>(p(x[0]), p(x[1]), p(go), geometry(x[1], 1, true, false), tv);
      out = {go};
    } else if (op == "feature_difference") {
      auto o = at::empty_like(x[0]);
      em::feature_difference_forward<T>(p(x[0]), p(x[1]), p(o), geometry(x[0], 2, false, true), tv, e);
      out = {o};
    } else if (op == "feature_difference_backward") {
      auto gt = at::empty_like(x[1]), gr = at::empty_like(x[2]);
      em::feature_difference_backward<T>(p(x[0]), p(x[1]), p(x[2]), p(gt), p(gr), geometry(x[1], 2, false, true),
                                         tv, e);
      out = {gt, gr};
    } else {
      TORCH_CHECK(false, "flip::_gpu_emulation: unknown op '", op, "'");
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, CPU, m) { m.impl("_gpu_emulation", &gpu_emulation); }

}  // namespace flip_ops
