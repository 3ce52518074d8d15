// TORCH_LIBRARY_IMPL(flip, CPU): argument checks, dtype dispatch, calls into the CPU core.
// float16/bfloat16 are computed in float32 and returned in the input dtype.
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/from_blob.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

#include <array>
#include <tuple>
#include <type_traits>

#include "../flip/cpu/kernels.h"
#include "../flip/cpu/parallel.h"
#include "../flip/cpu/workspace.h"
#include "checks.h"
#include "common.h"

namespace flip {
namespace cpu {
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  at::parallel_for(begin, end, grain, fn);
}
}  // namespace cpu
}  // namespace flip

namespace flip_ops {
namespace {

using flip::cpu::Shape;

Shape shape_of(const at::Tensor& t) { return Shape{batch_of(t), t.size(-2), t.size(-1)}; }

// The arguments an LDR-FLIP or HDR-FLIP call sets alike in both directions; each op then adds its
// outputs (or incoming gradient and gradient buffers).
template <class T>
flip::cpu::LdrFlipArgs<T> ldr_args(const at::Tensor& t, const at::Tensor& r, double ppd, double eps, bool srgb) {
  flip::cpu::LdrFlipArgs<T> a;
  a.s = shape_of(t);
  a.ppd = ppd;
  a.eps = eps;
  a.srgb = srgb;
  a.test = t.data_ptr<T>();
  a.ref = r.data_ptr<T>();
  return a;
}

template <class T>
flip::cpu::HdrFlipArgs<T> hdr_args(const at::Tensor& t, const at::Tensor& r, const at::Tensor& exposures,
                                   const at::Tensor& counts, double ppd, double eps, flip::ToneMapper tm) {
  flip::cpu::HdrFlipArgs<T> a;
  a.s = shape_of(t);
  a.ppd = ppd;
  a.eps = eps;
  a.tone_mapper = tm;
  a.test = t.data_ptr<T>();
  a.ref = r.data_ptr<T>();
  a.exposures = exposures.data_ptr<T>();
  a.counts = counts.data_ptr<int64_t>();
  a.E = exposures.size(1);
  return a;
}

// The gradient buffers of a backward (grad_buffers: an undefined one is not wanted).
template <class Args>
void set_gradient_buffers(Args& a, std::array<at::Tensor, 2>& buffers) {
  using T = std::remove_pointer_t<decltype(a.g_test)>;
  a.g_test = ptr_or_null<T>(buffers[0]);
  a.g_ref = ptr_or_null<T>(buffers[1]);
}

// An uninitialised tensor whose memory is borrowed from the CPU kernels' scratch pool
// (workspace.h) and returns to it when the tensor is freed. For the sensitivities autograd keeps
// from a forward to its backward: fresh memory would cost page faults and zeroing every step
// (about a tenth of a 1080p forward+backward).
at::Tensor pooled_empty(at::IntArrayRef sizes, const at::TensorOptions& options) {
  const size_t bytes =
      static_cast<size_t>(c10::multiply_integers(sizes)) * c10::elementSize(options.dtype().toScalarType());
  auto* ws = new flip::cpu::Workspace(std::max<size_t>(bytes, 1));
  return at::from_blob(ws->as<char>(), sizes, [ws](void*) { delete ws; }, options);
}

at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space, double eps) {
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = at::empty_symint(map_shape(t), t.options());
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::ldr_flip", [&] {
    auto a = ldr_args<scalar_t>(t, r, ppd, eps, srgb);
    a.out = out.data_ptr<scalar_t>();
    ok = flip::cpu::ldr_flip_forward(a);
  });
  check_finite(ok, "ldr_flip");
  return out.to(test.scalar_type());
}

Pair ldr_flip_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                       c10::string_view space, double eps, Mask mask) {
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps);
  check_grad(grad, test, 1);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = grad.to(t.scalar_type()).contiguous();
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::ldr_flip_backward", [&] {
    auto a = ldr_args<scalar_t>(t, r, ppd, eps, srgb);
    a.grad = g.data_ptr<scalar_t>();
    set_gradient_buffers(a, gb);
    ok = flip::cpu::ldr_flip_backward(a);
  });
  check_finite(ok, "ldr_flip_backward");
  return cast_back(gb, test, ref);
}

