// TORCH_LIBRARY_IMPL(flip, Autograd) of the LibTorch CMake package (libflip_ops): each forward
// records a node whose backward calls the registered backward op, so gradients flow in C++ and in
// TorchScript run from C++. The backward ops are not differentiable: their Autograd kernels record
// a node that raises when a second-order gradient is asked for (FirstOrderOnly). The Python
// extension registers the same rules from Python (flip_loss/op_registration.py), because the
// stable ABI it is built against has no autograd; this file is compiled against the user's own
// libtorch, with its full C++ API.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "../flip/plane_counts.h"
#include "../include/flip_loss/op_signatures.h"

namespace flip_ops {
namespace {

namespace op = flip_loss::op;
using Pair = op::TensorPair;
using Mask = op::OutputMask;
constexpr int64_t kSensitivityPlanesPerImage = flip::kResponsePlanesPerImage;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

Mask needs(AutogradContext* ctx) { return {ctx->needs_input_grad(0), ctx->needs_input_grad(1)}; }

at::Tensor keep_if(bool b, const at::Tensor& t) { return b ? t : at::Tensor(); }

// ---- the backward ops, called through the dispatcher ----
//
// The forwards' backward() calls them with every dispatch key (Backward<Op>::call), so that with
// create_graph=True the backward op's own Autograd kernel (FirstOrderOnly) runs; FirstOrderOnly
// calls them below autograd. Op is the backward op's struct of op_signatures.h.

variable_list as_list(const at::Tensor& t) { return {t}; }
variable_list as_list(const Pair& p) { return {std::get<0>(p), std::get<1>(p)}; }

template <class Op>
struct Backward {
  template <class... Args>
  static variable_list call(Args&&... args) {
    return as_list(op::call<Op>(std::forward<Args>(args)...));
  }
};
using LdrFlipBackward = Backward<op::LdrFlipBackward>;
using LdrFlipBackwardFromSensitivities = Backward<op::LdrFlipBackwardFromSensitivities>;
using LdrFlipMultiscaleBackward = Backward<op::LdrFlipMultiscaleBackward>;
using HdrFlipBackward = Backward<op::HdrFlipBackward>;
using CsfFilterBackward = Backward<op::CsfFilterBackward>;
using HuntHyabBackward = Backward<op::HuntHyabBackward>;
using FeatureDifferenceBackward = Backward<op::FeatureDifferenceBackward>;

// The Autograd kernel of every backward op. With create_graph=True autograd runs the backward ops
// with gradient recording on; without a kernel of their own their results would carry no graph,
// and a gradient penalty (or any other second-order use) would silently get None from FLIP. This
// runs the op below autograd and, when an input requires grad, records a node whose backward
// raises: first-order gradients are unchanged, only differentiating them raises.
template <class Op>
class FirstOrderOnly : public torch::autograd::Function<FirstOrderOnly<Op>> {
 public:
  template <class... Args>
  static variable_list forward(AutogradContext*, Args&&... args) {
    at::AutoDispatchBelowADInplaceOrView guard;
    return Backward<Op>::call(std::forward<Args>(args)...);
  }
  static variable_list backward(AutogradContext*, variable_list) {
    TORCH_CHECK(false, "flip: double backward (second-order gradients) of FLIP is not supported: ", Op::name,
                " is not differentiable");
    return {};
  }
};

// FirstOrderOnly as the kernel of backward op Op, made from its signature (one gradient or two).
template <class Op, class Signature = typename Op::Signature>
struct FirstOrderKernel;
template <class Op, class R, class... Args>
struct FirstOrderKernel<Op, R(Args...)> {
  static R kernel(Args... args) {
    variable_list g = FirstOrderOnly<Op>::apply(std::forward<Args>(args)...);
    if constexpr (std::is_same_v<R, at::Tensor>) {
      return g[0];
    } else {
      return {g[0], g[1]};
    }
  }
};

// The backward ops, each registered with FirstOrderKernel.
using BackwardOps =
    std::tuple<op::LdrFlipBackward, op::LdrFlipBackwardFromSensitivities, op::LdrFlipMultiscaleBackward,
               op::HdrFlipBackward, op::CsfFilterBackward, op::HuntHyabBackward, op::FeatureDifferenceBackward>;

template <class... Ops>
void register_first_order(torch::Library& m, std::tuple<Ops...>*) {
  (m.impl(Ops::name, &FirstOrderKernel<Ops>::kernel), ...);
}

// ---- the forward ops ----

class LdrFlip : public torch::autograd::Function<LdrFlip> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref, double ppd,
                            c10::string_view space, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({test, ref});
    ctx->saved_data["ppd"] = ppd;
    ctx->saved_data["space"] = std::string(space.data(), space.size());
    ctx->saved_data["eps"] = eps;
    return op::call<op::LdrFlip>(test, ref, ppd, space, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const std::string space = ctx->saved_data["space"].toStringRef();
    const Mask m = needs(ctx);
    auto g = LdrFlipBackward::call(grads[0], s[0], s[1], ctx->saved_data["ppd"].toDouble(), space,
                                   ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], g[0]), keep_if(m[1], g[1]), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// ldr_flip's autograd where it keeps them (and that of the internal op itself): a forward that also keeps
// the sensitivities of the images in `keep` (a non-differentiable second output), so that the
// backward only scales them and runs the transposed filters instead of recomputing everything.
class LdrFlipWithSensitivities : public torch::autograd::Function<LdrFlipWithSensitivities> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref, double ppd,
                               c10::string_view space, double eps, Mask keep) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [map, sens] = op::call<op::LdrFlipWithSensitivities>(test, ref, ppd, space, eps, keep);
    ctx->save_for_backward({test, ref, sens});
    ctx->saved_data["ppd"] = ppd;
    ctx->saved_data["space"] = std::string(space.data(), space.size());
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["keep_test"] = keep[0];
    ctx->saved_data["keep_ref"] = keep[1];
    ctx->mark_non_differentiable({sens});
    // No gradient ever flows into the sensitivities: without this, autograd would hand the
    // backward a zero-filled tensor of their size (7 planes per image) on every call.
    ctx->set_materialize_grads(false);
    return {map, sens};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Mask keep = {ctx->saved_data["keep_test"].toBool(), ctx->saved_data["keep_ref"].toBool()};
    const Mask m = needs(ctx);
    const double ppd = ctx->saved_data["ppd"].toDouble();
    const std::string space = ctx->saved_data["space"].toStringRef();
    const at::Tensor none;
    if ((!m[0] && !m[1]) || !grads[0].defined()) return {none, none, none, none, none, none};
    variable_list g;
    if ((m[0] && !keep[0]) || (m[1] && !keep[1])) {
      // A gradient whose sensitivities were not kept (only when the internal op is called with an
      // output_mask that leaves out an input requiring grad): recompute it all.
      g = LdrFlipBackward::call(grads[0], s[0], s[1], ppd, space, ctx->saved_data["eps"].toDouble(), m);
    } else if (m == keep) {
      g = LdrFlipBackwardFromSensitivities::call(grads[0], s[2], s[0], s[1], ppd, space, m);
    } else {
      // Both kept, one wanted (backward(inputs=...)): its 7 planes.
      const auto planes = s[2].narrow(-3, m[0] ? 0 : kSensitivityPlanesPerImage, kSensitivityPlanesPerImage);
      g = LdrFlipBackwardFromSensitivities::call(grads[0], planes, s[0], s[1], ppd, space, m);
    }
    return {keep_if(m[0], g[0]), keep_if(m[1], g[1]), none, none, none, none};
  }
};

