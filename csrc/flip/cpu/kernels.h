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
