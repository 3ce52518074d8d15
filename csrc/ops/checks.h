// Argument checks shared by the CPU, CUDA and meta kernels. Messages say what to fix.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <c10/util/string_view.h>

#include <cmath>
#include <string>

namespace flip_ops {

inline void check_image(const at::Tensor& t, const char* name, int64_t channels) {
  TORCH_CHECK(t.defined(), "flip: ", name, " is undefined");
  TORCH_CHECK(at::isFloatingType(t.scalar_type()), "flip: ", name,
              " must have a floating-point dtype (float16, bfloat16, float32 or float64), got ",
              t.scalar_type());
  TORCH_CHECK(t.dim() == 3 || t.dim() == 4, "flip: ", name, " must be N x ", channels,
              " x H x W or ", channels, " x H x W, got ", t.dim(), " dimensions ", t.sym_sizes());
  TORCH_CHECK(t.sym_size(-3) == channels, "flip: ", name, " must have ", channels,
              " channel(s) in dimension -3, got shape ", t.sym_sizes());
  TORCH_CHECK(t.sym_size(-1) > 0 && t.sym_size(-2) > 0, "flip: ", name,
              " must have a non-empty H x W, got shape ", t.sym_sizes());
}

inline void check_pair(const at::Tensor& test, const at::Tensor& ref, int64_t channels) {
  check_image(test, "test", channels);
  check_image(ref, "reference", channels);
  TORCH_CHECK(test.sym_sizes() == ref.sym_sizes(), "flip: test and reference shapes differ: ",
              test.sym_sizes(), " vs ", ref.sym_sizes());
  TORCH_CHECK(test.device() == ref.device(), "flip: test and reference are on different devices: ",
              test.device(), " vs ", ref.device());
  TORCH_CHECK(test.scalar_type() == ref.scalar_type(), "flip: test and reference dtypes differ: ",
              test.scalar_type(), " vs ", ref.scalar_type());
}

inline void check_grad(const at::Tensor& grad, const at::Tensor& like, int64_t channels) {
  TORCH_CHECK(grad.defined(), "flip: grad is undefined");
  TORCH_CHECK(grad.device() == like.device(), "flip: grad is on ", grad.device(), ", inputs on ", like.device());
  auto expected = like.sym_sizes().vec();
  expected[expected.size() - 3] = channels;
  TORCH_CHECK(grad.sym_sizes() == c10::SymIntArrayRef(expected), "flip: grad must have shape ",
              c10::SymIntArrayRef(expected), ", got ", grad.sym_sizes());
}

inline void check_ppd(double ppd) {
  TORCH_CHECK(std::isfinite(ppd) && ppd > 0, "flip: pixels_per_degree must be a positive finite number, got ",
              ppd);
  // A radius of thousands of pixels means the caller passed something that is not a ppd.
  TORCH_CHECK(ppd <= 10000, "flip: pixels_per_degree = ", ppd, " is implausibly large (at most 10000)");
}

inline void check_eps(double eps) {
  TORCH_CHECK(std::isfinite(eps) && eps >= 0, "flip: eps must be a finite number >= 0, got ", eps);
}

// Returns true for sRGB input.
inline bool parse_input_space(c10::string_view space) {
  std::string s(space.data(), space.size());
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  TORCH_CHECK(s == "srgb" || s == "linear", "flip: input_space must be \"srgb\" or \"linear\", got \"",
              std::string(space.data(), space.size()), "\"");
  return s == "srgb";
}

// Tone mapper name (case-insensitive) -> flip::ToneMapper value.
inline int parse_tone_mapper(c10::string_view name) {
  std::string s(name.data(), name.size());
  for (auto& ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (s == "reinhard") return 0;
  if (s == "aces") return 1;
  if (s == "hable") return 2;
  TORCH_CHECK(false, "flip: tone_mapper must be \"aces\", \"hable\" or \"reinhard\", got \"",
              std::string(name.data(), name.size()), "\"");
  return -1;
}

// exposures: N x E floating (stops), counts: N integers, on the images' device.
inline void check_exposures(const at::Tensor& exposures, const at::Tensor& counts, const at::Tensor& like) {
  const auto n = like.dim() == 4 ? like.sym_size(0) : c10::SymInt(1);
  TORCH_CHECK(exposures.dim() == 2 && exposures.sym_size(0) == n && exposures.sym_size(1) >= 1,
              "flip: exposures must be N x E (one row of exposures per image), got shape ", exposures.sym_sizes(),
              " for ", n, " image(s)");
  TORCH_CHECK(at::isFloatingType(exposures.scalar_type()), "flip: exposures must be floating point, got ",
              exposures.scalar_type());
  TORCH_CHECK(counts.dim() == 1 && counts.sym_size(0) == n, "flip: counts must have one entry per image, got shape ",
              counts.sym_sizes());
  TORCH_CHECK(at::isIntegralType(counts.scalar_type(), /*includeBool=*/false), "flip: counts must be integers, got ",
              counts.scalar_type());
  TORCH_CHECK(exposures.device() == like.device() && counts.device() == like.device(),
              "flip: exposures and counts must be on the images' device (", like.device(), ")");
}

// The arguments every ldr_flip kernel (and its backward) takes; returns true for sRGB input.
inline bool check_ldr_args(const at::Tensor& test, const at::Tensor& ref, double ppd, c10::string_view space,
                           double eps) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  check_eps(eps);
  return parse_input_space(space);
}

// The arguments every hdr_flip kernel (and its backward) takes; returns the tone mapper.
inline int check_hdr_args(const at::Tensor& test, const at::Tensor& ref, const at::Tensor& exposures,
                          const at::Tensor& counts, double ppd, c10::string_view tone_mapper, double eps) {
  check_pair(test, ref, 3);
  check_ppd(ppd);
  check_eps(eps);
  const int tm = parse_tone_mapper(tone_mapper);
  check_exposures(exposures, counts, test);
  return tm;
}

inline void check_exposure_index(const at::Tensor& index, const at::Tensor& grad) {
  TORCH_CHECK(index.sym_sizes() == grad.sym_sizes() && index.scalar_type() == at::kInt &&
                  index.device() == grad.device(),
              "flip::hdr_flip_backward: exposure_index must be the int32 index returned by hdr_flip");
}

// The shape of a per-pixel map for an image of shape like.
inline std::vector<c10::SymInt> map_shape(const at::Tensor& like) {
  auto s = like.sym_sizes().vec();
  s[s.size() - 3] = 1;
  return s;
}

}  // namespace flip_ops
