// The GPU formulation of FLIP's filter banks, as per-thread functions that run unchanged on the
// host. The CUDA kernels' block code (csrc/flip/cuda/blocks.h) calls them between its barriers; the
// test-only emulator (tests/emulator) runs that very block code, one fiber per CUDA thread, so that
// the CPU test suite checks the GPU index math and barriers. Shared memory comes in as a template
// parameter (S, P): T* on the GPU, a checked handle in the emulator. The per-pixel code the CPU
// kernels share with them is in pixel.h and hdr_pixel.h. docs/algorithm.md §8.8 describes the
// three formulations and their memory.
//
// LDR-FLIP and HDR-FLIP (one launch per exposure, or two per exposure and band):
//   fused forward   one block per walk down kWalkTiles tiles of kTileW x kTileH: input tile + R
//                   halo, horizontal and vertical filters and the per-pixel tail in shared memory,
//                   the 2R horizontal-output rows two tiles share kept between them; writes the map
//                   only.
//   tiled backward  per band of rows (plan_backward, scratch within kBackwardScratchBytes):
//                   kTiledGrad = the fused forward's phases + the per-pixel adjoint, writing the
//                   gradient planes of the images whose gradient is wanted; kTiledTranspose = those planes'
//                   tile + R halo, transposed vertical and horizontal filters in shared memory, the
//                   chain to the input. Nothing runs for an image whose gradient is not wanted,
//                   nor (HDR-FLIP) for a tile that the exposure won nowhere near (tile_won).
//   kept            LDR-FLIP's autograd keeping the sensitivities (whole_batch_plan): kTiledGrad
//                   over the whole batch for a unit gradient, writing them and the map; kTiledTranspose
//                   on them times the incoming gradient.
// Row passes (every op's single stages, and LDR/HDR-FLIP where the tiles' shared memory does not
// fit or FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1; each a launch; planes in global memory, H x W each):
//   H   one block per (row, image, x-tile): phase 1 loads the tile and its halo into shared
//       memory (converting the input), phase 2 writes the horizontal filter outputs.
//   V   one thread per pixel: vertical filters of the H planes + the per-pixel tail.
//   VT  one thread per pixel: transposed vertical filters of the gradient planes.
//   HT  like H: transposed horizontal filters, then the chain back to the op's input.
// Planes of one image: 0-3 CSF (Y, Cx, Cz1, Cz2), then 3 feature planes (g, dg, ddg) when present.
// Every output value is written by one thread (HDR-FLIP's gradients: once per exposure, in order):
// no atomics, the same result on every run.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "filters.h"
#include "pixel.h"
#include "hdr_pixel.h"

