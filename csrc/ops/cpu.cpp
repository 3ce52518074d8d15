// STABLE_TORCH_LIBRARY_IMPL(flip, CPU): argument checks, dtype dispatch, calls into the CPU core.
// float16/bfloat16 are computed in float32 and returned in the input dtype; ldr_flip reads uint8
// images (8-bit codes) as they are and returns a float32 map.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <array>
#include <string>
#include <tuple>
#include <type_traits>

#include "../flip/cpu/kernels.h"
#include "../flip/cpu/parallel.h"
#include "../flip/cpu/workspace.h"
#include "checks.h"
#include "kernel_tensors.h"

namespace flip {
namespace cpu {
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  torch::stable::parallel_for(begin, end, grain, fn);
}
}  // namespace cpu
}  // namespace flip

namespace flip_ops {
namespace {

using flip::cpu::Shape;

Shape shape_of(const Tensor& t) { return Shape{batch_of(t), t.size(-2), t.size(-1)}; }

// The arguments an LDR-FLIP or HDR-FLIP call sets alike in both directions; each op then adds its
// outputs (or incoming gradient and gradient buffers).
template <class T>
flip::cpu::LdrFlipArgs<T> ldr_settings(const Tensor& t, double ppd, double eps, bool srgb) {
  flip::cpu::LdrFlipArgs<T> a;
  a.s = shape_of(t);
  a.ppd = ppd;
  a.eps = eps;
  a.srgb = srgb;
  return a;
}

template <class T>
flip::cpu::LdrFlipArgs<T> ldr_args(const Tensor& t, const Tensor& r, double ppd, double eps, bool srgb) {
  auto a = ldr_settings<T>(t, ppd, eps, srgb);
  a.test = data<T>(t);
  a.ref = data<T>(r);
  return a;
}

template <class T>
flip::cpu::HdrFlipArgs<T> hdr_args(const Tensor& t, const Tensor& r, const Tensor& exposures, const Tensor& counts,
                                   double ppd, double eps, flip::ToneMapper tm) {
  flip::cpu::HdrFlipArgs<T> a;
  a.s = shape_of(t);
  a.ppd = ppd;
  a.eps = eps;
  a.tone_mapper = tm;
  a.test = data<T>(t);
  a.ref = data<T>(r);
  a.exposures = data<T>(exposures);
  a.counts = data<int64_t>(counts);
  a.E = exposures.size(1);
  return a;
}

// The gradient buffers of a backward (grad_buffers: an undefined one is not wanted).
template <class Args>
void set_gradient_buffers(Args& a, std::array<Tensor, 2>& buffers) {
  using T = std::remove_pointer_t<decltype(a.g_test)>;
  a.g_test = ptr_or_null<T>(buffers[0]);
  a.g_ref = ptr_or_null<T>(buffers[1]);
}

// An uninitialised tensor whose memory is borrowed from the CPU kernels' scratch pool
// (workspace.h) and returns to it when the tensor is freed. For the sensitivities autograd keeps
// from a forward to its backward: fresh memory would cost page faults and zeroing every step
// (about a tenth of a 1080p forward+backward).
Tensor pooled_empty(const std::vector<int64_t>& sizes, ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t n : sizes) numel *= n;
  const size_t bytes = static_cast<size_t>(numel) * (dtype == ScalarType::Double ? sizeof(double) : sizeof(float));
  auto* ws = new flip::cpu::Workspace(std::max<size_t>(bytes, 1));
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size(); i-- > 1;) strides[i - 1] = strides[i] * sizes[i];
  return torch::stable::from_blob(ws->as<char>(), torch::headeronly::IntHeaderOnlyArrayRef(sizes.data(), sizes.size()),
                                  torch::headeronly::IntHeaderOnlyArrayRef(strides.data(), strides.size()),
                                  torch::stable::Device(torch::headeronly::DeviceType::CPU), dtype,
                                  [ws](void*) { delete ws; });
}

