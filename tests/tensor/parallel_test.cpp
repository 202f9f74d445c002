// The intra-op pool (tensor/parallel.hpp): every iteration runs once, from any number of
// concurrent callers, nested calls run serially, the first exception reaches the caller;
// and the convolutions give the same bits whatever the split of their work.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "tensor/parallel.hpp"
#include "tensor/reference.hpp"

using dtr::detail::parallel_for;

TEST_CASE("parallel_for runs every iteration once, from concurrent callers too") {
  CHECK(dtr::detail::parallel_threads() >= 1);
  CHECK(dtr::detail::parallel_threads() <= 8);
  std::vector<std::atomic<int>> hits(1000);
  parallel_for(1000, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
  for (auto& h : hits) CHECK(h.load() == 1);
  parallel_for(0, [&](int64_t) { FAIL("no iteration expected"); });

  std::atomic<int64_t> total{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      for (int rep = 0; rep < 20; ++rep)
        parallel_for(50, [&](int64_t i) {
          // Nested: runs serially on this thread.
          parallel_for(3, [&](int64_t j) { total.fetch_add(i + j); });
        });
    });
  for (auto& c : callers) c.join();
  // 4 callers x 20 reps x sum over i < 50, j < 3 of (i + j) = 3 * 1225 + 50 * 3.
  CHECK(total.load() == 4 * 20 * (3 * 1225 + 150));
}

TEST_CASE("parallel_for rethrows the first exception after the others finished") {
  std::atomic<int> running{0};
  CHECK_THROWS_WITH_AS(parallel_for(64,
                                    [&](int64_t i) {
                                      running.fetch_add(1);
                                      if (i == 5) throw std::runtime_error("iteration 5 failed");
                                      running.fetch_sub(1);
                                    }),
                       "iteration 5 failed", std::runtime_error);
  CHECK(running.load() == 1);  // the failed one; every other started one finished
  // The pool still works.
  std::atomic<int> n{0};
  parallel_for(10, [&](int64_t) { n.fetch_add(1); });
  CHECK(n.load() == 10);
}

TEST_CASE("conv2d and its gradients are the same bits over any split into chunks") {
  using namespace dtr_test;
  // Batches of 1, 9 and 33 samples split into 1, 2 and 5 chunks; each sample's result
  // must equal the one of the sample alone (forward, input gradient) and the weight
  // gradient of the batch the sum of the per-sample ones, up to summation order.
  Tensor x = make_tensor(random_array(kF32, {33, 2, 6, 6}, 900));
  Tensor w = make_tensor(random_array(kF32, {3, 2, 3, 3}, 901));
  Tensor g = make_tensor(random_array(kF32, {33, 3, 4, 4}, 902));
  Tensor y = x.conv2d(w), dx = g.conv2d_input_grad(w, dtr::Int2(6, 6));
  Tensor dw = g.conv2d_weight_grad(x, 3), sum = dtr::local::zeros({3, 2, 3, 3});
  for (int64_t n = 0; n < 33; ++n) {
    Tensor xn = x.narrow(0, n, 1), gn = g.narrow(0, n, 1);
    CHECK(xn.conv2d(w).to_vector<float>() == y.narrow(0, n, 1).to_vector<float>());
    CHECK(gn.conv2d_input_grad(w, dtr::Int2(6, 6)).to_vector<float>() ==
          dx.narrow(0, n, 1).to_vector<float>());
    sum = sum + gn.conv2d_weight_grad(xn, 3);
  }
  check_tensor(dw, read(sum), sum_tol(kF32), "weight gradient of the batch");
  // And twice the same call gives the same bits.
  CHECK(g.conv2d_weight_grad(x, 3).to_vector<float>() == dw.to_vector<float>());
}
