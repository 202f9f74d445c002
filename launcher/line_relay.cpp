// LineRelay: prefixed, line-at-a-time copying of a child's output.
#include "launcher/line_relay.hpp"

#include <poll.h>
#include <unistd.h>

#include <cerrno>

namespace dtr::launcher {

bool write_all(int fd, std::string_view data) {
  // A destination that accepts nothing for this many consecutive 1 s waits is given up.
  constexpr int kMaxStalls = 60;
  int stalls = 0;
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      stalls = 0;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      if (::poll(&p, 1, 1000) == 0 && ++stalls >= kMaxStalls) return false;
      continue;
    }
    return false;
  }
  return true;
}

void LineRelay::emit(std::string_view line, std::string& out) const {
  out += prefix_;
  out += line;
  out += '\n';
}

void LineRelay::write_out(const std::string& out) {
  if (out.empty() || dest_ < 0) return;
  if (!write_all(dest_, out)) dest_ = -1;
}

void LineRelay::feed(std::string_view bytes) {
  std::string out;
  std::size_t start = 0;
  while (start < bytes.size()) {
    std::size_t nl = bytes.find('\n', start);
    if (nl == std::string_view::npos) break;
    std::string_view piece = bytes.substr(start, nl - start);
    if (pending_.empty()) {
      emit(piece, out);
    } else {
      pending_ += piece;
      emit(pending_, out);
      pending_.clear();
    }
    start = nl + 1;
  }
  pending_ += bytes.substr(start);
  if (pending_.size() >= kMaxPending) {
    emit(pending_, out);
    pending_.clear();
  }
  write_out(out);
}

void LineRelay::finish() {
  if (pending_.empty()) return;
  std::string out;
  emit(pending_, out);
  pending_.clear();
  write_out(out);
}

}  // namespace dtr::launcher
