// Host storage with process-wide accounting.
#include <atomic>
#include <cstdlib>
#include <new>

#include "check.hpp"
#include "dtr/tensor.hpp"

namespace dtr {

namespace {
constexpr size_t kAlignment = 64;
std::atomic<int64_t> g_bytes_in_use{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_live{0};

void count_allocation(size_t nbytes) {
  auto n = static_cast<int64_t>(nbytes);
  int64_t now = g_bytes_in_use.fetch_add(n) + n;
  int64_t peak = g_peak_bytes.load();
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now)) {
  }
  g_live.fetch_add(1);
}
}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < nbytes)
    throw OutOfMemory(fmt::format("cannot allocate {} bytes on the host", nbytes));
  void* p = rounded ? std::aligned_alloc(kAlignment, rounded) : nullptr;
  if (rounded && !p)
    throw OutOfMemory(fmt::format("out of host memory allocating {} bytes ({} bytes in use)",
                                  nbytes, g_bytes_in_use.load()));
  count_allocation(nbytes);
  return std::shared_ptr<Storage>(new Storage(p, nbytes, nullptr));
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::shared_ptr<void> owner) {
  if (!owner) throw InvalidArgument("Storage::wrap: needs an owner that keeps the memory alive");
  count_allocation(nbytes);
  return std::shared_ptr<Storage>(new Storage(data, nbytes, std::move(owner)));
}

Storage::~Storage() {
  if (!owner_) std::free(data_);
  g_bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes_));
  g_live.fetch_sub(1);
}

MemoryStats cpu_memory_stats() {
  return MemoryStats{g_bytes_in_use.load(), g_peak_bytes.load(), g_live.load()};
}

}  // namespace dtr
