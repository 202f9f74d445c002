// The master's timeline and the trace file (master/trace.hpp).
#include "master/trace.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <set>
#include <tuple>

#include "common/flight_text.hpp"
#include "common/trace_clock.hpp"
#include "dtr/error.hpp"
#include "dtr/op_table.hpp"

namespace dtr::detail {

using protocol::CmdType;
using protocol::TraceEvent;
using protocol::TraceFlow;

namespace {

constexpr size_t kMasterTraceBytes = size_t{256} << 20;

// A run of identical calls (or one sync point). `end` and `count` change while the run
// goes on (atomic_ref on both sides); the rest is fixed once committed.
struct Record {
  int64_t begin, end;
  uint64_t id;  // the first call's tensor, or the request
  uint64_t count;
  int32_t node;
  uint32_t stream;
  uint32_t thread;
  uint16_t op;
  uint8_t kind;
  uint8_t sync;
};
static_assert(sizeof(Record) % 8 == 0);

// The calling thread's open run of calls: a plain struct in initial-exec TLS (no call to
// find it).
struct Run {
  const MasterTrace* owner = nullptr;
  uint64_t generation = 0;
  Record* record = nullptr;
  uint64_t count = 0;
  int64_t checked = 0;  // ticks of the run's last clock read
  uint32_t since_check = 0;
  CmdType kind = CmdType::RunOp;
  uint16_t op = 0;
  int32_t node = 0;
  uint32_t stream = 0;
};
Run& current_run() {
  static thread_local Run run __attribute__((tls_model("initial-exec")));
  return run;
}

// A run reads the clock every kCheckEvery calls; a gap of kGapTicks since the last read
// (about a millisecond: TSC rates are 1 to 4 GHz) ends it.
constexpr uint32_t kCheckEvery = 64;
const int64_t kGapTicks = trace::uses_tsc() ? 2'500'000 : 1'000'000;

uint32_t thread_number() {
  static std::atomic<uint32_t> next{1};
  static thread_local uint32_t mine __attribute__((tls_model("initial-exec"))) = 0;
  if (mine == 0) mine = next.fetch_add(1);
  return mine;
}

}  // namespace

MasterTrace::MasterTrace() : log_(kMasterTraceBytes) {}

void MasterTrace::start() {
  trace::anchor();
  log_.reset();
  start_ns_ = trace::steady_ns();
  on_.store(true, std::memory_order_relaxed);
}

void* MasterTrace::append(bool sync, CmdType kind, uint16_t op, int node, uint32_t stream,
                          uint64_t id, int64_t begin, int64_t end) {
  trace::ThreadLog::Slot slot = log_.reserve(sizeof(Record));
  if (!slot) return nullptr;
  auto* r = new (slot.data) Record{begin,
                                   end,
                                   id,
                                   1,
                                   node,
                                   stream,
                                   thread_number(),
                                   op,
                                   static_cast<uint8_t>(kind),
                                   static_cast<uint8_t>(sync)};
  trace::ThreadLog::commit(slot);
  return r;
}

void MasterTrace::end_run() {
  Run& run = current_run();
  // The run ends at its last clock read: a single call is a moment (no clock read after
  // it), a long run ends within 64 calls of its last.
  if (run.record && run.owner == this && run.generation == log_.generation())
    std::atomic_ref<int64_t>(run.record->end).store(run.checked, std::memory_order_relaxed);
  run.record = nullptr;
}

void MasterTrace::call(CmdType kind, uint16_t op, int node, uint32_t stream, uint64_t id) {
  Run& run = current_run();
  const uint64_t generation = log_.generation();
  if (run.record && run.owner == this && run.generation == generation && run.kind == kind &&
      run.op == op && run.node == node && run.stream == stream) {
    std::atomic_ref<uint64_t>(run.record->count).store(++run.count, std::memory_order_relaxed);
    if (++run.since_check < kCheckEvery) return;
    run.since_check = 0;
    const int64_t now = trace::ticks();
    if (now - run.checked < kGapTicks) {
      run.checked = now;
      std::atomic_ref<int64_t>(run.record->end).store(now, std::memory_order_relaxed);
      return;
    }
    // A pause: the run ends at its last read; this call starts another.
  }
  end_run();
  const int64_t now = trace::ticks();
  auto* record = static_cast<Record*>(append(false, kind, op, node, stream, id, now, now));
  run = Run{this, generation, record, 1, now, 0, kind, op, node, stream};
}

void MasterTrace::sync_point(CmdType kind, uint16_t op, int node, uint32_t stream, uint64_t request,
                             int64_t begin, int64_t end) {
  end_run();
  append(true, kind, op, node, stream, request, begin, end);
}

std::vector<MasterTrace::Event> MasterTrace::collect() {
  trace::TickConverter clock;
  std::vector<Event> out;
  for (const trace::ThreadLog::Part& p : log_.snapshot()) {
    for (size_t at = 0; at + sizeof(Record) <= p.bytes; at += sizeof(Record)) {
      // The run may still be growing on its thread: its end and count are read atomically.
      auto* live = reinterpret_cast<Record*>(const_cast<std::byte*>(p.chunk->data.get() + at));
      const Record& r = *std::launder(live);
      Event e;
      e.sync = r.sync != 0;
      e.kind = static_cast<CmdType>(r.kind);
      e.op = r.op;
      e.node = r.node;
      e.stream = r.stream;
      e.thread = r.thread;
      e.id = r.id;
      e.count = std::atomic_ref<uint64_t>(live->count).load(std::memory_order_relaxed);
      e.begin_ns = clock.to_steady_ns(r.begin);
      const int64_t end = std::atomic_ref<int64_t>(live->end).load(std::memory_order_relaxed);
      e.end_ns = std::max(e.begin_ns, clock.to_steady_ns(end));
      out.push_back(e);
    }
  }
  log_.reset();
  return out;
}

namespace {

// Writes JSON to a file through a buffer.
class JsonOut {
 public:
  explicit JsonOut(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "w")) {
    if (!f_) throw Error(fmt::format("trace: cannot write {}: {}", path, std::strerror(errno)));
  }
  ~JsonOut() {
    if (f_) std::fclose(f_);
  }
  template <typename... Args>
  void put(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(buf_), format, std::forward<Args>(args)...);
    if (buf_.size() > (size_t{1} << 20)) flush();
  }
  // A JSON string literal of `s`.
  void str(std::string_view s) {
    buf_.push_back('"');
    for (char c : s) {
      auto u = static_cast<unsigned char>(c);
      if (c == '"' || c == '\\') {
        buf_.push_back('\\');
        buf_.push_back(c);
      } else if (u < 0x20) {
        fmt::format_to(std::back_inserter(buf_), "\\u{:04x}", u);
      } else {
        buf_.push_back(c);
      }
    }
    buf_.push_back('"');
  }
  // Separates array elements: a comma before every one but the first.
  void next() {
    if (!first_) buf_.push_back(',');
    first_ = false;
    buf_.push_back('\n');
  }
  void close() {
    flush();
    if (std::fclose(f_) != 0) {
      f_ = nullptr;
      throw Error(fmt::format("trace: cannot write {}: {}", path_, std::strerror(errno)));
    }
    f_ = nullptr;
  }

