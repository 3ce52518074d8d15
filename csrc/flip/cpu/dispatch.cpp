// Runtime CPU dispatch: the public kernels (kernels.h) call the variant compiled for the best
// instruction-set level the CPU supports (see isa.h), chosen once per process.
#include <cctype>
#include <string>

#include "isa.h"

// Declarations of each variant's kernels (defined in kernels_<level>.cpp).
#define FLIP_CPU_DECLARE_VARIANT(ns) \
  FLIP_CPU_VARIANT_BEGIN(ns)         \
  namespace flip {                   \
  namespace cpu {                    \
  FLIP_CPU_KERNEL_DECLARATIONS       \
  }                                  \
  }                                  \
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
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                    __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
                    __builtin_cpu_supports("popcnt");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return Level::avx512;
  if (avx2) return Level::avx2;
#endif
  return Level::baseline;
}

// FLIP_LOSS_CPU_CAPABILITY can only lower the level (to compare levels, or to work around a
// problem); an unknown value is ignored, so the best level is used.
Level chosen() {
  const Level best = supported();
  const char* env = std::getenv("FLIP_LOSS_CPU_CAPABILITY");
  if (env == nullptr) return best;
  std::string want(env);
  for (auto& ch : want) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
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
    case Level::avx512: return "avx512";
    case Level::avx2: return "avx2";
    default: return "baseline";
  }
}

#if FLIP_CPU_X86_VARIANTS
#define FLIP_CPU_DISPATCH(fn, ...)                                                         \
  switch (level()) {                                                                       \
    case Level::avx512: return ::flip_avx512::flip::cpu::fn<T>(__VA_ARGS__);               \
    case Level::avx2: return ::flip_avx2::flip::cpu::fn<T>(__VA_ARGS__);                   \
    default: return ::flip_baseline::flip::cpu::fn<T>(__VA_ARGS__);                        \
  }
#else
#define FLIP_CPU_DISPATCH(fn, ...) return ::flip_baseline::flip::cpu::fn<T>(__VA_ARGS__);
#endif

template <class T>
bool ldr_flip_forward(const T* test, const T* ref, T* out, Shape s, double ppd, bool srgb, double eps) {
  FLIP_CPU_DISPATCH(ldr_flip_forward, test, ref, out, s, ppd, srgb, eps)
}
template <class T>
bool ldr_flip_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s, double ppd,
                       bool srgb, double eps) {
  FLIP_CPU_DISPATCH(ldr_flip_backward, grad, test, ref, g_test, g_ref, s, ppd, srgb, eps)
}
template <class T>
bool ldr_flip_forward_sensitivities(const T* test, const T* ref, T* out, T* sensitivities, bool want_test,
                                    bool want_ref, Shape s, double ppd, bool srgb, double eps) {
  FLIP_CPU_DISPATCH(ldr_flip_forward_sensitivities, test, ref, out, sensitivities, want_test, want_ref, s, ppd, srgb,
                    eps)
}
template <class T>
bool ldr_flip_backward_sensitivities(const T* grad, const T* sensitivities, const T* test, const T* ref, T* g_test,
                                     T* g_ref, Shape s, double ppd, bool srgb) {
  FLIP_CPU_DISPATCH(ldr_flip_backward_sensitivities, grad, sensitivities, test, ref, g_test, g_ref, s, ppd, srgb)
}
template <class T>
bool hdr_flip_forward(const T* test, const T* ref, const T* exposures, const int64_t* counts, int64_t E, T* out,
                      T* exposure_map, int32_t* index, Shape s, double ppd, ToneMapper tone_mapper, double eps) {
  FLIP_CPU_DISPATCH(hdr_flip_forward, test, ref, exposures, counts, E, out, exposure_map, index, s, ppd,
                    tone_mapper, eps)
}
template <class T>
bool hdr_flip_backward(const T* grad, const T* test, const T* ref, const T* exposures, const int64_t* counts,
                       int64_t E, const int32_t* index, T* g_test, T* g_ref, Shape s, double ppd,
                       ToneMapper tone_mapper, double eps) {
  FLIP_CPU_DISPATCH(hdr_flip_backward, grad, test, ref, exposures, counts, E, index, g_test, g_ref, s, ppd,
                    tone_mapper, eps)
}
template <class T>
bool csf_filter_forward(const T* opponent, T* out, Shape s, double ppd) {
  FLIP_CPU_DISPATCH(csf_filter_forward, opponent, out, s, ppd)
}
template <class T>
bool csf_filter_backward(const T* grad, const T* opponent, T* g_opponent, Shape s, double ppd) {
  FLIP_CPU_DISPATCH(csf_filter_backward, grad, opponent, g_opponent, s, ppd)
}
template <class T>
bool hunt_hyab_forward(const T* test, const T* ref, T* out, Shape s, double eps) {
  FLIP_CPU_DISPATCH(hunt_hyab_forward, test, ref, out, s, eps)
}
template <class T>
bool hunt_hyab_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s, double eps) {
  FLIP_CPU_DISPATCH(hunt_hyab_backward, grad, test, ref, g_test, g_ref, s, eps)
}
template <class T>
bool feature_difference_forward(const T* test, const T* ref, T* out, Shape s, double ppd, double eps) {
  FLIP_CPU_DISPATCH(feature_difference_forward, test, ref, out, s, ppd, eps)
}
template <class T>
bool feature_difference_backward(const T* grad, const T* test, const T* ref, T* g_test, T* g_ref, Shape s,
                                 double ppd, double eps) {
  FLIP_CPU_DISPATCH(feature_difference_backward, grad, test, ref, g_test, g_ref, s, ppd, eps)
}

// The float and double versions the ops call.
#define FLIP_CPU_INSTANTIATE(T)                                                                                   \
  template bool ldr_flip_forward<T>(const T*, const T*, T*, Shape, double, bool, double);                         \
  template bool ldr_flip_backward<T>(const T*, const T*, const T*, T*, T*, Shape, double, bool, double);          \
  template bool ldr_flip_forward_sensitivities<T>(const T*, const T*, T*, T*, bool, bool, Shape, double, bool,    \
                                                  double);                                                        \
  template bool ldr_flip_backward_sensitivities<T>(const T*, const T*, const T*, const T*, T*, T*, Shape, double, \
                                                   bool);                                                         \
  template bool hdr_flip_forward<T>(const T*, const T*, const T*, const int64_t*, int64_t, T*, T*, int32_t*,      \
                                    Shape, double, ToneMapper, double);                                           \
  template bool hdr_flip_backward<T>(const T*, const T*, const T*, const T*, const int64_t*, int64_t,             \
                                     const int32_t*, T*, T*, Shape, double, ToneMapper, double);                  \
  template bool csf_filter_forward<T>(const T*, T*, Shape, double);                                               \
  template bool csf_filter_backward<T>(const T*, const T*, T*, Shape, double);                                    \
  template bool hunt_hyab_forward<T>(const T*, const T*, T*, Shape, double);                                      \
  template bool hunt_hyab_backward<T>(const T*, const T*, const T*, T*, T*, Shape, double);                       \
  template bool feature_difference_forward<T>(const T*, const T*, T*, Shape, double, double);                     \
  template bool feature_difference_backward<T>(const T*, const T*, const T*, T*, T*, Shape, double, double);
FLIP_CPU_INSTANTIATE(float)
FLIP_CPU_INSTANTIATE(double)

}  // namespace cpu
}  // namespace flip
