// Streams, events and the per-thread current stream of each node.
#include "dtr/stream.hpp"

#include <fmt/format.h>

#include <mutex>

#include "master/capture.hpp"
#include "master/session.hpp"

namespace dtr {

using detail::MasterSession;
namespace cmd = protocol::cmd;

namespace detail {

struct StreamHandle {
  std::shared_ptr<MasterSession> session;
  int node = 0;
  int device = -1;
  uint32_t id = 0;  // 0: the node's default stream
  ~StreamHandle() {
    if (id == 0 || !session || session->closed()) return;
    session->enqueue(node, cmd::DestroyStream{.stream = id});
  }
};

struct EventHandle {
  bool timing = false;
  std::mutex mu;  // guards the fields below (set by the first record)
  std::shared_ptr<MasterSession> session;
  uint64_t id = 0;
  int node = -1;
  ~EventHandle() {
    if (!session || session->closed()) return;
    session->enqueue(node, cmd::DestroyEvent{.event = id});
  }
};

namespace {
// This thread's current streams, by node, for one session (a handle keeps it alive, so
// the pointer cannot be reused by a later session while it is compared against).
struct CurrentStreams {
  const MasterSession* session = nullptr;
  std::vector<std::shared_ptr<StreamHandle>> by_node;
};
thread_local CurrentStreams t_current;
}  // namespace

uint32_t current_stream_id(const MasterSession& s, int node) {
  if (t_current.session != &s) return 0;
  auto n = static_cast<size_t>(node);
  if (n >= t_current.by_node.size() || !t_current.by_node[n]) return 0;
  // A captured command keeps its stream alive.
  if (s.capturing() && t_current.by_node[n]->id != 0) [[unlikely]]
    pin_in_capture(s, t_current.by_node[n]);
  return t_current.by_node[n]->id;
}

}  // namespace detail

namespace {

std::shared_ptr<detail::StreamHandle> default_handle(std::shared_ptr<MasterSession> s, int node) {
  auto h = std::make_shared<detail::StreamHandle>();
  h->session = std::move(s);
  h->node = node;
  h->device = current_device();
  return h;
}

int resolve_node(std::string_view what, const MasterSession& s, int node) {
  int n = node < 0 ? current_node() : node;
  detail::check_node(what, s, n);
  return n;
}

// The event's node and id, or nullopt when it was never recorded.
struct Recorded {
  std::shared_ptr<MasterSession> session;
  int node;
  uint64_t id;
};
std::optional<Recorded> recorded_state(detail::EventHandle& e) {
  std::lock_guard lock(e.mu);
  if (!e.session) return std::nullopt;
  return Recorded{e.session, e.node, e.id};
}

// `sync`: EventSync (answered once the record is done), else EventQuery.
protocol::reply::Event event_request(const Recorded& r, bool sync) {
  detail::ReplyMessage m = sync ? r.session->request(r.node, cmd::EventSync{.event = r.id})
                                : r.session->request(r.node, cmd::EventQuery{.event = r.id});
  return detail::expect_reply<protocol::reply::Event>(std::move(m), r.node, "an event request");
}

}  // namespace

// ---- Stream ----

Stream Stream::create(int node) {
  auto s = detail::current_session("Stream::create");
  int n = resolve_node("Stream::create", *s, node);
  auto h = std::make_shared<detail::StreamHandle>();
  h->session = s;
  h->node = n;
  h->device = current_device();
  h->id = s->new_stream_id();
  s->enqueue(n, cmd::CreateStream{.stream = h->id});
  return Stream(std::move(h));
}

const detail::StreamHandle& Stream::handle(std::string_view what) const {
  if (!handle_) throw InvalidArgument(fmt::format("{}: called on an undefined stream", what));
  return *handle_;
}

int Stream::node() const {
  return handle("Stream::node").node;
}
int Stream::device() const {
  return handle("Stream::device").device;
}
uint32_t Stream::id() const {
  return handle("Stream::id").id;
}

bool Stream::operator==(const Stream& other) const {
  if (!handle_ || !other.handle_) return handle_ == other.handle_;
  return handle_->session == other.handle_->session && handle_->node == other.handle_->node &&
         handle_->id == other.handle_->id;
}

void Stream::wait(const Event& e) const {
  const detail::StreamHandle& h = handle("Stream::wait");
  std::optional<Recorded> r = recorded_state(*e.handle_);
  if (!r) return;  // never recorded: nothing to wait for
  if (r->session != h.session)
    throw InvalidArgument("Stream::wait: the event was recorded in another master-worker session");
  detail::pin_in_capture(*h.session, handle_);
  detail::pin_in_capture(*h.session, e.handle_);
  if (r->node == h.node) {
    h.session->enqueue(h.node, cmd::WaitEvent{.stream = h.id, .event = r->id});
    return;
  }
  // Across nodes: the event's node tells this stream's node directly.
  uint64_t token = h.session->new_id();
  h.session->enqueue(
      r->node,
      cmd::NotifyPeer{.event = r->id, .peer = static_cast<uint32_t>(h.node), .token = token});
  h.session->enqueue(
      h.node,
      cmd::WaitRemote{.stream = h.id, .peer = static_cast<uint32_t>(r->node), .token = token});
}

Event Stream::record_event(bool enable_timing) const {
  Event e(enable_timing);
  e.record(*this);
  return e;
}

bool Stream::query() const {
  return record_event().query();
}

void Stream::synchronize() const {
  record_event().synchronize();
}

// ---- Event ----

Event::Event(bool enable_timing) : handle_(std::make_shared<detail::EventHandle>()) {
  handle_->timing = enable_timing;
}

void Event::record() {
  record(current_stream());
}

void Event::record(const Stream& s) {
  const detail::StreamHandle& h = s.handle("Event::record");
  detail::EventHandle& e = *handle_;
  std::lock_guard lock(e.mu);
  if (!e.session) {
    e.session = h.session;
    e.node = h.node;
    e.id = h.session->new_id();
  } else if (e.session != h.session) {
    throw InvalidArgument("Event::record: the event belongs to another master-worker session");
  } else if (e.node != h.node) {
    throw InvalidArgument(
        fmt::format("Event::record: the event belongs to node {} (its first record) and cannot be "
                    "recorded on node {}; use one event per node",
                    e.node, h.node));
  }
  h.session->enqueue(h.node, cmd::Record{.stream = h.id, .event = e.id, .timing = e.timing});
  detail::pin_in_capture(*h.session, s.handle_);
  detail::pin_in_capture(*h.session, handle_);
}

bool Event::recorded() const {
  return recorded_state(*handle_).has_value();
}

int Event::node() const {
  std::optional<Recorded> r = recorded_state(*handle_);
  return r ? r->node : -1;
}

bool Event::query() const {
  std::optional<Recorded> r = recorded_state(*handle_);
  if (!r) return true;
  protocol::reply::Event reply = event_request(*r, false);
  if (reply.failure) throw r->session->explain(r->node, *reply.failure);
  return reply.done;
}

void Event::synchronize() const {
  std::optional<Recorded> r = recorded_state(*handle_);
  if (!r) return;
  protocol::reply::Event reply = event_request(*r, true);
  if (reply.failure) throw r->session->explain(r->node, *reply.failure);
}

double Event::elapsed_time(const Event& end) const {
  if (!handle_->timing || !end.handle_->timing)
    throw InvalidArgument("Event::elapsed_time: both events must be created with enable_timing");
  std::optional<Recorded> a = recorded_state(*handle_);
  std::optional<Recorded> b = recorded_state(*end.handle_);
  if (!a || !b)
    throw InvalidArgument(
        fmt::format("Event::elapsed_time: the {} event was never recorded", a ? "end" : "start"));
  if (a->node != b->node)
    throw InvalidArgument(
        fmt::format("Event::elapsed_time: the events live on nodes {} and {}; node clocks are "
                    "not comparable",
                    a->node, b->node));
  // Failures are for synchronize(); a failed stream still has record times.
  protocol::reply::Event ra = event_request(*a, true);
  protocol::reply::Event rb = event_request(*b, true);
  return static_cast<double>(rb.time_ns - ra.time_ns) / 1e6;
}

// ---- current streams ----

Stream current_stream(int node) {
  auto s = detail::current_session("current_stream");
  int n = resolve_node("current_stream", *s, node);
  detail::CurrentStreams& cur = detail::t_current;
  if (cur.session == s.get() && static_cast<size_t>(n) < cur.by_node.size() && cur.by_node[n])
    return Stream(cur.by_node[n]);
  return Stream(default_handle(std::move(s), n));
}

Stream default_stream(int node) {
  auto s = detail::current_session("default_stream");
  int n = resolve_node("default_stream", *s, node);
  return Stream(default_handle(std::move(s), n));
}

void set_stream(const Stream& s) {
  const detail::StreamHandle& h = s.handle("set_stream");
  detail::CurrentStreams& cur = detail::t_current;
  if (cur.session != h.session.get()) {
    cur.by_node.clear();
    cur.session = h.session.get();
  }
  if (static_cast<size_t>(h.node) >= cur.by_node.size()) cur.by_node.resize(h.node + 1);
  cur.by_node[h.node] = s.handle_;
}

stream_guard::stream_guard(const Stream& s)
    : previous_stream_(current_stream(s.node())), node_(s.node()), device_(s.device()) {
  set_stream(s);
}

stream_guard::~stream_guard() {
  set_stream(previous_stream_);
}

}  // namespace dtr
