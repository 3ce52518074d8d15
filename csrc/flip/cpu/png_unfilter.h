// Reverses the row filters of an 8-bit, non-interlaced PNG image (PNG specification, section 9):
// flip_loss/imageio.py inflates the file's IDAT stream itself and calls this, through
// _C.png_unfilter, for the samples Pillow would decode, in a fraction of Pillow's time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>  // std::abs
#include <cstring>
#include <utility>  // std::swap
#include <vector>

namespace flip::cpu {

namespace png_detail {

// The Paeth predictor of a byte from its left, upper and upper-left neighbours: whichever of the
// three is nearest to left + up - upper_left, ties going to left, then to up.
inline std::uint8_t paeth(int left, int up, int upper_left) {
  const int to_left = std::abs(up - upper_left);                   // |estimate - left|
  const int to_up = std::abs(left - upper_left);                   // |estimate - up|
  const int to_upper_left = std::abs(left + up - 2 * upper_left);  // |estimate - upper_left|
  if (to_left <= to_up && to_left <= to_upper_left) return static_cast<std::uint8_t>(left);
  return static_cast<std::uint8_t>(to_up <= to_upper_left ? up : upper_left);
}

// One row of `row_bytes` bytes: `in` the filtered bytes (after the filter type byte), `up` the row
// above, already unfiltered (zeros for the first row), `out` the unfiltered row. Bpp: bytes per
// pixel, the distance to the left neighbour; a fixed value lets the compiler keep the bpp
// independent chains of Sub, Average and Paeth side by side. False for an unknown filter type.
template <std::size_t Bpp>
bool unfilter_row(std::uint8_t type, const std::uint8_t* in, const std::uint8_t* up, std::uint8_t* out,
                  std::size_t row_bytes) {
  const std::size_t first = row_bytes < Bpp ? row_bytes : Bpp;  // the bytes with no left neighbour
  switch (type) {
    case 0:  // None
      std::memcpy(out, in, row_bytes);
      return true;
    case 1:  // Sub: + left
      std::memcpy(out, in, first);
      for (std::size_t i = Bpp; i < row_bytes; ++i) out[i] = static_cast<std::uint8_t>(in[i] + out[i - Bpp]);
      return true;
    case 2:  // Up: + up
      for (std::size_t i = 0; i < row_bytes; ++i) out[i] = static_cast<std::uint8_t>(in[i] + up[i]);
      return true;
    case 3:  // Average: + floor((left + up) / 2)
      for (std::size_t i = 0; i < first; ++i) out[i] = static_cast<std::uint8_t>(in[i] + (up[i] >> 1));
      for (std::size_t i = Bpp; i < row_bytes; ++i) {
        out[i] = static_cast<std::uint8_t>(in[i] + ((out[i - Bpp] + up[i]) >> 1));
      }
      return true;
    case 4:  // Paeth; with neither left nor upper-left, the predictor is up
      for (std::size_t i = 0; i < first; ++i) out[i] = static_cast<std::uint8_t>(in[i] + up[i]);
      for (std::size_t i = Bpp; i < row_bytes; ++i) {
        out[i] = static_cast<std::uint8_t>(in[i] + paeth(out[i - Bpp], up[i], up[i - Bpp]));
      }
      return true;
    default:
      return false;
  }
}

template <std::size_t Bpp>
bool unfilter_rows(const std::uint8_t* filtered, std::uint8_t* out, std::size_t height, std::size_t row_bytes) {
  const std::vector<std::uint8_t> zeros(row_bytes);  // the row above the first
  const std::uint8_t* up = zeros.data();
  for (std::size_t y = 0; y < height; ++y) {
    const std::uint8_t* in = filtered + y * (row_bytes + 1);
    std::uint8_t* row = out + y * row_bytes;
    if (!unfilter_row<Bpp>(in[0], in + 1, up, row, row_bytes)) return false;
    up = row;
  }
  return true;
}

// As unfilter_rows, into Bpp planes of height x (row_bytes / Bpp) samples: each row is unfiltered
// into one of two rows that stay in the cache (the one above is the filters' `up`), then dealt out.
template <std::size_t Bpp>
bool unfilter_rows_to_planes(const std::uint8_t* filtered, std::uint8_t* planes, std::size_t height,
                             std::size_t row_bytes) {
  std::vector<std::uint8_t> rows(2 * row_bytes);  // zeros: the row above the first
  std::uint8_t* up = rows.data();
  std::uint8_t* row = rows.data() + row_bytes;
  const std::size_t width = row_bytes / Bpp;
  for (std::size_t y = 0; y < height; ++y) {
    const std::uint8_t* in = filtered + y * (row_bytes + 1);
    if (!unfilter_row<Bpp>(in[0], in + 1, up, row, row_bytes)) return false;
    std::uint8_t* plane_rows[Bpp];
    for (std::size_t c = 0; c < Bpp; ++c) plane_rows[c] = planes + (c * height + y) * width;
    for (std::size_t x = 0; x < width; ++x) {
      for (std::size_t c = 0; c < Bpp; ++c) plane_rows[c][x] = row[x * Bpp + c];
    }
    std::swap(up, row);
  }
  return true;
}

}  // namespace png_detail

// Unfilters `height` scanlines of `row_bytes` bytes each: `filtered` holds them as inflated from
// the IDAT stream, each after its filter type byte (height * (row_bytes + 1) bytes); `out` receives
// the rows one after another (height * row_bytes bytes; it may not overlap `filtered`), or with
// `planar` each channel's samples as a plane of height x (row_bytes / bytes_per_pixel), the planes
// one after another. `bytes_per_pixel` is the channel count of an 8-bit image: 1 (grey), 2 (grey +
// alpha), 3 (RGB) or 4 (RGBA); the caller checks it. Returns false at the first row whose filter
// type is beyond 4 (that row and the ones below it are left unwritten). Throws std::bad_alloc when
// the rows it works in cannot be allocated.
inline bool png_unfilter(const std::uint8_t* filtered, std::uint8_t* out, std::size_t height, std::size_t row_bytes,
                         std::size_t bytes_per_pixel, bool planar = false) {
  switch (bytes_per_pixel) {
    case 1:  // one channel: the rows are its plane
      return png_detail::unfilter_rows<1>(filtered, out, height, row_bytes);
    case 2:
      return planar ? png_detail::unfilter_rows_to_planes<2>(filtered, out, height, row_bytes)
                    : png_detail::unfilter_rows<2>(filtered, out, height, row_bytes);
    case 3:
      return planar ? png_detail::unfilter_rows_to_planes<3>(filtered, out, height, row_bytes)
                    : png_detail::unfilter_rows<3>(filtered, out, height, row_bytes);
    default:
      return planar ? png_detail::unfilter_rows_to_planes<4>(filtered, out, height, row_bytes)
                    : png_detail::unfilter_rows<4>(filtered, out, height, row_bytes);
  }
}

}  // namespace flip::cpu
