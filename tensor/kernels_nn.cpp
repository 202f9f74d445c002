// CPU kernels of the NN ops but the convolutions and linear (kernels_conv.cpp): max and
// average pooling and their gradients, softmax and log_softmax and theirs, nll_loss and
// its gradient, dropout and dropout2d, threshold_backward. Inputs arrive as float32 or
// float64 (16-bit ones are widened by tensor.cpp); the per-element and per-row arithmetic is
// nn_params.hpp's and nn_math.hpp's, which the CUDA kernels share.
//
// Pooling works on planes: an (N, C, H, W) tensor is N * C planes of H x W (a (C, H, W)
// one is C planes). max_pool2d runs tap by tap over whole output rows; avg_pool2d's
// gradient is gathered per input element (the outputs whose windows hold it), max_pool2d's
// is scattered from its indices in output order.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels.hpp"
#include "nn_math.hpp"
#include "nn_params.hpp"
#include "parallel.hpp"

namespace dtr::local::detail {

namespace {

using dtr::detail::avg_divisor;
using dtr::detail::avg_window;
using dtr::detail::Pool2dArgs;

// Planes (N * C or C) and the size of one, of a (C, H, W) or (N, C, H, W) shape.
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

// One plane of max_pool2d: each output's max (NaN wins, the last NaN) and its position,
// as max_pool_at defines them, computed tap by tap over a whole output row so that the
// outputs of a row are independent work (no chain of compares per output).
// take ? a : b without a branch (compilers branch on `?:` here, and random data mispredicts
// half the time).
template <typename T>
T pick(bool take, T a, T b) {
  using U = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  const U m = U(0) - static_cast<U>(take);
  return std::bit_cast<T>(static_cast<U>((std::bit_cast<U>(a) & m) | (std::bit_cast<U>(b) & ~m)));
}

// The common 2x2 window without padding or dilation, every window inside the plane.
template <typename T>
void max_pool_plane_2x2(const T* plane, const Planes& ip, const Planes& op, const Pool2dArgs& p,
                        T* best, int64_t* where) {
  const int64_t w = ip.w, sh = p.h.s, sw = p.w.s;
  for (int64_t oy = 0; oy < op.h; ++oy)
    for (int64_t ox = 0; ox < op.w; ++ox) {
      const int64_t at = oy * sh * w + ox * sw;
      const T* q = plane + at;
      const int64_t pos[4] = {at, at + 1, at + w, at + w + 1};
      const T v[4] = {q[0], q[1], q[w], q[w + 1]};
      T b = -std::numeric_limits<T>::infinity();
      int64_t wh = at;
      for (int j = 0; j < 4; ++j) {
        const bool take = (v[j] > b) | (v[j] != v[j]);
        b = pick(take, v[j], b);
        wh = pick(take, pos[j], wh);
      }
      best[oy * op.w + ox] = b;
      where[oy * op.w + ox] = wh;
    }
}

template <typename T>
void max_pool_plane(const T* plane, const Planes& ip, const Planes& op, const Pool2dArgs& p,
                    T* best, int64_t* where) {
  const bool inside = p.h.p == 0 && p.w.p == 0 && (op.h - 1) * p.h.s + p.h.k <= ip.h &&
                      (op.w - 1) * p.w.s + p.w.k <= ip.w;
  if (inside && p.h.k == 2 && p.w.k == 2 && p.h.d == 1 && p.w.d == 1)
    return max_pool_plane_2x2(plane, ip, op, p, best, where);
  for (int64_t oy = 0; oy < op.h; ++oy) {
    int64_t y0, y1;
    dtr::detail::max_window(oy, ip.h, p.h, y0, y1);
    T* b = best + oy * op.w;
    int64_t* wh = where + oy * op.w;
    for (int64_t ox = 0; ox < op.w; ++ox) {
      int64_t x0, x1;
      dtr::detail::max_window(ox, ip.w, p.w, x0, x1);
      b[ox] = -std::numeric_limits<T>::infinity();
      wh[ox] = y0 * ip.w + x0;
    }
    for (int64_t y = y0; y < y1; y += p.h.d) {
      const T* row = plane + y * ip.w;
      for (int64_t kj = 0; kj < p.w.k; ++kj) {
        const int64_t off = kj * p.w.d - p.w.p, s = p.w.s;
        int64_t lo, hi;
        dtr::detail::taps_inside(off, s, ip.w, op.w, lo, hi);
        for (int64_t ox = lo; ox < hi; ++ox) {
          const T v = row[ox * s + off];
          const bool take = (v > b[ox]) | (v != v);
          b[ox] = pick(take, v, b[ox]);
          wh[ox] = pick(take, y * ip.w + ox * s + off, wh[ox]);
        }
      }
    }
  }
}

void max_pool_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                     const Tensor& out) {
  const Pool2dArgs p = dtr::detail::max_pool2d_args(d, a, 0);
  const bool indices = d.id == OpId::max_pool2d_indices;
  const Tensor x = in[0].contiguous();
  const Planes ip = planes_of(x.shape()), op = planes_of(out.shape());
  const int64_t per = op.h * op.w;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* src = static_cast<const T*>(x.raw_data());
    std::vector<T> best(indices ? static_cast<size_t>(per) : 0);
    std::vector<int64_t> where(indices ? 0 : static_cast<size_t>(per));
    for (int64_t c = 0; c < ip.count; ++c) {
      T* b = indices ? best.data() : static_cast<T*>(out.raw_data()) + c * per;
      int64_t* w = indices ? static_cast<int64_t*>(out.raw_data()) + c * per : where.data();
      max_pool_plane(src + c * ip.h * ip.w, ip, op, p, b, w);
    }
  });
}

