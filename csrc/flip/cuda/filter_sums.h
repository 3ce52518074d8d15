// How the GPU code filters, per thread: the banks' taps as a kernel reads them (FilterView, radius
// read at run time; FixedFilter, radius compiled in), one output of a filter (correlate) and of
// its transpose (transposed_sum), the transposed filters of one pixel and the chain from its
// gradients back to the op's input (shared by the row passes and the tiled backward), and the
// plane geometry every formulation works on. Shared memory comes in as a template parameter (S,
// P): T* on the GPU, a checked handle in the test-only emulator (tests/emulator), which runs these
// functions unchanged on the host. The CPU kernels never include this file (cpu/separable.h).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../filters.h"
#include "../hdr_pixel.h"
#include "../pixel.h"

namespace flip {

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

// The same with radius R fixed at compile time, so that the filter loops unroll and each tap sits
// at a constant offset from w (the tiled kernels point w into their parameter space, where a tap is
// an operand of the multiply-add instead of a load; see launch_params.h, FixedRadii).
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

// What a pass reads as its input: an sRGB or linear RGB image, an opponent image (csf_filter), an
// achromatic one (feature_difference) or an HDR image with an exposure.
enum class Input : int { kSrgb = 0, kLinear = 1, kOpponent = 2, kAchromatic = 3, kHdr = 4 };

// The images a launch works on and the planes of their filter outputs: per image, the CSF planes
// (Y, Cx, Cz1, Cz2) first, then the feature planes (g, dg, ddg), each H x W.
struct Geometry {
  int64_t n, h, w;  // batch, height, width
  int images;       // images per batch item in the planes (2 for test + reference)
  bool csf, feat;   // which banks
  // Horizontal filter outputs (and transposed vertical ones): one per filter of the banks that run
  // (plane_counts.h).
  FLIP_HD int planes() const { return (csf ? kCsfFilters : 0) + (feat ? kFeatureFilters : 0); }
  // Gradient planes (the tail's adjoint): one per response of the banks that run.
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

// One output of a filter along a row of shared memory, c pointing at the centre sample.
template <Form F = Form::kPlain, class Filter, class P>
FLIP_HD typename Filter::value_type horizontal_sum(P c, const Filter& f) {
  return correlate<F>(f, [c](int k) { return c[k]; });
}

// Selects a filter form at compile time through an argument (the Sum functors below).
template <Form F>
using FormTag = std::integral_constant<Form, F>;

// The transposed vertical filters of one pixel (docs/algorithm.md §8.2): from the gradient planes
// (per image: CSF gF0..2 at 0-2 when csf; feature gdx, gdy, gddx, gddy after) to the
// transposed-vertical values (CSF t0..t3 at 0-3; feature A, B, C after), g.planes() values, each
// passed to emit(q, value) as soon as it is computed (but t2 and t3, which filter the same plane:
// both first, so that they share its samples' loads). sum(q, f, FormTag<F>{}) is the transposed
// vertical correlation of gradient plane q with f in form F at the pixel: the row passes read
// global memory (vertical_transpose_pixel), the tiled backward a tile in shared memory
// (tiled_vertical_transpose, K rows at once: Rows<T, K> values).
template <class Bank, class Sum, class Emit>
FLIP_HD void vertical_transpose_values(const Geometry& g, const Bank& t, const Sum& sum, const Emit& emit) {
  int gi = 0;
  if (g.csf) {
    emit(0, sum(0, t.y, FormTag<Form::kPlain>{}));
    emit(1, sum(1, t.cx, FormTag<Form::kPlain>{}));
    const auto t2 = sum(2, t.cz1, FormTag<Form::kPlain>{}), t3 = sum(2, t.cz2, FormTag<Form::kPlain>{});
    emit(2, t2);
    emit(3, t3);
    gi = 3;
  }
  if (g.feat) {
    const int f = g.feat0();
    emit(f, sum(gi, t.g, FormTag<Form::kPlain>{}));          // A = V_g^T gdx: to be dg-transposed
    emit(f + 1, sum(gi + 2, t.g, FormTag<Form::kPlain>{}));  // B = V_g^T gddx: to be ddg-transposed
    emit(f + 2, sum(gi + 1, t.dg, FormTag<Form::kOdd>{}) +   // C: to be g-transposed
                    sum(gi + 3, t.ddg, FormTag<Form::kCentred>{}));
  }
}

// K values of one type, with the sum of two taken value by value: the outputs of K consecutive
// positions of a line, computed together (transposed_sums).
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
FLIP_HD typename Filter::value_type transposed_sum(P c, int stride, int64_t pos, int64_t len, const Filter& f) {
  using T = typename Filter::value_type;
  T acc = correlate<F>(f, [c, stride](int k) { return c[-k * stride]; });
  const int64_t m = f.r < len ? f.r : len;
  if (pos == 0)
    for (int64_t i = 0; i < m; ++i) acc = FLIP_FMADD(T, f.left[i], c[i * stride], acc);
  if (pos == len - 1)
    for (int64_t d = 0; d < m; ++d) acc = FLIP_FMADD(T, f.right[d], c[-d * stride], acc);
  return acc;
}

// transposed_sum at positions pos, ..., pos + K - 1 (pos >= 0) of the same line, c pointing at
// pos's sample. With the filter loops unrolled (FixedFilter) the K sums share their samples' loads;
// each is still the sum of one position alone, in transposed_sum's order, folds included. Only the
// first of the K positions can be the line's first, and one at most its last.
template <int K, Form F = Form::kPlain, class Filter, class P>
FLIP_HD Rows<typename Filter::value_type, K> transposed_sums(P c, int stride, int64_t pos, int64_t len,
                                                             const Filter& f) {
  using T = typename Filter::value_type;
  Rows<T, K> out;
  if constexpr (K == 1) {
    out[0] = transposed_sum<F>(c, stride, pos, len, f);
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
FLIP_HD void horizontal_transpose_pixel(const Geometry& g, const Bank& t, S s, int L, int c, int64_t x, T g_opp[3],
                                        T& g_yh) {
  g_opp[0] = g_opp[1] = g_opp[2] = g_yh = T(0);
  if (g.csf) {
    g_opp[0] = transposed_sum(s + c, 1, x, g.w, t.y);
    g_opp[1] = transposed_sum(s + L + c, 1, x, g.w, t.cx);
    g_opp[2] = transposed_sum(s + 2 * L + c, 1, x, g.w, t.cz1) + transposed_sum(s + 3 * L + c, 1, x, g.w, t.cz2);
  }
  if (g.feat) {
    const S f = s + g.feat0() * L;
    g_yh = transposed_sum<Form::kOdd>(f + c, 1, x, g.w, t.dg) +
           transposed_sum<Form::kCentred>(f + L + c, 1, x, g.w, t.ddg) + transposed_sum(f + 2 * L + c, 1, x, g.w, t.g);
  }
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

// The last step of the transposed horizontal filters (row passes and tiled backward): the gradient
// w.r.t. the op's input at pixel p. out and src point at the image (C x H x W); scale and tm: the
// exposure of Input::kHdr (unused otherwise).
template <class T>
FLIP_HD void store_input_gradient(const Geometry& g, Input mode, int64_t p, const T g_opp[3], T g_yh, const T* src,
                                  T* out, T scale, ToneMapper tm) {
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

}  // namespace flip
