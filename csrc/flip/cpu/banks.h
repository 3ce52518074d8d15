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

// Horizontal CSF pass of one row: opponent rows o0, o1, o2 -> the four intermediates' rows, placed
// in their planes by `place` (PlainRow, PieceRow).
template <class T, class Place>
inline void csf_h_row(const T* o0, const T* o1, const T* o2, int64_t W, const CsfTaps<T>& t, T* pad, CsfPlanes<T> p,
                      const Place& place) {
  hconv(o0, W, t.y, pad, p.y, place);
  hconv(o1, W, t.cx, pad, p.cx, place);
  pad_edge(o2, W, t.cz1.radius, pad);
  hconv_padded(pad, W, t.cz1, p.cz1, place);
  hconv_padded(pad, W, t.cz2, p.cz2, place);
}

// The vertical CSF pass of a tile, the planes' rows found by rows (ClampedRows, TableRows): per
// row, F0, F1, F2 at dst + 0, n, 2n (rows `stride` apart).
template <class T, class Rows>
inline void csf_v_tile(CsfPlanes<T> p, const Rows& rows, const Tile& t, const CsfTaps<T>& taps, T* dst,
                       int64_t stride) {
  vconv_tile(p.y, rows, t, taps.y, dst, stride);
  vconv_tile(p.cx, rows, t, taps.cx, dst + t.n, stride);
  vconv_tile(p.cz1, rows, t, taps.cz1, dst + 2 * t.n, stride);
  vconv_tile(p.cz2, rows, t, taps.cz2, dst + 2 * t.n, stride, true);
}
template <class T>
inline void csf_v_tile(CsfPlanes<T> p, int64_t H, int64_t W, const Tile& t, const CsfTaps<T>& taps, T* dst,
                       int64_t stride) {
  csf_v_tile(p, ClampedRows<T>{H, W}, t, taps, dst, stride);
}

// The vertical feature pass of a tile: per row, dx, dy, ddx, ddy at dst + 0, n, 2n, 3n (rows
// `stride` apart); dx = g_y * (dg_x), ddx = g_y * (ddg_x), dy = dg_y * (g_x), ddy = ddg_y * (g_x).
// Each response has one zero-sum pass, evaluated in its exact form (filters.h): the horizontal one
// for dx, ddx, the vertical one for dy, ddy (a constant neighbourhood gives a constant g_x plane).
template <class T, class Rows>
inline void feature_v_tile(FeaturePlanes<T> p, const Rows& rows, const Tile& t, const FeatureTaps<T>& taps, T* dst,
                           int64_t stride) {
  vconv_tile(p.dg, rows, t, taps.g, dst, stride);
  vconv_tile(p.ddg, rows, t, taps.g, dst + 2 * t.n, stride);
  vconv_tile<Form::kOdd>(p.g, rows, t, taps.dg, dst + t.n, stride);
  vconv_tile<Form::kCentred>(p.g, rows, t, taps.ddg, dst + 3 * t.n, stride);
}
template <class T>
inline void feature_v_tile(FeaturePlanes<T> p, int64_t H, int64_t W, const Tile& t, const FeatureTaps<T>& taps, T* dst,
                           int64_t stride) {
  feature_v_tile(p, ClampedRows<T>{H, W}, t, taps, dst, stride);
}

// Horizontal feature pass of one achromatic row, placed as csf_h_row's.
template <class T, class Place>
inline void feature_h_row(const T* yhat, int64_t W, const FeatureTaps<T>& t, T* pad, FeaturePlanes<T> p,
                          const Place& place) {
  pad_edge(yhat, W, t.g.radius, pad);
  hconv_padded(pad, W, t.g, p.g, place);
  hconv_padded<Form::kOdd>(pad, W, t.dg, p.dg, place);
  hconv_padded<Form::kCentred>(pad, W, t.ddg, p.ddg, place);
}

// The transposed banks, in two halves: the vertical transposes of a tile (whose columns need not
// be a whole row), then the horizontal ones of a whole row.
//
// Vertical half of the CSF bank's transpose: for each row r of tile t, the rows t0..t3 at
// dst + (r - y0) * stride + 0, W, 2W, 3W (each the tile's columns of a W-sample row) are
// accumulated with the transposed vertical filters of the gradient planes w.r.t. F0, F1, F2 (F2
// feeds both blue-yellow Gaussians). zeros holds t.n zeros.
template <class T>
inline void csf_t_vertical(const T* g0, const T* g1, const T* g2, int64_t H, int64_t W, const Tile& t,
                           const CsfTaps<T>& taps, const T* zeros, T* dst, int64_t stride) {
  T* d = dst + t.x0;
  vconv_t_tile(g0, H, W, t, taps.y, zeros, d, stride);
  vconv_t_tile(g1, H, W, t, taps.cx, zeros, d + W, stride);
  vconv_t_tile(g2, H, W, t, taps.cz1, zeros, d + 2 * W, stride);
  vconv_t_tile(g2, H, W, t, taps.cz2, zeros, d + 3 * W, stride);
}

