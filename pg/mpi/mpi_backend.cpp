// The mpi backend: LibraryGroup over MPI communicators (see mpi_backend.hpp).
#include "pg/mpi/mpi_backend.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "pg/library_group.hpp"
#include "pg/mpi/mpi_direct.hpp"
#include "pg/mpi/spin_wait.hpp"
#include "pg/reduce.hpp"
#include "pg/util.hpp"

namespace dtr::pg {
namespace {

using namespace std::chrono_literals;

void check(int rc, const std::string& what) {
  mpi_check(rc, what);
}

// MPI itself, once per process: initialization, the datatypes and user ops of dtr's dtypes,
// requests nobody waits for any more (kept with their memory until they complete), and
// finalization at exit.
class MpiRuntime {
 public:
  static MpiRuntime& get() {
    static MpiRuntime* rt = new MpiRuntime();  // never destroyed: MPI is finalized at exit
    return *rt;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }
  int tag_ub() const { return tag_ub_; }

  MPI_Datatype type_of(DType dt) const {
    switch (dt) {
      case DType::Float32:
        return MPI_FLOAT;
      case DType::Float64:
        return MPI_DOUBLE;
      case DType::Int32:
        return MPI_INT32_T;
      case DType::Int64:
        return MPI_INT64_T;
      case DType::Bool:
        return MPI_UINT8_T;
      case DType::Float16:
        return f16_;
      case DType::BFloat16:
        return bf16_;
    }
    return MPI_BYTE;
  }

  DType dtype_of(MPI_Datatype t) const {
    if (t == MPI_FLOAT) return DType::Float32;
    if (t == MPI_DOUBLE) return DType::Float64;
    if (t == MPI_INT32_T) return DType::Int32;
    if (t == MPI_INT64_T) return DType::Int64;
    if (t == f16_) return DType::Float16;
    if (t == bf16_) return DType::BFloat16;
    return DType::Bool;
  }

  // MPI's own op where it computes what dtr's kernel does, else dtr's kernel as a user op.
  MPI_Op op_of(DType dt, ReduceOp op) const {
    const bool builtin_type =
        dt == DType::Float32 || dt == DType::Float64 || dt == DType::Int32 || dt == DType::Int64;
    const bool integer = dt == DType::Int32 || dt == DType::Int64;
    if (builtin_type && (op == ReduceOp::Sum || op == ReduceOp::Avg)) return MPI_SUM;
    if (builtin_type && op == ReduceOp::Product) return MPI_PROD;
    if (integer && op == ReduceOp::Min) return MPI_MIN;
    if (integer && op == ReduceOp::Max) return MPI_MAX;
    return user_ops_[static_cast<int>(op)];
  }

  // Keeps a request nobody waits for, with what it reads or writes, until it completes.
  void abandon(MPI_Request req, std::shared_ptr<void> memory) {
    std::lock_guard lock(m_);
    reap();
    if (req != MPI_REQUEST_NULL) zombies_.emplace_back(req, std::move(memory));
  }

  void group_born() {
    std::lock_guard lock(m_);
    ++groups_;
  }
  void group_gone() {
    std::lock_guard lock(m_);
    --groups_;
  }

 private:
  MpiRuntime();
  static void finalize_at_exit();
  template <ReduceOp R>
  static void user_op(void* in, void* inout, int* len, MPI_Datatype* type);
  // Frees completed zombies (lock held).
  void reap() {
    for (auto it = zombies_.begin(); it != zombies_.end();) {
      int done = 0;
      MPI_Test(&it->first, &done, MPI_STATUS_IGNORE);
      it = done ? zombies_.erase(it) : it + 1;
    }
  }

