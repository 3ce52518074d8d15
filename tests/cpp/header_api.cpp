// flip_header_api INPUTS.pt OUTPUTS.pt
//
// Exercises the public C++ API <flip_loss/flip_loss.h> on tensors saved from Python.
//   INPUTS.pt   a scripted container module (torch.jit.script) whose attributes are tensors:
//               test, reference (N x 3 x H x W sRGB), opponent (N x 3 x H x W YCxCz),
//               lin_test, lin_reference (N x 3 x H x W linear RGB), ach_test, ach_reference
//               (N x 1 x H x W), params (float64: ppd, eps), and any number of maps to pool whose
//               names start with "pool_"
//   OUTPUTS.pt  a tuple of (name, tensor) pairs written with torch::pickle_save (read with
//               dict(torch.load(path, weights_only=True)) in Python):
//                 ldr_flip, ldr_flip_linear, ldr_flip_defaults, grad_test, grad_reference,
//                 csf_filter, hunt_hyab, feature_difference,
//                 ppd (float64: pixels_per_degree(0.7, 0.7, 3840), pixels_per_degree(0.5, 0.3, 1920),
//                      kDefaultPpd),
//                 pooled_<name> for every pool_<name> input and pooled_ldr_flip (float64, 6 values:
//                      mean, weighted median, 1st and 3rd weighted quartile, min, max),
//                 checks (int64: 1 for each check that passed; see below, autocast's last)
#include <flip_loss/flip_loss.h>

#include <ATen/autocast_mode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/script.h>

#include "test_io.h"

#include <cstdio>
#include <exception>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

