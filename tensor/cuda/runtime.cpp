// The CUDA runtime side of the backend (tensor/cuda/cuda.hpp), everything but the kernels:
// devices, the thread-local current streams and StreamScope, Stream and Event, the CUDA
// backend of the caching allocator (tensor/cuda/allocator.hpp) with one immortal allocator
// per device, and copy_between (host <-> device through cached pinned staging buffers,
// pipelined in chunks; device <-> device with cudaMemcpyAsync / cudaMemcpyPeerAsync).
// Every CUDA error becomes a dtr::DeviceError naming the function, the device and CUDA's
// message.
//
// Thread safety: every function is safe from any thread. Current streams are per thread;
// the allocators lock per device; the staging cache and the peer-access set have their own
// mutexes. The allocators and the staging cache are never destroyed (no static destruction
// frees memory under a live storage or after the CUDA runtime has shut down).
#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "dtr/error.hpp"
#include "tensor/cuda/allocator.hpp"
#include "tensor/cuda/cuda.hpp"
#include "tensor/host_copy.hpp"

namespace dtr::cuda {

namespace {

constexpr size_t MiB = size_t{1} << 20;

[[noreturn]] void fail(cudaError_t e, std::string_view what, int device) {
  (void)cudaGetLastError();  // clears the error unless it is sticky
  throw DeviceError(fmt::format("{} on cuda:{}: {} ({})", what, device, cudaGetErrorString(e),
                                cudaGetErrorName(e)));
}

void check(cudaError_t e, std::string_view what, int device) {
  if (e != cudaSuccess) fail(e, what, device);
}

cudaStream_t as_stream(StreamHandle s) {
  return static_cast<cudaStream_t>(s);
}
cudaEvent_t as_event(EventHandle e) {
  return static_cast<cudaEvent_t>(e);
}

struct DeviceInfo {
  int count = 0;
  std::string error;  // why there are none, when cudaGetDeviceCount failed
};

const DeviceInfo& device_info() {
  static const DeviceInfo info = [] {
    DeviceInfo i;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      i.error = fmt::format("cudaGetDeviceCount: {}", cudaGetErrorString(e));
      return i;
    }
    i.count = n;
    return i;
  }();
  return info;
}

// Makes `device` the calling thread's current CUDA device for its scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice", device);
    if (previous_ != device) {
      check(cudaSetDevice(device), "cudaSetDevice", device);
      changed_ = true;
    }
  }
  ~DeviceGuard() {
    if (changed_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

thread_local std::vector<StreamHandle> t_current_streams;

// ---- the allocator's CUDA backend ----

class CudaBackend final : public AllocatorBackend {
 public:
  explicit CudaBackend(int device) : device_(device) {}

  void* raw_alloc(size_t nbytes) override {
    DeviceGuard guard(device_);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, nbytes);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      return nullptr;
    }
    check(e, "cudaMalloc", device_);
    return p;
  }
  void raw_free(void* ptr) override {
    DeviceGuard guard(device_);
    check(cudaFree(ptr), "cudaFree", device_);
  }
  uint64_t free_memory() noexcept override {
    try {
      DeviceGuard guard(device_);
      size_t free = 0, total = 0;
      if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
      }
      return free;
    } catch (...) {
      return 0;
    }
  }
  // The cudaEvent_t is made at the first record, on the device of the stream recorded on
  // (record_stream may name a stream of another device).
  EventHandle create_event() override { return new Ev; }
  void destroy_event(EventHandle handle) noexcept override {
    auto* e = static_cast<Ev*>(handle);
    if (e->event) (void)cudaEventDestroy(e->event);
    delete e;
  }
  void record_event(EventHandle handle, StreamHandle stream) override {
    auto* e = static_cast<Ev*>(handle);
    int device = device_;  // the legacy default stream: this device's
    if (stream)
      check(cudaStreamGetDevice(as_stream(stream), &device), "cudaStreamGetDevice", device_);
    DeviceGuard guard(device);
    if (e->event && e->device != device) {
      (void)cudaEventDestroy(e->event);
      e->event = nullptr;
    }
    if (!e->event) {
      check(cudaEventCreateWithFlags(&e->event, cudaEventDisableTiming), "cudaEventCreateWithFlags",
            device);
      e->device = device;
    }
    check(cudaEventRecord(e->event, as_stream(stream)), "cudaEventRecord", device);
  }
  bool event_done(EventHandle handle) override {
    auto* e = static_cast<Ev*>(handle);
    if (!e->event) return true;
    cudaError_t r = cudaEventQuery(e->event);
    if (r == cudaSuccess) return true;
    if (r == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    fail(r, "cudaEventQuery", e->device);
  }
  void synchronize() override {
    DeviceGuard guard(device_);
    check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device_);
  }

 private:
  struct Ev {
    cudaEvent_t event = nullptr;
    int device = -1;
  };
  int device_;
};

