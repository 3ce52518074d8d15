// Argument checks shared by the CPU, CUDA and meta kernels (and the test-only GPU emulator,
// tests/emulator): one function per op (the backward kernels call their forward's check, then
// check_grad), so that every path rejects the same arguments. Messages say what to fix. Exception classes follow the Python API: a wrong
// dtype raises TypeError (TORCH_CHECK_TYPE), any other bad argument ValueError
// (TORCH_CHECK_VALUE); NaN/Inf image data found by a kernel raises RuntimeError (common.h).
// Everything here runs before any filter taps are built or cached.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "../flip/tone_mapper.h"
#include "../include/flip_loss/limits.h"
#include "signature.h"

namespace flip_ops {

using flip_loss::kMaxEps;
using flip_loss::kMaxExposures;
using flip_loss::kMaxPpd;
using flip_loss::kMinExposures;
using flip_loss::kMinPpd;

inline void check_image(const at::Tensor& t, const char* name, int64_t channels) {
  TORCH_CHECK(t.defined(), "flip: ", name, " is undefined");
  TORCH_CHECK_TYPE(at::isFloatingType(t.scalar_type()), "flip: ", name,
                   " must have a floating-point dtype (float16, bfloat16, float32 or float64), got ", t.scalar_type());
  TORCH_CHECK_VALUE(t.dim() == 3 || t.dim() == 4, "flip: ", name, " must be N x ", channels, " x H x W or ", channels,
                    " x H x W, got ", t.dim(), " dimensions ", t.sym_sizes());
  TORCH_CHECK_VALUE(t.sym_size(-3) == channels, "flip: ", name, " must have ", channels,
                    " channel(s) in dimension -3, got shape ", t.sym_sizes());
  TORCH_CHECK_VALUE(t.sym_size(-1) > 0 && t.sym_size(-2) > 0, "flip: ", name,
                    " must have a non-empty H x W, got shape ", t.sym_sizes());
  // An empty batch has no error map to reduce: a loss over it would be NaN or 0 by convention.
  TORCH_CHECK_VALUE(t.dim() == 3 || t.sym_size(0) > 0, "flip: ", name, " is an empty batch (N = 0), got shape ",
                    t.sym_sizes());
}

inline void check_pair(const at::Tensor& test, const at::Tensor& ref, int64_t channels) {
  check_image(test, "test", channels);
  check_image(ref, "reference", channels);
  TORCH_CHECK_VALUE(test.sym_sizes() == ref.sym_sizes(), "flip: test and reference shapes differ: ", test.sym_sizes(),
                    " vs ", ref.sym_sizes());
  TORCH_CHECK_VALUE(test.device() == ref.device(), "flip: test and reference are on different devices: ", test.device(),
                    " vs ", ref.device());
  TORCH_CHECK_TYPE(test.scalar_type() == ref.scalar_type(),
                   "flip: test and reference dtypes differ: ", test.scalar_type(), " vs ", ref.scalar_type());
}

// The incoming gradient of a backward op: floating point (any precision), on the inputs' device,
// shaped like the op's output for an input shaped like `like` (channels in dimension -3).
inline void check_grad(const at::Tensor& grad, const at::Tensor& like, int64_t channels) {
  TORCH_CHECK(grad.defined(), "flip: grad is undefined");
  TORCH_CHECK_TYPE(at::isFloatingType(grad.scalar_type()), "flip: grad must have a floating-point dtype, got ",
                   grad.scalar_type());
  TORCH_CHECK_VALUE(grad.device() == like.device(), "flip: grad is on ", grad.device(), ", inputs on ", like.device());
  auto expected = like.sym_sizes().vec();
  expected[expected.size() - 3] = channels;
  TORCH_CHECK_VALUE(grad.sym_sizes() == c10::SymIntArrayRef(expected), "flip: grad must have shape ",
                    c10::SymIntArrayRef(expected), ", got ", grad.sym_sizes());
}

inline void check_ppd(double ppd) {
  TORCH_CHECK_VALUE(std::isfinite(ppd) && ppd >= kMinPpd && ppd <= kMaxPpd,
                    "flip: pixels_per_degree must be a finite number from ", kMinPpd, " to ", kMaxPpd, ", got ", ppd);
}

inline void check_eps(double eps) {
  TORCH_CHECK_VALUE(std::isfinite(eps) && eps >= 0 && eps <= kMaxEps, "flip: eps must be a finite number in [0, ",
                    kMaxEps, "] (larger values change the metric, not only its gradient), got ", eps);
}

// Returns true for sRGB input.
inline bool parse_input_space(c10::string_view space) {
  std::string s(space.data(), space.size());
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  TORCH_CHECK_VALUE(s == "srgb" || s == "linear", "flip: input_space must be \"srgb\" or \"linear\", got \"",
                    std::string(space.data(), space.size()), "\"");
  return s == "srgb";
}

// The tone mappers' names in alphabetical order, quoted, for messages: "'aces', 'hable', ...".
inline std::string tone_mapper_list() {
  std::vector<std::string> names(flip::kToneMapperNames, flip::kToneMapperNames + flip::kToneMapperCount);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
  return out;
}

// Tone mapper name (case-insensitive) -> flip::ToneMapper.
inline flip::ToneMapper parse_tone_mapper(c10::string_view name) {
  std::string s(name.data(), name.size());
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (int i = 0; i < flip::kToneMapperCount; ++i) {
    if (s == flip::kToneMapperNames[i]) return static_cast<flip::ToneMapper>(i);
  }
  TORCH_CHECK_VALUE(false, "flip: tone_mapper must be one of ", tone_mapper_list(), ", got \"",
                    std::string(name.data(), name.size()), "\"");
  return flip::ToneMapper::kAces;  // not reached
}

// exposures: N x E floating (stops) with kMinExposures <= E <= kMaxExposures, counts: N integers,
// both on the images' device. Shapes and dtypes only: the values are checked where they can be
// read without a device synchronisation (check_exposure_values).
inline void check_exposures(const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& like) {
  TORCH_CHECK(exposures.defined() && counts.defined(), "flip: exposures or counts is undefined");
  const auto n = like.dim() == 4 ? like.sym_size(0) : c10::SymInt(1);
  TORCH_CHECK_TYPE(at::isFloatingType(exposures.scalar_type()), "flip: exposures must be floating point, got ",
                   exposures.scalar_type());
  TORCH_CHECK_TYPE(at::isIntegralType(counts.scalar_type(), /*includeBool=*/false),
                   "flip: counts must be integers, got ", counts.scalar_type());
  TORCH_CHECK_VALUE(exposures.dim() == 2 && exposures.sym_size(0) == n,
                    "flip: exposures must be N x E (one row of exposures per image), got shape ", exposures.sym_sizes(),
                    " for ", n, " image(s)");
  TORCH_CHECK_VALUE(exposures.sym_size(1) >= kMinExposures && exposures.sym_size(1) <= kMaxExposures,
                    "flip: exposures must have between ", kMinExposures, " and ", kMaxExposures,
                    " columns (one per exposure), got shape ", exposures.sym_sizes());
  TORCH_CHECK_VALUE(counts.dim() == 1 && counts.sym_size(0) == n,
                    "flip: counts must have one entry per image, got shape ", counts.sym_sizes());
  TORCH_CHECK_VALUE(exposures.device() == like.device() && counts.device() == like.device(),
                    "flip: exposures and counts must be on the images' device (", like.device(), ")");
}

// The values of host-resident exposures and counts (already shape-checked): each count in
// [kMinExposures, E] (E <= kMaxExposures) and the exposures it selects finite. Small tensors
// (N x E <= N x 256), so this costs nothing next to the kernels.
inline void check_exposure_values(const at::Tensor& exposures, const at::Tensor& counts) {
  TORCH_INTERNAL_ASSERT(exposures.device().is_cpu() && counts.device().is_cpu());
  const auto ex = exposures.to(at::kDouble).contiguous();
  const auto cn = counts.to(at::kLong).contiguous();
  const int64_t E = ex.size(1);
  const double* e = ex.data_ptr<double>();
  const int64_t* c = cn.data_ptr<int64_t>();
  for (int64_t n = 0; n < cn.numel(); ++n) {
    TORCH_CHECK_VALUE(c[n] >= kMinExposures && c[n] <= E, "flip: counts[", n, "] = ", c[n], " must be at least ",
                      kMinExposures, " and at most the number of exposure columns (", E, "; at most ", kMaxExposures,
                      ")");
    for (int64_t i = 0; i < c[n]; ++i)
      TORCH_CHECK_VALUE(std::isfinite(e[n * E + i]), "flip: exposures[", n, ", ", i, "] = ", e[n * E + i],
                        " is not finite");
  }
}

inline void check_exposure_index(const at::Tensor& index, const at::Tensor& grad) {
  TORCH_CHECK(index.defined(), "flip: exposure_index is undefined");
  TORCH_CHECK_TYPE(index.scalar_type() == at::kInt,
                   "flip: exposure_index must be the int32 index returned by hdr_flip, got ", index.scalar_type());
  TORCH_CHECK_VALUE(index.sym_sizes() == grad.sym_sizes() && index.device() == grad.device(),
                    "flip: exposure_index must be the index returned by hdr_flip (shape ", grad.sym_sizes(), " on ",
                    grad.device(), "), got shape ", index.sym_sizes(), " on ", index.device());
}

// ---- one check per op (its backward adds check_grad) ----

// ldr_flip: returns true for sRGB input.
inline bool check_ldr_args(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                           double eps) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  check_eps(eps);
  return parse_input_space(space);
}