 private:
  void flush() {
    if (std::fwrite(buf_.data(), 1, buf_.size(), f_) != buf_.size())
      throw Error(fmt::format("trace: cannot write {}: {}", path_, std::strerror(errno)));
    buf_.clear();
  }
  std::string path_;
  std::FILE* f_;
  fmt::memory_buffer buf_;
  bool first_ = true;
};

// Microseconds since the trace's start, to the nanosecond.
std::string us(int64_t ns) {
  return fmt::format("{:.3f}", static_cast<double>(ns) / 1e3);
}

// A track of a node: its stream, the stream's CUDA stream on a device, or the dispatch
// track (commands done as they arrived).
constexpr int64_t kDispatchTrack = int64_t{1} << 41;
int64_t track_of(const TraceEvent& e) {
  if (e.dispatched) return kDispatchTrack;
  return e.device < 0 ? int64_t{e.stream}
                      : (int64_t{1} << 40) + (int64_t{e.stream} << 8) + e.device;
}

std::string_view category(CmdType kind) {
  switch (kind) {
    case CmdType::RunOp:
      return "op";
    case CmdType::SendPeer:
    case CmdType::RecvPeer:
      return "copy";
    case CmdType::Collective:
    case CmdType::NewGroup:
      return "collective";
    case CmdType::WaitEvent:
    case CmdType::WaitRemote:
      return "wait";
    case CmdType::Record:
    case CmdType::NotifyPeer:
    case CmdType::EventQuery:
    case CmdType::EventSync:
    case CmdType::DestroyEvent:
      return "event";
    case CmdType::Get:
    case CmdType::Sync:
    case CmdType::Stats:
    case CmdType::Trace:
      return "sync";
    case CmdType::Put:
    case CmdType::PutFrom:
    case CmdType::Free:
    case CmdType::ToDevice:
      return "memory";
    default:
      return "control";
  }
}

