// Captured graphs on a worker (dtr::capture, include/dtr/graph.hpp): a node's part of a
// graph, checked once when it is uploaded (cmd::GraphUpload), and its replays
// (cmd::GraphReplay). The session's handlers and its part runner (worker/graph_commands.cpp)
// use what is here.
//
// Terms (the code uses exactly these names):
//   program    the part's commands as the master issued them (cmd::GraphUpload::program);
//   step       one command of the program, resolved at upload: the part (stream) it runs
//              on, where each tensor it reads comes from, the temporary it makes, its event,
//              group and token;
//   input      a tensor the program reads that existed before the upload (declared with its
//              metadata); the graph holds its slot for its life, whatever the master frees;
//   temporary  a tensor a step makes; it is the graph's. An *output* is a temporary the
//              master holds a handle of: its id is bound in the session's table to the
//              latest replay's slot;
//   part       the steps of one stream, in program order; a replay runs each part as one
//              task on its stream, whose cursor says how far it got when it must wait;
//   run        one replay: a fresh slot per temporary (so readiness and failures are per
//              replay, as in eager mode), the record generation of each event step, the
//              cross-node wait of each token (graph_token(): unique per replay).
//
// Binding, as in CUDA graphs: a temporary an op makes is *bound* at its first successful
// run (the tensor it made, or the view it is) and every later replay writes that memory in
// place, so it lives for the graph's life and a replay allocates nothing for it; a small CPU
// elementwise op then runs as a prepared kernel (tensor/prepared.hpp). Temporaries of other
// steps (a copy from another node or device, a collective's result) are made anew by each
// replay and live until the next. Replays of one graph run one after the other on a node:
// run k's parts start once every part of run k - 1 is done, so no replay writes a bound
// tensor while the previous one reads it. A master-held output is overwritten by the next
// replay (read it first, as a CUDA graph's outputs).
//
// Safety: an upload is checked whole before anything is kept (inputs exist and are declared
// with metadata matching theirs; temporaries are new ids made once, read only after they
// are made; streams, events, peers, tokens, devices and groups exist; the shape rules run
// over the program from the declared metadata). An input that was not ready at upload has
// its metadata compared when a replay first reads it. A replay touches only what the steps
// resolved: the graph's slots, streams, events and groups. A replay after a node the graph
// talks to was lost, or after one of its streams was destroyed, is refused with the reason.
//
// Thread safety: Graphs, build_graph(), start_run() and Graph::last_replay are the dispatch
// thread's. A part's steps run on its stream's thread, one replay after another; a step's
// prepared kernel and its temporary's binding are written only there (the binding under
// `mu`, which graph_memory() reads under too). `mu` also guards `finished`, `waiting`,
// `current` and `broken`. An input check's `done` is atomic (parts of one replay may read an
// input at once). Everything else is fixed at upload.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "protocol/commands.hpp"
#include "tensor/prepared.hpp"
#include "worker/collectives.hpp"
#include "worker/events.hpp"
#include "worker/outbox.hpp"
#include "worker/streams.hpp"
#include "worker/tensor_table.hpp"

