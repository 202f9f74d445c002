// WorkerNode: one worker as its master's session sees it: its connections, the batch of
// commands queued for it, whether it is lost and why, what it reported, its clock offset
// and whether tensor bytes reach it by direct copy. MasterSession (master/session.hpp)
// owns one per node and is the only code that uses it.
//
// Thread safety: each field names what guards it. `index`, `endpoint`, `identity`,
// `hello` and the same-host fields are written while the session starts and only read
// afterwards; the sockets belong to the threads MasterSession's contract gives them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "dtr/tensor.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace dtr::detail {

struct WorkerNode {
  using Clock = std::chrono::steady_clock;

  int index = 0;
  std::string endpoint;
  // The data connection's routing id: ours (connect mode, random) or the worker's
  // (listen mode); the heartbeat connection's is protocol::beat_identity() of it.
  std::string identity;
  std::unique_ptr<zmq::socket_t> dealer;  // connect mode: the data connection
  // Connect mode: the heartbeat connection, on the session's beat_context_, used by the
  // heartbeat thread only (after the handshake).
  std::unique_ptr<zmq::socket_t> beat;
  protocol::HelloReply hello;
  std::mutex mu;  // guards batch and payloads
  protocol::BatchWriter batch;
  std::vector<local::Tensor> payloads;
  std::atomic<bool> lost{false};
  std::string lost_reason;  // set once, before `lost`
  // When anything last came from it (steady clock): written by whoever reads its
  // sockets (the I/O owner, the heartbeat thread).
  std::atomic<Clock::rep> last_heard{0};
  // The heartbeat thread's, while the node looks silent: the receive pass that must end
  // before it is blamed (0: not suspected), and since when (data_read_since_silent).
  uint64_t suspect_pass = 0;
  Clock::time_point suspect_since;
  // A batch message the worker could not take yet (its queue and ours at their
  // high-water marks), sent before anything else; under the session's io_mu_.
  std::shared_ptr<const std::string> unsent;
  std::vector<local::Tensor> unsent_payloads;
  // Observability: under flight_mu, the latest flight dump the worker sent unasked and
  // when; once lost, the report the WorkerLost errors name (made once).
  std::mutex flight_mu;
  std::optional<protocol::FlightSnapshot> reported;
  Clock::time_point reported_at;
  std::optional<std::string> lost_report;
  // Its clock offset (the session's clock_mu_).
  int64_t clock_offset_ns = 0;
  int64_t clock_error_ns = -1;  // -1: not measured
  // Same-host payloads (common/same_host.hpp), set while the session starts: whether
  // tensor bytes move by direct copy between this process and the worker's, and if not,
  // why not. `orphans`: tensors a PutFrom named whose dist_send ended without its reply
  // (the worker may still read them), kept until a later dist_send's reply.
  bool same_host = false;
  std::string same_host_note;
  uint64_t held_challenge = 0;  // the worker's, where Attach says it is
  std::mutex orphan_mu;
  std::vector<local::Tensor> orphans;
};

}  // namespace dtr::detail
