// flip::_gpu_emulation: runs the CUDA kernels' per-thread code (csrc/flip/passes.h) on the CPU,
// block by block, so that tests on machines without a GPU check the GPU formulation against the
// CPU kernels. For tests only; slow. Its arguments get the same checks as the op it emulates, all
// before anything is computed or any filter taps are built (and cached for the whole process).
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

// What each emulated op takes: its tensors, in the order of the real op's tensor arguments
// (grad first for a backward), and its scalars (pixels_per_degree, then eps where it has one).
// For the HDR ops, input_space names the tone mapper.
struct Signature {
  const char* op;
  size_t tensors;
  size_t scalars;
};
constexpr Signature kSignatures[] = {
    {"ldr_flip", 2, 2},           {"ldr_flip_fused", 2, 2},      {"ldr_flip_backward", 3, 2},
    {"hdr_flip", 4, 2},           {"hdr_flip_fused", 4, 2},      {"hdr_flip_backward", 6, 2},
    {"csf_filter", 1, 1},         {"csf_filter_backward", 2, 1}, {"feature_difference", 2, 2},
    {"feature_difference_backward", 3, 2},
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Checks every argument as the emulated op does; returns the dtype the kernels compute in.
at::ScalarType check_arguments(const std::string& op, at::TensorList in, at::ArrayRef<double> scalars,
                               c10::string_view space) {
  const Signature* sig = nullptr;
  for (const auto& s : kSignatures)
    if (op == s.op) sig = &s;
  TORCH_CHECK_VALUE(sig != nullptr, "flip::_gpu_emulation: unknown op '", op, "'");
  TORCH_CHECK_VALUE(in.size() == sig->tensors && scalars.size() == sig->scalars, "flip::_gpu_emulation: ", op,
                    " takes ", sig->tensors, " tensor(s) and ", sig->scalars, " scalar(s), got ", in.size(), " and ",
                    scalars.size());
  const bool backward = op.size() > 9 && op.compare(op.size() - 9, 9, "_backward") == 0;
  const size_t o = backward ? 1 : 0;  // index of the first image
  const double ppd = scalars[0];
  const double eps = sig->scalars > 1 ? scalars[1] : 0.0;
  int64_t grad_channels = 1;
  if (starts_with(op, "ldr_flip")) {
    check_ldr_args(in[o], in[o + 1], ppd, space, eps);
  } else if (starts_with(op, "hdr_flip")) {
    check_hdr_args(in[o], in[o + 1], in[o + 2], in[o + 3], ppd, space, eps);
    check_exposure_values(in[o + 2].to(compute_dtype(in[o])), in[o + 3]);
    if (backward) check_exposure_index(in[5], in[0]);
  } else if (starts_with(op, "csf_filter")) {
    check_csf_args(in[o], ppd);
    grad_channels = 3;
  } else {
    check_feature_args(in[o], in[o + 1], ppd, eps);
  }
  if (backward) check_grad(in[0], in[1], grad_channels);
  return compute_dtype(in[o]);
}

std::vector<at::Tensor> gpu_emulation(c10::string_view op_name, at::TensorList inputs, at::ArrayRef<double> scalars,
                                      c10::string_view space) {
  const std::string op(op_name.data(), op_name.size());
  const at::ScalarType dtype = check_arguments(op, inputs, scalars, space);
  std::vector<at::Tensor> x;
  for (const auto& t : inputs) x.push_back(t.is_floating_point() ? t.to(dtype).contiguous() : t.contiguous());
  const double ppd = scalars[0];
  const double eps = scalars.size() > 1 ? scalars[1] : 0.0;
  std::vector<at::Tensor> out;
  AT_DISPATCH_FLOATING_TYPES(dtype, "flip::_gpu_emulation", [&] {
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
      // tensors: [grad,] test, reference, exposures (N x E), counts (N), [index].
      const bool bwd = op == "hdr_flip_backward";
      const size_t o = bwd ? 1 : 0;
      auto& ex = x[o + 2];
      auto cn = x[o + 3].to(at::kLong);
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
        auto gt = at::empty_like(x[1]), gr = at::empty_like(x[2]);
        em::hdr_flip_backward<T>(p(x[0]), p(x[1]), p(x[2]), p(ex), cn.data_ptr<int64_t>(), ex.size(1),
                                 x[5].data_ptr<int32_t>(), p(gt), p(gr), g, tv, tm, e);
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
    } else {  // feature_difference_backward (check_arguments admits no other op)
      auto gt = at::empty_like(x[1]), gr = at::empty_like(x[2]);
      em::feature_difference_backward<T>(p(x[0]), p(x[1]), p(x[2]), p(gt), p(gr), geometry(x[1], 2, false, true),
                                         tv, e);
      out = {gt, gr};
    }
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, CPU, m) { m.impl("_gpu_emulation", &gpu_emulation); }

}  // namespace flip_ops
