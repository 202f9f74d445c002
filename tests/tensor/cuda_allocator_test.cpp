// Unit tests of the caching device allocator (tensor/cuda/allocator.hpp) on a fake host
// backend: host malloc as device memory, a byte budget as the device's free memory, and
// events the test completes by hand. They need no GPU. The one "[gpu]" case runs a real
// allocate/copy_between round trip where a CUDA device exists and is skipped otherwise.
//
// Thread safety: the fake backend locks its own state; the concurrency case shares one
// allocator among threads, as the runtime does.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dtr/error.hpp"
#include "dtr/tensor.hpp"
#include "tensor/cuda/allocator.hpp"
#include "tensor/cuda/cuda.hpp"

namespace {

using dtr::cuda::AllocatorBackend;
using dtr::cuda::DeviceAllocator;
using dtr::cuda::EventHandle;
using dtr::cuda::StreamHandle;

constexpr size_t MiB = size_t{1} << 20;

// What the fake device holds; shared by the backend (owned by the allocator) and the test.
struct FakeDevice {
  std::mutex mu;
  size_t budget = 0;  // bytes the device has
  size_t used = 0;
  std::map<void*, size_t> live;
  int raw_allocs = 0;
  int failed_allocs = 0;
  int raw_frees = 0;
  int syncs = 0;
  bool fail_records = false;  // record_event throws, as a CUDA error would
  bool fail_syncs = false;
  intptr_t next_event = 1;
  struct EventState {
    StreamHandle stream = nullptr;
    bool done = true;
  };
  std::map<intptr_t, EventState> events;

  explicit FakeDevice(size_t budget) : budget(budget) {}
  ~FakeDevice() {
    for (auto& [p, n] : live) std::free(p);
  }
  // Completes every event recorded on `stream`.
  void complete(StreamHandle stream) {
    std::lock_guard lock(mu);
    for (auto& [id, e] : events)
      if (e.stream == stream) e.done = true;
  }
  int pending_events() {
    std::lock_guard lock(mu);
    int n = 0;
    for (auto& [id, e] : events) n += e.done ? 0 : 1;
    return n;
  }
  size_t live_bytes() {
    std::lock_guard lock(mu);
    return used;
  }
};

class FakeBackend : public AllocatorBackend {
 public:
  explicit FakeBackend(std::shared_ptr<FakeDevice> d) : d_(std::move(d)) {}
  void* raw_alloc(size_t n) override {
    std::lock_guard lock(d_->mu);
    if (d_->used + n > d_->budget) {
      d_->failed_allocs++;
      return nullptr;
    }
    void* p = std::malloc(n);
    REQUIRE(p != nullptr);
    d_->used += n;
    d_->live[p] = n;
    d_->raw_allocs++;
    return p;
  }
  void raw_free(void* p) override {
    std::lock_guard lock(d_->mu);
    auto it = d_->live.find(p);
    REQUIRE(it != d_->live.end());  // only segment bases come back, once
    d_->used -= it->second;
    d_->live.erase(it);
    std::free(p);
    d_->raw_frees++;
  }
  uint64_t free_memory() noexcept override {
    std::lock_guard lock(d_->mu);
    return d_->budget - d_->used;
  }
  EventHandle create_event() override {
    std::lock_guard lock(d_->mu);
    intptr_t id = d_->next_event++;
    d_->events[id] = {};
    return reinterpret_cast<EventHandle>(id);
  }
  void destroy_event(EventHandle e) noexcept override {
    std::lock_guard lock(d_->mu);
    d_->events.erase(reinterpret_cast<intptr_t>(e));
  }
  void record_event(EventHandle e, StreamHandle s) override {
    std::lock_guard lock(d_->mu);
    if (d_->fail_records) throw dtr::DeviceError("cudaEventRecord on cuda:3: fake failure");
    auto& ev = d_->events.at(reinterpret_cast<intptr_t>(e));
    ev.stream = s;
    ev.done = false;
  }
  bool event_done(EventHandle e) override {
    std::lock_guard lock(d_->mu);
    return d_->events.at(reinterpret_cast<intptr_t>(e)).done;
  }
  void synchronize() override {
    std::lock_guard lock(d_->mu);
    if (d_->fail_syncs) throw dtr::DeviceError("cudaDeviceSynchronize on cuda:3: fake failure");
    d_->syncs++;
    for (auto& [id, e] : d_->events) e.done = true;
  }

