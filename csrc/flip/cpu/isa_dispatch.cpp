// Runtime CPU dispatch: the public kernels (kernels.h) call the variant compiled for the best
// instruction-set level the CPU supports (see isa.h), chosen once per process.
#include <string>

#include "../environment.h"
#include "isa.h"

// Declarations of each variant's kernels (defined in kernels_<level>.cpp).
#define FLIP_CPU_DECLARE_VARIANT(ns)        \
  FLIP_CPU_VARIANT_BEGIN(ns)                \
  namespace flip {                          \
  namespace cpu {                           \
  FLIP_CPU_KERNELS(FLIP_CPU_DECLARE_KERNEL) \
  }                                         \
  }                                         \
  FLIP_CPU_VARIANT_END

FLIP_CPU_DECLARE_VARIANT(flip_baseline)
#if FLIP_CPU_X86_VARIANTS
FLIP_CPU_DECLARE_VARIANT(flip_avx2)
FLIP_CPU_DECLARE_VARIANT(flip_avx512)
#endif

namespace flip {
namespace cpu {
namespace {

enum class Level { baseline = 0, avx2 = 1, avx512 = 2 };

// The best level this CPU and OS support (libgcc's check includes the OS saving the wider
// registers).
Level supported() {
#if FLIP_CPU_X86_VARIANTS
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi") &&
                    __builtin_cpu_supports("bmi2") && __builtin_cpu_supports("popcnt");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return Level::avx512;
  if (avx2) return Level::avx2;
#endif
  return Level::baseline;
}

// FLIP_LOSS_CPU_CAPABILITY can only lower the level (to compare levels, or to work around a
// problem); another value than its names is refused (environment.h), at every kernel call.
Level chosen() {
  const Level best = supported();
  const std::string want =
      flip::environment::choice("FLIP_LOSS_CPU_CAPABILITY", {"baseline", "default", "avx2", "avx512"});
  if (want.empty()) return best;
  Level level = best;
  if (want == "baseline" || want == "default") level = Level::baseline;
  if (want == "avx2") level = Level::avx2;
  if (want == "avx512") level = Level::avx512;
  return std::min(level, best);
}

Level level() {
  static const Level l = chosen();
  return l;
}

}  // namespace

const char* capability() {
  switch (level()) {
    case Level::avx512:
      return "avx512";
    case Level::avx2:
      return "avx2";
    default:
      return "baseline";
  }
}

// The public kernels: each calls its variant for the chosen level.
#if FLIP_CPU_X86_VARIANTS
#define FLIP_CPU_FORWARD_KERNEL(name, Args)               \
  template <class T>                                      \
  bool name(const Args<T>& args) {                        \
    switch (level()) {                                    \
      case Level::avx512:                                 \
        return ::flip_avx512::flip::cpu::name<T>(args);   \
      case Level::avx2:                                   \
        return ::flip_avx2::flip::cpu::name<T>(args);     \
      default:                                            \
        return ::flip_baseline::flip::cpu::name<T>(args); \
    }                                                     \
  }
#else
#define FLIP_CPU_FORWARD_KERNEL(name, Args)           \
  template <class T>                                  \
  bool name(const Args<T>& args) {                    \
    return ::flip_baseline::flip::cpu::name<T>(args); \
  }
#endif
FLIP_CPU_KERNELS(FLIP_CPU_FORWARD_KERNEL)
FLIP_CPU_KERNELS(FLIP_CPU_INSTANTIATE_KERNEL)

}  // namespace cpu
}  // namespace flip
