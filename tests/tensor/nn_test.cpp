// The NN ops against plain reference loops (tests/tensor/reference.hpp's style: double, hand
// index arithmetic): linear, conv2d and its gradients (stride, padding, dilation, groups,
// bias, unbatched, non-contiguous, float16), the pools and their gradients (ceil_mode,
// count_include_pad, divisor_override, NaN), softmax / log_softmax and their gradients,
// nll_loss and its gradient (weights, ignore_index, reductions), dropout / dropout2d
// (reproducible masks, the gradient as dropout of the gradient), threshold_backward; and
// every gradient op against central finite differences in float64.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "tensor/reference.hpp"

using namespace dtr_test;
namespace local = dtr::local;
using dtr::Int2;
using dtr::Reduction;

namespace {

size_t at(const Sizes& shape, const Sizes& idx) {
  return static_cast<size_t>(ravel(idx, shape));
}

Array zeros_like(DType t, const Sizes& shape) {
  return Array{t, shape, std::vector<double>(static_cast<size_t>(numel(shape)), 0.0),
               std::vector<double>(static_cast<size_t>(numel(shape)), 0.0)};
}

// ---- convolution ----

struct ConvP {
  int64_t sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
};

int64_t conv_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// Calls f(n, co, oy, ox, c, ci, ki, kj, iy, ix) for every product term of conv2d of an
// (N, C, H, W) input with a (Cout, C/G, kh, kw) weight whose input position is inside.
void conv_terms(const Sizes& x, const Sizes& w, const ConvP& p,
                const std::function<void(const Sizes&, const Sizes&, const Sizes&)>& f) {
  const int64_t n_ = x[0], c_ = x[1], h = x[2], wd = x[3], cout = w[0], kh = w[2], kw = w[3];
  const int64_t oh = conv_out(h, kh, p.sh, p.ph, p.dh), ow = conv_out(wd, kw, p.sw, p.pw, p.dw);
  const int64_t cg = c_ / p.groups, coutg = cout / p.groups;
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t co = 0; co < cout; ++co)
      for (int64_t oy = 0; oy < oh; ++oy)
        for (int64_t ox = 0; ox < ow; ++ox)
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ki = 0; ki < kh; ++ki)
              for (int64_t kj = 0; kj < kw; ++kj) {
                const int64_t iy = oy * p.sh - p.ph + ki * p.dh, ix = ox * p.sw - p.pw + kj * p.dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= wd) continue;
                const int64_t c = (co / coutg) * cg + ci;
                f({n, co, oy, ox}, {n, c, iy, ix}, {co, ci, ki, kj});
              }
}

Sizes conv_out_shape(const Sizes& x, const Sizes& w, const ConvP& p) {
  return {x[0], w[0], conv_out(x[2], w[2], p.sh, p.ph, p.dh),
          conv_out(x[3], w[3], p.sw, p.pw, p.dw)};
}

Array ref_conv2d(const Array& x, const Array& w, const Array* b, const ConvP& p) {
  const Sizes os = conv_out_shape(x.shape, w.shape, p);
  Array r = zeros_like(x.dtype, os);
  conv_terms(x.shape, w.shape, p, [&](const Sizes& o, const Sizes& i, const Sizes& k) {
    const double t = x.v[at(x.shape, i)] * w.v[at(w.shape, k)];
    r.v[at(os, o)] += t;
    r.scale[at(os, o)] += std::fabs(t);
  });
  if (b)
    for (int64_t i = 0; i < r.numel(); ++i)
      r.v[static_cast<size_t>(i)] += b->v[static_cast<size_t>(unravel(i, os)[1])];
  for (double& v : r.v) v = cast_to(r.dtype, v);
  return r;
}

Array ref_conv2d_input_grad(const Array& g, const Array& w, const Sizes& xs, const ConvP& p) {
  Array r = zeros_like(g.dtype, xs);
  conv_terms(xs, w.shape, p, [&](const Sizes& o, const Sizes& i, const Sizes& k) {
    const double t = g.v[at(g.shape, o)] * w.v[at(w.shape, k)];
    r.v[at(xs, i)] += t;
    r.scale[at(xs, i)] += std::fabs(t);
  });
  return r;
}

Array ref_conv2d_weight_grad(const Array& g, const Array& x, const Sizes& ws, const ConvP& p) {
  Array r = zeros_like(g.dtype, ws);
  conv_terms(x.shape, ws, p, [&](const Sizes& o, const Sizes& i, const Sizes& k) {
    const double t = g.v[at(g.shape, o)] * x.v[at(x.shape, i)];
    r.v[at(ws, k)] += t;
    r.scale[at(ws, k)] += std::fabs(t);
  });
  return r;
}

