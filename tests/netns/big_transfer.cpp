// dtr_netns_big_transfer: a master that moves one large tensor to node 0 and a smaller one
// back, with the default liveness settings, for tests/netns/netns_slow_link_test.sh (a link
// shaped to 100 Mbit/s, so that each transfer takes many heartbeat timeouts).
//
//   DTR_WORKERS=tcp://HOST:PORT DTR_INSECURE=1 dtr_netns_big_transfer MIB_THERE MIB_BACK
//
// Prints the time of each transfer; exits 0 when both arrived whole (checked element by
// element on a pattern), 1 when a check failed, 2 on an error (a WorkerLost among them).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dtr/dtr.hpp"

namespace {

// Element i is i mod 1021, exact in float32.
dtr::local::Tensor pattern(int64_t n) {
  dtr::local::Tensor t = dtr::local::empty({n}, dtr::DType::Float32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(i % 1021);
  return t;
}

bool matches(const dtr::local::Tensor& t, int64_t n) {
  if (t.numel() != n) return false;
  const float* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i)
    if (p[i] != static_cast<float>(i % 1021)) return false;
  return true;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s MIB_THERE MIB_BACK\n", argv[0]);
    return 2;
  }
  const int64_t there = std::atoll(argv[1]) << 18, back = std::atoll(argv[2]) << 18;  // floats
  try {
    dtr::init_master_worker();
    auto t0 = std::chrono::steady_clock::now();
    dtr::DistributedTensor y = dtr::dist_send(pattern(there), 0);
    // The worker has it all once this answers (the sum of the pattern, in float64).
    double sum = y.to(dtr::DType::Float64).sum().item<double>();
    double expected = 0;
    for (int64_t i = 0; i < there; ++i) expected += static_cast<double>(i % 1021);
    std::printf("there: %lld MiB in %.1f s\n", static_cast<long long>(there >> 18),
                seconds_since(t0));
    if (sum != expected) {
      std::fprintf(stderr, "the worker's sum is %.17g, expected %.17g\n", sum, expected);
      return 1;
    }
    t0 = std::chrono::steady_clock::now();
    dtr::local::Tensor got = y.slice(0, 0, back).to_local();
    std::printf("back: %lld MiB in %.1f s\n", static_cast<long long>(back >> 18),
                seconds_since(t0));
    if (!matches(got, back)) {
      std::fprintf(stderr, "the tensor that came back differs\n");
      return 1;
    }
    dtr::shutdown_master_worker();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr_netns_big_transfer: %s\n", e.what());
    return 2;
  }
  return 0;
}
