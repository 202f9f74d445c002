// Remote tensor handles, node and device scoping, sync points.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "common/same_host.hpp"
#include "master/capture.hpp"
#include "master/session.hpp"

namespace dtr {

using detail::MasterSession;
using detail::RemoteTensor;
using protocol::Command;
namespace cmd = protocol::cmd;

namespace {

using common::kSameHostMinBytes;

size_t meta_bytes(const TensorMeta& m) {
  return static_cast<size_t>(m.numel()) * element_size(m.dtype);
}

// An op on at most this many elements is small work (MasterSession::Wake::kLazy): it goes
// with the next message rather than waking the I/O thread. (The worker runs ops of this
// size at once on its dispatch thread too.)
constexpr int64_t kLazyElements = 32 * 1024;
MasterSession::Wake wake_for(const TensorMeta& out) {
  return out.numel() <= kLazyElements ? MasterSession::Wake::kLazy : MasterSession::Wake::kNow;
}

std::mutex g_session_mu;
std::shared_ptr<MasterSession> g_session;
thread_local int t_node = 0;
thread_local int t_device = -1;

using detail::check_node;
using detail::device_name;
using detail::remote_error;

std::shared_ptr<MasterSession> session(std::string_view what) {
  return detail::current_session(what);
}

std::shared_ptr<RemoteTensor> make_remote(std::shared_ptr<MasterSession> s, int node, int device,
                                          uint64_t id, const TensorMeta& meta) {
  auto r = std::make_shared<RemoteTensor>();
  r->session = std::move(s);
  r->node = node;
  r->device = device;
  r->id = id;
  r->meta = meta;
  return r;
}

void check_device(std::string_view what, const MasterSession& s, int node, int device) {
  int count = static_cast<int>(s.hello(node).devices.size()) - 1;
  if (device >= count || device < -1)
    throw DeviceError(fmt::format("{}: node {} has no CUDA device {} ({})", what, node, device,
                                  count == 0 ? std::string("it has none")
                                             : fmt::format("it has cuda:0 to cuda:{}", count - 1)));
}

}  // namespace

namespace detail {

std::shared_ptr<MasterSession> current_session(std::string_view what) {
  std::lock_guard lock(g_session_mu);
  if (!g_session || g_session->closed())
    throw InvalidArgument(
        fmt::format("{}: no master-worker session; call dtr::init_master_worker() first", what));
  return g_session;
}

void check_node(std::string_view what, const MasterSession& s, int node) {
  if (node < 0 || node >= s.node_count())
    throw IndexError(
        fmt::format("{}: node {} does not exist (there are {} nodes)", what, node, s.node_count()));
}

std::string device_name(int device) {
  return device < 0 ? std::string("cpu") : fmt::format("cuda:{}", device);
}

RemoteError remote_error(int node, const protocol::RemoteFailure& f) {
  std::string where = fmt::format("node {} ({})", node, device_name(f.device));
  std::string tensor = f.tensor == protocol::kNoTensor ? std::string("nothing")
                                                       : fmt::format("tensor %{}", f.tensor);
  auto info = std::make_shared<RemoteFailureInfo>(RemoteFailureInfo{
      f.op, f.tensor, node, f.device, f.message, f.cause_op, f.cause_tensor, f.cause_message});
  if (f.cause_tensor == f.tensor && f.cause_op == f.op)
    return RemoteError(
        fmt::format("{} failed on {} producing {}: {}", f.op, where, tensor, f.message), info);
  // A cause that made no tensor (a lost node, say) names none.
  std::string cause = f.cause_tensor == protocol::kNoTensor
                          ? f.cause_op
                          : fmt::format("{} producing tensor %{}", f.cause_op, f.cause_tensor);
  return RemoteError(fmt::format("{} failed on {} producing {}: {}; first cause: {}: {}", f.op,
                                 where, tensor, f.message, cause, f.cause_message),
                     info);
}

RemoteTensor::~RemoteTensor() {
  if (!session || session->closed()) return;
  // A Free needs no promptness: it leaves with the next message to the node.
  session->enqueue(node, cmd::Free{.input = id}, nullptr, MasterSession::Wake::kLazy);
}
}  // namespace detail

// ---- handles ----

DistributedTensor::DistributedTensor(const Shape& shape, DType dtype)
    : DistributedTensor(create(OpId::empty, creation::shape(shape, dtype))) {}

const RemoteTensor& DistributedTensor::remote(std::string_view what) const {
  if (!remote_) throw InvalidArgument(fmt::format("{}: called on an undefined tensor", what));
  return *remote_;
}

const TensorMeta& DistributedTensor::meta() const {
  return remote("meta").meta;
}
int DistributedTensor::get_node() const {
  return remote("get_node").node;
}
int DistributedTensor::get_device() const {
  return remote("get_device").device;
}
uint64_t DistributedTensor::id() const {
  return remote("id").id;
}

DistributedTensor DistributedTensor::adopt(std::shared_ptr<MasterSession> s, int node, int device,
                                           uint64_t id, const TensorMeta& meta) {
  return DistributedTensor(make_remote(std::move(s), node, device, id, meta));
}

DistributedTensor DistributedTensor::create(OpId op, const OpAttrs& attrs) {
  auto s = session(op_def(op).name);
  check_node(op_def(op).name, *s, t_node);
  check_device(op_def(op).name, *s, t_node, t_device);
  s->check_alive(t_node);
  TensorMeta meta = infer(op, {}, attrs).meta;
  const uint64_t out = s->new_id();
  s->enqueue(t_node,
             cmd::RunOp{.stream = detail::current_stream_id(*s, t_node),
                        .op = op,
                        .out = out,
                        .attrs = attrs,
                        .device = t_device},
             wake_for(meta));
  return DistributedTensor(make_remote(s, t_node, t_device, out, meta));
}

namespace {
// The shape rule: the result's metadata into `*meta` (an in-place call's is input 0's:
// only its checks run).
void infer_into(OpId op, std::span<const TensorMeta> in, const OpAttrs& attrs, bool inplace,
                TensorMeta* meta) {
  if (inplace)
    infer_inplace(op, in, attrs);
  else
    *meta = infer(op, in, attrs, false).meta;
}

// Throws InvalidArgument naming both places when `other` lives elsewhere than `self`.
void check_same_place(const OpDef& d, bool inplace, const RemoteTensor& self,
                      const RemoteTensor& other) {
  if (other.node != self.node || other.device != self.device)
    throw InvalidArgument(fmt::format(
        "{}{}: tensors live on different nodes or devices (node {} {} and node {} {}); copy "
        "one across first with t.to(node) (worker to worker)",
        d.name, inplace ? "_" : "", self.node, device_name(self.device), other.node,
        device_name(other.device)));
}

// Checks one op call on `self` (and `other`) with the shape rule, queues it on self's node
// and returns the result's id (0 for in-place calls), its metadata in `*meta` when given;
// *captured says whether a capture took it (dtr::capture: its tensors are then pinned).
uint64_t queue_op(OpId op, const OpAttrs& attrs, const RemoteTensor& self,
                  const RemoteTensor* other, bool inplace, TensorMeta* meta, bool* captured) {
  const OpDef& d = op_def(op);
  cmd::RunOp c{.op = op, .inplace = inplace, .attrs = attrs, .device = self.device};
  c.inputs.n = 1;
  c.inputs.ids[0] = self.id;
  if (other) {
    check_same_place(d, inplace, self, *other);
    c.inputs.ids[1] = other->id;
    c.inputs.n = 2;
    const TensorMeta metas[2] = {self.meta, other->meta};
    infer_into(op, std::span<const TensorMeta>(metas, 2), attrs, inplace, meta);
  } else {
    infer_into(op, std::span<const TensorMeta>(&self.meta, 1), attrs, inplace, meta);
  }
  self.session->check_alive(self.node);
  if (!inplace) c.out = self.session->new_id();
  c.stream = detail::current_stream_id(*self.session, self.node);
  *captured = self.session->enqueue(self.node, c, wake_for(inplace ? self.meta : *meta));
  return c.out;
}
}  // namespace

DistributedTensor DistributedTensor::apply(OpId op, const OpAttrs& attrs,
                                           const DistributedTensor* other) const {
  std::string_view name = op_def(op).name;
  const RemoteTensor& self = remote(name);
  TensorMeta meta;
  bool captured = false;
  uint64_t id =
      queue_op(op, attrs, self, other ? &other->remote(name) : nullptr, false, &meta, &captured);
  if (captured) [[unlikely]] {
    detail::pin_in_capture(*self.session, *this);
    if (other) detail::pin_in_capture(*self.session, *other);
  }
  DistributedTensor out(make_remote(self.session, self.node, self.device, id, meta));
  if (autograd_ || (other && other->autograd_)) [[unlikely]] {
    const DistributedTensor* in[2] = {this, other};
    autograd::record_op<DistributedTensor>(
        op, attrs, std::span<const DistributedTensor* const>(in, other ? 2 : 1), out);
  }
  return out;
}

DistributedTensor DistributedTensor::apply_inputs(OpId op, const OpAttrs& attrs,
                                                  std::span<const DistributedTensor> inputs) {
  const OpDef& d = op_def(op);
  if (inputs.empty() && d.min_inputs == 0) return create(op, attrs);
  if (inputs.empty() || inputs.size() > static_cast<size_t>(kMaxOpInputs))
    throw InvalidArgument(fmt::format("{}: takes {} to {} tensor inputs, got {}", d.name,
                                      d.min_inputs, d.max_inputs, inputs.size()));
  if (inputs.size() <= protocol::Inputs::kInline)
    return inputs[0].apply(op, attrs, inputs.size() == 2 ? &inputs[1] : nullptr);
  const RemoteTensor& self = inputs[0].remote(d.name);
  cmd::RunOp c{.op = op, .attrs = attrs, .device = self.device};
  std::vector<TensorMeta> metas;
  metas.reserve(inputs.size());
  for (const DistributedTensor& t : inputs) {
    const RemoteTensor& r = t.remote(d.name);
    check_same_place(d, false, self, r);
    metas.push_back(r.meta);
    c.inputs.push_back(r.id);
  }
  const TensorMeta meta = infer(op, metas, attrs, false).meta;
  self.session->check_alive(self.node);
  c.out = self.session->new_id();
  c.stream = detail::current_stream_id(*self.session, self.node);
  if (self.session->enqueue(self.node, c, wake_for(meta))) [[unlikely]]
    for (const DistributedTensor& t : inputs) detail::pin_in_capture(*self.session, t);
  DistributedTensor out(make_remote(self.session, self.node, self.device, c.out, meta));
  autograd::record_inputs<DistributedTensor>(op, attrs, inputs, out);
  return out;
}

void DistributedTensor::apply_inplace(OpId op, const OpAttrs& attrs,
                                      const DistributedTensor* other) {
  std::string_view name = op_def(op).name;
  if (autograd_ || (other && other->autograd_)) [[unlikely]] {
    const DistributedTensor* in[2] = {this, other};
    autograd::check_inplace<DistributedTensor>(
        op, std::span<const DistributedTensor* const>(in, other ? 2 : 1));
  }
  const RemoteTensor& self = remote(name);
  bool captured = false;
  queue_op(op, attrs, self, other ? &other->remote(name) : nullptr, true, nullptr, &captured);
  if (captured) [[unlikely]] {
    detail::pin_in_capture(*self.session, *this);
    if (other) detail::pin_in_capture(*self.session, *other);
  }
}

local::Tensor DistributedTensor::to_local() const {
  const RemoteTensor& self = remote("to_local");
  detail::MasterSession& s = *self.session;
  const bool pull = s.same_host(self.node) && meta_bytes(self.meta) >= kSameHostMinBytes;
  if (!pull)
    s.check_frame("to_local", -1, static_cast<int64_t>(meta_bytes(self.meta)),
                  fmt::format("tensor %{} {} on node {}", self.id, describe(self.meta), self.node));
  detail::ReplyMessage m = s.request(
      self.node,
      cmd::Get{.stream = detail::current_stream_id(s, self.node), .input = self.id, .pull = pull});
  const auto& reply = detail::expect_reply<protocol::reply::Get>(m, self.node, "get");
  if (reply.failure) {
    s.forget_orphaned_cause(self.node, *reply.failure);  // raised here: not again
    throw s.explain(self.node, *reply.failure);
  }
  if (!(reply.meta.shape == self.meta.shape) || reply.meta.dtype != self.meta.dtype)
    throw ProtocolError(fmt::format("to_local: node {} sent {} for tensor %{} of {}", self.node,
                                    describe(reply.meta), self.id, describe(self.meta)));
  if (reply.address == 0) return m.payload;
  if (!pull)
    throw ProtocolError(fmt::format(
        "to_local: node {} answered with an address for tensor %{}, which was not asked for",
        self.node, self.id));
  // Same host: the bytes stay on the worker until Release; one copy into ours.
  local::Tensor out = local::empty(self.meta.shape, self.meta.dtype);
  auto release = [&] {
    s.enqueue(self.node, cmd::Release{.request = reply.request}, nullptr,
              detail::MasterSession::Wake::kLazy);
  };
  try {
    common::read_process_memory(s.worker_pid(self.node), reply.address, out.raw_data(),
                                meta_bytes(self.meta),
                                fmt::format("to_local of tensor %{} from node {} ({})", self.id,
                                            self.node, s.endpoint(self.node)));
  } catch (...) {
    release();
    throw;
  }
  release();
  return out;
}

DistributedTensor DistributedTensor::to(int node) const {
  const RemoteTensor& self = remote("to");
  check_node("to", *self.session, node);
  if (node == self.node) return *this;
  self.session->check_alive(self.node);
  self.session->check_alive(node);
  uint64_t token = self.session->new_id();
  // Both nodes on this host (each attached to the master): the receiver reads the bytes
  // from the sender's memory (common/same_host.hpp).
  const bool by_address = self.session->same_host(self.node) && self.session->same_host(node) &&
                          meta_bytes(self.meta) >= kSameHostMinBytes;
  if (!by_address)
    self.session->check_frame(
        "to", node, static_cast<int64_t>(meta_bytes(self.meta)),
        fmt::format("tensor %{} {} on node {}", self.id, describe(self.meta), self.node));
  cmd::SendPeer send{.stream = detail::current_stream_id(*self.session, self.node),
                     .input = self.id,
                     .peer = static_cast<uint32_t>(node),
                     .token = token,
                     .by_address = by_address};
  cmd::RecvPeer recv{.stream = detail::current_stream_id(*self.session, node),
                     .out = self.session->new_id(),
                     .meta = TensorMeta::contiguous(self.meta.dtype, self.meta.shape),
                     .peer = static_cast<uint32_t>(self.node),
                     .token = token};
  self.session->enqueue(self.node, send);
  self.session->enqueue(node, recv);
  detail::pin_in_capture(*self.session, *this);
  DistributedTensor out(make_remote(self.session, node, -1, recv.out, recv.meta));
  if (autograd_) [[unlikely]]
    autograd_->record_move(*this, out);
  return out;
}

DistributedTensor DistributedTensor::to_device(int device) const {
  const RemoteTensor& self = remote("to_device");
  check_device("to_device", *self.session, self.node, device);
  if (device == self.device) return *this;
  self.session->check_alive(self.node);
  cmd::ToDevice c{.stream = detail::current_stream_id(*self.session, self.node),
                  .input = self.id,
                  .out = self.session->new_id(),
                  .device = device};
  self.session->enqueue(self.node, c);
  detail::pin_in_capture(*self.session, *this);
  DistributedTensor out(make_remote(self.session, self.node, device, c.out,
                                    TensorMeta::contiguous(self.meta.dtype, self.meta.shape)));
  if (autograd_) [[unlikely]]
    autograd_->record_move(*this, out);
  return out;
}

Scalar DistributedTensor::item() const {
  if (numel() != 1)
    throw ShapeError(fmt::format("item: needs a tensor with one element, got shape {}",
                                 dtr::to_string(shape())));
  return to_local().item();
}

std::string DistributedTensor::to_string() const {
  if (!remote_) return "tensor(undefined)";
  std::string text = to_local().to_string();
  // "..., dtype=float32)" -> "..., dtype=float32, node=1, device=cpu)"
  text.pop_back();
  return fmt::format("{}, node={}, device={})", text, remote_->node, device_name(remote_->device));
}

std::ostream& operator<<(std::ostream& os, const DistributedTensor& t) {
  return os << t.to_string();
}

// ---- session ----

void init_master_worker(const MasterOptions& options) {
  std::lock_guard lock(g_session_mu);
  if (g_session && !g_session->closed())
    throw InvalidArgument("init_master_worker: a session is already running");
  g_session = MasterSession::start(options);
  static bool registered = [] {
    std::atexit([] { shutdown_master_worker(); });
    return true;
  }();
  (void)registered;
}

MasterOptions master_options_from_environment() {
  MasterOptions o;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  auto parse_int = [](const std::string& name, const std::string& v) {
    try {
      size_t used = 0;
      int n = std::stoi(v, &used);
      if (used == v.size()) return n;
    } catch (const std::exception&) {
    }
    throw InvalidArgument(fmt::format("init_master_worker: {}={} is not an integer", name, v));
  };
  if (std::string workers = env("DTR_WORKERS"); !workers.empty()) {
    o.workers = protocol::split_endpoints(workers);
    if (o.workers.empty())
      throw InvalidArgument(
          fmt::format("init_master_worker: DTR_WORKERS='{}' names no endpoint", workers));
  } else if (std::string listen = env("DTR_LISTEN"); !listen.empty()) {
    std::vector<std::string> one = protocol::split_endpoints(listen);
    o.listen = one.size() == 1 ? one[0] : listen;  // several: start() says what is wrong
    o.num_workers = parse_int("DTR_NUM_WORKERS", env("DTR_NUM_WORKERS"));
  } else if (!env("MASTER_ADDR").empty() && !env("MASTER_PORT").empty()) {
    o.listen = fmt::format("tcp://{}:{}", env("MASTER_ADDR"), env("MASTER_PORT"));
    o.num_workers = parse_int("WORLD_SIZE", env("WORLD_SIZE")) - 1;
  } else {
    throw InvalidArgument(
        "init_master_worker: set DTR_WORKERS=tcp://host:port,... (workers started with "
        "`dtr-worker --listen`), or DTR_LISTEN and DTR_NUM_WORKERS, or MASTER_ADDR, MASTER_PORT "
        "and WORLD_SIZE (workers started with `dtr-worker --master`)");
  }
  if (std::string t = env("DTR_CONNECT_TIMEOUT_MS"); !t.empty())
    o.connect_timeout = std::chrono::milliseconds(parse_int("DTR_CONNECT_TIMEOUT_MS", t));
  if (std::string t = env("DTR_SYNC_TIMEOUT_MS"); !t.empty())
    o.sync_timeout = std::chrono::milliseconds(parse_int("DTR_SYNC_TIMEOUT_MS", t));
  if (std::string t = env("DTR_HEARTBEAT_TIMEOUT_MS"); !t.empty()) {
    o.heartbeat_timeout = std::chrono::milliseconds(parse_int("DTR_HEARTBEAT_TIMEOUT_MS", t));
    // Heartbeats come at least five times per timeout.
    o.heartbeat = std::clamp(o.heartbeat_timeout / 5, std::chrono::milliseconds(1), o.heartbeat);
  }
  if (std::string t = env("DTR_SPIN_US"); !t.empty())
    o.spin = std::chrono::microseconds(parse_int("DTR_SPIN_US", t));
  o.backend = env("DTR_BACKEND");
  return o;
}

void init_master_worker() {
  init_master_worker(master_options_from_environment());
}

void shutdown_master_worker() {
  std::shared_ptr<MasterSession> s;
  {
    std::lock_guard lock(g_session_mu);
    s = std::move(g_session);
  }
  if (!s) return;
  // DTR_TRACE: the trace started with the session is written now.
  if (s->tracing() && !s->trace_path().empty()) {
    try {
      TraceSummary t = s->stop_trace(s->trace_path());
      std::fprintf(stderr, "dtr: trace of %lld slices written to %s\n",
                   static_cast<long long>(t.slices), t.path.c_str());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "dtr: could not write the trace to %s: %s\n", s->trace_path().c_str(),
                   e.what());
    }
  }
  s->shutdown();
}