Tensor conv(const Tensor& x, const Tensor& w, const std::optional<Tensor>& b, const ConvP& p) {
  return x.conv2d(w, b, Int2(p.sh, p.sw), Int2(p.ph, p.pw), Int2(p.dh, p.dw), p.groups);
}

// ---- finite differences ----

// d f / d x by central differences, element by element (float64).
Array fd_grad(const std::function<double(const Tensor&)>& f, const Array& x, double h = 1e-6) {
  Array g = zeros_like(kF64, x.shape);
  g.scale.clear();
  for (size_t i = 0; i < x.v.size(); ++i) {
    Array up = x, down = x;
    up.v[i] += h;
    down.v[i] -= h;
    g.v[i] = (f(make_tensor(up)) - f(make_tensor(down))) / (2 * h);
  }
  return g;
}

// sum(y * weights) as a double.
double dot(const Tensor& y, const Tensor& weights) {
  return (y * weights).sum().item<double>();
}

constexpr Tol kFdTol{1e-6, 1e-7, 0.0};

}  // namespace

TEST_CASE("linear: x @ weight.t() + bias over leading dims") {
  Array x = random_array(kF32, {2, 3, 4}, 1), w = random_array(kF32, {5, 4}, 2);
  Array b = random_array(kF32, {5}, 3);
  Array x2 = x;
  x2.shape = {6, 4};
  Array want = ref_matmul(x2,
                          Array{kF32,
                                {4, 5},
                                [&] {
                                  std::vector<double> t(20);
                                  for (int64_t i = 0; i < 5; ++i)
                                    for (int64_t j = 0; j < 4; ++j)
                                      t[static_cast<size_t>(j * 5 + i)] = w.at({i, j});
                                  return t;
                                }(),
                                {}},
                          kF32);
  Array with_bias = want;
  for (int64_t i = 0; i < 30; ++i)
    with_bias.v[static_cast<size_t>(i)] += b.v[static_cast<size_t>(i % 5)];
  want.shape = with_bias.shape = {2, 3, 5};
  for (Layout l : kAllLayouts) {
    Tensor tx = make_tensor(x, l), tw = make_tensor(w, l);
    check_tensor(tx.linear(tw), want, sum_tol(kF32), std::string("linear ") + layout_name(l));
    check_tensor(tx.linear(tw, make_tensor(b, l)), with_bias, sum_tol(kF32),
                 std::string("linear with bias ") + layout_name(l));
  }
  DTR_CHECK_ERROR(dtr::ShapeError,
                  make_tensor(x).linear(make_tensor(random_array(kF32, {5, 3}, 4))), "linear",
                  "[2, 3, 4]", "[5, 3]");
  DTR_CHECK_ERROR(dtr::ShapeError, make_tensor(x).linear(make_tensor(w), make_tensor(w)), "linear",
                  "bias", "[5]");
  DTR_CHECK_ERROR(dtr::DTypeError, make_tensor(x).linear(make_tensor(w).to(kF64)), "linear",
                  "float32", "float64");
}

TEST_CASE("conv2d forward: stride, padding, dilation, groups, bias, layouts, dtypes") {
  struct Case {
    Sizes x, w;
    ConvP p;
  };
  const std::vector<Case> cases = {
      {{2, 3, 7, 6}, {4, 3, 3, 2}, {}},
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {2, 1, 1, 2, 1, 2, 1}},
      {{1, 4, 6, 6}, {6, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 2}},
      {{2, 4, 5, 5}, {4, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 4}},  // depthwise
      {{3, 1, 9, 9}, {5, 1, 5, 5}, {}},                     // the seed Net's first layer, smaller
      // A padding wider than the output: the first tap lies in the padding for every output
      // position (im2col wrote past its row before the fuzzer found it; corpus regress-5).
      {{1, 2, 3, 1}, {2, 2, 1, 3}, {1, 1, 0, 4, 1, 4, 1}},
  };
  uint64_t seed = 10;
  for (const Case& c : cases)
    for (DType dt : {kF32, kF64}) {
      Array x = random_array(dt, c.x, ++seed), w = random_array(dt, c.w, ++seed);
      Array b = random_array(dt, {c.w[0]}, ++seed);
      const std::string what = "conv2d x" + str(c.x) + " w" + str(c.w) + " " + str(dt);
      check_tensor(conv(make_tensor(x, Layout::ColumnMajor), make_tensor(w), std::nullopt, c.p),
                   ref_conv2d(x, w, nullptr, c.p), sum_tol(dt), what);
      check_tensor(conv(make_tensor(x), make_tensor(w, Layout::Padded), make_tensor(b), c.p),
                   ref_conv2d(x, w, &b, c.p), sum_tol(dt), what + " with bias");
    }
  // Unbatched (C, H, W) input, and float16 (computed in float32, rounded once).
  Array x = random_array(kF32, {2, 5, 5}, 50), w = random_array(kF32, {3, 2, 2, 2}, 51);
  Array x4 = x;
  x4.shape = {1, 2, 5, 5};
  Array want = ref_conv2d(x4, w, nullptr, {});
  want.shape = {3, 4, 4};
  check_tensor(conv(make_tensor(x), make_tensor(w), std::nullopt, {}), want, sum_tol(kF32),
               "conv2d unbatched");
  Tensor h = conv(make_tensor(x).to(kF16), make_tensor(w).to(kF16), std::nullopt, {});
  CHECK(h.dtype() == kF16);
  Tensor h32 =
      conv(make_tensor(x).to(kF16).to(kF32), make_tensor(w).to(kF16).to(kF32), std::nullopt, {});
  check_tensor(h, read(h32.to(kF16)), "conv2d float16 is the float32 result rounded");
}

