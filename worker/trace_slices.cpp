// Trace slices (worker/trace_slices.hpp).
#include "worker/trace_slices.hpp"

#include <algorithm>

#include "worker/graph.hpp"

namespace dtr::worker::detail {

namespace cmd = protocol::cmd;
using protocol::CmdType;
using protocol::TraceFlow;
using TensorRef = Tracer::TensorRef;

namespace {

// A ready, not failed slot's metadata; null otherwise.
const TensorMeta* meta_of(const Slot* slot) {
  if (!slot || !slot->ready.load(std::memory_order_acquire) ||
      slot->failed.load(std::memory_order_acquire))
    return nullptr;
  return &slot->tensor.meta();
}

bool failed(const SlotPtr& slot) {
  return slot && slot->failed.load(std::memory_order_acquire);
}

// An op's tensors: its inputs, then its output unless it writes input 0 in place.
size_t op_tensors(const cmd::RunOp& c, Slot* const* in, const Slot* out, TensorRef* refs) {
  size_t n = 0;
  for (uint8_t i = 0; i < c.inputs.n && i < 2; ++i) refs[n++] = {c.inputs.ids[i], meta_of(in[i])};
  if (!c.inplace) refs[n++] = {c.out, meta_of(out)};
  return n;
}

// The slice of a task whose command is `c`, and its tensors (`sl.inputs` of them read):
// false when the task has none. One overload per kind of slice; the generic one reads what
// the command's fields say.
template <class C>
bool describe(const Task& t, const C& c, Tracer::Slice& sl, TensorRef* refs, size_t& n) {
  sl.kind = C::kType;
  if constexpr (requires { c.input; }) {
    refs[n++] = {c.input, meta_of(t.in[0].get())};
    sl.inputs = 1;
  }
  if constexpr (requires { c.out; }) {
    if (c.out != protocol::kNoTensor) refs[n++] = {c.out, meta_of(t.out.get())};
  }
  if constexpr (requires { c.event; }) sl.detail = c.event;
  if constexpr (requires { c.group; }) sl.detail = c.group;
  if constexpr (requires { c.request; }) sl.detail = c.request;
  if constexpr (requires { c.token; }) {
    sl.flow_id = c.token;
    sl.peer = c.peer;
    sl.flow = std::is_same_v<C, cmd::SendPeer> ? TraceFlow::Out : TraceFlow::In;
  }
  sl.failed = failed(t.out) || (!t.out && failed(t.in[0]));
  return true;
}

bool describe(const Task& t, const cmd::RunOp& c, Tracer::Slice& sl, TensorRef* refs, size_t& n) {
  sl = op_slice(0, c);
  Slot* in[2] = {t.in[0].get(), t.in[1].get()};
  n = op_tensors(c, in, t.out.get(), refs);
  sl.failed = failed(t.out);
  return true;
}

bool describe(const Task& t, const cmd::Collective& c, Tracer::Slice& sl, TensorRef* refs,
              size_t& n) {
  describe<cmd::Collective>(t, c, sl, refs, n);
  sl.op = static_cast<uint16_t>(c.kind);
  if (t.out == t.in[0]) n = 1;  // in place: one tensor
  return true;
}

// A replay's part on this stream: one slice, its ops inside.
bool describe(const Task&, const cmd::GraphReplay& c, Tracer::Slice& sl, TensorRef*, size_t&) {
  sl.kind = CmdType::GraphReplay;
  sl.detail = c.replay;
  return true;
}

// A barrier's slice on each stream (none for Trace's Stop).
bool describe(const Task& t, BarrierArrival, Tracer::Slice& sl, TensorRef*, size_t&) {
  return std::visit(
      [&](auto b) {
        using B = std::remove_cvref_t<decltype(*b)>;
        if constexpr (!protocol::traced_v<B>) {
          return false;
        } else {
          sl.kind = B::kType;
          sl.detail = b->request;
          return true;
        }
      },
      t.barrier->cmd);
}

bool describe(const Task&, std::monostate, Tracer::Slice&, TensorRef*, size_t&) {
  return false;
}

}  // namespace

Tracer::Slice op_slice(uint32_t stream, const cmd::RunOp& c) {
  Tracer::Slice sl;
  sl.kind = CmdType::RunOp;
  sl.op = static_cast<uint16_t>(c.op);
  sl.stream = stream;
  sl.inputs = c.inputs.n;
  return sl;
}

void trace_task(Tracer& tracer, const StreamQueue& s, const Task& t, int64_t end) {
  Tracer::Slice sl;
  TensorRef refs[protocol::kMaxTraceTensors];
  size_t n = 0;
  const bool traced = std::visit(
      [&](auto c) {
        if constexpr (std::is_pointer_v<decltype(c)>)
          return describe(t, *c, sl, refs, n);
        else
          return describe(t, c, sl, refs, n);
      },
      t.cmd);
  if (!traced) return;
  sl.stream = s.id;
  sl.begin = t.trace_begin;
  sl.end = std::max(end, t.trace_begin);
  sl.wait = t.trace_last > t.trace_begin ? t.trace_last - t.trace_begin : 0;
  tracer.record(sl, std::span<const TensorRef>(refs, n));
}

void trace_inline_op(Tracer& tracer, uint32_t stream, const cmd::RunOp& c, const Slot& out,
                     int64_t begin, int64_t end) {
  const bool failed = out.failed.load(std::memory_order_acquire);
  const protocol::TensorId made = c.inplace ? protocol::kNoTensor : c.out;
  tracer.record_op(stream, static_cast<uint16_t>(c.op), c.inputs.ids, c.inputs.n, made,
                   failed || c.inplace ? nullptr : &out.tensor.meta(), begin, std::max(end, begin),
                   failed);
}

void trace_replay_part(Tracer& tracer, uint32_t stream, uint64_t replay, int64_t begin,
                       int64_t end) {
  Tracer::Slice sl;
  sl.kind = CmdType::GraphReplay;
  sl.stream = stream;
  sl.detail = replay;
  sl.begin = begin;
  sl.end = std::max(end, begin);
  tracer.record(sl, {});
}

void trace_command(Tracer& tracer, const CommandFields& f, int64_t begin, int64_t end,
                   bool is_failed, const TensorMeta* meta, int64_t bytes,
                   const TensorMeta* input_meta) {
  Tracer::Slice sl;
  sl.kind = f.kind;
  sl.op = f.op;
  sl.stream = f.stream;
  sl.begin = begin;
  sl.end = std::max(end, begin);
  sl.failed = is_failed;
  sl.bytes = bytes;
  sl.detail = f.detail;
  // A get or a record done at once ran on its idle stream; the rest is the dispatcher's.
  sl.dispatched = is_failed || (f.kind != CmdType::Get && f.kind != CmdType::Record);
  if (f.kind != CmdType::NodeLost) sl.peer = f.peer;
  TensorRef refs[protocol::kMaxTraceTensors];
  size_t n = 0;
  if (f.in0 != protocol::kNoTensor) refs[n++] = {f.in0, input_meta};
  if (f.in1 != protocol::kNoTensor) refs[n++] = {f.in1, nullptr};
  sl.inputs = static_cast<uint8_t>(n);
  if (f.out != protocol::kNoTensor) refs[n++] = {f.out, meta};
  tracer.record(sl, std::span<const TensorRef>(refs, n));
}

void trace_notify(Tracer& tracer, uint32_t stream, uint64_t event, uint32_t peer, uint64_t token,
                  bool dispatched) {
  if (!tracer.on()) return;
  Tracer::Slice sl;
  sl.dispatched = dispatched;
  sl.kind = CmdType::NotifyPeer;
  sl.stream = stream;
  sl.begin = trace::ticks();
  sl.end = trace::ticks();
  sl.peer = peer;
  sl.flow = TraceFlow::Out;
  sl.flow_id = token;
  sl.detail = event;
  tracer.record(sl, {});
}

}  // namespace dtr::worker::detail
