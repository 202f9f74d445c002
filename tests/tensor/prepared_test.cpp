// Prepared kernels (tensor/prepared.hpp): every covered op, dtype and operand form gives
// run_kernel()'s bits, in place and into an output; calls outside the coverage prepare to
// nothing.
#include "tensor/prepared.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dtr/tensor.hpp"

using namespace dtr;
using dtr::local::PreparedKernel;
using dtr::local::Tensor;

namespace {

// Values with edge cases for each dtype: negatives, zero, extremes, NaN for floats.
Tensor sample(DType dtype, int64_t n, int seed) {
  Tensor t = local::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    double v = static_cast<double>((i * 7 + seed * 13) % 23) - 11.0;
    if (i % 5 == 4) v = 0.5 * v;
    if (dtype == DType::Int32 && i == 3) v = std::numeric_limits<int32_t>::max();
    if (dtype == DType::Int64 && i == 3)
      v = static_cast<double>(std::numeric_limits<int64_t>::min());
    t.slice(0, i, i + 1).fill_(v);
  }
  if ((dtype == DType::Float32 || dtype == DType::Float64) && n > 6)
    t.slice(0, 6, 7).fill_(std::nan(""));
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw_data(), b.raw_data(),
                     static_cast<size_t>(a.numel()) * element_size(a.dtype())) == 0;
}

OpAttrs scalar_attrs(Scalar s, bool first) {
  OpAttrs a;
  a.scalars[0] = s;
  a.scalar_first = first;
  return a;
}

}  // namespace

TEST_CASE("prepared kernels give run_kernel's bits") {
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Int32, DType::Int64};
  const OpId binaries[] = {OpId::add, OpId::sub, OpId::mul, OpId::div};
  const OpId unaries[] = {OpId::neg, OpId::abs, OpId::relu};
  int covered = 0;
  for (DType dtype : dtypes) {
    CAPTURE(dtype);
    Tensor x = sample(dtype, 37, 1);
    Tensor y = sample(dtype, 37, 2);
    auto check = [&](OpId op, std::vector<Tensor> in, const OpAttrs& attrs) {
      CAPTURE(op_def(op).name);
      // Into an output.
      Tensor want = local::execute(op, in, attrs, false);
      Tensor got = local::empty(want.shape(), want.dtype());
      PreparedKernel k = local::prepare_kernel(op, in, attrs, got);
      if (!k) return;
      k();
      CHECK(same_bits(got, want));
      // In place, twice (the pointers stay valid).
      std::vector<Tensor> own = in;
      own[0] = in[0].clone();
      Tensor eager = in[0].clone();
      std::vector<Tensor> eager_in = in;
      eager_in[0] = eager;
      PreparedKernel inplace = local::prepare_kernel(op, own, attrs, own[0]);
      REQUIRE(static_cast<bool>(inplace));
      for (int rep = 0; rep < 2; ++rep) {
        inplace();
        local::execute_inplace(op, eager_in, attrs);
      }
      CHECK(same_bits(own[0], eager));
      ++covered;
    };
    for (OpId op : binaries) {
      const bool floats = dtype == DType::Float32 || dtype == DType::Float64;
      if (op == OpId::div && !floats) {
        Tensor out = local::empty({37}, DType::Float32);
        CHECK_FALSE(local::prepare_kernel(op, std::vector<Tensor>{x, y}, OpAttrs{}, out));
        continue;
      }
      check(op, {x, y}, OpAttrs{});
      check(op, {x}, scalar_attrs(Scalar(int64_t{3}), false));
      check(op, {x}, scalar_attrs(Scalar(int64_t{-5}), true));
      if (floats) check(op, {x}, scalar_attrs(Scalar(0.375), false));
    }
    for (OpId op : unaries) check(op, {x}, OpAttrs{});
    // x.add_(x): the operand is exactly the output.
    Tensor z = x.clone();
    Tensor z_eager = x.clone();
    std::vector<Tensor> zz{z, z};
    PreparedKernel twice = local::prepare_kernel(OpId::add, zz, OpAttrs{}, z);
    REQUIRE(static_cast<bool>(twice));
    twice();
    local::execute_inplace(OpId::add, std::vector<Tensor>{z_eager, z_eager}, OpAttrs{});
    CHECK(same_bits(z, z_eager));
  }
  // Floats: 4 binaries in 4 forms and 3 unaries; integers: 3 binaries in 3 forms and 3 unaries.
  CHECK(covered == 2 * (16 + 3) + 2 * (9 + 3));
}

TEST_CASE("calls outside the coverage prepare to nothing") {
  Tensor x = local::ones({4, 4});
  Tensor out = local::empty({4, 4});
  // Not elementwise, a comparison, a conversion on the way, a strided operand, a partial
  // overlap, a 16-bit dtype, a broadcast operand.
  CHECK_FALSE(local::prepare_kernel(OpId::matmul, std::vector<Tensor>{x, x}, OpAttrs{}, out));
  Tensor flags = local::empty({4, 4}, DType::Bool);
  CHECK_FALSE(local::prepare_kernel(OpId::lt, std::vector<Tensor>{x, x}, OpAttrs{}, flags));
  Tensor ints = local::ones({4, 4}, DType::Int32);
  CHECK_FALSE(local::prepare_kernel(OpId::add, std::vector<Tensor>{x, ints}, OpAttrs{}, out));
  CHECK_FALSE(local::prepare_kernel(OpId::add, std::vector<Tensor>{x.t(), x}, OpAttrs{}, out));
  Tensor row = local::ones({8});
  Tensor lo = row.slice(0, 0, 4);
  Tensor hi = row.slice(0, 1, 5);
  CHECK_FALSE(local::prepare_kernel(OpId::add, std::vector<Tensor>{lo, hi}, OpAttrs{}, lo));
  Tensor half = local::ones({4}, DType::Float16);
  CHECK_FALSE(local::prepare_kernel(OpId::neg, std::vector<Tensor>{half}, OpAttrs{}, half));
  CHECK_FALSE(
      local::prepare_kernel(OpId::add, std::vector<Tensor>{x, local::ones({4})}, OpAttrs{}, out));
  // Covered: a plain in-place add of a scalar.
  OpAttrs one = scalar_attrs(Scalar(int64_t{1}), false);
  CHECK(local::prepare_kernel(OpId::add, std::vector<Tensor>{x}, one, x));
}