namespace {

using flip_test::tensor_attr;
using flip_test::write_file;

// An op that no library registers, in op_signatures.h's form: its handle must say so.
struct NoSuchOp {
  static constexpr const char* name = "flip::no_such_op";
  using Signature = at::Tensor(const at::Tensor&);
};

at::Tensor pooled_tensor(const flip_loss::Pooled& p) {
  return at::tensor({p.mean, p.weighted_median, p.weighted_quartile_1, p.weighted_quartile_3, p.min, p.max},
                    at::kDouble);
}

// An op's kernels are on PyTorch's stable ABI: their errors arrive as a std::runtime_error or as the
// c10::Error a torch release turns it into; the library's own checks throw c10::Error. Both are
// std::exception.
template <class F>
bool throws_with_message(F&& f, const std::string& needle) {
  try {
    f();
  } catch (const c10::Error& e) {
    return std::string(e.what_without_backtrace()).find(needle) != std::string::npos;
  } catch (const std::exception& e) {
    return std::string(e.what()).find(needle) != std::string::npos;
  }
  return false;
}

// Under CPU autocast, bfloat16 images are computed in float32 and the map stays float32 (the
// library's Autocast kernels, csrc/ops/autocast.cpp): the float32 call's values, bit for bit.
bool autocast_computes_in_float32(const at::Tensor& test, const at::Tensor& reference, double ppd) {
  const at::Tensor t = test.detach().to(at::kBFloat16), r = reference.detach().to(at::kBFloat16);
  at::Tensor ldr, hdr;
  at::autocast::set_autocast_enabled(at::kCPU, true);
  try {
    ldr = flip_loss::ldr_flip(t, r, ppd);
    hdr = flip_loss::hdr_flip(t * 4, r * 4, -2.0, 1.0, 3, ppd).error;
  } catch (...) {
    at::autocast::set_autocast_enabled(at::kCPU, false);
    throw;
  }
  at::autocast::set_autocast_enabled(at::kCPU, false);
  const at::Tensor t32 = t.to(at::kFloat), r32 = r.to(at::kFloat);
  return ldr.scalar_type() == at::kFloat && hdr.scalar_type() == at::kFloat &&
         at::equal(ldr, flip_loss::ldr_flip(t32, r32, ppd)) &&
         at::equal(hdr, flip_loss::hdr_flip(t32 * 4, r32 * 4, -2.0, 1.0, 3, ppd).error);
}

// uint8 images are 8-bit codes k: ldr_flip gives them the float32 map of the values k / 255
// (correctly rounded: divided in double, then rounded once), bit for bit; hdr_flip refuses them.
bool codes_are_read_as_their_values(const at::Tensor& test, const at::Tensor& reference, double ppd) {
  const at::Tensor t = (test.detach() * 255).round().to(at::kByte),
                   r = (reference.detach() * 255).round().to(at::kByte);
  const at::Tensor map = flip_loss::ldr_flip(t, r, ppd);
  const at::Tensor values =
      flip_loss::ldr_flip(t.to(at::kDouble).div(255).to(at::kFloat), r.to(at::kDouble).div(255).to(at::kFloat), ppd);
  return map.scalar_type() == at::kFloat && at::equal(map, values) &&
         throws_with_message([&] { flip_loss::hdr_flip(t, r, -2.0, 1.0, 3, ppd); }, "uint8");
}

int run(const std::string& inputs_path, const std::string& outputs_path) {
  torch::jit::Module inputs = torch::jit::load(inputs_path, at::kCPU);
  const at::Tensor params = tensor_attr(inputs, "params").to(at::kDouble);
  const double ppd = params[0].item<double>();
  const double eps = params[1].item<double>();

  std::vector<std::pair<std::string, at::Tensor>> out;
  auto put = [&out](const std::string& name, const at::Tensor& t) { out.emplace_back(name, t.detach().contiguous()); };

  // ldr_flip with autograd through the dispatcher call.
  at::Tensor test = tensor_attr(inputs, "test").detach().clone().requires_grad_(true);
  at::Tensor reference = tensor_attr(inputs, "reference").detach().clone().requires_grad_(true);
  at::Tensor map = flip_loss::ldr_flip(test, reference, ppd, "srgb", eps);
  TORCH_CHECK(map.requires_grad(), "flip_loss::ldr_flip's output does not require grad");
  map.sum().backward();
  put("ldr_flip", map);
  put("grad_test", test.grad());
  put("grad_reference", reference.grad());
  {
    at::NoGradGuard no_grad;
    put("ldr_flip_linear", flip_loss::ldr_flip(test.detach(), reference.detach(), ppd, "linear", eps));
    put("ldr_flip_defaults", flip_loss::ldr_flip(test.detach(), reference.detach()));
    put("csf_filter", flip_loss::csf_filter(tensor_attr(inputs, "opponent"), ppd));
    put("hunt_hyab", flip_loss::hunt_hyab(tensor_attr(inputs, "lin_test"), tensor_attr(inputs, "lin_reference"), eps));
    put("feature_difference",
        flip_loss::feature_difference(tensor_attr(inputs, "ach_test"), tensor_attr(inputs, "ach_reference"), ppd, eps));
  }
  {
    // hdr_flip with autograd, on the inputs lifted into HDR (x 4).
    at::Tensor ht = (tensor_attr(inputs, "test") * 4).detach().requires_grad_(true);
    at::Tensor hr = (tensor_attr(inputs, "reference") * 4).detach().requires_grad_(true);
    auto res = flip_loss::hdr_flip(ht, hr, -2.0, 1.0, 4, ppd, "HABLE", eps);
    res.error.sum().backward();
    put("hdr_flip", res.error);
    put("hdr_exposure_map", res.exposure_map);
    put("hdr_grad_test", ht.grad());
  }
  put("ppd", at::tensor({flip_loss::pixels_per_degree(0.7, 0.7, 3840), flip_loss::pixels_per_degree(0.5, 0.3, 1920),
                         flip_loss::kDefaultPpd},
                        at::kDouble));

  // pool() of every pool_* input and of the map computed here.
  for (const auto& attr : inputs.named_attributes(/*recurse=*/false)) {
    if (attr.name.rfind("pool_", 0) == 0 && attr.value.isTensor()) {
      put("pooled_" + attr.name.substr(5), pooled_tensor(flip_loss::pool(attr.value.toTensor())));
    }
  }
  put("pooled_ldr_flip", pooled_tensor(flip_loss::pool(map)));

  // Error paths: each must throw with a message that says what is wrong.
  std::vector<int64_t> checks;
  checks.push_back(throws_with_message([] { flip_loss::op::handle<NoSuchOp>(); }, "is not registered"));
  checks.push_back(
      throws_with_message([&] { flip_loss::ldr_flip(test.detach(), reference.detach(), ppd, "xyz"); }, "input_space"));
  checks.push_back(throws_with_message([] { flip_loss::pool(at::empty({0})); }, "empty"));
  checks.push_back(throws_with_message([] { flip_loss::pool(at::full({2, 2}, NAN)); }, "NaN"));
  checks.push_back(throws_with_message([] { flip_loss::pixels_per_degree(0.7, 0.0, 3840); }, "width_m"));
  // The limits of <flip_loss/limits.h>: checked by the ops, and by hdr_flip before it allocates.
  const at::Tensor t0 = test.detach(), r0 = reference.detach();
  checks.push_back(
      throws_with_message([&] { flip_loss::ldr_flip(t0, r0, 2 * flip_loss::kMaxPpd); }, "pixels_per_degree"));
  checks.push_back(throws_with_message([&] { flip_loss::ldr_flip(t0, r0, ppd, "srgb", 1e-3); }, "eps"));
  checks.push_back(
      throws_with_message([&] { flip_loss::ldr_flip(t0.slice(0, 0, 0), r0.slice(0, 0, 0)); }, "empty batch"));
  checks.push_back(
      throws_with_message([&] { flip_loss::hdr_flip(t0, r0, -2.0, 1.0, flip_loss::kMaxExposures + 1); }, "num"));
  checks.push_back(throws_with_message([&] { flip_loss::hdr_flip(t0, r0, NAN, 1.0, 4); }, "finite"));
  // First-order gradients only: differentiating one throws (instead of giving no gradient).
  checks.push_back(throws_with_message(
      [&] {
        at::Tensor x = t0.clone().requires_grad_(true);
        at::Tensor g = torch::autograd::grad({flip_loss::ldr_flip(x, r0, ppd).sum()}, {x}, {}, true, true)[0];
        torch::autograd::grad({g.sum()}, {x});
      },
      "double backward"));
  checks.push_back(autocast_computes_in_float32(t0, r0, ppd));
  checks.push_back(codes_are_read_as_their_values(t0, r0, ppd));
  put("checks", at::tensor(checks, at::kLong));

  std::vector<c10::IValue> entries;
  for (const auto& [name, t] : out) entries.push_back(c10::ivalue::Tuple::create({c10::IValue(name), c10::IValue(t)}));
  write_file(outputs_path, torch::jit::pickle_save(c10::IValue(c10::ivalue::Tuple::create(std::move(entries)))));

  const flip_loss::Pooled p = flip_loss::pool(map);
  std::printf("flip_header_api: input %s, ppd %.4f, mean FLIP %.8f, weighted median %.8f\n",
              c10::str(test.sizes()).c_str(), ppd, p.mean, p.weighted_median);
  std::printf("  wrote %zu results to %s\n", out.size(), outputs_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: " << (argc ? argv[0] : "flip_header_api") << " INPUTS.pt OUTPUTS.pt\n";
    return 2;
  }
  try {
    return run(argv[1], argv[2]);
  } catch (const c10::Error& e) {
    std::cerr << "flip_header_api: error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "flip_header_api: error: " << e.what() << "\n";
  }
  return 1;
}
