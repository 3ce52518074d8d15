// STABLE_TORCH_LIBRARY_IMPL(flip, CUDA): device guard, current stream, the taps launch argument,
// scratch planes from the caching allocator, then the launchers of csrc/flip/cuda/kernels.cu.
// Built only with FLIP_LOSS_CUDA (setup.py / CMake). No host synchronisation, except the upload of
// taps too large to pass by value and, when the taps cache drops such taps, the synchronisation
// before their memory is freed (kernel_taps, DeviceTaps).
#include <cuda_runtime_api.h>
#include <torch/csrc/inductor/aoti_torch/c/shim.h>
#include <torch/csrc/stable/accelerator.h>
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "../flip/cuda/kernels.h"
#include "../flip/bounded_cache.h"
#include "../flip/environment.h"
#include "../flip/filters.h"
#include "checks.h"
#include "kernel_tensors.h"

namespace flip_ops {
namespace {

using flip::Geometry;

// A CUDA runtime error as an exception (RuntimeError in Python), with the runtime's own words. A
// failing call also leaves its error in the thread's error variable, which the next launch check
// (PyTorch's or flip's own, csrc/flip/cuda/launch_check.h) would blame on its own kernel: it is
// cleared here (an execution error, sticky, stays whatever is done). The launches are checked by
// the launchers (kernels.h), one by one.
void cuda_check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();
  throw std::runtime_error(std::string("flip: CUDA error in ") + what + ": " + cudaGetErrorString(e));
}
#define FLIP_CUDA_CHECK(expr) cuda_check((expr), #expr)

// The device's opt-in shared memory per block (the current device: the guard has set it).
size_t shared_memory_per_block() {
  int dev = 0, bytes = 0;
  FLIP_CUDA_CHECK(cudaGetDevice(&dev));
  FLIP_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  return static_cast<size_t>(bytes);
}

// The current CUDA stream of the images' device, as PyTorch's caching allocator and the caller's
// streams see it.
cudaStream_t current_stream(const Tensor& like) {
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(like.get_device_index(), &stream) != AOTI_TORCH_SUCCESS)
    throw std::runtime_error("flip: could not get the current CUDA stream");
  return static_cast<cudaStream_t>(stream);
}

// Device memory holding taps too large to pass by value, taken with cudaMalloc (outside PyTorch's
// caching allocator, whose blocks would otherwise belong to whichever graph pool was active at the
// first call) and freed by its last owner. The taps are read by kernels queued asynchronously, on
// whatever stream was current for the call, possibly several streams at once, and the stable ABI
// offers no record_stream to tell an allocator about them; so the free is ordered after all of
// them by synchronising the buffer's device first (every kernel queued on any of its streams has
// then finished). It happens only when the cache drops an entry that holds device memory (a sweep
// over more than kTapCacheEntries ppd values, large radii among them) once its last caller has
// queued its launches; never during a graph capture (the cache is told not to drop then) nor for
// an entry a capture has used (pinned: a graph may replay its launches at any later time).
class DeviceTaps {
 public:
  DeviceTaps() = default;
  DeviceTaps(void* memory, int device) : memory_(memory), device_(device) {}
  DeviceTaps(DeviceTaps&& o) noexcept : memory_(std::exchange(o.memory_, nullptr)), device_(o.device_) {}
  DeviceTaps& operator=(DeviceTaps&& o) noexcept {
    std::swap(memory_, o.memory_);  // what this held is freed with `o`
    std::swap(device_, o.device_);
    return *this;
  }
  DeviceTaps(const DeviceTaps&) = delete;
  ~DeviceTaps() {
    if (memory_ == nullptr) return;
    int current = 0;
    if (cudaGetDevice(&current) != cudaSuccess) return;  // the runtime is gone (process exit): nothing to free
    // A destructor cannot report errors. Where the synchronisation fails (a broken context, or a
    // capture in another thread in cudaStreamCaptureModeGlobal, which forbids it as it forbids the
    // upload's cudaMalloc) the memory is left allocated rather than freed under running kernels,
    // and the failure's error is cleared, not left for the next launch check to blame on others.
    const bool freed = cudaSetDevice(device_) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess &&
                       cudaFree(memory_) == cudaSuccess;
    if (!freed) cudaGetLastError();
    cudaSetDevice(current);
  }

