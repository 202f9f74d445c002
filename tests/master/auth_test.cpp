// Authentication between masters and workers (docs/security.md): real dtr-worker processes
// with cluster keys; masters with the key, another key, the public half only, or none.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <thread>
#include <zmq.hpp>

#include "cluster.hpp"
#include "dtr/collectives.hpp"
#include "dtr/security.hpp"
#include "protocol/codec.hpp"
#include "protocol/transport.hpp"

namespace dtr::test {
namespace {

using Clock = std::chrono::steady_clock;

// A private directory with two cluster keys; clears the key variables of the environment
// (the workers inherit it) and restores them at the end.
struct Keys {
  std::string dir, a, b;
  ClusterKey key_a, key_b;
  std::vector<std::pair<std::string, std::string>> saved;
  Keys() {
    for (const char* name : {"DTR_KEY_FILE", "DTR_KEY", "DTR_INSECURE"}) {
      if (const char* v = std::getenv(name)) saved.emplace_back(name, v);
      unsetenv(name);
    }
    char tmpl[] = "/tmp/dtr-auth-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    a = dir + "/a.key";
    b = dir + "/b.key";
    key_a = generate_cluster_key();
    key_b = generate_cluster_key();
    write_key_file(a, key_a);
    write_key_file(b, key_b);
  }
  ~Keys() {
    [[maybe_unused]] int rc = std::system(("rm -rf '" + dir + "'").c_str());
    for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  }
};

MasterOptions keyed(const std::string& key_file, std::vector<std::string> workers) {
  MasterOptions o = test_options();
  o.key_file = key_file;
  o.workers = std::move(workers);
  return o;
}

// Sends a HELLO from a raw socket set up by `configure`; true when any reply arrives
// within `limit`.
template <typename Configure>
bool raw_hello_answered(const std::string& endpoint, Configure configure,
                        std::chrono::milliseconds limit) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  configure(s);
  s.connect(endpoint);
  protocol::send_message(s, nullptr,
                         protocol::encode(protocol::Hello{protocol::kVersion, "raw-client"}), {});
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, limit) > 0;
}

}  // namespace

TEST_CASE("CURVE session: keyed workers run ops, copies between nodes and collectives") {
  Keys keys;
  std::vector<WorkerProcess> workers;
  workers.reserve(2);
  for (int i = 0; i < 2; ++i) workers.emplace_back(std::vector<std::string>{"--key", keys.a});
  SessionGuard guard;
  init_master_worker(keyed(keys.a, {workers[0].endpoint(), workers[1].endpoint()}));
  REQUIRE(node_count() == 2);

  DistributedTensor x = dtr::arange(12).to(DType::Float32).view({3, 4});
  check_same(x.sum(), local::full({}, 66.0f));
  // Worker to worker over the peer link, then a collective among the workers.
  DistributedTensor y = (x * 2).to(1);
  CHECK(y.get_node() == 1);
  check_same(y.sum(), local::full({}, 132.0f));
  std::vector<DistributedTensor> parts{x + 0, y + 0};
  all_reduce(parts, ReduceOp::Sum);
  check_same(parts[0].sum(), local::full({}, 198.0f));
  check_same(parts[1].sum(), local::full({}, 198.0f));
  CHECK_NOTHROW(synchronize());
}

TEST_CASE("a master without the key, or with another one, is refused; the right one is served") {
  Keys keys;
  WorkerProcess worker({"--key", keys.a});
  SessionGuard guard;

  struct Attempt {
    std::string key_file;
    const char* expect;
  };
  for (const Attempt& a : {Attempt{"", "requires CURVE"}, Attempt{keys.b, "another cluster key"}}) {
    CAPTURE(a.key_file);
    auto started = Clock::now();
    std::string why = message_of<AuthenticationError>(
        [&] { init_master_worker(keyed(a.key_file, {worker.endpoint()})); });
    CHECK(contains(why, worker.endpoint()));
    CHECK_MESSAGE(contains(why, a.expect), why);
    // Refused at the handshake, not after the 10 s connect timeout.
    CHECK(Clock::now() - started < 5s);
    CHECK_FALSE(is_master_worker_initialized());
  }
  CHECK(worker.running());
  init_master_worker(keyed(keys.a, {worker.endpoint()}));
  check_same(dtr::ones({4}).sum(), local::full({}, 4.0f));
}

