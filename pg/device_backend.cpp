#include "pg/device_backend.hpp"

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>

#include "pg/nccl/nccl.hpp"
#include "pg/serial_executor.hpp"
#include "pg/signature.hpp"
#include "pg/util.hpp"
#include "pg/work_state.hpp"
#include "tensor/device_runtime.hpp"

namespace dtr::pg {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stage_host{false};

// The device all tensors of a call live on (ProcessGroup checked they agree); -1 for host
// tensors or none.
int device_of(const CollectiveArgs& a) {
  for (const auto& t : a.inputs) {
    if (t.defined()) return t.device();
  }
  for (const auto& t : a.outputs) {
    if (t.defined()) return t.device();
  }
  return -1;
}

// A host copy of t with its own storage (t.cpu() would return a host tensor itself).
local::Tensor host_copy(const local::Tensor& t) {
  return t.device() >= 0 ? t.cpu() : t.clone();
}

local::Tensor host_like(const local::Tensor& t) {
  return local::empty(t.meta().shape, t.meta().dtype);
}

std::array<int64_t, 2> uuid_words(const std::array<uint8_t, 16>& uuid) {
  std::array<int64_t, 2> w{};
  std::memcpy(w.data(), uuid.data(), uuid.size());
  return w;
}

class DeviceBackend final : public Backend {
 public:
  DeviceBackend(std::shared_ptr<Backend> host, std::string name, std::chrono::milliseconds timeout,
                bool stage_host)
      : host_(std::move(host)),
        name_(std::move(name)),
        timeout_(timeout),
        stage_host_(stage_host),
        want_nccl_(name_ == "nccl") {}

  ~DeviceBackend() override {
    closing_ = true;
    finisher_.stop();
  }

