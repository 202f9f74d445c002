// Rendezvous stores: set/get/add/delete_prefix, bounded waits, shared use.
#include <doctest/doctest.h>

#include <cstdio>
#include <thread>

#include "pg_test_util.hpp"

using namespace dtr;
using namespace dtr::pgtest;

namespace {

void exercise(Store& s) {
  s.set("a/x", "1");
  s.set("a/y", std::string("bin\0ary\n", 8));
  s.set("b/x", "");
  CHECK(s.get("a/x", 1s) == "1");
  CHECK(s.get("a/y", 1s) == std::string("bin\0ary\n", 8));
  CHECK(s.get("b/x", 1s).empty());
  CHECK(s.add("n", 5) == 5);
  CHECK(s.add("n", -2) == 3);
  s.delete_prefix("a/");
  CHECK_THROWS_AS(s.get("a/x", std::chrono::milliseconds(30)), TimeoutError);
  CHECK(s.get("b/x", 1s).empty());
  // A get waits for a later set.
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    s.set("late", "v");
  });
  CHECK(s.get("late", 30s) == "v");
  t.join();
  // An add past int64 is refused and changes nothing (it overflowed, undefined, before).
  s.set("big", "9223372036854775807");
  CHECK_THROWS_WITH_AS(s.add("big", 1), doctest::Contains("overflows int64"), Error);
  CHECK(s.get("big", 1s) == "9223372036854775807");
  CHECK(s.add("big", -7) == 9223372036854775800);
}

std::string thread_key(int t, int k) {
  std::string key = "t";
  key += std::to_string(t);
  key += '/';
  key += std::to_string(k);
  return key;
}

}  // namespace

TEST_CASE("store: hash") {
  auto s = make_hash_store();
  exercise(*s);
}

TEST_CASE("store: file") {
  const std::string path = "/tmp/dtr-pg-store-" + std::to_string(getpid());
  ::unlink(path.c_str());
  auto s = make_file_store(path);
  exercise(*s);
  // A second handle (another process would do the same) sees the same contents.
  auto s2 = make_file_store(path);
  CHECK(s2->get("late", 1s) == "v");
  CHECK(s2->add("n", 1) == 4);
  ::unlink(path.c_str());
  CHECK_THROWS_AS(make_file_store("/nonexistent-dir/x"), TransportError);
}

TEST_CASE("store: file after a writer died mid-record") {
  // The torn line looks like a record cut short; the next record was appended to it (and
  // lost with it) before, and the torn one could have been read as a set of "a" to "b".
  const std::string path = "/tmp/dtr-pg-store-torn-" + std::to_string(getpid());
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("S x6b30 x30\nS x61 x62", f);  // "k0" = "0", then "a" = "b..." torn
    std::fclose(f);
  }
  auto s = make_file_store(path);
  s->set("k", "v");
  CHECK(s->get("k", 1s) == "v");
  CHECK(s->get("k0", 1s) == "0");
  CHECK_THROWS_AS(s->get("a", std::chrono::milliseconds(30)), TimeoutError);
  s->set("k2", "w");  // the file ends with a newline again
  CHECK(s->get("k2", 1s) == "w");
  CHECK(s->get("k", 1s) == "v");
  ::unlink(path.c_str());
}

TEST_CASE("store: file shared by threads of one process loses nothing") {
  // fcntl locks do not keep threads of one process apart (ranks as threads, two groups of
  // one program): the store does.
  const std::string path = "/tmp/dtr-pg-store-threads-" + std::to_string(getpid());
  ::unlink(path.c_str());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto s = make_file_store(path);
      for (int k = 0; k < 25; ++k) {
        s->set(thread_key(t, k), std::to_string(k));
        s->add("count", 1);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto s = make_file_store(path);
  CHECK(s->add("count", 0) == 100);
  for (int t = 0; t < 4; ++t) {
    for (int k = 0; k < 25; ++k) {
      CHECK(s->get(thread_key(t, k), 1s) == std::to_string(k));
    }
  }
  ::unlink(path.c_str());
}

TEST_CASE("store: tcp server and clients") {
  const int port = test::free_port();
  auto server = make_tcp_store("127.0.0.1", port, true, 10s);
  auto client = make_tcp_store("127.0.0.1", port, true, 10s);  // bind taken: becomes a client
  exercise(*client);
  CHECK(server->get("late", 1s) == "v");
  CHECK(server->describe() == "tcp://127.0.0.1:" + std::to_string(port));
  // No server at all: bounded.
  auto orphan =
      make_tcp_store("127.0.0.1", test::free_port(), false, std::chrono::milliseconds(100));
  CHECK_THROWS_WITH_AS(orphan->get("x", std::chrono::milliseconds(100)),
                       doctest::Contains("nothing answered at that address within 100 ms"),
                       TimeoutError);
  // A store that answers, and a key no rank sets: the message says which wait it was.
  CHECK_THROWS_WITH_AS(server->get("never-set", std::chrono::milliseconds(200)),
                       doctest::Contains("no answer for key 'never-set' within 200 ms (the "
                                         "store answers"),
                       TimeoutError);
  auto fresh = make_tcp_store("127.0.0.1", port, false, 10s);  // its first request waits
  CHECK_THROWS_WITH_AS(fresh->get("never-set", std::chrono::milliseconds(200)),
                       doctest::Contains("no answer for key 'never-set'"), TimeoutError);
  CHECK_THROWS_AS(make_tcp_store("127.0.0.1", 70000, true), InvalidArgument);
}
