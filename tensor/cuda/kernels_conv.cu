// CUDA kernels of linear and of conv2d and its gradients: the CPU's formulation
// (tensor/kernels_conv.cpp, which defines the terms col, K, P, W_g, G_g) with im2col and
// col2im kernels around the matmul kernel (kernels_linalg.cu: cuBLAS, no TF32), called on
// strided views of the weight, so every product is one cuBLAS call per group and chunk of
// samples. col2im gathers, per input element, the col entries of the taps that read it (no
// atomics: the same sums in the same order every run). float16 and bfloat16 run on
// float32 copies and round, as the CPU does.
//
// What differs from the CPU: cuBLAS's order of summation (floats within a few ulps); the
// weight gradient of several sample chunks adds the chunks' products in chunk order.
//
// Thread safety: any thread; launches on the calling thread's current stream.
#include "tensor/cuda/kernels.cuh"
#include "tensor/nn_params.hpp"

namespace dtr::cuda::detail {

namespace {

// Elements of col per chunk of samples.
constexpr int64_t kColBudget = int64_t{1} << 24;

// One conv2d call's sizes (an unbatched (C, H, W) input is one sample); plain values for
// the kernels.
struct Geom {
  int64_t n = 1, c = 0, h = 0, w = 0, cout = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1, groups = 1;
  __host__ __device__ int64_t cg() const { return c / groups; }
  __host__ __device__ int64_t coutg() const { return cout / groups; }
  __host__ __device__ int64_t k() const { return cg() * kh * kw; }
  __host__ __device__ int64_t p() const { return oh * ow; }
  int64_t chunk() const {
    const int64_t per = std::max<int64_t>(1, k() * p());
    return std::max<int64_t>(1, std::min<int64_t>(n, kColBudget / per));
  }
};

Geom geom_of(const ::dtr::detail::Conv2dArgs& a, const Shape& x, const Shape& y, int64_t kh,
             int64_t kw) {
  const size_t nd = x.size();
  Geom g;
  g.n = nd == 4 ? x[0] : 1;
  g.c = x[nd - 3];
  g.h = x[nd - 2];
  g.w = x[nd - 1];
  g.cout = y[nd - 3];
  g.oh = y[nd - 2];
  g.ow = y[nd - 1];
  g.kh = kh;
  g.kw = kw;
  g.sh = a.h.s;
  g.sw = a.w.s;
  g.ph = a.h.p;
  g.pw = a.w.p;
  g.dh = a.h.d;
  g.dw = a.w.d;
  g.groups = a.groups;
  return g;
}

#define DTR_GRID_LOOP(i, n)                                                              \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// col (K x nb * P) of group `grp` for samples [n0, n0 + nb).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    im2col_kernel(const T* x, T* col, Geom g, int64_t n0, int64_t nb, int64_t grp) {
  const int64_t cols = nb * g.p();
  DTR_GRID_LOOP(i, g.k() * cols) {
    const int64_t r = i / cols, j = i % cols;
    const int64_t ci = r / (g.kh * g.kw), ki = (r / g.kw) % g.kh, kj = r % g.kw;
    const int64_t n = j / g.p(), oy = (j % g.p()) / g.ow, ox = j % g.ow;
    const int64_t iy = oy * g.sh - g.ph + ki * g.dh, ix = ox * g.sw - g.pw + kj * g.dw;
    const bool inside = iy >= 0 && iy < g.h && ix >= 0 && ix < g.w;
    col[i] = inside ? x[(((n0 + n) * g.c + grp * g.cg() + ci) * g.h + iy) * g.w + ix] : T(0);
  }
}

// dx of group `grp` for samples [n0, n0 + nb): each input element sums the col entries of
// the taps that read it.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    col2im_kernel(const T* col, T* dx, Geom g, int64_t n0, int64_t nb, int64_t grp) {
  const int64_t cols = nb * g.p(), plane = g.h * g.w;
  DTR_GRID_LOOP(i, nb * g.cg() * plane) {
    const int64_t n = i / (g.cg() * plane), ci = (i / plane) % g.cg();
    const int64_t y = (i % plane) / g.w, x = i % g.w;
    T sum = 0;
    for (int64_t ki = 0; ki < g.kh; ++ki) {
      const int64_t ty = y + g.ph - ki * g.dh;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const int64_t tx = x + g.pw - kj * g.dw;
        if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
        const int64_t r = (ci * g.kh + ki) * g.kw + kj;
        sum += col[r * cols + n * g.p() + (ty / g.sh) * g.ow + tx / g.sw];
      }
    }
    dx[((n0 + n) * g.c + grp * g.cg() + ci) * plane + y * g.w + x] = sum;
  }
}

