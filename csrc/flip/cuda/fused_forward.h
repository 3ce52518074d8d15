// The fused forward of LDR-FLIP and of one exposure of HDR-FLIP, per thread (docs/algorithm.md
// §8.8): one block per walk down kWalkTiles tiles of kTileW x kTileH, one below the other. For each
// tile it loads the tile plus an R-pixel halo of both images into shared memory, runs the
// horizontal filters there, then the vertical ones, then the per-pixel tail, and writes only the
// error map: no planes in global memory. The tile below needs 2R of the same horizontal-output rows
// (its halo above is this tile's bottom rows and halo), so the block keeps them (fused_keep_rows)
// and converts and filters only its kTileH new rows; the first tile of a walk (and, in HDR-FLIP's
// backward, the tile after one it skipped) does all kTileH + 2R. Shared memory: the horizontal
// outputs of both images (7 planes each over the tile's rows plus halo), then the converted input
// tile (4 channels), whose space the vertical outputs of both images (7 each) take once the
// horizontal filters have read it. The tiled backward (tiled_backward.h) runs phases 1-3 too.
#pragma once

#include "filter_sums.h"

namespace flip {

// Threads per block of the fused forward and of both kernels of the tiled backward.
constexpr int kFusedThreads = 256;

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
FLIP_HD int fused_horizontal_offset(int R, int im) { return im * kHorizontalPlanesPerImage * fused_rows(R) * kTileW; }
// The converted input tile, 4 planes of fused_rows x fused_cols (rows fused_stride apart); later
// the vertical outputs.
FLIP_HD int fused_input_offset(int R) { return fused_horizontal_offset(R, 2); }
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
  const S in = smem + fused_input_offset(R) + r0 * stride, h = smem + fused_horizontal_offset(R, im) + r0 * kTileW;
  for (int i = tid; i < n; i += nthreads) {
    const int row = i / per_row, col = i % per_row * K;  // the thread's first pixel
    const int c = row * stride + col + R;                // its centre sample in the input tile
    // All before any store: the filters of one channel (cz1 and cz2; g, dg and ddg) and the K
    // columns then share their samples' loads, which a store in between (to memory the compiler
    // cannot tell apart from the input) would force to be repeated.
    T v[kHorizontalPlanesPerImage][K];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) {
      v[0][k] = horizontal_sum(in + c + k, t.y);
      v[1][k] = horizontal_sum(in + rc + c + k, t.cx);
      v[2][k] = horizontal_sum(in + 2 * rc + c + k, t.cz1);
      v[3][k] = horizontal_sum(in + 2 * rc + c + k, t.cz2);
      v[4][k] = horizontal_sum(in + 3 * rc + c + k, t.g);
      v[5][k] = horizontal_sum<Form::kOdd>(in + 3 * rc + c + k, t.dg);
      v[6][k] = horizontal_sum<Form::kCentred>(in + 3 * rc + c + k, t.ddg);
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
FLIP_HD typename Filter::value_type tile_vertical_sum(P h, const Filter& f) {  // h points at the centre row's sample
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
    const S h = smem + fused_horizontal_offset(R, im) + o + R * kTileW, v = smem + fused_vertical_offset(R, im) + o;
    // Plane by plane, each one's outputs before their stores: a store in between (to memory the
    // compiler cannot tell apart from the samples) would force the samples' loads to be repeated.
    // dy and ddy read the same plane, and so do cz1 and cz2 (F2).
    T a[K], b[K];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = tile_vertical_sum(h + k * kTileW, t.y);
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = tile_vertical_sum(h + n + k * kTileW, t.cx);
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[np + k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k)
      a[k] = tile_vertical_sum(h + 2 * n + k * kTileW, t.cz1) + tile_vertical_sum(h + 3 * n + k * kTileW, t.cz2);
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[2 * np + k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = tile_vertical_sum(h + 5 * n + k * kTileW, t.g);  // horizontal dg, vertical g
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) v[3 * np + k * kTileW] = a[k];
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) {
      a[k] = tile_vertical_sum<Form::kOdd>(h + 4 * n + k * kTileW, t.dg);       // horizontal g, vertical dg
      b[k] = tile_vertical_sum<Form::kCentred>(h + 4 * n + k * kTileW, t.ddg);  // horizontal g, vertical ddg
    }
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) {
      v[4 * np + k * kTileW] = a[k];
      v[6 * np + k * kTileW] = b[k];
    }
    FLIP_UNROLL
    for (int k = 0; k < K; ++k) a[k] = tile_vertical_sum(h + 6 * n + k * kTileW, t.g);  // horizontal ddg, vertical g
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

}  // namespace flip
