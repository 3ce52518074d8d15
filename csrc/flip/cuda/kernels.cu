// CUDA kernels of the FLIP ops: __global__ wrappers that run the block code of kernel_bodies.h with
// a block context of the hardware's indices and barriers, and a launcher that puts the launch
// sequences of op_launches.h (shared with the test-only host emulator, tests/emulator) on the
// caller's stream, each launch checked (launch_check.h). Nothing synchronises with the host.
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>

#include "kernel_bodies.h"
#include "kernels.h"
#include "launch_check.h"
#include "op_launches.h"

namespace flip {
namespace cuda {
namespace {

inline void check_cuda(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // these errors are not sticky: clear them so the next launch check is not misled
  throw std::runtime_error(std::string("flip: ") + what + " failed: " + cudaGetErrorString(err));
}

// Lets `kernel` launch with `bytes` of dynamic shared memory. Above the 48 KB default a kernel needs
// an opt-in, which is per (kernel, device) and process-wide: it is raised once to the device's
// opt-in maximum (never to the size of one launch, which another host thread launching with a
// different pixels_per_degree could lower between this thread's set and its launch). The caller
// checked `bytes` against that maximum.
inline void allow_shared_memory(const void* kernel, size_t bytes) {
  if (bytes <= 48 * 1024) return;
  int device = 0;
  check_cuda(cudaGetDevice(&device), "cudaGetDevice");
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> raised;
  std::lock_guard<std::mutex> lock(mu);
  if (raised.count({kernel, device}) != 0) return;
  int optin = 0;
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device),
             "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
             "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
  raised.insert({kernel, device});
}

// The block context of kernel_bodies.h on the GPU.
struct DeviceBlock {
  __device__ int tid() const { return threadIdx.x; }
  __device__ int threads() const { return blockDim.x; }
  __device__ int64_t block_x() const { return blockIdx.x; }
  __device__ int64_t block_y() const { return blockIdx.y; }
  __device__ int64_t block_z() const { return blockIdx.z; }
  __device__ int64_t grid_x() const { return gridDim.x; }
  __device__ int64_t grid_y() const { return gridDim.y; }
  __device__ int64_t grid_z() const { return gridDim.z; }
  __device__ void sync() const { __syncthreads(); }
  __device__ bool sync_or(bool pred) const { return __syncthreads_or(pred) != 0; }
  template <class T>
  __device__ T* shared() const {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    return reinterpret_cast<T*>(smem_raw);
  }
};

// One wrapper per kernel, so that each has its own name (the SASS report,
// benchmarks/sass_report.py, and profilers go by it) and launch bounds. Rad: the radii a tiled
// kernel is compiled for (launch_params.h); the others are instantiated with AnyRadius only.
#define FLIP_KERNEL(name, K, bounds)                                                                      \
  template <class T, class Rad>                                                                           \
  __global__ void bounds name(FLIP_GRID_CONSTANT const Params<T> p, FLIP_GRID_CONSTANT const Step<T> s) { \
    DeviceBlock b;                                                                                        \
    run_block<Kernel::K, Rad>(b, p, s);                                                                   \
  }
// Kernel 2's shared memory leaves room for three blocks per SM in float32 at the default radii,
// which its 256 threads get at 80 registers or fewer. The build for fixed radii fits that when
// asked to, spilling only a few of its block's loop-invariant values (48 bytes, reloaded once a
// tile, not in the filter loops); the float32 run-time-radius build would spill there, so it is held to two
// (128 registers; left alone, the compiler takes more and gets one). In float64 shared memory
// allows one block at these radii: no bound to buy.
template <class T, class Rad>
constexpr int kTransposeMinBlocks = std::is_same<T, float>::value ? 2 : 1;
template <class T, int Rc, int Rf>
constexpr int kTransposeMinBlocks<T, FixedRadii<Rc, Rf>> = 3;

#define FLIP_BOUNDS(threads) __launch_bounds__(threads)
#define FLIP_TRANSPOSE_BOUNDS __launch_bounds__(kFusedThreads, kTransposeMinBlocks<T, Rad>)
#define FLIP_NO_BOUNDS
FLIP_KERNEL(horizontal_pass_kernel, kHorizontalPass, FLIP_BOUNDS(kBlock))
FLIP_KERNEL(horizontal_transpose_kernel, kHorizontalTranspose, FLIP_BOUNDS(kBlock))
FLIP_KERNEL(vertical_transpose_kernel, kVerticalTranspose, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_ldr_kernel, kVerticalLdr, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_ldr_vjp_kernel, kVerticalLdrVjp, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_csf_kernel, kVerticalCsf, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_csf_vjp_kernel, kVerticalCsfVjp, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_feature_kernel, kVerticalFeature, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_feature_vjp_kernel, kVerticalFeatureVjp, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_hdr_kernel, kVerticalHdr, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_hdr_vjp_kernel, kVerticalHdrVjp, FLIP_NO_BOUNDS)
FLIP_KERNEL(vertical_ldr_keep_kernel, kVerticalLdrKeep, FLIP_NO_BOUNDS)
FLIP_KERNEL(ldr_kept_grad_kernel, kLdrKeptGrad, FLIP_NO_BOUNDS)
FLIP_KERNEL(hunt_hyab_kernel, kHuntHyab, FLIP_NO_BOUNDS)
FLIP_KERNEL(hunt_hyab_vjp_kernel, kHuntHyabVjp, FLIP_NO_BOUNDS)
FLIP_KERNEL(fused_forward_kernel, kFused, FLIP_BOUNDS(kFusedThreads))
FLIP_KERNEL(tiled_grad_kernel, kTiledGrad, FLIP_BOUNDS(kFusedThreads))
FLIP_KERNEL(tiled_transpose_kernel, kTiledTranspose, FLIP_TRANSPOSE_BOUNDS)
#undef FLIP_KERNEL
#undef FLIP_BOUNDS
#undef FLIP_TRANSPOSE_BOUNDS
#undef FLIP_NO_BOUNDS

template <Kernel K, class Rad, class T>
auto kernel_function() {
  if constexpr (K == Kernel::kHorizontalPass)
    return &horizontal_pass_kernel<T, Rad>;
  else if constexpr (K == Kernel::kHorizontalTranspose)
    return &horizontal_transpose_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalTranspose)
    return &vertical_transpose_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalLdr)
    return &vertical_ldr_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalLdrVjp)
    return &vertical_ldr_vjp_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalCsf)
    return &vertical_csf_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalCsfVjp)
    return &vertical_csf_vjp_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalFeature)
    return &vertical_feature_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalFeatureVjp)
    return &vertical_feature_vjp_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalHdr)
    return &vertical_hdr_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalHdrVjp)
    return &vertical_hdr_vjp_kernel<T, Rad>;
  else if constexpr (K == Kernel::kVerticalLdrKeep)
    return &vertical_ldr_keep_kernel<T, Rad>;
  else if constexpr (K == Kernel::kLdrKeptGrad)
    return &ldr_kept_grad_kernel<T, Rad>;
  else if constexpr (K == Kernel::kHuntHyab)
    return &hunt_hyab_kernel<T, Rad>;
  else if constexpr (K == Kernel::kHuntHyabVjp)
    return &hunt_hyab_vjp_kernel<T, Rad>;
  else if constexpr (K == Kernel::kFused)
    return &fused_forward_kernel<T, Rad>;
  else if constexpr (K == Kernel::kTiledGrad)
    return &tiled_grad_kernel<T, Rad>;
  else
    return &tiled_transpose_kernel<T, Rad>;
}