void avg_pool_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                     const Tensor& out) {
  const Pool2dArgs p = dtr::detail::avg_pool2d_args(d, a, 0);
  const Tensor x = in[0].contiguous();
  const Planes ip = planes_of(x.shape()), op = planes_of(out.shape());
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* src = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t c = 0; c < ip.count; ++c) {
      const T* plane = src + c * ip.h * ip.w;
      for (int64_t oy = 0; oy < op.h; ++oy)
        for (int64_t ox = 0; ox < op.w; ++ox) {
          int64_t y0, y1, sy, x0, x1, sx;
          avg_window(oy, ip.h, p.h, y0, y1, sy);
          avg_window(ox, ip.w, p.w, x0, x1, sx);
          const double div = avg_divisor(p, y0, y1, sy, x0, x1, sx);
          double sum = 0;
          for (int64_t y = y0; y < y1; ++y)
            for (int64_t xx = x0; xx < x1; ++xx) sum += static_cast<double>(plane[y * ip.w + xx]);
          o[(c * op.h + oy) * op.w + ox] = div == 0 ? T(0) : static_cast<T>(sum / div);
        }
    }
  });
}

// max_pool2d_backward: out[plane, index] += grad for every output position.
void max_pool_backward_kernel(const OpDef& d, std::span<const Tensor> in, const Tensor& out) {
  const Tensor g = in[0].contiguous(), idx = in[1].contiguous();
  const Planes gp = planes_of(g.shape()), ip = planes_of(out.shape());
  const int64_t per_plane = gp.h * gp.w, size = ip.h * ip.w;
  const int64_t* ix = static_cast<const int64_t*>(idx.raw_data());
  for (int64_t i = 0; i < gp.count * per_plane; ++i)
    if (ix[i] < 0 || ix[i] >= size)
      fail<IndexError>(d.name, "index {} (element {}) is out of range for a {}x{} plane", ix[i], i,
                       ip.h, ip.w);
  fill(out, 0);
  dispatch_float(d.name, g.dtype(), [&]<typename T>() {
    const T* gr = static_cast<const T*>(g.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t c = 0; c < gp.count; ++c)
      for (int64_t i = 0; i < per_plane; ++i)
        o[c * size + ix[c * per_plane + i]] += gr[c * per_plane + i];
  });
}

void avg_pool_backward_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                              const Tensor& out) {
  const Pool2dArgs p = dtr::detail::avg_pool2d_args(d, a, 2);
  const Tensor g = in[0].contiguous();
  const Planes gp = planes_of(g.shape()), ip = planes_of(out.shape());
  dispatch_float(d.name, g.dtype(), [&]<typename T>() {
    const T* gr = static_cast<const T*>(g.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t c = 0; c < gp.count; ++c)
      for (int64_t y = 0; y < ip.h; ++y)
        for (int64_t x = 0; x < ip.w; ++x)
          o[(c * ip.h + y) * ip.w + x] = static_cast<T>(
              dtr::detail::avg_pool_grad_at(gr + c * gp.h * gp.w, ip.h, ip.w, gp.h, gp.w, p, y, x));
  });
}

// softmax, log_softmax and their gradients, row by row along the dim.
void softmax_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                    const Tensor& out) {
  const bool take_log = d.id == OpId::log_softmax || d.id == OpId::log_softmax_backward;
  const bool backward = in.size() == 2;
  const Tensor x = in[0].contiguous();
  const Tensor y = backward ? in[1].contiguous() : x;
  const DimSplit s = split_at(x.shape(), wrap_dim(d.name, a.ints[0], x.dim()));
  // Rows are independent: blocks of them in parallel (the same values on any number of
  // threads), each forward row's exps kept in a scratch row of the block.
  const int64_t rows = s.outer * s.inner;
  const int64_t per_block = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(s.size, 1));
  const int64_t blocks = (rows + per_block - 1) / per_block;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    const T* py = static_cast<const T*>(y.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    dtr::detail::parallel_for(blocks, [&](int64_t blk) {
      std::vector<double> scratch(backward || take_log ? 0 : static_cast<size_t>(s.size));
      for (int64_t row = blk * per_block; row < std::min(rows, (blk + 1) * per_block); ++row) {
        const int64_t at = (row / s.inner) * s.size * s.inner + row % s.inner;
        if (backward)
          dtr::detail::softmax_backward_row(px + at, py + at, o + at, s.size, s.inner, take_log);
        else
          dtr::detail::softmax_row(px + at, o + at, s.size, s.inner, take_log,
                                   scratch.empty() ? nullptr : scratch.data());
      }
    });
  });
}

