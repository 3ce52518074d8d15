// The CPU kernels for x86-64 CPUs with AVX-512 (F, BW, DQ, VL: Intel Skylake-SP, AMD Zen 4 and
// later), with 512-bit vectors preferred. See isa.h and kernels_avx2.cpp.
#include "isa.h"

#if FLIP_CPU_X86_VARIANTS
// clang ignores GCC's target pragma (the variant would be baseline code) and has its own form.
#if defined(__clang__)
#pragma clang attribute push(                                                                          \
    __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt"))), \
    apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt,prefer-vector-width=512")
#endif
FLIP_CPU_VARIANT_BEGIN(flip_avx512)
#include "hdr_flip.inc"
#include "ldr_flip.inc"
#include "stages.inc"
FLIP_CPU_INSTANTIATE_VARIANT
FLIP_CPU_VARIANT_END
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
