// Host emulation of the CUDA kernels: the launch sequences of csrc/flip/cuda/op_launches.h with a
// launcher that runs every block of every launch through the kernels' own block code
// (csrc/flip/cuda/kernel_bodies.h) on a BlockRunner (block_runner.h: one fiber per CUDA thread, real
// barriers, shared memory checked for races). Slow; it exists so that CPU-only CI checks the GPU
// code, its barriers and its index math, against the CPU kernels. Test-only: built by the test
// suite (tests/emulator/__init__.py), never part of the shipped libraries.
#pragma once

#include <memory>
#include <vector>

#include "block_runner.h"
#include "flip/cuda/launch_params.h"

namespace flip_emulator {

// The launch sequences the emulator runs (each kernels.h launcher but hunt_hyab's).
enum class Sequence {
  kLdrForward,  // row passes
  kLdrForwardFused,
  kLdrBackward,  // row passes
  kLdrBackwardTiled,
  kLdrForwardKeep,  // row passes; the forward that keeps the sensitivities
  kLdrForwardKeepTiled,
  kLdrBackwardKept,  // row passes; the backward from them
  kLdrBackwardKeptTiled,
  kHdrForward,
  kHdrForwardFused,
  kHdrBackward,
  kHdrBackwardTiled,
  kCsfForward,
  kCsfBackward,
  kFeatureForward,
  kFeatureBackward,
};

// The taps of ppd as a launch carries them (flip::cuda::pack_taps, as csrc/ops/cuda.cpp packs
// them); taps too large to travel by value stay in `values`, which taps.device points at.
template <class T>
struct HostTaps {
  flip::cuda::KernelTaps<T> taps;
  std::vector<T> values;
  explicit HostTaps(double ppd);
};

// Runs sequence `seq` on the host buffers in p (filled as csrc/ops/cuda.cpp fills them, the tiled
// backward's plan included; planes, gplanes and scratch left null: the emulator allocates them,
// filled with NaN). `channels` is the
// channel count of test/ref and of the gradients (3, or 1 for feature_difference). Each buffer is
// copied into one with guard zones on both sides, whose change after the launches reports a write
// out of bounds (and whose NaN a read out of bounds brings into the results). Throws
// std::runtime_error with what the checks found.
template <class T>
void run(Sequence seq, flip::cuda::Params<T> p, int channels);

}  // namespace flip_emulator
