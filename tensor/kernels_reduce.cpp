// Reduction kernels. The input is permuted so the kept dims come first and the reduced
// dims last, packed, and each output element reduces one contiguous row of length
// `inner` (the product of the reduced sizes). Floating sums accumulate in double.
#include <cmath>
#include <limits>

#include "kernels.hpp"

namespace dtr::local::detail {

namespace {

template <typename T>
using Acc = std::conditional_t<is_floating_v<T>, double, T>;

template <typename T>
double sum_double(const T* p, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(p[i]);
  return s;
}

// Position of the first max (Greater) or min element; a NaN wins at its first position.
template <bool Greater, typename T>
int64_t arg_extreme(const T* p, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i) {
    if constexpr (is_floating_v<T>) {
      if (std::isnan(p[best])) return best;
      if (std::isnan(p[i])) return i;
    }
    if (Greater ? p[i] > p[best] : p[i] < p[best]) best = i;
  }
  return best;
}

template <typename T>
double norm_of(double p, const T* x, int64_t n) {
  if (std::isinf(p)) {
    double best = p > 0 ? 0.0 : std::numeric_limits<double>::infinity();
    if (n == 0) return p > 0 ? 0.0 : best;
    for (int64_t i = 0; i < n; ++i) {
      double v = std::abs(static_cast<double>(x[i]));
      if (std::isnan(v)) return v;
      best = p > 0 ? std::max(best, v) : std::min(best, v);
    }
    return best;
  }
  double s = 0;
  if (p == 0) {
    for (int64_t i = 0; i < n; ++i) s += x[i] != 0 ? 1.0 : 0.0;
    return s;
  }
  if (p == 1) {
    for (int64_t i = 0; i < n; ++i) s += std::abs(static_cast<double>(x[i]));
    return s;
  }
  if (p == 2) {
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
    return std::sqrt(s);
  }
  for (int64_t i = 0; i < n; ++i) s += std::pow(std::abs(static_cast<double>(x[i])), p);
  return std::pow(s, 1.0 / p);
}

template <typename T>
double variance(const T* p, int64_t n, double correction) {
  double mean = sum_double(p, n) / static_cast<double>(n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) {
    double dv = static_cast<double>(p[i]) - mean;
    ss += dv * dv;
  }
  return ss / std::max(0.0, static_cast<double>(n) - correction);
}

}  // namespace

void reduce_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                   const Tensor& out) {
  const Tensor& src = in[0];
  Tensor x = op_keeps_dtype(d.id) || src.dtype() == out.dtype() ? src : src.to(out.dtype());

  // Kept dims first, reduced dims last.
  std::array<bool, kMaxDims> reduce{};
  if (a.ints.empty()) {
    reduce.fill(true);
  } else {
    for (int64_t raw : a.ints) reduce[wrap_dim(d.name, raw, x.dim())] = true;
  }
  Dims perm;
  int64_t inner = 1;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (!reduce[i]) perm.push_back(i);
  for (int64_t i = 0; i < x.dim(); ++i)
    if (reduce[i]) {
      perm.push_back(i);
      inner *= x.shape()[i];
    }
  Tensor packed = x.permute(perm).contiguous();
  int64_t outer = out.numel();
  char* out_base = static_cast<char*>(out.raw_data());

  dispatch_wide(d.name, x.dtype(), [&]<typename T>() {
    const T* base = static_cast<const T*>(packed.raw_data());
    auto each_row = [&]<typename O>(auto f) {
      O* o = reinterpret_cast<O*>(out_base);
      for (int64_t r = 0; r < outer; ++r) o[r] = f(base + r * inner);
    };
    double p_or_corr =
        a.scalars[0].is_none() ? (d.kind == OpKind::Norm ? 2.0 : 1.0) : a.scalars[0].to_double();
    switch (d.id) {
      case OpId::sum:
        each_row.template operator()<T>([&](const T* p) {
          Acc<T> s = 0;
          for (int64_t i = 0; i < inner; ++i) s = wrap_add<Acc<T>>(s, p[i]);
          return static_cast<T>(s);
        });
        return;
      case OpId::prod:
        each_row.template operator()<T>([&](const T* p) {
          Acc<T> s = 1;
          for (int64_t i = 0; i < inner; ++i) s = wrap_mul<Acc<T>>(s, p[i]);
          return static_cast<T>(s);
        });
        return;
      case OpId::max:
      case OpId::min: {
        bool greater = d.id == OpId::max;
        each_row.template operator()<T>([&](const T* p) {
          return p[greater ? arg_extreme<true>(p, inner) : arg_extreme<false>(p, inner)];
        });
        return;
      }
      case OpId::argmax:
        each_row.template operator()<int64_t>(
            [&](const T* p) { return arg_extreme<true>(p, inner); });
        return;
      case OpId::argmin:
        each_row.template operator()<int64_t>(
            [&](const T* p) { return arg_extreme<false>(p, inner); });
        return;
      default:
        break;
    }
    if constexpr (is_floating_v<T>) {
      switch (d.id) {
        case OpId::mean:
          each_row.template operator()<T>([&](const T* p) {
            return static_cast<T>(sum_double(p, inner) / static_cast<double>(inner));
          });
          return;
        case OpId::norm:
          each_row.template operator()<T>(
              [&](const T* p) { return static_cast<T>(norm_of(p_or_corr, p, inner)); });
          return;
        case OpId::var:
          each_row.template operator()<T>(
              [&](const T* p) { return static_cast<T>(variance(p, inner, p_or_corr)); });
          return;
        case OpId::std:
          each_row.template operator()<T>(
              [&](const T* p) { return static_cast<T>(std::sqrt(variance(p, inner, p_or_corr))); });
          return;
        default:
          break;
      }
    }
    fail<DTypeError>(d.name, "has no kernel for {}", x.dtype());
  });
}

}  // namespace dtr::local::detail
