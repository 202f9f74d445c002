// dtr_machine_jitter: how much this machine itself takes from a thread that never sleeps,
// and how fast it copies memory right now. Benchmarks print it beside their figures
// (bench/collectives_compare.sh writes it to machine.txt before and after its rounds), so
// a table taken during one of a VM's slow phases, or on a machine whose CPUs are
// interrupted often, says so. See docs/performance/history/collectives-issue-17.md,
// "The same-host path's tail, and the machine's own".
//
//   dtr_machine_jitter [SECONDS (default 2)]
//
// For SECONDS, one thread per online CPU (pinned) reads steady_clock in a loop and counts
// the gaps between two reads (time the thread did not run: interrupts, the hypervisor,
// other tasks), by size. Then one thread copies 64 MiB ten times (the best rate). A
// p99 of an operation that takes T µs is at the mercy of these gaps once
// (gaps per second × T µs) approaches 1%.
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::array<long, 6> kBounds{10, 20, 50, 100, 500, 2000};  // µs

struct Gaps {
  std::array<long, kBounds.size()> count{};  // gaps ≥ kBounds[i] and < kBounds[i + 1]
  long lost_us = 0;
  long longest_us = 0;
};

Gaps spin_on(int cpu, std::chrono::duration<double> for_) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  Gaps g;
  const auto end = Clock::now() + for_;
  auto last = Clock::now();
  for (auto now = last; now < end; last = now) {
    now = Clock::now();
    const long us = std::chrono::duration_cast<std::chrono::microseconds>(now - last).count();
    if (us < kBounds[0]) continue;
    size_t b = 0;
    while (b + 1 < kBounds.size() && us >= kBounds[b + 1]) ++b;
    ++g.count[b];
    g.lost_us += us;
    g.longest_us = std::max(g.longest_us, us);
  }
  return g;
}

double copy_rate_gbs() {
  constexpr size_t kBytes = size_t{64} << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 0);
  double best = 0;
  for (int i = 0; i < 10; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), kBytes);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(kBytes) / s / 1e9);
    a[static_cast<size_t>(i)] = b[static_cast<size_t>(i) + 1];  // keep the copies
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? std::atof(argv[1]) : 2.0;
  if (!(seconds > 0 && seconds <= 600)) {
    std::fprintf(stderr, "usage: dtr_machine_jitter [SECONDS in (0, 600], default 2]\n");
    return 2;
  }
  const int cpus = static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  std::vector<Gaps> per(static_cast<size_t>(cpus));
  std::vector<std::thread> threads;
  for (int c = 0; c < cpus; ++c)
    threads.emplace_back([&, c] {
      per[static_cast<size_t>(c)] = spin_on(c, std::chrono::duration<double>(seconds));
    });
  for (auto& t : threads) t.join();
  for (int c = 0; c < cpus; ++c) {
    const Gaps& g = per[static_cast<size_t>(c)];
    std::printf("cpu%d: gaps per second", c);
    for (size_t b = 0; b < kBounds.size(); ++b) {
      const double rate = static_cast<double>(g.count[b]) / seconds;
      if (b + 1 < kBounds.size()) {
        std::printf(" %ld-%ld us: %.1f", kBounds[b], kBounds[b + 1], rate);
      } else {
        std::printf(" >=%ld us: %.1f", kBounds[b], rate);
      }
    }
    std::printf("; longest %ld us; lost %.2f%%\n", g.longest_us,
                100.0 * static_cast<double>(g.lost_us) / (seconds * 1e6));
  }
  std::printf("memcpy 64 MiB, one thread, best of 10: %.1f GB/s\n", copy_rate_gbs());
  return 0;
}
