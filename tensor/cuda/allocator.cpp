// The caching device allocator (tensor/cuda/allocator.hpp has the design): pools of free
// blocks per stream, split and merged within driver segments, reuse across streams gated by
// events, out-of-memory recovery and stats. No CUDA header: the driver is an
// AllocatorBackend.
//
// Thread safety: all state of a device lives in DeviceAllocator::State behind its mutex;
// every entry point (including a storage owner's deleter) locks it.
#include "tensor/cuda/allocator.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dtr/error.hpp"

namespace dtr::cuda {

namespace {

// Requests past this cannot be rounded without overflow; no device has that much anyway.
constexpr size_t kMaxRequest = size_t{1} << 60;

struct Block {
  void* ptr = nullptr;
  size_t size = 0;                // rounded bytes of this block
  StreamHandle stream = nullptr;  // the stream its segment belongs to
  bool small = false;             // in the small pool (its segment is small)
  enum class Status { Allocated, Pending, Free } status = Status::Free;
  int pending_events = 0;  // events still to complete before reuse
  bool lost = false;       // could not be made safe to reuse: never reused
  Block* prev = nullptr;   // neighbours within the segment, by address
  Block* next = nullptr;
  std::vector<StreamHandle> stream_uses;  // streams other than `stream` that used it
};

struct BlockLess {
  bool operator()(const Block* a, const Block* b) const {
    if (a->stream != b->stream) return std::less<StreamHandle>()(a->stream, b->stream);
    if (a->size != b->size) return a->size < b->size;
    return std::less<void*>()(a->ptr, b->ptr);
  }
};

using Pool = std::set<Block*, BlockLess>;

}  // namespace

struct DeviceAllocator::State {
  State(int device, std::unique_ptr<AllocatorBackend> backend)
      : device(device), backend(std::move(backend)) {}
  ~State();

  int device;
  std::unique_ptr<AllocatorBackend> backend;
  mutable std::mutex mu;
  Pool small_pool;
  Pool large_pool;
  std::unordered_set<Block*> segments;                // first block of every segment
  std::unordered_map<const void*, Block*> allocated;  // by ptr
  std::vector<std::pair<EventHandle, Block*>> pending;
  std::vector<EventHandle> spare_events;
  DeviceMemoryStats st;  // cached_bytes derived in stats()
  int64_t limit = 0;

  Pool& pool_of(const Block* b) { return b->small ? small_pool : large_pool; }

  // All below: with mu held.
  Block* find_free(Pool& pool, StreamHandle stream, size_t size);
  void free_block(Block* b);
  void process_events();
  size_t release_cached();
  Block* alloc_segment(size_t rounded, StreamHandle stream, bool small, size_t nbytes);
  Block* try_raw(size_t size, StreamHandle stream, bool small);
  EventHandle take_event();
  int64_t cached() const { return st.reserved_bytes - st.allocated_bytes; }