  int rank_ = 0, size_ = 1, tag_ub_ = 32767;
  bool owns_init_ = false;
  MPI_Datatype f16_ = MPI_DATATYPE_NULL, bf16_ = MPI_DATATYPE_NULL;
  MPI_Op user_ops_[5] = {};
  std::mutex m_;
  std::vector<std::pair<MPI_Request, std::shared_ptr<void>>> zombies_;
  int groups_ = 0;
};

MpiRuntime* g_runtime = nullptr;

template <ReduceOp R>
void MpiRuntime::user_op(void* in, void* inout, int* len, MPI_Datatype* type) {
  // MPI's convention: inout = in (lower ranks) op inout; dtr's kernels take lo first.
  reduce_into(inout, in, inout, *len, g_runtime->dtype_of(*type), R);
}

MpiRuntime::MpiRuntime() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  if (!initialized) {
    if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
      throw TransportError("process group (mpi): MPI_Init_thread failed");
    }
    owns_init_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw TransportError(fmt::format(
        "process group: backend mpi needs MPI_THREAD_MULTIPLE (dtr calls MPI from several "
        "threads); this MPI provides level {}",
        provided));
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  int flag = 0;
  int* ub = nullptr;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
  if (flag && ub != nullptr) tag_ub_ = *ub;
  // Two distinct 2-byte types, so that a user op can tell float16 from bfloat16.
  MPI_Type_contiguous(2, MPI_BYTE, &f16_);
  MPI_Type_commit(&f16_);
  MPI_Type_contiguous(2, MPI_BYTE, &bf16_);
  MPI_Type_commit(&bf16_);
  g_runtime = this;
  MPI_Op_create(&user_op<ReduceOp::Sum>, 1, &user_ops_[0]);
  MPI_Op_create(&user_op<ReduceOp::Product>, 1, &user_ops_[1]);
  MPI_Op_create(&user_op<ReduceOp::Min>, 1, &user_ops_[2]);
  MPI_Op_create(&user_op<ReduceOp::Max>, 1, &user_ops_[3]);
  MPI_Op_create(&user_op<ReduceOp::Sum>, 1, &user_ops_[4]);  // Avg: a sum, divided after
  if (owns_init_) std::atexit(&MpiRuntime::finalize_at_exit);
}

// MPI_Finalize with requests in flight or a group still alive (its threads may call MPI)
// would be erroneous: then the process leaves without it, and Open MPI's launcher reports
// that. The default group is destroyed first, as a program that never called
// destroy_process_group() expects (torch finalizes MPI at exit too): this handler was
// registered after the default group's holder was made, so it runs before that goes.
void MpiRuntime::finalize_at_exit() {
  MpiRuntime& rt = *g_runtime;
  destroy_process_group();
  std::unique_lock lock(rt.m_);
  const auto deadline = Clock::now() + 1s;
  while (!rt.zombies_.empty() && Clock::now() < deadline) {
    rt.reap();
    lock.unlock();
    std::this_thread::sleep_for(1ms);
    lock.lock();
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized || !rt.zombies_.empty() || rt.groups_ > 0) return;
  for (auto& op : rt.user_ops_) MPI_Op_free(&op);
  MPI_Type_free(&rt.f16_);
  MPI_Type_free(&rt.bf16_);
  MPI_Finalize();
}

// Tests `req` until it completes. Throws TimeoutError at the deadline, TransportError for an
// MPI error or when `stop` is set; the request is then still active (the caller keeps it).
void wait_request(MPI_Request& req, MPI_Status* status, Clock::time_point deadline,
                  const std::atomic<bool>& stop, const std::string& what) {
  SpinWait spin;
  for (uint32_t polls = 1;; ++polls) {
    int done = 0;
    check(MPI_Test(&req, &done, status), what);
    if (done) return;
    if (stop.load()) throw TransportError(what + ": the process group was shut down");
    // The clock is read every 64th poll: on VMs a clock read costs more than a poll.
    if (polls % 64 == 0 && Clock::now() >= deadline) {
      throw TimeoutError(fmt::format(
          "{}: not complete after the group's timeout (a rank did not reach it, or stopped)",
          what));
    }
    spin.pause();
  }
}

// A communicator duplicate with MPI_ERRORS_RETURN, made without an unbounded wait.
MPI_Comm duplicate(MPI_Comm parent, Clock::time_point deadline, const std::atomic<bool>& stop,
                   const std::string& what) {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Request req = MPI_REQUEST_NULL;
  check(MPI_Comm_idup(parent, &comm, &req), what);
  try {
    wait_request(req, MPI_STATUS_IGNORE, deadline, stop, what);
  } catch (...) {
    MpiRuntime::get().abandon(req, nullptr);
    throw;
  }
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return comm;
}

int to_int(int64_t n, const std::string& what) {
  if (n > INT_MAX) {
    throw InvalidArgument(fmt::format(
        "{}: backend mpi does not support more than {} elements or bytes in one call (MPI "
        "counts are ints), got {}",
        what, INT_MAX, n));
  }
  return static_cast<int>(n);
}

// One posted MPI send or receive over memory that `keepalive` owns (kept until the request
// is done, or handed to the runtime with it).
class MpiTransfer final : public Transfer {
 public:
  // `give_up`: keeps a request nobody waits for, with its memory (MpiGroup::abandon).
  using GiveUp = std::function<void(MPI_Request, std::shared_ptr<void>)>;
  MpiTransfer(MPI_Request req, bool send, int peer, std::shared_ptr<void> keepalive,
              std::function<void(const std::string&)> broken, GiveUp give_up)
      : req_(req),
        send_(send),
        peer_(peer),
        keepalive_(std::move(keepalive)),
        broken_(std::move(broken)),
        give_up_(std::move(give_up)) {}
  ~MpiTransfer() override {
    if (req_ != MPI_REQUEST_NULL) give_up_(req_, std::move(keepalive_));
  }

