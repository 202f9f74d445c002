// Liveness: the heartbeats the master sends (connect mode: on each node's heartbeat
// connection, by the heartbeat thread; listen mode: through the ROUTER, by the heartbeat
// thread), the silence check that declares a node lost, and what losing a node does
// (fail_node: its pending requests fail, the other workers are told).
#include "master/session.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "protocol/transport.hpp"

namespace dtr::detail {

void MasterSession::check_alive(int node) {
  if (nodes_[node]->lost.load()) throw_lost(node);
}

void MasterSession::send_beat(Node& node) {
  // Connect mode. A DEALER queues it until its connection is up (its queue has no limit:
  // one message per heartbeat interval, for at most the heartbeat timeout).
  (void)protocol::send_message(*node.beat, nullptr, protocol::encode_heartbeat(), {});
}

void MasterSession::listen_beat_loop() {
  const std::string beat = protocol::encode_heartbeat();
  pollfd woken{beat_wake_fd_, POLLIN, 0};
  Clock::time_point next = Clock::now();
  while (!stop_.load()) {
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(next - Clock::now());
    if (wait.count() > 0) {
      if (::poll(&woken, 1, static_cast<int>(wait.count())) > 0) {
        uint64_t count;
        [[maybe_unused]] ssize_t n = read(beat_wake_fd_, &count, sizeof count);
      }
      continue;
    }
    next = Clock::now() + options_.heartbeat;
    bool readable = false;
    std::string failed;
    {
      std::lock_guard lock(router_mu_);
      if (!router_) return;  // the I/O thread closed it
      try {
        for (auto& node : nodes_) {
          if (node->lost.load()) continue;
          // The worker's heartbeat connection, or its data connection until that one is up
          // (a full queue drops it: the next one follows within an interval).
          const std::string to = protocol::beat_identity(node->identity);
          if (!protocol::send_message(*router_, &to, beat, {}))
            (void)protocol::send_message(*router_, &node->identity, beat, {});
        }
        // Using the socket may have taken the ZMQ_FD signal of a message the I/O owner,
        // asleep on that fd, is to read: wake it.
        readable = (router_->get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) failed = e.what();
      }
    }
    if (!failed.empty()) {
      // Not expected (only shutdown closes the socket): without heartbeats the workers end
      // the session as if this master were silent, so say why on each node now.
      if (stop_.load()) return;
      for (auto& node : nodes_)
        fail_node(node->index, fmt::format("node {} ({}): sending heartbeats failed: {}",
                                           node->index, node->endpoint, failed));
      return;
    }
    if (readable) wake();
  }
}

bool MasterSession::data_read_since_silent(Node& node, Clock::time_point now) {
  // The heartbeat thread does not read the data connections: before it blames a node,
  // the I/O owner reads them once more (a pass that starts after now), so that a goodbye,
  // or a reply, that came while this process was stopped or starved counts. Bounded: an
  // I/O owner that makes no pass for another heartbeat timeout does not hold it back.
  if (node.suspect_pass == 0) {
    node.suspect_pass = receive_passes_.load() + 2;
    node.suspect_since = now;
    if (sleeping_.exchange(false)) wake();
    return false;
  }
  return receive_passes_.load() >= node.suspect_pass ||
         now - node.suspect_since > options_.heartbeat_timeout;
}

void MasterSession::liveness(Clock::time_point now) {
  for (auto& node : nodes_) {
    if (node->lost.load()) continue;
    const Clock::time_point heard{Clock::duration(node->last_heard.load())};
    // Never negative: another thread may have stamped it after `now` was read.
    auto silent = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::max(now - heard, Clock::duration::zero()));
    if (silent <= options_.heartbeat_timeout) {
      node->suspect_pass = 0;
      continue;
    }
    if (!listening() && !data_read_since_silent(*node, now)) continue;
    fail_node(node->index,
              fmt::format("node {} ({}) is lost: nothing heard from it for {} ms (heartbeat "
                          "timeout {} ms)",
                          node->index, node->endpoint, silent.count(),
                          options_.heartbeat_timeout.count()));
  }
  if (listening()) return;  // listen_beat_loop() sends them
  if (now < next_heartbeat_) return;
  next_heartbeat_ = now + options_.heartbeat;
  for (auto& node : nodes_)
    if (!node->lost.load()) send_beat(*node);
}

void MasterSession::beat_loop() {
  std::vector<zmq::pollitem_t> items;
  for (auto& node : nodes_) items.push_back({node->beat->handle(), 0, ZMQ_POLLIN, 0});
  items.push_back({nullptr, beat_wake_fd_, ZMQ_POLLIN, 0});
  next_heartbeat_ = Clock::now();
  try {
    while (!stop_.load()) {
      // Everything that came is read before a node is judged silent: a master that was
      // stopped, or starved of CPU, finds its workers' heartbeats waiting.
      for (auto& node : nodes_) {
        bool heard = false;
        while (protocol::try_recv(*node->beat, 1)) heard = true;  // heartbeats only
        if (heard) node->last_heard.store(Clock::now().time_since_epoch().count());
      }
      liveness(Clock::now());
      auto wait = std::chrono::ceil<std::chrono::milliseconds>(next_heartbeat_ - Clock::now());
      for (auto& node : nodes_)  // a suspect is looked at again soon
        if (node->suspect_pass != 0 && !node->lost.load()) wait = std::min(wait, kSuspectLook);
      try {
        zmq::poll(items, std::max(wait, std::chrono::milliseconds(0)));
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw;
      }
    }
  } catch (const zmq::error_t& e) {
    // Not expected (the sockets are this thread's): without heartbeats no node can be
    // trusted to be alive, so say so on each.
    for (auto& node : nodes_)
      fail_node(node->index, fmt::format("node {} ({}): the heartbeat connection failed: {}",
                                         node->index, node->endpoint, e.what()));
  }
  for (auto& node : nodes_) node->beat.reset();
}

void MasterSession::fail_node(int node, const std::string& why) {
  Node& n = *nodes_[node];
  {
    std::lock_guard lock(pending_mu_);
    if (n.lost.load()) return;
    n.lost_reason = why;
    n.lost.store(true);
  }
  {
    std::lock_guard lock(pending_mu_);
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.node == node) {
        it->second.promise.set_exception(std::make_exception_ptr(WorkerLost(why)));
        it = pending_.erase(it);
      } else {
        ++it;
      }
    }
  }
  // One liveness rule for the session: the other workers learn it too, so that copies,
  // cross-node waits and collectives that involve the node fail now rather than at their
  // own timeouts. (No backpressure here: this may run on the thread that flushes.)
  if (closed_.load()) return;
  protocol::cmd::NodeLost lost{.node = static_cast<uint32_t>(node)};
  for (auto& other : nodes_) {
    if (other->index == node || other->lost.load()) continue;
    std::lock_guard lock(other->mu);
    other->batch.add(protocol::Command(lost));
  }
  if (!work_pending_.load()) work_pending_.store(true);
  if (sleeping_.exchange(false)) wake();
}

}  // namespace dtr::detail
