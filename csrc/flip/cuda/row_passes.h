// The row passes, per thread: the GPU formulation of every op's single stages, and of LDR-/HDR-FLIP
// where the tiles' shared memory does not fit or FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1
// (docs/algorithm.md §8.8). Each pass is a launch; its planes are in global memory, H x W each:
//   horizontal pass        one block per (row, image, x tile): the tile and its halo into shared
//                          memory (the input converted), then the horizontal filter outputs.
//   vertical pass + tail   one thread per pixel: the vertical filters of those planes and the op's
//                          per-pixel tail (or its adjoint into gradient planes).
//   vertical transpose     one thread per pixel: the transposed vertical filters of the gradient
//                          planes.
//   horizontal transpose   as the horizontal pass: the transposed horizontal filters, then the chain
//                          back to the op's input.
// The per-pixel kernels of LDR-FLIP's autograd that keeps the sensitivities are here too.
#pragma once

#include "tiled_backward.h"  // BackwardBand: the layout of the kept sensitivities

namespace flip {

// Threads per block of the horizontal passes (one row tile of kBlock pixels) and of the per-pixel
// kernels.
constexpr int kBlock = 128;

// ---- horizontal pass ----------------------------------------------------------------------

// Shared-memory values a block needs: 4 rows (3 opponent channels + achromatic) of B + 2R.
FLIP_HD int horizontal_pass_smem_len(int B, int R) { return 4 * (B + 2 * R); }

// Phase 1: thread tid of a block of B threads loads columns [x0 - R, x0 + B + R) of row y of
// one image (clamped to the border) and converts them. src points at the image (C x H x W); scale
// and tm are the exposure of Input::kHdr (unused otherwise). Returns false if it met a non-finite
// value.
template <class T, class S>
FLIP_HD bool horizontal_pass_load(const T* src, const Geometry& g, Input mode, int64_t y, int64_t x0, int B, int R,
                                  int tid, S smem, T scale, ToneMapper tm) {
  const int L = B + 2 * R;
  const int64_t hw = g.hw();
  bool ok = true;
  for (int i = tid; i < L; i += B) {
    const int64_t xs = clampi(x0 - R + i, 0, g.w - 1);
    const int64_t p = y * g.w + xs;
    T opp[3] = {T(0), T(0), T(0)}, yh;
    if (mode == Input::kAchromatic) {
      yh = src[p];
      ok = ok && is_finite(yh);
    } else {
      T v[3] = {src[p], src[hw + p], src[2 * hw + p]};
      ok = ok && is_finite(v[0]) && is_finite(v[1]) && is_finite(v[2]);
      if (mode == Input::kOpponent) {
        opp[0] = v[0];
        opp[1] = v[1];
        opp[2] = v[2];
      } else if (mode == Input::kHdr) {
        T lin[3];
        hdr_to_ldr(v, scale, tm, lin);
        linear_to_opponent(lin, opp);
      } else {
        const bool srgb = mode == Input::kSrgb;
        T lin[3] = {input_to_linear(v[0], srgb), input_to_linear(v[1], srgb), input_to_linear(v[2], srgb)};
        linear_to_opponent(lin, opp);
      }
      yh = achromatic(opp);
    }
    smem[i] = opp[0];
    smem[L + i] = opp[1];
    smem[2 * L + i] = opp[2];
    smem[3 * L + i] = yh;
  }
  return ok;
}

// Phase 2: the horizontal outputs of pixel (y, x0 + tid) into the image's planes.
template <class T, class S>
FLIP_HD void horizontal_pass_filter(const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x0, int B, int R,
                                    int tid, S smem, T* planes) {
  const int64_t x = x0 + tid;
  if (x >= g.w) return;
  const int L = B + 2 * R, c = tid + R;
  const int64_t hw = g.hw(), p = y * g.w + x;
  if (g.csf) {
    planes[p] = horizontal_sum(smem + c, t.y);
    planes[hw + p] = horizontal_sum(smem + L + c, t.cx);
    planes[2 * hw + p] = horizontal_sum(smem + 2 * L + c, t.cz1);
    planes[3 * hw + p] = horizontal_sum(smem + 2 * L + c, t.cz2);
  }
  if (g.feat) {
    T* f = planes + g.feat0() * hw;
    f[p] = horizontal_sum(smem + 3 * L + c, t.g);
    f[hw + p] = horizontal_sum<Form::kOdd>(smem + 3 * L + c, t.dg);
    f[2 * hw + p] = horizontal_sum<Form::kCentred>(smem + 3 * L + c, t.ddg);
  }
}

// ---- vertical pass + tail -----------------------------------------------------------------

// One output of a vertical filter at (y, x) of the plane pl, clamped to the image's rows.
template <Form F = Form::kPlain, class T>
FLIP_HD T vertical_sum(const T* pl, const Geometry& g, int64_t y, int64_t x, const FilterView<T>& f) {
  return correlate<F>(f, [&](int k) { return pl[clampi(y + k, 0, g.h - 1) * g.w + x]; });
}

// Filtered opponent colour of pixel (y, x) from the CSF planes.
template <class T>
FLIP_HD void vertical_csf(const T* pl, const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x, T F[3]) {
  const int64_t hw = g.hw();
  F[0] = vertical_sum(pl, g, y, x, t.y);
  F[1] = vertical_sum(pl + hw, g, y, x, t.cx);
  F[2] = vertical_sum(pl + 2 * hw, g, y, x, t.cz1) + vertical_sum(pl + 3 * hw, g, y, x, t.cz2);
}

// Feature responses of pixel (y, x) from the feature planes (pl points at the g plane).
template <class T>
FLIP_HD Features<T> vertical_features(const T* pl, const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x) {
  const int64_t hw = g.hw();
  Features<T> f;
  f.dx = vertical_sum(pl + hw, g, y, x, t.g);                // horizontal dg, vertical g
  f.ddx = vertical_sum(pl + 2 * hw, g, y, x, t.g);           // horizontal ddg, vertical g
  f.dy = vertical_sum<Form::kOdd>(pl, g, y, x, t.dg);        // horizontal g, vertical dg
  f.ddy = vertical_sum<Form::kCentred>(pl, g, y, x, t.ddg);  // horizontal g, vertical ddg
  return f;
}

// Both images' filtered colours and feature responses at pixel (n, y, x) of the LDR-FLIP planes.
template <class T>
FLIP_HD void vertical_ldr_responses(const T* planes, const Geometry& g, const TapsView<T>& t, int64_t n, int64_t y,
                                    int64_t x, T Ft[3], T Fr[3], Features<T>& ft, Features<T>& fr) {
  const T* pt = planes + (n * 2 + 0) * g.planes() * g.hw();
  const T* pr = planes + (n * 2 + 1) * g.planes() * g.hw();
  vertical_csf(pt, g, t, y, x, Ft);
  vertical_csf(pr, g, t, y, x, Fr);
  ft = vertical_features(pt + 4 * g.hw(), g, t, y, x);
  fr = vertical_features(pr + 4 * g.hw(), g, t, y, x);
}

// LDR-FLIP forward tail of pixel (n, y, x): planes hold both images.
template <class T>
FLIP_HD T vertical_ldr_flip(const T* planes, const Geometry& g, const TapsView<T>& t, int64_t n, int64_t y, int64_t x,
                            T eps, const ColorConsts<T>& k) {
  T Ft[3], Fr[3];
  Features<T> ft, fr;
  vertical_ldr_responses(planes, g, t, n, y, x, Ft, Fr, ft, fr);
  return pixel_flip(Ft, Fr, ft, fr, eps, k);
}

// LDR-FLIP backward tail: gradient planes (same layout as the planes: per image gF0..2 in planes
// 0-2, gdx, gdy, gddx, gddy in planes 3-6).
template <class T>
FLIP_HD void vertical_ldr_flip_vjp(const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t, int64_t n,
                                   int64_t y, int64_t x, T eps, const ColorConsts<T>& k, T grad) {
  const int64_t hw = g.hw(), p = y * g.w + x;
  T Ft[3], Fr[3], gFt[3], gFr[3];
  Features<T> ft, fr, gft, gfr;
  vertical_ldr_responses(planes, g, t, n, y, x, Ft, Fr, ft, fr);
  pixel_flip_vjp(Ft, Fr, ft, fr, eps, k, grad, gFt, gFr, gft, gfr);
  store_pixel_gradients(gplanes + (n * 2 + 0) * g.gplanes() * hw, hw, p, gFt, gft);
  store_pixel_gradients(gplanes + (n * 2 + 1) * g.gplanes() * hw, hw, p, gFr, gfr);
}

// ---- vertical transpose -------------------------------------------------------------------

// Transposed vertical clamp-to-edge correlation at (y, x) of the plane gp: the filter in its form
// on the reversed samples, zero outside the plane, plus the samples the forward clamped.
template <Form F = Form::kPlain, class T>
FLIP_HD T vertical_sum_transposed(const T* gp, const Geometry& g, int64_t y, int64_t x, const FilterView<T>& f) {
  T acc = correlate<F>(f, [&](int k) {
    const int64_t i = y - k;
    return i >= 0 && i < g.h ? gp[i * g.w + x] : T(0);
  });
  const int64_t m = f.r < g.h ? f.r : g.h;
  if (y == 0)
    for (int64_t i = 0; i < m; ++i) acc = FLIP_FMADD(T, f.left[i], gp[i * g.w + x], acc);
  if (y == g.h - 1)
    for (int64_t d = 0; d < m; ++d) acc = FLIP_FMADD(T, f.right[d], gp[(g.h - 1 - d) * g.w + x], acc);
  return acc;
}

// Gradient planes gpl -> transposed-vertical planes tpl of one image, pixel (y, x).
template <class T>
FLIP_HD void vertical_transpose_pixel(const T* gpl, T* tpl, const Geometry& g, const TapsView<T>& t, int64_t y,
                                      int64_t x) {
  const int64_t hw = g.hw(), p = y * g.w + x;
  T v[kHorizontalPlanesPerImage];
  vertical_transpose_values(
      g, t,
      [&](int q, const FilterView<T>& f, auto form) {
        return vertical_sum_transposed<decltype(form)::value>(gpl + q * hw, g, y, x, f);
      },
      [&](int q, T value) { v[q] = value; });
  FLIP_UNROLL
  for (int q = 0; q < kHorizontalPlanesPerImage; ++q)  // a constant bound keeps v in registers
    if (q < g.planes()) tpl[q * hw + p] = v[q];
}

// ---- horizontal transpose -----------------------------------------------------------------

FLIP_HD int horizontal_transpose_smem_len(int B, int R, int planes) { return planes * (B + 2 * R); }

// Phase 1: load columns [x0 - R, x0 + B + R) of row y of every transposed-vertical plane, zero
// outside the image.
template <class T, class S>
FLIP_HD void horizontal_transpose_load(const T* tpl, const Geometry& g, int64_t y, int64_t x0, int B, int R, int tid,
                                       S smem) {
  const int L = B + 2 * R, np = g.planes();
  const int64_t hw = g.hw();
  for (int i = tid; i < L; i += B) {
    const int64_t xs = x0 - R + i;
    const bool in = xs >= 0 && xs < g.w;
    for (int q = 0; q < np; ++q) smem[q * L + i] = in ? tpl[q * hw + y * g.w + xs] : T(0);
  }
}

// Phase 2: gradient w.r.t. the opponent channels (g_opp, CSF) and the achromatic channel (g_yh,
// features) of pixel (y, x0 + tid). Returns false when the thread has no pixel.
template <class T, class S>
FLIP_HD bool horizontal_transpose_filter(const Geometry& g, const TapsView<T>& t, int64_t x0, int B, int R, int tid,
                                         S smem, T g_opp[3], T& g_yh) {
  const int64_t x = x0 + tid;
  if (x >= g.w) return false;
  horizontal_transpose_pixel(g, t, smem, B + 2 * R, tid + R, x, g_opp, g_yh);
  return true;
}

// ---- the per-pixel kernels: the vertical pass and one op's tail, i = n * H * W + pixel ------

template <class T>
FLIP_HD void ldr_pixel(const T* planes, T* out, const Geometry& g, const TapsView<T>& t, int64_t i, T eps,
                       const ColorConsts<T>& k) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  out[i] = vertical_ldr_flip(planes, g, t, n, p / g.w, p % g.w, eps, k);
}

