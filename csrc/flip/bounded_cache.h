// The one policy of the filter-tap caches (filters.h: the CPU's taps per ppd; csrc/ops/cuda.cpp:
// the CUDA launch argument per ppd and device, with device memory for large radii): a thread-safe
// map from key to a shared, immutable value, holding at most kTapCacheEntries entries, so that a
// process that meets ever new ppd values (a training run that varies the viewing distance) keeps
// a bounded amount of memory on every device; its lock is released in a forked child
// (fork_safety.h). Framework-free; tests/cpp/bounded_cache.cpp checks the policy on the host.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "fork_safety.h"

namespace flip {

// The most entries one taps cache holds (each cache is per value type: CPU taps per dtype and
// bank, CUDA launch taps per dtype). A sweep over more ppd values than this rebuilds taps, which
// costs microseconds on the host (plus one upload for CUDA's large radii) against a filter pass.
inline constexpr std::size_t kTapCacheEntries = 64;

template <class Key, class Value>
class BoundedCache {
 public:
  explicit BoundedCache(std::size_t capacity) : capacity_(capacity) { ::flip::ForkSafeLocks::add(&mu_); }
  ~BoundedCache() { ::flip::ForkSafeLocks::remove(&mu_); }
  BoundedCache(const BoundedCache&) = delete;
  BoundedCache& operator=(const BoundedCache&) = delete;

  // The value for `key`, made by `make()` (a Value, under the lock: each key is made once while it
  // is held) when absent; an exception from make() leaves the cache as it was.
  //
  // Clear when full: when `capacity` entries are held and a new one is made, every entry is
  // dropped first, except pinned ones. Nothing is tracked per use, and a sweep over many keys
  // costs one rebuild per key per `capacity` new keys, as an LRU's would. A dropped value lives on
  // as long as a caller still holds it (a caller holds it while it uses it) and is destroyed by
  // its last holder, never under the lock.
  //
  // `pin`: the entry returned is never dropped (CUDA: its device memory may be read by a captured
  // CUDA graph at any later replay). `may_drop` false: nothing is dropped by this call, even when
  // full (CUDA: during a graph capture, where freeing device memory is not allowed); the cache then
  // holds more than `capacity` entries until a later call may drop them, and pinned entries past
  // `capacity` stay.
  template <class Make>
  std::shared_ptr<const Value> get(const Key& key, Make&& make, bool pin = false, bool may_drop = true) {
    std::vector<std::shared_ptr<const Value>> dropped;  // destroyed after the lock is released
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(key);
    if (it == entries_.end()) {
      if (may_drop && entries_.size() >= capacity_) drop_unpinned(dropped);
      auto value = std::make_shared<const Value>(make());
      it = entries_.emplace(key, Entry{std::move(value), false}).first;
    }
    if (pin) it->second.pinned = true;
    return it->second.value;
  }

  // The entries held now (tests and diagnostics).
  std::size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }

  std::size_t capacity() const { return capacity_; }

 private:
  struct Entry {
    std::shared_ptr<const Value> value;
    bool pinned = false;
  };

  void drop_unpinned(std::vector<std::shared_ptr<const Value>>& dropped) {
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.pinned) {
        ++it;
      } else {
        dropped.push_back(std::move(it->second.value));
        it = entries_.erase(it);
      }
    }
  }

  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::map<Key, Entry> entries_;
};

}  // namespace flip