// One allocator per device, made at first use and never destroyed.
DeviceAllocator& device_allocator(int device) {
  static const std::vector<DeviceAllocator*>* all = [] {
    auto* v = new std::vector<DeviceAllocator*>();
    for (int d = 0; d < device_info().count; ++d)
      v->push_back(new DeviceAllocator(d, std::make_unique<CudaBackend>(d)));
    return v;
  }();
  return *(*all)[static_cast<size_t>(device)];
}

// ---- pinned staging buffers ----

// Largest buffer; copies go in such chunks, two buffers in flight (the host copy of one
// chunk overlaps the DMA of the other), so smaller chunks start the overlap sooner.
constexpr size_t kStagingChunk = 16 * MiB;
constexpr size_t kMinStaging = 64 * 1024;  // smallest buffer made
constexpr size_t kMaxStagingCached = 256 * MiB;

// A pinned host buffer with an event marking the end of the last copy that used it.
struct Staging {
  void* ptr = nullptr;
  size_t size = 0;
  cudaEvent_t event = nullptr;
  int event_device = -1;
  bool pending = false;  // event recorded after the last copy that used ptr

  // True while the last copy that used the buffer may still run.
  bool busy() {
    if (!pending) return false;
    cudaError_t e = cudaEventQuery(event);
    if (e == cudaSuccess) {
      pending = false;
      return false;
    }
    (void)cudaGetLastError();  // not ready; an error is reported by wait()
    return true;
  }
  void wait() {
    if (!pending) return;
    check(cudaEventSynchronize(event), "cudaEventSynchronize (staging buffer)", event_device);
    pending = false;
  }
  // Marks the buffer busy until the work queued on `stream` (of `device`) so far is done.
  void record(int device, cudaStream_t stream) {
    if (event && event_device != device) {
      (void)cudaEventDestroy(event);  // it has completed: wait() came before any reuse
      event = nullptr;
    }
    if (!event) {
      check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags",
            device);
      event_device = device;
    }
    check(cudaEventRecord(event, stream), "cudaEventRecord (staging buffer)", device);
    pending = true;
  }
  void destroy() noexcept {
    if (pending && event) (void)cudaEventSynchronize(event);
    if (event) (void)cudaEventDestroy(event);
    if (ptr) (void)cudaFreeHost(ptr);
  }
};

class StagingCache {
 public:
  // A buffer of at least `nbytes` (<= kStagingChunk); may still be in use by a copy
  // (call wait() before writing it). Needs `device` current.
  Staging acquire(size_t nbytes, int device) {
    {
      // An idle cached buffer; else a new one while the cache is not full; else the
      // smallest that fits, which the caller waits for.
      std::lock_guard lock(mu_);
      auto first = free_.lower_bound(nbytes);
      auto pick = free_.end();
      int scanned = 0;
      for (auto it = first; it != free_.end() && scanned < 8; ++it, ++scanned)
        if (!it->second.busy()) {
          pick = it;
          break;
        }
      if (pick == free_.end() && first != free_.end() && cached_ >= kMaxStagingCached / 2)
        pick = first;
      if (pick != free_.end()) {
        Staging s = pick->second;
        cached_ -= s.size;
        free_.erase(pick);
        return s;
      }
    }
    size_t size = kMinStaging;
    while (size < nbytes) size *= 2;
    size = std::min(size, kStagingChunk);
    Staging s;
    s.size = size;
    cudaError_t e = cudaHostAlloc(&s.ptr, size, cudaHostAllocPortable);
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      trim(0);
      e = cudaHostAlloc(&s.ptr, size, cudaHostAllocPortable);
      if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        throw OutOfMemory(fmt::format(
            "out of pinned host memory allocating a {}-byte staging buffer for a copy with "
            "cuda:{}",
            size, device));
      }
    }
    check(e, "cudaHostAlloc (staging buffer)", device);
    return s;
  }
  void release(Staging s) noexcept {
    try {
      std::lock_guard lock(mu_);
      free_.emplace(s.size, s);
      cached_ += s.size;
    } catch (...) {
      s.destroy();
      return;
    }
    trim(kMaxStagingCached);
  }

 private:
  // Frees cached buffers, smallest first, until at most `keep` bytes are cached.
  void trim(size_t keep) noexcept {
    std::vector<Staging> drop;
    {
      std::lock_guard lock(mu_);
      while (cached_ > keep && !free_.empty()) {
        drop.push_back(free_.begin()->second);
        cached_ -= free_.begin()->first;
        free_.erase(free_.begin());
      }
    }
    for (Staging& s : drop) s.destroy();
  }

  std::mutex mu_;
  std::multimap<size_t, Staging> free_;
  size_t cached_ = 0;
};

