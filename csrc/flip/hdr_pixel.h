// HDR-FLIP per pixel (docs/algorithm.md §5.2-§5.3), shared by the CPU and CUDA kernels: exposure
// compensation, tone mapping and the clamp to [0, 1], with its adjoint, and the fold of one
// exposure's error into the running maximum over exposures (HdrStep). (The automatic exposures,
// docs/algorithm.md §5.4, are computed in Python, flip_loss/hdr.py.)
// Framework-free, usable from host and device code.
#pragma once

#include <cmath>
#include <cstdint>

#include "../include/flip_loss/limits.h"
#include "color.h"
#include "tone_mapper.h"

namespace flip {

// The coefficients (k0..k5) of T(x) = (k0 x^2 + k1 x + k2) / (k3 x^2 + k4 x + k5).
struct ToneCoefficients {
  float k[6];
};

// Each tone mapper's coefficients, its registry row (flip_loss/tone_mappers.inc): NVIDIA's
// evaluator's, rounded to float as it computes them (parity; docs/algorithm.md §5.3). Reinhard's
// row is x / (1 + x), used only by the exposure solve (hdr_to_ldr applies Reinhard to the
// luminance). flip_loss._C.limits() exports the table, which the Python package's parse of the same
// rows must equal bit for bit (tests/tooling/test_one_source.py). A switch rather than an array, so
// that device code can read it.
FLIP_CONSTFN ToneCoefficients tone_coefficients(ToneMapper tm) {
  switch (tm) {
#define FLIP_TONE_MAPPER(id, name, display, kernel_row, nvidia_row) \
  case ToneMapper::id:                                              \
    return {{FLIP_TONE_ROW kernel_row}};
#include "../../flip_loss/tone_mappers.inc"
#undef FLIP_TONE_MAPPER
  }
  return {{0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f}};  // no such tone mapper: the ops' parse refuses it
}

// Every row has its six coefficients and a nonzero constant term k5 (T(0) is finite): a row with
// fewer leaves k5 at 0, which this refuses. Qualified names: the CPU kernels include this file
// inside their variant namespaces (cpu/isa.h), tone_mapper.h outside them.
constexpr bool every_tone_mapper_is_complete() {
  for (int i = 0; i < ::flip::kToneMapperCount; ++i) {
    if (tone_coefficients(static_cast<ToneMapper>(i)).k[5] == 0.0f) return false;
  }
  return true;
}
static_assert(every_tone_mapper_is_complete(), "each tone mapper's row needs six coefficients, k5 nonzero");

// Coefficient j of tone mapper tm for the per-pixel code, as selects between the table's
// constants: the last tone mapper's row unless tm is an earlier one (every value the ops' parse
// gives is below kToneMapperCount). Selects on a loop-invariant tm let GCC vectorise the CPU
// kernels' loops; a switch there, or a compare for every row, keeps them scalar (hdr_to_ldr 2.6x
// slower on its own, a CPU hdr_flip about 25% slower).
FLIP_CONSTFN float tone_coef(ToneMapper tm, int j) {
  constexpr int last = ::flip::kToneMapperCount - 1;
  float k = tone_coefficients(static_cast<ToneMapper>(last)).k[j];
  FLIP_UNROLL
  for (int i = last - 1; i >= 0; --i) {
    k = static_cast<int>(tm) == i ? tone_coefficients(static_cast<ToneMapper>(i)).k[j] : k;
  }
  return k;
}

// Exposed values beyond this saturate every tone curve (T(x) is within 1e-15 of its limit), and
// squaring them stays finite in float: larger inputs are capped here, with zero gradient.
template <class T>
FLIP_HD T hdr_cap() {
  return T(1e15);
}

template <class T>
FLIP_HD T luminance(const T x[3]) {
  return T(0.2126f) * x[0] + T(0.7152f) * x[1] + T(0.0722f) * x[2];
}

// Exposed value of one channel (negatives count as 0, capped) and its derivative d x / d v. A black
// pixel stays black whatever the scale (0 * scale would be NaN, then capped, for an infinite one).
template <class T>
FLIP_HD T expose(T v, T scale, T* dx = nullptr) {
  const T e = v > T(0) ? v * scale : T(0);
  if (dx) *dx = (v >= T(0) && e < hdr_cap<T>()) ? scale : T(0);
  return e < hdr_cap<T>() ? e : hdr_cap<T>();
}

// HDR value v (linear, one pixel) -> exposed (by scale = 2^c), tone-mapped, clamped LDR value.
template <class T>
FLIP_HD void hdr_to_ldr(const T v[3], T scale, ToneMapper tm, T out[3]) {
  T x[3];
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) x[c] = expose(v[c], scale);
  if (tm == ToneMapper::kReinhard) {
    const T f = T(1) / (T(1) + luminance(x));
    FLIP_UNROLL
    for (int c = 0; c < 3; ++c) out[c] = clamp01(x[c] * f);
    return;
  }
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) {
    const T xx = x[c] * x[c];
    const T num = xx * T(tone_coef(tm, 0)) + x[c] * T(tone_coef(tm, 1)) + T(tone_coef(tm, 2));
    const T den = xx * T(tone_coef(tm, 3)) + x[c] * T(tone_coef(tm, 4)) + T(tone_coef(tm, 5));
    out[c] = clamp01(num / den);
  }
}