 private:
  void* memory_ = nullptr;
  int device_ = -1;
};

// One cached launch argument: what kernels get (`launch`) and the device memory it points into.
template <class T>
struct CachedTaps {
  flip::cuda::KernelTaps<T> launch;
  DeviceTaps memory;
};

// The launch argument of the taps for (ppd, dtype, device), built once and kept in a cache of at
// most flip::kTapCacheEntries entries per dtype (the CPU taps' policy and bound, bounded_cache.h).
// The caller holds the returned entry until its launches are queued, so that the entry's device
// memory (if any) outlives them however the cache drops it meanwhile. Taps that fit travel by
// value in every launch (kernels.h, KernelTaps): nothing is allocated or copied, so the first call
// may come inside a CUDA graph capture or torch.compile's cudagraph warm-up. Larger radii (float32
// ppd > ~203, float64 ppd > ~97) live in device memory (DeviceTaps), uploaded once per entry with
// a copy the host waits for; that first call must therefore come outside any capture, which is
// checked (tests/gpu/test_launch_check.py holds the first-use path to the calls a capture allows).
template <class T>
std::shared_ptr<const CachedTaps<T>> kernel_taps(double ppd, const Tensor& like, cudaStream_t stream) {
  using Taps = flip::cuda::KernelTaps<T>;
  // Never destroyed: at process exit the CUDA runtime may already be gone.
  static auto* cache = new flip::BoundedCache<std::pair<double, int>, CachedTaps<T>>(flip::kTapCacheEntries);
  const int dev = like.get_device_index();
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  FLIP_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  const bool capturing = capture != cudaStreamCaptureStatusNone;
  auto make = [&] {
    CachedTaps<T> entry;
    const std::vector<T> host =
        flip::cuda::pack_taps(*flip::csf_taps<T>(ppd), *flip::feature_taps<T>(ppd), entry.launch);
    if (host.size() <= static_cast<size_t>(Taps::kInlineCapacity)) return entry;
    if (capturing) {
      std::ostringstream os;
      os << "flip: pixels_per_degree=" << ppd << " needs its " << host.size() * sizeof(T)
         << " bytes of filter taps in device memory, uploaded once per device and "
            "dtype (and again after the taps cache, which keeps 64 ppd values, has dropped them), and this "
            "call for it came during a CUDA graph capture, where the upload cannot happen. Call the op once "
            "with this pixels_per_degree right before capturing (a warm-up).";
      throw std::runtime_error(os.str());
    }
    void* memory = nullptr;
    FLIP_CUDA_CHECK(cudaMalloc(&memory, host.size() * sizeof(T)));
    DeviceTaps owned(memory, dev);
    // Not cudaMemcpy: from pageable memory it returns once the taps are staged, and its transfer
    // to the device runs on the legacy default stream, which a non-blocking stream (every stream
    // of PyTorch's pool) does not wait for, so a kernel there could read the taps half-written.
    // Copied on this call's stream instead, and waited for, so that any stream's later kernels
    // (the entry is shared) find them complete.
    FLIP_CUDA_CHECK(cudaMemcpyAsync(memory, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice, stream));
    FLIP_CUDA_CHECK(cudaStreamSynchronize(stream));
    entry.launch.device = static_cast<const T*>(memory);
    entry.memory = std::move(owned);
    return entry;
  };
  return cache->get({ppd, dev}, make, /*pin=*/capturing, /*may_drop=*/!capturing);
}

// FLIP_LOSS_CUDA_FORCE_ROW_PASSES=1 sends the LDR and HDR forwards and backwards through the row
// passes (H, then V, with planes in global memory) even where the fused forward and the tiled
// backward fit, which on an H100/H200 they do up to ppd ~207 in float32 (~96 in
// float64): a test or sanitizer run (scripts/gpu/gpu_check.sh) reaches that fallback this way. Read
// once, at the first call.
bool force_row_passes() {
  static const bool on = flip::environment::switch_on("FLIP_LOSS_CUDA_FORCE_ROW_PASSES", false);
  return on;
}

