// CPU kernels of linear and of conv2d and its two gradients, as GEMMs (Eigen, as matmul's
// kernel) over im2col matrices.
//
// Terms. A conv2d of x (N, C, H, W) with weight (Cout, C/G, kh, kw) in G groups: each group
// g maps Cg = C/G input channels to Coutg = Cout/G output channels. Its `col` matrix has
// K = Cg * kh * kw rows (one per input channel and kernel tap, in the weight's order) and
// one column per (sample, output position): column n * P + p, P = oh * ow, holds the input
// value each tap reads for output position p of sample n (0 in the padding). Then, per
// group, with W_g the (Coutg, K) rows of the weight and Y_g / G_g the (Coutg, n * P)
// output / output gradient with columns ordered like col's:
//   conv2d              Y_g = W_g col             (then bias, then into (N, Cout, oh, ow))
//   conv2d_weight_grad  dW_g = G_g col^T          (summed over sample chunks)
//   conv2d_input_grad   dcol = W_g^T G_g, and col2im adds each dcol entry back onto the
//                       input position its tap read (dx starts at 0)
// Samples are processed in chunks whose col stays within kColBudget elements (at least one
// sample each); chunks run in parallel (tensor/parallel.hpp), each thread with its
// own col buffer, and the weight gradient's sum over chunks is combined in a fixed order,
// so results do not depend on the number of threads.
#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <memory>

#include "kernels.hpp"
#include "nn_params.hpp"
#include "parallel.hpp"

