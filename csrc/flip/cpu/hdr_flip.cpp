// HDR-FLIP on the CPU: per batch item and exposure, the LDR pipeline on the exposed, tone-mapped
// images, folded into a running per-pixel maximum (strict >, so ties keep the darker exposure).
// The backward recomputes each exposure that wins somewhere and routes the gradient of each
// pixel to its winning exposure only; nothing per exposure is stored. Both poll for an interrupt
// before each exposure (one exposure is one LDR pass over the image, so a stop takes effect
// within one pass).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "../passes.h"
#include "../tonemap.h"
#include "interrupt.h"
#include "kernels.h"
#include "pipeline.h"
#include "workspace.h"

namespace flip {
namespace cpu {
namespace {

template <class T>
struct HdrInput {
  T scale;
  int tm;
  void operator()(const T v[3], T lin[3], T*) const { hdr_to_ldr(v, scale, tm, lin); }
};

}  // namespace

template <class T>
bool hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                      T* exposure_map, int32_t* index, Shape s, double ppd, int tm, double eps) {
  const Context<T> cx(ppd);
  const int64_t HW = s.h * s.w;
  Workspace ws(sizeof(T) * (2 * kPlanes + 1) * HW);
  T* planes = ws.as<T>();
  T* err = planes + 2 * kPlanes * HW;
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * 3 * HW, ref + n * 3 * HW};
    T* o = out + n * HW;
    T* em = exposure_map + n * HW;
    int32_t* ix = index + n * HW;
    std::fill(o, o + HW, T(0));
    std::fill(em, em + HW, T(0));
    std::fill(ix, ix + HW, -1);
    const int64_t count = counts[n];
    for (int64_t i = 0; i < count; ++i) {
      poll_interrupt();
      const HdrInput<T> conv{static_cast<T>(std::exp2(exposures[n * E + i])), tm};
      if (!horizontal_stage(img, planes, s.h, s.w, conv, cx)) return false;
      vertical_forward(planes, s.h, s.w, cx, static_cast<T>(eps), err);
      const HdrStep<T> step{exposures, counts, E, i, tm};
      parallel_for(0, HW, 16384, [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) step.fold(err[p], n, p, o, em, ix);
      });
    }
  }
  return true;
}

template <class T>
bool hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,
                       int64_t E, const int32_t* index, T* g_test, T* g_ref, Shape s, double ppd, int tm, double eps) {
  const Context<T> cx(ppd);
  const int64_t HW = s.h * s.w;
  Workspace ws_planes(sizeof(T) * (2 * kPlanes + 1) * HW), ws_gplanes(sizeof(T) * 2 * kPlanes * HW);
  T *planes = ws_planes.as<T>(), *gplanes = ws_gplanes.as<T>();
  T* gmask = planes + 2 * kPlanes * HW;
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * 3 * HW, ref + n * 3 * HW};
    T* gout[2] = {g_test ? g_test + n * 3 * HW : nullptr, g_ref ? g_ref + n * 3 * HW : nullptr};
    for (T* g : gout)
      if (g) std::fill(g, g + 3 * HW, T(0));
    const bool want[2] = {gout[0] != nullptr, gout[1] != nullptr};
    const int32_t* ix = index + n * HW;
    const T* gm = grad + n * HW;
    for (int64_t i = 0; i < counts[n]; ++i) {
      poll_interrupt();
      std::atomic<bool> wins{false};
      parallel_for(0, HW, 16384, [&](int64_t b, int64_t e) {
        bool any = false;
        for (int64_t p = b; p < e; ++p) {
          const bool w = ix[p] == i;
          gmask[p] = w ? gm[p] : T(0);
          any = any || w;
        }
        if (any) wins = true;
      });
      if (!wins) continue;  // this exposure wins nowhere: no gradient flows through it
      const HdrInput<T> conv{static_cast<T>(std::exp2(exposures[n * E + i])), tm};
      if (!horizontal_stage(img, planes, s.h, s.w, conv, cx)) return false;
      vertical_vjp(planes, gplanes, s.h, s.w, cx, static_cast<T>(eps), gmask);
      transposed_stage(gplanes, s.h, s.w, cx, want, [&](int im, int64_t row, int64_t x, const T glin[3]) {
        const int64_t p = row * s.w + x;
        const T v[3] = {img[im][p], img[im][HW + p], img[im][2 * HW + p]};
        T gv[3];
        hdr_to_ldr_vjp(v, conv.scale, tm, glin, gv);
        for (int c = 0; c < 3; ++c) gout[im][c * HW + p] += gv[c];
      });
    }
  }
  return true;
}

template bool hdr_flip_forward<float>(const float*, const float*, const float*, const int64_t*, int64_t, float*,
                                      float*, int32_t*, Shape, double, int, double);
template bool hdr_flip_forward<double>(const double*, const double*, const double*, const int64_t*, int64_t, double*,
                                       double*, int32_t*, Shape, double, int, double);
template bool hdr_flip_backward<float>(const float*, const float*, const float*, const float*, const int64_t*,
                                       int64_t, const int32_t*, float*, float*, Shape, double, int, double);
template bool hdr_flip_backward<double>(const double*, const double*, const double*, const double*, const int64_t*,
                                        int64_t, const int32_t*, double*, double*, Shape, double, int, double);

}  // namespace cpu
}  // namespace flip