StagingCache& staging_cache() {
  static StagingCache* cache = new StagingCache;  // never destroyed
  return *cache;
}

// Up to two staging buffers of one copy, returned to the cache at the end of the scope
// (with their pending events: a later user waits for them). A buffer whose state is
// unknown after an error (a copy queued, its event not recorded) is leaked instead.
class StagingPair {
 public:
  StagingPair(size_t chunk, int device) : chunk_(chunk), device_(device) {}
  ~StagingPair() {
    for (int i = 0; i < 2; ++i)
      if (held_[i] && !unsafe_[i]) staging_cache().release(bufs_[i]);
  }
  StagingPair(const StagingPair&) = delete;
  StagingPair& operator=(const StagingPair&) = delete;

  Staging& get(size_t i) {
    if (!held_[i]) {
      bufs_[i] = staging_cache().acquire(chunk_, device_);
      held_[i] = true;
    }
    return bufs_[i];
  }
  // Queues `copy` (an async copy with buffer i on `stream`) and records its end.
  template <typename F>
  void queue(size_t i, cudaStream_t stream, F&& copy) {
    unsafe_[i] = true;
    copy();
    bufs_[i].record(device_, stream);
    unsafe_[i] = false;
  }

 private:
  size_t chunk_;
  int device_;
  Staging bufs_[2];
  bool held_[2] = {false, false};
  bool unsafe_[2] = {false, false};
};

