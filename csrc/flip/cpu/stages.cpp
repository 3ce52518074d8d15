// CPU kernels of the single-stage ops (csf_filter, hunt_hyab, feature_difference), built from the
// same filter banks and per-pixel functions as the composite.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "../passes.h"
#include "../pixel.h"
#include "banks.h"
#include "kernels.h"
#include "parallel.h"
#include "pipeline.h"
#include "workspace.h"

namespace flip {
namespace cpu {
namespace {


template <class T>
bool all_finite(const T* p, int64_t n) {
  bool ok = true;
  for (int64_t i = 0; i < n; ++i) ok = ok && std::isfinite(p[i]);
  return ok;
}

}  // namespace

// ---- csf_filter: opponent (YCxCz) image -> filtered, RGB-cube-clamped linear RGB ----

namespace {

// Horizontal CSF pass of one opponent image (3 x H x W) into the four planes P.
template <class T>
void csf_horizontal(const T* src, int64_t H, int64_t W, const CsfTaps<T>& t, CsfPlanes<T> P) {
  const int64_t HW = H * W;
  parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
    Scratch<T> sc(W, t.y.radius, 0);
    for (int64_t row = b; row < e; ++row)
      csf_h_row(src + row * W, src + HW + row * W, src + 2 * HW + row * W, W, t, sc.pad(), P, row * W);
  });
}

}  // namespace

template <class T>
bool csf_filter_forward(const T* opp, T* out, Shape s, double ppd) {
  const int64_t H = s.h, W = s.w, HW = H * W;
  if (!all_finite(opp, s.n * 3 * HW)) return false;
  auto taps = csf_taps<T>(ppd);
  const CsfTaps<T>& t = *taps;
  Workspace ws_planes(sizeof(T) * (4 * HW));
  T* planes = ws_planes.as<T>();
  const auto P = csf_planes(planes, HW);
  for (int64_t n = 0; n < s.n; ++n) {
    const T* src = opp + n * 3 * HW;
    T* dst = out + n * 3 * HW;
    csf_horizontal(src, H, W, t, P);
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, 0, 3);
      for (int64_t row = b; row < e; ++row) {
        csf_v_row(P, H, W, row, t, sc.row(0), sc.row(1), sc.row(2));
        for (int64_t x = 0; x < W; ++x) {
          T F[3] = {sc.row(0)[x], sc.row(1)[x], sc.row(2)[x]}, lin[3];
          opponent_to_linear(F, lin);
          for (int c = 0; c < 3; ++c) dst[c * HW + row * W + x] = clamp01(lin[c]);
        }
      }
    });
  }
  return true;
}

template <class T>
bool csf_filter_backward(const T* grad, const T* opp, T* g_opp, Shape s, double ppd) {
  const int64_t H = s.h, W = s.w, HW = H * W;
  if (!all_finite(opp, s.n * 3 * HW)) return false;
  auto taps = csf_taps<T>(ppd);
  const CsfTaps<T>& t = *taps;
  Workspace ws_planes(sizeof(T) * (4 * HW));
  T* planes = ws_planes.as<T>();
  Workspace ws_gplanes(sizeof(T) * (3 * HW));
  T* gplanes = ws_gplanes.as<T>();
  const auto P = csf_planes(planes, HW);
  for (int64_t n = 0; n < s.n; ++n) {
    const T* src = opp + n * 3 * HW;
    const T* g = grad + n * 3 * HW;
    T* dst = g_opp + n * 3 * HW;
    csf_horizontal(src, H, W, t, P);
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, 0, 3);
      for (int64_t row = b; row < e; ++row) {
        csf_v_row(P, H, W, row, t, sc.row(0), sc.row(1), sc.row(2));
        for (int64_t x = 0; x < W; ++x) {
          const int64_t p = row * W + x;
          T F[3] = {sc.row(0)[x], sc.row(1)[x], sc.row(2)[x]}, lin[3], gl[3], gF[3];
          opponent_to_linear(F, lin);
          for (int c = 0; c < 3; ++c) gl[c] = g[c * HW + p] * inside01(lin[c]);
          opponent_to_linear_vjp(gl, gF);
          for (int c = 0; c < 3; ++c) gplanes[c * HW + p] = gF[c];
        }
      }
    });
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, t.y.radius, 4);
      for (int64_t row = b; row < e; ++row)
        csf_t_row(gplanes, gplanes + HW, gplanes + 2 * HW, H, W, row, t, sc.row(0),
                  sc.pad(), dst + row * W, dst + HW + row * W, dst + 2 * HW + row * W);
    });
  }
  return true;
}

