// CUDA kernels of the NN ops but the convolutions and linear (kernels_conv.cu): max and
// average pooling and their gradients, softmax / log_softmax and theirs, nll_loss and its
// gradient, dropout / dropout2d, threshold_backward. The per-element and per-row arithmetic
// is the CPU's own (tensor/nn_params.hpp, tensor/nn_math.hpp: host and device code), one
// thread per output element or per row; float16 and bfloat16 run on float32 copies and
// round the result, as the CPU does.
//
// What differs from the CPU: max_pool2d_backward adds overlapping windows' gradients with
// atomics (another order of float sums); exp and log come from CUDA's libdevice. Targets
// and indices out of range are reported as the CPU reports them (one wait for the stream);
// dropout's masks are the CPU's bit for bit (the same Philox words).
//
// Thread safety: any thread; launches on the calling thread's current stream.
#include <vector>

#include "tensor/cuda/kernels.cuh"
#include "tensor/nn_math.hpp"
#include "tensor/nn_params.hpp"

namespace dtr::cuda::detail {

namespace {

using ::dtr::detail::Pool2dArgs;

#define DTR_GRID_LOOP(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Planes (N * C or C) of a (C, H, W) or (N, C, H, W) shape, and a plane's size.
struct Planes {
  int64_t count = 1, h = 0, w = 0;
};
Planes planes_of(const Shape& s) {
  Planes p;
  for (size_t i = 0; i + 2 < s.size(); ++i) p.count *= s[i];
  p.h = s[s.size() - 2];
  p.w = s[s.size() - 1];
  return p;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool_kernel(const T* x, T* values, int64_t* indices, Planes ip, Planes op, Pool2dArgs p) {
  DTR_GRID_LOOP(i, ip.count * op.h * op.w) {
    const int64_t c = i / (op.h * op.w), oy = (i / op.w) % op.h, ox = i % op.w;
    T best;
    int64_t where;
    ::dtr::detail::max_pool_at<T, T>(x + c * ip.h * ip.w, ip.h, ip.w, p, oy, ox, best, where);
    if (values) values[i] = best;
    if (indices) indices[i] = where;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    avg_pool_kernel(const T* x, T* out, Planes ip, Planes op, Pool2dArgs p) {
  DTR_GRID_LOOP(i, ip.count * op.h * op.w) {
    const int64_t c = i / (op.h * op.w), oy = (i / op.w) % op.h, ox = i % op.w;
    int64_t y0, y1, sy, x0, x1, sx;
    ::dtr::detail::avg_window(oy, ip.h, p.h, y0, y1, sy);
    ::dtr::detail::avg_window(ox, ip.w, p.w, x0, x1, sx);
    const double div = ::dtr::detail::avg_divisor(p, y0, y1, sy, x0, x1, sx);
    const T* plane = x + c * ip.h * ip.w;
    double sum = 0;
    for (int64_t y = y0; y < y1; ++y)
      for (int64_t xx = x0; xx < x1; ++xx) sum += static_cast<double>(plane[y * ip.w + xx]);
    out[i] = div == 0 ? T(0) : static_cast<T>(sum / div);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    avg_pool_backward_kernel(const T* g, T* out, Planes gp, Planes ip, Pool2dArgs p) {
  DTR_GRID_LOOP(i, ip.count * ip.h * ip.w) {
    const int64_t c = i / (ip.h * ip.w), y = (i / ip.w) % ip.h, x = i % ip.w;
    out[i] = static_cast<T>(
        ::dtr::detail::avg_pool_grad_at(g + c * gp.h * gp.w, ip.h, ip.w, gp.h, gp.w, p, y, x));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    max_pool_backward_kernel(const T* g, const int64_t* idx, T* out, int64_t n, int64_t per,
                             int64_t size) {
  DTR_GRID_LOOP(i, n) {
    atomicAdd(out + (i / per) * size + idx[i], g[i]);
  }
}

void pool_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
             const local::Tensor& out) {
  const local::Tensor x = contiguous_on(c, in[0]);
  const Planes ip = planes_of(x.shape()), op = planes_of(out.shape());
  const int64_t n = ip.count * op.h * op.w;
  if (n == 0) return;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    if (d.id == OpId::avg_pool2d) {
      avg_pool_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
          px, static_cast<T*>(out.raw_data()), ip, op, ::dtr::detail::avg_pool2d_args(d, a, 0));
      return;
    }
    const bool indices = d.id == OpId::max_pool2d_indices;
    max_pool_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
        px, indices ? nullptr : static_cast<T*>(out.raw_data()),
        indices ? static_cast<int64_t*>(out.raw_data()) : nullptr, ip, op,
        ::dtr::detail::max_pool2d_args(d, a, 0));
  });
  check_launch(c, "pooling kernel");
}

void pool_backward_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
                      const OpAttrs& a, const local::Tensor& out) {
  const local::Tensor g = contiguous_on(c, in[0]);
  const Planes gp = planes_of(g.shape()), ip = planes_of(out.shape());
  if (d.id == OpId::max_pool2d_backward) {
    const local::Tensor idx = packed_on(c, in[1], DType::Int64);
    const BadIndex bad = first_out_of_range(c, static_cast<const int64_t*>(idx.raw_data()),
                                            idx.numel(), 0, ip.h * ip.w);
    if (bad.position >= 0)
      fail<IndexError>(d.name, "index {} (element {}) is out of range for a {}x{} plane", bad.value,
                       bad.position, ip.h, ip.w);
  }
  fill_impl(c, out, Scalar(0));
  const int64_t n = d.id == OpId::max_pool2d_backward ? g.numel() : out.numel();
  if (n == 0) return;
  dispatch_float(d.name, g.dtype(), [&]<typename T>() {
    const T* pg = static_cast<const T*>(g.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    if (d.id == OpId::max_pool2d_backward) {
      const local::Tensor idx = packed_on(c, in[1], DType::Int64);
      max_pool_backward_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
          pg, static_cast<const int64_t*>(idx.raw_data()), o, n, gp.h * gp.w, ip.h * ip.w);
    } else {
      avg_pool_backward_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
          pg, o, gp, ip, ::dtr::detail::avg_pool2d_args(d, a, 2));
    }
  });
  check_launch(c, "pooling gradient kernel");
}

// ---- softmax, log_softmax and their gradients: one thread per row ----

template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_kernel(const T* x, const T* y, T* out, int64_t rows, int64_t size, int64_t inner,
                   bool take_log, bool backward) {
  DTR_GRID_LOOP(r, rows) {
    const int64_t base = (r / inner) * size * inner + r % inner;
    if (backward)
      ::dtr::detail::softmax_backward_row(x + base, y + base, out + base, size, inner, take_log);
    else
      ::dtr::detail::softmax_row(x + base, out + base, size, inner, take_log);
  }
}

void softmax_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
                const local::Tensor& out) {
  const bool backward = in.size() == 2;
  const bool take_log = d.id == OpId::log_softmax || d.id == OpId::log_softmax_backward;
  const local::Tensor x = contiguous_on(c, in[0]);
  const local::Tensor y = backward ? contiguous_on(c, in[1]) : x;
  const local::detail::DimSplit s =
      local::detail::split_at(x.shape(), wrap_dim(d.name, a.ints[0], x.dim()));
  const int64_t rows = s.outer * s.inner;
  if (rows == 0 || s.size == 0) return;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    softmax_kernel<T><<<grid_for(c, rows), kThreads, 0, c.stream>>>(
        static_cast<const T*>(x.raw_data()), static_cast<const T*>(y.raw_data()),
        static_cast<T*>(out.raw_data()), rows, s.size, s.inner, take_log, backward);
  });
  check_launch(c, "softmax kernel");
}