  int wait(Clock::time_point deadline) override {
    MPI_Status status{};
    try {
      wait_request(req_, &status, deadline, aborted_, send_ ? "MPI send" : "MPI receive");
    } catch (const Error& e) {
      const bool timeout = dynamic_cast<const TimeoutError*>(&e) != nullptr;
      if (req_ == MPI_REQUEST_NULL) throw;  // MPI completed it with an error
      if (send_) {
        // MPI cannot cancel a send: it keeps its memory until done, and the group is unusable.
        if (!aborted_) broken_(fmt::format("an MPI send failed: {}", e.what()));
        give_up();
        throw;
      }
      switch (cancel(status)) {
        case Cancel::kArrived:
          return done(status);
        case Cancel::kCancelled:
          if (timeout) {
            throw TimeoutError("no message within the group's timeout (the receive was cancelled)");
          }
          throw;
        case Cancel::kFailed:
          throw;
      }
    }
    return done(status);
  }

  void abort() override { aborted_ = true; }

 private:
  enum class Cancel { kCancelled, kArrived, kFailed };
  int done(const MPI_Status& status) {
    keepalive_.reset();
    return send_ ? peer_ : status.MPI_SOURCE;
  }
  // Cancels a pending receive. kArrived: the message came meanwhile (status describes it).
  // kFailed: the cancel did not complete; the request is given up and the group broken.
  Cancel cancel(MPI_Status& status) {
    MPI_Cancel(&req_);
    const std::atomic<bool> never{false};
    try {
      wait_request(req_, &status, Clock::now() + 1s, never, "cancelling an MPI receive");
    } catch (const Error&) {
      broken_("an MPI receive could not be cancelled");
      give_up();
      return Cancel::kFailed;
    }
    int cancelled = 0;
    MPI_Test_cancelled(&status, &cancelled);
    if (!cancelled) return Cancel::kArrived;
    keepalive_.reset();
    return Cancel::kCancelled;
  }
  void give_up() {
    give_up_(req_, std::move(keepalive_));
    req_ = MPI_REQUEST_NULL;
  }

  MPI_Request req_;
  const bool send_;
  const int peer_;
  std::shared_ptr<void> keepalive_;
  std::function<void(const std::string&)> broken_;
  GiveUp give_up_;
  std::atomic<bool> aborted_{false};
};

// A group's communicators (owned; MPI_COMM_NULL for a non-member): `comm` for MPI's
// collectives and point-to-point headers, `data` for payloads, `direct` for the messages of
// dtr's own collectives (pg/mpi/mpi_direct.hpp). Each has MPI_ERRORS_RETURN.
struct Comms {
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm data = MPI_COMM_NULL;
  MPI_Comm direct = MPI_COMM_NULL;
  // Every member shares memory with every other, and Open MPI's shared-memory transport
  // is not excluded: dtr's own collectives then beat Open MPI's non-blocking ones at every
  // size (else only some all_reduce calls go direct: mpi_direct_takes()).
  bool shared_memory = false;
};

// Whether Open MPI's btl selection leaves it a shared-memory transport ("--mca btl
// tcp,self" does not). True when the variable is not there (another MPI).
bool shm_transport_allowed() {
  int provided = 0;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return true;
  bool allowed = true;
  int index = -1;
  if (MPI_T_cvar_get_index("btl", &index) == MPI_SUCCESS) {
    MPI_T_cvar_handle handle;
    int count = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) == MPI_SUCCESS) {
      std::vector<char> value(static_cast<size_t>(std::max(count, 0)) + 1, '\0');
      if (count > 0 && MPI_T_cvar_read(handle, value.data()) == MPI_SUCCESS) {
        const std::string v(value.data());
        const bool listed =
            v.find("vader") != std::string::npos || v.find("sm") != std::string::npos;
        // "^tcp" excludes what it lists; "tcp,self" includes only what it lists.
        allowed = v.empty() || (v[0] == '^' ? !listed : listed);
      }
      MPI_T_cvar_handle_free(&handle);
    }
  }
  MPI_T_finalize();
  return allowed;
}

