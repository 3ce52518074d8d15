#include "emulate.h"

#include <algorithm>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "flip/cuda/kernel_bodies.h"
#include "flip/cuda/op_launches.h"

namespace flip_emulator {

using flip::cuda::Dim3;
using flip::cuda::GridLimits;
using flip::cuda::Kernel;
using flip::cuda::Params;
using flip::cuda::Step;

namespace {

// "" for the kernels that read the radii at run time, "<Rc,Rf>" for those compiled for them.
template <class Rad>
std::string radii_name() {
  if constexpr (std::is_same<Rad, flip::cuda::AnyRadius>::value)
    return "";
  else
    return "<" + std::to_string(Rad::kCsfRadius) + "," + std::to_string(Rad::kFeatureRadius) + ">";
}

// The launcher of op_launches.h on the host: each launch's blocks one after the other, each block on
// a BlockRunner; what a launch on the emulated device (an sm_90, or the shared memory per block
// configure() set) would refuse is refused.
struct HostLauncher {
  GridLimits grid_limits;
  int64_t launches = 0;
  GridLimits limits() const { return grid_limits; }

  template <Kernel K, class Rad, class T>
  void launch(Dim3 grid, int threads, size_t smem, const Params<T>& p, const Step<T>& s) {
    const std::string name = flip::cuda::kernel_name(K) + radii_name<Rad>();
    if (threads < 1 || threads > 1024)
      throw std::runtime_error("flip_emulator: " + name + " launched with " + std::to_string(threads) + " threads");
    if (smem > shared_memory_per_block(current()))
      throw std::runtime_error("flip_emulator: " + name + " launched with " + std::to_string(smem) +
                               " bytes of shared memory, more than the device's " +
                               std::to_string(shared_memory_per_block(current())) + " per block");
    if (grid.y > 65535 || grid.z > 65535)
      throw std::runtime_error("flip_emulator: " + name + " launched with a grid beyond CUDA's limits");
    if (launches++ == current().skip_launch) return;  // the mutation: this launch left out
    BlockRunner runner(threads, smem, sizeof(T), name);
    const std::function<void(BlockContext&)> body = [&](BlockContext& b) { flip::cuda::run_block<K, Rad>(b, p, s); };
    const int64_t blocks = int64_t(grid.x) * grid.y * grid.z;
    for (int64_t k = 0; k < blocks; ++k) {
      const int64_t j = current().reverse ? blocks - 1 - k : k;
      const int64_t x = j % grid.x, y = j / grid.x % grid.y, z = j / (int64_t(grid.x) * grid.y);
      runner.run(x, y, z, grid.x, grid.y, grid.z, body);
      if (runner.errors() != 0) {
        std::ostringstream os;
        os << "flip_emulator: " << runner.error();
        if (runner.errors() > 1) os << " (and " << runner.errors() - 1 << " more problems in this block)";
        throw std::runtime_error(os.str());
      }
    }
  }

  template <class T>
  void fill_nan(T* data, size_t n) {
    std::memset(static_cast<void*>(data), 0xFF, n * sizeof(T));
  }
};

// What a buffer is to the kernels: read only, written only (the op allocated it uninitialised:
// the copy starts as the signalling pattern, so a value no kernel wrote shows), or read and
// written (arrives initialised, as HDR-FLIP's running maximum and accumulated gradients do).
enum class Role { kIn, kOut, kInOut };

// A copy of a buffer with guard zones around it, which start as the signalling pattern (all-ones
// bytes: NaN for floating point; 0xA5 bytes for integers, whose all-ones would be the valid
// index -1) and whose change is a write out of bounds. An input's change is a write to it.
template <class T>
class Guarded {
 public:
  static constexpr int64_t kGuard = 4096;
  static constexpr unsigned char kPattern = std::is_floating_point<T>::value ? 0xFF : 0xA5;
  // A copy of `from` (n values; null: none) as `role` says, written back to it by finish() when
  // the kernels write it.
  Guarded(T* from, int64_t n, Role role, const char* name)
      : from_(from), n_(from != nullptr ? n : 0), role_(role), name_(name), buf_(static_cast<size_t>(n_ + 2 * kGuard)) {
    std::memset(static_cast<void*>(buf_.data()), kPattern, buf_.size() * sizeof(T));
    if (from != nullptr && role != Role::kOut)
      std::memcpy(static_cast<void*>(get()), from, static_cast<size_t>(n_) * sizeof(T));
  }
  // The emulator's own scratch of n values (the signalling pattern).
  Guarded(int64_t n, const char* name) : Guarded(nullptr, 0, Role::kOut, name) {
    n_ = n;
    buf_.assign(static_cast<size_t>(n + 2 * kGuard), T(0));
    std::memset(static_cast<void*>(buf_.data()), kPattern, buf_.size() * sizeof(T));
  }
  T* get() { return buf_.data() + kGuard; }
  void finish() {
    unsigned char pattern[sizeof(T)];
    std::memset(pattern, kPattern, sizeof(T));
    for (int64_t i = 0; i < kGuard; ++i)
      for (const int64_t j : {i, kGuard + n_ + i})
        if (std::memcmp(&buf_[static_cast<size_t>(j)], pattern, sizeof(T)) != 0)
          throw std::runtime_error(std::string("flip_emulator: global-memory write out of bounds of ") + name_ +
                                   (j < kGuard ? " (before it)" : " (after it)"));
    if (from_ == nullptr) return;
    if (role_ == Role::kIn) {
      if (std::memcmp(get(), from_, static_cast<size_t>(n_) * sizeof(T)) != 0)
        throw std::runtime_error(std::string("flip_emulator: a kernel wrote to its input ") + name_);
      return;
    }
    std::memcpy(from_, get(), static_cast<size_t>(n_) * sizeof(T));
  }

