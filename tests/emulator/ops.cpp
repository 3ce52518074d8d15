// torch.ops.flip_emulator: the CUDA kernels run on the CPU, so that tests on machines without a
// GPU check the GPU code against the CPU kernels: the launch sequences of csrc/flip/cuda/op_launches.h
// with every block of every launch running the kernels' own block code (csrc/flip/cuda/kernel_bodies.h)
// one fiber per CUDA thread, barriers and shared memory checked (emulate.h, block_runner.h).
// Test-only and slow: built by the test suite (tests/emulator/__init__.py), never installed. One
// op per launch sequence of csrc/flip/cuda/kernels.h, each with the schema of the flip op it
// emulates (the *_fused ones: the fused forward; *_tiled: the tiled backward) and the same
// argument checks (csrc/ops/checks.h), all made before any filter taps are built; the buffers are
// prepared as csrc/ops/cuda.cpp prepares them. Like the flip ops' kernels, it is written against
// PyTorch's stable C++ ABI, so that it compiles with the same shared headers (csrc/ops/checks.h,
// kernel_tensors.h).
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>

#include "emulate.h"
#include "ops/checks.h"
#include "ops/kernel_tensors.h"

namespace flip_emulator_ops {
namespace {

namespace em = flip_emulator;
using em::Sequence;
using flip::Geometry;
using flip::cuda::Params;
using flip_ops::data;
using flip_ops::Mask;
using flip_ops::MaskArg;
using flip_ops::Pair;
using flip_ops::ScalarType;
using flip_ops::Tensor;
using flip_ops::Triple;

// The parameters every op sets (as cuda.cpp's params()), with the taps kept alive by `taps`.
template <class T>
Params<T> params(const Geometry& g, const em::HostTaps<T>& taps, double eps) {
  Params<T> p;
  p.g = g;
  p.taps = taps.taps;
  p.eps = static_cast<T>(eps);
  p.k = flip::color_consts<T>();
  return p;
}

// The formulations cuda.cpp chooses between (flip::cuda::use_fused_forward, use_tiled_backward).
enum class Formulation { kRows, kFused, kTiled };

// What cuda.cpp refuses or would not choose: a formulation whose shared memory a block of the
// emulated device (configure's shared_memory_per_block; an sm_90 by default) lacks.
template <class T>
void check_fits(const Params<T>& p, Formulation f) {
  const size_t have = em::shared_memory_per_block(em::settings());
  const int R = p.taps.rmax;
  FLIP_CHECK(f != Formulation::kFused || flip::cuda::use_fused_forward<T>(R, have, false),
             "flip_emulator: the fused forward's tiles do not fit the device's ", have,
             " bytes of shared memory per block at this pixels_per_degree");
  FLIP_CHECK(f != Formulation::kTiled || flip::cuda::use_tiled_backward<T>(R, have, false),
             "flip_emulator: the tiled backward's tiles do not fit the device's ", have,
             " bytes of shared memory per block at this pixels_per_degree");
  FLIP_CHECK(f != Formulation::kRows || flip::cuda::row_pass_smem_bytes<T>(R, p.g.planes()) <= have,
             "flip_emulator: pixels_per_degree is too large for the device's ", have,
             " bytes of shared memory per block");
}

Tensor ldr_flip_impl(const Tensor& test, const Tensor& ref, double ppd, const std::string& space, double eps,
                     bool fused) {
  const bool srgb = flip_ops::check_ldr_args(test, ref, ppd, space, eps, flip_ops::kCodesTaken);
  auto t = flip_ops::ldr_values(test), r = flip_ops::ldr_values(ref);
  auto out = flip_ops::empty_as(t, flip_ops::map_shape(t));
  const Geometry g = flip_ops::geometry(t, 2, true, true);
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(g, taps, eps);
    check_fits(p, fused ? Formulation::kFused : Formulation::kRows);
    p.srgb = srgb;
    p.test = data<T>(t);
    p.ref = data<T>(r);
    p.out = data<T>(out);
    em::run(fused ? Sequence::kLdrForwardFused : Sequence::kLdrForward, p, 3);
  });
  return flip_ops::to_dtype(out, flip_ops::map_dtype(test.scalar_type()));
}