 private:
  std::shared_ptr<FakeDevice> d_;
};

struct Fixture {
  explicit Fixture(size_t budget = 1024 * MiB, int device = 3)
      : dev(std::make_shared<FakeDevice>(budget)),
        alloc(device, std::make_unique<FakeBackend>(dev)) {}
  std::shared_ptr<FakeDevice> dev;
  DeviceAllocator alloc;
};

StreamHandle stream(intptr_t i) {
  return reinterpret_cast<StreamHandle>(i);
}
const StreamHandle A = stream(0x100);
const StreamHandle B = stream(0x200);
const StreamHandle C = stream(0x300);

char* at(const std::shared_ptr<dtr::Storage>& s) {
  return static_cast<char*>(s->data());
}

}  // namespace

TEST_CASE("cuda allocator: sizes are rounded to 512 bytes; segments by pool") {
  CHECK(DeviceAllocator::round_size(0) == 512);
  CHECK(DeviceAllocator::round_size(1) == 512);
  CHECK(DeviceAllocator::round_size(512) == 512);
  CHECK(DeviceAllocator::round_size(513) == 1024);
  CHECK(DeviceAllocator::round_size(MiB + 1) == MiB + 512);
  CHECK(DeviceAllocator::segment_size(512) == 2 * MiB);
  CHECK(DeviceAllocator::segment_size(MiB) == 2 * MiB);
  CHECK(DeviceAllocator::segment_size(MiB + 512) == 20 * MiB);
  CHECK(DeviceAllocator::segment_size(10 * MiB - 512) == 20 * MiB);
  CHECK(DeviceAllocator::segment_size(10 * MiB) == 10 * MiB);
  CHECK(DeviceAllocator::segment_size(11 * MiB + 512) == 12 * MiB);

  Fixture f;
  auto s = f.alloc.allocate(1000, A);
  CHECK(s->device() == 3);
  CHECK(s->nbytes() == 1000);
  auto st = f.alloc.stats();
  CHECK(st.allocated_bytes == 1024);
  CHECK(st.reserved_bytes == static_cast<int64_t>(2 * MiB));
  CHECK(st.cached_bytes == static_cast<int64_t>(2 * MiB - 1024));

  auto zero = f.alloc.allocate(0, A);  // a block of its own, 512 bytes
  CHECK(zero->nbytes() == 0);
  CHECK(zero->data() != nullptr);
  CHECK(zero->data() != s->data());
  CHECK(f.alloc.stats().allocated_bytes == 1024 + 512);
}

TEST_CASE("cuda allocator: a freed block is reused by its stream, without the driver") {
  Fixture f;
  void* first;
  {
    auto s = f.alloc.allocate(4000, A);
    first = s->data();
  }
  auto st = f.alloc.stats();
  CHECK(st.allocated_bytes == 0);
  CHECK(st.cached_bytes == static_cast<int64_t>(2 * MiB));
  CHECK(st.live_storages == 0);
  auto again = f.alloc.allocate(4000, A);
  CHECK(again->data() == first);
  st = f.alloc.stats();
  CHECK(st.allocations == 2);
  CHECK(st.cache_hits == 1);
  CHECK(st.driver_allocations == 1);
  CHECK(f.dev->raw_allocs == 1);
}

