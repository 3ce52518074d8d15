// 8-bit images in and out of flip_loss/imageio.py and colormaps.py, each in one sweep where NumPy
// takes several (a cast, a transposing copy, a division; a clamp, a scale, a cast, a table look-up):
// an image's samples to float planes, and a map's values to colour-map colours. The values are those
// of the NumPy code they replace, which stays for an extension built before them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace flip::cpu {

// planes[c][y][x] = samples at y * row_stride + x * pixel_stride + c (bytes) / 255, rounded to
// float once (as NumPy's float32 division of the widened sample), for c < channels: `height` x
// `width` pixels of uint8 samples into `channels` contiguous float planes.
inline void byte_planes(const std::uint8_t* samples, std::ptrdiff_t row_stride, std::ptrdiff_t pixel_stride,
                        std::size_t height, std::size_t width, std::size_t channels, float* planes) {
  float unit[256];
  for (int k = 0; k < 256; ++k) unit[k] = static_cast<float>(k) / 255.0f;
  for (std::size_t c = 0; c < channels; ++c) {
    float* plane = planes + c * height * width;
    for (std::size_t y = 0; y < height; ++y) {
      const std::uint8_t* row = samples + static_cast<std::ptrdiff_t>(y) * row_stride + static_cast<std::ptrdiff_t>(c);
      float* out = plane + y * width;
      for (std::size_t x = 0; x < width; ++x) out[x] = unit[row[static_cast<std::ptrdiff_t>(x) * pixel_stride]];
    }
  }
}

// The colour-map index of a value, as colormaps.py computes it in float32: NaN -> 0, clamped to
// [0, 1], then uint8(v * 255 + 0.5).
inline std::uint8_t unit_code(float v) {
  v = v == v ? v : 0.0f;
  v = v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
  v = v * 255.0f;
  v = v + 0.5f;
  return static_cast<std::uint8_t>(v);
}

// colours[3 i + j] = table[3 unit_code(values[i]) + j] for `count` values and a 256 x 3 table.
inline void colour_map(const float* values, std::size_t count, const std::uint8_t* table, std::uint8_t* colours) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* colour = table + 3 * unit_code(values[i]);
    colours[3 * i] = colour[0];
    colours[3 * i + 1] = colour[1];
    colours[3 * i + 2] = colour[2];
  }
}

}  // namespace flip::cpu
