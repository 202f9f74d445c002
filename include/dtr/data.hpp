// Data for training (library dtr::data; docs/training.md): IDX files (the format of the
// MNIST files) read strictly and written, MNIST as normalized tensors, a generator of
// synthetic MNIST-like IDX files for tests and demos, and the seed tutorial's
// DataPartitioner with Python's exact seeded shuffle.
//
// Every reader error is an InvalidArgument naming the file and what is wrong, with the
// expected and the actual value (magic, type, dims, sizes, a file cut short or too long).
//
// Thread safety: plain functions; a PythonRandom or DataPartitioner is used by one thread
// at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dtr/tensor.hpp"

namespace dtr::data {

// ---- IDX files ----
// The element type byte of an IDX header.
enum class IdxType : uint8_t {
  UInt8 = 0x08,
  Int8 = 0x09,
  Int16 = 0x0B,
  Int32 = 0x0C,
  Float32 = 0x0D,
  Float64 = 0x0E
};

struct IdxFile {
  IdxType type = IdxType::UInt8;
  // The values with the file's dims: int32 for the integer types, float32 or float64.
  local::Tensor values;
};

// Reads an IDX file: bytes 0-1 zero, byte 2 the type, byte 3 the number of dims (>= 1),
// one big-endian u32 per dim, then exactly the elements (big-endian), nothing after.
IdxFile read_idx(const std::string& path);
// Writes `values` (any dtype; converted to `type`, which must hold them) as an IDX file.
void write_idx(const std::string& path, const local::Tensor& values, IdxType type);

// ---- MNIST ----
struct Mnist {
  local::Tensor images;  // float32 (N, 1, H, W): (x / 255 - 0.1307) / 0.3081, as the seed
  local::Tensor labels;  // int64 (N)
};
// Reads an image file (3-D, uint8) and a label file (1-D, uint8, values 0..9) of the same
// count.
Mnist load_mnist(const std::string& images_path, const std::string& labels_path);

struct MnistFiles {
  std::string images;  // DIR/train-images-idx3-ubyte
  std::string labels;  // DIR/train-labels-idx1-ubyte
};
// Writes `n` synthetic 28x28 MNIST-like samples into `dir` (made if missing) under MNIST's
// file names: each class draws its own pattern of strokes, moved by up to two pixels and
// noised, so that a small convolutional net learns it in an epoch. Same seed, same bytes.
MnistFiles write_synthetic_mnist(const std::string& dir, int64_t n, uint64_t seed = 0);

// ---- partitions ----
// Python's random.Random with an integer seed: MT19937 seeded by init_by_array, and its
// getrandbits, randbelow and shuffle, giving the very numbers CPython gives.
class PythonRandom {
 public:
  explicit PythonRandom(uint64_t seed);
  uint32_t genrand_uint32();
  uint64_t getrandbits(int k);  // 1 <= k <= 64
  uint64_t randbelow(uint64_t n);
  void shuffle(std::vector<int64_t>& x);

 private:
  void init_genrand(uint32_t s);
  uint32_t mt_[624];
  int index_ = 625;
};

// The tutorial's DataPartitioner: indices 0..n-1 shuffled by random.Random(seed).shuffle,
// then cut into consecutive pieces of int(fraction * n) indices each.
class DataPartitioner {
 public:
  DataPartitioner(int64_t n, const std::vector<double>& sizes = {0.7, 0.2, 0.1},
                  uint64_t seed = 1234);
  // Throws IndexError for a partition that does not exist.
  const std::vector<int64_t>& use(size_t partition) const;
  size_t size() const { return partitions_.size(); }

 private:
  std::vector<std::vector<int64_t>> partitions_;
};

// The rows `rows` of `t` (dim 0) stacked into a new contiguous tensor.
local::Tensor gather_rows(const local::Tensor& t, std::span<const int64_t> rows);

}  // namespace dtr::data