TEST_CASE("cuda allocator: blocks are split out of a segment and merged back") {
  Fixture f;
  SUBCASE("small pool") {
    auto a = f.alloc.allocate(1000, A);
    auto b = f.alloc.allocate(3000, A);
    CHECK(at(b) == at(a) + 1024);  // the remainder of a's segment
    CHECK(f.alloc.stats().driver_allocations == 1);
    CHECK(f.alloc.stats().cache_hits == 1);
    a.reset();
    f.alloc.empty_cache();  // b still lives in the segment: nothing to give back
    CHECK(f.alloc.stats().driver_frees == 0);
    b.reset();
    f.alloc.empty_cache();  // merged into one free segment again
    CHECK(f.alloc.stats().driver_frees == 1);
    CHECK(f.alloc.stats().reserved_bytes == 0);
    CHECK(f.dev->live_bytes() == 0);
  }
  SUBCASE("large pool") {
    auto a = f.alloc.allocate(3 * MiB, A);  // a 20 MiB segment
    char* base = at(a);
    CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(20 * MiB));
    auto b = f.alloc.allocate(5 * MiB, A);
    CHECK(at(b) == at(a) + 3 * MiB);
    auto c = f.alloc.allocate(11 * MiB + 512, A);  // 12 MiB free, but only exactly split
    CHECK(at(c) == at(b) + 5 * MiB);
    CHECK(f.alloc.stats().driver_allocations == 1);
    // 12 MiB - (11 MiB + 512) is under 1 MiB: not split, the whole rest went to c.
    CHECK(f.alloc.stats().allocated_bytes == static_cast<int64_t>(20 * MiB));
    CHECK(f.alloc.stats().cached_bytes == 0);
    b.reset();
    a.reset();  // merges with b's block
    auto d = f.alloc.allocate(8 * MiB, A);
    CHECK(at(d) == base);  // the merged 8 MiB of a and b
    CHECK(at(c) == base + 8 * MiB);
    CHECK(f.alloc.stats().driver_allocations == 1);
  }
  SUBCASE("a small request never takes a large block") {
    { auto big = f.alloc.allocate(3 * MiB, A); }
    auto small = f.alloc.allocate(100, A);
    CHECK(f.alloc.stats().driver_allocations == 2);
    CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(22 * MiB));
  }
}

TEST_CASE("cuda allocator: no reuse across streams") {
  Fixture f;
  void* first;
  {
    auto s = f.alloc.allocate(1000, A);
    first = s->data();
  }
  auto other = f.alloc.allocate(1000, B);
  CHECK(other->data() != first);
  CHECK(f.alloc.stats().driver_allocations == 2);
  CHECK(f.alloc.stats().cache_hits == 0);
  auto back = f.alloc.allocate(1000, A);
  CHECK(back->data() == first);
}

TEST_CASE("cuda allocator: record_stream holds a block until the other streams' events") {
  Fixture f;
  auto s = f.alloc.allocate(1000, A);
  void* p = s->data();
  f.alloc.record_stream(p, B);
  f.alloc.record_stream(p, B);  // once per stream
  f.alloc.record_stream(p, C);
  f.alloc.record_stream(p, A);  // its own stream: nothing to wait for
  s.reset();
  CHECK(f.dev->pending_events() == 2);
  auto st = f.alloc.stats();
  CHECK(st.allocated_bytes == 0);
  CHECK(st.cached_bytes == static_cast<int64_t>(2 * MiB));  // pending counts as cached

  auto x = f.alloc.allocate(1000, A);
  CHECK(x->data() != p);  // the rest of the segment, not the pending block
  f.alloc.empty_cache();  // the segment has a pending block: stays
  CHECK(f.alloc.stats().driver_frees == 0);

  f.dev->complete(B);
  auto y = f.alloc.allocate(1000, A);
  CHECK(y->data() != p);  // C still pending
  f.dev->complete(C);
  auto z = f.alloc.allocate(1000, A);
  CHECK(z->data() == p);
  CHECK(f.alloc.stats().driver_allocations == 1);

  SUBCASE("events are reused") {
    f.alloc.record_stream(z->data(), B);
    z.reset();
    f.dev->complete(B);
    f.alloc.empty_cache();          // polls the events
    CHECK(f.dev->next_event == 3);  // two events made in all
  }
  SUBCASE("pointers it did not hand out are ignored") {
    int local = 0;
    f.alloc.record_stream(&local, B);
    z.reset();
    CHECK(f.dev->pending_events() == 0);
  }
}

