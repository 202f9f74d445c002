// The NCCL communicator of a process group (pg/nccl/nccl.hpp). Communicators are non-blocking
// (ncclConfig_t::blocking = 0) so that initialization and every wait can be bounded and
// aborted: a call that answers ncclInProgress is polled with ncclCommGetAsyncError until
// it settles or the deadline passes.
#include "pg/nccl/nccl.hpp"

#include <cuda_runtime_api.h>
#include <fmt/format.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <thread>

#include "dtr/error.hpp"
#include "dtr/tensor.hpp"

namespace dtr::pg {
namespace {

using Clock = std::chrono::steady_clock;

std::string nccl_message(ncclResult_t r, ncclComm_t comm) {
  std::string out = ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') out += fmt::format(" ({})", last);
  return out;
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32:
      return ncclFloat32;
    case DType::Float64:
      return ncclFloat64;
    case DType::Int32:
      return ncclInt32;
    case DType::Int64:
      return ncclInt64;
    case DType::Bool:
      return ncclUint8;  // bytes 0/1: OR is max, AND is min
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
  }
  throw DTypeError(fmt::format("nccl: no NCCL type for dtype {}", dtype_name(t)));
}

// The same semantics as the host reduction (pg/reduce.hpp): bool Sum/Max/Avg are OR,
// Product/Min are AND. Avg reaches here only for floating dtypes (ProcessGroup checks).
ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  if (t == DType::Bool) {
    return op == ReduceOp::Product || op == ReduceOp::Min ? ncclMin : ncclMax;
  }
  switch (op) {
    case ReduceOp::Sum:
      return ncclSum;
    case ReduceOp::Product:
      return ncclProd;
    case ReduceOp::Min:
      return ncclMin;
    case ReduceOp::Max:
      return ncclMax;
    case ReduceOp::Avg:
      return ncclAvg;
  }
  throw InvalidArgument(fmt::format("nccl: unknown ReduceOp {}", static_cast<int>(op)));
}

class CurrentDevice {
 public:
  explicit CurrentDevice(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (cudaSetDevice(device) != cudaSuccess) {
      throw DeviceError(fmt::format("nccl: cannot make cuda:{} current", device));
    }
  }
  ~CurrentDevice() {
    if (previous_ >= 0) (void)cudaSetDevice(previous_);
  }
  CurrentDevice(const CurrentDevice&) = delete;
  CurrentDevice& operator=(const CurrentDevice&) = delete;

 private:
  int previous_ = -1;
};

// True when `v` are consecutive equal-sized blocks of one contiguous storage (what
// all_gather_into_tensor and reduce_scatter_tensor pass), so NCCL can use them directly.
bool consecutive_blocks(const std::vector<local::Tensor>& v) {
  if (v.empty()) return false;
  const int64_t n = v[0].meta().numel();
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i].storage() != v[0].storage() || !v[i].meta().is_contiguous() ||
        v[i].meta().numel() != n ||
        v[i].meta().offset != v[0].meta().offset + static_cast<int64_t>(i) * n) {
      return false;
    }
  }
  return true;
}

// Block i (n elements) of a contiguous 1-d tensor.
local::Tensor block(const local::Tensor& t, int64_t i, int64_t n) {
  TensorMeta m = TensorMeta::contiguous(t.meta().dtype, Shape{n});
  m.offset = t.meta().offset + i * n;
  return local::Tensor(t.storage(), m);
}

local::Tensor flat(const local::Tensor& t) {
  TensorMeta m = TensorMeta::contiguous(t.meta().dtype, Shape{t.meta().numel()});
  m.offset = t.meta().offset;
  return local::Tensor(t.storage(), m);
}

class Comm final : public NcclComm {
 public:
  Comm(ncclComm_t comm, int device, int rank, int size)
      : comm_(comm), device_(device), rank_(rank), size_(size), stream_(device) {}

  ~Comm() override {
    // Every run() has returned (the finisher thread is gone): nothing is pending.
    if (!aborted_) {
      CurrentDevice current(device_);
      (void)ncclCommAbort(comm_);
    }
  }

  int device() const override { return device_; }

  std::string describe() const override {
    return fmt::format("nccl {} on cuda:{} (rank {} of {})", nccl_version(), device_, rank_, size_);
  }

