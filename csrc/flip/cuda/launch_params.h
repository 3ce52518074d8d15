// What the CUDA kernels are launched with, host-compilable so that the test-only emulator
// (tests/emulator) launches the very same block code (kernel_bodies.h) through the very same launch
// sequences (op_launches.h) as kernels.cu: the taps argument and its packing, the launch
// parameters, each launch's grid, block and shared memory, and the choice of formulation. No CUDA
// header here.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../filters.h"
#include "row_passes.h"

// __grid_constant__ (CUDA 11.7+, sm_70+) lets a kernel take the address of a by-value parameter
// without copying it to per-thread local memory: the kernels' arguments below are then read
// straight from the kernel's parameter space. Older toolkits still compile (with that copy).
#if defined(__CUDACC_VER_MAJOR__) && \
    (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 7))
#define FLIP_GRID_CONSTANT __grid_constant__
#else
#define FLIP_GRID_CONSTANT
#endif

namespace flip {
namespace cuda {

// Bytes of filter taps a launch carries by value. With the rest of a kernel's arguments this stays
// under the 4 KB parameter limit of every toolkit. A filter of radius r takes 4r + 1 values (w,
// left, right), seven of them at most 7 (4r + 1), so float32 fits up to ppd ~203 and float64 up to
// ppd ~97 (ppd 67: 275 values, 1.1 KB in float32); larger radii use device memory
// (KernelTaps::device).
constexpr size_t kInlineTapBytes = 3072;

// The seven filters of TapsView in one launch argument. Taps passed by value need no device
// allocation, so a first call under CUDA graph capture or inside torch.compile's cudagraph warm-up
// allocates nothing from PyTorch's caching allocator (whose memory would then belong to a graph's
// private pool) and never synchronises. Each filter is laid out as w (2r + 1), left (r), right (r).
template <class T>
struct KernelTaps {
  static constexpr int kInlineCapacity = static_cast<int>(kInlineTapBytes / sizeof(T));
  // Per filter of both banks (kBankFilters, plane_counts.h), in TapsView's order: y, cx, cz1,
  // cz2, g, dg, ddg.
  int offset[kBankFilters] = {};
  int radius[kBankFilters] = {};
  int rmax = 0;
  // Null: the taps are in `inline_taps`. Else: memory owned by the caller (csrc/ops/cuda.cpp:
  // device memory outside the caching allocator, alive while the taps cache or a call holds it)
  // holding the same layout.
  const T* device = nullptr;
  T inline_taps[kInlineCapacity] = {};