TEST_CASE("cuda allocator: a block whose event cannot be recorded is reused only when safe") {
  Fixture f;
  f.dev->fail_records = true;
  auto s = f.alloc.allocate(1000, A);
  void* p = s->data();
  f.alloc.record_stream(p, B);
  SUBCASE("the device is synchronized instead") {
    s.reset();  // never throws from a storage's destructor
    CHECK(f.dev->syncs == 1);
    auto again = f.alloc.allocate(1000, A);
    CHECK(again->data() == p);
  }
  SUBCASE("or, when that fails too, the block is never reused") {
    f.dev->fail_syncs = true;
    s.reset();
    auto again = f.alloc.allocate(1000, A);
    CHECK(again->data() != p);
    again.reset();
    f.alloc.empty_cache();  // its segment cannot go back
    auto st = f.alloc.stats();
    CHECK(st.driver_frees == 0);
    CHECK(st.allocated_bytes == 0);
    CHECK(st.cached_bytes == static_cast<int64_t>(2 * MiB));
  }
}

TEST_CASE("cuda allocator: out of memory frees the cache, retries, then names the numbers") {
  Fixture f(24 * MiB, 2);
  {
    auto a = f.alloc.allocate(3 * MiB, A);  // 20 MiB segment for stream A
  }
  auto b = f.alloc.allocate(3 * MiB, B);  // A's cached segment goes back first
  CHECK(f.alloc.stats().driver_frees == 1);
  CHECK(f.alloc.stats().driver_allocations == 2);
  CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(20 * MiB));

  try {
    auto c = f.alloc.allocate(30 * MiB, B);
    FAIL("expected OutOfMemory");
  } catch (const dtr::OutOfMemory& e) {
    std::string m = e.what();
    CHECK(m.find("out of memory allocating 31457280 bytes on cuda:2") != std::string::npos);
    CHECK(m.find("(4194304 bytes free on the device") != std::string::npos);
    CHECK(m.find(std::to_string(17 * MiB) + " bytes cached by dtr") != std::string::npos);
    CHECK(m.find(std::to_string(3 * MiB) + " allocated)") != std::string::npos);
  }
  auto st = f.alloc.stats();
  CHECK(st.allocations == 2);
  CHECK(st.live_storages == 1);
  // A request that fits what is left, in B's segment, still works.
  auto d = f.alloc.allocate(10 * MiB, B);
  CHECK(f.alloc.stats().cache_hits == 1);
}

TEST_CASE("cuda allocator: a segment of just the block's size when a full one does not fit") {
  Fixture f(10 * MiB);
  auto a = f.alloc.allocate(3 * MiB, A);  // 20 MiB does not fit; 3 MiB does
  CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(3 * MiB));
  CHECK(f.alloc.stats().driver_allocations == 1);
  auto b = f.alloc.allocate(100, A);
  CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(5 * MiB));
}

TEST_CASE("cuda allocator: last resort synchronizes so that pending blocks can go back") {
  Fixture f(20 * MiB);
  {
    auto a = f.alloc.allocate(3 * MiB, A);
    f.alloc.record_stream(a->data(), B);
  }
  CHECK(f.dev->pending_events() == 1);
  auto c = f.alloc.allocate(3 * MiB, C);
  CHECK(f.dev->syncs == 1);
  CHECK(f.alloc.stats().driver_frees == 1);
  CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(20 * MiB));
}

TEST_CASE("cuda allocator: memory limit caps reserved bytes") {
  Fixture f(1024 * MiB, 1);
  CHECK_THROWS_AS(f.alloc.set_memory_limit(-1), dtr::InvalidArgument);
  f.alloc.set_memory_limit(static_cast<int64_t>(4 * MiB));
  CHECK(f.alloc.memory_limit() == static_cast<int64_t>(4 * MiB));
  auto small = f.alloc.allocate(100, A);  // a 2 MiB segment
  try {
    auto big = f.alloc.allocate(3 * MiB, A);  // 2 + 3 MiB > 4 MiB
    FAIL("expected OutOfMemory");
  } catch (const dtr::OutOfMemory& e) {
    std::string m = e.what();
    CHECK(m.find("out of memory allocating 3145728 bytes on cuda:1") != std::string::npos);
    CHECK(m.find("memory limit of 4194304 bytes") != std::string::npos);
  }
  CHECK(f.dev->failed_allocs == 0);  // the driver was not asked
  small.reset();
  auto big = f.alloc.allocate(3 * MiB, A);  // the cached small segment goes back first
  auto st = f.alloc.stats();
  CHECK(st.driver_frees == 1);
  CHECK(st.reserved_bytes == static_cast<int64_t>(3 * MiB));
  f.alloc.set_memory_limit(0);  // no cap
  auto more = f.alloc.allocate(30 * MiB, A);
  CHECK(f.alloc.stats().reserved_bytes == static_cast<int64_t>(33 * MiB));
}

