// Minimal PNG reading/writing for the examples (stb_image / stb_image_write, no torch headers here
// so that this file compiles in a second).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace flip_examples {

// An RGB image as H x W x 3 float32 code values in [0, 1] (row-major, interleaved): 8-bit PNGs are
// divided by 255, 16-bit ones by 65535, like flip_loss.imageio.load_image. Alpha is dropped; grey
// images are expanded to RGB.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<float> rgb;  // height * width * 3
};

// Throws std::runtime_error with the file name and stb's reason on failure.
RgbImage read_image(const std::string& path);

// Writes an 8-bit PNG with `channels` (1 = grey, 3 = RGB) interleaved values per pixel.
void write_png(const std::string& path, int width, int height, int channels, const std::vector<uint8_t>& pixels);

}  // namespace flip_examples
