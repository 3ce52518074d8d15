// Scratch planes for the CPU kernels (and the sensitivities that the CPU autograd keeps, see
// csrc/ops/cpu.cpp), borrowed from a small process-wide pool. Fresh allocations of tens to
// hundreds of MB (1080p) cost more in page faults and zeroing than the filters themselves, so the
// pool keeps returned buffers alive and lends the smallest that fits (if not far larger than asked
// for). It keeps as many as were lent at once lately, plus kSpare, and drops the oldest beyond: a
// forward borrows a ring of rows per thread, a forward+backward the sensitivities and gradient
// planes too, and a loop that alternates the two (validation between training steps) must find
// all of them again; a fixed count of 3 faulted in a fresh 1080p buffer at every step of such a
// loop, and at every forward on more threads than that. "Lately" is the last kWindow to
// 2 kWindow loans, so that after a burst (many graphs kept alive at once) the pool shrinks again.
// Buffers start on a cache line (kAlignment), as do the rows of Scratch (banks.h), so that the
// filters' 32-byte loads of a row whose width is a multiple of 16 floats never straddle two lines
// (a plain new[] of this size is only 16-byte aligned, and loads that straddle lines slow the
// filters down; benchmarks/RESULTS.md has the timings).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "../fork_safety.h"

namespace flip {
namespace cpu {

class Workspace {
 public:
  Workspace(size_t bytes) : bytes_(bytes) {
    std::lock_guard<std::mutex> lock(mutex());
    auto& pool = free_list();
    size_t best = pool.size();
    // At most kMaxSlack times the request: a small buffer (say the sensitivities of a small graph
    // that the caller keeps alive) must not hold on to one sized for a large image.
    for (size_t i = 0; i < pool.size(); ++i)
      if (pool[i].second >= bytes && pool[i].second / kMaxSlack <= bytes &&
          (best == pool.size() || pool[i].second < pool[best].second))
        best = i;
    if (best < pool.size()) {
      buf_ = std::move(pool[best].first);
      bytes_ = pool[best].second;
      pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(best));
    } else {
      buf_.reset(new char[bytes + kAlignment]);  // uninitialised on purpose: every element is written before use
    }
    loans().lend();
  }
  ~Workspace() {
    std::lock_guard<std::mutex> lock(mutex());
    auto& pool = free_list();
    Loans& l = loans();
    l.back();
    pool.emplace_back(std::move(buf_), bytes_);
    while (pool.size() > l.recent_peak() + kSpare) pool.erase(pool.begin());  // drop the oldest
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  template <class T>
  T* as() {
    const auto address = reinterpret_cast<uintptr_t>(buf_.get());
    return reinterpret_cast<T*>((address + kAlignment - 1) / kAlignment * kAlignment);
  }

  static constexpr size_t kAlignment = 64;

 private:
  static constexpr size_t kSpare = 2;
  static constexpr size_t kMaxSlack = 4;
  static constexpr size_t kWindow = 64;
  using Entry = std::pair<std::unique_ptr<char[]>, size_t>;

  // How many buffers are lent now, and the most lent at once in this window of kWindow loans and
  // in the one before.
  struct Loans {
    size_t out = 0, loans = 0, peak = 0, previous_peak = 0;
    void lend() {
      if (++loans % kWindow == 0) previous_peak = std::exchange(peak, out);
      peak = std::max(peak, ++out);
    }
    void back() { --out; }
    size_t recent_peak() const { return std::max(peak, previous_peak); }
  };

  // Never destroyed, and released in a forked child (fork_safety.h).
  static std::mutex& mutex() {
    static std::mutex* m = [] {
      auto* lock = new std::mutex();
      ::flip::ForkSafeLocks::add(lock);  // global: the CPU variants wrap flip in their own namespace
      return lock;
    }();
    return *m;
  }
  static std::vector<Entry>& free_list() {
    static std::vector<Entry> pool;
    return pool;
  }
  static Loans& loans() {
    static Loans l;
    return l;
  }
  std::unique_ptr<char[]> buf_;
  size_t bytes_;
};

}  // namespace cpu
}  // namespace flip
