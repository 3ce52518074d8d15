// LDR-FLIP composite on the CPU: both images go through the CSF and feature banks in two
// passes (horizontal into planes, then vertical fused with the per-pixel tail), so no
// per-pixel Lab or feature image is ever stored. The backward recomputes the planes and runs the
// transposed banks; it stores only the gradients w.r.t. the filtered responses.
#include "kernels.h"
#include "pipeline.h"
#include "workspace.h"

namespace flip {
namespace cpu {
namespace {

template <class T>
struct LdrInput {
  bool srgb;
  void operator()(const T v[3], T lin[3], T* d) const {
    for (int c = 0; c < 3; ++c) lin[c] = input_to_linear(v[c], srgb, d ? &d[c] : nullptr);
  }
};

}  // namespace

template <class T>
bool ldr_flip_forward(const T* test, const T* ref, T* out, Shape s, double ppd, bool srgb, double eps) {
  const Context<T> cx(ppd);
  const int64_t HW = s.h * s.w;
  Workspace ws(sizeof(T) * 2 * kPlanes * HW);
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * 3 * HW, ref + n * 3 * HW};
    if (!horizontal_stage(img, ws.as<T>(), s.h, s.w, LdrInput<T>{srgb}, cx)) return false;
    vertical_forward(ws.as<T>(), s.h, s.w, cx, static_cast<T>(eps), out + n * HW);
  }
  return true;
}

template <class T>
bool ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s, double ppd,
                       bool srgb, double eps) {
  const Context<T> cx(ppd);
  const int64_t HW = s.h * s.w;
  Workspace ws_planes(sizeof(T) * 2 * kPlanes * HW), ws_gplanes(sizeof(T) * 2 * kPlanes * HW);
  T *planes = ws_planes.as<T>(), *gplanes = ws_gplanes.as<T>();
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * 3 * HW, ref + n * 3 * HW};
    T* gout[2] = {g_test ? g_test + n * 3 * HW : nullptr, g_ref ? g_ref + n * 3 * HW : nullptr};
    // The input derivative is parked in the gradient buffers and multiplied in at the end.
    if (!horizontal_stage(img, planes, s.h, s.w, LdrInput<T>{srgb}, cx, gout)) return false;
    vertical_vjp(planes, gplanes, s.h, s.w, cx, static_cast<T>(eps), grad + n * HW);
    const bool want[2] = {gout[0] != nullptr, gout[1] != nullptr};
    transposed_stage(gplanes, s.h, s.w, cx, want, [&](int im, int64_t row, int64_t x, const T glin[3]) {
      T* dst = gout[im] + row * s.w + x;
      for (int c = 0; c < 3; ++c) dst[c * HW] *= glin[c];
    });
  }
  return true;
}

template bool ldr_flip_forward<float>(const float*, const float*, float*, Shape, double, bool, double);
template bool ldr_flip_forward<double>(const double*, const double*, double*, Shape, double, bool, double);
template bool ldr_flip_backward<float>(const float*, const float*, const float*, float*, float*, Shape, double,
                                       bool, double);
template bool ldr_flip_backward<double>(const double*, const double*, const double*, double*, double*, Shape,
                                        double, bool, double);

}  // namespace cpu
}  // namespace flip
