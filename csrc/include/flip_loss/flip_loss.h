// flip_loss/flip_loss.h: the C++ API of flip-loss (LibTorch programs).
//
// Typed inline calls of the ops that libflip_ops registers with the PyTorch dispatcher
// (torch.ops.flip.* in Python), and the pooled statistics of an error map as NVIDIA's `flip` tool
// reports them. Header-only: link the program against flip_loss::flip_ops (CMake:
// find_package(flip_loss)), which registers the ops when it is loaded. The calls go through the
// dispatcher, so they run the CPU (or CUDA) kernels and record autograd when an input requires
// grad, exactly like torch.ops.flip.* in Python.
//
//   #include <flip_loss/flip_loss.h>
//   at::Tensor map = flip_loss::ldr_flip(test, reference);        // N x 1 x H x W in [0, 1]
//   flip_loss::Pooled p = flip_loss::pool(map);                    // mean, weighted median, ...
//
// Python's conventions (docs/api.md): images N x 3 x H x W or 3 x H x W, float16 to float64, sRGB in
// [0, 1] by default, (test, reference) in that order; limits.h, the same limits. A bad argument of
// an op throws a c10::Error with the message of the Python checks (the stable ABI the kernels are
// built on keeps no exception class alike across torch releases: some pass the std::runtime_error
// it carries); this header's own checks throw c10::ValueError (c10::TypeError for a wrong dtype).
// Gradients are first order only: differentiating a gradient of these ops (double backward) throws.
#pragma once

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "limits.h"
#include "op_signatures.h"

