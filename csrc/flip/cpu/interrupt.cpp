#include "interrupt.h"

#include <atomic>

namespace flip {
namespace cpu {
namespace {

std::atomic<InterruptCheck> installed_check{nullptr};

}  // namespace

void set_interrupt_check(InterruptCheck check) { installed_check.store(check, std::memory_order_release); }

void poll_interrupt() {
  if (InterruptCheck check = installed_check.load(std::memory_order_acquire)) check();
}

}  // namespace cpu
}  // namespace flip
