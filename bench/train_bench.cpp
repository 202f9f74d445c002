// train_bench: one training step of the seed tutorial's Net (examples/seed_net.hpp; batch
// 64 of 28x28 images, forward, nll_loss, backward, SGD(lr 0.01, momentum 0.5)) on the CPU,
// measured three ways in one run:
//   1. in-process (local::Tensor), against torch's step on the same machine in the same run
//      (bench/train_torch_step.py under a python3 with torch; goal: >= 0.5x torch's rate);
//   2. master-worker (DistributedTensor on one local dtr-worker, the master recording the
//      graph and queueing the ops), against the in-process step (goal: >= 0.8x).
// Each measurement: `--warmup` steps, then the median steps/s of `--repeats` timed runs of
// `--steps` steps; the remote runs end with a sync point. `--no-torch` skips torch.
//
//   dtr_train_bench [--steps 20] [--repeats 3] [--warmup 3] [--python python3] [--no-torch]
#include <dtr/dtr.hpp>
#include <dtr/nn.hpp>
#include <dtr/optim.hpp>

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "../examples/seed_net.hpp"
#include "worker_daemon.hpp"

namespace {

using dtr::DistributedTensor;
using dtr::local::Tensor;
namespace F = dtr::nn::functional;
using Clock = std::chrono::steady_clock;

struct Options {
  int steps = 20, repeats = 3, warmup = 3;
  std::string python = "python3";
  bool torch = true;
};

// Steps per second of `step`, the median of the repeats; `sync` ends each timed run.
template <typename Step, typename Sync>
double rate(const Options& o, Step&& step, Sync&& sync) {
  for (int i = 0; i < o.warmup; ++i) step();
  sync();
  std::vector<double> rates;
  for (int r = 0; r < o.repeats; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < o.steps; ++i) step();
    sync();
    rates.push_back(o.steps / std::chrono::duration<double>(Clock::now() - t0).count());
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

template <typename T>
struct Trainer {
  dtr::Generator gen{1234};
  seed::Net<T> net{&gen};
  dtr::optim::SGD<T> opt{net.parameters(), {.lr = 0.01, .momentum = 0.5}};
  T x, y, loss;
  void step() {
    opt.zero_grad();
    loss = F::nll_loss(net(x), y);
    loss.backward();
    opt.step();
  }
};

double torch_rate(const Options& o) {
  std::string cmd = o.python + " " + DTR_BENCH_DIR + "/train_torch_step.py --steps " +
                    std::to_string(o.steps) + " --repeats " + std::to_string(o.repeats) +
                    " --warmup " + std::to_string(o.warmup) + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return 0;
  char line[512];
  double r = 0;
  while (fgets(line, sizeof line, p)) {
    std::cout << "  torch: " << line;
    std::sscanf(line, "torch steps/s %lf", &r);
  }
  pclose(p);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--steps")
      o.steps = std::stoi(next());
    else if (a == "--repeats")
      o.repeats = std::stoi(next());
    else if (a == "--warmup")
      o.warmup = std::stoi(next());
    else if (a == "--python")
      o.python = next();
    else if (a == "--no-torch")
      o.torch = false;
    else {
      std::cerr << "usage: dtr_train_bench [--steps N] [--repeats N] [--warmup N] "
                   "[--python PYTHON] [--no-torch]\n";
      return 2;
    }
  }
  try {
    dtr::bench::WorkerDaemon worker;  // before any thread of ours
    // glibc malloc as the worker and the master tune it (protocol/transport.cpp): freed
    // large blocks stay mapped, so a step's tensors reuse faulted-in memory. Without it every
    // large intermediate is a fresh mmap whose pages fault in again, in-process only.
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_MAX, 0);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    dtr::Generator data(7);
    Tensor x = dtr::local::randn({64, 1, 28, 28}, data);
    Tensor y = (dtr::local::rand({64}, data) * 10).to(dtr::DType::Int64);

    dtr::manual_seed(1);
    Trainer<Tensor> local;
    local.x = x;
    local.y = y;
    const double local_rate = rate(
        o, [&] { local.step(); }, [&] { local.loss.item<float>(); });
    std::printf("in-process step (batch 64): %.2f steps/s\n", local_rate);
    if (o.torch) {
      const double t = torch_rate(o);
      if (t > 0)
        std::printf("torch step: %.2f steps/s; dtr / torch = %.2f (goal >= 0.5)\n", t,
                    local_rate / t);
      else
        std::printf("torch step: not measured (no torch for %s)\n", o.python.c_str());
    }

    dtr::MasterOptions mo;
    mo.workers = {worker.endpoint()};
    dtr::init_master_worker(mo);
    dtr::manual_seed(1);
    Trainer<DistributedTensor> remote;
    remote.x = dtr::dist_send(x);
    remote.y = dtr::dist_send(y);
    const double remote_rate = rate(
        o, [&] { remote.step(); }, [&] { remote.loss.item<float>(); });
    std::printf(
        "master-worker step: %.2f steps/s; master-worker / in-process = %.2f (goal >= "
        "0.8)\n",
        remote_rate, remote_rate / local_rate);
    dtr::shutdown_master_worker();
  } catch (const std::exception& e) {
    std::cerr << "dtr_train_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