Tensor ldr_flip(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps) {
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps, kCodesTaken);
  if (test.scalar_type() == ScalarType::Byte) {  // 8-bit codes, read as they are
    const Tensor t = torch::stable::contiguous(test), r = torch::stable::contiguous(ref);
    auto out = empty_as(t, map_shape(t), map_dtype(ScalarType::Byte));
    auto a = ldr_settings<float>(t, ppd, eps, srgb);
    a.test_codes = data<const uint8_t>(t);
    a.ref_codes = data<const uint8_t>(r);
    a.out = data<float>(out);
    flip::cpu::ldr_flip_forward(a);  // codes are finite
    return out;
  }
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = empty_as(t, map_shape(t));
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = ldr_args<scalar_t>(t, r, ppd, eps, srgb);
    a.out = data<scalar_t>(out);
    ok = flip::cpu::ldr_flip_forward(a);
  });
  check_finite(ok, "ldr_flip");
  return to_dtype(out, test.scalar_type());
}

Pair ldr_flip_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, std::string space,
                       double eps, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps);
  check_grad(grad, test, 1);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = contiguous_as(grad, t.scalar_type());
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = ldr_args<scalar_t>(t, r, ppd, eps, srgb);
    a.grad = data<scalar_t>(g);
    set_gradient_buffers(a, gb);
    ok = flip::cpu::ldr_flip_backward(a);
  });
  check_finite(ok, "ldr_flip_backward");
  return cast_back(gb, test, ref);
}

Pair ldr_flip_with_sensitivities(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps,
                                 MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_sensitivity_args(test, ref, ppd, space, eps, mask);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = empty_as(t, map_shape(t));
  const auto sens_shape = sensitivities_shape(t, mask);
  auto sens = pooled_empty(sens_shape, t.scalar_type());
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = ldr_args<scalar_t>(t, r, ppd, eps, srgb);
    a.out = data<scalar_t>(out);
    a.sensitivities = data<scalar_t>(sens);
    a.want_test = mask[0];
    a.want_ref = mask[1];
    ok = flip::cpu::ldr_flip_forward_sensitivities(a);
  });
  check_finite(ok, "ldr_flip");  // the op users call; this one is its CPU autograd's
  return {to_dtype(out, test.scalar_type()), sens};
}

Pair ldr_flip_backward_from_sensitivities(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                                          const Tensor& ref, double ppd, std::string space, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_backward_from_sensitivities_args(grad, sensitivities, test, ref, ppd, space, mask);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = contiguous_as(grad, t.scalar_type());
  auto sens = torch::stable::contiguous(sensitivities);
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = ldr_args<scalar_t>(t, r, ppd, 0.0, srgb);  // eps 0: this op has no eps argument
    a.grad = data<scalar_t>(g);
    a.sensitivities = data<scalar_t>(sens);
    set_gradient_buffers(a, gb);
    ok = flip::cpu::ldr_flip_backward_sensitivities(a);
  });
  check_finite(ok, "_ldr_flip_backward_from_sensitivities");
  return cast_back(gb, test, ref);
}

Pair ldr_flip_multiscale(const Tensor& test, const Tensor& ref, std::vector<double> ppds, std::vector<double> weights,
                         std::string space, double eps, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_multiscale_args(test, ref, ppds, weights, space, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = empty_as(t, map_shape(t));
  const auto scales = static_cast<int64_t>(ppds.size());
  auto sens = pooled_empty(multiscale_sensitivities_shape(t, mask, scales), t.scalar_type());
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = ldr_args<scalar_t>(t, r, ppds[0], eps, srgb);
    a.scales = scales;
    a.ppds = ppds.data();
    a.weights = weights.data();
    a.out = data<scalar_t>(out);
    a.sensitivities = ptr_or_null<scalar_t>(sens);
    a.want_test = mask[0];
    a.want_ref = mask[1];
    ok = flip::cpu::ldr_flip_multiscale_forward(a);
  });
  check_finite(ok, "ldr_flip");
  return {to_dtype(out, test.scalar_type()), sens};
}

