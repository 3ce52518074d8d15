// flip_infer: the FLIP error map of two images in a C++ program, from a TorchScript module saved in
// Python (examples/export_torchscript.py -> flip_loss.pt) or from the C++ API directly.
//
//   flip_infer --reference REF.png --test TEST.png [--module flip_loss.pt | --ppd P]
//              [--output map.png] [--no-magma] [--raw map.f32] [--digits N]
//
//   --module M   a scripted module whose forward(test, reference) returns the error map
//                (torch.jit.script(FLIPLoss(reduction="none"))); its pixels_per_degree is reported.
//                Without it the map comes from flip_loss::ldr_flip(test, reference, ppd, "srgb", 0).
//   --ppd P      pixels per degree when no module is given (default 67.02: 0.7 m wide 4K at 0.7 m)
//   --output F   write the error map as an 8-bit PNG, coloured with magma (grey with --no-magma)
//   --raw F      write the error map as H x W native-endian float32 values, row-major
//   --digits N   decimals of the printed values (default 6, as NVIDIA's flip tool)
//
// Prints the pooled values (mean, weighted median and quartiles, min, max) in the layout of the
// flip tool. Exit codes: 0 success, 2 a usage or input error, 1 anything else.
#include <flip_loss/flip_loss.h>

#include <torch/script.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "image_io.h"
#include "magma.h"

namespace {

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string reference, test, module, output, raw;
  double ppd = flip_loss::kDefaultPpd;
  bool magma = true;
  int digits = 6;
};

const char* kUsage =
    "usage: flip_infer --reference REF.png --test TEST.png [--module flip_loss.pt | --ppd P]\n"
    "                  [--output map.png] [--no-magma] [--raw map.f32] [--digits N]\n";

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
    else if (a == "--module" || a == "-m")
      o.module = value();
    else if (a == "--output" || a == "-o")
      o.output = value();
    else if (a == "--raw")
      o.raw = value();
    else if (a == "--no-magma")
      o.magma = false;
    else if (a == "--ppd") {
      const std::string v = value();
      char* end = nullptr;
      o.ppd = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(o.ppd > 0)) throw UsageError("--ppd needs a positive number, got " + v);
    } else if (a == "--digits") {
      o.digits = std::atoi(value().c_str());
      if (o.digits < 0 || o.digits > 17) throw UsageError("--digits must be in 0..17");
    } else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else {
      throw UsageError("unknown argument '" + a + "'");
    }
  }
  if (o.reference.empty() || o.test.empty()) throw UsageError("--reference and --test are required");
  return o;
}

// 1 x 3 x H x W float32 tensor of an image's code values in [0, 1].
at::Tensor load(const std::string& path) {
  flip_examples::RgbImage img;
  try {
    img = flip_examples::read_image(path);
  } catch (const std::runtime_error& e) {
    throw UsageError(e.what());
  }
  return at::from_blob(img.rgb.data(), {img.height, img.width, 3}, at::kFloat).permute({2, 0, 1}).unsqueeze(0).clone();
}

// uint8(255 * clamp(v, 0, 1) + 0.5) / magma index, in float32 as flip_loss.colormaps does.
int to_level(float v) {
  if (!(v >= 0.0f)) v = 0.0f;  // also NaN
  if (v > 1.0f) v = 1.0f;
  const float scaled = v * 255.0f;
  return static_cast<int>(scaled + 0.5f);
}

void write_map_png(const std::string& path, const at::Tensor& map_hw, bool magma) {
  const int64_t h = map_hw.size(0), w = map_hw.size(1);
  const float* v = map_hw.data_ptr<float>();
  const int channels = magma ? 3 : 1;
  std::vector<uint8_t> px(static_cast<size_t>(h * w * channels));
  for (int64_t i = 0; i < h * w; ++i) {
    const int level = to_level(v[i]);
    if (magma) {
      for (int c = 0; c < 3; ++c) px[static_cast<size_t>(3 * i + c)] = flip_examples::kMagma[level][c];
    } else {
      px[static_cast<size_t>(i)] = static_cast<uint8_t>(level);
    }
  }
  flip_examples::write_png(path, static_cast<int>(w), static_cast<int>(h), channels, px);
}

void write_raw(const std::string& path, const at::Tensor& map_hw) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot open '" + path + "' for writing");
  out.write(reinterpret_cast<const char*>(map_hw.data_ptr<float>()),
            static_cast<std::streamsize>(map_hw.numel() * sizeof(float)));
  if (!out.good()) throw std::runtime_error("error writing '" + path + "'");
}

int run(const Options& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const at::Tensor reference = load(o.reference);
  const at::Tensor test = load(o.test);
  if (reference.sizes() != test.sizes()) {
    throw UsageError("the images differ in size: reference " + c10::str(reference.sizes()) + ", test " +
                     c10::str(test.sizes()));
  }

  c10::InferenceMode inference;
  at::Tensor map;
  double ppd = o.ppd;
  std::string source;
  if (!o.module.empty()) {
    torch::jit::Module module = torch::jit::load(o.module, at::kCPU);
    module.eval();
    if (module.hasattr("pixels_per_degree")) ppd = module.attr("pixels_per_degree").toDouble();
    c10::IValue out = module.forward({test, reference});
    if (!out.isTensor() || out.toTensor().dim() < 2) {
      throw UsageError(
          "the module's forward(test, reference) must return the error map; save FLIPLoss with "
          "reduction=\"none\"");
    }
    map = out.toTensor();
    source = "TorchScript module " + o.module;
  } else {
    map = flip_loss::ldr_flip(test, reference, ppd, "srgb", /*eps=*/0.0);  // the metric: no regulariser
    source = "flip_loss::ldr_flip";
  }
  const at::Tensor map_hw = map.reshape({map.size(-2), map.size(-1)}).to(at::kFloat).contiguous();
  const flip_loss::Pooled p = flip_loss::pool(map_hw);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const int d = o.digits;
  std::printf("Invoking LDR-FLIP (%s)\n", source.c_str());
  std::printf("     Pixels per degree: %ld\n\n", std::lround(ppd));  // round(), as the tool
  std::printf("FLIP between reference image <%s> and test image <%s>\n", o.reference.c_str(), o.test.c_str());
  std::printf("     Mean: %.*f\n", d, p.mean);
  std::printf("     Weighted median: %.*f\n", d, p.weighted_median);
  std::printf("     1st weighted quartile: %.*f\n", d, p.weighted_quartile_1);
  std::printf("     3rd weighted quartile: %.*f\n", d, p.weighted_quartile_3);
  std::printf("     Min: %.*f\n", d, p.min);
  std::printf("     Max: %.*f\n", d, p.max);
  std::printf("     Evaluation time: %.4f seconds\n", seconds);
  if (!o.output.empty()) {
    write_map_png(o.output, map_hw, o.magma);
    std::printf("     FLIP error map location: %s\n", o.output.c_str());
  }
  if (!o.raw.empty()) {
    write_raw(o.raw, map_hw);
    std::printf("     Raw float32 map (%lld x %lld): %s\n", static_cast<long long>(map_hw.size(0)),
                static_cast<long long>(map_hw.size(1)), o.raw.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const UsageError& e) {
    std::cerr << "flip_infer: error: " << e.what() << "\n" << kUsage;
    return 2;
  } catch (const c10::Error& e) {
    std::cerr << "flip_infer: error: " << e.what_without_backtrace() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "flip_infer: error: " << e.what() << "\n";
  }
  return 1;
}