template <class T>
FLIP_HD void ldr_vjp_pixel(const T* grad, const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t,
                           int64_t i, T eps, const ColorConsts<T>& k) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  vertical_ldr_flip_vjp(planes, gplanes, g, t, n, p / g.w, p % g.w, eps, k, grad[i]);
}

// csf_filter: filtered, RGB-cube-clamped linear RGB of one pixel.
template <class T>
FLIP_HD void csf_pixel(const T* planes, T* out, const Geometry& g, const TapsView<T>& t, int64_t i) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw;
  T F[3], rgb[3];
  vertical_csf(planes + n * g.planes() * hw, g, t, p / g.w, p % g.w, F);
  csf_output(F, rgb);
  for (int c = 0; c < 3; ++c) out[(n * 3 + c) * hw + p] = rgb[c];
}

template <class T>
FLIP_HD void csf_vjp_pixel(const T* grad, const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t,
                           int64_t i) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw;
  T F[3], gout[3], gF[3];
  vertical_csf(planes + n * g.planes() * hw, g, t, p / g.w, p % g.w, F);
  for (int c = 0; c < 3; ++c) gout[c] = grad[(n * 3 + c) * hw + p];
  csf_output_vjp(F, gout, gF);
  for (int c = 0; c < 3; ++c) gplanes[(n * 3 + c) * hw + p] = gF[c];
}

