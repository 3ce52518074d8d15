// torch.ops.flip_emulator: the CUDA kernels' per-thread code (csrc/flip/passes.h) run on the CPU,
// block by block, so that tests on machines without a GPU check the GPU formulation against the
// CPU kernels. Test-only and slow: built by the test suite (tests/emulator/__init__.py), never
// installed. One op per launch sequence of csrc/flip/cuda/kernels.cu, each with the schema of the
// flip op it emulates (the *_fused ones: the fused forward kernel) and the same argument checks
// (csrc/ops/checks.h), all made before any filter taps are built.
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "emulate.h"
#include "ops/checks.h"
#include "ops/common.h"

namespace flip_emulator_ops {
namespace {

namespace em = flip_emulator;
using flip::Geometry;
using flip_ops::Mask;
using flip_ops::Pair;
using Triple = std::tuple<at::Tensor, at::Tensor, at::Tensor>;

template <class T>
T* data(at::Tensor& t) {
  return t.data_ptr<T>();
}

at::Tensor ldr_flip_impl(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space, double eps,
                         bool fused) {
  const bool srgb = flip_ops::check_ldr_args(test, ref, ppd, space, eps);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto out = at::empty_symint(flip_ops::map_shape(t), t.options());
  const Geometry g = flip_ops::geometry(t, 2, true, true);
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip_emulator::ldr_flip", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    (fused ? em::ldr_flip_forward_fused<T> : em::ldr_flip_forward<T>)(data<T>(t), data<T>(r), data<T>(out), g,
                                                                      taps.view, srgb, static_cast<T>(eps));
  });
  return out.to(test.scalar_type());
}

at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space, double eps) {
  return ldr_flip_impl(test, ref, ppd, space, eps, false);
}

at::Tensor ldr_flip_fused(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                          double eps) {
  return ldr_flip_impl(test, ref, ppd, space, eps, true);
}

// The row-pass backward, or (tiled) the tiled one with that scratch budget.
Pair ldr_flip_backward_impl(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                            c10::string_view space, double eps, Mask mask, bool tiled, int64_t scratch_bytes) {
  const bool srgb = flip_ops::check_ldr_args(test, ref, ppd, space, eps);
  flip_ops::check_grad(grad, test, 1);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = grad.to(t.scalar_type()).contiguous();
  auto gb = flip_ops::grad_buffers(t, mask);
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip_emulator::ldr_flip_backward", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    T *g_test = flip_ops::ptr_or_null<T>(gb[0]), *g_ref = flip_ops::ptr_or_null<T>(gb[1]);
    const Geometry g = flip_ops::geometry(t, 2, true, true);
    if (!tiled)
      em::ldr_flip_backward<T>(data<T>(gr), data<T>(t), data<T>(r), g_test, g_ref, g, taps.view, srgb,
                               static_cast<T>(eps));
    else
      em::ldr_flip_backward_tiled<T>(data<T>(gr), data<T>(t), data<T>(r), g_test, g_ref, g, taps.view, srgb,
                                     static_cast<T>(eps), scratch_bytes);
  });
  return flip_ops::cast_back(gb, test, ref);
}

Pair ldr_flip_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                       c10::string_view space, double eps, Mask mask) {
  return ldr_flip_backward_impl(grad, test, ref, ppd, space, eps, mask, false, 0);
}

Pair ldr_flip_backward_tiled(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                             c10::string_view space, double eps, Mask mask, int64_t scratch_bytes) {
  return ldr_flip_backward_impl(grad, test, ref, ppd, space, eps, mask, true, scratch_bytes);
}

// The tiled backward's bands for a batch of n images of h x w (plan_backward): items, rows,
// buffer_rows, item_bands, row_bands.
at::Tensor backward_plan(int64_t n, int64_t h, int64_t w, int64_t wanted, double ppd, int64_t elem_bytes,
                         int64_t scratch_bytes) {
  const em::HostTaps<double> taps(ppd);
  const auto p = flip::plan_backward(Geometry{n, h, w, 2, true, true}, static_cast<int>(wanted), taps.view.rmax,
                                     elem_bytes, scratch_bytes);
  auto out = at::empty({5}, at::kLong);
  auto* o = out.data_ptr<int64_t>();
  o[0] = p.items;
  o[1] = p.rows;
  o[2] = p.buffer_rows;
  o[3] = p.item_bands;
  o[4] = p.row_bands;
  return out;
}

Triple hdr_flip_impl(const at::Tensor& test, const at::Tensor& ref, const at::Tensor& exposures,
                     const at::Tensor& counts, double ppd, c10::string_view tone_mapper, double eps, bool fused) {
  const auto tm = flip_ops::check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto ex = exposures.to(t.scalar_type()).contiguous();
  auto cn = counts.to(at::kLong).contiguous();
  flip_ops::check_exposure_values(ex, cn);
  auto out = at::empty_symint(flip_ops::map_shape(t), t.options());
  auto emap = at::empty_like(out);
  auto idx = at::empty_like(out, out.options().dtype(at::kInt));
  const Geometry g = flip_ops::geometry(t, 2, true, true);
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip_emulator::hdr_flip", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    (fused ? em::hdr_flip_forward_fused<T> : em::hdr_flip_forward<T>)(data<T>(t), data<T>(r), data<T>(ex),
                                                                      cn.data_ptr<int64_t>(), ex.size(1), data<T>(out),
                                                                      data<T>(emap), idx.data_ptr<int32_t>(), g,
                                                                      taps.view, tm, static_cast<T>(eps));
  });
  return {out.to(test.scalar_type()), emap.to(test.scalar_type()), idx};
}

