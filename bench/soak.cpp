// dtr_soak: many small ops and create/free cycles against one worker; prints the master's
// and the worker's resident memory and open file descriptors before and after, so that a
// leak (memory, sockets) shows as growth.
//
//   dtr-exec --workers 1 build/bench/dtr_soak [--ops N] [--cycles N] [--rounds N]
//                                             [--unsynced N]
//
// Defaults: 10 million in-place adds on one tensor, then 1 million cycles of creating a
// small tensor and dropping its handle (a create and a free on the worker each), then both
// again. The first round grows the processes to their working size (batches of up to 64 Ki
// commands decoded on the worker, kept by glibc, which dtr tells not to trim); the second
// round shows what a leak would add. The worker's pid comes from node_info(0); its /proc
// entries give RSS and open fds. Exits non-zero when a result is wrong.
//
// --unsynced N (default 100 million; 0 skips it): then N in-place adds with no sync point
// at all, both processes' RSS sampled every tenth of them: a master that never waits runs
// in bounded memory on both sides (the data connection's high-water marks hold it back).
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "dtr/dtr.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int64_t rss_kib(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kib = 0;
      in >> kib;
      return kib;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

int open_fds(long pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(path.c_str());
  if (!d) return -1;
  int n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

struct Sample {
  int64_t master_kib, worker_kib;
  int master_fds, worker_fds;
};

Sample sample(long worker) {
  return {rss_kib(getpid()), rss_kib(worker), open_fds(getpid()), open_fds(worker)};
}

void print(const char* what, const Sample& s, double seconds) {
  std::printf("  %-34s master %8.1f MiB %4d fds   worker %8.1f MiB %4d fds   %7.2f s\n", what,
              s.master_kib / 1024.0, s.master_fds, s.worker_kib / 1024.0, s.worker_fds, seconds);
}

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// `n` adds to x with no sync point, RSS sampled every n/10; checks x against `before + n`.
bool run_unsynced(dtr::DistributedTensor& x, long worker, int64_t n, int64_t before) {
  std::printf("  %lld in-place adds without a sync point:\n", static_cast<long long>(n));
  Sample lo{INT64_MAX, INT64_MAX, 0, 0}, hi{0, 0, 0, 0};
  auto t0 = Clock::now();
  const int64_t step = std::max<int64_t>(n / 10, 1);
  for (int64_t i = 0; i < n; ++i) {
    x.add_(1);
    if ((i + 1) % step != 0) continue;
    Sample s = sample(worker);
    print(("    after " + std::to_string((i + 1) / 1'000'000) + " M").c_str(), s, since(t0));
    lo.master_kib = std::min(lo.master_kib, s.master_kib);
    lo.worker_kib = std::min(lo.worker_kib, s.worker_kib);
    hi.master_kib = std::max(hi.master_kib, s.master_kib);
    hi.worker_kib = std::max(hi.worker_kib, s.worker_kib);
  }
  int64_t value = x.item<int64_t>();
  std::printf(
      "  RSS while streaming: master %.1f to %.1f MiB, worker %.1f to %.1f MiB; %.2f M ops/s\n",
      lo.master_kib / 1024.0, hi.master_kib / 1024.0, lo.worker_kib / 1024.0,
      hi.worker_kib / 1024.0, static_cast<double>(n) / since(t0) / 1e6);
  std::printf(
      "RESULT {\"bench\":\"soak_unsynced\",\"ops\":%lld,\"master_rss_kib\":[%lld,%lld],"
      "\"worker_rss_kib\":[%lld,%lld]}\n",
      static_cast<long long>(n), static_cast<long long>(lo.master_kib),
      static_cast<long long>(hi.master_kib), static_cast<long long>(lo.worker_kib),
      static_cast<long long>(hi.worker_kib));
  if (value != before + n) {
    std::fprintf(stderr, "dtr_soak: x = %lld after the unsynced adds, expected %lld\n",
                 static_cast<long long>(value), static_cast<long long>(before + n));
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t ops = 10'000'000, cycles = 1'000'000, rounds = 2, unsynced = 100'000'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--ops") {
      ops = std::atoll(argv[i + 1]);
    } else if (a == "--cycles") {
      cycles = std::atoll(argv[i + 1]);
    } else if (a == "--rounds") {
      rounds = std::atoll(argv[i + 1]);
    } else if (a == "--unsynced") {
      unsynced = std::atoll(argv[i + 1]);
    } else {
      std::fprintf(stderr, "usage: dtr_soak [--ops N] [--cycles N] [--rounds N] [--unsynced N]\n");
      return 2;
    }
  }
  try {
    dtr::init_master_worker();
    std::string who = dtr::node_info(0).worker;  // "host:pid"
    long worker = std::atol(who.substr(who.rfind(':') + 1).c_str());
    std::printf("dtr_soak: %lld ops, %lld create/free cycles, worker %s\n",
                static_cast<long long>(ops), static_cast<long long>(cycles), who.c_str());

    // Warm-up: the allocators, batch buffers and socket buffers reach their working size.
    dtr::DistributedTensor x = dtr::zeros({1}, dtr::DType::Int64);
    for (int i = 0; i < 200'000; ++i) x.add_(1);
    for (int i = 0; i < 100'000; ++i) dtr::DistributedTensor t = dtr::zeros({4});
    dtr::synchronize();
    Sample start = sample(worker);
    print("after warm-up", start, 0);

    Sample after_ops{}, after_cycles{};
    for (int round = 1; round <= rounds; ++round) {
      auto t0 = Clock::now();
      for (int64_t i = 0; i < ops; ++i) {
        x.add_(1);
        if ((i + 1) % 1'000'000 == 0) dtr::synchronize();
      }
      dtr::synchronize();
      after_ops = sample(worker);
      print(("round " + std::to_string(round) + ": after the ops").c_str(), after_ops, since(t0));
      int64_t value = x.item<int64_t>();
      if (value != 200'000 + round * ops) {
        std::fprintf(stderr, "dtr_soak: x = %lld, expected %lld\n", static_cast<long long>(value),
                     static_cast<long long>(200'000 + round * ops));
        return 1;
      }
      t0 = Clock::now();
      for (int64_t i = 0; i < cycles; ++i) {
        dtr::DistributedTensor t = dtr::zeros({4});
        if ((i + 1) % 100'000 == 0) dtr::synchronize();
      }
      dtr::synchronize();
      after_cycles = sample(worker);
      print(("round " + std::to_string(round) + ": after the create/free").c_str(), after_cycles,
            since(t0));
    }
    if (unsynced > 0 && !run_unsynced(x, worker, unsynced, 200'000 + rounds * ops)) return 1;
    int64_t live = dtr::memory_stats(0).live_tensors;
    std::printf("  live tensors on the worker: %lld (x only)\n", static_cast<long long>(live));
    std::printf(
        "RESULT {\"bench\":\"soak\",\"ops\":%lld,\"cycles\":%lld,\"master_rss_kib\":[%lld,%lld,"
        "%lld],\"worker_rss_kib\":[%lld,%lld,%lld],\"master_fds\":[%d,%d,%d],\"worker_fds\":"
        "[%d,%d,%d]}\n",
        static_cast<long long>(ops), static_cast<long long>(cycles),
        static_cast<long long>(start.master_kib), static_cast<long long>(after_ops.master_kib),
        static_cast<long long>(after_cycles.master_kib), static_cast<long long>(start.worker_kib),
        static_cast<long long>(after_ops.worker_kib),
        static_cast<long long>(after_cycles.worker_kib), start.master_fds, after_ops.master_fds,
        after_cycles.master_fds, start.worker_fds, after_ops.worker_fds, after_cycles.worker_fds);
    if (live != 1) return 1;
    dtr::shutdown_master_worker();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr_soak: %s\n", e.what());
    return 1;
  }
  return 0;
}
