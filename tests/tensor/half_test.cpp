// float16 and bfloat16: the conversions of dtr/half.hpp against Eigen's Eigen::half and
// Eigen::bfloat16 (an independent round-to-nearest-even implementation) and against
// hand-worked bit patterns (ties, subnormals, overflow, inf, NaN); the dtype table and
// promotion; every op family on both types against the float32 op on the widened inputs,
// rounded (the documented CPU rule); reductions accumulating wider than the 16-bit type;
// casts to and from every dtype; random ops; printing.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "dtr/dtype.hpp"
#include "dtr/generator.hpp"
#include "dtr/half.hpp"
#include "dtr/tensor.hpp"

using dtr::bfloat16;
using dtr::DType;
using dtr::float16;
namespace local = dtr::local;
using local::Tensor;

namespace {

uint16_t f16_bits(float f) {
  return float16(f).bits;
}
uint16_t bf16_bits(float f) {
  return bfloat16(f).bits;
}
float f16_value(uint16_t b) {
  return static_cast<float>(float16::from_bits(b));
}
float bf16_value(uint16_t b) {
  return static_cast<float>(bfloat16::from_bits(b));
}
uint16_t eigen_half_bits(float f) {
  return Eigen::numext::bit_cast<uint16_t>(Eigen::half(f));
}
uint16_t eigen_bf16_bits(float f) {
  return Eigen::numext::bit_cast<uint16_t>(Eigen::bfloat16(f));
}

// float32 bit patterns that stress rounding: random ones, and the neighbours of every
// halfway point between two adjacent 16-bit values near 1, the subnormal edge and the top.
std::vector<float> stress_floats() {
  std::vector<float> out;
  std::mt19937 rng(12345);
  for (int i = 0; i < 400000; ++i)
    out.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  for (uint32_t base : {0x3f800000u, 0x38800000u, 0x33000000u, 0x477fe000u, 0x00800000u}) {
    for (uint32_t d = 0; d < 0x4000u; ++d) {
      out.push_back(std::bit_cast<float>(base + d));
      out.push_back(std::bit_cast<float>(base - d));
    }
  }
  return out;
}

Tensor from_floats(const std::vector<float>& v, DType dt) {
  return local::from_vector(v).to(dt);
}

// The 16-bit rounding of x, as a float (the test's own path: Eigen's conversion).
float round_as(DType dt, float x) {
  if (dt == DType::Float16) return static_cast<float>(Eigen::half(x));
  return static_cast<float>(Eigen::bfloat16(x));
}

// Every element of `got` (a 16-bit tensor) is the rounding of the float32 `ref` element;
// NaN where ref is NaN.
void check_rounded(const Tensor& got, const Tensor& ref, DType dt, const std::string& what) {
  INFO(what);
  REQUIRE(got.dtype() == dt);
  REQUIRE(got.shape() == ref.shape());
  std::vector<float> g = got.to_vector<float>();
  std::vector<float> r = ref.to_vector<float>();
  for (size_t i = 0; i < g.size(); ++i) {
    float want = round_as(dt, r[i]);
    if (std::isnan(want)) {
      CHECK_MESSAGE(std::isnan(g[i]), "element " << i);
    } else {
      CHECK_MESSAGE(g[i] == want, "element " << i << ": " << g[i] << " vs " << want);
    }
  }
}

const DType kHalves[] = {DType::Float16, DType::BFloat16};

}  // namespace