namespace dtr::local::detail {

namespace {

using dtr::detail::Axis;
using dtr::detail::parallel_for;

// Elements of col per chunk: chunks are the parallel parts.
constexpr int64_t kColBudget = int64_t{1} << 21;

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using Mat = Eigen::Map<RowMat<T>, 0, Eigen::OuterStride<>>;
template <typename T>
using ConstMat = Eigen::Map<const RowMat<T>, 0, Eigen::OuterStride<>>;

// C (m x n) = op(A) op(B), or += with `accumulate`; every matrix row-major with its leading
// dimension; op(X) is X, or X^T when X is stored transposed (ta / tb).
template <typename T>
void gemm(bool accumulate, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, bool ta,
          const T* b, int64_t ldb, bool tb, T* c, int64_t ldc) {
  Mat<T> C(c, m, n, Eigen::OuterStride<>(ldc));
  ConstMat<T> A(a, ta ? k : m, ta ? m : k, Eigen::OuterStride<>(lda));
  ConstMat<T> B(b, tb ? n : k, tb ? k : n, Eigen::OuterStride<>(ldb));
  auto run = [&](const auto& lhs, const auto& rhs) {
    if (accumulate)
      C.noalias() += lhs * rhs;
    else
      C.noalias() = lhs * rhs;
  };
  if (ta && tb)
    run(A.transpose(), B.transpose());
  else if (ta)
    run(A.transpose(), B);
  else if (tb)
    run(A, B.transpose());
  else
    run(A, B);
}

// One conv2d call's sizes (an unbatched (C, H, W) input is one sample).
struct ConvGeom {
  int64_t n = 1, c = 0, h = 0, w = 0;  // input
  int64_t cout = 0, oh = 0, ow = 0;    // output
  Axis ah, aw;                         // kernel, stride, padding, dilation per axis
  int64_t groups = 1;
  int64_t cg() const { return c / groups; }
  int64_t coutg() const { return cout / groups; }
  int64_t k() const { return cg() * ah.k * aw.k; }
  int64_t p() const { return oh * ow; }
  // Samples per chunk: col (K x chunk * P) within kColBudget, at least one.
  int64_t chunk() const {
    return std::max<int64_t>(1, kColBudget / std::max<int64_t>(1, k() * p()));
  }
};

// x and out shapes: (.., C, H, W) and (.., Cout, oh, ow).
ConvGeom geom_of(const dtr::detail::Conv2dArgs& args, const Shape& x, const Shape& y, int64_t kh,
                 int64_t kw) {
  ConvGeom g;
  const size_t nd = x.size();
  g.n = nd == 4 ? x[0] : 1;
  g.c = x[nd - 3];
  g.h = x[nd - 2];
  g.w = x[nd - 1];
  g.cout = y[nd - 3];
  g.oh = y[nd - 2];
  g.ow = y[nd - 1];
  g.ah = args.h;
  g.aw = args.w;
  g.ah.k = kh;
  g.aw.k = kw;
  g.groups = args.groups;
  return g;
}

// For each (row r of col, sample, output row oy) with its input row: f(col segment of ow
// entries, input row pointer or nullptr in the padding, lo, hi, column offset).
template <typename T, typename X, typename F>
void walk_col(const ConvGeom& g, X* x, int64_t n0, int64_t nb, int64_t group, T* col, F&& f) {
  const int64_t cols = nb * g.p();
  for (int64_t ci = 0; ci < g.cg(); ++ci)
    for (int64_t ki = 0; ki < g.ah.k; ++ki)
      for (int64_t kj = 0; kj < g.aw.k; ++kj) {
        T* row = col + ((ci * g.ah.k + ki) * g.aw.k + kj) * cols;
        const int64_t off = kj * g.aw.d - g.aw.p;
        int64_t lo, hi;
        dtr::detail::taps_inside(off, g.aw.s, g.w, g.ow, lo, hi);
        for (int64_t n = 0; n < nb; ++n) {
          X* plane = x + ((n0 + n) * g.c + group * g.cg() + ci) * g.h * g.w;
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            const int64_t iy = oy * g.ah.s - g.ah.p + ki * g.ah.d;
            X* in_row = iy >= 0 && iy < g.h ? plane + iy * g.w : nullptr;
            f(row + n * g.p() + oy * g.ow, in_row, lo, hi, off);
          }
        }
      }
}

// col of group `group` for samples [n0, n0 + nb) of x.
template <typename T>
void im2col(const ConvGeom& g, const T* x, int64_t n0, int64_t nb, int64_t group, T* col) {
  const int64_t s = g.aw.s;
  walk_col(g, x, n0, nb, group, col,
           [&](T* dst, const T* src, int64_t lo, int64_t hi, int64_t off) {
             if (!src) {
               std::fill(dst, dst + g.ow, T(0));
               return;
             }
             std::fill(dst, dst + lo, T(0));
             if (s == 1) {
               std::memcpy(dst + lo, src + lo + off, static_cast<size_t>(hi - lo) * sizeof(T));
             } else {
               for (int64_t ox = lo; ox < hi; ++ox) dst[ox] = src[ox * s + off];
             }
             std::fill(dst + hi, dst + g.ow, T(0));
           });
}

// Adds col's entries back onto the input positions their taps read (dx += col2im(col)).
template <typename T>
void col2im(const ConvGeom& g, T* dx, int64_t n0, int64_t nb, int64_t group, T* col) {
  const int64_t s = g.aw.s;
  walk_col(g, dx, n0, nb, group, col, [&](T* src, T* dst, int64_t lo, int64_t hi, int64_t off) {
    if (!dst) return;
    for (int64_t ox = lo; ox < hi; ++ox) dst[ox * s + off] += src[ox];
  });
}

// The (Coutg, nb * P) matrix of `y` (N, Cout, P) for group `group` and samples
// [n0, n0 + nb), into `m`.
template <typename T>
void gather_group(const ConvGeom& g, const T* y, int64_t n0, int64_t nb, int64_t group, T* m) {
  const int64_t P = g.p(), cols = nb * P;
  for (int64_t co = 0; co < g.coutg(); ++co)
    for (int64_t n = 0; n < nb; ++n)
      std::memcpy(m + co * cols + n * P, y + ((n0 + n) * g.cout + group * g.coutg() + co) * P,
                  static_cast<size_t>(P) * sizeof(T));
}

// A per-thread scratch buffer of at least n elements, reused across calls (no zeroing, no
// page faults after the first call of that size).
template <typename T>
T* scratch(int slot, size_t n) {
  struct Buffer {
    std::unique_ptr<T[]> data;
    size_t size = 0;
  };
  thread_local Buffer buffers[2];
  Buffer& b = buffers[slot];
  if (b.size < n) {
    b.data.reset(new T[n]);
    b.size = n;
  }
  return b.data.get();
}

// Sample chunks [n0, n0 + nb) of a call: the parts run in parallel (their number depends
// on the shapes only, not on the threads).
struct Chunks {
  int64_t step = 1, count = 0;
  Chunks(const ConvGeom& g) : step(g.chunk()), count((g.n + step - 1) / step) {}
  int64_t first(int64_t c) const { return c * step; }
  int64_t size(const ConvGeom& g, int64_t c) const { return std::min(step, g.n - c * step); }
};

template <typename T>
void conv2d_forward(const ConvGeom& g, const T* x, const T* w, const T* b, T* out) {
  const int64_t P = g.p(), K = g.k();
  const Chunks chunks(g);
  parallel_for(chunks.count, [&](int64_t c) {
    const int64_t n0 = chunks.first(c), nb = chunks.size(g, c), cols = nb * P;
    T* col = scratch<T>(0, static_cast<size_t>(K * cols));
    T* y = scratch<T>(1, static_cast<size_t>(g.coutg() * cols));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col(g, x, n0, nb, grp, col);
      gemm<T>(false, g.coutg(), cols, K, w + grp * g.coutg() * K, K, false, col, cols, false, y,
              cols);
      for (int64_t co = 0; co < g.coutg(); ++co) {
        const int64_t channel = grp * g.coutg() + co;
        const T bias = b ? b[channel] : T(0);
        for (int64_t n = 0; n < nb; ++n) {
          const T* src = y + co * cols + n * P;
          T* dst = out + ((n0 + n) * g.cout + channel) * P;
          for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + bias;
        }
      }
    }
  });
}

// The weight gradient sums over every sample: kStripes partial sums (stripe s takes the
// chunks s, s + kStripes, ... in order), added up in stripe order, so the result does not
// depend on the number of threads.
constexpr int64_t kStripes = 8;