namespace dtr::worker::detail {

// Where a step's tensor comes from: an input's slot, or temporary `temp` of the run.
struct GraphOperand {
  SlotPtr input;
  int32_t temp = -1;
  int32_t check = -1;  // the input's metadata check (Graph::checks), -1 when done at upload
};

struct GraphStep {
  const protocol::Command* cmd = nullptr;  // in Graph::program
  protocol::CmdType type = protocol::CmdType::RunOp;
  size_t index = 0;  // in the program
  uint32_t part = 0;
  std::vector<GraphOperand> in;
  int32_t out = -1;    // the temporary it makes
  int32_t event = -1;  // Graph::events
  int32_t slot = -1;   // GraphRun::targets (Record, WaitEvent) or ::remotes (WaitRemote, RecvPeer)
  GroupPtr group;      // Collective
  int64_t elements = 0;  // an op's output (or in-place target) elements
  // The part's thread only: a prepared kernel once every operand is bound, and whether it
  // was tried.
  local::PreparedKernel fast;
  bool tried_fast = false;
};

struct GraphTemp {
  protocol::TensorId id = protocol::kNoTensor;
  TensorMeta meta;        // from the shape rules at upload
  bool output = false;    // the master holds a handle: bound to its id in the table
  bool bindable = false;  // an op makes it (its memory is bound)
  // Written once, by the part's thread, under Graph::mu: `bound` and `aliases` first, then
  // `bound_` (release); whoever sees bound() true (acquire) may read them without the lock.
  bool aliases = false;  // a view of input 0 (no kernel on later runs)
  local::Tensor bound;
  bool is_bound() const { return bound_.load(std::memory_order_acquire); }
  std::atomic<bool> bound_{false};
};

// An input whose metadata is compared with the declared one when a replay first reads it.
struct GraphInputCheck {
  protocol::TensorId id = protocol::kNoTensor;
  SlotPtr slot;
  TensorMeta declared;
  std::atomic<bool> done{false};
};

// A run of a part's steps that are all CUDA element ops of one device (unary, binary, clamp
// and mutate ops, views): from the first replay in which everything it touches is fixed
// (inputs and bound temporaries) it is captured into a CUDA graph (tensor/device_runtime.hpp,
// cuda::Graph), and each replay launches it once. One that cannot be captured (an op that
// allocates, a capture CUDA refuses) runs step by step for good, `refused` saying why.
struct CudaSegment {
  uint32_t begin = 0;  // [begin, end) in GraphPart::steps
  uint32_t end = 0;
  int device = 0;
  // The part's thread only.
  std::unique_ptr<cuda::Graph> graph;
  std::string refused;
};

struct GraphPart {
  StreamQueuePtr stream;
  std::vector<uint32_t> steps;        // Graph::steps, in program order
  std::vector<CudaSegment> segments;  // in order, not overlapping
  // When the whole part may run at once on the dispatch thread (CPU ops other than matrix
  // products, on at most GraphEnv::inline_elements elements each, and records): the
  // elements its ops write, plus one per op; -1 otherwise.
  int64_t inline_work = -1;
};

struct GraphRun;

struct Graph {
  uint64_t id = 0;
  protocol::GraphProgram program;  // the commands the steps point into
  std::vector<GraphStep> steps;
  std::deque<GraphPart> parts;
  std::deque<GraphInputCheck> checks;
  std::vector<SlotPtr> inputs;  // every declared input, held for the graph's life
  std::deque<GraphTemp> temps;  // a deque: a temp's atomic does not move
  std::vector<EventPtr> events;
  std::vector<uint32_t> dispatch_steps;  // steps with work at each replay's dispatch
  std::vector<uint32_t> peers;           // the nodes the program talks to
  size_t targets = 0;                    // GraphRun::targets' size
  size_t remotes = 0;                    // GraphRun::remotes' size
  size_t running_parts = 0;              // parts with steps to run

