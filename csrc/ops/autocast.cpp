// TORCH_LIBRARY_IMPL(flip, AutocastCPU / AutocastCUDA) of the LibTorch CMake package: under
// autocast the inputs of every forward op are cast to float32 (like PyTorch's own losses) and the
// result stays float32, so mixed-precision training needs no casts around the loss. The backward
// ops see float32 only. The Python extension registers the same rule from Python
// (flip_loss/op_registration.py).
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "../include/flip_loss/op_signatures.h"

namespace flip_ops {
namespace {

namespace op = flip_loss::op;

template <c10::DispatchKey Key, c10::DeviceType Dev>
struct Autocast {
  static at::Tensor f32(const at::Tensor& t) { return at::autocast::cached_cast(at::kFloat, t, Dev); }

  static at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                             double eps) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<op::LdrFlip>(f32(test), f32(ref), ppd, space, eps);
  }
  static std::tuple<at::Tensor, at::Tensor> ldr_flip_multiscale(const at::Tensor& test, const at::Tensor& ref,
                                                                at::ArrayRef<double> ppds, at::ArrayRef<double> weights,
                                                                c10::string_view space, double eps,
                                                                std::array<bool, 2> keep) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<op::LdrFlipMultiscale>(f32(test), f32(ref), ppds, weights, space, eps, keep);
  }
  static std::tuple<at::Tensor, at::Tensor, at::Tensor> hdr_flip(const at::Tensor& test, const at::Tensor& ref,
                                                                 const at::Tensor& exposures, const at::Tensor& counts,
                                                                 double ppd, c10::string_view tm, double eps) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<op::HdrFlip>(f32(test), f32(ref), exposures, counts, ppd, tm, eps);
  }
  static at::Tensor csf_filter(const at::Tensor& opp, double ppd) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<op::CsfFilter>(f32(opp), ppd);
  }
  static at::Tensor hunt_hyab(const at::Tensor& test, const at::Tensor& ref, double eps) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<op::HuntHyab>(f32(test), f32(ref), eps);
  }
  static at::Tensor feature_difference(const at::Tensor& test, const at::Tensor& ref, double ppd, double eps) {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(Key);
    return op::call<op::FeatureDifference>(f32(test), f32(ref), ppd, eps);
  }
};

template <class A>
void register_autocast(torch::Library& m) {
  m.impl("ldr_flip", &A::ldr_flip);
  m.impl("_ldr_flip_multiscale", &A::ldr_flip_multiscale);
  m.impl("hdr_flip", &A::hdr_flip);
  m.impl("csf_filter", &A::csf_filter);
  m.impl("hunt_hyab", &A::hunt_hyab);
  m.impl("feature_difference", &A::feature_difference);
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, AutocastCPU, m) {
  register_autocast<Autocast<c10::DispatchKey::AutocastCPU, c10::DeviceType::CPU>>(m);
}
TORCH_LIBRARY_IMPL(flip, AutocastCUDA, m) {
  register_autocast<Autocast<c10::DispatchKey::AutocastCUDA, c10::DeviceType::CUDA>>(m);
}

}  // namespace flip_ops
