// TORCH_LIBRARY_IMPL(flip, Autograd): each forward records a node whose backward calls the
// registered backward op, so gradients flow in eager mode, TorchScript, C++ and torch.compile.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <string>

#include "dispatch.h"

namespace flip_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using Mask = std::array<bool, 2>;

Mask needs(AutogradContext* ctx) { return {ctx->needs_input_grad(0), ctx->needs_input_grad(1)}; }

at::Tensor keep_if(bool b, const at::Tensor& t) { return b ? t : at::Tensor(); }

class LdrFlip : public torch::autograd::Function<LdrFlip> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref, double ppd,
                            c10::string_view space, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({test, ref});
    ctx->saved_data["ppd"] = ppd;
    ctx->saved_data["space"] = std::string(space.data(), space.size());
    ctx->saved_data["eps"] = eps;
    static auto f = op<at::Tensor(const at::Tensor&, const at::Tensor&, double, c10::string_view, double)>(
        "flip::ldr_flip");
    return f.call(test, ref, ppd, space, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    static auto f = op<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, c10::string_view,
                            double, Mask)>("flip::ldr_flip_backward");
    const std::string space = ctx->saved_data["space"].toStringRef();
    const Mask m = needs(ctx);
    auto [gt, gr] = f.call(grads[0], s[0], s[1], ctx->saved_data["ppd"].toDouble(), space,
                           ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], gt), keep_if(m[1], gr), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

class HdrFlip : public torch::autograd::Function<HdrFlip> {
 public:
  static variable_list forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref,
                               const at::Tensor& exposures, const at::Tensor& counts, double ppd,
                               c10::string_view tone_mapper, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    static auto f = op<std::tuple<at::Tensor, at::Tensor, at::Tensor>(
        const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, double, c10::string_view, double)>(
        "flip::hdr_flip");
    auto [map, emap, index] = f.call(test, ref, exposures, counts, ppd, tone_mapper, eps);
    ctx->save_for_backward({test, ref, exposures, counts, index});
    ctx->saved_data["ppd"] = ppd;
    ctx->saved_data["tone_mapper"] = std::string(tone_mapper.data(), tone_mapper.size());
    ctx->saved_data["eps"] = eps;
    ctx->mark_non_differentiable({emap, index});
    return {map, emap, index};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    static auto f = op<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                            const at::Tensor&, const at::Tensor&, double, c10::string_view, double, Mask)>(
        "flip::hdr_flip_backward");
    const std::string tm = ctx->saved_data["tone_mapper"].toStringRef();
    const Mask m = needs(ctx);
    auto [gt, gr] = f.call(grads[0], s[0], s[1], s[2], s[3], s[4], ctx->saved_data["ppd"].toDouble(), tm,
                           ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], gt), keep_if(m[1], gr), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(),
            at::Tensor()};
  }
};

class CsfFilter : public torch::autograd::Function<CsfFilter> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& opp, double ppd) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({opp});
    ctx->saved_data["ppd"] = ppd;
    static auto f = op<at::Tensor(const at::Tensor&, double)>("flip::csf_filter");
    return f.call(opp, ppd);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    static auto f = op<at::Tensor(const at::Tensor&, const at::Tensor&, double)>("flip::csf_filter_backward");
    return {f.call(grads[0], s[0], ctx->saved_data["ppd"].toDouble()), at::Tensor()};
  }
};

class HuntHyab : public torch::autograd::Function<HuntHyab> {
 public:
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& test, const at::Tensor& ref, double eps) {
    at::AutoDispatchBelowADInplaceOrView guard;
    ctx->save_for_backward({test, ref});
    ctx->saved_data["eps"] = eps;
    static auto f = op<at::Tensor(const at::Tensor&, const at::Tensor&, double)>("flip::hunt_hyab");
    return f.call(test, ref, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    static auto f = op<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, Mask)>(
        "flip::hunt_hyab_backward");
    const Mask m = needs(ctx);
    auto [gt, gr] = f.call(grads[0], s[0], s[1], ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], gt), keep_if(m[1], gr), at::Tensor()};
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
    static auto f =
        op<at::Tensor(const at::Tensor&, const at::Tensor&, double, double)>("flip::feature_difference");
    return f.call(test, ref, ppd, eps);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto s = ctx->get_saved_variables();
    static auto f = op<Pair(const at::Tensor&, const at::Tensor&, const at::Tensor&, double, double, Mask)>(
        "flip::feature_difference_backward");
    const Mask m = needs(ctx);
    auto [gt, gr] = f.call(grads[0], s[0], s[1], ctx->saved_data["ppd"].toDouble(),
                           ctx->saved_data["eps"].toDouble(), m);
    return {keep_if(m[0], gt), keep_if(m[1], gr), at::Tensor(), at::Tensor()};
  }
};

at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                    double eps) {
  return LdrFlip::apply(test, ref, ppd, space, eps);
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
}

}  // namespace flip_ops
