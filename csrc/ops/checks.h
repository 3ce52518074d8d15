// Argument checks of the C++ kernels (CPU and CUDA, and the test-only GPU emulator,
// tests/emulator): one function per op (the backward kernels call their forward's check, then
// check_grad), so that every kernel rejects the same arguments. Messages say what to fix. The
// Python side of the ops (flip_loss/op_checks.py: their fake kernels, and their Autograd kernels,
// which check before any kernel runs) applies the same rules with the same messages, raising
// TypeError for a wrong dtype and ValueError for any other bad argument; tests/ops/test_op_checks.py
// holds the two to each other. Across the stable ABI an exception's class is not kept alike by
// every torch release (2.11 keeps std::invalid_argument as ValueError, 2.15 makes it RuntimeError),
// so every failed check here throws std::runtime_error, a RuntimeError on every release, as NaN/Inf
// image data found by a kernel does (kernel_tensors.h). Everything here runs before any filter taps
// are built or cached.
#pragma once

#include <torch/csrc/stable/device.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "../flip/tone_mapper.h"
#include "../include/flip_loss/limits.h"
#include "schema_types.h"

namespace flip_ops {

using flip_loss::kMaxEps;
using flip_loss::kMaxExposures;
using flip_loss::kMaxPpd;
using flip_loss::kMinExposures;
using flip_loss::kMinPpd;

// What a message prints for sizes, dtypes and devices, as torch prints them.
struct Sizes {
  std::vector<int64_t> v;
};
inline Sizes sizes_of(const Tensor& t) { return {std::vector<int64_t>(t.sizes().begin(), t.sizes().end())}; }
inline std::ostream& operator<<(std::ostream& os, const Sizes& s) {
  os << '[';
  for (size_t i = 0; i < s.v.size(); ++i) os << (i ? ", " : "") << s.v[i];
  return os << ']';
}
inline std::string device_name(const torch::stable::Device& d) {
  using torch::headeronly::DeviceType;
  std::string name = d.type() == DeviceType::CPU    ? "cpu"
                     : d.type() == DeviceType::CUDA ? "cuda"
                     : d.type() == DeviceType::Meta ? "meta"
                                                    : "device type " + std::to_string(static_cast<int>(d.type()));
  if (d.has_index() && d.type() != DeviceType::CPU) name += ":" + std::to_string(static_cast<int>(d.index()));
  return name;
}
inline std::string device_name(const Tensor& t) { return device_name(t.device()); }

template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  throw std::runtime_error(os.str());
}
#define FLIP_CHECK(cond, ...)                 \
  do {                                        \
    if (!(cond)) flip_ops::fail(__VA_ARGS__); \
  } while (0)

inline bool is_floating(ScalarType t) {
  return t == ScalarType::Half || t == ScalarType::BFloat16 || t == ScalarType::Float || t == ScalarType::Double;
}
inline bool is_integral(ScalarType t) {
  return t == ScalarType::Byte || t == ScalarType::Char || t == ScalarType::Short || t == ScalarType::Int ||
         t == ScalarType::Long || t == ScalarType::UInt16 || t == ScalarType::UInt32 || t == ScalarType::UInt64;
}

// Images of 8-bit codes (uint8 samples k, the values k / 255) are taken by ldr_flip alone (codes =
// true): they have no gradient, and the other ops' inputs are not 8-bit values.
constexpr bool kCodesTaken = true;

inline void check_image(const Tensor& t, const char* name, int64_t channels, bool codes = false) {
  FLIP_CHECK(t.defined(), "flip: ", name, " is undefined");
  const ScalarType d = t.scalar_type();
  FLIP_CHECK(is_floating(d) || (codes && d == ScalarType::Byte), "flip: ", name,
             " must have a floating-point dtype (float16, bfloat16, float32 or float64)",
             codes ? " or be uint8 (8-bit codes)" : "", ", got ", d,
             d == ScalarType::Byte ? " (uint8 images, 8-bit codes, are taken by ldr_flip alone)" : "");
  FLIP_CHECK(t.dim() == 3 || t.dim() == 4, "flip: ", name, " must be N x ", channels, " x H x W or ", channels,
             " x H x W, got ", t.dim(), " dimensions ", sizes_of(t));
  FLIP_CHECK(t.size(-3) == channels, "flip: ", name, " must have ", channels, " channel(s) in dimension -3, got shape ",
             sizes_of(t));
  FLIP_CHECK(t.size(-1) > 0 && t.size(-2) > 0, "flip: ", name, " must have a non-empty H x W, got shape ", sizes_of(t));
  // An empty batch has no error map to reduce: a loss over it would be NaN or 0 by convention.
  FLIP_CHECK(t.dim() == 3 || t.size(0) > 0, "flip: ", name, " is an empty batch (N = 0), got shape ", sizes_of(t));
}

