// flip_loss/op_signatures.h: every op that libflip_ops registers with the PyTorch dispatcher
// (TORCH_LIBRARY(flip), whose schemas are in csrc/ops/schema.cpp), as one struct per op that holds
// its qualified name and the C++ function type of its schema, and the typed handle through which
// such an op is called. flip_loss.h calls the public forward ops through it, and the library's own
// Autograd and Autocast kernels call every op through it; a signature that does not match its
// schema throws when its handle is first made. The ops whose names start with an underscore are
// internals: of ldr_flip's autograd (CPU and CUDA), and the multi-scale LDR-FLIP of the Python API
// (CPU only).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <array>
#include <tuple>
#include <utility>

namespace flip_loss {
namespace op {

using Tensor = at::Tensor;
using TensorPair = std::tuple<at::Tensor, at::Tensor>;  // gradients w.r.t. (test, reference)
using OutputMask = std::array<bool, 2>;                 // which of the two gradients are wanted

struct LdrFlip {
  static constexpr const char* name = "flip::ldr_flip";
  using Signature = Tensor(const Tensor& test, const Tensor& reference, double pixels_per_degree,
                           c10::string_view input_space, double eps);
};
struct LdrFlipBackward {
  static constexpr const char* name = "flip::ldr_flip_backward";
  using Signature = TensorPair(const Tensor& grad, const Tensor& test, const Tensor& reference,
                               double pixels_per_degree, c10::string_view input_space, double eps,
                               OutputMask output_mask);
};
struct LdrFlipWithSensitivities {
  static constexpr const char* name = "flip::_ldr_flip_with_sensitivities";
  using Signature = TensorPair(const Tensor& test, const Tensor& reference, double pixels_per_degree,
                               c10::string_view input_space, double eps, OutputMask output_mask);
};
struct LdrFlipBackwardFromSensitivities {
  static constexpr const char* name = "flip::_ldr_flip_backward_from_sensitivities";
  using Signature = TensorPair(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                               const Tensor& reference, double pixels_per_degree, c10::string_view input_space,
                               OutputMask output_mask);
};
struct LdrFlipMultiscale {
  static constexpr const char* name = "flip::_ldr_flip_multiscale";
  using Signature = TensorPair(const Tensor& test, const Tensor& reference, at::ArrayRef<double> pixels_per_degree,
                               at::ArrayRef<double> weights, c10::string_view input_space, double eps,
                               OutputMask output_mask);
};
struct LdrFlipMultiscaleBackward {
  static constexpr const char* name = "flip::_ldr_flip_multiscale_backward";
  using Signature = TensorPair(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                               const Tensor& reference, at::ArrayRef<double> pixels_per_degree,
                               at::ArrayRef<double> weights, c10::string_view input_space, OutputMask output_mask);
};
struct HdrFlip {
  static constexpr const char* name = "flip::hdr_flip";
  using Signature = std::tuple<Tensor, Tensor, Tensor>(const Tensor& test, const Tensor& reference,
                                                       const Tensor& exposures, const Tensor& counts,
                                                       double pixels_per_degree, c10::string_view tone_mapper,
                                                       double eps);
};
struct HdrFlipBackward {
  static constexpr const char* name = "flip::hdr_flip_backward";
  using Signature = TensorPair(const Tensor& grad, const Tensor& test, const Tensor& reference, const Tensor& exposures,
                               const Tensor& counts, const Tensor& exposure_index, double pixels_per_degree,
                               c10::string_view tone_mapper, double eps, OutputMask output_mask);
};
struct CsfFilter {
  static constexpr const char* name = "flip::csf_filter";
  using Signature = Tensor(const Tensor& opponent, double pixels_per_degree);
};
struct CsfFilterBackward {
  static constexpr const char* name = "flip::csf_filter_backward";
  using Signature = Tensor(const Tensor& grad, const Tensor& opponent, double pixels_per_degree);
};
struct HuntHyab {
  static constexpr const char* name = "flip::hunt_hyab";
  using Signature = Tensor(const Tensor& test, const Tensor& reference, double eps);
};
struct HuntHyabBackward {
  static constexpr const char* name = "flip::hunt_hyab_backward";
  using Signature = TensorPair(const Tensor& grad, const Tensor& test, const Tensor& reference, double eps,
                               OutputMask output_mask);
};
struct FeatureDifference {
  static constexpr const char* name = "flip::feature_difference";
  using Signature = Tensor(const Tensor& test, const Tensor& reference, double pixels_per_degree, double eps);
};
struct FeatureDifferenceBackward {
  static constexpr const char* name = "flip::feature_difference_backward";
  using Signature = TensorPair(const Tensor& grad, const Tensor& test, const Tensor& reference,
                               double pixels_per_degree, double eps, OutputMask output_mask);
};

// The forward ops that take images, whose floating inputs autocast casts to float32 (csrc/ops/
// autocast.cpp registers each; flip_loss/op_registration.py's AUTOCAST_OPS is the same list).
using AutocastOps = std::tuple<LdrFlip, LdrFlipMultiscale, HdrFlip, CsfFilter, HuntHyab, FeatureDifference>;

// The typed handle of Op, looked up once. Throws a c10::Error that says what to do when the op
// is not registered (libflip_ops not loaded); the next call then looks again.
template <class Op>
const c10::TypedOperatorHandle<typename Op::Signature>& handle() {
  static const auto typed = [] {
    auto& dispatcher = c10::Dispatcher::singleton();
    TORCH_CHECK(dispatcher.findSchema({Op::name, ""}).has_value(), "flip_loss: the op ", Op::name,
                " is not registered: libflip_ops is not loaded in this process. Link the program "
                "against flip_loss::flip_ops before torch's libraries (the linker drops it with "
                "--as-needed otherwise), or load it with dlopen()/torch.ops.load_library.");
    return dispatcher.findSchemaOrThrow(Op::name, "").template typed<typename Op::Signature>();
  }();
  return typed;
}

// Calls Op through the dispatcher, from the current dispatch key down (autograd included).
template <class Op, class... Args>
decltype(auto) call(Args&&... args) {
  return handle<Op>().call(std::forward<Args>(args)...);
}

}  // namespace op
}  // namespace flip_loss