Tensor ldr_flip(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps) {
  return ldr_flip_impl(test, ref, ppd, space, eps, false);
}

Tensor ldr_flip_fused(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps) {
  return ldr_flip_impl(test, ref, ppd, space, eps, true);
}

// The tiled backward's bands for the gradients p asks for (cuda.cpp, tiled_backward_scratch).
template <class T>
void plan_tiled(Params<T>& p, int64_t scratch_bytes) {
  const int wanted = (p.g_test != nullptr ? 1 : 0) | (p.g_ref != nullptr ? 2 : 0);
  if (wanted != 0) p.plan = flip::plan_backward(p.g, wanted, p.taps.rmax, sizeof(T), scratch_bytes);
}

// The row-pass backward, or (tiled) the tiled one with that scratch budget.
Pair ldr_flip_backward_impl(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd,
                            const std::string& space, double eps, Mask mask, bool tiled, int64_t scratch_bytes) {
  const bool srgb = flip_ops::check_ldr_args(test, ref, ppd, space, eps);
  flip_ops::check_grad(grad, test, 1);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = flip_ops::contiguous_as(grad, t.scalar_type());
  auto gb = flip_ops::grad_buffers(t, mask);
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(t, 2, true, true), taps, eps);
    check_fits(p, tiled ? Formulation::kTiled : Formulation::kRows);
    p.srgb = srgb;
    p.grad = data<T>(gr);
    p.test = data<T>(t);
    p.ref = data<T>(r);
    p.g_test = flip_ops::ptr_or_null<T>(gb[0]);
    p.g_ref = flip_ops::ptr_or_null<T>(gb[1]);
    if (tiled) plan_tiled(p, scratch_bytes);
    em::run(tiled ? Sequence::kLdrBackwardTiled : Sequence::kLdrBackward, p, 3);
  });
  return flip_ops::cast_back(gb, test, ref);
}

Pair ldr_flip_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, std::string space,
                       double eps, MaskArg mask_arg) {
  return ldr_flip_backward_impl(grad, test, ref, ppd, space, eps, flip_ops::mask_of(mask_arg), false, 0);
}

Pair ldr_flip_backward_tiled(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, std::string space,
                             double eps, MaskArg mask_arg, int64_t scratch_bytes) {
  return ldr_flip_backward_impl(grad, test, ref, ppd, space, eps, flip_ops::mask_of(mask_arg), true, scratch_bytes);
}

// The forward that keeps the sensitivities and the backward from them (cuda.cpp's
// _ldr_flip_with_sensitivities and _ldr_flip_backward_from_sensitivities): tiled, or the row
// passes cuda.cpp falls back to where the tiles do not fit.
Pair ldr_flip_with_sensitivities(const Tensor& test, const Tensor& ref, double ppd, std::string space, double eps,
                                 MaskArg mask_arg, bool tiled) {
  const flip_ops::Mask mask = flip_ops::mask_of(mask_arg);
  const bool srgb = flip_ops::check_ldr_sensitivity_args(test, ref, ppd, space, eps, mask);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto out = flip_ops::empty_as(t, flip_ops::map_shape(t));
  auto sens = flip_ops::empty_as(t, flip_ops::sensitivities_shape(t, mask));
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    const Geometry g = flip_ops::geometry(t, 2, true, true);
    auto p = params<T>(g, taps, eps);
    check_fits(p, tiled ? Formulation::kTiled : Formulation::kRows);
    p.srgb = srgb;
    p.test = data<T>(t);
    p.ref = data<T>(r);
    p.out = data<T>(out);
    p.sensitivities = data<T>(sens);
    p.plan = flip::whole_batch_plan(g, (mask[0] ? 1 : 0) | (mask[1] ? 2 : 0), p.taps.rmax);
    em::run(tiled ? Sequence::kLdrForwardKeepTiled : Sequence::kLdrForwardKeep, p, 3);
  });
  return {flip_ops::to_dtype(out, test.scalar_type()), sens};
}

