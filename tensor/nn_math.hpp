// Internal: the per-row and per-element arithmetic of the NN ops that are not windows
// (softmax and log_softmax with their gradients, nll_loss's terms, dropout's mask), host
// and device code, so that the CPU kernels (tensor/kernels_nn.cpp) and the CUDA kernels
// (tensor/cuda/kernels_nn.cu) compute the same thing in the same order.
//
// A row is `n` elements `stride` apart (the elements along the op's dim). Sums accumulate
// in double, as the CPU reductions do; results are rounded once into T.
//
// Thread safety: pure functions.
#pragma once

#include <cmath>
#include <cstdint>

#include "dtr/half.hpp"  // DTR_HOST_DEVICE
#include "tensor/philox.hpp"

namespace dtr::detail {

// softmax (take_log: log_softmax) of one row: exp(x - max) / sum, or x - max - log(sum). A NaN
// anywhere in the row makes the row NaN.
// `scratch` (n doubles, or null): where the CPU keeps each exp(x - max) between the sum and
// the output, so that exp runs once per element; the values are the same either way.
template <typename T>
DTR_HOST_DEVICE void softmax_row(const T* x, T* y, int64_t n, int64_t stride, bool take_log,
                                 double* scratch = nullptr) {
  double max = -INFINITY;
  bool nan = false;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i * stride]);
    nan = nan || v != v;
    if (v > max) max = v;
  }
  if (nan) max = NAN;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = exp(static_cast<double>(x[i * stride]) - max);
    if (scratch) scratch[i] = e;
    sum += e;
  }
  const double log_sum = ::log(sum);
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(x[i * stride]) - max;
    y[i * stride] = static_cast<T>(take_log ? v - log_sum : (scratch ? scratch[i] : exp(v)) / sum);
  }
}

// The input gradient of softmax (take_log: log_softmax) along one row from the output y and the
// output gradient g: y * (g - sum(g * y)), or g - exp(y) * sum(g).
template <typename T>
DTR_HOST_DEVICE void softmax_backward_row(const T* g, const T* y, T* out, int64_t n, int64_t stride,
                                          bool take_log) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i * stride]);
    sum += take_log ? gi : gi * static_cast<double>(y[i * stride]);
  }
  for (int64_t i = 0; i < n; ++i) {
    const double gi = static_cast<double>(g[i * stride]), yi = static_cast<double>(y[i * stride]);
    out[i * stride] = static_cast<T>(take_log ? gi - exp(yi) * sum : yi * (gi - sum));
  }
}

// layer_norm over one row of n contiguous elements: the mean and 1 / sqrt(var + eps) of
// the row (the biased variance, two passes, in double).
template <typename T>
DTR_HOST_DEVICE void layer_norm_stats(const T* x, int64_t n, double eps, double& mean,
                                      double& rstd) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  mean = n > 0 ? sum / static_cast<double>(n) : 0.0;
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double c = static_cast<double>(x[i]) - mean;
    sq += c * c;
  }
  rstd = 1.0 / sqrt((n > 0 ? sq / static_cast<double>(n) : 0.0) + eps);
}
// y = (x - mean) * rstd * w + b.
template <typename T>
DTR_HOST_DEVICE void layer_norm_row(const T* x, const T* w, const T* b, T* y, int64_t n,
                                    double eps) {
  double mean, rstd;
  layer_norm_stats(x, n, eps, mean, rstd);
  for (int64_t i = 0; i < n; ++i)
    y[i] = static_cast<T>((static_cast<double>(x[i]) - mean) * rstd * static_cast<double>(w[i]) +
                          static_cast<double>(b[i]));
}
// The input gradient of one row from the output gradient g: with xhat = (x - mean) * rstd
// and gw = g * w, rstd * (gw - mean(gw) - xhat * mean(gw * xhat)).
template <typename T>
DTR_HOST_DEVICE void layer_norm_backward_row(const T* g, const T* x, const T* w, T* out, int64_t n,
                                             double eps) {
  double mean, rstd;
  layer_norm_stats(x, n, eps, mean, rstd);
  double sum_gw = 0, sum_gw_xhat = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double gw = static_cast<double>(g[i]) * static_cast<double>(w[i]);
    sum_gw += gw;
    sum_gw_xhat += gw * (static_cast<double>(x[i]) - mean) * rstd;
  }
  const double inv_n = n > 0 ? 1.0 / static_cast<double>(n) : 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double xhat = (static_cast<double>(x[i]) - mean) * rstd;
    const double gw = static_cast<double>(g[i]) * static_cast<double>(w[i]);
    out[i] = static_cast<T>(rstd * (gw - sum_gw * inv_n - xhat * sum_gw_xhat * inv_n));
  }
}
// The weight gradient's terms of one row, added into acc (n doubles): g * xhat.
template <typename T>
DTR_HOST_DEVICE void layer_norm_weight_grad_row(const T* g, const T* x, double* acc, int64_t n,
                                                double eps) {
  double mean, rstd;
  layer_norm_stats(x, n, eps, mean, rstd);
  for (int64_t i = 0; i < n; ++i)
    acc[i] += static_cast<double>(g[i]) * (static_cast<double>(x[i]) - mean) * rstd;
}