// The fused forward when the device offers its shared memory and the row passes are not forced.
template <class T>
bool use_fused_forward(const flip::cuda::KernelTaps<T>& taps) {
  return flip::cuda::use_fused_forward<T>(taps.rmax, shared_memory_per_block(), force_row_passes());
}

// FLIP_LOSS_CUDA_BACKWARD_SCRATCH=<bytes> replaces the tiled backward's scratch budget
// (flip::kBackwardScratchBytes): with a small one, small images already take several bands, which
// tests and sanitizer runs (scripts/gpu/gpu_check.sh) use to reach the band logic on a GPU. Read
// once, at the first backward.
int64_t backward_scratch_budget() {
  static const int64_t bytes = flip::environment::bytes("FLIP_LOSS_CUDA_BACKWARD_SCRATCH", flip::kBackwardScratchBytes);
  return bytes;
}

// FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1 fills the tiled backward's scratch with NaN before each band
// (and, in HDR-FLIP, before each exposure of a band; kernels.cu, launch_tiled_band). kTiledTranspose of a
// band must read only gradient planes kTiledGrad of the same band wrote; a read of anything else (a
// halo row left out, a row left over from the band before) would otherwise take stale but finite
// values, which compute-sanitizer's initcheck cannot tell from written ones. With the switch such a
// read turns the gradient NaN, so the CUDA tests' backward cases catch it (scripts/gpu/gpu_check.sh
// runs them so, with a small FLIP_LOSS_CUDA_BACKWARD_SCRATCH for many bands). One memset per band:
// for debugging only. Read once, at the first backward.
bool debug_nan_scratch() {
  static const bool on = flip::environment::switch_on("FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH", false);
  return on;
}

// The tiled backward (two kernels per band, scratch bounded by plan_backward) when the device offers
// both kernels' shared memory and the row passes are not forced.
template <class T>
bool use_tiled_backward(const flip::cuda::KernelTaps<T>& taps) {
  return flip::cuda::use_tiled_backward<T>(taps.rmax, shared_memory_per_block(), force_row_passes());
}

template <class T>
void check_shared_memory(const flip::cuda::KernelTaps<T>& t, int planes) {
  const size_t need = flip::cuda::row_pass_smem_bytes<T>(t.rmax, planes);
  const size_t have = shared_memory_per_block();
  FLIP_CHECK(need <= have, "flip: pixels_per_degree is too large for this GPU's shared memory (filter radius ", t.rmax,
             " needs ", need, " bytes per block, the device has ", have, ")");
}

Tensor planes_for(const Geometry& g, const Tensor& like, int per_image) {
  return empty_as(like, {g.n * g.images * per_image * g.hw()});
}

// The launchers' parameters every op sets; each op adds its buffers.
template <class T>
flip::cuda::Params<T> params(const Geometry& g, const flip::cuda::KernelTaps<T>& taps, double eps) {
  flip::cuda::Params<T> p;
  p.g = g;
  p.taps = taps;
  p.eps = static_cast<T>(eps);
  p.k = flip::color_consts<T>();
  return p;
}

template <class T>
T* ptr(const Tensor& t) {
  return data<T>(t);
}

// Sets up the tiled backward in p: its bands for the gradients p asks for and their scratch
// (kept alive by the returned tensor until the launches are queued; the caching allocator then
// reuses it only after them on this stream).
template <class T>
Tensor tiled_backward_scratch(flip::cuda::Params<T>& p, const Tensor& like) {
  const int wanted = (p.g_test != nullptr ? 1 : 0) | (p.g_ref != nullptr ? 2 : 0);
  p.plan = flip::plan_backward(p.g, wanted, p.taps.rmax, sizeof(T), backward_scratch_budget());
  auto scratch = empty_as(like, {p.plan.scratch_elems(p.g)});
  p.scratch = ptr<T>(scratch);
  p.nan_scratch = debug_nan_scratch();
  return scratch;
}

