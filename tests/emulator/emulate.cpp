#include "emulate.h"

#include <algorithm>
#include <limits>

namespace flip_emulator {

using namespace flip;

namespace {

template <class T>
FilterView<T> view_of(const Filter1D<T>& f) {
  return FilterView<T>{f.w.data(), f.left.data(), f.right.data(), f.radius};
}

template <class T>
void run_h(const T* src0, const T* src1, int channels, const Geometry& g, Input mode, const TapsView<T>& t, T* planes,
           HdrStep<T> hs = HdrStep<T>::none()) {
  std::vector<T> smem(h_smem_len(kBlock, t.rmax));
  for (int64_t z = 0; z < g.n * g.images; ++z) {
    const int64_t n = z / g.images;
    const int im = static_cast<int>(z % g.images);
    T scale = T(1);
    if (mode == Input::kHdr) {
      if (!hs.active(n)) continue;
      scale = hs.scale(n);
    }
    const T* src = (im == 0 ? src0 : src1) + n * channels * g.hw();
    T* pl = planes + z * g.planes() * g.hw();
    for (int64_t y = 0; y < g.h; ++y)
      for (int64_t x0 = 0; x0 < g.w; x0 += kBlock) {
        for (int tid = 0; tid < kBlock; ++tid)
          h_load(src, g, mode, y, x0, kBlock, t.rmax, tid, smem.data(), scale, hs.tm);
        for (int tid = 0; tid < kBlock; ++tid) h_compute(g, t, y, x0, kBlock, t.rmax, tid, smem.data(), pl);
      }
  }
}

template <class T>
void run_vt_ht(const T* gplanes, T* tplanes, const T* src0, const T* src1, T* out0, T* out1, int channels,
               const Geometry& g, Input mode, const TapsView<T>& t, HdrStep<T> hs = HdrStep<T>::none()) {
  const int64_t hw = g.hw();
  for (int64_t z = 0; z < g.n * g.images; ++z) {
    if ((z % g.images == 0 ? out0 : out1) == nullptr) continue;  // as vt_kernel: no gradient wanted
    for (int64_t p = 0; p < hw; ++p)
      vt_pixel(gplanes + z * g.gplanes() * hw, tplanes + z * g.planes() * hw, g, t, p / g.w, p % g.w);
  }
  std::vector<T> smem(ht_smem_len(kBlock, t.rmax, g.planes()));
  for (int64_t z = 0; z < g.n * g.images; ++z) {
    const int64_t n = z / g.images;
    const int im = static_cast<int>(z % g.images);
    T* out = im == 0 ? out0 : out1;
    if (out == nullptr) continue;
    T scale = T(1);
    if (mode == Input::kHdr) {
      if (!hs.active(n)) continue;
      scale = hs.scale(n);
    }
    out += n * channels * hw;
    const T* src = (im == 0 ? src0 : src1) + n * channels * hw;
    const T* tpl = tplanes + z * g.planes() * hw;
    for (int64_t y = 0; y < g.h; ++y)
      for (int64_t x0 = 0; x0 < g.w; x0 += kBlock) {
        for (int tid = 0; tid < kBlock; ++tid) ht_load(tpl, g, y, x0, kBlock, t.rmax, tid, smem.data());
        for (int tid = 0; tid < kBlock; ++tid) {
          T g_opp[3], g_yh;
          if (ht_compute(g, t, x0, kBlock, t.rmax, tid, smem.data(), g_opp, g_yh))
            ht_store(g, mode, y * g.w + x0 + tid, g_opp, g_yh, src, out, scale, hs.tm);
        }
      }
  }
}

// One band of the tiled backward, one exposure (hs) for HDR-FLIP: kernel 1 then kernel 2, each
// block's phases one after the other as its barriers order them.
template <class T>
void run_tiled_band(const BackwardBand& b, const T* grad, const int32_t* index, const T* test, const T* ref, T* g_test,
                    T* g_ref, const Geometry& g, const TapsView<T>& t, Input mode, T eps, HdrStep<T> hs, T* scratch) {
  const auto k = color_consts<T>();
  const int R = t.rmax, threads = kFusedThreads;
  const bool hdr = mode == Input::kHdr;
  const int64_t hw = g.hw();
  std::vector<T> smem(fused_smem_len(R));
  for (int64_t n = b.n0; n < b.n1; ++n) {
    if (hdr && !hs.active(n)) continue;
    const T scale = hdr ? hs.scale(n) : T(1);
    for (int64_t ty = 0; ty < tiled_grad_tiles_y(b); ++ty)
      for (int64_t x0 = 0; x0 < g.w; x0 += kTileW) {
        const int64_t y0 = b.g0 + ty * kTileH;
        if (hdr) {  // __syncthreads_or in the kernel
          bool won = false;
          for (int tid = 0; tid < threads; ++tid)
            won = tile_won(index + n * hw, g, hs.i, y0, x0, b.g0, b.g1, 0, tid, threads) || won;
          if (!won) {
            for (int tid = 0; tid < threads; ++tid) tiled_zero_planes(g, b, n, y0, x0, tid, threads, scratch);
            continue;
          }
        }
        for (int im = 0; im < 2; ++im) {
          const T* src = (im == 0 ? test : ref) + n * 3 * hw;
          for (int tid = 0; tid < threads; ++tid)
            fused_load(src, g, mode, y0, x0, R, tid, threads, smem.data(), scale, hs.tm);
          for (int tid = 0; tid < threads; ++tid) fused_horizontal(t, R, tid, threads, smem.data());
          for (int tid = 0; tid < threads; ++tid) fused_vertical(t, R, im, tid, threads, smem.data());
        }
        for (int tid = 0; tid < threads; ++tid)
          tiled_tail_vjp(g, b, n, y0, x0, R, tid, threads, smem.data(), eps, k, grad + n * hw, scratch,
                         hdr ? &hs : nullptr, hdr ? index + n * hw : nullptr);
      }
  }
  std::vector<T> tsmem(tiled_t_smem_len(R));
  for (int64_t n = b.n0; n < b.n1; ++n) {
    if (hdr && !hs.active(n)) continue;
    const T scale = hdr ? hs.scale(n) : T(1);
    for (int im = 0; im < 2; ++im) {
      T* out = im == 0 ? g_test : g_ref;
      if (out == nullptr) continue;
      const T* gp = b.planes(scratch, n, im, g.w);
      const T* src = (im == 0 ? test : ref) + n * 3 * hw;
      for (int64_t y0 = b.y0; y0 < b.y1; y0 += kTileH)
        for (int64_t x0 = 0; x0 < g.w; x0 += kTileW) {
          if (hdr) {
            bool won = false;
            for (int tid = 0; tid < threads; ++tid)
              won = tile_won(index + n * hw, g, hs.i, y0, x0, b.g0, b.g1, R, tid, threads) || won;
            if (!won) continue;
          }
          for (int tid = 0; tid < threads; ++tid) tiled_load_t(gp, b, g, y0, x0, R, tid, threads, tsmem.data());
          for (int tid = 0; tid < threads; ++tid) tiled_vertical_t(g, t, y0, b.y1, R, tid, threads, tsmem.data());
          for (int tid = 0; tid < threads; ++tid)
            tiled_horizontal_t(g, t, y0, b.y1, x0, R, tid, threads, tsmem.data(), mode, src, out + n * 3 * hw, scale,
                               hs.tm);
        }
    }
  }
}

// The scratch of a band starts as NaN: a gradient-plane value kernel 2 reads that kernel 1 did not
// write turns the result into NaN instead of passing unnoticed.
template <class T>
void poison(std::vector<T>& scratch) {
  std::fill(scratch.begin(), scratch.end(), std::numeric_limits<T>::quiet_NaN());
}

int wanted_mask(const void* g_test, const void* g_ref) { return (g_test ? 1 : 0) | (g_ref ? 2 : 0); }

}  // namespace

template <class T>
HostTaps<T>::HostTaps(double ppd) : csf(csf_taps<T>(ppd)), feat(feature_taps<T>(ppd)) {
  view = TapsView<T>{view_of(csf->y),  view_of(csf->cx),  view_of(csf->cz1),  view_of(csf->cz2),
                     view_of(feat->g), view_of(feat->dg), view_of(feat->ddg), std::max(csf->y.radius, feat->g.radius)};
}

template <class T>
void ldr_flip_forward(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, bool srgb, T eps) {
  const auto k = color_consts<T>();
  std::vector<T> planes(g.n * g.images * g.planes() * g.hw());
  run_h(test, ref, 3, g, srgb ? Input::kSrgb : Input::kLinear, t, planes.data());
  for (int64_t i = 0; i < g.n * g.hw(); ++i) ldr_pixel(planes.data(), out, g, t, i, eps, k);
}

template <class T>
void ldr_flip_forward_fused(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, bool srgb,
                            T eps) {
  const auto k = color_consts<T>();
  const int R = t.rmax, threads = kFusedThreads;
  std::vector<T> smem(fused_smem_len(R));
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t y0 = 0; y0 < g.h; y0 += kTileH)
      for (int64_t x0 = 0; x0 < g.w; x0 += kTileW) {
        for (int im = 0; im < 2; ++im) {
          const T* src = (im == 0 ? test : ref) + n * 3 * g.hw();
          for (int tid = 0; tid < threads; ++tid)
            fused_load(src, g, srgb ? Input::kSrgb : Input::kLinear, y0, x0, R, tid, threads, smem.data(), T(1),
                       HdrStep<T>::none().tm);
          for (int tid = 0; tid < threads; ++tid) fused_horizontal(t, R, tid, threads, smem.data());
          for (int tid = 0; tid < threads; ++tid) fused_vertical(t, R, im, tid, threads, smem.data());
        }
        for (int tid = 0; tid < threads; ++tid)
          fused_tail(g, y0, x0, R, tid, threads, smem.data(), eps, k, out + n * g.hw());
      }
}