  void release(Block* b) noexcept;  // a storage's owner was dropped
};

namespace {
struct Owner {
  std::shared_ptr<DeviceAllocator::State> state;
  void operator()(void* block) const noexcept { state->release(static_cast<Block*>(block)); }
};
}  // namespace

DeviceAllocator::State::~State() {
  for (auto& [event, block] : pending) backend->destroy_event(event);
  for (EventHandle e : spare_events) backend->destroy_event(e);
  for (Block* head : segments) {
    try {
      backend->raw_free(head->ptr);
    } catch (...) {
      // Nothing can be reported from here; the memory is lost to the process.
    }
    for (Block* b = head; b;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

Block* DeviceAllocator::State::find_free(Pool& pool, StreamHandle stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  return *it;
}

// Makes b reusable: merges it with free neighbours and puts the result in its pool.
void DeviceAllocator::State::free_block(Block* b) {
  Pool& pool = pool_of(b);
  if (Block* p = b->prev; p && p->status == Block::Status::Free) {
    pool.erase(p);
    p->size += b->size;
    p->next = b->next;
    if (b->next) b->next->prev = p;
    delete b;
    b = p;
  }
  if (Block* n = b->next; n && n->status == Block::Status::Free) {
    pool.erase(n);
    b->size += n->size;
    b->next = n->next;
    if (n->next) n->next->prev = b;
    delete n;
  }
  b->status = Block::Status::Free;
  pool.insert(b);
}

void DeviceAllocator::State::process_events() {
  for (size_t i = 0; i < pending.size();) {
    auto [event, block] = pending[i];
    if (!backend->event_done(event)) {
      ++i;
      continue;
    }
    pending[i] = pending.back();
    pending.pop_back();
    spare_events.push_back(event);
    if (--block->pending_events == 0 && !block->lost) free_block(block);
  }
}

// Returns every free whole segment to the backend; the bytes released.
size_t DeviceAllocator::State::release_cached() {
  size_t released = 0;
  for (Pool* pool : {&small_pool, &large_pool}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      backend->raw_free(b->ptr);  // on a throw, the block stays cached
      it = pool->erase(it);
      segments.erase(b);
      st.reserved_bytes -= static_cast<int64_t>(b->size);
      st.driver_frees++;
      released += b->size;
      delete b;
    }
  }
  return released;
}

EventHandle DeviceAllocator::State::take_event() {
  if (spare_events.empty()) return backend->create_event();
  EventHandle e = spare_events.back();
  spare_events.pop_back();
  return e;
}

Block* DeviceAllocator::State::try_raw(size_t size, StreamHandle stream, bool small) {
  if (limit > 0 && st.reserved_bytes + static_cast<int64_t>(size) > limit) return nullptr;
  auto head = std::make_unique<Block>();
  void* p = backend->raw_alloc(size);
  if (!p) return nullptr;
  head->ptr = p;
  head->size = size;
  head->stream = stream;
  head->small = small;
  try {
    segments.insert(head.get());
  } catch (...) {
    backend->raw_free(p);
    throw;
  }
  st.reserved_bytes += static_cast<int64_t>(size);
  st.driver_allocations++;
  return head.release();
}

Block* DeviceAllocator::State::alloc_segment(size_t rounded, StreamHandle stream, bool small,
                                             size_t nbytes) {
  size_t segment = DeviceAllocator::segment_size(rounded);
  if (Block* b = try_raw(segment, stream, small)) return b;
  // Out of memory (or past the limit): give the cache back to the driver and retry, also
  // with a segment of just the block's size.
  release_cached();
  if (Block* b = try_raw(segment, stream, small)) return b;
  if (segment != rounded)
    if (Block* b = try_raw(rounded, stream, small)) return b;
  // Last resort: wait for the device so that every block waiting for events is free, and
  // give those back too.
  if (!pending.empty()) {
    backend->synchronize();
    process_events();
    release_cached();
    if (Block* b = try_raw(segment, stream, small)) return b;
    if (segment != rounded)
      if (Block* b = try_raw(rounded, stream, small)) return b;
  }
  if (limit > 0 && st.reserved_bytes + static_cast<int64_t>(rounded) > limit)
    throw OutOfMemory(fmt::format(
        "out of memory allocating {} bytes on cuda:{}: past its memory limit of {} bytes "
        "({} bytes reserved: {} allocated, {} cached by dtr)",
        nbytes, device, limit, st.reserved_bytes, st.allocated_bytes, cached()));
  throw OutOfMemory(fmt::format(
      "out of memory allocating {} bytes on cuda:{} ({} bytes free on the device, {} bytes "
      "cached by dtr, {} allocated)",
      nbytes, device, backend->free_memory(), cached(), st.allocated_bytes));
}

void DeviceAllocator::State::release(Block* b) noexcept {
  std::lock_guard lock(mu);
  allocated.erase(b->ptr);
  st.allocated_bytes -= static_cast<int64_t>(b->size);
  st.live_storages--;
  if (b->stream_uses.empty()) {
    free_block(b);
    return;
  }
  // Other streams used the block: reusable once the work they have queued so far is done.
  b->status = Block::Status::Pending;
  bool failed = false;
  for (StreamHandle s : b->stream_uses) {
    EventHandle e = nullptr;
    try {
      e = take_event();
      backend->record_event(e, s);
      pending.emplace_back(e, b);
      b->pending_events++;
    } catch (...) {
      if (e) spare_events.push_back(e);  // unrecorded or failed: not waited on
      failed = true;
    }
  }
  b->stream_uses.clear();
  if (failed) {
    // An event could not be recorded: safe only once the whole device is idle.
    try {
      backend->synchronize();
    } catch (...) {
      b->lost = true;  // never reused; its memory counts as cached until the end
    }
  }
  if (b->pending_events == 0 && !b->lost) free_block(b);
}

DeviceAllocator::DeviceAllocator(int device, std::unique_ptr<AllocatorBackend> backend)
    : device_(device), state_(std::make_shared<State>(device, std::move(backend))) {}

DeviceAllocator::~DeviceAllocator() {
  std::lock_guard lock(state_->mu);
  try {
    state_->process_events();
    state_->release_cached();
  } catch (...) {
    // The rest goes back when the state is destroyed.
  }
}

size_t DeviceAllocator::round_size(size_t nbytes) {
  if (nbytes == 0) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t DeviceAllocator::segment_size(size_t rounded) {
  if (rounded <= kSmallSize) return kSmallSegment;
  if (rounded < kMinLargeAlloc) return kLargeSegment;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

std::shared_ptr<Storage> DeviceAllocator::allocate(size_t nbytes, StreamHandle stream) {
  State& s = *state_;
  Block* b;
  {
    std::lock_guard lock(s.mu);
    if (nbytes > kMaxRequest)
      throw OutOfMemory(fmt::format(
          "out of memory allocating {} bytes on cuda:{} ({} bytes free on the device, {} "
          "bytes cached by dtr, {} allocated)",
          nbytes, device_, s.backend->free_memory(), s.cached(), s.st.allocated_bytes));
    s.process_events();
    size_t rounded = round_size(nbytes);
    bool small = rounded <= kSmallSize;
    Pool& pool = small ? s.small_pool : s.large_pool;
    b = s.find_free(pool, stream, rounded);
    const bool hit = b != nullptr;
    if (hit)
      pool.erase(b);
    else
      b = s.alloc_segment(rounded, stream, small, nbytes);
    b->status = Block::Status::Allocated;  // before a split, so that the rest stays apart
    try {
      size_t remaining = b->size - rounded;
      if (small ? remaining >= kMinBlockSize : remaining > kSmallSize) {
        auto* rest = new Block;
        rest->ptr = static_cast<char*>(b->ptr) + rounded;
        rest->size = remaining;
        rest->stream = b->stream;
        rest->small = b->small;
        rest->prev = b;
        rest->next = b->next;
        if (b->next) b->next->prev = rest;
        b->next = rest;
        b->size = rounded;
        s.free_block(rest);
      }
      s.allocated.emplace(b->ptr, b);
    } catch (...) {
      s.free_block(b);  // back to the cache, merged with its rest
      throw;
    }
    if (hit) s.st.cache_hits++;
    s.st.allocated_bytes += static_cast<int64_t>(b->size);
    s.st.peak_allocated_bytes = std::max(s.st.peak_allocated_bytes, s.st.allocated_bytes);
    s.st.allocations++;
    s.st.live_storages++;
  }
  // From here the owner returns the block (also when making the storage throws).
  std::shared_ptr<void> owner(static_cast<void*>(b), Owner{state_});
  return Storage::wrap_device(device_, b->ptr, nbytes, std::move(owner));
}

void DeviceAllocator::record_stream(const void* ptr, StreamHandle stream) {
  std::lock_guard lock(state_->mu);
  auto it = state_->allocated.find(ptr);
  if (it == state_->allocated.end()) return;
  Block* b = it->second;
  if (b->stream == stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end())
    b->stream_uses.push_back(stream);
}

DeviceMemoryStats DeviceAllocator::stats() const {
  std::lock_guard lock(state_->mu);
  DeviceMemoryStats out = state_->st;
  out.cached_bytes = state_->cached();
  return out;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard lock(state_->mu);
  state_->st.peak_allocated_bytes = state_->st.allocated_bytes;
}

void DeviceAllocator::empty_cache() {
  std::lock_guard lock(state_->mu);
  state_->process_events();
  state_->release_cached();
}

void DeviceAllocator::set_memory_limit(int64_t bytes) {
  if (bytes < 0)
    throw InvalidArgument(
        fmt::format("set_memory_limit(cuda:{}): limit {} is negative", device_, bytes));
  std::lock_guard lock(state_->mu);
  state_->limit = bytes;
}

int64_t DeviceAllocator::memory_limit() const {
  std::lock_guard lock(state_->mu);
  return state_->limit;
}

}  // namespace dtr::cuda