// The launcher of op_launches.h on a stream.
struct StreamLauncher {
  cudaStream_t stream;
  GridLimits limits() const { return GridLimits{}; }
  template <Kernel K, class Rad, class T>
  void launch(Dim3 grid, int threads, size_t smem, const Params<T>& p, const Step<T>& s) {
    const auto kernel = kernel_function<K, Rad, T>();
    allow_shared_memory(reinterpret_cast<const void*>(kernel), smem);
    kernel<<<dim3(grid.x, grid.y, grid.z), threads, smem, stream>>>(p, s);
  }
  template <class T>
  void fill_nan(T* data, size_t n) {
    check_cuda(cudaMemsetAsync(data, 0xFF, n * sizeof(T), stream),
               "cudaMemsetAsync (FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH)");
  }
  // For a failed launch's message (launch_check.h): whether it came during a capture.
  std::string failure_note() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
      cudaGetLastError();  // the launch's error is the one to report
      return "";
    }
    return status == cudaStreamCaptureStatusNone ? "" : kCaptureNote;
  }
};

// launch_check.h's error interface on the CUDA runtime.
struct CudaErrors {
  using Error = cudaError_t;
  static Error take() { return cudaGetLastError(); }
  static bool ok(Error e) { return e == cudaSuccess; }
  static const char* name(Error e) { return cudaGetErrorName(e); }
  static const char* text(Error e) { return cudaGetErrorString(e); }
};

}  // namespace

