// Convolution and pooling: values against direct loops, gradients against finite
// differences.
#include <doctest/doctest.h>

#include "autograd/gradcheck.hpp"
#include "dtr/nn.hpp"

namespace dtr::test {
namespace {

namespace F = nn::functional;
using V = const std::vector<Tensor>&;

Tensor rnd(const Shape& s, uint64_t seed) {
  Generator g(seed);
  return local::randn(s, g, DType::Float64);
}

// out[n][o][y][x] = b[o] + sum_c,i,j in[n][c][y*s + i*d - p][x*s + j*d - p] * w[o][c][i][j].
std::vector<double> conv_loops(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s,
                               int64_t p, int64_t d, Shape* shape) {
  const auto X = x.to_vector<double>(), W = w.to_vector<double>(), B = b.to_vector<double>();
  const int64_t N = x.shape()[0], C = x.shape()[1], H = x.shape()[2], Wd = x.shape()[3];
  const int64_t O = w.shape()[0], K = w.shape()[2];
  const int64_t Ho = (H + 2 * p - d * (K - 1) - 1) / s + 1,
                Wo = (Wd + 2 * p - d * (K - 1) - 1) / s + 1;
  *shape = {N, O, Ho, Wo};
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t y = 0; y < Ho; ++y)
        for (int64_t xo = 0; xo < Wo; ++xo) {
          double acc = B[static_cast<size_t>(o)];
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < K; ++j) {
                const int64_t r = y * s + i * d - p, q = xo * s + j * d - p;
                if (r < 0 || r >= H || q < 0 || q >= Wd) continue;
                acc += X[static_cast<size_t>(((n * C + c) * H + r) * Wd + q)] *
                       W[static_cast<size_t>(((o * C + c) * K + i) * K + j)];
              }
          out.push_back(acc);
        }
  return out;
}

TEST_CASE("conv2d: values against loops, with stride, padding and dilation") {
  for (auto [s, p, d] : {std::tuple{1, 0, 1}, {2, 1, 1}, {1, 2, 2}}) {
    Tensor x = rnd({2, 3, 7, 6}, 1), w = rnd({4, 3, 3, 3}, 2), b = rnd({4}, 3);
    Shape shape;
    std::vector<double> want = conv_loops(x, w, b, s, p, d, &shape);
    Tensor y = F::conv2d(x, w, b, s, p, d);
    REQUIRE(y.shape() == shape);
    auto got = y.to_vector<double>();
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]));
  }
}

TEST_CASE("pooling: values") {
  Tensor x = local::arange(0, 32, 1, DType::Float64).view({1, 2, 4, 4});
  CHECK(F::max_pool2d(x, 2).to_vector<double>() ==
        std::vector<double>{5, 7, 13, 15, 21, 23, 29, 31});
  CHECK(F::avg_pool2d(x, 2).to_vector<double>() ==
        std::vector<double>{2.5, 4.5, 10.5, 12.5, 18.5, 20.5, 26.5, 28.5});
  CHECK(F::max_pool2d(x, 3, 1).shape() == Shape{1, 2, 2, 2});
}

TEST_CASE("conv2d and pooling: gradients against finite differences") {
  gradcheck("conv2d", [](V v) { return F::conv2d(v[0], v[1], v[2], 1, 1, 1); },
            {rnd({2, 2, 5, 4}, 4), rnd({3, 2, 3, 3}, 5), rnd({3}, 6)});
  gradcheck("conv2d strided dilated", [](V v) { return F::conv2d(v[0], v[1], Tensor(), 2, 0, 2); },
            {rnd({1, 2, 7, 7}, 7).transpose(2, 3), rnd({2, 2, 2, 2}, 8)});
  gradcheck("max_pool2d", [](V v) { return F::max_pool2d(v[0], 2); }, {rnd({2, 2, 4, 5}, 9)});
  gradcheck("avg_pool2d", [](V v) { return F::avg_pool2d(v[0], 2, 1); }, {rnd({1, 2, 4, 4}, 10)});
  gradcheck("pad2d", [](V v) { return F::pad2d(v[0], 2); }, {rnd({1, 1, 2, 3}, 11)});
  nn::Conv2d<Tensor> conv(3, 5, 3);
  CHECK(conv.weight.shape() == Shape{5, 3, 3, 3});
  CHECK(conv(local::ones({2, 3, 8, 8})).shape() == Shape{2, 5, 6, 6});
  CHECK_THROWS_AS(F::conv2d(local::ones({1, 2, 4, 4}), local::ones({1, 3, 2, 2}), Tensor()),
                  ShapeError);
}

}  // namespace
}  // namespace dtr::test
