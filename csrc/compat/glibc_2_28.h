// Force-included into every host translation unit of the Python extension (setup.py, -include) on
// glibc Linux, so that the binary asks for no glibc symbol version newer than 2.28 and a wheel of
// it can carry the manylinux_2_28 tag (scripts/build_wheel.sh, docs/install.md "Release wheels").
//
// Built on a newer glibc, a call binds to the newest version of each symbol, and only these few
// are newer than 2.28: exp, exp2, log and pow (GLIBC_2.29: the same functions without the old
// SVID error-handling wrapper) and dlsym (GLIBC_2.34, when libdl moved into libc; torch's stable
// headers call it). Each is bound here to its first version, which every later glibc still
// provides: the same function for every argument this code passes (the CPU kernels' float
// transcendentals are csrc/flip/fastmath.h's own; these serve float64), and glibc 2.28's dlsym,
// in libdl, which torch's libraries load. The one other newer symbol, __libc_single_threaded
// (GLIBC_2.32, read by libstdc++'s headers), is answered by csrc/compat/sys/single_threaded.h.
#pragma once

#if defined(__linux__) && !defined(__CUDA_ARCH__)
#include <features.h>
#if defined(__GLIBC__) && defined(__x86_64__)
#define FLIP_GLIBC_OLDEST_VERSION "GLIBC_2.2.5"
#elif defined(__GLIBC__) && defined(__aarch64__)
#define FLIP_GLIBC_OLDEST_VERSION "GLIBC_2.17"
#endif
#ifdef FLIP_GLIBC_OLDEST_VERSION
__asm__(".symver exp,exp@" FLIP_GLIBC_OLDEST_VERSION);
__asm__(".symver exp2,exp2@" FLIP_GLIBC_OLDEST_VERSION);
__asm__(".symver log,log@" FLIP_GLIBC_OLDEST_VERSION);
__asm__(".symver pow,pow@" FLIP_GLIBC_OLDEST_VERSION);
__asm__(".symver dlsym,dlsym@" FLIP_GLIBC_OLDEST_VERSION);
#undef FLIP_GLIBC_OLDEST_VERSION
#endif
#endif
