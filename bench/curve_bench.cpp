// dtr_curve_bench: what CURVE authentication and encryption costs, measured in one run.
//
// Two dtr-workers of this build on loopback TCP, one plain and one started with a cluster
// key (`--key`), and the same work against each from this process, interleaved rep by rep
// (a fresh session per rep, plain and CURVE alternating, order rotated):
//   dispatch   N x.add_(1) on a 1-element tensor, then synchronize(): ops/s
//   send       dist_send of a 64 MiB float32 tensor: GB/s
//   fetch      to_local of a 64 MiB float32 tensor: GB/s
// Baseline of the same comparison without dtr: raw ZeroMQ between two threads of this
// process over loopback TCP, plain vs CURVE: N 64-byte DEALER -> ROUTER messages (msgs/s)
// and 64 MiB messages (GB/s). Every figure is a median over the reps; the ratio is
// CURVE / plain (1: free). The load average is printed at the start and end.
//
// Usage: dtr_curve_bench [--quick]     (docs/performance.md, "CURVE")
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "dtr/distributed.hpp"
#include "dtr/security.hpp"
#include "dtr/tensor.hpp"
#include "support/worker_process.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct Row {
  std::string what, unit;
  std::vector<double> plain, curve;
};

// ---- raw ZeroMQ, two threads, loopback TCP ----

// Sends `count` messages of `bytes` from a DEALER to a ROUTER in another thread (its own
// context, as another process would have), and returns the seconds until the receiver
// has them all (it acks the last).
double raw_once(const dtr::ClusterKey* key, int64_t count, size_t bytes) {
  zmq::context_t server_ctx(1), client_ctx(1);
  zmq::socket_t router(server_ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  router.set(zmq::sockopt::rcvhwm, 0);
  if (key) {
    router.set(zmq::sockopt::curve_server, 1);
    router.set(zmq::sockopt::curve_secretkey, key->secret_key);
  }
  router.bind("tcp://127.0.0.1:*");
  std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  zmq::socket_t dealer(client_ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::sndhwm, 0);
  dealer.set(zmq::sockopt::rcvtimeo, 60000);
  if (key) {
    dealer.set(zmq::sockopt::curve_serverkey, key->public_key);
    dealer.set(zmq::sockopt::curve_publickey, key->public_key);
    dealer.set(zmq::sockopt::curve_secretkey, key->secret_key);
  }
  dealer.connect(endpoint);
  std::thread receiver([&] {
    router.set(zmq::sockopt::rcvtimeo, 60000);
    for (int64_t i = 0; i < count + 1; ++i) {  // one handshake message first
      zmq::message_t id, body;
      if (!router.recv(id) || !router.recv(body)) return;
      if (i == count) {
        router.send(id, zmq::send_flags::sndmore);
        router.send(zmq::str_buffer("ack"), zmq::send_flags::none);
      }
    }
  });
  // A first message and its ack-less delivery set the connection (and handshake) up.
  dealer.send(zmq::str_buffer("warm"), zmq::send_flags::none);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  std::vector<char> payload(bytes, 'x');
  auto t0 = Clock::now();
  for (int64_t i = 0; i < count; ++i)
    dealer.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none);
  zmq::message_t ack;
  bool ok = dealer.recv(ack).has_value();
  double dt = seconds_since(t0);
  receiver.join();
  if (!ok) throw std::runtime_error("raw ZeroMQ receiver did not ack within 60 s");
  return dt;
}

// ---- dtr ----

struct DtrFigures {
  double dispatch, send, fetch;  // seconds
};

