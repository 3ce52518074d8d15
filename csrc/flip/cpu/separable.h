// Row primitives of the separable filters with clamp-to-edge borders, and their transposes.
// Inner loops run over contiguous x so that the compiler vectorises them.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../filters.h"

namespace flip {
namespace cpu {

// dst[x] = sum_k w[k] * src[clamp(x + k)], with src already padded by r samples on each side,
// evaluated in form F (filters.h).
template <Form F = Form::kPlain, class T>
inline void hconv_padded(const T* __restrict pad, int64_t W, const Filter1D<T>& f, T* __restrict dst) {
  const int r = f.radius;
  const T* w = f.w.data();
  if constexpr (F == Form::kPlain) {
    const T w0 = w[0];
    for (int64_t x = 0; x < W; ++x) dst[x] = w0 * pad[x];
    for (int k = 1; k < 2 * r + 1; ++k) {
      const T wk = w[k];
      const T* __restrict p = pad + k;
      for (int64_t x = 0; x < W; ++x) dst[x] += wk * p[x];
    }
  } else {
    const T* __restrict c = pad + r;
    std::fill(dst, dst + W, T(0));
    for (int i = 1; i <= r; ++i) {
      const T* __restrict lo = c - i;
      const T* __restrict hi = c + i;
      if constexpr (F == Form::kOdd) {
        const T wi = w[r - i];
        for (int64_t x = 0; x < W; ++x) dst[x] += wi * (lo[x] - hi[x]);
      } else {
        const T wi = w[r + i];
        for (int64_t x = 0; x < W; ++x) dst[x] += wi * ((hi[x] - c[x]) + (lo[x] - c[x]));
      }
    }
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

// dst[x] (+)= sum_k w[k] * plane[clamp(row + k)][x], in form F.
template <Form F = Form::kPlain, class T>
inline void vconv(const T* plane, int64_t H, int64_t W, int64_t row, const Filter1D<T>& f,
                  T* __restrict dst, bool accumulate = false) {
  const int r = f.radius;
  auto at = [&](int64_t y) { return plane + std::min<int64_t>(std::max<int64_t>(y, 0), H - 1) * W; };
  if (!accumulate) std::fill(dst, dst + W, T(0));
  if constexpr (F == Form::kPlain) {
    for (int k = -r; k <= r; ++k) {
      const T wk = f.w[k + r];
      const T* __restrict s = at(row + k);
      for (int64_t x = 0; x < W; ++x) dst[x] += wk * s[x];
    }
  } else {
    const T* __restrict c = plane + row * W;
    for (int i = 1; i <= r; ++i) {
      const T* __restrict lo = at(row - i);
      const T* __restrict hi = at(row + i);
      if constexpr (F == Form::kOdd) {
        const T wi = f.w[r - i];
        for (int64_t x = 0; x < W; ++x) dst[x] += wi * (lo[x] - hi[x]);
      } else {
        const T wi = f.w[r + i];
        for (int64_t x = 0; x < W; ++x) dst[x] += wi * ((hi[x] - c[x]) + (lo[x] - c[x]));
      }
    }
  }
}

template <class T>
inline void axpy(T a, const T* __restrict x, T* __restrict y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// dst += F^T g for the horizontal clamp-to-edge correlation F (in form F, see filters.h); zpad
// holds W + 2r scratch samples.
template <Form F = Form::kPlain, class T>
inline void hconv_t_acc(const T* g, int64_t W, const Filter1D<T>& f, T* zpad, T* __restrict dst) {
  const int r = f.radius, n = 2 * r + 1;
  std::fill(zpad, zpad + r, T(0));
  std::copy(g, g + W, zpad + r);
  std::fill(zpad + r + W, zpad + 2 * r + W, T(0));
  // In-range part: dst[j] += sum_k w[k] g[j - k], i.e. the filter in the same form on the
  // reversed, zero-padded samples.
  if constexpr (F == Form::kPlain) {
    for (int m = 0; m < n; ++m) {
      const T wk = f.w[n - 1 - m];
      const T* __restrict p = zpad + m;
      for (int64_t x = 0; x < W; ++x) dst[x] += wk * p[x];
    }
  } else {
    const T* __restrict c = zpad + r;
    for (int i = 1; i <= r; ++i) {
      const T* __restrict lo = c - i;
      const T* __restrict hi = c + i;
      if constexpr (F == Form::kOdd) {
        const T wi = f.w[r - i];
        for (int64_t x = 0; x < W; ++x) dst[x] += wi * (hi[x] - lo[x]);
      } else {
        const T wi = f.w[r + i];
        for (int64_t x = 0; x < W; ++x) dst[x] += wi * ((lo[x] - c[x]) + (hi[x] - c[x]));
      }
    }
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

// dst (row `row`) += F^T g for the vertical clamp-to-edge correlation F (in form F) over the plane g.
template <Form F = Form::kPlain, class T>
inline void vconv_t_acc(const T* g, int64_t H, int64_t W, int64_t row, const Filter1D<T>& f,
                        T* __restrict dst) {
  const int r = f.radius;
  if constexpr (F == Form::kPlain) {
    for (int k = -r; k <= r; ++k) {
      const int64_t i = row - k;
      if (i >= 0 && i < H) axpy(f.w[k + r], g + i * W, dst, W);
    }
  } else {
    // As hconv_t_acc: the same form on rows row + i and row - i, rows outside the plane read as 0.
    const T* __restrict c = g + row * W;
    for (int i = 1; i <= r; ++i) {
      const T* lo = row - i >= 0 ? g + (row - i) * W : nullptr;
      const T* hi = row + i < H ? g + (row + i) * W : nullptr;
      if constexpr (F == Form::kOdd) {
        const T wi = f.w[r - i];
        if (lo && hi) {
          for (int64_t x = 0; x < W; ++x) dst[x] += wi * (hi[x] - lo[x]);
        } else {
          if (hi) axpy(wi, hi, dst, W);
          if (lo) axpy(-wi, lo, dst, W);
        }
      } else {
        const T wi = f.w[r + i];
        if (lo && hi) {
          for (int64_t x = 0; x < W; ++x) dst[x] += wi * ((lo[x] - c[x]) + (hi[x] - c[x]));
        } else {
          const T* in = lo ? lo : hi;  // null when both rows are outside (H <= i)
          for (int64_t x = 0; x < W; ++x) dst[x] += wi * ((in ? in[x] - c[x] : -c[x]) - c[x]);
        }
      }
    }
  }
  const int64_t m = std::min<int64_t>(r, H);
  if (row == 0)
    for (int64_t i = 0; i < m; ++i) axpy(f.left[i], g + i * W, dst, W);
  if (row == H - 1)
    for (int64_t d = 0; d < m; ++d) axpy(f.right[d], g + (H - 1 - d) * W, dst, W);
}

}  // namespace cpu
}  // namespace flip
