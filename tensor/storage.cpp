// Host storage with process-wide accounting.
#include <sys/mman.h>

#include <atomic>
#include <cstdint>
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
std::atomic<int64_t> g_limit{0};

// Counts nbytes in, or throws OutOfMemory (counting nothing) when that passes the limit.
// Returns the bytes in use with them, for note_peak once the memory is there.
int64_t count_allocation(size_t nbytes) {
  auto n = static_cast<int64_t>(nbytes);
  int64_t limit = g_limit.load(std::memory_order_relaxed);
  int64_t now;
  if (limit > 0) {
    int64_t in_use = g_bytes_in_use.load();
    do {
      if (n > limit - in_use)
        throw OutOfMemory(fmt::format(
            "allocating {} bytes would pass the memory limit of {} bytes ({} bytes in use)", n,
            limit, in_use));
    } while (!g_bytes_in_use.compare_exchange_weak(in_use, in_use + n));
    now = in_use + n;
  } else {
    now = g_bytes_in_use.fetch_add(n) + n;
  }
  g_live.fetch_add(1);
  return now;
}

// The peak counts memory that was had: an allocation that failed leaves it as it was.
void note_peak(int64_t now) {
  int64_t peak = g_peak_bytes.load();
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now)) {
  }
}

// Large buffers are aligned to 2 MiB and marked for transparent huge pages (where the
// kernel has them in "madvise" mode): their first touch takes one fault per 2 MiB instead of
// one per 4 KiB. Filling a fresh 256 MiB tensor (a device-to-host copy, a received
// message) is otherwise dominated by 65536 page faults, more so in virtual machines.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugeMin = size_t{16} << 20;

void* allocate_host(size_t rounded) {
  if (rounded < kHugeMin) return rounded ? std::aligned_alloc(kAlignment, rounded) : nullptr;
  size_t huge = (rounded + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, huge);
#ifdef MADV_HUGEPAGE
  if (p) (void)madvise(p, huge, MADV_HUGEPAGE);  // advice only: without THP nothing changes
#endif
  return p;
}
}  // namespace

std::shared_ptr<Storage> Storage::allocate(size_t nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded < nbytes || rounded > SIZE_MAX - kHugePage)
    throw OutOfMemory(fmt::format("cannot allocate {} bytes on the host", nbytes));
  const int64_t in_use = count_allocation(nbytes);  // throws past the limit, before allocating
  void* p = allocate_host(rounded);
  if (rounded && !p) {
    g_bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes));
    g_live.fetch_sub(1);
    throw OutOfMemory(fmt::format("out of host memory allocating {} bytes ({} bytes in use)",
                                  nbytes, g_bytes_in_use.load()));
  }
  try {
    auto storage = std::shared_ptr<Storage>(new Storage(p, nbytes, nullptr));
    note_peak(in_use);
    return storage;
  } catch (...) {
    std::free(p);
    g_bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes));
    g_live.fetch_sub(1);
    throw;
  }
}

std::shared_ptr<Storage> Storage::wrap(void* data, size_t nbytes, std::shared_ptr<void> owner) {
  if (!owner) throw InvalidArgument("Storage::wrap: needs an owner that keeps the memory alive");
  const int64_t in_use = count_allocation(nbytes);
  try {
    auto storage = std::shared_ptr<Storage>(new Storage(data, nbytes, std::move(owner)));
    note_peak(in_use);
    return storage;
  } catch (...) {
    g_bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes));
    g_live.fetch_sub(1);
    throw;
  }
}

std::shared_ptr<Storage> Storage::wrap_device(int device, void* data, size_t nbytes,
                                              std::shared_ptr<void> owner) {
  if (!owner) throw InvalidArgument("Storage::wrap_device: needs an owner that frees the memory");
  if (device < 0) throw InvalidArgument(fmt::format("Storage::wrap_device: device {}", device));
  return std::shared_ptr<Storage>(new Storage(data, nbytes, std::move(owner), device));
}

Storage::~Storage() {
  if (device_ >= 0) return;  // owner_ (the allocator's block) releases it
  if (!owner_) std::free(data_);
  g_bytes_in_use.fetch_sub(static_cast<int64_t>(nbytes_));
  g_live.fetch_sub(1);
}

void set_cpu_memory_limit(int64_t bytes) {
  if (bytes < 0) throw InvalidArgument(fmt::format("memory limit {} is negative", bytes));
  g_limit.store(bytes);
}

int64_t cpu_memory_limit() {
  return g_limit.load();
}

MemoryStats cpu_memory_stats() {
  return MemoryStats{g_bytes_in_use.load(), g_peak_bytes.load(), g_live.load()};
}

}  // namespace dtr