  // The filters as TapsView (filter_sums.h) pointing into this struct or into `device`. A kernel
  // calls it on its FLIP_GRID_CONSTANT parameter, so the pointers stay in parameter space.
  FLIP_HD TapsView<T> view() const {
    const T* base = device != nullptr ? device : inline_taps;
    FilterView<T> f[kBankFilters];
    for (int i = 0; i < kBankFilters; ++i) {
      const T* w = base + offset[i];
      const int r = radius[i];
      f[i] = FilterView<T>{w, w + 2 * r + 1, w + 3 * r + 1, r};
    }
    static_assert(kBankFilters == 7, "TapsView lists the seven filters of the banks");
    return TapsView<T>{f[0], f[1], f[2], f[3], f[4], f[5], f[6], rmax};
  }
};
// A kernel's other arguments take under 200 bytes, so every argument list stays within the 4 KB
// that toolkits before CUDA 12.1 allow.
static_assert(sizeof(KernelTaps<double>) + 512 <= 4096, "the taps argument leaves too little of the 4 KB");

// The filter radii a tiled kernel (the fused forward and both kernels of the tiled backward) is
// compiled for: a template argument of the kernel, chosen per launch (op_launches.h, launch_tiled).
// AnyRadius reads the radii at run time and serves every ppd, taps by value or in device memory.
// FixedRadii<Rc, Rf> has the CSF radius Rc and the feature radius Rf built in: the filter loops
// unroll, the tile's index math folds, and every tap is read at a constant offset of the kernel's
// parameter space, which the GPU takes as an operand of the multiply-add instead of a load per
// tap. It serves taps passed by value whose radii and layout are its own.
struct AnyRadius {
  template <class T>
  FLIP_HD static TapsView<T> view(const KernelTaps<T>& k) {
    return k.view();
  }
  template <class T>
  FLIP_HD static int halo(const KernelTaps<T>& k) {
    return k.rmax;
  }
};

template <int Rc, int Rf>
struct FixedRadii {
  static constexpr int kCsfRadius = Rc, kFeatureRadius = Rf, kHalo = Rc > Rf ? Rc : Rf;
  // Compiled for float only: float64 runs serve checks, not speed, and each radius set adds three
  // kernels to the build.
  template <class T>
  static constexpr bool kCompiled = std::is_same<T, float>::value;
  // pack_taps' layout for these radii: filter i of TapsView's order at offset(i), each w, left,
  // right.
  FLIP_HD static constexpr int radius(int i) { return i < kCsfFilters ? Rc : Rf; }
  FLIP_HD static constexpr int offset(int i) {
    return i < kCsfFilters ? i * (4 * Rc + 1) : kCsfFilters * (4 * Rc + 1) + (i - kCsfFilters) * (4 * Rf + 1);
  }
  template <class T>
  static bool fits(const KernelTaps<T>& k) {
    if (!kCompiled<T> || k.device != nullptr || k.rmax != kHalo) return false;
    for (int i = 0; i < kBankFilters; ++i)
      if (k.radius[i] != radius(i) || k.offset[i] != offset(i)) return false;
    return true;
  }
  template <class T>
  FLIP_HD static FilterBank<FixedFilter<T, Rc>, FixedFilter<T, Rf>> view(const KernelTaps<T>& k) {
    static_assert(offset(kBankFilters) <= KernelTaps<T>::kInlineCapacity, "FixedRadii's taps travel by value");
    const T* w = k.inline_taps;
    auto csf = [w](int i) {
      return FixedFilter<T, Rc>{w + offset(i), w + offset(i) + 2 * Rc + 1, w + offset(i) + 3 * Rc + 1};
    };
    auto feat = [w](int i) {
      return FixedFilter<T, Rf>{w + offset(i), w + offset(i) + 2 * Rf + 1, w + offset(i) + 3 * Rf + 1};
    };
    static_assert(kBankFilters == 7 && kCsfFilters == 4, "FilterBank lists four CSF and three feature filters");
    return {csf(0), csf(1), csf(2), csf(3), feat(4), feat(5), feat(6), kHalo};
  }
  template <class T>
  FLIP_HD static constexpr int halo(const KernelTaps<T>&) {
    return kHalo;
  }
};

// The radii at flip_loss's default pixels per degree (67.02: a 0.7 m wide 4K display seen from
// 0.7 m), which NVIDIA's loss uses too: csf_radius and feature_radius of it (filters.h; a test
// keeps the two in step).
using DefaultRadii = FixedRadii<10, 9>;

// The taps of ppd in KernelTaps' layout: the offsets, radii and rmax in `taps`, the values in the
// returned vector, copied into taps.inline_taps when they fit there (then taps.device stays null;
// else the caller puts the values somewhere and points taps.device at them).
template <class T>
std::vector<T> pack_taps(const CsfTaps<T>& csf, const FeatureTaps<T>& feat, KernelTaps<T>& taps) {
  const Filter1D<T>* filters[kBankFilters] = {&csf.y, &csf.cx, &csf.cz1, &csf.cz2, &feat.g, &feat.dg, &feat.ddg};
  std::vector<T> values;
  for (int i = 0; i < kBankFilters; ++i) {
    const Filter1D<T>* f = filters[i];
    taps.offset[i] = static_cast<int>(values.size());
    taps.radius[i] = f->radius;
    values.insert(values.end(), f->w.begin(), f->w.end());
    values.insert(values.end(), f->left.begin(), f->left.end());
    values.insert(values.end(), f->right.begin(), f->right.end());
  }
  taps.rmax = std::max(csf.y.radius, feat.g.radius);
  taps.device = nullptr;
  if (values.size() <= static_cast<size_t>(KernelTaps<T>::kInlineCapacity))
    std::copy(values.begin(), values.end(), taps.inline_taps);
  return values;
}

// What the launch sequences read, in one struct (nvdiffrast's style) instead of long positional
// lists: csrc/ops/cuda.cpp fills the fields an op needs and leaves the rest null. All buffers are
// on the device, contiguous, N x C x H x W. Every kernel takes it as its first (grid-constant)
// argument.
template <class T>
struct Params {
  Geometry g;          // batch and image size, images per item, which banks run
  KernelTaps<T> taps;  // the filter taps, by value or in device memory (unused by hunt_hyab)
  T eps = T(0);
  ColorConsts<T> k{};  // colour constants (LDR/HDR-FLIP, hunt_hyab)
  bool srgb = false;   // LDR-FLIP: sRGB (else linear) input
  // Inputs: the two images (csf_filter: the opponent image in test), the incoming gradient of a
  // backward.
  const T* test = nullptr;
  const T* ref = nullptr;
  const T* grad = nullptr;
  // HDR-FLIP: exposures N x E (stops), item n uses the first counts[n], with tone mapper tm.
  const T* exposures = nullptr;
  const int64_t* counts = nullptr;
  int64_t E = 0;
  ToneMapper tm = ToneMapper::kAces;
  // Outputs: the map; HDR-FLIP's exposure map and winning index (the forward writes the index, the
  // backward reads it); the gradients w.r.t. test and ref (null where not wanted).
  T* out = nullptr;
  T* emap = nullptr;
  int32_t* index = nullptr;
  T* g_test = nullptr;
  T* g_ref = nullptr;
  // Scratch of the plane-based kernels: planes n * images * g.planes() * H * W, gplanes
  // n * images * g.gplanes() * H * W (see row_passes.h).
  T* planes = nullptr;
  T* gplanes = nullptr;
  // The tiled backward: its bands (plan_backward, for the gradients g_test / g_ref asks for) and
  // their scratch of plan.scratch_elems(g) values.
  BackwardPlan plan{};
  T* scratch = nullptr;
  // LDR-FLIP's kept sensitivities, N x 7k x H x W (k: the images plan.wanted names; plan is then
  // whole_batch_plan): the forward that keeps them writes them (with the map), the backward from
  // them reads them (with grad) in place of the tiled backward's scratch.
  T* sensitivities = nullptr;
  // A debugging aid (FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH, csrc/ops/cuda.cpp; always on in the
  // emulator): fill the scratch with NaN before each band's kTiledGrad, so that kTiledTranspose reading a
  // value kTiledGrad did not write gives NaN.
  bool nan_scratch = false;
};

// What one launch adds to Params: the pass's input and output images, the exposure of an HDR
// step, the band of the tiled backward. Every kernel takes it as its second argument.
template <class T>
struct Step {
  Input mode = Input::kSrgb;
  int channels = 3;         // horizontal pass and transpose: channels of src0/src1, out0/out1
  const T* src0 = nullptr;  // the same: the images (src1 may equal src0 when
  const T* src1 = nullptr;  //   the planes hold one image)
  T* out0 = nullptr;        // horizontal transpose: the gradients (null: not wanted)
  T* out1 = nullptr;
  int wanted = 0;                      // vertical transpose: bit im set when image im's gradient is wanted
  HdrStep<T> hs = HdrStep<T>::none();  // HDR-FLIP: the exposure
  BackwardBand band{};                 // the tiled backward's band
  // The tiled kernels on kept sensitivities (p.sensitivities, band: the whole batch): kTiledGrad
  // writes them for a unit gradient and the map into p.out; kTiledTranspose multiplies them by p.grad.
  bool kept = false;
};

// The kernels, one block body each (kernel_bodies.h, run_block).
enum class Kernel : int {
  kHorizontalPass,       // the row passes' horizontal pass
  kHorizontalTranspose,  // the row passes' horizontal transpose (+ the chain to the op's input)
  kVerticalTranspose,    // the row passes' vertical transpose
  kVerticalLdr,          // the row passes' vertical pass + one op's tail
  kVerticalLdrVjp,
  kVerticalCsf,
  kVerticalCsfVjp,
  kVerticalFeature,
  kVerticalFeatureVjp,
  kVerticalHdr,
  kVerticalHdrVjp,
  kVerticalLdrKeep,  // the vertical pass + tail + the sensitivities kept (row passes)
  kLdrKeptGrad,      // the kept sensitivities times the gradient -> gradient planes (row passes)
  kHuntHyab,
  kHuntHyabVjp,
  kFused,           // the fused forward
  kTiledGrad,       // the tiled backward's first kernel: forward + adjoint into gradient planes
  kTiledTranspose,  // its second: the transposed filters on those planes
};

// Each kernel's name, that of its __global__ wrapper in kernels.cu (which profilers and the SASS
// report, benchmarks/sass_report.py, show): for the launch checks' messages and the emulator's.
inline const char* kernel_name(Kernel k) {
  switch (k) {
    case Kernel::kHorizontalPass:
      return "horizontal_pass_kernel";
    case Kernel::kHorizontalTranspose:
      return "horizontal_transpose_kernel";
    case Kernel::kVerticalTranspose:
      return "vertical_transpose_kernel";
    case Kernel::kVerticalLdr:
      return "vertical_ldr_kernel";
    case Kernel::kVerticalLdrVjp:
      return "vertical_ldr_vjp_kernel";
    case Kernel::kVerticalCsf:
      return "vertical_csf_kernel";
    case Kernel::kVerticalCsfVjp:
      return "vertical_csf_vjp_kernel";
    case Kernel::kVerticalFeature:
      return "vertical_feature_kernel";
    case Kernel::kVerticalFeatureVjp:
      return "vertical_feature_vjp_kernel";
    case Kernel::kVerticalHdr:
      return "vertical_hdr_kernel";
    case Kernel::kVerticalHdrVjp:
      return "vertical_hdr_vjp_kernel";
    case Kernel::kVerticalLdrKeep:
      return "vertical_ldr_keep_kernel";
    case Kernel::kLdrKeptGrad:
      return "ldr_kept_grad_kernel";
    case Kernel::kHuntHyab:
      return "hunt_hyab_kernel";
    case Kernel::kHuntHyabVjp:
      return "hunt_hyab_vjp_kernel";
    case Kernel::kFused:
      return "fused_forward_kernel";
    case Kernel::kTiledGrad:
      return "tiled_grad_kernel";
    case Kernel::kTiledTranspose:
      return "tiled_transpose_kernel";
  }
  return "?";
}

// A launch's grid (CUDA's dim3 without CUDA's headers).
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The grid limits the launch shapes respect: CUDA's (grid.y and grid.z at most 65535) and a cap
// on the blocks of the grid-stride kernels (enough to saturate any current GPU). The emulator
// shrinks them to test the kernels' grid-stride loops on small images.
struct GridLimits {
  int64_t max_y = 65535, max_z = 65535, max_blocks = int64_t(1) << 20;
};

inline unsigned grid_dim(int64_t want, int64_t most) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(want, most)));
}