[[noreturn]] void bad_target(const OpDef& d, const int64_t* target, int64_t i, int64_t classes) {
  fail<IndexError>(d.name, "target {} (sample {}) is out of range for {} classes", target[i], i,
                   classes);
}

// nll_loss (x, target, weight?) and nll_loss_backward (grad, x, target, weight?).
void nll_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  const bool backward = d.id == OpId::nll_loss_backward;
  const size_t xi = backward ? 1 : 0;
  const Tensor x = in[xi].contiguous(), t = in[xi + 1].contiguous();
  const Tensor w = in.size() == xi + 3 ? in[xi + 2].contiguous() : Tensor();
  const int64_t reduction = a.ints[0], ignore = a.ints[1];
  const int64_t classes = x.shape()[x.dim() - 1], n = x.numel() / std::max<int64_t>(classes, 1);
  const int64_t* tp = static_cast<const int64_t*>(t.raw_data());
  for (int64_t i = 0; i < n; ++i)
    if (dtr::detail::nll_target_kind(tp, i, classes, ignore) < 0) bad_target(d, tp, i, classes);
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pw = w.defined() ? static_cast<const T*>(w.raw_data()) : nullptr;
    T* o = static_cast<T*>(out.raw_data());
    if (!backward && reduction != dtr::detail::kNllNone) {
      int64_t bad;
      o[0] = static_cast<T>(
          dtr::detail::nll_loss_reduced(px, tp, pw, n, classes, ignore, reduction, bad));
      return;
    }
    const Tensor g = backward ? in[0].contiguous() : Tensor();
    const T* pg = backward ? static_cast<const T*>(g.raw_data()) : nullptr;
    const double total = backward && reduction == dtr::detail::kNllMean
                             ? dtr::detail::nll_total_weight(tp, pw, n, classes, ignore)
                             : 1.0;
    if (backward) std::fill(o, o + n * classes, T(0));
    for (int64_t i = 0; i < n; ++i) {
      const bool counts = dtr::detail::nll_target_kind(tp, i, classes, ignore) > 0;
      const double wi = counts ? dtr::detail::nll_weight(tp, pw, i) : 0.0;
      if (!backward) {
        o[i] = static_cast<T>(counts ? -wi * static_cast<double>(px[i * classes + tp[i]]) : 0.0);
      } else if (counts) {
        const double gi = static_cast<double>(pg[reduction == dtr::detail::kNllNone ? i : 0]);
        o[i * classes + tp[i]] = static_cast<T>(-wi * gi / total);
      }
    }
  });
}

void dropout_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                    const Tensor& out) {
  if (a.ints[0] == 0) return copy_into(out, in[0]);  // not training (infer() aliases x)
  const Tensor x = in[0].contiguous();
  const double p = a.scalars[0].is_none() ? 0.5 : a.scalars[0].to_double();
  // dropout2d draws one value per channel: every element of a (H, W) plane shares it.
  const int64_t group =
      d.id == OpId::dropout2d ? x.shape()[x.dim() - 1] * x.shape()[x.dim() - 2] : int64_t{1};
  const int64_t n = x.numel(), draws = group > 0 ? n / group : 0;
  std::vector<uint8_t> keep(static_cast<size_t>(draws));
  for (int64_t b = 0; b * 4 < draws; ++b) {
    bool four[4];
    dtr::detail::dropout_keeps4(a.seed, a.offset, static_cast<uint64_t>(b), p, four);
    for (int64_t j = 0; j < 4 && b * 4 + j < draws; ++j)
      keep[static_cast<size_t>(b * 4 + j)] = four[j];
  }
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    // x * mask / (1 - p) as torch computes it (a dropped NaN stays NaN).
    const T scale = static_cast<T>(1.0 / (1.0 - p));
    const T* px = static_cast<const T*>(x.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    for (int64_t c = 0; c < draws; ++c) {
      const T factor = keep[static_cast<size_t>(c)] ? scale : T(0);
      for (int64_t i = c * group; i < (c + 1) * group; ++i) o[i] = px[i] * factor;
    }
  });
}

