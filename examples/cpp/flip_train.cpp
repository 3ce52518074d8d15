// flip_train: optimisation with the FLIP loss in C++ (LibTorch autograd + torch::optim::Adam).
//
//   flip_train --reference REF.png --test START.png [--model flip_model.pt] [--steps 20] [--lr LR]
//              [--ppd P] [--output result.png] [--save trained.pt]
//
// Two modes:
//   without --model   optimises the image itself: starts from START.png and minimises
//                     mean(flip_loss::ldr_flip(image, reference, ppd)) (default lr 0.01; the image
//                     is clamped to [0, 1] after every step)
//   --model M         trains the parameters of a scripted model saved by
//                     examples/export_torchscript.py (flip_model.pt): minimises
//                     M.training_loss(START, reference) = FLIP mean of M.forward(START) against the
//                     reference (default lr 1e-4); --save writes the trained module
// Prints the loss of every step ("step  k/N  FLIP loss L", the loss before that step's update) and
// then "final FLIP loss L" (after the last update). --output writes the optimised image (or the
// model's output) as an 8-bit PNG. Exit codes: 0 success, 2 a usage or input error, 1 anything else.
#include <flip_loss/flip_loss.h>

#include <torch/optim/adam.h>
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "image_io.h"

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string reference, test, model, output, save;
  int steps = 20;
  double lr = -1;  // mode default
  double ppd = flip_loss::kDefaultPpd;
};

const char* kUsage =
    "usage: flip_train --reference REF.png --test START.png [--model flip_model.pt] [--steps N] [--lr LR]\n"
    "                  [--ppd P] [--output result.png] [--save trained.pt]\n";

double to_number(const std::string& flag, const std::string& v) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (end == v.c_str() || *end != '\0' || !(x > 0)) throw UsageError(flag + " needs a positive number, got " + v);
  return x;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--reference" || a == "-r")
      o.reference = value();
    else if (a == "--test" || a == "-t")
      o.test = value();
    else if (a == "--model" || a == "-m")
      o.model = value();
    else if (a == "--output" || a == "-o")
      o.output = value();
    else if (a == "--save")
      o.save = value();
    else if (a == "--steps")
      o.steps = static_cast<int>(to_number(a, value()));
    else if (a == "--lr")
      o.lr = to_number(a, value());
    else if (a == "--ppd")
      o.ppd = to_number(a, value());
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw UsageError("unknown argument '" + a + "'");
    }
  }
  if (o.reference.empty() || o.test.empty()) throw UsageError("--reference and --test are required");
  if (!o.save.empty() && o.model.empty()) throw UsageError("--save needs --model");
  return o;
}

at::Tensor load(const std::string& path) {
  flip_examples::RgbImage img;
  try {
    img = flip_examples::read_image(path);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  return at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kFloat).permute({2, 0, 1}).unsqueeze(0).clone();
}

void write_image(const std::string& path, const at::Tensor& nchw) {
  const at::Tensor hwc = (nchw[0].permute({1, 2, 0}).clamp(0, 1) * 255.0f + 0.5f).to(at::kByte).contiguous();
  std::vector<uint8_t> px(hwc.data_ptr<uint8_t>(), hwc.data_ptr<uint8_t>() + hwc.numel());
  flip_examples::write_png(path, static_cast<int>(hwc.size(1)), static_cast<int>(hwc.size(0)), 3, px);
}

// Runs `steps` Adam updates of `params` on `loss_fn()`; prints and returns the losses.
std::vector<double> optimise(std::vector<at::Tensor> params, double lr, int steps,
                             const std::function<at::Tensor()>& loss_fn, const std::function<void()>& after_step) {
  torch::optim::Adam optimizer(std::move(params), torch::optim::AdamOptions(lr));
  std::vector<double> losses;
  for (int step = 1; step <= steps; ++step) {
    optimizer.zero_grad();
    at::Tensor loss = loss_fn();
    loss.backward();
    optimizer.step();
    after_step();
    losses.push_back(loss.item<double>());
    std::printf("step %3d/%d  FLIP loss %.8f\n", step, steps, losses.back());
    std::fflush(stdout);
  }
  return losses;
}

int run(const Options& o) {
  const at::Tensor reference = load(o.reference);
  const at::Tensor start = load(o.test);
  if (reference.sizes() != start.sizes()) {
    throw UsageError("the images differ in size: reference " + c10::str(reference.sizes()) + ", test " +
                     c10::str(start.sizes()));
  }

  std::vector<double> losses;
  double final_loss = 0;
  if (o.model.empty()) {
    const double lr = o.lr > 0 ? o.lr : 0.01;
    std::printf("optimising a %lld x %lld image towards %s: Adam, lr %g, ppd %.4f\n",
                static_cast<long long>(start.size(3)), static_cast<long long>(start.size(2)), o.reference.c_str(), lr,
                o.ppd);
    at::Tensor image = start.clone().requires_grad_(true);
    losses = optimise(
        {image}, lr, o.steps, [&] { return flip_loss::ldr_flip(image, reference, o.ppd).mean(); },
        [&] {
          at::NoGradGuard no_grad;
          image.clamp_(0, 1);
        });
    {
      at::NoGradGuard no_grad;
      final_loss = flip_loss::ldr_flip(image, reference, o.ppd).mean().item<double>();
    }
    if (!o.output.empty()) write_image(o.output, image.detach());
  } else {
    const double lr = o.lr > 0 ? o.lr : 1e-4;
    torch::jit::Module model = torch::jit::load(o.model, at::kCPU);
    model.train();
    std::vector<at::Tensor> params;
    for (const at::Tensor& p : model.parameters()) params.push_back(p);
    TORCH_CHECK(!params.empty(), "the model has no parameters");
    int64_t count = 0;
    for (const auto& p : params) count += p.numel();
    std::printf("training %s (%lld parameters) on %s -> %s: Adam, lr %g\n", o.model.c_str(),
                static_cast<long long>(count), o.test.c_str(), o.reference.c_str(), lr);
    losses = optimise(
        params, lr, o.steps, [&] { return model.run_method("training_loss", start, reference).toTensor(); }, [] {});
    model.eval();
    {
      at::NoGradGuard no_grad;
      final_loss = model.run_method("training_loss", start, reference).toTensor().item<double>();
      if (!o.output.empty()) write_image(o.output, model.forward({start}).toTensor());
    }
    if (!o.save.empty()) {
      model.save(o.save);
      std::printf("saved the trained model to %s\n", o.save.c_str());
    }
  }
  std::printf("final FLIP loss %.8f (from %.8f, %d steps)\n", final_loss, losses.empty() ? final_loss : losses.front(),
              static_cast<int>(losses.size()));
  if (!o.output.empty()) std::printf("wrote %s\n", o.output.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::cerr << "flip_train: error: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "flip_train: error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "flip_train: error: " << e.what() << "\n";
  }
  return 1;
}