// Runs an LDR- or HDR-FLIP sequence whose Params are filled: `tiled` (the fused forward or the
// tiled kernels) where `fits`, else `rows`, the row passes with full planes (and, for a backward,
// full gradient planes, kept alive until the launches are queued).
template <class T, class Tiled, class Rows>
void tiled_or_rows(flip::cuda::Params<T>& p, const Geometry& g, const Tensor& like, cudaStream_t stream, bool fits,
                   bool backward, Tiled tiled, Rows rows) {
  if (fits) {
    tiled(p, stream);
    return;
  }
  check_shared_memory(p.taps, g.planes());
  auto planes = planes_for(g, like, g.planes());
  p.planes = ptr<T>(planes);
  auto gplanes = planes_for(g, like, backward ? g.gplanes() : 0);
  if (backward) p.gplanes = ptr<T>(gplanes);
  rows(p, stream);
}

// A composite backward (LDR- or HDR-FLIP): the tiled one when the taps fit its shared memory
// (scratch of at most 32 MiB), else the row passes.
template <class T, class Tiled, class Rows>
void run_composite_backward(flip::cuda::Params<T>& p, const Geometry& g, const Tensor& like, cudaStream_t stream,
                            Tiled tiled, Rows rows) {
  auto with_scratch = [&](flip::cuda::Params<T>& q, cudaStream_t s) {
    auto scratch = tiled_backward_scratch(q, like);  // kept alive until the launches are queued
    tiled(q, s);
  };
  tiled_or_rows(p, g, like, stream, use_tiled_backward(p.taps), true, with_scratch, rows);
}

// LDR-FLIP's parameters for the images t and r (compute dtype, contiguous).
template <class T>
flip::cuda::Params<T> ldr_params(const Geometry& g, const Tensor& t, const Tensor& r, const CachedTaps<T>& taps,
                                 double eps, bool srgb) {
  auto p = params<T>(g, taps.launch, eps);
  p.srgb = srgb;
  p.test = ptr<T>(t);
  p.ref = ptr<T>(r);
  return p;
}

Tensor ldr_flip(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps) {
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps, kCodesTaken);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = ldr_values(test), r = ldr_values(ref);
  auto out = empty_as(t, map_shape(t));
  const Geometry g = geometry(t, 2, true, true);
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = ldr_params<T>(g, t, r, *taps, eps, srgb);
    p.out = ptr<T>(out);
    // The fused forward: one kernel, no planes in global memory.
    tiled_or_rows(p, g, t, stream, use_fused_forward(p.taps), false, flip::cuda::ldr_flip_forward_fused<T>,
                  flip::cuda::ldr_flip_forward<T>);
  });
  return to_dtype(out, map_dtype(test.scalar_type()));
}

Pair ldr_flip_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, std::string space,
                       double eps, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_args(test, ref, ppd, space, eps);
  check_grad(grad, test, 1);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto gr = contiguous_as(grad, t.scalar_type());
  auto gb = grad_buffers(t, mask);
  const Geometry g = geometry(t, 2, true, true);
  const cudaStream_t stream = current_stream(t);
  if (!mask[0] && !mask[1]) return cast_back(gb, test, ref);  // nothing asked, nothing launched
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = ldr_params<T>(g, t, r, *taps, eps, srgb);
    p.grad = ptr<T>(gr);
    p.g_test = ptr_or_null<T>(gb[0]);
    p.g_ref = ptr_or_null<T>(gb[1]);
    run_composite_backward(p, g, t, stream, flip::cuda::ldr_flip_backward_tiled<T>, flip::cuda::ldr_flip_backward<T>);
  });
  return cast_back(gb, test, ref);
}