namespace flip {

// Threads per block of the H and HT passes (one row tile of kBlock pixels) and of the per-pixel
// kernels; threads per block of the fused forward (kTileW x kTileH tiles, below).
constexpr int kBlock = 128;
constexpr int kFusedThreads = 256;

// One filter of the banks with its radius known at run time: the taps in memory.
template <class T>
struct FilterView {
  using value_type = T;
  static constexpr bool kFixedRadius = false;
  const T* w;      // 2r + 1 taps
  const T* left;   // r border sums (see Filter1D)
  const T* right;  // r border sums
  int r;
};

// The same with radius R fixed at compile time, so that the filter loops unroll and each tap sits at
// a constant offset from w (the tiled kernels point w into their parameter space, where a tap is an
// operand of the multiply-add instead of a load; see cuda/params.h, FixedRadii).
template <class T, int R>
struct FixedFilter {
  using value_type = T;
  static constexpr bool kFixedRadius = true;
  static constexpr int r = R;
  const T* w;
  const T* left;
  const T* right;
};

// The filters in their forms (filters.h): the CSF ones (type C: all of the CSF radius) and g in
// Form::kPlain, dg in Form::kOdd, ddg in Form::kCentred (type Fe: the feature radius). rmax is the
// larger radius, the halo of a tile.
template <class C, class Fe = C>
struct FilterBank {
  using value_type = typename C::value_type;
  C y, cx, cz1, cz2;
  Fe g, dg, ddg;
  int rmax;
};
template <class T>
using TapsView = FilterBank<FilterView<T>>;

// FLIP_FMADD(T, a, b, c): a * b + c in type T, rounded once: the one fused multiply-add of the GPU
// code, used by the filter taps' sums below and nowhere else. Device code is compiled with
// -fmad=false (setup.py), so nvcc fuses nothing on its own: every other product and sum is
// rounded as written, as on the CPU, and an expression the two images go through alike (the
// colour transforms, HyAB's differences) rounds alike for both, which keeps identical images at
// exactly 0 and the map symmetric (docs/algorithm.md §9.2). A tap's fused multiply-add is computed
// per image, from that image's samples only, so it keeps both properties, and a flat
// neighbourhood's exactly zero differences (§7.11) still add exactly 0. The emulator
// (tests/emulator) gets the same single rounding from std::fma; the CPU kernels never include
// this file. A macro, not a function: the device builtins (__fmaf_rn, __fma_rn, never split or
// merged by nvcc) then sit on the line of the sum, where the SASS line table puts their FFMA or
// DFMA (benchmarks/sass_report.py finds an unrolled filter loop's pieces by that line).
#if defined(__CUDA_ARCH__)
#define FLIP_FMADD(T, a, b, c) (sizeof(T) == sizeof(float) ? T(__fmaf_rn(a, b, c)) : T(__fma_rn(a, b, c)))
#else
#define FLIP_FMADD(T, a, b, c) T(std::fma(T(a), T(b), T(c)))
#endif

// sum_k w[k] x(k) for the filter f in form F (see Form); x(k) is the sample at offset k, each tap
// one fused multiply-add (FLIP_FMADD). The transposed filters call it with x(k) = the gradient at -k.
template <Form F, class Filter, class Sample>
FLIP_HD typename Filter::value_type correlate(const Filter& f, const Sample& x) {
  using T = typename Filter::value_type;
  T acc = T(0);
  if constexpr (Filter::kFixedRadius) {
    constexpr int r = Filter::r;
    if constexpr (F == Form::kPlain) {
      FLIP_UNROLL
      for (int k = -r; k <= r; ++k) acc = FLIP_FMADD(T, f.w[k + r], x(k), acc);
    } else if constexpr (F == Form::kOdd) {
      FLIP_UNROLL
      for (int i = 1; i <= r; ++i) acc = FLIP_FMADD(T, f.w[r - i], x(-i) - x(i), acc);
    } else {
      const T c = x(0);
      FLIP_UNROLL
      for (int i = 1; i <= r; ++i) acc = FLIP_FMADD(T, f.w[r + i], (x(i) - c) + (x(-i) - c), acc);
    }
  } else if constexpr (F == Form::kPlain) {
    for (int k = -f.r; k <= f.r; ++k) acc = FLIP_FMADD(T, f.w[k + f.r], x(k), acc);
  } else if constexpr (F == Form::kOdd) {
    for (int i = 1; i <= f.r; ++i) acc = FLIP_FMADD(T, f.w[f.r - i], x(-i) - x(i), acc);
  } else {
    const T c = x(0);
    for (int i = 1; i <= f.r; ++i) acc = FLIP_FMADD(T, f.w[f.r + i], (x(i) - c) + (x(-i) - c), acc);
  }
  return acc;
}

enum class Input : int { kSrgb = 0, kLinear = 1, kOpponent = 2, kAchromatic = 3, kHdr = 4 };

struct Geometry {
  int64_t n, h, w;  // batch, height, width
  int images;       // images per batch item in the planes (2 for test + reference)
  bool csf, feat;   // which banks
  // H outputs / VT outputs: one per filter of the banks that run (plane_counts.h).
  FLIP_HD int planes() const { return (csf ? kCsfFilters : 0) + (feat ? kFeatureFilters : 0); }
  // V adjoint outputs: one per response of the banks that run.
  FLIP_HD int gplanes() const { return (csf ? kColourResponses : 0) + (feat ? kFeatureResponses : 0); }
  FLIP_HD int feat0() const { return csf ? kCsfFilters : 0; }
  FLIP_HD int64_t hw() const { return h * w; }
};

FLIP_HD int64_t clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// Row and column of i = first, first + step, first + 2 step, ... in rows of `cols` values, kept by
// additions: the loops over a tile and its halo, whose width is known only at run time, would
// otherwise divide at every step.
struct TileWalk {
  int row, col, drow, dcol, cols;
  FLIP_HD TileWalk(int first, int step, int cols_)
      : row(first / cols_), col(first % cols_), drow(step / cols_), dcol(step % cols_), cols(cols_) {}
  FLIP_HD void next() {
    row += drow;
    col += dcol;
    if (col >= cols) {
      col -= cols;
      ++row;
    }
  }
};

// ---- H pass --------------------------------------------------------------------------------

// Shared-memory floats an H block needs: 4 rows (3 opponent channels + achromatic) of B + 2R.
FLIP_HD int h_smem_len(int B, int R) { return 4 * (B + 2 * R); }

// Phase 1: thread tid of a block of B threads loads columns [x0 - R, x0 + B + R) of row y of
// one image (clamped to the border) and converts them. src points at the image (C x H x W); scale
// and tm are the exposure of Input::kHdr (unused otherwise). Returns false if it met a non-finite
// value.
template <class T, class S>
FLIP_HD bool h_load(const T* src, const Geometry& g, Input mode, int64_t y, int64_t x0, int B, int R, int tid, S smem,
                    T scale, ToneMapper tm) {
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

template <Form F = Form::kPlain, class Filter, class P>
FLIP_HD typename Filter::value_type hsum(P c, const Filter& f) {  // c points at the centre sample
  return correlate<F>(f, [c](int k) { return c[k]; });
}

// Phase 2: the horizontal outputs of pixel (y, x0 + tid) into the image's planes.
template <class T, class S>
FLIP_HD void h_compute(const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x0, int B, int R, int tid, S smem,
                       T* planes) {
  const int64_t x = x0 + tid;
  if (x >= g.w) return;
  const int L = B + 2 * R, c = tid + R;
  const int64_t hw = g.hw(), p = y * g.w + x;
  if (g.csf) {
    planes[p] = hsum(smem + c, t.y);
    planes[hw + p] = hsum(smem + L + c, t.cx);
    planes[2 * hw + p] = hsum(smem + 2 * L + c, t.cz1);
    planes[3 * hw + p] = hsum(smem + 2 * L + c, t.cz2);
  }
  if (g.feat) {
    T* f = planes + g.feat0() * hw;
    f[p] = hsum(smem + 3 * L + c, t.g);
    f[hw + p] = hsum<Form::kOdd>(smem + 3 * L + c, t.dg);
    f[2 * hw + p] = hsum<Form::kCentred>(smem + 3 * L + c, t.ddg);
  }
}

// ---- V pass --------------------------------------------------------------------------------

template <Form F = Form::kPlain, class T>
FLIP_HD T vsum(const T* pl, const Geometry& g, int64_t y, int64_t x, const FilterView<T>& f) {
  return correlate<F>(f, [&](int k) { return pl[clampi(y + k, 0, g.h - 1) * g.w + x]; });
}

// Filtered opponent colour of pixel (y, x) from the CSF planes.
template <class T>
FLIP_HD void v_csf(const T* pl, const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x, T F[3]) {
  const int64_t hw = g.hw();
  F[0] = vsum(pl, g, y, x, t.y);
  F[1] = vsum(pl + hw, g, y, x, t.cx);
  F[2] = vsum(pl + 2 * hw, g, y, x, t.cz1) + vsum(pl + 3 * hw, g, y, x, t.cz2);
}

// Feature responses of pixel (y, x) from the feature planes (pl points at the g plane).
template <class T>
FLIP_HD Features<T> v_feat(const T* pl, const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x) {
  const int64_t hw = g.hw();
  Features<T> f;
  f.dx = vsum(pl + hw, g, y, x, t.g);                // horizontal dg, vertical g
  f.ddx = vsum(pl + 2 * hw, g, y, x, t.g);           // horizontal ddg, vertical g
  f.dy = vsum<Form::kOdd>(pl, g, y, x, t.dg);        // horizontal g, vertical dg
  f.ddy = vsum<Form::kCentred>(pl, g, y, x, t.ddg);  // horizontal g, vertical ddg
  return f;
}

// Both images' filtered colours and feature responses at pixel (n, y, x) of the LDR-FLIP planes.
template <class T>
FLIP_HD void v_ldr_responses(const T* planes, const Geometry& g, const TapsView<T>& t, int64_t n, int64_t y, int64_t x,
                             T Ft[3], T Fr[3], Features<T>& ft, Features<T>& fr) {
  const T* pt = planes + (n * 2 + 0) * g.planes() * g.hw();
  const T* pr = planes + (n * 2 + 1) * g.planes() * g.hw();
  v_csf(pt, g, t, y, x, Ft);
  v_csf(pr, g, t, y, x, Fr);
  ft = v_feat(pt + 4 * g.hw(), g, t, y, x);
  fr = v_feat(pr + 4 * g.hw(), g, t, y, x);
}

// LDR-FLIP forward tail of pixel (n, y, x): planes hold both images.
template <class T>
FLIP_HD T v_ldr_flip(const T* planes, const Geometry& g, const TapsView<T>& t, int64_t n, int64_t y, int64_t x, T eps,
                     const ColorConsts<T>& k) {
  T Ft[3], Fr[3];
  Features<T> ft, fr;
  v_ldr_responses(planes, g, t, n, y, x, Ft, Fr, ft, fr);
  return pixel_flip(Ft, Fr, ft, fr, eps, k);
}

// LDR-FLIP backward tail: gradient planes (same layout as the planes: per image gF0..2 in planes
// 0-2, gdx, gdy, gddx, gddy in planes 3-6).
template <class T>
FLIP_HD void v_ldr_flip_vjp(const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t, int64_t n, int64_t y,
                            int64_t x, T eps, const ColorConsts<T>& k, T grad) {
  const int64_t hw = g.hw(), p = y * g.w + x;
  T Ft[3], Fr[3], gFt[3], gFr[3];
  Features<T> ft, fr, gft, gfr;
  v_ldr_responses(planes, g, t, n, y, x, Ft, Fr, ft, fr);
  pixel_flip_vjp(Ft, Fr, ft, fr, eps, k, grad, gFt, gFr, gft, gfr);
  store_pixel_gradients(gplanes + (n * 2 + 0) * g.gplanes() * hw, hw, p, gFt, gft);
  store_pixel_gradients(gplanes + (n * 2 + 1) * g.gplanes() * hw, hw, p, gFr, gfr);
}

// ---- VT pass -------------------------------------------------------------------------------

// Transposed vertical clamp-to-edge correlation at (y, x) of the plane gp: the filter in its form
// on the reversed samples, zero outside the plane, plus the samples the forward clamped.
template <Form F = Form::kPlain, class T>
FLIP_HD T vsum_t(const T* gp, const Geometry& g, int64_t y, int64_t x, const FilterView<T>& f) {
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

// Selects a filter form at compile time through an argument (the VSum functors below).
template <Form F>
using FormTag = std::integral_constant<Form, F>;

// The transposed vertical filters of one pixel (docs/algorithm.md §8.2): from the gradient planes
// (per image: CSF gF0..2 at 0-2 when csf; feature gdx, gdy, gddx, gddy after) to the
// transposed-vertical values (CSF t0..t3 at 0-3; feature A, B, C after), g.planes() values, each
// passed to emit(q, value) as soon as it is computed (but t2 and t3, which filter the same plane:
// both first, so that they share its samples' loads). vsum(q, f, FormTag<F>{}) is the transposed
// vertical correlation of gradient plane q with f in form F at the pixel: the row passes read
// global memory (vt_pixel), the tiled backward a tile in shared memory (tiled_vertical_t, K rows
// at once: Rows<T, K> values).
template <class Bank, class VSum, class Emit>
FLIP_HD void vt_values(const Geometry& g, const Bank& t, const VSum& vsum, const Emit& emit) {
  int gi = 0;
  if (g.csf) {
    emit(0, vsum(0, t.y, FormTag<Form::kPlain>{}));
    emit(1, vsum(1, t.cx, FormTag<Form::kPlain>{}));
    const auto t2 = vsum(2, t.cz1, FormTag<Form::kPlain>{}), t3 = vsum(2, t.cz2, FormTag<Form::kPlain>{});
    emit(2, t2);
    emit(3, t3);
    gi = 3;
  }
  if (g.feat) {
    const int f = g.feat0();
    emit(f, vsum(gi, t.g, FormTag<Form::kPlain>{}));          // A = V_g^T gdx: to be dg-transposed
    emit(f + 1, vsum(gi + 2, t.g, FormTag<Form::kPlain>{}));  // B = V_g^T gddx: to be ddg-transposed
    emit(f + 2, vsum(gi + 1, t.dg, FormTag<Form::kOdd>{}) +   // C: to be g-transposed
                    vsum(gi + 3, t.ddg, FormTag<Form::kCentred>{}));
  }
}

// The row passes' VT: gradient planes gpl -> transposed-vertical planes tpl of one image, pixel (y, x).
template <class T>
FLIP_HD void vt_pixel(const T* gpl, T* tpl, const Geometry& g, const TapsView<T>& t, int64_t y, int64_t x) {
  const int64_t hw = g.hw(), p = y * g.w + x;
  T v[kHorizontalPlanesPerImage];
  vt_values(
      g, t,
      [&](int q, const FilterView<T>& f, auto form) { return vsum_t<decltype(form)::value>(gpl + q * hw, g, y, x, f); },
      [&](int q, T value) { v[q] = value; });
  FLIP_UNROLL
  for (int q = 0; q < kHorizontalPlanesPerImage; ++q)  // a constant bound keeps v in registers
    if (q < g.planes()) tpl[q * hw + p] = v[q];
}

// ---- HT pass -------------------------------------------------------------------------------

FLIP_HD int ht_smem_len(int B, int R, int planes) { return planes * (B + 2 * R); }

// Phase 1: load columns [x0 - R, x0 + B + R) of row y of every transposed-vertical plane, zero
// outside the image.
template <class T, class S>
FLIP_HD void ht_load(const T* tpl, const Geometry& g, int64_t y, int64_t x0, int B, int R, int tid, S smem) {
  const int L = B + 2 * R, np = g.planes();
  const int64_t hw = g.hw();
  for (int i = tid; i < L; i += B) {
    const int64_t xs = x0 - R + i;
    const bool in = xs >= 0 && xs < g.w;
    for (int q = 0; q < np; ++q) smem[q * L + i] = in ? tpl[q * hw + y * g.w + xs] : T(0);
  }
}

// K values of one type, with the sum of two taken value by value: the outputs of K consecutive
// positions of a line, computed together (tsum_rows).
template <class T, int K>
struct Rows {
  T v[K];
  FLIP_HD T& operator[](int k) { return v[k]; }
  FLIP_HD const T& operator[](int k) const { return v[k]; }
};
template <class T, int K>
FLIP_HD Rows<T, K> operator+(const Rows<T, K>& a, const Rows<T, K>& b) {
  Rows<T, K> s;
  FLIP_UNROLL
  for (int k = 0; k < K; ++k) s[k] = a[k] + b[k];
  return s;
}

// Transposed clamp-to-edge correlation at position pos of a line of len samples (a row, stride 1,
// or a column of a tile, stride = the tile's width): the filter in its form on the reversed
// samples, plus the samples the forward clamped onto the first and last positions. c points at
// pos's sample; the samples around it are zero outside the line, and at pos == 0 (len - 1) the
// line's first (last) r samples follow (precede) c, so no pointer outside the buffer is formed.
template <Form F = Form::kPlain, class Filter, class P>
FLIP_HD typename Filter::value_type tsum(P c, int stride, int64_t pos, int64_t len, const Filter& f) {
  using T = typename Filter::value_type;
  T acc = correlate<F>(f, [c, stride](int k) { return c[-k * stride]; });
  const int64_t m = f.r < len ? f.r : len;
  if (pos == 0)
    for (int64_t i = 0; i < m; ++i) acc = FLIP_FMADD(T, f.left[i], c[i * stride], acc);
  if (pos == len - 1)
    for (int64_t d = 0; d < m; ++d) acc = FLIP_FMADD(T, f.right[d], c[-d * stride], acc);
  return acc;
}

// tsum at positions pos, ..., pos + K - 1 (pos >= 0) of the same line, c pointing at pos's
// sample. With the filter loops unrolled (FixedFilter) the K sums share their samples' loads; each
// is still the sum of one position alone, in tsum's order, folds included. Only the first of the
// K positions can be the line's first, and one at most its last.
template <int K, Form F = Form::kPlain, class Filter, class P>
FLIP_HD Rows<typename Filter::value_type, K> tsum_rows(P c, int stride, int64_t pos, int64_t len, const Filter& f) {
  using T = typename Filter::value_type;
  Rows<T, K> out;
  if constexpr (K == 1) {
    out[0] = tsum<F>(c, stride, pos, len, f);
  } else {
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) out[k] = correlate<F>(f, [c, stride, k](int j) { return c[(k - j) * stride]; });
    const int64_t m = f.r < len ? f.r : len;
    if (pos == 0) {
      T acc = out[0];
      for (int64_t i = 0; i < m; ++i) acc = FLIP_FMADD(T, f.left[i], c[i * stride], acc);
      out[0] = acc;
    }
    const int64_t last = len - 1 - pos;  // the line's last position among the K, if it is one
    if (last >= 0 && last < K) {
      T acc = out[0];
      FLIP_UNROLL
      for (int k = 1; k < K; ++k) acc = last == k ? out[k] : acc;
      const P e = c + static_cast<int>(last) * stride;
      for (int64_t d = 0; d < m; ++d) acc = FLIP_FMADD(T, f.right[d], e[-d * stride], acc);
      FLIP_UNROLL
      for (int k = 0; k < K; ++k) out[k] = last == k ? acc : out[k];
    }
  }
  return out;
}

// The transposed horizontal filters of one pixel: gradient w.r.t. the opponent channels (g_opp,
// CSF) and the achromatic channel (g_yh, features) at column x from the 7 transposed-vertical
// rows (CSF t0..t3, then feature A, B, C; plane q at s + q * L, c the column's offset in them).
template <class Bank, class S, class T = typename Bank::value_type>
FLIP_HD void ht_pixel(const Geometry& g, const Bank& t, S s, int L, int c, int64_t x, T g_opp[3], T& g_yh) {
  g_opp[0] = g_opp[1] = g_opp[2] = g_yh = T(0);
  if (g.csf) {
    g_opp[0] = tsum(s + c, 1, x, g.w, t.y);
    g_opp[1] = tsum(s + L + c, 1, x, g.w, t.cx);
    g_opp[2] = tsum(s + 2 * L + c, 1, x, g.w, t.cz1) + tsum(s + 3 * L + c, 1, x, g.w, t.cz2);
  }
  if (g.feat) {
    const S f = s + g.feat0() * L;
    g_yh = tsum<Form::kOdd>(f + c, 1, x, g.w, t.dg) + tsum<Form::kCentred>(f + L + c, 1, x, g.w, t.ddg) +
           tsum(f + 2 * L + c, 1, x, g.w, t.g);
  }
}

// Phase 2: gradient w.r.t. the opponent channels (g_opp, CSF) and the achromatic channel (g_yh,
// features) of pixel (y, x0 + tid). Returns false when the thread has no pixel.
template <class T, class S>
FLIP_HD bool ht_compute(const Geometry& g, const TapsView<T>& t, int64_t x0, int B, int R, int tid, S smem, T g_opp[3],
                        T& g_yh) {
  const int64_t x = x0 + tid;
  if (x >= g.w) return false;
  ht_pixel(g, t, smem, B + 2 * R, tid + R, x, g_opp, g_yh);
  return true;
}

// Chain from the opponent / achromatic gradients of an image pixel back to its input values.
template <class T>
FLIP_HD void chain_to_input(const T g_opp[3], T g_yh, const T v[3], bool srgb, T g_in[3]) {
  T glin[3];
  opponent_and_achromatic_vjp(g_opp, g_yh, glin);
  for (int c = 0; c < 3; ++c) {
    T d;
    input_to_linear(v[c], srgb, &d);
    g_in[c] = glin[c] * d;
  }
}

// ---- per-thread bodies of the V kernels, indexed by i = n * H * W + pixel ----

template <class T>
FLIP_HD void ldr_pixel(const T* planes, T* out, const Geometry& g, const TapsView<T>& t, int64_t i, T eps,
                       const ColorConsts<T>& k) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  out[i] = v_ldr_flip(planes, g, t, n, p / g.w, p % g.w, eps, k);
}

template <class T>
FLIP_HD void ldr_vjp_pixel(const T* grad, const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t,
                           int64_t i, T eps, const ColorConsts<T>& k) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  v_ldr_flip_vjp(planes, gplanes, g, t, n, p / g.w, p % g.w, eps, k, grad[i]);
}

