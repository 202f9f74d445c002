// Collectives (worker/collectives.hpp).
#include "worker/collectives.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <thread>

#include "common/printable.hpp"
#include "worker/device_order.hpp"

namespace dtr::worker::detail {

namespace cmd = protocol::cmd;
using protocol::TensorId;

GroupThread::GroupThread() : state_(std::make_shared<State>()) {
  std::thread([s = state_] { loop(*s); }).detach();
}

GroupThread::~GroupThread() {
  {
    std::lock_guard lock(state_->mu);
    state_->stop = true;
    state_->jobs.clear();
  }
  state_->cv.notify_one();
}

void GroupThread::post(std::function<void()> job) {
  {
    std::lock_guard lock(state_->mu);
    state_->jobs.push_back(std::move(job));
  }
  state_->cv.notify_one();
}

namespace {
std::atomic<int> g_running_jobs{0};
}  // namespace

int GroupThread::running() {
  return g_running_jobs.load();
}

void GroupThread::loop(State& s) {
  std::unique_lock lock(s.mu);
  while (true) {
    s.cv.wait(lock, [&] { return s.stop || !s.jobs.empty(); });
    if (s.stop) return;
    std::function<void()> job = std::move(s.jobs.front());
    s.jobs.pop_front();
    // Counted before the lock goes: once ~GroupThread has set `stop`, either this job is
    // counted or it never runs.
    g_running_jobs.fetch_add(1);
    lock.unlock();
    job();
    job = nullptr;  // what it holds goes before it stops counting
    g_running_jobs.fetch_sub(1);
    lock.lock();
  }
}

void Groups::setup(std::vector<std::string> endpoints, uint32_t node, uint32_t nodes,
                   uint64_t session_id, std::chrono::milliseconds timeout,
                   const SecurityConfig& security, const std::string& backend,
                   std::shared_ptr<void> port_hold) {
  if (endpoints.size() != nodes || groups_.count(0)) return;
  auto promise = std::make_shared<std::promise<ProcessGroup>>();
  auto world = std::make_shared<Group>();
  world->ready = promise->get_future().share();
  groups_.emplace(0, world);
  thread_ = std::make_unique<GroupThread>();
  ProcessGroup::Options o;
  o.timeout = timeout;
  o.security = security;
  o.group_name = fmt::format("dtr-session-{:x}", session_id);
  // By default, with CUDA, collectives whose members all hold CUDA tensors run on NCCL (or
  // the group's host staging where NCCL cannot: workers sharing one GPU) and host tensors
  // use the mesh. The master may ask for gloo instead (MasterOptions::backend): a worker
  // built without it fails the group, and so every collective, saying so.
  if (!backend.empty())
    o.backend = backend;
  else if (backend_available("nccl"))
    o.backend = "nccl";
  // The job may outlive the session (forming a group can take until its timeout):
  // dtr-worker does not exit through the static destructors while it runs
  // (GroupThread::running()).
  thread_->post([promise, endpoints = std::move(endpoints), node, o,
                 port_hold = std::move(port_hold)]() mutable {
    try {
      port_hold.reset();  // the port is free for the bind below, and only just
      ProcessGroup g = ProcessGroup::create(endpoints, static_cast<int>(node), o);
      // nccl carries CUDA tensors only; host tensors (all of them on a worker without a
      // GPU) go through dtr's own transport.
      spdlog::info("{}: the session's process group of {} workers is up on backend {}{}",
                   o.group_name, endpoints.size(), g.backend_name(),
                   g.backend_name() == "nccl" ? " (CUDA tensors; host tensors on zmq)" : "");
      promise->set_value(std::move(g));
    } catch (const std::exception& e) {
      spdlog::warn("{}: the session's process group ({} backend) could not be formed: {}",
                   o.group_name, o.backend, common::printable(e.what(), 2048));
      promise->set_exception(std::current_exception());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
}

std::optional<std::string> Groups::new_group(const cmd::NewGroup& c, uint32_t nodes) {
  if (!groups_.count(0))
    return std::string("the session has no process group (no Setup with endpoints)");
  if (c.group == 0 || groups_.count(c.group))
    return fmt::format("group id {} is reserved or already in use", c.group);
  std::vector<int> ranks;
  for (uint32_t r : c.ranks) {
    if (r >= nodes) return fmt::format("rank {} is not a node (there are {})", r, nodes);
    for (int seen : ranks)
      if (seen == static_cast<int>(r)) return fmt::format("rank {} appears twice", r);
    ranks.push_back(static_cast<int>(r));
  }
  if (ranks.empty()) return std::string("a group needs at least one rank");
  auto promise = std::make_shared<std::promise<ProcessGroup>>();
  auto g = std::make_shared<Group>();
  g->ready = promise->get_future().share();
  std::shared_future<ProcessGroup> world = groups_[0]->ready;
  groups_.emplace(c.group, g);
  // Every node makes its subgroups in the order the master sent them.
  thread_->post([promise, world, ranks] {
    try {
      promise->set_value(world.get().new_group(ranks));
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  });
  return std::nullopt;
}

GroupPtr Groups::find(uint64_t id) const {
  auto it = groups_.find(id);
  return it == groups_.end() ? nullptr : it->second;
}

template <class F>
void Groups::for_each_formed(F&& f) {
  for (auto& [id, g] : groups_) {
    if (!g->ready.valid() ||
        g->ready.wait_for(std::chrono::seconds(0)) != std::future_status::ready)
      continue;
    try {
      ProcessGroup pg = g->ready.get();
      if (pg.valid()) f(pg);
    } catch (const std::exception&) {
    }
  }
}

void Groups::close() {
  closing_.store(true);
  // Collectives blocked in a process group fail at once when it shuts down.
  for_each_formed([](ProcessGroup& pg) { pg.shutdown(); });
}

void Groups::lost(uint32_t node, const std::string& why) {
  for_each_formed([&](ProcessGroup& pg) { pg.declare_lost(static_cast<int>(node), why); });
}

namespace {

// One collective task's run, in steps; every step returns the failure that ends it, or
// null to go on.
struct CollectiveRun {
  CollectiveRun(StreamQueue& s, Task& t, const CollectiveContext& ctx, std::string_view name)
      : s(s),
        t(t),
        ctx(ctx),
        c(t.command<cmd::Collective>()),
        name(name),
        target(t.out == t.in[0] ? c.input : c.out) {}

  StreamQueue& s;
  Task& t;
  const CollectiveContext& ctx;
  const cmd::Collective& c;
  std::string_view name;
  TensorId target;
  ProcessGroup pg;
  local::Tensor x;  // the input (when not failed)
  int device = -1;  // its device
  bool all_on_devices = true;
  bool waited_out = false;  // the group did not form in time, or failed to

  Failure root(std::string message) { return ctx.failures.root(target, name, std::move(message)); }
  Failure form_group();
  Failure agree();
  void compute();
};

Failure CollectiveRun::form_group() {
  if (!t.group)
    return root(c.group == 0 ? std::string("the session has no process group")
                             : fmt::format("group {} does not exist", c.group));
  try {
    auto deadline = std::chrono::steady_clock::now() + ctx.timeout;
    while (t.group->ready.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
      if (ctx.groups.closing()) return root("the session ended before its process group formed");
      if (std::chrono::steady_clock::now() >= deadline) {
        waited_out = true;
        return root(fmt::format("the session's process group was not formed within {} ms",
                                ctx.timeout.count()));
      }
    }
    pg = t.group->ready.get();
  } catch (const std::exception& e) {
    waited_out = true;
    return root(fmt::format("process group: {}", e.what()));
  }
  if (!pg.is_member())
    return root(fmt::format("node {} is not a member of group {}", ctx.node, c.group));
  return nullptr;
}

// The members agree first: whoever's input is failed says so, and nobody computes. Each
// member also says whether its input is a CUDA tensor (flag 2): only when all are does the
// group get device tensors (NCCL, or the group's own host staging); otherwise every member
// stages its CUDA input through the host itself.
Failure CollectiveRun::agree() {
  local::Tensor flags = local::zeros({pg.size()}, DType::Int32);
  Failure own = t.in[0]->get_failure();
  if (!own) x = use(s.cuda, *t.in[0]);
  device = own ? -1 : x.device();
  static_cast<int32_t*>(flags.raw_data())[pg.rank()] = own ? 1 : (device >= 0 ? 2 : 0);
  pg.all_reduce(flags, ReduceOp::Max);
  if (own) return dependent_failure(target, name, c.input, *own);
  const auto* f = static_cast<const int32_t*>(flags.raw_data());
  // Not a root failure here: the node whose input failed reports its own cause.
  for (int r = 0; r < pg.size(); ++r) {
    if (f[r] == 1)
      return std::make_shared<protocol::RemoteFailure>(
          make_failure(target, name,
                       fmt::format("the input on node {} (group rank {}) is failed",
                                   pg.ranks()[static_cast<size_t>(r)], r)));
    all_on_devices = all_on_devices && f[r] == 2;
  }
  return nullptr;
}

void CollectiveRun::compute() {
  const ReduceOp op = c.reduce_op;
  // CUDA work (copies, the collective's wait for earlier work) goes to this stream's CUDA
  // stream.
  std::optional<cuda::StreamScope> scope;
  if (device >= 0) scope.emplace(device, s.cuda.get(device));
  // Where the group's tensors live: the device when every member's input is on one.
  const int pg_device = all_on_devices ? device : -1;
  const local::Tensor in = x.to_device(pg_device);
  auto publish = [&](local::Tensor out) {
    if (device >= 0) {
      out = out.to_device(device);
      wrote(s.cuda, *t.out, out);
    }
    t.out->publish(std::move(out));
  };
  switch (c.kind) {
    case protocol::CollectiveKind::AllReduce:
    case protocol::CollectiveKind::Broadcast: {
      local::Tensor buf = in.is_contiguous() ? in : in.contiguous();
      if (c.kind == protocol::CollectiveKind::AllReduce)
        pg.all_reduce(buf, op);
      else
        pg.broadcast(buf, c.root);
      if (buf.storage() != x.storage()) local::Tensor(x).copy_(buf.to_device(device));
      if (device >= 0) wrote(s.cuda, *t.in[0], x);
      break;
    }
    case protocol::CollectiveKind::AllGather: {
      local::Tensor out = local::empty(c.meta.shape, c.meta.dtype, pg_device);
      pg.all_gather_into_tensor(out, in.contiguous());
      publish(std::move(out));
      break;
    }
    case protocol::CollectiveKind::ReduceScatter: {
      local::Tensor out = local::empty(c.meta.shape, c.meta.dtype, pg_device);
      pg.reduce_scatter_tensor(out, in.contiguous(), op);
      publish(std::move(out));
      break;
    }
  }
}

// A collective that failed waiting for the other members: the first of a burst dumps the
// flight recorder to the log and the master; the ones failed because the session is
// ending (its groups shut down) are its consequence, not a fault.
void report_stuck(const CollectiveContext& ctx, const std::string& raw_reason) {
  // It may quote what another process sent (a peer's address or error): escaped for logs.
  const std::string reason = common::printable(raw_reason, 2048);
  // A member that left in order (its group shut down: its session ended a moment before
  // this one's) is not a hang; were it more, the master makes it a lost node, which dumps.
  const bool orderly = reason.find("left the process group (shut down)") != std::string::npos;
  if (ctx.groups.closing()) {
    spdlog::debug("{} (the session is ending)", reason);
  } else if (orderly) {
    spdlog::info("{}", reason);
  } else if (ctx.recorder.claim_failure_dump()) {
    ctx.outbox.send_flight(ctx.recorder.dump_to_log(reason));
  } else {
    spdlog::warn("{} (the flight recorder was logged at the first failure, less than {} s ago)",
                 reason, Recorder::kFailureDumpGap.count());
  }
}

}  // namespace

bool run_collective(StreamQueue& s, const StreamQueuePtr& self, Task& t,
                    const CollectiveContext& ctx) {
  const auto& c = t.command<cmd::Collective>();
  if (!t.in[0]->ready_or_park(self)) {
    waiting_for_tensor(s, t, c.input);
    return false;
  }
  static constexpr std::string_view kNames[] = {"?", "all_reduce", "broadcast", "all_gather",
                                                "reduce_scatter"};
  CollectiveRun run(s, t, ctx, kNames[static_cast<int>(c.kind)]);
  FlightRecorder& flight = ctx.recorder.flight;
  flight.waiting(t.flight, protocol::WaitKind::Group, c.group, FlightRecorder::coarse_now_ns());
  std::string stuck;  // why waiting for the other members failed
  Failure f = run.form_group();
  if (f && run.waited_out) stuck = f->message;
  if (!f) {
    try {
      f = run.agree();
      flight.resumed(t.flight);
      if (!f) run.compute();
    } catch (const std::exception& e) {
      f = run.root(e.what());
      stuck = e.what();
    }
  }
  if (!f)
    ctx.recorder.counters.add_bytes<cmd::Collective>(
        run.x.numel() * static_cast<int64_t>(element_size(run.x.dtype())));
  if (f) fail_output(s, t, std::move(f));
  if (!stuck.empty())
    report_stuck(ctx, fmt::format("{} on stream {} failed: {}", run.name, s.id, stuck));
  return true;
}

}  // namespace dtr::worker::detail