// LDR-FLIP's forward that keeps the sensitivities (the CUDA autograd's forward when they fit its
// budget, flip::kCudaKeptSensitivitiesBytes): the map and, for a unit gradient, the sensitivities
// of the images in mask, laid out as the CPU's (N x 7k x H x W). Tiled: kTiledGrad of the tiled
// backward over the whole batch; else the row passes with a tail that keeps them.
Pair ldr_flip_with_sensitivities(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps,
                                 MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_sensitivity_args(test, ref, ppd, space, eps, mask);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = empty_as(t, map_shape(t));
  auto sens = empty_as(t, sensitivities_shape(t, mask));
  const Geometry g = geometry(t, 2, true, true);
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = ldr_params<T>(g, t, r, *taps, eps, srgb);
    p.out = ptr<T>(out);
    p.sensitivities = ptr<T>(sens);
    p.plan = flip::whole_batch_plan(g, (mask[0] ? 1 : 0) | (mask[1] ? 2 : 0), p.taps.rmax);
    tiled_or_rows(p, g, t, stream, use_tiled_backward(p.taps), false, flip::cuda::ldr_flip_forward_keep_tiled<T>,
                  flip::cuda::ldr_flip_forward_keep<T>);
  });
  return {to_dtype(out, test.scalar_type()), sens};
}

// The backward from those sensitivities (of the images in mask): one launch when tiled, else the
// kept sensitivities times the gradient into gradient planes and the transposed row passes.
Pair ldr_flip_backward_from_sensitivities(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                                          const Tensor& ref, double ppd, std::string space, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const bool srgb = check_ldr_backward_from_sensitivities_args(grad, sensitivities, test, ref, ppd, space, mask);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto gr = contiguous_as(grad, t.scalar_type());
  auto sens = torch::stable::contiguous(sensitivities);
  auto gb = grad_buffers(t, mask);
  const Geometry g = geometry(t, 2, true, true);
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);   // held until the launches are queued
    auto p = ldr_params<T>(g, t, r, *taps, 0.0, srgb);  // eps 0: this op has no eps argument
    p.grad = ptr<T>(gr);
    p.g_test = ptr_or_null<T>(gb[0]);
    p.g_ref = ptr_or_null<T>(gb[1]);
    p.sensitivities = ptr<T>(sens);
    p.plan = flip::whole_batch_plan(g, (mask[0] ? 1 : 0) | (mask[1] ? 2 : 0), p.taps.rmax);
    tiled_or_rows(p, g, t, stream, use_tiled_backward(p.taps), true, flip::cuda::ldr_flip_backward_kept_tiled<T>,
                  flip::cuda::ldr_flip_backward_kept<T>);
  });
  return cast_back(gb, test, ref);
}

// Counts stay on the device, unchecked: reading them back to check them would synchronise the host
// with the stream on every call. The kernels read them clamped into [kMinExposures, E]
// (hdr_pixel.h, HdrStep::count); the Python API passes counts it has checked and the CPU kernels
// raise for counts outside that range. Exposure values are not checked here for the same reason (a
// non-finite one gives NaN in the map, as NaN inputs do).
Tensor device_counts(const Tensor& counts) { return contiguous_as(counts, ScalarType::Long); }

Triple hdr_flip(const Tensor& test, const Tensor& ref, const Tensor& exposures, const Tensor& counts, double ppd,
                std::string tone_mapper, double eps) {
  const auto tm = check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto ex = contiguous_as(exposures, t.scalar_type());
  auto cn = device_counts(counts);
  auto out = torch::stable::fill_(empty_as(t, map_shape(t)), 0.0);
  auto emap = torch::stable::fill_(empty_as(t, map_shape(t)), 0.0);
  auto idx = torch::stable::fill_(empty_as(t, map_shape(t), ScalarType::Int), -1.0);
  const Geometry g = geometry(t, 2, true, true);
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = params<T>(g, taps->launch, eps);
    p.test = ptr<T>(t);
    p.ref = ptr<T>(r);
    p.exposures = ptr<T>(ex);
    p.counts = data<int64_t>(cn);
    p.E = ex.size(1);
    p.tm = tm;
    p.out = ptr<T>(out);
    p.emap = ptr<T>(emap);
    p.index = data<int32_t>(idx);
    tiled_or_rows(p, g, t, stream, use_fused_forward(p.taps), false, flip::cuda::hdr_flip_forward_fused<T>,
                  flip::cuda::hdr_flip_forward<T>);
  });
  return {to_dtype(out, test.scalar_type()), to_dtype(emap, test.scalar_type()), idx};
}

