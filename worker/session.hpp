// Session: one master's tensors on this worker and the execution of its commands. Knows
// nothing of sockets: the server hands it decoded batches and payload frames and sends
// the replies it produces, so tests and fuzzers drive it directly.
//
// Every command is checked before it runs (ids unknown, reused or zero; payload sizes;
// streams); a failing op marks its output failed, dependents fail with a pointer to the
// first cause, and the session goes on.
//
// Thread safety: not synchronized; one thread runs a session.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "dtr/tensor.hpp"
#include "protocol/messages.hpp"

namespace dtr::worker {

// A received payload frame: its bytes, kept alive by `owner`.
struct PayloadFrame {
  void* data = nullptr;
  size_t size = 0;
  std::shared_ptr<void> owner;
};

// A reply to send: the header frame, then one frame per payload tensor's bytes.
struct Outgoing {
  std::string header;
  std::vector<local::Tensor> payloads;  // each contiguous
};

class Session {
 public:
  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Runs the commands in order. payloads[i] is frame i+1 of the message.
  void run(const protocol::Batch& batch, std::span<const PayloadFrame> payloads,
           std::vector<Outgoing>& replies);

  size_t live_tensors() const { return table_.size(); }
  protocol::MemoryStatsWire stats() const;

 private:
  struct Entry {
    local::Tensor tensor;
    std::shared_ptr<const protocol::RemoteFailure> failure;  // set: the tensor is failed
  };
  using Failure = std::shared_ptr<const protocol::RemoteFailure>;

  void run_op(const protocol::Command& c);
  void put(const protocol::Command& c, std::span<const PayloadFrame> payloads);
  void get(const protocol::Command& c, std::vector<Outgoing>& replies);
  void free(const protocol::Command& c);

  // Records a first-cause failure of `tensor` (reported at the next Sync) and returns it.
  Failure root_failure(protocol::TensorId tensor, std::string_view op, std::string message);
  // A failure of `tensor` caused by the failed input `input`.
  static Failure dependent_failure(protocol::TensorId tensor, std::string_view op,
                                   protocol::TensorId input, const protocol::RemoteFailure& cause);
  // Checks that `id` may name a new tensor; records a failure and returns false if not.
  bool check_new_id(protocol::TensorId id, std::string_view op);

  std::unordered_map<protocol::TensorId, Entry> table_;
  std::vector<protocol::RemoteFailure> unreported_;
  size_t dropped_failures_ = 0;
};

}  // namespace dtr::worker