// ---- layer_norm and its gradients: a thread per row (forward, input gradient); the weight
// gradient from per-row statistics, a thread per column summing the rows in order ----

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_rows(const T* x, const T* w, const T* other, T* out, int64_t rows, int64_t n,
                    double eps, bool forward) {
  DTR_GRID_LOOP(r, rows) {
    if (forward)
      ::dtr::detail::layer_norm_row(x + r * n, w, other, out + r * n, n, eps);
    else
      ::dtr::detail::layer_norm_backward_row(other + r * n, x + r * n, w, out + r * n, n, eps);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_row_stats(const T* x, double* stats, int64_t rows, int64_t n, double eps) {
  DTR_GRID_LOOP(r, rows) {
    ::dtr::detail::layer_norm_stats(x + r * n, n, eps, stats[2 * r], stats[2 * r + 1]);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    layer_norm_columns(const T* g, const T* x, const double* stats, T* out, int64_t rows,
                       int64_t n) {
  DTR_GRID_LOOP(i, n) {
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r)
      sum += static_cast<double>(g[r * n + i]) *
             (static_cast<double>(x[r * n + i]) - stats[2 * r]) * stats[2 * r + 1];
    out[i] = static_cast<T>(sum);
  }
}

void layer_norm_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
                   const OpAttrs& a, const local::Tensor& out) {
  const bool forward = d.id == OpId::layer_norm;
  const local::Tensor x = contiguous_on(c, in[forward ? 0 : 1]);
  const local::Tensor w = contiguous_on(c, in[forward ? 1 : 2]);
  const local::Tensor other = contiguous_on(c, forward ? in[2] : in[0]);
  const double eps = a.scalars[0].is_none() ? 1e-5 : a.scalars[0].to_double();
  const int64_t n = w.numel(), rows = n > 0 ? x.numel() / n : 0;
  if (n == 0) return;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    const T* po = static_cast<const T*>(other.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    if (d.id != OpId::layer_norm_weight_grad) {
      if (rows == 0) return;
      layer_norm_rows<T><<<grid_for(c, rows), kThreads, 0, c.stream>>>(
          px, static_cast<const T*>(w.raw_data()), po, o, rows, n, eps, forward);
      return;
    }
    std::shared_ptr<Storage> stats =
        allocate(c.device, static_cast<size_t>(std::max<int64_t>(rows, 1)) * 2 * sizeof(double));
    auto* ps = static_cast<double*>(stats->data());
    if (rows > 0)
      layer_norm_row_stats<T><<<grid_for(c, rows), kThreads, 0, c.stream>>>(px, ps, rows, n, eps);
    layer_norm_columns<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(po, px, ps, o, rows, n);
    // stats is released after the launches: the allocator is stream-ordered.
  });
  check_launch(c, "layer_norm kernel");
}

// ---- nll_loss and its gradient ----

// The loss per sample (reduction none), or the reduced loss by one thread (the CPU's
// order of summation).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    nll_kernel(const T* x, const int64_t* t, const T* w, T* out, int64_t n, int64_t classes,
               int64_t ignore, int64_t reduction) {
  if (reduction != ::dtr::detail::kNllNone) {
    if (blockIdx.x == 0 && threadIdx.x == 0) {
      int64_t bad;
      out[0] = static_cast<T>(
          ::dtr::detail::nll_loss_reduced(x, t, w, n, classes, ignore, reduction, bad));
    }
    return;
  }
  DTR_GRID_LOOP(i, n) {
    const bool counts = ::dtr::detail::nll_target_kind(t, i, classes, ignore) > 0;
    out[i] = counts ? static_cast<T>(-::dtr::detail::nll_weight(t, w, i) *
                                     static_cast<double>(x[i * classes + t[i]]))
                    : T(0);
  }
}