template <typename T>
void conv2d_weight_grad(const ConvGeom& g, const T* grad, const T* x, T* dw) {
  const int64_t P = g.p(), K = g.k(), size = g.cout * K;
  const Chunks chunks(g);
  const int64_t stripes = std::min(kStripes, chunks.count);
  std::unique_ptr<T[]> partial(new T[static_cast<size_t>(stripes * size)]);
  parallel_for(stripes, [&](int64_t s) {
    T* part = partial.get() + s * size;
    std::fill(part, part + size, T(0));
    for (int64_t c = s; c < chunks.count; c += stripes) {
      const int64_t n0 = chunks.first(c), nb = chunks.size(g, c), cols = nb * P;
      T* col = scratch<T>(0, static_cast<size_t>(K * cols));
      T* gm = scratch<T>(1, static_cast<size_t>(g.coutg() * cols));
      for (int64_t grp = 0; grp < g.groups; ++grp) {
        im2col(g, x, n0, nb, grp, col);
        gather_group(g, grad, n0, nb, grp, gm);
        gemm<T>(true, g.coutg(), K, cols, gm, cols, false, col, cols, true,
                part + grp * g.coutg() * K, K);
      }
    }
  });
  std::copy(partial.get(), partial.get() + size, dw);
  for (int64_t s = 1; s < stripes; ++s)
    for (int64_t i = 0; i < size; ++i) dw[i] += partial[static_cast<size_t>(s * size + i)];
}

template <typename T>
void conv2d_input_grad(const ConvGeom& g, const T* grad, const T* w, T* dx) {
  const int64_t P = g.p(), K = g.k(), plane = g.c * g.h * g.w;
  const Chunks chunks(g);
  parallel_for(chunks.count, [&](int64_t c) {
    const int64_t n0 = chunks.first(c), nb = chunks.size(g, c), cols = nb * P;
    std::fill(dx + n0 * plane, dx + (n0 + nb) * plane, T(0));
    T* col = scratch<T>(0, static_cast<size_t>(K * cols));
    T* gm = scratch<T>(1, static_cast<size_t>(g.coutg() * cols));
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      gather_group(g, grad, n0, nb, grp, gm);
      gemm<T>(false, K, cols, g.coutg(), w + grp * g.coutg() * K, K, true, gm, cols, false, col,
              cols);
      col2im(g, dx, n0, nb, grp, col);
    }
  });
}

void linear(const OpDef& d, std::span<const Tensor> in, const Tensor& out) {
  const Tensor x = in[0].contiguous(), w = in[1].contiguous();
  const Tensor b = in.size() == 3 ? in[2].contiguous() : Tensor();
  const int64_t k = w.shape()[1], n = w.shape()[0], m = k > 0 ? x.numel() / k : out.numel() / n;
  dispatch_float(d.name, x.dtype(), [&]<typename T>() {
    T* o = static_cast<T*>(out.raw_data());
    if (k == 0) {
      std::fill(o, o + m * n, T(0));
    } else {
      gemm<T>(false, m, n, k, static_cast<const T*>(x.raw_data()), k, false,
              static_cast<const T*>(w.raw_data()), k, true, o, n);
    }
    if (!b.defined()) return;
    const T* pb = static_cast<const T*>(b.raw_data());
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) o[i * n + j] += pb[j];
  });
}

}  // namespace

void conv_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs& a, const Tensor& out) {
  if (d.id == OpId::linear) return linear(d, in, out);
  const bool forward = d.id == OpId::conv2d;
  const dtr::detail::Conv2dArgs args = dtr::detail::conv2d_args(d, a, forward ? 0 : 2);
  const Tensor t0 = in[0].contiguous(), t1 = in[1].contiguous();
  dispatch_float(d.name, out.dtype(), [&]<typename T>() {
    const T* p0 = static_cast<const T*>(t0.raw_data());
    const T* p1 = static_cast<const T*>(t1.raw_data());
    T* o = static_cast<T*>(out.raw_data());
    if (forward) {  // (x, weight, bias?)
      const Tensor b = in.size() == 3 ? in[2].contiguous() : Tensor();
      const ConvGeom g = geom_of(args, t0.shape(), out.shape(), t1.shape()[2], t1.shape()[3]);
      conv2d_forward<T>(g, p0, p1, b.defined() ? static_cast<const T*>(b.raw_data()) : nullptr, o);
    } else if (d.id == OpId::conv2d_input_grad) {  // (grad, weight) -> (.., C, H, W)
      const ConvGeom g = geom_of(args, out.shape(), t0.shape(), t1.shape()[2], t1.shape()[3]);
      conv2d_input_grad<T>(g, p0, p1, o);
    } else {  // conv2d_weight_grad (grad, x) -> (Cout, C/G, kh, kw)
      const ConvGeom g = geom_of(args, t1.shape(), t0.shape(), a.ints[0], a.ints[1]);
      conv2d_weight_grad<T>(g, p0, p1, o);
    }
  });
}

}  // namespace dtr::local::detail