TEST_CASE("float16 conversion: hand-worked ties, subnormals, overflow, inf and NaN") {
  CHECK(f16_bits(1.0f) == 0x3c00);
  CHECK(f16_bits(-2.0f) == 0xc000);
  CHECK(f16_bits(0.0f) == 0x0000);
  CHECK(f16_bits(-0.0f) == 0x8000);
  CHECK(f16_bits(65504.0f) == 0x7bff);    // largest finite
  CHECK(f16_bits(65519.996f) == 0x7bff);  // below the halfway point to 65536
  CHECK(f16_bits(65520.0f) == 0x7c00);    // the tie rounds to even: inf
  CHECK(f16_bits(1e6f) == 0x7c00);        // overflow
  CHECK(f16_bits(-1e6f) == 0xfc00);
  CHECK(f16_bits(std::ldexp(1.0f, -24)) == 0x0001);         // smallest subnormal
  CHECK(f16_bits(std::ldexp(1.0f, -25)) == 0x0000);         // tie between 0 and 2^-24: even (0)
  CHECK(f16_bits(std::ldexp(1.5f, -25)) == 0x0001);         // above the tie
  CHECK(f16_bits(std::ldexp(3.0f, -25)) == 0x0002);         // 1.5 * 2^-24: tie, to even (2)
  CHECK(f16_bits(std::ldexp(5.0f, -25)) == 0x0002);         // 2.5 * 2^-24: tie, to even (2)
  CHECK(f16_bits(std::ldexp(1.0f, -14)) == 0x0400);         // smallest normal
  CHECK(f16_bits(std::ldexp(1023.5f, -24)) == 0x0400);      // rounds up out of the subnormals
  CHECK(f16_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);  // tie, to even (down)
  CHECK(f16_bits(1.0f + std::ldexp(3.0f, -11)) == 0x3c02);  // tie, to even (up)
  CHECK(f16_bits(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3c01);
  CHECK(f16_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(f16_bits(-std::numeric_limits<float>::infinity()) == 0xfc00);
  CHECK(std::isnan(f16_value(f16_bits(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits still converts to a NaN, not inf.
  CHECK(std::isnan(f16_value(f16_bits(std::bit_cast<float>(0x7f800001u)))));
  CHECK(std::isnan(f16_value(f16_bits(std::bit_cast<float>(0xff800001u)))));
  // Doubles: past float's range is inf, not UB.
  CHECK(float16(1e300).bits == 0x7c00);
  CHECK(float16(-1e300).bits == 0xfc00);
  CHECK(float16(int64_t{2049}).bits == f16_bits(2048.0f));  // 2049 ties to even 2048
}

TEST_CASE("bfloat16 conversion: hand-worked ties, subnormals, overflow, inf and NaN") {
  CHECK(bf16_bits(1.0f) == 0x3f80);
  CHECK(bf16_bits(-0.0f) == 0x8000);
  CHECK(bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);  // tie, to even (down)
  CHECK(bf16_bits(1.0f + std::ldexp(3.0f, -8)) == 0x3f82);  // tie, to even (up)
  CHECK(bf16_bits(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3f81);
  CHECK(bf16_bits(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the top
  CHECK(bf16_bits(std::bit_cast<float>(0x7f7f7fffu)) == 0x7f7f);  // just below the tie
  CHECK(bf16_bits(std::bit_cast<float>(0x00018000u)) == 0x0002);  // subnormal tie, up to even
  CHECK(bf16_bits(std::bit_cast<float>(0x00008000u)) == 0x0000);  // subnormal tie, down to even
  CHECK(bf16_bits(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(bf16_bits(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(std::isnan(bf16_value(bf16_bits(std::bit_cast<float>(0x7f800001u)))));
  CHECK(std::isnan(bf16_value(bf16_bits(std::bit_cast<float>(0xffc00000u)))));
  CHECK(bfloat16(1e300).bits == 0x7f80);
}

TEST_CASE("16-bit conversions agree with Eigen's round-to-nearest-even on stressed floats") {
  int f16_mismatch = 0, bf16_mismatch = 0;
  for (float f : stress_floats()) {
    if (std::isnan(f)) {
      f16_mismatch += !std::isnan(f16_value(f16_bits(f)));
      bf16_mismatch += !std::isnan(bf16_value(bf16_bits(f)));
      continue;
    }
    f16_mismatch += f16_bits(f) != eigen_half_bits(f);
    bf16_mismatch += bf16_bits(f) != eigen_bf16_bits(f);
  }
  CHECK(f16_mismatch == 0);
  CHECK(bf16_mismatch == 0);
}

TEST_CASE("every 16-bit pattern widens exactly and rounds back to itself") {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    float h = f16_value(bits);
    float e = static_cast<float>(Eigen::numext::bit_cast<Eigen::half>(bits));
    if (std::isnan(e)) {
      REQUIRE(std::isnan(h));
      REQUIRE(std::isnan(f16_value(f16_bits(h))));
    } else {
      REQUIRE(std::bit_cast<uint32_t>(h) == std::bit_cast<uint32_t>(e));
      REQUIRE(f16_bits(h) == bits);
    }
    float bf = bf16_value(bits);
    REQUIRE(std::bit_cast<uint32_t>(bf) == (b << 16));
    if (!std::isnan(bf)) REQUIRE(bf16_bits(bf) == bits);
  }
}

TEST_CASE("dtype table: names, sizes, parsing, wire values") {
  CHECK(static_cast<int>(DType::Float16) == 5);
  CHECK(static_cast<int>(DType::BFloat16) == 6);
  CHECK(dtr::kNumDTypes == 7);
  CHECK(dtr::is_valid_dtype(6));
  CHECK_FALSE(dtr::is_valid_dtype(7));
  CHECK(dtr::element_size(DType::Float16) == 2);
  CHECK(dtr::element_size(DType::BFloat16) == 2);
  CHECK(dtr::dtype_name(DType::Float16) == "float16");
  CHECK(dtr::dtype_name(DType::BFloat16) == "bfloat16");
  CHECK(dtr::is_floating(DType::Float16));
  CHECK(dtr::is_floating(DType::BFloat16));
  CHECK_FALSE(dtr::is_integral(DType::BFloat16));
  DType t = DType::Bool;
  CHECK((dtr::parse_dtype("float16", t) && t == DType::Float16));
  CHECK((dtr::parse_dtype("half", t) && t == DType::Float16));
  CHECK((dtr::parse_dtype("bfloat16", t) && t == DType::BFloat16));
  CHECK((dtr::parse_dtype("bf16", t) && t == DType::BFloat16));
  CHECK_FALSE(dtr::parse_dtype("fp8", t));
  CHECK(dtr::dtype_of_v<float16> == DType::Float16);
  CHECK(dtr::dtype_of_v<bfloat16> == DType::BFloat16);
  CHECK(dtr::is_floating_v<float16>);
  CHECK(dtr::is_floating_v<bfloat16>);
  CHECK_FALSE(dtr::is_floating_v<int32_t>);
}

TEST_CASE("promotion and can_cast as torch, half with bfloat16 giving float32") {
  using D = DType;
  const D F16 = D::Float16, BF = D::BFloat16, F32 = D::Float32, F64 = D::Float64, I32 = D::Int32,
          I64 = D::Int64, B = D::Bool;
  // torch.result_type for two tensors, row = a, column = b, in the order below.
  const D order[] = {B, I32, I64, F16, BF, F32, F64};
  const D table[7][7] = {
      /* bool  */ {B, I32, I64, F16, BF, F32, F64},
      /* int32 */ {I32, I32, I64, F16, BF, F32, F64},
      /* int64 */ {I64, I64, I64, F16, BF, F32, F64},
      /* f16   */ {F16, F16, F16, F16, F32, F32, F64},
      /* bf16  */ {BF, BF, BF, F32, BF, F32, F64},
      /* f32   */ {F32, F32, F32, F32, F32, F32, F64},
      /* f64   */ {F64, F64, F64, F64, F64, F64, F64},
  };
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 7; ++j) {
      INFO(dtr::dtype_name(order[i]) << " with " << dtr::dtype_name(order[j]));
      CHECK(dtr::promote_types(order[i], order[j]) == table[i][j]);
    }
  CHECK(dtr::can_cast(F32, F16));
  CHECK(dtr::can_cast(F16, BF));
  CHECK(dtr::can_cast(I64, BF));
  CHECK_FALSE(dtr::can_cast(F16, I32));
  CHECK_FALSE(dtr::can_cast(BF, B));
  // Through the op table: mixed operands compute in the promoted dtype.
  Tensor h = local::ones({3}, F16), b = local::ones({3}, BF);
  CHECK((h + b).dtype() == F32);
  CHECK((h + local::ones({3}, I64)).dtype() == F16);
  CHECK((b * 2.5).dtype() == BF);
  CHECK((local::ones({3}, I32) + local::ones({3}, BF)).dtype() == BF);
  CHECK((h < b).dtype() == B);
  CHECK(local::arange(0, 4, 1, I32).exp().dtype() == F32);
  CHECK(h.exp().dtype() == F16);
  CHECK(h.sum().dtype() == F16);
  CHECK(b.argmax().dtype() == I64);
  CHECK_THROWS_AS(local::ones({3}, I32).add_(h), dtr::DTypeError);
}

TEST_CASE("elementwise ops on float16 and bfloat16 are the float32 op rounded") {
  dtr::Generator gen(7);
  for (DType dt : kHalves) {
    const std::string name(dtr::dtype_name(dt));
    Tensor a = (local::randn({5, 7}, gen) * 3.0).to(dt);
    Tensor b = (local::randn({5, 7}, gen) * 3.0).to(dt);
    Tensor pos = (local::rand({5, 7}, gen) * 4.0 + 0.25).to(dt);
    Tensor row = local::randn({7}, gen).to(dt);
    Tensor af = a.to(DType::Float32), bf = b.to(DType::Float32), pf = pos.to(DType::Float32);
    Tensor rf = row.to(DType::Float32);
    check_rounded(-a, -af, dt, name + " neg");
    check_rounded(a.abs(), af.abs(), dt, name + " abs");
    check_rounded(a.relu(), af.relu(), dt, name + " relu");
    check_rounded(a.exp(), af.exp(), dt, name + " exp");
    check_rounded(pos.log(), pf.log(), dt, name + " log");
    check_rounded(pos.sqrt(), pf.sqrt(), dt, name + " sqrt");
    check_rounded(pos.rsqrt(), pf.rsqrt(), dt, name + " rsqrt");
    check_rounded(a.sin(), af.sin(), dt, name + " sin");
    check_rounded(a.cos(), af.cos(), dt, name + " cos");
    check_rounded(a.tanh(), af.tanh(), dt, name + " tanh");
    check_rounded(a.sigmoid(), af.sigmoid(), dt, name + " sigmoid");
    check_rounded(a.clamp(-1.1, 0.7), af.clamp(-1.1, 0.7), dt, name + " clamp");
    check_rounded(a + b, af + bf, dt, name + " add");
    check_rounded(a - row, af - rf, dt, name + " sub broadcast");
    check_rounded(a * b, af * bf, dt, name + " mul");
    check_rounded(a / pos, af / pf, dt, name + " div");
    check_rounded(pos.pow(b), pf.pow(bf), dt, name + " pow");
    check_rounded(a.maximum(b), af.maximum(bf), dt, name + " maximum");
    check_rounded(a.minimum(b), af.minimum(bf), dt, name + " minimum");
    check_rounded(a + 0.1, af + 0.1, dt, name + " add scalar");
    check_rounded(a.t() * 3, af.t() * 3, dt, name + " strided mul scalar");
    CHECK((a < b).to_vector<bool>() == (af < bf).to_vector<bool>());
    CHECK((a == a).to_vector<bool>() == std::vector<bool>(35, true));
    CHECK((a >= 0.5).to_vector<bool>() == (af >= 0.5).to_vector<bool>());
    // In place: the result is rounded into the 16-bit tensor itself.
    Tensor c = a.clone();
    c.mul_(b);
    check_rounded(c, af * bf, dt, name + " mul_");
    c = a.clone();
    c.add_(1);
    check_rounded(c, af + 1, dt, name + " add_ scalar");
    // A float32 tensor updated in place by a 16-bit operand stays float32.
    Tensor f = af.clone();
    f.add_(b);
    CHECK(f.to_vector<float>() == (af + bf).to_vector<float>());
  }
}

TEST_CASE("rounding really happens: 1 + 2^-11 is 1 in float16, 1 + 2^-8 is 1 in bfloat16") {
  Tensor one16 = local::ones({1}, DType::Float16);
  CHECK((one16 + std::ldexp(1.0, -11)).item<double>() == 1.0);
  CHECK((one16 + std::ldexp(3.0, -11)).item<double>() == 1.0 + std::ldexp(1.0, -9));
  CHECK((one16 * 70000).item<double>() == std::numeric_limits<double>::infinity());
  Tensor onebf = local::ones({1}, DType::BFloat16);
  CHECK((onebf + std::ldexp(1.0, -8)).item<double>() == 1.0);
  CHECK((onebf * 1e38 * 10).item<double>() == std::numeric_limits<double>::infinity());
}

TEST_CASE("reductions on float16 and bfloat16 accumulate wider than the 16-bit type") {
  // 4096 ones: a float16 accumulator sticks at 2048 (2048 + 1 rounds to 2048).
  Tensor h = local::ones({4096}, DType::Float16);
  CHECK(h.sum().item<double>() == 4096.0);
  CHECK(h.mean().item<double>() == 1.0);
  Tensor b = local::ones({4096}, DType::BFloat16);
  CHECK(b.sum().item<double>() == 4096.0);  // bfloat16 would stick at 256
  dtr::Generator gen(11);
  for (DType dt : kHalves) {
    const std::string name(dtr::dtype_name(dt));
    Tensor x = (local::randn({6, 9}, gen) + 0.5).to(dt);
    Tensor xf = x.to(DType::Float32);
    check_rounded(x.sum(), xf.sum(), dt, name + " sum");
    check_rounded(x.sum(1), xf.sum(1), dt, name + " sum dim");
    check_rounded(x.prod(0), xf.prod(0), dt, name + " prod dim");
    check_rounded(x.mean(0, true), xf.mean(0, true), dt, name + " mean keepdim");
    check_rounded(x.norm(), xf.norm(), dt, name + " norm");
    check_rounded(x.norm(1.0, 1), xf.norm(1.0, 1), dt, name + " norm 1 dim");
    check_rounded(x.var(), xf.var(), dt, name + " var");
    check_rounded(x.std(1), xf.std(1), dt, name + " std dim");
    // max/min exact; argmax/argmin the same positions as on the widened values.
    CHECK(x.max().item<double>() == xf.max().item<double>());
    CHECK(x.min(1).to_vector<float>() == xf.min(1).to_vector<float>());
    CHECK(x.max().dtype() == dt);
    CHECK(x.argmax().item<int64_t>() == xf.argmax().item<int64_t>());
    CHECK(x.argmin(0).to_vector<int64_t>() == xf.argmin(0).to_vector<int64_t>());
  }
}

TEST_CASE("matmul, dot and mv on float16 and bfloat16 are the float32 product rounded") {
  dtr::Generator gen(13);
  for (DType dt : kHalves) {
    const std::string name(dtr::dtype_name(dt));
    Tensor a = local::randn({2, 4, 5}, gen).to(dt);
    Tensor b = local::randn({5, 3}, gen).to(dt);
    Tensor v = local::randn({5}, gen).to(dt);
    Tensor af = a.to(DType::Float32), bf = b.to(DType::Float32), vf = v.to(DType::Float32);
    check_rounded(a.matmul(b), af.matmul(bf), dt, name + " batched matmul");
    check_rounded(b.t().matmul(a.select(0, 1).t()), bf.t().matmul(af.select(0, 1).t()), dt,
                  name + " transposed matmul");
    check_rounded(v.dot(v), vf.dot(vf), dt, name + " dot");
    check_rounded(a.select(0, 0).mv(v), af.select(0, 0).mv(vf), dt, name + " mv");
    CHECK(a.matmul(b).dtype() == dt);
  }
}

TEST_CASE("casts between the 16-bit types and every dtype") {
  const std::vector<float> values = {0.0f,    -0.0f,    1.0f,   -2.5f, 0.1f,
                                     1000.7f, 70000.0f, -3e38f, 1e-6f, 255.5f};
  const DType all[] = {DType::Float32, DType::Float64, DType::Int32,   DType::Int64,
                       DType::Bool,    DType::Float16, DType::BFloat16};
  for (DType dt : kHalves) {
    Tensor h = from_floats(values, dt);
    std::vector<float> hv = h.to_vector<float>();
    for (size_t i = 0; i < values.size(); ++i) CHECK(hv[i] == round_as(dt, values[i]));
    for (DType to : all) {
      INFO(dtr::dtype_name(dt) << " -> " << dtr::dtype_name(to));
      Tensor y = h.to(to);
      REQUIRE(y.dtype() == to);
      // The same as converting the (exact) float32 widening.
      Tensor ref = h.to(DType::Float32).to(to);
      CHECK(y.to_vector<double>() == ref.to_vector<double>());
    }
    // Integers and bools into the 16-bit type.
    CHECK(local::arange(2045, 2052, 1, DType::Int64).to(DType::Float16).to_vector<double>() ==
          std::vector<double>{2045, 2046, 2047, 2048, 2048, 2050, 2052});
    CHECK(local::ones({2}, DType::Bool).to(dt).to_vector<double>() == std::vector<double>{1, 1});
    // Saturating into integers: inf and NaN behave as for float32.
    Tensor special = from_floats(
        {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), -7.75f},
        dt);
    CHECK(special.to(DType::Int32).to_vector<int32_t>() ==
          std::vector<int32_t>{std::numeric_limits<int32_t>::max(), 0, -7});
    CHECK(special.to(DType::Bool).to_vector<bool>() == std::vector<bool>{true, true, true});
  }
  // Between the two 16-bit types: rounded once from the exact value.
  Tensor h = from_floats({1.0f + std::ldexp(1.0f, -10), 65504.0f}, DType::Float16);
  CHECK(h.to(DType::BFloat16).to_vector<double>() == std::vector<double>{1.0, 65536.0});
  Tensor b = from_floats({1e10f}, DType::BFloat16);
  CHECK(b.to(DType::Float16).item<double>() == std::numeric_limits<double>::infinity());
}

TEST_CASE("item, to_vector, from_vector, fill and creation on the 16-bit types") {
  for (DType dt : kHalves) {
    Tensor t = local::full({2, 2}, 0.1, dt);
    CHECK(t.select(0, 1).select(0, 0).item<double>() == doctest::Approx(0.1).epsilon(0.01));
    CHECK(t.select(0, 1).select(0, 1).item<float>() == round_as(dt, 0.1f));
    CHECK(t.select(0, 0).select(0, 0).item().is_floating());
    t.fill_(-3);
    CHECK(t.to_vector<double>() == std::vector<double>(4, -3.0));
    CHECK(local::zeros({3}, dt).to_vector<double>() == std::vector<double>(3, 0.0));
    CHECK(local::arange(0, 5, 1, dt).to_vector<double>() == std::vector<double>{0, 1, 2, 3, 4});
    std::vector<double> ls = local::linspace(0, 1, 5, dt).to_vector<double>();
    CHECK(ls == std::vector<double>{0, 0.25, 0.5, 0.75, 1});
  }
  std::vector<float16> hv = {float16(1.5f), float16(-0.25f)};
  Tensor h = local::from_vector(hv);
  CHECK(h.dtype() == DType::Float16);
  CHECK(h.to_vector<float16>()[1].bits == float16(-0.25f).bits);
  std::vector<bfloat16> bv = {bfloat16(3.0f)};
  CHECK(local::from_vector(bv).to_vector<bfloat16>()[0].bits == 0x4040);
}

TEST_CASE("random ops on the 16-bit types draw exact values in range") {
  for (DType dt : kHalves) {
    const double quantum = dt == DType::Float16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);
    dtr::Generator gen(99);
    std::vector<double> r = local::rand({4000}, gen, dt).to_vector<double>();
    double lo = 1, hi = 0;
    for (double x : r) {
      REQUIRE(x >= 0.0);
      REQUIRE(x < 1.0);
      REQUIRE(std::floor(x / quantum) * quantum == x);  // a multiple of 2^-digits
      lo = std::min(lo, x);
      hi = std::max(hi, x);
    }
    CHECK(lo < 0.05);
    CHECK(hi > 0.95);
    // uniform_ keeps the interval half-open after rounding to the 16-bit type.
    Tensor u = local::empty({4000}, dt);
    u.uniform_(1.0, 1.0078125, gen);
    for (double x : u.to_vector<double>()) {
      REQUIRE(x >= 1.0);
      REQUIRE(x < 1.0078125);
    }
    std::vector<double> n = local::randn({4000}, gen, dt).to_vector<double>();
    double mean = 0;
    for (double x : n) {
      REQUIRE(std::isfinite(x));
      mean += x / 4000;
    }
    CHECK(std::abs(mean) < 0.1);
    Tensor m = local::empty({100}, dt);
    m.normal_(5.0, 0.5, gen);
    CHECK(m.mean().item<double>() == doctest::Approx(5.0).epsilon(0.05));
  }
}

TEST_CASE("printing float16 and bfloat16 tensors") {
  Tensor h = from_floats({1.5f, -2.0f, std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN()},
                         DType::Float16);
  CHECK(h.to_string() == "tensor([ 1.5000, -2.0000,     inf,     nan], shape=[4], dtype=float16)");
  Tensor b = from_floats({0.1f, 3.0f}, DType::BFloat16);
  CHECK(b.to_string() == "tensor([0.1001, 3.0000], shape=[2], dtype=bfloat16)");
  CHECK(local::ones({2}, DType::BFloat16).to_string() ==
        "tensor([1., 1.], shape=[2], dtype=bfloat16)");
}
