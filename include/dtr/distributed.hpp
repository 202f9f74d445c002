// The master side of dtr: tensors that live on worker daemons, driven from this program.
//
//   dtr::init_master_worker();                        // connect to the workers
//   auto x = dtr::DistributedFloatTensor({20, 20}).fill_(4);   // on node 0
//   auto y = dtr::dist_send(dtr::local::randn({20, 20}));      // master -> node 0
//   auto z = x + y;                                    // runs on node 0, returns at once
//   { dtr::node_guard on1(1); auto a = dtr::zeros({10}); }     // lives on node 1
//   float s = z.sum().item<float>();                   // sync point
//
// Handles are cheap shared references to one remote tensor; the last handle to go frees
// it on its worker. Ops are checked on the master with the op table's shape rules, so a
// shape or dtype mistake throws here, at the line that made it; then they are queued and
// sent to the tensor's node, coalesced, and the call returns. The master waits only at
// sync points: to_local(), item(), dist_send(), synchronize(), memory_stats(). A failure
// on a worker surfaces as dtr::RemoteError at the next sync point that touches the failed
// tensor (or at synchronize()), naming op, tensor, node, device and the worker's message.
// Each failure is raised once: one raised by to_local() or item() (directly, or through a
// tensor that depends on it) is not raised again by synchronize(); the tensor stays failed.
//
// Thread safety: every function here may be called from any thread; each node's commands
// keep the order in which they were issued. The current node and device (node_guard,
// device_guard, set_node) are per thread, as torch.cuda's current device is.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtr/tensor.hpp"

namespace dtr {

namespace detail {
class MasterSession;
// One remote tensor: where it lives and what it is. Freed on its worker when destroyed.
struct RemoteTensor {
  std::shared_ptr<MasterSession> session;
  int node = 0;
  int device = -1;  // -1: the node's CPU
  uint64_t id = 0;
  TensorMeta meta;
  ~RemoteTensor();
};
}  // namespace detail

class DistributedTensor : public TensorOps<DistributedTensor> {
 public:
  DistributedTensor() = default;  // undefined; most calls on it throw InvalidArgument
  // An uninitialized tensor on the current node and device.
  explicit DistributedTensor(const Shape& shape, DType dtype = DType::Float32);

  bool defined() const { return remote_ != nullptr; }
  const TensorMeta& meta() const;
  int get_node() const;
  int get_device() const;  // -1 for the node's CPU
  uint64_t id() const;

  // Sync point: the tensor's values, copied to the master.
  local::Tensor to_local() const;
  // Sync point: the only element of a one-element tensor.
  Scalar item() const;
  template <typename T>
  T item() const {
    return item().to<T>();
  }
  // Sync point: torch-style text with node and device.
  std::string to_string() const;

  using TensorOps<DistributedTensor>::to;
  // A copy on `node`, sent worker to worker (the master carries no bytes): this node's
  // current stream sends it when it gets there, and `node`'s current stream waits for it.
  // Returns *this when the tensor already lives on `node`. A CUDA tensor is staged through
  // the hosts; the copy lives on `node`'s CPU (move it on with cuda(k)). Never blocks.
  DistributedTensor to(int node) const;
  // A copy on CUDA device `device` of the same node (-1: the node's CPU), made there
  // asynchronously on the current stream (host<->device through pinned staging on the
  // worker). Returns *this when it already lives there. Never blocks.
  DistributedTensor to_device(int device) const;
  DistributedTensor cpu() const { return to_device(-1); }
  DistributedTensor cuda(int device = 0) const { return to_device(device); }

  // Engine hooks used by TensorOps.
  DistributedTensor apply(OpId op, const OpAttrs& attrs, const DistributedTensor* other) const;
  void apply_inplace(OpId op, const OpAttrs& attrs, const DistributedTensor* other);
  // `op` on any number of inputs (up to kMaxOpInputs), all on one node and device (else
  // InvalidArgument naming both places); no inputs: a creation op on the current node.
  static DistributedTensor apply_inputs(OpId op, const OpAttrs& attrs,
                                        std::span<const DistributedTensor> inputs);
  // A tensor made by a creation op on the current node and device.
  static DistributedTensor create(OpId op, const OpAttrs& attrs);
  // A new tensor of `shape` filled with `value` on this tensor's node and device (made
  // there on the calling thread's current stream). Never blocks.
  DistributedTensor full_here(const Shape& shape, Scalar value, DType dtype) const;
  // Internal: the handle of tensor `id` that a queued command makes on `node`.
  static DistributedTensor adopt(std::shared_ptr<detail::MasterSession> s, int node, int device,
                                 uint64_t id, const TensorMeta& meta);

