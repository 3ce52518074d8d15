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
  T c = color_error(ht, hr, eps, k);
  T f = feature_error(std::sqrt(ft.dx * ft.dx + ft.dy * ft.dy), std::sqrt(fr.dx * fr.dx + fr.dy * fr.dy),
                      std::sqrt(ft.ddx * ft.ddx + ft.ddy * ft.ddy),
                      std::sqrt(fr.ddx * fr.ddx + fr.ddy * fr.ddy), eps);
  return combine(c, f);
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
  for (int j = 0; j < 3; ++j) g_lin[j] *= inside01(s.pre[j]);
  opponent_to_linear_vjp(g_lin, g_F);
}

template <class T>
FLIP_HD void features_vjp(const Features<T>& f, T g_edge, T g_point, Features<T>& g) {
  norm2_vjp(f.dx, f.dy, g_edge, g.dx, g.dy);
  norm2_vjp(f.ddx, f.ddy, g_point, g.ddx, g.ddy);
}

// Returns the error value; writes the gradients of g * value w.r.t. both images' filtered
// colours and feature responses.
template <class T>
FLIP_HD T pixel_flip_vjp(const T Ft[3], const T Fr[3], const Features<T>& ft, const Features<T>& fr,
                         T eps, const ColorConsts<T>& k, T g, T gFt[3], T gFr[3], Features<T>& gft,
                         Features<T>& gfr) {
  LabState<T> st, sr;
  lab_state(Ft, st);
  lab_state(Fr, sr);
  const ColorTerm<T> ct = color_term(st.lab.hl, sr.lab.hl, eps, k);
  T et = std::sqrt(ft.dx * ft.dx + ft.dy * ft.dy), er = std::sqrt(fr.dx * fr.dx + fr.dy * fr.dy);
  T pt = std::sqrt(ft.ddx * ft.ddx + ft.ddy * ft.ddy), pr = std::sqrt(fr.ddx * fr.ddx + fr.ddy * fr.ddy);
  T f = feature_error(et, er, pt, pr, eps);
  T value = combine(ct.c, f);
  T gc, gf, ght[3], ghr[3];
  combine_vjp(ct.c, f, value, g, gc, gf);
  color_term_vjp(ct, eps, k, gc, ght, ghr);
  lab_state_vjp(st, ght, gFt);
  lab_state_vjp(sr, ghr, gFr);
  T gep[4];
  feature_error_vjp(et, er, pt, pr, eps, gf, gep);
  features_vjp(ft, gep[0], gep[2], gft);
  features_vjp(fr, gep[1], gep[3], gfr);
  return value;
}

}  // namespace flip
