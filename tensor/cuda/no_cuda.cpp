// The CUDA backend where dtr was built without CUDA (DTR_WITH_CUDA=OFF): no devices, and
// everything that would touch one throws DeviceError saying so.
#include <fmt/format.h>

#include "tensor/cuda/cuda.hpp"

namespace dtr::cuda {

namespace {
[[noreturn]] void no_cuda(std::string_view what) {
  throw DeviceError(fmt::format(
      "{}: dtr was built without CUDA (DTR_WITH_CUDA=OFF); rebuild where nvcc is found", what));
}
}  // namespace

int device_count() {
  return 0;
}
std::string unavailable_reason() {
  return "dtr was built without CUDA (DTR_WITH_CUDA=OFF)";
}
DeviceProperties device_properties(int device) {
  no_cuda(fmt::format("device_properties of cuda:{}", device));
}
void check_device(int device, std::string_view what) {
  no_cuda(fmt::format("{} (cuda:{})", what, device));
}
void synchronize_device(int) {
  no_cuda("synchronize");
}
StreamHandle current_stream(int) {
  return nullptr;
}
StreamScope::StreamScope(int device, StreamHandle stream)
    : device_(device), previous_(stream), previous_device_(-1) {
  no_cuda("stream");
}
StreamScope::~StreamScope() = default;
Stream::Stream(int device) : device_(device) {
  no_cuda("stream");
}
Stream::~Stream() = default;
void Stream::synchronize() const {}
bool Stream::query() const {
  return true;
}
Event::Event(int device, bool) : device_(device) {
  no_cuda("event");
}
Event::~Event() = default;
void Event::record(StreamHandle) {}
void Event::block(StreamHandle) const {}
bool Event::query() const {
  return true;
}
void Event::synchronize() const {}
float Event::elapsed_ms(const Event&) const {
  return 0;
}
Graph::Graph(int device, StreamHandle, const std::function<void()>&) : device_(device) {
  no_cuda(fmt::format("CUDA graph capture on cuda:{}", device));
}
Graph::~Graph() = default;
void Graph::launch(StreamHandle) const {
  no_cuda(fmt::format("CUDA graph launch on cuda:{}", device_));
}
std::shared_ptr<Storage> allocate(int device, size_t) {
  no_cuda(fmt::format("allocate on cuda:{}", device));
}
void record_stream(const Storage&, StreamHandle) {}
DeviceMemoryStats memory_stats(int device) {
  no_cuda(fmt::format("memory_stats(cuda:{})", device));
}
void empty_cache(int device) {
  no_cuda(fmt::format("empty_cache(cuda:{})", device));
}
void set_memory_limit(int device, int64_t) {
  no_cuda(fmt::format("set_memory_limit(cuda:{})", device));
}
void copy_between(const local::Tensor& dst, const local::Tensor& src) {
  auto where = [](int d) { return d < 0 ? std::string("cpu") : fmt::format("cuda:{}", d); };
  no_cuda(fmt::format("copy from {} to {}", where(src.device()), where(dst.device())));
}
void run_kernel(OpId op, std::span<const local::Tensor>, const OpAttrs&, const local::Tensor&) {
  no_cuda(op_def(op).name);
}
void copy_into(const local::Tensor&, const local::Tensor&) {
  no_cuda("copy_");
}
void fill(const local::Tensor&, Scalar) {
  no_cuda("fill_");
}

}  // namespace dtr::cuda