 private:
  explicit DistributedTensor(std::shared_ptr<detail::RemoteTensor> r) : remote_(std::move(r)) {}
  const detail::RemoteTensor& remote(std::string_view what) const;
  friend DistributedTensor dist_send(const local::Tensor& t, int node);
  std::shared_ptr<detail::RemoteTensor> remote_;
};

std::ostream& operator<<(std::ostream& os, const DistributedTensor& t);

// A handle that is known to hold dtype D (checked when converting from DistributedTensor).
template <DType D>
class DistributedTypedTensor : public DistributedTensor {
 public:
  DistributedTypedTensor() = default;
  explicit DistributedTypedTensor(const Shape& shape) : DistributedTensor(shape, D) {}
  DistributedTypedTensor(std::initializer_list<int64_t> shape)
      : DistributedTensor(Shape(shape), D) {}
  // Throws DTypeError when t holds another dtype.
  DistributedTypedTensor(const DistributedTensor& t) : DistributedTensor(t) {
    if (t.defined() && t.dtype() != D)
      throw DTypeError("Distributed" + std::string(dtype_name(D)) + "Tensor: got a " +
                       std::string(dtype_name(t.dtype())) + " tensor");
  }
};
using DistributedFloatTensor = DistributedTypedTensor<DType::Float32>;
using DistributedDoubleTensor = DistributedTypedTensor<DType::Float64>;
using DistributedIntTensor = DistributedTypedTensor<DType::Int32>;
using DistributedLongTensor = DistributedTypedTensor<DType::Int64>;
using DistributedBoolTensor = DistributedTypedTensor<DType::Bool>;
using DistributedHalfTensor = DistributedTypedTensor<DType::Float16>;
using DistributedBFloat16Tensor = DistributedTypedTensor<DType::BFloat16>;

// ---- session ----

struct MasterOptions {
  // Connect to daemons started with `dtr-worker --listen ENDPOINT`; node k is workers[k].
  std::vector<std::string> workers;
  // Or listen here for `num_workers` workers started with `dtr-worker --master ENDPOINT`;
  // nodes are numbered in order of arrival.
  std::string listen;
  int num_workers = 0;
  std::chrono::milliseconds connect_timeout{60000};
  std::chrono::milliseconds sync_timeout{600000};
  // Liveness, both ways: master and workers send a heartbeat every `heartbeat`; a worker
  // silent for `heartbeat_timeout` is lost (dtr::WorkerLost on every later use of its
  // node), and the workers end the session when the master is silent that long.
  std::chrono::milliseconds heartbeat{500};
  std::chrono::milliseconds heartbeat_timeout{2500};
  // Authentication (dtr/security.hpp): the cluster key file; empty: $DTR_KEY_FILE, then
  // $DTR_KEY. With a key every worker link is CURVE; without one, workers at non-loopback
  // endpoints are refused (AuthenticationError) unless `insecure` or $DTR_INSECURE=1.
  std::string key_file;
  bool insecure = false;
  // A thread waiting at a sync point polls for its reply this long before it sleeps (a
  // reply seen while spinning costs no thread wake-up): lower latency for one busy core.
  // Zero: sleep at once (DTR_SPIN_US overrides).
  std::chrono::microseconds spin{200};
  // Record a timeline from the start and write it here at shutdown_master_worker()
  // (dtr/observability.hpp); empty: $DTR_TRACE, if set.
  std::string trace_path;
  // The backend the workers use among themselves for master-issued collectives on host
  // tensors (torch.distributed's name, as in the proposal's init_master_worker(backend=)):
  // "zmq" (dtr's own; "tcp" is its torch name; the default, with nccl for CUDA tensors
  // where built), "gloo" (where the workers were built with it; docs/process_groups.md) or
  // "mpi" (the master and its workers started as one MPI job, the master its rank 0:
  // `mpirun -np N+1 dtr-exec --launched PROGRAM`; the workers' communicator is MPI's world
  // without the master, which initializes MPI and stands aside). Copies between workers
  // keep their own connections. Empty: $DTR_BACKEND, else "zmq".
  std::string backend;
  // Same-host payloads: with a worker on this host, dist_send and to_local move tensor
  // bytes by one direct copy between the two processes' memory (Linux cross-memory
  // attach) instead of through the socket, where the kernel allows it (same user); found
  // out at start, per node (NodeInfo::same_host). false, or DTR_SAME_HOST=0 in the
  // master's or the worker's environment, keeps every byte on the sockets.
  bool same_host = true;
};

// Starts the session with the options' workers. Throws TransportError / TimeoutError
// naming the endpoint that could not be reached, InvalidArgument for bad options.
void init_master_worker(const MasterOptions& options);
// Starts the session from the environment: DTR_WORKERS="tcp://a:7000,tcp://b:7000", or
// DTR_LISTEN=tcp://0.0.0.0:PORT with DTR_NUM_WORKERS=N, or MASTER_ADDR, MASTER_PORT and
// WORLD_SIZE (N = WORLD_SIZE - 1 workers dial the master, as with torch's env://).
// DTR_CONNECT_TIMEOUT_MS, DTR_SYNC_TIMEOUT_MS, DTR_HEARTBEAT_TIMEOUT_MS, DTR_SPIN_US and
// DTR_BACKEND override the defaults.
void init_master_worker();
// The options init_master_worker() takes from the environment, as above (InvalidArgument
// when it names no workers or holds a malformed number), for a caller to adjust.
MasterOptions master_options_from_environment();
// Flushes, says goodbye to every worker (they free the session's tensors) and closes the
// connections. Handles that outlive it are inert. Called at exit if not before.
void shutdown_master_worker();
bool is_master_worker_initialized();

// ---- nodes and devices (torch.cuda-style, per thread) ----

int node_count();
int current_node();
// Throws IndexError for a node that does not exist.
void set_node(int node);
// CUDA devices on a node (0 for a CPU-only node).
int device_count(int node);
int current_device();  // -1: the CPU
void set_device(int device);

// Makes `node` current for the guard's scope, restoring the previous one after.
class node_guard {
 public:
  explicit node_guard(int node);
  ~node_guard();
  node_guard(const node_guard&) = delete;
  node_guard& operator=(const node_guard&) = delete;