// The mean's divisor, by one thread.
template <typename T>
__global__ void nll_total_kernel(const int64_t* t, const T* w, int64_t n, int64_t classes,
                                 int64_t ignore, double* total) {
  if (blockIdx.x == 0 && threadIdx.x == 0)
    *total = ::dtr::detail::nll_total_weight(t, w, n, classes, ignore);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    nll_backward_kernel(const T* g, const int64_t* t, const T* w, const double* total, T* out,
                        int64_t n, int64_t classes, int64_t ignore, int64_t reduction) {
  DTR_GRID_LOOP(i, n) {
    if (::dtr::detail::nll_target_kind(t, i, classes, ignore) <= 0) continue;
    const double gi = static_cast<double>(g[reduction == ::dtr::detail::kNllNone ? i : 0]);
    const double div = reduction == ::dtr::detail::kNllMean ? *total : 1.0;
    out[i * classes + t[i]] = static_cast<T>(-::dtr::detail::nll_weight(t, w, i) * gi / div);
  }
}

void nll_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
            const local::Tensor& out) {
  const bool backward = d.id == OpId::nll_loss_backward;
  const size_t xi = backward ? 1 : 0;
  const local::Tensor x = contiguous_on(c, in[xi]);
  const local::Tensor t = packed_on(c, in[xi + 1], DType::Int64);
  const local::Tensor w = in.size() == xi + 3 ? contiguous_on(c, in[xi + 2]) : local::Tensor();
  const int64_t reduction = a.ints[0], ignore = a.ints[1];
  const int64_t classes = x.shape()[x.dim() - 1], n = x.numel() / std::max<int64_t>(classes, 1);
  const int64_t* tp = static_cast<const int64_t*>(t.raw_data());
  const BadIndex bad = first_out_of_range(c, tp, n, 0, classes, ignore);
  if (bad.position >= 0)
    fail<IndexError>(d.name, "target {} (sample {}) is out of range for {} classes", bad.value,
                     bad.position, classes);
  if (backward) fill_impl(c, out, Scalar(0));
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* pw = w.defined() ? static_cast<const T*>(w.raw_data()) : nullptr;
    T* o = static_cast<T*>(out.raw_data());
    if (!backward) {
      nll_kernel<T><<<grid_for(c, std::max<int64_t>(n, 1)), kThreads, 0, c.stream>>>(
          static_cast<const T*>(x.raw_data()), tp, pw, o, n, classes, ignore, reduction);
      return;
    }
    const local::Tensor g = contiguous_on(c, in[0]);
    const local::Tensor total = empty_on(c, {}, DType::Float64);
    nll_total_kernel<T>
        <<<1, 1, 0, c.stream>>>(tp, pw, n, classes, ignore, static_cast<double*>(total.raw_data()));
    if (n > 0)
      nll_backward_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
          static_cast<const T*>(g.raw_data()), tp, pw, static_cast<const double*>(total.raw_data()),
          o, n, classes, ignore, reduction);
  });
  check_launch(c, "nll_loss kernel");
}