// _ldr_flip_with_sensitivities: as ldr_flip, with at least one image's sensitivities asked for.
inline bool check_ldr_sensitivity_args(const at::Tensor& test, const at::Tensor& ref, double ppd,
                                       c10::string_view space, double eps, Mask mask) {
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps);
  TORCH_CHECK_VALUE(mask[0] || mask[1], "flip: output_mask must ask for the sensitivities of at least one image");
  return srgb;
}

// _ldr_flip_backward_from_sensitivities: the images and arguments of the forward, its
// sensitivities for the images in mask, and the incoming gradient. Returns true for sRGB input.
inline bool check_ldr_backward_from_sensitivities_args(const at::Tensor& grad, const at::Tensor& sensitivities,
                                                       const at::Tensor& test, const at::Tensor& ref, double ppd,
                                                       c10::string_view space, Mask mask) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  const bool srgb = parse_input_space(space);
  TORCH_CHECK_VALUE(mask[0] || mask[1], "flip: output_mask must ask for at least one gradient");
  check_grad(grad, test, 1);
  TORCH_CHECK(sensitivities.defined(), "flip: sensitivities is undefined");
  TORCH_CHECK_TYPE(sensitivities.scalar_type() == compute_dtype(test), "flip: sensitivities must be ",
                   compute_dtype(test), " (as _ldr_flip_with_sensitivities returns them for ", test.scalar_type(),
                   " images), got ", sensitivities.scalar_type());
  TORCH_CHECK_VALUE(sensitivities.device() == test.device(), "flip: sensitivities are on ", sensitivities.device(),
                    ", images on ", test.device());
  const auto expected = sensitivities_shape(test, mask);
  TORCH_CHECK_VALUE(sensitivities.sym_sizes() == c10::SymIntArrayRef(expected), "flip: sensitivities must have shape ",
                    c10::SymIntArrayRef(expected),
                    " (those _ldr_flip_with_sensitivities returned for this output_mask), got ",
                    sensitivities.sym_sizes());
  return srgb;
}

// hdr_flip: returns the tone mapper. Exposure and count values: check_exposure_values.
inline flip::ToneMapper check_hdr_args(const at::Tensor& test, const at::Tensor& ref, const at::Tensor& exposures,
                                       const at::Tensor& counts, double ppd, c10::string_view tone_mapper, double eps) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  check_eps(eps);
  const flip::ToneMapper tm = parse_tone_mapper(tone_mapper);
  check_exposures(exposures, counts, test);
  return tm;
}

inline void check_csf_args(const at::Tensor& opponent, double ppd) {
  check_image(opponent, "opponent", 3);
  check_ppd(ppd);
}

inline void check_hunt_hyab_args(const at::Tensor& test, const at::Tensor& ref, double eps) {
  check_pair(test, ref, 3);
  check_eps(eps);
}

inline void check_feature_args(const at::Tensor& test, const at::Tensor& ref, double ppd, double eps) {
  check_pair(test, ref, 1);
  check_ppd(ppd);
  check_eps(eps);
}

}  // namespace flip_ops
