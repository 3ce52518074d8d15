// The stages of one LDR-FLIP evaluation on the CPU, for one batch item, parametrised by how an
// input pixel becomes linear RGB in [0, 1] (the LDR decode, or HDR-FLIP's exposure + tone map):
//   banded_stages           both images -> 7 horizontal planes' rows each (4 CSF, 3 feature), and
//                           band by band the vertical filters, handing each row of both images' 7
//                           filtered responses to a row function:
//     ForwardRows           the error map (the per-pixel tail)
//     SensitivityRows       the sensitivity planes of the wanted images: per pixel, the gradient of
//                           its error w.r.t. the 7 filtered responses, either as they are (with the
//                           error map: the forward that keeps them for the backward) or times the
//                           incoming gradient (the backward that recomputes them)
//   scale_sensitivities     kept sensitivities x incoming gradient -> gradient planes
//   transposed_stage        gradient planes -> gradient w.r.t. linear RGB, handed to a chain functor
// The backward stages run only for the images whose gradient is wanted.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <vector>

#include "../pixel.h"
#include "banks.h"
#include "eight_bit_srgb.h"
#include "parallel.h"
#include "workspace.h"

namespace flip {
namespace cpu {

// The indices of the images whose pointer in p is not null, in order, into out; returns how many.
// The backward's parallel loops run over the wanted images' rows only, so that every thread works
// when one image wants a gradient.
template <class P>
inline int wanted_images(const P p[2], int out[2]) {
  int count = 0;
  for (int im = 0; im < 2; ++im)
    if (p[im]) out[count++] = im;
  return count;
}

// Samples per batch item of the response planes (kResponsePlanesPerImage planes of hw samples,
// plane_counts.h) of the wanted images: the layout of the kept sensitivities and of the backward's gradient planes.
inline int64_t response_plane_samples(bool want_test, bool want_ref, int64_t hw) {
  return (int64_t{want_test} + int64_t{want_ref}) * kResponsePlanesPerImage * hw;
}

// The per-image pointers into such a buffer at base, the test image's planes first; null for an
// image not wanted.
template <class T>
inline void split_response_planes(T* base, bool want_test, bool want_ref, int64_t hw, T* out[2]) {
  out[0] = want_test ? base : nullptr;
  out[1] = want_ref ? base + (want_test ? kResponsePlanesPerImage * hw : 0) : nullptr;
}

inline int64_t row_grain(int64_t W) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(W, 1)); }

template <class T>
struct Context {
  std::shared_ptr<const CsfTaps<T>> csf;
  std::shared_ptr<const FeatureTaps<T>> feat;
  ColorConsts<T> k;
  int rmax;
  explicit Context(double ppd) : csf(csf_taps<T>(ppd)), feat(feature_taps<T>(ppd)), k(color_consts<T>()) {
    rmax = std::max(csf->y.radius, feat->g.radius);
  }
};

// The per-pixel loops below take their rows as __restrict pointers and call only inline,
// branch-free code (pixel.h, with the float transcendentals of fastmath.h), so that GCC
// vectorises them across pixels at every instruction-set level (-fno-trapping-math lets it
// if-convert the selects; -fno-tree-pre keeps it from merging them into forms it cannot vectorise;
// see setup.py and docs/algorithm.md §7.13). Each is a function of its own (FLIP_LOOP: never
// inlined; one call per row costs nothing), so that tests/cpu/test_cpu_dispatch.py can find it in the
// disassembly and check that it stayed vectorised.
#define FLIP_LOOP __attribute__((noinline))

