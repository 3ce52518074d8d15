// TORCH_LIBRARY_IMPL(flip, Meta): shapes and dtypes only, with symbolic sizes, so that
// torch.compile, torch.export and FakeTensor tracing need no data.
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "checks.h"
#include "signature.h"

namespace flip_ops {
namespace {

at::Tensor map_like(const at::Tensor& t) { return at::empty_symint(map_shape(t), t.options()); }

at::Tensor grad_like(const at::Tensor& t, bool needed) {
  return needed ? at::empty_symint(t.sym_sizes(), t.options()) : at::empty({0}, t.options());
}

at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space, double eps) {
  check_ldr_args(test, ref, ppd, space, eps);
  return map_like(test);
}

Pair ldr_flip_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                       c10::string_view space, double eps, Mask m) {
  check_ldr_args(test, ref, ppd, space, eps);
  check_grad(grad, test, 1);
  return {grad_like(test, m[0]), grad_like(ref, m[1])};
}

Pair ldr_flip_with_sensitivities(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                                 double eps, Mask mask) {
  check_ldr_sensitivity_args(test, ref, ppd, space, eps, mask);
  return {map_like(test), at::empty_symint(sensitivities_shape(test, mask), test.options().dtype(compute_dtype(test)))};
}

Pair ldr_flip_backward_from_sensitivities(const at::Tensor& grad, const at::Tensor& sensitivities,
                                          const at::Tensor& test, const at::Tensor& ref, double ppd,
                                          c10::string_view space, Mask m) {
  check_ldr_backward_from_sensitivities_args(grad, sensitivities, test, ref, ppd, space, m);
  return {grad_like(test, m[0]), grad_like(ref, m[1])};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> hdr_flip(const at::Tensor& test, const at::Tensor& ref,
                                                        const at::Tensor& exposures, const at::Tensor& counts,
                                                        double ppd, c10::string_view tone_mapper, double eps) {
  check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  return {map_like(test), map_like(test), at::empty_symint(map_shape(test), test.options().dtype(at::kInt))};
}

Pair hdr_flip_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref,
                       const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& index, double ppd,
                       c10::string_view tone_mapper, double eps, Mask m) {
  check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  check_grad(grad, test, 1);
  check_exposure_index(index, grad);
  return {grad_like(test, m[0]), grad_like(ref, m[1])};
}

at::Tensor csf_filter(const at::Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  return at::empty_symint(opp.sym_sizes(), opp.options());
}

at::Tensor csf_filter_backward(const at::Tensor& grad, const at::Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  check_grad(grad, opp, 3);
  return at::empty_symint(opp.sym_sizes(), opp.options());
}

at::Tensor hunt_hyab(const at::Tensor& test, const at::Tensor& ref, double eps) {
  check_hunt_hyab_args(test, ref, eps);
  return map_like(test);
}

Pair hunt_hyab_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double eps, Mask m) {
  check_hunt_hyab_args(test, ref, eps);
  check_grad(grad, test, 1);
  return {grad_like(test, m[0]), grad_like(ref, m[1])};
}

at::Tensor feature_difference(const at::Tensor& test, const at::Tensor& ref, double ppd, double eps) {
  check_feature_args(test, ref, ppd, eps);
  return at::empty_symint(test.sym_sizes(), test.options());
}

Pair feature_difference_backward(const at::Tensor& grad, const at::Tensor& test, const at::Tensor& ref, double ppd,
                                 double eps, Mask m) {
  check_feature_args(test, ref, ppd, eps);
  check_grad(grad, test, 1);
  return {grad_like(test, m[0]), grad_like(ref, m[1])};
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, Meta, m) {
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
