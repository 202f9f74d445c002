// Conversions and data movement: to() between every dtype pair, copy_ across layouts and
// dtypes with broadcasting, clone, from_vector / to_vector, item, data<T>, the Tensor
// constructor's bounds check, execute / run_kernel, and the memory counters.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "support/sanitizers.hpp"
#include "tensor/reference.hpp"

using namespace dtr_test;
namespace local = dtr::local;
using dtr::OpAttrs;
using dtr::OpId;

namespace {

// Values every dtype can hold approximately: fractions (and exact zeros) in [-40, 40].
Array convertible(DType dt, const Sizes& shape, uint64_t seed) {
  return random_array(dt, shape, seed, is_float(dt) ? Range{-40, 40, 0.25} : Range{-40, 40});
}

}  // namespace

TEST_CASE("to(): every dtype pair, every layout") {
  uint64_t seed = 500000;
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      for (Layout layout : kAllLayouts) {
        for (const Sizes& shape : std::vector<Sizes>{{}, {13}, {3, 4}, {2, 0}}) {
          Array a = convertible(from, shape, ++seed);
          Tensor x = make_tensor(a, layout);
          std::string what =
              "to " + str(from) + str(shape) + " " + layout_name(layout) + " -> " + str(to);
          Tensor y = x.to(to);
          Array e = ref_unary(a, from, to, [](double v) { return v; });
          check_tensor(y, e, what);
          if (from != to) {
            CHECK_MESSAGE(y.is_contiguous(), what);
            CHECK_MESSAGE(!same_storage(x, y), what);
          } else if (same_storage(x, y)) {
            CHECK_MESSAGE(y.meta() == x.meta(), what << ": to() of the same dtype is x itself");
          } else {
            CHECK_MESSAGE(y.is_contiguous(), what);
          }
          check_tensor(x, a, what + " (source unchanged)");
        }
      }
    }
  }
  // Specific conversions.
  Tensor f = tensor_of(kF64, {6}, {-2.75, -0.5, 0.0, 0.5, 1.9999, 1e10});
  check_tensor(f.to(kI64), make_array(kI64, {6}, {-2, 0, 0, 0, 1, 1e10}),
               "float64 -> int64 truncates");
  check_tensor(f.to(kBool), make_array(kBool, {6}, {1, 1, 0, 1, 1, 1}), "float64 -> bool");
  check_tensor(tensor_of(kF64, {1}, {0.1}).to(kF32), make_array(kF32, {1}, {0.1}),
               "float64 -> float32 rounds");
  check_tensor(tensor_of(kI64, {2}, {-5, 7}).to(kBool), make_array(kBool, {2}, {1, 1}),
               "int64 -> bool");
  check_tensor(tensor_of(kBool, {2}, {1, 0}).to(kF64), make_array(kF64, {2}, {1, 0}),
               "bool -> float64");
  Tensor nan = tensor_of(kF32, {2}, {NAN, -INFINITY});
  check_tensor(nan.to(kF64), make_array(kF64, {2}, {NAN, -INFINITY}), "NaN and inf to float64");
  check_tensor(nan.to(kBool), make_array(kBool, {2}, {1, 1}), "NaN and inf to bool");
}

