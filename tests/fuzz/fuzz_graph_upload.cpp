// libFuzzer target: captured graphs on a worker (worker/graph.hpp). The input is a batch
// whose interesting commands are GraphUpload (a nested program, checked once), GraphReplay
// and GraphFree, run by a real worker::Session (node 0 of 2, one executor thread) that
// already holds tensors, streams and an event the uploads may name; then the harness
// replays every graph the batch uploaded, answers their cross-node waits with this
// replay's tokens (graph_token()) and feeds their peer messages back as node 1's.
//
// Input layout (everything after the prefix is the header frame):
//   byte 0   bits 0-2: replays the harness runs after the batch (0..7); bit 3: free every
//            uploaded graph at the end and check that the graphs hold no memory any more;
//            bit 4: answer each replay's cross-node waits (a WaitRemote or RecvPeer token
//            of the program, from node 1, with a payload of the right size for a copy);
//            bit 5: feed the session's peer messages back (node 0's to node 1 come back)
//   rest     frame 0, a batch (no payload frames)
//
// What counts as a finding: a crash, a sanitizer report, an exception other than
// dtr::Error escaping, a message the session emits that our own decoder rejects, a session
// that does not go idle within 30 s, and graph memory left after every graph was freed
// (when the Stats barrier can answer: a stream parked for good holds it back).
// Size caps as fuzz_worker_batch's (tests/fuzz/budget.hpp), each program followed at every
// replay.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "budget.hpp"
#include "dtr/error.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"
#include "worker/session.hpp"

namespace {

using namespace dtr;
using namespace dtr::protocol;
using fuzz::Budget;
using fuzz::safe_numel;

constexpr uint8_t kFree = 1 << 3;
constexpr uint8_t kAnswer = 1 << 4;
constexpr uint8_t kLoopBack = 1 << 5;
constexpr auto kIdleTimeout = std::chrono::seconds(30);
constexpr uint64_t kSession = 42;

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_graph_upload: FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// The tensors, streams and event the session holds before the input (make_seeds.cpp's
// seeds name them): ids 1 to 6, streams 1 and 2, event 9 recorded on stream 1.
std::vector<Command> preamble() {
  auto make = [](OpId op, TensorId out, Shape shape, DType dtype, std::vector<TensorId> in = {}) {
    cmd::RunOp c{.op = op, .out = out};
    for (int64_t d : shape) c.attrs.ints.push_back(d);
    c.attrs.dtype = dtype;
    c.attrs.scalars[0] = Scalar(1.5);
    for (TensorId id : in) c.inputs.push_back(id);
    return c;
  };
  cmd::RunOp t = make(OpId::transpose, 6, {}, DType::Float32, {2});
  t.attrs.ints = {0, 1};
  t.attrs.scalars[0] = Scalar();
  return {make(OpId::full, 1, {4}, DType::Float32), make(OpId::full, 2, {2, 3}, DType::Float32),
          make(OpId::full, 3, {3}, DType::Int64),   make(OpId::full, 4, {}, DType::Float32),
          make(OpId::full, 5, {4}, DType::Bool),    t,
          cmd::CreateStream{.stream = 1},           cmd::CreateStream{.stream = 2},
          cmd::Record{.stream = 1, .event = 9}};
}
void declare_preamble(Budget& b) {
  b.declare(1, TensorMeta::contiguous(DType::Float32, {4}));
  b.declare(2, TensorMeta::contiguous(DType::Float32, {2, 3}));
  b.declare(3, TensorMeta::contiguous(DType::Int64, {3}));
  b.declare(4, TensorMeta::contiguous(DType::Float32, {}));
  b.declare(5, TensorMeta::contiguous(DType::Bool, {4}));
  TensorMeta t = TensorMeta::contiguous(DType::Float32, {3, 2});
  t.strides = {1, 3};
  b.declare(6, t);
}

// DTR_FUZZ_VERBOSE=1 prints the failures the session reports (for checking seeds by hand).
const bool g_verbose = std::getenv("DTR_FUZZ_VERBOSE") != nullptr;

struct Harness {
  std::mutex mu;
  std::vector<worker::Outgoing> peer_messages;
  int64_t graph_bytes = -1;  // the last Stats reply's