// feature_difference of one pixel (planes hold both images' feature planes).
template <class T>
FLIP_HD void feature_difference_pixel(const T* planes, T* out, const Geometry& g, const TapsView<T>& t, int64_t i,
                                      T eps) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw, y = p / g.w, x = p % g.w;
  Features<T> ft = vertical_features(planes + (n * 2) * g.planes() * hw, g, t, y, x);
  Features<T> fr = vertical_features(planes + (n * 2 + 1) * g.planes() * hw, g, t, y, x);
  out[i] = feature_pixel(ft, fr, eps);
}

template <class T>
FLIP_HD void feature_difference_vjp_pixel(const T* grad, const T* planes, T* gplanes, const Geometry& g,
                                          const TapsView<T>& t, int64_t i, T eps) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw, y = p / g.w, x = p % g.w;
  Features<T> f[2], gf[2];
  for (int im = 0; im < 2; ++im) f[im] = vertical_features(planes + (n * 2 + im) * g.planes() * hw, g, t, y, x);
  feature_pixel_vjp(f[0], f[1], eps, grad[i], gf[0], gf[1]);
  for (int im = 0; im < 2; ++im) store_feature_gradients(gplanes + (n * 2 + im) * g.gplanes() * hw, hw, p, gf[im]);
}

// HDR-FLIP, one exposure: fold this exposure's error into the running maximum (strict >).
template <class T>
FLIP_HD void hdr_max_pixel(const T* planes, T* out, T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t,
                           int64_t i, T eps, const ColorConsts<T>& k, const HdrStep<T>& s) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  if (!s.active(n)) return;
  const T err = vertical_ldr_flip(planes, g, t, n, p / g.w, p % g.w, eps, k);
  s.fold(err, n, i, out, emap, index);
}

