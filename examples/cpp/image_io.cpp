// The only translation unit that compiles stb's implementations.
#include "image_io.h"

#include <stdexcept>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_TGA
#define STBI_ONLY_JPEG
#include <stb_image.h>
#define STB_IMAGE_WRITE_IMPLEMENTATION
#include <stb_image_write.h>

namespace flip_examples {

RgbImage read_image(const std::string& path) {
  RgbImage img;
  int channels_in_file = 0;
  if (stbi_is_16_bit(path.c_str())) {
    stbi_us* data = stbi_load_16(path.c_str(), &img.width, &img.height, &channels_in_file, 3);
    if (!data) throw std::runtime_error("cannot read '" + path + "': " + stbi_failure_reason());
    const size_t n = static_cast<size_t>(img.width) * img.height * 3;
    img.rgb.resize(n);
    for (size_t i = 0; i < n; ++i) img.rgb[i] = static_cast<float>(data[i]) / 65535.0f;
    stbi_image_free(data);
  } else {
    stbi_uc* data = stbi_load(path.c_str(), &img.width, &img.height, &channels_in_file, 3);
    if (!data) throw std::runtime_error("cannot read '" + path + "': " + stbi_failure_reason());
    const size_t n = static_cast<size_t>(img.width) * img.height * 3;
    img.rgb.resize(n);
    for (size_t i = 0; i < n; ++i) img.rgb[i] = static_cast<float>(data[i]) / 255.0f;
    stbi_image_free(data);
  }
  return img;
}

void write_png(const std::string& path, int width, int height, int channels, const std::vector<uint8_t>& pixels) {
  if (pixels.size() != static_cast<size_t>(width) * height * channels) {
    throw std::runtime_error("write_png: pixel buffer size does not match " + std::to_string(width) + " x " +
                             std::to_string(height) + " x " + std::to_string(channels));
  }
  if (!stbi_write_png(path.c_str(), width, height, channels, pixels.data(), width * channels)) {
    throw std::runtime_error("cannot write '" + path + "'");
  }
}

}  // namespace flip_examples
