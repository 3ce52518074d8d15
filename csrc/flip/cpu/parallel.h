// The CPU kernels' only link to a threading runtime: the torch layer defines this with
// at::parallel_for, a standalone build could use anything else.
#pragma once

#include <cstdint>
#include <functional>

namespace flip {
namespace cpu {

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace cpu
}  // namespace flip