bool is_master_worker_initialized() {
  std::lock_guard lock(g_session_mu);
  return g_session && !g_session->closed();
}

// ---- nodes and devices ----

int node_count() {
  return session("node_count")->node_count();
}
int current_node() {
  return t_node;
}
void set_node(int node) {
  check_node("set_node", *session("set_node"), node);
  t_node = node;
}
int device_count(int node) {
  auto s = session("device_count");
  check_node("device_count", *s, node);
  return static_cast<int>(s->hello(node).devices.size()) - 1;
}
int current_device() {
  return t_device;
}
void set_device(int device) {
  if (device < -1) throw IndexError(fmt::format("set_device: invalid device {}", device));
  t_device = device;
}

node_guard::node_guard(int node) : previous_(t_node) {
  set_node(node);
}
node_guard::~node_guard() {
  t_node = previous_;
}
device_guard::device_guard(int device) : previous_(t_device) {
  set_device(device);
}
device_guard::~device_guard() {
  t_device = previous_;
}

NodeInfo node_info(int node) {
  auto s = session("node_info");
  check_node("node_info", *s, node);
  const protocol::HelloReply& h = s->hello(node);
  NodeInfo info;
  info.worker = h.worker;
  info.threads = h.threads;
  info.cpu_total_memory = static_cast<int64_t>(h.devices[0].total_memory);
  for (size_t i = 1; i < h.devices.size(); ++i) info.cuda_devices.push_back(h.devices[i].name);
  info.same_host = s->same_host(node);
  info.same_host_note = s->same_host_note(node);
  info.max_message_bytes = h.max_message_bytes;
  return info;
}