Pair ldr_flip_backward_from_sensitivities(const Tensor& grad, const Tensor& sensitivities, const Tensor& test,
                                          const Tensor& ref, double ppd, std::string space, MaskArg mask_arg,
                                          bool tiled) {
  const flip_ops::Mask mask = flip_ops::mask_of(mask_arg);
  const bool srgb =
      flip_ops::check_ldr_backward_from_sensitivities_args(grad, sensitivities, test, ref, ppd, space, mask);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = flip_ops::contiguous_as(grad, t.scalar_type());
  auto sens = torch::stable::contiguous(sensitivities);
  auto gb = flip_ops::grad_buffers(t, mask);
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    const Geometry g = flip_ops::geometry(t, 2, true, true);
    auto p = params<T>(g, taps, 0.0);
    check_fits(p, tiled ? Formulation::kTiled : Formulation::kRows);
    p.srgb = srgb;
    p.grad = data<T>(gr);
    p.test = data<T>(t);
    p.ref = data<T>(r);
    p.g_test = flip_ops::ptr_or_null<T>(gb[0]);
    p.g_ref = flip_ops::ptr_or_null<T>(gb[1]);
    p.sensitivities = data<T>(sens);
    p.plan = flip::whole_batch_plan(g, (mask[0] ? 1 : 0) | (mask[1] ? 2 : 0), p.taps.rmax);
    em::run(tiled ? Sequence::kLdrBackwardKeptTiled : Sequence::kLdrBackwardKept, p, 3);
  });
  return flip_ops::cast_back(gb, test, ref);
}

// The tiled backward's bands for a batch of n images of h x w (plan_backward): items, rows,
// buffer_rows, item_bands, row_bands.
Tensor backward_plan(int64_t n, int64_t h, int64_t w, int64_t wanted, double ppd, int64_t elem_bytes,
                     int64_t scratch_bytes) {
  const em::HostTaps<double> taps(ppd);
  const auto p = flip::plan_backward(Geometry{n, h, w, 2, true, true}, static_cast<int>(wanted), taps.taps.rmax,
                                     elem_bytes, scratch_bytes);
  const int64_t fields[] = {p.items, p.rows, p.buffer_rows, p.item_bands, p.row_bands};
  const int64_t count = sizeof(fields) / sizeof(fields[0]);
  auto out = torch::stable::empty(torch::headeronly::IntHeaderOnlyArrayRef(&count, 1), ScalarType::Long, std::nullopt,
                                  torch::stable::Device(torch::headeronly::DeviceType::CPU));
  std::copy(fields, fields + count, data<int64_t>(out));
  return out;
}

// What cuda.cpp chooses for LDR-/HDR-FLIP at ppd in float32 (elem_bytes 4) or float64 (8) on the
// emulated device (flip::cuda::use_fused_forward, use_tiled_backward, check_shared_memory):
// fused forward, tiled backward, row passes fit (else the op is refused), each 0 or 1; then the
// shared memory per block of the fused forward and kTiledGrad, of kTiledTranspose and of the row
// passes.
Tensor plan(double ppd, int64_t elem_bytes) {
  const size_t have = em::shared_memory_per_block(em::settings());
  const int planes = Geometry{1, 1, 1, 2, true, true}.planes();
  int64_t fields[6];
  auto fill = [&](auto zero) {
    using T = decltype(zero);
    const int R = em::HostTaps<T>(ppd).taps.rmax;
    const size_t rows = flip::cuda::row_pass_smem_bytes<T>(R, planes);
    fields[0] = flip::cuda::use_fused_forward<T>(R, have, false);
    fields[1] = flip::cuda::use_tiled_backward<T>(R, have, false);
    fields[2] = rows <= have;
    fields[3] = static_cast<int64_t>(flip::cuda::fused_smem_bytes<T>(R));
    fields[4] = static_cast<int64_t>(flip::cuda::tiled_transpose_smem_bytes<T>(R));
    fields[5] = static_cast<int64_t>(rows);
  };
  FLIP_CHECK(elem_bytes == 4 || elem_bytes == 8, "flip_emulator: elem_bytes must be 4 or 8");
  if (elem_bytes == 4)
    fill(0.0f);
  else
    fill(0.0);
  const int64_t count = 6;
  auto out = torch::stable::empty(torch::headeronly::IntHeaderOnlyArrayRef(&count, 1), ScalarType::Long, std::nullopt,
                                  torch::stable::Device(torch::headeronly::DeviceType::CPU));
  std::copy(fields, fields + count, data<int64_t>(out));
  return out;
}

