// CUDA matmul, dot and mv. As the CPU kernel (tensor/kernels_linalg.cpp) every case is a
// batch of (m, k) x (k, n) products: 1-D operands become (1, k) or (k, 1), batch dims
// broadcast (stride 0). float32/float64 go to cuBLAS (cublas{S,D}gemmStridedBatched_64,
// one call per op), float16/bfloat16 to cublasGemmStridedBatchedEx_64 (CUDA_R_16F /
// CUDA_R_16BF storage, CUBLAS_COMPUTE_32F: float products and sums, the result rounded
// to nearest even; the CPU rounds a float32 Eigen product the same way): an operand is handed over
// as it lies when one of its two matrix strides is 1 (row-major: no transpose, column-major:
// transposed), and packed by the copy kernel otherwise; an operand whose batch dims cannot be
// walked with one stride is expanded into a packed copy first. int32/int64 use a simple kernel (one
// thread per output element) with wrapping arithmetic, as Eigen's integer product wraps; bool is
// refused. k = 0 gives zeros.
//
// What differs from the CPU: cuBLAS sums the k products in its own order (and with FMA),
// Eigen in another, so floating results may differ in the last bits. TF32 is never used
// (the handle's math mode is CUBLAS_DEFAULT_MATH). Integer results are exact.
//
// cuBLAS handles: one per (device, thread), created on first use, bound to the current
// stream before every call and destroyed when the thread exits.
//
// Thread safety: any thread; launches on the calling thread's current stream.
#include "tensor/cuda/kernels.cuh"

#include <cublas_v2.h>

#include "tensor/cuda/cublas_loader.hpp"

#include <unordered_map>