// Whether every member of `comm` shares memory with every other (a blocking collective of
// `comm`: call it right after a bounded one that every member completed).
bool all_share_memory(MPI_Comm comm) {
  static const bool allowed = shm_transport_allowed();
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local) != MPI_SUCCESS) {
    return false;
  }
  int n = 0, all = 0;
  MPI_Comm_size(local, &n);
  MPI_Comm_size(comm, &all);
  MPI_Comm_free(&local);
  return allowed && n == all;
}

// `comm` (owned from here) with its two duplicates.
Comms with_duplicates(MPI_Comm comm, Clock::time_point deadline, const std::atomic<bool>& stop,
                      const std::string& what) {
  Comms c;
  c.comm = comm;
  try {
    c.data = duplicate(comm, deadline, stop, what);
    c.direct = duplicate(comm, deadline, stop, what);
    c.shared_memory = all_share_memory(comm);
  } catch (...) {
    for (MPI_Comm* x : {&c.comm, &c.data}) {
      if (*x != MPI_COMM_NULL) MPI_Comm_free(x);
    }
    throw;
  }
  return c;
}

class MpiGroup final : public LibraryGroup {
 public:
  MpiGroup(const ProcessGroupOptions& options, int rank, std::vector<int> members, Comms comms)
      : LibraryGroup("mpi", rank, std::move(members), options), c_(comms) {
    MpiRuntime::get().group_born();
  }
  ~MpiGroup() override {
    stop_threads();
    int finalized = 0;
    MPI_Finalized(&finalized);
    // Open MPI's non-blocking collectives do not survive their communicator's release while
    // they are pending: a group that gave up a request keeps its communicators (MPI_Finalize
    // releases them).
    if (!finalized && !abandoned_.load()) {
      for (MPI_Comm* c : {&c_.comm, &c_.data, &c_.direct}) {
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
      }
    }
    MpiRuntime::get().group_gone();
  }

  std::shared_ptr<Backend> new_group(const std::vector<int>& group_ranks) override;

  std::string host_path() const override {
    if (c_.comm == MPI_COMM_NULL) return "";
    if (c_.shared_memory) {
      return "shared memory (Open MPI's shared-memory transport; dtr's own all_reduce, "
             "broadcast and all_gather)";
    }
    return size() == 2
               ? "MPI's transports (not every member shares memory with every other, or Open "
                 "MPI's btl selection leaves out shared memory; dtr's own all_reduce, broadcast "
                 "and all_gather, as between any two ranks)"
               : "MPI's transports (not every member shares memory with every other, or Open "
                 "MPI's btl selection leaves out shared memory; dtr's own all_reduce from 1 MiB)";
  }

 protected:
  void run(CollectiveArgs& a, uint32_t tag, const std::string& what,
           Clock::time_point deadline) override;

