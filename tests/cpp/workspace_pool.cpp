// The CPU kernels' scratch pool (csrc/flip/cpu/workspace.h), on the host: a loop that alternates a
// forward (a ring of rows per thread) with a forward+backward (rings, then the sensitivities and
// the gradient planes) allocates nothing after its first round, on 2 threads and on 16; after a
// burst of many buffers lent at once the pool shrinks again; a small request never takes a buffer
// more than kMaxSlack times larger. Allocations are counted by replacing operator new[]. Compiled with g++ and
// run by tests/cpu/test_workspace_pool.py; prints "ALL CHECKED" and exits 0 when every check holds,
// else names the first that failed.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <set>
#include <vector>

#include "check.h"
#include "flip/cpu/workspace.h"

namespace {

constexpr size_t kLarge = 1 << 16;  // the buffers below are larger; the test's own vectors are not
size_t allocated = 0, freed = 0;    // operator new[] / delete[] calls for kLarge bytes or more
// Never destroyed: the pool's buffers are freed after the program's other statics are gone. (A
// std::set allocates with operator new, not new[].)
std::set<void*>& large_blocks() {
  static auto* blocks = new std::set<void*>;
  return *blocks;
}

}  // namespace

void* operator new[](size_t bytes) {
  void* p = std::malloc(bytes);
  if (p == nullptr) throw std::bad_alloc();
  if (bytes >= kLarge) {
    ++allocated;
    large_blocks().insert(p);
  }
  return p;
}
void operator delete[](void* p) noexcept {
  if (large_blocks().erase(p) != 0) ++freed;
  std::free(p);
}
void operator delete[](void* p, size_t) noexcept { operator delete[](p); }

namespace {

using flip::cpu::Workspace;

constexpr size_t kRing = 300000, kPlanes = 2000000;

void forward(int threads) {
  std::vector<std::unique_ptr<Workspace>> rings;
  for (int t = 0; t < threads; ++t) rings.push_back(std::make_unique<Workspace>(kRing));
}

void forward_backward(int threads) {
  auto sensitivities = std::make_unique<Workspace>(kPlanes);
  forward(threads);
  Workspace gradient_planes(kPlanes);
  forward(threads);  // the transposed stage's rings
}

// Allocations of kLarge bytes or more made by `rounds` rounds of fn after one round to warm up.
template <class Fn>
size_t allocations_after_warm_up(Fn fn, int rounds) {
  fn();
  const size_t before = allocated;
  for (int i = 0; i < rounds; ++i) fn();
  return allocated - before;
}

}  // namespace

int main() {
  for (int threads : {2, 16}) {
    const size_t fresh = allocations_after_warm_up(
        [threads] {
          forward(threads);
          forward_backward(threads);
        },
        20);
    std::printf("%d threads: %zu allocations in 20 rounds of forward, forward+backward\n", threads, fresh);
    CHECK(fresh == 0);
  }

  // A burst: 40 buffers lent at once, all returned; then one at a time. The pool lets go of the
  // burst's buffers within two windows of loans (128), keeping at most 1 + kSpare.
  {
    std::vector<std::unique_ptr<Workspace>> burst;
    for (int i = 0; i < 40; ++i) burst.push_back(std::make_unique<Workspace>(kRing));
  }
  const size_t freed_before = freed;
  for (int i = 0; i < 200; ++i) Workspace one(kRing);
  std::printf("after the burst: %zu buffers freed\n", freed - freed_before);
  CHECK(freed - freed_before >= 40 - 3);

  // kMaxSlack (4): a request for a fifth of a pooled buffer gets one of its own, a third takes it.
  {
    Workspace large(5 * kPlanes);
  }
  size_t before = allocated;
  {
    Workspace fifth(kPlanes);
  }
  CHECK(allocated - before == 1);
  before = allocated;
  {
    Workspace third(5 * kPlanes / 3);
  }
  CHECK(allocated - before == 0);
  std::printf("ALL CHECKED\n");
  return 0;
}
