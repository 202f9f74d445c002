// Point to point: send/recv, any-source recv, isend/irecv ordering, tags, size checks; each
// case on every backend (PG_BACKEND_TEST, pg_test_util.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pg_test_util.hpp"

using namespace dtr;
using namespace dtr::pgtest;

PG_BACKEND_TEST("p2p: send and recv every dtype and size between two ranks") {
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Int32,   DType::Int64,
                          DType::Bool,    DType::Float16, DType::BFloat16};
  const int64_t sizes[] = {0, 1, 3, 1000, (1 << 20) + 7};
  auto errors = run_ranks(backend, 2, [&](ProcessGroup& g) {
    for (DType dt : dtypes) {
      for (int64_t n : sizes) {
        if (g.rank() == 0) {
          g.send(make_input(0, n, dt), 1);
        } else {
          auto t = local::zeros(Shape{n}, dt);
          const int src = g.recv(t, 0);
          if (src != 0) throw Error("recv returned source " + std::to_string(src));
          auto diff = compare(t, [&](int64_t i) { return value_for(0, i, dt, ReduceOp::Sum); });
          if (!diff.empty())
            throw Error(std::string(dtype_name(dt)) + " n=" + std::to_string(n) + ": " + diff);
        }
      }
    }
  });
  check_no_errors(errors);
}

PG_BACKEND_TEST("p2p: recv from any source returns each sender's rank") {
  auto errors = run_ranks(backend, 4, [&](ProcessGroup& g) {
    if (g.rank() != 0) {
      g.send(local::full(Shape{4}, g.rank() * 10, DType::Int64), 0, /*tag=*/5);
      return;
    }
    std::vector<int> seen;
    for (int k = 0; k < 3; ++k) {
      auto t = local::zeros(Shape{4}, DType::Int64);
      const int src = g.recv(t, kAnySource, 5);
      if (t.to_vector<int64_t>()[0] != src * 10) throw Error("payload does not match the source");
      seen.push_back(src);
    }
    std::sort(seen.begin(), seen.end());
    if (seen != std::vector<int>{1, 2, 3}) throw Error("wrong set of sources");
  });
  check_no_errors(errors);
}

PG_BACKEND_TEST("p2p: isend/irecv keep the order between a pair per tag") {
  constexpr int kMessages = 200;
  auto errors = run_ranks(backend, 2, [&](ProcessGroup& g) {
    if (g.rank() == 0) {
      std::vector<Work> works;
      std::vector<local::Tensor> keep;
      for (int k = 0; k < kMessages; ++k) {
        keep.push_back(local::full(Shape{k % 7 == 0 ? 100000 : 3}, k, DType::Int32));
        works.push_back(g.isend(keep.back(), 1, k % 2));
      }
      for (auto& w : works) w.wait(30s);
      for (auto& w : works) {
        if (!w.is_completed() || !w.is_success()) throw Error("isend not completed after wait");
      }
    } else {
      // Post the receives for tag 1 first: tags are separate channels.
      std::vector<local::Tensor> bufs;
      std::vector<Work> works;
      for (int tag : {1, 0}) {
        for (int k = tag; k < kMessages; k += 2) {
          bufs.push_back(local::zeros(Shape{k % 7 == 0 ? 100000 : 3}, DType::Int32));
          works.push_back(g.irecv(bufs.back(), 0, tag));
        }
      }
      for (size_t i = 0; i < works.size(); ++i) {
        works[i].wait(30s);
        if (works[i].source_rank() != 0) throw Error("irecv source");
      }
      size_t i = 0;
      for (int tag : {1, 0}) {
        for (int k = tag; k < kMessages; k += 2, ++i) {
          auto v = bufs[i].to_vector<int32_t>();
          if (v.front() != k || v.back() != k) {
            throw Error("message " + std::to_string(k) + " arrived out of order (got " +
                        std::to_string(v.front()) + ")");
          }
        }
      }
    }
  });
  check_no_errors(errors);
}

PG_BACKEND_TEST("p2p: a receive that does not fit the message fails with both sizes") {
  auto errors = run_ranks(backend, 2, [&](ProcessGroup& g) {
    if (g.rank() == 0) {
      g.send(local::ones(Shape{10}), 1);
      g.send(local::ones(Shape{4}, DType::Float64), 1);
      g.send(local::ones(Shape{2}), 1);
    } else {
      auto small = local::zeros(Shape{12});
      try {
        g.recv(small, 0);
        throw Error("no ShapeError");
      } catch (const ShapeError& e) {
        // The call's name (formatted only for an error on gloo and mpi), then both sizes.
        const std::string m = e.what();
        if (m.find("recv on rank 1 from rank 0 (tag 0") != 0 ||
            m.find("rank 0 sent 10 elements, the receive tensor has 12") == std::string::npos)
          throw Error("ShapeError lacks the call or the sizes: " + m);
      }
      auto wrong = local::zeros(Shape{4});
      try {
        g.recv(wrong, 0);
        throw Error("no DTypeError");
      } catch (const DTypeError& e) {
        if (std::string(e.what()).find("float64") == std::string::npos) throw Error(e.what());
      }
      auto ok = local::zeros(Shape{2});  // the pair still works after the bad ones
      g.recv(ok, 0);
      if (ok.to_vector<float>()[1] != 1.f) throw Error("third message wrong");
    }
  });
  check_no_errors(errors);
}