#define FLIP_ENTRY(name)                                                                            \
  template <class T>                                                                                \
  void name(const Params<T>& p, cudaStream_t stream) {                                              \
    run_checked<CudaErrors>(StreamLauncher{stream}, #name, [&](auto& l) { launches::name(l, p); }); \
  }
FLIP_ENTRY(ldr_flip_forward_fused)
FLIP_ENTRY(ldr_flip_forward)
FLIP_ENTRY(ldr_flip_backward)
FLIP_ENTRY(ldr_flip_backward_tiled)
FLIP_ENTRY(ldr_flip_forward_keep)
FLIP_ENTRY(ldr_flip_forward_keep_tiled)
FLIP_ENTRY(ldr_flip_backward_kept)
FLIP_ENTRY(ldr_flip_backward_kept_tiled)
FLIP_ENTRY(hdr_flip_forward_fused)
FLIP_ENTRY(hdr_flip_forward)
FLIP_ENTRY(hdr_flip_backward)
FLIP_ENTRY(hdr_flip_backward_tiled)
FLIP_ENTRY(csf_filter_forward)
FLIP_ENTRY(csf_filter_backward)
FLIP_ENTRY(feature_difference_forward)
FLIP_ENTRY(feature_difference_backward)
FLIP_ENTRY(hunt_hyab_forward)
FLIP_ENTRY(hunt_hyab_backward)
#undef FLIP_ENTRY

// Variadic: __CUDA_ARCH_LIST__ is a comma-separated list ("750,800,860") once a build has two
// targets, several macro arguments.
#define FLIP_TEXT(...) #__VA_ARGS__
#define FLIP_EXPANDED_TEXT(...) FLIP_TEXT(__VA_ARGS__)
const char* compiled_architectures() {
#ifdef __CUDA_ARCH_LIST__
  return FLIP_EXPANDED_TEXT(__CUDA_ARCH_LIST__);
#else
  return "";
#endif
}
#undef FLIP_EXPANDED_TEXT
#undef FLIP_TEXT

cudaError_t kernel_image(int device, int* binary_version, int* ptx_version) {
  *binary_version = *ptx_version = 0;
  int current = 0;
  cudaError_t err = cudaGetDevice(&current);
  const bool switched = err == cudaSuccess && current != device;
  if (switched) err = cudaSetDevice(device);
  if (err == cudaSuccess) {
    // Every kernel is compiled for the same targets: one stands for them all.
    cudaFuncAttributes attributes{};
    err = cudaFuncGetAttributes(
        &attributes, reinterpret_cast<const void*>(kernel_function<Kernel::kHorizontalPass, AnyRadius, float>()));
    if (err == cudaSuccess) {
      *binary_version = attributes.binaryVersion;
      *ptx_version = attributes.ptxVersion;
    }
  }
  if (switched) cudaSetDevice(current);
  if (err != cudaSuccess) cudaGetLastError();  // not sticky: the next launch check must not see it
  return err;
}

#define FLIP_INSTANTIATE(T)                                                      \
  template void ldr_flip_forward_fused<T>(const Params<T>&, cudaStream_t);       \
  template void ldr_flip_forward<T>(const Params<T>&, cudaStream_t);             \
  template void ldr_flip_backward<T>(const Params<T>&, cudaStream_t);            \
  template void ldr_flip_backward_tiled<T>(const Params<T>&, cudaStream_t);      \
  template void ldr_flip_forward_keep<T>(const Params<T>&, cudaStream_t);        \
  template void ldr_flip_forward_keep_tiled<T>(const Params<T>&, cudaStream_t);  \
  template void ldr_flip_backward_kept<T>(const Params<T>&, cudaStream_t);       \
  template void ldr_flip_backward_kept_tiled<T>(const Params<T>&, cudaStream_t); \
  template void hdr_flip_forward_fused<T>(const Params<T>&, cudaStream_t);       \
  template void hdr_flip_forward<T>(const Params<T>&, cudaStream_t);             \
  template void hdr_flip_backward<T>(const Params<T>&, cudaStream_t);            \
  template void hdr_flip_backward_tiled<T>(const Params<T>&, cudaStream_t);      \
  template void csf_filter_forward<T>(const Params<T>&, cudaStream_t);           \
  template void csf_filter_backward<T>(const Params<T>&, cudaStream_t);          \
  template void feature_difference_forward<T>(const Params<T>&, cudaStream_t);   \
  template void feature_difference_backward<T>(const Params<T>&, cudaStream_t);  \
  template void hunt_hyab_forward<T>(const Params<T>&, cudaStream_t);            \
  template void hunt_hyab_backward<T>(const Params<T>&, cudaStream_t);
FLIP_INSTANTIATE(float)
FLIP_INSTANTIATE(double)
#undef FLIP_INSTANTIATE

}  // namespace cuda
}  // namespace flip