 private:
  T* from_;
  int64_t n_;
  Role role_;
  const char* name_;
  std::vector<T> buf_;
};

GridLimits grid_limits() {
  const Settings& s = current();
  GridLimits l;
  if (s.max_grid_y > 0) l.max_y = s.max_grid_y;
  if (s.max_grid_z > 0) l.max_z = s.max_grid_z;
  if (s.max_blocks > 0) l.max_blocks = s.max_blocks;
  return l;
}

}  // namespace

template <class T>
HostTaps<T>::HostTaps(double ppd) {
  values = flip::cuda::pack_taps(*flip::csf_taps<T>(ppd), *flip::feature_taps<T>(ppd), taps);
  if (values.size() > static_cast<size_t>(flip::cuda::KernelTaps<T>::kInlineCapacity)) taps.device = values.data();
}

template <class T>
void run(Sequence seq, Params<T> p, int channels) {
  begin_call();  // this call's settings, whatever configure() does meanwhile
  namespace launches = flip::cuda::launches;
  const flip::Geometry& g = p.g;
  const int64_t hw = g.hw();
  const bool tiled = seq == Sequence::kLdrBackwardTiled || seq == Sequence::kHdrBackwardTiled;
  const bool keep = seq == Sequence::kLdrForwardKeep || seq == Sequence::kLdrForwardKeepTiled;
  const bool kept = seq == Sequence::kLdrBackwardKept || seq == Sequence::kLdrBackwardKeptTiled;
  const bool rows = !tiled && seq != Sequence::kLdrForwardFused && seq != Sequence::kHdrForwardFused &&
                    seq != Sequence::kLdrForwardKeepTiled && seq != Sequence::kLdrBackwardKeptTiled;
  const bool backward = seq == Sequence::kLdrBackward || seq == Sequence::kLdrBackwardTiled ||
                        seq == Sequence::kHdrBackward || seq == Sequence::kHdrBackwardTiled ||
                        seq == Sequence::kCsfBackward || seq == Sequence::kFeatureBackward || kept;
  const int64_t image = g.n * channels * hw, map = g.n * (seq == Sequence::kCsfForward ? 3 : 1) * hw;
  const int64_t grad = g.n * (seq == Sequence::kCsfBackward ? 3 : 1) * hw;
  if (backward && p.g_test == nullptr && p.g_ref == nullptr) return;  // as cuda.cpp: nothing asked, nothing launched
  // HDR-FLIP's map, exposure map and index arrive initialised for the forward's running maximum,
  // its gradients zeroed for the backward's sums; everything else an op allocates uninitialised.
  const bool hdr = seq == Sequence::kHdrForward || seq == Sequence::kHdrForwardFused || seq == Sequence::kHdrBackward ||
                   seq == Sequence::kHdrBackwardTiled;
  const Role written = hdr ? Role::kInOut : Role::kOut;
  Guarded<T> test(const_cast<T*>(p.test), image, Role::kIn, "test");
  Guarded<T> ref(const_cast<T*>(p.ref), image, Role::kIn, "reference");
  Guarded<T> gr(const_cast<T*>(p.grad), grad, Role::kIn, "grad");
  Guarded<T> ex(const_cast<T*>(p.exposures), g.n * p.E, Role::kIn, "exposures");
  Guarded<int64_t> counts(const_cast<int64_t*>(p.counts), g.n, Role::kIn, "counts");
  Guarded<T> out(p.out, map, written, "out");
  Guarded<T> emap(p.emap, g.n * hw, written, "emap");
  Guarded<int32_t> index(p.index, g.n * hw, backward ? Role::kIn : written, "exposure index");
  Guarded<T> g_test(p.g_test, image, written, "g_test");
  Guarded<T> g_ref(p.g_ref, image, written, "g_ref");
  Guarded<T> planes(rows ? g.n * g.images * g.planes() * hw : 0, "planes");
  Guarded<T> gplanes(rows && backward ? g.n * g.images * g.gplanes() * hw : 0, "gradient planes");
  Guarded<T> scratch(tiled ? p.plan.scratch_elems(g) : 0, "scratch");
  Guarded<T> sens(p.sensitivities, keep || kept ? p.plan.scratch_elems(g) : 0, kept ? Role::kIn : Role::kOut,
                  "sensitivities");
  auto set = [](auto& field, auto& guarded) {
    if (field != nullptr) field = guarded.get();
  };
  set(p.test, test);
  set(p.ref, ref);
  set(p.grad, gr);
  set(p.exposures, ex);
  set(p.counts, counts);
  set(p.out, out);
  set(p.emap, emap);
  set(p.index, index);
  set(p.g_test, g_test);
  set(p.g_ref, g_ref);
  set(p.sensitivities, sens);
  if (rows) p.planes = planes.get();
  if (rows && backward) p.gplanes = gplanes.get();
  if (tiled) p.scratch = scratch.get();
  p.nan_scratch = true;  // what FLIP_LOSS_CUDA_DEBUG_NAN_SCRATCH=1 does on the GPU
  HostLauncher l{grid_limits()};
  switch (seq) {
    case Sequence::kLdrForward:
      launches::ldr_flip_forward(l, p);
      break;
    case Sequence::kLdrForwardFused:
      launches::ldr_flip_forward_fused(l, p);
      break;
    case Sequence::kLdrBackward:
      launches::ldr_flip_backward(l, p);
      break;
    case Sequence::kLdrBackwardTiled:
      launches::ldr_flip_backward_tiled(l, p);
      break;
    case Sequence::kLdrForwardKeep:
      launches::ldr_flip_forward_keep(l, p);
      break;
    case Sequence::kLdrForwardKeepTiled:
      launches::ldr_flip_forward_keep_tiled(l, p);
      break;
    case Sequence::kLdrBackwardKept:
      launches::ldr_flip_backward_kept(l, p);
      break;
    case Sequence::kLdrBackwardKeptTiled:
      launches::ldr_flip_backward_kept_tiled(l, p);
      break;
    case Sequence::kHdrForward:
      launches::hdr_flip_forward(l, p);
      break;
    case Sequence::kHdrForwardFused:
      launches::hdr_flip_forward_fused(l, p);
      break;
    case Sequence::kHdrBackward:
      launches::hdr_flip_backward(l, p);
      break;
    case Sequence::kHdrBackwardTiled:
      launches::hdr_flip_backward_tiled(l, p);
      break;
    case Sequence::kCsfForward:
      launches::csf_filter_forward(l, p);
      break;
    case Sequence::kCsfBackward:
      launches::csf_filter_backward(l, p);
      break;
    case Sequence::kFeatureForward:
      launches::feature_difference_forward(l, p);
      break;
    case Sequence::kFeatureBackward:
      launches::feature_difference_backward(l, p);
      break;
  }
  for (auto* b : {&test, &ref, &gr, &ex, &out, &emap, &g_test, &g_ref, &planes, &gplanes, &scratch, &sens}) b->finish();
  counts.finish();
  index.finish();
}

#define FLIP_INSTANTIATE(T)    \
  template struct HostTaps<T>; \
  template void run<T>(Sequence, Params<T>, int);
FLIP_INSTANTIATE(float)
FLIP_INSTANTIATE(double)
#undef FLIP_INSTANTIATE

}  // namespace flip_emulator
