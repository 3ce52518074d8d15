// The tiled backward of LDR-FLIP and HDR-FLIP, per thread (docs/algorithm.md §8.8): two kernels
// per band of rows. kTiledGrad (one block per walk of kWalkTiles tiles, as the fused forward): the
// fused forward's phases 1-3 for both images, then the per-pixel adjoint, which writes the 7
// gradient planes (gF0..2, gdx, gdy, gddx, gddy: store_pixel_gradients) of each image whose
// gradient is wanted, and of no other, into a scratch buffer. kTiledTranspose (one block per tile
// and wanted image): the tile plus an R-pixel halo of that image's gradient planes into shared
// memory, the transposed vertical filters there, the transposed horizontal ones, the chain to the
// input. Nothing runs for an image whose gradient is not wanted, nor (HDR-FLIP) for a tile that
// the exposure won nowhere near (tile_won). The scratch holds one band: batch items [n0, n1) and
// output rows [y0, y1), whose transposed filters read the gradient planes of rows [g0, g1) =
// [y0 - R, y1 + R) clipped to the image; kTiledGrad computes those rows, so neighbouring bands
// recompute 2R rows each. plan_backward sizes the bands so that the scratch stays within a budget
// whatever the image size and batch. LDR-FLIP's autograd that keeps the sensitivities runs the
// same two kernels over the whole batch as one band (whole_batch_plan): kTiledGrad for a unit
// gradient, writing them and the map; kTiledTranspose on them times the incoming gradient.
#pragma once

#include "fused_forward.h"

namespace flip {

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
FLIP_HD int tiled_transpose_smem_len(int R) {
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
FLIP_HD void tiled_transpose_load(const T* gp, const BackwardBand& b, const Geometry& g, int64_t y0, int64_t x0, int R,
                                  int tid, int nthreads, S smem, const T* gmap = nullptr) {
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

// kTiledTranspose, phase 2: the transposed vertical filters (vertical_transpose_values) of the
// tile's rows below y_end, every column of the halo included (zero outside the image). With the
// radii compiled in, a thread filters kVerticalRows rows of one column (transposed_sums: the rows
// share their samples' loads, as in fused_vertical); rows of its last group at or below y_end are
// filtered too and never read.
template <class Bank, class S>
FLIP_HD void tiled_vertical_transpose(const Geometry& g, const Bank& t, int64_t y0, int64_t y_end, int R, int tid,
                                      int nthreads, S smem) {
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
    vertical_transpose_values(
        g, t,
        [&](int q, const auto& f, auto form) {
          return transposed_sums<K, decltype(form)::value>(in + q * rc + c, cols, y, g.h, f);
        },
        [&](int q, const Rows<T, K>& v) {
          FLIP_UNROLL
          for (int k = 0; k < K; ++k) out[q * n + o + k * cols] = v[k];
        });
  }
}

// kTiledTranspose, phase 3: the transposed horizontal filters of the tile's pixels (rows below
// y_end) and the chain to the input, stored by store_input_gradient (src, out, scale, tm as there).
template <class Bank, class S, class T = typename Bank::value_type>
FLIP_HD void tiled_horizontal_transpose(const Geometry& g, const Bank& t, int64_t y0, int64_t y_end, int64_t x0, int R,
                                        int tid, int nthreads, S smem, Input mode, const T* src, T* out, T scale,
                                        ToneMapper tm) {
  const int cols = fused_cols(R), n = kTileH * cols;
  const S s = smem + kResponsePlanesPerImage * fused_rows(R) * cols;
  for (int i = tid; i < kTileH * kTileW; i += nthreads) {
    const int r = i / kTileW, j = i % kTileW;
    const int64_t y = y0 + r, x = x0 + j;
    if (y >= y_end || x >= g.w) continue;
    T g_opp[3], g_yh;
    horizontal_transpose_pixel(g, t, s, n, r * cols + j + R, x, g_opp, g_yh);
    store_input_gradient(g, mode, y * g.w + x, g_opp, g_yh, src, out, scale, tm);
  }
}

}  // namespace flip