// csf_filter: filtered, RGB-cube-clamped linear RGB of one pixel.
template <class T>
FLIP_HD void csf_pixel(const T* planes, T* out, const Geometry& g, const TapsView<T>& t, int64_t i) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw;
  T F[3], rgb[3];
  v_csf(planes + n * g.planes() * hw, g, t, p / g.w, p % g.w, F);
  csf_output(F, rgb);
  for (int c = 0; c < 3; ++c) out[(n * 3 + c) * hw + p] = rgb[c];
}

template <class T>
FLIP_HD void csf_vjp_pixel(const T* grad, const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t,
                           int64_t i) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw;
  T F[3], gout[3], gF[3];
  v_csf(planes + n * g.planes() * hw, g, t, p / g.w, p % g.w, F);
  for (int c = 0; c < 3; ++c) gout[c] = grad[(n * 3 + c) * hw + p];
  csf_output_vjp(F, gout, gF);
  for (int c = 0; c < 3; ++c) gplanes[(n * 3 + c) * hw + p] = gF[c];
}

// feature_difference of one pixel (planes hold both images' feature planes).
template <class T>
FLIP_HD void feat_pixel(const T* planes, T* out, const Geometry& g, const TapsView<T>& t, int64_t i, T eps) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw, y = p / g.w, x = p % g.w;
  Features<T> ft = v_feat(planes + (n * 2) * g.planes() * hw, g, t, y, x);
  Features<T> fr = v_feat(planes + (n * 2 + 1) * g.planes() * hw, g, t, y, x);
  out[i] = feature_pixel(ft, fr, eps);
}

