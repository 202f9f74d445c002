// nfq_delay: holds every packet of one netfilter queue (NFQUEUE) for a fixed time, then
// accepts it. With `iptables -A OUTPUT -o eth0 -j NFQUEUE --queue-num Q` in a network
// namespace and `nfq_delay Q 20` running in it, every packet leaving eth0 is delayed by
// 20 ms: netem's `delay 20ms` for kernels without sch_netem (tests/netns/netns_sgd_test.sh).
//
//   nfq_delay QUEUE DELAY_MS [READY_FILE]
//
// The packets wait in the kernel's queue; this program only receives their metadata (no
// payload is copied) and gives each packet's verdict (NF_ACCEPT) DELAY_MS after the packet
// reached it, in queue order, so nothing is reordered. READY_FILE is created once the queue
// is bound. On SIGTERM or SIGINT it accepts what it still holds, prints how many packets it
// delayed and exits 0. Raw netlink only: no libnetfilter_queue needed.
// glibc's <arpa/inet.h> before the kernel headers, so that <linux/in.h> skips what it has.
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_queue.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) {
  g_stop = 1;
}

int64_t now_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "nfq_delay: %s: %s\n", what, std::strerror(errno));
  std::exit(1);
}

// A netlink message for the queue subsystem, attributes appended with add().
class Message {
 public:
  Message(uint16_t type, uint16_t flags, uint16_t queue) : buf_(NLMSG_SPACE(sizeof(nfgenmsg))) {
    auto* nh = reinterpret_cast<nlmsghdr*>(buf_.data());
    nh->nlmsg_type = static_cast<uint16_t>((NFNL_SUBSYS_QUEUE << 8) | type);
    nh->nlmsg_flags = static_cast<uint16_t>(NLM_F_REQUEST | flags);
    auto* g = static_cast<nfgenmsg*>(NLMSG_DATA(nh));
    g->nfgen_family = AF_UNSPEC;
    g->version = NFNETLINK_V0;
    g->res_id = htons(queue);
  }
  void add(uint16_t type, const void* data, std::size_t len) {
    std::size_t at = buf_.size();
    buf_.resize(at + NLA_ALIGN(NLA_HDRLEN + len));
    auto* a = reinterpret_cast<nlattr*>(buf_.data() + at);
    a->nla_type = type;
    a->nla_len = static_cast<uint16_t>(NLA_HDRLEN + len);
    std::memcpy(buf_.data() + at + NLA_HDRLEN, data, len);
  }
  void send(int fd, uint32_t seq) {
    auto* nh = reinterpret_cast<nlmsghdr*>(buf_.data());
    nh->nlmsg_len = static_cast<uint32_t>(buf_.size());
    nh->nlmsg_seq = seq;
    sockaddr_nl kernel{};
    kernel.nl_family = AF_NETLINK;
    if (sendto(fd, buf_.data(), buf_.size(), 0, reinterpret_cast<sockaddr*>(&kernel),
               sizeof kernel) < 0)
      die("sendto");
  }

 private:
  std::vector<char> buf_;
};

// Waits for the kernel's answer to an NLM_F_ACK request.
void expect_ack(int fd, const char* what) {
  alignas(nlmsghdr) char buf[8192];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      die("recv (ack)");
    }
    for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nh, n); nh = NLMSG_NEXT(nh, n)) {
      if (nh->nlmsg_type != NLMSG_ERROR) continue;
      int err = static_cast<nlmsgerr*>(NLMSG_DATA(nh))->error;
      if (err != 0) {
        errno = -err;
        die(what);
      }
      return;
    }
  }
}

