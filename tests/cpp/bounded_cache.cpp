// The taps caches' policy (csrc/flip/bounded_cache.h), on the host: the bound under a sweep of
// keys, clear when full, pinned entries and calls that may not drop, values that outlive their
// entry while a caller holds them and are destroyed once, outside the lock, by their last holder,
// a failing make(), and many threads at once. Compiled with g++ and run by tests/gpu/test_tap_cache.py;
// prints "ALL CHECKED" and exits 0 when every check holds, else names the first that failed.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "check.h"
#include "flip/bounded_cache.h"

namespace {

std::atomic<int> made{0}, destroyed{0};

// A value that knows its key and counts its constructions and destructions. Its destructor can
// call back into the cache (on_destroy), which deadlocks if a value is destroyed under the lock.
struct Value {
  static inline void (*on_destroy)() = nullptr;
  int key = 0;
  bool owner = true;  // false once moved from
  explicit Value(int k) : key(k) { ++made; }
  Value(Value&& o) noexcept : key(o.key), owner(o.owner) { o.owner = false; }
  ~Value() {
    if (!owner) return;
    ++destroyed;
    if (on_destroy != nullptr) on_destroy();
  }
};

using Cache = flip::BoundedCache<int, Value>;

void reset_counts() {
  made = 0;
  destroyed = 0;
}

void sweep_stays_within_the_bound() {
  reset_counts();
  Cache cache(flip::kTapCacheEntries);
  CHECK(cache.capacity() == 64);
  for (int k = 0; k < 1000; ++k) {
    auto v = cache.get(k, [&] { return Value(k); });
    CHECK(v->key == k);
    CHECK(cache.size() <= cache.capacity());
    // Clear when full: the 65th new key finds 64 entries and drops them all.
    CHECK(cache.size() == static_cast<size_t>(k % 64 + 1));
  }
  CHECK(made == 1000);
  CHECK(destroyed == 1000 - 1000 % 64);  // every dropped value, once (nobody holds them)
}

void a_held_key_is_made_once() {
  reset_counts();
  Cache cache(4);
  auto first = cache.get(7, [] { return Value(7); });
  for (int i = 0; i < 10; ++i) CHECK(cache.get(7, [] { return Value(-1); }) == first);
  CHECK(made == 1);
}

void dropped_values_live_while_held_and_die_outside_the_lock() {
  reset_counts();
  static Cache* cache = nullptr;
  Cache local(2);
  cache = &local;
  Value::on_destroy = [] { (void)cache->size(); };  // locks: deadlocks if called under the lock
  auto held = cache->get(1, [] { return Value(1); });
  cache->get(2, [] { return Value(2); });
  cache->get(3, [] { return Value(3); });  // full: drops 1 and 2; 2 dies now, 1 is held
  CHECK(destroyed == 1);
  CHECK(held->key == 1);
  CHECK(cache->size() == 1);
  held.reset();  // the last holder destroys it
  CHECK(destroyed == 2);
  // The key comes back made anew.
  CHECK(cache->get(1, [] { return Value(1); })->key == 1);
  CHECK(made == 4);
  Value::on_destroy = nullptr;
  cache = nullptr;
}

void pinned_entries_stay_and_no_drop_calls_grow() {
  reset_counts();
  Cache cache(3);
  cache.get(1, [] { return Value(1); }, /*pin=*/true);
  cache.get(2, [] { return Value(2); });
  cache.get(3, [] { return Value(3); });
  cache.get(4, [] { return Value(4); });  // drops 2 and 3, keeps the pinned 1
  CHECK(cache.size() == 2);
  CHECK(cache.get(1, [] { return Value(-1); })->key == 1);
  // Pinning an entry already held pins it too.
  cache.get(4, [] { return Value(-1); }, /*pin=*/true);
  // Calls that may not drop grow the cache past its capacity...
  for (int k = 10; k < 20; ++k) cache.get(k, [k] { return Value(k); }, false, /*may_drop=*/false);
  CHECK(cache.size() == 12);
  CHECK(destroyed == 2);
  // ... until a call that may: everything but the pinned entries goes, then the new one is added.
  cache.get(99, [] { return Value(99); });
  CHECK(cache.size() == 3);
  CHECK(destroyed == 12);
  CHECK(cache.get(4, [] { return Value(-1); })->key == 4);
}

void a_failing_make_leaves_the_cache_as_it_was() {
  reset_counts();
  Cache cache(8);
  cache.get(1, [] { return Value(1); });
  bool threw = false;
  try {
    cache.get(2, []() -> Value { throw std::runtime_error("no"); });
  } catch (const std::runtime_error&) {
    threw = true;
  }
  CHECK(threw);
  CHECK(cache.size() == 1);
  CHECK(cache.get(2, [] { return Value(2); })->key == 2);
}

void many_threads_at_once() {
  reset_counts();
  Cache cache(16);
  std::atomic<bool> wrong{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        const int k = (i * 7 + t * 13) % 40;
        auto v = cache.get(k, [k] { return Value(k); });
        if (v->key != k) wrong = true;
        if (cache.size() > cache.capacity()) wrong = true;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(!wrong);
  CHECK(cache.size() <= 16);
  CHECK(made - destroyed == static_cast<int>(cache.size()));  // nothing leaked, nothing freed twice
}

}  // namespace

int main() {
  sweep_stays_within_the_bound();
  a_held_key_is_made_once();
  dropped_values_live_while_held_and_die_outside_the_lock();
  pinned_entries_stay_and_no_drop_calls_grow();
  a_failing_make_leaves_the_cache_as_it_was();
  many_threads_at_once();
  std::printf("ALL CHECKED\n");
  return 0;
}
