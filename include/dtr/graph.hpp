// Captured graphs: record the commands a master issues once, then replay them with one
// small command per node (as torch.cuda.graph / CUDAGraph.replay() do on one device).
//
//   dtr::Graph step = dtr::capture([&] {        // recorded and checked, not run
//     auto h = x.matmul(w1).relu();
//     auto y = h.matmul(w2);
//     loss.copy_(((y - t) * (y - t)).mean());
//     dtr::all_reduce(grads, dtr::ReduceOp::Avg);
//   });
//   for (int i = 0; i < 1000; ++i) step.replay();   // returns at once
//
// What is recorded: every command the calling thread issues inside the function, for any
// node: ops (shape and dtype rules run at capture, at the line that issues the op, as in
// eager mode), views, copies between nodes and devices, master-issued collectives, event
// records and stream waits (across nodes too), each on the stream that is current for it.
// Nothing runs while capturing; each node receives its part of the graph once, when
// capture() returns, and checks it whole (ids, shapes, dtypes, streams, events, peers).
//
// Binding, as in CUDA graphs. Tensors that existed before the capture and that the graph
// reads or writes are its inputs and outputs: they stay where they are, and you update
// them in place between replays (`x.copy_(dtr::dist_send(batch))`, `x.fill_(0)`). Tensors
// made inside the capture are the graph's temporaries: they live on their workers for the
// graph's life (memory_stats() reports them as graph_bytes); one whose handle you keep after
// the capture holds the latest replay's value (overwritten by the next replay; reading it
// before the first replay fails, saying so).
//
// Ordering: a replay's commands run on their nodes and streams as the same commands issued
// eagerly would, after what was issued before replay() and before what is issued after it;
// replays of one graph run one after the other. Random ops draw the same values at every
// replay (their seed and offset are recorded).
//
// Lifetime and safety: a graph holds what it uses alive (its inputs, streams and events),
// on the master and on the workers; a replay touches nothing else. replay() after a node of
// the graph was lost throws dtr::WorkerLost, after reset() InvalidArgument. A failing op in
// a replay fails its dependents as in eager mode; the RemoteError at the next sync point
// names the op and the replay ("... (replay 7 of graph 3, command 12 of its program here)").
// Sync points inside the capture (to_local, item, synchronize, dist_send, memory_stats,
// event and stream queries) throw InvalidArgument naming the call; captures do not nest,
// and replay() inside a capture throws too.
//
// CUDA: a worker turns the runs of device ops of a stream into CUDA graphs (stream
// capture) from the second replay on, so such a run is one launch.
//
// Thread safety: capture() records the calling thread's commands only (other threads'
// commands go out as usual meanwhile). A Graph is a shared handle; replay() and reset()
// may be called from any thread (replays of one graph are numbered in the order of their
// calls).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "dtr/distributed.hpp"

namespace dtr {

namespace detail {
struct GraphHandle;
class Capture;
}  // namespace detail

class Graph {
 public:
  Graph() = default;  // undefined; replay() on it throws InvalidArgument
  bool defined() const { return handle_ != nullptr; }
  uint64_t id() const;
  // Runs the graph again: one command per node, returns at once.
  void replay();
  // How many times replay() was called.
  uint64_t replays() const;
  // The nodes with a part of the graph, and the commands recorded for each.
  std::vector<int> nodes() const;
  size_t commands(int node) const;
  // Frees the graph on its workers now (its temporaries, what it holds); later replay()s
  // throw. The last handle's destruction does the same.
  void reset();

 private:
  explicit Graph(std::shared_ptr<detail::GraphHandle> h) : handle_(std::move(h)) {}
  detail::GraphHandle& handle(std::string_view what) const;
  friend class detail::Capture;
  std::shared_ptr<detail::GraphHandle> handle_;
};

// Runs `fn` with this thread's commands recorded into a graph instead of sent, and
// uploads each node's part. When `fn` throws, the exception propagates and nothing of the
// capture runs (tensors made inside it fail when read).
Graph capture(const std::function<void()>& fn);
// Whether this thread is inside capture().
bool is_capturing();

}  // namespace dtr
