// The stages of one LDR-FLIP evaluation on the CPU, for one batch item, parametrised by how an
// input pixel becomes linear RGB in [0, 1] (the LDR decode, or HDR-FLIP's exposure + tone map):
//   horizontal_stage   both images -> 7 horizontal planes each (4 CSF, 3 feature)
//   vertical_forward   planes -> error map (vertical filters fused with the per-pixel tail)
//   vertical_vjp       planes + incoming gradient -> gradient planes of the filtered responses
//   transposed_stage   gradient planes -> gradient w.r.t. linear RGB, handed to a chain functor
// The backward stages run only for the images whose gradient is wanted.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>

#include "../pixel.h"
#include "banks.h"
#include "parallel.h"
#include "workspace.h"

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

// The per-pixel loops below take their rows as __restrict pointers and call only inline,
// branch-free code (pixel.h, with the float transcendentals of fastmath.h), so that GCC
// vectorises them across pixels at every instruction-set level (-fno-trapping-math lets it
// if-convert the selects; -fno-tree-pre keeps it from merging them into forms it cannot vectorise;
// see setup.py and docs/algorithm.md §7.13). Each is a function of its own (FLIP_LOOP: never
// inlined; one call per row costs nothing), so that tests/test_cpu_dispatch.py can find it in the
// disassembly and check that it stayed vectorised.
#define FLIP_LOOP __attribute__((noinline))

// One input row of an image -> its opponent rows o0..o2 and achromatic row yh. conv(v, lin, d): v
// = the input pixel (3 channels, planes HW apart), lin = linear RGB; with kDeriv (only for a Conv
// whose kHasDerivative is true), d receives the diagonal derivative d(lin_c)/d(v_c), stored into dv
// (3 rows HW apart). Returns false if the row holds a NaN or an infinity.
template <bool kDeriv, class T, class Conv>
FLIP_LOOP bool convert_row(const T* __restrict src, int64_t HW, int64_t W, const Conv& conv, T* __restrict dv,
                           T* __restrict o0, T* __restrict o1, T* __restrict o2, T* __restrict yh) {
  int nonfinite = 0;
#pragma GCC ivdep  // the 3 rows of src (and of dv) are HW >= W apart
  for (int64_t x = 0; x < W; ++x) {
    const T v[3] = {src[x], src[HW + x], src[2 * HW + x]};
    // v - v is 0 for a finite v and NaN otherwise; the sum is NaN if any of the three is.
    nonfinite |= ((v[0] - v[0]) + (v[1] - v[1]) + (v[2] - v[2])) != T(0);
    T lin[3], opp[3];
    if constexpr (kDeriv) {
      T d[3];
      conv(v, lin, d);
      dv[x] = d[0];
      dv[HW + x] = d[1];
      dv[2 * HW + x] = d[2];
    } else {
      conv(v, lin, static_cast<T*>(nullptr));
    }
    linear_to_opponent(lin, opp);
    o0[x] = opp[0];
    o1[x] = opp[1];
    o2[x] = opp[2];
    yh[x] = achromatic(opp);
  }
  return nonfinite == 0;
}

// Both images -> their 7 horizontal planes each. When deriv[im] is not null it receives the
// input derivative of image im (see convert_row).
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
      if constexpr (Conv::kHasDerivative)
        ok &= dv ? convert_row<true>(src, HW, W, conv, dv, o0, o1, o2, yh)
                 : convert_row<false>(src, HW, W, conv, dv, o0, o1, o2, yh);
      else
        ok &= convert_row<false>(src, HW, W, conv, dv, o0, o1, o2, yh);
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

// Always inlined (FLIP_HD) like the per-pixel code: a call left in a per-pixel loop keeps it scalar.
template <class T>
FLIP_HD void load_pixel(const T* __restrict r, int64_t W, int64_t x, T F[3], Features<T>& f) {
  F[0] = r[x];
  F[1] = r[W + x];
  F[2] = r[2 * W + x];
  f = Features<T>{r[3 * W + x], r[4 * W + x], r[5 * W + x], r[6 * W + x]};
}

// The error of one row from both images' vertical outputs (7 rows W apart each).
template <class T>
FLIP_LOOP void flip_row(const T* __restrict rt, const T* __restrict rr, int64_t W, T eps, const ColorConsts<T> k,
                        T* __restrict dst) {
  for (int64_t x = 0; x < W; ++x) {
    T Ft[3], Fr[3];
    Features<T> ft, fr;
    load_pixel(rt, W, x, Ft, ft);
    load_pixel(rr, W, x, Fr, fr);
    dst[x] = pixel_flip(Ft, Fr, ft, fr, eps, k);
  }
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
      flip_row(rt, rr, W, eps, cx.k, dst + row * W);
    }
  });
}

