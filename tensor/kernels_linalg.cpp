// matmul, dot and mv through Eigen's GEMM. Every case is reduced to a batch of
// (m, k) x (k, n) products: 1-D operands become (1, k) or (k, 1), batch dims broadcast
// with stride 0. Each operand is handed to Eigen as a row-major or column-major map when
// one of its two matrix strides is 1, and packed into a contiguous copy otherwise.
#include <Eigen/Core>

#include "kernels.hpp"

namespace dtr::local::detail {

namespace {

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ColMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
using Outer = Eigen::OuterStride<>;

// Calls f(map) with an Eigen map of the (rows x cols) matrix at p.
template <typename T, typename F>
void with_map(const T* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, F&& f) {
  if (cs == 1 || cols <= 1) {
    f(Eigen::Map<const RowMat<T>, 0, Outer>(p, rows, cols, Outer(rows > 1 ? rs : cols)));
  } else {
    f(Eigen::Map<const ColMat<T>, 0, Outer>(p, rows, cols, Outer(cols > 1 ? cs : rows)));
  }
}

// Returns t itself when its last two strides let Eigen read it directly, else a packed copy.
Tensor matrix_ready(const Tensor& t) {
  const TensorMeta& m = t.meta();
  int64_t rs = m.strides[m.dim() - 2], cs = m.strides[m.dim() - 1];
  int64_t rows = m.shape[m.dim() - 2], cols = m.shape[m.dim() - 1];
  bool row_major = cs == 1 || cols <= 1;
  bool col_major = rs == 1 || rows <= 1;
  if ((row_major && (rows <= 1 || rs >= cols)) || (col_major && (cols <= 1 || cs >= rows)))
    return t;
  return t.contiguous();
}

}  // namespace

void linalg_kernel(const OpDef& d, std::span<const Tensor> in, const OpAttrs&, const Tensor& out) {
  Tensor a = in[0], b = in[1];
  if (a.dim() == 1) a = a.unsqueeze(0);   // (k) -> (1, k)
  if (b.dim() == 1) b = b.unsqueeze(-1);  // (k) -> (k, 1)
  a = matrix_ready(a);
  b = matrix_ready(b);
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1];
  const int64_t n = b.shape()[b.dim() - 1];

  // Broadcast batch dims.
  Shape batch_a(a.shape().begin(), a.shape().end() - 2);
  Shape batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(d.name, batch_a, batch_b);
  auto batch_strides = [&](const Tensor& t) {
    TensorMeta bm{t.dtype(), Shape(t.shape().begin(), t.shape().end() - 2),
                  Strides(t.strides().begin(), t.strides().end() - 2), 0};
    return broadcast_strides(bm, batch);
  };
  Strides sa = batch_strides(a), sb = batch_strides(b);
  int64_t batches = numel_of(batch);

  dispatch_wide(d.name, out.dtype(), [&]<typename T>() {
    if constexpr (std::is_same_v<T, bool>) {
      fail<DTypeError>(d.name, "not supported for bool tensors");
    } else {
      T* c = static_cast<T*>(out.raw_data());
      if (k == 0) {
        std::fill(c, c + batches * m * n, T(0));
        return;
      }
      const T* pa = static_cast<const T*>(a.raw_data());
      const T* pb = static_cast<const T*>(b.raw_data());
      const int64_t ars = a.strides()[a.dim() - 2], acs = a.strides()[a.dim() - 1];
      const int64_t brs = b.strides()[b.dim() - 2], bcs = b.strides()[b.dim() - 1];
      Dims index(batch.size(), 0);
      for (int64_t i = 0; i < batches; ++i) {
        int64_t oa = 0, ob = 0;
        for (size_t j = 0; j < batch.size(); ++j) {
          oa += index[j] * sa[j];
          ob += index[j] * sb[j];
        }
        Eigen::Map<RowMat<T>> C(c + i * m * n, m, n);
        with_map(pa + oa, m, k, ars, acs, [&](const auto& A) {
          with_map(pb + ob, k, n, brs, bcs, [&](const auto& B) { C.noalias() = A * B; });
        });
        for (size_t j = batch.size(); j-- > 0;) {
          if (++index[j] < batch[j]) break;
          index[j] = 0;
        }
      }
    }
  });
}

}  // namespace dtr::local::detail
