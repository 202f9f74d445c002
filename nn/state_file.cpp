// State files (dtr/nn.hpp: save_state, load_state). Layout, little-endian:
//   "DTRSTATE"  8 bytes
//   version     u32 (kVersion)
//   count       u32, at most kMaxEntries
//   count entries: name length u32 (1..kMaxName), name bytes, dtype u8 (float32 or
//     float64), ndim u8 (<= kMaxDims), ndim sizes i64 (>= 0), payload length u64 (must be
//     numel * element size), the payload (row-major)
//   checksum    u64, FNV-1a 64 of every byte before it
// Nothing past the checksum. Every length is checked against the bytes left before use.
#include <fmt/format.h>

#include <bit>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>

#include "dtr/nn.hpp"

namespace dtr::nn {

namespace {

constexpr char kMagic[8] = {'D', 'T', 'R', 'S', 'T', 'A', 'T', 'E'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxEntries = 1u << 20;
constexpr uint32_t kMaxName = 4096;
static_assert(std::endian::native == std::endian::little,
              "state files assume a little-endian host");

uint64_t fnv1a(const char* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 1099511628211ull;
  return h;
}

template <typename V>
void put(std::string& out, V v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(V));
}

// Reads the file's bytes in order, each read checked against what is left.
class Reader {
 public:
  Reader(const std::string& path, const std::string& bytes) : path_(path), bytes_(bytes) {}
  template <typename V>
  V get(const std::string& what) {
    V v;
    std::memcpy(&v, take(sizeof(V), what), sizeof(V));
    return v;
  }
  const char* take(size_t n, const std::string& what) {
    if (n > bytes_.size() - pos_)
      fail("cut short in {} (needs {} bytes at offset {}, {} left)", what, n, pos_,
           bytes_.size() - pos_);
    const char* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }
  size_t pos() const { return pos_; }
  size_t left() const { return bytes_.size() - pos_; }
  template <typename... A>
  [[noreturn]] void fail(fmt::format_string<A...> f, A&&... a) const {
    throw InvalidArgument(
        fmt::format("load_state: {}: {}", path_, fmt::format(f, std::forward<A>(a)...)));
  }

 private:
  const std::string& path_;
  const std::string& bytes_;
  size_t pos_ = 0;
};

std::pair<std::string, local::Tensor> read_entry(Reader& r, uint32_t i) {
  const std::string where = fmt::format("entry {}", i);
  const auto name_len = r.get<uint32_t>(where + " (name length)");
  if (name_len == 0 || name_len > kMaxName)
    r.fail("{} has a name length of {} (1 to {})", where, name_len, kMaxName);
  std::string name(r.take(name_len, where + " (name)"), name_len);
  const std::string named = fmt::format("entry {} '{}'", i, name);
  const auto code = r.get<uint8_t>(named + " (dtype)");
  if (code != static_cast<uint8_t>(DType::Float32) && code != static_cast<uint8_t>(DType::Float64))
    r.fail("{} has dtype code {}; state files hold float32 (0) or float64 (1)", named, code);
  const auto dtype = static_cast<DType>(code);
  const auto ndim = r.get<uint8_t>(named + " (ndim)");
  if (ndim > kMaxDims) r.fail("{} has {} dims, at most {}", named, ndim, kMaxDims);
  Shape shape;
  uint64_t numel = 1;
  for (uint8_t d = 0; d < ndim; ++d) {
    const auto size = r.get<int64_t>(named + " (shape)");
    if (size < 0 || (size > 0 && numel > std::numeric_limits<uint64_t>::max() / 64 / size))
      r.fail("{} has an invalid size {} at dim {}", named, size, d);
    numel *= static_cast<uint64_t>(size);
    shape.push_back(size);
  }
  const auto nbytes = r.get<uint64_t>(named + " (payload length)");
  if (nbytes != numel * element_size(dtype))
    r.fail("{} ({}{}) says {} payload bytes, its shape needs {}", named, dtype_name(dtype),
           to_string(shape), nbytes, numel * element_size(dtype));
  const char* data = r.take(nbytes, named + " (payload)");
  local::Tensor t = local::empty(shape, dtype);
  if (nbytes) std::memcpy(t.raw_data(), data, nbytes);
  return {std::move(name), std::move(t)};
}

}  // namespace

void save_state(const std::string& path, const NamedTensors& tensors) {
  std::string out(kMagic, sizeof(kMagic));
  put<uint32_t>(out, kVersion);
  put<uint32_t>(out, static_cast<uint32_t>(tensors.size()));
  for (const auto& [name, tensor] : tensors) {
    if (name.empty() || name.size() > kMaxName)
      throw InvalidArgument(
          fmt::format("save_state: name '{}' must have 1 to {} bytes", name, kMaxName));
    if (tensor.dtype() != DType::Float32 && tensor.dtype() != DType::Float64)
      throw DTypeError(fmt::format("save_state: '{}' is {}; state files hold float32 or float64",
                                   name, describe(tensor.meta())));
    local::Tensor t = tensor.cpu().contiguous();
    put<uint32_t>(out, static_cast<uint32_t>(name.size()));
    out += name;
    put<uint8_t>(out, static_cast<uint8_t>(t.dtype()));
    put<uint8_t>(out, static_cast<uint8_t>(t.dim()));
    for (int64_t d : t.shape()) put<int64_t>(out, d);
    const uint64_t nbytes = static_cast<uint64_t>(t.numel()) * element_size(t.dtype());
    put<uint64_t>(out, nbytes);
    out.append(static_cast<const char*>(t.raw_data()), nbytes);
  }
  put<uint64_t>(out, fnv1a(out.data(), out.size()));
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  f.close();
  if (!f) throw InvalidArgument(fmt::format("save_state: cannot write {}", path));
}

NamedTensors load_state(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw InvalidArgument(fmt::format("load_state: cannot open {}", path));
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  Reader r(path, bytes);
  if (bytes.size() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    r.fail("not a dtr state file (it does not start with \"DTRSTATE\")");
  r.take(sizeof(kMagic), "the magic");
  const auto version = r.get<uint32_t>("the version");
  if (version != kVersion)
    r.fail("format version {}; this build reads version {}", version, kVersion);
  const auto count = r.get<uint32_t>("the entry count");
  if (count > kMaxEntries) r.fail("{} entries, at most {}", count, kMaxEntries);
  NamedTensors out;
  for (uint32_t i = 0; i < count; ++i) out.push_back(read_entry(r, i));
  const size_t body = r.pos();
  const auto stored = r.get<uint64_t>("the checksum");
  if (r.left() != 0) r.fail("{} bytes follow the checksum", r.left());
  const uint64_t actual = fnv1a(bytes.data(), body);
  if (stored != actual)
    r.fail("checksum mismatch (stored {:016x}, computed {:016x}): the file is damaged", stored,
           actual);
  return out;
}

}  // namespace dtr::nn