PG_BACKEND_TEST("p2p: argument errors are InvalidArgument") {
  auto errors = run_ranks(backend, 2, [&](ProcessGroup& g) {
    auto t = local::zeros(Shape{4, 4});
    CHECK_THROWS_AS(g.send(t, 2), InvalidArgument);
    CHECK_THROWS_AS(g.send(t, -3), InvalidArgument);
    auto tt = t.transpose(0, 1);
    CHECK_THROWS_AS(g.send(tt, 1 - g.rank()), InvalidArgument);
    local::Tensor undefined;
    CHECK_THROWS_AS(g.recv(undefined, 0), InvalidArgument);
    if (backend.is("mpi")) {  // a library's limit, said as torch says it
      auto v = local::zeros(Shape{4});
      const std::string call = "send from rank " + std::to_string(g.rank()) + " to rank " +
                               std::to_string(1 - g.rank()) + " (tag -1, mpi): ";
      CHECK_THROWS_WITH_AS(
          g.send(v, 1 - g.rank(), -1),
          doctest::Contains((call + "backend mpi does not support tag -1").c_str()),
          InvalidArgument);
      CHECK_THROWS_AS(g.recv(v, 1 - g.rank(), -2), InvalidArgument);
    }
    g.barrier();
  });
  check_no_errors(errors);
}

PG_BACKEND_TEST("p2p: a receive with nobody sending times out") {
  auto errors = run_ranks(
      backend, 2,
      [&](ProcessGroup& g) {
        // gloo cannot go on after a timeout (it closes the context's connections): the rest
        // runs on a second group.
        ProcessGroup side = g.new_group({0, 1});
        RankSignal timed_out(side);
        if (g.rank() == 1) {
          auto t = local::zeros(Shape{3});
          try {
            g.recv(t, 0, 42);
            throw Error("no timeout");
          } catch (const TimeoutError& e) {
            if (std::string(e.what()).find("recv on rank 1 from rank 0 (tag 42") != 0)
              throw Error(std::string("TimeoutError does not open with the call: ") + e.what());
          }
          // Work::wait's own timeout: the operation is still pending, then completes.
          auto w = side.irecv(t, 0, 43);
          try {
            w.wait(std::chrono::milliseconds(20));
            throw Error("wait did not time out");
          } catch (const TimeoutError&) {
          }
          if (w.is_completed()) throw Error("completed without a message");
          timed_out.raise();
          w.wait(30s);
          if (t.to_vector<float>()[0] != 7.f) throw Error("late message wrong");
        } else {
          timed_out.wait();  // until rank 1 has seen its timeouts (no clock involved)
          side.send(local::full(Shape{3}, 7), 1, 43);
        }
      },
      fast_options(std::chrono::milliseconds(1000)));
  check_no_errors(errors);
}

PG_BACKEND_TEST("p2p: a rank cannot send to or receive from itself, as in torch") {
  check_no_errors(run_ranks(backend, 2, [&](ProcessGroup& g) {
    auto t = local::zeros(Shape{5}, DType::Int64);
    auto expect = [&](auto&& call, const std::string& text) {
      try {
        call();
      } catch (const InvalidArgument& e) {
        if (std::string(e.what()).find(text) == std::string::npos)
          throw Error(std::string("unexpected message: ") + e.what());
        return;
      }
      throw Error("no InvalidArgument for " + text);
    };
    const std::string own = "rank " + std::to_string(g.rank()) + " is this process's own rank";
    expect([&] { g.isend(t, g.rank(), 9); },
           "send: the destination " + own + "; a rank cannot send to itself");
    expect([&] { g.send(t, g.rank(), 9); }, "send to itself");
    expect([&] { g.irecv(t, g.rank(), 9); },
           "recv: the source " + own + "; a rank cannot receive from itself");
    expect([&] { g.recv(t, g.rank(), 9); }, "receive from itself");
    // The group is intact: a real exchange still works.
    const int other = 1 - g.rank();
    Work s = g.isend(local::full(Shape{5}, g.rank() + 3, DType::Int64), other, 9);
    if (g.recv(t, other, 9) != other) throw Error("recv source");
    s.wait(30s);
    if (t.to_vector<int64_t>()[4] != other + 3) throw Error("recv payload");
  }));
}
