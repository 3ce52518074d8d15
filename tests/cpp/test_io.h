// Reading the tensors that pytest saved (as attributes of a scripted container module) and writing
// results back, shared by the C++ test programs.
#pragma once

#include <torch/script.h>

#include <fstream>
#include <string>
#include <vector>

namespace flip_test {

inline at::Tensor tensor_attr(const torch::jit::Module& m, const std::string& name) {
  TORCH_CHECK(m.hasattr(name), "the inputs module has no attribute '", name, "'");
  auto v = m.attr(name);
  TORCH_CHECK(v.isTensor(), "the inputs module's attribute '", name, "' is not a tensor");
  return v.toTensor();
}

inline void write_file(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  TORCH_CHECK(out, "cannot open '", path, "' for writing");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  TORCH_CHECK(out.good(), "error writing '", path, "'");
}

}  // namespace flip_test
