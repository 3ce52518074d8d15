// Per-pixel colour transforms of FLIP and their adjoints (vector-Jacobian products).
// Header-only, framework-free, usable from host and device code.
#pragma once

#include <cmath>

#include "constants.h"
#include "fastmath.h"

#if defined(__CUDACC__)
#define FLIP_HD __host__ __device__ __forceinline__
#define FLIP_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
// Always inlined and the small loops unrolled before the loop vectoriser runs, so that a per-pixel
// loop of the CPU kernels is one loop body without calls or inner loops, which GCC vectorises
// across pixels (its size heuristics would otherwise leave calls that keep the loop scalar).
#define FLIP_HD inline __attribute__((always_inline))
#define FLIP_UNROLL _Pragma("GCC unroll 4")
#else
#define FLIP_HD inline
#define FLIP_UNROLL
#endif

namespace flip {

template <class T>
struct ColorConsts {
  T cmax, pccmax;
};

template <class T>
FLIP_HD T clamp01(T v) {
  return v < T(0) ? T(0) : (v > T(1) ? T(1) : v);
}

template <class T>
FLIP_HD T inside01(T v) {  // derivative of clamp01: the closed interval passes (docs/algorithm.md §7.4)
  return (v >= T(0) && v <= T(1)) ? T(1) : T(0);
}

// The gamut clamp's derivative (clamp #2, after the colour round trip YCxCz -> linear RGB). A flat
// channel at 0 or 1 (black, white, a saturated colour) lands on the RGB cube's face only in exact
// arithmetic: rounding puts it up to ~1e-6 (float32) or ~1e-15 (float64) to either side, and the
// side depends on the implementation (CPU or GPU library functions, operation order). So the
// gradient passes within a slack of about 10x float32's noise outside the cube too: every device
// and dtype then passes a flat saturated channel its gradient, as the exact value on the face
// would (docs/algorithm.md §7.4). The same slack for every dtype, so that float32 and float64
// disagree only within rounding of the slack's edge, where nothing piles up, rather than at the
// face, where every flat saturated channel lies. The value is clamped exactly.
template <class T>
FLIP_HD constexpr T gamut_gradient_slack() {
  return T(1e-5);
}

template <class T>
FLIP_HD T inside_gamut(T v) {
  return (v >= -gamut_gradient_slack<T>() && v <= T(1) + gamut_gradient_slack<T>()) ? T(1) : T(0);
}

// |(u, v)|: HyAB's chroma distance, and the edge and point magnitudes of the feature responses.
template <class T>
FLIP_HD T magnitude(T u, T v) {
  return std::sqrt(u * u + v * v);
}

// sRGB decoding of c and its derivative from one power: with u = (c + 0.055) / 1.055,
// decode = u^2.4 = u * u^1.4 and decode' = (2.4 / 1.055) u^1.4. The power runs on max(c, knee) so
// that it never sees a negative base.
template <class T>
FLIP_HD T srgb_decode(T c, T* deriv = nullptr) {
  T u = (c > T(kSrgbKnee) ? c : T(kSrgbKnee)) * T(1.0 / 1.055) + T(0.055 / 1.055);
  T p = math::pow_seven_fifths(u);
  if (deriv) *deriv = c <= T(kSrgbKnee) ? T(1.0 / 12.92) : T(2.4 / 1.055) * p;
  return c <= T(kSrgbKnee) ? c * T(1.0 / 12.92) : u * p;
}

// Input stage: input value -> clamped linear value, with d(linear)/d(input) if asked.
template <class T>
FLIP_HD T input_to_linear(T v, bool srgb, T* deriv = nullptr) {
  T c = clamp01(v);
  T d = T(1);
  T lin = srgb ? srgb_decode(c, &d) : c;
  if (deriv) *deriv = (v >= T(0) && v <= T(1)) ? d : T(0);
  return lin;
}

template <class T>
FLIP_HD void rgb_to_xyz(const T rgb[3], T xyz[3]) {
  FLIP_UNROLL
  for (int i = 0; i < 3; ++i)
    xyz[i] = T(rgb_to_xyz_m(i, 0)) * rgb[0] + T(rgb_to_xyz_m(i, 1)) * rgb[1] + T(rgb_to_xyz_m(i, 2)) * rgb[2];
}

// Linear RGB -> YCxCz ("linear Lab"): Y = 116 y - 16, Cx = 500 (x - y), Cz = 200 (y - z).
template <class T>
FLIP_HD void linear_to_opponent(const T rgb[3], T opp[3]) {
  T xyz[3];
  rgb_to_xyz(rgb, xyz);
  T x = xyz[0] * T(inv_white(0)), y = xyz[1] * T(inv_white(1)), z = xyz[2] * T(inv_white(2));
  opp[0] = T(116) * y - T(16);
  opp[1] = T(500) * (x - y);
  opp[2] = T(200) * (y - z);
}

// Adjoint of linear_to_opponent: g_rgb = J^T g_opp.
template <class T>
FLIP_HD void linear_to_opponent_vjp(const T g_opp[3], T g_rgb[3]) {
  T gx = T(500) * g_opp[1];
  T gy = T(116) * g_opp[0] - T(500) * g_opp[1] + T(200) * g_opp[2];
  T gz = T(-200) * g_opp[2];
  T gX = gx * T(inv_white(0)), gY = gy * T(inv_white(1)), gZ = gz * T(inv_white(2));
  FLIP_UNROLL
  for (int j = 0; j < 3; ++j)
    g_rgb[j] = T(rgb_to_xyz_m(0, j)) * gX + T(rgb_to_xyz_m(1, j)) * gY + T(rgb_to_xyz_m(2, j)) * gZ;
}

// The achromatic channel the feature detectors filter: y of Y = 116 y - 16, in [0, 1] for colours
// in the RGB cube.
template <class T>
FLIP_HD T achromatic(const T opp[3]) {
  return (opp[0] + T(16)) * T(1.0 / 116.0);
}

// Gradient w.r.t. linear RGB from those w.r.t. its opponent colour and its achromatic channel.
template <class T>
FLIP_HD void opponent_and_achromatic_vjp(const T g_opp[3], T g_achromatic, T g_rgb[3]) {
  const T go[3] = {g_opp[0] + g_achromatic * T(1.0 / 116.0), g_opp[1], g_opp[2]};
  linear_to_opponent_vjp(go, g_rgb);
}

// YCxCz -> linear RGB (no clamp).
template <class T>
FLIP_HD void opponent_to_linear(const T opp[3], T rgb[3]) {
  T y = achromatic(opp);
  T x = y + opp[1] * T(1.0 / 500.0);
  T z = y - opp[2] * T(1.0 / 200.0);
  T X = x * T(white(0)), Y = y * T(white(1)), Z = z * T(white(2));
  FLIP_UNROLL
  for (int i = 0; i < 3; ++i)
    rgb[i] = T(xyz_to_rgb_m(i, 0)) * X + T(xyz_to_rgb_m(i, 1)) * Y + T(xyz_to_rgb_m(i, 2)) * Z;
}

template <class T>
FLIP_HD void opponent_to_linear_vjp(const T g_rgb[3], T g_opp[3]) {
  T gXYZ[3];
  FLIP_UNROLL
  for (int j = 0; j < 3; ++j)
    gXYZ[j] = T(xyz_to_rgb_m(0, j)) * g_rgb[0] + T(xyz_to_rgb_m(1, j)) * g_rgb[1] + T(xyz_to_rgb_m(2, j)) * g_rgb[2];
  T gx = gXYZ[0] * T(white(0)), gy = gXYZ[1] * T(white(1)), gz = gXYZ[2] * T(white(2));
  g_opp[0] = (gy + gx + gz) * T(1.0 / 116.0);
  g_opp[1] = gx * T(1.0 / 500.0);
  g_opp[2] = -gz * T(1.0 / 200.0);
}

// Linear RGB -> CIELAB -> Hunt-adjusted (L, 0.01 L a, 0.01 L b), keeping what the adjoint needs.
template <class T>
struct HuntLab {
  T df[3];  // Lab f'(t) per XYZ channel (when asked for)
  T L, a, b;
  T hl[3];  // the Hunt-adjusted colour
};

template <class T>
FLIP_HD void hunt_lab_state(const T rgb[3], HuntLab<T>& s, bool with_deriv) {
  T xyz[3], f[3];
  rgb_to_xyz(rgb, xyz);
  FLIP_UNROLL
  for (int i = 0; i < 3; ++i) {
    const T t = xyz[i] * T(inv_white(i));
    // Cube-root branch on max(t, delta^3): the unselected branch never has an infinite slope.
    const T c = math::cbrt(t > T(kLabDelta3) ? t : T(kLabDelta3));
    f[i] = t > T(kLabDelta3) ? c : t * T(kLabLinSlope) + T(kLabLinOffset);
    if (with_deriv) s.df[i] = t > T(kLabDelta3) ? T(1) / (T(3) * c * c) : T(kLabLinSlope);
  }
  s.L = T(116) * f[1] - T(16);
  s.a = T(500) * (f[0] - f[1]);
  s.b = T(200) * (f[1] - f[2]);
  s.hl[0] = s.L;
  s.hl[1] = T(0.01) * s.L * s.a;
  s.hl[2] = T(0.01) * s.L * s.b;
}

// Gradient w.r.t. the linear RGB of a hunt_lab_state(..., true), given the gradient g of hl.
template <class T>
FLIP_HD void hunt_lab_state_vjp(const HuntLab<T>& s, const T g[3], T g_rgb[3]) {
  const T gL = g[0] + T(0.01) * (g[1] * s.a + g[2] * s.b);
  const T ga = T(0.01) * s.L * g[1];
  const T gb = T(0.01) * s.L * g[2];
  const T gX = T(500) * ga * s.df[0] * T(inv_white(0));
  const T gY = (T(116) * gL - T(500) * ga + T(200) * gb) * s.df[1] * T(inv_white(1));
  const T gZ = T(-200) * gb * s.df[2] * T(inv_white(2));
  FLIP_UNROLL
  for (int j = 0; j < 3; ++j)
    g_rgb[j] = T(rgb_to_xyz_m(0, j)) * gX + T(rgb_to_xyz_m(1, j)) * gY + T(rgb_to_xyz_m(2, j)) * gZ;
}

template <class T>
FLIP_HD void hunt_lab(const T rgb[3], T out[3]) {
  HuntLab<T> s;
  hunt_lab_state(rgb, s, false);
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) out[c] = s.hl[c];
}

