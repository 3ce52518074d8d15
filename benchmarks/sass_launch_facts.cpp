// The launch facts of the CUDA kernels that benchmarks/sass_report.py needs, printed as JSON
// straight from the headers the kernels are built from (filters.h and cuda/*.h, compiled here for
// the host), so that the report restates none of them: filter radii, tile and block sizes, shared
// memory per block, the tiled backward's band plan for one image size, and the formulation the
// launchers choose (csrc/flip/cuda/launch_params.h) on devices with the shared memory per block
// given.
//
//   g++ -std=c++17 -O1 -Icsrc benchmarks/sass_launch_facts.cpp -o /tmp/sass_launch_facts
//   /tmp/sass_launch_facts PPD WIDTH HEIGHT BATCH WANTED ELEMENT_BYTES [SHARED_MEMORY_PER_BLOCK...]
//
// WANTED: 1 the test image's gradient, 2 the reference's, 3 both (plan_backward's mask).
#include <cstdio>
#include <cstdlib>

#include "flip/cuda/launch_params.h"
#include "flip/filters.h"

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s PPD WIDTH HEIGHT BATCH WANTED ELEMENT_BYTES [SHARED_MEMORY_PER_BLOCK...]\n",
                 argv[0]);
    return 2;
  }
  const double ppd = std::atof(argv[1]);
  const int64_t w = std::atoll(argv[2]), h = std::atoll(argv[3]), n = std::atoll(argv[4]);
  const int wanted = std::atoi(argv[5]);
  const int64_t elem = std::atoll(argv[6]);
  const int r_csf = flip::csf_radius(ppd), r_feat = flip::feature_radius(ppd);
  const int R = r_csf > r_feat ? r_csf : r_feat;   // KernelTaps::rmax, as csrc/ops/cuda.cpp sets it
  const flip::Geometry g{n, h, w, 2, true, true};  // LDR-/HDR-FLIP: both images, both banks
  const flip::BackwardPlan plan = flip::plan_backward(g, wanted, R, elem);
  std::printf("{\n");
  std::printf("  \"ppd\": %.17g, \"r_csf\": %d, \"r_feat\": %d, \"R\": %d,\n", ppd, r_csf, r_feat, R);
  std::printf(
      "  \"tile_w\": %d, \"tile_h\": %d, \"walk_tiles\": %d, \"fused_threads\": %d, \"block\": %d, "
      "\"grad_planes\": %d, \"vertical_rows\": %d, \"horizontal_columns\": %d,\n",
      flip::kTileW, flip::kTileH, flip::kWalkTiles, flip::kFusedThreads, flip::kBlock, flip::kResponsePlanesPerImage,
      flip::kVerticalRows, flip::kHorizontalColumns);
  std::printf("  \"planes\": %d, \"gplanes\": %d,\n", g.planes(), g.gplanes());
  std::printf(
      "  \"smem_elems\": {\"fused\": %d, \"tiled_transpose\": %d, \"horizontal_pass\": %d, \"horizontal_transpose\": "
      "%d},\n",
      flip::fused_smem_len(R), flip::tiled_transpose_smem_len(R), flip::horizontal_pass_smem_len(flip::kBlock, R),
      flip::horizontal_transpose_smem_len(flip::kBlock, R, g.planes()));
  // Per device limit: the fused forward, the tiled backward (float32 as the report's kernels, and
  // float64), and whether the row passes fit at all (else the ops refuse this ppd there).
  std::printf("  \"plans\": {");
  for (int i = 7; i < argc; ++i) {
    const size_t have = static_cast<size_t>(std::atoll(argv[i]));
    namespace fc = flip::cuda;
    std::printf("%s\n    \"%zu\": {\"float32\": [%d, %d, %d], \"float64\": [%d, %d, %d]}", i > 7 ? "," : "", have,
                fc::use_fused_forward<float>(R, have, false), fc::use_tiled_backward<float>(R, have, false),
                fc::row_pass_smem_bytes<float>(R, g.planes()) <= have, fc::use_fused_forward<double>(R, have, false),
                fc::use_tiled_backward<double>(R, have, false), fc::row_pass_smem_bytes<double>(R, g.planes()) <= have);
  }
  std::printf("\n  },\n");
  std::printf("  \"scratch_budget_bytes\": %lld, \"scratch_elems\": %lld,\n",
              static_cast<long long>(flip::kBackwardScratchBytes), static_cast<long long>(plan.scratch_elems(g)));
  std::printf("  \"bands\": [");
  for (int64_t j = 0; j < plan.count(); ++j) {
    const flip::BackwardBand b = plan.band(g, j);
    std::printf(
        "%s\n    {\"n0\": %lld, \"n1\": %lld, \"y0\": %lld, \"y1\": %lld, \"g0\": %lld, \"g1\": %lld, "
        "\"images\": %d, \"grad_tiles_y\": %lld}",
        j ? "," : "", static_cast<long long>(b.n0), static_cast<long long>(b.n1), static_cast<long long>(b.y0),
        static_cast<long long>(b.y1), static_cast<long long>(b.g0), static_cast<long long>(b.g1), b.images(),
        static_cast<long long>(flip::tiled_grad_tiles_y(b)));
  }
  std::printf("\n  ],\n");
  // What ldr_flip's autograd runs on CUDA when it keeps the sensitivities (their bytes within
  // kCudaKeptSensitivitiesBytes, as csrc/ops/autograd.cpp decides): kTiledGrad and kTiledTranspose over the
  // whole batch as one band.
  const flip::BackwardBand k = flip::whole_batch_plan(g, wanted, R).band(g, 0);
  const long long kept_bytes = static_cast<long long>(k.images()) * flip::kResponsePlanesPerImage * n * h * w * elem;
  std::printf(
      "  \"keeps_sensitivities\": %s, \"kept_bytes\": %lld,\n  \"kept_band\": {\"n0\": %lld, \"n1\": %lld, "
      "\"y0\": %lld, \"y1\": %lld, \"g0\": %lld, \"g1\": %lld, \"images\": %d, \"grad_tiles_y\": %lld}\n}\n",
      kept_bytes <= flip::kCudaKeptSensitivitiesBytes ? "true" : "false", kept_bytes, static_cast<long long>(k.n0),
      static_cast<long long>(k.n1), static_cast<long long>(k.y0), static_cast<long long>(k.y1),
      static_cast<long long>(k.g0), static_cast<long long>(k.g1), k.images(),
      static_cast<long long>(flip::tiled_grad_tiles_y(k)));
  return 0;
}
