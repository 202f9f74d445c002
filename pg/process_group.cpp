// ProcessGroup (validation, then the backend), Work, and the global torch-like API.
#include "dtr/process_group.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <random>
#include <set>

#include "dtr/config.hpp"
#include "dtr/env.hpp"
#include "pg/backend.hpp"
#include "pg/device_backend.hpp"
#include "pg/gloo/gloo_backend.hpp"
#include "pg/mpi/mpi_backend.hpp"
#include "pg/util.hpp"
#include "pg/zmq/mesh.hpp"
#include "pg/zmq/zmq_backend.hpp"

namespace dtr {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "SUM";
    case ReduceOp::Product:
      return "PRODUCT";
    case ReduceOp::Min:
      return "MIN";
    case ReduceOp::Max:
      return "MAX";
    case ReduceOp::Avg:
      return "AVG";
  }
  return "invalid";
}

std::string_view comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::Send:
      return "send";
    case CommOp::Recv:
      return "recv";
    case CommOp::RecvAnySource:
      return "recv_any_source";
    case CommOp::Broadcast:
      return "broadcast";
    case CommOp::AllReduce:
      return "all_reduce";
    case CommOp::Reduce:
      return "reduce";
    case CommOp::AllGather:
      return "all_gather";
    case CommOp::Gather:
      return "gather";
    case CommOp::Scatter:
      return "scatter";
    case CommOp::ReduceScatter:
      return "reduce_scatter";
    case CommOp::Barrier:
      return "barrier";
  }
  return "invalid";
}

bool backend_available(std::string_view backend) {
  // "nccl" needs CUDA; without NCCL itself its groups stage CUDA tensors through the host.
  backend = canonical_backend(backend);
  return backend == "zmq" || (backend == "nccl" && DTR_WITH_CUDA) ||
         (backend == "gloo" && DTR_WITH_GLOO) || (backend == "mpi" && DTR_WITH_MPI);
}

// ---------------------------------------------------------------- Work

bool Work::is_completed() const {
  if (!state_) return false;
  std::lock_guard lock(state_->m);
  return state_->done;
}

bool Work::is_success() const {
  if (!state_) return false;
  std::lock_guard lock(state_->m);
  return state_->done && !state_->error;
}

const std::shared_ptr<Work::State>& pg::done_work_state() {
  static const std::shared_ptr<Work::State> done = [] {
    auto s = std::make_shared<Work::State>("a completed call");
    s->complete();
    return s;
  }();
  return done;
}

void Work::wait(std::chrono::milliseconds timeout) {
  if (!state_) throw InvalidArgument("Work::wait on an empty Work");
  if (state_ == pg::done_work_state()) return;  // finished inline, without an error
  if (state_->progress && !is_completed()) state_->progress(*state_);
  std::unique_lock lock(state_->m);
  // done is checked first: wait_for reads the clock even when it need not wait.
  if (!state_->done && !state_->cv.wait_for(lock, timeout, [&] { return state_->done; })) {
    throw TimeoutError(
        fmt::format("{}: not complete after waiting {} ms", state_->what, timeout.count()));
  }
  if (state_->error) std::rethrow_exception(state_->error);
}

int Work::source_rank() const {
  if (!state_) return -1;
  std::lock_guard lock(state_->m);
  return state_->done && !state_->error ? state_->source : -1;
}

// ---------------------------------------------------------------- ProcessGroup

struct ProcessGroup::Impl {
  std::shared_ptr<pg::Backend> backend;
  ProcessGroupOptions options;
  std::shared_ptr<Store> store;  // kept: the process hosting a tcp store serves it
  std::string backend_name;
};

