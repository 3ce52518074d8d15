// The tone mappers of HDR-FLIP, on their own so that the CPU kernels' entry points (cpu/kernels.h)
// can name the type outside the per-instruction-set variants (cpu/isa.h): one type for every
// backend and the ops' argument check (csrc/ops/checks.h, which maps the names to it). A tone
// mapper is its enum value and name here and its coefficients (tone_coefficients, hdr_pixel.h,
// which is compiled inside each variant); docs/development.md, "Adding a tone mapper".
#pragma once

namespace flip {

enum class ToneMapper : int { kReinhard = 0, kAces = 1, kHable = 2 };

// The names the ops take (any case), by ToneMapper value: the one list of tone mappers, which the
// Python package's constants.TONE_MAPPERS must equal (flip_loss._C.limits() exports it; a test
// compares them).
inline constexpr int kToneMapperCount = 3;
inline constexpr const char* kToneMapperNames[kToneMapperCount] = {"reinhard", "aces", "hable"};

}  // namespace flip
