// The two filter banks of FLIP as row operations: the CSF bank (opponent image -> filtered
// opponent image) and the feature bank (achromatic image -> dx, dy, ddx, ddy), each with its
// horizontal pass, vertical pass and transpose (for the backward).
#pragma once

#include <vector>

#include "separable.h"

namespace flip {
namespace cpu {

// Horizontal intermediates of one image, each an H x W plane.
template <class T>
struct CsfPlanes {
  T *y, *cx, *cz1, *cz2;
};
template <class T>
struct FeaturePlanes {
  T *g, *dg, *ddg;  // the horizontal filter that was applied
};

template <class T>
inline CsfPlanes<T> csf_planes(T* base, int64_t hw) {
  return {base, base + hw, base + 2 * hw, base + 3 * hw};
}
template <class T>
inline FeaturePlanes<T> feature_planes(T* base, int64_t hw) {
  return {base, base + hw, base + 2 * hw};
}

// Per-thread scratch: one padded row plus `rows` plain rows, each starting on a cache line (as
// the Workspace planes, workspace.h). Rows are W samples apart (a caller may treat consecutive
// rows as one block of W-sample rows), so they stay on line boundaries when W is a multiple of
// 64 bytes.
template <class T>
struct Scratch {
  static constexpr int64_t kLine = 64 / sizeof(T);  // samples per cache line
  std::vector<T> buf;
  int64_t W, padlen;
  T* base;
  Scratch(int64_t W_, int rmax, int rows)
      : buf(round_up(W_ + 2 * rmax) + rows * W_ + kLine), W(W_), padlen(round_up(W_ + 2 * rmax)) {
    const auto address = reinterpret_cast<uintptr_t>(buf.data());
    base = buf.data() + (64 - address % 64) % 64 / sizeof(T);
  }
  T* pad() { return base; }
  T* row(int i) { return base + padlen + i * W; }