// The grid-stride kernels (the per-pixel ones and the vertical transpose): blocks of kBlock threads
// over `total` threads' work; the loops cover what the cap leaves.
inline Dim3 pixel_grid(int64_t total, const GridLimits& l) {
  return Dim3{grid_dim((total + kBlock - 1) / kBlock, l.max_blocks), 1, 1};
}

// The horizontal pass and transpose: one block per (x tile of kBlock columns, row, plane image);
// the rows and plane images stride in the kernel past the limits.
inline Dim3 row_grid(const Geometry& g, const GridLimits& l) {
  return Dim3{static_cast<unsigned>((g.w + kBlock - 1) / kBlock), grid_dim(g.h, l.max_y),
              grid_dim(g.n * g.images, l.max_z)};
}

// The tiled kernels: one block per kTileW column tile, `y` tile rows (kTiledTranspose) or walks of
// them (the fused forward and kTiledGrad, fused_forward.h) and `z` items (or item-images); rows and
// z stride in the kernel past the limits.
inline Dim3 tile_grid(const Geometry& g, int64_t y, int64_t z, const GridLimits& l) {
  return Dim3{static_cast<unsigned>((g.w + kTileW - 1) / kTileW), grid_dim(y, l.max_y), grid_dim(z, l.max_z)};
}