Pair hdr_flip_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, const Tensor& exposures,
                       const Tensor& counts, const Tensor& index, double ppd, std::string tone_mapper, double eps,
                       MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  const auto tm = check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  check_grad(grad, test, 1);
  check_exposure_index(index, grad);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto gr = contiguous_as(grad, t.scalar_type());
  auto ex = contiguous_as(exposures, t.scalar_type());
  auto cn = device_counts(counts);
  auto ix = torch::stable::contiguous(index);
  std::array<Tensor, 2> gb = {mask[0] ? torch::stable::fill_(torch::stable::empty_like(t), 0.0) : nothing_like(t),
                              mask[1] ? torch::stable::fill_(torch::stable::empty_like(t), 0.0) : nothing_like(t)};
  const Geometry g = geometry(t, 2, true, true);
  const cudaStream_t stream = current_stream(t);
  if (!mask[0] && !mask[1]) return cast_back(gb, test, ref);  // nothing asked, nothing launched
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = params<T>(g, taps->launch, eps);
    p.grad = ptr<T>(gr);
    p.test = ptr<T>(t);
    p.ref = ptr<T>(r);
    p.exposures = ptr<T>(ex);
    p.counts = data<int64_t>(cn);
    p.E = ex.size(1);
    p.tm = tm;
    p.index = data<int32_t>(ix);
    p.g_test = ptr_or_null<T>(gb[0]);
    p.g_ref = ptr_or_null<T>(gb[1]);
    // The tiled formulation uses the same scratch whatever the number of exposures.
    run_composite_backward(p, g, t, stream, flip::cuda::hdr_flip_backward_tiled<T>, flip::cuda::hdr_flip_backward<T>);
  });
  return cast_back(gb, test, ref);
}

Tensor csf_filter(const Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  torch::stable::accelerator::DeviceGuard guard(opp.get_device_index());
  auto o = compute_copy(opp);
  auto out = torch::stable::empty_like(o);
  const Geometry g = geometry(o, 1, true, false);
  auto planes = planes_for(g, o, g.planes());
  const cudaStream_t stream = current_stream(o);
  dispatch_compute_dtype(o.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, o, stream);  // held until the launches are queued
    auto p = params<T>(g, taps->launch, 0.0);
    check_shared_memory(p.taps, g.planes());
    p.test = ptr<T>(o);
    p.out = ptr<T>(out);
    p.planes = ptr<T>(planes);
    flip::cuda::csf_filter_forward<T>(p, stream);
  });
  return to_dtype(out, opp.scalar_type());
}

Tensor csf_filter_backward(const Tensor& grad, const Tensor& opp, double ppd) {
  check_csf_args(opp, ppd);
  check_grad(grad, opp, 3);
  torch::stable::accelerator::DeviceGuard guard(opp.get_device_index());
  auto o = compute_copy(opp);
  auto gr = contiguous_as(grad, o.scalar_type());
  auto out = torch::stable::empty_like(o);
  const Geometry g = geometry(o, 1, true, false);
  auto planes = planes_for(g, o, g.planes());
  auto gplanes = planes_for(g, o, g.gplanes());
  const cudaStream_t stream = current_stream(o);
  dispatch_compute_dtype(o.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, o, stream);  // held until the launches are queued
    auto p = params<T>(g, taps->launch, 0.0);
    check_shared_memory(p.taps, g.planes());
    p.grad = ptr<T>(gr);
    p.test = ptr<T>(o);
    p.g_test = ptr<T>(out);
    p.planes = ptr<T>(planes);
    p.gplanes = ptr<T>(gplanes);
    flip::cuda::csf_filter_backward<T>(p, stream);
  });
  return to_dtype(out, opp.scalar_type());
}

Tensor hunt_hyab(const Tensor& test, const Tensor& ref, double eps) {
  check_hunt_hyab_args(test, ref, eps);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = empty_as(t, map_shape(t));
  const Geometry g = geometry(t, 2, false, false);
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    auto p = params<T>(g, flip::cuda::KernelTaps<T>{}, eps);
    p.test = ptr<T>(t);
    p.ref = ptr<T>(r);
    p.out = ptr<T>(out);
    flip::cuda::hunt_hyab_forward<T>(p, stream);
  });
  return to_dtype(out, test.scalar_type());
}

