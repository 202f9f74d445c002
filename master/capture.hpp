// Internal: the recording side of dtr::capture (include/dtr/graph.hpp). While a thread
// captures, MasterSession::enqueue hands its commands here (one well-predicted branch on the
// session's capture count for everyone else): commands a graph may hold are recorded in the
// node's part, bookkeeping (streams, events, groups) goes out as usual, a Free of a tensor
// the capture made is the graph's business (dropped: the graph owns that tensor), and
// anything else is refused. The handles the recorded commands use (tensors that existed
// before, streams, events) are pinned, so that none is freed before the graph is.
//
// Thread safety: a Capture is made, filled and finished by its thread; `mu_` guards what
// other threads may look at while it records (made_/dropped_, for a Free of one of its
// tensors issued elsewhere).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "dtr/graph.hpp"
#include "protocol/commands.hpp"

namespace dtr::detail {

class MasterSession;

// What a Graph holds: its id and nodes, its replay count, the handles it keeps alive.
struct GraphHandle {
  std::shared_ptr<MasterSession> session;
  uint64_t id = 0;
  std::vector<int> nodes;
  std::vector<size_t> commands;  // per node of `nodes`
  bool ordered = false;          // holds collectives: replays go out in the session's order
  bool small = false;            // only small work: a replay wakes no thread (Wake::kLazy)
  std::mutex mu;                 // guards replays, freed, pins
  uint64_t replays = 0;
  bool freed = false;
  std::vector<DistributedTensor> tensors;      // inputs
  std::vector<std::shared_ptr<void>> handles;  // streams, events
  // Frees the graph on its nodes (once) and lets go of what it holds.
  void free();
  ~GraphHandle();
};

class Capture {
 public:
  Capture(std::shared_ptr<MasterSession> session, uint64_t graph);
  ~Capture();
  Capture(const Capture&) = delete;
  Capture& operator=(const Capture&) = delete;

  // The calling thread's capture into `s`, or null.
  static Capture* active(const MasterSession& s);
  // Whether the calling thread captures (into any session).
  static bool any();

  // A command for `node`: true when the capture took it (recorded or dropped), false when
  // it goes out as usual. Throws InvalidArgument for a command a graph cannot hold.
  // `small`: the command is small work (MasterSession::Wake::kLazy).
  bool take(int node, const protocol::Command& c, bool small);
  bool take(int node, const protocol::cmd::RunOp& c, bool small);
  // Another thread frees `id`: true when it is this capture's tensor (the graph owns it).
  bool take_free(uint64_t id);
  // A tensor a recorded command uses: when it existed before, it is an input of its node's
  // part, pinned with its metadata.
  void pin(const DistributedTensor& t);
  // A stream or event handle a recorded command uses.
  void pin(std::shared_ptr<void> handle);

  // Ends the recording on this thread (idempotent).
  void stop();
  // Uploads each node's part and returns the graph. Throws InvalidArgument, uploading
  // nothing, when a part's upload would not fit its worker's messages.
  Graph finish();

 private:
  void check_upload_size(int node, const protocol::cmd::GraphUpload& up) const;
  template <class C>
  void record(int node, const C& c, bool small);

  struct Part {
    std::vector<protocol::Command> commands;
    std::map<protocol::TensorId, TensorMeta> inputs;
    bool collectives = false;
  };
  std::shared_ptr<MasterSession> session_;
  uint64_t graph_;
  Capture* previous_ = nullptr;
  bool stopped_ = false;
  bool small_ = true;  // every recorded command is small work
  std::map<int, Part> parts_;
  std::vector<DistributedTensor> tensors_;
  std::vector<std::shared_ptr<void>> handles_;
  std::mutex mu_;                                     // guards made_ and dropped_
  std::unordered_map<protocol::TensorId, int> made_;  // the tensors the capture made, by node
  std::unordered_set<protocol::TensorId> dropped_;    // ... whose last handle went
};

// When the calling thread captures into `s`: pins `t` (a tensor a recorded command reads or
// writes) or `handle` (a stream or event it names). Cheap when nobody captures.
void pin_in_capture(const MasterSession& s, const DistributedTensor& t);
void pin_in_capture(const MasterSession& s, std::shared_ptr<void> handle);

}  // namespace dtr::detail
