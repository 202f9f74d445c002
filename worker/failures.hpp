// Failures and stats: how a session's failures are made, remembered and reported.
//
// A root failure is one that started somewhere on this worker (a command that did not
// check, an op that threw); it is kept in the unreported list until the next Sync's reply
// carries it, or until an EventSync reply carries it first (mark_reported). The list holds
// at most protocol::kMaxErrorsPerReply failures; beyond that they are counted, and the Sync
// reply says how many were not recorded. A dependent failure (an input was failed) points
// at its first cause and is never listed: its cause is.
//
// Also here: the Stats reply (a device's or the host's memory).
//
// Thread safety: FailureLog's members may be called from any thread (the dispatch thread
// and executor threads); its one lock (`mu_`) guards the list and the dropped count and is
// held only inside its members; the count of roots is an atomic. The free functions touch no shared
// state.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/messages.hpp"

namespace dtr::worker::detail {

using Failure = std::shared_ptr<const protocol::RemoteFailure>;

// While a thread runs a command of a captured graph's replay, failures made on it name the
// replay: their message ends "(replay 7 of graph 3, command 12 of its program here)".
// RAII, one per thread at a time (worker/graph.hpp's part runner).
class ReplayNote {
 public:
  ReplayNote(uint64_t graph, uint64_t replay);
  ~ReplayNote();
  ReplayNote(const ReplayNote&) = delete;
  ReplayNote& operator=(const ReplayNote&) = delete;
  void at(size_t command) { command_ = command; }
  // What a failure's message gets appended (empty when no replay runs on this thread).
  static std::string suffix();

 private:
  uint64_t graph_;
  uint64_t replay_;
  size_t command_ = 0;
  ReplayNote* previous_;
};

// A failure that is its own cause (named by the thread's ReplayNote, if any).
protocol::RemoteFailure make_failure(protocol::TensorId tensor, std::string_view op,
                                     std::string message);
// `tensor` (made by `op`) failed because its input `input` had failed with `cause`.
Failure dependent_failure(protocol::TensorId tensor, std::string_view op, protocol::TensorId input,
                          const protocol::RemoteFailure& cause);

class FailureLog {
 public:
  // Makes a root failure and lists it (or counts it when the list is full). `device`:
  // where the failed tensor lives (-1 the CPU), named in the master's error.
  Failure root(protocol::TensorId tensor, std::string_view op, std::string message,
               int32_t device = -1);
  // `f` was reported (an EventSync carried it): its root leaves the list.
  void mark_reported(const protocol::RemoteFailure& f);
  // The failures a Sync reply carries, at most kMaxErrorsPerReply: the list (emptied),
  // a note of how many were dropped, and `device_failure` when not empty (a stream's CUDA
  // work failed).
  std::vector<protocol::RemoteFailure> take_for_sync(const std::string& device_failure);
  size_t unreported() const;
  size_t dropped() const;
  // Root failures made so far (any thread; no lock): the dispatcher compares it before
  // and after a command to tell the flight recorder whether the command failed.
  uint64_t roots() const { return roots_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> roots_{0};
  mutable std::mutex mu_;  // guards list_ and dropped_
  std::vector<protocol::RemoteFailure> list_;
  size_t dropped_ = 0;
};

// A Stats reply to `request`: memory of CUDA device `device`, or of the host (device < 0,
// with `live_tensors`), and what the session's graphs hold there; a ProtocolError reply
// when the device cannot say.
protocol::Reply stats_reply(uint64_t request, int32_t device, int64_t live_tensors,
                            int64_t graph_bytes = 0, int64_t graph_tensors = 0);

}  // namespace dtr::worker::detail