// One input row of an image -> its opponent rows o0..o2 and achromatic row yh. conv(v, lin): v =
// the input pixel (3 channels, planes HW apart; samples of type S: T, or uint8_t for 8-bit codes),
// lin = linear RGB; it returns nonzero where it refuses the pixel (a conversion for some inputs
// only: eight_bit_srgb.h). Returns false if the row holds a NaN, an infinity or a refused pixel.
template <class T, class S, class Conv>
FLIP_LOOP bool convert_row(const S* __restrict src, int64_t HW, int64_t W, const Conv& conv, T* __restrict o0,
                           T* __restrict o1, T* __restrict o2, T* __restrict yh) {
  int rejected = 0;
#pragma GCC ivdep  // the 3 rows of src are HW >= W apart
  for (int64_t x = 0; x < W; ++x) {
    const S v[3] = {src[x], src[HW + x], src[2 * HW + x]};
    // v - v is 0 for a finite v and NaN otherwise; the sum is NaN if any of the three is.
    rejected |= ((v[0] - v[0]) + (v[1] - v[1]) + (v[2] - v[2])) != T(0);
    T lin[3], opp[3];
    rejected |= conv(v, lin);
    linear_to_opponent(lin, opp);
    o0[x] = opp[0];
    o1[x] = opp[1];
    o2[x] = opp[2];
    yh[x] = achromatic(opp);
  }
  return rejected == 0;
}

// A conversion that picks its form row by row derives from RowChoice and converts a whole row with
// convert(src, HW, W, o0, o1, o2, yh) (LDR-FLIP's sRGB input: 8-bit rows from a table); any other
// conversion is convert_row's conv.
struct RowChoice {};

template <class T, class S, class Conv>
bool convert_input_row(const S* src, int64_t HW, int64_t W, const Conv& conv, T* o0, T* o1, T* o2, T* yh) {
  if constexpr (std::is_base_of<RowChoice, Conv>::value) {
    return conv.convert(src, HW, W, o0, o1, o2, yh);
  } else {
    return convert_row(src, HW, W, conv, o0, o1, o2, yh);
  }
}

// One row of an image's horizontal planes: input row src (3 channels HW apart) -> the 7 planes'
// rows, plane q's at base + q * plane placed by `place` (PlainRow, PieceRow), through the
// conversion conv. Returns false if the row holds a NaN or an infinity.
template <class T, class S, class Conv, class Place>
bool horizontal_row(const S* src, int64_t HW, int64_t W, const Conv& conv, const Context<T>& cx, Scratch<T>& sc,
                    T* base, int64_t plane, const Place& place) {
  T *o0 = sc.row(0), *o1 = sc.row(1), *o2 = sc.row(2), *yh = sc.row(3);
  const bool ok = convert_input_row(src, HW, W, conv, o0, o1, o2, yh);
  csf_h_row(o0, o1, o2, W, *cx.csf, sc.pad(), csf_planes(base, plane), place);
  feature_h_row(yh, W, *cx.feat, sc.pad(), feature_planes(base + kCsfFilters * plane, plane), place);
  return ok;
}

// The vertical passes run tile by tile, each filter over all rows of a tile before the next: a
// pass reads 2r + 1 rows for every output row, and whole rows of 512 samples give a 21-row window
// of 42 KB per plane, more than a 32 KB L1 cache, so every row would come from L2 again for each
// output row. A tile of 128 columns by 32 rows reads the 52 input rows of a plane (26 KB) once
// and reuses them from L1. benchmarks/RESULTS.md has the timings of this and other tile shapes.
constexpr int64_t kTileRows = 32, kTileColumns = 128;

// Scratch for the vertical outputs of one tile of both images: per row of the tile, the 7 rows of
// n samples of the test image (F0, F1, F2, dx, dy, ddx, ddy), then the reference's.
template <class T>
struct TileScratch {
  Scratch<T> sc;
  explicit TileScratch(int64_t W) : sc(std::min(W, kTileColumns), 0, 2 * kResponsePlanesPerImage * kTileRows) {}
  T* rows() { return sc.row(0); }
  static int64_t stride(const Tile& t) { return 2 * kResponsePlanesPerImage * t.n; }
};

// Vertical passes of both images over tile t into out (TileScratch's layout): each image's 7
// horizontal planes `plane` samples apart from planes + im * 7 * plane, their rows found by rows.
template <class T, class Rows>
void vertical_tile(const T* planes, int64_t plane, const Rows& rows, const Tile& t, const Context<T>& cx, T* out) {
  const int64_t stride = TileScratch<T>::stride(t);
  for (int im = 0; im < 2; ++im) {
    T* base = const_cast<T*>(planes) + im * kHorizontalPlanesPerImage * plane;
    T* dst = out + im * kResponsePlanesPerImage * t.n;
    csf_v_tile(csf_planes(base, plane), rows, t, *cx.csf, dst, stride);
    feature_v_tile(feature_planes(base + kCsfFilters * plane, plane), rows, t, *cx.feat, dst + 3 * t.n, stride);
  }
}