std::string tensor_text(const protocol::TraceTensor& t) {
  if (!t.shaped) return fmt::format("%{}", t.id);
  std::string dims;
  for (size_t i = 0; i < t.meta.shape.size(); ++i)
    dims += fmt::format("{}{}", i ? "," : "", t.meta.shape[i]);
  return fmt::format("%{} {}[{}]", t.id, dtype_name(t.meta.dtype), dims);
}

// The `args` of a worker slice.
void slice_args(JsonOut& o, const TraceEvent& e) {
  o.put("{{\"stream\":{},\"status\":\"{}\"", e.stream, e.failed ? "failed" : "ok");
  if (!e.tensors.empty()) {
    o.put(",\"tensors\":[");
    for (size_t i = 0; i < e.tensors.size(); ++i) {
      if (i) o.put(",");
      o.str(fmt::format("{} {}", i < e.inputs ? "in" : "out", tensor_text(e.tensors[i])));
    }
    o.put("]");
  }
  if (e.bytes > 0) o.put(",\"bytes\":{}", e.bytes);
  if (e.wait_ns > 0) o.put(",\"waited_us\":{}", us(e.wait_ns));
  if (e.peer != protocol::kNoPeer) o.put(",\"peer_node\":{}", e.peer);
  if (e.flow != TraceFlow::None) o.put(",\"token\":{}", e.flow_id);
  if (e.device >= 0) o.put(",\"device\":\"cuda:{}\"", e.device);
  switch (e.kind) {
    case CmdType::Record:
    case CmdType::WaitEvent:
    case CmdType::NotifyPeer:
      o.put(",\"event\":{}", e.detail);
      break;
    case CmdType::Collective:
      o.put(",\"group\":{}", e.detail);
      break;
    case CmdType::Get:
    case CmdType::Sync:
    case CmdType::Stats:
      o.put(",\"request\":{}", e.detail);
      break;
    case CmdType::GraphReplay:
      o.put(",\"replay\":{}", e.detail);
      break;
    default:
      break;
  }
  o.put("}}");
}

void metadata(JsonOut& o, int64_t pid, const std::string& process, int64_t sort) {
  o.next();
  o.put("{{\"ph\":\"M\",\"pid\":{},\"name\":\"process_name\",\"args\":{{\"name\":", pid);
  o.str(process);
  o.put("}}}}");
  o.next();
  o.put(
      "{{\"ph\":\"M\",\"pid\":{},\"name\":\"process_sort_index\",\"args\":{{\"sort_index\":{}}}}}",
      pid, sort);
}

void thread_metadata(JsonOut& o, int64_t pid, int64_t tid, const std::string& name, int64_t sort) {
  o.next();
  o.put("{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_name\",\"args\":{{\"name\":", pid,
        tid);
  o.str(name);
  o.put("}}}}");
  o.next();
  o.put(
      "{{\"ph\":\"M\",\"pid\":{},\"tid\":{},\"name\":\"thread_sort_index\",\"args\":{{\"sort_"
      "index\":{}}}}}",
      pid, tid, sort);
}

// The master's process: one track per calling thread.
int64_t write_master(JsonOut& o, const TraceFile& t) {
  metadata(o, 0, fmt::format("master ({})", t.master), 0);
  std::set<uint32_t> threads;
  for (const auto& e : t.calls) threads.insert(e.thread);
  for (uint32_t th : threads)
    thread_metadata(o, 0, th, fmt::format("calls and sync points (thread {})", th), th);
  for (const auto& e : t.calls) {
    o.next();
    o.put("{{\"ph\":\"X\",\"pid\":0,\"tid\":{},\"ts\":{},\"dur\":{},\"name\":", e.thread,
          us(e.begin_ns - t.start_ns), us(e.end_ns - e.begin_ns));
    o.str(common::event_name(e.kind, e.op));
    o.put(",\"cat\":\"{}\",\"args\":{{\"node\":{},\"stream\":{}", e.sync ? "sync point" : "call",
          e.node, e.stream);
    if (e.count > 1) o.put(",\"calls\":{}", e.count);
    if (e.sync)
      o.put(",\"request\":{}}}}}", e.id);
    else if (e.id != 0)
      o.put(",\"tensor\":\"%{}\"}}}}", e.id);
    else
      o.put("}}}}");
  }
  return static_cast<int64_t>(t.calls.size());
}

