// Cluster keys and the CURVE guard (security/): key files, the environment, which
// endpoints are local, and raw ZeroMQ sockets that hold the key, another key, only the
// public half, or none.
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "dtr/error.hpp"
#include "dtr/security.hpp"
#include "security/curve.hpp"

namespace {

using namespace std::chrono_literals;
using dtr::security::Guard;
using dtr::security::HandshakeWatch;

// A private temporary directory, removed with its files at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/dtr-security-test-XXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~TempDir() { [[maybe_unused]] int rc = std::system(("rm -rf '" + path + "'").c_str()); }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

void write_text(const std::string& path, const std::string& text, mode_t mode = 0600) {
  std::ofstream(path) << text;
  REQUIRE(chmod(path.c_str(), mode) == 0);
}

// Clears the variables resolve_security reads, and restores them afterwards.
struct CleanEnv {
  std::vector<std::pair<std::string, std::string>> saved;
  CleanEnv() {
    for (const char* name : {"DTR_KEY_FILE", "DTR_KEY", "DTR_INSECURE"}) {
      if (const char* v = std::getenv(name)) saved.emplace_back(name, v);
      unsetenv(name);
    }
  }
  ~CleanEnv() {
    for (const char* name : {"DTR_KEY_FILE", "DTR_KEY", "DTR_INSECURE"}) unsetenv(name);
    for (auto& [k, v] : saved) setenv(k.c_str(), v.c_str(), 1);
  }
};

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

dtr::SecurityConfig with_key(const dtr::ClusterKey& key) {
  dtr::SecurityConfig c;
  c.key = key;
  return c;
}

// Waits up to `limit` for a message on `s`.
bool receive_within(zmq::socket_t& s, std::vector<std::string>& frames,
                    std::chrono::milliseconds limit) {
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, limit) <= 0) return false;
  frames.clear();
  while (true) {
    zmq::message_t m;
    (void)s.recv(m, zmq::recv_flags::none);
    frames.push_back(m.to_string());
    if (!m.more()) break;
  }
  return true;
}

// Polls `watch` until it names a failure or `limit` passes.
std::string failure_within(HandshakeWatch& watch, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::string why = watch.failure(); !why.empty()) return why;
    std::this_thread::sleep_for(20ms);
  }
  return "";
}

}  // namespace

TEST_CASE("security: local endpoints are loopback, ipc and inproc only") {
  for (const char* local :
       {"ipc:///tmp/x", "inproc://a", "tcp://127.0.0.1:5555", "tcp://127.1.2.3:*",
        "tcp://localhost:80", "tcp://[::1]:7000", "tcp://127.0.0.1:0;127.0.0.1:9"}) {
    CAPTURE(local);
    CHECK(dtr::is_local_endpoint(local));
  }
  for (const char* remote :
       {"tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://10.0.0.2:5555", "tcp://127.0.0.1.evil.com:1",
        "tcp://128.0.0.1:5", "tcp://[::]:5", "tcp://1270.0.0.1:5", "tcp://127.0.0.256:5",
        "tcp://head-node:6000", "udp://127.0.0.1:5", "tcp://[::1:5", ""}) {
    CAPTURE(remote);
    CHECK_FALSE(dtr::is_local_endpoint(remote));
  }
}