// Both stages of both images, band by band of kTileRows rows, threads sharing out the bands:
// hrow(im, y, sc, base, plane, place) writes row y of image im's 7 horizontal planes (horizontal_row:
// plane q's at base + q * plane, placed by the PieceRow place; sc a Scratch of 4 rows) and returns
// false for a non-finite input;
// then the vertical passes of the band tile by tile, and row_fn(rt, rr, n, p) for each row of a
// tile: rt and rr the test's and the reference's 7 rows of n samples (kResponsePlanesPerImage rows
// n apart), p the index of the row's first pixel in an H x W plane. Returns false if hrow did.
//
// The horizontal rows live in a ring of kTileRows + 2 rmax rows per plane, not in whole planes:
// each row is computed once per thread (the rows around the first band of a thread's share twice),
// when the band that first needs it comes, and is read by the vertical passes of at most two bands
// while it is still in the caches. Whole planes of a 1080p pair (116 MB) went to memory and came
// back (docs/algorithm.md §8.10). The ring is stored tile column by tile column (kTileColumns
// samples of each of its rows, then the next column's), so that the rows a tile reads are one
// contiguous block the hardware prefetcher follows, not 52 pieces of 512 bytes a row apart; the
// horizontal filters write their outputs there directly (PieceRow).
template <class T, class HRow, class RowFn>
bool banded_stages(int64_t H, int64_t W, const Context<T>& cx, const HRow& hrow, const RowFn& row_fn) {
  const int64_t R = cx.rmax, bands = (H + kTileRows - 1) / kTileRows;
  const int64_t across = (W + kTileColumns - 1) / kTileColumns, ring_rows = std::min(H, kTileRows + 2 * R);
  const int64_t chunk = ring_rows * kTileColumns, plane = across * chunk;
  // Each share of bands computes 2 R rows more than it covers and has a ring of its own: shares of
  // at least 8 R rows keep that under a quarter of the horizontal work, and the rings together
  // under the whole planes' size, on any number of threads.
  const int64_t grain = std::max<int64_t>(1, (8 * R + kTileRows - 1) / kTileRows);
  std::atomic<bool> finite{true};
  parallel_for(0, bands, grain, [&](int64_t b, int64_t e) {
    Workspace ws(sizeof(T) * 2 * kHorizontalPlanesPerImage * plane);
    T* ring = ws.as<T>();
    Scratch<T> sc(W, cx.rmax, 4);  // hrow's 4 rows
    TileScratch<T> scratch(W);
    std::vector<int64_t> offset(static_cast<size_t>(kTileRows + 2 * R));
    bool ok = true;
    int64_t next = std::max<int64_t>(0, b * kTileRows - R);  // the next row to compute
    for (int64_t band = b; band < e; ++band) {
      const int64_t y0 = band * kTileRows, y1 = std::min(H, y0 + kTileRows);
      // The ring holds rows next - ring_rows .. next - 1: with next = y1 + R, all that the band reads.
      for (const int64_t last = std::min(H, y1 + R); next < last; ++next)
        for (int im = 0; im < 2; ++im)
          ok &= hrow(im, next, sc, ring + im * kHorizontalPlanesPerImage * plane, plane,
                     PieceRow<kTileColumns>{next % ring_rows * kTileColumns, chunk});
      for (int64_t i = 0; i < y1 - y0 + 2 * R; ++i)
        offset[i] = std::min(std::max(y0 - R + i, int64_t{0}), H - 1) % ring_rows * kTileColumns;
      const TableRows rows{offset.data(), y0 - R};
      for (int64_t j = 0; j < across; ++j) {
        const int64_t x0 = j * kTileColumns;
        const Tile t{y0, y1, 0, std::min(kTileColumns, W - x0)};  // columns from the chunk's first
        const int64_t stride = TileScratch<T>::stride(t);
        vertical_tile(static_cast<const T*>(ring + j * chunk), plane, rows, t, cx, scratch.rows());
        for (int64_t row = y0; row < y1; ++row) {
          const T* rt = scratch.rows() + (row - y0) * stride;
          row_fn(rt, static_cast<const T*>(rt + kResponsePlanesPerImage * t.n), t.n, row * W + x0);
        }
      }
    }
    if (!ok) finite = false;
  });
  return finite;
}

