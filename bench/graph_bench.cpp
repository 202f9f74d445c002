// dtr_graph_bench: captured graphs (dtr::capture, include/dtr/graph.hpp) against the same
// work issued eagerly and against raw ZeroMQ, in one run, on two dtr-workers started here
// on loopback TCP ports.
//
//   1 chain       a captured chain of 1,000 tiny in-place ops (x.add_(1) on a 1-element
//                 float64 tensor) on node 0, replayed R times, then synchronize(): ops/s.
//                 Baselines in the same run: raw cppzmq PUSH -> PULL of 64-byte messages to
//                 a forked child that acks the last one (msgs/s), and dtr's eager dispatch
//                 of the same x.add_(1) (ops/s). Goals: >= 10x the PUSH/PULL rate and >= 5x
//                 eager dispatch. Checks x.item().
//   2 sgd         examples/master_sgd's training step (two replicas, one per node, the
//                 gradient all_reduce between the workers) issued eagerly against the same
//                 step captured once and replayed after its batch is copied into the graph's
//                 input buffers: seconds per step (until synchronize()), ratio eager /
//                 captured. Checks that the parameters after N steps are bit-identical.
//   3 roundtrip   a 10-op graph, 5 small ops on each of the 2 nodes: replay() +
//                 synchronize() against the same 10 ops issued eagerly + synchronize():
//                 latency, median and p99. Checks the values.
//
// Method: warm-up first, then contestants interleaved rep by rep, medians (and min/max);
// prints a table of goals and RESULT {json} lines. The exit status is 1 when a check fails
// (not when a goal is missed). The load average is printed at the start and the end:
// compare ratios from quiet runs only.
//
// Usage: dtr_graph_bench [--quick] [--only N]
//   --quick   fewer replays, steps and reps: a smoke run, figures rough
//   --only N  benchmark N only
//
// Every wait is bounded (ZeroMQ receive timeouts, the session's sync timeout); the workers
// and the baseline child are killed at the end.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "bench_stats.hpp"
#include "dtr/dtr.hpp"
#include "launcher/spawn.hpp"
#include "master_sgd_step.hpp"
#include "worker_daemon.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using dtr::DistributedTensor;
using dtr::bench::load_average;
using dtr::bench::median;
using dtr::bench::percentile;
using dtr::bench::seconds_since;
using dtr::bench::WorkerDaemon;

constexpr int kRecvTimeoutMs = 60000;

// ---- the raw baseline: a forked PULL child that acks the message whose first byte is 1 ----

struct RatePeer {
  dtr::launcher::Child child;
  std::string pull, ack;

  // Forks the child (before this process has threads) and waits (bounded) for its ports.
  RatePeer() {
    int fds[2];
    if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
    child = dtr::launcher::fork_child([&] {  // dies with this process (launcher/spawn.hpp)
      close(fds[0]);
      serve(fds[1]);
      return 0;
    });
    close(fds[1]);
    std::string line;
    auto deadline = Clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos && Clock::now() < deadline) {
      pollfd p{fds[0], POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      ssize_t n = read(fds[0], buf, sizeof buf);
      if (n <= 0) break;
      line.append(buf, static_cast<size_t>(n));
    }
    close(fds[0]);
    size_t space = line.find(' ');
    if (space == std::string::npos) throw std::runtime_error("the PUSH/PULL child did not start");
    pull = line.substr(0, space);
    ack = line.substr(space + 1, line.find('\n') - space - 1);
  }
  ~RatePeer() { child.stop(SIGKILL, std::chrono::milliseconds(0)); }