// Sets the emulator's run-time settings (block_runner.h, Settings) and returns the previous ones,
// in the order of the arguments.
Tensor configure(int64_t skip_barrier_line, int64_t skip_launch, int64_t max_grid_y, int64_t max_grid_z,
                 int64_t max_blocks, bool reverse, int64_t mutant, int64_t shared_memory_per_block) {
  em::Settings s = em::settings();
  const int64_t before[] = {s.skip_barrier_line, s.skip_launch, s.max_grid_y, s.max_grid_z,
                            s.max_blocks,        s.reverse,     s.mutant,     s.shared_memory_per_block};
  s.skip_barrier_line = static_cast<int>(skip_barrier_line);
  s.skip_launch = skip_launch;
  s.max_grid_y = max_grid_y;
  s.max_grid_z = max_grid_z;
  s.max_blocks = max_blocks;
  s.reverse = reverse;
  s.mutant = static_cast<int>(mutant);
  s.shared_memory_per_block = shared_memory_per_block;
  em::set_settings(s);
  const int64_t count = sizeof(before) / sizeof(before[0]);
  auto out = torch::stable::empty(torch::headeronly::IntHeaderOnlyArrayRef(&count, 1), ScalarType::Long, std::nullopt,
                                  torch::stable::Device(torch::headeronly::DeviceType::CPU));
  std::copy(before, before + count, data<int64_t>(out));
  return out;
}

// HDR-FLIP's buffers as cuda.cpp prepares them: the exposures and counts of the op.
template <class T>
void hdr_inputs(Params<T>& p, const Tensor& ex, const Tensor& cn, flip::ToneMapper tm) {
  p.exposures = data<T>(ex);
  p.counts = data<int64_t>(cn);
  p.E = ex.size(1);
  p.tm = tm;
}

Triple hdr_flip_impl(const Tensor& test, const Tensor& ref, const Tensor& exposures, const Tensor& counts, double ppd,
                     const std::string& tone_mapper, double eps, bool fused) {
  const auto tm = flip_ops::check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto ex = flip_ops::contiguous_as(exposures, t.scalar_type());
  // Unlike cuda.cpp (which cannot read them without synchronising; the kernels clamp them), the
  // host checks counts and exposures as the CPU kernels do: the tests reach the C++ check
  // (checks.h) through here.
  auto cn = flip_ops::contiguous_as(counts, ScalarType::Long);
  flip_ops::check_exposure_values_on_host(ex, cn);
  auto out = torch::stable::fill_(flip_ops::empty_as(t, flip_ops::map_shape(t)), 0.0);
  auto emap = torch::stable::fill_(flip_ops::empty_as(t, flip_ops::map_shape(t)), 0.0);
  auto idx = torch::stable::fill_(flip_ops::empty_as(t, flip_ops::map_shape(t), ScalarType::Int), -1.0);
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(t, 2, true, true), taps, eps);
    check_fits(p, fused ? Formulation::kFused : Formulation::kRows);
    p.test = data<T>(t);
    p.ref = data<T>(r);
    hdr_inputs(p, ex, cn, tm);
    p.out = data<T>(out);
    p.emap = data<T>(emap);
    p.index = data<int32_t>(idx);
    em::run(fused ? Sequence::kHdrForwardFused : Sequence::kHdrForward, p, 3);
  });
  return {flip_ops::to_dtype(out, test.scalar_type()), flip_ops::to_dtype(emap, test.scalar_type()), idx};
}

Triple hdr_flip(const Tensor& test, const Tensor& ref, const Tensor& exposures, const Tensor& counts, double ppd,
                std::string tone_mapper, double eps) {
  return hdr_flip_impl(test, ref, exposures, counts, ppd, tone_mapper, eps, false);
}

Triple hdr_flip_fused(const Tensor& test, const Tensor& ref, const Tensor& exposures, const Tensor& counts, double ppd,
                      std::string tone_mapper, double eps) {
  return hdr_flip_impl(test, ref, exposures, counts, ppd, tone_mapper, eps, true);
}