void threshold_backward_kernel(std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  const Shape& shape = out.shape();
  const Tensor g = in[0].dtype() == out.dtype() ? in[0] : in[0].to(out.dtype());
  const Tensor x = in[1].dtype() == out.dtype() ? in[1] : in[1].to(out.dtype());
  dispatch_wide("threshold_backward", out.dtype(), [&]<typename T>() {
    const T threshold = a.scalars[0].to<T>();
    for_each_strided<3>(
        shape,
        {static_cast<char*>(out.raw_data()), static_cast<char*>(g.raw_data()),
         static_cast<char*>(x.raw_data())},
        {out.strides(), broadcast_strides(g.meta(), shape), broadcast_strides(x.meta(), shape)},
        {static_cast<int64_t>(sizeof(T)), static_cast<int64_t>(sizeof(T)),
         static_cast<int64_t>(sizeof(T))},
        [&](char** ptr, const int64_t* s, int64_t n) {
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<T*>(ptr[0] + i * s[0]) =
                *reinterpret_cast<const T*>(ptr[2] + i * s[2]) > threshold
                    ? *reinterpret_cast<const T*>(ptr[1] + i * s[1])
                    : T(0);
        });
  });
}

// layer_norm (x, w, b), layer_norm_backward (g, x, w) and layer_norm_weight_grad (g, x, w),
// over rows of the normalized size, in parallel: blocks of rows fixed by the shape alone.
// The weight gradient sums each block's rows in double, then the blocks in order, so the
// result does not depend on the threads.
void layer_norm_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a,
                       const Tensor& out) {
  const bool forward = d.id == OpId::layer_norm;
  const Tensor x = in[forward ? 0 : 1].contiguous();
  const Tensor w = in[forward ? 1 : 2].contiguous();
  const Tensor other = (forward ? in[2] : in[0]).contiguous();  // bias, or grad
  const double eps = a.scalars[0].is_none() ? 1e-5 : a.scalars[0].to_double();
  const int64_t n = w.numel(), rows = n > 0 ? x.numel() / n : 0;
  constexpr int64_t kRowsPerBlock = 64;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pw = static_cast<const T*>(w.raw_data());
    const T* po = static_cast<const T*>(other.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    if (d.id == OpId::layer_norm_weight_grad) {
      std::vector<double> partial(static_cast<size_t>(blocks * n), 0.0);
      dtr::detail::parallel_for(blocks, [&](int64_t blk) {
        double* acc = partial.data() + blk * n;
        for (int64_t r = blk * kRowsPerBlock; r < std::min(rows, (blk + 1) * kRowsPerBlock); ++r)
          dtr::detail::layer_norm_weight_grad_row(po + r * n, px + r * n, acc, n, eps);
      });
      for (int64_t i = 0; i < n; ++i) {
        double sum = 0;
        for (int64_t blk = 0; blk < blocks; ++blk) sum += partial[static_cast<size_t>(blk * n + i)];
        o[i] = static_cast<T>(sum);
      }
      return;
    }
    dtr::detail::parallel_for(blocks, [&](int64_t blk) {
      for (int64_t r = blk * kRowsPerBlock; r < std::min(rows, (blk + 1) * kRowsPerBlock); ++r) {
        if (forward)
          dtr::detail::layer_norm_row(px + r * n, pw, po, o + r * n, n, eps);
        else
          dtr::detail::layer_norm_backward_row(po + r * n, px + r * n, pw, o + r * n, n, eps);
      }
    });
  });
}

}  // namespace

void nn_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  switch (d.id) {
    case OpId::max_pool2d:
    case OpId::max_pool2d_indices:
      return max_pool_kernel(d, in, a, out);
    case OpId::avg_pool2d:
      return avg_pool_kernel(d, in, a, out);
    case OpId::max_pool2d_backward:
      return max_pool_backward_kernel(d, in, out);
    case OpId::avg_pool2d_backward:
      return avg_pool_backward_kernel(d, in, a, out);
    case OpId::softmax:
    case OpId::log_softmax:
    case OpId::softmax_backward:
    case OpId::log_softmax_backward:
      return softmax_kernel(d, in, a, out);
    case OpId::nll_loss:
    case OpId::nll_loss_backward:
      return nll_kernel(d, in, a, out);
    case OpId::dropout:
    case OpId::dropout2d:
      return dropout_kernel(d, in, a, out);
    case OpId::threshold_backward:
      return threshold_backward_kernel(in, a, out);
    case OpId::layer_norm:
    case OpId::layer_norm_backward:
    case OpId::layer_norm_weight_grad:
      return layer_norm_kernel(d, in, a, out);
    default:
      fail<InvalidArgument>(d.name, "has no NN kernel");
  }
}

}  // namespace dtr::local::detail