  std::shared_ptr<Transfer> post_send(int dst, Channel c, const void* data, size_t bytes,
                                      std::shared_ptr<void> keepalive) override {
    MPI_Request req = MPI_REQUEST_NULL;
    // The call's name is formatted only for an error.
    if (bytes > INT_MAX) to_int(static_cast<int64_t>(bytes), concat("MPI send to rank ", dst));
    const int rc =
        MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, dst, tag_of(c), comm_of(c), &req);
    if (rc != MPI_SUCCESS) check(rc, concat("MPI send to rank ", dst));
    return std::make_shared<MpiTransfer>(req, true, dst, std::move(keepalive), breaker(), giver());
  }

  std::shared_ptr<Transfer> post_recv(int src, Channel c, void* data, size_t bytes,
                                      std::shared_ptr<void> keepalive) override {
    MPI_Request req = MPI_REQUEST_NULL;
    if (bytes > INT_MAX) to_int(static_cast<int64_t>(bytes), "MPI receive");
    const int rc = MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE,
                             src == kAnySource ? MPI_ANY_SOURCE : src, tag_of(c), comm_of(c), &req);
    if (rc != MPI_SUCCESS) check(rc, "MPI receive");
    return std::make_shared<MpiTransfer>(req, false, src, std::move(keepalive), breaker(), giver());
  }

  std::string unsupported_tag(int tag) const override {
    if (tag >= 0 && tag <= MpiRuntime::get().tag_ub()) return {};
    return fmt::format("backend mpi does not support tag {} (MPI tags lie in [0, {}])", tag,
                       MpiRuntime::get().tag_ub());
  }

  void close_library() override {}  // MPI has no goodbye; the communicators go with the group

 private:
  std::function<void(const std::string&)> breaker() {
    return [this](const std::string& why) { mark_broken(why); };
  }
  MpiTransfer::GiveUp giver() {
    return
        [this](MPI_Request req, std::shared_ptr<void> memory) { abandon(req, std::move(memory)); };
  }
  // Hands a request nobody waits for (and its memory) to the runtime.
  void abandon(MPI_Request req, std::shared_ptr<void> memory) {
    abandoned_ = true;
    MpiRuntime::get().abandon(req, std::move(memory));
  }
  MPI_Comm comm_of(Channel c) const { return c.kind == Channel::Kind::Header ? c_.comm : c_.data; }
  int tag_of(Channel c) const {
    if (c.kind == Channel::Kind::Header) return static_cast<int>(c.id);
    return static_cast<int>(c.id % (static_cast<uint64_t>(MpiRuntime::get().tag_ub()) + 1));
  }
  // Starts the collective's non-blocking MPI call; returns its request.
  MPI_Request start(CollectiveArgs& a, std::vector<std::shared_ptr<void>>& memory,
                    std::optional<FlatBlocks>& flat, const std::string& what);

  Comms c_;
  std::shared_ptr<std::vector<char>> scratch_ = std::make_shared<std::vector<char>>();
  MpiDirectContext::Lists lists_;  // run()'s, one call at a time
  std::atomic<uint64_t> children_{0};
  std::atomic<bool> abandoned_{false};  // a request of these communicators was given up
};

void MpiGroup::run(CollectiveArgs& a, uint32_t tag, const std::string& what,
                   Clock::time_point deadline) {
  if (mpi_direct_takes(a, c_.shared_memory, size())) {
    MpiDirectContext ctx;
    ctx.comm = c_.direct;
    ctx.rank = rank();
    ctx.size = size();
    ctx.tag = static_cast<int>(tag % (static_cast<uint32_t>(MpiRuntime::get().tag_ub()) + 1));
    ctx.shared_memory = c_.shared_memory;
    ctx.deadline = deadline;
    ctx.stop = &closing_flag();
    ctx.what = &what;
    ctx.scratch = &scratch_;
    ctx.lists = &lists_;
    ctx.give_up = giver();
    run_mpi_direct(a, ctx);
    return;
  }
  std::vector<std::shared_ptr<void>> memory;  // what MPI reads and writes, if it is given up
  std::optional<FlatBlocks> flat;
  MPI_Request req = start(a, memory, flat, what);
  try {
    wait_request(req, MPI_STATUS_IGNORE, deadline, closing_flag(), what);
  } catch (...) {
    abandon(req, std::make_shared<decltype(memory)>(std::move(memory)));
    throw;
  }
  if (flat) flat->copy_out(a.outputs);
}

