// flip_run_scripted MODULE.pt INPUTS.pt OUTPUTS.pt
//
// Runs a TorchScript FLIP module saved from Python (torch.jit.script(FLIPLoss(reduction="none")))
// forward and backward in a C++ program that has only LibTorch and libflip_ops.
//   MODULE.pt   the scripted module: forward(test, reference) -> error map (or a scalar loss)
//   INPUTS.pt   a scripted container module whose attributes "test" and "reference" are tensors
//   OUTPUTS.pt  written with torch::pickle_save, readable by torch.load(weights_only=True) in
//               Python: a tuple of (name, tensor) pairs, names "map", "grad_test",
//               "grad_reference", "dispatcher_map" (dict(torch.load(path)) in Python)
// Also calls flip::ldr_flip once through the typed dispatcher handle (a multi-scale module, whose
// pixels_per_degree is a list: "dispatcher_map" is empty). Exits non-zero on any error.
#include <ATen/core/dispatch/Dispatcher.h>
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

template <class T>
T module_attr(const torch::jit::Module& m, const std::string& name, T fallback) {
  if (!m.hasattr(name)) return fallback;
  return m.attr(name).to<T>();
}

double norm_of(const at::Tensor& t) { return t.defined() ? t.norm().item<double>() : 0.0; }

int run(const std::string& module_path, const std::string& inputs_path, const std::string& outputs_path) {
  // The ops must have been registered by libflip_ops's static initialisers; if the linker dropped
  // the library (--as-needed), this is where it shows.
  const auto handle = c10::Dispatcher::singleton().findSchema({"flip::ldr_flip", ""});
  TORCH_CHECK(handle.has_value(),
              "flip::ldr_flip is not registered: libflip_ops was not loaded (dropped by --as-needed?)");

  torch::jit::Module module = torch::jit::load(module_path, at::kCPU);
  module.eval();
  torch::jit::Module inputs = torch::jit::load(inputs_path, at::kCPU);

  at::Tensor test = tensor_attr(inputs, "test").detach().clone().requires_grad_(true);
  at::Tensor reference = tensor_attr(inputs, "reference").detach().clone().requires_grad_(true);

  // Forward through the scripted module (Autograd -> CPU kernels of flip_ops).
  torch::IValue out = module.forward({test, reference});
  TORCH_CHECK(out.isTensor(), "the module's forward did not return a tensor");
  at::Tensor map = out.toTensor();
  TORCH_CHECK(map.requires_grad(), "the module's output does not require grad (no autograd kernel?)");

  // Backward on the sum of the map (on the loss itself if the module reduces).
  at::Tensor objective = map.dim() == 0 ? map : map.sum();
  objective.backward();
  at::Tensor grad_test = test.grad();
  at::Tensor grad_reference = reference.grad();
  TORCH_CHECK(grad_test.defined() && grad_reference.defined(), "backward produced no input gradients");

  // The same op once more, directly through the typed dispatcher handle, for a module with one
  // pixels_per_degree (a multi-scale module, whose attribute is a list, gets an empty tensor).
  const torch::IValue ppd_attr =
      module.hasattr("pixels_per_degree") ? module.attr("pixels_per_degree") : torch::IValue(67.02064327658225);
  const bool one_scale = ppd_attr.isDouble();
  const double ppd = one_scale ? ppd_attr.toDouble() : 0.0;
  const std::string space = module_attr<std::string>(module, "input_space", "srgb");
  const double eps = module_attr<double>(module, "eps", 1e-15);
  auto ldr_flip = c10::Dispatcher::singleton()
                      .findSchemaOrThrow("flip::ldr_flip", "")
                      .typed<at::Tensor(const at::Tensor&, const at::Tensor&, double, c10::string_view, double)>();
  at::Tensor direct = at::empty({0});
  if (one_scale) {
    at::NoGradGuard no_grad;
    direct = ldr_flip.call(test.detach(), reference.detach(), ppd, space, eps);
  }
  if (one_scale && map.dim() != 0) {
    TORCH_CHECK(direct.sizes() == map.sizes(), "dispatcher call returned shape ", direct.sizes(), ", the module ",
                map.sizes());
    const double diff = (direct - map.detach()).abs().max().item<double>();
    TORCH_CHECK(diff <= 1e-6, "dispatcher call and scripted module disagree: max |diff| = ", diff);
  }

  // A tuple of (name, tensor) pairs: tuples carry no TorchScript type tags, so torch.load reads
  // the file with weights_only=True (a c10::Dict would need torch.jit._pickle.restore_type_tag).
  auto entry = [](const char* name, const at::Tensor& t) {
    return c10::ivalue::Tuple::create({torch::IValue(std::string(name)), torch::IValue(t.detach().contiguous())});
  };
  auto result = c10::ivalue::Tuple::create({entry("map", map), entry("grad_test", grad_test),
                                            entry("grad_reference", grad_reference), entry("dispatcher_map", direct)});
  write_file(outputs_path, torch::jit::pickle_save(torch::IValue(result)));

  if (one_scale)
    std::printf("flip_run_scripted: input %s, ppd %.4f, %s\n", c10::str(test.sizes()).c_str(), ppd, space.c_str());
  else
    std::printf("flip_run_scripted: input %s, multi-scale (%zu ppd values), %s\n", c10::str(test.sizes()).c_str(),
                ppd_attr.toDoubleVector().size(), space.c_str());
  std::printf("  mean FLIP          %.8f\n", map.detach().mean().item<double>());
  std::printf("  |grad test|        %.8e\n", norm_of(grad_test));
  std::printf("  |grad reference|   %.8e\n", norm_of(grad_reference));
  std::printf("  wrote %s\n", outputs_path.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: " << (argc ? argv[0] : "flip_run_scripted") << " MODULE.pt INPUTS.pt OUTPUTS.pt\n";
    return 2;
  }
  try {
    return run(argv[1], argv[2], argv[3]);
  } catch (const c10::Error& e) {
    std::cerr << "flip_run_scripted: error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "flip_run_scripted: error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "flip_run_scripted: unknown error\n";
  }
  return 1;
}