template <class T>
FLIP_HD void feat_vjp_pixel(const T* grad, const T* planes, T* gplanes, const Geometry& g, const TapsView<T>& t,
                            int64_t i, T eps) {
  const int64_t hw = g.hw(), n = i / hw, p = i % hw, y = p / g.w, x = p % g.w;
  Features<T> f[2], gf[2];
  for (int im = 0; im < 2; ++im) f[im] = v_feat(planes + (n * 2 + im) * g.planes() * hw, g, t, y, x);
  feature_pixel_vjp(f[0], f[1], eps, grad[i], gf[0], gf[1]);
  for (int im = 0; im < 2; ++im) store_feature_gradients(gplanes + (n * 2 + im) * g.gplanes() * hw, hw, p, gf[im]);
}

// HDR-FLIP, one exposure: fold this exposure's error into the running maximum (strict >).
template <class T>
FLIP_HD void hdr_max_pixel(const T* planes, T* out, T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t,
                           int64_t i, T eps, const ColorConsts<T>& k, const HdrStep<T>& s) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  if (!s.active(n)) return;
  const T err = v_ldr_flip(planes, g, t, n, p / g.w, p % g.w, eps, k);
  s.fold(err, n, i, out, emap, index);
}

// HDR-FLIP backward, one exposure: the incoming gradient of the pixels this exposure won.
template <class T>
FLIP_HD void hdr_vjp_pixel(const T* grad, const int32_t* index, const T* planes, T* gplanes, const Geometry& g,
                           const TapsView<T>& t, int64_t i, T eps, const ColorConsts<T>& k, const HdrStep<T>& s) {
  const int64_t n = i / g.hw(), p = i % g.hw();
  if (!s.active(n)) return;
  const T gi = index[i] == s.i ? grad[i] : T(0);
  v_ldr_flip_vjp(planes, gplanes, g, t, n, p / g.w, p % g.w, eps, k, gi);
}

// ---- Fused LDR-FLIP forward: one block per column of kWalkTiles output tiles ---------------
// A block walks down kWalkTiles tiles of kTileW x kTileH, one below the other. For each it loads the
// tile plus an R-pixel halo of each image into shared memory, runs the horizontal filters there,
// then the vertical ones, and writes only the error map: no planes in global memory. The tile
// below needs 2R of the same horizontal-output rows (its halo above is this tile's bottom rows and
// halo), so the block keeps them (fused_keep_rows) and converts and filters only its kTileH new
// rows; the first tile of a walk (and, in HDR-FLIP's backward, the tile after one it skipped)
// does all kTileH + 2R. Shared memory: the horizontal outputs of both images (7 planes each over
// the tile's rows plus halo), then the converted input tile (4 channels), whose space the
// vertical outputs of both images (7 each) take once the horizontal pass has read it.

constexpr int kTileW = 32, kTileH = 16;
// Tiles per walk: 4 turns 4 (kTileH + 2R) converted and filtered rows into 4 kTileH + 2R (at
// R = 10: 84 rows instead of 144) and leaves a 1080p image 1020 blocks, 3.9 per block slot of a
// 132-SM GPU at 2 blocks per SM.
constexpr int kWalkTiles = 4;