  void on_emit(worker::Outgoing&& o) {
    try {
      if (o.peer < 0) {
        Reply r = decode_reply(o.header, o.payloads.size());
        if (const auto* stats = std::get_if<reply::Stats>(&r))
          graph_bytes = stats->stats.graph_bytes;
        if (const auto* sync = std::get_if<reply::Sync>(&r); sync && g_verbose)
          for (const RemoteFailure& f : sync->failures)
            std::fprintf(stderr, "  failed %%%llu %s: %s\n",
                         static_cast<unsigned long long>(f.tensor), f.op.c_str(),
                         f.message.c_str());
      } else {
        decode_peer_notify(o.header);
        std::lock_guard lock(mu);
        if (peer_messages.size() < 64) peer_messages.push_back(std::move(o));
      }
    } catch (const ProtocolError& e) {
      finding(std::string("the session emitted a message our decoder rejects: ") + e.what());
    }
  }
};

void run(worker::Session& s, std::vector<Command> commands) {
  auto b = std::make_shared<Batch>();
  b->commands = std::move(commands);
  s.run(b, {});
  if (!s.wait_idle(std::chrono::duration_cast<std::chrono::milliseconds>(kIdleTimeout)))
    finding("the session did not go idle (a lost wake-up or a deadlock?)");
}

// Node 1's notifications of replay `replay`'s cross-node waits in `program`.
void answer(worker::Session& s, const GraphProgram& program, uint64_t replay) {
  if (!program) return;
  for (const Command& c : program->commands) {
    PeerNotify n;
    n.session = kSession;
    n.from_node = 1;
    if (const auto* w = std::get_if<cmd::WaitRemote>(&c)) {
      n.token = graph_token(w->token, replay);
      s.notify(n);
    } else if (const auto* r = std::get_if<cmd::RecvPeer>(&c)) {
      n.token = graph_token(r->token, replay);
      int64_t numel = safe_numel(r->meta);
      if (numel < 0 || numel > (int64_t{1} << 20)) continue;
      auto bytes = std::make_shared<std::vector<char>>(static_cast<size_t>(numel) *
                                                       element_size(r->meta.dtype));
      worker::PayloadFrame f{bytes->data(), bytes->size(), bytes};
      s.notify(n, &f);
    }
  }
}

void loop_back(worker::Session& s, Harness& h) {
  std::vector<worker::Outgoing> msgs;
  {
    std::lock_guard lock(h.mu);
    msgs.swap(h.peer_messages);
  }
  for (const worker::Outgoing& o : msgs) {
    PeerNotify n = decode_peer_notify(o.header);
    n.from_node = 1;
    if (o.payloads.empty()) {
      s.notify(n);
    } else {
      auto keep = std::make_shared<local::Tensor>(o.payloads[0]);
      worker::PayloadFrame f{
          keep->raw_data(), static_cast<size_t>(keep->numel()) * element_size(keep->dtype()), keep};
      s.notify(n, &f);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t control = data[0];
  const int replays = control & 7;
  std::string_view header(reinterpret_cast<const char*>(data) + 1, size - 1);
  Batch batch;
  try {
    batch = decode_batch(header, 0);
  } catch (const ProtocolError&) {
    return 0;  // rejected: the worker answers with a ProtocolError reply and runs nothing
  }
  // The graphs the batch uploads, in order, with their programs.
  std::vector<std::pair<uint64_t, GraphProgram>> graphs;
  std::set<uint64_t> seen;
  for (const Command& c : batch.commands)
    if (const auto* u = std::get_if<cmd::GraphUpload>(&c))
      if (seen.insert(u->graph).second) graphs.emplace_back(u->graph, u->program);
  {
    Budget budget;
    declare_preamble(budget);
    if (!budget.follow(batch, {})) return 0;
    for (int k = 0; k < replays; ++k)
      for (const auto& [id, program] : graphs)
        if (!budget.follow_replay(id)) return 0;
  }

  Harness h;
  worker::SessionOptions options;
  options.threads = 1;
  options.collective_timeout = std::chrono::milliseconds(50);
  auto session = std::make_unique<worker::Session>(
      [&h](worker::Outgoing&& o) { h.on_emit(std::move(o)); }, options);
  session->setup(0, 2, kSession);
  try {
    run(*session, preamble());
    run(*session, batch.commands);
    // Replays after those of the batch: numbered on from the last one it ran (a wrong
    // number is refused, which is fine too).
    std::vector<uint64_t> next(graphs.size(), 1);
    for (size_t i = 0; i < graphs.size(); ++i)
      for (const Command& c : batch.commands)
        if (const auto* r = std::get_if<cmd::GraphReplay>(&c))
          if (r->graph == graphs[i].first && r->replay >= next[i] && r->replay < (1ull << 62))
            next[i] = r->replay + 1;
    for (int k = 0; k < replays; ++k) {
      for (size_t i = 0; i < graphs.size(); ++i) {
        run(*session, {cmd::GraphReplay{.graph = graphs[i].first, .replay = next[i]}});
        if (control & kAnswer) answer(*session, graphs[i].second, next[i]);
        ++next[i];
      }
      if (control & kLoopBack) loop_back(*session, h);
      run(*session, {cmd::Sync{.request = 1}});
    }
    if (control & kFree) {
      std::vector<Command> frees;
      for (const auto& [id, program] : graphs) frees.push_back(cmd::GraphFree{.graph = id});
      frees.push_back(cmd::Stats{.request = 2});
      run(*session, std::move(frees));
      // No reply (-1) when a stream is parked for good (a wait nobody answers): Stats is a
      // barrier over every stream.
      if (h.graph_bytes > 0)
        finding("graph memory left after every graph was freed: " + std::to_string(h.graph_bytes) +
                " bytes");
    }
  } catch (const Error&) {
    // Not expected (the session reports failures as replies), but a dtr::Error is a
    // clean rejection, not a memory error.
  }
  session.reset();
  return 0;
}