Triple hdr_flip(const at::Tensor& test, const at::Tensor& ref, const at::Tensor& exposures, const at::Tensor& counts,
                double ppd, c10::string_view tone_mapper, double eps) {
  return hdr_flip_impl(test, ref, exposures, counts, ppd, tone_mapper, eps, false);
}

Triple hdr_flip_fused(const at::Tensor& test, const at::Tensor& ref, const at::Tensor& exposures,
                      const at::Tensor& counts, double ppd, c10::string_view tone_mapper, double eps) {
  return hdr_flip_impl(test, ref, exposures, counts, ppd, tone_mapper, eps, true);
}

// The row-pass backward, or (tiled) the tiled one with that scratch budget.
Pair hdr_flip_backward_impl(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref,
                            const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& index, double ppd,
                            c10::string_view tone_mapper, double eps, Mask mask, bool tiled, int64_t scratch_bytes) {
  const auto tm = flip_ops::check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  flip_ops::check_grad(grad, test, 1);
  flip_ops::check_exposure_index(index, grad);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = grad.to(t.scalar_type()).contiguous();
  auto ex = exposures.to(t.scalar_type()).contiguous();
  auto cn = counts.to(at::kLong).contiguous();
  flip_ops::check_exposure_values(ex, cn);
  auto ix = index.contiguous();
  auto gb = flip_ops::grad_buffers(t, mask);
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip_emulator::hdr_flip_backward", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    T *g_test = flip_ops::ptr_or_null<T>(gb[0]), *g_ref = flip_ops::ptr_or_null<T>(gb[1]);
    const Geometry g = flip_ops::geometry(t, 2, true, true);
    if (!tiled)
      em::hdr_flip_backward<T>(data<T>(gr), data<T>(t), data<T>(r), data<T>(ex), cn.data_ptr<int64_t>(), ex.size(1),
                               ix.data_ptr<int32_t>(), g_test, g_ref, g, taps.view, tm, static_cast<T>(eps));
    else
      em::hdr_flip_backward_tiled<T>(data<T>(gr), data<T>(t), data<T>(r), data<T>(ex), cn.data_ptr<int64_t>(),
                                     ex.size(1), ix.data_ptr<int32_t>(), g_test, g_ref, g, taps.view, tm,
                                     static_cast<T>(eps), scratch_bytes);
  });
  return flip_ops::cast_back(gb, test, ref);
}

Pair hdr_flip_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref,
                       const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& index, double ppd,
                       c10::string_view tone_mapper, double eps, Mask mask) {
  return hdr_flip_backward_impl(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps, mask, false, 0);
}

Pair hdr_flip_backward_tiled(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref,
                             const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& index, double ppd,
                             c10::string_view tone_mapper, double eps, Mask mask, int64_t scratch_bytes) {
  return hdr_flip_backward_impl(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps, mask, true,
                                scratch_bytes);
}

at::Tensor csf_filter(const at::Tensor& opp, double ppd) {
  flip_ops::check_csf_args(opp, ppd);
  auto o = flip_ops::compute_copy(opp);
  auto out = at::empty_like(o);
  AT_DISPATCH_FLOATING_TYPES(o.scalar_type(), "flip_emulator::csf_filter", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    em::csf_filter_forward<T>(data<T>(o), data<T>(out), flip_ops::geometry(o, 1, true, false), taps.view);
  });
  return out.to(opp.scalar_type());
}

at::Tensor csf_filter_backward(const at::Tensor& grad, const at::Tensor& opp, double ppd) {
  flip_ops::check_csf_args(opp, ppd);
  flip_ops::check_grad(grad, opp, 3);
  auto o = flip_ops::compute_copy(opp);
  auto gr = grad.to(o.scalar_type()).contiguous();
  auto out = at::empty_like(o);
  AT_DISPATCH_FLOATING_TYPES(o.scalar_type(), "flip_emulator::csf_filter_backward", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    em::csf_filter_backward<T>(data<T>(gr), data<T>(o), data<T>(out), flip_ops::geometry(o, 1, true, false), taps.view);
  });
  return out.to(opp.scalar_type());
}

at::Tensor feature_difference(const at::Tensor& test, const at::Tensor& ref, double ppd, double eps) {
  flip_ops::check_feature_args(test, ref, ppd, eps);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto out = at::empty_like(t);
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip_emulator::feature_difference", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    em::feature_difference_forward<T>(data<T>(t), data<T>(r), data<T>(out), flip_ops::geometry(t, 2, false, true),
                                      taps.view, static_cast<T>(eps));
  });
  return out.to(test.scalar_type());
}

