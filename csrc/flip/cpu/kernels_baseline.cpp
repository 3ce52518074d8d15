// The CPU kernels for the baseline of the target architecture (x86-64: SSE2; aarch64: NEON), or
// for the build machine with FLIP_LOSS_NATIVE=1. See isa.h.
#include "isa.h"

FLIP_CPU_VARIANT_BEGIN(flip_baseline)
#include "hdr_flip.inc"
#include "ldr_flip.inc"
#include "stages.inc"
FLIP_CPU_INSTANTIATE_VARIANT
FLIP_CPU_VARIANT_END
