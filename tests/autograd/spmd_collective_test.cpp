// The differentiable SPMD all_reduce, two ranks as threads over an in-process store.
#include <doctest/doctest.h>

#include <mutex>
#include <thread>

#include "dtr/autograd.hpp"
#include "dtr/process_group.hpp"

namespace dtr::test {
namespace {

using local::Tensor;

TEST_CASE("autograd: SPMD all_reduce carries gradients between ranks") {
  auto store = make_hash_store();
  std::mutex m;
  std::vector<std::string> errors;
  std::vector<std::vector<float>> grads(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        ProcessGroupOptions o;
        o.timeout = std::chrono::seconds(30);
        ProcessGroup g = ProcessGroup::create(store, r, 2, o);
        Tensor x = local::from_vector<float>({1.0f + r, 2.0f}).requires_grad_();
        Tensor y = autograd::all_reduce(x, ReduceOp::Sum, &g);  // x0 + x1 on both ranks
        Tensor w = local::from_vector<float>({r == 0 ? 1.0f : 10.0f, 0.0f});
        (y * w).sum().backward();  // d/dx_r = w0 + w1
        grads[static_cast<size_t>(r)] = x.grad().to_vector<float>();
        g.shutdown();
      } catch (const std::exception& e) {
        std::lock_guard lock(m);
        errors.push_back(e.what());
      }
    });
  for (auto& t : ranks) t.join();
  for (const auto& e : errors) FAIL_CHECK(e);
  CHECK(grads[0] == std::vector<float>{11, 0});
  CHECK(grads[1] == std::vector<float>{11, 0});
}

}  // namespace
}  // namespace dtr::test