namespace dtr::cuda::detail {

namespace {

void check_cublas(const Ctx& c, const char* what, cublasStatus_t s) {
  if (s != CUBLAS_STATUS_SUCCESS)
    fail<DeviceError>(c.op, "{} failed on cuda:{}: {} ({})", what, c.device,
                      cublas().status_name(s), cublas().status_string(s));
}

// This thread's cuBLAS handle for the context's device, bound to its stream.
cublasHandle_t handle_for(const Ctx& c) {
  struct Handles {
    std::unordered_map<int, cublasHandle_t> by_device;
    ~Handles() {
      for (auto& [device, h] : by_device) {
        int previous = -1;
        cudaGetDevice(&previous);
        cudaSetDevice(device);
        cublas().destroy(h);
        if (previous >= 0) cudaSetDevice(previous);
      }
    }
  };
  thread_local Handles handles;
  auto it = handles.by_device.find(c.device);
  if (it == handles.by_device.end()) {
    cublasHandle_t h = nullptr;
    check_cublas(c, "cublasCreate", cublas().create(&h));  // the current device: the guard's
    // FP32 math (no TF32), and no split-k partial sums reduced in a 16-bit output type:
    // 16-bit products are summed in float32 throughout, as the CPU kernel does.
    cublasStatus_t s = cublas().set_math_mode(
        h, static_cast<cublasMath_t>(CUBLAS_DEFAULT_MATH |
                                     CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if (s != CUBLAS_STATUS_SUCCESS) {
      cublas().destroy(h);
      check_cublas(c, "cublasSetMathMode", s);
    }
    it = handles.by_device.emplace(c.device, h).first;
  }
  check_cublas(c, "cublasSetStream", cublas().set_stream(it->second, c.stream));
  return it->second;
}

// A matrix operand: rows x cols at element strides (rs, cs) plus its batch strides.
struct Operand {
  local::Tensor t;  // the tensor the pointer comes from (kept alive)
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
  Strides batch;  // broadcast to the common batch shape
};

// The operand's view: batch dims broadcast to `batch_shape`, then (rows, cols).
TensorMeta full_meta(const Operand& o, const Shape& batch_shape) {
  TensorMeta m = o.t.meta();
  m.shape = batch_shape;
  m.strides = o.batch;
  m.shape.push_back(o.rows);
  m.shape.push_back(o.cols);
  m.strides.push_back(o.rs);
  m.strides.push_back(o.cs);
  return m;
}

// Packs o (with its batch dims expanded) into a contiguous tensor.
void pack(const Ctx& c, Operand& o, const Shape& batch_shape) {
  local::Tensor view(o.t.storage(), full_meta(o, batch_shape));
  Shape shape = view.shape();
  local::Tensor packed = empty_on(c, shape, o.t.dtype());
  copy_impl(c, packed, view);
  o.t = packed;
  o.rs = o.cols;
  o.cs = 1;
  o.batch = Strides(batch_shape.size(), 0);
  int64_t s = o.rows * o.cols;
  for (size_t i = batch_shape.size(); i-- > 0;) {
    o.batch[i] = batch_shape[i] == 1 ? 0 : s;
    s *= batch_shape[i];
  }
}

// The single stride that walks all batches of o in order, if there is one.
bool single_batch_stride(const Operand& o, const Shape& batch_shape, int64_t& stride) {
  stride = 0;
  int64_t expected = -1;  // stride the next outer non-trivial dim must have
  bool first = true;
  for (size_t i = batch_shape.size(); i-- > 0;) {
    if (batch_shape[i] == 1) continue;
    if (first) {
      stride = o.batch[i];
      first = false;
    } else if (o.batch[i] != expected) {
      return false;
    }
    expected = o.batch[i] * batch_shape[i];
  }
  return true;
}

// cuBLAS's view of an operand X (rows x cols): the column-major matrix X^T (not
// transposed, X row-major) or X (transposed, X column-major), with its leading dimension.
bool blas_layout(const Operand& o, cublasOperation_t& op, int64_t& ld) {
  const int64_t R = o.rows, C = o.cols;
  if ((o.cs == 1 || C <= 1) && (R <= 1 || o.rs >= C)) {
    op = CUBLAS_OP_N;
    ld = R > 1 ? o.rs : (C > 1 ? C : 1);
    return true;
  }
  if ((o.rs == 1 || R <= 1) && (C <= 1 || o.cs >= R)) {
    op = CUBLAS_OP_T;
    ld = C > 1 ? o.cs : (R > 1 ? R : 1);
    return true;
  }
  return false;
}

struct IntMatmulArgs {
  const char* a;
  const char* b;
  char* c;
  int64_t m, n, k;
  int64_t ars, acs, brs, bcs;  // elements
  int nbatch;
  int64_t batch_sizes[kMaxDims];
  int64_t batch_a[kMaxDims];
  int64_t batch_b[kMaxDims];
  int64_t total;  // batches * m * n
};

template <typename T>
__global__ void __launch_bounds__(kThreads) int_matmul_kernel(IntMatmulArgs p) {
  using U = std::make_unsigned_t<T>;
  const T* A = reinterpret_cast<const T*>(p.a);
  const T* B = reinterpret_cast<const T*>(p.b);
  T* C = reinterpret_cast<T*>(p.c);
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; idx < p.total;
       idx += step) {
    const int64_t j = idx % p.n;
    const int64_t i = (idx / p.n) % p.m;
    int64_t batch = idx / (p.n * p.m);
    int64_t oa = 0, ob = 0;
    for (int d = p.nbatch - 1; d >= 0; --d) {
      const int64_t q = batch / p.batch_sizes[d];
      const int64_t r = batch - q * p.batch_sizes[d];
      batch = q;
      oa += r * p.batch_a[d];
      ob += r * p.batch_b[d];
    }
    const T* a = A + oa + i * p.ars;
    const T* b = B + ob + j * p.bcs;
    U acc = 0;
    for (int64_t kk = 0; kk < p.k; ++kk)
      acc += static_cast<U>(a[kk * p.acs]) * static_cast<U>(b[kk * p.brs]);
    C[idx] = static_cast<T>(acc);
  }
}

}  // namespace

void linalg_op(const Ctx& c, const OpDef& d, std::span<const local::Tensor> in,
               const local::Tensor& out) {
  const DType dtype = out.dtype();
  if (dtype == DType::Bool) fail<DTypeError>(d.name, "not supported for bool tensors");
  if (in[0].dtype() != dtype || in[1].dtype() != dtype)
    fail<DTypeError>(d.name, "expected both operands to have the same dtype, got {} and {}",
                     in[0].dtype(), in[1].dtype());
  // (k) -> (1, k) for the left operand, (k) -> (k, 1) for the right one.
  auto operand = [&](const local::Tensor& t, bool left) {
    Operand o;
    o.t = t;
    const TensorMeta& m = t.meta();
    if (m.dim() == 1) {
      if (left) {
        o.rows = 1;
        o.cols = m.shape[0];
        o.rs = m.shape[0];
        o.cs = m.strides[0];
      } else {
        o.rows = m.shape[0];
        o.cols = 1;
        o.rs = m.strides[0];
        o.cs = 1;
      }
    } else {
      o.rows = m.shape[m.dim() - 2];
      o.cols = m.shape[m.dim() - 1];
      o.rs = m.strides[m.dim() - 2];
      o.cs = m.strides[m.dim() - 1];
    }
    return o;
  };
  Operand A = operand(in[0], true), B = operand(in[1], false);
  const int64_t m = A.rows, k = A.cols, n = B.cols;
  if (B.rows != k)
    fail<ShapeError>(d.name, "shapes {} and {} cannot be multiplied ({} != {})", in[0].shape(),
                     in[1].shape(), k, B.rows);

  // Broadcast batch dims.
  auto batch_meta = [](const local::Tensor& t) {
    const TensorMeta& m = t.meta();
    TensorMeta bm = m;
    size_t nb = m.dim() >= 2 ? static_cast<size_t>(m.dim() - 2) : 0;
    bm.shape = Shape(m.shape.begin(), m.shape.begin() + nb);
    bm.strides = Strides(m.strides.begin(), m.strides.begin() + nb);
    return bm;
  };
  const TensorMeta ba = batch_meta(in[0]), bb = batch_meta(in[1]);
  const Shape batch = broadcast_shapes(d.name, ba.shape, bb.shape);
  A.batch = broadcast_strides(ba, batch);
  B.batch = broadcast_strides(bb, batch);
  const int64_t batches = numel_of(batch);
  if (batches == 0 || m == 0 || n == 0) return;
  if (k == 0) {
    check_cuda(
        c, "cudaMemsetAsync",
        cudaMemsetAsync(out.raw_data(), 0,
                        static_cast<size_t>(batches * m * n) * element_size(dtype), c.stream));
    return;
  }

  if (dtype == DType::Int32 || dtype == DType::Int64) {
    IntMatmulArgs p{};
    p.a = static_cast<const char*>(A.t.raw_data());
    p.b = static_cast<const char*>(B.t.raw_data());
    p.c = static_cast<char*>(out.raw_data());
    p.m = m;
    p.n = n;
    p.k = k;
    p.ars = A.rs;
    p.acs = A.cs;
    p.brs = B.rs;
    p.bcs = B.cs;
    p.nbatch = static_cast<int>(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) {
      p.batch_sizes[i] = batch[i];
      p.batch_a[i] = A.batch[i];
      p.batch_b[i] = B.batch[i];
    }
    p.total = batches * m * n;
    if (dtype == DType::Int32)
      int_matmul_kernel<int32_t><<<grid_for(c, p.total), kThreads, 0, c.stream>>>(p);
    else
      int_matmul_kernel<int64_t><<<grid_for(c, p.total), kThreads, 0, c.stream>>>(p);
    check_launch(c, "integer matmul kernel");
    return;
  }

  // Floating: one strided-batched GEMM. Row-major C (m x n) = A B is, column-major,
  // C^T (n x m) = B^T A^T: cuBLAS gets B first.
  cublasOperation_t op_a = CUBLAS_OP_N, op_b = CUBLAS_OP_N;
  int64_t lda = 1, ldb = 1;
  if (!blas_layout(A, op_a, lda)) pack(c, A, batch);
  if (!blas_layout(B, op_b, ldb)) pack(c, B, batch);
  int64_t stride_a = 0, stride_b = 0;
  if (!single_batch_stride(A, batch, stride_a)) {
    pack(c, A, batch);
    single_batch_stride(A, batch, stride_a);
  }
  if (!single_batch_stride(B, batch, stride_b)) {
    pack(c, B, batch);
    single_batch_stride(B, batch, stride_b);
  }
  blas_layout(A, op_a, lda);
  blas_layout(B, op_b, ldb);
  cublasHandle_t h = handle_for(c);
  if (dtype == DType::Float32) {
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(c, "cublasSgemmStridedBatched",
                 cublas().sgemm_strided_batched(
                     h, op_b, op_a, n, m, k, &alpha, static_cast<const float*>(B.t.raw_data()), ldb,
                     stride_b, static_cast<const float*>(A.t.raw_data()), lda, stride_a, &beta,
                     static_cast<float*>(out.raw_data()), n, m * n, batches));
  } else if (dtype == DType::Float16 || dtype == DType::BFloat16) {
    // Storage in 16 bits, products and sums in float32 (CUBLAS_COMPUTE_32F), the result
    // rounded to nearest even once per output element.
    const cudaDataType t = dtype == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
    const float alpha = 1.0f, beta = 0.0f;
    check_cublas(c, "cublasGemmStridedBatchedEx",
                 cublas().gemm_strided_batched_ex(h, op_b, op_a, n, m, k, &alpha, B.t.raw_data(), t,
                                                  ldb, stride_b, A.t.raw_data(), t, lda, stride_a,
                                                  &beta, out.raw_data(), t, n, m * n, batches,
                                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  } else {
    const double alpha = 1.0, beta = 0.0;
    check_cublas(c, "cublasDgemmStridedBatched",
                 cublas().dgemm_strided_batched(
                     h, op_b, op_a, n, m, k, &alpha, static_cast<const double*>(B.t.raw_data()),
                     ldb, stride_b, static_cast<const double*>(A.t.raw_data()), lda, stride_a,
                     &beta, static_cast<double*>(out.raw_data()), n, m * n, batches));
  }
}

}  // namespace dtr::cuda::detail