// Host to device: memcpy a chunk into a pinned buffer while the previous chunk's DMA runs.
void host_to_device(void* dst, const void* src, size_t n, int device, cudaStream_t stream) {
  size_t chunk = std::min(n, kStagingChunk);
  StagingPair bufs(chunk, device);
  const auto* from = static_cast<const char*>(src);
  auto* to = static_cast<char*>(dst);
  size_t i = 0;
  for (size_t off = 0; off < n; off += chunk, ++i) {
    size_t len = std::min(chunk, n - off);
    Staging& b = bufs.get(i % 2);
    b.wait();
    dtr::detail::parallel_memcpy(b.ptr, from + off, len);
    bufs.queue(i % 2, stream, [&] {
      check(cudaMemcpyAsync(to + off, b.ptr, len, cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync (host to device)", device);
    });
  }
  // The host bytes are all in pinned buffers: src may be reused now.
}

// Device to host: the DMA of chunk i+1 runs while chunk i is copied out of its buffer.
void device_to_host(void* dst, const void* src, size_t n, int device, cudaStream_t stream) {
  size_t chunk = std::min(n, kStagingChunk);
  size_t chunks = (n + chunk - 1) / chunk;
  StagingPair bufs(chunk, device);
  const auto* from = static_cast<const char*>(src);
  auto* to = static_cast<char*>(dst);
  auto issue = [&](size_t i) {
    size_t off = i * chunk;
    size_t len = std::min(chunk, n - off);
    Staging& b = bufs.get(i % 2);
    b.wait();
    bufs.queue(i % 2, stream, [&] {
      check(cudaMemcpyAsync(b.ptr, from + off, len, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync (device to host)", device);
    });
  };
  issue(0);
  for (size_t i = 0; i < chunks; ++i) {
    if (i + 1 < chunks) issue(i + 1);
    Staging& b = bufs.get(i % 2);
    b.wait();
    size_t off = i * chunk;
    dtr::detail::parallel_memcpy(to + off, b.ptr, std::min(chunk, n - off));
  }
}

// Enables peer access from `device` to `peer` once, where the hardware allows it (else
// cudaMemcpyPeerAsync goes through the host).
void enable_peer_access(int device, int peer) {
  static std::mutex mu;
  static auto* done = new std::set<std::pair<int, int>>;
  std::lock_guard lock(mu);
  if (!done->insert({device, peer}).second) return;
  int can = 0;
  if (cudaDeviceCanAccessPeer(&can, device, peer) != cudaSuccess || !can) {
    (void)cudaGetLastError();
    return;
  }
  DeviceGuard guard(device);
  cudaError_t e = cudaDeviceEnablePeerAccess(peer, 0);
  if (e != cudaSuccess) (void)cudaGetLastError();  // already enabled, or not possible
}

// A contiguous tensor like `like` in a new storage on `device` (its current stream).
local::Tensor device_temporary(int device, const TensorMeta& like) {
  auto meta = TensorMeta::contiguous(like.dtype, like.shape);
  auto storage = allocate(device, static_cast<size_t>(meta.numel()) * element_size(like.dtype));
  return local::Tensor(std::move(storage), meta);
}

}  // namespace

// ---- devices ----

int device_count() {
  try {
    return device_info().count;
  } catch (...) {
    return 0;
  }
}

std::string unavailable_reason() {
  try {
    const DeviceInfo& info = device_info();
    if (info.count > 0) return "";
    return info.error.empty() ? "no CUDA device found" : info.error;
  } catch (const std::exception& e) {
    return e.what();
  }
}

void check_device(int device, std::string_view what) {
  const DeviceInfo& info = device_info();
  if (device >= 0 && device < info.count) return;
  if (info.count == 0 && !info.error.empty())
    throw DeviceError(
        fmt::format("{}: no CUDA device cuda:{} on this machine ({})", what, device, info.error));
  throw DeviceError(fmt::format("{}: no CUDA device cuda:{} on this machine (it has {})", what,
                                device, info.count));
}

DeviceProperties device_properties(int device) {
  check_device(device, "device_properties");
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties", device);
  DeviceProperties out;
  out.index = device;
  out.name = p.name;
  out.total_memory = p.totalGlobalMem;
  out.major = p.major;
  out.minor = p.minor;
  out.multiprocessors = p.multiProcessorCount;
  std::memcpy(out.uuid.data(), p.uuid.bytes, out.uuid.size());
  DeviceGuard guard(device);
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo", device);
  out.free_memory = free;
  return out;
}

void synchronize_device(int device) {
  check_device(device, "synchronize");
  DeviceGuard guard(device);
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize", device);
}

// ---- streams and events ----

StreamHandle current_stream(int device) {
  if (device < 0 || static_cast<size_t>(device) >= t_current_streams.size()) return nullptr;
  return t_current_streams[static_cast<size_t>(device)];
}

StreamScope::StreamScope(int device, StreamHandle stream)
    : device_(device), previous_(nullptr), previous_device_(0) {
  check_device(device, "StreamScope");
  check(cudaGetDevice(&previous_device_), "cudaGetDevice", device);
  check(cudaSetDevice(device), "cudaSetDevice", device);
  auto index = static_cast<size_t>(device);
  if (t_current_streams.size() <= index) t_current_streams.resize(index + 1, nullptr);
  previous_ = t_current_streams[index];
  t_current_streams[index] = stream;
}

StreamScope::~StreamScope() {
  t_current_streams[static_cast<size_t>(device_)] = previous_;
  if (previous_device_ != device_) (void)cudaSetDevice(previous_device_);
}

Stream::Stream(int device) : device_(device) {
  check_device(device, "Stream");
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags", device);
  stream_ = s;
}

Stream::~Stream() {
  if (stream_) (void)cudaStreamDestroy(as_stream(stream_));
}

void Stream::synchronize() const {
  check(cudaStreamSynchronize(as_stream(stream_)), "cudaStreamSynchronize", device_);
}

bool Stream::query() const {
  cudaError_t e = cudaStreamQuery(as_stream(stream_));
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  fail(e, "cudaStreamQuery", device_);
}

Event::Event(int device, bool timing) : device_(device) {
  check_device(device, "Event");
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming),
        "cudaEventCreateWithFlags", device);
  event_ = e;
}

Event::~Event() {
  if (event_) (void)cudaEventDestroy(as_event(event_));
}

void Event::record(StreamHandle stream) {
  DeviceGuard guard(device_);  // the legacy default stream: this device's
  check(cudaEventRecord(as_event(event_), as_stream(stream)), "cudaEventRecord", device_);
}

void Event::block(StreamHandle stream) const {
  check(cudaStreamWaitEvent(as_stream(stream), as_event(event_), 0), "cudaStreamWaitEvent",
        device_);
}

bool Event::query() const {
  cudaError_t e = cudaEventQuery(as_event(event_));
  if (e == cudaSuccess) return true;
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  fail(e, "cudaEventQuery", device_);
}

void Event::synchronize() const {
  check(cudaEventSynchronize(as_event(event_)), "cudaEventSynchronize", device_);
}

float Event::elapsed_ms(const Event& end) const {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, as_event(event_), as_event(end.event_)), "cudaEventElapsedTime",
        device_);
  return ms;
}

