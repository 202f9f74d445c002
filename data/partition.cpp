// Python's random.Random and the tutorial's DataPartitioner (dtr/data.hpp).
#include <fmt/format.h>

#include <cstring>
#include <numeric>

#include "dtr/data.hpp"

namespace dtr::data {

namespace {
constexpr int kN = 624, kM = 397;
}

void PythonRandom::init_genrand(uint32_t s) {
  mt_[0] = s;
  for (int i = 1; i < kN; ++i)
    mt_[i] = 1812433253u * (mt_[i - 1] ^ (mt_[i - 1] >> 30)) + static_cast<uint32_t>(i);
  index_ = kN;
}

// CPython's random_seed for an int: init_by_array over the seed's 32-bit words.
PythonRandom::PythonRandom(uint64_t seed) {
  std::vector<uint32_t> key{static_cast<uint32_t>(seed)};
  if (seed >> 32) key.push_back(static_cast<uint32_t>(seed >> 32));
  init_genrand(19650218u);
  int i = 1;
  size_t j = 0;
  for (int k = std::max<int>(kN, static_cast<int>(key.size())); k; --k) {
    mt_[i] = (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1664525u)) + key[j] +
             static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = kN - 1; k; --k) {
    mt_[i] =
        (mt_[i] ^ ((mt_[i - 1] ^ (mt_[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    if (++i >= kN) {
      mt_[0] = mt_[kN - 1];
      i = 1;
    }
  }
  mt_[0] = 0x80000000u;
  index_ = kN;
}

uint32_t PythonRandom::genrand_uint32() {
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
  if (index_ >= kN) {
    for (int k = 0; k < kN; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % kN] & kLower);
      mt_[k] = mt_[(k + kM) % kN] ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint64_t PythonRandom::getrandbits(int k) {
  if (k < 1 || k > 64) throw InvalidArgument(fmt::format("getrandbits: k = {}, needs 1..64", k));
  if (k <= 32) return genrand_uint32() >> (32 - k);
  const uint64_t low = genrand_uint32();
  const uint64_t high = genrand_uint32() >> (64 - k);
  return low | (high << 32);
}

uint64_t PythonRandom::randbelow(uint64_t n) {
  if (n == 0) return 0;
  const int k = 64 - std::countl_zero(n);  // n.bit_length()
  uint64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

void PythonRandom::shuffle(std::vector<int64_t>& x) {
  for (size_t i = x.size(); i-- > 1;) std::swap(x[i], x[randbelow(i + 1)]);
}

DataPartitioner::DataPartitioner(int64_t n, const std::vector<double>& sizes, uint64_t seed) {
  if (n < 0) throw InvalidArgument("DataPartitioner: negative size");
  std::vector<int64_t> indexes(static_cast<size_t>(n));
  std::iota(indexes.begin(), indexes.end(), 0);
  PythonRandom(seed).shuffle(indexes);
  size_t start = 0;
  for (double frac : sizes) {
    if (frac < 0) throw InvalidArgument(fmt::format("DataPartitioner: fraction {} < 0", frac));
    auto len = static_cast<size_t>(frac * static_cast<double>(n));  // int(frac * data_len)
    len = std::min(len, indexes.size() - start);
    partitions_.emplace_back(indexes.begin() + static_cast<std::ptrdiff_t>(start),
                             indexes.begin() + static_cast<std::ptrdiff_t>(start + len));
    start += len;
  }
}

const std::vector<int64_t>& DataPartitioner::use(size_t partition) const {
  if (partition >= partitions_.size())
    throw IndexError(
        fmt::format("DataPartitioner::use: partition {} of {}", partition, partitions_.size()));
  return partitions_[partition];
}

local::Tensor gather_rows(const local::Tensor& t, std::span<const int64_t> rows) {
  if (t.dim() < 1) throw ShapeError("gather_rows: needs a tensor with at least one dim");
  local::Tensor src = t.cpu().contiguous();
  Shape shape = src.shape();
  const int64_t n = shape[0];
  shape[0] = static_cast<int64_t>(rows.size());
  local::Tensor out = local::empty(shape, src.dtype());
  const size_t row_bytes = static_cast<size_t>(n ? src.numel() / n : 0) * element_size(src.dtype());
  const auto* s = static_cast<const char*>(src.raw_data());
  auto* d = static_cast<char*>(out.raw_data());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] < 0 || rows[i] >= n)
      throw IndexError(fmt::format("gather_rows: row {} of a tensor with {} rows", rows[i], n));
    std::memcpy(d + i * row_bytes, s + static_cast<size_t>(rows[i]) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace dtr::data