TEST_CASE("conv2d gradients against the reference") {
  const std::vector<std::pair<Sizes, ConvP>> cases = {
      {{4, 3, 3, 2}, {}},
      {{4, 3, 3, 3}, {2, 1, 1, 2, 1, 2, 1}},
      {{6, 2, 3, 3}, {2, 2, 1, 1, 1, 1, 2}},
  };
  uint64_t seed = 60;
  for (const auto& [ws, p] : cases) {
    const Sizes xs = {2, ws[1] * p.groups, 7, 6};
    const Sizes os = conv_out_shape(xs, ws, p);
    Array x = random_array(kF32, xs, ++seed), w = random_array(kF32, ws, ++seed);
    Array g = random_array(kF32, os, ++seed);
    // Appended piece by piece: g++ 12 warns (-Wrestrict, falsely) on "w" + str(ws).
    std::string what = "w";
    what += str(ws);
    what += " groups " + std::to_string(p.groups);
    Tensor dx = make_tensor(g, Layout::ColumnMajor)
                    .conv2d_input_grad(make_tensor(w), Int2(xs[2], xs[3]), Int2(p.sh, p.sw),
                                       Int2(p.ph, p.pw), Int2(p.dh, p.dw), p.groups);
    check_tensor(dx, ref_conv2d_input_grad(g, w, xs, p), sum_tol(kF32), "input grad " + what);
    Tensor dw = make_tensor(g).conv2d_weight_grad(make_tensor(x, Layout::Padded),
                                                  Int2(ws[2], ws[3]), Int2(p.sh, p.sw),
                                                  Int2(p.ph, p.pw), Int2(p.dh, p.dw), p.groups);
    check_tensor(dw, ref_conv2d_weight_grad(g, x, ws, p), sum_tol(kF32), "weight grad " + what);
  }
  Tensor g = local::zeros({2, 4, 5, 5});
  DTR_CHECK_ERROR(dtr::ShapeError, g.conv2d_input_grad(local::zeros({4, 3, 3, 3}), Int2(9, 9)),
                  "conv2d_input_grad", "[2, 4, 5, 5]", "9x9");
  DTR_CHECK_ERROR(dtr::ShapeError, g.conv2d_weight_grad(local::zeros({2, 3, 6, 6}), Int2(3, 3)),
                  "conv2d_weight_grad", "[2, 4, 5, 5]", "6x6");
}

TEST_CASE("conv2d: errors name the op and the shapes") {
  Tensor x = local::zeros({2, 3, 5, 5}), w = local::zeros({4, 2, 3, 3});
  DTR_CHECK_ERROR(dtr::ShapeError, x.conv2d(w), "conv2d", "[4, 2, 3, 3]", "3 input channels");
  DTR_CHECK_ERROR(dtr::ShapeError, x.conv2d(local::zeros({4, 3, 7, 7})), "conv2d",
                  "output size would be", "[2, 3, 5, 5]");
  DTR_CHECK_ERROR(dtr::ShapeError, local::zeros({5, 5}).conv2d(w), "conv2d", "[5, 5]");
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.conv2d(local::zeros({4, 3, 3, 3}), std::nullopt, 0),
                  "conv2d", "stride must be positive");
  DTR_CHECK_ERROR(dtr::ShapeError, x.conv2d(local::zeros({4, 3, 3, 3}), local::zeros({3})),
                  "conv2d", "bias", "[4]");
  DTR_CHECK_ERROR(dtr::DTypeError, x.to(kI64).conv2d(w.to(kI64)), "conv2d", "floating point",
                  "int64");
  DTR_CHECK_ERROR(dtr::ShapeError, x.conv2d(local::zeros({4, 1, 3, 3}), std::nullopt, 1, 0, 1, 2),
                  "conv2d", "groups 2");
}