// One node's process: its tracks, slices and the arrows' ends.
int64_t write_node(JsonOut& o, const TraceFile& t, size_t k) {
  const NodeTrace& n = t.nodes[k];
  const int64_t pid = static_cast<int64_t>(k) + 1;
  metadata(o, pid,
           fmt::format("node {} ({}){}", k, n.name, n.lost ? ", lost: its slices are missing" : ""),
           pid);
  std::map<int64_t, const TraceEvent*> tracks;  // one event of each track
  for (const TraceEvent& e : n.events) tracks.emplace(track_of(e), &e);
  for (const auto& [tid, e] : tracks) {
    if (tid == kDispatchTrack) {
      thread_metadata(o, pid, tid, "dispatch (commands done as they arrive)", -1);
      continue;
    }
    thread_metadata(o, pid, tid,
                    e->device < 0
                        ? fmt::format("stream {}{}", e->stream, e->stream == 0 ? " (default)" : "")
                        : fmt::format("stream {} / cuda:{}", e->stream, e->device),
                    int64_t{e->stream} * 512 + e->device + 1);
  }
  const int64_t shift = -n.offset_ns - t.start_ns;
  for (const TraceEvent& e : n.events) {
    const int64_t tid = track_of(e);
    const int64_t begin = e.begin_ns + shift, end = e.end_ns + shift;
    o.next();
    o.put("{{\"ph\":\"X\",\"pid\":{},\"tid\":{},\"ts\":{},\"dur\":{},\"name\":", pid, tid,
          us(begin), us(end - begin));
    o.str(common::event_name(e.kind, static_cast<uint16_t>(e.op)));
    o.put(",\"cat\":\"{}\",\"args\":", category(e.kind));
    slice_args(o, e);
    o.put("}}");
    if (e.flow == TraceFlow::None || e.device >= 0) continue;
    // The arrow's end sits inside the slice, at its end.
    const int64_t at = std::max(begin, end - 1);
    o.next();
    o.put(
        "{{\"ph\":\"{}\",{}\"id\":{},\"pid\":{},\"tid\":{},\"ts\":{},\"name\":\"flow\","
        "\"cat\":\"flow\"}}",
        e.flow == TraceFlow::Out ? "s" : "f", e.flow == TraceFlow::In ? "\"bp\":\"e\"," : "",
        e.flow_id, pid, tid, us(at));
  }
  return static_cast<int64_t>(n.events.size());
}

}  // namespace

int64_t write_chrome_trace(const std::string& path, const TraceFile& t) {
  JsonOut o(path);
  o.put("{{\"displayTimeUnit\":\"ms\",\"otherData\":{{\"producer\":\"dtr\",\"master\":");
  o.str(t.master);
  o.put(
      ",\"time\":\"microseconds since the trace started, master's steady clock\","
      "\"master_calls_dropped\":{},\"nodes\":[",
      t.calls_dropped);
  for (size_t k = 0; k < t.nodes.size(); ++k) {
    const NodeTrace& n = t.nodes[k];
    o.put("{}{{\"node\":{},\"worker\":", k ? "," : "", k);
    o.str(n.name);
    o.put(",\"clock_offset_ns\":{},\"clock_offset_error_ns\":{},\"dropped\":{},\"lost\":{}}}",
          n.offset_ns, n.offset_error_ns, n.dropped, n.lost ? "true" : "false");
  }
  o.put("]}},\"traceEvents\":[");
  int64_t slices = write_master(o, t);
  for (size_t k = 0; k < t.nodes.size(); ++k) slices += write_node(o, t, k);
  o.put("\n]}}\n");
  o.close();
  return slices;
}

}  // namespace dtr::detail
