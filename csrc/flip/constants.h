// Published FLIP constants (Andersson et al. 2020; docs/algorithm.md §3). Framework-free.
#pragma once

// Always inlined on the host: these are called with loop indices in the per-pixel code, and a call
// left there (GCC's inliner once left `white` as a call in the baseline level's kernels, when the
// file had grown) keeps the loop from being vectorised.
#if defined(__CUDACC__)
#define FLIP_CONSTFN __host__ __device__ constexpr
#elif defined(__GNUC__)
#define FLIP_CONSTFN constexpr inline __attribute__((always_inline))
#else
#define FLIP_CONSTFN constexpr
#endif

namespace flip {

// The colour matrices as functions, so that device code can use them (constexpr arrays cannot be
// indexed there). Linear sRGB (D65) -> CIE XYZ: the exact rationals of the reference
// implementation, row i's numerators over one denominator; XYZ -> linear sRGB: their exact inverse
// (the published 9-decimal table rounds it; both give the same float32 values); white: XYZ of RGB
// (1, 1, 1), i.e. the row sums (0.950428545, 1, 1.088900371), each rounded once (a row's numerators
// add exactly), as flip_loss/oracle.py computes them from the rationals.
FLIP_CONSTFN double pick3(int j, double a, double b, double c) { return j == 0 ? a : (j == 1 ? b : c); }
FLIP_CONSTFN double rgb_to_xyz_num(int i, int j) {
  return i == 0   ? pick3(j, 10135552.0, 8788810.0, 4435075.0)
         : i == 1 ? pick3(j, 2613072.0, 8788810.0, 887015.0)
                  : pick3(j, 1425312.0, 8788810.0, 70074185.0);
}
FLIP_CONSTFN double rgb_to_xyz_den(int i) { return pick3(i, 24577794.0, 12288897.0, 73733382.0); }
FLIP_CONSTFN double rgb_to_xyz_m(int i, int j) { return rgb_to_xyz_num(i, j) / rgb_to_xyz_den(i); }
FLIP_CONSTFN double xyz_to_rgb_m(int i, int j) {
  return i == 0   ? pick3(j, 3.2410032329763587, -1.5373989694887855, -0.4986158819963629)
         : i == 1 ? pick3(j, -0.9692242522025166, 1.875929983695176, 0.041554226340084724)
                  : pick3(j, 0.055639419851975444, -0.20401120612390997, 1.0571489771875335);
}
FLIP_CONSTFN double white(int i) {
  return (rgb_to_xyz_num(i, 0) + rgb_to_xyz_num(i, 1) + rgb_to_xyz_num(i, 2)) / rgb_to_xyz_den(i);
}
FLIP_CONSTFN double inv_white(int i) { return 1.0 / white(i); }

constexpr double kQc = 0.7;    // exponent on the HyAB colour difference
constexpr double kPc = 0.4;    // knee position as a fraction of cmax
constexpr double kPt = 0.95;   // value at the knee
constexpr double kGw = 0.082;  // feature detector peak-to-trough width (degrees)
constexpr double kQf = 0.5;    // exponent on the feature difference

// Contrast sensitivity: per channel (achromatic, red-green, blue-yellow) two Gaussians a*sqrt(pi/b).
constexpr double kCsfA1[3] = {1.0, 1.0, 34.1};
constexpr double kCsfB1[3] = {0.0047, 0.0053, 0.04};
constexpr double kCsfA2[3] = {0.0, 0.0, 13.5};
constexpr double kCsfB2[3] = {1e-5, 1e-5, 0.025};
constexpr double kCsfBMax = 0.04;

constexpr double kPi = 3.14159265358979323846;

// Lab: delta = 6/29.
constexpr double kLabDelta3 = 216.0 / 24389.0;  // delta^3
constexpr double kLabLinSlope = 841.0 / 108.0;  // 1 / (3 delta^2)
constexpr double kLabLinOffset = 4.0 / 29.0;

constexpr double kSrgbKnee = 0.04045;

}  // namespace flip