namespace {

// ---- pooling references ----

struct PoolP {
  int64_t kh, kw, sh, sw, ph = 0, pw = 0, dh = 1, dw = 1;
  bool ceil = false, cip = true;
  std::optional<double> divisor = std::nullopt;
};

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t num = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil ? (num + s - 1) / s : num / s) + 1;
  if (ceil && (out - 1) * s >= in + p) --out;
  return out;
}

Sizes pool_shape(const Sizes& x, const PoolP& p) {
  Sizes s = x;
  s[s.size() - 2] = pool_out(x[x.size() - 2], p.kh, p.sh, p.ph, p.dh, p.ceil);
  s[s.size() - 1] = pool_out(x[x.size() - 1], p.kw, p.sw, p.pw, p.dw, p.ceil);
  return s;
}

// max_pool2d's values and indices (as doubles), NaN winning.
std::pair<Array, Array> ref_max_pool(const Array& x, const PoolP& p) {
  const Sizes os = pool_shape(x.shape, p);
  const int64_t h = x.shape[x.shape.size() - 2], w = x.shape.back();
  const int64_t oh = os[os.size() - 2], ow = os.back(), planes = x.numel() / (h * w);
  Array v{x.dtype, os, {}, {}}, idx{kI64, os, {}, {}};
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        double best = -std::numeric_limits<double>::infinity();
        int64_t where = -1;
        for (int64_t ki = 0; ki < p.kh; ++ki)
          for (int64_t kj = 0; kj < p.kw; ++kj) {
            const int64_t iy = oy * p.sh - p.ph + ki * p.dh, ix = ox * p.sw - p.pw + kj * p.dw;
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double val = x.v[static_cast<size_t>((c * h + iy) * w + ix)];
            if (where < 0) where = iy * w + ix;
            if (val > best || std::isnan(val)) {
              best = val;
              where = iy * w + ix;
            }
          }
        v.v.push_back(best);
        idx.v.push_back(static_cast<double>(where));
      }
  return {v, idx};
}

// avg_pool2d as torch writes it: the window clipped to the input plus padding counts
// (count_include_pad) or only the input's part does.
Array ref_avg_pool(const Array& x, const PoolP& p) {
  const Sizes os = pool_shape(x.shape, p);
  const int64_t h = x.shape[x.shape.size() - 2], w = x.shape.back();
  const int64_t oh = os[os.size() - 2], ow = os.back(), planes = x.numel() / (h * w);
  Array r{x.dtype, os, {}, {}};
  for (int64_t c = 0; c < planes; ++c)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t y0 = oy * p.sh - p.ph, x0 = ox * p.sw - p.pw;
        int64_t y1 = std::min(y0 + p.kh, h + p.ph), x1 = std::min(x0 + p.kw, w + p.pw);
        const int64_t pool = (y1 - y0) * (x1 - x0);
        y0 = std::max<int64_t>(y0, 0);
        x0 = std::max<int64_t>(x0, 0);
        y1 = std::min(y1, h);
        x1 = std::min(x1, w);
        double sum = 0;
        for (int64_t iy = y0; iy < y1; ++iy)
          for (int64_t ix = x0; ix < x1; ++ix)
            sum += x.v[static_cast<size_t>((c * h + iy) * w + ix)];
        const double div =
            p.divisor ? *p.divisor : static_cast<double>(p.cip ? pool : (y1 - y0) * (x1 - x0));
        r.v.push_back(cast_to(x.dtype, sum / div));
      }
  return r;
}

Tensor max_pool(const Tensor& x, const PoolP& p, bool indices = false) {
  return indices ? x.max_pool2d_indices(Int2(p.kh, p.kw), Int2(p.sh, p.sw), Int2(p.ph, p.pw),
                                        Int2(p.dh, p.dw), p.ceil)
                 : x.max_pool2d(Int2(p.kh, p.kw), Int2(p.sh, p.sw), Int2(p.ph, p.pw),
                                Int2(p.dh, p.dw), p.ceil);
}

Tensor avg_pool(const Tensor& x, const PoolP& p) {
  return x.avg_pool2d(Int2(p.kh, p.kw), Int2(p.sh, p.sw), Int2(p.ph, p.pw), p.ceil, p.cip,
                      p.divisor);
}

Tensor avg_pool_backward(const Tensor& g, const Sizes& xs, const PoolP& p) {
  return g.avg_pool2d_backward(Int2(xs[xs.size() - 2], xs.back()), Int2(p.kh, p.kw),
                               Int2(p.sh, p.sw), Int2(p.ph, p.pw), p.ceil, p.cip, p.divisor);
}