Pair ldr_flip_with_sensitivities(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                                 double eps, Mask mask) {
  const bool srgb = check_ldr_sensitivity_args(test, ref, ppd, space, eps, mask);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = at::empty_symint(map_shape(t), t.options());
  const auto sens_shape = sensitivities_shape(t, mask);
  auto sens = pooled_empty(c10::asIntArrayRefUnchecked(sens_shape), t.options());
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::_ldr_flip_with_sensitivities", [&] {
    auto a = ldr_args<scalar_t>(t, r, ppd, eps, srgb);
    a.out = out.data_ptr<scalar_t>();
    a.sensitivities = sens.data_ptr<scalar_t>();
    a.want_test = mask[0];
    a.want_ref = mask[1];
    ok = flip::cpu::ldr_flip_forward_sensitivities(a);
  });
  check_finite(ok, "ldr_flip");  // the op users call; this one is its CPU autograd's
  return {out.to(test.scalar_type()), sens};
}

Pair ldr_flip_backward_from_sensitivities(const at::Tensor& grad, const at::Tensor& sensitivities,
                                          const at::Tensor& test, const at::Tensor& ref, double ppd,
                                          c10::string_view space, Mask mask) {
  const bool srgb = check_ldr_backward_from_sensitivities_args(grad, sensitivities, test, ref, ppd, space, mask);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = grad.to(t.scalar_type()).contiguous();
  auto sens = sensitivities.contiguous();
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::_ldr_flip_backward_from_sensitivities", [&] {
    auto a = ldr_args<scalar_t>(t, r, ppd, 0.0, srgb);  // eps 0: this op has no eps argument
    a.grad = g.data_ptr<scalar_t>();
    a.sensitivities = sens.data_ptr<scalar_t>();
    set_gradient_buffers(a, gb);
    ok = flip::cpu::ldr_flip_backward_sensitivities(a);
  });
  check_finite(ok, "_ldr_flip_backward_from_sensitivities");
  return cast_back(gb, test, ref);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> hdr_flip(const at::Tensor& test, const at::Tensor& ref,
                                                        const at::Tensor& exposures, const at::Tensor& counts,
                                                        double ppd, c10::string_view tone_mapper, double eps) {
  const auto tm = check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto ex = exposures.to(t.scalar_type()).contiguous();
  auto cn = counts.to(at::kLong).contiguous();
  check_exposure_values(ex, cn);
  auto out = at::empty_symint(map_shape(t), t.options());
  auto emap = at::empty_symint(map_shape(t), t.options());
  auto idx = at::empty_symint(map_shape(t), t.options().dtype(at::kInt));
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::hdr_flip", [&] {
    auto a = hdr_args<scalar_t>(t, r, ex, cn, ppd, eps, tm);
    a.out = out.data_ptr<scalar_t>();
    a.exposure_map = emap.data_ptr<scalar_t>();
    a.index = idx.data_ptr<int32_t>();
    ok = flip::cpu::hdr_flip_forward(a);
  });
  check_finite(ok, "hdr_flip");
  return {out.to(test.scalar_type()), emap.to(test.scalar_type()), idx};
}

Pair hdr_flip_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref,
                       const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& index, double ppd,
                       c10::string_view tone_mapper, double eps, Mask mask) {
  const auto tm = check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  check_grad(grad, test, 1);
  check_exposure_index(index, grad);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = grad.to(t.scalar_type()).contiguous();
  auto ex = exposures.to(t.scalar_type()).contiguous();
  auto cn = counts.to(at::kLong).contiguous();
  check_exposure_values(ex, cn);
  auto ix = index.contiguous();
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::hdr_flip_backward", [&] {
    auto a = hdr_args<scalar_t>(t, r, ex, cn, ppd, eps, tm);
    a.grad = g.data_ptr<scalar_t>();
    a.index = ix.data_ptr<int32_t>();
    set_gradient_buffers(a, gb);
    ok = flip::cpu::hdr_flip_backward(a);
  });
  check_finite(ok, "hdr_flip_backward");
  return cast_back(gb, test, ref);
}

at::Tensor csf_filter(const at::Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  auto o = compute_copy(opp);
  auto out = at::empty_like(o);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(o.scalar_type(), "flip::csf_filter", [&] {
    flip::cpu::CsfFilterArgs<scalar_t> a;
    a.s = shape_of(o);
    a.ppd = ppd;
    a.opponent = o.data_ptr<scalar_t>();
    a.out = out.data_ptr<scalar_t>();
    ok = flip::cpu::csf_filter_forward(a);
  });
  check_finite(ok, "csf_filter");
  return out.to(opp.scalar_type());
}