// The row-pass backward, or (tiled) the tiled one with that scratch budget.
Pair hdr_flip_backward_impl(const Tensor& grad, const Tensor& test, const Tensor& ref, const Tensor& exposures,
                            const Tensor& counts, const Tensor& index, double ppd, const std::string& tone_mapper,
                            double eps, Mask mask, bool tiled, int64_t scratch_bytes) {
  const auto tm = flip_ops::check_hdr_args(test, ref, exposures, counts, ppd, tone_mapper, eps);
  flip_ops::check_grad(grad, test, 1);
  flip_ops::check_exposure_index(index, grad);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = flip_ops::contiguous_as(grad, t.scalar_type());
  auto ex = flip_ops::contiguous_as(exposures, t.scalar_type());
  // Unlike cuda.cpp (which cannot read them without synchronising; the kernels clamp them), the
  // host checks counts and exposures as the CPU kernels do: the tests reach the C++ check
  // (checks.h) through here.
  auto cn = flip_ops::contiguous_as(counts, ScalarType::Long);
  flip_ops::check_exposure_values_on_host(ex, cn);
  auto ix = torch::stable::contiguous(index);
  std::array<Tensor, 2> gb = {
      mask[0] ? torch::stable::fill_(torch::stable::empty_like(t), 0.0) : flip_ops::nothing_like(t),
      mask[1] ? torch::stable::fill_(torch::stable::empty_like(t), 0.0) : flip_ops::nothing_like(t)};
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(t, 2, true, true), taps, eps);
    check_fits(p, tiled ? Formulation::kTiled : Formulation::kRows);
    p.grad = data<T>(gr);
    p.test = data<T>(t);
    p.ref = data<T>(r);
    hdr_inputs(p, ex, cn, tm);
    p.index = data<int32_t>(ix);
    p.g_test = flip_ops::ptr_or_null<T>(gb[0]);
    p.g_ref = flip_ops::ptr_or_null<T>(gb[1]);
    if (tiled) plan_tiled(p, scratch_bytes);
    em::run(tiled ? Sequence::kHdrBackwardTiled : Sequence::kHdrBackward, p, 3);
  });
  return flip_ops::cast_back(gb, test, ref);
}

Pair hdr_flip_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, const Tensor& exposures,
                       const Tensor& counts, const Tensor& index, double ppd, std::string tone_mapper, double eps,
                       MaskArg mask_arg) {
  return hdr_flip_backward_impl(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps,
                                flip_ops::mask_of(mask_arg), false, 0);
}

Pair hdr_flip_backward_tiled(const Tensor& grad, const Tensor& test, const Tensor& ref, const Tensor& exposures,
                             const Tensor& counts, const Tensor& index, double ppd, std::string tone_mapper, double eps,
                             MaskArg mask_arg, int64_t scratch_bytes) {
  return hdr_flip_backward_impl(grad, test, ref, exposures, counts, index, ppd, tone_mapper, eps,
                                flip_ops::mask_of(mask_arg), true, scratch_bytes);
}

Tensor csf_filter(const Tensor& opp, double ppd) {
  flip_ops::check_csf_args(opp, ppd);
  auto o = flip_ops::compute_copy(opp);
  auto out = torch::stable::empty_like(o);
  flip_ops::dispatch_compute_dtype(o.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(o, 1, true, false), taps, 0.0);
    check_fits(p, Formulation::kRows);
    p.test = data<T>(o);
    p.out = data<T>(out);
    em::run(Sequence::kCsfForward, p, 3);
  });
  return flip_ops::to_dtype(out, opp.scalar_type());
}

Tensor csf_filter_backward(const Tensor& grad, const Tensor& opp, double ppd) {
  flip_ops::check_csf_args(opp, ppd);
  flip_ops::check_grad(grad, opp, 3);
  auto o = flip_ops::compute_copy(opp);
  auto gr = flip_ops::contiguous_as(grad, o.scalar_type());
  auto out = torch::stable::empty_like(o);
  flip_ops::dispatch_compute_dtype(o.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(o, 1, true, false), taps, 0.0);
    check_fits(p, Formulation::kRows);
    p.grad = data<T>(gr);
    p.test = data<T>(o);
    p.g_test = data<T>(out);
    em::run(Sequence::kCsfBackward, p, 3);
  });
  return flip_ops::to_dtype(out, opp.scalar_type());
}