// banded_stages with the rows of both input images (3 channels HW apart, samples of type S)
// converted by conv.
template <class T, class S, class Conv, class RowFn>
bool image_stages(const S* const img[2], int64_t H, int64_t W, const Conv& conv, const Context<T>& cx,
                  const RowFn& row_fn) {
  const int64_t HW = H * W;
  return banded_stages(
      H, W, cx,
      [&](int im, int64_t y, Scratch<T>& sc, T* base, int64_t plane, const auto& place) {
        return horizontal_row(img[im] + y * W, HW, W, conv, cx, sc, base, plane, place);
      },
      row_fn);
}

// Always inlined (FLIP_HD) like the per-pixel code: a call left in a per-pixel loop keeps it scalar.
template <class T>
FLIP_HD void load_pixel(const T* __restrict r, int64_t W, int64_t x, T F[3], Features<T>& f) {
  F[0] = r[x];
  F[1] = r[W + x];
  F[2] = r[2 * W + x];
  f = Features<T>{r[3 * W + x], r[4 * W + x], r[5 * W + x], r[6 * W + x]};
}

// The error of one row from both images' vertical outputs (7 rows W apart each).
template <class T>
FLIP_LOOP void flip_row(const T* __restrict rt, const T* __restrict rr, int64_t W, T eps, const ColorConsts<T> k,
                        T* __restrict dst) {
  for (int64_t x = 0; x < W; ++x) {
    T Ft[3], Fr[3];
    Features<T> ft, fr;
    load_pixel(rt, W, x, Ft, ft);
    load_pixel(rr, W, x, Fr, fr);
    dst[x] = pixel_flip(Ft, Fr, ft, fr, eps, k);
  }
}

// The row function (banded_stages) of the forward: the error map of one batch item into dst (H x W).
// (Named functors, not lambdas returned as auto: objdump cannot demangle the symbols of code inside
// those, and tests/cpu/test_cpu_dispatch.py must find which level's namespace each function is in.)
template <class T>
struct ForwardRows {
  T eps;
  ColorConsts<T> k;
  T* dst;
  void operator()(const T* rt, const T* rr, int64_t n, int64_t p) const { flip_row(rt, rr, n, eps, k, dst + p); }
};

// Multiplies the gradients of one pixel by g.
template <class T>
FLIP_HD void scale_pixel_gradients(T g, T gF[3], Features<T>& gf) {
  FLIP_UNROLL
  for (int c = 0; c < 3; ++c) gF[c] *= g;
  gf = Features<T>{gf.dx * g, gf.dy * g, gf.ddx * g, gf.ddy * g};
}