template <class T>
FLIP_HD void hunt_lab_vjp(const T rgb[3], const T g[3], T g_rgb[3]) {
  HuntLab<T> s;
  hunt_lab_state(rgb, s, true);
  hunt_lab_state_vjp(s, g, g_rgb);
}

// The colour term of one pixel with every intermediate its adjoint needs: HyAB distance of two
// Hunt-Lab colours with the L term regularised as sqrt(max(dL^2, eps)), then ^qc and the
// redistribution to dE_c in [0, 1].
static_assert(kQc == 0.7, "color_term raises dE to qc with pow_seven_tenths");

template <class T>
struct ColorTerm {
  T dL, da, db, dL2, nL, nab, dE, e, c;
};

template <class T>
FLIP_HD T hyab(const T ht[3], const T hr[3], T eps) {
  T dL = hr[0] - ht[0], da = hr[1] - ht[1], db = hr[2] - ht[2];
  T dL2 = dL * dL;
  return std::sqrt(dL2 > eps ? dL2 : eps) + magnitude(da, db);
}

template <class T>
FLIP_HD T redistribute(T e, const ColorConsts<T>& k) {
  return e < k.pccmax ? e * (T(kPt) / k.pccmax) : T(kPt) + (e - k.pccmax) / (k.cmax - k.pccmax) * T(1 - kPt);
}