const std::vector<PoolP> kMaxPools = {
    {2, 2, 2, 2},
    {3, 3, 2, 2, 1, 1, 1, 1, true},
    {3, 2, 1, 2, 1, 0, 2, 1},
    {2, 3, 3, 2, 0, 1, 1, 1, true},
};
const std::vector<PoolP> kAvgPools = {
    {2, 2, 2, 2},
    {3, 3, 2, 2, 1, 1, 1, 1, true},
    {3, 3, 2, 2, 1, 1, 1, 1, true, false},
    {3, 2, 2, 1, 1, 1, 1, 1, false, true, 5.0},
};

}  // namespace

TEST_CASE("max_pool2d: values and indices, NaN, ceil_mode, dilation; its backward") {
  uint64_t seed = 100;
  for (const PoolP& p : kMaxPools)
    for (const Sizes& xs : {Sizes{2, 3, 7, 6}, Sizes{3, 6, 7}}) {
      Array x = random_array(kF32, xs, ++seed);
      x.v[5] = std::nan("");
      const std::string what =
          "max_pool2d k" + std::to_string(p.kh) + "x" + std::to_string(p.kw) + " on " + str(xs);
      auto [want_v, want_i] = ref_max_pool(x, p);
      Tensor tx = make_tensor(x, Layout::ColumnMajor);
      check_tensor(max_pool(tx, p), want_v, what);
      check_tensor(max_pool(tx, p, true), want_i, what + " indices");
      // backward: the gradient scattered to (and summed at) the indices.
      Array g = random_array(kF32, want_v.shape, ++seed);
      Array dx = zeros_like(kF32, xs);
      const int64_t hw = xs[xs.size() - 2] * xs.back(),
                    per = want_v.shape[want_v.shape.size() - 2] * want_v.shape.back();
      for (size_t i = 0; i < g.v.size(); ++i)
        dx.v[static_cast<size_t>((static_cast<int64_t>(i) / per) * hw +
                                 static_cast<int64_t>(want_i.v[i]))] += g.v[i];
      check_tensor(make_tensor(g).max_pool2d_backward(max_pool(tx, p, true),
                                                      Int2(xs[xs.size() - 2], xs.back())),
                   dx, sum_tol(kF32), what + " backward");
    }
  Tensor x = local::zeros({1, 1, 4, 4});
  // The default stride is the kernel size.
  CHECK(x.max_pool2d(2).shape() == dtr::Shape{1, 1, 2, 2});
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.max_pool2d(2, 1, 2), "max_pool2d", "padding (2, 2)",
                  "half");
  DTR_CHECK_ERROR(dtr::ShapeError, x.max_pool2d(5), "max_pool2d", "output size would be");
  DTR_CHECK_ERROR(
      dtr::IndexError,
      x.max_pool2d(2).max_pool2d_backward(local::full({1, 1, 2, 2}, 16, kI64), Int2(4, 4)),
      "max_pool2d_backward", "index 16", "4x4");
}

TEST_CASE("avg_pool2d: padding counted or not, divisor_override, ceil_mode; its backward") {
  uint64_t seed = 200;
  for (const PoolP& p : kAvgPools)
    for (const Sizes& xs : {Sizes{2, 3, 7, 6}, Sizes{2, 6, 5}}) {
      Array x = random_array(kF64, xs, ++seed);
      const std::string what = "avg_pool2d k" + std::to_string(p.kh) + " cip " +
                               std::to_string(p.cip) + " on " + str(xs);
      Array want = ref_avg_pool(x, p);
      check_tensor(avg_pool(make_tensor(x, Layout::Padded), p), want, sum_tol(kF64), what);
      Array g = random_array(kF64, want.shape, ++seed);
      // The gradient (gathered per input element by the kernel) of the linear map
      // sum(avg_pool2d(x) * g), against finite differences of sum(avg_pool(x) * g).
      Tensor tg = make_tensor(g);
      Array fd = fd_grad([&](const Tensor& t) { return dot(avg_pool(t, p), tg); }, x);
      check_tensor(avg_pool_backward(tg, xs, p), fd, kFdTol, what + " backward");
    }
  Tensor x = local::ones({1, 1, 4, 4});
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.avg_pool2d(2, 2, 0, false, true, 0.0), "avg_pool2d",
                  "divisor_override");
  DTR_CHECK_ERROR(dtr::ShapeError, x.avg_pool2d(2).avg_pool2d_backward(Int2(7, 7), 2),
                  "avg_pool2d_backward", "7x7");
}