 private:
  int previous_;
};

class device_guard {
 public:
  explicit device_guard(int device);
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_;
};

// Runs fn with `node` current (like `with torch.distributed.node(k):`).
template <typename F>
decltype(auto) with_node(int node, F&& fn) {
  node_guard guard(node);
  return std::forward<F>(fn)();
}

// ---- sync points ----

// Waits until every command sent to `node` (all nodes: -1) has run; throws RemoteError
// for the first failure not reported before.
void synchronize(int node = -1);
// Copies master data to a node (default: the current one) and returns its handle.
DistributedTensor dist_send(const local::Tensor& t, int node = -1);

// Interrupting a wait: blocking sync points (every wait for a worker's reply: to_local,
// item, synchronize, dist_send, memory_stats, Event and Stream queries and synchronize)
// call `check` on the waiting thread every few milliseconds while they wait. When it
// throws, the wait ends and the exception propagates from the sync point; the reply, if
// it still comes, is dropped (the failures it carried are reported by the next
// synchronize()), and the session stays usable. init_master_worker's handshake calls it too
// (after each poll, at most 100 ms apart); there it ends the start, and no session runs.
// nullptr (the default) removes the check. Language bindings use it to deliver Ctrl-C
// (Python's KeyboardInterrupt). An interrupted sync point also cancels the work queued on
// every node (cancel() below): the program was stopped, and what it queued would
// otherwise still run before the next sync point could return. Any thread may set it.
using WaitInterruptCheck = void (*)();
void set_wait_interrupt_check(WaitInterruptCheck check);

// Cancels the work queued on `node` (-1: every node): ops sent to it before this call that
// have not started do not run, and their outputs (an in-place op's target) fail with a
// RemoteError naming the cancel when read; synchronize() reports the cancel once. Ops
// already running finish; copies, events, collectives and captured graphs' replays run as
// queued (other nodes wait for them). Returns at once; the session goes on, and what is
// issued after it runs as usual. Not inside a capture (dtr/graph.hpp).
void cancel(int node = -1);

struct NodeMemoryStats {
  int64_t bytes_in_use = 0;
  int64_t peak_bytes = 0;
  int64_t live_tensors = 0;
  // Of those: what captured graphs hold there (dtr/graph.hpp: their temporaries).
  int64_t graph_bytes = 0;
  int64_t graph_tensors = 0;
};
// Memory in use on a node's CPU (device -1) or CUDA device. A sync point for that node.
NodeMemoryStats memory_stats(int node, int device = -1);

struct NodeInfo {
  std::string worker;  // "host:pid"
  uint32_t threads = 0;
  int64_t cpu_total_memory = 0;
  std::vector<std::string> cuda_devices;
  // dist_send / to_local with this node copy memory directly (MasterOptions::same_host);
  // when not, same_host_note says why ("process 812 is not visible here (another host or
  // PID namespace)", "DTR_SAME_HOST=0 on the master", ...).
  bool same_host = false;
  std::string same_host_note;
  // The largest message the worker takes (dtr-worker --max-message-bytes): a tensor whose
  // bytes would travel to it as one larger message (dist_send, x.to(node)) is refused.
  int64_t max_message_bytes = 0;
};
NodeInfo node_info(int node);

// ---- creation on the current node and device ----
DistributedTensor empty(const Shape& shape, DType dtype = DType::Float32);
DistributedTensor zeros(const Shape& shape, DType dtype = DType::Float32);
DistributedTensor ones(const Shape& shape, DType dtype = DType::Float32);
DistributedTensor full(const Shape& shape, Scalar value, DType dtype = DType::Float32);
DistributedTensor arange(Scalar end);
DistributedTensor arange(Scalar start, Scalar end, Scalar step = 1);
DistributedTensor linspace(double start, double end, int64_t steps, DType dtype = DType::Float32);
// Draws from the master's generator: the same seed gives the same values on any node.
DistributedTensor rand(const Shape& shape, Generator& gen, DType dtype = DType::Float32);
DistributedTensor randn(const Shape& shape, Generator& gen, DType dtype = DType::Float32);
DistributedTensor rand(const Shape& shape, DType dtype = DType::Float32);
DistributedTensor randn(const Shape& shape, DType dtype = DType::Float32);

}  // namespace dtr
