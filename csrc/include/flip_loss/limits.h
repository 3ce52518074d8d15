// flip_loss/limits.h: the argument limits that every flip op checks (CPU, CUDA and meta kernels,
// and the C++ API in flip_loss.h), and why they are where they are. The Python package states
// the same numbers (flip_loss/constants.py; tests/tooling/test_one_source.py checks them against
// flip_loss._C.limits(), which exports these); docs/api.md explains them ("Limits of the options and errors").
// Dependency-free, so that it can be installed and included anywhere.
#pragma once

#include <cstdint>

namespace flip_loss {

// pixels_per_degree lies in [kMinPpd, kMaxPpd]. Beyond kMaxPpd the filters are thousands of pixels
// wide, which means the caller passed something that is not a pixels-per-degree value; below
// kMinPpd one pixel spans more than 1000 degrees (every ppd below about 0.5 gives the same map,
// and below about 1e-160 the feature filters' Gaussians are 0/0).
constexpr double kMinPpd = 1e-3;
constexpr double kMaxPpd = 10000.0;

// eps lies in [0, kMaxEps]. eps regularises the gradients of two square roots; up to this value
// the map stays in [0, 1] and identical images give at most ~4.6e-4, while larger values change
// the metric itself.
constexpr double kMaxEps = 1e-6;

// An HDR exposure count lies in [kMinExposures, kMaxExposures]; the automatic range of any
// float32 reference needs at most about 152. The count bounds the run time of one call.
constexpr int64_t kMinExposures = 2;
constexpr int64_t kMaxExposures = 256;

}  // namespace flip_loss