template <class T>
void hdr_flip_forward_fused(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                            T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t, ToneMapper tm, T eps) {
  const auto k = color_consts<T>();
  const int R = t.rmax, threads = kFusedThreads;
  std::vector<T> smem(fused_smem_len(R));
  std::fill(out, out + g.n * g.hw(), T(0));
  std::fill(emap, emap + g.n * g.hw(), T(0));
  std::fill(index, index + g.n * g.hw(), -1);
  for (int64_t i = 0; i < E; ++i) {
    const HdrStep<T> hs{exposures, counts, E, i, tm};
    for (int64_t n = 0; n < g.n; ++n) {
      if (!hs.active(n)) continue;
      const T scale = hs.scale(n);
      const int64_t off = n * g.hw();
      for (int64_t y0 = 0; y0 < g.h; y0 += kTileH)
        for (int64_t x0 = 0; x0 < g.w; x0 += kTileW) {
          for (int im = 0; im < 2; ++im) {
            const T* src = (im == 0 ? test : ref) + n * 3 * g.hw();
            for (int tid = 0; tid < threads; ++tid)
              fused_load(src, g, Input::kHdr, y0, x0, R, tid, threads, smem.data(), scale, tm);
            for (int tid = 0; tid < threads; ++tid) fused_horizontal(t, R, tid, threads, smem.data());
            for (int tid = 0; tid < threads; ++tid) fused_vertical(t, R, im, tid, threads, smem.data());
          }
          for (int tid = 0; tid < threads; ++tid)
            fused_tail(g, y0, x0, R, tid, threads, smem.data(), eps, k, out + off, &hs, n, emap + off, index + off);
        }
    }
  }
}

