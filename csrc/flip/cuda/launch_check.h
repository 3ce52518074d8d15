// The launch checks of the CUDA kernels, over an error interface so that the host can test them
// (tests/cpp/launch_check.cpp runs the launch sequences of op_launches.h through them against a
// simulated runtime); kernels.cu instantiates them with the CUDA runtime's (CudaErrors).
//
// The CUDA runtime keeps one error variable per host thread: every failing call, a kernel launch
// with a bad configuration included, overwrites it, and cudaGetLastError reads and clears it. A
// single read after all of an op's launches, as C10_CUDA_KERNEL_LAUNCH_CHECK does after each of
// PyTorch's own, would blame flip for an error that earlier, unchecked work of the thread left
// there, and could lose a launch error of flip's to a later runtime call that clears the variable
// (the caching allocator does when it retries a failed allocation). So:
// * before an op's first launch the variable is read (and so cleared): an error there did not come
//   from this call's launches and is raised saying so, before anything is queued: the work that left it may not have run,
//   and its outputs, perhaps this op's inputs, not been written;
// * after every launch it is read again: an error there belongs to that launch and is raised
//   naming the kernel and its configuration, and no later launch of the sequence is queued.
// An execution error (an illegal address, a device-side assertion) is asynchronous and sticky: it
// surfaces at whatever call comes next, from any earlier kernel on the device, and every later call
// returns it; the messages say so. Framework-free, host-compilable.
#pragma once

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

#include "launch_params.h"

namespace flip {
namespace cuda {

// Where an asynchronous error may come from, as every message says it.
inline constexpr const char* kAsynchronousErrorNote =
    "an execution error (an illegal memory access, a device-side assertion) is reported "
    "asynchronously, by whichever CUDA call comes next, and may come from any kernel queued before; "
    "CUDA_LAUNCH_BLOCKING=1 reports it at the kernel that caused it";

// The message for an error found before an op's first launch (`sequence`: the launch sequence).
inline std::string pending_error_message(const char* sequence, const char* name, const char* text) {
  std::ostringstream os;
  os << "flip: a CUDA error was pending on this thread before flip's " << sequence << " launched anything: " << name
     << " (" << text << "). Earlier CUDA work on this thread left it unchecked (it did not come from this call's "
     << "launches; an execution error may come from any earlier kernel, flip's included), and that work may "
     << "not have run (its outputs, perhaps this call's inputs, unwritten). Nothing was launched. Note: "
     << kAsynchronousErrorNote << ".";
  return os.str();
}

// What a launch that failed during a CUDA graph capture adds. With lazy loading (the default since
// CUDA 12.2, CUDA_MODULE_LOADING=LAZY) a kernel is loaded at its first launch, and a driver older
// than CUDA 12.3 cannot load one during a capture: the first call of a flip op inside a capture
// then fails there.
inline constexpr const char* kCaptureNote =
    " The launch came during a CUDA graph capture: a driver older than CUDA 12.3 cannot load a kernel "
    "during one (lazy loading, CUDA_MODULE_LOADING=LAZY, the default), so call the op once before "
    "capturing (a warm-up) or set CUDA_MODULE_LOADING=EAGER.";

// The message for an error found right after launching `kernel` of `sequence`; `note`: what the
// launcher adds (kCaptureNote during a capture, else nothing).
inline std::string launch_error_message(const char* sequence, const char* kernel, Dim3 grid, int threads, size_t smem,
                                        const char* name, const char* text, const std::string& note) {
  std::ostringstream os;
  os << "flip: launching " << kernel << " (grid " << grid.x << " x " << grid.y << " x " << grid.z << ", " << threads
     << " threads, " << smem << " bytes of dynamic shared memory) of " << sequence << " failed: " << name << " ("
     << text << "). No later kernel of it was launched." << note << " Note: " << kAsynchronousErrorNote << ".";
  return os.str();
}

// A launcher of op_launches.h (L) with the checks above, for an error interface E:
//   using Error = ...;  static Error take();   (read and clear the thread's error: cudaGetLastError)
//   static bool ok(Error);  static const char* name(Error);  static const char* text(Error);
// L also provides std::string failure_note() const: what a failed launch's message adds.
template <class L, class E>
struct CheckedLauncher {
  L inner;
  const char* sequence;

  GridLimits limits() const { return inner.limits(); }

  // Before the first launch of the sequence.
  void before_launches() {
    const auto e = E::take();
    if (!E::ok(e)) throw std::runtime_error(pending_error_message(sequence, E::name(e), E::text(e)));
  }

  template <Kernel K, class Rad, class T>
  void launch(Dim3 grid, int threads, size_t smem, const Params<T>& p, const Step<T>& s) {
    inner.template launch<K, Rad>(grid, threads, smem, p, s);
    const auto e = E::take();
    if (!E::ok(e))
      throw std::runtime_error(launch_error_message(sequence, kernel_name(K), grid, threads, smem, E::name(e),
                                                    E::text(e), inner.failure_note()));
  }

  // The launcher's own runtime calls (a memset) check and clear their errors themselves.
  template <class T>
  void fill_nan(T* data, size_t n) {
    inner.fill_nan(data, n);
  }
};

// Runs launch sequence `run` (a function of op_launches.h) on launcher `inner` with the checks
// above.
template <class E, class L, class Run>
void run_checked(L inner, const char* sequence, Run run) {
  CheckedLauncher<L, E> l{inner, sequence};
  l.before_launches();
  run(l);
}

}  // namespace cuda
}  // namespace flip
