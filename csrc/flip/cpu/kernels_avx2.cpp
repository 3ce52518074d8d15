// The CPU kernels for x86-64 CPUs with AVX2 and FMA (Intel Haswell, AMD Zen and later). See
// isa.h. FMA instructions are allowed but never contracted from a * b + c (-ffp-contract=off), so
// every level computes bit-identical results.
#include "isa.h"

#if FLIP_CPU_X86_VARIANTS
// clang ignores GCC's target pragma (the variant would be baseline code) and has its own form.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt")
#endif
FLIP_CPU_VARIANT_BEGIN(flip_avx2)
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
