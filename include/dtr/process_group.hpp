// Process groups: point-to-point and collective communication between the ranks of an SPMD
// job (torch.distributed's process-group mode, in C++), on dtr::local::Tensor.
//
// Two ways in:
//  - The global API, as in torch.distributed: dtr::init_process_group() once per process,
//    then dtr::all_reduce(t), dtr::send(t, 1), ... on the world group or on a handle from
//    dtr::new_group(ranks); dtr::destroy_process_group() at the end.
//  - ProcessGroup objects made without any global state (ProcessGroup::create with an
//    explicit rank, world size and a Store or a list of peer endpoints). Several
//    independent groups may live in one process (a worker daemon builds one per master
//    session); each owns its sockets and threads.
//
// Tensors must be contiguous (any dtype of dtr/dtype.hpp), and the tensors of one call must
// live on one device: the host, or one CUDA device. CUDA tensors of a "nccl" group's
// collectives run on NCCL (the communicator is set up at the group's first collective on
// CUDA tensors, its unique id broadcast over the group); every other CUDA-tensor call
// (a "zmq" group, point-to-point calls, ranks sharing one GPU, a build without NCCL) goes
// through host staging: copied to the host at issue, on the caller's current stream, and
// back before the Work completes. cuda_path() says which. A collective's
// tensors must have the same dtype and sizes on every rank; a mismatch fails on every rank
// with an error naming the op, the ranks and both sizes/dtypes, never corrupting memory.
// Every wait is bounded (Options::timeout, default 300 s). On zmq a peer that dies makes
// every pending and later operation that needs it fail with TransportError naming its rank
// and address; gloo and mpi detect a stopped peer by the timeout, and a failure leaves their
// group unusable (docs/process_groups.md, "Failure semantics"). Backends: "zmq" (dtr's own
// transport; "tcp" is torch's name for it), "nccl" (with CUDA; its host tensors use the zmq mesh
// every group has), "gloo" and "mpi" (the libraries, where this dtr was built with them; CUDA
// tensors through host staging); unsupported (backend, op, device) combinations throw
// InvalidArgument. See docs/process_groups.md.
//
// Thread safety: every function and every ProcessGroup/Work method may be called from any
// thread. Point-to-point calls from several threads are safe; order is kept per
// (sender, receiver, tag) in the order the calls were made. Collectives on one group run one
// at a time in the order they were issued on this rank, so every rank must issue the
// collectives of a group in the same order (as in torch/MPI); collectives on different
// groups run concurrently. A tensor handed to an operation must not be written (for sends)
// or read (for receives) until the operation's Work completes. The global API
// (init/destroy_process_group) must not race with calls that use the world group.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/error.hpp"
#include "dtr/reduce_op.hpp"
#include "dtr/security.hpp"
#include "dtr/tensor.hpp"