TEST_CASE("security: key files round-trip and bad ones are refused with the reason") {
  TempDir dir;
  dtr::ClusterKey key = dtr::generate_cluster_key();
  CHECK(key.public_key.size() == 40);
  CHECK(key.secret_key.size() == 40);
  CHECK(key.public_key != dtr::generate_cluster_key().public_key);

  std::string path = dir.file("cluster.key");
  dtr::write_key_file(path, key);
  struct stat st {};
  REQUIRE(stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  dtr::ClusterKey back = dtr::read_key_file(path);
  CHECK(back.public_key == key.public_key);
  CHECK(back.secret_key == key.secret_key);
  CHECK(dtr::cluster_key_from_secret(key.secret_key).public_key == key.public_key);

  // No silent overwrite; --force replaces.
  CHECK(error_of([&] { dtr::write_key_file(path, dtr::generate_cluster_key()); }).find("--force") !=
        std::string::npos);
  CHECK(dtr::read_key_file(path).secret_key == key.secret_key);
  dtr::ClusterKey other = dtr::generate_cluster_key();
  dtr::write_key_file(path, other, true);
  CHECK(dtr::read_key_file(path).secret_key == other.secret_key);

  // Readable by others: refused, as ssh refuses such private keys.
  std::string open_file = dir.file("open.key");
  dtr::write_key_file(open_file, key);
  REQUIRE(chmod(open_file.c_str(), 0644) == 0);
  std::string why = error_of([&] { dtr::read_key_file(open_file); });
  CHECK(why.find("chmod 600") != std::string::npos);
  CHECK(why.find("0644") != std::string::npos);

  std::string other_public = dtr::generate_cluster_key().public_key;
  std::vector<std::pair<std::string, std::string>> bad = {
      {"", "no secret-key"},
      {"# only a comment\n", "no secret-key"},
      // (Not a generated key: one that starts with '=', a Z85 character, would parse.)
      {"secret-key abc\n", "line 1: expected `name = value`"},
      {"secret-key = short\n", "line 1: a key is 40 Z85 characters, this one has 5"},
      {"secret-key = " + std::string(39, 'a') + "\"\n", "not Z85"},
      {"colour = blue\n", "unknown entry \"colour\""},
      {"secret-key = " + key.secret_key + "\npublic-key = " + other_public + "\n",
       "not the public half"},
  };
  for (auto& [text_, expect] : bad) {
    const std::string& text = text_;  // captured (clang 14: not a binding)
    CAPTURE(text);
    std::string p = dir.file("bad.key");
    write_text(p, text);
    std::string e = error_of([&] { dtr::read_key_file(p); });
    CHECK(e.find(expect) != std::string::npos);
    CHECK(e.find(p) != std::string::npos);
  }
  CHECK(error_of([&] { dtr::read_key_file(dir.file("missing.key")); }).find("No such file") !=
        std::string::npos);
  CHECK(error_of([&] { dtr::read_key_file(dir.path); }).find("not a regular file") !=
        std::string::npos);
}

TEST_CASE("security: resolve_security reads the option, then DTR_KEY_FILE, then DTR_KEY") {
  CleanEnv env;
  TempDir dir;
  dtr::ClusterKey a = dtr::generate_cluster_key(), b = dtr::generate_cluster_key();
  dtr::write_key_file(dir.file("a.key"), a);
  dtr::write_key_file(dir.file("b.key"), b);

  dtr::SecurityConfig none = dtr::resolve_security();
  CHECK_FALSE(none.key);
  CHECK_FALSE(none.insecure);

  setenv("DTR_KEY", b.secret_key.c_str(), 1);
  CHECK(dtr::resolve_security().key->public_key == b.public_key);
  CHECK(dtr::resolve_security().key_source == "$DTR_KEY");
  setenv("DTR_KEY_FILE", dir.file("a.key").c_str(), 1);
  CHECK(dtr::resolve_security().key->public_key == a.public_key);
  CHECK(dtr::resolve_security(dir.file("b.key")).key->public_key == b.public_key);

  unsetenv("DTR_KEY_FILE");
  setenv("DTR_KEY", "not a key", 1);
  CHECK(error_of([] { dtr::resolve_security(); }).find("$DTR_KEY") != std::string::npos);
  unsetenv("DTR_KEY");

  setenv("DTR_INSECURE", "yes", 1);
  CHECK(dtr::resolve_security().insecure);
  setenv("DTR_INSECURE", "0", 1);
  CHECK_FALSE(dtr::resolve_security().insecure);
  CHECK(dtr::resolve_security({}, true).insecure);
}

TEST_CASE("security: without a key, plain links to non-local endpoints are refused") {
  zmq::context_t ctx(1);
  Guard plain(ctx, dtr::SecurityConfig{});
  zmq::socket_t s(ctx, zmq::socket_type::router);
  std::string why;
  try {
    plain.server(s, "tcp://0.0.0.0:5555", "worker listen endpoint");
  } catch (const dtr::AuthenticationError& e) {
    why = e.what();
  }
  CHECK(why.find("worker listen endpoint tcp://0.0.0.0:5555") != std::string::npos);
  CHECK(why.find("dtr-keygen") != std::string::npos);
  CHECK(why.find("DTR_INSECURE=1") != std::string::npos);
  CHECK_THROWS_AS(plain.client(s, "tcp://10.1.2.3:5", "worker"), dtr::AuthenticationError);
  CHECK_NOTHROW(plain.client(s, "tcp://127.0.0.1:5", "worker"));
  CHECK_NOTHROW(plain.server(s, "ipc:///tmp/dtr-x", "worker"));

  dtr::SecurityConfig insecure;
  insecure.insecure = true;
  Guard open(ctx, insecure);
  CHECK_NOTHROW(open.server(s, "tcp://0.0.0.0:5555", "worker"));

  Guard keyed(ctx, with_key(dtr::generate_cluster_key()));
  zmq::socket_t s2(ctx, zmq::socket_type::router);
  CHECK_NOTHROW(keyed.server(s2, "tcp://0.0.0.0:5555", "worker"));
  CHECK(keyed.curve());
}

TEST_CASE("security: only holders of the cluster key get a message through") {
  dtr::ClusterKey key = dtr::generate_cluster_key();
  zmq::context_t server_ctx(1);
  std::mutex mu;
  std::vector<std::string> reports;
  Guard guard(server_ctx, with_key(key), [&](const std::string& line) {
    std::lock_guard lock(mu);
    reports.push_back(line);
  });
  zmq::socket_t server(server_ctx, zmq::socket_type::router);
  server.set(zmq::sockopt::linger, 0);
  guard.server(server, "tcp://127.0.0.1:*", "test server");
  server.bind("tcp://127.0.0.1:*");
  std::string endpoint = server.get(zmq::sockopt::last_endpoint);

  // Each client lives in its own context, like another process.
  auto client_try = [&](const dtr::SecurityConfig& config, const char* name, std::string* failure) {
    zmq::context_t ctx(1);
    Guard g(ctx, config);
    zmq::socket_t c(ctx, zmq::socket_type::dealer);
    c.set(zmq::sockopt::linger, 0);
    g.client(c, endpoint, "server");
    HandshakeWatch watch(ctx, c, g.curve(), "server");
    c.connect(endpoint);
    c.send(zmq::buffer(std::string(name)), zmq::send_flags::dontwait);
    if (failure) *failure = failure_within(watch, 3s);
  };

  SUBCASE("the same key: delivered, and the reply comes back") {
    zmq::context_t ctx(1);
    Guard g(ctx, with_key(key));
    zmq::socket_t c(ctx, zmq::socket_type::dealer);
    c.set(zmq::sockopt::linger, 0);
    g.client(c, endpoint, "server");
    c.connect(endpoint);
    c.send(zmq::buffer(std::string("hello")), zmq::send_flags::none);
    std::vector<std::string> frames;
    REQUIRE(receive_within(server, frames, 5s));
    REQUIRE(frames.size() == 2);
    CHECK(frames[1] == "hello");
    server.send(zmq::buffer(frames[0]), zmq::send_flags::sndmore);
    server.send(zmq::buffer(std::string("back")), zmq::send_flags::none);
    REQUIRE(receive_within(c, frames, 5s));
    CHECK(frames[0] == "back");
  }
  SUBCASE("another cluster key: the handshake fails, nothing is delivered") {
    std::string why;
    client_try(with_key(dtr::generate_cluster_key()), "intruder", &why);
    CHECK(why.find("server") != std::string::npos);
    CHECK(why.find("another cluster key") != std::string::npos);
  }
  SUBCASE("the public half only (a stolen log line): refused by the ZAP handler") {
    // The intruder knows the server's public key but has its own key pair.
    zmq::context_t ctx(1);
    dtr::ClusterKey own = dtr::generate_cluster_key();
    zmq::socket_t c(ctx, zmq::socket_type::dealer);
    c.set(zmq::sockopt::linger, 0);
    c.set(zmq::sockopt::curve_serverkey, key.public_key);
    c.set(zmq::sockopt::curve_publickey, own.public_key);
    c.set(zmq::sockopt::curve_secretkey, own.secret_key);
    HandshakeWatch watch(ctx, c, true, "server");
    c.connect(endpoint);
    c.send(zmq::buffer(std::string("intruder")), zmq::send_flags::dontwait);
    std::string why = failure_within(watch, 3s);
    CHECK(why.find("refused this process's key") != std::string::npos);
    std::lock_guard lock(mu);
    bool reported = false;
    for (auto& r : reports)
      reported |= r.find("does not hold this cluster's key") != std::string::npos;
    CHECK(reported);
  }
  SUBCASE("no key at all: the handshake fails, nothing is delivered") {
    std::string why;
    client_try(dtr::SecurityConfig{}, "plain", &why);
    CHECK(why.find("server") != std::string::npos);
    CHECK(why.find("key") != std::string::npos);
  }
  // Whatever the refused clients sent never arrived.
  std::vector<std::string> frames;
  CHECK_FALSE(receive_within(server, frames, 300ms));
}
