// What callers' threads do to reach the workers: queue commands into the nodes' batches
// (enqueue, collectives, and the backpressure that holds a caller back), send requests and
// wait for their replies, doing the I/O themselves while they wait (await_reply, hold_io);
// and dist_send's orphaned payloads.
#include "master/session.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "common/trace_clock.hpp"
#include "master/wait_interrupt.hpp"

namespace dtr::detail {

namespace {

// A user thread that has queued this many commands for one node waits for the I/O thread.
constexpr size_t kBackpressureCommands = size_t{1} << 16;

// The tensor a command makes (0 for none): the id a master call's slice names.
uint64_t made_by(const protocol::Command& c) {
  return std::visit(
      [](const auto& x) -> uint64_t {
        if constexpr (requires { x.out; })
          return x.out;
        else
          return 0;
      },
      c);
}

// The op code a slice of `c` carries (common::event_name).
uint16_t op_code(const protocol::Command& c) {
  if (const auto* op = std::get_if<protocol::cmd::RunOp>(&c)) return static_cast<uint16_t>(op->op);
  if (const auto* col = std::get_if<protocol::cmd::Collective>(&c))
    return static_cast<uint16_t>(col->kind);
  return 0;
}

// Whether node `n`'s batch goes to the I/O thread before its caller adds more (under n.mu):
// at the backpressure count, or at half the worker's largest message (so that a header stays
// below it whatever other threads add meanwhile; a dtr-worker takes at least 64 KiB).
bool batch_full(const WorkerNode& n) {
  const int64_t limit = n.hello.max_message_bytes;  // 0 only before the handshake
  return n.batch.count() >= kBackpressureCommands ||
         (limit > 0 && static_cast<int64_t>(n.batch.bytes()) >= limit / 2);
}

std::string byte_size(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30))
    return fmt::format("{} bytes ({:.1f} GiB)", bytes, static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (int64_t{1} << 20))
    return fmt::format("{} bytes ({:.1f} MiB)", bytes, static_cast<double>(bytes) / (1 << 20));
  return fmt::format("{} bytes", bytes);
}

}  // namespace

void MasterSession::check_frame(const char* op, int to, int64_t bytes,
                                std::string_view tensor) const {
  const int64_t limit = to < 0 ? kMaxMessageBytes : message_limit(to);
  if (bytes <= limit) return;
  if (to < 0)
    throw InvalidArgument(fmt::format(
        "{}: {} is {}, more than the master takes in one message ({}); keep it on its node, "
        "or bring it over in slices (x.slice(0, i, j), x[i:j] in Python)",
        op, tensor, byte_size(bytes), byte_size(limit)));
  throw InvalidArgument(
      fmt::format("{}: {} is {}, more than node {} ({}) takes in one message ({}, dtr-worker "
                  "--max-message-bytes); send it in slices, or raise the worker's limit",
                  op, tensor, byte_size(bytes), to, endpoint(to), byte_size(limit)));
}

void MasterSession::enqueue(int node, const protocol::Command& c, const local::Tensor* payload,
                            Wake how) {
  if (closed_.load(std::memory_order_relaxed)) return;
  if (capturing_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (divert(node, c, how)) return;
  }
  // A request's own slice is the sync point's (request()).
  const bool traced = trace_.on() && how != Wake::kNone;
  Node& n = *nodes_[node];
  bool full;
  {
    std::lock_guard lock(n.mu);
    if (const auto* p = std::get_if<protocol::cmd::Put>(&c); p && payload) {
      // Payload frames are numbered within the message that carries the batch.
      protocol::cmd::Put put = *p;
      put.payload = static_cast<uint32_t>(n.payloads.size() + 1);
      n.batch.add(put);
      n.payloads.push_back(*payload);
    } else {
      n.batch.add(c);
    }
    full = batch_full(n);
  }
  after_enqueue(n, full, how);
  if (traced)
    trace_.call(protocol::command_type(c), op_code(c), node, protocol::command_stream(c),
                made_by(c));
}

bool MasterSession::enqueue(int node, const protocol::cmd::RunOp& c, Wake how) {
  if (closed_.load(std::memory_order_relaxed)) return false;
  if (capturing_.load(std::memory_order_relaxed) != 0) [[unlikely]] {
    if (divert(node, c, how)) return true;
  }
  Node& n = *nodes_[node];
  bool full;
  {
    std::lock_guard lock(n.mu);
    n.batch.add(c);
    full = batch_full(n);
  }
  after_enqueue(n, full, how);
  if (trace_.on())
    trace_.call(protocol::CmdType::RunOp, static_cast<uint16_t>(c.op), node, c.stream, c.out);
  return false;
}