// Between (N, Cout, P) tensors and the (Coutg, nb * P) matrices of group `grp`: gather
// into `m` (to_matrix), or scatter `m` back with the bias added.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    group_matrix_kernel(T* y, T* m, const T* bias, Geom g, int64_t n0, int64_t nb, int64_t grp,
                        bool to_matrix) {
  const int64_t cols = nb * g.p();
  DTR_GRID_LOOP(i, g.coutg() * cols) {
    const int64_t co = i / cols, n = (i % cols) / g.p(), p = i % g.p();
    const int64_t channel = grp * g.coutg() + co;
    T& t = y[((n0 + n) * g.cout + channel) * g.p() + p];
    if (to_matrix)
      m[i] = t;
    else
      t = m[i] + (bias ? bias[channel] : T(0));
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) add_kernel(T* dst, const T* src, int64_t n) {
  DTR_GRID_LOOP(i, n) {
    dst[i] += src[i];
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    bias_rows_kernel(T* out, const T* bias, int64_t n, int64_t cols) {
  DTR_GRID_LOOP(i, n) {
    out[i] += bias[i % cols];
  }
}

// A (rows x cols) view of `base`'s storage at element `offset` with element strides.
local::Tensor matrix(const local::Tensor& base, int64_t offset, int64_t rows, int64_t cols,
                     int64_t rs, int64_t cs) {
  TensorMeta m{base.dtype(), {rows, cols}, {rs, cs}, base.meta().offset + offset};
  return local::Tensor(base.storage(), m);
}

// c = a b through the matmul kernel (cuBLAS).
void matmul(const Ctx& c, const local::Tensor& a, const local::Tensor& b,
            const local::Tensor& out) {
  const local::Tensor in[2] = {a, b};
  linalg_op(c, op_def(OpId::matmul), in, out);
}

// What one chunk of samples needs: its size and the sample range.
struct Chunk {
  int64_t n0, nb, cols;
};

template <typename T, typename F>
void for_each_chunk(const Geom& g, F&& f) {
  const int64_t step = g.chunk();
  for (int64_t n0 = 0; n0 < g.n; n0 += step) {
    const int64_t nb = std::min(step, g.n - n0);
    f(Chunk{n0, nb, nb * g.p()});
  }
}

template <typename T>
void conv_forward(const Ctx& c, const Geom& g, const local::Tensor& x, const local::Tensor& w,
                  const T* bias, const local::Tensor& out) {
  const int64_t K = g.k();
  for_each_chunk<T>(g, [&](const Chunk& ch) {
    local::Tensor col = empty_on(c, {K, ch.cols}, x.dtype());
    local::Tensor y = empty_on(c, {g.coutg(), ch.cols}, x.dtype());
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col_kernel<T><<<grid_for(c, K * ch.cols), kThreads, 0, c.stream>>>(
          static_cast<const T*>(x.raw_data()), static_cast<T*>(col.raw_data()), g, ch.n0, ch.nb,
          grp);
      matmul(c, matrix(w, grp * g.coutg() * K, g.coutg(), K, K, 1), col, y);
      group_matrix_kernel<T><<<grid_for(c, g.coutg() * ch.cols), kThreads, 0, c.stream>>>(
          static_cast<T*>(out.raw_data()), static_cast<T*>(y.raw_data()), bias, g, ch.n0, ch.nb,
          grp, false);
    }
  });
  check_launch(c, "conv2d kernel");
}

template <typename T>
void conv_input_grad(const Ctx& c, const Geom& g, const local::Tensor& grad, const local::Tensor& w,
                     const local::Tensor& out) {
  const int64_t K = g.k();
  for_each_chunk<T>(g, [&](const Chunk& ch) {
    local::Tensor gm = empty_on(c, {g.coutg(), ch.cols}, grad.dtype());
    local::Tensor col = empty_on(c, {K, ch.cols}, grad.dtype());
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      group_matrix_kernel<T><<<grid_for(c, g.coutg() * ch.cols), kThreads, 0, c.stream>>>(
          static_cast<T*>(grad.raw_data()), static_cast<T*>(gm.raw_data()), nullptr, g, ch.n0,
          ch.nb, grp, true);
      matmul(c, matrix(w, grp * g.coutg() * K, K, g.coutg(), 1, K), gm, col);  // W_g^T G_g
      col2im_kernel<T><<<grid_for(c, ch.nb * g.cg() * g.h * g.w), kThreads, 0, c.stream>>>(
          static_cast<const T*>(col.raw_data()), static_cast<T*>(out.raw_data()), g, ch.n0, ch.nb,
          grp);
    }
  });
  check_launch(c, "conv2d_input_grad kernel");
}

template <typename T>
void conv_weight_grad(const Ctx& c, const Geom& g, const local::Tensor& grad,
                      const local::Tensor& x, const local::Tensor& out) {
  const int64_t K = g.k();
  bool first = true;
  local::Tensor part = empty_on(c, {g.coutg(), K}, grad.dtype());
  for_each_chunk<T>(g, [&](const Chunk& ch) {
    local::Tensor gm = empty_on(c, {g.coutg(), ch.cols}, grad.dtype());
    local::Tensor col = empty_on(c, {K, ch.cols}, grad.dtype());
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      im2col_kernel<T><<<grid_for(c, K * ch.cols), kThreads, 0, c.stream>>>(
          static_cast<const T*>(x.raw_data()), static_cast<T*>(col.raw_data()), g, ch.n0, ch.nb,
          grp);
      group_matrix_kernel<T><<<grid_for(c, g.coutg() * ch.cols), kThreads, 0, c.stream>>>(
          static_cast<T*>(grad.raw_data()), static_cast<T*>(gm.raw_data()), nullptr, g, ch.n0,
          ch.nb, grp, true);
      const local::Tensor dw = matrix(out, grp * g.coutg() * K, g.coutg(), K, K, 1);
      const local::Tensor col_t = matrix(col, 0, ch.cols, K, 1, ch.cols);
      matmul(c, gm, col_t, first ? dw : part);  // G_g col^T
      if (!first)
        add_kernel<T><<<grid_for(c, g.coutg() * K), kThreads, 0, c.stream>>>(
            static_cast<T*>(dw.raw_data()), static_cast<const T*>(part.raw_data()), g.coutg() * K);
    }
    first = false;
  });
  check_launch(c, "conv2d_weight_grad kernel");
}