namespace dtr {

// ---- enums (ReduceOp: dtr/reduce_op.hpp) ----

// Every operation a backend may offer; the capability table is indexed by it.
enum class CommOp : uint8_t {
  Send = 0,
  Recv,
  RecvAnySource,
  Broadcast,
  AllReduce,
  Reduce,
  AllGather,
  Gather,
  Scatter,
  ReduceScatter,
  Barrier,
};
inline constexpr int kNumCommOps = 11;
std::string_view comm_op_name(CommOp op);

// Where a tensor lives, for the capability table.
enum class DeviceKind : uint8_t { CPU = 0, CUDA = 1 };

// Backends dtr knows of (the columns of the capability table). "zmq" is always built, "nccl"
// with CUDA, "gloo" and "mpi" where the libraries were found (DTR_WITH_GLOO, DTR_WITH_MPI);
// a request for one that is not built fails with a clear message. "tcp" is accepted as
// torch's name of dtr's own TCP transport: the zmq backend with transport "tcp".
inline constexpr std::string_view kKnownBackends[] = {"zmq", "nccl", "mpi", "gloo"};

// "zmq" for "tcp", the name itself otherwise.
constexpr std::string_view canonical_backend(std::string_view backend) {
  return backend == "tcp" ? std::string_view("zmq") : backend;
}

// Whether `backend` supports `op` on `device` (whether or not it is built). constexpr: the
// table in docs/process_groups.md is checked against it by a test.
constexpr bool backend_supports(std::string_view backend, CommOp op, DeviceKind device) {
  // zmq: CUDA tensors through host staging. nccl: CUDA collectives on NCCL, its
  // point-to-point calls (any-source too) staged, host tensors on its zmq mesh. gloo, mpi:
  // every op on host tensors (any-source receives included: gloo receives from a set of
  // ranks, MPI from MPI_ANY_SOURCE), CUDA tensors through host staging.
  (void)op;
  (void)device;
  backend = canonical_backend(backend);
  return backend == "zmq" || backend == "nccl" || backend == "mpi" || backend == "gloo";
}
// Whether a backend is compiled into this build ("zmq" and "tcp"; "nccl" with CUDA; "gloo",
// "mpi" where built).
bool backend_available(std::string_view backend);

// Rank of any sender, for recv/irecv.
inline constexpr int kAnySource = -1;

inline constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(300)};

// ---- Work: the handle of an asynchronous operation ----

class Work {
 public:
  struct State;  // implementation detail
  Work() = default;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  // True once the operation finished, successfully or not. Never blocks.
  bool is_completed() const;
  // True when it finished without an error.
  bool is_success() const;
  // Waits for completion; rethrows the operation's error (TransportError, TimeoutError,
  // ShapeError, ...). Throws TimeoutError when it has not completed within `timeout` (the
  // operation itself keeps running and ends by its own deadline).
  void wait(std::chrono::milliseconds timeout = kDefaultTimeout);
  // For irecv: the sender's rank (within the group), valid after a successful wait();
  // -1 before that or for other operations.
  int source_rank() const;

 private:
  std::shared_ptr<State> state_;
};

// ---- Store: key-value rendezvous ----

// A key-value store the ranks meet in to exchange endpoints. Thread-safe.
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits (bounded by `timeout`) for the key; throws TimeoutError naming it.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Atomically adds `delta` to the integer at key (0 when absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Removes every key starting with `prefix`.
  virtual void delete_prefix(const std::string& prefix) = 0;
  // Where it lives, for error messages ("tcp://10.0.0.1:29500", "file:///nfs/rdv").
  virtual std::string describe() const = 0;
};

// In one process only (tests, threads as ranks).
std::shared_ptr<Store> make_hash_store();
// tcp://host:port: the process whose bind of host:port succeeds serves the store (a thread)
// for as long as the Store object lives; every process, the server included, is a client.
// `serve`: true tries to bind first (rank 0, or any rank when ranks are auto-assigned),
// false only connects. Waits for a server are bounded by `timeout`.
std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve,
                                      std::chrono::milliseconds timeout = kDefaultTimeout);
// A shared file (NFS works: fcntl record locks, plain reads and appends, no mmap, no
// inotify). The file is created when absent and never deleted (keys of finished groups
// are tombstoned); several groups may share it under distinct prefixes.
std::shared_ptr<Store> make_file_store(const std::string& path);

// ---- ProcessGroup ----