// ---- hunt_hyab: two filtered linear-RGB images -> colour error ----

template <class T>
bool hunt_hyab_forward(const T* test, const T* ref, T* out, Shape s, double eps) {
  const int64_t HW = s.h * s.w;
  const auto k = color_consts<T>();
  std::atomic<bool> finite{true};
  parallel_for(0, s.n * HW, 4096, [&](int64_t b, int64_t e) {
    bool ok = true;
    for (int64_t i = b; i < e; ++i) ok = hunt_hyab_pixel(test, ref, out, HW, i, static_cast<T>(eps), k) && ok;
    if (!ok) finite = false;
  });
  return finite;
}

template <class T>
bool hunt_hyab_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s, double eps) {
  const int64_t HW = s.h * s.w;
  const auto k = color_consts<T>();
  std::atomic<bool> finite{true};
  parallel_for(0, s.n * HW, 4096, [&](int64_t b, int64_t e) {
    bool ok = true;
    for (int64_t i = b; i < e; ++i)
      ok = hunt_hyab_vjp_pixel(grad, test, ref, g_test, g_ref, HW, i, static_cast<T>(eps), k) && ok;
    if (!ok) finite = false;
  });
  return finite;
}

// ---- feature_difference: two normalised achromatic images -> feature error ----

namespace {

template <class T>
void feature_horizontal(const T* const img[2], T* planes, int64_t H, int64_t W, const FeatureTaps<T>& t) {
  const int64_t HW = H * W;
  parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
    Scratch<T> sc(W, t.g.radius, 0);
    for (int64_t idx = b; idx < e; ++idx) {
      const int im = static_cast<int>(idx / H);
      const int64_t row = idx % H;
      feature_h_row(img[im] + row * W, W, t, sc.pad(), feature_planes(planes + im * 3 * HW, HW), row * W);
    }
  });
}

template <class T>
void feature_vertical(T* planes, int im, int64_t H, int64_t W, int64_t row, const FeatureTaps<T>& t, T* out) {
  const int64_t HW = H * W;
  feature_v_row(feature_planes(planes + im * 3 * HW, HW), H, W, row, t, out, out + W, out + 2 * W, out + 3 * W);
}

template <class T>
inline T magnitude(T u, T v) {
  return std::sqrt(u * u + v * v);
}

}  // namespace

template <class T>
bool feature_difference_forward(const T* test, const T* ref, T* out, Shape s, double ppd, double eps_d) {
  const int64_t H = s.h, W = s.w, HW = H * W;
  if (!all_finite(test, s.n * HW) || !all_finite(ref, s.n * HW)) return false;
  auto taps = feature_taps<T>(ppd);
  const FeatureTaps<T>& t = *taps;
  const T eps = static_cast<T>(eps_d);
  Workspace ws_planes(sizeof(T) * (2 * 3 * HW));
  T* planes = ws_planes.as<T>();
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * HW, ref + n * HW};
    feature_horizontal(img, planes, H, W, t);
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, 0, 8);
      for (int64_t row = b; row < e; ++row) {
        feature_vertical(planes, 0, H, W, row, t, sc.row(0));
        feature_vertical(planes, 1, H, W, row, t, sc.row(4));
        const T *a = sc.row(0), *r = sc.row(4);
        for (int64_t x = 0; x < W; ++x)
          out[n * HW + row * W + x] = feature_error(
              magnitude(a[x], a[W + x]), magnitude(r[x], r[W + x]), magnitude(a[2 * W + x], a[3 * W + x]),
              magnitude(r[2 * W + x], r[3 * W + x]), eps);
      }
    });
  }
  return true;
}