TEST_CASE("copy_: layouts, dtypes and broadcasting") {
  uint64_t seed = 510000;
  struct Shapes {
    Sizes dst, src;
  };
  const std::vector<Shapes> shapes = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}},          {{3, 4}, {3, 1}},
      {{3, 4}, {}},     {{2, 3, 2}, {1, 3, 1}}, {{0, 3}, {3}},
  };
  for (DType dd : kAllDTypes) {
    for (DType sd : kAllDTypes) {
      for (const Shapes& sh : shapes) {
        for (size_t li = 0; li < 3; ++li) {
          Layout ld = kAllLayouts[li], ls = kAllLayouts[(li + 1) % 3];
          Array d = convertible(dd, sh.dst, ++seed);
          Array s = convertible(sd, sh.src, ++seed);
          Tensor dst = make_tensor(d, ld), src = make_tensor(s, ls);
          std::string what = "copy_ " + str(sd) + str(sh.src) + " " + layout_name(ls) + " into " +
                             str(dd) + str(sh.dst) + " " + layout_name(ld);
          auto storage = dst.storage();
          dst.copy_(src);
          Array e = ref_binary(d, s, dd, dd, [](double, double v) { return v; });
          check_tensor(dst, e, what);
          CHECK_MESSAGE(dst.storage() == storage, what);
          check_untouched(dst, what);
          check_tensor(src, s, what + " (source unchanged)");
        }
      }
    }
  }
  // Into a transposed view of a base: the base gets the transpose.
  Array s = random_array(kF32, {4, 3}, 511001);
  Tensor base = local::zeros({3, 4}, kF64);
  base.t().copy_(make_tensor(s, Layout::Padded));
  Array e{kF64, {3, 4}, {}, {}};
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) e.v.push_back(s.v[static_cast<size_t>(j * 3 + i)]);
  check_tensor(base, e, "copy_ into base.t()");
  // From an expanded source into a stepped slice.
  Tensor dst = local::zeros({2, 6}, kI32);
  dst.slice(1, 1, 6, 2).copy_(tensor_of(kI64, {2, 1}, {5, -6}).expand({2, 3}));
  check_tensor(dst, make_array(kI32, {2, 6}, {0, 5, 0, 5, 0, 5, 0, -6, 0, -6, 0, -6}),
               "copy_ expanded into a stepped slice");
}

TEST_CASE("clone: an independent contiguous copy") {
  Array a = random_array(kI64, {3, 5}, 520001);
  for (Layout layout : kAllLayouts) {
    Tensor x = make_tensor(a, layout);
    Tensor c = x.clone();
    check_tensor(c, a, std::string("clone of ") + layout_name(layout));
    CHECK(c.is_contiguous());
    CHECK(!same_storage(c, x));
    c.fill_(0);
    check_tensor(x, a, "the clone is independent");
  }
  Tensor t = make_tensor(a).t().clone();
  CHECK(str(to_sizes(t.strides())) == "[3, 1]");
}

TEST_CASE("from_vector and to_vector") {
  Tensor f = local::from_vector<float>({1.5f, -2.0f, 3.25f, 4.0f, 5.0f, 6.0f}, {2, 3});
  check_tensor(f, make_array(kF32, {2, 3}, {1.5, -2, 3.25, 4, 5, 6}), "from_vector<float>");
  CHECK(f.is_contiguous());
  check_tensor(local::from_vector<double>({0.1, 0.2}), make_array(kF64, {2}, {0.1, 0.2}),
               "from_vector<double> 1-d");
  check_tensor(local::from_vector<int32_t>({-1, 2, 3}, {3, 1}),
               make_array(kI32, {3, 1}, {-1, 2, 3}), "from_vector<int32_t>");
  check_tensor(local::from_vector<int64_t>({1LL << 40}), make_array(kI64, {1}, {1099511627776.0}),
               "from_vector<int64_t>");
  check_tensor(local::from_vector<bool>({true, false, true}), make_array(kBool, {3}, {1, 0, 1}),
               "from_vector<bool>");
  check_tensor(local::from_vector<float>({7.0f}, {}), make_array(kF32, {}, {7}), "0-d from_vector");
  check_tensor(local::from_vector<float>({}, {0, 4}), filled(kF32, {0, 4}, 0), "empty from_vector");

  Array a = random_array(kF64, {3, 4}, 530001);
  for (Layout layout : kAllLayouts) {
    Tensor x = make_tensor(a, layout);
    CHECK(x.to_vector<double>() == a.v);
    std::vector<double> tv = x.t().to_vector<double>();
    std::vector<double> want;
    for (int64_t j = 0; j < 4; ++j)
      for (int64_t i = 0; i < 3; ++i) want.push_back(a.v[static_cast<size_t>(i * 4 + j)]);
    CHECK(tv == want);
  }
  Tensor i = tensor_of(kI32, {2, 2}, {1, -2, 3, 4}, Layout::ColumnMajor);
  CHECK(i.to_vector<int32_t>() == std::vector<int32_t>{1, -2, 3, 4});
  CHECK(i.to_vector<double>() == std::vector<double>{1, -2, 3, 4});
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2, 3, 4});
  CHECK(tensor_of(kF32, {3}, {1.75, -1.75, 0}).to_vector<int64_t>() ==
        std::vector<int64_t>{1, -1, 0});
  CHECK(tensor_of(kBool, {2}, {1, 0}).to_vector<float>() == std::vector<float>{1, 0});
  CHECK(tensor_of(kF32, {0}, {}).to_vector<float>().empty());
}