Pair ldr_flip_multiscale_backward(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                                  const Tensor& ref, std::vector<double> ppds, std::vector<double> weights,
                                  std::string space, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_multiscale_backward_args(grad, sensitivities, test, ref, ppds, weights, space, mask);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = contiguous_as(grad, t.scalar_type());
  auto sens = torch::stable::contiguous(sensitivities);
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = ldr_args<scalar_t>(t, r, ppds[0], 0.0, srgb);  // eps 0: kept in the sensitivities
    a.scales = static_cast<int64_t>(ppds.size());
    a.ppds = ppds.data();
    a.weights = weights.data();
    a.grad = data<scalar_t>(g);
    a.sensitivities = data<scalar_t>(sens);
    set_gradient_buffers(a, gb);
    ok = flip::cpu::ldr_flip_multiscale_backward_sensitivities(a);
  });
  check_finite(ok, "_ldr_flip_multiscale_backward");
  return cast_back(gb, test, ref);
}

Triple hdr_flip(const Tensor& test, const Tensor& ref, const Tensor& exposures, const Tensor& counts, double ppd,
                std::string tone_mapper, double eps) {
  const auto tm = check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto ex = contiguous_as(exposures, t.scalar_type());
  auto cn = contiguous_as(counts, ScalarType::Long);
  check_exposure_values_on_host(ex, cn);
  auto out = empty_as(t, map_shape(t));
  auto emap = empty_as(t, map_shape(t));
  auto idx = empty_as(t, map_shape(t), ScalarType::Int);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = hdr_args<scalar_t>(t, r, ex, cn, ppd, eps, tm);
    a.out = data<scalar_t>(out);
    a.exposure_map = data<scalar_t>(emap);
    a.index = data<int32_t>(idx);
    ok = flip::cpu::hdr_flip_forward(a);
  });
  check_finite(ok, "hdr_flip");
  return {to_dtype(out, test.scalar_type()), to_dtype(emap, test.scalar_type()), idx};
}

Pair hdr_flip_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, const Tensor& exposures,
                       const Tensor& counts, const Tensor& index, double ppd, std::string tone_mapper, double eps,
                       MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const auto tm = check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  check_grad(grad, test, 1);
  check_exposure_index(index, grad);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = contiguous_as(grad, t.scalar_type());
  auto ex = contiguous_as(exposures, t.scalar_type());
  auto cn = contiguous_as(counts, ScalarType::Long);
  check_exposure_values_on_host(ex, cn);
  auto ix = torch::stable::contiguous(index);
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    auto a = hdr_args<scalar_t>(t, r, ex, cn, ppd, eps, tm);
    a.grad = data<scalar_t>(g);
    a.index = data<int32_t>(ix);
    set_gradient_buffers(a, gb);
    ok = flip::cpu::hdr_flip_backward(a);
  });
  check_finite(ok, "hdr_flip_backward");
  return cast_back(gb, test, ref);
}

Tensor csf_filter(const Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  auto o = compute_copy(opp);
  auto out = torch::stable::empty_like(o);
  bool ok = true;
  dispatch_compute_dtype(o.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    flip::cpu::CsfFilterArgs<scalar_t> a;
    a.s = shape_of(o);
    a.ppd = ppd;
    a.opponent = data<scalar_t>(o);
    a.out = data<scalar_t>(out);
    ok = flip::cpu::csf_filter_forward(a);
  });
  check_finite(ok, "csf_filter");
  return to_dtype(out, opp.scalar_type());
}

Tensor csf_filter_backward(const Tensor& grad, const Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  check_grad(grad, opp, 3);
  auto o = compute_copy(opp);
  auto g = contiguous_as(grad, o.scalar_type());
  auto out = torch::stable::empty_like(o);
  bool ok = true;
  dispatch_compute_dtype(o.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    flip::cpu::CsfFilterArgs<scalar_t> a;
    a.s = shape_of(o);
    a.ppd = ppd;
    a.opponent = data<scalar_t>(o);
    a.grad = data<scalar_t>(g);
    a.g_opponent = data<scalar_t>(out);
    ok = flip::cpu::csf_filter_backward(a);
  });
  check_finite(ok, "csf_filter_backward");
  return to_dtype(out, opp.scalar_type());
}

