// Tracer (worker/tracer.hpp).
//
// A slice in the log is a Head, then per tensor a TensorHead and its dims (int64 each),
// every part 8-byte aligned.
#include "worker/tracer.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <unordered_map>
#include <unordered_set>

namespace dtr::worker::detail {

namespace {

struct Head {
  int64_t begin, end, wait, bytes;
  uint64_t flow_id, detail;
  uint32_t stream;
  int32_t device;
  uint32_t peer;
  uint16_t op;
  uint8_t kind, failed, flow, inputs, n_tensors, dispatched;
};
struct TensorHead {
  uint64_t id;
  uint8_t shaped, dtype, ndim, unused[5];
};
static_assert(sizeof(Head) % 8 == 0 && sizeof(TensorHead) % 8 == 0);

size_t tensor_bytes(const Tracer::TensorRef& t) {
  return sizeof(TensorHead) + (t.meta ? 8 * t.meta->shape.size() : 0);
}

protocol::TraceEvent event_of(const Tracer::Slice& s) {
  protocol::TraceEvent e;
  e.kind = s.kind;
  e.op = static_cast<OpId>(s.op);
  e.stream = s.stream;
  e.device = s.device;
  e.failed = s.failed;
  e.bytes = std::max<int64_t>(s.bytes, 0);
  e.peer = s.peer;
  e.flow = s.flow;
  e.flow_id = s.flow_id;
  e.detail = s.detail;
  e.dispatched = s.dispatched;
  e.inputs = s.inputs;
  return e;
}

// The slice at `p` (advancing *offset past it), its ticks converted.
protocol::TraceEvent decode(const std::byte* base, size_t* offset,
                            const trace::TickConverter& clock) {
  Head h;
  std::memcpy(&h, base + *offset, sizeof h);
  *offset += sizeof h;
  Tracer::Slice s;
  s.kind = static_cast<protocol::CmdType>(h.kind);
  s.op = h.op;
  s.stream = h.stream;
  s.device = h.device;
  s.failed = h.failed != 0;
  s.bytes = h.bytes;
  s.peer = h.peer;
  s.flow = static_cast<protocol::TraceFlow>(h.flow);
  s.flow_id = h.flow_id;
  s.detail = h.detail;
  s.dispatched = h.dispatched != 0;
  s.inputs = std::min(h.inputs, h.n_tensors);
  protocol::TraceEvent e = event_of(s);
  e.begin_ns = clock.to_steady_ns(h.begin);
  e.end_ns = std::max(e.begin_ns, clock.to_steady_ns(h.end));
  e.wait_ns = std::clamp<int64_t>(clock.to_steady_ns(h.begin + h.wait) - e.begin_ns, 0,
                                  e.end_ns - e.begin_ns);
  for (uint8_t i = 0; i < h.n_tensors; ++i) {
    TensorHead t;
    std::memcpy(&t, base + *offset, sizeof t);
    *offset += sizeof t;
    protocol::TraceTensor tt;
    tt.id = t.id;
    tt.shaped = t.shaped != 0;
    if (tt.shaped) {
      Shape shape;
      for (uint8_t d = 0; d < t.ndim; ++d) {
        int64_t v;
        std::memcpy(&v, base + *offset, sizeof v);
        *offset += sizeof v;
        shape.push_back(v);
      }
      tt.meta = TensorMeta::contiguous(static_cast<DType>(t.dtype), shape);
    }
    e.tensors.push_back(std::move(tt));
  }
  return e;
}

// Ids of tensors a slice names without their shape, and the shapes other slices (or the
// tensor table) give them.
using Shapes = std::unordered_map<protocol::TensorId, TensorMeta>;

// f(const TensorHead&, const int64_t* dims) for every tensor of every slice of `parts`.
template <class F>
void for_each_tensor(const std::vector<trace::ThreadLog::Part>& parts, F&& f) {
  for (const trace::ThreadLog::Part& p : parts) {
    const std::byte* base = p.chunk->data.get();
    for (size_t at = 0; at < p.bytes;) {
      Head h;
      std::memcpy(&h, base + at, sizeof h);
      at += sizeof h;
      for (uint8_t i = 0; i < h.n_tensors; ++i) {
        TensorHead t;
        std::memcpy(&t, base + at, sizeof t);
        at += sizeof t;
        f(t, reinterpret_cast<const int64_t*>(base + at));
        if (t.shaped) at += 8 * size_t{t.ndim};
      }
    }
  }
}

// The shapes of the tensors slices name without one (an op run at dispatch names its
// inputs by id only): from a slice that gives it, else from `resolve` (the live table).
Shapes shapes_for(const std::vector<trace::ThreadLog::Part>& parts,
                  const std::vector<protocol::TraceEvent>& device,
                  const Tracer::Resolver& resolve) {
  std::unordered_set<protocol::TensorId> needed;
  for_each_tensor(parts, [&](const TensorHead& t, const int64_t*) {
    if (!t.shaped && t.id != protocol::kNoTensor) needed.insert(t.id);
  });
  Shapes shapes;
  if (needed.empty()) return shapes;
  for_each_tensor(parts, [&](const TensorHead& t, const int64_t* dims) {
    if (!t.shaped || !needed.count(t.id) || shapes.count(t.id)) return;
    Shape shape;
    for (uint8_t d = 0; d < t.ndim; ++d) shape.push_back(dims[d]);
    shapes.emplace(t.id, TensorMeta::contiguous(static_cast<DType>(t.dtype), shape));
  });
  for (const protocol::TraceEvent& e : device)
    for (const protocol::TraceTensor& t : e.tensors)
      if (t.shaped && needed.count(t.id)) shapes.emplace(t.id, t.meta);
  if (resolve) {
    for (protocol::TensorId id : needed) {
      if (shapes.count(id)) continue;
      if (std::optional<TensorMeta> m = resolve(id)) shapes.emplace(id, *m);
    }
  }
  return shapes;
}

// Fills the shapes `e` lacks from `shapes`, and its bytes when not given: those of the
// tensor it made (its last output) or, with none, of its input 0 (written in place, read,
// sent), counted here rather than on the hot path.
void complete(protocol::TraceEvent& e, const Shapes& shapes) {
  for (protocol::TraceTensor& t : e.tensors) {
    if (t.shaped) continue;
    auto it = shapes.find(t.id);
    if (it == shapes.end()) continue;
    t.shaped = true;
    t.meta = it->second;
  }
  if (e.bytes == 0 && !e.failed && e.kind != protocol::CmdType::Free && !e.tensors.empty()) {
    const protocol::TraceTensor& t =
        e.tensors.size() > e.inputs ? e.tensors.back() : e.tensors.front();
    if (t.shaped) e.bytes = t.meta.numel() * static_cast<int64_t>(element_size(t.meta.dtype));
  }
}

}  // namespace

protocol::TraceTensor trace_tensor(const Tracer::TensorRef& t) {
  protocol::TraceTensor out;
  out.id = t.id;
  out.shaped = t.meta != nullptr;
  if (t.meta) out.meta = TensorMeta::contiguous(t.meta->dtype, t.meta->shape);
  return out;
}

struct Tracer::DeviceSlice {
  Slice slice;
  std::vector<protocol::TraceTensor> tensors;
  int device = 0;
  std::shared_ptr<cuda::Event> begin, end;
};

struct Tracer::Collection {
  trace::TickConverter clock;
  std::vector<trace::ThreadLog::Part> parts;
  std::unordered_map<protocol::TensorId, TensorMeta> shapes;  // for slices naming ids only
  size_t part = 0;
  size_t offset = 0;
  std::vector<protocol::TraceEvent> device;  // sent after the host slices
  size_t device_next = 0;
  uint64_t dropped = 0;
};

Tracer::Tracer(size_t budget_bytes) : log_(budget_bytes) {}

Tracer::~Tracer() = default;

void Tracer::start() {
  {
    std::lock_guard lock(collect_mu_);
    collection_.reset();
  }
  {
    std::lock_guard lock(device_mu_);
    device_.clear();
    refs_.clear();
  }
  trace::anchor();
  log_.reset();
  on_.store(true, std::memory_order_relaxed);
}

void Tracer::clear() {
  stop();
  {
    std::lock_guard lock(collect_mu_);
    collection_.reset();
  }
  {
    std::lock_guard lock(device_mu_);
    device_.clear();
    refs_.clear();
  }
  log_.reset();
}

void Tracer::record(const Slice& s, std::span<const TensorRef> tensors) {
  if (!on()) return;
  const size_t n = std::min(tensors.size(), protocol::kMaxTraceTensors);
  size_t bytes = sizeof(Head);
  for (size_t i = 0; i < n; ++i) bytes += tensor_bytes(tensors[i]);
  trace::ThreadLog::Slot slot = log_.reserve(bytes);
  if (!slot) return;
  // Straight into the log (8-byte aligned: every part is a multiple of 8 bytes).
  std::byte* p = slot.data;
  new (p) Head{s.begin,
               s.end,
               s.wait,
               s.bytes,
               s.flow_id,
               s.detail,
               s.stream,
               s.device,
               s.peer,
               s.op,
               static_cast<uint8_t>(s.kind),
               static_cast<uint8_t>(s.failed),
               static_cast<uint8_t>(s.flow),
               s.inputs,
               static_cast<uint8_t>(n),
               static_cast<uint8_t>(s.dispatched)};
  p += sizeof(Head);
  for (size_t i = 0; i < n; ++i) {
    const TensorRef& t = tensors[i];
    const uint8_t ndim = t.meta ? static_cast<uint8_t>(t.meta->shape.size()) : 0;
    new (p) TensorHead{t.id,
                       static_cast<uint8_t>(t.meta != nullptr),
                       t.meta ? static_cast<uint8_t>(t.meta->dtype) : uint8_t{0},
                       ndim,
                       {}};
    p += sizeof(TensorHead);
    if (ndim > 0) {
      std::memcpy(p, t.meta->shape.data(), 8 * size_t{ndim});
      p += 8 * size_t{ndim};
    }
  }
  trace::ThreadLog::commit(slot);
}

void Tracer::record_op(uint32_t stream, uint16_t op, const protocol::TensorId* inputs,
                       uint8_t n_inputs, protocol::TensorId out, const TensorMeta* out_meta,
                       int64_t begin, int64_t end, bool failed) {
  if (!on()) return;
  const uint8_t n = static_cast<uint8_t>(n_inputs + (out != protocol::kNoTensor ? 1 : 0));
  const uint8_t ndim = out_meta ? static_cast<uint8_t>(out_meta->shape.size()) : 0;
  trace::ThreadLog::Slot slot =
      log_.reserve(sizeof(Head) + n * sizeof(TensorHead) + 8 * size_t{ndim});
  if (!slot) return;
  std::byte* p = slot.data;
  new (p) Head{begin,
               end,
               0,
               0,
               0,
               0,
               stream,
               -1,
               protocol::kNoPeer,
               op,
               static_cast<uint8_t>(protocol::CmdType::RunOp),
               static_cast<uint8_t>(failed),
               0,
               n_inputs,
               n,
               0};
  p += sizeof(Head);
  for (uint8_t i = 0; i < n_inputs; ++i) {
    new (p) TensorHead{inputs[i], 0, 0, 0, {}};
    p += sizeof(TensorHead);
  }
  if (out != protocol::kNoTensor) {
    new (p) TensorHead{out,
                       static_cast<uint8_t>(out_meta != nullptr),
                       out_meta ? static_cast<uint8_t>(out_meta->dtype) : uint8_t{0},
                       ndim,
                       {}};
    p += sizeof(TensorHead);
    auto* dims = reinterpret_cast<int64_t*>(p);
    for (uint8_t d = 0; d < ndim; ++d) dims[d] = out_meta->shape[d];
  }
  trace::ThreadLog::commit(slot);
}

Tracer::DeviceMark Tracer::mark_begin(int device, cuda::StreamHandle stream) {
  if (!on() || device < 0) return {};
  try {
    {
      std::lock_guard lock(device_mu_);
      if (refs_.size() <= static_cast<size_t>(device))
        refs_.resize(static_cast<size_t>(device) + 1);
      Reference& ref = refs_[static_cast<size_t>(device)];
      if (!ref.event) {
        // The device's time base: an event whose host time is known (to the latency of a
        // synchronize, microseconds).
        ref.event = std::make_shared<cuda::Event>(device, true);
        ref.event->record(stream);
        ref.event->synchronize();
        ref.host_ns = trace::steady_ns();
      }
    }
    auto begin = std::make_shared<cuda::Event>(device, true);
    begin->record(stream);
    return DeviceMark{std::move(begin)};
  } catch (const std::exception&) {
    return {};  // tracing never fails a command
  }
}

void Tracer::mark_end(DeviceMark m, int device, cuda::StreamHandle stream, const Slice& s,
                      std::span<const TensorRef> tensors) {
  if (!m.begin) return;
  try {
    DeviceSlice d;
    d.slice = s;
    d.slice.device = device;
    d.device = device;
    for (size_t i = 0; i < tensors.size() && i < protocol::kMaxTraceTensors; ++i)
      d.tensors.push_back(trace_tensor(tensors[i]));
    d.begin = std::move(m.begin);
    d.end = std::make_shared<cuda::Event>(device, true);
    d.end->record(stream);
    std::lock_guard lock(device_mu_);
    device_.push_back(std::move(d));
  } catch (const std::exception&) {
  }
}

void Tracer::convert_device_slices(Collection& c) {
  std::vector<DeviceSlice> slices;
  std::vector<Reference> refs;
  {
    std::lock_guard lock(device_mu_);
    slices.swap(device_);
    refs = refs_;
  }
  for (DeviceSlice& d : slices) {
    try {
      const Reference& ref = refs.at(static_cast<size_t>(d.device));
      d.end->synchronize();
      protocol::TraceEvent e = event_of(d.slice);
      e.begin_ns = ref.host_ns + static_cast<int64_t>(ref.event->elapsed_ms(*d.begin) * 1e6);
      e.end_ns = std::max(e.begin_ns,
                          ref.host_ns + static_cast<int64_t>(ref.event->elapsed_ms(*d.end) * 1e6));
      e.inputs = std::min<uint8_t>(d.slice.inputs, static_cast<uint8_t>(d.tensors.size()));
      e.tensors = std::move(d.tensors);
      c.device.push_back(std::move(e));
    } catch (const std::exception&) {
    }
  }
}

protocol::TraceChunk Tracer::collect(size_t max, const Resolver& resolve) {
  std::lock_guard lock(collect_mu_);
  if (!collection_) {
    collection_ = std::make_unique<Collection>();
    collection_->parts = log_.snapshot();
    collection_->dropped = log_.dropped();
    convert_device_slices(*collection_);
    collection_->shapes = shapes_for(collection_->parts, collection_->device, resolve);
  }
  Collection& c = *collection_;
  protocol::TraceChunk out;
  out.dropped = c.dropped;
  while (out.events.size() < max && c.part < c.parts.size()) {
    const trace::ThreadLog::Part& p = c.parts[c.part];
    if (c.offset >= p.bytes) {
      ++c.part;
      c.offset = 0;
      continue;
    }
    out.events.push_back(decode(p.chunk->data.get(), &c.offset, c.clock));
    complete(out.events.back(), c.shapes);
  }
  while (out.events.size() < max && c.device_next < c.device.size()) {
    out.events.push_back(std::move(c.device[c.device_next++]));
    complete(out.events.back(), c.shapes);
  }
  out.more = c.part < c.parts.size() || c.device_next < c.device.size();
  if (!out.more) {
    collection_.reset();
    if (!on()) log_.reset();  // the trace's memory goes
  }
  return out;
}

}  // namespace dtr::worker::detail
