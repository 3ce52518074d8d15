// CSF and feature-detector taps for a given pixels-per-degree (docs/algorithm.md §4.4, §4.10, §7.11).
// Built in double once per (ppd, type) and cached; framework-free.
#pragma once

#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "bounded_cache.h"
#include "constants.h"
#include "plane_counts.h"

namespace flip {

// How a filter's taps are evaluated. The feature detectors' derivative filters sum to zero, but as a
// plain sum of 2r + 1 products their response to a constant neighbourhood is a rounding residue
// (about 1e-7 of the signal in float32), not 0, and the square root of the feature difference
// (q_f = 1/2) turns that residue into gradients of pure noise in flat regions. Evaluated as
// differences of samples they are exactly 0 there, and on a ramp they only see its own rounding:
//   kPlain    sum_k w[k] x[k]
//   kOdd      antisymmetric taps (w[-i] = -w[i], w[0] = 0): sum_{i>0} w[-i] (x[-i] - x[i])
//   kCentred  symmetric taps summing to 0 (w[0] = -2 sum_{i>0} w[i]):
//             sum_{i>0} w[i] ((x[i] - x[0]) + (x[-i] - x[0]))
// In exact arithmetic each form is the correlation with the stored taps (kCentred: with the centre
// tap taken as exactly -2 sum_{i>0} w[i]; the stored, rounded one is never multiplied), so the
// transposed filters, the same form on the mirrored samples plus the clamp-to-edge folds, remain
// its exact transpose.
enum class Form { kPlain, kOdd, kCentred };

// One 1-D correlation filter with 2r+1 taps w[k + r], k in [-r, r], plus the tap sums that a
// clamp-to-edge border folds onto the first/last sample (used by the transposed filter):
// left[i] = sum_{k < -i} w[k] and right[d] = sum_{k > d} w[k], for i, d in [0, r).
template <class T>
struct Filter1D {
  int radius = 0;
  std::vector<T> w, left, right;
};

template <class T>
struct CsfTaps {
  Filter1D<T> y, cx, cz1, cz2;  // achromatic, red-green, and the two blue-yellow Gaussians
};
static_assert(sizeof(CsfTaps<float>) == kCsfFilters * sizeof(Filter1D<float>), "one member per CSF filter");

// g is evaluated in Form::kPlain, dg in Form::kOdd and ddg in Form::kCentred (see build_feature_taps).
template <class T>
struct FeatureTaps {
  Filter1D<T> g, dg, ddg;  // Gaussian, first and second derivative (lobe-normalised)
};
static_assert(sizeof(FeatureTaps<float>) == kFeatureFilters * sizeof(Filter1D<float>), "one member per feature filter");

inline int csf_radius(double ppd) {
  return static_cast<int>(std::ceil(3.0 * std::sqrt(kCsfBMax / (2.0 * kPi * kPi)) * ppd));
}

inline double feature_sigma(double ppd) { return 0.5 * kGw * ppd; }
inline int feature_radius(double ppd) { return static_cast<int>(std::ceil(3.0 * feature_sigma(ppd))); }

template <class T>
Filter1D<T> make_filter(const std::vector<double>& w) {
  Filter1D<T> f;
  f.radius = static_cast<int>(w.size() / 2);
  const int r = f.radius;
  for (double v : w) f.w.push_back(static_cast<T>(v));
  f.left.assign(r, T(0));
  f.right.assign(r, T(0));
  for (int i = 0; i < r; ++i) {
    double sl = 0, sr = 0;
    for (int k = -r; k < -i; ++k) sl += w[k + r];
    for (int k = i + 1; k <= r; ++k) sr += w[k + r];
    f.left[i] = static_cast<T>(sl);
    f.right[i] = static_cast<T>(sr);
  }
  return f;
}

// The taps made exactly (anti)symmetric in double, as `form` requires: each mirrored pair takes the
// mean of its two magnitudes (they differ only by the rounding of the lobe sums) and a kCentred
// filter's centre balances the rest, so that the kernel sums to exactly zero.
inline std::vector<double> with_symmetry(const std::vector<double>& w, Form form) {
  if (form == Form::kPlain) return w;
  const int r = static_cast<int>(w.size() / 2);
  std::vector<double> s(w.size());
  double side = 0;
  for (int i = 1; i <= r; ++i) {
    const double v = form == Form::kOdd ? 0.5 * (w[r - i] - w[r + i]) : 0.5 * (w[r - i] + w[r + i]);
    s[r - i] = v;
    s[r + i] = form == Form::kOdd ? -v : v;
    side += v;
  }
  s[r] = form == Form::kOdd ? 0.0 : -2.0 * side;
  return s;
}

inline std::vector<double> scaled(std::vector<double> w, double s) {
  for (double& v : w) v = s != 0 ? v / s : 0.0;
  return w;
}

template <class T>
CsfTaps<T> build_csf_taps(double ppd) {
  const int r = csf_radius(ppd);
  auto gauss = [&](double amp, double b) {
    std::vector<double> w(2 * r + 1);
    for (int i = -r; i <= r; ++i) {
      double x = i / ppd;
      w[i + r] = amp * std::exp(-kPi * kPi * x * x / b);
    }
    return w;
  };
  auto sum = [](const std::vector<double>& w) {
    double s = 0;
    for (double v : w) s += v;
    return s;
  };
  CsfTaps<T> t;
  auto wy = gauss(kCsfA1[0] * std::sqrt(kPi / kCsfB1[0]), kCsfB1[0]);
  auto wx = gauss(kCsfA1[1] * std::sqrt(kPi / kCsfB1[1]), kCsfB1[1]);
  t.y = make_filter<T>(scaled(wy, sum(wy)));
  t.cx = make_filter<T>(scaled(wx, sum(wx)));
  // Blue-yellow: a sum of two Gaussians, each separated with square-root amplitudes and both
  // divided by one factor so that the 2-D kernel sums to 1.
  auto w1 = gauss(std::sqrt(kCsfA1[2] * std::sqrt(kPi / kCsfB1[2])), kCsfB1[2]);
  auto w2 = gauss(std::sqrt(kCsfA2[2] * std::sqrt(kPi / kCsfB2[2])), kCsfB2[2]);
  double m = std::sqrt(sum(w1) * sum(w1) + sum(w2) * sum(w2));
  t.cz1 = make_filter<T>(scaled(w1, m));
  t.cz2 = make_filter<T>(scaled(w2, m));
  return t;
}

template <class T>
FeatureTaps<T> build_feature_taps(double ppd) {
  const double sigma = feature_sigma(ppd);
  const int r = feature_radius(ppd);
  std::vector<double> g(2 * r + 1), dg(2 * r + 1), ddg(2 * r + 1);
  double sg = 0;
  for (int k = -r; k <= r; ++k) {
    double gk = std::exp(-double(k) * k / (2 * sigma * sigma));
    g[k + r] = gk;
    dg[k + r] = -k * gk;
    ddg[k + r] = (double(k) * k / (sigma * sigma) - 1.0) * gk;
    sg += gk;
  }
  // Positive and negative lobes normalised separately to +1 and -1.
  auto lobes = [](std::vector<double> w) {
    double pos = 0, neg = 0;
    for (double v : w) (v > 0 ? pos : neg) += v;
    for (double& v : w) v = v > 0 ? (pos > 0 ? v / pos : 0.0) : (neg < 0 ? v / -neg : 0.0);
    return w;
  };
  FeatureTaps<T> t;
  t.g = make_filter<T>(scaled(g, sg));
  t.dg = make_filter<T>(with_symmetry(lobes(dg), Form::kOdd));
  t.ddg = make_filter<T>(with_symmetry(lobes(ddg), Form::kCentred));
  return t;
}

// Taps are rebuilt only when a new pixels-per-degree value is seen; at most kTapCacheEntries per
// bank and dtype are kept (bounded_cache.h), so a caller that sweeps ppd keeps bounded memory.
template <class Taps, class Build>
std::shared_ptr<const Taps> cached_taps(double ppd, Build build) {
  static BoundedCache<double, Taps> cache(kTapCacheEntries);
  return cache.get(ppd, [&] { return build(ppd); });
}

template <class T>
std::shared_ptr<const CsfTaps<T>> csf_taps(double ppd) {
  return cached_taps<CsfTaps<T>>(ppd, build_csf_taps<T>);
}

template <class T>
std::shared_ptr<const FeatureTaps<T>> feature_taps(double ppd) {
  return cached_taps<FeatureTaps<T>>(ppd, build_feature_taps<T>);
}

}  // namespace flip
