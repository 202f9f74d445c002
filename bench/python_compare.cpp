// The C++ side of the Python benchmark (bench/python_bench.py, docs/performance.md,
// "Python (issue 18)"): the same two workloads as the Python side, against the workers
// named by DTR_WORKERS, printed as one JSON line.
//   dispatch   N x.add_(1) on a 1-element float tensor, then synchronize(): ops/s
//              (x.item() == N is checked).
//   roundtrip  (x + 1).item(): median and p99 of R iterations after W warm-up, in us; and
//              x.item() alone (median), the round trip without an op.
// Usage: DTR_WORKERS=tcp://127.0.0.1:PORT dtr_python_compare N R W
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "dtr/dtr.hpp"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: DTR_WORKERS=... %s N R W\n", argv[0]);
    return 2;
  }
  const long long n = std::atoll(argv[1]);
  const int rounds = std::atoi(argv[2]);
  const int warmup = std::atoi(argv[3]);
  using Clock = std::chrono::steady_clock;
  dtr::init_master_worker();
  auto x = dtr::zeros({1});
  auto start = Clock::now();
  for (long long i = 0; i < n; ++i) x.add_(1);
  dtr::synchronize();
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  const bool ok = x.item<double>() == static_cast<double>(n);

  auto y = dtr::zeros({1});
  std::vector<double> us;
  for (int i = 0; i < warmup + rounds; ++i) {
    auto t0 = Clock::now();
    float v = (y + 1).item<float>();
    auto t1 = Clock::now();
    if (v != 1.0f) return 1;
    if (i >= warmup) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::vector<double> item_us;  // y.item() alone: the round trip without an op
  for (int i = 0; i < warmup + rounds; ++i) {
    auto t0 = Clock::now();
    float v = y.item<float>();
    auto t1 = Clock::now();
    if (v != 0.0f) return 1;
    if (i >= warmup) item_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  std::sort(us.begin(), us.end());
  std::sort(item_us.begin(), item_us.end());
  std::printf(
      "{\"dispatch_ops_per_s\": %.1f, \"dispatch_ok\": %s, \"roundtrip_median_us\": %.2f, "
      "\"roundtrip_p99_us\": %.2f, \"item_median_us\": %.2f}\n",
      static_cast<double>(n) / seconds, ok ? "true" : "false", us[us.size() / 2],
      us[std::min(us.size() - 1, us.size() * 99 / 100)], item_us[item_us.size() / 2]);
  dtr::shutdown_master_worker();
  return ok ? 0 : 1;
}
