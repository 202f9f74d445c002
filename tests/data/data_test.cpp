// IDX files, MNIST, the synthetic generator and the DataPartitioner.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "dtr/data.hpp"
#include "support/message_of.hpp"

namespace dtr::test {
namespace {

using namespace dtr::data;
using local::Tensor;
std::string temp_dir() {
  return "/tmp/dtr_data_test_" + std::to_string(::getpid());
}

TEST_CASE("data: PythonRandom gives CPython's numbers") {
  // random.Random(1234): getrandbits(32) x3, and shuffle(list(range(20))).
  PythonRandom r(1234);
  CHECK(r.genrand_uint32() == 4150886329u);
  CHECK(r.genrand_uint32() == 3342196574u);
  CHECK(r.genrand_uint32() == 1892932127u);
  std::vector<int64_t> x(20);
  for (int i = 0; i < 20; ++i) x[static_cast<size_t>(i)] = i;
  PythonRandom(1234).shuffle(x);
  CHECK(x ==
        std::vector<int64_t>{19, 13, 4, 9, 16, 7, 6, 8, 17, 18, 5, 12, 15, 11, 10, 1, 2, 0, 3, 14});
}

TEST_CASE("data: DataPartitioner cuts the seeded shuffle into fractions") {
  DataPartitioner p(60000, {0.5, 0.5});
  REQUIRE(p.size() == 2);
  const auto& a = p.use(0);
  CHECK(a.size() == 30000);
  // random.Random(1234).shuffle(list(range(60000))): the first and last elements.
  CHECK(std::vector<int64_t>(a.begin(), a.begin() + 4) ==
        std::vector<int64_t>{33712, 36159, 45528, 25849});
  CHECK(p.use(1).back() == 50997);
  DataPartitioner q(10, {0.7, 0.2, 0.1});
  CHECK(q.use(0).size() == 7);
  CHECK(q.use(1).size() == 2);
  CHECK(q.use(2).size() == 1);
  CHECK_THROWS_AS(q.use(3), IndexError);
}

TEST_CASE("data: IDX round trip, MNIST loading and strict errors") {
  const std::string dir = temp_dir();
  MnistFiles f = write_synthetic_mnist(dir, 50, 7);
  Mnist m = load_mnist(f.images, f.labels);
  CHECK(m.images.shape() == Shape{50, 1, 28, 28});
  CHECK(m.labels.shape() == Shape{50});
  CHECK(m.labels.dtype() == DType::Int64);
  IdxFile raw = read_idx(f.images);
  const float first = m.images.to_vector<float>()[0];
  CHECK(first == doctest::Approx((raw.values.to_vector<int32_t>()[0] / 255.0 - 0.1307) / 0.3081));
  MnistFiles again = write_synthetic_mnist(dir + "/again", 50, 7);
  CHECK(read_idx(again.images).values.to_vector<int32_t>() == raw.values.to_vector<int32_t>());

  std::string bytes;
  {
    std::ifstream in(f.labels, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string bad = dir + "/bad";
  auto write = [&](const std::string& content) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc) << content;
  };
  write(std::string("\x01\x00\x08\x01", 4) + bytes.substr(4));
  CHECK(has(message_of<InvalidArgument>([&] { read_idx(bad); }), "bad magic 01 00 08 01"));
  write(bytes.substr(0, bytes.size() - 3));
  CHECK(has(message_of<InvalidArgument>([&] { read_idx(bad); }), "cut short"));
  write(bytes + "zz");
  CHECK(has(message_of<InvalidArgument>([&] { read_idx(bad); }), "trailing bytes"));
  write(bytes.substr(0, 6));
  CHECK(has(message_of<InvalidArgument>([&] { read_idx(bad); }), "cut short in the header"));
  CHECK(has(message_of<InvalidArgument>([&] { load_mnist(f.labels, f.labels); }),
            "3-D uint8 image file"));
  write_idx(bad, local::from_vector<int32_t>({1, 2, 3}), IdxType::UInt8);
  CHECK(has(message_of<InvalidArgument>([&] { load_mnist(f.images, bad); }), "50 images but"));
  write_idx(bad, local::from_vector<float>({1.5f, -2}), IdxType::Float32);
  CHECK(read_idx(bad).values.to_vector<float>() == std::vector<float>{1.5f, -2});
  CHECK(has(message_of<InvalidArgument>(
                [&] { write_idx(bad, local::from_vector<int32_t>({300}), IdxType::UInt8); }),
            "does not fit"));
}

TEST_CASE("data: gather_rows") {
  Tensor t = local::arange(0, 12, 1).view({4, 3});
  Tensor g = gather_rows(t, std::vector<int64_t>{3, 1});
  CHECK(g.to_vector<int64_t>() == std::vector<int64_t>{9, 10, 11, 3, 4, 5});
  CHECK_THROWS_AS(gather_rows(t, std::vector<int64_t>{4}), IndexError);
}

}  // namespace
}  // namespace dtr::test
