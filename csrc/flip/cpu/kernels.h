// CPU kernels of the FLIP ops on contiguous NCHW buffers. Each returns false when an input holds
// a NaN or an infinity (the output is then unspecified). Gradient outputs may be null when that
// input needs no gradient.
//
// The kernels are compiled once per x86-64 instruction-set level (see isa.h); these functions
// (dispatch.cpp) run the best one the CPU supports, so one binary runs on any CPU at full speed.
#pragma once

#include <cstdint>

#include "../tone_mapper.h"

namespace flip {
namespace cpu {

struct Shape {
  int64_t n, h, w;
};

// The declarations, as a macro so that dispatch.cpp can declare them again in the namespace of
// each instruction-set variant. In order:
// * LDR-FLIP forward and backward; the forward that also writes the sensitivities (N x 7k x H x W:
//   the 7 planes of the test image if want_test, then the reference's if want_ref; k of them) and
//   the backward from those (the wanted gradients, g_test and / or g_ref, are the kept ones);
// * HDR-FLIP: exposures is N x E (stops), counts[n] <= E of them used for item n. Outputs the error
//   map, the exposure map (winning index / (count - 1), 0 where none wins) and the winning index
//   (-1 where none wins), each N x H x W;
// * the single stages: CSF filter, Hunt/HyAB colour error, feature difference.
#define FLIP_CPU_KERNEL_DECLARATIONS                                                                              \
  template <class T>                                                                                              \
  bool ldr_flip_forward(const T* test, const T* ref, T* out, Shape s, double ppd, bool srgb, double eps);        \
  template <class T>                                                                                              \
  bool ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s, double ppd,   \
                         bool srgb, double eps);                                                                  \
  template <class T>                                                                                              \
  bool ldr_flip_forward_sensitivities(const T* test, const T* ref, T* out, T* sensitivities, bool want_test,      \
                                      bool want_ref, Shape s, double ppd, bool srgb, double eps);                 \
  template <class T>                                                                                              \
  bool ldr_flip_backward_sensitivities(const T* grad, const T* sensitivities, const T* test, const T* ref,       \
                                       T* g_test, T* g_ref, Shape s, double ppd, bool srgb);                      \
  template <class T>                                                                                              \
  bool hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E,       \
                        T* out, T* exposure_map, int32_t* index, Shape s, double ppd, ToneMapper tone_mapper,    \
                        double eps);                                                                              \
  template <class T>                                                                                              \
  bool hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,  \
                         int64_t E, const int32_t* index, T* g_test, T* g_ref, Shape s, double ppd,              \
                         ToneMapper tone_mapper, double eps);                                                     \
  template <class T>                                                                                              \
  bool csf_filter_forward(const T* opponent, T* out, Shape s, double ppd);                                       \
  template <class T>                                                                                              \
  bool csf_filter_backward(const T* grad, const T* opponent, T* g_opponent, Shape s, double ppd);                \
  template <class T>                                                                                              \
  bool hunt_hyab_forward(const T* test, const T* ref, T* out, Shape s, double eps);                              \
  template <class T>                                                                                              \
  bool hunt_hyab_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s, double eps); \
  template <class T>                                                                                              \
  bool feature_difference_forward(const T* test, const T* ref, T* out, Shape s, double ppd, double eps);         \
  template <class T>                                                                                              \
  bool feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s,    \
                                   double ppd, double eps);

FLIP_CPU_KERNEL_DECLARATIONS

// The instruction-set level the kernels run with: "avx512", "avx2" or "baseline". It is the
// best the CPU (and the OS) supports, or lower when the environment variable
// FLIP_LOSS_CPU_CAPABILITY names a lower one ("baseline", "avx2"); fixed at the first call.
const char* capability();

}  // namespace cpu
}  // namespace flip
