// The zmq backend's same-host path (pg/zmq/shm_path.hpp): which groups take it and why not,
// bit-identical reductions, ranks in separate processes, slot exhaustion, a failure on
// one rank reaching the others, and point to point through the rings (pg/zmq/p2p_ring.hpp). Every
// collective's values on this path are also checked by the "[zmq]" cases of the suite parameterised
// by backend; "[zmq sockets]" keeps the same cases on the sockets.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <random>

#include "pg/zmq/mesh.hpp"
#include "pg/zmq/p2p_ring.hpp"
#include "pg/zmq/shm_path.hpp"
#include "pg_test_util.hpp"

using namespace dtr;
using namespace dtr::pgtest;

namespace {

// Per-rank pseudo-random floats: sums of them differ in their last bits with the order of
// the additions, so equal results on every rank show the same order everywhere.
local::Tensor noise(int rank, int64_t n) {
  std::mt19937 gen(static_cast<uint32_t>(1000 + rank));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  auto t = local::empty(Shape{n});
  auto* p = t.data<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = dist(gen) * 1e3f;
  return t;
}

std::vector<char> bytes_of(const local::Tensor& t) {
  const auto* p = static_cast<const char*>(t.raw_data());
  return {p, p + t.meta().numel() * static_cast<int64_t>(element_size(t.meta().dtype))};
}

// Runs body(group, rank) in two forked processes that form a group over a file store (real
// cross-process reads); each must return without an exception within a minute.
void in_two_processes(const char* name, const std::function<void(ProcessGroup&, int)>& body) {
  const std::string file = std::string("/tmp/dtr-pg-") + name + "-" + std::to_string(getpid());
  ::unlink(file.c_str());
  auto codes = fork_ranks(
      2,
      [&](int i) {
        ProcessGroupOptions o;
        o.timeout = std::chrono::seconds(30);
        o.bind_address = "127.0.0.1";
        ProcessGroup g = ProcessGroup::create(make_file_store(file), i, 2, o);
        body(g, i);
        g.shutdown();
        return 0;
      },
      std::chrono::seconds(60));
  ::unlink(file.c_str());
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}

}  // namespace

TEST_CASE("same host: collectives take shared memory and every rank ends with the same bits") {
  constexpr int kRanks = 3;
  // Around the inline limit (64 KiB = 16384 floats), and several 256 KiB segments per chunk.
  const std::vector<int64_t> sizes{1, 7, 16384, 16385, 300001};
  std::mutex m;
  std::vector<std::vector<std::vector<char>>> results(sizes.size());
  std::vector<std::string> notes_before, notes_after;
  const uint64_t runs_before = pg::shm::collectives_run();
  check_no_errors(run_ranks(kRanks, [&](ProcessGroup& g) {
    const std::string before = g.host_path();
    for (size_t k = 0; k < sizes.size(); ++k) {
      auto t = noise(g.rank(), sizes[k]);
      g.all_reduce(t);
      // Close to the sum computed here (the order of additions differs).
      auto v = t.to_vector<float>();
      std::vector<float> want(v.size(), 0.0f);
      for (int r = 0; r < kRanks; ++r) {
        auto in = noise(r, sizes[k]).to_vector<float>();
        for (size_t i = 0; i < in.size(); ++i) want[i] += in[i];
      }
      for (size_t i = 0; i < v.size(); ++i) {
        if (std::abs(v[i] - want[i]) > 1e-2f)
          throw Error("all_reduce of " + std::to_string(sizes[k]) + ": element " +
                      std::to_string(i) + " is " + std::to_string(v[i]) + ", expected " +
                      std::to_string(want[i]));
      }
      std::lock_guard lock(m);
      results[k].push_back(bytes_of(t));
    }
    std::lock_guard lock(m);
    notes_before.push_back(before);
    notes_after.push_back(g.host_path());
  }));
  for (size_t k = 0; k < sizes.size(); ++k) {
    CAPTURE(sizes[k]);
    REQUIRE(results[k].size() == kRanks);
    CHECK(results[k][1] == results[k][0]);
    CHECK(results[k][2] == results[k][0]);
  }
  for (const auto& n : notes_before) CHECK(n.empty());
  for (const auto& n : notes_after) CHECK(n == "shared memory");
  CHECK(pg::shm::collectives_run() - runs_before == sizes.size() * kRanks);
}