DtrFigures dtr_once(const std::string& endpoint, const std::string& key_file, int64_t ops,
                    const dtr::local::Tensor& big) {
  dtr::MasterOptions o;
  o.workers = {endpoint};
  o.key_file = key_file;
  o.connect_timeout = std::chrono::seconds(20);
  dtr::init_master_worker(o);
  DtrFigures f{};
  {
    dtr::DistributedTensor x = dtr::zeros({1});
    for (int i = 0; i < 10000; ++i) x.add_(1);  // warm-up
    dtr::synchronize();
    auto t0 = Clock::now();
    for (int64_t i = 0; i < ops; ++i) x.add_(1);
    dtr::synchronize();
    f.dispatch = seconds_since(t0);
    if (x.item<float>() != static_cast<float>(ops + 10000))
      throw std::runtime_error("dispatch: wrong sum");
    t0 = Clock::now();
    dtr::DistributedTensor h = dtr::dist_send(big);
    dtr::synchronize();
    f.send = seconds_since(t0);
    t0 = Clock::now();
    dtr::local::Tensor back = h.to_local();
    f.fetch = seconds_since(t0);
    if (back.numel() != big.numel() ||
        std::memcmp(back.raw_data(), big.raw_data(), static_cast<size_t>(big.numel()) * 4) != 0)
      throw std::runtime_error("transfer: the bytes came back different");
  }
  dtr::shutdown_master_worker();
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int reps = quick ? 2 : 5;
  const int64_t ops = quick ? 50000 : 300000;
  const int64_t raw_small = quick ? 100000 : 1000000;
  const size_t big_bytes = size_t{64} << 20;
  try {
    char tmpl[] = "/tmp/dtr-curve-bench-XXXXXX";
    if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
    std::string key_file = std::string(tmpl) + "/cluster.key";
    dtr::ClusterKey key = dtr::generate_cluster_key();
    dtr::write_key_file(key_file, key);
    for (const char* v : {"DTR_KEY_FILE", "DTR_KEY", "DTR_INSECURE"}) unsetenv(v);

    std::printf("dtr_curve_bench%s; load average %s\n", quick ? " --quick" : "",
                load_average().c_str());
    dtr::test::WorkerProcess plain_worker;
    dtr::test::WorkerProcess curve_worker({"--key", key_file});
    dtr::local::Tensor big =
        dtr::local::rand({static_cast<int64_t>(big_bytes / 4)}, dtr::DType::Float32);

    Row dispatch{"dtr dispatch x.add_(1)", "Mops/s", {}, {}};
    Row send{"dtr dist_send 64 MiB", "GB/s", {}, {}};
    Row fetch{"dtr to_local 64 MiB", "GB/s", {}, {}};
    Row raw_msgs{"raw zmq 64 B msgs", "Mmsg/s", {}, {}};
    Row raw_big{"raw zmq 64 MiB msgs", "GB/s", {}, {}};
    double gb = static_cast<double>(big_bytes) / 1e9;
    for (int r = 0; r < reps; ++r) {
      for (int k = 0; k < 2; ++k) {
        bool use_curve = (k + r) % 2 == 1;  // rotate which goes first
        const dtr::ClusterKey* kp = use_curve ? &key : nullptr;
        DtrFigures f = use_curve ? dtr_once(curve_worker.endpoint(), key_file, ops, big)
                                 : dtr_once(plain_worker.endpoint(), "", ops, big);
        (use_curve ? dispatch.curve : dispatch.plain).push_back(ops / f.dispatch / 1e6);
        (use_curve ? send.curve : send.plain).push_back(gb / f.send);
        (use_curve ? fetch.curve : fetch.plain).push_back(gb / f.fetch);
        (use_curve ? raw_msgs.curve : raw_msgs.plain)
            .push_back(raw_small / raw_once(kp, raw_small, 64) / 1e6);
        (use_curve ? raw_big.curve : raw_big.plain).push_back(4 * gb / raw_once(kp, 4, big_bytes));
      }
    }
    std::printf("\n%-24s %-8s %10s %10s %14s\n", "measure", "unit", "plain", "CURVE",
                "CURVE/plain");
    std::printf("%s\n", std::string(70, '-').c_str());
    for (const Row* row : {&dispatch, &send, &fetch, &raw_msgs, &raw_big}) {
      double p = median(row->plain), c = median(row->curve);
      std::printf("%-24s %-8s %10.3f %10.3f %14.3f\n", row->what.c_str(), row->unit.c_str(), p, c,
                  c / p);
      std::printf("RESULT {\"bench\":\"curve\",\"measure\":\"%s\",\"plain\":%.4f,\"curve\":%.4f}\n",
                  row->what.c_str(), p, c);
    }
    std::printf("(medians of %d reps, interleaved; load average at the end %s)\n", reps,
                load_average().c_str());
    [[maybe_unused]] int rc = std::system(("rm -rf '" + std::string(tmpl) + "'").c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtr_curve_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
