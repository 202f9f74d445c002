// The interrupt check of blocking sync points (dtr::set_wait_interrupt_check in
// dtr/distributed.hpp): a thread waiting for a worker's reply calls check_wait_interrupt()
// every kWaitInterruptEvery, and the handshake after each poll; the check may throw, which
// ends the wait.
//
// Thread safety: set and read through one atomic; the check runs on the waiting thread.
#pragma once

#include <chrono>

namespace dtr::detail {

inline constexpr auto kWaitInterruptEvery = std::chrono::milliseconds(5);

// Calls the installed check, if any; lets its exception through.
void check_wait_interrupt();

}  // namespace dtr::detail