  static void serve(int out) {
    zmq::context_t ctx(1);
    zmq::socket_t in(ctx, zmq::socket_type::pull), back(ctx, zmq::socket_type::push);
    in.set(zmq::sockopt::rcvtimeo, 600000);
    in.bind("tcp://127.0.0.1:*");
    back.bind("tcp://127.0.0.1:*");
    std::string line =
        in.get(zmq::sockopt::last_endpoint) + " " + back.get(zmq::sockopt::last_endpoint) + "\n";
    if (write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(3);
    close(out);
    uint64_t count = 0;
    zmq::message_t m;
    while (in.recv(m)) {
      ++count;
      if (m.size() > 0 && m.data<uint8_t>()[0] == 1) {
        zmq::message_t reply(&count, sizeof count);
        back.send(reply, zmq::send_flags::none);
        count = 0;
      }
    }
  }
};

// PUSH/PULL 64-byte messages per second, `count` messages until the child's ack.
double push_pull_rate(zmq::socket_t& push, zmq::socket_t& ack, int64_t count, bool* ok) {
  char buf[64] = {};
  auto t0 = Clock::now();
  for (int64_t i = 0; i < count; ++i) {
    buf[0] = i == count - 1 ? 1 : 0;
    zmq::message_t m(buf, sizeof buf);
    push.send(m, zmq::send_flags::none);
  }
  zmq::message_t reply;
  if (!ack.recv(reply)) throw std::runtime_error("PUSH/PULL child: no ack within 60 s");
  double dt = seconds_since(t0);
  uint64_t got = 0;
  if (reply.size() == sizeof got) std::memcpy(&got, reply.data(), sizeof got);
  if (got != static_cast<uint64_t>(count)) *ok = false;
  return static_cast<double>(count) / dt;
}

struct Report {
  std::vector<std::string> goals, results;
  bool checks_ok = true;
  void check(bool ok, const std::string& what) {
    std::printf("  check %-60s %s\n", what.c_str(), ok ? "ok" : "FAILED");
    checks_ok = checks_ok && ok;
  }
  void goal(const std::string& what, double ratio, double want, bool at_least) {
    bool met = at_least ? ratio >= want : ratio <= want;
    char line[256];
    std::snprintf(line, sizeof line, "%-58s %8.2f  goal %s %.1f  %s", what.c_str(), ratio,
                  at_least ? ">=" : "<=", want, met ? "met" : "NOT MET");
    goals.push_back(line);
  }
  void info(const std::string& what, double ratio) {
    char line[256];
    std::snprintf(line, sizeof line, "%-58s %8.2f  (reported)", what.c_str(), ratio);
    goals.push_back(line);
  }
};

// ---- 1. a chain of 1,000 tiny in-place ops ----

void bench_chain(RatePeer& peer, bool quick, Report& rep) {
  const int kChain = 1000;
  const int replays = quick ? 200 : 2000;
  const int64_t raw_count = quick ? 200000 : 1000000;
  const int64_t eager_count = quick ? 200000 : 1000000;
  const int reps = quick ? 2 : 5;
  std::printf("\n[1] chain: %d x.add_(1) captured, %d replays; eager %lld; raw %lld msgs\n", kChain,
              replays, static_cast<long long>(eager_count), static_cast<long long>(raw_count));
  zmq::context_t ctx(1);
  zmq::socket_t push(ctx, zmq::socket_type::push), ack(ctx, zmq::socket_type::pull);
  ack.set(zmq::sockopt::rcvtimeo, kRecvTimeoutMs);
  push.connect(peer.pull);
  ack.connect(peer.ack);
  bool raw_ok = true, values_ok = true;

  DistributedTensor x = dtr::zeros({1}, dtr::DType::Float64);
  dtr::Graph chain = dtr::capture([&] {
    for (int i = 0; i < kChain; ++i) x.add_(1);
  });
  auto graph_once = [&](int n) {
    x.fill_(0);
    dtr::synchronize();
    auto t0 = Clock::now();
    for (int r = 0; r < n; ++r) chain.replay();
    dtr::synchronize();
    double rate = static_cast<double>(n) * kChain / seconds_since(t0);
    values_ok = values_ok && x.item<double>() == static_cast<double>(n) * kChain;
    return rate;
  };
  auto eager_once = [&](int64_t n) {
    DistributedTensor y = dtr::zeros({1}, dtr::DType::Float64);
    dtr::synchronize();
    auto t0 = Clock::now();
    for (int64_t i = 0; i < n; ++i) y.add_(1);
    dtr::synchronize();
    double rate = static_cast<double>(n) / seconds_since(t0);
    values_ok = values_ok && y.item<double>() == static_cast<double>(n);
    return rate;
  };
  push_pull_rate(push, ack, raw_count / 10, &raw_ok);  // warm-up
  graph_once(replays / 10);
  eager_once(eager_count / 10);
  std::vector<double> raw, graph, eager;
  for (int r = 0; r < reps; ++r) {
    for (int j = 0; j < 3; ++j) {
      switch ((r + j) % 3) {
        case 0:
          raw.push_back(push_pull_rate(push, ack, raw_count, &raw_ok));
          break;
        case 1:
          graph.push_back(graph_once(replays));
          break;
        default:
          eager.push_back(eager_once(eager_count));
      }
    }
  }
  rep.check(values_ok, "x.item() after every replayed and eager rep");
  rep.check(raw_ok, "the PUSH/PULL child counted every message");
  auto line = [](const char* what, const std::vector<double>& v) {
    std::printf("  %-36s median %8.2f M/s  [%.2f - %.2f]\n", what, median(v) / 1e6,
                *std::min_element(v.begin(), v.end()) / 1e6,
                *std::max_element(v.begin(), v.end()) / 1e6);
  };
  line("raw zmq PUSH/PULL 64 B (msgs/s)", raw);
  line("dtr eager x.add_(1) (ops/s)", eager);
  line("dtr captured chain replayed (ops/s)", graph);
  rep.goal("chain: captured ops/s / raw PUSH/PULL msgs/s", median(graph) / median(raw), 10, true);
  rep.goal("chain: captured ops/s / eager dispatch ops/s", median(graph) / median(eager), 5, true);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "RESULT {\"bench\":\"graph_chain\",\"graph_ops_per_s\":%.0f,\"eager_ops_per_s\":"
                "%.0f,\"zmq_msgs_per_s\":%.0f}",
                median(graph), median(eager), median(raw));
  rep.results.push_back(buf);
}

