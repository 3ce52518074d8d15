// The tone mappers of HDR-FLIP, on their own so that the CPU kernels' entry points (cpu/kernels.h)
// can name the type outside the per-instruction-set variants (cpu/isa.h): one type for every
// backend and the ops' argument check (csrc/ops/checks.h, which maps the names to it).
#pragma once

namespace flip {

enum class ToneMapper : int { kReinhard = 0, kAces = 1, kHable = 2 };

}  // namespace flip