  uint64_t last_replay = 0;  // dispatch thread: the latest replay started
  std::mutex mu;
  std::string broken;     // why no replay may start any more (a lost node, a lost stream)
  uint64_t finished = 0;  // every part of replays up to this one has run
  std::vector<StreamQueuePtr> waiting;  // parts of the next replay, parked until then
  std::shared_ptr<GraphRun> current;    // the latest replay (its temporaries live until the next)
  // The device work of replays with an odd and an even number (events on the CUDA streams
  // their parts used), waited for by the next replay's parts.
  std::vector<std::shared_ptr<cuda::Event>> device_done[2];
};
using GraphPtr = std::shared_ptr<Graph>;

struct GraphRun {
  GraphPtr graph;
  uint64_t replay = 0;
  std::vector<SlotPtr> temps;
  std::vector<uint64_t> targets;
  std::vector<RemoteWaitPtr> remotes;
  std::vector<std::string> remote_problems;  // why a remote wait could not be made
  struct PartState {
    uint32_t cursor = 0;
    uint32_t segment = 0;  // the next of the part's CUDA segments
    bool started = false;
  };
  std::vector<PartState> parts;
  std::atomic<size_t> parts_left{0};
};
using GraphRunPtr = std::shared_ptr<GraphRun>;

// What an upload and a replay's dispatch resolve against (the session's parts).
struct GraphEnv {
  TensorTable& table;
  Streams& streams;
  EventTable& events;
  Tokens& tokens;
  const Groups& groups;
  Outbox& outbox;
  int devices = 0;
  int64_t inline_elements = 0;  // the most elements an op run at dispatch may write
};

// Checks upload `c` and resolves its program; null with *problem set ("command 3 (add)
// reads tensor %9, which ...") when anything is wrong, and then nothing is kept (but events
// the program records may have been made).
GraphPtr build_graph(const protocol::cmd::GraphUpload& c, GraphEnv env, std::string* problem);

// Starts replay `replay` of `g` at dispatch: null with *problem set when it may not run
// (numbering, a lost node, a destroyed stream: the graph is then broken for good). Makes
// the run's temporaries, issues its records, sends or arms its tokens, and binds the
// master-held outputs to the run's slots.
GraphRunPtr start_run(const GraphPtr& g, uint64_t replay, GraphEnv env, std::string* problem);
// `failure` for every master-held output of `g` (a replay that did not run).
void fail_outputs(Graph& g, TensorTable& table, const Failure& failure);

// A part of run `replay` may start: every part of the previous replay has run. Otherwise
// false, and `park` (when given) is woken once it has.
bool previous_done_or_park(Graph& g, uint64_t replay, const StreamQueuePtr* park);
// Part `part` of `run` has run all its steps; the run's last part lets the next replay start.
void finish_part(GraphRun& run, uint32_t part);

// ---- a part's thread, while it runs a step of run `run` ----
// The slot of operand `o` in `run`.
inline Slot* operand_slot(const GraphRun& run, const GraphOperand& o) {
  return o.input ? o.input.get() : run.temps[static_cast<size_t>(o.temp)].get();
}
// Why an input of `st` does not match the metadata the graph was captured with ("" when it
// does, or is not ready to tell: failed); compared once per input.
std::string input_mismatch(Graph& g, const GraphStep& st, Slot* const* in);
// The op of `st` made `made` into its temporary `t`: bound for the graph's life, unless it
// is a view of a temporary that each replay makes anew.
void bind(Graph& g, const GraphStep& st, GraphTemp& t, const local::Tensor& made, const Slot& in0);
// Prepares `st`'s kernel once every tensor it touches is fixed (an input or a bound
// temporary) and ready; `c` its command, `in` its operands' slots.
void prepare_fast(Graph& g, GraphStep& st, const protocol::cmd::RunOp& c, Slot* const* in);
// Runs CUDA segment `seg` of `part` in `run` as one launch of its CUDA graph (captured at
// the first chance): kRan; kParked when an operand made before it is not ready (`self`
// woken then); kStepwise when it cannot run this way now (not all bound yet, an operand
// failed) or ever (refused): its steps then run one by one.
enum class SegmentOutcome { kRan, kParked, kStepwise };
SegmentOutcome run_cuda_segment(StreamQueue& s, const StreamQueuePtr& self, GraphRun& run,
                                const GraphPart& part, CudaSegment& seg, FailureLog& failures);
// CUDA order between replays: a part of run `replay` makes its CUDA streams wait for the
// device work every part of the previous replay queued (begin), and notes its own (end).
void begin_device_work(Graph& g, uint64_t replay, CudaStreams& mine);
void end_device_work(Graph& g, uint64_t replay, CudaStreams& mine);

// The graph memory (bytes of distinct storages, tensors) held on `device` (-1: the host):
// bound temporaries and the latest replay's other temporaries. Any thread.
struct GraphMemory {
  int64_t bytes = 0;
  int64_t tensors = 0;
};
GraphMemory graph_memory(const std::vector<GraphPtr>& graphs, int device);

// The session's graphs by id, and the uploads refused (a replay names why).
class Graphs {
 public:
  // The graph, or null with *problem saying why ("was refused at upload: ...", "does not
  // exist on this worker").
  GraphPtr find(uint64_t id, std::string* problem) const;
  bool contains(uint64_t id) const { return graphs_.count(id) || refused_.count(id); }
  size_t size() const { return graphs_.size() + refused_.size(); }
  void add(GraphPtr g);
  void refuse(uint64_t id, std::string why) { refused_[id] = std::move(why); }
  // Drops the graph (its replays still queued or running keep it until they are done).
  bool erase(uint64_t id);
  std::vector<GraphPtr> all() const;
  // The session is ending: parked parts are forgotten and every graph dropped.
  void clear();

 private:
  std::unordered_map<uint64_t, GraphPtr> graphs_;
  std::unordered_map<uint64_t, std::string> refused_;
};

}  // namespace dtr::worker::detail