namespace {

std::string available_backends() {
  std::string out = "zmq (or tcp)";
  for (auto b : kKnownBackends) {
    if (b != "zmq" && backend_available(b)) out += ", " + std::string(b);
  }
  return out;
}

void check_options(const ProcessGroupOptions& o) {
  if (!backend_available(o.backend)) {
    bool known = false;
    for (auto b : kKnownBackends) known = known || b == o.backend;
    throw InvalidArgument(fmt::format("process group: backend '{}' is {} (available: {})",
                                      o.backend, known ? "not built into this dtr" : "unknown",
                                      available_backends()));
  }
  if (o.transport != "tcp" && o.transport != "ipc") {
    throw InvalidArgument(
        fmt::format("process group: transport '{}' (expected tcp or ipc)", o.transport));
  }
  if (o.backend == "tcp" && o.transport != "tcp") {
    throw InvalidArgument(fmt::format(
        "process group: backend 'tcp' is dtr's TCP transport, but transport '{}' was asked for "
        "(use backend 'zmq' with transport ipc)",
        o.transport));
  }
  if (o.timeout.count() <= 0) throw InvalidArgument("process group: timeout must be positive");
}

// Whether this process may make plain links beyond loopback, or has a key for CURVE ones.
bool may_leave_host(const ProcessGroupOptions& o) {
  const SecurityConfig sec = o.security ? *o.security : resolve_security();
  return sec.key.has_value() || sec.insecure;
}

// The address this rank binds: Options::bind_address, $DTR_PG_ADDR, or the one that routes
// to the rendezvous host. A file:// rendezvous may span hosts (a shared file system): with
// a key (or insecure) the ranks bind the address that faces the network; without one only
// loopback links are allowed at all, so they stay on loopback, and ranks that turn out to
// be on several hosts are refused at the rendezvous (check_one_host).
std::string bind_host(const ProcessGroupOptions& o, const std::string& rendezvous) {
  std::string addr = o.bind_address;
  if (addr.empty()) {
    if (const char* e = std::getenv("DTR_PG_ADDR"); e != nullptr && *e) addr = e;
  }
  if (addr.empty()) {
    if (rendezvous.starts_with("tcp://")) {
      std::string hp = rendezvous.substr(6);
      auto colon = hp.rfind(':');
      addr = pg::local_address_towards(pg::resolve_ipv4(hp.substr(0, colon)));
    } else if (rendezvous.starts_with("file://")) {
      // The default route's address, or loopback (see above).
      addr = may_leave_host(o) ? pg::local_address_towards("192.0.2.1") : "127.0.0.1";
    } else {
      addr = "127.0.0.1";
    }
  }
  return addr;
}

std::string bind_endpoint(const ProcessGroupOptions& o, const std::string& rendezvous) {
  if (o.transport == "ipc") {
    static std::atomic<uint64_t> counter{0};
    std::random_device rd;
    return fmt::format("ipc:///tmp/dtr-pg-{}-{}-{:08x}.sock", ::getpid(), ++counter, rd());
  }
  return fmt::format("tcp://{}:*", bind_host(o, rendezvous));
}

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

namespace {

std::shared_ptr<ProcessGroup::Impl> make_impl(std::shared_ptr<pg::Backend> host,
                                              const ProcessGroupOptions& options,
                                              std::shared_ptr<Store> store) {
  auto impl = std::make_shared<ProcessGroup::Impl>();
  impl->backend = pg::make_device_backend(std::move(host), options.backend, options.timeout);
  impl->options = options;
  impl->store = std::move(store);
  impl->backend_name = options.backend;
  return impl;
}

// mpi: the world is MPI's; what the caller says of it must agree.
std::shared_ptr<pg::Backend> mpi_world(int rank, int world_size, const ProcessGroupOptions& o) {
  const auto [mpi_rank, mpi_size] = pg::mpi_world_rank_size();
  if (world_size != mpi_size || (rank >= 0 && rank != mpi_rank)) {
    throw InvalidArgument(fmt::format(
        "process group: backend mpi takes rank and size from MPI (rank {} of {}), but rank {} "
        "of {} was asked for",
        mpi_rank, mpi_size, rank, world_size));
  }
  return pg::make_mpi_world(o);
}

int assign_rank(Store& store, const std::string& prefix, int world_size,
                const ProcessGroupOptions& options) {
  const int64_t n = store.add(prefix + "rank", 1);
  if (n > world_size) {
    throw InvalidArgument(fmt::format(
        "process group rendezvous at {} (group '{}'): {} processes joined a group of "
        "world_size {} (another job, or keys left by a crashed run: use a fresh file or "
        "another group_name)",
        store.describe(), options.group_name, n, world_size));
  }
  return static_cast<int>(n - 1);
}

// The zmq world: binds, publishes its endpoint, connects to every peer. `rank` -1 is
// assigned here (in arrival order).
// Ranks that bound loopback after a rendezvous that may span hosts (file://) must all be on
// this host: each publishes its host name, and a rank on another host is refused naming
// both hosts and what to set (a peer's loopback address would lead to this host's port,
// not to that peer).
void check_one_host(Store& store, int rank, int world_size, bool loopback,
                    const ProcessGroupOptions& o, const std::string& prefix) {
  if (!loopback || !store.describe().starts_with("file://")) return;
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  store.set(prefix + "host/" + std::to_string(rank), name);
  for (int i = 0; i < world_size; ++i) {
    const std::string other = store.get(prefix + "host/" + std::to_string(i), o.timeout);
    if (other == name) continue;
    throw InvalidArgument(fmt::format(
        "process group ({}): rank {} runs on host '{}' and rank {} on host '{}', but the ranks "
        "bound loopback addresses, as a process without a cluster key must: across hosts set "
        "DTR_KEY_FILE to the cluster key on every rank (or DTR_INSECURE=1 on a trusted "
        "network)",
        store.describe(), rank, name, i, other));
  }
}

std::shared_ptr<pg::Backend> zmq_world(Store& store, int& rank, int world_size,
                                       const ProcessGroupOptions& options,
                                       const std::string& prefix) {
  auto mesh =
      std::make_shared<pg::Mesh>(world_size, options, bind_endpoint(options, store.describe()));
  if (rank < 0) rank = assign_rank(store, prefix, world_size, options);
  check_one_host(store, rank, world_size, mesh->bound_endpoint().starts_with("tcp://127."), options,
                 prefix);
  uint64_t token;
  if (rank == 0) {
    std::random_device rd;
    token = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(::getpid());
    store.set(prefix + "token", std::to_string(static_cast<int64_t>(token)));
  } else {
    const std::string t = store.get(prefix + "token", options.timeout);
    token = static_cast<uint64_t>(pg::parse_int(t, "rendezvous token"));
  }
  store.set(prefix + "ep/" + std::to_string(rank), mesh->bound_endpoint());
  std::vector<std::string> endpoints(world_size);
  for (int i = 0; i < world_size; ++i) {
    endpoints[i] = store.get(prefix + "ep/" + std::to_string(i), options.timeout);
  }
  mesh->connect(rank, endpoints, token);
  return pg::make_zmq_world(mesh);
}

}  // namespace

ProcessGroup ProcessGroup::create(std::shared_ptr<Store> store, int rank, int world_size,
                                  const Options& options) {
  check_options(options);
  if (!store) throw InvalidArgument("ProcessGroup::create: null store");
  if (world_size < 1) {
    throw InvalidArgument(
        fmt::format("ProcessGroup::create: world_size {} (must be >= 1)", world_size));
  }
  if (rank < -1 || rank >= world_size) {
    throw InvalidArgument(fmt::format("ProcessGroup::create: rank {} outside [0, {}) (-1: assign)",
                                      rank, world_size));
  }
  const std::string backend(canonical_backend(options.backend));
  if (backend == "mpi") {
    return ProcessGroup(make_impl(mpi_world(rank, world_size, options), options, store));
  }
  const std::string prefix = "dtr-pg/" + options.group_name + "/";
  std::shared_ptr<pg::Backend> host;
  if (backend == "gloo") {
    const std::string addr = bind_host(options, store->describe());
    if (rank < 0) rank = assign_rank(*store, prefix, world_size, options);
    check_one_host(*store, rank, world_size, addr.starts_with("127."), options, prefix);
    host = pg::make_gloo_world(store, rank, world_size, addr, options);
  } else {
    host = zmq_world(*store, rank, world_size, options, prefix);
  }
  if (rank == 0) {
    // Every peer has connected, so every peer has read all it needs from the store. gloo's
    // subgroups meet later under the same prefix (and the world's own gloo keys are gone):
    // only the rank counter goes.
    try {
      if (backend == "gloo") {
        store->delete_prefix(prefix + "rank");
        store->delete_prefix(prefix + "host/");
      } else {
        store->delete_prefix(prefix);
      }
    } catch (const Error&) {
    }
  }
  return ProcessGroup(make_impl(std::move(host), options, std::move(store)));
}

ProcessGroup ProcessGroup::create(const std::vector<std::string>& endpoints, int rank,
                                  const Options& options) {
  check_options(options);
  const int world = static_cast<int>(endpoints.size());
  if (world < 1) throw InvalidArgument("ProcessGroup::create: no endpoints");
  if (rank < 0 || rank >= world) {
    throw InvalidArgument(
        fmt::format("ProcessGroup::create: rank {} outside [0, {})", rank, world));
  }
  const std::string backend(canonical_backend(options.backend));
  if (backend == "mpi") {
    // Fewer endpoints than MPI's world: a part of the job (a master-worker session's
    // workers under mpirun, whose master stands aside), ordered by `rank`.
    if (world < pg::mpi_world_rank_size().second) {
      return ProcessGroup(
          make_impl(pg::make_mpi_world_part(options, rank, world), options, nullptr));
    }
    return ProcessGroup(make_impl(mpi_world(rank, world, options), options, nullptr));
  }
  if (backend == "gloo") {
    // gloo connects through a store: rank 0 serves one at endpoints[0] (tcp://), or the
    // ranks share a file next to its path (ipc://); the other endpoints are not used.
    std::shared_ptr<Store> store;
    ProcessGroupOptions o = options;
    const std::string& e = endpoints[0];
    if (e.starts_with("ipc://")) {
      store = make_file_store(e.substr(6) + ".store");
      // ipc:// endpoints mean one host: gloo's TCP stays on loopback unless told otherwise.
      if (o.bind_address.empty() && std::getenv("DTR_PG_ADDR") == nullptr) {
        o.bind_address = "127.0.0.1";
      }
    } else if (e.starts_with("tcp://")) {
      const std::string hp = e.substr(6);
      const auto colon = hp.rfind(':');
      if (colon == std::string::npos) {
        throw InvalidArgument(fmt::format("ProcessGroup::create: endpoint '{}' lacks a port", e));
      }
      store = make_tcp_store(hp.substr(0, colon),
                             static_cast<int>(pg::parse_int(hp.substr(colon + 1), "port")),
                             rank == 0, options.timeout);
    } else {
      throw InvalidArgument(fmt::format(
          "ProcessGroup::create: endpoint '{}' (expected tcp://HOST:PORT or ipc://PATH)", e));
    }
    return create(std::move(store), rank, world, o);
  }
  auto mesh = std::make_shared<pg::Mesh>(world, options, endpoints[rank]);
  uint64_t token = fnv1a(options.group_name);
  for (const auto& e : endpoints) token = fnv1a(e, token) ^ 0x9e3779b97f4a7c15ull;
  mesh->connect(rank, endpoints, token);
  return ProcessGroup(make_impl(pg::make_zmq_world(mesh), options, nullptr));
}

ProcessGroup::Impl& ProcessGroup::impl() const {
  if (!impl_) throw InvalidArgument("process group: empty ProcessGroup handle");
  return *impl_;
}

int ProcessGroup::rank() const {
  return impl().backend->rank();
}
int ProcessGroup::size() const {
  return impl().backend->size();
}
const std::vector<int>& ProcessGroup::ranks() const {
  return impl().backend->world_ranks();
}
const std::string& ProcessGroup::backend_name() const {
  return impl().backend_name;
}
const ProcessGroup::Options& ProcessGroup::options() const {
  return impl().options;
}
std::string ProcessGroup::cuda_path() const {
  return impl().backend->cuda_path();
}
std::string ProcessGroup::host_path() const {
  return impl().backend->host_path();
}

ProcessGroup ProcessGroup::new_group(std::vector<int> ranks) const {
  auto& im = impl();
  if (im.backend->rank() < 0) {
    throw InvalidArgument("new_group: this process is not a member of the parent group");
  }
  const int n = im.backend->size();
  std::set<int> seen;
  for (int r : ranks) {
    if (r < 0 || r >= n) {
      throw InvalidArgument(
          fmt::format("new_group({}): rank {} outside [0, {})", pg::format_ranks(ranks), r, n));
    }
    if (!seen.insert(r).second) {
      throw InvalidArgument(
          fmt::format("new_group({}): rank {} listed twice", pg::format_ranks(ranks), r));
    }
  }
  if (ranks.empty()) throw InvalidArgument("new_group: empty rank list");
  auto child = std::make_shared<Impl>(im);
  child->backend = im.backend->new_group(ranks);
  return ProcessGroup(std::move(child));
}

void ProcessGroup::check_supported(CommOp op, DeviceKind device) const {
  const auto& name = impl().backend_name;
  if (!backend_supports(name, op, device)) {
    throw InvalidArgument(fmt::format(
        "process group backend '{}' does not support {} on {} tensors (see the capability "
        "table in docs/process_groups.md)",
        name, comm_op_name(op), device == DeviceKind::CPU ? "CPU" : "CUDA"));
  }
}

namespace {

std::string device_name(int device) {
  return device < 0 ? std::string("cpu") : fmt::format("cuda:{}", device);
}

struct Checker {
  static constexpr int kUnset = -2;
  const ProcessGroup& g;
  const char* what;
  // The device of the first tensor checked; the others must live there too.
  mutable int device = kUnset;
  mutable const char* device_role = "";
  void member() const {
    if (!g.is_member()) {
      throw InvalidArgument(
          fmt::format("{}: this process is not a member of the group (world "
                      "ranks {})",
                      what, pg::format_ranks(g.ranks())));
    }
  }
  void rank(int r, const char* role) const {
    if (r < 0 || r >= g.size()) {
      throw InvalidArgument(
          fmt::format("{}: {} rank {} outside the group [0, {})", what, role, r, g.size()));
    }
  }
  // A point-to-point peer: a rank of the group other than this process's own (torch
  // refuses sending to or receiving from oneself too).
  void peer(int r, const char* role) const {
    rank(r, role);
    if (r == g.rank())
      throw InvalidArgument(fmt::format(
          "{}: the {} rank {} is this process's own rank; a rank cannot {} itself", what, role, r,
          std::string_view(what) == "send" ? "send to" : "receive from"));
  }
  void tensor(const local::Tensor& t, const char* role) const {
    if (!t.defined())
      throw InvalidArgument(fmt::format("{}: the {} tensor is undefined", what, role));
    if (device == kUnset) {
      device = t.device();
      device_role = role;
    } else if (t.device() != device) {
      throw DeviceError(
          fmt::format("{}: the {} tensor is on {}, the {} tensor on {}; the tensors "
                      "of one call must live on one device",
                      what, role, device_name(t.device()), device_role, device_name(device)));
    }
    if (!t.meta().is_contiguous()) {
      throw InvalidArgument(
          fmt::format("{}: the {} tensor must be contiguous (got {} with "
                      "strides {}); call .contiguous() first",
                      what, role, describe(t.meta()), to_string(t.meta().strides)));
    }
  }
  void like(const local::Tensor& t, const local::Tensor& ref, const char* role, size_t i) const {
    tensor(t, role);
    if (t.meta().dtype != ref.meta().dtype) {
      throw DTypeError(fmt::format("{}: {}[{}] is {}, expected {} like the other tensor", what,
                                   role, i, dtype_name(t.meta().dtype),
                                   dtype_name(ref.meta().dtype)));
    }
    if (t.meta().numel() != ref.meta().numel()) {
      throw ShapeError(fmt::format("{}: {}[{}] is {}, expected {} elements like {}", what, role, i,
                                   describe(t.meta()), ref.meta().numel(), describe(ref.meta())));
    }
  }
  void list(const std::vector<local::Tensor>& v, const local::Tensor& ref, const char* role) const {
    if (static_cast<int>(v.size()) != g.size()) {
      throw InvalidArgument(fmt::format("{}: {} has {} tensors, the group has {} ranks", what, role,
                                        v.size(), g.size()));
    }
    for (size_t i = 0; i < v.size(); ++i) like(v[i], ref, role, i);
  }
  void reducible(const local::Tensor& t, ReduceOp op) const {
    if (op == ReduceOp::Avg && !is_floating(t.meta().dtype)) {
      throw DTypeError(fmt::format("{}: ReduceOp AVG needs a floating dtype, got {}", what,
                                   dtype_name(t.meta().dtype)));
    }
    if (static_cast<uint8_t>(op) > static_cast<uint8_t>(ReduceOp::Avg)) {
      throw InvalidArgument(fmt::format("{}: unknown ReduceOp {}", what, static_cast<int>(op)));
    }
  }
};

// Views of `t` as `parts` consecutive blocks of `block` elements each.
std::vector<local::Tensor> split_blocks(const local::Tensor& t, const local::Tensor& like,
                                        int parts) {
  std::vector<local::Tensor> out;
  const int64_t n = like.meta().numel();
  for (int i = 0; i < parts; ++i) {
    TensorMeta m = TensorMeta::contiguous(t.meta().dtype, Shape{n});
    m.offset = t.meta().offset + i * n;
    out.emplace_back(t.storage(), m);
  }
  return out;
}

// Set while a blocking collective builds its arguments (see CollectiveArgs::blocking).
thread_local bool t_blocking = false;

struct BlockingCall {
  BlockingCall() { t_blocking = true; }
  ~BlockingCall() { t_blocking = false; }
  BlockingCall(const BlockingCall&) = delete;
  BlockingCall& operator=(const BlockingCall&) = delete;
};

std::chrono::milliseconds sync_wait(const ProcessGroupOptions& o) {
  return o.timeout * 2 + std::chrono::seconds(10);
}

}  // namespace

namespace {
Work submit(ProcessGroup::Impl& im, pg::CollectiveArgs a) {
  a.blocking = t_blocking;
  return im.backend->collective(std::move(a));
}
}  // namespace

Work ProcessGroup::isend(const local::Tensor& tensor, int dst, int tag) {
  Checker c{*this, "send"};
  c.member();
  check_supported(CommOp::Send, DeviceKind::CPU);
  c.peer(dst, "destination");
  c.tensor(tensor, "send");
  return impl().backend->isend(tensor, dst, tag, t_blocking);
}

Work ProcessGroup::irecv(local::Tensor& tensor, int src, int tag) {
  Checker c{*this, "recv"};
  c.member();
  check_supported(src == kAnySource ? CommOp::RecvAnySource : CommOp::Recv, DeviceKind::CPU);
  if (src != kAnySource) c.peer(src, "source");
  c.tensor(tensor, "receive");
  return impl().backend->irecv(tensor, src, tag, t_blocking);
}

void ProcessGroup::send(const local::Tensor& tensor, int dst, int tag) {
  Work w;
  {
    BlockingCall blocking;
    w = isend(tensor, dst, tag);
  }
  w.wait(sync_wait(options()));
}

int ProcessGroup::recv(local::Tensor& tensor, int src, int tag) {
  Work w;
  {
    BlockingCall blocking;
    w = irecv(tensor, src, tag);
  }
  w.wait(sync_wait(options()));
  return w.source_rank();
}

Work ProcessGroup::broadcast_async(local::Tensor& tensor, int root) {
  Checker c{*this, "broadcast"};
  c.member();
  check_supported(CommOp::Broadcast, DeviceKind::CPU);
  c.rank(root, "root");
  c.tensor(tensor, "broadcast");
  pg::CollectiveArgs a;
  a.op = CommOp::Broadcast;
  a.root = root;
  a.outputs = {tensor};
  return submit(impl(), std::move(a));
}

Work ProcessGroup::all_reduce_async(local::Tensor& tensor, ReduceOp op) {
  Checker c{*this, "all_reduce"};
  c.member();
  check_supported(CommOp::AllReduce, DeviceKind::CPU);
  c.tensor(tensor, "all_reduce");
  c.reducible(tensor, op);
  pg::CollectiveArgs a;
  a.op = CommOp::AllReduce;
  a.reduce = op;
  a.outputs = {tensor};
  return submit(impl(), std::move(a));
}

Work ProcessGroup::reduce_async(local::Tensor& tensor, int root, ReduceOp op) {
  Checker c{*this, "reduce"};
  c.member();
  check_supported(CommOp::Reduce, DeviceKind::CPU);
  c.rank(root, "root");
  c.tensor(tensor, "reduce");
  c.reducible(tensor, op);
  pg::CollectiveArgs a;
  a.op = CommOp::Reduce;
  a.reduce = op;
  a.root = root;
  a.outputs = {tensor};
  return submit(impl(), std::move(a));
}

Work ProcessGroup::all_gather_async(std::vector<local::Tensor>& outputs,
                                    const local::Tensor& input) {
  Checker c{*this, "all_gather"};
  c.member();
  check_supported(CommOp::AllGather, DeviceKind::CPU);
  c.tensor(input, "input");
  c.list(outputs, input, "outputs");
  pg::CollectiveArgs a;
  a.op = CommOp::AllGather;
  a.inputs = {input};
  a.outputs = outputs;
  return submit(impl(), std::move(a));
}

Work ProcessGroup::all_gather_into_tensor_async(local::Tensor& output, const local::Tensor& input) {
  Checker c{*this, "all_gather_into_tensor"};
  c.member();
  check_supported(CommOp::AllGather, DeviceKind::CPU);
  c.tensor(input, "input");
  c.tensor(output, "output");
  if (output.meta().dtype != input.meta().dtype) {
    throw DTypeError(fmt::format("all_gather_into_tensor: output is {}, input {}",
                                 dtype_name(output.meta().dtype), dtype_name(input.meta().dtype)));
  }
  if (output.meta().numel() != input.meta().numel() * size()) {
    throw ShapeError(
        fmt::format("all_gather_into_tensor: output {} must have {} x {} = {} elements (input {})",
                    describe(output.meta()), size(), input.meta().numel(),
                    size() * input.meta().numel(), describe(input.meta())));
  }
  pg::CollectiveArgs a;
  a.op = CommOp::AllGather;
  a.inputs = {input};
  a.outputs = split_blocks(output, input, size());
  return submit(impl(), std::move(a));
}

Work ProcessGroup::gather_async(const local::Tensor& input, std::vector<local::Tensor>* outputs,
                                int root) {
  Checker c{*this, "gather"};
  c.member();
  check_supported(CommOp::Gather, DeviceKind::CPU);
  c.rank(root, "root");
  c.tensor(input, "input");
  pg::CollectiveArgs a;
  a.op = CommOp::Gather;
  a.root = root;
  a.inputs = {input};
  if (rank() == root) {
    if (outputs == nullptr) throw InvalidArgument("gather: the root needs an output list");
    c.list(*outputs, input, "outputs");
    a.outputs = *outputs;
  }
  return submit(impl(), std::move(a));
}

Work ProcessGroup::scatter_async(local::Tensor& output, const std::vector<local::Tensor>* inputs,
                                 int root) {
  Checker c{*this, "scatter"};
  c.member();
  check_supported(CommOp::Scatter, DeviceKind::CPU);
  c.rank(root, "root");
  c.tensor(output, "output");
  pg::CollectiveArgs a;
  a.op = CommOp::Scatter;
  a.root = root;
  a.outputs = {output};
  if (rank() == root) {
    if (inputs == nullptr) throw InvalidArgument("scatter: the root needs an input list");
    c.list(*inputs, output, "inputs");
    a.inputs = *inputs;
  }
  return submit(impl(), std::move(a));
}

Work ProcessGroup::reduce_scatter_async(local::Tensor& output,
                                        const std::vector<local::Tensor>& inputs, ReduceOp op) {
  Checker c{*this, "reduce_scatter"};
  c.member();
  check_supported(CommOp::ReduceScatter, DeviceKind::CPU);
  c.tensor(output, "output");
  c.list(inputs, output, "inputs");
  c.reducible(output, op);
  pg::CollectiveArgs a;
  a.op = CommOp::ReduceScatter;
  a.reduce = op;
  a.inputs = inputs;
  a.outputs = {output};
  return submit(impl(), std::move(a));
}

Work ProcessGroup::reduce_scatter_tensor_async(local::Tensor& output, const local::Tensor& input,
                                               ReduceOp op) {
  Checker c{*this, "reduce_scatter_tensor"};
  c.member();
  check_supported(CommOp::ReduceScatter, DeviceKind::CPU);
  c.tensor(output, "output");
  c.tensor(input, "input");
  c.reducible(output, op);
  if (output.meta().dtype != input.meta().dtype) {
    throw DTypeError(fmt::format("reduce_scatter_tensor: output is {}, input {}",
                                 dtype_name(output.meta().dtype), dtype_name(input.meta().dtype)));
  }
  if (input.meta().numel() != output.meta().numel() * size()) {
    throw ShapeError(
        fmt::format("reduce_scatter_tensor: input {} must have {} x {} = {} elements (output {})",
                    describe(input.meta()), size(), output.meta().numel(),
                    size() * output.meta().numel(), describe(output.meta())));
  }
  pg::CollectiveArgs a;
  a.op = CommOp::ReduceScatter;
  a.reduce = op;
  a.inputs = split_blocks(input, output, size());
  a.outputs = {output};
  return submit(impl(), std::move(a));
}

Work ProcessGroup::barrier_async() {
  Checker c{*this, "barrier"};
  c.member();
  check_supported(CommOp::Barrier, DeviceKind::CPU);
  pg::CollectiveArgs a;
  a.op = CommOp::Barrier;
  return submit(impl(), std::move(a));
}

void ProcessGroup::broadcast(local::Tensor& t, int root) {
  Work w;
  {
    BlockingCall blocking;
    w = broadcast_async(t, root);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::all_reduce(local::Tensor& t, ReduceOp op) {
  Work w;
  {
    BlockingCall blocking;
    w = all_reduce_async(t, op);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::reduce(local::Tensor& t, int root, ReduceOp op) {
  Work w;
  {
    BlockingCall blocking;
    w = reduce_async(t, root, op);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::all_gather(std::vector<local::Tensor>& outputs, const local::Tensor& input) {
  Work w;
  {
    BlockingCall blocking;
    w = all_gather_async(outputs, input);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::all_gather_into_tensor(local::Tensor& output, const local::Tensor& input) {
  Work w;
  {
    BlockingCall blocking;
    w = all_gather_into_tensor_async(output, input);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::gather(const local::Tensor& input, std::vector<local::Tensor>* outputs,
                          int root) {
  Work w;
  {
    BlockingCall blocking;
    w = gather_async(input, outputs, root);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::scatter(local::Tensor& output, const std::vector<local::Tensor>* inputs,
                           int root) {
  Work w;
  {
    BlockingCall blocking;
    w = scatter_async(output, inputs, root);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::reduce_scatter(local::Tensor& output, const std::vector<local::Tensor>& inputs,
                                  ReduceOp op) {
  Work w;
  {
    BlockingCall blocking;
    w = reduce_scatter_async(output, inputs, op);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::reduce_scatter_tensor(local::Tensor& output, const local::Tensor& input,
                                         ReduceOp op) {
  Work w;
  {
    BlockingCall blocking;
    w = reduce_scatter_tensor_async(output, input, op);
  }
  w.wait(sync_wait(options()));
}
void ProcessGroup::barrier() {
  Work w;
  {
    BlockingCall blocking;
    w = barrier_async();
  }
  w.wait(sync_wait(options()));
}

void ProcessGroup::shutdown() {
  if (impl_) impl_->backend->shutdown();
}

void ProcessGroup::declare_lost(int world_rank, const std::string& why) {
  if (impl_) impl_->backend->declare_lost(world_rank, why);
}

// ---------------------------------------------------------------- global API

namespace {

std::mutex g_mutex;
ProcessGroup g_world;
bool g_initialized = false;

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v ? v : nullptr;
}

int env_int(std::initializer_list<const char*> names, const char* what) {
  for (const char* n : names) {
    if (const char* v = env(n)) return static_cast<int>(pg::parse_int(v, n));
  }
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
  throw InvalidArgument(
      fmt::format("init_process_group(env://): {} unknown: none of {} is set", what, list));
}

// Backend mpi takes rank and size from MPI. A launcher that starts its ranks without MPI
// (dtr-exec, torchrun: RANK and WORLD_SIZE in each rank's environment; srun with no PMI)
// makes each process an MPI world of one, rank 0 of 1, and every all_reduce would return
// the caller's own value: refuse when the launcher's world and MPI's disagree.
void check_mpi_launcher(int mpi_rank, int mpi_size) {
  const char* size_var = env("WORLD_SIZE");
  const char* rank_var = env("RANK");
  const char* names = "RANK and WORLD_SIZE";
  if (size_var == nullptr && rank_var == nullptr && mpi_size == 1 && env("SLURM_STEP_ID")) {
    size_var = env("SLURM_STEP_NUM_TASKS");
    rank_var = env("SLURM_PROCID");
    names = "SLURM_PROCID and SLURM_STEP_NUM_TASKS (srun)";
  }
  const int64_t size = size_var ? pg::parse_int(size_var, "WORLD_SIZE") : mpi_size;
  const int64_t rank = rank_var ? pg::parse_int(rank_var, "RANK") : mpi_rank;
  if (size == mpi_size && rank == mpi_rank) return;
  throw InvalidArgument(fmt::format(
      "init_process_group(mpi): the launcher started this process as rank {} of {} ({}), "
      "but MPI sees rank {} of {}: processes started without an MPI launcher are each an MPI "
      "world of one. Start mpi programs with mpirun -np {} (or srun with MPI support), or use "
      "backend 'gloo' or 'tcp' under this launcher",
      rank, size, names, mpi_rank, mpi_size, size));
}

std::pair<std::string, int> host_port(const std::string& hp, const std::string& method) {
  auto colon = hp.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == hp.size()) {
    throw InvalidArgument(fmt::format("init_process_group: '{}' needs host:port", method));
  }
  const int64_t port = pg::parse_int(hp.substr(colon + 1), "port");
  if (port <= 0 || port > 65535) {
    throw InvalidArgument(
        fmt::format("init_process_group: port {} out of range in '{}'", port, method));
  }
  return {hp.substr(0, colon), static_cast<int>(port)};
}

}  // namespace

void init_process_group(const std::string& backend, const std::string& init_method, int world_size,
                        int rank, const std::string& group_name,
                        std::chrono::milliseconds timeout) {
  std::lock_guard lock(g_mutex);
  if (g_initialized) {
    throw InvalidArgument(
        "init_process_group: already initialized (call destroy_process_group first)");
  }
  check_environment();  // a DTR_* switch that is set is understood, or refused here
  ProcessGroupOptions o;
  o.backend = backend;
  o.timeout = timeout;
  o.group_name = group_name;
  if (const char* t = env("DTR_PG_TRANSPORT")) o.transport = t;
  if (const char* v = env("DTR_PG_VERIFY")) {
    const std::string s = v;
    o.verify_collectives = !(s == "0" || s == "false" || s == "no" || s == "off");
  }
  check_options(o);
  std::shared_ptr<Store> store;
  if (canonical_backend(backend) == "mpi") {
    // Rank and size are MPI's; init_method is not used (as in torch).
    const auto [mpi_rank, mpi_size] = pg::mpi_world_rank_size();
    check_mpi_launcher(mpi_rank, mpi_size);
    if (world_size < 0) world_size = mpi_size;
    if (rank < 0) rank = mpi_rank;
    store = make_hash_store();
  } else if (init_method == "env://") {
    const char* addr = env("MASTER_ADDR");
    const char* port = env("MASTER_PORT");
    if (addr == nullptr || port == nullptr) {
      throw InvalidArgument("init_process_group(env://): MASTER_ADDR and MASTER_PORT must be set");
    }
    if (world_size < 0)
      world_size = env_int({"WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"}, "world size");
    if (rank < 0) rank = env_int({"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"}, "rank");
    auto [host, p] = host_port(std::string(addr) + ":" + port, "env://");
    store = make_tcp_store(host, p, rank == 0, timeout);
  } else if (init_method.starts_with("tcp://")) {
    auto [host, p] = host_port(init_method.substr(6), init_method);
    if (world_size < 1) {
      throw InvalidArgument(
          fmt::format("init_process_group({}): world_size must be given", init_method));
    }
    store = make_tcp_store(host, p, rank <= 0, timeout);
  } else if (init_method.starts_with("file://")) {
    if (world_size < 1) {
      throw InvalidArgument(
          fmt::format("init_process_group({}): world_size must be given", init_method));
    }
    store = make_file_store(init_method.substr(7));
  } else {
    throw InvalidArgument(fmt::format(
        "init_process_group: init_method '{}' (expected env://, tcp://host:port or file:///path)",
        init_method));
  }
  if (world_size < 1) {
    throw InvalidArgument(
        fmt::format("init_process_group: world_size {} (must be >= 1)", world_size));
  }
  g_world = ProcessGroup::create(std::move(store), rank, world_size, o);
  g_initialized = true;
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_initialized;
}

ProcessGroup& world_group() {
  std::lock_guard lock(g_mutex);
  if (!g_initialized) {
    throw InvalidArgument("process group not initialized: call dtr::init_process_group() first");
  }
  return g_world;
}

int get_rank() {
  return world_group().rank();
}
int get_world_size() {
  return world_group().size();
}
ProcessGroup new_group(const std::vector<int>& ranks) {
  return world_group().new_group(ranks);
}

void destroy_process_group() {
  ProcessGroup old;
  {
    std::lock_guard lock(g_mutex);
    if (!g_initialized) return;
    old = std::move(g_world);
    g_world = ProcessGroup();
    g_initialized = false;
  }
  old.shutdown();
}

namespace {
ProcessGroup& pick(ProcessGroup* g) {
  return g != nullptr ? *g : world_group();
}
}  // namespace

void send(const local::Tensor& t, int dst, int tag, ProcessGroup* g) {
  pick(g).send(t, dst, tag);
}
int recv(local::Tensor& t, int src, int tag, ProcessGroup* g) {
  return pick(g).recv(t, src, tag);
}
Work isend(const local::Tensor& t, int dst, int tag, ProcessGroup* g) {
  return pick(g).isend(t, dst, tag);
}
Work irecv(local::Tensor& t, int src, int tag, ProcessGroup* g) {
  return pick(g).irecv(t, src, tag);
}
void broadcast(local::Tensor& t, int src, ProcessGroup* g) {
  pick(g).broadcast(t, src);
}
void all_reduce(local::Tensor& t, ReduceOp op, ProcessGroup* g) {
  pick(g).all_reduce(t, op);
}
void reduce(local::Tensor& t, int dst, ReduceOp op, ProcessGroup* g) {
  pick(g).reduce(t, dst, op);
}
void all_gather(std::vector<local::Tensor>& outputs, const local::Tensor& input, ProcessGroup* g) {
  pick(g).all_gather(outputs, input);
}
void gather(const local::Tensor& input, std::vector<local::Tensor>* outputs, int dst,
            ProcessGroup* g) {
  pick(g).gather(input, outputs, dst);
}
void scatter(local::Tensor& output, const std::vector<local::Tensor>* inputs, int src,
             ProcessGroup* g) {
  pick(g).scatter(output, inputs, src);
}
void reduce_scatter(local::Tensor& output, const std::vector<local::Tensor>& inputs, ReduceOp op,
                    ProcessGroup* g) {
  pick(g).reduce_scatter(output, inputs, op);
}
void barrier(ProcessGroup* g) {
  pick(g).barrier();
}
Work broadcast_async(local::Tensor& t, int src, ProcessGroup* g) {
  return pick(g).broadcast_async(t, src);
}
Work all_reduce_async(local::Tensor& t, ReduceOp op, ProcessGroup* g) {
  return pick(g).all_reduce_async(t, op);
}

}  // namespace dtr
