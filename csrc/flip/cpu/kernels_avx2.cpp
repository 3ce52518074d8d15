// The CPU kernels for x86-64 CPUs with AVX2 and FMA (Intel Haswell, AMD Zen and later). See
// isa.h. FMA instructions are allowed but never contracted from a * b + c (-ffp-contract=off), so
// every level computes bit-identical results.
#include "isa.h"

#if FLIP_CPU_X86_VARIANTS
#pragma GCC push_options
#pragma GCC target("avx2,fma,bmi,bmi2,f16c,lzcnt,popcnt")
FLIP_CPU_VARIANT_BEGIN(flip_avx2)
#include "hdr_flip.inc"
#include "ldr_flip.inc"
#include "stages.inc"
FLIP_CPU_INSTANTIATE_VARIANT
FLIP_CPU_VARIANT_END
#pragma GCC pop_options
#endif
