// Reference kernels for benchmarks/blur_model_check.py: a 1920x1080 float32 separable Gaussian-like
// blur of radius 10 (21 taps from constant memory), two ways, to check sass_report's pipe model
// against what first principles say of kernels whose limits are known. No FLIP code; compiled for
// sm_90 SASS only, never run by the package.
//
// * blur_h_smem / blur_v_smem: the textbook form, one output per thread from a shared-memory tile
//   with its halo: 21 shared loads per output against 8 bytes of global memory traffic, more
//   shared-memory wavefronts than the HBM's bytes allow for (the shared path should limit).
// * blur_v_regs: the vertical pass with a sliding window in registers: each thread walks down a
//   64-row strip of one column, every input read once from global memory, no shared memory (it
//   should be memory-bound: its bytes at the HBM's bandwidth).
//
// All loops have compile-time trip counts and are unrolled: the kernels are straight-line code,
// which the model costs without a trip-count table.
constexpr int kW = 1920, kH = 1080, kR = 10, kTaps = 2 * kR + 1;
constexpr int kRowBlock = 256;          // blur_h_smem: outputs per block, along a row
constexpr int kTileX = 32, kTileY = 8;  // blur_v_smem: a 32 x 8 tile of outputs
constexpr int kStrip = 64;              // blur_v_regs: rows per thread
__constant__ float c_w[kTaps];

__device__ __forceinline__ int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

extern "C" __global__ void __launch_bounds__(kRowBlock)
    blur_h_smem(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float s[kRowBlock + 2 * kR];
  const int y = blockIdx.y, x0 = blockIdx.x * kRowBlock, t = threadIdx.x;
  const float* row = in + y * kW;
  s[t + kR] = row[clampi(x0 + t, 0, kW - 1)];
  if (t < 2 * kR) {
    const int xh = t < kR ? x0 - kR + t : x0 + kRowBlock + t - kR;
    s[t < kR ? t : kRowBlock + t] = row[clampi(xh, 0, kW - 1)];
  }
  __syncthreads();
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < kTaps; ++k) acc = fmaf(c_w[k], s[t + k], acc);
  if (x0 + t < kW) out[y * kW + x0 + t] = acc;
}

extern "C" __global__ void __launch_bounds__(kTileX* kTileY)
    blur_v_smem(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float s[kTileY + 2 * kR][kTileX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int x = blockIdx.x * kTileX + tx, y0 = blockIdx.y * kTileY;
#pragma unroll
  for (int j = 0; j < (kTileY + 2 * kR + kTileY - 1) / kTileY; ++j) {
    const int r = ty + j * kTileY;
    if (r < kTileY + 2 * kR) s[r][tx] = in[clampi(y0 - kR + r, 0, kH - 1) * kW + x];
  }
  __syncthreads();
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < kTaps; ++k) acc = fmaf(c_w[k], s[ty + k][tx], acc);
  if (y0 + ty < kH) out[(y0 + ty) * kW + x] = acc;
}

extern "C" __global__ void __launch_bounds__(128) blur_v_regs(const float* __restrict__ in, float* __restrict__ out) {
  const int x = blockIdx.x * 128 + threadIdx.x, y0 = blockIdx.y * kStrip;
  float win[kStrip + 2 * kR];
#pragma unroll
  for (int r = 0; r < kStrip + 2 * kR; ++r) win[r] = in[clampi(y0 - kR + r, 0, kH - 1) * kW + x];
#pragma unroll
  for (int r = 0; r < kStrip; ++r) {
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < kTaps; ++k) acc = fmaf(c_w[k], win[r + k], acc);
    if (y0 + r < kH) out[(y0 + r) * kW + x] = acc;
  }
}
