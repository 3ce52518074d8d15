// LDR-FLIP composite on the CPU: both images go through the CSF and feature banks in two
// passes (horizontal into planes, then vertical fused with the per-pixel tail), so no
// per-pixel Lab or feature image is ever stored. The backward recomputes the planes and runs the
// transposed banks; it stores only the gradients w.r.t. the filtered responses.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "../pixel.h"
#include "banks.h"
#include "kernels.h"
#include "parallel.h"
#include "workspace.h"

namespace flip {
namespace cpu {
namespace {

constexpr int kPlanes = 7;  // per image: 4 CSF intermediates, 3 feature intermediates

int64_t row_grain(int64_t W) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(W, 1)); }

template <class T>
struct Context {
  std::shared_ptr<const CsfTaps<T>> csf;
  std::shared_ptr<const FeatureTaps<T>> feat;
  ColorConsts<T> k;
  int rmax;
  Context(double ppd) : csf(csf_taps<T>(ppd)), feat(feature_taps<T>(ppd)), k(color_consts<T>()) {
    rmax = std::max(csf->y.radius, feat->g.radius);
  }
};

// Horizontal passes of both images of batch item n into planes[2 * kPlanes * HW].
// When deriv[im] is given, d(linear)/d(input) of image im is stored there (NCHW, one image).
template <class T>
bool horizontal_stage(const T* const img[2], T* planes, int64_t H, int64_t W, bool srgb,
                      const Context<T>& cx, T* const deriv[2] = nullptr) {
  const int64_t HW = H * W;
  std::atomic<bool> finite{true};
  parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
    Scratch<T> sc(W, cx.rmax, 4);
    T *o0 = sc.row(0), *o1 = sc.row(1), *o2 = sc.row(2), *yh = sc.row(3);
    bool ok = true;
    for (int64_t idx = b; idx < e; ++idx) {
      const int im = static_cast<int>(idx / H);
      const int64_t row = idx % H;
      const T* src = img[im] + row * W;
      T* dv = deriv && deriv[im] ? deriv[im] + row * W : nullptr;
      for (int64_t x = 0; x < W; ++x) {
        T lin[3], opp[3], d[3];
        for (int c = 0; c < 3; ++c) {
          T v = src[c * HW + x];
          ok = ok && std::isfinite(v);
          lin[c] = input_to_linear(v, srgb, &d[c]);
        }
        if (dv)
          for (int c = 0; c < 3; ++c) dv[c * HW + x] = d[c];
        linear_to_opponent(lin, opp);
        o0[x] = opp[0];
        o1[x] = opp[1];
        o2[x] = opp[2];
        yh[x] = (opp[0] + T(16)) * T(1.0 / 116.0);
      }
      T* base = planes + im * kPlanes * HW;
      csf_h_row(o0, o1, o2, W, *cx.csf, sc.pad(), csf_planes(base, HW), row * W);
      feature_h_row(yh, W, *cx.feat, sc.pad(), feature_planes(base + 4 * HW, HW), row * W);
    }
    if (!ok) finite = false;
  });
  return finite;
}

// Vertical passes of one row of image im into 7 rows: F0, F1, F2, dx, dy, ddx, ddy.
template <class T>
void vertical_row(T* planes, int im, int64_t H, int64_t W, int64_t row, const Context<T>& cx, T* out) {
  const int64_t HW = H * W;
  T* base = planes + im * kPlanes * HW;
  csf_v_row(csf_planes(base, HW), H, W, row, *cx.csf, out, out + W, out + 2 * W);
  feature_v_row(feature_planes(base + 4 * HW, HW), H, W, row, *cx.feat, out + 3 * W, out + 4 * W,
                out + 5 * W, out + 6 * W);
}

template <class T>
inline void load_pixel(const T* r, int64_t W, int64_t x, T F[3], Features<T>& f) {
  F[0] = r[x];
  F[1] = r[W + x];
  F[2] = r[2 * W + x];
  f = Features<T>{r[3 * W + x], r[4 * W + x], r[5 * W + x], r[6 * W + x]};
}

}  // namespace

template <class T>
bool ldr_flip_forward(const T* test, const T* ref, T* out, Shape s, double ppd, bool srgb, double eps_d) {
  const Context<T> cx(ppd);
  const int64_t H = s.h, W = s.w, HW = H * W;
  const T eps = static_cast<T>(eps_d);
  Workspace ws_planes(sizeof(T) * (2 * kPlanes * HW));
  T* planes = ws_planes.as<T>();
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * 3 * HW, ref + n * 3 * HW};
    if (!horizontal_stage(img, planes, H, W, srgb, cx)) return false;
    T* dst = out + n * HW;
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, 0, 2 * kPlanes);
      T *rt = sc.row(0), *rr = sc.row(kPlanes);
      for (int64_t row = b; row < e; ++row) {
        vertical_row(planes, 0, H, W, row, cx, rt);
        vertical_row(planes, 1, H, W, row, cx, rr);
        for (int64_t x = 0; x < W; ++x) {
          T Ft[3], Fr[3];
          Features<T> ft, fr;
          load_pixel(rt, W, x, Ft, ft);
          load_pixel(rr, W, x, Fr, fr);
          dst[row * W + x] = pixel_flip(Ft, Fr, ft, fr, eps, cx.k);
        }
      }
    });
  }
  return true;
}

