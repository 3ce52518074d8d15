// Per-pixel code shared by the CPU and CUDA kernels: the tail of LDR-FLIP (filtered opponent
// colours and feature responses of both images -> the error value) and its adjoint, the layout
// of the gradient planes it writes, the Hunt/HyAB op of one pixel, and the finiteness test.
#pragma once

#include <cstdint>

#include "color.h"
#include "plane_counts.h"

namespace flip {

// Feature responses of one pixel: dx, dy, ddx, ddy.
template <class T>
struct Features {
  T dx, dy, ddx, ddy;
};
static_assert(sizeof(Features<float>) == kFeatureResponses * sizeof(float), "one member per feature response");

// The feature error of one pixel from both images' feature responses: the feature_difference op
// and the feature term of FLIP.
template <class T>
FLIP_HD T feature_pixel(const Features<T>& ft, const Features<T>& fr, T eps) {
  return feature_error(magnitude(ft.dx, ft.dy), magnitude(fr.dx, fr.dy), magnitude(ft.ddx, ft.ddy),
                       magnitude(fr.ddx, fr.ddy), eps);
}

template <class T>
FLIP_HD void filtered_to_hunt_lab(const T F[3], T hl[3]) {
  T lin[3];
  opponent_to_linear(F, lin);
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) lin[c] = clamp01(lin[c]);
  hunt_lab(lin, hl);
}

template <class T>
FLIP_HD T pixel_flip(const T Ft[3], const T Fr[3], const Features<T>& ft, const Features<T>& fr, T eps,
                     const ColorConsts<T>& k) {
  T ht[3], hr[3];
  filtered_to_hunt_lab(Ft, ht);
  filtered_to_hunt_lab(Fr, hr);
  return combine(color_error(ht, hr, eps, k), feature_pixel(ft, fr, eps));
}

// Everything the adjoint of "filtered opponent colour -> Hunt-Lab" needs, computed once.
template <class T>
struct LabState {
  T pre[3];  // linear RGB before the RGB-cube clamp
  HuntLab<T> lab;
};

template <class T>
FLIP_HD void lab_state(const T F[3], LabState<T>& s) {
  T lin[3];
  opponent_to_linear(F, s.pre);
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) lin[c] = clamp01(s.pre[c]);
  hunt_lab_state(lin, s.lab, true);
}

// Gradient w.r.t. the filtered opponent colour F, given the gradient g w.r.t. its Hunt-Lab colour.
template <class T>
FLIP_HD void lab_state_vjp(const LabState<T>& s, const T g[3], T g_F[3]) {
  T g_lin[3];
  hunt_lab_state_vjp(s.lab, g, g_lin);
  FLIP_UNROLL
  for (int j = 0; j < 3; ++j) g_lin[j] *= inside_gamut(s.pre[j]);
  opponent_to_linear_vjp(g_lin, g_F);
}

template <class T>
FLIP_HD void features_vjp(const Features<T>& f, T g_edge, T g_point, Features<T>& g) {
  norm2_vjp(f.dx, f.dy, g_edge, g.dx, g.dy);
  norm2_vjp(f.ddx, f.ddy, g_point, g.ddx, g.ddy);
}

// Returns the error value; writes the gradients of g * value w.r.t. both images' filtered
// colours and feature responses (only the test image's with kWantRef false, only the reference's
// with kWantTest false: the other outputs are then left unwritten and their work is skipped).
template <bool kWantTest = true, bool kWantRef = true, class T>
FLIP_HD T pixel_flip_vjp(const T Ft[3], const T Fr[3], const Features<T>& ft, const Features<T>& fr, T eps,
                         const ColorConsts<T>& k, T g, T gFt[3], T gFr[3], Features<T>& gft, Features<T>& gfr) {
  LabState<T> st, sr;
  lab_state(Ft, st);
  lab_state(Fr, sr);
  const ColorTerm<T> ct = color_term(st.lab.hl, sr.lab.hl, eps, k);
  T et = magnitude(ft.dx, ft.dy), er = magnitude(fr.dx, fr.dy);
  T pt = magnitude(ft.ddx, ft.ddy), pr = magnitude(fr.ddx, fr.ddy);
  T f = feature_error(et, er, pt, pr, eps);
  T value = combine(ct.c, f);
  T gc, gf, ght[3], ghr[3];
  combine_vjp(ct.c, f, value, g, gc, gf);
  color_term_vjp(ct, eps, k, gc, ght, ghr);
  if constexpr (kWantTest) lab_state_vjp(st, ght, gFt);
  if constexpr (kWantRef) lab_state_vjp(sr, ghr, gFr);
  T gep[4];
  feature_error_vjp(et, er, pt, pr, eps, gf, gep);
  if constexpr (kWantTest) features_vjp(ft, gep[0], gep[2], gft);
  if constexpr (kWantRef) features_vjp(fr, gep[1], gep[3], gfr);
  return value;
}