template <class T>
void ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, const Geometry& g,
                       const TapsView<T>& t, bool srgb, T eps) {
  const auto k = color_consts<T>();
  const Input mode = srgb ? Input::kSrgb : Input::kLinear;
  std::vector<T> planes(g.n * g.images * g.planes() * g.hw()), gplanes(g.n * g.images * g.gplanes() * g.hw());
  run_h(test, ref, 3, g, mode, t, planes.data());
  for (int64_t i = 0; i < g.n * g.hw(); ++i) ldr_vjp_pixel(grad, planes.data(), gplanes.data(), g, t, i, eps, k);
  run_vt_ht(gplanes.data(), planes.data(), test, ref, g_test, g_ref, 3, g, mode, t);
}

template <class T>
void ldr_flip_backward_tiled(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, const Geometry& g,
                             const TapsView<T>& t, bool srgb, T eps, int64_t scratch_bytes) {
  const int wanted = wanted_mask(g_test, g_ref);
  if (wanted == 0) return;
  const BackwardPlan plan = plan_backward(g, wanted, t.rmax, sizeof(T), scratch_bytes);
  std::vector<T> scratch(plan.scratch_elems(g));
  for (int64_t j = 0; j < plan.count(); ++j) {
    poison(scratch);
    run_tiled_band(plan.band(g, j), grad, static_cast<const int32_t*>(nullptr), test, ref, g_test, g_ref, g, t,
                   srgb ? Input::kSrgb : Input::kLinear, eps, HdrStep<T>::none(), scratch.data());
  }
}

