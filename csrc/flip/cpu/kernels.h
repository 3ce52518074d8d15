// CPU kernels of the FLIP ops on contiguous NCHW buffers. Each returns false when an input holds
// a NaN or an infinity (the output is then unspecified). Gradient outputs may be null when that
// input needs no gradient.
//
// The kernels are compiled once per x86-64 instruction-set level (see isa.h); these functions
// (isa_dispatch.cpp) run the best one the CPU supports, so one binary runs on any CPU at full speed.
//
// Each kernel takes one struct, that of its family, which the op fills in (csrc/ops/cpu.cpp), and
// FLIP_CPU_KERNELS lists every kernel once with it: the declarations, the per-level declarations
// and forwarders (isa_dispatch.cpp) and the instantiations (kernels_<level>.cpp) are all made from
// that list, so an argument is added by adding a field and using it.
#pragma once

#include <cstdint>

#include "../tone_mapper.h"

namespace flip {
namespace cpu {

struct Shape {
  int64_t n, h, w;
};

// LDR-FLIP: both images (N x 3 x H x W) -> the error map (N x H x W), and its backward. The forward
// that keeps the sensitivities writes, per item, the kResponsePlanesPerImage planes (7,
// plane_counts.h) of the test image if want_test, then the reference's if want_ref (N x 7k x H x W,
// k of them); the backward from them reads that layout for the images whose gradient pointer is
// not null (which must be the kept ones).
template <class T>
struct LdrFlipArgs {
  Shape s{};
  double ppd = 0, eps = 0;
  bool srgb = false;  // sRGB (else linear) input
  const T* test = nullptr;
  const T* ref = nullptr;
  // ldr_flip_forward with T = float only: both images as 8-bit codes (uint8 samples k, the values
  // k / 255) in place of test and ref; the map is that of those values.
  const uint8_t* test_codes = nullptr;
  const uint8_t* ref_codes = nullptr;
  const T* grad = nullptr;     // the backwards: the incoming gradient of the map
  T* out = nullptr;            // the forwards: the map
  T* sensitivities = nullptr;  // ldr_flip_forward_sensitivities writes them, ..._backward_sensitivities reads
  bool want_test = false, want_ref = false;  // ldr_flip_forward_sensitivities: whose to keep
  T* g_test = nullptr;                       // the backwards: the gradients (null: not wanted)
  T* g_ref = nullptr;
  // Multi-scale LDR-FLIP (ppd unused): the map is sum_k weights[k] * (the map at ppds[k]) over the
  // `scales` scales. Its forward keeps the sensitivities when want_test or want_ref, per item those
  // of each scale in turn (scales x 7k planes); its backward reads that layout.
  int64_t scales = 0;
  const double* ppds = nullptr;
  const double* weights = nullptr;
};

// HDR-FLIP: exposures is N x E (stops), counts[n] <= E of them used for item n. The forward writes
// the error map, the exposure map (winning index / (count - 1), 0 where none wins) and the winning
// index (-1 where none wins), each N x H x W; the backward reads the index.
template <class T>
struct HdrFlipArgs {
  Shape s{};
  double ppd = 0, eps = 0;
  ToneMapper tone_mapper = ToneMapper::kAces;
  const T* test = nullptr;
  const T* ref = nullptr;
  const T* exposures = nullptr;
  const int64_t* counts = nullptr;
  int64_t E = 0;
  const T* grad = nullptr;  // backward
  T* out = nullptr;         // forward: the map, the exposure map and the index
  T* exposure_map = nullptr;
  int32_t* index = nullptr;  // written by the forward, read by the backward
  T* g_test = nullptr;       // backward (null: not wanted)
  T* g_ref = nullptr;
};

// csf_filter: an opponent image (N x 3 x H x W) -> filtered, RGB-cube-clamped linear RGB (same
// shape), and its backward (grad -> g_opponent).
template <class T>
struct CsfFilterArgs {
  Shape s{};
  double ppd = 0;
  const T* opponent = nullptr;
  const T* grad = nullptr;
  T* out = nullptr;
  T* g_opponent = nullptr;
};

// hunt_hyab: two filtered linear-RGB images (N x 3 x H x W) -> the colour error (N x H x W), and
// its backward.
template <class T>
struct HuntHyabArgs {
  Shape s{};
  double eps = 0;
  const T* test = nullptr;
  const T* ref = nullptr;
  const T* grad = nullptr;  // backward
  T* out = nullptr;         // forward
  T* g_test = nullptr;      // backward (null: not wanted)
  T* g_ref = nullptr;
};

// feature_difference: two achromatic images (N x 1 x H x W) -> the feature error (N x H x W), and
// its backward.
template <class T>
struct FeatureDifferenceArgs {
  Shape s{};
  double ppd = 0, eps = 0;
  const T* test = nullptr;
  const T* ref = nullptr;
  const T* grad = nullptr;  // backward
  T* out = nullptr;         // forward
  T* g_test = nullptr;      // backward (null: not wanted)
  T* g_ref = nullptr;
};

// Every kernel, with the arguments struct it takes: X(name, Args).
#define FLIP_CPU_KERNELS(X)                                  \
  X(ldr_flip_forward, LdrFlipArgs)                           \
  X(ldr_flip_backward, LdrFlipArgs)                          \
  X(ldr_flip_forward_sensitivities, LdrFlipArgs)             \
  X(ldr_flip_backward_sensitivities, LdrFlipArgs)            \
  X(ldr_flip_multiscale_forward, LdrFlipArgs)                \
  X(ldr_flip_multiscale_backward_sensitivities, LdrFlipArgs) \
  X(hdr_flip_forward, HdrFlipArgs)                           \
  X(hdr_flip_backward, HdrFlipArgs)                          \
  X(csf_filter_forward, CsfFilterArgs)                       \
  X(csf_filter_backward, CsfFilterArgs)                      \
  X(hunt_hyab_forward, HuntHyabArgs)                         \
  X(hunt_hyab_backward, HuntHyabArgs)                        \
  X(feature_difference_forward, FeatureDifferenceArgs)       \
  X(feature_difference_backward, FeatureDifferenceArgs)

#define FLIP_CPU_DECLARE_KERNEL(name, Args) \
  template <class T>                        \
  bool name(const Args<T>& args);
FLIP_CPU_KERNELS(FLIP_CPU_DECLARE_KERNEL)

// The float and double versions the ops call.
#define FLIP_CPU_INSTANTIATE_KERNEL(name, Args)  \
  template bool name<float>(const Args<float>&); \
  template bool name<double>(const Args<double>&);

// The instruction-set level the kernels run with: "avx512", "avx2" or "baseline". It is the
// best the CPU (and the OS) supports, or lower when the environment variable
// FLIP_LOSS_CPU_CAPABILITY names a lower one ("baseline", "avx2"); fixed at the first call.
const char* capability();

}  // namespace cpu
}  // namespace flip