// ---- 2. master_sgd's step, eager against captured ----

void bench_sgd(bool quick, Report& rep) {
  const int64_t steps = quick ? 20 : 60;
  const int reps = quick ? 2 : 5;
  const int n = dtr::node_count();
  sgd::Plan plan = sgd::make_plan("", n, "worker");
  std::printf("\n[2] sgd: master_sgd's step on %d nodes, %lld steps per rep, %d reps\n", n,
              static_cast<long long>(steps), reps);
  std::vector<sgd::Replica> eager = sgd::make_replicas(n, plan);
  std::vector<sgd::Replica> captured = sgd::make_replicas(n, plan);
  dtr::Graph step = dtr::capture([&] { sgd::train_step(captured, true, 0); });
  std::printf("  captured: %zu commands on node 0 per step\n", step.commands(0));
  int64_t next_eager = 0, next_captured = 0;  // the data set's step, per run
  auto run = [&](bool graph) {
    dtr::synchronize();
    auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) {
      if (graph) {
        sgd::load_batch(captured, next_captured++ % plan.steps);
        step.replay();
      } else {
        sgd::train_step(eager, false, next_eager++ % plan.steps);
      }
    }
    dtr::synchronize();
    return seconds_since(t0) / static_cast<double>(steps);
  };
  run(false);
  run(true);
  std::vector<double> eager_s, graph_s;
  for (int r = 0; r < reps; ++r) {
    if (r % 2 == 0) {
      eager_s.push_back(run(false));
      graph_s.push_back(run(true));
    } else {
      graph_s.push_back(run(true));
      eager_s.push_back(run(false));
    }
  }
  bool same = next_eager == next_captured;
  for (int k = 0; k < n && same; ++k) {
    std::vector<dtr::local::Tensor> a = sgd::parameters(eager[static_cast<size_t>(k)]);
    std::vector<dtr::local::Tensor> b = sgd::parameters(captured[static_cast<size_t>(k)]);
    for (size_t i = 0; i < a.size() && same; ++i)
      same = std::memcmp(a[i].raw_data(), b[i].raw_data(),
                         static_cast<size_t>(a[i].numel()) * sizeof(float)) == 0;
  }
  rep.check(same, "parameters bit-identical after " + std::to_string(next_eager) + " steps");
  std::printf("  eager    step median %8.1f us  [%.1f - %.1f]\n", median(eager_s) * 1e6,
              *std::min_element(eager_s.begin(), eager_s.end()) * 1e6,
              *std::max_element(eager_s.begin(), eager_s.end()) * 1e6);
  std::printf("  captured step median %8.1f us  [%.1f - %.1f]\n", median(graph_s) * 1e6,
              *std::min_element(graph_s.begin(), graph_s.end()) * 1e6,
              *std::max_element(graph_s.begin(), graph_s.end()) * 1e6);
  rep.info("sgd: eager step time / captured step time", median(eager_s) / median(graph_s));
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "RESULT {\"bench\":\"graph_sgd\",\"eager_step_s\":%.9f,\"captured_step_s\":%.9f}",
                median(eager_s), median(graph_s));
  rep.results.push_back(buf);
}