FLIP_HD int fused_rows(int R) { return kTileH + 2 * R; }
FLIP_HD int fused_cols(int R) { return kTileW + 2 * R; }
// The converted input tile's row stride: fused_cols rounded up to an odd number, so that two rows'
// samples at the same column fall in different banks of shared memory (fused_horizontal).
FLIP_HD int fused_stride(int R) { return fused_cols(R) | 1; }
// Image im's horizontal outputs: 7 planes of fused_rows x kTileW.
FLIP_HD int fused_h_offset(int R, int im) { return im * kHorizontalPlanesPerImage * fused_rows(R) * kTileW; }
// The converted input tile, 4 planes of fused_rows x fused_cols (rows fused_stride apart); later
// the vertical outputs.
FLIP_HD int fused_input_offset(int R) { return fused_h_offset(R, 2); }
FLIP_HD int fused_smem_len(int R) {
  const int input = 4 * fused_rows(R) * fused_stride(R), vertical = 2 * kResponsePlanesPerImage * kTileH * kTileW;
  return fused_input_offset(R) + (input > vertical ? input : vertical);
}

// Number of the walks over tiles_y tile rows.
FLIP_HD int64_t walks(int64_t tiles_y) { return (tiles_y + kWalkTiles - 1) / kWalkTiles; }

// Between two tiles of a walk, chunk [c, c + kTileH) of the 2R rows the next tile shares with this
// one: horizontal-output rows kTileH + c... move up to rows c..., for both images. Rows [kTileH, 2R)
// are both read (by chunk 0) and written (by chunk 1) when 2R > kTileH, so the chunks run between
// barriers, in order.
template <class S>
FLIP_HD void fused_keep_rows(int R, int c, int tid, int nthreads, S smem) {
  const int rows = fused_rows(R), plane = rows * kTileW, keep = 2 * R;
  const int chunk = (keep - c < kTileH ? keep - c : kTileH) * kTileW, n = 2 * kHorizontalPlanesPerImage * chunk;
  for (int i = tid; i < n; i += nthreads) {
    const int q = i / chunk, j = c * kTileW + i % chunk;
    smem[q * plane + j] = smem[q * plane + kTileH * kTileW + j];
  }
}

// Phase 1 (image im): rows [y0 - R + r0, y0 + kTileH + R) and columns [x0 - R, x0 + kTileW + R) of
// the input, clamped to the image, converted to opponent colours and the achromatic channel, into
// the input tile's rows [r0, kTileH + 2R).
template <class T, class S>
FLIP_HD bool fused_load(const T* src, const Geometry& g, Input mode, int64_t y0, int64_t x0, int R, int r0, int tid,
                        int nthreads, S smem, T scale, ToneMapper tm) {
  const int rows = fused_rows(R), cols = fused_cols(R), stride = fused_stride(R), rc = rows * stride;
  const int n = (rows - r0) * cols;
  const S in = smem + fused_input_offset(R) + r0 * stride;
  const int64_t hw = g.hw();
  bool ok = true;
  TileWalk at(tid, nthreads, cols);
  for (int i = tid; i < n; i += nthreads, at.next()) {
    const int64_t y = clampi(y0 - R + r0 + at.row, 0, g.h - 1), x = clampi(x0 - R + at.col, 0, g.w - 1);
    const int64_t p = y * g.w + x;
    T v[3] = {src[p], src[hw + p], src[2 * hw + p]}, lin[3], opp[3];
    ok = ok && is_finite(v[0]) && is_finite(v[1]) && is_finite(v[2]);
    if (mode == Input::kHdr)
      hdr_to_ldr(v, scale, tm, lin);
    else
      for (int c = 0; c < 3; ++c) lin[c] = input_to_linear(v[c], mode == Input::kSrgb);
    linear_to_opponent(lin, opp);
    const int j = at.row * stride + at.col;
    in[j] = opp[0];
    in[rc + j] = opp[1];
    in[2 * rc + j] = opp[2];
    in[3 * rc + j] = achromatic(opp);
  }
  return ok;
}

// Phase 2's register blocking: with radii fixed at compile time (FixedFilter) a thread filters
// kHorizontalColumns adjacent columns of a row, whose sums share all but one of their samples:
// 2r + 2 shared-memory loads per plane instead of 2(2r + 1). A warp then takes two rows, 16 column
// pairs each. The input tile's rows are an odd number of floats apart (fused_stride), so that the
// two rows' loads fall in different banks; the lanes of odd rows store their two columns in the
// other order, so that the two rows' stores do too. Each output is still its own sum, in its order.
constexpr int kHorizontalColumns = 2;

// Phase 2 (image im): the 7 horizontal outputs of the input tile's rows [r0, kTileH + 2R) (halo
// included) and every tile column.
template <class Bank, class S>
FLIP_HD void fused_horizontal(const Bank& t, int R, int r0, int im, int tid, int nthreads, S smem) {
  using T = typename Bank::value_type;
  constexpr int K = decltype(t.y)::kFixedRadius ? kHorizontalColumns : 1, per_row = kTileW / K;
  static_assert(kTileW % K == 0 && (K & (K - 1)) == 0, "whole column groups, a power of two");
  const int rows = fused_rows(R), stride = fused_stride(R), rc = rows * stride, plane = rows * kTileW;
  const int n = (rows - r0) * per_row;
  const S in = smem + fused_input_offset(R) + r0 * stride, h = smem + fused_h_offset(R, im) + r0 * kTileW;
  for (int i = tid; i < n; i += nthreads) {
    const int row = i / per_row, col = i % per_row * K;  // the thread's first pixel
    const int c = row * stride + col + R;                // its centre sample in the input tile
    // All before any store: the filters of one channel (cz1 and cz2; g, dg and ddg) and the K
    // columns then share their samples' loads, which a store in between (to memory the compiler
    // cannot tell apart from the input) would force to be repeated.
    T v[kHorizontalPlanesPerImage][K];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) {
      v[0][k] = hsum(in + c + k, t.y);
      v[1][k] = hsum(in + rc + c + k, t.cx);
      v[2][k] = hsum(in + 2 * rc + c + k, t.cz1);
      v[3][k] = hsum(in + 2 * rc + c + k, t.cz2);
      v[4][k] = hsum(in + 3 * rc + c + k, t.g);
      v[5][k] = hsum<Form::kOdd>(in + 3 * rc + c + k, t.dg);
      v[6][k] = hsum<Form::kCentred>(in + 3 * rc + c + k, t.ddg);
    }
    const int turn = row & (K - 1);  // odd rows: the columns in the other order (K = 2)
    FLIP_UNROLL
    for (int q = 0; q < kHorizontalPlanesPerImage; ++q) {
      FLIP_UNROLL
      for (int s = 0; s < K; ++s) {
        const int k = s ^ turn;
        T value = v[q][0];  // v[q][k] by selects: an index known at run time would put v in memory
        FLIP_UNROLL
        for (int j = 1; j < K; ++j) value = k == j ? v[q][j] : value;
        h[q * plane + row * kTileW + col + k] = value;
      }
    }
  }
}

// Where phase 3 puts image im's vertical outputs (7 planes of kTileH x kTileW), and the values of
// tile pixel i there: filtered colour F and feature responses f.
FLIP_HD int fused_vertical_offset(int R, int im) {
  return fused_input_offset(R) + im * kResponsePlanesPerImage * kTileH * kTileW;
}
template <class T, class P>
FLIP_HD void fused_values(P v, int i, T F[3], Features<T>& f) {
  constexpr int np = kTileH * kTileW;
  F[0] = v[i];
  F[1] = v[np + i];
  F[2] = v[2 * np + i];
  f = Features<T>{v[3 * np + i], v[4 * np + i], v[5 * np + i], v[6 * np + i]};
}