// Multi-scale LDR-FLIP: the forward keeps the sensitivities of the images in `keep` at every
// scale; there is no recomputing backward, so an input that requires grad must be kept.
class LdrFlipMultiscale : public torch::autograd::Function<LdrFlipMultiscale> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref,
                               at::ArrayRef<double> ppds, at::ArrayRef<double> weights, c10::string_view space,
                               double eps, Mask keep) {
    TORCH_CHECK_VALUE((keep[0] || !test.requires_grad()) && (keep[1] || !ref.requires_grad()),
                      "flip: _ldr_flip_multiscale's output_mask must keep the sensitivities of every input "
                      "that requires grad");
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [map, sens] = op::call<op::LdrFlipMultiscale>(test, ref, ppds, weights, space, eps, keep);
    ctx->save_for_backward({test, ref, sens});
    ctx->saved_data["ppds"] = ppds.vec();
    ctx->saved_data["weights"] = weights.vec();
    ctx->saved_data["space"] = std::string(space.data(), space.size());
    ctx->saved_data["keep_test"] = keep[0];
    ctx->saved_data["keep_ref"] = keep[1];
    ctx->mark_non_differentiable({sens});
    ctx->set_materialize_grads(false);  // as LdrFlipWithSensitivities
    return {map, sens};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Mask keep = {ctx->saved_data["keep_test"].toBool(), ctx->saved_data["keep_ref"].toBool()};
    const Mask m = needs(ctx);
    const at::Tensor none;
    if ((!m[0] && !m[1]) || !grads[0].defined()) return {none, none, none, none, none, none, none};
    const auto ppds = ctx->saved_data["ppds"].toDoubleVector();
    const auto weights = ctx->saved_data["weights"].toDoubleVector();
    // Every kept image's gradient (the sensitivities' layout), of which the wanted ones are returned.
    auto g = LdrFlipMultiscaleBackward::call(grads[0], s[2], s[0], s[1], ppds, weights,
                                             ctx->saved_data["space"].toStringRef(), keep);
    return {keep_if(m[0], g[0]), keep_if(m[1], g[1]), none, none, none, none, none};
  }
};