TEST_CASE("softmax and log_softmax along each dim, and their gradients") {
  Array x = random_array(kF32, {2, 3, 4}, 300, Range{-4, 4});
  for (int64_t dim : {0, 1, 2, -1}) {
    const int64_t d = dim < 0 ? dim + 3 : dim;
    Array sm = x, lsm = x;
    for (int64_t i = 0; i < x.numel(); ++i) {
      Sizes idx = unravel(i, x.shape);
      double mx = -1e300, sum = 0;
      Sizes j = idx;
      for (int64_t k = 0; k < x.shape[static_cast<size_t>(d)]; ++k) {
        j[static_cast<size_t>(d)] = k;
        mx = std::max(mx, x.at(j));
      }
      for (int64_t k = 0; k < x.shape[static_cast<size_t>(d)]; ++k) {
        j[static_cast<size_t>(d)] = k;
        sum += std::exp(x.at(j) - mx);
      }
      sm.v[static_cast<size_t>(i)] = cast_to(kF32, std::exp(x.at(idx) - mx) / sum);
      lsm.v[static_cast<size_t>(i)] = cast_to(kF32, x.at(idx) - mx - std::log(sum));
    }
    Tensor tx = make_tensor(x, Layout::ColumnMajor);
    check_tensor(tx.softmax(dim), sm, "softmax dim " + std::to_string(dim));
    check_tensor(tx.log_softmax(dim), lsm, "log_softmax dim " + std::to_string(dim));
  }
  // Huge values do not overflow; a NaN makes its row NaN.
  const double nan = std::nan("");
  Tensor big = tensor_of(kF32, {2, 2}, {1000, 1000, nan, 0});
  check_tensor(big.softmax(1), make_array(kF32, {2, 2}, {0.5, 0.5, nan, nan}), "softmax of big");
  // Gradients against finite differences (float64).
  Array xd = random_array(kF64, {3, 5}, 301), gd = random_array(kF64, {3, 5}, 302);
  Tensor tg = make_tensor(gd);
  for (bool take_log : {false, true}) {
    auto f = [&](const Tensor& t) { return dot(take_log ? t.log_softmax(1) : t.softmax(1), tg); };
    Tensor y = take_log ? make_tensor(xd).log_softmax(1) : make_tensor(xd).softmax(1);
    Tensor grad = take_log ? tg.log_softmax_backward(y, 1) : tg.softmax_backward(y, 1);
    check_tensor(grad, fd_grad(f, xd), kFdTol,
                 take_log ? "log_softmax_backward" : "softmax_backward");
  }
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({2}, kI64).softmax(0), "softmax", "int64");
  DTR_CHECK_ERROR(dtr::ShapeError, tg.softmax_backward(local::zeros({5, 3}, kF64), 1),
                  "softmax_backward", "[3, 5]", "[5, 3]");
}

TEST_CASE("layer_norm: values over the last dims, dtypes, errors; its gradients") {
  Array x = random_array(kF32, {3, 2, 4}, 310, Range{-4, 4});
  Array w = random_array(kF32, {2, 4}, 311), b = random_array(kF32, {2, 4}, 312);
  Array want = x;
  for (int64_t r = 0; r < 3; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < 8; ++i) mean += x.v[static_cast<size_t>(r * 8 + i)] / 8;
    for (int64_t i = 0; i < 8; ++i) {
      const double c = x.v[static_cast<size_t>(r * 8 + i)] - mean;
      var += c * c / 8;
    }
    for (int64_t i = 0; i < 8; ++i) {
      const auto k = static_cast<size_t>(r * 8 + i);
      want.v[k] =
          cast_to(kF32, (x.v[k] - mean) / std::sqrt(var + 1e-5) * w.v[static_cast<size_t>(i)] +
                            b.v[static_cast<size_t>(i)]);
    }
  }
  Tensor tx = make_tensor(x, Layout::ColumnMajor), tw = make_tensor(w), tb = make_tensor(b);
  check_tensor(tx.layer_norm({2, 4}, tw, tb), want, "layer_norm over two dims");
  check_tensor(tx.to(kF16).layer_norm({2, 4}, tw.to(kF16), tb.to(kF16)).to(kF32), want,
               Tol{2e-2, 2e-2, 0.0}, "layer_norm float16");
  // A constant row normalizes to the bias (eps keeps it finite).
  Tensor flat = local::full({2, 3}, 7.0);
  check_tensor(flat.layer_norm({3}), make_array(kF32, {2, 3}, {0, 0, 0, 0, 0, 0}),
               "layer_norm of a constant row");
  // Gradients against finite differences (float64): input and weight.
  Array xd = random_array(kF64, {3, 5}, 313), wd = random_array(kF64, {5}, 314);
  Array gd = random_array(kF64, {3, 5}, 315);
  Tensor tg = make_tensor(gd), twd = make_tensor(wd), tbd = local::zeros({5}, kF64);
  auto fx = [&](const Tensor& t) { return dot(t.layer_norm({5}, twd, tbd, 1e-3), tg); };
  dtr::OpAttrs eps;
  eps.scalars[0] = 1e-3;
  Tensor gx = Tensor::apply_inputs(dtr::OpId::layer_norm_backward, eps,
                                   std::array<Tensor, 3>{tg, make_tensor(xd), twd});
  check_tensor(gx, fd_grad(fx, xd), kFdTol, "layer_norm_backward");
  auto fw = [&](const Tensor& t) { return dot(make_tensor(xd).layer_norm({5}, t, tbd, 1e-3), tg); };
  Tensor gw = Tensor::apply_inputs(dtr::OpId::layer_norm_weight_grad, eps,
                                   std::array<Tensor, 3>{tg, make_tensor(xd), twd});
  check_tensor(gw, fd_grad(fw, wd), kFdTol, "layer_norm_weight_grad");
  DTR_CHECK_ERROR(dtr::ShapeError, tx.layer_norm({4, 2}), "layer_norm", "[4, 2]");
  DTR_CHECK_ERROR(dtr::DTypeError, local::zeros({2, 3}, kI64).layer_norm({3}), "layer_norm",
                  "int64");
}