TEST_CASE("cuda allocator: empty_cache returns every free segment") {
  Fixture f;
  std::vector<std::shared_ptr<dtr::Storage>> keep;
  for (StreamHandle s : {A, B, C})
    for (size_t n : {size_t{10}, 700 * size_t{1024}, 2 * MiB, 12 * MiB}) {
      keep.push_back(f.alloc.allocate(n, s));
      keep.push_back(f.alloc.allocate(n + 1, s));
    }
  auto survivor = f.alloc.allocate(64, A);
  auto st = f.alloc.stats();
  CHECK(st.driver_allocations == f.dev->raw_allocs);
  keep.clear();
  f.alloc.empty_cache();
  st = f.alloc.stats();
  CHECK(st.driver_frees == st.driver_allocations - 1);  // survivor's segment stays
  CHECK(st.reserved_bytes == static_cast<int64_t>(2 * MiB));
  CHECK(st.allocated_bytes == 512);
  survivor.reset();
  f.alloc.empty_cache();
  st = f.alloc.stats();
  CHECK(st.reserved_bytes == 0);
  CHECK(st.cached_bytes == 0);
  CHECK(st.driver_frees == st.driver_allocations);
  CHECK(f.dev->live_bytes() == 0);
}

TEST_CASE("cuda allocator: stats") {
  Fixture f;
  auto a = f.alloc.allocate(1000, A);
  auto b = f.alloc.allocate(2 * MiB, A);
  { auto c = f.alloc.allocate(512, A); }
  auto d = f.alloc.allocate(512, A);
  auto st = f.alloc.stats();
  CHECK(st.allocated_bytes == static_cast<int64_t>(1024 + 2 * MiB + 512));
  CHECK(st.peak_allocated_bytes == static_cast<int64_t>(1024 + 2 * MiB + 512));
  CHECK(st.reserved_bytes == static_cast<int64_t>(22 * MiB));
  CHECK(st.cached_bytes == st.reserved_bytes - st.allocated_bytes);
  CHECK(st.allocations == 4);
  CHECK(st.cache_hits == 2);  // c and d from a's segment
  CHECK(st.driver_allocations == 2);
  CHECK(st.driver_frees == 0);
  CHECK(st.live_storages == 3);
  b.reset();
  st = f.alloc.stats();
  CHECK(st.allocated_bytes == 1024 + 512);
  CHECK(st.peak_allocated_bytes == static_cast<int64_t>(1024 + 2 * MiB + 512));
  f.alloc.reset_peak();
  CHECK(f.alloc.stats().peak_allocated_bytes == 1024 + 512);
  CHECK(f.alloc.stats().live_storages == 2);
}

TEST_CASE("cuda allocator: a storage may outlive the allocator object") {
  auto dev = std::make_shared<FakeDevice>(1024 * MiB);
  std::shared_ptr<dtr::Storage> s;
  {
    DeviceAllocator alloc(0, std::make_unique<FakeBackend>(dev));
    s = alloc.allocate(100, A);
    auto t = alloc.allocate(5 * MiB, A);
  }
  CHECK(dev->live_bytes() == 2 * MiB);  // the free large segment went back
  s.reset();
  CHECK(dev->live_bytes() == 0);
}