 private:
  static int64_t round_up(int64_t n) { return (n + kLine - 1) / kLine * kLine; }
};

// Horizontal CSF pass of one row: opponent rows o0, o1, o2 -> the four intermediates at `off`.
template <class T>
inline void csf_h_row(const T* o0, const T* o1, const T* o2, int64_t W, const CsfTaps<T>& t, T* pad,
                      CsfPlanes<T> p, int64_t off) {
  hconv(o0, W, t.y, pad, p.y + off);
  hconv(o1, W, t.cx, pad, p.cx + off);
  pad_edge(o2, W, t.cz1.radius, pad);
  hconv_padded(pad, W, t.cz1, p.cz1 + off);
  hconv_padded(pad, W, t.cz2, p.cz2 + off);
}

// A tile of the vertical passes: rows y0 .. y1 - 1 by columns x0 .. x0 + n - 1 (a single row:
// {row, row + 1, 0, W}).
struct Tile {
  int64_t y0, y1, x0, n;
};

// dst[(r - y0) * stride + i] (+)= sum_k w[k] * plane[clamp(r + k)][x0 + i] for the rows r and
// columns of the tile, in form F: row by row over one plane, so that the 2r + y1 - y0 input rows
// of the tile (a few tens of KB) are loaded from memory once and reused from L1. The sums are
// those of a whole-row pass, in the same order: the same bits.
template <Form F = Form::kPlain, class T>
inline void vconv_tile(const T* plane, int64_t H, int64_t W, const Tile& t, const Filter1D<T>& f, T* dst,
                       int64_t stride, bool accumulate = false) {
  const T* first = plane + t.x0;
  for (int64_t row = t.y0; row < t.y1; ++row) {
    auto at = [=](int k) { return first + std::min<int64_t>(std::max<int64_t>(row + k, 0), H - 1) * W; };
    correlate_rows<F>(at, f, t.n, dst + (row - t.y0) * stride, accumulate);
  }
}

// The vertical CSF pass of a tile: per row, F0, F1, F2 at dst + 0, n, 2n (rows `stride` apart).
template <class T>
inline void csf_v_tile(CsfPlanes<T> p, int64_t H, int64_t W, const Tile& t, const CsfTaps<T>& taps, T* dst,
                       int64_t stride) {
  vconv_tile(p.y, H, W, t, taps.y, dst, stride);
  vconv_tile(p.cx, H, W, t, taps.cx, dst + t.n, stride);
  vconv_tile(p.cz1, H, W, t, taps.cz1, dst + 2 * t.n, stride);
  vconv_tile(p.cz2, H, W, t, taps.cz2, dst + 2 * t.n, stride, true);
}

// The vertical feature pass of a tile: per row, dx, dy, ddx, ddy at dst + 0, n, 2n, 3n (rows
// `stride` apart); dx = g_y * (dg_x), ddx = g_y * (ddg_x), dy = dg_y * (g_x), ddy = ddg_y * (g_x).
// Each response has one zero-sum pass, evaluated in its exact form (filters.h): the horizontal one
// for dx, ddx, the vertical one for dy, ddy (a constant neighbourhood gives a constant g_x plane).
template <class T>
inline void feature_v_tile(FeaturePlanes<T> p, int64_t H, int64_t W, const Tile& t, const FeatureTaps<T>& taps,
                           T* dst, int64_t stride) {
  vconv_tile(p.dg, H, W, t, taps.g, dst, stride);
  vconv_tile(p.ddg, H, W, t, taps.g, dst + 2 * t.n, stride);
  vconv_tile<Form::kOdd>(p.g, H, W, t, taps.dg, dst + t.n, stride);
  vconv_tile<Form::kCentred>(p.g, H, W, t, taps.ddg, dst + 3 * t.n, stride);
}

// Transpose of the CSF bank for row `row`: gradient planes w.r.t. the filtered channels ->
// gradient rows w.r.t. the opponent channels (overwritten). tmp holds 4 rows.
template <class T>
inline void csf_t_row(const T* g0, const T* g1, const T* g2, int64_t H, int64_t W, int64_t row,
                      const CsfTaps<T>& t, T* tmp, T* pad, T* o0, T* o1, T* o2) {
  T *t0 = tmp, *t1 = tmp + W, *t2 = tmp + 2 * W, *t3 = tmp + 3 * W;
  std::fill(tmp, tmp + 4 * W, T(0));
  std::fill(pad, pad + W, T(0));  // the rows outside the planes, until the horizontal halves pad
  vconv_t_acc(g0, H, W, row, t.y, pad, t0);
  vconv_t_acc(g1, H, W, row, t.cx, pad, t1);
  vconv_t_acc(g2, H, W, row, t.cz1, pad, t2);
  vconv_t_acc(g2, H, W, row, t.cz2, pad, t3);
  std::fill(o0, o0 + W, T(0));
  std::fill(o1, o1 + W, T(0));
  std::fill(o2, o2 + W, T(0));
  hconv_t_acc(t0, W, t.y, pad, o0);
  hconv_t_acc(t1, W, t.cx, pad, o1);
  hconv_t_acc(t2, W, t.cz1, pad, o2);
  hconv_t_acc(t3, W, t.cz2, pad, o2);
}

// Horizontal feature pass of one achromatic row.
template <class T>
inline void feature_h_row(const T* yhat, int64_t W, const FeatureTaps<T>& t, T* pad,
                          FeaturePlanes<T> p, int64_t off) {
  pad_edge(yhat, W, t.g.radius, pad);
  hconv_padded(pad, W, t.g, p.g + off);
  hconv_padded<Form::kOdd>(pad, W, t.dg, p.dg + off);
  hconv_padded<Form::kCentred>(pad, W, t.ddg, p.ddg + off);
}

// Transpose of the feature bank for row `row`: gradient planes w.r.t. dx, dy, ddx, ddy ->
// gradient row w.r.t. the achromatic input, accumulated into out. tmp holds 3 rows.
template <class T>
inline void feature_t_row(const T* gdx, const T* gdy, const T* gddx, const T* gddy, int64_t H,
                          int64_t W, int64_t row, const FeatureTaps<T>& t, T* tmp, T* pad, T* out) {
  T *a = tmp, *b = tmp + W, *c = tmp + 2 * W;
  std::fill(tmp, tmp + 3 * W, T(0));
  std::fill(pad, pad + W, T(0));  // the rows outside the planes, as in csf_t_row
  vconv_t_acc(gdx, H, W, row, t.g, pad, a);
  vconv_t_acc(gddx, H, W, row, t.g, pad, b);
  vconv_t_acc<Form::kOdd>(gdy, H, W, row, t.dg, pad, c);
  vconv_t_acc<Form::kCentred>(gddy, H, W, row, t.ddg, pad, c);
  hconv_t_acc<Form::kOdd>(a, W, t.dg, pad, out);
  hconv_t_acc<Form::kCentred>(b, W, t.ddg, pad, out);
  hconv_t_acc(c, W, t.g, pad, out);
}

}  // namespace cpu
}  // namespace flip