// ---- sync points ----

void cancel(int node) {
  auto s = session("cancel");
  if (node >= 0) check_node("cancel", *s, node);
  if (s->capturing() && detail::Capture::active(*s))
    throw InvalidArgument(
        "cancel: not inside a capture (a capture records commands and runs none; cancel after "
        "it, or reset the graph)");
  s->cancel(node);
}

void synchronize(int node) {
  auto s = session("synchronize");
  int first = node < 0 ? 0 : node;
  int last = node < 0 ? s->node_count() - 1 : node;
  if (node >= 0) check_node("synchronize", *s, node);
  std::optional<RemoteError> error;
  size_t more = 0;
  auto report = [&](int k, const protocol::RemoteFailure& f) {
    if (!error)
      error = s->explain(k, f);
    else
      ++more;
  };
  for (int k = first; k <= last; ++k) {
    detail::ReplyMessage m = s->request(k, cmd::Sync{});
    // First what replies nobody waited for carried (an interrupted sync point's).
    for (const protocol::RemoteFailure& f : s->take_orphaned_failures(k)) report(k, f);
    for (const protocol::RemoteFailure& f :
         detail::expect_reply<protocol::reply::Sync>(m, k, "sync").failures)
      report(k, f);
  }
  if (error) {
    if (more == 0) throw *error;
    throw RemoteError(fmt::format("{} (and {} more failures)", error->what(), more),
                      error->failure_ptr());
  }
}

