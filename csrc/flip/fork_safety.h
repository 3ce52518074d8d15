// The locks that threads share (the CPU scratch pool's, each taps cache's), kept usable in a child
// made by fork(). The child has only the thread that forked: a lock another thread held at that
// moment would stay held there for ever, and the child's first FLIP call would wait on it (a
// DataLoader worker forked while another thread evaluates FLIP). Each such lock is registered
// here; the forking thread takes them all just before fork() and releases them just after, in
// parent and child (pthread_atfork). None of them is held while another is taken, so taking them
// all cannot deadlock. Framework-free; where there is no fork() (Windows) nothing is registered.
#pragma once

#include <algorithm>
#include <mutex>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#define FLIP_HAS_FORK 1
#else
#define FLIP_HAS_FORK 0
#endif

namespace flip {

class ForkSafeLocks {
 public:
  static void add(std::mutex* lock) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.mutex);
    r.locks.push_back(lock);
  }

  static void remove(std::mutex* lock) {
    Registry& r = registry();
    std::lock_guard<std::mutex> guard(r.mutex);
    r.locks.erase(std::remove(r.locks.begin(), r.locks.end(), lock), r.locks.end());
  }

 private:
  struct Registry {
    std::mutex mutex;
    std::vector<std::mutex*> locks;
    Registry() {
#if FLIP_HAS_FORK
      pthread_atfork(&before_fork, &after_fork, &after_fork);
#endif
    }
  };

  // Never destroyed: a fork during the process's exit still finds it.
  static Registry& registry() {
    static Registry* r = new Registry();
    return *r;
  }

  static void before_fork() {
    Registry& r = registry();
    r.mutex.lock();
    for (std::mutex* lock : r.locks) lock->lock();
  }

  // In the parent and in the child: the forking thread took every lock, and it is the one thread
  // that continues in both.
  static void after_fork() {
    Registry& r = registry();
    for (auto it = r.locks.rbegin(); it != r.locks.rend(); ++it) (*it)->unlock();
    r.mutex.unlock();
  }
};

}  // namespace flip