template <Form F = Form::kPlain, class Filter, class P>
FLIP_HD typename Filter::value_type vsum_tile(P h, const Filter& f) {  // h points at the centre row's sample
  return correlate<F>(f, [h](int k) { return h[k * kTileW]; });
}

// Phase 3's register blocking: with radii fixed at compile time (FixedFilter) a thread filters
// kVerticalRows rows of one column, whose outputs' sample windows overlap: each plane
// costs it kVerticalRows + 2r shared-memory loads instead of kVerticalRows (2r + 1). The filter
// loops are unrolled, so the samples are registers that the rows' sums (each still its own
// correlate, in its own order: the same bits) read in turn. With radii read at run time the loops
// stay loops and a thread filters one row.
constexpr int kVerticalRows = 4;

// Phase 3 (after both images' phase 2, in the input tile's place): the vertical outputs F0, F1,
// F2, dx, dy, ddx, ddy of every tile pixel of both images, a column of rows per thread.
template <class Bank, class S>
FLIP_HD void fused_vertical(const Bank& t, int R, int tid, int nthreads, S smem) {
  using T = typename Bank::value_type;
  constexpr int K = decltype(t.y)::kFixedRadius ? kVerticalRows : 1, np = kTileH * kTileW;
  constexpr int columns = np / K;  // per image: kTileH / K row groups x kTileW columns
  static_assert(kTileH % K == 0, "whole row groups");
  const int n = fused_rows(R) * kTileW;
  for (int i = tid; i < 2 * columns; i += nthreads) {
    const int im = i / columns, j = i % columns;
    const int o = (j / kTileW) * K * kTileW + j % kTileW;  // the column's first output pixel
    const S h = smem + fused_h_offset(R, im) + o + R * kTileW, v = smem + fused_vertical_offset(R, im) + o;
    // Plane by plane, each one's outputs before their stores: a store in between (to memory the
    // compiler cannot tell apart from the samples) would force the samples' loads to be repeated.
    // dy and ddy read the same plane, and so do cz1 and cz2 (F2).
    T a[K], b[K];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = vsum_tile(h + k * kTileW, t.y);
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = vsum_tile(h + n + k * kTileW, t.cx);
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[np + k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k)
      a[k] = vsum_tile(h + 2 * n + k * kTileW, t.cz1) + vsum_tile(h + 3 * n + k * kTileW, t.cz2);
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[2 * np + k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = vsum_tile(h + 5 * n + k * kTileW, t.g);  // horizontal dg, vertical g
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[3 * np + k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) {
      a[k] = vsum_tile<Form::kOdd>(h + 4 * n + k * kTileW, t.dg);       // horizontal g, vertical dg
      b[k] = vsum_tile<Form::kCentred>(h + 4 * n + k * kTileW, t.ddg);  // horizontal g, vertical ddg
    }
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) {
      v[4 * np + k * kTileW] = a[k];
      v[6 * np + k * kTileW] = b[k];
    }
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = vsum_tile(h + 6 * n + k * kTileW, t.g);  // horizontal ddg, vertical g
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[5 * np + k * kTileW] = a[k];
  }
}

// Phase 4: the per-pixel tail into the error map (out points at this batch item's map). With
// hs (HDR-FLIP, one exposure of item n), the error is folded into the running maximum instead.
template <class T, class S>
FLIP_HD void fused_tail(const Geometry& g, int64_t y0, int64_t x0, int R, int tid, int nthreads, S smem, T eps,
                        const ColorConsts<T>& k, T* out, const HdrStep<T>* hs = nullptr, int64_t n = 0,
                        T* emap = nullptr, int32_t* index = nullptr) {
  const S vt = smem + fused_vertical_offset(R, 0), vr = smem + fused_vertical_offset(R, 1);
  for (int i = tid; i < kTileH * kTileW; i += nthreads) {
    const int64_t y = y0 + i / kTileW, x = x0 + i % kTileW;
    if (y >= g.h || x >= g.w) continue;
    T Ft[3], Fr[3];
    Features<T> ft, fr;
    fused_values(vt, i, Ft, ft);
    fused_values(vr, i, Fr, fr);
    const T err = pixel_flip(Ft, Fr, ft, fr, eps, k);
    const int64_t p = y * g.w + x;
    if (hs == nullptr) {
      out[p] = err;
    } else {
      hs->fold(err, n, p, out, emap, index);
    }
  }
}

// Last step of the HT pass: store the gradient w.r.t. the op's input at pixel p. out and src
// point at the image (C x H x W); scale and tm as in h_load.
template <class T>
FLIP_HD void ht_store(const Geometry& g, Input mode, int64_t p, const T g_opp[3], T g_yh, const T* src, T* out, T scale,
                      ToneMapper tm) {
  const int64_t hw = g.hw();
  if (mode == Input::kHdr) {  // accumulates: one call per exposure
    T glin[3], gv[3];
    opponent_and_achromatic_vjp(g_opp, g_yh, glin);
    const T v[3] = {src[p], src[hw + p], src[2 * hw + p]};
    hdr_to_ldr_vjp(v, scale, tm, glin, gv);
    for (int c = 0; c < 3; ++c) out[c * hw + p] += gv[c];
  } else if (mode == Input::kAchromatic) {
    out[p] = g_yh;
  } else if (mode == Input::kOpponent) {
    for (int c = 0; c < 3; ++c) out[c * hw + p] = g_opp[c];
  } else {
    T v[3] = {src[p], src[hw + p], src[2 * hw + p]}, gi[3];
    chain_to_input(g_opp, g_yh, v, mode == Input::kSrgb, gi);
    for (int c = 0; c < 3; ++c) out[c * hw + p] = gi[c];
  }
}

// ---- Tiled LDR-/HDR-FLIP backward: two kernels per band --------------------------------------
// kTiledGrad (one block per walk of kWalkTiles tiles, as the fused forward): the fused forward's phases
// 1-3 for both images, then the per-pixel adjoint, which writes the 7 gradient planes (gF0..2,
// gdx, gdy, gddx, gddy: store_pixel_gradients) of each image whose gradient is wanted, and of no
// other, into a scratch buffer. kTiledTranspose (one block per tile and wanted image): the tile plus an
// R-pixel halo of that image's gradient planes into shared memory, the transposed vertical filters
// there, the transposed horizontal ones (ht_pixel), the chain to the input (ht_store).
// Every gradient value is written by one thread, once (HDR-FLIP: at most once per exposure, in exposure
// order), so the result does not depend on scheduling.
// The scratch holds one band: batch items [n0, n1) and output rows [y0, y1), whose transposed
// filters read the gradient planes of rows [g0, g1) = [y0 - R, y1 + R) clipped to the image; kernel
// 1 computes those rows, so neighbouring bands recompute 2R rows each. plan_backward sizes the
// bands so that the scratch stays within a budget whatever the image size and batch.

// The scratch the tiled backward's gradient planes may take (plan_backward): with the map, the
// incoming gradient and the gradients it returns, a 1080p float32 forward+backward stays under
// 100 MiB (docs/algorithm.md §8.8).
constexpr int64_t kBackwardScratchBytes = int64_t(32) << 20;

struct BackwardBand {
  int64_t n0, n1;  // batch items
  int64_t y0, y1;  // output rows (of every item)
  int64_t g0, g1;  // gradient-plane rows held in the scratch: [y0 - R, y1 + R) within the image
  int wanted;      // bit 0: the test image's gradient, bit 1: the reference's

