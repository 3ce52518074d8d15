// The CUDA launch checks (csrc/flip/cuda/launch_check.h) on the host: the launch sequences of
// op_launches.h run through CheckedLauncher against a simulated runtime that keeps the CUDA
// runtime's error rules (one error variable per host thread, overwritten by every failing call,
// read and cleared by cudaGetLastError; sticky execution errors that every later call returns).
// Checked: an error left by earlier work is reported as not flip's before anything is launched;
// a failing launch, whichever of a sequence's launches it is, is reported naming that kernel, with
// no later launch queued (so no runtime call of someone else's between two launches can clear it
// first); nothing is left pending. Compiled with g++ and run by tests/gpu/test_launch_check.py; prints "ALL CHECKED" and
// exits 0 when every check holds, else names the first that failed.
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "check.h"
#include "flip/cuda/launch_check.h"
#include "flip/cuda/op_launches.h"

namespace {

using flip::cuda::Dim3;
using flip::cuda::GridLimits;
using flip::cuda::Kernel;
using flip::cuda::Params;
using flip::cuda::Step;

// The errors the simulation uses, with the CUDA runtime's names.
enum class Err { kSuccess, kInvalidConfiguration, kOutOfResources, kMemoryAllocation, kIllegalAddress };

const char* err_name(Err e) {
  switch (e) {
    case Err::kSuccess:
      return "cudaSuccess";
    case Err::kInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case Err::kOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case Err::kMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case Err::kIllegalAddress:
      return "cudaErrorIllegalAddress";
  }
  return "?";
}

// The runtime's per-thread error state.
struct Runtime {
  static thread_local Err last;    // the error variable
  static thread_local Err sticky;  // an execution error: the context is broken for good
  static void fail(Err e) { last = e; }
  static void break_context(Err e) { sticky = last = e; }
  // cudaGetLastError.
  static Err take() {
    const Err e = sticky != Err::kSuccess ? sticky : last;
    last = Err::kSuccess;
    return e;
  }
  static void reset() { last = sticky = Err::kSuccess; }
};
thread_local Err Runtime::last = Err::kSuccess;
thread_local Err Runtime::sticky = Err::kSuccess;

// launch_check.h's error interface on the simulation.
struct SimErrors {
  using Error = Err;
  static Error take() { return Runtime::take(); }
  static bool ok(Error e) { return e == Err::kSuccess; }
  static const char* name(Error e) { return err_name(e); }
  static const char* text(Error e) { return e == Err::kSuccess ? "no error" : "simulated"; }
};

// A launcher that records each launch's kernel and, at launch `fail_at`, fails as the runtime
// would (`fail_with`; an illegal address: an earlier kernel's execution error surfacing at it).
// Before launch `clear_at` a runtime call of someone else's clears the error variable, as the
// caching allocator does when it retries a failed allocation. `capturing`: the stream is capturing.
struct RecordingLauncher {
  std::vector<std::string>* log;
  int fail_at = -1;
  Err fail_with = Err::kOutOfResources;
  int clear_at = -1;
  bool capturing = false;
  GridLimits limits() const { return GridLimits{}; }
  std::string failure_note() const { return capturing ? flip::cuda::kCaptureNote : ""; }
  template <Kernel K, class Rad, class T>
  void launch(Dim3, int, size_t, const Params<T>&, const Step<T>&) {
    const int k = static_cast<int>(log->size());
    if (k == clear_at) Runtime::take();
    log->push_back(flip::cuda::kernel_name(K));
    if (k == fail_at) {
      if (fail_with == Err::kIllegalAddress)
        Runtime::break_context(fail_with);
      else
        Runtime::fail(fail_with);
    }
  }
  template <class T>
  void fill_nan(T*, size_t) {}
};

// Parameters for sequences of many launches: a 2 x 3 x 64 x 80 batch at radius 12, HDR-FLIP with
// 3 exposures, the tiled backward in 4 bands or more (a small scratch budget).
Params<float> params() {
  Params<float> p;
  p.g = flip::Geometry{2, 64, 80, 2, true, true};
  p.taps.rmax = 12;
  p.E = 3;
  p.plan = flip::plan_backward(p.g, 3, p.taps.rmax, sizeof(float), 64 * 1024);
  return p;
}

struct Sequence {
  const char* name;
  void (*run)(flip::cuda::CheckedLauncher<RecordingLauncher, SimErrors>&, const Params<float>&);
};

#define FLIP_SEQUENCE(name)                                                          \
  Sequence {                                                                         \
    #name, [](auto& l, const Params<float>& p) { flip::cuda::launches::name(l, p); } \
  }
const Sequence kSequences[] = {
    FLIP_SEQUENCE(ldr_flip_forward_fused), FLIP_SEQUENCE(ldr_flip_backward), FLIP_SEQUENCE(ldr_flip_backward_tiled),
    FLIP_SEQUENCE(hdr_flip_forward),       FLIP_SEQUENCE(hdr_flip_backward), FLIP_SEQUENCE(hdr_flip_backward_tiled),
    FLIP_SEQUENCE(csf_filter_backward),    FLIP_SEQUENCE(hunt_hyab_forward),
};
#undef FLIP_SEQUENCE

// Runs `seq` through the checks as kernels.cu's entry points do; the exception's message, or ""
// when none was raised.
std::string run(const Sequence& seq, RecordingLauncher inner) {
  const Params<float> p = params();
  try {
    flip::cuda::run_checked<SimErrors>(inner, seq.name, [&](auto& l) { seq.run(l, p); });
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

int main() {
  CHECK(params().plan.count() >= 4);
  int launches_checked = 0;
  for (const Sequence& seq : kSequences) {
    // No error: every launch made, nothing raised, nothing left pending.
    std::vector<std::string> all;
    Runtime::reset();
    CHECK(run(seq, RecordingLauncher{&all}).empty());
    CHECK(!all.empty() && Runtime::last == Err::kSuccess);

    // An error earlier work left unchecked: raised before anything is launched, as not flip's, and
    // taken (a retry runs). A single read after the sequence would have blamed flip for it.
    std::vector<std::string> log;
    Runtime::reset();
    Runtime::fail(Err::kMemoryAllocation);
    std::string message = run(seq, RecordingLauncher{&log});
    CHECK(log.empty());
    CHECK(contains(message, std::string("before flip's ") + seq.name + " launched anything"));
    CHECK(contains(message, "cudaErrorMemoryAllocation") && contains(message, "did not come from this call's"));
    CHECK(Runtime::last == Err::kSuccess);
    CHECK(run(seq, RecordingLauncher{&log}).empty() && log == all);

    // Each launch of the sequence failing in turn: raised naming that kernel, no later launch
    // queued (a runtime call of someone else's before the next launch, which would clear the error
    // for a single read after the sequence, never comes), nothing left pending.
    for (int k = 0; k < static_cast<int>(all.size()); ++k) {
      log.clear();
      Runtime::reset();
      message = run(seq, RecordingLauncher{&log, k, Err::kOutOfResources, k + 1});
      CHECK(static_cast<int>(log.size()) == k + 1);
      CHECK(contains(message, "launching " + all[k] + " (grid "));
      CHECK(contains(message, std::string("of ") + seq.name + " failed: cudaErrorLaunchOutOfResources"));
      CHECK(contains(message, "No later kernel of it was launched") && !contains(message, "graph capture"));
      CHECK(Runtime::last == Err::kSuccess);
      ++launches_checked;
    }

    // A launch failing during a capture says what a lazily loaded kernel needs there.
    log.clear();
    Runtime::reset();
    message = run(seq, RecordingLauncher{&log, 0, Err::kOutOfResources, -1, true});
    CHECK(contains(message, "during a CUDA graph capture") && contains(message, "CUDA_MODULE_LOADING=EAGER"));

    // An execution error of earlier work surfacing at a launch: raised there with the note that
    // it may come from any kernel queued before; sticky, so the next call reports it as pending.
    log.clear();
    Runtime::reset();
    message = run(seq, RecordingLauncher{&log, 0, Err::kIllegalAddress});
    CHECK(log.size() == 1 && contains(message, "cudaErrorIllegalAddress"));
    CHECK(contains(message, "may come from any kernel queued before"));
    log.clear();
    message = run(seq, RecordingLauncher{&log});
    CHECK(log.empty() && contains(message, "pending") && contains(message, "cudaErrorIllegalAddress"));
  }
  CHECK(launches_checked > 50);
  Runtime::reset();
  std::printf("%d launch failures checked\nALL CHECKED\n", launches_checked);
  return 0;
}