void MasterSession::after_enqueue(Node& n, bool full, Wake how) {
  // Each flag is read before it is written: while the I/O thread is busy they stay as they
  // are, and a plain load costs far less than a locked write to a line it also uses. (The
  // I/O thread clears work_pending_ before it takes the batches, so a command added before
  // a `true` seen here is still flushed.)
  if (!work_pending_.load()) work_pending_.store(true);
  // The I/O thread or a requester holding the I/O may sleep (both watch the wake fd).
  // Lazy work wakes neither while the I/O thread dozes: whoever flushes next takes it. (The
  // I/O thread clears dozing_ before it checks work_pending_ and sleeps long.)
  if (how == Wake::kNow) {
    if (sleeping_.load() && sleeping_.exchange(false)) wake();
    if (holder_sleeping_.load() && holder_sleeping_.exchange(false)) wake();
  } else if (how == Wake::kLazy) {
    if (sleeping_.load() && !dozing_.load() && sleeping_.exchange(false)) wake();
  }
  if (full) {
    // The I/O thread flushes it (woken here even for a caller that flushes itself).
    if (sleeping_.exchange(false)) wake();
    // Yielding first (the I/O thread usually takes the batch within microseconds), then
    // sleeping: a worker that holds the master back (full queues) may take a while.
    for (int round = 0; !closed_.load() && !n.lost.load(); ++round) {
      {
        std::lock_guard lock(n.mu);
        if (!batch_full(n)) break;
      }
      if (round < 64)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void MasterSession::enqueue_collective(const std::vector<int>& nodes,
                                       std::vector<protocol::cmd::Collective> commands) {
  for (int n : nodes) check_alive(n);
  std::lock_guard lock(collectives_mu_);
  uint64_t group = 0;
  bool whole = static_cast<int>(nodes.size()) == node_count();
  for (size_t i = 0; i < nodes.size() && whole; ++i) whole = nodes[i] == static_cast<int>(i);
  if (!whole) {
    auto it = groups_.find(nodes);
    if (it == groups_.end()) {
      protocol::cmd::NewGroup make{.group = next_group_++};
      for (int n : nodes) make.ranks.push_back(static_cast<uint32_t>(n));
      // Every node takes part in making a subgroup, members or not.
      for (int k = 0; k < node_count(); ++k) enqueue(k, make);
      it = groups_.emplace(nodes, make.group).first;
    }
    group = it->second;
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    commands[i].group = group;
    enqueue(nodes[i], commands[i]);
  }
}

ReplyMessage MasterSession::request(int node, protocol::Command c) {
  return request(node, std::move(c), options_.sync_timeout);
}

ReplyMessage MasterSession::request(int node, protocol::Command c,
                                    std::chrono::milliseconds timeout) {
  if (closed_.load()) throw TransportError("the master-worker session is shut down");
  if (capturing()) refuse_sync_point_in_capture(c);
  Node& n = *nodes_[node];
  check_alive(node);
  const uint64_t request = next_request_.fetch_add(1);
  // The sync point's slice on the master's timeline, however the wait ends.
  struct SyncSlice {
    MasterSession& s;
    const protocol::Command& c;
    int node;
    uint64_t request;
    int64_t begin = s.trace_.on() ? trace::ticks() : 0;
    ~SyncSlice() {
      if (begin != 0)
        s.trace_.sync_point(protocol::command_type(c), op_code(c), node,
                            protocol::command_stream(c), request, begin, trace::ticks());
    }
  } slice{*this, c, node, request};
  std::visit(
      [&](auto& x) {
        if constexpr (requires { x.request; })
          x.request = request;
        else
          throw InvalidArgument(fmt::format("{} is not a request", protocol::command_name(c)));
      },
      c);
  std::future<ReplyMessage> future;
  {
    std::lock_guard lock(pending_mu_);
    Pending& p = pending_[request];
    p.node = node;
    future = p.promise.get_future();
  }
  // Not woken: this thread sends the request and reads the reply itself when it can.
  enqueue(node, c, nullptr, Wake::kNone);
  // The node may have been marked lost after the check above and before the promise was
  // registered; fail_node() would then have missed it.
  if (n.lost.load()) {
    bool erased;
    {
      std::lock_guard lock(pending_mu_);
      erased = pending_.erase(request) != 0;
    }
    if (erased) throw_lost(node);
  }
  bool replied = false;
  try {
    replied = await_reply(future, Clock::now() + timeout);
  } catch (...) {  // the wait interrupt check threw: the reply, if it comes, is dropped
    {
      std::lock_guard lock(pending_mu_);
      pending_.erase(request);
    }
    // The program was interrupted (Ctrl-C): what it queued is not wanted any more.
    cancel(-1);
    throw;
  }
  if (!replied) {
    std::lock_guard lock(pending_mu_);
    pending_.erase(request);
    throw TimeoutError(fmt::format("node {} ({}) did not answer request {} within {} ms", node,
                                   n.endpoint, request, timeout.count()));
  }
  try {
    return future.get();
  } catch (const WorkerLost&) {
    throw_lost(node);  // the same, naming what each node reported
  }
}

void MasterSession::cancel(int node) noexcept {
  for (int k = 0; k < node_count(); ++k) {
    if ((node >= 0 && k != node) || nodes_[k]->lost.load()) continue;
    try {
      enqueue(k, protocol::cmd::Cancel{}, nullptr, Wake::kNow);
    } catch (...) {  // a closing session: nothing left to cancel
    }
  }
}

bool MasterSession::await_reply(std::future<ReplyMessage>& future, Clock::time_point deadline) {
  // How long this thread waits before it looks again at the clock and the I/O lock.
  constexpr auto kWaitSlice = std::chrono::milliseconds(5);
  constexpr int kLockSpins = 200;
  auto ready = [&] {
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  Clock::time_point next_interrupt_check = Clock::now() + kWaitInterruptEvery;
  // The spin is once per request, from its start: a reply that takes longer (a large
  // tensor on its way) is waited for asleep, leaving the cores to the threads moving it.
  const Clock::time_point spin_until = Clock::now() + options_.spin;
  while (!ready()) {
    Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (now >= next_interrupt_check) {
      check_wait_interrupt();  // may throw: request() drops the pending reply
      next_interrupt_check = now + kWaitInterruptEvery;
    }
    auto slice = std::min(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now) +
                              std::chrono::milliseconds(1),
                          std::chrono::milliseconds(kWaitSlice));
    std::unique_lock lock(io_mu_, std::try_to_lock);
    // The I/O thread holds the lock for a flush or a read (microseconds): try again for a
    // little while before leaving the reply to it.
    for (int spin = 0; spin < kLockSpins && !lock.owns_lock() && !ready(); ++spin) {
      std::this_thread::yield();
      (void)lock.try_lock();
    }
    if (ready()) return true;
    if (!lock.owns_lock() || io_closed_) {
      // Another thread does the I/O (it flushes this request and reads its reply), or the
      // session is closing: wait for the reply it hands over.
      if (lock.owns_lock()) lock.unlock();
      if (sleeping_.exchange(false)) wake();
      if (future.wait_for(slice) == std::future_status::ready) return true;
      continue;
    }
    if (hold_io(future, std::min(deadline, now + kWaitSlice), spin_until)) return true;
  }
  return true;
}

bool MasterSession::hold_io(std::future<ReplyMessage>& future, Clock::time_point until,
                            Clock::time_point spin_until) {
  auto ready = [&] {
    return future.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  };
  // This thread is the I/O thread until its reply is here: it holds the lock while it
  // waits, so nobody else reads the sockets (and takes the wake-up meant for it); the I/O
  // thread meanwhile leaves them alone, and commands other threads queue wake this one
  // through the wake fd.
  holder_.store(true);
  struct Leave {
    MasterSession& s;
    ~Leave() {
      s.holder_.store(false);
      // Replies other threads wait for, and commands queued since the last flush, are the
      // I/O thread's again: wake it if it sleeps away from the sockets. (Heartbeats are
      // the heartbeat thread's.)
      bool others;
      {
        std::lock_guard lock(s.pending_mu_);
        others = !s.pending_.empty();
      }
      if ((others || s.work_pending_.load()) && s.sleeping_.exchange(false)) s.wake();
    }
  } leave{*this};
  while (true) {
    service(true);
    if (ready()) return true;
    Clock::time_point now = Clock::now();
    if (now >= until) return false;
    if (now < spin_until) {
      // Spin first: a reply that comes while this thread polls costs no wake-up. Yielding
      // lets the ZeroMQ I/O thread that brings it run on this core.
      while (!work_pending_.load() && !input_waiting() && Clock::now() < spin_until)
        std::this_thread::yield();
      continue;
    }
    holder_sleeping_.store(true);
    if (!work_pending_.load() && !input_waiting())
      wait_sockets(std::chrono::duration_cast<std::chrono::milliseconds>(until - now) +
                       std::chrono::milliseconds(1),
                   true, true);
    holder_sleeping_.store(false);
  }
}

void MasterSession::hold_io_for_test(std::chrono::milliseconds how_long) {
  std::lock_guard lock(io_mu_);
  std::this_thread::sleep_for(how_long);
}

void MasterSession::orphan(int node, local::Tensor t) {
  Node& n = *nodes_[node];
  std::lock_guard lock(n.orphan_mu);
  n.orphans.push_back(std::move(t));
}

void MasterSession::release_orphans(int node) {
  Node& n = *nodes_[node];
  std::vector<local::Tensor> dropped;  // freed outside the lock
  std::lock_guard lock(n.orphan_mu);
  dropped.swap(n.orphans);
}

}  // namespace dtr::detail