  void run(const CollectiveArgs& a, const cuda::Event& ready, Clock::time_point deadline,
           const std::atomic<bool>& closing) override {
    if (aborted_) {
      throw TransportError(fmt::format(
          "{} (nccl, cuda:{}): the group's NCCL communicator was aborted after an earlier "
          "failure ({}); create a new process group",
          comm_op_name(a.op), device_, failure_));
    }
    const std::string what =
        fmt::format("{} (nccl, cuda:{}, rank {} of {})", comm_op_name(a.op), device_, rank_, size_);
    cuda::StreamScope scope(device_, stream_.handle());
    ready.block(stream_.handle());
    enqueue(a, Call{what, deadline, closing, static_cast<cudaStream_t>(stream_.handle())});
    cuda::Event done(device_);
    done.record(stream_.handle());
    int spins = 0;
    while (!done.query()) {
      ncclResult_t async = ncclSuccess;
      (void)ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        fail<TransportError>(what, nccl_message(async, comm_));
      }
      if (closing.load()) fail<TransportError>(what, "the process group was shut down");
      if (Clock::now() > deadline) {
        fail<TimeoutError>(what,
                           "not finished by the group's timeout (a peer may be missing "
                           "from this collective)");
      }
      if (++spins < 200) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

 private:
  template <typename E>
  [[noreturn]] void fail(const std::string& what, const std::string& why) {
    failure_ = fmt::format("{}: {}", what, why);
    aborted_ = true;
    {
      CurrentDevice current(device_);
      (void)ncclCommAbort(comm_);
    }
    throw E(failure_);
  }

  // A non-blocking communicator may answer ncclInProgress: poll until it settles.
  void settle(ncclResult_t r, const char* call, const std::string& what, Clock::time_point deadline,
              const std::atomic<bool>& closing) {
    while (r == ncclInProgress) {
      if (closing.load()) fail<TransportError>(what, "the process group was shut down");
      if (Clock::now() > deadline) fail<TimeoutError>(what, fmt::format("{} did not settle", call));
      std::this_thread::yield();
      (void)ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) {
      fail<TransportError>(what, fmt::format("{} failed: {}", call, nccl_message(r, comm_)));
    }
  }

  // One run()'s NCCL calls: the stream they go to and what settle() needs.
  struct Call {
    const std::string& what;
    Clock::time_point deadline;
    const std::atomic<bool>& closing;
    cudaStream_t stream;
  };
  void ok(const Call& c, ncclResult_t r, const char* name) {
    settle(r, name, c.what, c.deadline, c.closing);
  }

  // Queues collective `a` on the communicator's stream.
  void enqueue(const CollectiveArgs& a, const Call& c) {
    switch (a.op) {
      case CommOp::Broadcast: {
        const auto& t = a.outputs[0];
        ok(c,
           ncclBroadcast(t.raw_data(), t.raw_data(), static_cast<size_t>(t.meta().numel()),
                         nccl_type(t.dtype()), a.root, comm_, c.stream),
           "ncclBroadcast");
        return;
      }
      case CommOp::AllReduce: {
        const auto& t = a.outputs[0];
        ok(c,
           ncclAllReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.meta().numel()),
                         nccl_type(t.dtype()), nccl_op(a.reduce, t.dtype()), comm_, c.stream),
           "ncclAllReduce");
        return;
      }
      case CommOp::Reduce: {
        const auto& t = a.outputs[0];
        ok(c,
           ncclReduce(t.raw_data(), t.raw_data(), static_cast<size_t>(t.meta().numel()),
                      nccl_type(t.dtype()), nccl_op(a.reduce, t.dtype()), a.root, comm_, c.stream),
           "ncclReduce");
        return;
      }
      case CommOp::AllGather:
        return all_gather(a, c);
      case CommOp::Gather:
        return gather(a, c);
      case CommOp::Scatter:
        return scatter(a, c);
      case CommOp::ReduceScatter:
        return reduce_scatter(a, c);
      case CommOp::Barrier: {
        local::Tensor one = local::empty(Shape{1}, DType::Float32, device_);
        ok(c,
           ncclAllReduce(one.raw_data(), one.raw_data(), 1, ncclFloat32, ncclSum, comm_, c.stream),
           "ncclAllReduce");
        return;
      }
      default:
        break;
    }
    throw InvalidArgument(fmt::format("{}: not a collective NCCL runs here", c.what));
  }

  void all_gather(const CollectiveArgs& a, const Call& c) {
    const auto& in = a.inputs[0];
    const int64_t n = in.meta().numel();
    const auto type = nccl_type(in.dtype());
    if (consecutive_blocks(a.outputs)) {
      ok(c,
         ncclAllGather(in.raw_data(), a.outputs[0].raw_data(), static_cast<size_t>(n), type, comm_,
                       c.stream),
         "ncclAllGather");
      return;
    }
    // Separate output tensors: gather into one buffer (allocated for this stream), then
    // copy the blocks out on the same stream.
    local::Tensor tmp = local::empty(Shape{n * size_}, in.dtype(), device_);
    ok(c,
       ncclAllGather(in.raw_data(), tmp.raw_data(), static_cast<size_t>(n), type, comm_, c.stream),
       "ncclAllGather");
    for (int i = 0; i < size_; ++i) cuda::copy_between(flat(a.outputs[i]), block(tmp, i, n));
  }

  // The root copies its own block, then receives every other rank's; the others send.
  void gather(const CollectiveArgs& a, const Call& c) {
    const auto& in = a.inputs[0];
    const int64_t n = in.meta().numel();
    const auto type = nccl_type(in.dtype());
    if (rank_ == a.root) cuda::copy_between(flat(a.outputs[rank_]), flat(in));
    ok(c, ncclGroupStart(), "ncclGroupStart");
    if (rank_ == a.root) {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        ok(c, ncclRecv(a.outputs[r].raw_data(), static_cast<size_t>(n), type, r, comm_, c.stream),
           "ncclRecv");
      }
    } else {
      ok(c, ncclSend(in.raw_data(), static_cast<size_t>(n), type, a.root, comm_, c.stream),
         "ncclSend");
    }
    ok(c, ncclGroupEnd(), "ncclGroupEnd");
  }

  // The root copies its own block, then sends every other rank its block; the others receive.
  void scatter(const CollectiveArgs& a, const Call& c) {
    const auto& out = a.outputs[0];
    const int64_t n = out.meta().numel();
    const auto type = nccl_type(out.dtype());
    if (rank_ == a.root) cuda::copy_between(flat(out), flat(a.inputs[rank_]));
    ok(c, ncclGroupStart(), "ncclGroupStart");
    if (rank_ == a.root) {
      for (int r = 0; r < size_; ++r) {
        if (r == rank_) continue;
        ok(c, ncclSend(a.inputs[r].raw_data(), static_cast<size_t>(n), type, r, comm_, c.stream),
           "ncclSend");
      }
    } else {
      ok(c, ncclRecv(out.raw_data(), static_cast<size_t>(n), type, a.root, comm_, c.stream),
         "ncclRecv");
    }
    ok(c, ncclGroupEnd(), "ncclGroupEnd");
  }

  void reduce_scatter(const CollectiveArgs& a, const Call& c) {
    const auto& out = a.outputs[0];
    const int64_t n = out.meta().numel();
    const auto type = nccl_type(out.dtype());
    const auto op = nccl_op(a.reduce, out.dtype());
    if (consecutive_blocks(a.inputs)) {
      ok(c,
         ncclReduceScatter(a.inputs[0].raw_data(), out.raw_data(), static_cast<size_t>(n), type, op,
                           comm_, c.stream),
         "ncclReduceScatter");
      return;
    }
    local::Tensor tmp = local::empty(Shape{n * size_}, out.dtype(), device_);
    for (int i = 0; i < size_; ++i) cuda::copy_between(block(tmp, i, n), flat(a.inputs[i]));
    ok(c,
       ncclReduceScatter(tmp.raw_data(), out.raw_data(), static_cast<size_t>(n), type, op, comm_,
                         c.stream),
       "ncclReduceScatter");
  }

  ncclComm_t comm_;
  int device_;
  int rank_;
  int size_;
  cuda::Stream stream_;
  bool aborted_ = false;  // touched by the one thread that calls run()
  std::string failure_;
};

}  // namespace