Pair hunt_hyab_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double eps, MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  check_hunt_hyab_args(test, ref, eps);
  check_grad(grad, test, 1);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto gr = contiguous_as(grad, t.scalar_type());
  auto gb = grad_buffers(t, mask);
  const Geometry g = geometry(t, 2, false, false);
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    auto p = params<T>(g, flip::cuda::KernelTaps<T>{}, eps);
    p.grad = ptr<T>(gr);
    p.test = ptr<T>(t);
    p.ref = ptr<T>(r);
    p.g_test = ptr_or_null<T>(gb[0]);
    p.g_ref = ptr_or_null<T>(gb[1]);
    flip::cuda::hunt_hyab_backward<T>(p, stream);
  });
  return cast_back(gb, test, ref);
}

Tensor feature_difference(const Tensor& test, const Tensor& ref, double ppd, double eps) {
  check_feature_args(test, ref, ppd, eps);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto out = torch::stable::empty_like(t);
  const Geometry g = geometry(t, 2, false, true);
  auto planes = planes_for(g, t, g.planes());
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = params<T>(g, taps->launch, eps);
    check_shared_memory(p.taps, g.planes());
    p.test = ptr<T>(t);
    p.ref = ptr<T>(r);
    p.out = ptr<T>(out);
    p.planes = ptr<T>(planes);
    flip::cuda::feature_difference_forward<T>(p, stream);
  });
  return to_dtype(out, test.scalar_type());
}

Pair feature_difference_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, double eps,
                                 MaskArg mask_arg) {
  const Mask mask = mask_of(mask_arg);
  check_feature_args(test, ref, ppd, eps);
  check_grad(grad, test, 1);
  torch::stable::accelerator::DeviceGuard guard(test.get_device_index());
  auto t = compute_copy(test), r = compute_copy(ref);
  auto gr = contiguous_as(grad, t.scalar_type());
  auto gb = grad_buffers(t, mask);
  const Geometry g = geometry(t, 2, false, true);
  auto planes = planes_for(g, t, g.planes());
  auto gplanes = planes_for(g, t, g.gplanes());
  const cudaStream_t stream = current_stream(t);
  dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const auto taps = kernel_taps<T>(ppd, t, stream);  // held until the launches are queued
    auto p = params<T>(g, taps->launch, eps);
    check_shared_memory(p.taps, g.planes());
    p.grad = ptr<T>(gr);
    p.test = ptr<T>(t);
    p.ref = ptr<T>(r);
    p.g_test = ptr_or_null<T>(gb[0]);
    p.g_ref = ptr_or_null<T>(gb[1]);
    p.planes = ptr<T>(planes);
    p.gplanes = ptr<T>(gplanes);
    flip::cuda::feature_difference_backward<T>(p, stream);
  });
  return cast_back(gb, test, ref);
}

}  // namespace

STABLE_TORCH_LIBRARY_IMPL(flip, CUDA, m) {
  m.impl("ldr_flip", TORCH_BOX(&ldr_flip));
  m.impl("ldr_flip_backward", TORCH_BOX(&ldr_flip_backward));
  m.impl("_ldr_flip_with_sensitivities", TORCH_BOX(&ldr_flip_with_sensitivities));
  m.impl("_ldr_flip_backward_from_sensitivities", TORCH_BOX(&ldr_flip_backward_from_sensitivities));
  m.impl("hdr_flip", TORCH_BOX(&hdr_flip));
  m.impl("hdr_flip_backward", TORCH_BOX(&hdr_flip_backward));
  m.impl("csf_filter", TORCH_BOX(&csf_filter));
  m.impl("csf_filter_backward", TORCH_BOX(&csf_filter_backward));
  m.impl("hunt_hyab", TORCH_BOX(&hunt_hyab));
  m.impl("hunt_hyab_backward", TORCH_BOX(&hunt_hyab_backward));
  m.impl("feature_difference", TORCH_BOX(&feature_difference));
  m.impl("feature_difference_backward", TORCH_BOX(&feature_difference_backward));
}

}  // namespace flip_ops
