// How the CPU kernels are compiled once per instruction-set level inside one binary.
//
// Each kernels_<level>.cpp includes the kernel sources (*.inc) inside its own top-level
// namespace (flip_baseline, flip_avx2, flip_avx512) under `#pragma GCC target` (clang: `#pragma
// clang attribute` with the target attribute), and
// isa_dispatch.cpp calls the best variant the CPU supports. Two rules keep that safe:
// * Every system header is included here, *before* the target pragma, so the standard library's
//   inline functions and templates are compiled for the baseline. A function compiled for AVX2
//   outside a variant namespace could be the copy the linker keeps for every caller and crash an
//   older CPU; tests/cpu/test_cpu_dispatch.py disassembles the library to check that none exists.
// * The variant namespaces make every symbol of the kernels distinct per level; the only shared
//   pieces are the types and the seams named below.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include "interrupt.h"
#include "kernels.h"
#include "parallel.h"
#include "workspace.h"

// The kernel sources keep their helpers in anonymous namespaces, as a .cpp file would; GCC warns
// about that in an included file because a header could be included by several files, but each
// variant includes them exactly once. (Clang has no such warning.)
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wsubobject-linkage"
#endif
// The filters' 32-byte vector values (separable.h) live inside always-inlined helpers of one
// variant; no such value crosses a call boundary between code compiled for different levels, so
// GCC's note that the baseline passes them differently from AVX code does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

// Opens the variant namespace `ns`, in which the kernel sources then declare flip::cpu::...;
// they see the shared types (Shape, ToneMapper, the kernels' argument structs), the threading and
// interruption seams and the scratch pool (defined once, outside: one pool for every level and for
// the ops, csrc/ops/cpu.cpp).
#define FLIP_CPU_USE_ARGS(name, Args) using ::flip::cpu::Args;
#define FLIP_CPU_VARIANT_BEGIN(ns)    \
  namespace ns {                      \
  namespace flip {                    \
  using ::flip::ToneMapper;           \
  namespace cpu {                     \
  using ::flip::cpu::parallel_for;    \
  using ::flip::cpu::poll_interrupt;  \
  using ::flip::cpu::Shape;           \
  using ::flip::cpu::Workspace;       \
  FLIP_CPU_KERNELS(FLIP_CPU_USE_ARGS) \
  }                                   \
  }                                   \
  }                                   \
  namespace ns {
#define FLIP_CPU_VARIANT_END }

// Instantiates, inside the variant namespace (after the kernel sources), every kernel of the list.
#define FLIP_CPU_INSTANTIATE_VARIANT            \
  namespace flip {                              \
  namespace cpu {                               \
  FLIP_CPU_KERNELS(FLIP_CPU_INSTANTIATE_KERNEL) \
  }                                             \
  }

// Which levels this build has (x86-64 only; elsewhere the baseline, e.g. NEON on aarch64, is all).
#if defined(__x86_64__) && defined(__GNUC__)
#define FLIP_CPU_X86_VARIANTS 1
#else
#define FLIP_CPU_X86_VARIANTS 0
#endif