// ---- the single-stage ops of one pixel ----

// csf_filter: filtered opponent colour F -> RGB-cube-clamped linear RGB, and the adjoint.
template <class T>
FLIP_HD void csf_output(const T F[3], T out[3]) {
  T lin[3];
  opponent_to_linear(F, lin);
  for (int c = 0; c < 3; ++c) out[c] = clamp01(lin[c]);
}

template <class T>
FLIP_HD void csf_output_vjp(const T F[3], const T g[3], T gF[3]) {
  T lin[3], gl[3];
  opponent_to_linear(F, lin);
  for (int c = 0; c < 3; ++c) gl[c] = g[c] * inside_gamut(lin[c]);
  opponent_to_linear_vjp(gl, gF);
}

// feature_difference's adjoint (the op is feature_pixel, above).
template <class T>
FLIP_HD void feature_pixel_vjp(const Features<T>& ft, const Features<T>& fr, T eps, T g, Features<T>& gft,
                               Features<T>& gfr) {
  T gep[4];
  feature_error_vjp(magnitude(ft.dx, ft.dy), magnitude(fr.dx, fr.dy), magnitude(ft.ddx, ft.ddy),
                    magnitude(fr.ddx, fr.ddy), eps, g, gep);
  features_vjp(ft, gep[0], gep[2], gft);
  features_vjp(fr, gep[1], gep[3], gfr);
}

// ---- gradient planes: what the backward passes store per pixel, before the transposed filters ----
// kResponsePlanesPerImage planes per image (plane_counts.h): the filtered colour F0..F2, then the
// features dx, dy, ddx, ddy.

// The feature gradients of one image's pixel p into 4 planes of hw samples: dx, dy, ddx, ddy.
template <class T>
FLIP_HD void store_feature_gradients(T* planes, int64_t hw, int64_t p, const Features<T>& g) {
  planes[p] = g.dx;
  planes[hw + p] = g.dy;
  planes[2 * hw + p] = g.ddx;
  planes[3 * hw + p] = g.ddy;
}

// Both gradients of one image's pixel p into 7 planes: filtered colour F0..F2, then the features.
template <class T>
FLIP_HD void store_pixel_gradients(T* planes, int64_t hw, int64_t p, const T gF[3], const Features<T>& g) {
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) planes[c * hw + p] = gF[c];
  store_feature_gradients(planes + 3 * hw, hw, p, g);
}

// NaN and infinities give v - v = NaN (no fast-math anywhere in this project).
template <class T>
FLIP_HD bool is_finite(T v) {
  return v - v == T(0);
}

// ---- hunt_hyab of pixel i = n * hw + p (images N x 3 x H x W); false for a non-finite input ----

// Loads the colours of pixel p of item n of both images into lt, lr; false if one is not finite.
template <class T>
FLIP_HD bool load_pixel_pair(const T* test, const T* ref, int64_t hw, int64_t n, int64_t p, T lt[3], T lr[3]) {
  bool ok = true;
  for (int c = 0; c < 3; ++c) {
    lt[c] = test[(n * 3 + c) * hw + p];
    lr[c] = ref[(n * 3 + c) * hw + p];
    ok = ok && is_finite(lt[c]) && is_finite(lr[c]);
  }
  return ok;
}

template <class T>
FLIP_HD bool hunt_hyab_pixel(const T* test, const T* ref, T* out, int64_t hw, int64_t i, T eps,
                             const ColorConsts<T>& k) {
  const int64_t n = i / hw, p = i % hw;
  T lt[3], lr[3], ht[3], hr[3];
  const bool ok = load_pixel_pair(test, ref, hw, n, p, lt, lr);
  hunt_lab(lt, ht);
  hunt_lab(lr, hr);
  out[i] = color_error(ht, hr, eps, k);
  return ok;
}

// Its adjoint; g_test / g_ref may be null (not wanted).
template <class T>
FLIP_HD bool hunt_hyab_vjp_pixel(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, int64_t hw, int64_t i,
                                 T eps, const ColorConsts<T>& k) {
  const int64_t n = i / hw, p = i % hw;
  T lt[3], lr[3], ht[3], hr[3], ght[3], ghr[3], gt[3], gr[3];
  const bool ok = load_pixel_pair(test, ref, hw, n, p, lt, lr);
  hunt_lab(lt, ht);
  hunt_lab(lr, hr);
  color_error_vjp(ht, hr, eps, k, grad[i], ght, ghr);
  hunt_lab_vjp(lt, ght, gt);
  hunt_lab_vjp(lr, ghr, gr);
  for (int c = 0; c < 3; ++c) {
    if (g_test) g_test[(n * 3 + c) * hw + p] = gt[c];
    if (g_ref) g_ref[(n * 3 + c) * hw + p] = gr[c];
  }
  return ok;
}

}  // namespace flip