TEST_CASE("same host: one rank that keeps to the sockets keeps the whole group there") {
  auto store = make_hash_store();
  std::mutex m;
  std::vector<std::string> errors, notes;
  std::vector<std::thread> threads;
  const uint64_t runs_before = pg::shm::collectives_run();
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        ProcessGroupOptions o = fast_options();
        o.same_host = r != 1;
        ProcessGroup g = ProcessGroup::create(store, r, 3, o);
        auto t = local::full(Shape{5000}, r + 1);
        g.all_reduce(t);
        expect_values(
            t, [](int64_t) { return 6.0; }, "all_reduce on the sockets");
        std::lock_guard lock(m);
        notes.push_back(g.host_path());
        g.shutdown();
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  check_no_errors(errors);
  REQUIRE(notes.size() == 3);
  for (const auto& n : notes) {
    CAPTURE(n);
    CHECK(n.find("sockets (rank 1 keeps to sockets") == 0);
  }
  CHECK(pg::shm::collectives_run() == runs_before);
}

TEST_CASE("same host: ranks in separate processes read each other's tensors in place") {
  in_two_processes("shm", [](ProcessGroup& g, int i) {
    for (int64_t n : {int64_t{3}, int64_t{1} << 20}) {
      auto t = local::full(Shape{n}, i + 1);
      g.all_reduce(t);
      expect_values(
          t, [](int64_t) { return 3.0; }, "all_reduce");
      auto b = local::full(Shape{n}, i == 1 ? 7 : 0, DType::Int64);
      g.broadcast(b, 1);
      expect_values(
          b, [](int64_t) { return 7.0; }, "broadcast");
      std::vector<local::Tensor> outs{local::zeros(Shape{n}), local::zeros(Shape{n})};
      g.all_gather(outs, local::full(Shape{n}, 10 * (i + 1)));
      expect_values(
          outs[0], [](int64_t) { return 10.0; }, "all_gather block 0");
      expect_values(
          outs[1], [](int64_t) { return 20.0; }, "all_gather block 1");
      std::vector<local::Tensor> ins{local::full(Shape{n}, i), local::full(Shape{n}, 5)};
      auto out = local::zeros(Shape{n});
      g.reduce_scatter(out, ins);
      expect_values(
          out, [&](int64_t) { return i == 0 ? 1.0 : 10.0; }, "reduce_scatter");
    }
    if (g.host_path() != "shared memory") throw Error("path: " + g.host_path());
  });
}

TEST_CASE("same host: past 32 groups a process keeps further groups on the sockets") {
  check_no_errors(run_ranks(2, [&](ProcessGroup& g) {
    g.barrier();  // the world group takes one slot of pg::shm::kSlots
    std::vector<ProcessGroup> subs;
    for (int k = 0; k < pg::shm::kSlots + 2; ++k) {
      subs.push_back(g.new_group({0, 1}));
      auto t = local::full(Shape{100}, g.rank() + k);
      subs.back().all_reduce(t);
      expect_values(
          t, [&](int64_t) { return 2.0 * k + 1; }, "subgroup all_reduce");
      const std::string note = subs.back().host_path();
      const bool shared = k < pg::shm::kSlots - 1;
      if (shared != (note == "shared memory") ||
          (!shared && note.find("has no free slot (at most 32 groups") == std::string::npos)) {
        throw Error("subgroup " + std::to_string(k) + ": " + note);
      }
    }
    subs.clear();  // frees their slots
    ProcessGroup again = g.new_group({0, 1});
    again.barrier();
    if (again.host_path() != "shared memory") throw Error("after freeing: " + again.host_path());
  }));
}

