#include "block_runner.h"

#include <mutex>
#include <sstream>

#include "flip/cuda/launch_params.h"

namespace flip_emulator {

namespace {
// Each fiber's stack. The block code keeps a few small arrays per thread; this leaves ample room.
constexpr size_t kStackBytes = 256 * 1024;
thread_local BlockRunner* running = nullptr;
}  // namespace

namespace {
std::mutex settings_mutex;
Settings global_settings;
thread_local Settings call_settings;
}  // namespace

Settings settings() {
  std::lock_guard<std::mutex> lock(settings_mutex);
  return global_settings;
}

void set_settings(const Settings& s) {
  std::lock_guard<std::mutex> lock(settings_mutex);
  global_settings = s;
}

const Settings& current() { return call_settings; }

void begin_call() { call_settings = settings(); }

int mutant() { return call_settings.mutant; }

size_t shared_memory_per_block(const Settings& s) {
  return s.shared_memory_per_block > 0 ? static_cast<size_t>(s.shared_memory_per_block)
                                       : flip::cuda::kSm90SharedMemoryPerBlock;
}

BlockRunner::BlockRunner(int threads, size_t smem_bytes, size_t word_bytes, std::string kernel)
    : threads_(threads),
      word_(word_bytes),
      words_(static_cast<int64_t>(smem_bytes / word_bytes)),
      kernel_(std::move(kernel)),
      data_(smem_bytes),
      writer_(words_),
      reader_(words_),
      write_epoch_(words_),
      read_epoch_(words_),
      many_readers_(words_),
      fibers_(threads),
      stacks_(new char[kStackBytes * threads]) {}

BlockRunner::~BlockRunner() = default;

void BlockRunner::trampoline() {
  BlockRunner* r = running;
  const int tid = r->current_;
  BlockContext ctx(r, tid);
  (*r->body_)(ctx);
  r->fibers_[tid].state = State::kDone;
  // Returning resumes uc_link, the scheduler.
}

std::string BlockRunner::where(int tid) const {
  std::ostringstream os;
  os << "block (" << block_[0] << ", " << block_[1] << ", " << block_[2] << ") thread " << tid;
  return os.str();
}

void BlockRunner::fail(const std::string& what) {
  if (errors_++ == 0) error_ = kernel_ + ": " + what;
}

bool BlockRunner::check(int64_t i, bool write) {
  const int t = current_;
  if (i < 0 || i >= words_) {
    report(write ? Problem::kWriteOutOfBounds : Problem::kReadOutOfBounds, t, i);
    return false;
  }
  const size_t k = static_cast<size_t>(i);
  if (write) {
    if (write_epoch_[k] == epoch_ && writer_[k] != t)
      report(Problem::kWriteAfterWrite, t, i);
    else if (read_epoch_[k] == epoch_ && (many_readers_[k] || reader_[k] != t))
      report(Problem::kWriteAfterRead, t, i);
    writer_[k] = t;
    write_epoch_[k] = epoch_;
  } else {
    if (write_epoch_[k] == 0)
      report(Problem::kUninitialisedRead, t, i);
    else if (write_epoch_[k] == epoch_ && writer_[k] != t)
      report(Problem::kReadAfterWrite, t, i);
    if (read_epoch_[k] != epoch_) {
      read_epoch_[k] = epoch_;
      reader_[k] = t;
      many_readers_[k] = 0;
    } else if (reader_[k] != t) {
      many_readers_[k] = 1;
    }
  }
  return true;
}

void BlockRunner::report(Problem what, int t, int64_t i) {
  if (errors_ > 0) {
    ++errors_;
    return;
  }
  const size_t k = i >= 0 && i < words_ ? static_cast<size_t>(i) : 0;
  std::ostringstream os;
  switch (what) {
    case Problem::kReadOutOfBounds:
    case Problem::kWriteOutOfBounds:
      os << "shared-memory " << (what == Problem::kWriteOutOfBounds ? "write" : "read")
         << " out of bounds: " << where(t) << ", word " << i << " of " << words_;
      break;
    case Problem::kWriteAfterWrite:
      os << "shared-memory race (write after write): " << where(t) << " writes word " << i << ", written by thread "
         << writer_[k] << " since the last barrier";
      break;
    case Problem::kWriteAfterRead:
      os << "shared-memory race (write after read): " << where(t) << " writes word " << i << ", read by thread "
         << reader_[k] << (many_readers_[k] ? " and others" : "") << " since the last barrier";
      break;
    case Problem::kUninitialisedRead:
      os << "uninitialised shared-memory read: " << where(t) << " reads word " << i
         << ", which no thread of the block has written";
      break;
    case Problem::kReadAfterWrite:
      os << "shared-memory race (read after write): " << where(t) << " reads word " << i << ", written by thread "
         << writer_[k] << " since the last barrier";
      break;
  }
  fail(os.str());
}

bool BlockRunner::barrier(int tid, int line, bool is_or, bool pred) {
  if (line == current().skip_barrier_line) return pred;  // the mutation: this barrier left out
  Fiber& f = fibers_[tid];
  f.state = State::kWaiting;
  f.line = line;
  f.is_or = is_or;
  f.pred = pred;
  swapcontext(&f.ctx, &scheduler_);
  return f.result;
}

void BlockRunner::run(int64_t bx, int64_t by, int64_t bz, int64_t gx, int64_t gy, int64_t gz,
                      const std::function<void(BlockContext&)>& body) {
  block_[0] = bx, block_[1] = by, block_[2] = bz;
  grid_[0] = gx, grid_[1] = gy, grid_[2] = gz;
  body_ = &body;
  // A block's shared memory starts undefined: all-ones bytes (NaN) and no word written.
  std::fill(data_.begin(), data_.end(), 0xFF);
  std::fill(write_epoch_.begin(), write_epoch_.end(), 0);
  std::fill(read_epoch_.begin(), read_epoch_.end(), 0);
  epoch_ = 1;
  BlockRunner* outer = running;
  running = this;
  for (int t = 0; t < threads_; ++t) {
    Fiber& f = fibers_[t];
    f.state = State::kReady;
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks_.get() + kStackBytes * t;
    f.ctx.uc_stack.ss_size = kStackBytes;
    f.ctx.uc_link = &scheduler_;
    makecontext(&f.ctx, &BlockRunner::trampoline, 0);
  }
  for (;;) {
    for (int k = 0; k < threads_; ++k) {
      const int t = current().reverse ? threads_ - 1 - k : k;
      if (fibers_[t].state != State::kReady) continue;
      current_ = t;
      swapcontext(&scheduler_, &fibers_[t].ctx);
    }
    int waiting = -1, done = -1;
    for (int t = 0; t < threads_; ++t) {
      if (fibers_[t].state == State::kWaiting && waiting < 0) waiting = t;
      if (fibers_[t].state == State::kDone && done < 0) done = t;
    }
    if (waiting < 0) break;  // every thread has exited
    const Fiber& w = fibers_[waiting];
    std::ostringstream os;
    if (done >= 0) {
      os << "barrier divergence: " << where(waiting) << " waits at the barrier of kernel_bodies.h line " << w.line
         << ", thread " << done << " has exited";
    } else {
      for (int t = 0; t < threads_; ++t)
        if (fibers_[t].line != w.line || fibers_[t].is_or != w.is_or) {
          os << "barrier divergence: " << where(waiting) << " waits at the barrier of kernel_bodies.h line " << w.line
             << ", thread " << t << " at line " << fibers_[t].line;
          break;
        }
    }
    if (!os.str().empty()) {
      fail(os.str());
      break;  // the block cannot go on; its fibers are abandoned
    }
    bool any = false;
    for (const Fiber& f : fibers_) any = any || f.pred;
    for (Fiber& f : fibers_) {
      f.result = w.is_or ? any : false;
      f.state = State::kReady;
    }
    ++epoch_;
  }
  running = outer;
}

}  // namespace flip_emulator
