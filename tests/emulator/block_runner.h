// Runs one CUDA block of the kernels' own block code (csrc/flip/cuda/kernel_bodies.h) on the host, the way
// the hardware's semantics allow and with the checks compute-sanitizer makes: every CUDA thread of
// the block is a fiber of its own, a barrier is a real rendezvous (a thread runs until it reaches a
// barrier or exits, and the barrier releases once every thread of the block waits at it), and every
// shared-memory access goes through a shadow that flags
//   * a read or write outside the launch's dynamic shared memory,
//   * a read of a word no thread of the block has written (shared memory starts undefined),
//   * read-after-write, write-after-write and write-after-read between two threads with no barrier
//     between the accesses (races),
// and the scheduler flags barrier divergence: a thread that exits while others wait at a barrier,
// threads waiting at different barriers, or a mix of __syncthreads and __syncthreads_or.
// Test-only (tests/emulator), never installed.
#pragma once

#include <ucontext.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace flip_emulator {

// Run-time settings of the emulator, for the checker's own tests (tests/gpu/test_emulator_checks.py),
// which mutate the kernels without recompiling them: a barrier to leave out (its source line in
// csrc/flip/cuda/kernel_bodies.h; 0: none), a launch of each op call to leave out (its index in the
// launch sequence; -1: none), and the grid limits (0: CUDA's), which small images need to reach
// the kernels' grid-stride loops. `reverse` runs the blocks of each launch and the threads of each
// block in reverse order: a result that changes with it depends on scheduling (two threads or
// blocks writing one global word, or one reading what another writes without a barrier), which
// the kernels promise it never does. `mutant` selects a source mutation in a build of mutated
// sources (0: none; the test suite's mutant build only). `shared_memory_per_block` is the device's
// opt-in shared memory per block (0: an sm_90's), which the ops choose their formulation by, as
// csrc/ops/cuda.cpp does, and which a launch may not exceed: each GPU generation's limit.
struct Settings {
  int skip_barrier_line = 0;
  int64_t skip_launch = -1;
  int64_t max_grid_y = 0, max_grid_z = 0, max_blocks = 0;
  bool reverse = false;
  int mutant = 0;
  int64_t shared_memory_per_block = 0;
};
// The emulated device's shared memory per block: s.shared_memory_per_block, or an sm_90's.
size_t shared_memory_per_block(const Settings& s);
// The settings configure() sets, process-wide (read and written under a lock).
Settings settings();
void set_settings(const Settings& s);
// The settings of the op call running on this thread: a copy of settings() taken when it started
// (emulate.cpp, run), so that a configure() from another thread cannot change a call midway.
const Settings& current();
void begin_call();
// current().mutant, for the mutated sources (tests/emulator/__init__.py, mutant_ops).
int mutant();

class BlockRunner;

// Shared memory as the block code sees it through BlockContext::shared<T>(): a pointer-like
// handle whose reads and writes go through the runner's shadow.
template <class T>
class Shared {
 public:
  class Ref {
   public:
    Ref(BlockRunner* r, int64_t i) : r_(r), i_(i) {}
    operator T() const;
    Ref& operator=(T v);
    Ref& operator=(const Ref& o) { return *this = static_cast<T>(o); }

   private:
    BlockRunner* r_;
    int64_t i_;
  };
  Shared(BlockRunner* r, int64_t off) : r_(r), off_(off) {}
  Shared operator+(int64_t d) const { return Shared(r_, off_ + d); }
  Shared operator-(int64_t d) const { return Shared(r_, off_ - d); }
  Ref operator[](int64_t i) const { return Ref(r_, off_ + i); }

 private:
  BlockRunner* r_;
  int64_t off_;
};

class BlockRunner {
 public:
  // A block of `threads` threads with `smem_bytes` of dynamic shared memory, of kernel `kernel`.
  BlockRunner(int threads, size_t smem_bytes, size_t word_bytes, std::string kernel);
  ~BlockRunner();
  BlockRunner(const BlockRunner&) = delete;
  BlockRunner& operator=(const BlockRunner&) = delete;