template <typename T>
void linear(const Ctx& c, std::span<const local::Tensor> in, const local::Tensor& out) {
  const local::Tensor x = contiguous_on(c, in[0]), w = contiguous_on(c, in[1]);
  const int64_t k = w.shape()[1], n = w.shape()[0], m = out.numel() / std::max<int64_t>(n, 1);
  const local::Tensor o = matrix(out, 0, m, n, n, 1);
  if (k == 0) {
    fill_impl(c, out, Scalar(0));
  } else {
    matmul(c, matrix(x, 0, m, k, k, 1), matrix(w, 0, k, n, 1, k), o);  // x w^T
  }
  if (in.size() == 3 && out.numel() > 0) {
    const local::Tensor b = contiguous_on(c, in[2]);
    bias_rows_kernel<T><<<grid_for(c, out.numel()), kThreads, 0, c.stream>>>(
        static_cast<T*>(out.raw_data()), static_cast<const T*>(b.raw_data()), out.numel(), n);
    check_launch(c, "linear bias kernel");
  }
}

}  // namespace

void conv_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> inputs, const OpAttrs& a,
             const local::Tensor& output) {
  widened(c, inputs, output, [&](std::span<const local::Tensor> in, const local::Tensor& out) {
    dispatch_float(d.name, out.dtype(), [&]<typename T>() {
      if (d.id == OpId::linear) return linear<T>(c, in, out);
      if (out.numel() == 0) return;
      const bool forward = d.id == OpId::conv2d;
      const ::dtr::detail::Conv2dArgs args = ::dtr::detail::conv2d_args(d, a, forward ? 0 : 2);
      const local::Tensor t0 = contiguous_on(c, in[0]), t1 = contiguous_on(c, in[1]);
      if (forward) {  // (x, weight, bias?)
        const local::Tensor b = in.size() == 3 ? contiguous_on(c, in[2]) : local::Tensor();
        const Geom g = geom_of(args, t0.shape(), out.shape(), t1.shape()[2], t1.shape()[3]);
        conv_forward<T>(c, g, t0, t1, b.defined() ? static_cast<const T*>(b.raw_data()) : nullptr,
                        out);
      } else if (d.id == OpId::conv2d_input_grad) {  // (grad, weight)
        const Geom g = geom_of(args, out.shape(), t0.shape(), t1.shape()[2], t1.shape()[3]);
        conv_input_grad<T>(c, g, t0, t1, out);
      } else {  // conv2d_weight_grad (grad, x)
        const Geom g = geom_of(args, t1.shape(), t0.shape(), a.ints[0], a.ints[1]);
        conv_weight_grad<T>(c, g, t0, t1, out);
      }
    });
  });
}

}  // namespace dtr::cuda::detail