  FLIP_HD int images() const { return (wanted & 1) + ((wanted >> 1) & 1); }
  FLIP_HD int64_t plane_stride(int64_t w) const { return (g1 - g0) * w; }
  // The 7 gradient planes of wanted image im (0 test, 1 reference) of item n; pixel (y, x) at
  // (y - g0) * w + x.
  template <class T>
  FLIP_HD T* planes(T* scratch, int64_t n, int im, int64_t w) const {
    const int slot = im == 0 ? 0 : (wanted & 1);
    return scratch + ((n - n0) * images() + slot) * kResponsePlanesPerImage * plane_stride(w);
  }
};

// How the tiled backward walks the batch: bands of `items` items by `rows` output rows.
struct BackwardPlan {
  int64_t items = 0, rows = 0;
  int64_t buffer_rows = 0;  // gradient-plane rows per item and image the scratch holds
  int64_t item_bands = 0, row_bands = 0;
  int wanted = 0, R = 0;

  int64_t count() const { return item_bands * row_bands; }
  int64_t scratch_elems(const Geometry& g) const {
    return items * ((wanted & 1) + ((wanted >> 1) & 1)) * kResponsePlanesPerImage * buffer_rows * g.w;
  }
  BackwardBand band(const Geometry& g, int64_t j) const {
    BackwardBand b;
    b.n0 = (j / row_bands) * items;
    b.n1 = b.n0 + items < g.n ? b.n0 + items : g.n;
    b.y0 = (j % row_bands) * rows;
    b.y1 = b.y0 + rows < g.h ? b.y0 + rows : g.h;
    b.g0 = b.y0 - R > 0 ? b.y0 - R : 0;
    b.g1 = b.y1 + R < g.h ? b.y1 + R : g.h;
    b.wanted = wanted;
    return b;
  }
};

// Bands for gradient mask `wanted` (non-zero), filter radius R and elements of `elem` bytes whose
// scratch (items x wanted images x 7 planes x buffer rows x W) stays within `budget`: the whole
// batch when it fits, else whole images in groups, else one image in bands of a multiple of
// kTileH rows (at least kTileH: only an image wider than the budget allows for kTileH + 2R rows
// exceeds it), as even as that allows.
inline BackwardPlan plan_backward(const Geometry& g, int wanted, int R, int64_t elem,
                                  int64_t budget = kBackwardScratchBytes) {
  BackwardPlan p;
  p.wanted = wanted;
  p.R = R;
  const int64_t row_bytes = ((wanted & 1) + ((wanted >> 1) & 1)) * kResponsePlanesPerImage * g.w * elem;
  if (g.n * g.h * row_bytes <= budget) {
    p.items = g.n;
    p.rows = g.h;
  } else if (g.h * row_bytes <= budget) {
    p.items = budget / (g.h * row_bytes);
    p.rows = g.h;
  } else {
    p.items = 1;
    int64_t most = (budget / row_bytes - 2 * R) / kTileH * kTileH;
    if (most < kTileH) most = kTileH;
    const int64_t bands = (g.h + most - 1) / most;
    p.rows = ((g.h + bands - 1) / bands + kTileH - 1) / kTileH * kTileH;
    if (p.rows > g.h) p.rows = g.h;
  }
  p.buffer_rows = p.rows >= g.h ? g.h : (p.rows + 2 * R < g.h ? p.rows + 2 * R : g.h);
  p.item_bands = (g.n + p.items - 1) / p.items;
  p.row_bands = (g.h + p.rows - 1) / p.rows;
  return p;
}

// The whole batch as one band, for the images `wanted` names: the layout of the sensitivities
// that LDR-FLIP's forward keeps (N x 7k x H x W, _ldr_flip_with_sensitivities), which the tiled
// kernels write and read in place of the scratch.
inline BackwardPlan whole_batch_plan(const Geometry& g, int wanted, int R) {
  BackwardPlan p;
  p.wanted = wanted;
  p.R = R;
  p.items = g.n;
  p.rows = g.h;
  p.buffer_rows = g.h;
  p.item_bands = g.n > 0 ? 1 : 0;
  p.row_bands = g.h > 0 ? 1 : 0;
  return p;
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
  v_ldr_responses(planes, g, t, n, p / g.w, p % g.w, Ft, Fr, ft, fr);
  out[i] = pixel_flip_vjp(Ft, Fr, ft, fr, eps, k, T(1), gFt, gFr, gft, gfr);
  if (b.wanted & 1) store_pixel_gradients(b.planes(kept, n, 0, g.w), hw, p, gFt, gft);
  if (b.wanted & 2) store_pixel_gradients(b.planes(kept, n, 1, g.w), hw, p, gFr, gfr);
}

// The row passes' backward from kept sensitivities, pixel i = n * H * W + p: the kept planes of
// the images band b wants times the incoming gradient grad[i], into the gradient planes the VT
// pass reads (v_ldr_flip_vjp's layout).
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

// kTiledGrad runs tiles over rows [b.g0, b.g1): tile ty starts at row b.g0 + ty * kTileH.
FLIP_HD int64_t tiled_grad_tiles_y(const BackwardBand& b) { return (b.g1 - b.g0 + kTileH - 1) / kTileH; }

// The incoming gradient for which the kept sensitivities are computed.
template <class T>
FLIP_HD constexpr T unit_gradient() {
  return T(1);
}

// kTiledGrad, phase 4 (after fused_load, fused_horizontal, fused_vertical of both images): the
// per-pixel adjoint of the tile's pixels in rows below b.g1 into the wanted images' gradient planes.
// grad and index point at item n's map; with hs (HDR-FLIP, one exposure) only the pixels this
// exposure won pass their incoming gradient. With map instead of grad (LDR-FLIP's forward that
// keeps the sensitivities): a unit gradient, and each pixel's error into map (item n's).
template <class T, class S>
FLIP_HD void tiled_tail_vjp(const Geometry& g, const BackwardBand& b, int64_t n, int64_t y0, int64_t x0, int R, int tid,
                            int nthreads, S smem, T eps, const ColorConsts<T>& k, const T* grad, T* scratch,
                            const HdrStep<T>* hs = nullptr, const int32_t* index = nullptr, T* map = nullptr) {
  const S vt = smem + fused_vertical_offset(R, 0), vr = smem + fused_vertical_offset(R, 1);
  const int64_t stride = b.plane_stride(g.w);
  T* out_t = (b.wanted & 1) ? b.planes(scratch, n, 0, g.w) : nullptr;
  T* out_r = (b.wanted & 2) ? b.planes(scratch, n, 1, g.w) : nullptr;
  for (int i = tid; i < kTileH * kTileW; i += nthreads) {
    const int64_t y = y0 + i / kTileW, x = x0 + i % kTileW;
    if (y >= b.g1 || x >= g.w) continue;
    const int64_t p = y * g.w + x, q = (y - b.g0) * g.w + x;
    const T gi = map != nullptr ? unit_gradient<T>() : hs == nullptr || index[p] == hs->i ? grad[p] : T(0);
    T Ft[3], Fr[3], gFt[3], gFr[3];
    Features<T> ft, fr, gft, gfr;
    fused_values(vt, i, Ft, ft);
    fused_values(vr, i, Fr, fr);
    // The adjoint of the wanted images only: the other one's would be work thrown away.
    auto vjp = [&](auto want_t, auto want_r) {
      return pixel_flip_vjp<decltype(want_t)::value, decltype(want_r)::value>(Ft, Fr, ft, fr, eps, k, gi, gFt, gFr, gft,
                                                                              gfr);
    };
    using Yes = std::true_type;
    using No = std::false_type;
    const T value = b.wanted == 1 ? vjp(Yes{}, No{}) : b.wanted == 2 ? vjp(No{}, Yes{}) : vjp(Yes{}, Yes{});
    if (map != nullptr) map[p] = value;
    if (out_t) store_pixel_gradients(out_t, stride, q, gFt, gft);
    if (out_r) store_pixel_gradients(out_r, stride, q, gFr, gfr);
  }
}