// Adjoint of hdr_to_ldr: g_v = J^T g.
template <class T>
FLIP_HD void hdr_to_ldr_vjp(const T v[3], T scale, ToneMapper tm, const T g[3], T g_v[3]) {
  T x[3], dx[3];  // exposed value and d(x)/d(v)
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) x[c] = expose(v[c], scale, &dx[c]);
  if (tm == ToneMapper::kReinhard) {
    const T f = T(1) / (T(1) + luminance(x));
    const T w[3] = {T(0.2126f), T(0.7152f), T(0.0722f)};
    T gm[3], s = T(0);
    FLIP_UNROLL
    for (int c = 0; c < 3; ++c) {
      gm[c] = g[c] * inside01(x[c] * f);  // through the clamp
      s += gm[c] * x[c];
    }
    // out_c = x_c f, d out_c / d x_j = delta_cj f - x_c w_j f^2.
    FLIP_UNROLL
    for (int j = 0; j < 3; ++j) g_v[j] = (gm[j] * f - s * w[j] * f * f) * dx[j];
    return;
  }
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) {
    const T xx = x[c] * x[c];
    const T num = xx * T(tone_coef(tm, 0)) + x[c] * T(tone_coef(tm, 1)) + T(tone_coef(tm, 2));
    const T den = xx * T(tone_coef(tm, 3)) + x[c] * T(tone_coef(tm, 4)) + T(tone_coef(tm, 5));
    const T dnum = T(2) * x[c] * T(tone_coef(tm, 0)) + T(tone_coef(tm, 1));
    const T dden = T(2) * x[c] * T(tone_coef(tm, 3)) + T(tone_coef(tm, 4));
    const T q = num / den;
    // (N/D)' = (N' - (N/D) D') / D: no D^2, which overflows float for bright pixels.
    g_v[c] = dx[c] != T(0) ? g[c] * inside01(q) * ((dnum - q * dden) / den) * dx[c] : T(0);
  }
}

// One exposure of HDR-FLIP: column i of the N x E exposures (stops), used by item n when
// i < counts[n]. none() stands for "no exposure" (LDR input; its fields are never read). A count is
// read clamped into [kMinExposures, E]: the CPU ops refuse counts outside it, while on a GPU the
// counts stay on the device (reading them back to check them would synchronise every call), so
// a count out of range there cannot index past a row.
template <class T>
struct HdrStep {
  const T* exposures;
  const int64_t* counts;
  int64_t E, i;
  ToneMapper tm;
  static FLIP_HD HdrStep none() { return HdrStep{nullptr, nullptr, 0, 0, ToneMapper::kAces}; }
  FLIP_HD int64_t count(int64_t n) const {
    const int64_t c = counts[n], lo = flip_loss::kMinExposures;
    return c < lo ? lo : c > E ? E : c;
  }
  FLIP_HD bool active(int64_t n) const { return i < count(n); }
  FLIP_HD T scale(int64_t n) const { return std::exp2(exposures[n * E + i]); }
  // Folds this exposure's error at pixel p into the running maximum (strict >: ties keep the
  // earlier, darker exposure) and records it in the exposure map and index.
  FLIP_HD void fold(T err, int64_t n, int64_t p, T* out, T* emap, int32_t* index) const {
    if (err > out[p]) {
      out[p] = err;
      emap[p] = T(i) / T(count(n) > 2 ? count(n) - 1 : 1);
      index[p] = static_cast<int32_t>(i);
    }
  }
};

}  // namespace flip
