// Trace slices: how each command looks on the worker's timeline (worker/tracer.hpp,
// docs/observability.md): a task's slice when its stream has run it, an op run at
// dispatch, a command done at dispatch, and an event's notification of a peer. A slice's
// bytes are left to the collection (the size of the tensor it made or wrote) unless given.
// Which commands appear on the timeline is their structs' kTraced (protocol/commands.hpp).
//
// Thread safety: each function reads only what its caller may read (a finished task's
// slots, ready ones; the dispatch thread's command), and records through the tracer, which
// any thread may call.
#pragma once

#include <cstdint>

#include "protocol/commands.hpp"
#include "worker/flight_recorder.hpp"
#include "worker/streams.hpp"
#include "worker/tracer.hpp"

namespace dtr::worker::detail {

// The slice of task `t`, done on stream `s` at `end` (ticks; its start and last attempt
// are the task's).
void trace_task(Tracer& tracer, const StreamQueue& s, const Task& t, int64_t end);
// Part of replay `replay` of a graph ran at dispatch on stream `stream` (it was idle).
void trace_replay_part(Tracer& tracer, uint32_t stream, uint64_t replay, int64_t begin,
                       int64_t end);
// An op of `stream` run at dispatch (its output `out`): its inputs by id only.
void trace_inline_op(Tracer& tracer, uint32_t stream, const protocol::cmd::RunOp& c,
                     const Slot& out, int64_t begin, int64_t end);
// The slice of an op (no times, no tensors): what a device slice describes too.
Tracer::Slice op_slice(uint32_t stream, const protocol::cmd::RunOp& c);
// A command done at dispatch with no task, from its fields; `meta` and `bytes` for a
// Put's output, `input_meta` for a Free's tensor.
void trace_command(Tracer& tracer, const CommandFields& f, int64_t begin, int64_t end, bool failed,
                   const TensorMeta* meta = nullptr, int64_t bytes = 0,
                   const TensorMeta* input_meta = nullptr);
// Node `peer` is told of `token` now (event `event`'s record has run, on `stream`): a
// slice with the arrow's start, inside the record's slice, or on the dispatch track when
// `dispatched` (the record had run when NotifyPeer came).
void trace_notify(Tracer& tracer, uint32_t stream, uint64_t event, uint32_t peer, uint64_t token,
                  bool dispatched = false);

}  // namespace dtr::worker::detail
