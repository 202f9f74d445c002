// dtr_tcp_exchange_bench: the floor of a two-rank all_reduce over loopback TCP without any
// library. Two processes (a fork) share one TCP connection and run, from one thread each
// with poll() on the non-blocking socket, one of three patterns per round (MODE):
//  - whole: both write their whole buffer and read the other's at once, folding what
//    arrives (float32 sum, 256 KiB at a time) into their own: the bytes and the arithmetic
//    of dtr's pair all_reduce, with none of its threads;
//  - halves: exchange halves, fold, exchange the folded halves (Open MPI's algorithm at two
//    ranks);
//  - turns: the same halves, one direction at a time.
// With SPIN 1 the poll never sleeps. It is the baseline for "move bulk payloads on the
// calling thread's own sockets" (docs/performance/history/collectives-issue-17.md).
//
//   dtr_tcp_exchange_bench [BYTES (default 4194304)] [ROUNDS (default 50)] [SOCKBUF (0: OS)]
//                          [SPIN (0)] [MODE (whole)]
//
// Prints the median, p10 and p90 round time and the bus bandwidth (bytes / median, as
// all_reduce's busbw for two ranks).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kFoldBytes = size_t{256} << 10;
constexpr size_t kMaxWrite = size_t{1} << 20;

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dtr_tcp_exchange_bench: %s: %s\n", what.c_str(), std::strerror(errno));
  std::exit(1);
}

// Folds in[folded, upto) into acc, kFoldBytes at a time (the rest once all has arrived).
size_t fold(const char* in, float* acc, size_t folded, size_t upto, size_t n) {
  while (folded < upto && (folded + kFoldBytes <= upto || upto == n)) {
    const size_t len = std::min(kFoldBytes, upto - folded);
    const auto* a = reinterpret_cast<const float*>(in + folded);
    float* b = acc + folded / sizeof(float);
    for (size_t i = 0; i < len / sizeof(float); ++i) b[i] += a[i];
    folded += len;
  }
  return folded;
}

// Writes all of `out` and reads n bytes into `in` at once, folding them into `acc` as they
// come; a null `out` or `in` skips that direction, a null `acc` the fold. `spin` polls
// without sleeping.
void exchange(int fd, const char* out, char* in, float* acc, size_t n, bool spin) {
  size_t written = out != nullptr ? 0 : n, got = in != nullptr ? 0 : n, folded = 0;
  while (written < n || got < n) {
    pollfd p{fd, 0, 0};
    if (written < n) p.events |= POLLOUT;
    if (got < n) p.events |= POLLIN;
    const int ready = poll(&p, 1, spin ? 0 : 10'000);
    if (ready == 0 && spin) continue;
    if (ready <= 0) die("poll (the other process is gone?)");
    if ((p.revents & (POLLERR | POLLHUP)) != 0) die("the connection broke");
    if ((p.revents & POLLIN) != 0 && got < n) {
      const ssize_t k = recv(fd, in + got, n - got, MSG_DONTWAIT);
      if (k == 0) die("the other process closed the connection");
      if (k > 0) got += static_cast<size_t>(k);
      if (acc != nullptr) folded = fold(in, acc, folded, got, n);
    }
    if ((p.revents & POLLOUT) != 0 && written < n) {
      const ssize_t k =
          send(fd, out + written, std::min(n - written, kMaxWrite), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (k > 0) written += static_cast<size_t>(k);
    }
  }
}

int connected_pair(pid_t* child) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) die("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    die("listen on 127.0.0.1");
  *child = fork();
  if (*child < 0) die("fork");
  int fd = -1;
  if (*child == 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) die("connect");
  } else {
    fd = accept(listener, nullptr, nullptr);
    if (fd < 0) die("accept");
  }
  close(listener);
  return fd;
}

enum class Mode { Whole, Halves, Turns };