DistributedTensor dist_send(const local::Tensor& t, int node) {
  auto s = session("dist_send");
  if (s->capturing() && detail::Capture::active(*s))
    throw InvalidArgument(
        "dist_send: a sync point cannot be captured; dtr::capture records asynchronous commands "
        "only (send the data before the capture and copy_ it into the graph's input)");
  if (!t.defined()) throw InvalidArgument("dist_send: undefined tensor");
  if (autograd::tracks_grad(t))
    throw InvalidArgument(fmt::format(
        "dist_send: the tensor ({}) requires grad and grad mode is on; dist_send is not "
        "differentiable (gradients would pass through the master): send detach(), or make "
        "the tensor on its node",
        describe(t.meta())));
  int target = node < 0 ? t_node : node;
  check_node("dist_send", *s, target);
  check_device("dist_send", *s, target, t_device);
  local::Tensor packed = t.cpu().contiguous();
  const TensorMeta meta = TensorMeta::contiguous(packed.dtype(), packed.shape());
  const protocol::TensorId id = s->new_id();
  // Same host: the worker reads the bytes from `packed` itself (one copy).
  const bool by_address = s->same_host(target) && meta_bytes(meta) >= kSameHostMinBytes;
  if (by_address) {
    s->enqueue(target, cmd::PutFrom{.out = id,
                                    .meta = meta,
                                    .address = reinterpret_cast<uint64_t>(packed.raw_data()),
                                    .device = t_device});
  } else {
    s->check_frame("dist_send", target, static_cast<int64_t>(meta_bytes(meta)),
                   fmt::format("the local tensor {}", describe(meta)));
    s->enqueue(target, cmd::Put{.out = id, .meta = meta, .device = t_device}, &packed);
  }
  // Sync point: once the worker answers a later request it holds the bytes, and the caller
  // may change `t`. (Stats, not Sync: failures stay for synchronize() to report. Stats
  // waits for every stream, so the worker has read every earlier PutFrom's bytes too.)
  try {
    s->request(target, cmd::Stats{});
  } catch (...) {
    // No handle will own the tensor (the wait timed out, or the wait interrupt check
    // ended it): free it on the worker, after the Put; the worker may still read
    // `packed`, which stays alive until a later dist_send to the node returns.
    s->enqueue(target, cmd::Free{.input = id});
    if (by_address) s->orphan(target, std::move(packed));
    throw;
  }
  s->release_orphans(target);
  return DistributedTensor(make_remote(s, target, t_device, id, meta));
}

