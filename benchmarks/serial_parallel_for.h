// The CPU kernels' threading seam (csrc/flip/cpu/parallel.h) for the standalone C++ benchmarks:
// one thread, the whole range at once. Include it in exactly one file of a program.
#pragma once

#include <cstdint>
#include <functional>

namespace flip {
namespace cpu {
void parallel_for(int64_t begin, int64_t end, int64_t, const std::function<void(int64_t, int64_t)>& fn) {
  if (begin < end) fn(begin, end);
}
}  // namespace cpu
}  // namespace flip