// HDR-FLIP backward, one exposure: the incoming gradient of the pixels this exposure won.
template <class T>
FLIP_HD void hdr_vjp_pixel(const T* grad, const int32_t* index, const T* planes, T* gplanes, const Geometry& g,
                           const TapsView<T>& t, int64_t i, T eps, const ColorConsts<T>& k, const HdrStep<T>& s) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  if (!s.active(n)) return;
  const T gi = index[i] == s.i ? grad[i] : T(0);
  vertical_ldr_flip_vjp(planes, gplanes, g, t, n, p / g.w, p % g.w, eps, k, gi);
}

// LDR-FLIP's forward that keeps the sensitivities, pixel i = n * H * W + p: the error into out[i]
// and, for a unit gradient, the pixel's sensitivities into the kept planes of the images band b
// wants (b: the whole batch, whole_batch_plan; the layout of _ldr_flip_with_sensitivities).
template <class T>
FLIP_HD void ldr_keep_pixel(const T* planes, T* out, T* kept, const BackwardBand& b, const Geometry& g,
                            const TapsView<T>& t, int64_t i, T eps, const ColorConsts<T>& k) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw;
  T Ft[3], Fr[3], gFt[3], gFr[3];
  Features<T> ft, fr, gft, gfr;
  vertical_ldr_responses(planes, g, t, n, p / g.w, p % g.w, Ft, Fr, ft, fr);
  out[i] = pixel_flip_vjp(Ft, Fr, ft, fr, eps, k, T(1), gFt, gFr, gft, gfr);
  if (b.wanted & 1) store_pixel_gradients(b.planes(kept, n, 0, g.w), hw, p, gFt, gft);
  if (b.wanted & 2) store_pixel_gradients(b.planes(kept, n, 1, g.w), hw, p, gFr, gfr);
}

// The row passes' backward from kept sensitivities, pixel i = n * H * W + p: the kept planes of the
// images band b wants times the incoming gradient grad[i], into the gradient planes the vertical
// transpose reads (vertical_ldr_flip_vjp's layout).
template <class T>
FLIP_HD void ldr_kept_grad_pixel(const T* grad, const T* kept, T* gplanes, const BackwardBand& b, const Geometry& g,
                                 int64_t i) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw;
  for (int im = 0; im < 2; ++im) {
    if (((b.wanted >> im) & 1) == 0) continue;
    const T* src = b.planes(kept, n, im, g.w);
    T* dst = gplanes + (n * 2 + im) * g.gplanes() * hw;
    for (int c = 0; c < kResponsePlanesPerImage; ++c) dst[c * hw + p] = src[c * hw + p] * grad[i];
  }
}

}  // namespace flip