// ---- CUDA graphs ----

namespace {
thread_local bool t_capturing = false;  // this thread records a CUDA graph (allocate refuses)
}  // namespace

Graph::Graph(int device, StreamHandle stream, const std::function<void()>& fn) : device_(device) {
  check_device(device, "CUDA graph capture");
  if (!stream)
    throw DeviceError(fmt::format(
        "CUDA graph capture on cuda:{}: the legacy default stream cannot be captured", device));
  DeviceGuard guard(device);
  cudaStream_t s = as_stream(stream);
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture",
        device);
  std::exception_ptr thrown;
  t_capturing = true;
  try {
    fn();
  } catch (...) {
    thrown = std::current_exception();
  }
  t_capturing = false;
  cudaGraph_t g = nullptr;
  cudaError_t e = cudaStreamEndCapture(s, &g);
  if (thrown || e != cudaSuccess) {
    if (g) (void)cudaGraphDestroy(g);
    (void)cudaGetLastError();
    if (thrown) std::rethrow_exception(thrown);
    fail(e, "cudaStreamEndCapture", device);
  }
  graph_ = g;
  cudaGraphExec_t exec = nullptr;
#if CUDART_VERSION >= 12000
  e = cudaGraphInstantiate(&exec, g, 0);
#else
  e = cudaGraphInstantiate(&exec, g, nullptr, nullptr, 0);
#endif
  if (e != cudaSuccess) {
    (void)cudaGraphDestroy(g);
    graph_ = nullptr;
    fail(e, "cudaGraphInstantiate", device);
  }
  exec_ = exec;
}

Graph::~Graph() {
  if (exec_) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
  if (graph_) (void)cudaGraphDestroy(static_cast<cudaGraph_t>(graph_));
}

void Graph::launch(StreamHandle stream) const {
  DeviceGuard guard(device_);
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), as_stream(stream)), "cudaGraphLaunch",
        device_);
}

// ---- memory ----

std::shared_ptr<Storage> allocate(int device, size_t nbytes) {
  check_device(device, "allocate");
  if (t_capturing)
    throw DeviceError(fmt::format(
        "allocate of {} bytes on cuda:{} while a CUDA graph is captured (captured work must "
        "not allocate)",
        nbytes, device));
  return device_allocator(device).allocate(nbytes, current_stream(device));
}

void record_stream(const Storage& storage, StreamHandle stream) {
  if (storage.device() < 0) return;  // host memory: nothing to hold back
  check_device(storage.device(), "record_stream");
  device_allocator(storage.device()).record_stream(storage.data(), stream);
}

DeviceMemoryStats memory_stats(int device) {
  check_device(device, "memory_stats");
  return device_allocator(device).stats();
}

void empty_cache(int device) {
  check_device(device, "empty_cache");
  device_allocator(device).empty_cache();
}

void set_memory_limit(int device, int64_t bytes) {
  check_device(device, "set_memory_limit");
  device_allocator(device).set_memory_limit(bytes);
}