TEST_CASE("cuda allocator: threads allocating and freeing concurrently") {
  Fixture f;
  constexpr int kThreads = 4;
  constexpr int kIters = 400;
  std::atomic<int> corrupt{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      std::mt19937 rng(1234 + t);
      const size_t sizes[] = {1, 600, 4096, 100000, 1 * MiB, 3 * MiB, 11 * MiB};
      // Two threads share a stream, as two tasks of one dtr stream could not, but the
      // allocator must not care.
      StreamHandle mine = stream(0x1000 + (t % 3));
      std::vector<std::pair<std::shared_ptr<dtr::Storage>, unsigned char>> held;
      for (int i = 0; i < kIters; ++i) {
        size_t n = sizes[rng() % std::size(sizes)];
        auto s = f.alloc.allocate(n, mine);
        unsigned char tag = static_cast<unsigned char>(rng());
        std::memset(s->data(), tag, std::min<size_t>(n, 4096));
        if (rng() % 4 == 0) f.alloc.record_stream(s->data(), stream(0x1000 + (t + 1) % 3));
        held.emplace_back(std::move(s), tag);
        if (held.size() > 6 || rng() % 2) {
          size_t k = rng() % held.size();
          auto& [h, tg] = held[k];
          const auto* bytes = static_cast<const unsigned char*>(h->data());
          for (size_t j = 0; j < std::min<size_t>(h->nbytes(), 4096); ++j)
            if (bytes[j] != tg) {
              corrupt++;
              break;
            }
          held.erase(held.begin() + static_cast<long>(k));
        }
        if (i % 50 == 0) (void)f.alloc.stats();
        if (t == 0 && i % 100 == 0) f.alloc.empty_cache();
      }
    });
  std::thread completer([&] {
    while (!stop) {
      for (int s = 0; s < 3; ++s) f.dev->complete(stream(0x1000 + s));
      std::this_thread::yield();
    }
  });
  for (auto& th : threads) th.join();
  stop = true;
  completer.join();
  CHECK(corrupt == 0);
  auto st = f.alloc.stats();
  CHECK(st.allocations == kThreads * kIters);
  CHECK(st.live_storages == 0);
  CHECK(st.allocated_bytes == 0);
  for (int s = 0; s < 3; ++s) f.dev->complete(stream(0x1000 + s));
  f.alloc.empty_cache();
  st = f.alloc.stats();
  CHECK(st.reserved_bytes == 0);
  CHECK(st.driver_frees == st.driver_allocations);
  CHECK(f.dev->live_bytes() == 0);
}

#ifndef DTR_ALLOCATOR_TEST_STANDALONE
TEST_CASE("cuda allocator [gpu]: allocate and copy_between round trip on a real device") {
  int n = dtr::cuda::device_count();
  if (n == 0) {
    MESSAGE("skipped: no CUDA device: dtr::cuda::device_count() is 0");
    return;
  }
  auto props = dtr::cuda::device_properties(0);
  MESSAGE("cuda:0 is " << props.name << ", " << props.free_memory << " bytes free");
  auto before = dtr::cuda::memory_stats(0);
  std::vector<float> values(3 * 1000 * 1000 + 7);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1000) - 0.5f;
  auto host = dtr::local::from_vector(values);
  auto meta = host.meta();
  {
    auto storage = dtr::cuda::allocate(0, values.size() * sizeof(float));
    CHECK(storage->device() == 0);
    dtr::local::Tensor dev(storage, meta);
    dtr::cuda::copy_between(dev, host);
    auto back = dtr::local::empty(meta.shape, meta.dtype);
    dtr::cuda::copy_between(back, dev);
    CHECK(back.to_vector<float>() == values);
    // A second round trip through a device-to-device copy and a stream.
    dtr::cuda::Stream s(0);
    dtr::cuda::StreamScope scope(0, s.handle());
    dtr::local::Tensor dev2(dtr::cuda::allocate(0, values.size() * sizeof(float)), meta);
    dtr::cuda::copy_between(dev2, dev);
    auto back2 = dtr::local::zeros(meta.shape, meta.dtype);
    dtr::cuda::copy_between(back2, dev2);
    CHECK(back2.to_vector<float>() == values);
    s.synchronize();
  }
  auto after = dtr::cuda::memory_stats(0);
  CHECK(after.allocations == before.allocations + 2);
  CHECK(after.live_storages == before.live_storages);
  dtr::cuda::empty_cache(0);
  CHECK_THROWS_AS(dtr::cuda::allocate(n, 16), dtr::DeviceError);
}
#endif
