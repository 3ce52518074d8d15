// Row primitives of the separable filters with clamp-to-edge borders, and their transposes.
// Inner loops run over contiguous x so that the compiler vectorises them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../filters.h"

namespace flip {
namespace cpu {

// dst[x] = sum_k w[k] * src[clamp(x + k)], with src already padded by r samples on each side.
template <class T>
inline void hconv_padded(const T* __restrict pad, int64_t W, const Filter1D<T>& f, T* __restrict dst) {
  const int n = 2 * f.radius + 1;
  const T* w = f.w.data();
  const T w0 = w[0];
  for (int64_t x = 0; x < W; ++x) dst[x] = w0 * pad[x];
  for (int k = 1; k < n; ++k) {
    const T wk = w[k];
    const T* __restrict p = pad + k;
    for (int64_t x = 0; x < W; ++x) dst[x] += wk * p[x];
  }
}

// Copies a row into pad with r replicated samples on each side.
template <class T>
inline void pad_edge(const T* src, int64_t W, int r, T* pad) {
  std::copy(src, src + W, pad + r);
  std::fill(pad, pad + r, src[0]);
  std::fill(pad + r + W, pad + 2 * r + W, src[W - 1]);
}

template <class T>
inline void hconv(const T* src, int64_t W, const Filter1D<T>& f, T* pad, T* dst) {
  pad_edge(src, W, f.radius, pad);
  hconv_padded(pad, W, f, dst);
}

// dst[x] (+)= sum_k w[k] * plane[clamp(row + k)][x].
template <class T>
inline void vconv(const T* plane, int64_t H, int64_t W, int64_t row, const Filter1D<T>& f,
                  T* __restrict dst, bool accumulate = false) {
  const int r = f.radius;
  if (!accumulate) std::fill(dst, dst + W, T(0));
  for (int k = -r; k <= r; ++k) {
    const int64_t src_row = std::min<int64_t>(std::max<int64_t>(row + k, 0), H - 1);
    const T wk = f.w[k + r];
    const T* __restrict s = plane + src_row * W;
    for (int64_t x = 0; x < W; ++x) dst[x] += wk * s[x];
  }
}

template <class T>
inline void axpy(T a, const T* __restrict x, T* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// dst += F^T g for the horizontal clamp-to-edge correlation F; zpad holds W + 2r scratch samples.
template <class T>
inline void hconv_t_acc(const T* g, int64_t W, const Filter1D<T>& f, T* zpad, T* __restrict dst) {
  const int r = f.radius, n = 2 * r + 1;
  std::fill(zpad, zpad + r, T(0));
  std::copy(g, g + W, zpad + r);
  std::fill(zpad + r + W, zpad + 2 * r + W, T(0));
  // In-range part: dst[j] += sum_k w[k] g[j - k], i.e. a correlation with the reversed taps.
  for (int m = 0; m < n; ++m) {
    const T wk = f.w[n - 1 - m];
    const T* __restrict p = zpad + m;
    for (int64_t x = 0; x < W; ++x) dst[x] += wk * p[x];
  }
  // Samples that the forward clamped onto the first / last pixel.
  const int64_t m = std::min<int64_t>(r, W);
  T s0 = 0, s1 = 0;
  for (int64_t i = 0; i < m; ++i) {
    s0 += f.left[i] * g[i];
    s1 += f.right[i] * g[W - 1 - i];
  }
  dst[0] += s0;
  dst[W - 1] += s1;
}

// dst (row `row`) += F^T g for the vertical clamp-to-edge correlation F over the plane g.
template <class T>
inline void vconv_t_acc(const T* g, int64_t H, int64_t W, int64_t row, const Filter1D<T>& f,
                        T* __restrict dst) {
  const int r = f.radius;
  for (int k = -r; k <= r; ++k) {
    const int64_t i = row - k;
    if (i >= 0 && i < H) axpy(f.w[k + r], g + i * W, dst, W);
  }
  const int64_t m = std::min<int64_t>(r, H);
  if (row == 0)
    for (int64_t i = 0; i < m; ++i) axpy(f.left[i], g + i * W, dst, W);
  if (row == H - 1)
    for (int64_t d = 0; d < m; ++d) axpy(f.right[d], g + (H - 1 - d) * W, dst, W);
}

}  // namespace cpu
}  // namespace flip
