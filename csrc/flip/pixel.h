// Per-pixel tail of LDR-FLIP: filtered opponent colours and feature responses of both images ->
// the error value, and its adjoint. Shared by the CPU and CUDA kernels.
#pragma once

#include "color.h"

namespace flip {

// Feature responses of one pixel: dx, dy, ddx, ddy.
template <class T>
struct Features {
  T dx, dy, ddx, ddy;
};

template <class T>
FLIP_HD void filtered_to_hunt_lab(const T F[3], T hl[3]) {
  T lin[3];
  opponent_to_linear(F, lin);
#pragma unroll
  for (int c = 0; c < 3; ++c) lin[c] = clamp01(lin[c]);
  hunt_lab(lin, hl);
}

template <class T>
FLIP_HD T pixel_flip(const T Ft[3], const T Fr[3], const Features<T>& ft, const Features<T>& fr, T eps,
                     const ColorConsts<T>& k) {
  T ht[3], hr[3];
  filtered_to_hunt_lab(Ft, ht);
  filtered_to_hunt_lab(Fr, hr);
  T c = color_error(ht, hr, eps, k);
  T f = feature_error(std::sqrt(ft.dx * ft.dx + ft.dy * ft.dy), std::sqrt(fr.dx * fr.dx + fr.dy * fr.dy),
                      std::sqrt(ft.ddx * ft.ddx + ft.ddy * ft.ddy),
                      std::sqrt(fr.ddx * fr.ddx + fr.ddy * fr.ddy), eps);
  return combine(c, f);
}

// Adjoint of the colour half: gradient w.r.t. the filtered opponent colour F of one image,
// given the gradient g_hl w.r.t. its Hunt-Lab colour.
template <class T>
FLIP_HD void filtered_to_hunt_lab_vjp(const T F[3], const T g_hl[3], T g_F[3]) {
  T pre[3], lin[3], g_lin[3];
  opponent_to_linear(F, pre);
#pragma unroll
  for (int c = 0; c < 3; ++c) lin[c] = clamp01(pre[c]);
  hunt_lab_vjp(lin, g_hl, g_lin);
#pragma unroll
  for (int c = 0; c < 3; ++c) g_lin[c] *= inside01(pre[c]);
  opponent_to_linear_vjp(g_lin, g_F);
}

template <class T>
FLIP_HD void features_vjp(const Features<T>& f, T g_edge, T g_point, Features<T>& g) {
  norm2_vjp(f.dx, f.dy, g_edge, g.dx, g.dy);
  norm2_vjp(f.ddx, f.ddy, g_point, g.ddx, g.ddy);
}

// Returns the error value; writes the gradients of g * value w.r.t. both images' inputs.
template <class T>
FLIP_HD T pixel_flip_vjp(const T Ft[3], const T Fr[3], const Features<T>& ft, const Features<T>& fr,
                         T eps, const ColorConsts<T>& k, T g, T gFt[3], T gFr[3], Features<T>& gft,
                         Features<T>& gfr) {
  T ht[3], hr[3];
  filtered_to_hunt_lab(Ft, ht);
  filtered_to_hunt_lab(Fr, hr);
  T c = color_error(ht, hr, eps, k);
  T et = std::sqrt(ft.dx * ft.dx + ft.dy * ft.dy), er = std::sqrt(fr.dx * fr.dx + fr.dy * fr.dy);
  T pt = std::sqrt(ft.ddx * ft.ddx + ft.ddy * ft.ddy), pr = std::sqrt(fr.ddx * fr.ddx + fr.ddy * fr.ddy);
  T f = feature_error(et, er, pt, pr, eps);
  T gc, gf;
  combine_vjp(c, f, g, gc, gf);
  T ght[3], ghr[3];
  color_error_vjp(ht, hr, eps, k, gc, ght, ghr);
  filtered_to_hunt_lab_vjp(Ft, ght, gFt);
  filtered_to_hunt_lab_vjp(Fr, ghr, gFr);
  T gep[4];
  feature_error_vjp(et, er, pt, pr, eps, gf, gep);
  features_vjp(ft, gep[0], gep[2], gft);
  features_vjp(fr, gep[1], gep[3], gfr);
  return combine(c, f);
}

}  // namespace flip
