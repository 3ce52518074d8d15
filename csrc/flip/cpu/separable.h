// Row primitives of the separable filters with clamp-to-edge borders, and their transposes.
// Inner loops run over contiguous x so that the compiler vectorises them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../filters.h"

namespace flip {
namespace cpu {

// acc[i] += the taps of filter w (radius r, form F) on pixel x0 + i, for i < n, where at(k) points
// at the row of samples at offset k (the sample of pixel x is at(k)[x]). Summed tap by tap in the
// same order as block_taps_registers, so every pixel rounds alike.
template <Form F, class T, class RowAt>
inline void block_taps(const RowAt& at, const T* w, int r, int64_t x0, int64_t n, T* __restrict acc) {
  if constexpr (F == Form::kPlain) {
    for (int k = -r; k <= r; ++k) {
      const T wk = w[k + r];
      const T* __restrict s = at(k) + x0;
      for (int64_t i = 0; i < n; ++i) acc[i] += wk * s[i];
    }
  } else {
    const T* __restrict c = at(0) + x0;
    for (int j = 1; j <= r; ++j) {
      const T* __restrict lo = at(-j) + x0;
      const T* __restrict hi = at(j) + x0;
      if constexpr (F == Form::kOdd) {
        const T wj = w[r - j];
        for (int64_t i = 0; i < n; ++i) acc[i] += wj * (lo[i] - hi[i]);
      } else {
        const T wj = w[r + j];
        for (int64_t i = 0; i < n; ++i) acc[i] += wj * ((hi[i] - c[i]) + (lo[i] - c[i]));
      }
    }
  }
}

// 32 bytes of T as one GCC vector value (lowered to two 16-byte halves where the level has no
// 32-byte registers). The filters keep a block of outputs in such values across all taps.
template <class T>
struct LanesOf;
template <>
struct LanesOf<float> {
  typedef float type __attribute__((vector_size(32)));
};
template <>
struct LanesOf<double> {
  typedef double type __attribute__((vector_size(32)));
};
template <class T>
using Lanes = typename LanesOf<T>::type;

template <class T>
inline __attribute__((always_inline)) Lanes<T> load_lanes(const T* p) {
  Lanes<T> v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// block_taps for a full block of kVecs vectors, with the block in registers: the same taps in the
// same order, so the same bits as block_taps.
template <Form F, int kVecs, class T, class RowAt>
inline void block_taps_registers(const RowAt& at, const T* w, int r, int64_t x0, T* __restrict out, bool accumulate) {
  constexpr int L = static_cast<int>(sizeof(Lanes<T>) / sizeof(T));
  Lanes<T> acc[kVecs];
#pragma GCC unroll 16
  for (int v = 0; v < kVecs; ++v) acc[v] = accumulate ? load_lanes(out + v * L) : Lanes<T>{};
  if constexpr (F == Form::kPlain) {
    for (int k = -r; k <= r; ++k) {
      const T wk = w[k + r];
      const T* s = at(k) + x0;
#pragma GCC unroll 16
      for (int v = 0; v < kVecs; ++v) acc[v] += wk * load_lanes(s + v * L);
    }
  } else {
    const T* c = at(0) + x0;
    for (int j = 1; j <= r; ++j) {
      const T* lo = at(-j) + x0;
      const T* hi = at(j) + x0;
      if constexpr (F == Form::kOdd) {
        const T wj = w[r - j];
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) acc[v] += wj * (load_lanes(lo + v * L) - load_lanes(hi + v * L));
      } else {
        const T wj = w[r + j];
#pragma GCC unroll 16
        for (int v = 0; v < kVecs; ++v) {
          const Lanes<T> cv = load_lanes(c + v * L);
          acc[v] += wj * ((load_lanes(hi + v * L) - cv) + (load_lanes(lo + v * L) - cv));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int v = 0; v < kVecs; ++v) std::memcpy(out + v * L, &acc[v], sizeof acc[v]);
}

// The outputs correlate_rows keeps in registers at once: kCorrelateVecs vectors of Lanes.
constexpr int kCorrelateVecs = 8;
template <class T>
constexpr int64_t kCorrelateBlock = kCorrelateVecs * static_cast<int64_t>(sizeof(Lanes<T>) / sizeof(T));

// Where a row's outputs go: output x at plane + off + x (PlainRow), or in pieces of kColumns
// samples `piece` apart, output x at plane + off + x / kColumns * piece + x % kColumns (PieceRow:
// the banded stages' ring of rows, pipeline.h). A piece holds whole blocks of correlate_rows.
struct PlainRow {
  int64_t off;
  template <class T>
  T* operator()(T* plane, int64_t x) const {
    return plane + off + x;
  }
};
template <int64_t kColumns>
struct PieceRow {
  int64_t off, piece;
  template <class T>
  T* operator()(T* plane, int64_t x) const {
    static_assert(kColumns % kCorrelateBlock<T> == 0, "a piece must hold whole blocks");
    return plane + off + x / kColumns * piece + x % kColumns;
  }
};

// dst[x] (+)= sum_k w[k] * at(k)[x] over the taps of f in form F (filters.h), dst[x] at
// place(dst, x). Register-blocked: a block of 256 bytes of outputs stays in registers across all
// taps, so each tap costs one load per vector instead of also a load and a store of dst; the last
// partial block goes through memory.
template <Form F, class T, class RowAt, class Place = PlainRow>
inline void correlate_rows(const RowAt& at, const Filter1D<T>& f, int64_t W, T* __restrict dst, bool accumulate,
                           const Place& place = PlainRow{0}) {
  constexpr int64_t kBlock = kCorrelateBlock<T>;
  int64_t x0 = 0;
  for (; x0 + kBlock <= W; x0 += kBlock)
    block_taps_registers<F, kCorrelateVecs>(at, f.w.data(), f.radius, x0, place(dst, x0), accumulate);
  if (x0 < W) {
    const int64_t n = W - x0;
    T* d = place(dst, x0);
    T acc[kBlock];
    for (int64_t i = 0; i < n; ++i) acc[i] = accumulate ? d[i] : T(0);
    block_taps<F>(at, f.w.data(), f.radius, x0, n, acc);
    for (int64_t i = 0; i < n; ++i) d[i] = acc[i];
  }
}

// dst[x] = sum_k w[k] * src[clamp(x + k)], with src already padded by r samples on each side,
// evaluated in form F (filters.h); dst[x] at place(dst, x).
template <Form F = Form::kPlain, class T, class Place = PlainRow>
inline void hconv_padded(const T* pad, int64_t W, const Filter1D<T>& f, T* __restrict dst,
                         const Place& place = PlainRow{0}) {
  const T* centre = pad + f.radius;
  correlate_rows<F>([centre](int k) { return centre + k; }, f, W, dst, false, place);
}

// Copies a row into pad with r replicated samples on each side.
template <class T>
inline void pad_edge(const T* src, int64_t W, int r, T* pad) {
  std::copy(src, src + W, pad + r);
  std::fill(pad, pad + r, src[0]);
  std::fill(pad + r + W, pad + 2 * r + W, src[W - 1]);
}

template <class T, class Place = PlainRow>
inline void hconv(const T* src, int64_t W, const Filter1D<T>& f, T* pad, T* dst, const Place& place = PlainRow{0}) {
  pad_edge(src, W, f.radius, pad);
  hconv_padded(pad, W, f, dst, place);
}

// A tile of the vertical passes: rows y0 .. y1 - 1 by columns x0 .. x0 + n - 1 (a single row:
// {row, row + 1, 0, W}).
struct Tile {
  int64_t y0, y1, x0, n;
};

// Where a vertical pass finds row y of a plane: ClampedRows for a whole H x W plane (rows past
// its edges clamped onto them); TableRows for the banded stages' ring of rows (pipeline.h), whose
// table gives the offset of each row from `first` on, edges already clamped.
template <class T>
struct ClampedRows {
  int64_t H, W;
  const T* operator()(const T* plane, int64_t y) const {
    return plane + std::min<int64_t>(std::max<int64_t>(y, 0), H - 1) * W;
  }
};
struct TableRows {
  const int64_t* offset;
  int64_t first;
  template <class T>
  const T* operator()(const T* plane, int64_t y) const {
    return plane + offset[y - first];
  }
};

// dst[(r - y0) * stride + i] (+)= sum_k w[k] * plane[clamp(r + k)][x0 + i] for the rows r and
// columns of tile t of a plane whose rows rows(plane, y) finds, in form F: row by row over one
// plane, so that the 2r + y1 - y0 input rows of the tile (a few tens of KB) are loaded from memory
// once and reused from L1. The sums are those of a whole-row pass, in the same order: the same bits.
template <Form F = Form::kPlain, class T, class Rows>
inline void vconv_tile(const T* plane, const Rows& rows, const Tile& t, const Filter1D<T>& f, T* dst, int64_t stride,
                       bool accumulate = false) {
  for (int64_t row = t.y0; row < t.y1; ++row) {
    auto at = [&rows, plane, row, x0 = t.x0](int k) { return rows(plane, row + k) + x0; };
    correlate_rows<F>(at, f, t.n, dst + (row - t.y0) * stride, accumulate);
  }
}

// The same over a whole H x W plane.
template <Form F = Form::kPlain, class T>
inline void vconv_tile(const T* plane, int64_t H, int64_t W, const Tile& t, const Filter1D<T>& f, T* dst,
                       int64_t stride, bool accumulate = false) {
  vconv_tile<F>(plane, ClampedRows<T>{H, W}, t, f, dst, stride, accumulate);
}

template <class T>
inline void axpy(T a, const T* __restrict x, T* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// The transposes below run the same register-blocked correlation as the forward (correlate_rows),
// read backwards: the in-range part of F^T g is dst[j] += sum_k w[k] g[j - k] (docs/algorithm.md
// §8.2), i.e. the filter in the same form on samples at(k) = g[j - k], with zeros outside the image;
// the border folds are then added on their own.

// dst += F^T g for the horizontal clamp-to-edge correlation F (in form F, see filters.h); zpad
// holds W + 2r scratch samples.
template <Form F = Form::kPlain, class T>
inline void hconv_t_acc(const T* g, int64_t W, const Filter1D<T>& f, T* zpad, T* __restrict dst) {
  const int r = f.radius;
  std::fill(zpad, zpad + r, T(0));
  std::copy(g, g + W, zpad + r);
  std::fill(zpad + r + W, zpad + 2 * r + W, T(0));
  const T* centre = zpad + r;
  correlate_rows<F>([centre](int k) { return centre - k; }, f, W, dst, true);
  // Samples that the forward clamped onto the first / last pixel.
  const int64_t m = std::min<int64_t>(r, W);
  T s0 = 0, s1 = 0;
  for (int64_t i = 0; i < m; ++i) {
    s0 += f.left[i] * g[i];
    s1 += f.right[i] * g[W - 1 - i];
  }
  dst[0] += s0;
  dst[W - 1] += s1;
}

// dst[(r - y0) * stride + i] += (F^T g)[r][x0 + i] for the rows and columns of tile t, F the
// vertical clamp-to-edge correlation (in form F) over the H x W plane g; zeros holds t.n zeros
// (the rows outside the plane). As vconv_tile: row by row over one plane, the same sums in the
// same order whatever the tile.
template <Form F = Form::kPlain, class T>
inline void vconv_t_tile(const T* g, int64_t H, int64_t W, const Tile& t, const Filter1D<T>& f, const T* zeros, T* dst,
                         int64_t stride) {
  const int r = f.radius;
  const int64_t m = std::min<int64_t>(r, H);
  const T* first = g + t.x0;
  for (int64_t row = t.y0; row < t.y1; ++row) {
    T* d = dst + (row - t.y0) * stride;
    auto at = [=](int k) { return row - k >= 0 && row - k < H ? first + (row - k) * W : zeros; };
    correlate_rows<F>(at, f, t.n, d, true);
    if (row == 0)
      for (int64_t i = 0; i < m; ++i) axpy(f.left[i], first + i * W, d, t.n);
    if (row == H - 1)
      for (int64_t e = 0; e < m; ++e) axpy(f.right[e], first + (H - 1 - e) * W, d, t.n);
  }
}

}  // namespace cpu
}  // namespace flip