// Options of a ProcessGroup (ProcessGroup::Options).
struct ProcessGroupOptions {
  std::string backend = "zmq";
  // Bound on every internal wait of an operation (a receive, a rendezvous step).
  std::chrono::milliseconds timeout = kDefaultTimeout;
  // "tcp" (default) or "ipc" (ranks on one host; Unix domain sockets).
  std::string transport = "tcp";
  // tcp: the address this rank binds and publishes; empty = the address that routes to
  // the rendezvous host (127.0.0.1 for a loopback rendezvous), or $DTR_PG_ADDR when set.
  std::string bind_address;
  // Prefix of every rendezvous key, so several groups can share one store.
  std::string group_name;
  // A peer that sends nothing (not even ZeroMQ heartbeats) for this long is declared dead.
  // A peer whose process exits is detected at once from its connection closing.
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(10)};
  // gloo and mpi: before each collective the ranks all-gather its signature (op, root,
  // ReduceOp, dtype, element count), so that mismatched calls fail on every rank with
  // ShapeError / DTypeError / InvalidArgument naming both ranks and values. It costs one
  // small all_gather per collective; without it a mismatch is the library's to handle
  // (gloo aborts the process, MPI may truncate or wait until the timeout). Must be the same
  // on every rank. zmq and nccl check in band and ignore it. init_process_group reads
  // $DTR_PG_VERIFY (0 turns it off).
  bool verify_collectives = true;
  // Authentication of the mesh's links (dtr/security.hpp): with a key every link is CURVE
  // and only ranks holding it connect; without one, non-local endpoints are refused
  // (AuthenticationError) unless insecure. Unset: resolve_security() from $DTR_KEY_FILE,
  // $DTR_KEY and $DTR_INSECURE.
  std::optional<SecurityConfig> security;
  // zmq: collectives of a group whose members all run on this host move their bytes through
  // shared memory and direct reads of each other's tensors instead of the sockets (point-
  // to-point calls stay on the sockets). false (or $DTR_SAME_HOST=0 in any member) keeps
  // every byte on the sockets. host_path() says which a group took, and why.
  bool same_host = true;
};

class ProcessGroup {
 public:
  using Options = ProcessGroupOptions;

  // An empty handle; every call throws InvalidArgument.
  ProcessGroup() = default;

  // Rendezvous through `store`: binds, publishes its endpoint, reads the others', connects
  // to every peer and waits until all are connected. rank -1 assigns ranks in arrival order.
  // Backend "mpi": the group is MPI's world (the store is not used); rank (or -1) and
  // world_size must agree with MPI's.
  static ProcessGroup create(std::shared_ptr<Store> store, int rank, int world_size,
                             const Options& options = {});
  // Without a store: `endpoints[i]` is where rank i binds ("tcp://10.0.0.2:7100",
  // "ipc:///tmp/x"); this rank binds endpoints[rank] and connects to the others. gloo: rank
  // 0 serves a TCP store at endpoints[0] (a file beside an ipc:// path), through which the
  // ranks meet; mpi: endpoints.size() is MPI's world size, or less: then the group is part
  // of the job (group rank `rank`, the endpoints unused), made with every process of the
  // job; the others stand aside at the same point (so far only a master-worker session
  // uses this: its workers under `mpirun dtr-exec --launched`, the master standing aside
  // in init_master_worker).
  static ProcessGroup create(const std::vector<std::string>& endpoints, int rank,
                             const Options& options = {});

  bool valid() const { return impl_ != nullptr; }
  // This process's rank in the group, or -1 when it is not a member (new_group).
  int rank() const;
  int size() const;
  bool is_member() const { return rank() >= 0; }
  // World ranks of the members, in group-rank order.
  const std::vector<int>& ranks() const;
  const std::string& backend_name() const;
  const Options& options() const;
  // How this group moves CUDA tensors: "host staging (...)", "nccl: set up at the group's
  // first collective on CUDA tensors", then "nccl 2.28.3 on cuda:0 (rank 0 of 2)" or
  // "host staging: ranks 0 and 1 share one GPU, ...".
  std::string cuda_path() const;
  // How this group's collectives move host tensors. zmq (and nccl's host tensors): "" until
  // the group's first collective, then "shared memory" when every member runs on this host
  // and may map the others' memory (docs/process_groups.md, "Same-host collectives"), else
  // "sockets (why: the first rank that could not, and its reason)". A two-rank group on the
  // sockets adds "; all_reduces of 128 KiB or more on a lane (tcp HOST:PORT)" or "; no lane
  // (why)" once its first such all_reduce chose (docs/process_groups.md, "Lanes").
  // mpi: "shared memory (...)" when every member shares memory with every other (dtr's own
  // collectives over Open MPI's shared-memory transport), else "MPI's transports (...)".
  // "" for gloo.
  std::string host_path() const;