TEST_CASE("nll_loss: reductions, weights, ignore_index; its gradient") {
  Array x = random_array(kF64, {4, 3}, 400), w = random_array(kF64, {3}, 401, Range{0.5, 2});
  Tensor t = tensor_of(kI64, {4}, {2, 0, -100, 1});
  const std::vector<int64_t> tv = {2, 0, -100, 1};
  for (bool weighted : {false, true}) {
    std::vector<double> per(4, 0.0);
    double sum = 0, total = 0;
    for (int64_t i = 0; i < 4; ++i) {
      if (tv[static_cast<size_t>(i)] == -100) continue;
      const double wi = weighted ? w.v[static_cast<size_t>(tv[static_cast<size_t>(i)])] : 1.0;
      per[static_cast<size_t>(i)] = -wi * x.at({i, tv[static_cast<size_t>(i)]});
      sum += per[static_cast<size_t>(i)];
      total += wi;
    }
    std::optional<Tensor> tw;
    if (weighted) tw = make_tensor(w);
    const std::string what = weighted ? "weighted" : "unweighted";
    Tensor tx = make_tensor(x, Layout::ColumnMajor);
    check_tensor(tx.nll_loss(t, tw, Reduction::None), make_array(kF64, {4}, per), "none " + what);
    check_tensor(tx.nll_loss(t, tw, Reduction::Sum), make_array(kF64, {}, {sum}), "sum " + what);
    check_tensor(tx.nll_loss(t, tw), make_array(kF64, {}, {sum / total}), "mean " + what);
    // Gradients against finite differences.
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      Tensor g = r == Reduction::None ? make_tensor(random_array(kF64, {4}, 402))
                                      : tensor_of(kF64, {}, {0.75});
      auto f = [&](const Tensor& xt) { return dot(xt.nll_loss(t, tw, r), g); };
      check_tensor(
          g.nll_loss_backward(tx, t, tw, r), fd_grad(f, x), kFdTol,
          "nll_loss_backward " + what + " reduction " + std::to_string(static_cast<int>(r)));
    }
  }
  // One sample: x (C), target ().
  Tensor one = tensor_of(kF32, {3}, {-1, -2, -3});
  CHECK(one.nll_loss(tensor_of(kI64, {}, {1})).item<float>() == 2.0f);
  DTR_CHECK_ERROR(dtr::IndexError, make_tensor(x).nll_loss(tensor_of(kI64, {4}, {0, 3, 1, 1})),
                  "nll_loss", "target 3", "3 classes");
  DTR_CHECK_ERROR(dtr::DTypeError, make_tensor(x).nll_loss(t.to(kI32)), "nll_loss", "int64",
                  "int32");
  DTR_CHECK_ERROR(dtr::ShapeError, make_tensor(x).nll_loss(tensor_of(kI64, {3}, {0, 0, 0})),
                  "nll_loss", "[4, 3]", "[3]");
}

