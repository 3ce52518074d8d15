// How many filters FLIP's two banks run and how many planes of values per image their passes
// produce: the sizes that the CPU and CUDA kernels lay out their planes by and that the ops give
// the sensitivities they keep. Framework-free and dependency-free, so that the ops' shape code
// (csrc/ops/schema_types.h) can use it without the per-pixel maths.
#pragma once

namespace flip {

// The 1-D filters: the CSF bank's y, cx, cz1, cz2 (CsfTaps, filters.h) and the feature bank's g,
// dg, ddg (FeatureTaps).
constexpr int kCsfFilters = 4;
constexpr int kFeatureFilters = 3;
constexpr int kBankFilters = kCsfFilters + kFeatureFilters;

// The horizontal pass of each filter over its channel (Y, Cx, Cz twice; the achromatic channel
// three times) gives one plane per image and filter, which the vertical passes read.
constexpr int kHorizontalPlanesPerImage = kBankFilters;

// The vertical passes combine those into the responses of a pixel: the filtered opponent colour
// F0..F2 and the features dx, dy, ddx, ddy (Features, pixel.h). Each response is one plane per
// image wherever the kernels store per-response values: the gradient planes of the backward (the
// gradient w.r.t. each response) and the sensitivities that autograd keeps.
constexpr int kColourResponses = 3;
constexpr int kFeatureResponses = 4;
constexpr int kResponsePlanesPerImage = kColourResponses + kFeatureResponses;

// The most bytes of sensitivities that autograd keeps on a CUDA device from an LDR-FLIP forward to
// its backward (flip_loss/op_registration.py and csrc/ops/autograd.cpp apply it alike). Within it
// the backward is the transposed filters of the kept values alone, one launch, instead of the
// forward's work again; past it the tiled backward recomputes in bands, with memory flat in the
// image size. 256 MiB holds one image's at 3840 x 2160 in float32 (7 planes: 232 MB), both
// images' at 1920 x 1080 (116 MB) or one image's for a batch of 16 at 512 x 512 (117 MB); the CPU
// always keeps them. The budget is per call: each scale of a multi-scale loss keeps its own.
constexpr long long kCudaKeptSensitivitiesBytes = 256LL << 20;

}  // namespace flip