MPI_Request MpiGroup::start(CollectiveArgs& a, std::vector<std::shared_ptr<void>>& memory,
                            std::optional<FlatBlocks>& flat, const std::string& what) {
  for (const auto& t : a.inputs) memory.push_back(t.storage());
  for (const auto& t : a.outputs) memory.push_back(t.storage());
  MPI_Request req = MPI_REQUEST_NULL;
  if (a.op == CommOp::Barrier) {
    check(MPI_Ibarrier(c_.comm, &req), what);
    return req;
  }
  const bool gathers = a.op == CommOp::AllGather || a.op == CommOp::Gather;
  const local::Tensor& ref = gathers ? a.inputs[0] : a.outputs[0];
  const int n = to_int(ref.meta().numel(), what);
  const MPI_Datatype type = MpiRuntime::get().type_of(ref.dtype());
  const MPI_Op op = MpiRuntime::get().op_of(ref.dtype(), a.reduce);
  const bool root = rank() == a.root;
  const size_t block = static_cast<size_t>(n) * element_size(ref.dtype());
  void* out0 = a.outputs.empty() ? nullptr : a.outputs[0].raw_data();
  int rc = MPI_SUCCESS;
  switch (a.op) {
    case CommOp::AllReduce:
      rc = MPI_Iallreduce(MPI_IN_PLACE, out0, n, type, op, c_.comm, &req);
      break;
    case CommOp::Broadcast:
      rc = MPI_Ibcast(out0, n, type, a.root, c_.comm, &req);
      break;
    case CommOp::Reduce:  // the others' tensors are only read
      rc = root ? MPI_Ireduce(MPI_IN_PLACE, out0, n, type, op, a.root, c_.comm, &req)
                : MPI_Ireduce(out0, nullptr, n, type, op, a.root, c_.comm, &req);
      break;
    case CommOp::AllGather: {
      flat.emplace(a.outputs, false);
      char* own = flat->data() + block * rank();
      const void* in = a.inputs[0].raw_data() == own ? MPI_IN_PLACE : a.inputs[0].raw_data();
      rc = MPI_Iallgather(in, n, type, flat->data(), n, type, c_.comm, &req);
      break;
    }
    case CommOp::Gather: {
      const void* in = a.inputs[0].raw_data();
      char* out = nullptr;
      if (root) {
        flat.emplace(a.outputs, false);
        out = flat->data();
        if (in == out + block * rank()) in = MPI_IN_PLACE;
      }
      rc = MPI_Igather(in, n, type, out, n, type, a.root, c_.comm, &req);
      break;
    }
    case CommOp::Scatter: {
      const char* in = nullptr;
      void* out = out0;
      if (root) {
        auto inputs = std::make_shared<FlatBlocks>(a.inputs, true);
        memory.push_back(inputs);
        in = inputs->data();
        if (out == in + block * rank()) out = MPI_IN_PLACE;
      }
      rc = MPI_Iscatter(in, n, type, out, n, type, a.root, c_.comm, &req);
      break;
    }
    case CommOp::ReduceScatter: {
      auto inputs = std::make_shared<FlatBlocks>(a.inputs, true);
      memory.push_back(inputs);
      rc = MPI_Ireduce_scatter_block(inputs->data(), out0, n, type, op, c_.comm, &req);
      break;
    }
    default:
      throw InvalidArgument(fmt::format("{}: not a collective", what));
  }
  check(rc, what);
  return req;
}

std::shared_ptr<Backend> MpiGroup::new_group(const std::vector<int>& group_ranks) {
  int mine = -1;
  std::vector<int> world;
  for (size_t i = 0; i < group_ranks.size(); ++i) {
    world.push_back(world_ranks()[group_ranks[i]]);
    if (group_ranks[i] == rank()) mine = static_cast<int>(i);
  }
  const std::string what = fmt::format("new_group {} (mpi, subgroup #{} of a group of {})",
                                       format_ranks(group_ranks), ++children_, size());
  // The task owns what it writes: when the wait below gives up, it may still run.
  auto made = std::make_shared<Comms>();
  // MPI_Comm_split is a blocking collective of this group: it runs in the group's
  // collective order, after a barrier that bounds the wait for the others.
  run_in_order(what, [this, made, mine, what] {
    check_usable(what);
    const auto deadline = Clock::now() + options().timeout;
    MPI_Request req = MPI_REQUEST_NULL;
    check(MPI_Ibarrier(c_.comm, &req), what);
    try {
      wait_request(req, MPI_STATUS_IGNORE, deadline, closing_flag(), what);
    } catch (...) {
      abandon(req, nullptr);
      throw;
    }
    MPI_Comm split = MPI_COMM_NULL;
    check(MPI_Comm_split(c_.comm, mine >= 0 ? 0 : MPI_UNDEFINED, mine, &split), what);
    if (split == MPI_COMM_NULL) return;
    MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);
    *made = with_duplicates(split, deadline, closing_flag(), what);
  });
  return std::make_shared<MpiGroup>(options(), mine, std::move(world), *made);
}

}  // namespace

