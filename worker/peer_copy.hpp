// Peer copies: a tensor's bytes sent from one worker to another (x.to(j)).
//
// SendPeer runs on the sending node's stream once its input is ready: it sends a Peer
// message whose frame 1 is the tensor's bytes (a CUDA tensor is copied to the host on the
// stream's CUDA stream first), or, when the input failed or cannot be read, the failure,
// so that the receiver does not wait forever. With `by_address` (both nodes share the
// master's host; common/same_host.hpp) a copy of 64 KiB or more stays here instead, held
// by the outbox, and the message says where; the receiver reads it with one direct copy
// and answers `released`. RecvPeer runs on the receiving node's stream once the token has
// arrived (worker/events.hpp, RemoteWait): it makes its output from the bytes, checked
// against the size the master expects (to the device the command names), or fails it
// naming the sender's failure (or the read's).
//
// Both count the bytes they move (worker/recorder.hpp), and say when they wait (the
// flight recorder).
//
// Thread safety: both run on the executor thread running their stream. They read the
// task's slots under the slots' rules (worker/tensor_table.hpp); a RemoteWait is touched
// only under its lock until it has arrived, then by its RecvPeer task alone.
#pragma once

#include "worker/events.hpp"
#include "worker/failures.hpp"
#include "worker/outbox.hpp"
#include "worker/streams.hpp"

namespace dtr::worker::detail {

// True when done; false when `self` was parked until the input is ready.
bool run_send_peer(StreamQueue& s, const StreamQueuePtr& self, Task& t, FailureLog& failures,
                   Outbox& outbox);
// True when done; false when `self` was parked until the token arrives.
bool run_recv_peer(StreamQueue& s, const StreamQueuePtr& self, Task& t, FailureLog& failures,
                   Outbox& outbox);

}  // namespace dtr::worker::detail
