// The gloo backend: LibraryGroup over a gloo context (see gloo_backend.hpp).
#include "pg/gloo/gloo_backend.hpp"

#include <fmt/format.h>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/scatter.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

#include "pg/library_group.hpp"
#include "pg/reduce.hpp"

namespace dtr::pg {
namespace {

using namespace std::chrono_literals;

// gloo reads a zero timeout as "none": every wait gets at least 1 ms.
std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// Turns the exception in flight (from gloo, or dtr's own) into a dtr error naming `what`.
[[noreturn]] void rethrow_as_dtr(const std::string& what) {
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const gloo::IoException& e) {
    const std::string m = e.what();
    if (m.find("Timed out") != std::string::npos || m.find("timeout") != std::string::npos) {
      throw TimeoutError(fmt::format("{}: gloo: {}", what, m));
    }
    // gloo names the peer's address only: say what its socket errors mean.
    const bool peer_gone = m.find("reset by peer") != std::string::npos ||
                           m.find("closed by peer") != std::string::npos ||
                           m.find("Broken pipe") != std::string::npos;
    throw TransportError(fmt::format("{}: gloo: {}{}", what, m,
                                     peer_gone ? " (a member of the group closed its connection: "
                                                 "it exited, crashed or was killed)"
                                               : ""));
  } catch (const std::exception& e) {  // gloo::Exception, gloo::EnforceNotMet
    throw TransportError(fmt::format("{}: gloo: {}", what, e.what()));
  }
}

// Keeps SIGPIPE from killing the process while gloo writes on this thread: gloo writes to
// its sockets with writev, which raises SIGPIPE (default action: terminate) when the peer is
// gone. The signal is blocked for the scope, and one raised meanwhile is consumed before the
// thread's mask is restored (the write itself fails with EPIPE, which gloo reports). gloo's
// event loop thread, started under it, keeps SIGPIPE blocked for good.
class NoSigpipe {
 public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    had_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~NoSigpipe() {
    if (sigismember(&old_, SIGPIPE) == 1) return;  // blocked before: the caller's business
    sigset_t pending;
    sigpending(&pending);
    if (!had_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      const timespec zero{};
      while (sigtimedwait(&pipe_, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe&) = delete;
  NoSigpipe& operator=(const NoSigpipe&) = delete;

 private:
  sigset_t pipe_{}, old_{};
  bool had_pending_ = false;
};

// dtr's Store under gloo's rendezvous, with keys under a prefix. Values are hex text: gloo's
// are binary, and a file store keeps text.
class StoreAdapter final : public gloo::rendezvous::Store {
 public:
  StoreAdapter(std::shared_ptr<dtr::Store> store, std::string prefix,
               std::chrono::milliseconds timeout)
      : store_(std::move(store)), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    static constexpr char kHex[] = "0123456789abcdef";
    std::string text;
    text.reserve(data.size() * 2);
    for (char c : data) {
      const auto b = static_cast<unsigned char>(c);
      text += kHex[b >> 4];
      text += kHex[b & 15];
    }
    store_->set(prefix_ + key, text);
  }
  std::vector<char> get(const std::string& key) override {
    const std::string text = store_->get(prefix_ + key, timeout_);
    auto nibble = [&](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      throw ProtocolError(fmt::format("gloo rendezvous: key {} of {} holds non-hex text",
                                      prefix_ + key, store_->describe()));
    };
    std::vector<char> data(text.size() / 2);
    for (size_t i = 0; i < data.size(); ++i) {
      data[i] = static_cast<char>(nibble(text[2 * i]) * 16 + nibble(text[2 * i + 1]));
    }
    return data;
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) store_->get(prefix_ + k, timeout);
  }

 private:
  std::shared_ptr<dtr::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

// What the groups of one gloo job share: the store, gloo's TCP device (one event loop
// thread), the options and the key prefix.
struct GlooJob {
  std::shared_ptr<dtr::Store> store;
  std::shared_ptr<gloo::transport::Device> device;
  ProcessGroupOptions options;
  std::string prefix;  // "dtr-pg/<group_name>/"
};

// A connected context for group `id` (rank `rank` of `size`); the keys are deleted once
// every member has connected.
std::shared_ptr<gloo::Context> connect_context(GlooJob& job, const std::string& id, int rank,
                                               int size) {
  const std::string what = fmt::format("gloo rendezvous of group {} at {} (rank {} of {})", id,
                                       job.store->describe(), rank, size);
  const std::string keys = job.prefix + "gloo/" + id + "/";
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(job.options.timeout);
  NoSigpipe no_sigpipe;
  try {
    StoreAdapter adapter(job.store, keys, job.options.timeout);
    ctx->connectFullMesh(adapter, job.device);
    gloo::BarrierOptions barrier(ctx);
    barrier.setTag(0xffffffff);
    barrier.setTimeout(job.options.timeout);
    gloo::barrier(barrier);  // every member has read the keys
  } catch (...) {
    rethrow_as_dtr(what);
  }
  if (rank == 0) {
    try {
      job.store->delete_prefix(keys);
    } catch (const Error&) {
    }
  }
  return ctx;
}

uint64_t slot_of(Channel c) {
  constexpr uint64_t kHeaderPrefix = 0xD0, kPayloadPrefix = 0xD1;  // gloo's own are < 0x10
  if (c.kind == Channel::Kind::Header) return (kHeaderPrefix << 56) | (c.id & 0xffffffffull);
  return (kPayloadPrefix << 56) | (c.id & 0x00ffffffffffffffull);
}

// One posted gloo send or receive: an unbound buffer over memory that `keepalive` owns.
// Once its wait has returned, the buffer goes (gloo then lets go of the memory), and the
// keepalive with it (its owner may hold this transfer: no cycle).
class GlooTransfer final : public Transfer {
 public:
  GlooTransfer(std::unique_ptr<gloo::transport::UnboundBuffer> buf, bool send,
               std::shared_ptr<void> keepalive, std::function<void(const std::string&)> broken)
      : keepalive_(std::move(keepalive)),
        buf_(std::move(buf)),
        send_(send),
        broken_(std::move(broken)) {}

  int wait(Clock::time_point deadline) override {
    gloo::transport::UnboundBuffer* buf;
    {
      std::lock_guard lock(m_);
      buf = buf_.get();
    }
    if (buf == nullptr) throw TransportError("the transfer was already waited for");
    int peer = -1;
    bool done = false;
    NoSigpipe no_sigpipe;
    try {
      done = send_ ? buf->waitSend(&peer, remaining(deadline))
                   : buf->waitRecv(&peer, remaining(deadline));
    } catch (...) {
      release();
      try {
        rethrow_as_dtr(send_ ? "gloo send" : "gloo receive");
      } catch (const Error& e) {
        broken_(e.what());  // gloo closed the context's connections
        throw;
      }
    }
    release();
    if (!done) throw TransportError("the process group was shut down");
    return peer;
  }

  void abort() override {
    std::lock_guard lock(m_);
    if (!buf_) return;
    if (send_) {
      buf_->abortWaitSend();
    } else {
      buf_->abortWaitRecv();
    }
  }

 private:
  void release() {
    std::lock_guard lock(m_);
    buf_.reset();
    keepalive_.reset();
  }

  std::mutex m_;
  std::shared_ptr<void> keepalive_;  // declared before buf_: outlives it
  std::unique_ptr<gloo::transport::UnboundBuffer> buf_;
  const bool send_;
  std::function<void(const std::string&)> broken_;
};

// Calls f.template operator()<T>() with an unsigned type of `bytes` bytes (gloo only needs
// the element size; dtr's kernels know the dtype).
template <typename F>
void with_element(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

template <typename T>
struct GlooCall;

class GlooGroup final : public LibraryGroup {
 public:
  GlooGroup(std::shared_ptr<GlooJob> job, std::string id, int rank, std::vector<int> members,
            std::shared_ptr<gloo::Context> ctx)
      : LibraryGroup("gloo", rank, std::move(members), job->options),
        job_(std::move(job)),
        id_(std::move(id)),
        ctx_(std::move(ctx)) {}
  ~GlooGroup() override {
    stop_threads();
    if (ctx_) close_library();
  }

  std::shared_ptr<Backend> new_group(const std::vector<int>& group_ranks) override {
    const std::string id = fmt::format("{}.{}", id_, ++children_);
    std::vector<int> world;
    int mine = -1;
    for (size_t i = 0; i < group_ranks.size(); ++i) {
      world.push_back(world_ranks()[group_ranks[i]]);
      if (group_ranks[i] == rank()) mine = static_cast<int>(i);
    }
    std::shared_ptr<gloo::Context> ctx;
    if (mine >= 0) ctx = connect_context(*job_, id, mine, static_cast<int>(world.size()));
    return std::make_shared<GlooGroup>(job_, id, mine, std::move(world), std::move(ctx));
  }

 protected:
  void run(CollectiveArgs& a, uint32_t tag, const std::string& what,
           Clock::time_point deadline) override {
    const local::Tensor* ref = a.outputs.empty() ? nullptr : &a.outputs[0];
    if (a.op == CommOp::AllGather || a.op == CommOp::Gather) ref = &a.inputs[0];
    NoSigpipe no_sigpipe;
    try {
      if (ref == nullptr) {  // barrier
        gloo::BarrierOptions o(ctx_);
        o.setTag(tag);
        o.setTimeout(remaining(deadline));
        gloo::barrier(o);
        return;
      }
      if (ref->meta().numel() == 0) return;
      with_element(element_size(ref->dtype()),
                   [&]<typename T>() { run_typed<T>(a, *ref, tag, deadline); });
    } catch (...) {
      rethrow_as_dtr(what);
    }
  }

  std::shared_ptr<Transfer> post_send(int dst, Channel c, const void* data, size_t bytes,
                                      std::shared_ptr<void> keepalive) override {
    auto buf = ctx_->createUnboundBuffer(const_cast<void*>(data), bytes);
    NoSigpipe no_sigpipe;  // a send may be written at once, on this thread
    try {
      buf->send(dst, slot_of(c));
    } catch (...) {
      rethrow_as_dtr(fmt::format("gloo send to rank {}", dst));
    }
    return std::make_shared<GlooTransfer>(std::move(buf), true, std::move(keepalive), breaker());
  }

  std::shared_ptr<Transfer> post_recv(int src, Channel c, void* data, size_t bytes,
                                      std::shared_ptr<void> keepalive) override {
    auto buf = ctx_->createUnboundBuffer(data, bytes);
    NoSigpipe no_sigpipe;  // a receive announces itself with a write
    try {
      if (src == kAnySource) {
        std::vector<int> others;
        for (int r = 0; r < size(); ++r) {
          if (r != rank()) others.push_back(r);
        }
        buf->recv(others, slot_of(c));
      } else {
        buf->recv(src, slot_of(c));
      }
    } catch (...) {
      rethrow_as_dtr("gloo receive");
    }
    return std::make_shared<GlooTransfer>(std::move(buf), false, std::move(keepalive), breaker());
  }

  void close_library() override {
    if (!ctx_) return;
    NoSigpipe no_sigpipe;
    try {
      ctx_->closeConnections();
    } catch (const std::exception&) {
    }
  }

 private:
  std::function<void(const std::string&)> breaker() {
    return [this](const std::string& why) { mark_broken(why); };
  }

  template <typename T>
  void run_typed(CollectiveArgs& a, const local::Tensor& ref, uint32_t tag,
                 Clock::time_point deadline);
  // all_reduce, reduce, reduce_scatter.
  template <typename T>
  void run_reducing(CollectiveArgs& a, const GlooCall<T>& call);
  // broadcast, scatter.
  template <typename T>
  void run_spreading(CollectiveArgs& a, const GlooCall<T>& call);
  // all_gather, gather.
  template <typename T>
  void run_gathering(CollectiveArgs& a, const GlooCall<T>& call);

  std::shared_ptr<GlooJob> job_;
  const std::string id_;
  std::shared_ptr<gloo::Context> ctx_;
  std::atomic<uint64_t> children_{0};
};

// The pieces every typed collective uses: element count, dtr's kernel as gloo's reduce
// function, the tag and the time left, and tensor pointers as T*.
template <typename T>
struct GlooCall {
  size_t n;
  gloo::AllreduceOptions::Func reduce;
  uint32_t tag;
  Clock::time_point deadline;

  GlooCall(const CollectiveArgs& a, const local::Tensor& ref, uint32_t tag_,
           Clock::time_point deadline_)
      : n(static_cast<size_t>(ref.meta().numel())), tag(tag_), deadline(deadline_) {
    const DType dt = ref.dtype();
    const ReduceOp op = a.reduce;
    reduce = [dt, op](void* c, const void* x, const void* y, size_t k) {
      reduce_into(c, x, y, static_cast<int64_t>(k), dt, op);
    };
  }
  template <typename Options>
  void set(Options& o) const {
    o.setTag(tag);
    o.setTimeout(remaining(deadline));
  }
  static T* ptr(const local::Tensor& t) { return static_cast<T*>(t.raw_data()); }
};

template <typename T>
void GlooGroup::run_typed(CollectiveArgs& a, const local::Tensor& ref, uint32_t tag,
                          Clock::time_point deadline) {
  const GlooCall<T> call(a, ref, tag, deadline);
  switch (a.op) {
    case CommOp::AllReduce:
    case CommOp::Reduce:
    case CommOp::ReduceScatter:
      return run_reducing(a, call);
    case CommOp::Broadcast:
    case CommOp::Scatter:
      return run_spreading(a, call);
    case CommOp::AllGather:
    case CommOp::Gather:
      return run_gathering(a, call);
    default:
      throw InvalidArgument(fmt::format("gloo: {} is not a collective", comm_op_name(a.op)));
  }
}

template <typename T>
void GlooGroup::run_reducing(CollectiveArgs& a, const GlooCall<T>& c) {
  const size_t n = c.n;
  if (a.op == CommOp::AllReduce) {
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(c.ptr(a.outputs[0]), n);
    o.setReduceFunction(c.reduce);
    c.set(o);
    gloo::allreduce(o);
  } else if (a.op == CommOp::Reduce) {
    // gloo writes partial results into every rank's output: the others' tensors stay
    // unchanged by reducing into scratch memory.
    gloo::ReduceOptions o(ctx_);
    std::vector<T> scratch;
    if (rank() == a.root) {
      o.setOutput(c.ptr(a.outputs[0]), n);
    } else {
      scratch.resize(n);
      o.setInput(c.ptr(a.outputs[0]), n);
      o.setOutput(scratch.data(), n);
    }
    o.setRoot(a.root);
    o.setReduceFunction(c.reduce);
    c.set(o);
    gloo::reduce(o);
  } else {
    // reduce_scatter: all-reduce a copy of the concatenated inputs; this rank's block is its
    // result.
    FlatBlocks in(a.inputs, true);
    std::vector<T> all(n * size());
    std::memcpy(all.data(), in.data(), all.size() * sizeof(T));
    gloo::AllreduceOptions o(ctx_);
    o.setOutput(all.data(), all.size());
    o.setReduceFunction(c.reduce);
    c.set(o);
    gloo::allreduce(o);
    std::memcpy(a.outputs[0].raw_data(), all.data() + n * rank(), n * sizeof(T));
  }
}

template <typename T>
void GlooGroup::run_spreading(CollectiveArgs& a, const GlooCall<T>& c) {
  if (a.op == CommOp::Broadcast) {
    gloo::BroadcastOptions o(ctx_);
    o.setOutput(c.ptr(a.outputs[0]), c.n);
    o.setRoot(a.root);
    c.set(o);
    gloo::broadcast(o);
    return;
  }
  gloo::ScatterOptions o(ctx_);
  std::vector<T*> ins;
  for (const auto& t : a.inputs) ins.push_back(c.ptr(t));
  if (rank() == a.root) o.setInputs(ins, c.n);
  o.setOutput(c.ptr(a.outputs[0]), c.n);
  o.setRoot(a.root);
  c.set(o);
  gloo::scatter(o);
}

template <typename T>
void GlooGroup::run_gathering(CollectiveArgs& a, const GlooCall<T>& c) {
  const size_t n = c.n;
  T* in = c.ptr(a.inputs[0]);
  if (a.op == CommOp::AllGather) {
    FlatBlocks out(a.outputs, false);
    gloo::AllgatherOptions o(ctx_);
    // An input that is already this rank's block of the output is used in place.
    if (in != reinterpret_cast<T*>(out.data()) + n * rank()) o.setInput(in, n);
    o.setOutput(reinterpret_cast<T*>(out.data()), n * size());
    c.set(o);
    gloo::allgather(o);
    out.copy_out(a.outputs);
    return;
  }
  std::optional<FlatBlocks> out;
  std::vector<T> own;  // the root's input when it is its own block of the output
  gloo::GatherOptions o(ctx_);
  if (rank() == a.root) {
    out.emplace(a.outputs, false);
    o.setOutput(reinterpret_cast<T*>(out->data()), n * size());
    if (in == reinterpret_cast<T*>(out->data()) + n * rank()) {
      own.assign(in, in + n);
      in = own.data();
    }
  }
  o.setInput(in, n);
  o.setRoot(a.root);
  c.set(o);
  gloo::gather(o);
  if (out) out->copy_out(a.outputs);
}

}  // namespace

std::shared_ptr<Backend> make_gloo_world(std::shared_ptr<Store> store, int rank, int world_size,
                                         const std::string& bind_address,
                                         const ProcessGroupOptions& options) {
  if (options.transport != "tcp") {
    throw InvalidArgument(fmt::format(
        "process group: backend gloo does not support transport '{}' (gloo's transport is TCP)",
        options.transport));
  }
  const SecurityConfig security = options.security ? *options.security : resolve_security();
  if (!is_local_endpoint("tcp://" + bind_address + ":0") && !security.insecure) {
    throw AuthenticationError(fmt::format(
        "process group: backend gloo would bind {}, which is not a loopback address, but gloo's "
        "links are plain TCP (no authentication, no encryption: a cluster key cannot protect "
        "them). On one host set DTR_PG_ADDR=127.0.0.1; on a trusted network set "
        "DTR_INSECURE=1; otherwise use the zmq backend with a cluster key",
        bind_address));
  }
  auto job = std::make_shared<GlooJob>();
  job->store = std::move(store);
  job->options = options;
  job->prefix = "dtr-pg/" + options.group_name + "/";
  try {
    NoSigpipe no_sigpipe;  // gloo's event loop thread starts here and keeps this mask
    gloo::transport::tcp::attr attr;
    attr.hostname = bind_address;
    attr.ai_family = AF_INET;
    job->device = gloo::transport::tcp::CreateDevice(attr);
  } catch (...) {
    rethrow_as_dtr(fmt::format("gloo: cannot open a TCP device on {}", bind_address));
  }
  auto ctx = connect_context(*job, "w", rank, world_size);
  std::vector<int> all(world_size);
  for (int i = 0; i < world_size; ++i) all[i] = i;
  return std::make_shared<GlooGroup>(std::move(job), "w", rank, std::move(all), std::move(ctx));
}

}  // namespace dtr::pg