at::Tensor csf_filter_backward(const at::Tensor& grad, const at::Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  check_grad(grad, opp, 3);
  auto o = compute_copy(opp);
  auto g = grad.to(o.scalar_type()).contiguous();
  auto out = at::empty_like(o);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(o.scalar_type(), "flip::csf_filter_backward", [&] {
    flip::cpu::CsfFilterArgs<scalar_t> a;
    a.s = shape_of(o);
    a.ppd = ppd;
    a.opponent = o.data_ptr<scalar_t>();
    a.grad = g.data_ptr<scalar_t>();
    a.g_opponent = out.data_ptr<scalar_t>();
    ok = flip::cpu::csf_filter_backward(a);
  });
  check_finite(ok, "csf_filter_backward");
  return out.to(opp.scalar_type());
}

at::Tensor hunt_hyab(const at::Tensor& test, const at::Tensor& ref, double eps) {
  check_hunt_hyab_args(test, ref, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = at::empty_symint(map_shape(t), t.options());
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::hunt_hyab", [&] {
    flip::cpu::HuntHyabArgs<scalar_t> a;
    a.s = shape_of(t);
    a.eps = eps;
    a.test = t.data_ptr<scalar_t>();
    a.ref = r.data_ptr<scalar_t>();
    a.out = out.data_ptr<scalar_t>();
    ok = flip::cpu::hunt_hyab_forward(a);
  });
  check_finite(ok, "hunt_hyab");
  return out.to(test.scalar_type());
}

Pair hunt_hyab_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double eps, Mask mask) {
  check_hunt_hyab_args(test, ref, eps);
  check_grad(grad, test, 1);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = grad.to(t.scalar_type()).contiguous();
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::hunt_hyab_backward", [&] {
    flip::cpu::HuntHyabArgs<scalar_t> a;
    a.s = shape_of(t);
    a.eps = eps;
    a.test = t.data_ptr<scalar_t>();
    a.ref = r.data_ptr<scalar_t>();
    a.grad = g.data_ptr<scalar_t>();
    set_gradient_buffers(a, gb);
    ok = flip::cpu::hunt_hyab_backward(a);
  });
  check_finite(ok, "hunt_hyab_backward");
  return cast_back(gb, test, ref);
}

at::Tensor feature_difference(const at::Tensor& test, const at::Tensor& ref, double ppd, double eps) {
  check_feature_args(test, ref, ppd, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = at::empty_like(t);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::feature_difference", [&] {
    flip::cpu::FeatureDifferenceArgs<scalar_t> a;
    a.s = shape_of(t);
    a.ppd = ppd;
    a.eps = eps;
    a.test = t.data_ptr<scalar_t>();
    a.ref = r.data_ptr<scalar_t>();
    a.out = out.data_ptr<scalar_t>();
    ok = flip::cpu::feature_difference_forward(a);
  });
  check_finite(ok, "feature_difference");
  return out.to(test.scalar_type());
}

Pair feature_difference_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                                 double eps, Mask mask) {
  check_feature_args(test, ref, ppd, eps);
  check_grad(grad, test, 1);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = grad.to(t.scalar_type()).contiguous();
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "flip::feature_difference_backward", [&] {
    flip::cpu::FeatureDifferenceArgs<scalar_t> a;
    a.s = shape_of(t);
    a.ppd = ppd;
    a.eps = eps;
    a.test = t.data_ptr<scalar_t>();
    a.ref = r.data_ptr<scalar_t>();
    a.grad = g.data_ptr<scalar_t>();
    set_gradient_buffers(a, gb);
    ok = flip::cpu::feature_difference_backward(a);
  });
  check_finite(ok, "feature_difference_backward");
  return cast_back(gb, test, ref);
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, CPU, m) {
  m.impl("ldr_flip", &ldr_flip);
  m.impl("ldr_flip_backward", &ldr_flip_backward);
  m.impl("_ldr_flip_with_sensitivities", &ldr_flip_with_sensitivities);
  m.impl("_ldr_flip_backward_from_sensitivities", &ldr_flip_backward_from_sensitivities);
  m.impl("hdr_flip", &hdr_flip);
  m.impl("hdr_flip_backward", &hdr_flip_backward);
  m.impl("csf_filter", &csf_filter);
  m.impl("csf_filter_backward", &csf_filter_backward);
  m.impl("hunt_hyab", &hunt_hyab);
  m.impl("hunt_hyab_backward", &hunt_hyab_backward);
  m.impl("feature_difference", &feature_difference);
  m.impl("feature_difference_backward", &feature_difference_backward);
}

}  // namespace flip_ops