TEST_CASE("item, data<T> and the Tensor constructor's checks") {
  CHECK(tensor_of(kF64, {}, {2.5}).item().to_double() == 2.5);
  CHECK(tensor_of(kF64, {}, {2.5}).item().is_floating());
  CHECK(tensor_of(kI64, {1, 1}, {-7}).item().to_int() == -7);
  CHECK(tensor_of(kI64, {1, 1}, {-7}).item().is_integral());
  CHECK(tensor_of(kBool, {1}, {1}).item().is_bool());
  CHECK(tensor_of(kI32, {1}, {9}, Layout::Padded).item<int>() == 9);
  CHECK(tensor_of(kF32, {2, 2}, {1, 2, 3, 4}).select(0, 1).select(0, 0).item<float>() == 3.0f);
  CHECK(tensor_of(kF32, {1}, {0.5}).item<double>() == 0.5);

  Tensor x = tensor_of(kF32, {2, 3}, {1, 2, 3, 4, 5, 6});
  CHECK(x.data<float>()[4] == 5.0f);
  DTR_CHECK_ERROR(dtr::DTypeError, x.data<double>(), "float32", "float64");
  Tensor v = x.select(0, 1);
  CHECK(v.data<float>()[0] == 4.0f);

  auto storage = dtr::Storage::allocate(6 * sizeof(float));
  dtr::TensorMeta ok{kF32, {2, 3}, {3, 1}, 0};
  CHECK_NOTHROW((void)Tensor(storage, ok));
  dtr::TensorMeta too_far{kF32, {2, 3}, {3, 1}, 1};
  DTR_CHECK_ERROR(dtr::InvalidArgument, Tensor(storage, too_far));
  dtr::TensorMeta wide{kF32, {2, 4}, {4, 1}, 0};
  DTR_CHECK_ERROR(dtr::InvalidArgument, Tensor(storage, wide));
  dtr::TensorMeta expanded{kF32, {5, 6}, {0, 1}, 0};
  CHECK_NOTHROW((void)Tensor(storage, expanded));

  Tensor undefined;
  CHECK_FALSE(undefined.defined());
}

TEST_CASE("execute and run_kernel agree with the methods") {
  Array a = random_array(kF32, {3, 4}, 540001), b = random_array(kF32, {4}, 540002);
  Tensor x = make_tensor(a, Layout::ColumnMajor), y = make_tensor(b);
  std::vector<Tensor> inputs = {x, y};
  Array e = ref_binary(a, b, kF32, kF32, [](double p, double q) { return p * q; });
  check_tensor(local::execute(OpId::mul, inputs, {}, false), e, "execute mul");
  Tensor out = local::empty({3, 4});
  local::run_kernel(OpId::mul, inputs, {}, out);
  check_tensor(out, e, "run_kernel mul into a preallocated tensor");
  OpAttrs attrs;
  attrs.ints = {1};
  attrs.keepdim = true;
  Tensor sum_out = local::empty({3, 1});
  local::run_kernel(OpId::sum, std::vector<Tensor>{x}, attrs, sum_out);
  check_tensor(sum_out,
               ref_reduce(a, {1}, true, kF32,
                          [](const std::vector<double>& g) {
                            double s = 0;
                            for (double v : g) s += v;
                            return s;
                          }),
               sum_tol(kF32), "run_kernel sum(1, keepdim)");
  // in place through execute: returns input 0
  Tensor z = make_tensor(a);
  Tensor r = local::execute(OpId::add, std::vector<Tensor>{z, y}, {}, true);
  CHECK(same_storage(r, z));
  check_tensor(z, ref_binary(a, b, kF32, kF32, [](double p, double q) { return p + q; }),
               "execute add in place");
  // scalar operand through attrs
  OpAttrs s;
  s.scalars[0] = 2.0;
  s.scalar_first = true;
  check_tensor(local::execute(OpId::sub, std::vector<Tensor>{x}, s, false),
               ref_binary(scalar_array(Scalar(2.0)), a, kF32, kF32,
                          [](double p, double q) { return p - q; }),
               "execute sub scalar first");
}

