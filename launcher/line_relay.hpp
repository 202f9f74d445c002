// LineRelay: copies one child's output stream (a pipe) to one of dtr-exec's own output
// descriptors, a line at a time, each line preceded by a prefix such as "[2] ".
//
// Bytes arrive in arbitrary chunks; complete lines are written at once (all complete lines
// of one chunk in one write()), the incomplete tail is kept until its newline arrives, the
// stream ends (finish(): written with a newline added) or it grows past kMaxPending bytes
// (written as a line of its own, so memory stays bounded). With an empty prefix the bytes
// pass through unchanged except that finish() ends a partial last line with a newline.
// A destination that fails (EPIPE, EBADF) is dropped silently: the children keep running.
//
// Thread safety: none; each object belongs to the thread running dtr-exec's event loop.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace dtr::launcher {

class LineRelay {
 public:
  static constexpr std::size_t kMaxPending = 64 * 1024;

  LineRelay(int dest_fd, std::string prefix) : dest_(dest_fd), prefix_(std::move(prefix)) {}

  // Appends `bytes` and writes every line completed by them.
  void feed(std::string_view bytes);
  // Writes what is left (a partial last line) with a newline; call at end of stream.
  void finish();

 private:
  void emit(std::string_view line, std::string& out) const;
  void write_out(const std::string& out);

  int dest_;
  std::string prefix_;
  std::string pending_;
};

// Writes all of `data` to `fd`, retrying on EINTR and waiting (poll, bounded per attempt)
// on EAGAIN. Returns false when the descriptor failed.
bool write_all(int fd, std::string_view data);

}  // namespace dtr::launcher
