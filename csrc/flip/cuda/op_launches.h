// The launch sequences of the FLIP ops: which kernels each op launches, in which order, with which
// grid, block and shared memory (launch_params.h) and which Step. Host code, written against a
// launcher L, so that kernels.cu (L launches the __global__ wrappers on a stream) and the test-only
// emulator (tests/emulator: L runs the block code of kernel_bodies.h on the host) share it. L
// provides:
//   template <Kernel K, class Rad, class T> void launch(Dim3 grid, int threads, size_t smem,
//                                                       const Params<T>&, const Step<T>&)
//                                                  (Rad: the radii of a tiled kernel, launch_params.h)
//   template <class T> void fill_nan(T* p, size_t n)   all-ones bytes: NaN in float and double
//   GridLimits limits() const
// Each sequence reads the Params fields kernels.h lists for its op.
#pragma once

#include "launch_params.h"

namespace flip {
namespace cuda {
namespace launches {

template <class T>
Input ldr_input(const Params<T>& p) {
  return p.srgb ? Input::kSrgb : Input::kLinear;
}

template <class T>
HdrStep<T> hdr_step(const Params<T>& p, int64_t i) {
  return HdrStep<T>{p.exposures, p.counts, p.E, i, p.tm};
}

// A tiled kernel (fused forward, tiled backward) compiled for the taps' radii where one is
// (DefaultRadii), else the one that reads them at run time.
template <Kernel K, class T, class L>
void launch_tiled(L& l, Dim3 grid, size_t smem, const Params<T>& p, const Step<T>& s) {
  if constexpr (DefaultRadii::kCompiled<T>) {
    if (DefaultRadii::fits(p.taps)) {
      l.template launch<K, DefaultRadii>(grid, kFusedThreads, smem, p, s);
      return;
    }
  }
  l.template launch<K, AnyRadius>(grid, kFusedThreads, smem, p, s);
}

template <Kernel K, class T, class L>
void per_pixel(L& l, const Params<T>& p, const Step<T>& s = Step<T>{}) {
  l.template launch<K, AnyRadius>(pixel_grid(p.g.n * p.g.hw(), l.limits()), kBlock, 0, p, s);
}

// H: src0/src1 (channels each) -> p.planes.
template <class T, class L>
void horizontal_pass(L& l, const Params<T>& p, Step<T> s) {
  l.template launch<Kernel::kHorizontalPass, AnyRadius>(row_grid(p.g, l.limits()), kBlock,
                                                        horizontal_pass_smem_bytes<T>(p.taps.rmax), p, s);
}

// The vertical, then the horizontal transpose: p.gplanes -> (the transposed-vertical values in
// p.planes) -> s.out0 / s.out1.
template <class T, class L>
void transpose_passes(L& l, const Params<T>& p, Step<T> s) {
  s.wanted = (s.out0 != nullptr ? 1 : 0) | (s.out1 != nullptr ? 2 : 0);
  l.template launch<Kernel::kVerticalTranspose, AnyRadius>(pixel_grid(p.g.n * p.g.images * p.g.hw(), l.limits()),
                                                           kBlock, 0, p, s);
  l.template launch<Kernel::kHorizontalTranspose, AnyRadius>(
      row_grid(p.g, l.limits()), kBlock, horizontal_transpose_smem_bytes<T>(p.taps.rmax, p.g.planes()), p, s);
}

template <class T>
Step<T> image_step(Input mode, const T* src0, const T* src1, int channels, HdrStep<T> hs = HdrStep<T>::none()) {
  Step<T> s;
  s.mode = mode;
  s.src0 = src0;
  s.src1 = src1;
  s.channels = channels;
  s.hs = hs;
  return s;
}

template <class T, class L>
void fused_forward(L& l, const Params<T>& p, Input mode, HdrStep<T> hs) {
  Step<T> s;
  s.mode = mode;
  s.hs = hs;
  const Geometry& g = p.g;
  launch_tiled<Kernel::kFused>(l, tile_grid(g, walks((g.h + kTileH - 1) / kTileH), g.n, l.limits()),
                               fused_smem_bytes<T>(p.taps.rmax), p, s);
}

// The tiled backward's kTiledGrad and kTiledTranspose over band s.band.
template <class T, class L>
void tiled_grad(L& l, const Params<T>& p, const Step<T>& s) {
  const BackwardBand& b = s.band;
  launch_tiled<Kernel::kTiledGrad>(l, tile_grid(p.g, walks(tiled_grad_tiles_y(b)), b.n1 - b.n0, l.limits()),
                                   fused_smem_bytes<T>(p.taps.rmax), p, s);
}
template <class T, class L>
void tiled_transpose(L& l, const Params<T>& p, const Step<T>& s) {
  const BackwardBand& b = s.band;
  launch_tiled<Kernel::kTiledTranspose>(
      l, tile_grid(p.g, (b.y1 - b.y0 + kTileH - 1) / kTileH, (b.n1 - b.n0) * b.images(), l.limits()),
      tiled_transpose_smem_bytes<T>(p.taps.rmax), p, s);
}

// One band of the tiled backward for one step (LDR-FLIP: hs none; HDR-FLIP: one exposure): kTiledGrad
// writes the band's gradient planes, kTiledTranspose, queued after it, reads them.
template <class T, class L>
void tiled_band(L& l, const Params<T>& p, const BackwardBand& b, Input mode, HdrStep<T> hs) {
  // kTiledGrad writes every gradient-plane value kTiledTranspose of the same band reads (zeros in the tiles
  // an exposure won nowhere), so nothing may come from a band or exposure before: with the whole
  // scratch NaN a read of anything else poisons the gradient.
  if (p.nan_scratch) l.fill_nan(p.scratch, static_cast<size_t>(p.plan.scratch_elems(p.g)));
  Step<T> s;
  s.mode = mode;
  s.hs = hs;
  s.band = b;
  tiled_grad(l, p, s);
  tiled_transpose(l, p, s);
}

template <class T, class L>
void ldr_flip_forward_fused(L& l, const Params<T>& p) {
  fused_forward(l, p, ldr_input(p), HdrStep<T>::none());
}

template <class T, class L>
void ldr_flip_forward(L& l, const Params<T>& p) {
  horizontal_pass(l, p, image_step(ldr_input(p), p.test, p.ref, 3));
  per_pixel<Kernel::kVerticalLdr>(l, p);
}

// The row passes' backward: the horizontal pass, the per-pixel adjoint K, then the transposes into
// p.g_test and p.g_ref (null where not wanted).
template <Kernel K, class T, class L>
void rows_backward(L& l, const Params<T>& p, Step<T> s) {
  horizontal_pass(l, p, s);
  per_pixel<K>(l, p, s);
  s.out0 = p.g_test;
  s.out1 = p.g_ref;
  transpose_passes(l, p, s);
}

template <class T, class L>
void ldr_flip_backward(L& l, const Params<T>& p) {
  rows_backward<Kernel::kVerticalLdrVjp>(l, p, image_step(ldr_input(p), p.test, p.ref, 3));
}

template <class T, class L>
void ldr_flip_backward_tiled(L& l, const Params<T>& p) {
  for (int64_t j = 0; j < p.plan.count(); ++j) tiled_band(l, p, p.plan.band(p.g, j), ldr_input(p), HdrStep<T>::none());
}

// The kept pair's step: LDR-FLIP's images, the whole batch as the band (p.plan: whole_batch_plan
// for the images whose sensitivities are kept), the tiled kernels on p.sensitivities.
template <class T>
Step<T> kept_step(const Params<T>& p) {
  Step<T> s = image_step(ldr_input(p), p.test, p.ref, 3);
  s.band = p.plan.band(p.g, 0);
  s.kept = true;
  return s;
}

// LDR-FLIP's forward that keeps the sensitivities of the images p.plan.wanted names: the map into
// p.out, the sensitivities into p.sensitivities. Tiled: kTiledGrad of the tiled backward over the
// whole batch, for a unit gradient; rows: H, then V with the tail and its adjoint.
template <class T, class L>
void ldr_flip_forward_keep_tiled(L& l, const Params<T>& p) {
  tiled_grad(l, p, kept_step(p));
}

template <class T, class L>
void ldr_flip_forward_keep(L& l, const Params<T>& p) {
  const Step<T> s = kept_step(p);
  horizontal_pass(l, p, s);
  per_pixel<Kernel::kVerticalLdrKeep>(l, p, s);
}

// The backward from the kept sensitivities of the images p.plan.wanted names, which are the ones
// p.g_test and p.g_ref ask for: grad -> g_test, g_ref. Tiled: kTiledTranspose of the tiled backward
// over the whole batch, multiplying the sensitivities by grad; rows: that product into the gradient
// planes, then the transposes.
template <class T, class L>
void ldr_flip_backward_kept_tiled(L& l, const Params<T>& p) {
  tiled_transpose(l, p, kept_step(p));
}

template <class T, class L>
void ldr_flip_backward_kept(L& l, const Params<T>& p) {
  Step<T> s = kept_step(p);
  per_pixel<Kernel::kLdrKeptGrad>(l, p, s);
  s.out0 = p.g_test;
  s.out1 = p.g_ref;
  transpose_passes(l, p, s);
}

// HDR-FLIP: out, emap and index arrive initialised (0, 0, -1); one exposure per step.
template <class T, class L>
void hdr_flip_forward_fused(L& l, const Params<T>& p) {
  for (int64_t i = 0; i < p.E; ++i) fused_forward(l, p, Input::kHdr, hdr_step(p, i));
}

template <class T, class L>
void hdr_flip_forward(L& l, const Params<T>& p) {
  for (int64_t i = 0; i < p.E; ++i) {
    const Step<T> s = image_step(Input::kHdr, p.test, p.ref, 3, hdr_step(p, i));
    horizontal_pass(l, p, s);
    per_pixel<Kernel::kVerticalHdr>(l, p, s);
  }
}

// g_test and g_ref arrive zeroed; each exposure adds the gradient of the pixels it won.
template <class T, class L>
void hdr_flip_backward(L& l, const Params<T>& p) {
  for (int64_t i = 0; i < p.E; ++i)
    rows_backward<Kernel::kVerticalHdrVjp>(l, p, image_step(Input::kHdr, p.test, p.ref, 3, hdr_step(p, i)));
}

// g_test and g_ref arrive zeroed; in each band, each exposure adds the gradient of the pixels it
// won, in exposure order.
template <class T, class L>
void hdr_flip_backward_tiled(L& l, const Params<T>& p) {
  for (int64_t j = 0; j < p.plan.count(); ++j) {
    const BackwardBand b = p.plan.band(p.g, j);
    for (int64_t i = 0; i < p.E; ++i) tiled_band(l, p, b, Input::kHdr, hdr_step(p, i));
  }
}

template <class T, class L>
void csf_filter_forward(L& l, const Params<T>& p) {
  horizontal_pass(l, p, image_step(Input::kOpponent, p.test, p.test, 3));
  per_pixel<Kernel::kVerticalCsf>(l, p);
}

template <class T, class L>
void csf_filter_backward(L& l, const Params<T>& p) {
  rows_backward<Kernel::kVerticalCsfVjp>(l, p, image_step(Input::kOpponent, p.test, p.test, 3));
}

template <class T, class L>
void feature_difference_forward(L& l, const Params<T>& p) {
  horizontal_pass(l, p, image_step(Input::kAchromatic, p.test, p.ref, 1));
  per_pixel<Kernel::kVerticalFeature>(l, p);
}

template <class T, class L>
void feature_difference_backward(L& l, const Params<T>& p) {
  rows_backward<Kernel::kVerticalFeatureVjp>(l, p, image_step(Input::kAchromatic, p.test, p.ref, 1));
}

template <class T, class L>
void hunt_hyab_forward(L& l, const Params<T>& p) {
  per_pixel<Kernel::kHuntHyab>(l, p);
}

template <class T, class L>
void hunt_hyab_backward(L& l, const Params<T>& p) {
  per_pixel<Kernel::kHuntHyabVjp>(l, p);
}

}  // namespace launches
}  // namespace cuda
}  // namespace flip