template <class T>
bool feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref,
                                 Shape s, double ppd, double eps_d) {
  const int64_t H = s.h, W = s.w, HW = H * W;
  if (!all_finite(test, s.n * HW) || !all_finite(ref, s.n * HW)) return false;
  auto taps = feature_taps<T>(ppd);
  const FeatureTaps<T>& t = *taps;
  const T eps = static_cast<T>(eps_d);
  Workspace ws_planes(sizeof(T) * (2 * 3 * HW));
  T* planes = ws_planes.as<T>();
  Workspace ws_gplanes(sizeof(T) * (2 * 4 * HW));
  T* gplanes = ws_gplanes.as<T>();
  for (int64_t n = 0; n < s.n; ++n) {
    const T* img[2] = {test + n * HW, ref + n * HW};
    T* gout[2] = {g_test ? g_test + n * HW : nullptr, g_ref ? g_ref + n * HW : nullptr};
    feature_horizontal(img, planes, H, W, t);
    parallel_for(0, H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, 0, 8);
      for (int64_t row = b; row < e; ++row) {
        feature_vertical(planes, 0, H, W, row, t, sc.row(0));
        feature_vertical(planes, 1, H, W, row, t, sc.row(4));
        const T *a = sc.row(0), *r = sc.row(4);
        for (int64_t x = 0; x < W; ++x) {
          const int64_t p = row * W + x;
          Features<T> ft{a[x], a[W + x], a[2 * W + x], a[3 * W + x]};
          Features<T> fr{r[x], r[W + x], r[2 * W + x], r[3 * W + x]};
          T gep[4];
          feature_error_vjp(magnitude(ft.dx, ft.dy), magnitude(fr.dx, fr.dy), magnitude(ft.ddx, ft.ddy),
                            magnitude(fr.ddx, fr.ddy), eps, grad[n * HW + p], gep);
          Features<T> gft, gfr;
          features_vjp(ft, gep[0], gep[2], gft);
          features_vjp(fr, gep[1], gep[3], gfr);
          T* gt = gplanes;
          T* gr = gt + 4 * HW;
          gt[p] = gft.dx; gt[HW + p] = gft.dy; gt[2 * HW + p] = gft.ddx; gt[3 * HW + p] = gft.ddy;
          gr[p] = gfr.dx; gr[HW + p] = gfr.dy; gr[2 * HW + p] = gfr.ddx; gr[3 * HW + p] = gfr.ddy;
        }
      }
    });
    parallel_for(0, 2 * H, row_grain(W), [&](int64_t b, int64_t e) {
      Scratch<T> sc(W, t.g.radius, 3);
      for (int64_t idx = b; idx < e; ++idx) {
        const int im = static_cast<int>(idx / H);
        const int64_t row = idx % H;
        if (!gout[im]) continue;
        const T* g = gplanes + im * 4 * HW;
        T* dst = gout[im] + row * W;
        std::fill(dst, dst + W, T(0));
        feature_t_row(g, g + HW, g + 2 * HW, g + 3 * HW, H, W, row, t, sc.row(0), sc.pad(), dst);
      }
    });
  }
  return true;
}

#define FLIP_INSTANTIATE(T)                                                                        \
  template bool csf_filter_forward<T>(const T*, T*, Shape, double);                               \
  template bool csf_filter_backward<T>(const T*, const T*, T*, Shape, double);                    \
  template bool hunt_hyab_forward<T>(const T*, const T*, T*, Shape, double);                      \
  template bool hunt_hyab_backward<T>(const T*, const T*, const T*, T*, T*, Shape, double);       \
  template bool feature_difference_forward<T>(const T*, const T*, T*, Shape, double, double);     \
  template bool feature_difference_backward<T>(const T*, const T*, const T*, T*, T*, Shape, double, \
                                               double);
FLIP_INSTANTIATE(float)
FLIP_INSTANTIATE(double)
#undef FLIP_INSTANTIATE

}  // namespace cpu
}  // namespace flip