template <class T>
void hdr_flip_backward_tiled(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,
                             int64_t E, const int32_t* index, T* g_test, T* g_ref, const Geometry& g,
                             const TapsView<T>& t, ToneMapper tm, T eps, int64_t scratch_bytes) {
  for (T* gout : {g_test, g_ref})
    if (gout) std::fill(gout, gout + g.n * 3 * g.hw(), T(0));
  const int wanted = wanted_mask(g_test, g_ref);
  if (wanted == 0) return;
  const BackwardPlan plan = plan_backward(g, wanted, t.rmax, sizeof(T), scratch_bytes);
  std::vector<T> scratch(plan.scratch_elems(g));
  for (int64_t j = 0; j < plan.count(); ++j)
    for (int64_t i = 0; i < E; ++i) {
      poison(scratch);
      run_tiled_band(plan.band(g, j), grad, index, test, ref, g_test, g_ref, g, t, Input::kHdr, eps,
                     HdrStep<T>{exposures, counts, E, i, tm}, scratch.data());
    }
}

template <class T>
void hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                      T* emap, int32_t* index, const Geometry& g, const TapsView<T>& t, ToneMapper tm, T eps) {
  const auto k = color_consts<T>();
  std::vector<T> planes(g.n * g.images * g.planes() * g.hw());
  std::fill(out, out + g.n * g.hw(), T(0));
  std::fill(emap, emap + g.n * g.hw(), T(0));
  std::fill(index, index + g.n * g.hw(), -1);
  for (int64_t i = 0; i < E; ++i) {
    const HdrStep<T> hs{exposures, counts, E, i, tm};
    run_h(test, ref, 3, g, Input::kHdr, t, planes.data(), hs);
    for (int64_t p = 0; p < g.n * g.hw(); ++p) hdr_max_pixel(planes.data(), out, emap, index, g, t, p, eps, k, hs);
  }
}

template <class T>
void hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E,
                       const int32_t* index, T* g_test, T* g_ref, const Geometry& g, const TapsView<T>& t,
                       ToneMapper tm, T eps) {
  const auto k = color_consts<T>();
  std::vector<T> planes(g.n * g.images * g.planes() * g.hw()), gplanes(g.n * g.images * g.gplanes() * g.hw());
  for (T* gout : {g_test, g_ref})
    if (gout) std::fill(gout, gout + g.n * 3 * g.hw(), T(0));
  for (int64_t i = 0; i < E; ++i) {
    const HdrStep<T> hs{exposures, counts, E, i, tm};
    run_h(test, ref, 3, g, Input::kHdr, t, planes.data(), hs);
    for (int64_t p = 0; p < g.n * g.hw(); ++p)
      hdr_vjp_pixel(grad, index, planes.data(), gplanes.data(), g, t, p, eps, k, hs);
    run_vt_ht(gplanes.data(), planes.data(), test, ref, g_test, g_ref, 3, g, Input::kHdr, t, hs);
  }
}

template <class T>
void csf_filter_forward(const T* opp, T* out, const Geometry& g, const TapsView<T>& t) {
  std::vector<T> planes(g.n * g.planes() * g.hw());
  run_h(opp, opp, 3, g, Input::kOpponent, t, planes.data());
  for (int64_t i = 0; i < g.n * g.hw(); ++i) csf_pixel(planes.data(), out, g, t, i);
}

