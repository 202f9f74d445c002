// MNIST from IDX files, and synthetic MNIST-like IDX files (dtr/data.hpp).
#include <fmt/format.h>

#include <filesystem>

#include "dtr/data.hpp"

namespace dtr::data {

Mnist load_mnist(const std::string& images_path, const std::string& labels_path) {
  IdxFile images = read_idx(images_path);
  IdxFile labels = read_idx(labels_path);
  if (images.type != IdxType::UInt8 || images.values.dim() != 3)
    throw InvalidArgument(fmt::format(
        "load_mnist: {}: expected a 3-D uint8 image file (magic 00 00 08 03), got type {:#04x} "
        "with shape {}",
        images_path, static_cast<int>(images.type), to_string(images.values.shape())));
  if (labels.type != IdxType::UInt8 || labels.values.dim() != 1)
    throw InvalidArgument(fmt::format(
        "load_mnist: {}: expected a 1-D uint8 label file (magic 00 00 08 01), got type {:#04x} "
        "with shape {}",
        labels_path, static_cast<int>(labels.type), to_string(labels.values.shape())));
  const int64_t n = images.values.shape()[0];
  if (labels.values.shape()[0] != n)
    throw InvalidArgument(fmt::format("load_mnist: {} has {} images but {} has {} labels",
                                      images_path, n, labels_path, labels.values.shape()[0]));
  std::vector<int32_t> raw = labels.values.to_vector<int32_t>();
  for (size_t i = 0; i < raw.size(); ++i)
    if (raw[i] > 9)
      throw InvalidArgument(
          fmt::format("load_mnist: {}: label {} is {}, not a digit 0..9", labels_path, i, raw[i]));
  const Shape& s = images.values.shape();
  Mnist m;
  m.images = ((images.values.to(DType::Float32) / 255.0f - 0.1307f) / 0.3081f)
                 .contiguous()
                 .view({n, 1, s[1], s[2]});
  m.labels = labels.values.to(DType::Int64);
  return m;
}

MnistFiles write_synthetic_mnist(const std::string& dir, int64_t n, uint64_t seed) {
  if (n <= 0) throw InvalidArgument("write_synthetic_mnist: n must be positive");
  std::filesystem::create_directories(dir);
  constexpr int kSide = 28;
  PythonRandom rng(seed);
  local::Tensor images = local::zeros({n, kSide, kSide}, DType::Int32);
  local::Tensor labels = local::empty({n}, DType::Int32);
  int32_t* img = images.data<int32_t>();
  int32_t* lab = labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i) {
    const auto digit = static_cast<int>(rng.randbelow(10));
    lab[i] = digit;
    const int dx = static_cast<int>(rng.randbelow(5)) - 2,
              dy = static_cast<int>(rng.randbelow(5)) - 2;
    int32_t* p = img + i * kSide * kSide;
    // Class k: a horizontal stroke at row 4 + 2k and a vertical one at column 23 - 2k.
    for (int r = 0; r < kSide; ++r) {
      for (int c = 0; c < kSide; ++c) {
        const int y = r - dy, x = c - dx;
        const bool stroke = (y >= 4 + 2 * digit && y < 6 + 2 * digit && x >= 6 && x < 22) ||
                            (x >= 23 - 2 * digit && x < 25 - 2 * digit && y >= 4 && y < 24);
        const auto noise = static_cast<int32_t>(rng.randbelow(40));
        p[r * kSide + c] = stroke ? 215 + noise : noise;
      }
    }
  }
  MnistFiles files{dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte"};
  write_idx(files.images, images, IdxType::UInt8);
  write_idx(files.labels, labels, IdxType::UInt8);
  return files;
}

}  // namespace dtr::data