inline void check_pair(const Tensor& test, const Tensor& ref, int64_t channels, bool codes = false) {
  check_image(test, "test", channels, codes);
  check_image(ref, "reference", channels, codes);
  FLIP_CHECK(sizes_of(test).v == sizes_of(ref).v, "flip: test and reference shapes differ: ", sizes_of(test), " vs ",
             sizes_of(ref));
  FLIP_CHECK(test.device() == ref.device(), "flip: test and reference are on different devices: ", device_name(test),
             " vs ", device_name(ref));
  FLIP_CHECK(test.scalar_type() == ref.scalar_type(), "flip: test and reference dtypes differ: ", test.scalar_type(),
             " vs ", ref.scalar_type());
}

// The incoming gradient of a backward op: floating point (any precision), on the inputs' device,
// shaped like the op's output for an input shaped like `like` (channels in dimension -3).
inline void check_grad(const Tensor& grad, const Tensor& like, int64_t channels) {
  FLIP_CHECK(grad.defined(), "flip: grad is undefined");
  FLIP_CHECK(is_floating(grad.scalar_type()), "flip: grad must have a floating-point dtype, got ", grad.scalar_type());
  FLIP_CHECK(grad.device() == like.device(), "flip: grad is on ", device_name(grad), ", inputs on ", device_name(like));
  Sizes expected = sizes_of(like);
  expected.v[expected.v.size() - 3] = channels;
  FLIP_CHECK(sizes_of(grad).v == expected.v, "flip: grad must have shape ", expected, ", got ", sizes_of(grad));
}

inline void check_ppd(double ppd) {
  FLIP_CHECK(std::isfinite(ppd) && ppd >= kMinPpd && ppd <= kMaxPpd,
             "flip: pixels_per_degree must be a finite number from ", kMinPpd, " to ", kMaxPpd, ", got ", ppd);
}

inline void check_eps(double eps) {
  FLIP_CHECK(std::isfinite(eps) && eps >= 0 && eps <= kMaxEps, "flip: eps must be a finite number in [0, ", kMaxEps,
             "] (larger values change the metric, not only its gradient), got ", eps);
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return out;
}

// Returns true for sRGB input.
inline bool parse_input_space(std::string_view space) {
  const std::string s = lower(space);
  FLIP_CHECK(s == "srgb" || s == "linear", "flip: input_space must be \"srgb\" or \"linear\", got \"", space, "\"");
  return s == "srgb";
}