// HDR-FLIP, one exposure i: whether this thread's share of the pixels in rows [y0 - halo, y0 +
// kTileH + halo) within [r0, r1) and columns [x0 - halo, x0 + kTileW + halo) within the image won
// exposure i (index: the item's map). The kernels OR it over the block: where no pixel of a tile
// (kTiledGrad, halo 0) won it, the tile's gradient planes are exactly zero and kTiledGrad writes them
// without the forward (tiled_zero_planes); where no pixel of the tile and its R halo won it
// (kTiledTranspose, halo R), the tile's input gradient gains nothing and kTiledTranspose skips it. With
// automatic exposures each pixel is won by one exposure, mostly in large regions, so most tiles
// skip most exposures.
FLIP_HD bool tile_won(const int32_t* index, const Geometry& g, int64_t i, int64_t y0, int64_t x0, int64_t r0,
                      int64_t r1, int halo, int tid, int nthreads) {
  const int rows = kTileH + 2 * halo, cols = kTileW + 2 * halo;
  bool won = false;
  TileWalk at(tid, nthreads, cols);
  for (int j = tid; j < rows * cols; j += nthreads, at.next()) {
    const int64_t y = y0 - halo + at.row, x = x0 - halo + at.col;
    if (y >= r0 && y < r1 && x >= 0 && x < g.w && index[y * g.w + x] == i) won = true;
  }
  return won;
}

// kTiledGrad for a tile no pixel of which won this exposure: zero gradient planes, as the adjoint of
// a zero incoming gradient gives, for the tile's pixels below b.g1.
template <class T>
FLIP_HD void tiled_zero_planes(const Geometry& g, const BackwardBand& b, int64_t n, int64_t y0, int64_t x0, int tid,
                               int nthreads, T* scratch) {
  const int64_t stride = b.plane_stride(g.w);
  for (int i = tid; i < kTileH * kTileW; i += nthreads) {
    const int64_t y = y0 + i / kTileW, x = x0 + i % kTileW;
    if (y >= b.g1 || x >= g.w) continue;
    const int64_t q = (y - b.g0) * g.w + x;
    for (int im = 0; im < 2; ++im) {
      if (((b.wanted >> im) & 1) == 0) continue;
      T* planes = b.planes(scratch, n, im, g.w);
      for (int c = 0; c < kResponsePlanesPerImage; ++c) planes[c * stride + q] = T(0);
    }
  }
}

// kTiledTranspose's shared memory: the gradient planes over the tile and its halo, then the transposed
// vertical outputs over the tile's rows and the halo's columns.
FLIP_HD int tiled_t_smem_len(int R) {
  return kResponsePlanesPerImage * fused_rows(R) * fused_cols(R) + kHorizontalPlanesPerImage * kTileH * fused_cols(R);
}

// kTiledTranspose, phase 1: rows [y0 - R, y0 + kTileH + R) and columns [x0 - R, x0 + kTileW + R) of one
// image's gradient planes gp (band b) into shared memory, zero outside the image's columns and
// outside the rows the band holds. Where the band reaches the image's border those are the zeros
// of the transposed filter; elsewhere the rows the band lacks feed only rows it does not output.
// With gmap (item n's incoming gradient from the band's first row b.g0 on; the backward from kept
// sensitivities) each value is multiplied by the gradient at its pixel, as the CPU's backward from
// kept sensitivities does (the same bits).
template <class T, class S>
FLIP_HD void tiled_load_t(const T* gp, const BackwardBand& b, const Geometry& g, int64_t y0, int64_t x0, int R, int tid,
                          int nthreads, S smem, const T* gmap = nullptr) {
  const int rows = fused_rows(R), cols = fused_cols(R), rc = rows * cols;
  const int64_t stride = b.plane_stride(g.w);
  TileWalk at(tid, nthreads, cols);
  for (int i = tid; i < rc; i += nthreads, at.next()) {
    const int64_t y = y0 - R + at.row, x = x0 - R + at.col;
    const bool in = y >= b.g0 && y < b.g1 && x >= 0 && x < g.w;
    const int64_t off = (y - b.g0) * g.w + x;
    // Times 1 without gmap: the same bits, and one code path (a second one costs registers).
    const T gi = in && gmap != nullptr ? gmap[off] : T(1);
    for (int q = 0; q < kResponsePlanesPerImage; ++q) smem[q * rc + i] = (in ? gp[q * stride + off] : T(0)) * gi;
  }
}

// kTiledTranspose, phase 2: the transposed vertical filters (vt_values) of the tile's rows below y_end,
// every column of the halo included (zero outside the image). With the radii compiled in, a thread
// filters kVerticalRows rows of one column (tsum_rows: the rows share their samples' loads, as in
// fused_vertical); rows of its last group at or below y_end are filtered too and never read.
template <class Bank, class S>
FLIP_HD void tiled_vertical_t(const Geometry& g, const Bank& t, int64_t y0, int64_t y_end, int R, int tid, int nthreads,
                              S smem) {
  using T = typename Bank::value_type;
  constexpr int K = decltype(t.y)::kFixedRadius ? kVerticalRows : 1;
  static_assert(kTileH % K == 0, "whole row groups");
  const int cols = fused_cols(R), rc = fused_rows(R) * cols, n = kTileH * cols, tasks = n / K;
  const S in = smem, out = smem + kResponsePlanesPerImage * rc;
  TileWalk at(tid, nthreads, cols);
  for (int i = tid; i < tasks; i += nthreads, at.next()) {
    const int r = at.row * K;  // the first of the thread's rows
    const int64_t y = y0 + r;
    if (y >= y_end) continue;
    const int c = (r + R) * cols + at.col, o = r * cols + at.col;
    // Each plane's K values stored as soon as they are computed: fewer registers live.
    vt_values(
        g, t,
        [&](int q, const auto& f, auto form) {
          return tsum_rows<K, decltype(form)::value>(in + q * rc + c, cols, y, g.h, f);
        },
        [&](int q, const Rows<T, K>& v) {
          FLIP_UNROLL
          for (int k = 0; k < K; ++k) out[q * n + o + k * cols] = v[k];
        });
  }
}

// kTiledTranspose, phase 3: the transposed horizontal filters of the tile's pixels (rows below y_end)
// and the chain to the input, stored by ht_store (src, out, scale, tm as there).
template <class Bank, class S, class T = typename Bank::value_type>
FLIP_HD void tiled_horizontal_t(const Geometry& g, const Bank& t, int64_t y0, int64_t y_end, int64_t x0, int R, int tid,
                                int nthreads, S smem, Input mode, const T* src, T* out, T scale, ToneMapper tm) {
  const int cols = fused_cols(R), n = kTileH * cols;
  const S s = smem + kResponsePlanesPerImage * fused_rows(R) * cols;
  for (int i = tid; i < kTileH * kTileW; i += nthreads) {
    const int r = i / kTileW, j = i % kTileW;
    const int64_t y = y0 + r, x = x0 + j;
    if (y >= y_end || x >= g.w) continue;
    T g_opp[3], g_yh;
    ht_pixel(g, t, s, n, r * cols + j + R, x, g_opp, g_yh);
    ht_store(g, mode, y * g.w + x, g_opp, g_yh, src, out, scale, tm);
  }
}

}  // namespace flip