// One row of the sensitivities of the wanted images (see SensitivityRows) into their planes
// st, sr (7 planes HW apart, at this row). Each pixel's adjoint runs for a unit gradient: with
// kScale its results are then multiplied by gmap[x], the incoming gradient (the backward); without,
// the pixel's error goes to map[x] (the forward that keeps the sensitivities). The two paths thus
// round alike: a kept sensitivity times gmap[x] (scale_sensitivities) gives the same bits.
template <bool kWantTest, bool kWantRef, bool kScale, class T>
FLIP_LOOP void flip_row_sensitivities(const T* __restrict rt, const T* __restrict rr, int64_t W, int64_t HW, T eps,
                                      const ColorConsts<T> k, const T* __restrict gmap, T* __restrict map,
                                      T* __restrict st, T* __restrict sr) {
  // The 7 planes of st (and of sr) are HW >= W apart, so no two pixels' stores overlap; GCC cannot
  // prove that for an unknown HW and would give up (too many run-time alias checks).
#pragma GCC ivdep
  for (int64_t x = 0; x < W; ++x) {
    T Ft[3], Fr[3], gFt[3], gFr[3];
    Features<T> ft, fr, gft, gfr;
    load_pixel(rt, W, x, Ft, ft);
    load_pixel(rr, W, x, Fr, fr);
    const T value = pixel_flip_vjp<kWantTest, kWantRef>(Ft, Fr, ft, fr, eps, k, T(1), gFt, gFr, gft, gfr);
    if constexpr (kScale) {
      if constexpr (kWantTest) scale_pixel_gradients(gmap[x], gFt, gft);
      if constexpr (kWantRef) scale_pixel_gradients(gmap[x], gFr, gfr);
    } else {
      map[x] = value;
    }
    if constexpr (kWantTest) store_pixel_gradients(st, HW, x, gFt, gft);
    if constexpr (kWantRef) store_pixel_gradients(sr, HW, x, gFr, gfr);
  }
}

// The backward's gradient planes: the response planes of each image that wants a gradient, none
// for the other; planes()[im] is null for an image that wants none.
template <class T>
class GradientPlanes {
 public:
  GradientPlanes(bool want_test, bool want_ref, int64_t hw)
      : ws_(sizeof(T) * response_plane_samples(want_test, want_ref, hw)) {
    split_response_planes(ws_.as<T>(), want_test, want_ref, hw, planes_);
  }
  T* const* planes() const { return planes_; }

 private:
  Workspace ws_;
  T* planes_[2];
};

// The row function (banded_stages) that writes the sensitivity planes (per image F0, F1, F2, dx,
// dy, ddx, ddy, H x W each) of the images whose planes st, sr are not null: with kScale times the
// incoming gradient gmap (H x W), the backward's gradient planes; without, as they are, and the
// error map into map (H x W).
template <bool kScale, class T>
struct SensitivityRows {
  T *st, *sr;
  int64_t HW;
  T eps;
  ColorConsts<T> k;
  const T* gmap;
  T* map;
  void operator()(const T* rt, const T* rr, int64_t n, int64_t p) const {
    T* t = st ? st + p : nullptr;
    T* r = sr ? sr + p : nullptr;
    const T* gm = kScale ? gmap + p : nullptr;
    T* mp = kScale ? nullptr : map + p;
    if (t && r)
      flip_row_sensitivities<true, true, kScale>(rt, rr, n, HW, eps, k, gm, mp, t, r);
    else if (t)
      flip_row_sensitivities<true, false, kScale>(rt, rr, n, HW, eps, k, gm, mp, t, r);
    else if (r)
      flip_row_sensitivities<false, true, kScale>(rt, rr, n, HW, eps, k, gm, mp, t, r);
  }
};

// The backward's gradient planes from kept sensitivities: dst = gmap * src per pixel, for the
// images whose dst[im] is not null (kResponsePlanesPerImage planes of hw samples each).
template <class T>
void scale_sensitivities(const T* const src[2], const T* gmap, T* const dst[2], int64_t hw) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (hw + kChunk - 1) / kChunk;
  int wanted[2];
  const int count = wanted_images(dst, wanted);
  parallel_for(0, count * kResponsePlanesPerImage * chunks, 1, [&](int64_t b, int64_t e) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int im = wanted[idx / (kResponsePlanesPerImage * chunks)];
      const int64_t plane = idx / chunks % kResponsePlanesPerImage, begin = idx % chunks * kChunk;
      const int64_t end = std::min(hw, begin + kChunk);
      const T* __restrict s = src[im] + plane * hw;
      T* __restrict d = dst[im] + plane * hw;
      for (int64_t p = begin; p < end; ++p) d[p] = gmap[p] * s[p];
    }
  });
}

