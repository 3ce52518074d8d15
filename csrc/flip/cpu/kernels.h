// CPU kernels of the FLIP ops on contiguous NCHW buffers. Each returns false when an input holds
// a NaN or an infinity (the output is then unspecified). Gradient outputs may be null when that
// input needs no gradient.
#pragma once

#include <cstdint>

namespace flip {
namespace cpu {

struct Shape {
  int64_t n, h, w;
};

template <class T>
bool ldr_flip_forward(const T* test, const T* ref, T* out, Shape s, double ppd, bool srgb, double eps);
template <class T>
bool ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s,
                       double ppd, bool srgb, double eps);

// HDR-FLIP: exposures is N x E (stops), counts[n] <= E of them used for item n. Outputs the error
// map, the exposure map (winning index / (count - 1), 0 where none wins) and the winning index
// (-1 where none wins), each N x H x W.
template <class T>
bool hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                      T* exposure_map, int32_t* index, Shape s, double ppd, int tone_mapper, double eps);
template <class T>
bool hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,
                       int64_t E, const int32_t* index, T* g_test, T* g_ref, Shape s, double ppd, int tone_mapper,
                       double eps);

template <class T>
bool csf_filter_forward(const T* opponent, T* out, Shape s, double ppd);
template <class T>
bool csf_filter_backward(const T* grad, const T* opponent, T* g_opponent, Shape s, double ppd);

template <class T>
bool hunt_hyab_forward(const T* test, const T* ref, T* out, Shape s, double eps);
template <class T>
bool hunt_hyab_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s,
                        double eps);

template <class T>
bool feature_difference_forward(const T* test, const T* ref, T* out, Shape s, double ppd, double eps);
template <class T>
bool feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref,
                                 Shape s, double ppd, double eps);

}  // namespace cpu
}  // namespace flip