bool nccl_built() {
  return true;
}

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "unknown";
  // Since 2.9: major * 10000 + minor * 100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
}

std::shared_ptr<NcclComm> nccl_connect(Backend& host, int device,
                                       std::chrono::milliseconds timeout) {
  const int rank = host.rank();
  const int size = host.size();
  const auto deadline = Clock::now() + timeout;
  // Rank 0 makes the unique id and broadcasts it with a status word, so that a failure on
  // rank 0 fails every rank at once instead of leaving them waiting.
  constexpr int64_t kIdWords = NCCL_UNIQUE_ID_BYTES / 8;
  local::Tensor msg = local::zeros(Shape{kIdWords + 1}, DType::Int64);
  std::string rank0_error;
  if (rank == 0) {
    ncclUniqueId id{};
    const ncclResult_t r = ncclGetUniqueId(&id);
    if (r == ncclSuccess) {
      std::memcpy(msg.raw_data(), id.internal, NCCL_UNIQUE_ID_BYTES);
      msg.data<int64_t>()[kIdWords] = 1;
    } else {
      rank0_error = nccl_message(r, nullptr);
    }
  }
  CollectiveArgs a;
  a.op = CommOp::Broadcast;
  a.root = 0;
  a.outputs = {msg};
  a.blocking = true;
  host.collective(std::move(a)).wait(timeout);
  if (msg.data<int64_t>()[kIdWords] != 1) {
    throw TransportError(fmt::format(
        "nccl: rank 0 could not create the NCCL unique id for the group's communicator{}",
        rank0_error.empty() ? "" : ": " + rank0_error));
  }
  ncclUniqueId id{};
  std::memcpy(id.internal, msg.raw_data(), NCCL_UNIQUE_ID_BYTES);

  CurrentDevice current(device);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, size, id, rank, &config);
  while (r == ncclInProgress) {
    if (Clock::now() > deadline) {
      (void)ncclCommAbort(comm);
      throw TimeoutError(fmt::format(
          "nccl: creating the communicator on cuda:{} (rank {} of {}) did not finish within "
          "{} ms (a rank may be missing)",
          device, rank, size, timeout.count()));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    (void)ncclCommGetAsyncError(comm, &r);
  }
  if (r != ncclSuccess) {
    const std::string why = nccl_message(r, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    throw TransportError(fmt::format("nccl: ncclCommInitRank on cuda:{} (rank {} of {}) failed: {}",
                                     device, rank, size, why));
  }
  return std::make_shared<Comm>(comm, device, rank, size);
}

}  // namespace dtr::pg