template <class T>
bool ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s,
                       double ppd, bool srgb, double eps_d) {
  const Context<T> cx(ppd);
  const int64_t H = s.h, W = s.w, HW = H * W;
  const T eps = static_cast<T>(eps_d);
  Workspace ws_planes(sizeof(T) * (2 * kPlanes * HW));
  T* planes = ws_planes.as<T>();
  Workspace ws_gplanes(sizeof(T) * (2 * kPlanes * HW));
  T* gplanes = ws_gplanes.as<T>();
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * 3 * HW, ref + n * 3 * HW};
    T* gout[2] = {g_test ? g_test + n * 3 * HW : nullptr, g_ref ? g_ref + n * 3 * HW : nullptr};
    // The input derivative is parked in the gradient buffers and multiplied in at the end.
    if (!horizontal_stage(img, planes, H, W, srgb, cx, gout)) return false;
    const T* gmap = grad + n * HW;
    // Gradients w.r.t. the filtered responses: per image F0, F1, F2, dx, dy, ddx, ddy planes.
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, 0, 2 * kPlanes);
      T *rt = sc.row(0), *rr = sc.row(kPlanes);
      for (int64_t row = b; row < e; ++row) {
        vertical_row(planes, 0, H, W, row, cx, rt);
        vertical_row(planes, 1, H, W, row, cx, rr);
        for (int64_t x = 0; x < W; ++x) {
          T Ft[3], Fr[3], gFt[3], gFr[3];
          Features<T> ft, fr, gft, gfr;
          load_pixel(rt, W, x, Ft, ft);
          load_pixel(rr, W, x, Fr, fr);
          pixel_flip_vjp(Ft, Fr, ft, fr, eps, cx.k, gmap[row * W + x], gFt, gFr, gft, gfr);
          const int64_t p = row * W + x;
          T* gt = gplanes;
          T* gr = gt + kPlanes * HW;
          for (int c = 0; c < 3; ++c) {
            gt[c * HW + p] = gFt[c];
            gr[c * HW + p] = gFr[c];
          }
          gt[3 * HW + p] = gft.dx; gt[4 * HW + p] = gft.dy; gt[5 * HW + p] = gft.ddx; gt[6 * HW + p] = gft.ddy;
          gr[3 * HW + p] = gfr.dx; gr[4 * HW + p] = gfr.dy; gr[5 * HW + p] = gfr.ddx; gr[6 * HW + p] = gfr.ddy;
        }
      }
    });
    // Transposed banks, then back through the opponent transform and the input decoding.
    parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, cx.rmax, 8);
      T *o0 = sc.row(0), *o1 = sc.row(1), *o2 = sc.row(2), *yh = sc.row(3), *tmp = sc.row(4);
      for (int64_t idx = b; idx < e; ++idx) {
        const int im = static_cast<int>(idx / H);
        const int64_t row = idx % H;
        if (!gout[im]) continue;
        const T* g = gplanes + im * kPlanes * HW;
        csf_t_row(g, g + HW, g + 2 * HW, H, W, row, *cx.csf, tmp, sc.pad(), o0, o1, o2);
        std::fill(yh, yh + W, T(0));
        feature_t_row(g + 3 * HW, g + 4 * HW, g + 5 * HW, g + 6 * HW, H, W, row, *cx.feat, tmp,
                      sc.pad(), yh);
        T* dst = gout[im] + row * W;
        for (int64_t x = 0; x < W; ++x) {
          T gopp[3] = {o0[x] + yh[x] * T(1.0 / 116.0), o1[x], o2[x]}, glin[3];
          linear_to_opponent_vjp(gopp, glin);
          for (int c = 0; c < 3; ++c) dst[c * HW + x] *= glin[c];
        }
      }
    });
  }
  return true;
}

template bool ldr_flip_forward<float>(const float*, const float*, float*, Shape, double, bool, double);
template bool ldr_flip_forward<double>(const double*, const double*, double*, Shape, double, bool, double);
template bool ldr_flip_backward<float>(const float*, const float*, const float*, float*, float*, Shape,
                                       double, bool, double);
template bool ldr_flip_backward<double>(const double*, const double*, const double*, double*, double*,
                                        Shape, double, bool, double);

}  // namespace cpu
}  // namespace flip