  std::string_view name() const override { return name_; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
  const std::vector<int>& world_ranks() const override { return host_->world_ranks(); }

  std::shared_ptr<Backend> new_group(const std::vector<int>& group_ranks) override {
    return std::make_shared<DeviceBackend>(host_->new_group(group_ranks), name_, timeout_,
                                           stage_host_);
  }

  Work isend(const local::Tensor& tensor, int dst, int tag, bool blocking) override {
    if (!staged(tensor)) return host_->isend(tensor, dst, tag, blocking);
    // The host copy is the transport's to keep until it has gone.
    return host_->isend(host_copy(tensor), dst, tag, false);
  }

  Work irecv(const local::Tensor& tensor, int src, int tag, bool blocking) override {
    if (!staged(tensor)) return host_->irecv(tensor, src, tag, blocking);
    local::Tensor host = host_like(tensor);
    Work inner = host_->irecv(host, src, tag, false);
    auto state = std::make_shared<Work::State>(fmt::format(
        "recv on rank {} from {} (tag {}, staged through host memory)", rank(),
        src == kAnySource ? std::string("any rank") : fmt::format("rank {}", src), tag));
    finish(state, [this, inner, tensor, host]() mutable {
      await(inner);
      copy_back(tensor, host);
      return inner.source_rank();
    });
    return Work(state);
  }

  Work collective(CollectiveArgs args) override {
    const int device = device_of(args);
    if (device < 0 && !stage_host_) return host_->collective(std::move(args));
    if (device >= 0 && want_nccl_) {
      if (std::shared_ptr<NcclComm> comm = nccl_for(device)) {
        return nccl_collective(std::move(args), device, std::move(comm));
      }
    }
    if (device < 0 && reference_tensor(args) == nullptr) {
      return host_->collective(std::move(args));  // barrier
    }
    return staged_collective(std::move(args));
  }

  void shutdown() override {
    closing_ = true;
    host_->shutdown();
  }
  void declare_lost(int world_rank, const std::string& why) override {
    host_->declare_lost(world_rank, why);
  }
  std::string host_path() const override { return host_->host_path(); }

  std::string cuda_path() const override {
    std::lock_guard lock(m_);
    if (!want_nccl_) {
      return fmt::format("host staging (the {} backend copies CUDA tensors through host memory)",
                         name_);
    }
    if (!setup_done_) {
      return nccl_built() ? "nccl: set up at the group's first collective on CUDA tensors"
                          : "host staging (this dtr was built without NCCL)";
    }
    return path_;
  }

 private:
  bool staged(const local::Tensor& t) const { return t.device() >= 0 || stage_host_; }

  // Runs `body` on the finisher thread and completes `state` with its result or error.
  template <typename Body>
  void finish(const std::shared_ptr<Work::State>& state, Body body) {
    finisher_.post([state, body = std::move(body)]() mutable {
      try {
        const int source = body();
        state->complete(nullptr, source);
      } catch (...) {
        state->complete(std::current_exception());
      }
    });
  }

  // Waits for an operation of the host transport. It ends by its own deadline; this bound
  // only guards against a transport that never completes it, and a closing group stops
  // waiting at once.
  void await(Work& inner) const {
    const auto deadline = Clock::now() + timeout_ * 2 + 10s;
    while (true) {
      try {
        inner.wait(50ms);
        return;
      } catch (const TimeoutError&) {
        // The slice ran out, or the operation's own timeout. When it completed meanwhile,
        // this returns on success or rethrows its own error (not the slice's).
        if (inner.is_completed()) {
          inner.wait(0ms);
          return;
        }
      }
      if (closing_.load()) {
        throw TransportError(fmt::format("{}: the process group was shut down", name_));
      }
      if (Clock::now() > deadline) {
        throw TimeoutError(fmt::format("{}: the host transport did not complete within {} ms",
                                       name_, (timeout_ * 2 + 10s).count()));
      }
    }
  }

  // Finisher thread only.
  void copy_back(const local::Tensor& dst, const local::Tensor& src) {
    if (dst.device() < 0) {
      local::Tensor d = dst;
      d.copy_(src);
      return;
    }
    auto& stream = streams_[dst.device()];
    if (!stream) stream = std::make_unique<cuda::Stream>(dst.device());
    cuda::StreamScope scope(dst.device(), stream->handle());
    cuda::copy_between(dst, src);
    stream->synchronize();  // the Work completes once the device holds the result
  }

  Work staged_collective(CollectiveArgs a) {
    auto state = std::make_shared<Work::State>(
        fmt::format("{} on rank {} (staged through host memory)", comm_op_name(a.op), rank()));
    std::vector<std::pair<local::Tensor, local::Tensor>> back;  // (device, host)
    auto in = [&](local::Tensor& t) {
      if (staged(t)) t = host_copy(t);
    };
    auto out = [&](local::Tensor& t, bool keep_values) {
      if (!staged(t)) return;
      local::Tensor h = keep_values ? host_copy(t) : host_like(t);
      back.emplace_back(t, h);
      t = h;
    };
    switch (a.op) {
      case CommOp::Broadcast:
      case CommOp::AllReduce:
        out(a.outputs[0], true);
        break;
      case CommOp::Reduce:
        // Only the root's tensor receives the result.
        if (rank() == a.root) {
          out(a.outputs[0], true);
        } else {
          in(a.outputs[0]);
        }
        break;
      default:
        for (auto& t : a.inputs) in(t);
        for (auto& t : a.outputs) out(t, false);
        break;
    }
    Work inner = host_->collective(std::move(a));
    finish(state, [this, inner, back = std::move(back)]() mutable {
      await(inner);
      for (auto& [dev, host] : back) copy_back(dev, host);
      return -1;
    });
    return Work(state);
  }

  // The group's communicator for `device`, set up at the first call (a collective); null
  // when this group stages CUDA tensors instead.
  std::shared_ptr<NcclComm> nccl_for(int device) {
    std::lock_guard lock(m_);
    if (!setup_done_) setup(device);
    if (!setup_error_.empty()) throw TransportError(setup_error_);
    return nccl_;
  }

  // Every member decides the same from the same gathered facts: NCCL when every rank has it
  // and no two ranks share a GPU (NCCL refuses two ranks on one device), else staging.
  void setup(int device) {
    const int n = size();
    const auto props = cuda::device_properties(device);
    const auto uuid = uuid_words(props.uuid);
    WordGather g = all_gather_words({uuid[0], uuid[1], nccl_built() ? 1 : 0}, n);
    g.args.blocking = true;
    host_->collective(std::move(g.args)).wait(timeout_ * 2 + 10s);
    const std::string staging = staging_reason(g.all.data<int64_t>(), n);
    setup_done_ = true;
    if (!staging.empty()) {
      path_ = "host staging: " + staging;
      return;
    }
    try {
      nccl_ = nccl_connect(*host_, device, timeout_);
      path_ = nccl_->describe();
    } catch (const std::exception& e) {
      setup_error_ = fmt::format("{}: setting up NCCL for the group failed: {}", name_, e.what());
      path_ = setup_error_;
      throw TransportError(setup_error_);
    }
  }

  Work nccl_collective(CollectiveArgs a, int device, std::shared_ptr<NcclComm> comm) {
    WordGather g = all_gather_words(nccl_signature(a, device, comm->device()), size());
    local::Tensor all = g.all;
    Work signatures = host_->collective(std::move(g.args));  // in program order, like the op
    auto ready = std::make_shared<cuda::Event>(device);
    ready->record(cuda::current_stream(device));
    auto state = std::make_shared<Work::State>(
        fmt::format("{} on rank {} (nccl, cuda:{})", comm_op_name(a.op), rank(), device));
    finish(state, [this, signatures, all, a = std::move(a), ready, comm]() mutable {
      await(signatures);
      check_nccl_signatures(a.op, all.data<int64_t>(), size());
      comm->run(a, *ready, Clock::now() + timeout_, closing_);
      return -1;
    });
    return Work(state);
  }

  std::shared_ptr<Backend> host_;
  const std::string name_;
  const std::chrono::milliseconds timeout_;
  const bool stage_host_;
  const bool want_nccl_;
  std::atomic<bool> closing_{false};

  mutable std::mutex m_;  // the set-up state below
  bool setup_done_ = false;
  std::string setup_error_;
  std::string path_;
  std::shared_ptr<NcclComm> nccl_;

  std::map<int, std::unique_ptr<cuda::Stream>> streams_;  // finisher thread only
  SerialExecutor finisher_;  // last: stopped (joined) before the members its tasks use go
};

}  // namespace

std::vector<int64_t> nccl_signature(const CollectiveArgs& a, int device, int comm_device) {
  return collective_signature(a, device, comm_device);
}

void check_nccl_signatures(CommOp op, const int64_t* all, int n) {
  check_signatures(fmt::format("{} (nccl)", comm_op_name(op)), op, all, n);
}

std::string staging_reason(const int64_t* facts, int n) {
  for (int r = 0; r < n; ++r) {
    if (facts[3 * r + 2] != 1) return fmt::format("rank {} was built without NCCL", r);
    for (int q = 0; q < r; ++q) {
      if (facts[3 * q] == facts[3 * r] && facts[3 * q + 1] == facts[3 * r + 1]) {
        return fmt::format("ranks {} and {} share one GPU, which NCCL does not allow", q, r);
      }
    }
  }
  return "";
}

std::shared_ptr<Backend> make_device_backend(std::shared_ptr<Backend> host, std::string backend,
                                             std::chrono::milliseconds timeout) {
  return std::make_shared<DeviceBackend>(std::move(host), std::move(backend), timeout,
                                         g_stage_host.load());
}

void set_stage_host_tensors_for_testing(bool on) {
  g_stage_host = on;
}

}  // namespace dtr::pg
