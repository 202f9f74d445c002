// Failures and stats (worker/failures.hpp).
#include "worker/failures.hpp"

#include <fmt/format.h>

#include "dtr/tensor.hpp"
#include "tensor/device_runtime.hpp"

namespace dtr::worker::detail {

using protocol::RemoteFailure;
using protocol::TensorId;

namespace {
thread_local ReplayNote* t_note = nullptr;
}  // namespace

ReplayNote::ReplayNote(uint64_t graph, uint64_t replay)
    : graph_(graph), replay_(replay), previous_(t_note) {
  t_note = this;
}

ReplayNote::~ReplayNote() {
  t_note = previous_;
}

std::string ReplayNote::suffix() {
  if (!t_note) return {};
  return fmt::format(" (replay {} of graph {}, command {} of its program here)", t_note->replay_,
                     t_note->graph_, t_note->command_);
}

RemoteFailure make_failure(TensorId tensor, std::string_view op, std::string message) {
  RemoteFailure f;
  f.tensor = tensor;
  f.op = std::string(op);
  f.message = std::move(message);
  f.message += ReplayNote::suffix();
  f.cause_tensor = tensor;
  f.cause_op = f.op;
  f.cause_message = f.message;
  return f;
}

Failure dependent_failure(TensorId tensor, std::string_view op, TensorId input,
                          const RemoteFailure& cause) {
  auto f = std::make_shared<RemoteFailure>();
  f->tensor = tensor;
  f->op = std::string(op);
  f->message = fmt::format("input %{} is failed", input);
  f->cause_tensor = cause.cause_tensor;
  f->cause_op = cause.cause_op;
  f->cause_message = cause.cause_message;
  return f;
}

Failure FailureLog::root(TensorId tensor, std::string_view op, std::string message,
                         int32_t device) {
  auto f = std::make_shared<RemoteFailure>(make_failure(tensor, op, std::move(message)));
  f->device = device;
  roots_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (list_.size() < protocol::kMaxErrorsPerReply) {
    list_.push_back(*f);
  } else {
    ++dropped_;
  }
  return f;
}

void FailureLog::mark_reported(const RemoteFailure& f) {
  std::lock_guard lock(mu_);
  for (auto it = list_.begin(); it != list_.end(); ++it) {
    if (it->tensor == f.cause_tensor && it->op == f.cause_op && it->message == f.cause_message) {
      list_.erase(it);
      return;
    }
  }
}

std::vector<RemoteFailure> FailureLog::take_for_sync(const std::string& device_failure) {
  std::vector<RemoteFailure> failures;
  {
    std::lock_guard lock(mu_);
    failures = std::move(list_);
    list_.clear();
    if (dropped_ > 0) {
      RemoteFailure more = make_failure(
          protocol::kNoTensor, "sync", fmt::format("{} more failures were not recorded", dropped_));
      if (failures.size() >= protocol::kMaxErrorsPerReply) failures.pop_back();
      failures.push_back(std::move(more));
    }
    dropped_ = 0;
  }
  if (!device_failure.empty() && failures.size() < protocol::kMaxErrorsPerReply)
    failures.push_back(
        make_failure(protocol::kNoTensor, "sync", "CUDA work failed: " + device_failure));
  return failures;
}

size_t FailureLog::unreported() const {
  std::lock_guard lock(mu_);
  return list_.size();
}

size_t FailureLog::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

protocol::Reply stats_reply(uint64_t request, int32_t device, int64_t live_tensors,
                            int64_t graph_bytes, int64_t graph_tensors) {
  protocol::reply::Stats r{.request = request};
  if (device >= 0) {
    try {
      cuda::DeviceMemoryStats s = cuda::memory_stats(device);
      r.stats =
          protocol::MemoryStatsWire{s.allocated_bytes, s.peak_allocated_bytes, s.live_storages};
    } catch (const std::exception& e) {
      return protocol::reply::ProtocolError{
          .request = request,
          .message = fmt::format("memory_stats(cuda:{}): {}", device, e.what())};
    }
  } else {
    MemoryStats s = cpu_memory_stats();
    r.stats = protocol::MemoryStatsWire{s.bytes_in_use, s.peak_bytes, live_tensors};
  }
  r.stats.graph_bytes = graph_bytes;
  r.stats.graph_tensors = graph_tensors;
  return r;
}

}  // namespace dtr::worker::detail
