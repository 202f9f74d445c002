// Captured graphs on the master: the recording (Capture), the upload of each node's part,
// and Graph's replays (include/dtr/graph.hpp, master/capture.hpp).
#include <fmt/format.h>

#include "dtr/graph.hpp"
#include "master/capture.hpp"
#include "master/session.hpp"

namespace dtr {

using detail::Capture;
using detail::GraphHandle;
using detail::MasterSession;
namespace cmd = protocol::cmd;

namespace detail {

namespace {
thread_local Capture* t_capture = nullptr;

// The user-facing call a sync-point command comes from.
std::string_view sync_point_name(const protocol::Command& c) {
  switch (protocol::command_type(c)) {
    case protocol::CmdType::Get:
      return "to_local / item";
    case protocol::CmdType::Sync:
      return "synchronize";
    case protocol::CmdType::Stats:
      return "memory_stats / dist_send";
    case protocol::CmdType::EventQuery:
      return "Event::query / Stream::query";
    case protocol::CmdType::EventSync:
      return "Event::synchronize / Stream::synchronize";
    default:
      return protocol::command_name(c);
  }
}
}  // namespace

// ---- the session's side ----

void MasterSession::begin_capture(Capture* c) {
  std::lock_guard lock(captures_mu_);
  captures_.push_back(c);
  capturing_.fetch_add(1, std::memory_order_relaxed);
}

void MasterSession::end_capture(Capture* c) {
  std::lock_guard lock(captures_mu_);
  std::erase(captures_, c);
  capturing_.fetch_sub(1, std::memory_order_relaxed);
}

bool MasterSession::divert(int node, const protocol::Command& c, Wake how) {
  if (Capture* cap = Capture::active(*this)) return cap->take(node, c, how == Wake::kLazy);
  // Another thread drops a handle of a tensor a capture made: the graph owns that tensor.
  if (const auto* f = std::get_if<cmd::Free>(&c)) {
    std::lock_guard lock(captures_mu_);
    for (Capture* cap : captures_)
      if (cap->take_free(f->input)) return true;
  }
  return false;
}

bool MasterSession::divert(int node, const cmd::RunOp& c, Wake how) {
  Capture* cap = Capture::active(*this);
  return cap && cap->take(node, c, how == Wake::kLazy);
}

void MasterSession::refuse_sync_point_in_capture(const protocol::Command& c) const {
  if (!Capture::active(*this)) return;
  throw InvalidArgument(fmt::format(
      "{}: a sync point cannot be captured; dtr::capture records asynchronous commands only "
      "(call it before or after the capture)",
      sync_point_name(c)));
}

void MasterSession::enqueue_replay(const std::vector<int>& nodes, uint64_t graph, uint64_t replay,
                                   bool ordered, bool small) {
  std::unique_lock<std::mutex> lock;
  if (ordered) lock = std::unique_lock(collectives_mu_);
  for (int n : nodes)
    enqueue(n, cmd::GraphReplay{.graph = graph, .replay = replay}, nullptr,
            small ? Wake::kLazy : Wake::kNow);
}

// ---- Capture ----

Capture::Capture(std::shared_ptr<MasterSession> session, uint64_t graph)
    : session_(std::move(session)), graph_(graph), previous_(t_capture) {
  if (previous_)
    throw InvalidArgument(
        "capture: this thread is capturing already (captures do not nest; call it outside)");
  t_capture = this;
  session_->begin_capture(this);
}

Capture::~Capture() {
  stop();
}

void Capture::stop() {
  if (stopped_) return;
  stopped_ = true;
  t_capture = previous_;
  session_->end_capture(this);
}

Capture* Capture::active(const MasterSession& s) {
  Capture* c = t_capture;
  return c && c->session_.get() == &s ? c : nullptr;
}

bool Capture::any() {
  return t_capture != nullptr;
}

template <class C>
void Capture::record(int node, const C& c, bool small) {
  small_ = small_ && small;
  if constexpr (requires { c.token; }) {
    if (c.token >= protocol::kGraphTokenLimit)
      throw InvalidArgument(fmt::format(
          "capture: token {} is past 2^40 (this session has issued that many ids)", c.token));
  }
  Part& part = parts_[node];
  part.commands.push_back(c);
  if constexpr (std::is_same_v<C, cmd::Collective>) part.collectives = true;
  if (protocol::TensorId out = protocol::command_output(c); out != protocol::kNoTensor) {
    std::lock_guard lock(mu_);
    made_.emplace(out, node);
  }
}

bool Capture::take(int node, const protocol::Command& c, bool small) {
  return std::visit(
      [&](const auto& x) -> bool {
        using C = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<C, cmd::Free>) {
          return take_free(x.input);
        } else if constexpr (protocol::in_graph_v<C>) {
          record(node, x, small);
          return true;
        } else if constexpr (std::is_same_v<C, cmd::CreateStream> ||
                             std::is_same_v<C, cmd::DestroyStream> ||
                             std::is_same_v<C, cmd::DestroyEvent> ||
                             std::is_same_v<C, cmd::NewGroup> ||
                             std::is_same_v<C, cmd::GraphFree>) {
          return false;  // bookkeeping: goes out now, ahead of the graph's upload
        } else {
          throw InvalidArgument(fmt::format(
              "{}: cannot be captured (a graph holds ops, copies, collectives, event records "
              "and stream waits)",
              protocol::command_name(c)));
        }
      },
      c);
}

bool Capture::take(int node, const cmd::RunOp& c, bool small) {
  record(node, c, small);
  return true;
}

bool Capture::take_free(uint64_t id) {
  std::lock_guard lock(mu_);
  if (!made_.count(id)) return false;
  dropped_.insert(id);
  return true;
}

void Capture::pin(const DistributedTensor& t) {
  {
    std::lock_guard lock(mu_);
    if (made_.count(t.id())) return;  // a temporary: the graph's own
  }
  parts_[t.get_node()].inputs.emplace(t.id(), t.meta());
  tensors_.push_back(t);
}

void Capture::pin(std::shared_ptr<void> handle) {
  handles_.push_back(std::move(handle));
}

void Capture::check_upload_size(int node, const cmd::GraphUpload& up) const {
  protocol::BatchWriter w;
  w.add(protocol::Command(up));
  const auto bytes = static_cast<int64_t>(w.finish().size());
  // Half the limit: the I/O thread's batch may already hold up to that much (requests.cpp).
  const int64_t room = session_->message_limit(node) / 2;
  if (bytes > room)
    throw InvalidArgument(fmt::format(
        "capture: graph {}'s program for node {} ({}) encodes to {} bytes, more than half "
        "of what that worker takes in one message ({} bytes, dtr-worker --max-message-bytes); "
        "capture fewer commands per graph, or raise the worker's limit",
        graph_, node, session_->endpoint(node), bytes, session_->message_limit(node)));
}

Graph Capture::finish() {
  stop();
  auto h = std::make_shared<GraphHandle>();
  h->session = session_;
  h->id = graph_;
  std::vector<std::pair<int, cmd::GraphUpload>> uploads;
  for (auto& [node, part] : parts_) {
    if (part.commands.empty()) continue;
    cmd::GraphUpload up{.graph = graph_};
    {
      std::lock_guard lock(mu_);
      for (const auto& [id, made_on] : made_)
        if (made_on == node && !dropped_.count(id)) up.outputs.push_back(id);
    }
    std::sort(up.outputs.begin(), up.outputs.end());
    for (const auto& [id, meta] : part.inputs) up.inputs.push_back(protocol::GraphInput{id, meta});
    h->nodes.push_back(node);
    h->commands.push_back(part.commands.size());
    h->ordered = h->ordered || part.collectives;
    auto program = std::make_shared<protocol::Batch>();
    program->commands = std::move(part.commands);
    up.program = std::move(program);
    uploads.emplace_back(node, std::move(up));
  }
  // Every upload fits its node's messages before any is sent (no graph half-uploaded).
  for (const auto& [node, up] : uploads) check_upload_size(node, up);
  for (const auto& [node, up] : uploads) session_->enqueue(node, up);
  h->small = small_;
  h->tensors = std::move(tensors_);
  h->handles = std::move(handles_);
  return Graph(std::move(h));
}

void pin_in_capture(const MasterSession& s, const DistributedTensor& t) {
  if (!s.capturing() || !t.defined()) return;
  if (Capture* c = Capture::active(s)) c->pin(t);
}

void pin_in_capture(const MasterSession& s, std::shared_ptr<void> handle) {
  if (!s.capturing() || !handle) return;
  if (Capture* c = Capture::active(s)) c->pin(std::move(handle));
}

// ---- GraphHandle ----

void GraphHandle::free() {
  std::vector<DistributedTensor> inputs;
  std::vector<std::shared_ptr<void>> held;
  {
    std::lock_guard lock(mu);
    if (freed) return;
    freed = true;
    if (session && !session->closed())
      for (int n : nodes)
        session->enqueue(n, cmd::GraphFree{.graph = id}, nullptr, MasterSession::Wake::kLazy);
    inputs.swap(tensors);
    held.swap(handles);
  }
  // Dropped here, after the frees were queued: their own frees follow the graph's.
}

GraphHandle::~GraphHandle() {
  free();
}

}  // namespace detail