struct Held {
  uint32_t id;
  int64_t due_ns;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: nfq_delay QUEUE DELAY_MS [READY_FILE]\n");
    return 2;
  }
  const auto queue = static_cast<uint16_t>(std::atoi(argv[1]));
  const int64_t delay_ns = std::atoll(argv[2]) * 1000000;
  const std::string ready_file = argc == 4 ? argv[3] : "";

  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // SIGTERM and SIGINT are blocked except inside ppoll, which opens them atomically: one
  // that came between the loop's check of g_stop and the wait would otherwise leave it
  // waiting forever once no packet is held (no timeout then).
  sigset_t stop_signals, in_wait;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigprocmask(SIG_BLOCK, &stop_signals, &in_wait);
  sigdelset(&in_wait, SIGTERM);
  sigdelset(&in_wait, SIGINT);

  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  if (fd < 0) die("socket(AF_NETLINK, NETLINK_NETFILTER)");
  int rcvbuf = 16 << 20, one = 1;
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf) < 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  setsockopt(fd, SOL_NETLINK, NETLINK_NO_ENOBUFS, &one, sizeof one);
  sockaddr_nl local{};
  local.nl_family = AF_NETLINK;
  if (bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) < 0) die("bind");

  uint32_t seq = 1;
  {
    Message m(NFQNL_MSG_CONFIG, NLM_F_ACK, queue);
    nfqnl_msg_config_cmd cmd{};
    cmd.command = NFQNL_CFG_CMD_BIND;
    m.add(NFQA_CFG_CMD, &cmd, sizeof cmd);
    m.send(fd, seq++);
    expect_ack(fd, "bind the queue (is another nfq_delay on it?)");
  }
  {
    Message m(NFQNL_MSG_CONFIG, NLM_F_ACK, queue);
    nfqnl_msg_config_params params{};
    params.copy_range = htonl(0);
    params.copy_mode = NFQNL_COPY_META;  // metadata only: the packet id is all we need
    m.add(NFQA_CFG_PARAMS, &params, sizeof params);
    uint32_t maxlen = htonl(65536);
    m.add(NFQA_CFG_QUEUE_MAXLEN, &maxlen, sizeof maxlen);
    uint32_t flags = htonl(NFQA_CFG_F_GSO);  // do not segment GSO packets for us
    m.add(NFQA_CFG_MASK, &flags, sizeof flags);
    m.add(NFQA_CFG_FLAGS, &flags, sizeof flags);
    m.send(fd, seq++);
    expect_ack(fd, "configure the queue");
  }
  if (!ready_file.empty()) {
    FILE* f = std::fopen(ready_file.c_str(), "w");
    if (f == nullptr) die("create the ready file");
    std::fclose(f);
  }

  std::deque<Held> held;
  uint64_t delayed = 0;
  int64_t max_late_ns = 0;  // how much later than due a verdict went out: at most, in all
  int64_t sum_late_ns = 0;
  alignas(nlmsghdr) static char buf[1 << 16];

  // Accepts every held packet whose time has come (all of them when `all`): one batch
  // verdict covers every id up to the last one released, as ids grow in queue order.
  auto release = [&](bool all) {
    int64_t t = now_ns();
    uint32_t last = 0;
    bool any = false;
    while (!held.empty() && (all || held.front().due_ns <= t)) {
      if (!all) {
        const int64_t late = t - held.front().due_ns;
        sum_late_ns += late;
        if (late > max_late_ns) max_late_ns = late;
      }
      last = held.front().id;
      any = true;
      held.pop_front();
      ++delayed;
    }
    if (!any) return;
    Message m(NFQNL_MSG_VERDICT_BATCH, 0, queue);
    nfqnl_msg_verdict_hdr v{};
    v.verdict = htonl(NF_ACCEPT);
    v.id = htonl(last);
    m.add(NFQA_VERDICT_HDR, &v, sizeof v);
    m.send(fd, seq++);
  };

  while (!g_stop) {
    timespec timeout{};
    timespec* tp = nullptr;
    if (!held.empty()) {
      int64_t wait = held.front().due_ns - now_ns();
      if (wait < 0) wait = 0;
      timeout.tv_sec = wait / 1000000000;
      timeout.tv_nsec = wait % 1000000000;
      tp = &timeout;
    }
    pollfd p{fd, POLLIN, 0};
    int r = ppoll(&p, 1, tp, &in_wait);
    if (r < 0 && errno != EINTR) die("ppoll");
    if (r > 0) {
      for (;;) {
        ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n < 0) {
          if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) break;
          if (errno == ENOBUFS) {
            std::fprintf(stderr, "nfq_delay: queue %u: netlink overrun, packets lost\n", queue);
            continue;
          }
          die("recv");
        }
        const int64_t arrived = now_ns();
        for (auto* nh = reinterpret_cast<nlmsghdr*>(buf); NLMSG_OK(nh, n); nh = NLMSG_NEXT(nh, n)) {
          if (nh->nlmsg_type == NLMSG_ERROR) {
            int err = static_cast<nlmsgerr*>(NLMSG_DATA(nh))->error;
            if (err != 0)
              std::fprintf(stderr, "nfq_delay: queue %u: kernel error %s\n", queue,
                           std::strerror(-err));
            continue;
          }
          if ((nh->nlmsg_type & 0xff) != NFQNL_MSG_PACKET) continue;
          auto* attr = reinterpret_cast<nlattr*>(static_cast<char*>(NLMSG_DATA(nh)) +
                                                 NLMSG_ALIGN(sizeof(nfgenmsg)));
          int left = static_cast<int>(nh->nlmsg_len) -
                     static_cast<int>(NLMSG_LENGTH(NLMSG_ALIGN(sizeof(nfgenmsg))));
          while (left >= static_cast<int>(NLA_HDRLEN) && attr->nla_len >= NLA_HDRLEN &&
                 attr->nla_len <= left) {
            if ((attr->nla_type & NLA_TYPE_MASK) == NFQA_PACKET_HDR) {
              nfqnl_msg_packet_hdr ph{};
              std::memcpy(&ph, reinterpret_cast<char*>(attr) + NLA_HDRLEN, sizeof ph);
              held.push_back({ntohl(ph.packet_id), arrived + delay_ns});
              break;
            }
            left -= NLA_ALIGN(attr->nla_len);
            attr =
                reinterpret_cast<nlattr*>(reinterpret_cast<char*>(attr) + NLA_ALIGN(attr->nla_len));
          }
        }
      }
    }
    release(false);
  }
  release(true);
  std::printf(
      "nfq_delay: queue %u: delayed %llu packets by %lld ms (verdicts %.3f ms late on "
      "average, %.2f ms at most)\n",
      queue, static_cast<unsigned long long>(delayed), static_cast<long long>(delay_ns / 1000000),
      delayed ? static_cast<double>(sum_late_ns) / 1e6 / static_cast<double>(delayed) : 0.0,
      static_cast<double>(max_late_ns) / 1e6);
  std::fflush(stdout);
  close(fd);
  return 0;
}