// The tone mappers' names in alphabetical order, each quoted, for messages: "'a', 'b', ...".
inline std::string tone_mapper_list() {
  std::vector<std::string> names(flip::kToneMapperNames, flip::kToneMapperNames + flip::kToneMapperCount);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

// Tone mapper name (case-insensitive) -> flip::ToneMapper.
inline flip::ToneMapper parse_tone_mapper(std::string_view name) {
  const std::string s = lower(name);
  for (int i = 0; i < flip::kToneMapperCount; ++i) {
    if (s == flip::kToneMapperNames[i]) return static_cast<flip::ToneMapper>(i);
  }
  fail("flip: tone_mapper must be one of ", tone_mapper_list(), ", got \"", name, "\"");
}

// exposures: N x E floating (stops) with kMinExposures <= E <= kMaxExposures, counts: N integers,
// both on the images' device. Shapes and dtypes only: the values are checked where they can be
// read without a device synchronisation (check_exposure_values).
inline void check_exposures(const Tensor& exposures, const Tensor& counts, const Tensor& like) {
  FLIP_CHECK(exposures.defined() && counts.defined(), "flip: exposures or counts is undefined");
  const int64_t n = like.dim() == 4 ? like.size(0) : 1;
  FLIP_CHECK(is_floating(exposures.scalar_type()), "flip: exposures must be floating point, got ",
             exposures.scalar_type());
  FLIP_CHECK(is_integral(counts.scalar_type()), "flip: counts must be integers, got ", counts.scalar_type());
  FLIP_CHECK(exposures.dim() == 2 && exposures.size(0) == n,
             "flip: exposures must be N x E (one row of exposures per image), got shape ", sizes_of(exposures), " for ",
             n, " image(s)");
  FLIP_CHECK(exposures.size(1) >= kMinExposures && exposures.size(1) <= kMaxExposures,
             "flip: exposures must have between ", kMinExposures, " and ", kMaxExposures,
             " columns (one per exposure), got shape ", sizes_of(exposures));
  FLIP_CHECK(counts.dim() == 1 && counts.size(0) == n, "flip: counts must have one entry per image, got shape ",
             sizes_of(counts));
  FLIP_CHECK(exposures.device() == like.device() && counts.device() == like.device(),
             "flip: exposures and counts must be on the images' device (", device_name(like), ")");
}

// The values of host-resident exposures and counts (already shape-checked and converted to
// float64 / int64, contiguous): each count in [kMinExposures, E] (E <= kMaxExposures) and the
// exposures it selects finite. Small tensors (N x E <= N x 256), so this costs nothing next to
// the kernels.
inline void check_exposure_values(const double* e, const int64_t* c, int64_t n_images, int64_t E) {
  for (int64_t n = 0; n < n_images; ++n) {
    FLIP_CHECK(c[n] >= kMinExposures && c[n] <= E, "flip: counts[", n, "] = ", c[n], " must be at least ",
               kMinExposures, " and at most the number of exposure columns (", E, "; at most ", kMaxExposures, ")");
    for (int64_t i = 0; i < c[n]; ++i)
      FLIP_CHECK(std::isfinite(e[n * E + i]), "flip: exposures[", n, ", ", i, "] = ", e[n * E + i], " is not finite");
  }
}

// check_exposure_values for host tensors (exposures of any floating dtype, counts of any integer one).
inline void check_exposure_values_on_host(const Tensor& exposures, const Tensor& counts) {
  const Tensor e = torch::stable::contiguous(torch::stable::to(exposures, ScalarType::Double));
  const Tensor c = torch::stable::contiguous(torch::stable::to(counts, ScalarType::Long));
  check_exposure_values(static_cast<const double*>(e.data_ptr()), static_cast<const int64_t*>(c.data_ptr()), c.numel(),
                        e.size(1));
}

inline void check_exposure_index(const Tensor& index, const Tensor& grad) {
  FLIP_CHECK(index.defined(), "flip: exposure_index is undefined");
  FLIP_CHECK(index.scalar_type() == ScalarType::Int,
             "flip: exposure_index must be the int32 index returned by hdr_flip, got ", index.scalar_type());
  FLIP_CHECK(sizes_of(index).v == sizes_of(grad).v && index.device() == grad.device(),
             "flip: exposure_index must be the index returned by hdr_flip (shape ", sizes_of(grad), " on ",
             device_name(grad), "), got shape ", sizes_of(index), " on ", device_name(index));
}

// ---- one check per op (its backward adds check_grad) ----

// ldr_flip (codes: kCodesTaken) and the LDR ops that share its arguments: returns true for sRGB input.
inline bool check_ldr_args(const Tensor& test, const Tensor& ref, double ppd, std::string_view space, double eps,
                           bool codes = false) {
  check_pair(test, ref, 3, codes);
  check_ppd(ppd);
  check_eps(eps);
  return parse_input_space(space);
}

// _ldr_flip_with_sensitivities: as ldr_flip, with at least one image's sensitivities asked for.
inline bool check_ldr_sensitivity_args(const Tensor& test, const Tensor& ref, double ppd, std::string_view space,
                                       double eps, Mask mask) {
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps);
  FLIP_CHECK(mask[0] || mask[1], "flip: output_mask must ask for the sensitivities of at least one image");
  return srgb;
}