TEST_CASE("memory counters follow storages") {
  dtr::MemoryStats before = dtr::cpu_memory_stats();
  {
    Tensor t = local::empty({1000}, kF64);
    dtr::MemoryStats during = dtr::cpu_memory_stats();
    CHECK(during.live_storages == before.live_storages + 1);
    CHECK(during.bytes_in_use >= before.bytes_in_use + 8000);
    CHECK(during.peak_bytes >= during.bytes_in_use);
    Tensor v = t.view({10, 100});  // a view: no new storage
    CHECK(dtr::cpu_memory_stats().live_storages == during.live_storages);
  }
  dtr::MemoryStats after = dtr::cpu_memory_stats();
  CHECK(after.live_storages == before.live_storages);
  CHECK(after.bytes_in_use == before.bytes_in_use);
}

TEST_CASE("a memory limit refuses allocations past it and counts nothing for them") {
  dtr::MemoryStats before = dtr::cpu_memory_stats();
  dtr::set_cpu_memory_limit(before.bytes_in_use + 10000);
  struct Reset {
    ~Reset() { dtr::set_cpu_memory_limit(0); }
  } reset;
  CHECK(dtr::cpu_memory_limit() == before.bytes_in_use + 10000);
  Tensor ok = local::empty({1000}, kF64);  // 8000 bytes: fits
  try {
    Tensor no = local::empty({1000}, kF64);  // 8000 more: past the limit
    FAIL("no OutOfMemory");
  } catch (const dtr::OutOfMemory& e) {
    std::string m = e.what();
    CHECK(m.find("allocating 8000 bytes") != std::string::npos);
    CHECK(m.find("memory limit of") != std::string::npos);
  }
  CHECK(dtr::cpu_memory_stats().bytes_in_use == before.bytes_in_use + 8000);
  ok = Tensor();
  Tensor again = local::empty({1000}, kF64);  // freed room is usable again
  CHECK_THROWS_AS(dtr::set_cpu_memory_limit(-1), dtr::InvalidArgument);
}

TEST_CASE("a host allocation the system refuses leaves bytes in use and the peak as they were") {
#if defined(DTR_TEST_ASAN) || defined(DTR_TEST_TSAN)
  MESSAGE("skipped: the sanitizers' allocators abort on a refused allocation");
#else
  const auto before = dtr::cpu_memory_stats();
  try {
    Tensor huge = local::empty({int64_t{1} << 43}, kF64);  // 64 TiB
    MESSAGE("this system granted 64 TiB (overcommit without limit): nothing to check");
  } catch (const dtr::OutOfMemory& e) {
    CHECK(std::string(e.what()).find("out of host memory allocating 70368744177664 bytes") !=
          std::string::npos);
    const auto after = dtr::cpu_memory_stats();
    CHECK(after.bytes_in_use == before.bytes_in_use);
    CHECK(after.live_storages == before.live_storages);
    CHECK(after.peak_bytes == before.peak_bytes);  // was 64 TiB: counted before malloc failed
  }
#endif
}

TEST_CASE("to_string names the dtype and shows values") {
  std::string s = tensor_of(kF64, {2}, {1.5, -2}).to_string();
  CHECK(s.find("1.5") != std::string::npos);
  CHECK(s.find("float64") != std::string::npos);
  std::string big = local::zeros({5000}).to_string();
  CHECK(big.size() < 5000);  // summarized
}