// One all_reduce of two ranks over fd: `whole` exchanges the whole buffers and folds (dtr's
// pair all_reduce); `halves` exchanges halves, folds its own, then exchanges the folded
// halves (Open MPI's choice at two ranks, a ring's two steps); `turns` moves the same
// halves one direction at a time, rank 0 first.
void all_reduce_round(Mode mode, int fd, int rank, float* buf, char* scratch, size_t n, bool spin) {
  char* base = reinterpret_cast<char*>(buf);
  if (mode == Mode::Whole) {
    exchange(fd, base, scratch, buf, n, spin);
    return;
  }
  const size_t half = n / 2 / sizeof(float) * sizeof(float);
  char* mine = base + static_cast<size_t>(rank) * half;
  char* theirs = base + static_cast<size_t>(1 - rank) * half;
  auto* acc = reinterpret_cast<float*>(mine);
  if (mode == Mode::Halves) {
    exchange(fd, theirs, scratch, acc, half, spin);
    exchange(fd, mine, theirs, nullptr, half, spin);
    return;
  }
  for (int turn = 0; turn < 2; ++turn) {
    if (turn == rank)
      exchange(fd, theirs, nullptr, nullptr, half, spin);
    else
      exchange(fd, nullptr, scratch, acc, half, spin);
  }
  for (int turn = 0; turn < 2; ++turn) {
    if (turn == rank)
      exchange(fd, mine, nullptr, nullptr, half, spin);
    else
      exchange(fd, nullptr, theirs, nullptr, half, spin);
  }
}

size_t number(const char* text, const char* what) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0') {
    std::fprintf(stderr, "dtr_tcp_exchange_bench: %s must be a number, got '%s'\n", what, text);
    std::exit(2);
  }
  return static_cast<size_t>(v);
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = (argc > 1 ? number(argv[1], "BYTES") : size_t{4} << 20) / 4 * 4;
  const size_t rounds = argc > 2 ? number(argv[2], "ROUNDS") : 50;
  const int sockbuf = argc > 3 ? static_cast<int>(number(argv[3], "SOCKBUF")) : 0;
  const bool spin = argc > 4 && number(argv[4], "SPIN") != 0;
  const std::string mode_name = argc > 5 ? argv[5] : "whole";
  const Mode mode = mode_name == "halves"  ? Mode::Halves
                    : mode_name == "turns" ? Mode::Turns
                                           : Mode::Whole;
  if (mode == Mode::Whole && mode_name != "whole") {
    std::fprintf(stderr, "dtr_tcp_exchange_bench: MODE is whole, halves or turns, got '%s'\n",
                 mode_name.c_str());
    return 2;
  }
  if (n == 0 || rounds == 0) {
    std::fprintf(stderr, "dtr_tcp_exchange_bench: BYTES and ROUNDS must be positive\n");
    return 2;
  }
  pid_t child = 0;
  const int fd = connected_pair(&child);
  if (sockbuf > 0 && (setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sockbuf, sizeof sockbuf) != 0 ||
                      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &sockbuf, sizeof sockbuf) != 0))
    die("setsockopt");
  std::vector<float> buf(n / sizeof(float), 1.0F);
  std::vector<char> scratch(n);
  const int rank = child == 0 ? 1 : 0;
  std::vector<double> times;
  const size_t warm = rounds / 10 + 1;
  for (size_t i = 0; i < warm + rounds; ++i) {
    char b = 0;  // both ready: one byte each way
    if (send(fd, &b, 1, MSG_NOSIGNAL) != 1 || recv(fd, &b, 1, MSG_WAITALL) != 1) die("barrier");
    const auto t0 = Clock::now();
    all_reduce_round(mode, fd, rank, buf.data(), scratch.data(), n, spin);
    if (i >= warm)
      times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  close(fd);
  if (child == 0) return 0;
  int status = 0;
  waitpid(child, &status, 0);
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2];
  std::printf(
      "tcp exchange (%s%s) %zu bytes x %zu rounds: median %.1f us, p10 %.1f, p90 %.1f, busbw "
      "%.3f GB/s\n",
      mode_name.c_str(), spin ? ", spinning" : "", n, rounds, median, times[times.size() / 10],
      times[times.size() * 9 / 10], static_cast<double>(n) / (median * 1e3));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