class HdrFlip : public torch::autograd::Function<HdrFlip> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref,
                               const at::Tensor& exposures, const at::Tensor& counts, double ppd,
                               c10::string_view tone_mapper, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    auto [map, emap, index] = op::call<op::HdrFlip>(test, ref, exposures, counts, ppd, tone_mapper, eps);
    ctx->save_for_backward({test, ref, exposures, counts, index});
    ctx->saved_data["ppd"] = ppd;
    ctx->saved_data["tone_mapper"] = std::string(tone_mapper.data(), tone_mapper.size());
    ctx->saved_data["eps"] = eps;
    ctx->mark_non_differentiable({emap, index});
    ctx->set_materialize_grads(false);  // as LdrFlipWithSensitivities: no zero-filled emap / index gradients
    return {map, emap, index};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const std::string tm = ctx->saved_data["tone_mapper"].toStringRef();
    const Mask m = needs(ctx);
    if (!grads[0].defined()) return variable_list(7);
    auto g = HdrFlipBackward::call(grads[0], s[0], s[1], s[2], s[3], s[4], ctx->saved_data["ppd"].toDouble(), tm,
                                   ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], g[0]), keep_if(m[1], g[1]), at::Tensor(), at::Tensor(),
            at::Tensor(),        at::Tensor(),        at::Tensor()};
  }
};

class CsfFilter : public torch::autograd::Function<CsfFilter> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& opp, double ppd) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({opp});
    ctx->saved_data["ppd"] = ppd;
    return op::call<op::CsfFilter>(opp, ppd);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    return {CsfFilterBackward::call(grads[0], s[0], ctx->saved_data["ppd"].toDouble())[0], at::Tensor()};
  }
};

class HuntHyab : public torch::autograd::Function<HuntHyab> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({test, ref});
    ctx->saved_data["eps"] = eps;
    return op::call<op::HuntHyab>(test, ref, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Mask m = needs(ctx);
    auto g = HuntHyabBackward::call(grads[0], s[0], s[1], ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], g[0]), keep_if(m[1], g[1]), at::Tensor()};
  }
};