TEST_CASE("same host: a rank whose collective fails makes the others fail with its error") {
  auto store = make_hash_store();
  std::mutex m;
  std::vector<std::string> errors;
  std::string seen_by_1;
  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      try {
        // Rank 0 gives up after 2 s (its rendezvous is bounded by that too: 300 ms was too
        // short under ThreadSanitizer on a loaded machine); rank 1 would wait 60 s.
        ProcessGroupOptions o = fast_options(r == 0 ? 2000ms : 60s);
        ProcessGroup g = ProcessGroup::create(store, r, 3, o);
        g.barrier();
        auto t = local::ones(Shape{10});
        if (r == 2) {  // never joins the all_reduce
          for (int k = 0; k < 6000 && !done; ++k) std::this_thread::sleep_for(10ms);
        } else {
          try {
            g.all_reduce(t);
            throw Error("all_reduce without rank 2 completed");
          } catch (const TimeoutError& e) {
            if (r == 1) {
              std::lock_guard lock(m);
              seen_by_1 = e.what();
            }
          }
          if (r == 1) done = true;
        }
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
  check_no_errors(errors);
  CAPTURE(seen_by_1);
  // Rank 0's error, not rank 1's own timeout.
  CHECK(seen_by_1.find("on rank 0 of a group of 3: timed out after 2000 ms waiting for rank 2") !=
        std::string::npos);
}

TEST_CASE("same host: point-to-point payloads past a ring record are read in place by address") {
  in_two_processes("p2p", [](ProcessGroup& g, int i) {
    const int other = 1 - i;
    const int64_t n = 300001;  // 1.2 MB of float32
    auto reads = [] { return pg::mesh_read_counts().by_address; };
    // Before the group's first collective: on the sockets.
    const uint64_t before = reads();
    if (i == 0) g.send(noise(0, n), 1);
    auto first = local::zeros(Shape{n});
    if (i == 1) g.recv(first, 0);
    if (i == 1 && bytes_of(first) != bytes_of(noise(0, n))) throw Error("sockets: payload");
    if (reads() != before) throw Error("read by address before the same-host agreement");
    g.barrier();  // agrees on the same-host path
    if (g.host_path() != "shared memory") throw Error("path: " + g.host_path());
    // Both send first, then receive: a send must not wait for its receive (the receiver
    // copies a payload nobody receives yet on arrival).
    g.send(noise(10 + i, n), other);
    auto got = local::zeros(Shape{n});
    if (g.recv(got, other) != other) throw Error("source");
    if (bytes_of(got) != bytes_of(noise(10 + other, n))) throw Error("exchange: payload");
    // A receive posted before the send: read straight into its tensor. Bool and int64.
    auto flags = local::zeros(Shape{1 << 20}, DType::Bool);
    Work w;
    if (i == 1) w = g.irecv(flags, 0, 7);
    g.barrier();
    if (i == 0) {
      std::vector<double> pattern(1 << 20);
      for (size_t k = 0; k < pattern.size(); ++k) pattern[k] = k % 3 == 0 ? 1 : 0;
      g.send(local::from_vector<double>(pattern, Shape{1 << 20}).to(DType::Bool), 1, 7);
    }
    if (i == 1) {
      w.wait();
      auto v = flags.to(DType::Int64).to_vector<int64_t>();
      for (int64_t k = 0; k < (1 << 20); ++k)
        if (v[k] != (k % 3 == 0 ? 1 : 0)) throw Error("bool payload at " + std::to_string(k));
    }
    // A receive that does not fit fails with both sizes; the send completes anyway.
    if (i == 0) g.send(noise(0, n), 1, 9);
    if (i == 1) {
      auto small = local::zeros(Shape{n - 1});
      try {
        g.recv(small, 0, 9);
        throw Error("a mismatched receive succeeded");
      } catch (const ShapeError& e) {
        if (std::string(e.what()).find("rank 0 sent 300001 elements") == std::string::npos) throw;
      }
    }
    // Up to a ring record (half a ring less its head: 512 KiB in a group of two): in the
    // ring, 64 KiB and 508 KiB included.
    if (g.host_path() != "shared memory") throw Error("path: " + g.host_path());
    const uint64_t big_reads = reads();
    for (int64_t m : {int64_t{1000}, int64_t{16384}, int64_t{32000}, int64_t{130000}}) {
      if (i == 0) g.send(noise(1, m), 1, 11);
      auto few = local::zeros(Shape{m});
      if (i == 1) g.recv(few, 0, 11);
      if (i == 1 && bytes_of(few) != bytes_of(noise(1, m))) throw Error("in the ring: payload");
    }
    // The exchange and the bool payload; the mismatched one too when it arrived before its
    // receive (copied on arrival).
    if (i == 1 && (big_reads - before < 2 || big_reads - before > 3)) {
      throw Error("payloads read by address: " + std::to_string(big_reads - before));
    }
    if (reads() != big_reads) throw Error("a small payload was read by address");
    g.barrier();
  });
}

namespace {

// A header as a send's record carries it.
pg::WireHeader send_header(int64_t count, uint64_t payload) {
  pg::WireHeader h;
  h.kind = static_cast<uint8_t>(pg::MsgKind::Data);
  h.op = static_cast<uint8_t>(CommOp::Send);
  h.count = count;
  h.payload = payload;
  return h;
}

}  // namespace

TEST_CASE(
    "same host: a point-to-point ring keeps order across wraps, fills, and rejects bad records") {
  // A ring's size follows the group's: a process's outgoing rings stay within 4 MiB, or
  // 256 KiB per peer in larger groups.
  using pg::shm::RingFile;
  CHECK(RingFile::ring_bytes_for(2) == size_t{1} << 20);
  CHECK(RingFile::ring_bytes_for(5) == size_t{1} << 20);
  CHECK(RingFile::ring_bytes_for(6) == size_t{512} << 10);
  CHECK(RingFile::ring_bytes_for(9) == size_t{512} << 10);
  CHECK(RingFile::ring_bytes_for(10) == size_t{256} << 10);
  CHECK(RingFile::ring_bytes_for(1000) == size_t{256} << 10);
  std::string why;
  auto a = pg::shm::RingFile::create(2, 0, &why);
  auto b = pg::shm::RingFile::create(2, 1, &why);
  REQUIRE(a);
  REQUIRE(b);
  CHECK(a->ring_bytes() == RingFile::ring_bytes_for(2));
  // A file of a group of another size is refused.
  auto c = pg::shm::RingFile::create(6, 1, &why);
  REQUIRE(c);
  std::string other_size;
  CHECK_FALSE(a->map_peer(1, getpid(), c->fd(), &other_size));
  CHECK(other_size.find("not a group of 2's") != std::string::npos);
  REQUIRE(a->map_peer(1, getpid(), b->fd(), &why));
  REQUIRE(b->map_peer(0, getpid(), a->fd(), &why));
  // The rings the pair uses were faulted in when mapped (a memfd counts its pages): their
  // first pass would otherwise fault every 4 KiB, in the small messages' latency.
  for (int fd : {a->fd(), b->fd()}) {
    struct stat st {};
    REQUIRE(fstat(fd, &st) == 0);
    CHECK(static_cast<size_t>(st.st_blocks) * 512 >= a->ring_bytes());
  }
  std::string mismatch;
  CHECK_FALSE(a->map_peer(1, getpid(), 0, &mismatch));  // stdin is no ring file
  CHECK(mismatch.find("rank 1's rings") != std::string::npos);

  // Records of varied sizes, many times round the ring; each read in order.
  std::vector<char> out(40000);
  int64_t sent = 0, read = 0;
  std::string bad;
  auto reader = [&](const pg::WireHeader& h, const char* data, size_t bytes) -> std::string {
    if (h.count != read || bytes != static_cast<size_t>(read * 7919 % 40000)) return "out of order";
    for (size_t i = 0; i < bytes; i += 997) {
      if (data[i] != static_cast<char>(read + static_cast<int64_t>(i))) return "payload";
    }
    ++read;
    return "";
  };
  bool bell = false;
  int fulls = 0;
  while (sent < 400) {
    const size_t n = static_cast<size_t>(sent * 7919 % 40000);
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<char>(sent + static_cast<int64_t>(i));
    if (a->push(1, send_header(sent, n), out.data(), n, &bell)) {
      // The first record rings (nobody read yet); later ones only when the reader armed.
      CHECK(bell == (sent == 0));
      ++sent;
      continue;
    }
    ++fulls;
    REQUIRE(b->drain(0, reader, &bad) > 0);
  }
  while (read < sent) REQUIRE(b->drain(0, reader, &bad) > 0);
  CHECK(bad.empty());
  CHECK(fulls > 0);
  CHECK(b->drain(0, reader, &bad) == 0);
  // A sleeping reader is rung once.
  b->arm();
  REQUIRE(a->push(1, send_header(400, 0), nullptr, 0, &bell));
  CHECK(bell);
  REQUIRE(a->push(1, send_header(401, 0), nullptr, 0, &bell));
  CHECK_FALSE(bell);
  b->disarm();
  CHECK(b->drain(
            0, [](const pg::WireHeader&, const char*, size_t) { return std::string(); }, &bad) ==
        2);
  CHECK_FALSE(a->fits(a->ring_bytes() / 2));
  CHECK(a->fits(a->ring_bytes() / 2 - pg::shm::kRecordHeadBytes));

  // A record whose header claims more payload than it holds fails the ring, for good.
  REQUIRE(a->push(1, send_header(1, 1000), out.data(), 8, &bell));
  CHECK(b->drain(0, reader, &bad) == -1);
  CHECK(bad.find("whose header says 1000 payload bytes") != std::string::npos);
  REQUIRE(a->push(1, send_header(1, 8), out.data(), 8, &bell));
  CHECK(b->drain(0, reader, &bad) == 0);
  // So does one the reader's check refuses.
  std::string refused;
  REQUIRE(b->push(0, send_header(1, 0), nullptr, 0, &bell));
  CHECK(a->drain(
            1, [](const pg::WireHeader&, const char*, size_t) { return std::string("no"); },
            &refused) == -1);
  CHECK(refused == "no");
}

TEST_CASE("same host: point-to-point sends go through the rings, in order, past a full ring") {
  in_two_processes("ring", [](ProcessGroup& g, int i) {
    auto rings = [] { return pg::mesh_read_counts().by_ring; };
    g.barrier();  // agrees on the same-host path
    if (g.host_path() != "shared memory") throw Error("path: " + g.host_path());
    const uint64_t before = rings();
    // One tag, small and large payloads mixed (in the ring, and by address through it):
    // received in the order sent, or the sizes would not match.
    const std::vector<int64_t> sizes{1, 300001, 0, 5, 16384, 16383, 200000, 2};
    if (i == 0) {
      for (size_t k = 0; k < sizes.size(); ++k) g.send(noise(static_cast<int>(k), sizes[k]), 1, 3);
    } else {
      for (size_t k = 0; k < sizes.size(); ++k) {
        auto t = local::zeros(Shape{sizes[k]});
        g.recv(t, 0, 3);
        if (bytes_of(t) != bytes_of(noise(static_cast<int>(k), sizes[k])))
          throw Error("message " + std::to_string(k) + " out of order or wrong");
      }
      if (rings() - before < sizes.size()) throw Error("not through the rings");
    }
    // Four times a ring's worth before the receiver looks: every send completes (the
    // receiver's I/O thread reads the ring meanwhile), and all arrive in order.
    constexpr int kMany = 64;
    if (i == 0) {
      for (int k = 0; k < kMany; ++k) g.send(noise(k, 4096), 1, 4);
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      for (int k = 0; k < kMany; ++k) {
        auto t = local::zeros(Shape{4096});
        g.recv(t, 0, 4);
        if (bytes_of(t) != bytes_of(noise(k, 4096)))
          throw Error("message " + std::to_string(k) + " of a full ring");
      }
    }
    // A receive posted early and waited on later (no thread reads for it), and one from
    // any rank.
    auto early = local::zeros(Shape{3});
    Work w;
    if (i == 1) w = g.irecv(early, 0, 5);
    g.barrier();
    if (i == 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the receiver sleeps
      g.send(noise(7, 3), 1, 5);
      g.send(noise(8, 3), 1, 6);
    } else {
      w.wait();
      if (bytes_of(early) != bytes_of(noise(7, 3))) throw Error("early receive");
      auto any = local::zeros(Shape{3});
      if (g.recv(any, kAnySource, 6) != 0) throw Error("any-source receive: source");
      if (bytes_of(any) != bytes_of(noise(8, 3))) throw Error("any-source receive");
    }
    g.barrier();
  });
}

TEST_CASE("same host: back-to-back blocking sends and receives send no Ring messages") {
  // While a program keeps making blocking point-to-point calls, its I/O thread sleeps
  // without the rings' bell (kRingLinger), so a peer's record never costs a Ring message: a
  // socket send on the sender's thread and wake-ups of both processes' I/O threads, in the
  // middle of the exchange. Before, a record that landed between two calls of the other
  // rank rang: 5 to 23 times in 20000 round trips here. A Ring is still right when the other
  // rank sleeps: its spin ran out, or a round trip took so long (a loaded machine) that the
  // I/O thread stopped lingering. Both are counted and allowed for.
  in_two_processes("linger", [](ProcessGroup& g, int i) {
    const int other = 1 - i;
    g.barrier();  // agrees on the same-host path
    if (g.host_path() != "shared memory") throw Error("path: " + g.host_path());
    auto t = local::zeros(Shape{1});
    int64_t stalls = 0;  // round trips long enough for the linger to end
    auto round_trips = [&](int n) {
      for (int k = 0; k < n; ++k) {
        const auto t0 = std::chrono::steady_clock::now();
        if (i == 0) {
          g.send(t, 1);
          g.recv(t, 1);
        } else {
          g.recv(t, 0);
          g.send(t, 0);
        }
        if (std::chrono::steady_clock::now() - t0 > std::chrono::milliseconds(2)) ++stalls;
      }
    };
    round_trips(100);  // the I/O thread may still sleep with the bell set from before
    stalls = 0;
    const pg::MeshReadCounts before = pg::mesh_read_counts();
    round_trips(20000);
    const pg::MeshReadCounts after = pg::mesh_read_counts();
    const auto rang = static_cast<int64_t>(after.rings_sent - before.rings_sent);
    auto mine = local::from_vector<int64_t>(
        {static_cast<int64_t>(after.spins_out - before.spins_out), stalls}, Shape{2});
    auto theirs = local::zeros(Shape{2}, DType::Int64);
    if (i == 0) {
      g.send(mine, other);
      g.recv(theirs, other);
    } else {
      g.recv(theirs, other);
      g.send(mine, other);
    }
    const auto v = theirs.to_vector<int64_t>();
    const int64_t allowed = 2 + 2 * v[0] + 2 * (v[1] + stalls);
    if (rang > allowed)
      throw Error("rank " + std::to_string(i) + " sent " + std::to_string(rang) +
                  " Ring messages in 20000 round trips, more than " + std::to_string(allowed) +
                  " (rank " + std::to_string(other) + "'s spins ran out " + std::to_string(v[0]) +
                  " times; slow round trips: " + std::to_string(v[1] + stalls) + ")");
    g.barrier();
  });
}

TEST_CASE("same host: after waking a sleeping rank, a blocking receive polls through its wake-up") {
  // Rank 1 waits in a receive long enough to sleep (its bell set), so each of rank 0's sends
  // rings it awake through ZeroMQ; rank 1 answers 500 us after it woke. Rank 0's receive
  // right after ringing polls its rings for up to 2 ms (kRingSpinAfterBell), so it takes
  // the answer without falling asleep itself; with the plain 200 us poll its every receive
  // ran out and slept, and on a 2-core machine the two ranks went on waking each other
  // through the sockets. Spins that still run out (a loaded machine) are allowed; that none
  // ever catches the answer is not. (With the plain poll this fails every time: the answer
  // comes at least 500 us after the send.)
  if (pg::affinity_cpus() < 2) {
    MESSAGE("skipped: the longer poll is for groups with a CPU per rank; this process has 1");
    return;
  }
  in_two_processes("bell", [](ProcessGroup& g, int i) {
    g.barrier();  // agrees on the same-host path
    if (g.host_path() != "shared memory") throw Error("path: " + g.host_path());
    auto t = local::zeros(Shape{4});
    constexpr int kRounds = 10;
    int rang = 0, caught = 0;
    for (int k = 0; k < kRounds; ++k) {
      if (i == 1) {
        g.recv(t, 0);
        std::this_thread::sleep_for(std::chrono::microseconds(500));
        g.send(t, 0);
        continue;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(30));  // rank 1 sleeps by now
      const pg::MeshReadCounts before = pg::mesh_read_counts();
      g.send(t, 1);
      const pg::MeshReadCounts rung = pg::mesh_read_counts();
      g.recv(t, 1);
      const pg::MeshReadCounts after = pg::mesh_read_counts();
      // A sleeping rank's own last look at its rings may take the record first (no bell).
      if (rung.rings_sent == before.rings_sent) continue;
      ++rang;
      if (after.spins_out == rung.spins_out) ++caught;
    }
    if (i == 0 && rang == 0)
      throw Error("none of " + std::to_string(kRounds) + " sends to a sleeping rank rang it");
    if (i == 0 && caught == 0)
      throw Error("rank 0's receive fell asleep in all " + std::to_string(rang) +
                  " rounds in which it had rung rank 1 awake");
    g.barrier();
  });
}