// ---- dropout, threshold_backward ----

template <typename T>
__global__ void __launch_bounds__(kThreads)
    dropout_kernel(const T* x, T* out, int64_t n, int64_t group, uint64_t seed, uint64_t offset,
                   double p, T scale) {
  DTR_GRID_LOOP(i, n) {
    const uint64_t draw = static_cast<uint64_t>(group > 1 ? i / group : i);
    out[i] = x[i] * (::dtr::detail::dropout_keeps(seed, offset, draw, p) ? scale : T(0));
  }
}

void dropout_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in, const OpAttrs& a,
                const local::Tensor& out) {
  if (a.ints[0] == 0) return copy_impl(c, out, in[0]);  // not training
  const local::Tensor x = contiguous_on(c, in[0]);
  const double p = a.scalars[0].is_none() ? 0.5 : a.scalars[0].to_double();
  const int64_t group =
      d.id == OpId::dropout2d ? x.shape()[x.dim() - 1] * x.shape()[x.dim() - 2] : int64_t{1};
  const int64_t n = x.numel();
  if (n == 0) return;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    dropout_kernel<T><<<grid_for(c, n), kThreads, 0, c.stream>>>(
        static_cast<const T*>(x.raw_data()), static_cast<T*>(out.raw_data()), n, group, a.seed,
        a.offset, p, static_cast<T>(1.0 / (1.0 - p)));
  });
  check_launch(c, "dropout kernel");
}

template <typename T>
struct ThresholdFn {
  T threshold;
  __device__ T operator()(T g, T x) const { return x > threshold ? g : T(0); }
};

void threshold_backward_op(const Ctx& c, std::span<const local::Tensor> in, const OpAttrs& a,
                           const local::Tensor& out) {
  dispatch_compute(out.dtype(), [&]<typename T>() {
    launch_elementwise<T, 2>(c, out, {&in[0], &in[1]}, ThresholdFn<T>{a.scalars[0].to<T>()},
                             "threshold_backward kernel");
  });
}

}  // namespace

void nn_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> inputs, const OpAttrs& a,
           const local::Tensor& output) {
  widened(c, inputs, output, [&](std::span<const local::Tensor> in, const local::Tensor& out) {
    switch (d.id) {
      case OpId::max_pool2d:
      case OpId::max_pool2d_indices:
      case OpId::avg_pool2d:
        return pool_op(c, d, in, a, out);
      case OpId::max_pool2d_backward:
      case OpId::avg_pool2d_backward:
        return pool_backward_op(c, d, in, a, out);
      case OpId::softmax:
      case OpId::log_softmax:
      case OpId::softmax_backward:
      case OpId::log_softmax_backward:
        return softmax_op(c, d, in, a, out);
      case OpId::nll_loss:
      case OpId::nll_loss_backward:
        return nll_op(c, d, in, a, out);
      case OpId::dropout:
      case OpId::dropout2d:
        return dropout_op(c, d, in, a, out);
      case OpId::threshold_backward:
        return threshold_backward_op(c, in, a, out);
      case OpId::layer_norm:
      case OpId::layer_norm_backward:
      case OpId::layer_norm_weight_grad:
        return layer_norm_op(c, d, in, a, out);
      default:
        fail<InvalidArgument>(d.name, "has no NN kernel");
    }
  });
}

}  // namespace dtr::cuda::detail
