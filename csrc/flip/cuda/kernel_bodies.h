// The CUDA kernels' bodies: what one block of each kernel does, from its block and grid indices,
// over the per-thread functions of row_passes.h, fused_forward.h and tiled_backward.h.
// Host-compilable and written against a block context B, so that the same code runs on the GPU
// (kernels.cu: B reads threadIdx / blockIdx and syncs with __syncthreads) and in the test-only
// emulator (tests/emulator: every CUDA thread a fiber, each barrier a real rendezvous, shared
// memory checked for races). B provides:
//   int tid(), threads()                         thread index in the block, threads per block
//   int64_t block_x(), block_y(), block_z()      block index
//   int64_t grid_x(), grid_y(), grid_z()         blocks in the grid
//   void sync()                                  __syncthreads
//   bool sync_or(bool)                           __syncthreads_or
//   shared<T>()                                  the block's dynamic shared memory (T* on the GPU)
// Every barrier sits in control flow that is uniform over the block. Every output value is written
// by one thread (HDR-FLIP's gradients: once per exposure, in order): no atomics, the same result on
// every run. The launch sequences that choose grids, blocks and shared memory: op_launches.h.
#pragma once

#include "launch_params.h"

namespace flip {
namespace cuda {

// i over [0, total) in steps of the whole grid's threads (blocks of B::threads() along x).
template <class B, class F>
FLIP_HD void grid_stride(const B& b, int64_t total, F&& f) {
  for (int64_t i = b.block_x() * b.threads() + b.tid(); i < total; i += b.grid_x() * b.threads()) f(i);
}

// The horizontal pass: one block per (x tile, row, plane image). s.src1 may equal s.src0 when
// images == 1.
template <class T, class B>
FLIP_HD void horizontal_pass_block(B& b, const Params<T>& p, const Step<T>& s) {
  const TapsView<T> t = p.taps.view();
  const Geometry& g = p.g;
  auto smem = b.template shared<T>();
  const int64_t x0 = b.block_x() * kBlock;
  for (int64_t z = b.block_z(); z < g.n * g.images; z += b.grid_z()) {
    const int64_t n = z / g.images;
    const int im = static_cast<int>(z % g.images);
    T scale = T(1);
    if (s.mode == Input::kHdr) {
      if (!s.hs.active(n)) continue;  // uniform over the block
      scale = s.hs.scale(n);
    }
    const T* src = (im == 0 ? s.src0 : s.src1) + n * s.channels * g.hw();
    T* pl = p.planes + z * g.planes() * g.hw();
    for (int64_t y = b.block_y(); y < g.h; y += b.grid_y()) {
      horizontal_pass_load(src, g, s.mode, y, x0, kBlock, t.rmax, b.tid(), smem, scale, s.hs.tm);
      b.sync();
      horizontal_pass_filter(g, t, y, x0, kBlock, t.rmax, b.tid(), smem, pl);
      b.sync();
    }
  }
}

// The horizontal transpose + the chain to the op's input. What the input is decides the last step:
// images (sRGB/linear): gradient w.r.t. the 3 input channels; opponent: w.r.t. the 3 opponent
// channels; achromatic: w.r.t. the single channel. The transposed-vertical planes are in p.planes.
template <class T, class B>
FLIP_HD void horizontal_transpose_block(B& b, const Params<T>& p, const Step<T>& s) {
  const TapsView<T> t = p.taps.view();
  const Geometry& g = p.g;
  auto smem = b.template shared<T>();
  const int64_t x0 = b.block_x() * kBlock;
  const int64_t hw = g.hw();
  for (int64_t z = b.block_z(); z < g.n * g.images; z += b.grid_z()) {
    const int64_t n = z / g.images;
    const int im = static_cast<int>(z % g.images);
    T* out = im == 0 ? s.out0 : s.out1;
    if (out == nullptr) continue;  // uniform over the block
    T scale = T(1);
    if (s.mode == Input::kHdr) {
      if (!s.hs.active(n)) continue;
      scale = s.hs.scale(n);
    }
    out += n * s.channels * hw;
    const T* src = (im == 0 ? s.src0 : s.src1) + n * s.channels * hw;
    const T* tpl = p.planes + z * g.planes() * hw;
    for (int64_t y = b.block_y(); y < g.h; y += b.grid_y()) {
      horizontal_transpose_load(tpl, g, y, x0, kBlock, t.rmax, b.tid(), smem);
      b.sync();
      T g_opp[3], g_yh;
      if (horizontal_transpose_filter(g, t, x0, kBlock, t.rmax, b.tid(), smem, g_opp, g_yh))
        store_input_gradient(g, s.mode, y * g.w + x0 + b.tid(), g_opp, g_yh, src, out, scale, s.hs.tm);
      b.sync();
    }
  }
}

// The vertical transpose: gradient planes p.gplanes -> transposed-vertical planes p.planes (the
// horizontal pass's planes are dead
// by then), for the images s.wanted names.
template <class T, class B>
FLIP_HD void vertical_transpose_block(B& b, const Params<T>& p, const Step<T>& s) {
  const TapsView<T> t = p.taps.view();
  const Geometry& g = p.g;
  const int64_t hw = g.hw();
  grid_stride(b, g.n * g.images * hw, [&](int64_t i) {
    const int64_t z = i / hw, px = i % hw;
    if (((s.wanted >> (z % g.images)) & 1) == 0) return;
    vertical_transpose_pixel(p.gplanes + z * g.gplanes() * hw, p.planes + z * g.planes() * hw, g, t, px / g.w,
                             px % g.w);
  });
}

// The fused forward's phases 1-3 for both images of item n's tile at (y0, x0), as the fused forward
// and the tiled backward's kTiledGrad run them: afterwards shared memory holds both images'
// vertical outputs (fused_vertical_offset). `fresh`: the tile computes all its horizontal-output
// rows; else it follows the tile above it in a walk, whose bottom 2R rows it keeps
// (fused_keep_rows), and computes its kTileH new ones. Rad: the radii (launch_params.h, AnyRadius
// or FixedRadii). The taps' view is built for each phase from the parameter-space argument instead
// of once per kernel, so that it is not held in registers across phases and barriers.
template <class Rad, class T, class B, class S>
FLIP_HD void tile_forward_block(B& b, const Params<T>& p, const Step<T>& s, S smem, int64_t n, int64_t y0, int64_t x0,
                                T scale, bool fresh) {
  const int R = Rad::halo(p.taps);
  if (!fresh)
    for (int c = 0; c < 2 * R; c += kTileH) {
      if (c > 0) b.sync();  // this chunk writes rows the one before read (2R > kTileH)
      fused_keep_rows(R, c, b.tid(), b.threads(), smem);
    }
  const int r0 = fresh ? 0 : 2 * R;
  for (int im = 0; im < 2; ++im) {
    fused_load((im == 0 ? p.test : p.ref) + n * 3 * p.g.hw(), p.g, s.mode, y0, x0, R, r0, b.tid(), b.threads(), smem,
               scale, s.hs.tm);
    b.sync();
    fused_horizontal(Rad::view(p.taps), R, r0, im, b.tid(), b.threads(), smem);
    b.sync();
  }
  fused_vertical(Rad::view(p.taps), R, b.tid(), b.threads(), smem);
  b.sync();
}

// The fused forward: one block per walk of kWalkTiles tiles (kTileW x kTileH) down a column of an
// item. s.mode is kSrgb/kLinear (LDR-FLIP: p.out is the map) or kHdr (one exposure of HDR-FLIP:
// p.out, p.emap and p.index hold the running maximum).
template <class Rad, class T, class B>
FLIP_HD void fused_forward_block(B& b, const Params<T>& p, const Step<T>& s) {
  const Geometry& g = p.g;
  auto smem = b.template shared<T>();
  const int R = Rad::halo(p.taps);
  const bool hdr = s.mode == Input::kHdr;
  const int64_t x0 = b.block_x() * kTileW;
  const int64_t tiles_y = (g.h + kTileH - 1) / kTileH;
  for (int64_t n = b.block_z(); n < g.n; n += b.grid_z()) {
    if (hdr && !s.hs.active(n)) continue;  // uniform over the block
    const T scale = hdr ? s.hs.scale(n) : T(1);
    for (int64_t w = b.block_y(); w < walks(tiles_y); w += b.grid_y()) {
      const int64_t first = w * kWalkTiles, last = first + kWalkTiles < tiles_y ? first + kWalkTiles : tiles_y;
      for (int64_t ty = first; ty < last; ++ty) {
        const int64_t y0 = ty * kTileH;
        tile_forward_block<Rad>(b, p, s, smem, n, y0, x0, scale, ty == first);
        const int64_t off = n * g.hw();
        fused_tail(g, y0, x0, R, b.tid(), b.threads(), smem, p.eps, p.k, p.out + off, hdr ? &s.hs : nullptr, n,
                   hdr ? p.emap + off : nullptr, hdr ? p.index + off : nullptr);
        b.sync();
      }
    }
  }
}

// Tiled backward, kTiledGrad (tiled_backward.h): for each tile of band s.band's gradient-plane rows
// (walks of kWalkTiles tiles, as the fused forward), the fused forward of both images, then the
// adjoint into the wanted images' gradient planes in p.scratch. s.mode as in fused_forward_block
// (kHdr: exposure s.hs, gradient only where p.index names it; a tile without such a pixel writes
// zero planes and skips the rest). s.kept (LDR-FLIP's forward that keeps the sensitivities): the
// planes are p.sensitivities, for a unit gradient, and the map goes to p.out.
template <class Rad, class T, class B>
FLIP_HD void tiled_grad_block(B& b, const Params<T>& p, const Step<T>& s) {
  const Geometry& g = p.g;
  const BackwardBand& band = s.band;
  auto smem = b.template shared<T>();
  const int R = Rad::halo(p.taps);
  const bool hdr = s.mode == Input::kHdr;
  const int64_t x0 = b.block_x() * kTileW;
  const int64_t tiles_y = tiled_grad_tiles_y(band);
  for (int64_t n = band.n0 + b.block_z(); n < band.n1; n += b.grid_z()) {
    if (hdr && !s.hs.active(n)) continue;  // uniform over the block
    const T scale = hdr ? s.hs.scale(n) : T(1);
    const int64_t off = n * g.hw();
    for (int64_t w = b.block_y(); w < walks(tiles_y); w += b.grid_y()) {
      const int64_t first = w * kWalkTiles, last = first + kWalkTiles < tiles_y ? first + kWalkTiles : tiles_y;
      bool fresh = true;  // uniform over the block
      for (int64_t ty = first; ty < last; ++ty) {
        const int64_t y0 = band.g0 + ty * kTileH;
        if (hdr && !b.sync_or(tile_won(p.index + off, g, s.hs.i, y0, x0, band.g0, band.g1, 0, b.tid(), b.threads()))) {
          tiled_zero_planes(g, band, n, y0, x0, b.tid(), b.threads(), p.scratch);
          fresh = true;  // the rows in shared memory are not the ones above the next tile
          continue;      // no shared memory touched: the next tile starts at a barrier too
        }
        tile_forward_block<Rad>(b, p, s, smem, n, y0, x0, scale, fresh);
        fresh = false;
        tiled_tail_vjp(g, band, n, y0, x0, R, b.tid(), b.threads(), smem, p.eps, p.k, s.kept ? nullptr : p.grad + off,
                       s.kept ? p.sensitivities : p.scratch, hdr ? &s.hs : nullptr, hdr ? p.index + off : nullptr,
                       s.kept ? p.out + off : nullptr);
        b.sync();
      }
    }
  }
}

// Tiled backward, kTiledTranspose: for each tile of band s.band's output rows and each wanted image (z),
// the gradient planes with their halo into shared memory, the transposed filters, the chain into
// p.g_test / p.g_ref (kHdr: accumulated, one exposure per launch; a tile whose pixels and halo
// the exposure won nowhere adds nothing and is skipped). s.kept: the planes are p.sensitivities,
// multiplied by p.grad as they are loaded.
template <class Rad, class T, class B>
FLIP_HD void tiled_transpose_block(B& b, const Params<T>& p, const Step<T>& s) {
  const Geometry& g = p.g;
  const BackwardBand& band = s.band;
  auto smem = b.template shared<T>();
  const int R = Rad::halo(p.taps);
  const int images = band.images();
  const int64_t x0 = b.block_x() * kTileW;
  const int64_t tiles_y = (band.y1 - band.y0 + kTileH - 1) / kTileH;
  for (int64_t z = b.block_z(); z < (band.n1 - band.n0) * images; z += b.grid_z()) {
    const int64_t n = band.n0 + z / images;
    // The z-th wanted image: the reference when it is the only one or the second one.
    const int im = (band.wanted & 1) && z % images == 0 ? 0 : 1;
    T scale = T(1);
    if (s.mode == Input::kHdr) {
      if (!s.hs.active(n)) continue;  // uniform over the block
      scale = s.hs.scale(n);
    }
    const T* gp = band.planes(s.kept ? p.sensitivities : p.scratch, n, im, g.w);
    const T* gmap = s.kept ? p.grad + n * g.hw() + band.g0 * g.w : nullptr;
    const T* src = (im == 0 ? p.test : p.ref) + n * 3 * g.hw();
    T* out = (im == 0 ? p.g_test : p.g_ref) + n * 3 * g.hw();
    for (int64_t ty = b.block_y(); ty < tiles_y; ty += b.grid_y()) {
      const int64_t y0 = band.y0 + ty * kTileH;
      if (s.mode == Input::kHdr &&
          !b.sync_or(tile_won(p.index + n * g.hw(), g, s.hs.i, y0, x0, band.g0, band.g1, R, b.tid(), b.threads())))
        continue;
      tiled_transpose_load(gp, band, g, y0, x0, R, b.tid(), b.threads(), smem, gmap);
      b.sync();
      tiled_vertical_transpose(g, Rad::view(p.taps), y0, band.y1, R, b.tid(), b.threads(), smem);
      b.sync();
      tiled_horizontal_transpose(g, Rad::view(p.taps), y0, band.y1, x0, R, b.tid(), b.threads(), smem, s.mode, src, out,
                                 scale, s.hs.tm);
      b.sync();
    }
  }
}

// The per-pixel kernels: one thread per output pixel i = n * H * W + pixel, grid-stride.
template <Kernel K, class T, class B>
FLIP_HD void pixel_block(B& b, const Params<T>& p, const Step<T>& s) {
  const Geometry& g = p.g;
  const int64_t total = g.n * g.hw();
  if constexpr (K == Kernel::kHuntHyab || K == Kernel::kHuntHyabVjp) {
    grid_stride(b, total, [&](int64_t i) {
      if constexpr (K == Kernel::kHuntHyab)
        hunt_hyab_pixel(p.test, p.ref, p.out, g.hw(), i, p.eps, p.k);
      else
        hunt_hyab_vjp_pixel(p.grad, p.test, p.ref, p.g_test, p.g_ref, g.hw(), i, p.eps, p.k);
    });
  } else {
    const TapsView<T> t = p.taps.view();
    grid_stride(b, total, [&](int64_t i) {
      if constexpr (K == Kernel::kVerticalLdr)
        ldr_pixel(p.planes, p.out, g, t, i, p.eps, p.k);
      else if constexpr (K == Kernel::kVerticalLdrVjp)
        ldr_vjp_pixel(p.grad, p.planes, p.gplanes, g, t, i, p.eps, p.k);
      else if constexpr (K == Kernel::kVerticalCsf)
        csf_pixel(p.planes, p.out, g, t, i);
      else if constexpr (K == Kernel::kVerticalCsfVjp)
        csf_vjp_pixel(p.grad, p.planes, p.gplanes, g, t, i);
      else if constexpr (K == Kernel::kVerticalFeature)
        feature_difference_pixel(p.planes, p.out, g, t, i, p.eps);
      else if constexpr (K == Kernel::kVerticalFeatureVjp)
        feature_difference_vjp_pixel(p.grad, p.planes, p.gplanes, g, t, i, p.eps);
      else if constexpr (K == Kernel::kVerticalHdr)
        hdr_max_pixel(p.planes, p.out, p.emap, p.index, g, t, i, p.eps, p.k, s.hs);
      else if constexpr (K == Kernel::kVerticalHdrVjp)
        hdr_vjp_pixel(p.grad, p.index, p.planes, p.gplanes, g, t, i, p.eps, p.k, s.hs);
      else if constexpr (K == Kernel::kVerticalLdrKeep)
        ldr_keep_pixel(p.planes, p.out, p.sensitivities, s.band, g, t, i, p.eps, p.k);
      else if constexpr (K == Kernel::kLdrKeptGrad)
        ldr_kept_grad_pixel(p.grad, p.sensitivities, p.gplanes, s.band, g, i);
    });
  }
}

// Kernel K's block code; Rad: the radii a tiled kernel is compiled for (the others read them at run
// time).
template <Kernel K, class Rad, class T, class B>
FLIP_HD void run_block(B& b, const Params<T>& p, const Step<T>& s) {
  if constexpr (K == Kernel::kHorizontalPass)
    horizontal_pass_block(b, p, s);
  else if constexpr (K == Kernel::kHorizontalTranspose)
    horizontal_transpose_block(b, p, s);
  else if constexpr (K == Kernel::kVerticalTranspose)
    vertical_transpose_block(b, p, s);
  else if constexpr (K == Kernel::kFused)
    fused_forward_block<Rad>(b, p, s);
  else if constexpr (K == Kernel::kTiledGrad)
    tiled_grad_block<Rad>(b, p, s);
  else if constexpr (K == Kernel::kTiledTranspose)
    tiled_transpose_block<Rad>(b, p, s);
  else
    pixel_block<K>(b, p, s);
}

}  // namespace cuda
}  // namespace flip