// Shared memory of each kernel that has some (kernels without use none).
template <class T>
size_t horizontal_pass_smem_bytes(int R) {
  return sizeof(T) * horizontal_pass_smem_len(kBlock, R);
}
template <class T>
size_t horizontal_transpose_smem_bytes(int R, int planes) {
  return sizeof(T) * horizontal_transpose_smem_len(kBlock, R, planes);
}
// The fused forward and the tiled backward's kTiledGrad (the same layout).
template <class T>
size_t fused_smem_bytes(int R) {
  return sizeof(T) * fused_smem_len(R);
}
// The tiled backward's kTiledTranspose.
template <class T>
size_t tiled_transpose_smem_bytes(int R) {
  return sizeof(T) * tiled_transpose_smem_len(R);
}

// The formulation of LDR-/HDR-FLIP for filter radius R on a device offering `have` bytes of shared
// memory per block (its opt-in maximum): the fused forward and the tiled backward where their
// tiles fit and the row passes are not forced, else the row passes, which need row_pass_smem_bytes.
template <class T>
bool use_fused_forward(int R, size_t have, bool force_row_passes) {
  return !force_row_passes && fused_smem_bytes<T>(R) <= have;
}
template <class T>
bool use_tiled_backward(int R, size_t have, bool force_row_passes) {
  return !force_row_passes && fused_smem_bytes<T>(R) <= have && tiled_transpose_smem_bytes<T>(R) <= have;
}
template <class T>
size_t row_pass_smem_bytes(int R, int planes) {
  return std::max(horizontal_pass_smem_bytes<T>(R), horizontal_transpose_smem_bytes<T>(R, planes));
}

// H100 / H200 (sm_90): shared memory per block with the opt-in, the figure the emulator assumes.
constexpr size_t kSm90SharedMemoryPerBlock = 227 * 1024;

}  // namespace cuda
}  // namespace flip