std::pair<int, int> mpi_world_rank_size() {
  MpiRuntime& rt = MpiRuntime::get();
  return {rt.rank(), rt.size()};
}

namespace {

// Every process of MPI's world splits MPI_COMM_WORLD, after a barrier that bounds the wait
// for the others: `member` ones get a communicator ordered by `key`, the others none.
MPI_Comm split_world(bool member, int key, std::chrono::milliseconds timeout,
                     const std::string& what) {
  MpiRuntime::get();
  const auto deadline = Clock::now() + timeout;
  const std::atomic<bool> never{false};
  MPI_Request req = MPI_REQUEST_NULL;
  check(MPI_Ibarrier(MPI_COMM_WORLD, &req), what);
  try {
    wait_request(req, MPI_STATUS_IGNORE, deadline, never, what);
  } catch (...) {
    MpiRuntime::get().abandon(req, nullptr);
    throw;
  }
  MPI_Comm split = MPI_COMM_NULL;
  check(MPI_Comm_split(MPI_COMM_WORLD, member ? 0 : MPI_UNDEFINED, key, &split), what);
  if (split != MPI_COMM_NULL) MPI_Comm_set_errhandler(split, MPI_ERRORS_RETURN);
  return split;
}

}  // namespace

std::shared_ptr<Backend> make_mpi_world_part(const ProcessGroupOptions& options, int rank,
                                             int size) {
  MpiRuntime& rt = MpiRuntime::get();
  const std::string what = fmt::format("process group (mpi, rank {} of {}, MPI rank {} of {})",
                                       rank, size, rt.rank(), rt.size());
  MPI_Comm comm = split_world(true, rank, options.timeout, what);
  int got_rank = -1, got_size = 0;
  MPI_Comm_rank(comm, &got_rank);
  MPI_Comm_size(comm, &got_size);
  if (got_rank != rank || got_size != size) {
    MPI_Comm_free(&comm);
    throw InvalidArgument(fmt::format(
        "{}: the MPI processes that formed the group are {}, this one is their rank {} (every "
        "member must give a distinct rank below the size, and every process of the job but "
        "those standing aside must take part)",
        what, got_size, got_rank));
  }
  const std::atomic<bool> never{false};
  Comms comms = with_duplicates(comm, Clock::now() + options.timeout, never, what);
  std::vector<int> all(size);
  for (int i = 0; i < size; ++i) all[i] = i;
  return std::make_shared<MpiGroup>(options, rank, std::move(all), comms);
}

void mpi_stand_aside(std::chrono::milliseconds timeout, const std::string& what) {
  // MPI_Init waits, without a bound, for every process of the job to call it: it runs on a
  // thread of its own, which this one waits for (bounded). A worker that never joins (it
  // refused the session, or was built without MPI) leaves that thread blocked until the
  // process exits.
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> joined = done->get_future();
  std::thread([done, timeout, what] {
    try {
      (void)split_world(false, 0, timeout, what);
      done->set_value();
    } catch (...) {
      done->set_exception(std::current_exception());
    }
  }).detach();
  if (joined.wait_for(timeout + std::chrono::seconds(1)) != std::future_status::ready) {
    throw TimeoutError(fmt::format(
        "{}: the other processes of the MPI job did not all initialize MPI and split its world "
        "within {} ms (a worker that refused the session or was built without MPI: see the "
        "workers' logs)",
        what, timeout.count()));
  }
  joined.get();
}

std::shared_ptr<Backend> make_mpi_world(const ProcessGroupOptions& options) {
  MpiRuntime& rt = MpiRuntime::get();
  const auto deadline = Clock::now() + options.timeout;
  const std::atomic<bool> never{false};
  const std::string what =
      fmt::format("init_process_group (mpi, rank {} of {})", rt.rank(), rt.size());
  Comms comms =
      with_duplicates(duplicate(MPI_COMM_WORLD, deadline, never, what), deadline, never, what);
  std::vector<int> all(rt.size());
  for (int i = 0; i < rt.size(); ++i) all[i] = i;
  return std::make_shared<MpiGroup>(options, rt.rank(), std::move(all), comms);
}

}  // namespace dtr::pg
