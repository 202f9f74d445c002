// The I/O thread: when it flushes the nodes' batches (the cork, the first delay, the doze),
// how it sleeps on the sockets and the wake fd, and the send paths (a batch message, a
// message the worker could not take yet, a control message); what it reads goes to
// master/replies.cpp. The I/O thread's end says goodbye to the workers and closes the
// sockets.
#include "master/session.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "protocol/transport.hpp"

namespace dtr::detail {

namespace {

constexpr auto kIdlePoll = std::chrono::milliseconds(100);

}  // namespace

void MasterSession::wake() {
  if (wake_fd_ < 0) return;
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void MasterSession::io_loop() {
  // While callers keep it busy sending, replies and heartbeats are still read this often.
  constexpr auto kBusyService = std::chrono::milliseconds(20);
  prctl(PR_SET_TIMERSLACK, 1000UL);  // the cork's wait, to the microsecond (this thread only)
  Clock::time_point serviced = Clock::now();
  while (true) {
    // A requester holding the I/O (hold_io) flushes and reads for everyone meanwhile:
    // this thread never waits for the lock, and sleeps away from the sockets then. A
    // message a full queue refused is tried again whenever the sockets stir (ZMQ_FD also
    // signals room to send).
    if (work_pending_.load() || blocked_.load()) {
      // In a burst (work again within kCork of the last flush), the flush waits until kCork
      // after the last one, so that a message carries more commands; otherwise kFirstDelay,
      // so that a request following the work (a requester flushes at once) takes it along.
      Clock::time_point last(Clock::duration(last_flush_.load(std::memory_order_relaxed)));
      Clock::time_point woken = Clock::now();
      if (woken < last + kCork)
        std::this_thread::sleep_until(last + kCork);
      else if (!holder_.load())
        std::this_thread::sleep_until(woken + kFirstDelay);
      std::unique_lock lock(io_mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        Clock::time_point now = Clock::now();
        bool full = now - serviced >= kBusyService;
        if (full) {
          service(true);
          serviced = now;
        } else if (!io_closed_) {
          work_pending_.store(false);
          flush_all();
        }
      }
    }
    if (stop_.load()) break;
    // Doze (look again soon) while the session is busy; lazy work then needs no wake-up.
    Clock::time_point last(Clock::duration(last_flush_.load(std::memory_order_relaxed)));
    const bool dozing = Clock::now() - last < kDozeWindow;
    dozing_.store(dozing);
    sleeping_.store(true);
    if (work_pending_.load() && !holder_.load()) {
      sleeping_.store(false);
      continue;
    }
    {
      // Whatever a requester left unread (it may have woken this thread's poll for
      // nothing, or left before a message arrived): read it now, then sleep.
      std::unique_lock lock(io_mu_, std::try_to_lock);
      if (lock.owns_lock()) {
        service(false);
        serviced = Clock::now();
      }
    }
    if (work_pending_.load() && !holder_.load()) {
      sleeping_.store(false);
      continue;
    }
    wait_sockets(dozing ? std::chrono::milliseconds(kDoze) : kIdlePoll, true, !holder_.load());
    sleeping_.store(false);
  }
  std::lock_guard lock(io_mu_);
  io_closed_ = true;
  flush_all();
  std::string goodbye = protocol::encode_goodbye();
  for (auto& node : nodes_)
    if (!node->lost.load()) send_control(*node, goodbye);
  // Let ZeroMQ hand the goodbyes to the kernel before the sockets close (linger is 0).
  for (auto& node : nodes_)
    if (node->dealer) node->dealer->set(zmq::sockopt::linger, 1000);
  for (auto& node : nodes_) node->dealer.reset();  // the heartbeat thread closed `beat`
  std::lock_guard rlock(router_mu_);
  if (router_) router_->set(zmq::sockopt::linger, 1000);
  router_.reset();
}

void MasterSession::service(bool flush) {
  if (io_closed_) return;
  if (flush) {
    work_pending_.store(false);
    flush_all();
  }
  // What arrived is read before a node is judged silent: a process that was stopped (or
  // starved of CPU) finds its workers' heartbeats, or a worker's goodbye and its reason,
  // before it blames them.
  receive_all();
  if (router_) liveness(Clock::now());  // connect mode: the heartbeat thread's
  // Last: every socket is left read until it has nothing (the rule for sleeping on their
  // ZMQ_FD, which may only signal again after that).
  receive_all();
}

bool MasterSession::input_waiting() {
  auto has = [](zmq::socket_t& socket) {
    return (socket.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
  };
  if (router_) {
    std::lock_guard lock(router_mu_);
    return has(*router_);
  }
  for (auto& node : nodes_)
    if (node->dealer && has(*node->dealer)) return true;
  return false;
}

void MasterSession::wait_sockets(std::chrono::milliseconds timeout, bool with_wake,
                                 bool with_sockets) {
  std::vector<pollfd> fds;
  if (with_sockets) fds = socket_fds_;
  if (with_wake) fds.push_back(pollfd{wake_fd_, POLLIN, 0});
  ::poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  if (with_wake && (fds.back().revents & POLLIN)) {
    uint64_t count;
    [[maybe_unused]] ssize_t n = read(wake_fd_, &count, sizeof(count));
  }
}

void MasterSession::flush_all() {
  last_flush_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  bool blocked = false;
  for (auto& node : nodes_) {
    // A message the worker could not take yet goes first; until it has, new commands stay
    // in the node's batch (whose size holds callers at the backpressure limit).
    if (!node->lost.load() && !send_unsent(*node)) {
      blocked = true;
      continue;
    }
    std::string header;
    std::vector<local::Tensor> payloads;
    {
      std::lock_guard lock(node->mu);
      if (node->batch.count() == 0) continue;
      header = node->batch.finish();
      payloads.swap(node->payloads);
    }
    if (static_cast<int64_t>(header.size()) > node->hello.max_message_bytes) [[unlikely]] {
      // ZeroMQ would drop the connection and the commands with it, without a word: one
      // command alone (a captured graph's upload) outgrew the limit that batch_full keeps
      // batches under. Its results can never come, so the node fails, saying why.
      fail_node(
          node->index,
          fmt::format("a message of {} bytes of commands for node {} ({}) is larger than "
                      "it takes (dtr-worker --max-message-bytes {}); its commands were "
                      "not sent",
                      header.size(), node->index, node->endpoint, node->hello.max_message_bytes));
      continue;
    }
    if (!node->lost.load() && !send_to(*node, std::move(header), payloads)) blocked = true;
  }
  blocked_.store(blocked);
}

bool MasterSession::send_to(Node& node, std::string header,
                            std::span<const local::Tensor> payloads) {
  return send_batch(node, std::make_shared<const std::string>(std::move(header)),
                    std::vector<local::Tensor>(payloads.begin(), payloads.end()));
}

bool MasterSession::send_batch(Node& node, std::shared_ptr<const std::string> header,
                               std::vector<local::Tensor> payloads) {
  switch (try_send_to(node, header, payloads)) {
    case protocol::SendResult::kSent:
      return true;
    case protocol::SendResult::kWouldBlock:
      // The worker takes no more for now (its queue and ours are at their high-water
      // marks): keep the message for the next flush. Liveness says whether it is alive.
      node.unsent = std::move(header);
      node.unsent_payloads = std::move(payloads);
      return false;
    case protocol::SendResult::kUnreachable:
      return false;  // try_send_to failed the node
  }
  return false;
}

protocol::SendResult MasterSession::try_send_to(Node& node,
                                                const std::shared_ptr<const std::string>& header,
                                                std::span<const local::Tensor> payloads) {
  protocol::SendResult r;
  if (node.dealer) {
    r = protocol::try_send(*node.dealer, nullptr, header, payloads);
  } else {
    std::lock_guard lock(router_mu_);
    r = protocol::try_send(*router_, &node.identity, header, payloads);
  }
  if (r == protocol::SendResult::kUnreachable)
    fail_node(node.index, fmt::format("node {} ({}) is lost: its connection closed", node.index,
                                      node.endpoint));
  return r;
}

void MasterSession::send_control(Node& node, std::string header) {
  // A queue at its high-water mark drops it: a heartbeat or a goodbye is not worth a wait.
  (void)try_send_to(node, std::make_shared<const std::string>(std::move(header)), {});
}

bool MasterSession::send_unsent(Node& node) {
  if (!node.unsent) return true;
  std::shared_ptr<const std::string> header = std::move(node.unsent);
  node.unsent.reset();
  return send_batch(node, std::move(header), std::move(node.unsent_payloads));
}

}  // namespace dtr::detail