// Horizontal half: the rows t0..t3 of one image row -> the gradient rows w.r.t. its opponent
// channels o0..o2 (overwritten). pad holds W + 2r scratch samples.
template <class T>
inline void csf_t_horizontal(const T* t0, const T* t1, const T* t2, const T* t3, int64_t W, const CsfTaps<T>& taps,
                             T* pad, T* o0, T* o1, T* o2) {
  std::fill(o0, o0 + W, T(0));
  std::fill(o1, o1 + W, T(0));
  std::fill(o2, o2 + W, T(0));
  hconv_t_acc(t0, W, taps.y, pad, o0);
  hconv_t_acc(t1, W, taps.cx, pad, o1);
  hconv_t_acc(t2, W, taps.cz1, pad, o2);
  hconv_t_acc(t3, W, taps.cz2, pad, o2);
}

// Vertical half of the feature bank's transpose, as csf_t_vertical: rows a, b, c at dst + 0, W, 2W
// from the gradient planes w.r.t. dx, ddx (through g) and dy, ddy (through dg and ddg, both into c).
template <class T>
inline void feature_t_vertical(const T* gdx, const T* gdy, const T* gddx, const T* gddy, int64_t H, int64_t W,
                               const Tile& t, const FeatureTaps<T>& taps, const T* zeros, T* dst, int64_t stride) {
  T* d = dst + t.x0;
  vconv_t_tile(gdx, H, W, t, taps.g, zeros, d, stride);
  vconv_t_tile(gddx, H, W, t, taps.g, zeros, d + W, stride);
  vconv_t_tile<Form::kOdd>(gdy, H, W, t, taps.dg, zeros, d + 2 * W, stride);
  vconv_t_tile<Form::kCentred>(gddy, H, W, t, taps.ddg, zeros, d + 2 * W, stride);
}

// Horizontal half: rows a, b, c of one image row -> the gradient w.r.t. its achromatic row,
// accumulated into out.
template <class T>
inline void feature_t_horizontal(const T* a, const T* b, const T* c, int64_t W, const FeatureTaps<T>& taps, T* pad,
                                 T* out) {
  hconv_t_acc<Form::kOdd>(a, W, taps.dg, pad, out);
  hconv_t_acc<Form::kCentred>(b, W, taps.ddg, pad, out);
  hconv_t_acc(c, W, taps.g, pad, out);
}

// Both halves for one row (the single-stage ops): gradient planes w.r.t. the filtered channels ->
// gradient rows w.r.t. the opponent channels (overwritten). tmp holds 4 rows.
template <class T>
inline void csf_t_row(const T* g0, const T* g1, const T* g2, int64_t H, int64_t W, int64_t row, const CsfTaps<T>& t,
                      T* tmp, T* pad, T* o0, T* o1, T* o2) {
  std::fill(tmp, tmp + 4 * W, T(0));
  std::fill(pad, pad + W, T(0));  // the rows outside the planes, until the horizontal half pads
  csf_t_vertical(g0, g1, g2, H, W, Tile{row, row + 1, 0, W}, t, pad, tmp, 4 * W);
  csf_t_horizontal(tmp, tmp + W, tmp + 2 * W, tmp + 3 * W, W, t, pad, o0, o1, o2);
}

// Gradient planes w.r.t. dx, dy, ddx, ddy -> gradient row w.r.t. the achromatic input,
// accumulated into out. tmp holds 3 rows.
template <class T>
inline void feature_t_row(const T* gdx, const T* gdy, const T* gddx, const T* gddy, int64_t H, int64_t W, int64_t row,
                          const FeatureTaps<T>& t, T* tmp, T* pad, T* out) {
  std::fill(tmp, tmp + 3 * W, T(0));
  std::fill(pad, pad + W, T(0));  // as in csf_t_row
  feature_t_vertical(gdx, gdy, gddx, gddy, H, W, Tile{row, row + 1, 0, W}, t, pad, tmp, 3 * W);
  feature_t_horizontal(tmp, tmp + W, tmp + 2 * W, W, t, pad, out);
}

}  // namespace cpu
}  // namespace flip