// ---- 3. a replay's round trip ----

void bench_roundtrip(bool quick, Report& rep) {
  const int iters = quick ? 200 : 2000;
  std::printf("\n[3] roundtrip: 10 ops on 2 nodes + synchronize(), %d iterations each\n", iters);
  DistributedTensor a = dtr::zeros({4});
  DistributedTensor b = dtr::with_node(1, [] { return dtr::zeros({4}); });
  DistributedTensor a2 = dtr::zeros({4});
  DistributedTensor b2 = dtr::with_node(1, [] { return dtr::zeros({4}); });
  auto ops = [](DistributedTensor& t) {
    t.add_(3);
    t.mul_(0.5);
    t.sub_(1);
    t.relu_();
    t.add_(2);
  };
  dtr::Graph ten = dtr::capture([&] {
    ops(a);
    ops(b);
  });
  std::vector<double> graph_us, eager_us;
  auto once = [&](bool graph) {
    auto t0 = Clock::now();
    if (graph) {
      ten.replay();
    } else {
      ops(a2);
      ops(b2);
    }
    dtr::synchronize();
    (graph ? graph_us : eager_us).push_back(seconds_since(t0) * 1e6);
  };
  for (int i = 0; i < iters / 10; ++i) {
    once(true);
    once(false);
  }
  graph_us.clear();
  eager_us.clear();
  for (int i = 0; i < iters; i += 10)
    for (int j = 0; j < 20; ++j) once(((i / 10) + j / 10) % 2 == 0);
  rep.check(dtr::local::Tensor(a.to_local()).to_vector<float>() ==
                    dtr::local::Tensor(a2.to_local()).to_vector<float>() &&
                b.to_local().to_vector<float>() == b2.to_local().to_vector<float>(),
            "replayed and eager values equal");
  std::printf("  eager  10 ops + synchronize: median %7.1f us, p99 %7.1f us\n", median(eager_us),
              percentile(eager_us, 0.99));
  std::printf("  replay 10 ops + synchronize: median %7.1f us, p99 %7.1f us\n", median(graph_us),
              percentile(graph_us, 0.99));
  rep.info("roundtrip: captured median / eager median", median(graph_us) / median(eager_us));
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "RESULT {\"bench\":\"graph_roundtrip\",\"replay_us\":%.1f,\"eager_us\":%.1f,"
                "\"replay_p99_us\":%.1f,\"eager_p99_us\":%.1f}",
                median(graph_us), median(eager_us), percentile(graph_us, 0.99),
                percentile(eager_us, 0.99));
  rep.results.push_back(buf);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int only = 0;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--quick") {
      quick = true;
    } else if (arg == "--only" && i + 1 < argc) {
      only = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--quick] [--only N]  (N: 1 chain, 2 sgd, 3 roundtrip)\n",
                   argv[0]);
      return 2;
    }
  }
  auto want = [&](int k) { return only == 0 || only == k; };
#ifndef NDEBUG
  std::printf("WARNING: built without NDEBUG (not a Release build); figures mean little\n");
#endif
  Report rep;
  try {
    RatePeer peer;  // forked before this process has threads
    WorkerDaemon w0, w1;
    std::printf("dtr_graph_bench%s; load average %s\n", quick ? " --quick" : "",
                load_average().c_str());
    dtr::MasterOptions options;
    options.workers = {w0.endpoint(), w1.endpoint()};
    options.connect_timeout = std::chrono::seconds(30);
    options.sync_timeout = std::chrono::seconds(120);
    dtr::init_master_worker(options);
    struct Guard {
      ~Guard() { dtr::shutdown_master_worker(); }
    } guard;
    if (want(1)) bench_chain(peer, quick, rep);
    if (want(2)) bench_sgd(quick, rep);
    if (want(3)) bench_roundtrip(quick, rep);
    std::printf("\n");
    for (const std::string& g : rep.goals) std::printf("%s\n", g.c_str());
    std::printf("load average at the end: %s\n\n", load_average().c_str());
    for (const std::string& r : rep.results) std::printf("%s\n", r.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr_graph_bench: %s\n", e.what());
    return 1;
  }
  if (!rep.checks_ok) {
    std::printf("CHECK FAILED (see 'check' lines above)\n");
    return 1;
  }
  std::printf("checks: all results match\n");
  return 0;
}