// The sensitivities a backward takes from its forward (named in the messages): defined, in the
// compute dtype of the images, on their device, and of the expected shape.
inline void check_kept_sensitivities(const Tensor& sensitivities, const Tensor& test,
                                     const std::vector<int64_t>& expected_shape, const char* forward) {
  FLIP_CHECK(sensitivities.defined(), "flip: sensitivities is undefined");
  FLIP_CHECK(sensitivities.scalar_type() == compute_dtype(test), "flip: sensitivities must be ", compute_dtype(test),
             " (as ", forward, " returns them for ", test.scalar_type(), " images), got ", sensitivities.scalar_type());
  FLIP_CHECK(sensitivities.device() == test.device(), "flip: sensitivities are on ", device_name(sensitivities),
             ", images on ", device_name(test));
  const Sizes expected{expected_shape};
  FLIP_CHECK(sizes_of(sensitivities).v == expected.v, "flip: sensitivities must have shape ", expected, " (those ",
             forward, " returned for this output_mask), got ", sizes_of(sensitivities));
}

// _ldr_flip_backward_from_sensitivities: the images and arguments of the forward, its
// sensitivities for the images in mask, and the incoming gradient. Returns true for sRGB input.
inline bool check_ldr_backward_from_sensitivities_args(const Tensor& grad, const Tensor& sensitivities,
                                                       const Tensor& test, const Tensor& ref, double ppd,
                                                       std::string_view space, Mask mask) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  const bool srgb = parse_input_space(space);
  FLIP_CHECK(mask[0] || mask[1], "flip: output_mask must ask for at least one gradient");
  check_grad(grad, test, 1);
  check_kept_sensitivities(sensitivities, test, sensitivities_shape(test, mask), "_ldr_flip_with_sensitivities");
  return srgb;
}

// The scales of _ldr_flip_multiscale: at least one pixels_per_degree value, each within its
// limits, and one finite, non-negative weight per value.
inline void check_scales(const std::vector<double>& ppds, const std::vector<double>& weights) {
  FLIP_CHECK(!ppds.empty(), "flip: pixels_per_degree must hold at least one value");
  for (double ppd : ppds) check_ppd(ppd);
  FLIP_CHECK(weights.size() == ppds.size(), "flip: weights must hold one weight per pixels_per_degree value (",
             ppds.size(), "), got ", weights.size());
  for (double w : weights)
    FLIP_CHECK(std::isfinite(w) && w >= 0, "flip: weights must be finite and non-negative, got ", w);
}

// _ldr_flip_multiscale: returns true for sRGB input.
inline bool check_ldr_multiscale_args(const Tensor& test, const Tensor& ref, const std::vector<double>& ppds,
                                      const std::vector<double>& weights, std::string_view space, double eps) {
  check_pair(test, ref, 3);
  check_scales(ppds, weights);
  check_eps(eps);
  return parse_input_space(space);
}

// _ldr_flip_multiscale_backward: as _ldr_flip_backward_from_sensitivities, with the multi-scale
// layout of the sensitivities. Returns true for sRGB input.
inline bool check_ldr_multiscale_backward_args(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                                               const Tensor& ref, const std::vector<double>& ppds,
                                               const std::vector<double>& weights, std::string_view space, Mask mask) {
  check_pair(test, ref, 3);
  check_scales(ppds, weights);
  const bool srgb = parse_input_space(space);
  FLIP_CHECK(mask[0] || mask[1], "flip: output_mask must ask for at least one gradient");
  check_grad(grad, test, 1);
  check_kept_sensitivities(sensitivities, test,
                           multiscale_sensitivities_shape(test, mask, static_cast<int64_t>(ppds.size())),
                           "_ldr_flip_multiscale");
  return srgb;
}

// hdr_flip: returns the tone mapper. Exposure and count values: check_exposure_values.
inline flip::ToneMapper check_hdr_args(const Tensor& test, const Tensor& ref, const Tensor& exposures,
                                       const Tensor& counts, double ppd, std::string_view tone_mapper, double eps) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  check_eps(eps);
  const flip::ToneMapper tm = parse_tone_mapper(tone_mapper);
  check_exposures(exposures, counts, test);
  return tm;
}

inline void check_csf_args(const Tensor& opponent, double ppd) {
  check_image(opponent, "opponent", 3);
  check_ppd(ppd);
}

inline void check_hunt_hyab_args(const Tensor& test, const Tensor& ref, double eps) {
  check_pair(test, ref, 3);
  check_eps(eps);
}

inline void check_feature_args(const Tensor& test, const Tensor& ref, double ppd, double eps) {
  check_pair(test, ref, 1);
  check_ppd(ppd);
  check_eps(eps);
}

}  // namespace flip_ops