// Gradient rows w.r.t. linear RGB (g0..g2) from those w.r.t. the opponent channels and the
// achromatic channel.
template <class T>
FLIP_LOOP void opponent_row_vjp(const T* __restrict o0, const T* __restrict o1, const T* __restrict o2,
                                const T* __restrict yh, int64_t W, T* __restrict g0, T* __restrict g1,
                                T* __restrict g2) {
  for (int64_t x = 0; x < W; ++x) {
    const T gopp[3] = {o0[x], o1[x], o2[x]};
    T glin[3];
    opponent_and_achromatic_vjp(gopp, yh[x], glin);
    g0[x] = glin[0];
    g1[x] = glin[1];
    g2[x] = glin[2];
  }
}

// The transposed stage runs band by band: the vertical transposes of a band's rows, tile by tile
// (as the forward's vertical passes, and for the same reason), into whole rows, then the
// horizontal transposes row by row. A band is kTransposedBand rows, fewer for a short image or
// when its whole-row results (the vertical transposes' outputs, one row per horizontal plane)
// would take more than kTransposedBandBytes per thread (a very wide image: down to one row at a
// time).
constexpr int64_t kTransposedBand = 16;
constexpr int64_t kTransposedBandBytes = int64_t{4} << 20;

template <class T>
inline int64_t transposed_band_rows(int64_t H, int64_t W) {
  const int64_t fit =
      kTransposedBandBytes / (static_cast<int64_t>(sizeof(T)) * kHorizontalPlanesPerImage * std::max<int64_t>(W, 1));
  return std::max<int64_t>(1, std::min({kTransposedBand, H, fit}));
}

// Transposed banks for the images whose gradient planes gplanes[im] are not null, then
// chain(im, row, g) for every row, with g the gradient w.r.t. the row's linear RGB (3 rows W apart).
template <class T, class Chain>
void transposed_stage(T* const gplanes[2], int64_t H, int64_t W, const Context<T>& cx, const Chain& chain) {
  const int64_t HW = H * W, band_rows = transposed_band_rows<T>(H, W), bands = (H + band_rows - 1) / band_rows;
  int wanted[2];
  const int count = wanted_images(gplanes, wanted);
  parallel_for(0, count * bands, 1, [&](int64_t b, int64_t e) {
    // Rows: o0, o1, o2, yh, glin (3), zeros, then per band row the 7 vertical results: t0..t3 of
    // the CSF bank, a, b, c of the feature bank.
    Scratch<T> sc(W, cx.rmax, static_cast<int>(8 + kHorizontalPlanesPerImage * band_rows));
    T *o0 = sc.row(0), *o1 = sc.row(1), *o2 = sc.row(2), *yh = sc.row(3), *glin = sc.row(4), *zeros = sc.row(7);
    T* band = sc.row(8);
    const int64_t stride = kHorizontalPlanesPerImage * W;
    std::fill(zeros, zeros + W, T(0));
    for (int64_t idx = b; idx < e; ++idx) {
      const int im = wanted[idx / bands];
      const int64_t y0 = idx % bands * band_rows, y1 = std::min(H, y0 + band_rows);
      const T* g = gplanes[im];
      std::fill(band, band + (y1 - y0) * stride, T(0));
      for (int64_t x0 = 0; x0 < W; x0 += kTileColumns) {
        const Tile t{y0, y1, x0, std::min(kTileColumns, W - x0)};
        csf_t_vertical(g, g + HW, g + 2 * HW, H, W, t, *cx.csf, zeros, band, stride);
        feature_t_vertical(g + 3 * HW, g + 4 * HW, g + 5 * HW, g + 6 * HW, H, W, t, *cx.feat, zeros,
                           band + kCsfFilters * W, stride);
      }
      for (int64_t row = y0; row < y1; ++row) {
        const T* r = band + (row - y0) * stride;
        csf_t_horizontal(r, r + W, r + 2 * W, r + 3 * W, W, *cx.csf, sc.pad(), o0, o1, o2);
        std::fill(yh, yh + W, T(0));
        feature_t_horizontal(r + 4 * W, r + 5 * W, r + 6 * W, W, *cx.feat, sc.pad(), yh);
        opponent_row_vjp(o0, o1, o2, yh, W, glin, glin + W, glin + 2 * W);
        chain(im, row, static_cast<const T*>(glin));
      }
    }
  });
}

}  // namespace cpu
}  // namespace flip