class FeatureDifference : public torch::autograd::Function<FeatureDifference> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref, double ppd,
                            double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({test, ref});
    ctx->saved_data["ppd"] = ppd;
    ctx->saved_data["eps"] = eps;
    return op::call<op::FeatureDifference>(test, ref, ppd, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    const Mask m = needs(ctx);
    auto g = FeatureDifferenceBackward::call(grads[0], s[0], s[1], ctx->saved_data["ppd"].toDouble(),
                                             ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], g[0]), keep_if(m[1], g[1]), at::Tensor(), at::Tensor()};
  }
};

// ---- the Autograd kernels ----

// When a gradient will be taken, the forward keeps the sensitivities of the images that require
// grad (7 planes per image in the compute dtype: 7/3 of the image's own float32 size) and the
// backward only scales them and runs the transposed filters instead of recomputing the forward's
// work (benchmarks/RESULTS.md has the timings): on the CPU always, on CUDA while they take at most
// kCudaKeptSensitivitiesBytes (plane_counts.h; past it CUDA's backward recomputes in tiles, with
// memory flat in the image size). flip_loss/op_checks.py, keeps_sensitivities, is the same rule.
bool keeps_sensitivities(const at::Tensor& test, Mask keep) {
  if (test.device().is_cpu()) return true;
  if (!test.device().is_cuda()) return false;
  const long long elem = test.scalar_type() == at::kDouble ? 8 : 4;  // the compute dtype's
  const long long bytes = kSensitivityPlanesPerImage * (int{keep[0]} + int{keep[1]}) * (test.numel() / 3) * elem;
  return bytes <= flip::kCudaKeptSensitivitiesBytes;
}

at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space, double eps) {
  const Mask keep = {test.requires_grad(), ref.requires_grad()};
  if (at::GradMode::is_enabled() && (keep[0] || keep[1]) && keeps_sensitivities(test, keep))
    return LdrFlipWithSensitivities::apply(test, ref, ppd, space, eps, keep)[0];
  return LdrFlip::apply(test, ref, ppd, space, eps);
}
Pair ldr_flip_with_sensitivities(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                                 double eps, Mask keep) {
  auto out = LdrFlipWithSensitivities::apply(test, ref, ppd, space, eps, keep);
  return {out[0], out[1]};
}
Pair ldr_flip_multiscale(const at::Tensor& test, const at::Tensor& ref, at::ArrayRef<double> ppds,
                         at::ArrayRef<double> weights, c10::string_view space, double eps, Mask keep) {
  auto out = LdrFlipMultiscale::apply(test, ref, ppds, weights, space, eps, keep);
  return {out[0], out[1]};
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> hdr_flip(const at::Tensor& test, const at::Tensor& ref,
                                                        const at::Tensor& exposures, const at::Tensor& counts,
                                                        double ppd, c10::string_view tone_mapper, double eps) {
  auto out = HdrFlip::apply(test, ref, exposures, counts, ppd, tone_mapper, eps);
  return {out[0], out[1], out[2]};
}
at::Tensor csf_filter(const at::Tensor& opp, double ppd) { return CsfFilter::apply(opp, ppd); }
at::Tensor hunt_hyab(const at::Tensor& test, const at::Tensor& ref, double eps) {
  return HuntHyab::apply(test, ref, eps);
}
at::Tensor feature_difference(const at::Tensor& test, const at::Tensor& ref, double ppd, double eps) {
  return FeatureDifference::apply(test, ref, ppd, eps);
}

}  // namespace

TORCH_LIBRARY_IMPL(flip, Autograd, m) {
  m.impl("ldr_flip", &ldr_flip);
  m.impl("hdr_flip", &hdr_flip);
  m.impl("csf_filter", &csf_filter);
  m.impl("hunt_hyab", &hunt_hyab);
  m.impl("feature_difference", &feature_difference);
  m.impl("_ldr_flip_with_sensitivities", &ldr_flip_with_sensitivities);
  m.impl("_ldr_flip_multiscale", &ldr_flip_multiscale);
  register_first_order(m, static_cast<BackwardOps*>(nullptr));
}

}  // namespace flip_ops