template <class T>
FLIP_HD ColorTerm<T> color_term(const T ht[3], const T hr[3], T eps, const ColorConsts<T>& k) {
  ColorTerm<T> s;
  s.dL = hr[0] - ht[0];
  s.da = hr[1] - ht[1];
  s.db = hr[2] - ht[2];
  s.dL2 = s.dL * s.dL;
  s.nL = std::sqrt(s.dL2 > eps ? s.dL2 : eps);
  s.nab = magnitude(s.da, s.db);
  s.dE = s.nL + s.nab;
  s.e = math::pow_seven_tenths(s.dE);
  s.c = redistribute(s.e, k);
  return s;
}

// Below this chroma difference |(da, db)| (Hunt-Lab units), the difference is rounding noise of
// the colour transforms: grey pixels get a and b of up to ~4e-5 in float32 and ~5e-14 in float64
// instead of 0, so the direction of (da, db) is random and float32 and float64 gradients would
// disagree. There the chroma term passes no gradient (its minimum-norm subgradient at 0); its
// value is unchanged. About 20x the noise of each dtype, and far below a visible difference (~1).
// See docs/algorithm.md §7.11.
template <class T>
FLIP_HD constexpr T chroma_gradient_floor() {
  return sizeof(T) >= 8 ? T(1e-12) : T(1e-3);
}