template <class T>
void csf_filter_backward(const T* grad, const T* opp, T* g_opp, const Geometry& g, const TapsView<T>& t) {
  std::vector<T> planes(g.n * g.planes() * g.hw()), gplanes(g.n * g.gplanes() * g.hw());
  run_h(opp, opp, 3, g, Input::kOpponent, t, planes.data());
  for (int64_t i = 0; i < g.n * g.hw(); ++i) csf_vjp_pixel(grad, planes.data(), gplanes.data(), g, t, i);
  run_vt_ht(gplanes.data(), planes.data(), opp, opp, g_opp, static_cast<T*>(nullptr), 3, g, Input::kOpponent, t);
}

template <class T>
void feature_difference_forward(const T* test, const T* ref, T* out, const Geometry& g, const TapsView<T>& t, T eps) {
  std::vector<T> planes(g.n * 2 * g.planes() * g.hw());
  run_h(test, ref, 1, g, Input::kAchromatic, t, planes.data());
  for (int64_t i = 0; i < g.n * g.hw(); ++i) feat_pixel(planes.data(), out, g, t, i, eps);
}

template <class T>
void feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, const Geometry& g,
                                 const TapsView<T>& t, T eps) {
  std::vector<T> planes(g.n * 2 * g.planes() * g.hw()), gplanes(g.n * 2 * g.gplanes() * g.hw());
  run_h(test, ref, 1, g, Input::kAchromatic, t, planes.data());
  for (int64_t i = 0; i < g.n * g.hw(); ++i) feat_vjp_pixel(grad, planes.data(), gplanes.data(), g, t, i, eps);
  run_vt_ht(gplanes.data(), planes.data(), test, ref, g_test, g_ref, 1, g, Input::kAchromatic, t);
}

#define FLIP_INSTANTIATE(T)                                                                                            \
  template struct HostTaps<T>;                                                                                         \
  template void ldr_flip_forward<T>(const T*, const T*, T*, const Geometry&, const TapsView<T>&, bool, T);             \
  template void ldr_flip_forward_fused<T>(const T*, const T*, T*, const Geometry&, const TapsView<T>&, bool, T);       \
  template void hdr_flip_forward_fused<T>(const T*, const T*, const T*, const int64_t*, int64_t, T*, T*, int32_t*,     \
                                          const Geometry&, const TapsView<T>&, ToneMapper, T);                         \
  template void ldr_flip_backward<T>(const T*, const T*, const T*, T*, T*, const Geometry&, const TapsView<T>&, bool,  \
                                     T);                                                                               \
  template void ldr_flip_backward_tiled<T>(const T*, const T*, const T*, T*, T*, const Geometry&, const TapsView<T>&,  \
                                           bool, T, int64_t);                                                          \
  template void hdr_flip_backward_tiled<T>(const T*, const T*, const T*, const T*, const int64_t*, int64_t,            \
                                           const int32_t*, T*, T*, const Geometry&, const TapsView<T>&, ToneMapper, T, \
                                           int64_t);                                                                   \
  template void hdr_flip_forward<T>(const T*, const T*, const T*, const int64_t*, int64_t, T*, T*, int32_t*,           \
                                    const Geometry&, const TapsView<T>&, ToneMapper, T);                               \
  template void hdr_flip_backward<T>(const T*, const T*, const T*, const T*, const int64_t*, int64_t, const int32_t*,  \
                                     T*, T*, const Geometry&, const TapsView<T>&, ToneMapper, T);                      \
  template void csf_filter_forward<T>(const T*, T*, const Geometry&, const TapsView<T>&);                              \
  template void csf_filter_backward<T>(const T*, const T*, T*, const Geometry&, const TapsView<T>&);                   \
  template void feature_difference_forward<T>(const T*, const T*, T*, const Geometry&, const TapsView<T>&, T);         \
  template void feature_difference_backward<T>(const T*, const T*, const T*, T*, T*, const Geometry&,                  \
                                               const TapsView<T>&, T);
FLIP_INSTANTIATE(float)
FLIP_INSTANTIATE(double)
#undef FLIP_INSTANTIATE

}  // namespace flip_emulator
