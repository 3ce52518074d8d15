// Scratch planes for the CPU kernels (and the sensitivities that the CPU autograd keeps, see
// csrc/ops/cpu.cpp), borrowed from a small process-wide pool. Fresh allocations of tens to
// hundreds of MB (1080p) cost more in page faults and zeroing than the filters themselves, so the
// pool keeps the last few buffers alive (at most kKeep of them) and lends the smallest that fits
// (if not far larger than asked for). Buffers start on a cache line (kAlignment), as do the rows
// of Scratch (banks.h), so that the filters' 32-byte loads of a row whose width is a multiple of
// 16 floats never straddle two lines (a plain new[] of this size is only 16-byte aligned, and
// loads that straddle lines slow the filters down; benchmarks/RESULTS.md has the timings).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

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
      return;
    }
    buf_.reset(new char[bytes + kAlignment]);  // uninitialised on purpose: every element is written before use
  }
  ~Workspace() {
    std::lock_guard<std::mutex> lock(mutex());
    auto& pool = free_list();
    pool.emplace_back(std::move(buf_), bytes_);
    if (pool.size() > kKeep) pool.erase(pool.begin());  // drop the oldest
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
  static constexpr size_t kKeep = 3;
  static constexpr size_t kMaxSlack = 4;
  using Entry = std::pair<std::unique_ptr<char[]>, size_t>;
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<Entry>& free_list() {
    static std::vector<Entry> pool;
    return pool;
  }
  std::unique_ptr<char[]> buf_;
  size_t bytes_;
};

}  // namespace cpu
}  // namespace flip