// ---- host <-> device ----

void copy_between(const local::Tensor& dst, const local::Tensor& src) {
  if (!dst.defined() || !src.defined())
    throw InvalidArgument("copy_between: an operand is an undefined tensor");
  if (dst.shape() != src.shape())
    throw ShapeError(fmt::format("copy_between: shapes differ ({} and {})", describe(dst.meta()),
                                 describe(src.meta())));
  if (dst.dtype() != src.dtype())
    throw DTypeError(fmt::format("copy_between: dtypes differ ({} and {})", describe(dst.meta()),
                                 describe(src.meta())));
  const int dd = dst.storage()->device();
  const int sd = src.storage()->device();
  if (dd < 0 && sd < 0)
    throw InvalidArgument("copy_between: both tensors are on the host (use copy_)");
  const size_t n = static_cast<size_t>(src.numel()) * element_size(src.dtype());
  if (n == 0) {
    if (dd >= 0) check_device(dd, "copy_between");
    if (sd >= 0) check_device(sd, "copy_between");
    return;
  }

  if (sd < 0) {  // host to device
    check_device(dd, "copy to cuda");
    local::Tensor from = src.is_contiguous() ? src : src.contiguous();
    DeviceGuard guard(dd);
    auto stream = as_stream(current_stream(dd));
    if (dst.is_contiguous()) {
      host_to_device(dst.raw_data(), from.raw_data(), n, dd, stream);
    } else {
      local::Tensor tmp = device_temporary(dd, dst.meta());
      host_to_device(tmp.raw_data(), from.raw_data(), n, dd, stream);
      copy_into(dst, tmp);  // same stream: ordered after the upload
    }
    return;
  }

  if (dd < 0) {  // device to host
    check_device(sd, "copy from cuda");
    DeviceGuard guard(sd);
    auto stream = as_stream(current_stream(sd));
    local::Tensor from = src;
    if (!src.is_contiguous()) {
      from = device_temporary(sd, src.meta());
      copy_into(from, src);
    }
    if (dst.is_contiguous()) {
      device_to_host(dst.raw_data(), from.raw_data(), n, sd, stream);
    } else {
      local::Tensor tmp = local::empty(dst.shape(), dst.dtype());
      device_to_host(tmp.raw_data(), from.raw_data(), n, sd, stream);
      local::Tensor out = dst;
      out.copy_(tmp);
    }
    return;
  }

  // device to device, on dst's current stream
  check_device(dd, "copy to cuda");
  check_device(sd, "copy from cuda");
  if (sd == dd) {
    DeviceGuard guard(dd);
    auto stream = as_stream(current_stream(dd));
    if (dst.is_contiguous() && src.is_contiguous())
      check(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), n, cudaMemcpyDeviceToDevice, stream),
            "cudaMemcpyAsync (device to device)", dd);
    else
      copy_into(dst, src);
    return;
  }
  enable_peer_access(dd, sd);
  StreamHandle dst_stream = current_stream(dd);
  local::Tensor from = src;
  const bool staged = !src.is_contiguous();
  if (staged) {
    // Made contiguous on src's device and its current stream; dst's stream waits for that.
    DeviceGuard guard(sd);
    from = device_temporary(sd, src.meta());
    copy_into(from, src);
    Event ready(sd);
    ready.record(current_stream(sd));
    DeviceGuard to_dst(dd);
    ready.block(dst_stream);
  }
  {
    DeviceGuard guard(dd);
    local::Tensor to = dst.is_contiguous() ? dst : device_temporary(dd, dst.meta());
    check(cudaMemcpyPeerAsync(to.raw_data(), dd, from.raw_data(), sd, n, as_stream(dst_stream)),
          fmt::format("cudaMemcpyPeerAsync (from cuda:{})", sd), dd);
    if (!dst.is_contiguous()) copy_into(dst, to);  // dst's stream: after the copy
  }
  if (staged) {
    // The temporary goes back to the cache of src's stream: that stream waits for the
    // copy, so that no later use of the block there overtakes it.
    Event copied(dd);
    copied.record(dst_stream);
    DeviceGuard guard(sd);
    copied.block(current_stream(sd));
  }
}

}  // namespace dtr::cuda