namespace flip_loss {

// Version of the C++ API: flip_loss.__version__ of the Python package, which is also the CMake
// package's version (tests/tooling/test_one_source.py checks all three).
constexpr int kVersionMajor = 0;
constexpr int kVersionMinor = 1;
constexpr int kVersionPatch = 0;

// Pixels per degree of a 0.7 m wide 4K display seen from 0.7 m (NVIDIA's default):
// pixels_per_degree(0.7, 0.7, 3840).
constexpr double kDefaultPpd = 67.02064327658225;
// Default regulariser of the square roots with infinite slope at 0 (docs/api.md, "Gradients").
constexpr double kDefaultEps = 1e-15;

// ---- the ops ------------------------------------------------------------------------------------

// The LDR-FLIP error map between `test` and `reference`: N x 1 x H x W (1 x H x W for a CHW
// input), values in [0, 1], in the input dtype (float32 for uint8 images: 8-bit codes k, the values
// k / 255). `input_space` is "srgb" or "linear". Differentiable in both floating-point inputs.
// (torch.ops.flip.ldr_flip)
inline at::Tensor ldr_flip(const at::Tensor& test, const at::Tensor& reference, double ppd = kDefaultPpd,
                           const std::string& input_space = "srgb", double eps = kDefaultEps) {
  return op::call<op::LdrFlip>(test, reference, ppd, c10::string_view(input_space.data(), input_space.size()), eps);
}

// YCxCz opponent image (N x 3 x H x W) -> CSF-filtered linear RGB, clamped to [0, 1].
// (torch.ops.flip.csf_filter)
inline at::Tensor csf_filter(const at::Tensor& opponent, double ppd = kDefaultPpd) {
  return op::call<op::CsfFilter>(opponent, ppd);
}

// Two filtered linear-RGB images (N x 3 x H x W) -> colour error dE_c (N x 1 x H x W), in [0, 1]
// for inputs in [0, 1] (as csf_filter returns them); inputs are not clamped, so values outside
// [0, 1] give values above 1. (torch.ops.flip.hunt_hyab)
inline at::Tensor hunt_hyab(const at::Tensor& test, const at::Tensor& reference, double eps = kDefaultEps) {
  return op::call<op::HuntHyab>(test, reference, eps);
}

// Two normalised achromatic images (N x 1 x H x W) -> feature error dE_f (N x 1 x H x W), in [0, 1]
// for inputs in [0, 1]; inputs are not clamped. (torch.ops.flip.feature_difference)
inline at::Tensor feature_difference(const at::Tensor& test, const at::Tensor& reference, double ppd = kDefaultPpd,
                                     double eps = kDefaultEps) {
  return op::call<op::FeatureDifference>(test, reference, ppd, eps);
}

// HDR-FLIP with given exposures: `exposures` is N x E (stops, 2 <= E <= kMaxExposures), item n
// uses its first counts[n] (integers, each in [2, E]; on CUDA, where reading them would
// synchronise, they are clamped into that range instead of checked). Returns the error map, the
// exposure map (winning exposure index / (count - 1), 0 where none wins) and the int32 winning
// index (-1 where none wins), each N x 1 x H x W. `tone_mapper` is a tone mapper's name, any case
// (docs/algorithm.md §5.3 lists them; flip_loss/tone_mappers.inc is their registry). Differentiable
// in both images.
// (torch.ops.flip.hdr_flip; flip_loss.hdr_flip in Python adds the automatic exposures.)
struct HdrResult {
  at::Tensor error, exposure_map, exposure_index;
};

inline HdrResult hdr_flip(const at::Tensor& test, const at::Tensor& reference, const at::Tensor& exposures,
                          const at::Tensor& counts, double ppd = kDefaultPpd, const std::string& tone_mapper = "aces",
                          double eps = kDefaultEps) {
  auto [e, m, i] = op::call<op::HdrFlip>(test, reference, exposures, counts, ppd,
                                         c10::string_view(tone_mapper.data(), tone_mapper.size()), eps);
  return HdrResult{e, m, i};
}

// The same exposures for every image: `num` of them evenly from `start` to `stop` stops.
inline HdrResult hdr_flip(const at::Tensor& test, const at::Tensor& reference, double start, double stop, int64_t num,
                          double ppd = kDefaultPpd, const std::string& tone_mapper = "aces", double eps = kDefaultEps) {
  // Checked here, before the exposure grid is allocated; the op checks everything else.
  TORCH_CHECK(test.defined(), "flip_loss::hdr_flip: test is undefined");
  TORCH_CHECK_VALUE(num >= kMinExposures && num <= kMaxExposures, "flip_loss::hdr_flip: num must be from ",
                    kMinExposures, " to ", kMaxExposures, ", got ", num);
  TORCH_CHECK_VALUE(std::isfinite(start) && std::isfinite(stop), "flip_loss::hdr_flip: start (", start, ") and stop (",
                    stop, ") must be finite");
  TORCH_CHECK_VALUE(start <= stop, "flip_loss::hdr_flip: start (", start, ") must not exceed stop (", stop, ")");
  const int64_t n = test.dim() == 4 ? test.size(0) : 1;
  auto row = at::linspace(start, stop, num, test.options().dtype(at::kDouble));
  auto exposures = row.unsqueeze(0).expand({n, num}).contiguous();
  auto counts = at::full({n}, num, test.options().dtype(at::kLong));
  return hdr_flip(test, reference, exposures, counts, ppd, tone_mapper, eps);
}

// ---- viewing setup ------------------------------------------------------------------------------

// Pixels per degree of visual angle for a display `width_px` pixels wide spanning `width_m` metres,
// seen from `distance_m` metres: distance * (width_px / width_m) * pi / 180 (same expression, so
// the same double, as flip_loss.pixels_per_degree in Python).
inline double pixels_per_degree(double distance_m, double width_m, double width_px) {
  TORCH_CHECK_VALUE(std::isfinite(distance_m) && distance_m > 0,
                    "flip_loss: distance_m must be a positive finite number, got ", distance_m);
  TORCH_CHECK_VALUE(std::isfinite(width_m) && width_m > 0, "flip_loss: width_m must be a positive finite number, got ",
                    width_m);
  TORCH_CHECK_VALUE(std::isfinite(width_px) && width_px > 0,
                    "flip_loss: width_px must be a positive finite number, got ", width_px);
  constexpr double kPi = 3.141592653589793;  // == Python's math.pi
  return distance_m * (width_px / width_m) * (kPi / 180.0);
}

// ---- pooling ------------------------------------------------------------------------------------

// The six values NVIDIA's `flip` tool prints for an error map (flip_loss.pool in Python).
struct Pooled {
  double mean = 0;                 // summed in float64
  double weighted_median = 0;      // weighted percentile 0.5
  double weighted_quartile_1 = 0;  // weighted percentile 0.25
  double weighted_quartile_3 = 0;  // weighted percentile 0.75
  double min = 0;
  double max = 0;
};

namespace detail {

// The tool's weighted percentiles: sort ascending, walk a running sum of the values (in the map's
// precision: float for float32/16, double for float64) and take the first value whose running sum
// exceeds p * total, the total summed sequentially in row-major order; 0 when the total is 0; the
// largest value if rounding leaves no running sum above the threshold.
template <class T>
Pooled pool_values(const T* data, int64_t n) {
  Pooled out;
  T total = 0;
  double sum64 = 0;
  T lo = data[0], hi = data[0];
  for (int64_t i = 0; i < n; ++i) {
    const T v = data[i];
    TORCH_CHECK_VALUE(std::isfinite(static_cast<double>(v)),
                      "flip_loss::pool: the error map contains NaN or infinite values");
    total += v;
    sum64 += static_cast<double>(v);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  out.mean = sum64 / static_cast<double>(n);
  out.min = static_cast<double>(lo);
  out.max = static_cast<double>(hi);
  if (total == 0) return out;  // percentiles 0

  std::vector<T> sorted(data, data + n);
  std::sort(sorted.begin(), sorted.end());
  const double ps[3] = {0.5, 0.25, 0.75};
  double* targets[3] = {&out.weighted_median, &out.weighted_quartile_1, &out.weighted_quartile_3};
  double thresholds[3];
  bool found[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) thresholds[k] = ps[k] * static_cast<double>(total);
  T running = 0;
  for (int64_t i = 0; i < n; ++i) {
    running += sorted[i];
    for (int k = 0; k < 3; ++k) {
      if (!found[k] && static_cast<double>(running) > thresholds[k]) {
        *targets[k] = static_cast<double>(sorted[i]);
        found[k] = true;
      }
    }
    if (found[0] && found[1] && found[2]) break;
  }
  for (int k = 0; k < 3; ++k) {
    if (!found[k]) *targets[k] = static_cast<double>(sorted[n - 1]);
  }
  return out;
}

}  // namespace detail

// Pooled values of all elements of `map` (any shape, any device, any float dtype), computed as
// NVIDIA's evaluator computes them, except that the mean is summed in float64 and the max of a
// map without positive values is its true max (flip_loss.pool in Python, same values).
// Throws c10::ValueError for an empty map or one with NaN/inf values.
inline Pooled pool(const at::Tensor& map) {
  TORCH_CHECK(map.defined(), "flip_loss::pool: the error map is undefined");
  TORCH_CHECK_TYPE(at::isFloatingType(map.scalar_type()) || at::isIntegralType(map.scalar_type(), /*includeBool=*/true),
                   "flip_loss::pool: expected a real error map, got ", map.scalar_type());
  TORCH_CHECK_VALUE(map.numel() > 0, "flip_loss::pool: the error map is empty");
  at::NoGradGuard no_grad;
  const bool f64 = map.scalar_type() == at::kDouble;
  at::Tensor flat = map.detach().to(at::kCPU, f64 ? at::kDouble : at::kFloat).contiguous().reshape({-1});
  if (f64) return detail::pool_values<double>(flat.data_ptr<double>(), flat.numel());
  return detail::pool_values<float>(flat.data_ptr<float>(), flat.numel());
}

}  // namespace flip_loss
