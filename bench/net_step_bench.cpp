// One training step of the seed program's Net (issue 19: Conv2d(1,10,5), max_pool2d,
// relu, Conv2d(10,20,5), dropout2d, max_pool2d, relu, Linear(320,50), relu, dropout,
// Linear(50,10), log_softmax, nll_loss; batch 64) written as the ops an autograd engine
// issues, forward and backward, on local CPU tensors: the kernels' share of a step. Each op
// kind's time is reported too, so that a slow kernel shows. Baseline in the same run: the
// GEMMs of the step alone (the convolutions as im2col matrix products and the linear
// layers, through the matmul op), what any im2col implementation must pay.
//
// Checks: the loss is finite and the step's gradients have the weights' shapes.
//
// Usage: dtr_net_step_bench [--steps N] [--batch N]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "dtr/tensor.hpp"

namespace {

using namespace dtr;
using local::Tensor;
using Clock = std::chrono::steady_clock;

struct Net {
  Tensor w1, b1, w2, b2, w3, b3, w4, b4;
};

Net make_net(Generator& g) {
  auto param = [&](Shape s, double scale) { return local::randn(s, g).mul(scale); };
  return {param({10, 1, 5, 5}, 0.2), param({10}, 0.1),       param({20, 10, 5, 5}, 0.06),
          param({20}, 0.1),          param({50, 320}, 0.05), param({50}, 0.1),
          param({10, 50}, 0.14),     param({10}, 0.1)};
}

// Per-op-kind times of one step, in seconds.
std::map<std::string, double> g_times;
template <typename F>
auto timed(const char* what, F&& f) {
  const auto t0 = Clock::now();
  auto r = f();
  g_times[what] += std::chrono::duration<double>(Clock::now() - t0).count();
  return r;
}

struct Grads {
  Tensor loss, w1, b1, w2, b2, w3, b3, w4, b4;
};

Grads step(const Net& n, const Tensor& x, const Tensor& target, Generator& gen) {
  const Generator at_start = gen;
  // Forward.
  Tensor c1 = timed("conv2d", [&] { return x.conv2d(n.w1, n.b1); });  // (B, 10, 24, 24)
  Tensor p1 = timed("max_pool2d", [&] { return c1.max_pool2d(2); });  // (B, 10, 12, 12)
  Tensor i1 = timed("max_pool2d", [&] { return c1.max_pool2d_indices(2); });
  Tensor r1 = timed("relu", [&] { return p1.relu(); });
  Tensor c2 = timed("conv2d", [&] { return r1.conv2d(n.w2, n.b2); });  // (B, 20, 8, 8)
  Tensor d2 = timed("dropout", [&] { return c2.dropout2d(0.5, true, gen); });
  Tensor p2 = timed("max_pool2d", [&] { return d2.max_pool2d(2); });  // (B, 20, 4, 4)
  Tensor i2 = timed("max_pool2d", [&] { return d2.max_pool2d_indices(2); });
  Tensor r2 = timed("relu", [&] { return p2.relu(); });
  Tensor f = r2.flatten(1);  // (B, 320)
  Tensor h = timed("linear", [&] { return f.linear(n.w3, n.b3); });
  Tensor rh = timed("relu", [&] { return h.relu(); });
  Generator before_drop = gen;
  Tensor dh = timed("dropout", [&] { return rh.dropout(0.5, true, gen); });
  Tensor z = timed("linear", [&] { return dh.linear(n.w4, n.b4); });
  Tensor lp = timed("softmax", [&] { return z.log_softmax(1); });
  Tensor loss = timed("nll_loss", [&] { return lp.nll_loss(target); });
  // Backward.
  Grads g;
  g.loss = loss;
  Tensor gl = timed("nll_loss", [&] { return local::ones({}).nll_loss_backward(lp, target); });
  Tensor gz = timed("softmax", [&] { return gl.log_softmax_backward(lp, 1); });
  g.w4 = timed("linear", [&] { return gz.t().matmul(dh); });
  g.b4 = timed("reduce", [&] { return gz.sum(0); });
  Tensor gdh = timed("linear", [&] { return gz.matmul(n.w4); });
  Tensor grh = timed("dropout", [&] { return gdh.dropout(0.5, true, before_drop); });
  Tensor gh = timed("relu", [&] { return grh.threshold_backward(rh); });
  g.w3 = timed("linear", [&] { return gh.t().matmul(f); });
  g.b3 = timed("reduce", [&] { return gh.sum(0); });
  Tensor gf = timed("linear", [&] { return gh.matmul(n.w3); });
  Tensor gr2 = timed("relu", [&] { return gf.view(r2.shape()).threshold_backward(r2); });
  Tensor gd2 = timed("max_pool2d", [&] { return gr2.max_pool2d_backward(i2, Int2(8, 8)); });
  Generator drop2 = at_start;
  Tensor gc2 = timed("dropout", [&] { return gd2.dropout2d(0.5, true, drop2); });
  g.w2 = timed("conv2d grads", [&] { return gc2.conv2d_weight_grad(r1, 5); });
  g.b2 = timed("reduce", [&] { return gc2.sum(0).sum(1).sum(1); });
  Tensor gr1 = timed("conv2d grads", [&] { return gc2.conv2d_input_grad(n.w2, Int2(12, 12)); });
  Tensor gp1 = timed("relu", [&] { return gr1.threshold_backward(r1); });
  Tensor gc1 = timed("max_pool2d", [&] { return gp1.max_pool2d_backward(i1, Int2(24, 24)); });
  g.w1 = timed("conv2d grads", [&] { return gc1.conv2d_weight_grad(x, 5); });
  g.b1 = timed("reduce", [&] { return gc1.sum(0).sum(1).sum(1); });
  return g;
}

// The step's matrix products alone: each convolution as its im2col GEMM (forward, weight
// gradient, input gradient of conv2) and the linear layers' three products each.
double gemm_baseline(int64_t batch) {
  auto mm = [&](int64_t m, int64_t k, int64_t n) {
    Tensor a = local::full({m, k}, 0.5), b = local::full({k, n}, 0.25);
    const auto t0 = Clock::now();
    Tensor c = a.matmul(b);
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const int64_t p1 = 24 * 24, p2 = 8 * 8;
  double t = 0;
  t += mm(10, 25, batch * p1) + mm(10, batch * p1, 25);                              // conv1
  t += mm(20, 250, batch * p2) + mm(20, batch * p2, 250) + mm(250, 20, batch * p2);  // conv2
  t += mm(batch, 320, 50) + mm(50, batch, 320) + mm(batch, 50, 320);                 // fc1
  t += mm(batch, 50, 10) + mm(10, batch, 50) + mm(batch, 10, 50);                    // fc2
  return t;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 20;
  int64_t batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--steps")
      steps = std::atoi(argv[i + 1]);
    else if (k == "--batch")
      batch = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--steps N] [--batch N]\n", argv[0]);
      return 2;
    }
  }
  Generator gen(1);
  Net net = make_net(gen);
  Tensor x = local::randn({batch, 1, 28, 28}, gen);
  Tensor target = local::rand({batch}, gen).mul(10).floor().to(DType::Int64);
  std::vector<double> step_s, gemm_s;
  Grads g;
  for (int i = 0; i < steps + 2; ++i) {
    if (i == 2) g_times.clear();  // warm-up
    const auto t0 = Clock::now();
    g = step(net, x, target, gen);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    if (i >= 2) {
      step_s.push_back(s);
      gemm_s.push_back(gemm_baseline(batch));
    }
  }
  const float loss = g.loss.item<float>();
  const bool ok = std::isfinite(loss) && g.w1.shape() == net.w1.shape() &&
                  g.w2.shape() == net.w2.shape() && g.w3.shape() == net.w3.shape() &&
                  g.w4.shape() == net.w4.shape() && g.b1.shape() == net.b1.shape();
  std::printf("net step (batch %lld, %d steps): %.2f ms per step, %.1f steps/s\n",
              static_cast<long long>(batch), steps, 1e3 * median(step_s), 1.0 / median(step_s));
  std::printf("  GEMMs alone (baseline)         %.2f ms\n", 1e3 * median(gemm_s));
  for (const auto& [what, t] : g_times)
    std::printf("  %-30s %.2f ms\n", what.c_str(), 1e3 * t / steps);
  std::printf("  check: loss %.4f finite, gradient shapes %s\n", loss, ok ? "ok" : "WRONG");
  std::printf("RESULT {\"bench\":\"net_step\",\"batch\":%lld,\"step_ms\":%.3f,\"gemm_ms\":%.3f}\n",
              static_cast<long long>(batch), 1e3 * median(step_s), 1e3 * median(gemm_s));
  return ok ? 0 : 1;
}