NodeMemoryStats memory_stats(int node, int device) {
  auto s = session("memory_stats");
  check_node("memory_stats", *s, node);
  check_device("memory_stats", *s, node, device);
  detail::ReplyMessage m = s->request(node, cmd::Stats{.device = device});
  const protocol::MemoryStatsWire& stats =
      detail::expect_reply<protocol::reply::Stats>(m, node, "stats").stats;
  return NodeMemoryStats{stats.bytes_in_use, stats.peak_bytes, stats.live_tensors,
                         stats.graph_bytes, stats.graph_tensors};
}

// ---- creation ----

DistributedTensor empty(const Shape& shape, DType dtype) {
  return DistributedTensor(shape, dtype);
}
DistributedTensor zeros(const Shape& shape, DType dtype) {
  return full(shape, 0, dtype);
}
DistributedTensor ones(const Shape& shape, DType dtype) {
  return full(shape, 1, dtype);
}
DistributedTensor full(const Shape& shape, Scalar value, DType dtype) {
  return DistributedTensor::create(OpId::full, creation::full(shape, value, dtype));
}
DistributedTensor DistributedTensor::full_here(const Shape& shape, Scalar value,
                                               DType dtype) const {
  node_guard on(get_node());
  device_guard dev(get_device());
  return full(shape, value, dtype);
}
DistributedTensor arange(Scalar end) {
  return arange(0, end, 1);
}
DistributedTensor arange(Scalar start, Scalar end, Scalar step) {
  return DistributedTensor::create(OpId::arange, creation::arange(start, end, step));
}
DistributedTensor linspace(double start, double end, int64_t steps, DType dtype) {
  return DistributedTensor::create(OpId::linspace, creation::linspace(start, end, steps, dtype));
}
DistributedTensor rand(const Shape& shape, Generator& gen, DType dtype) {
  return DistributedTensor::create(OpId::rand, creation::random(shape, dtype, &gen));
}
DistributedTensor randn(const Shape& shape, Generator& gen, DType dtype) {
  return DistributedTensor::create(OpId::randn, creation::random(shape, dtype, &gen));
}
DistributedTensor rand(const Shape& shape, DType dtype) {
  return DistributedTensor::create(OpId::rand, creation::random(shape, dtype, nullptr));
}
DistributedTensor randn(const Shape& shape, DType dtype) {
  return DistributedTensor::create(OpId::randn, creation::random(shape, dtype, nullptr));
}

}  // namespace dtr