Tensor feature_difference(const Tensor& test, const Tensor& ref, double ppd, double eps) {
  flip_ops::check_feature_args(test, ref, ppd, eps);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto out = torch::stable::empty_like(t);
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(t, 2, false, true), taps, eps);
    check_fits(p, Formulation::kRows);
    p.test = data<T>(t);
    p.ref = data<T>(r);
    p.out = data<T>(out);
    em::run(Sequence::kFeatureForward, p, 1);
  });
  return flip_ops::to_dtype(out, test.scalar_type());
}

Pair feature_difference_backward(const Tensor& grad, const Tensor& test, const Tensor& ref, double ppd, double eps,
                                 MaskArg mask_arg) {
  const Mask mask = flip_ops::mask_of(mask_arg);
  flip_ops::check_feature_args(test, ref, ppd, eps);
  flip_ops::check_grad(grad, test, 1);
  auto t = flip_ops::compute_copy(test), r = flip_ops::compute_copy(ref);
  auto gr = flip_ops::contiguous_as(grad, t.scalar_type());
  auto gb = flip_ops::grad_buffers(t, mask);
  flip_ops::dispatch_compute_dtype(t.scalar_type(), [&](auto zero) {
    using T = decltype(zero);
    const em::HostTaps<T> taps(ppd);
    auto p = params<T>(flip_ops::geometry(t, 2, false, true), taps, eps);
    check_fits(p, Formulation::kRows);
    p.grad = data<T>(gr);
    p.test = data<T>(t);
    p.ref = data<T>(r);
    p.g_test = flip_ops::ptr_or_null<T>(gb[0]);
    p.g_ref = flip_ops::ptr_or_null<T>(gb[1]);
    em::run(Sequence::kFeatureBackward, p, 1);
  });
  return flip_ops::cast_back(gb, test, ref);
}

}  // namespace
}  // namespace flip_emulator_ops

// The library's name: flip_emulator, or another one for a second build loaded beside it (the
// mutant build, tests/emulator/__init__.py). The indirection expands the name before the
// registration macros paste it.
#ifndef FLIP_EMULATOR_LIBRARY
#define FLIP_EMULATOR_LIBRARY flip_emulator
#endif
#define FLIP_EMULATOR_DEFINE(ns, m) STABLE_TORCH_LIBRARY(ns, m)
#define FLIP_EMULATOR_IMPL(ns, key, m) STABLE_TORCH_LIBRARY_IMPL(ns, key, m)