// ---- Graph ----

detail::GraphHandle& Graph::handle(std::string_view what) const {
  if (!handle_) throw InvalidArgument(fmt::format("{}: called on an undefined graph", what));
  return *handle_;
}

uint64_t Graph::id() const {
  return handle("Graph::id").id;
}

void Graph::replay() {
  GraphHandle& h = handle("Graph::replay");
  if (Capture::any())
    throw InvalidArgument(fmt::format(
        "Graph::replay: graph {} replayed inside dtr::capture (graphs do not nest)", h.id));
  std::lock_guard lock(h.mu);
  if (h.freed)
    throw InvalidArgument(
        fmt::format("Graph::replay: graph {} was freed (reset() or its session ended)", h.id));
  if (h.session->closed())
    throw InvalidArgument(
        fmt::format("Graph::replay: graph {} belongs to a session that was shut down", h.id));
  for (int n : h.nodes) {
    try {
      h.session->check_alive(n);
    } catch (const WorkerLost& e) {
      throw WorkerLost(
          fmt::format("Graph::replay: graph {} has a part on node {}: {}", h.id, n, e.what()));
    }
  }
  h.session->enqueue_replay(h.nodes, h.id, ++h.replays, h.ordered, h.small);
}

uint64_t Graph::replays() const {
  GraphHandle& h = handle("Graph::replays");
  std::lock_guard lock(h.mu);
  return h.replays;
}

std::vector<int> Graph::nodes() const {
  return handle("Graph::nodes").nodes;
}

size_t Graph::commands(int node) const {
  const GraphHandle& h = handle("Graph::commands");
  for (size_t i = 0; i < h.nodes.size(); ++i)
    if (h.nodes[i] == node) return h.commands[i];
  return 0;
}

void Graph::reset() {
  if (handle_) handle_->free();
}

Graph capture(const std::function<void()>& fn) {
  if (!fn) throw InvalidArgument("capture: no function to capture");
  auto s = detail::current_session("capture");
  Capture cap(s, s->new_graph_id());
  try {
    fn();
  } catch (...) {
    // What was recorded is uploaded and freed at once: the tensors the capture made exist
    // on their workers, failing when read, and their handles' frees find them.
    cap.finish().reset();
    throw;
  }
  return cap.finish();
}

bool is_capturing() {
  return Capture::any();
}

}  // namespace dtr
