// Creation and in-place fill kernels: full, arange, linspace, the random draws, copy_,
// fill_. Random values come from Philox at stream position offset + i for element i in
// logical order, so a draw never depends on the tensor's layout.
#include <cmath>

#include "kernels.hpp"
#include "philox.hpp"

namespace dtr::local::detail {

using dtr::detail::philox_normal;
using dtr::detail::philox_uniform;

namespace {

// Writes f(i) to element i (logical order) of t; non-contiguous t goes through a packed temp.
template <typename F>
void generate(const Tensor& t, F f) {
  Tensor target = t.is_contiguous() ? t : empty(t.shape(), t.dtype());
  dispatch(t.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(target.raw_data());
    const int64_t n = target.numel();
    for (int64_t i = 0; i < n; ++i) p[i] = saturating_cast<T>(f.template operator()<T>(i));
  });
  if (!t.is_contiguous()) copy_into(t, target);
}

}  // namespace

void create_kernel(const OpDef& d, std::span<const Tensor>, const OpAttrs& a, const Tensor& out) {
  switch (d.id) {
    case OpId::empty:
      return;
    case OpId::full:
      fill(out, a.scalars[0]);
      return;
    case OpId::arange: {
      if (arange_is_integral(a)) {
        // Exact beyond 2^53: integer bounds count in int64.
        int64_t start = a.scalars[0].to_int();
        int64_t step = a.scalars[2].is_none() ? 1 : a.scalars[2].to_int();
        generate(out, [&]<typename T>(int64_t i) { return start + i * step; });
        return;
      }
      double start = a.scalars[0].to_double();
      double step = a.scalars[2].is_none() ? 1.0 : a.scalars[2].to_double();
      generate(out, [&]<typename T>(int64_t i) { return start + static_cast<double>(i) * step; });
      return;
    }
    case OpId::linspace: {
      // Both ends are exact: the first half counts up from start, the second down from end.
      double start = a.scalars[0].to_double(), end = a.scalars[1].to_double();
      int64_t steps = out.numel();
      double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
      generate(out, [&]<typename T>(int64_t i) {
        if (steps == 1) return start;
        return i < steps / 2 ? start + step * static_cast<double>(i)
                             : end - step * static_cast<double>(steps - 1 - i);
      });
      return;
    }
    case OpId::rand:
      generate(out, [&]<typename T>(int64_t i) {
        return philox_uniform<T>(a.seed, a.offset + static_cast<uint64_t>(i));
      });
      return;
    case OpId::randn:
      generate(out, [&]<typename T>(int64_t i) {
        return philox_normal(a.seed, a.offset + static_cast<uint64_t>(i));
      });
      return;
    default:
      fail<InvalidArgument>(d.name, "is not a creation op");
  }
}

void mutate_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                   const Tensor& out) {
  switch (d.id) {
    case OpId::copy_:
      copy_into(out, in[1]);
      return;
    case OpId::fill_:
      fill(out, a.scalars[0]);
      return;
    case OpId::uniform_: {
      double from = a.scalars[0].is_none() ? 0.0 : a.scalars[0].to_double();
      double to = a.scalars[1].is_none() ? 1.0 : a.scalars[1].to_double();
      generate(out, [&]<typename T>(int64_t i) -> T {
        double u = philox_uniform<T>(a.seed, a.offset + static_cast<uint64_t>(i));
        T v = static_cast<T>(from + (to - from) * u);
        // Rounding may land on `to`; keep the interval half-open.
        if (!(v >= static_cast<T>(to) && to > from)) return v;
        if constexpr (is_half_v<T>)
          return next_toward(static_cast<T>(to), static_cast<T>(from));
        else
          return std::nextafter(static_cast<T>(to), static_cast<T>(from));
      });
      return;
    }
    case OpId::normal_: {
      double mean = a.scalars[0].is_none() ? 0.0 : a.scalars[0].to_double();
      double stddev = a.scalars[1].is_none() ? 1.0 : a.scalars[1].to_double();
      generate(out, [&]<typename T>(int64_t i) {
        return mean + stddev * philox_normal(a.seed, a.offset + static_cast<uint64_t>(i));
      });
      return;
    }
    default:
      fail<InvalidArgument>(d.name, "is not an in-place fill op");
  }
}

}  // namespace dtr::local::detail
