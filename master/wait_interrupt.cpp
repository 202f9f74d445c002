// The interrupt check of blocking sync points.
#include "master/wait_interrupt.hpp"

#include <atomic>

#include "dtr/distributed.hpp"

namespace dtr {

namespace {
std::atomic<WaitInterruptCheck> g_check{nullptr};
}  // namespace

void set_wait_interrupt_check(WaitInterruptCheck check) {
  g_check.store(check, std::memory_order_release);
}

namespace detail {
void check_wait_interrupt() {
  if (WaitInterruptCheck check = g_check.load(std::memory_order_acquire)) check();
}
}  // namespace detail

}  // namespace dtr