TEST_CASE("nothing from a peer without the key's secret reaches the worker") {
  Keys keys;
  WorkerProcess worker({"--key", keys.a});
  // Control: the right key gets HELLO's reply.
  CHECK(raw_hello_answered(
      worker.endpoint(),
      [&](zmq::socket_t& s) {
        s.set(zmq::sockopt::curve_serverkey, keys.key_a.public_key);
        s.set(zmq::sockopt::curve_publickey, keys.key_a.public_key);
        s.set(zmq::sockopt::curve_secretkey, keys.key_a.secret_key);
      },
      5s));
  // The public half (it is printed in logs) with a key pair of one's own: ZAP refuses it.
  CHECK_FALSE(raw_hello_answered(
      worker.endpoint(),
      [&](zmq::socket_t& s) {
        s.set(zmq::sockopt::curve_serverkey, keys.key_a.public_key);
        s.set(zmq::sockopt::curve_publickey, keys.key_b.public_key);
        s.set(zmq::sockopt::curve_secretkey, keys.key_b.secret_key);
      },
      1500ms));
  // Plain ZeroMQ: the mechanisms do not match, nothing is read.
  CHECK_FALSE(raw_hello_answered(
      worker.endpoint(), [](zmq::socket_t&) {}, 1500ms));
  CHECK(worker.running());
  // The refused HELLOs opened no session: a keyed master is served at once (a session
  // left open would answer "busy").
  SessionGuard guard;
  MasterOptions o = keyed(keys.a, {worker.endpoint()});
  o.connect_timeout = 3s;
  init_master_worker(o);
  check_same(dtr::full({2}, 3.0).sum(), local::full({}, 6.0f));
}

TEST_CASE("listen mode: a worker with another key is refused and says why") {
  Keys keys;
  std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
  SessionGuard guard;
  MasterOptions o = test_options();
  o.key_file = keys.a;
  o.listen = endpoint;
  o.num_workers = 1;
  o.connect_timeout = 3s;
  auto init = std::async(std::launch::async, [o] { init_master_worker(o); });
  std::this_thread::sleep_for(100ms);
  WorkerProcess intruder =
      WorkerProcess::with_args({"--master", endpoint, "--key", keys.b, "--log-level", "warn"});
  // The worker gives up at the refusal instead of waiting for a HELLO.
  int status = wait_or_kill(intruder.pid(), 5s);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
  REQUIRE(init.wait_for(10s) == std::future_status::ready);
  std::string why = message_of<TimeoutError>([&] { init.get(); });
  CHECK(contains(why, "only 0 of 1 workers"));
  CHECK_MESSAGE(contains(why, "refused"), why);
}

TEST_CASE("a non-loopback endpoint without a key is refused before anything is sent") {
  Keys keys;
  SessionGuard guard;
  // 192.0.2.0/24 is reserved for documentation: the refusal comes before any connect.
  std::string why = message_of<AuthenticationError>([] {
    MasterOptions o = test_options();
    o.workers = {"tcp://192.0.2.1:5555"};
    init_master_worker(o);
  });
  CHECK_MESSAGE(contains(why, "tcp://192.0.2.1:5555"), why);
  CHECK(contains(why, "dtr-keygen"));
  CHECK(contains(why, "DTR_INSECURE=1"));

  // A worker asked to listen on every interface without a key refuses to start.
  WorkerProcess w =
      WorkerProcess::with_args({"--listen", "tcp://0.0.0.0:*", "--log-level", "warn"});
  int status = wait_or_kill(w.pid(), 5s);
  REQUIRE(status != -1);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 1);
}

TEST_CASE("listen mode: a master torn down while refused peers keep knocking") {
  // The guard's thread reports each refusal into the session while the session ends; two
  // peers refused for different reasons keep its lines from being deduplicated. Under TSan
  // this caught the session's refusal note destroyed before the guard's thread stopped.
  Keys keys;
  SessionGuard guard;
  for (int round = 0; round < 5; ++round) {
    std::string endpoint = "tcp://127.0.0.1:" + std::to_string(free_port());
    std::atomic<bool> stop{false};
    // One context for both: libpgm (under libzmq) counts contexts in a global that TSan
    // cannot see, so contexts made and ended on two threads at once would be reported.
    zmq::context_t ctx(1);
    auto knock = [&](bool curve) {
      for (int i = 0; i < 5000 && !stop; ++i) {
        zmq::socket_t s(ctx, zmq::socket_type::dealer);
        s.set(zmq::sockopt::linger, 0);
        if (curve) {  // the right server key, but not the cluster's key pair
          s.set(zmq::sockopt::curve_serverkey, keys.key_a.public_key);
          s.set(zmq::sockopt::curve_publickey, keys.key_b.public_key);
          s.set(zmq::sockopt::curve_secretkey, keys.key_b.secret_key);
        }
        s.connect(endpoint);
        std::this_thread::sleep_for(2ms);
      }
    };
    std::thread plain(knock, false), other_key(knock, true);
    MasterOptions o = test_options();
    o.key_file = keys.a;
    o.listen = endpoint;
    o.num_workers = 1;
    o.connect_timeout = 300ms;
    std::string why = message_of<TimeoutError>([&] { init_master_worker(o); });
    stop = true;
    plain.join();
    other_key.join();
    CHECK(contains(why, "only 0 of 1 workers"));
  }
}

}  // namespace dtr::test