Tensor hunt_hyab(const Tensor& test, const Tensor& ref, double eps) {
  check_hunt_hyab_args(test, ref, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = empty_as(t, map_shape(t));
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    flip::cpu::HuntHyabArgs<scalar_t> a;
    a.s = shape_of(t);
    a.eps = eps;
    a.test = data<scalar_t>(t);
    a.ref = data<scalar_t>(r);
    a.out = data<scalar_t>(out);
    ok = flip::cpu::hunt_hyab_forward(a);
  });
  check_finite(ok, "hunt_hyab");
  return to_dtype(out, test.scalar_type());
}

Pair hunt_hyab_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double eps, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  check_hunt_hyab_args(test, ref, eps);
  check_grad(grad, test, 1);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = contiguous_as(grad, t.scalar_type());
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    flip::cpu::HuntHyabArgs<scalar_t> a;
    a.s = shape_of(t);
    a.eps = eps;
    a.test = data<scalar_t>(t);
    a.ref = data<scalar_t>(r);
    a.grad = data<scalar_t>(g);
    set_gradient_buffers(a, gb);
    ok = flip::cpu::hunt_hyab_backward(a);
  });
  check_finite(ok, "hunt_hyab_backward");
  return cast_back(gb, test, ref);
}

Tensor feature_difference(const Tensor& test, const Tensor& ref, double ppd, double eps) {
  check_feature_args(test, ref, ppd, eps);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = torch::stable::empty_like(t);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    flip::cpu::FeatureDifferenceArgs<scalar_t> a;
    a.s = shape_of(t);
    a.ppd = ppd;
    a.eps = eps;
    a.test = data<scalar_t>(t);
    a.ref = data<scalar_t>(r);
    a.out = data<scalar_t>(out);
    ok = flip::cpu::feature_difference_forward(a);
  });
  check_finite(ok, "feature_difference");
  return to_dtype(out, test.scalar_type());
}

Pair feature_difference_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, double eps,
                                 MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  check_feature_args(test, ref, ppd, eps);
  check_grad(grad, test, 1);
  auto t = compute_copy(test), r = compute_copy(ref);
  auto g = contiguous_as(grad, t.scalar_type());
  auto gb = grad_buffers(t, mask);
  bool ok = true;
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using scalar_t = decltype(zero);
    flip::cpu::FeatureDifferenceArgs<scalar_t> a;
    a.s = shape_of(t);
    a.ppd = ppd;
    a.eps = eps;
    a.test = data<scalar_t>(t);
    a.ref = data<scalar_t>(r);
    a.grad = data<scalar_t>(g);
    set_gradient_buffers(a, gb);
    ok = flip::cpu::feature_difference_backward(a);
  });
  check_finite(ok, "feature_difference_backward");
  return cast_back(gb, test, ref);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(flip, CPU, m) {
  m.impl("ldr_flip", TORCH_BOX(&ldr_flip));
  m.impl("ldr_flip_backward", TORCH_BOX(&ldr_flip_backward));
  m.impl("_ldr_flip_with_sensitivities", TORCH_BOX(&ldr_flip_with_sensitivities));
  m.impl("_ldr_flip_backward_from_sensitivities", TORCH_BOX(&ldr_flip_backward_from_sensitivities));
  m.impl("_ldr_flip_multiscale", TORCH_BOX(&ldr_flip_multiscale));
  m.impl("_ldr_flip_multiscale_backward", TORCH_BOX(&ldr_flip_multiscale_backward));
  m.impl("hdr_flip", TORCH_BOX(&hdr_flip));
  m.impl("hdr_flip_backward", TORCH_BOX(&hdr_flip_backward));
  m.impl("csf_filter", TORCH_BOX(&csf_filter));
  m.impl("csf_filter_backward", TORCH_BOX(&csf_filter_backward));
  m.impl("hunt_hyab", TORCH_BOX(&hunt_hyab));
  m.impl("hunt_hyab_backward", TORCH_BOX(&hunt_hyab_backward));
  m.impl("feature_difference", TORCH_BOX(&feature_difference));
  m.impl("feature_difference_backward", TORCH_BOX(&feature_difference_backward));
}

}  // namespace flip_ops