// nll_loss's reductions: attrs.ints[0].
enum NllReduction : int64_t { kNllNone = 0, kNllMean = 1, kNllSum = 2 };

// How sample i's target counts: 1 a class in [0, classes), 0 ignore_index, -1 out of
// range (the caller reports it).
DTR_HOST_DEVICE inline int nll_target_kind(const int64_t* target, int64_t i, int64_t classes,
                                           int64_t ignore_index) {
  const int64_t t = target[i];
  if (t == ignore_index) return 0;
  return t < 0 || t >= classes ? -1 : 1;
}

// The weight of sample i's (valid) target.
template <typename T>
DTR_HOST_DEVICE double nll_weight(const int64_t* target, const T* weight, int64_t i) {
  return weight ? static_cast<double>(weight[target[i]]) : 1.0;
}

// nll_loss of n samples of `classes` log-probabilities each (x row-major), reduced: the sum
// of -w[t_i] * x[i, t_i] (over the weights' sum for the mean). `bad` gets the first sample
// whose target is out of range (-1: none); the result then means nothing.
template <typename T>
DTR_HOST_DEVICE double nll_loss_reduced(const T* x, const int64_t* target, const T* weight,
                                        int64_t n, int64_t classes, int64_t ignore_index,
                                        int64_t reduction, int64_t& bad) {
  double sum = 0, total = 0;
  bad = -1;
  for (int64_t i = 0; i < n; ++i) {
    const int kind = nll_target_kind(target, i, classes, ignore_index);
    if (kind < 0 && bad < 0) bad = i;
    if (kind <= 0) continue;
    const double w = nll_weight(target, weight, i);
    sum -= w * static_cast<double>(x[i * classes + target[i]]);
    total += w;
  }
  return reduction == kNllMean ? sum / total : sum;
}

// The sum of the weights of the targets (the divisor of a mean nll_loss).
template <typename T>
DTR_HOST_DEVICE double nll_total_weight(const int64_t* target, const T* weight, int64_t n,
                                        int64_t classes, int64_t ignore_index) {
  double total = 0;
  for (int64_t i = 0; i < n; ++i)
    if (nll_target_kind(target, i, classes, ignore_index) > 0)
      total += nll_weight(target, weight, i);
  return total;
}

// dropout's draws: element (dropout2d: channel) i of a call whose generator position is
// `offset` takes word i % 4 of Philox at counter offset + i / 4 (one Philox block serves
// four elements) as a 24-bit uniform u in [0, 1), and survives when u >= p (probability
// 1 - p), whatever the tensor's dtype. dropout_keeps4 gives the four of block `block`.
DTR_HOST_DEVICE inline void dropout_keeps4(uint64_t seed, uint64_t offset, uint64_t block, double p,
                                           bool (&keep)[4]) {
  const Philox4 r = philox4x32(seed, offset + block);
  for (int j = 0; j < 4; ++j)
    keep[j] = static_cast<double>(static_cast<float>(r.v[j] >> 8) * (1.0f / 16777216.0f)) >= p;
}
DTR_HOST_DEVICE inline bool dropout_keeps(uint64_t seed, uint64_t offset, uint64_t i, double p) {
  bool keep[4];
  dropout_keeps4(seed, offset, i / 4, p, keep);
  return keep[i % 4];
}

}  // namespace dtr::detail
