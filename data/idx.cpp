// IDX files (dtr/data.hpp: read_idx, write_idx).
#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "dtr/data.hpp"

namespace dtr::data {

namespace {

size_t idx_element_size(IdxType t) {
  switch (t) {
    case IdxType::UInt8:
    case IdxType::Int8:
      return 1;
    case IdxType::Int16:
      return 2;
    case IdxType::Int32:
    case IdxType::Float32:
      return 4;
    case IdxType::Float64:
      return 8;
  }
  return 0;
}

bool valid_type(uint8_t code) {
  return code == 0x08 || code == 0x09 || code == 0x0B || code == 0x0C || code == 0x0D ||
         code == 0x0E;
}

uint64_t read_be(const unsigned char* p, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

// Element i of the payload as a value of the tensor's dtype.
template <typename Out>
void decode(IdxType t, const unsigned char* p, int64_t n, Out* out) {
  const size_t w = idx_element_size(t);
  for (int64_t i = 0; i < n; ++i, p += w) {
    const uint64_t bits = read_be(p, w);
    switch (t) {
      case IdxType::UInt8:
        out[i] = static_cast<Out>(static_cast<uint8_t>(bits));
        break;
      case IdxType::Int8:
        out[i] = static_cast<Out>(static_cast<int8_t>(bits));
        break;
      case IdxType::Int16:
        out[i] = static_cast<Out>(static_cast<int16_t>(bits));
        break;
      case IdxType::Int32:
        out[i] = static_cast<Out>(static_cast<int32_t>(bits));
        break;
      case IdxType::Float32: {
        float f;
        const auto b = static_cast<uint32_t>(bits);
        std::memcpy(&f, &b, 4);
        out[i] = static_cast<Out>(f);
        break;
      }
      case IdxType::Float64: {
        double d;
        std::memcpy(&d, &bits, 8);
        out[i] = static_cast<Out>(d);
        break;
      }
    }
  }
}

}  // namespace

IdxFile read_idx(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument(fmt::format("read_idx: cannot open {}", path));
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
  auto fail = [&](const std::string& what) {
    throw InvalidArgument(fmt::format("read_idx: {}: {}", path, what));
  };
  if (bytes.size() < 4) fail(fmt::format("{} bytes; an IDX header has at least 4", bytes.size()));
  if (b[0] != 0 || b[1] != 0 || !valid_type(b[2]) || b[3] == 0)
    fail(
        fmt::format("bad magic {:02x} {:02x} {:02x} {:02x}: expected 00 00, a type (08 09 0b "
                    "0c 0d 0e) and a dim count of at least 1",
                    b[0], b[1], b[2], b[3]));
  const auto type = static_cast<IdxType>(b[2]);
  const int ndim = b[3];
  if (ndim > static_cast<int>(kMaxDims)) fail(fmt::format("{} dims, at most {}", ndim, kMaxDims));
  const size_t header = 4 + 4 * static_cast<size_t>(ndim);
  if (bytes.size() < header)
    fail(fmt::format("cut short in the header: {} dims need {} bytes, the file has {}", ndim,
                     header, bytes.size()));
  Shape shape;
  uint64_t numel = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint64_t size = read_be(b + 4 + 4 * d, 4);
    numel *= size;
    if (numel > (uint64_t{1} << 40)) fail(fmt::format("dims too large ({} at dim {})", size, d));
    shape.push_back(static_cast<int64_t>(size));
  }
  const uint64_t want = header + numel * idx_element_size(type);
  if (bytes.size() != want)
    fail(fmt::format("{} bytes, but its header ({} elements of {} bytes, shape {}) needs {}{}",
                     bytes.size(), numel, idx_element_size(type), to_string(shape), want,
                     bytes.size() < want ? " (cut short)" : " (trailing bytes)"));
  IdxFile out;
  out.type = type;
  const auto n = static_cast<int64_t>(numel);
  if (type == IdxType::Float32) {
    out.values = local::empty(shape, DType::Float32);
    decode(type, b + header, n, out.values.data<float>());
  } else if (type == IdxType::Float64) {
    out.values = local::empty(shape, DType::Float64);
    decode(type, b + header, n, out.values.data<double>());
  } else {
    out.values = local::empty(shape, DType::Int32);
    decode(type, b + header, n, out.values.data<int32_t>());
  }
  return out;
}

void write_idx(const std::string& path, const local::Tensor& values, IdxType type) {
  if (values.dim() < 1 || values.dim() > 255)
    throw InvalidArgument(
        fmt::format("write_idx: {}: needs 1 to 255 dims, got {}", path, values.dim()));
  std::string out{0, 0, static_cast<char>(type), static_cast<char>(values.dim())};
  for (int64_t d : values.shape())
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((d >> s) & 0xff));
  const size_t w = idx_element_size(type);
  auto put = [&](uint64_t bits) {
    for (size_t i = w; i-- > 0;) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  };
  if (type == IdxType::Float32) {
    for (float v : values.to_vector<float>()) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      put(bits);
    }
  } else if (type == IdxType::Float64) {
    for (double v : values.to_vector<double>()) {
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      put(bits);
    }
  } else {
    const int64_t lo = type == IdxType::UInt8 ? 0 : -(int64_t{1} << (8 * w - 1));
    const int64_t hi = type == IdxType::UInt8 ? 255 : (int64_t{1} << (8 * w - 1)) - 1;
    for (int64_t v : values.to_vector<int64_t>()) {
      if (v < lo || v > hi)
        throw InvalidArgument(
            fmt::format("write_idx: {}: value {} does not fit the type", path, v));
      put(static_cast<uint64_t>(v));
    }
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  f.close();
  if (!f) throw InvalidArgument(fmt::format("write_idx: cannot write {}", path));
}

}  // namespace dtr::data