Pair feature_difference_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                                 double eps, Mask mask) {
  flip_ops::check_feature_args(test, ref, ppd, eps);
  flip_ops::check_grad(grad, test, 1);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = grad.to(t.scalar_type()).contiguous();
  auto gb = flip_ops::grad_buffers(t, mask);
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip_emulator::feature_difference_backward", [&] {
    using T = scalar_t;
    const em::HostTaps<T> taps(ppd);
    em::feature_difference_backward<T>(data<T>(gr), data<T>(t), data<T>(r), flip_ops::ptr_or_null<T>(gb[0]),
                                       flip_ops::ptr_or_null<T>(gb[1]), flip_ops::geometry(t, 2, false, true),
                                       taps.view, static_cast<T>(eps));
  });
  return flip_ops::cast_back(gb, test, ref);
}

}  // namespace
}  // namespace flip_emulator_ops

// The schemas of csrc/ops/schema.cpp (defaults included), so that a test calls an emulated op
// exactly as it calls the flip op.
TORCH_LIBRARY(flip_emulator, m) {
  m.def(
      "ldr_flip(Tensor test, Tensor reference, float pixels_per_degree=67.02064327658225,"
      " str input_space=\"srgb\", float eps=1e-15) -> Tensor");
  m.def(
      "ldr_flip_fused(Tensor test, Tensor reference, float pixels_per_degree=67.02064327658225,"
      " str input_space=\"srgb\", float eps=1e-15) -> Tensor");
  m.def(
      "ldr_flip_backward(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " str input_space, float eps, bool[2] output_mask) -> (Tensor, Tensor)");
  m.def(
      "hdr_flip(Tensor test, Tensor reference, Tensor exposures, Tensor counts, float pixels_per_degree,"
      " str tone_mapper=\"aces\", float eps=1e-15) -> (Tensor, Tensor, Tensor)");
  m.def(
      "hdr_flip_fused(Tensor test, Tensor reference, Tensor exposures, Tensor counts, float pixels_per_degree,"
      " str tone_mapper=\"aces\", float eps=1e-15) -> (Tensor, Tensor, Tensor)");
  m.def(
      "hdr_flip_backward(Tensor grad, Tensor test, Tensor reference, Tensor exposures, Tensor counts,"
      " Tensor exposure_index, float pixels_per_degree, str tone_mapper, float eps, bool[2] output_mask)"
      " -> (Tensor, Tensor)");
  // The tiled backward of the CUDA kernels (the ops above without _tiled are the row passes), with
  // the scratch budget the bands are planned for (default: the kernels' kBackwardScratchBytes).
  m.def(
      "ldr_flip_backward_tiled(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " str input_space, float eps, bool[2] output_mask, int scratch_bytes=33554432) -> (Tensor, Tensor)");
  m.def(
      "hdr_flip_backward_tiled(Tensor grad, Tensor test, Tensor reference, Tensor exposures, Tensor counts,"
      " Tensor exposure_index, float pixels_per_degree, str tone_mapper, float eps, bool[2] output_mask,"
      " int scratch_bytes=33554432) -> (Tensor, Tensor)");
  m.def(
      "backward_plan(int n, int h, int w, int wanted, float pixels_per_degree, int elem_bytes,"
      " int scratch_bytes=33554432) -> Tensor");
  m.def("csf_filter(Tensor opponent, float pixels_per_degree) -> Tensor");
  m.def("csf_filter_backward(Tensor grad, Tensor opponent, float pixels_per_degree) -> Tensor");
  m.def("feature_difference(Tensor test, Tensor reference, float pixels_per_degree, float eps=1e-15) -> Tensor");
  m.def(
      "feature_difference_backward(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " float eps, bool[2] output_mask) -> (Tensor, Tensor)");
}

static_assert(flip::kBackwardScratchBytes == 33554432, "update the scratch_bytes defaults of the schemas below");

// backward_plan has no tensor argument to dispatch on.
TORCH_LIBRARY_IMPL(flip_emulator, CompositeExplicitAutograd, m) {
  m.impl("backward_plan", &flip_emulator_ops::backward_plan);
}

TORCH_LIBRARY_IMPL(flip_emulator, CPU, m) {
  using namespace flip_emulator_ops;
  m.impl("ldr_flip", &ldr_flip);
  m.impl("ldr_flip_fused", &ldr_flip_fused);
  m.impl("ldr_flip_backward", &ldr_flip_backward);
  m.impl("hdr_flip", &hdr_flip);
  m.impl("hdr_flip_fused", &hdr_flip_fused);
  m.impl("hdr_flip_backward", &hdr_flip_backward);
  m.impl("ldr_flip_backward_tiled", &ldr_flip_backward_tiled);
  m.impl("hdr_flip_backward_tiled", &hdr_flip_backward_tiled);
  m.impl("csf_filter", &csf_filter);
  m.impl("csf_filter_backward", &csf_filter_backward);
  m.impl("feature_difference", &feature_difference);
  m.impl("feature_difference_backward", &feature_difference_backward);
}