  // A subgroup of this group's members (ranks given in this group's numbering, distinct).
  // Like torch: every member of *this* group must call it, in the same order, even those
  // not in `ranks` (they get a handle with is_member() false). No communication.
  ProcessGroup new_group(std::vector<int> ranks) const;

  // Throws InvalidArgument when this group's backend cannot run `op` on `device`.
  void check_supported(CommOp op, DeviceKind device) const;

  // -- point to point (ranks in this group's numbering) --
  void send(const local::Tensor& tensor, int dst, int tag = 0);
  // Returns the sender's rank (useful with src = kAnySource).
  int recv(local::Tensor& tensor, int src = kAnySource, int tag = 0);
  // Completes when ZeroMQ no longer needs the tensor's bytes (it may be written again).
  Work isend(const local::Tensor& tensor, int dst, int tag = 0);
  // Completes when the tensor holds the message; Work::source_rank() says from whom.
  Work irecv(local::Tensor& tensor, int src = kAnySource, int tag = 0);

  // -- collectives (blocking; each has an _async form returning Work) --
  void broadcast(local::Tensor& tensor, int root);
  void all_reduce(local::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  // Only `root`'s tensor receives the result; the others' tensors are left unchanged.
  void reduce(local::Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum);
  // outputs: size() tensors shaped like input (torch.distributed.all_gather).
  void all_gather(std::vector<local::Tensor>& outputs, const local::Tensor& input);
  // output: size() * input.numel() elements, rank i's input at [i*n, (i+1)*n).
  void all_gather_into_tensor(local::Tensor& output, const local::Tensor& input);
  // outputs: used on `root` only (size() tensors shaped like input); ignored elsewhere.
  void gather(const local::Tensor& input, std::vector<local::Tensor>* outputs, int root);
  // inputs: used on `root` only (size() tensors shaped like output); ignored elsewhere.
  void scatter(local::Tensor& output, const std::vector<local::Tensor>* inputs, int root);
  // inputs: size() tensors shaped like output; output = reduction of every rank's
  // inputs[rank()].
  void reduce_scatter(local::Tensor& output, const std::vector<local::Tensor>& inputs,
                      ReduceOp op = ReduceOp::Sum);
  // input: size() * output.numel() elements.
  void reduce_scatter_tensor(local::Tensor& output, const local::Tensor& input,
                             ReduceOp op = ReduceOp::Sum);
  void barrier();

  Work broadcast_async(local::Tensor& tensor, int root);
  Work all_reduce_async(local::Tensor& tensor, ReduceOp op = ReduceOp::Sum);
  Work reduce_async(local::Tensor& tensor, int root, ReduceOp op = ReduceOp::Sum);
  Work all_gather_async(std::vector<local::Tensor>& outputs, const local::Tensor& input);
  Work all_gather_into_tensor_async(local::Tensor& output, const local::Tensor& input);
  Work gather_async(const local::Tensor& input, std::vector<local::Tensor>* outputs, int root);
  Work scatter_async(local::Tensor& output, const std::vector<local::Tensor>* inputs, int root);
  Work reduce_scatter_async(local::Tensor& output, const std::vector<local::Tensor>& inputs,
                            ReduceOp op = ReduceOp::Sum);
  Work reduce_scatter_tensor_async(local::Tensor& output, const local::Tensor& input,
                                   ReduceOp op = ReduceOp::Sum);
  Work barrier_async();

  // Leaves the group: tells the peers (they see "left", not "died"), fails pending
  // operations and closes sockets. Idempotent; the last handle's destructor does it too.
  // Subgroup handles share the world's connections: shutting any of them down ends all.
  void shutdown();
  // For an outside liveness monitor (a master-worker session's master): world rank
  // `world_rank` is lost. Operations pending or to come that involve it fail at once with
  // `why`; operations among the other ranks go on (zmq, and CUDA tensors staged through
  // host memory). The nccl backend keeps its own timeout. Any thread.
  void declare_lost(int world_rank, const std::string& why);

  struct Impl;  // implementation detail

 private:
  explicit ProcessGroup(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
  Impl& impl() const;
  std::shared_ptr<Impl> impl_;
};

// ---- the global (torch.distributed-like) API ----

// backend: "zmq" (or "tcp"), "nccl" (with CUDA), "gloo" or "mpi" (where built). "mpi" takes
// rank and size from MPI (mpirun, srun): init_method is not used, and world_size/rank, when
// given, must agree with MPI's. init_method: "env://" (MASTER_ADDR, MASTER_PORT, and
// WORLD_SIZE/RANK, else SLURM_NTASKS/SLURM_PROCID, else OMPI_COMM_WORLD_SIZE/OMPI_COMM_WORLD_RANK),
// "tcp://host:port" (rank 0 hosts the rendezvous) or "file:///path". world_size/rank -1
// mean "from the environment" for env://; with tcp:// and file:// rank -1 assigns ranks
// in arrival order (world_size is required). group_name lets several jobs share one file
// or address. Throws InvalidArgument when already initialized or on a bad argument.
void init_process_group(const std::string& backend = "zmq",
                        const std::string& init_method = "env://", int world_size = -1,
                        int rank = -1, const std::string& group_name = "",
                        std::chrono::milliseconds timeout = kDefaultTimeout);
bool is_initialized();
// Throws InvalidArgument when not initialized.
int get_rank();
int get_world_size();
// The world group; throws InvalidArgument when not initialized.
ProcessGroup& world_group();
// A subgroup of world ranks; every process must call it (see ProcessGroup::new_group).
ProcessGroup new_group(const std::vector<int>& ranks);
// Shuts the world group down and forgets it; a later init_process_group may start anew.
void destroy_process_group();

// Free functions on `group` (default: the world group); ranks are group ranks.
void send(const local::Tensor& tensor, int dst, int tag = 0, ProcessGroup* group = nullptr);
int recv(local::Tensor& tensor, int src = kAnySource, int tag = 0, ProcessGroup* group = nullptr);
Work isend(const local::Tensor& tensor, int dst, int tag = 0, ProcessGroup* group = nullptr);
Work irecv(local::Tensor& tensor, int src = kAnySource, int tag = 0, ProcessGroup* group = nullptr);
void broadcast(local::Tensor& tensor, int src, ProcessGroup* group = nullptr);
void all_reduce(local::Tensor& tensor, ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
void reduce(local::Tensor& tensor, int dst, ReduceOp op = ReduceOp::Sum,
            ProcessGroup* group = nullptr);
void all_gather(std::vector<local::Tensor>& outputs, const local::Tensor& input,
                ProcessGroup* group = nullptr);
void gather(const local::Tensor& input, std::vector<local::Tensor>* outputs, int dst = 0,
            ProcessGroup* group = nullptr);
void scatter(local::Tensor& output, const std::vector<local::Tensor>* inputs, int src = 0,
             ProcessGroup* group = nullptr);
void reduce_scatter(local::Tensor& output, const std::vector<local::Tensor>& inputs,
                    ReduceOp op = ReduceOp::Sum, ProcessGroup* group = nullptr);
void barrier(ProcessGroup* group = nullptr);
Work broadcast_async(local::Tensor& tensor, int src, ProcessGroup* group = nullptr);
Work all_reduce_async(local::Tensor& tensor, ReduceOp op = ReduceOp::Sum,
                      ProcessGroup* group = nullptr);

}  // namespace dtr