TEST_CASE("conv2d, pooling and threshold gradients against finite differences") {
  const ConvP p{2, 1, 1, 1, 1, 2, 2};
  Array x = random_array(kF64, {2, 4, 5, 6}, 500), w = random_array(kF64, {4, 2, 3, 2}, 501);
  Tensor tx = make_tensor(x), tw = make_tensor(w);
  Tensor g = make_tensor(random_array(kF64, conv_out_shape(x.shape, w.shape, p), 502));
  Array fx = fd_grad([&](const Tensor& t) { return dot(conv(t, tw, std::nullopt, p), g); }, x);
  check_tensor(g.conv2d_input_grad(tw, Int2(5, 6), Int2(2, 1), 1, Int2(1, 2), 2), fx, kFdTol,
               "conv2d_input_grad vs finite differences");
  Array fw = fd_grad([&](const Tensor& t) { return dot(conv(tx, t, std::nullopt, p), g); }, w);
  check_tensor(g.conv2d_weight_grad(tx, Int2(3, 2), Int2(2, 1), 1, Int2(1, 2), 2), fw, kFdTol,
               "conv2d_weight_grad vs finite differences");

  // max_pool2d away from ties: the gradient of sum(max_pool2d(x) * g).
  const PoolP mp = kMaxPools[1];
  Array xm = random_array(kF64, {1, 2, 7, 6}, 503);
  Tensor gm = make_tensor(random_array(kF64, pool_shape(xm.shape, mp), 504));
  Array fm = fd_grad([&](const Tensor& t) { return dot(max_pool(t, mp), gm); }, xm);
  check_tensor(gm.max_pool2d_backward(max_pool(make_tensor(xm), mp, true), Int2(7, 6)), fm, kFdTol,
               "max_pool2d_backward vs finite differences");

  // relu's gradient, away from 0.
  Array xr = random_array(kF64, {3, 4}, 505, Range{-2, 2, 0.25});
  for (double& v : xr.v)
    if (v == 0) v = 0.5;
  Tensor gr = make_tensor(random_array(kF64, {3, 4}, 506));
  Array fr = fd_grad([&](const Tensor& t) { return dot(t.relu(), gr); }, xr);
  check_tensor(gr.threshold_backward(make_tensor(xr)), fr, kFdTol, "threshold_backward vs relu");
}

TEST_CASE("threshold_backward: broadcasting, threshold, dtypes") {
  Tensor g = tensor_of(kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor x = tensor_of(kF64, {3}, {-1, 0.5, 2});
  CHECK(g.threshold_backward(x).to_vector<float>() == std::vector<float>{0, 2, 3, 0, 5, 6});
  CHECK(g.threshold_backward(x, 1.0).to_vector<float>() == std::vector<float>{0, 0, 3, 0, 0, 6});
  CHECK(g.threshold_backward(x).dtype() == kF32);
  DTR_CHECK_ERROR(dtr::ShapeError, g.threshold_backward(local::zeros({2})), "threshold_backward",
                  "[2, 3]", "[2]");
}

TEST_CASE("dropout and dropout2d: reproducible masks, scaling, the gradient as dropout") {
  Tensor x = local::rand({100, 100}) + 0.5;
  dtr::Generator gen(5);
  Tensor y = x.dropout(0.3, true, gen);
  std::vector<float> xv = x.to_vector<float>(), yv = y.to_vector<float>();
  const float scale = static_cast<float>(1.0 / 0.7);
  int64_t zeros = 0;
  bool scaled = true;
  for (size_t i = 0; i < xv.size(); ++i) {
    if (yv[i] == 0) {
      ++zeros;
    } else {
      scaled = scaled && yv[i] == xv[i] * scale;
    }
  }
  CHECK(scaled);
  CHECK(zeros > 2700);
  CHECK(zeros < 3300);
  CHECK(gen.offset() == 10000);  // numel() draws reserved
  // The same generator position reproduces the mask; the gradient is dropout of the
  // gradient with the same p, seed and offset.
  dtr::Generator again(5);
  CHECK(x.dropout(0.3, true, again).to_vector<float>() == yv);
  dtr::Generator for_grad(5);
  Tensor gy = local::ones({100, 100}).dropout(0.3, true, for_grad);
  std::vector<float> gv = gy.to_vector<float>();
  for (size_t i = 0; i < gv.size(); ++i) CHECK((gv[i] == 0) == (yv[i] == 0));

  Tensor x4 = local::rand({3, 4, 2, 5}) + 0.5;
  dtr::Generator g2(9);
  std::vector<float> v4 = x4.dropout2d(0.5, true, g2).to_vector<float>();
  int64_t dropped = 0;
  for (size_t c = 0; c < 12; ++c) {
    const bool zero = v4[c * 10] == 0;
    dropped += zero;
    for (size_t j = 0; j < 10; ++j) CHECK((v4[c * 10 + j] == 0) == zero);
  }
  CHECK(dropped > 0);
  CHECK(dropped < 12);
  // Not training: x itself; p = 0 and p = 1; float16.
  CHECK(same_storage(x.dropout(0.3, false), x));
  CHECK(x.dropout(0.0).to_vector<float>() == xv);
  CHECK(x.dropout(1.0).sum().item<float>() == 0.0f);
  CHECK(x.to(kF16).dropout(0.5).dtype() == kF16);
  DTR_CHECK_ERROR(dtr::InvalidArgument, x.dropout(1.5), "dropout", "p must be in [0, 1]");
  DTR_CHECK_ERROR(dtr::ShapeError, x.dropout2d(), "dropout2d", "[100, 100]");
}
