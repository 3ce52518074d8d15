// The tone mappers of HDR-FLIP as C++ values, made from the registry's rows
// (flip_loss/tone_mappers.inc, which the Python package reads too): one type for every backend and
// the ops' argument check (csrc/ops/checks.h maps the names to it), on its own so that the CPU
// kernels' entry points (cpu/kernels.h) can name it outside the per-instruction-set variants
// (cpu/isa.h). hdr_pixel.h makes the coefficients from the same rows.
#pragma once

// The six values of a registry row's coefficients, for an initializer: {FLIP_TONE_ROW kernel_row}.
#define FLIP_TONE_ROW(...) __VA_ARGS__

namespace flip {

enum class ToneMapper : int {
#define FLIP_TONE_MAPPER(id, name, display, kernel_row, nvidia_row) id,
#include "../../flip_loss/tone_mappers.inc"
#undef FLIP_TONE_MAPPER
};

// The names the ops take (any case), by ToneMapper value (flip_loss._C.limits() exports them).
inline constexpr const char* kToneMapperNames[] = {
#define FLIP_TONE_MAPPER(id, name, display, kernel_row, nvidia_row) name,
#include "../../flip_loss/tone_mappers.inc"
#undef FLIP_TONE_MAPPER
};
inline constexpr int kToneMapperCount = static_cast<int>(sizeof(kToneMapperNames) / sizeof(kToneMapperNames[0]));

}  // namespace flip