  // Runs block (bx, by, bz) of a grid (gx, gy, gz): body(ctx) once per thread, on its fiber.
  void run(int64_t bx, int64_t by, int64_t bz, int64_t gx, int64_t gy, int64_t gz,
           const std::function<void(class BlockContext&)>& body);
  // The first problem found (empty: none) and how many there were.
  const std::string& error() const { return error_; }
  int64_t errors() const { return errors_; }

  // For BlockContext and Shared.
  int threads() const { return threads_; }
  int64_t block(int d) const { return block_[d]; }
  int64_t grid(int d) const { return grid_[d]; }
  bool barrier(int tid, int line, bool is_or, bool pred);
  template <class T>
  T read(int64_t i) {
    T v;
    if (!check(i, false)) return std::numeric_limits<T>::quiet_NaN();
    std::memcpy(&v, data_.data() + i * word_, sizeof(T));
    return v;
  }
  template <class T>
  void write(int64_t i, T v) {
    if (check(i, true)) std::memcpy(data_.data() + i * word_, &v, sizeof(T));
  }

 private:
  enum class State { kReady, kWaiting, kDone };
  enum class Problem {
    kReadOutOfBounds,
    kWriteOutOfBounds,
    kUninitialisedRead,
    kReadAfterWrite,
    kWriteAfterWrite,
    kWriteAfterRead
  };
  struct Fiber {
    ucontext_t ctx;
    State state;
    int line;
    bool is_or, pred, result;
  };
  static void trampoline();
  bool check(int64_t i, bool write);
  void report(Problem what, int tid, int64_t word);
  void fail(const std::string& what);
  std::string where(int tid) const;

  int threads_;
  size_t word_;
  int64_t words_;
  std::string kernel_;
  std::vector<unsigned char> data_;
  // Per shared-memory word: the thread that last wrote it and the barrier epoch of that write (0:
  // never), the thread that last read it in read_epoch (many_readers: more than one did).
  std::vector<int32_t> writer_, reader_;
  std::vector<int64_t> write_epoch_, read_epoch_;
  std::vector<unsigned char> many_readers_;
  int64_t epoch_ = 1;
  int64_t block_[3] = {0, 0, 0}, grid_[3] = {1, 1, 1};
  std::vector<Fiber> fibers_;
  std::unique_ptr<char[]> stacks_;
  ucontext_t scheduler_;
  int current_ = -1;
  const std::function<void(BlockContext&)>* body_ = nullptr;
  std::string error_;
  int64_t errors_ = 0;
};

// The block context of kernel_bodies.h in the emulator: one per fiber.
class BlockContext {
 public:
  BlockContext(BlockRunner* r, int tid) : r_(r), tid_(tid) {}
  int tid() const { return tid_; }
  int threads() const { return r_->threads(); }
  int64_t block_x() const { return r_->block(0); }
  int64_t block_y() const { return r_->block(1); }
  int64_t block_z() const { return r_->block(2); }
  int64_t grid_x() const { return r_->grid(0); }
  int64_t grid_y() const { return r_->grid(1); }
  int64_t grid_z() const { return r_->grid(2); }
  // The barrier's source line comes in through the default argument (GCC and Clang evaluate
  // __builtin_LINE() at the call), which is how a test leaves one particular barrier out.
  void sync(int line = __builtin_LINE()) { r_->barrier(tid_, line, false, false); }
  bool sync_or(bool pred, int line = __builtin_LINE()) { return r_->barrier(tid_, line, true, pred); }
  template <class T>
  Shared<T> shared() const {
    return Shared<T>(r_, 0);
  }

 private:
  BlockRunner* r_;
  int tid_;
};

template <class T>
Shared<T>::Ref::operator T() const {
  return r_->template read<T>(i_);
}
template <class T>
typename Shared<T>::Ref& Shared<T>::Ref::operator=(T v) {
  r_->template write<T>(i_, v);
  return *this;
}

}  // namespace flip_emulator