// The schemas of csrc/ops/schema.cpp (defaults included), so that a test calls an emulated op
// exactly as it calls the flip op.
FLIP_EMULATOR_DEFINE(FLIP_EMULATOR_LIBRARY, m) {
  m.def(
      "ldr_flip(Tensor test, Tensor reference, float pixels_per_degree=67.02064327658225,"
      " str input_space=\"srgb\", float eps=1e-15) -> Tensor");
  m.def(
      "ldr_flip_fused(Tensor test, Tensor reference, float pixels_per_degree=67.02064327658225,"
      " str input_space=\"srgb\", float eps=1e-15) -> Tensor");
  m.def(
      "ldr_flip_backward(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " str input_space, float eps, bool[2] output_mask) -> (Tensor, Tensor)");
  m.def(
      "hdr_flip(Tensor test, Tensor reference, Tensor exposures, Tensor counts, float pixels_per_degree,"
      " str tone_mapper=\"aces\", float eps=1e-15) -> (Tensor, Tensor, Tensor)");
  m.def(
      "hdr_flip_fused(Tensor test, Tensor reference, Tensor exposures, Tensor counts, float pixels_per_degree,"
      " str tone_mapper=\"aces\", float eps=1e-15) -> (Tensor, Tensor, Tensor)");
  m.def(
      "hdr_flip_backward(Tensor grad, Tensor test, Tensor reference, Tensor exposures, Tensor counts,"
      " Tensor exposure_index, float pixels_per_degree, str tone_mapper, float eps, bool[2] output_mask)"
      " -> (Tensor, Tensor)");
  // The tiled backward of the CUDA kernels (the ops above without _tiled are the row passes), with
  // the scratch budget the bands are planned for (default: the kernels' kBackwardScratchBytes).
  m.def(
      "ldr_flip_backward_tiled(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " str input_space, float eps, bool[2] output_mask, int scratch_bytes=33554432) -> (Tensor, Tensor)");
  m.def(
      "hdr_flip_backward_tiled(Tensor grad, Tensor test, Tensor reference, Tensor exposures, Tensor counts,"
      " Tensor exposure_index, float pixels_per_degree, str tone_mapper, float eps, bool[2] output_mask,"
      " int scratch_bytes=33554432) -> (Tensor, Tensor)");
  m.def(
      "ldr_flip_with_sensitivities(Tensor test, Tensor reference, float pixels_per_degree, str input_space,"
      " float eps, bool[2] output_mask, bool tiled=True) -> (Tensor, Tensor)");
  m.def(
      "ldr_flip_backward_from_sensitivities(Tensor grad, Tensor sensitivities, Tensor test, Tensor reference,"
      " float pixels_per_degree, str input_space, bool[2] output_mask, bool tiled=True) -> (Tensor, Tensor)");
  m.def(
      "configure(int skip_barrier_line=0, int skip_launch=-1, int max_grid_y=0, int max_grid_z=0, int max_blocks=0,"
      " bool reverse=False, int mutant=0, int shared_memory_per_block=0) -> Tensor");
  m.def("plan(float pixels_per_degree, int elem_bytes) -> Tensor");
  m.def(
      "backward_plan(int n, int h, int w, int wanted, float pixels_per_degree, int elem_bytes,"
      " int scratch_bytes=33554432) -> Tensor");
  m.def("csf_filter(Tensor opponent, float pixels_per_degree) -> Tensor");
  m.def("csf_filter_backward(Tensor grad, Tensor opponent, float pixels_per_degree) -> Tensor");
  m.def("feature_difference(Tensor test, Tensor reference, float pixels_per_degree, float eps=1e-15) -> Tensor");
  m.def(
      "feature_difference_backward(Tensor grad, Tensor test, Tensor reference, float pixels_per_degree,"
      " float eps, bool[2] output_mask) -> (Tensor, Tensor)");
}

static_assert(flip::kBackwardScratchBytes == 33554432, "update the scratch_bytes defaults of the schemas below");

// backward_plan, configure and plan have no tensor argument to dispatch on.
FLIP_EMULATOR_IMPL(FLIP_EMULATOR_LIBRARY, CompositeExplicitAutograd, m) {
  m.impl("backward_plan", TORCH_BOX(&flip_emulator_ops::backward_plan));
  m.impl("configure", TORCH_BOX(&flip_emulator_ops::configure));
  m.impl("plan", TORCH_BOX(&flip_emulator_ops::plan));
}

FLIP_EMULATOR_IMPL(FLIP_EMULATOR_LIBRARY, CPU, m) {
  using namespace flip_emulator_ops;
  m.impl("ldr_flip", TORCH_BOX(&ldr_flip));
  m.impl("ldr_flip_fused", TORCH_BOX(&ldr_flip_fused));
  m.impl("ldr_flip_backward", TORCH_BOX(&ldr_flip_backward));
  m.impl("hdr_flip", TORCH_BOX(&hdr_flip));
  m.impl("hdr_flip_fused", TORCH_BOX(&hdr_flip_fused));
  m.impl("hdr_flip_backward", TORCH_BOX(&hdr_flip_backward));
  m.impl("ldr_flip_backward_tiled", TORCH_BOX(&ldr_flip_backward_tiled));
  m.impl("hdr_flip_backward_tiled", TORCH_BOX(&hdr_flip_backward_tiled));
  m.impl("ldr_flip_with_sensitivities", TORCH_BOX(&ldr_flip_with_sensitivities));
  m.impl("ldr_flip_backward_from_sensitivities", TORCH_BOX(&ldr_flip_backward_from_sensitivities));
  m.impl("csf_filter", TORCH_BOX(&csf_filter));
  m.impl("csf_filter_backward", TORCH_BOX(&csf_filter_backward));
  m.impl("feature_difference", TORCH_BOX(&feature_difference));
  m.impl("feature_difference_backward", TORCH_BOX(&feature_difference_backward));
}