// The adjoint of flip_row for the incoming gradient row gmap: the gradients of the wanted images'
// vertical outputs into their gradient planes gt, gr (7 planes HW apart, at this row).
template <bool kWantTest, bool kWantRef, class T>
FLIP_LOOP void flip_row_vjp(const T* __restrict rt, const T* __restrict rr, int64_t W, int64_t HW, T eps,
                            const ColorConsts<T> k, const T* __restrict gmap, T* __restrict gt, T* __restrict gr) {
  // The 7 planes of gt (and of gr) are HW >= W apart, so no two pixels' stores overlap; GCC cannot
  // prove that for an unknown HW and would give up (too many run-time alias checks).
#pragma GCC ivdep
  for (int64_t x = 0; x < W; ++x) {
    T Ft[3], Fr[3], gFt[3], gFr[3];
    Features<T> ft, fr, gft, gfr;
    load_pixel(rt, W, x, Ft, ft);
    load_pixel(rr, W, x, Fr, fr);
    pixel_flip_vjp<kWantTest, kWantRef>(Ft, Fr, ft, fr, eps, k, gmap[x], gFt, gFr, gft, gfr);
    if constexpr (kWantTest) store_pixel_gradients(gt, HW, x, gFt, gft);
    if constexpr (kWantRef) store_pixel_gradients(gr, HW, x, gFr, gfr);
  }
}

// The backward's gradient planes: kPlanes planes of hw samples for each image that wants a
// gradient, none for the other; planes()[im] is null for an image that wants none.
template <class T>
class GradientPlanes {
 public:
  GradientPlanes(bool want_test, bool want_ref, int64_t hw)
      : ws_(sizeof(T) * (int{want_test} + int{want_ref}) * kPlanes * hw) {
    T* base = ws_.as<T>();
    planes_[0] = want_test ? base : nullptr;
    planes_[1] = want_ref ? base + (want_test ? kPlanes * hw : 0) : nullptr;
  }
  T* const* planes() const { return planes_; }

 private:
  Workspace ws_;
  T* planes_[2];
};

// Gradient planes (per image F0, F1, F2, dx, dy, ddx, ddy, H x W each) of the images whose
// gplanes[im] is not null, for the incoming gradient gmap (H x W).
template <class T>
void vertical_vjp(const T* planes, T* const gplanes[2], int64_t H, int64_t W, const Context<T>& cx, T eps,
                  const T* gmap) {
  const int64_t HW = H * W;
  parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
    Scratch<T> sc(W, 0, 2 * kPlanes);
    T *rt = sc.row(0), *rr = sc.row(kPlanes);
    for (int64_t row = b; row < e; ++row) {
      vertical_row(planes, 0, H, W, row, cx, rt);
      vertical_row(planes, 1, H, W, row, cx, rr);
      T* gt = gplanes[0] ? gplanes[0] + row * W : nullptr;
      T* gr = gplanes[1] ? gplanes[1] + row * W : nullptr;
      const T* gm = gmap + row * W;
      if (gt && gr)
        flip_row_vjp<true, true>(rt, rr, W, HW, eps, cx.k, gm, gt, gr);
      else if (gt)
        flip_row_vjp<true, false>(rt, rr, W, HW, eps, cx.k, gm, gt, gr);
      else if (gr)
        flip_row_vjp<false, true>(rt, rr, W, HW, eps, cx.k, gm, gt, gr);
    }
  });
}

// Gradient rows w.r.t. linear RGB (g0..g2) from those w.r.t. the opponent channels and the
// achromatic channel.
template <class T>
FLIP_LOOP void opponent_row_vjp(const T* __restrict o0, const T* __restrict o1, const T* __restrict o2,
                                const T* __restrict yh, int64_t W, T* __restrict g0, T* __restrict g1,
                                T* __restrict g2) {
  for (int64_t x = 0; x < W; ++x) {
    const T gopp[3] = {o0[x], o1[x], o2[x]};
    T glin[3];
    opponent_and_achromatic_vjp(gopp, yh[x], glin);
    g0[x] = glin[0];
    g1[x] = glin[1];
    g2[x] = glin[2];
  }
}

// Transposed banks for the images whose gradient planes gplanes[im] are not null, then
// chain(im, row, g) for every row, with g the gradient w.r.t. the row's linear RGB (3 rows W apart).
template <class T, class Chain>
void transposed_stage(T* const gplanes[2], int64_t H, int64_t W, const Context<T>& cx, const Chain& chain) {
  const int64_t HW = H * W;
  parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
    Scratch<T> sc(W, cx.rmax, 11);
    T *o0 = sc.row(0), *o1 = sc.row(1), *o2 = sc.row(2), *yh = sc.row(3), *tmp = sc.row(4), *glin = sc.row(8);
    for (int64_t idx = b; idx < e; ++idx) {
      const int im = static_cast<int>(idx / H);
      const int64_t row = idx % H;
      if (!gplanes[im]) continue;
      const T* g = gplanes[im];
      csf_t_row(g, g + HW, g + 2 * HW, H, W, row, *cx.csf, tmp, sc.pad(), o0, o1, o2);
      std::fill(yh, yh + W, T(0));
      feature_t_row(g + 3 * HW, g + 4 * HW, g + 5 * HW, g + 6 * HW, H, W, row, *cx.feat, tmp, sc.pad(), yh);
      opponent_row_vjp(o0, o1, o2, yh, W, glin, glin + W, glin + 2 * W);
      chain(im, row, static_cast<const T*>(glin));
    }
  });
}

}  // namespace cpu
}  // namespace flip