// Adjoint of the colour term w.r.t. both Hunt-Lab colours, for an incoming gradient g of dE_c.
template <class T>
FLIP_HD void color_term_vjp(const ColorTerm<T>& s, T eps, const ColorConsts<T>& k, T g, T g_ht[3], T g_hr[3]) {
  T slope = s.e < k.pccmax ? T(kPt) / k.pccmax : T(1 - kPt) / (k.cmax - k.pccmax);
  T gdE = s.dE > T(0) ? g * slope * T(kQc) * s.e / s.dE : T(0);
  // The bound of max(dL^2, eps) passes the gradient, as the clamps do (docs/algorithm.md §7.4);
  // sqrt(dL^2) has slope sign(dL).
  T gL = (s.dL2 >= eps && s.dL2 > T(0)) ? gdE * s.dL / s.nL : T(0);
  const bool chroma = s.nab > chroma_gradient_floor<T>();
  T ga = chroma ? gdE * s.da / s.nab : T(0);
  T gb = chroma ? gdE * s.db / s.nab : T(0);
  g_hr[0] = gL;
  g_hr[1] = ga;
  g_hr[2] = gb;
  g_ht[0] = -gL;
  g_ht[1] = -ga;
  g_ht[2] = -gb;
}

// Colour error dE_c in [0, 1] from two Hunt-Lab colours.
template <class T>
FLIP_HD T color_error(const T ht[3], const T hr[3], T eps, const ColorConsts<T>& k) {
  return color_term(ht, hr, eps, k).c;
}

template <class T>
FLIP_HD void color_error_vjp(const T ht[3], const T hr[3], T eps, const ColorConsts<T>& k, T g, T g_ht[3], T g_hr[3]) {
  color_term_vjp(color_term(ht, hr, eps, k), eps, k, g, g_ht, g_hr);
}

static_assert(kQf == 0.5, "feature_error raises to qf with a square root");

// Feature error dE_f from edge and point magnitudes of test (t) and reference (r).
template <class T>
FLIP_HD T feature_error(T edge_t, T edge_r, T point_t, T point_r, T eps) {
  T de = std::fabs(edge_r - edge_t), dp = std::fabs(point_r - point_t);
  T raw = (de >= dp ? de : dp) * T(0.70710678118654752440);
  return std::sqrt(raw > eps ? raw : eps);
}

// Adjoint of feature_error: gradients w.r.t. edge_t, edge_r, point_t, point_r.
template <class T>
FLIP_HD void feature_error_vjp(T edge_t, T edge_r, T point_t, T point_r, T eps, T g, T out[4]) {
  T de = edge_r - edge_t, dp = point_r - point_t;
  T ade = std::fabs(de), adp = std::fabs(dp);
  bool use_edge = ade >= adp;
  T raw = (use_edge ? ade : adp) * T(0.70710678118654752440);
  T graw = (raw >= eps && raw > T(0)) ? g * T(0.5) / std::sqrt(raw) : T(0);
  T gm = graw * T(0.70710678118654752440);
  T s = use_edge ? (de > T(0) ? gm : (de < T(0) ? -gm : T(0))) : (dp > T(0) ? gm : (dp < T(0) ? -gm : T(0)));
  out[0] = use_edge ? -s : T(0);
  out[1] = use_edge ? s : T(0);
  out[2] = use_edge ? T(0) : -s;
  out[3] = use_edge ? T(0) : s;
}

// Gradient of a Euclidean norm sqrt(u^2 + v^2), zero at the origin.
template <class T>
FLIP_HD void norm2_vjp(T u, T v, T g, T& gu, T& gv) {
  T n = magnitude(u, v);
  gu = n > T(0) ? g * u / n : T(0);
  gv = n > T(0) ? g * v / n : T(0);
}

// Final combination FLIP = dE_c ^ (1 - dE_f).
template <class T>
FLIP_HD T combine(T c, T f) {
  return math::pow(c, T(1) - f);
}

// Adjoint of combine, given its value v = c^(1 - f).
template <class T>
FLIP_HD void combine_vjp(T c, T f, T v, T g, T& gc, T& gf) {
  gc = c > T(0) ? g * (T(1) - f) * v / c : T(0);
  gf = c > T(0) ? -g * v * math::log(c) : T(0);
}

template <class T>
inline ColorConsts<T> color_consts() {
  T green[3] = {T(0), T(1), T(0)}, blue[3] = {T(0), T(0), T(1)};
  T hg[3], hb[3];
  hunt_lab(green, hg);
  hunt_lab(blue, hb);
  T cmax = math::pow_seven_tenths(hyab(hg, hb, T(0)));
  return ColorConsts<T>{cmax, T(kPc) * cmax};
}

}  // namespace flip
