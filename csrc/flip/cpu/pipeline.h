// The stages of one LDR-FLIP evaluation on the CPU, for one batch item, parametrised by how an
// input pixel becomes linear RGB in [0, 1] (the LDR decode, or HDR-FLIP's exposure + tone map):
//   horizontal_stage   both images -> 7 horizontal planes each (4 CSF, 3 feature)
//   vertical_forward   planes -> error map (vertical filters fused with the per-pixel tail)
//   vertical_vjp       planes + incoming gradient -> gradient planes of the filtered responses
//   transposed_stage   gradient planes -> gradient w.r.t. linear RGB, handed to a chain functor
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>

#include "../pixel.h"
#include "banks.h"
#include "parallel.h"

namespace flip {
namespace cpu {

constexpr int kPlanes = 7;  // per image: 4 CSF intermediates, 3 feature intermediates

inline int64_t row_grain(int64_t W) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(W, 1)); }

template <class T>
struct Context {
  std::shared_ptr<const CsfTaps<T>> csf;
  std::shared_ptr<const FeatureTaps<T>> feat;
  ColorConsts<T> k;
  int rmax;
  explicit Context(double ppd) : csf(csf_taps<T>(ppd)), feat(feature_taps<T>(ppd)), k(color_consts<T>()) {
    rmax = std::max(csf->y.radius, feat->g.radius);
  }
};

// conv(v, lin, d): v = the input pixel (3 channels), lin = linear RGB; when d is not null it
// receives the diagonal derivative d(lin_c)/d(v_c), stored into deriv[im] (a 3-plane image).
template <class T, class Conv>
bool horizontal_stage(const T* const img[2], T* planes, int64_t H, int64_t W, const Conv& conv, const Context<T>& cx,
                      T* const deriv[2] = nullptr) {
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
        T v[3] = {src[x], src[HW + x], src[2 * HW + x]}, lin[3], opp[3], d[3] = {};
        ok = ok && std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]);
        conv(v, lin, dv ? d : nullptr);
        if (dv)
          for (int c = 0; c < 3; ++c) dv[c * HW + x] = d[c];
        linear_to_opponent(lin, opp);
        o0[x] = opp[0];
        o1[x] = opp[1];
        o2[x] = opp[2];
        yh[x] = achromatic(opp);
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
void vertical_row(const T* planes, int im, int64_t H, int64_t W, int64_t row, const Context<T>& cx, T* out) {
  const int64_t HW = H * W;
  T* base = const_cast<T*>(planes) + im * kPlanes * HW;
  csf_v_row(csf_planes(base, HW), H, W, row, *cx.csf, out, out + W, out + 2 * W);
  feature_v_row(feature_planes(base + 4 * HW, HW), H, W, row, *cx.feat, out + 3 * W, out + 4 * W, out + 5 * W,
                out + 6 * W);
}

template <class T>
inline void load_pixel(const T* r, int64_t W, int64_t x, T F[3], Features<T>& f) {
  F[0] = r[x];
  F[1] = r[W + x];
  F[2] = r[2 * W + x];
  f = Features<T>{r[3 * W + x], r[4 * W + x], r[5 * W + x], r[6 * W + x]};
}

// The error map of one batch item into dst (H x W).
template <class T>
void vertical_forward(const T* planes, int64_t H, int64_t W, const Context<T>& cx, T eps, T* dst) {
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

// Gradient planes (per image F0, F1, F2, dx, dy, ddx, ddy) for the incoming gradient gmap (H x W).
template <class T>
void vertical_vjp(const T* planes, T* gplanes, int64_t H, int64_t W, const Context<T>& cx, T eps, const T* gmap) {
  const int64_t HW = H * W;
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
        store_pixel_gradients(gplanes, HW, p, gFt, gft);
        store_pixel_gradients(gplanes + kPlanes * HW, HW, p, gFr, gfr);
      }
    }
  });
}

// Transposed banks for the images with want[im], then chain(im, row, x, g_lin) for every pixel
// with the gradient w.r.t. its linear RGB.
template <class T, class Chain>
void transposed_stage(const T* gplanes, int64_t H, int64_t W, const Context<T>& cx, const bool want[2],
                      const Chain& chain) {
  const int64_t HW = H * W;
  parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
    Scratch<T> sc(W, cx.rmax, 8);
    T *o0 = sc.row(0), *o1 = sc.row(1), *o2 = sc.row(2), *yh = sc.row(3), *tmp = sc.row(4);
    for (int64_t idx = b; idx < e; ++idx) {
      const int im = static_cast<int>(idx / H);
      const int64_t row = idx % H;
      if (!want[im]) continue;
      const T* g = gplanes + im * kPlanes * HW;
      csf_t_row(g, g + HW, g + 2 * HW, H, W, row, *cx.csf, tmp, sc.pad(), o0, o1, o2);
      std::fill(yh, yh + W, T(0));
      feature_t_row(g + 3 * HW, g + 4 * HW, g + 5 * HW, g + 6 * HW, H, W, row, *cx.feat, tmp, sc.pad(), yh);
      for (int64_t x = 0; x < W; ++x) {
        const T gopp[3] = {o0[x], o1[x], o2[x]};
        T glin[3];
        opponent_and_achromatic_vjp(gopp, yh[x], glin);
        chain(im, row, x, glin);
      }
    }
  });
}

}  // namespace cpu
}  // namespace flip
