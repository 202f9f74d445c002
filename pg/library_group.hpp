// Internal: LibraryGroup, the half of the gloo and mpi backends that does not depend on the
// library. A subclass runs one collective with the library and posts single messages; this
// class provides the rest, the same for both:
//
//  - Collectives run one at a time in issue order on a per-group executor thread, or on the
//    calling thread when the call blocks and nothing of the group is queued (as zmq does).
//  - Verification (ProcessGroupOptions::verify_collectives): before each collective the
//    ranks all-gather its signature (op, root, ReduceOp, dtype, element count;
//    pg/signature.hpp) with the library itself, so that mismatched calls fail on every rank
//    with ShapeError / DTypeError / InvalidArgument naming both ranks and values, and the
//    group stays usable. Without it a mismatch is the library's to handle (see
//    docs/process_groups.md): gloo aborts the process, MPI may truncate or wait until the
//    timeout.
//  - Avg: the subclass sums; the result is divided here.
//  - Failures: a library error or a timeout marks the group broken (neither library can
//    cancel a collective in flight, and gloo closes every connection of its context on a
//    timeout): later calls fail at once naming the first failure.
//  - Point to point over the library's tagged messages. Terms: a *header* is a fixed
//    kHeaderBytes record (magic, dtype, element count, payload id, sender rank) sent on the
//    header channel of the user's tag; a *payload* of up to kInlineBytes travels in the
//    same message, right after the header (one message for small tensors); a larger
//    payload follows as its own message on a payload channel whose id the header names
//    (unique per sender and destination, so that concurrent receives on one tag never take
//    each other's payloads). The receiver checks the header against its tensor before any
//    byte reaches it: a mismatch fails with ShapeError / DTypeError naming both, the payload
//    is drained and the channel stays usable. Order per (sender, receiver, tag) is the
//    library's (both match messages of one channel in posting order).
//
// Thread safety: as pg::Backend (any thread). Subclass hooks are called from the executor
// thread, a blocking caller, or a pool thread, as documented on each.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pg/backend.hpp"
#include "pg/serial_executor.hpp"
#include "pg/task_pool.hpp"
#include "pg/work_state.hpp"

namespace dtr::pg {

// A message channel of a group: the header channel of a user tag, or one payload channel.
struct Channel {
  enum class Kind : uint8_t { Header, Payload };
  Kind kind = Kind::Header;
  uint64_t id = 0;  // the user's tag (as uint32 for gloo), or the payload id
};

// One posted send or receive of the library.
class Transfer {
 public:
  virtual ~Transfer() = default;
  // Waits until the message has gone (send) or arrived (receive) and returns the peer's
  // group rank. Throws TimeoutError at the deadline, TransportError on a library error or
  // after abort() ("the process group was shut down").
  virtual int wait(Clock::time_point deadline) = 0;
  // Ends a wait() in progress on another thread (shutdown). Idempotent.
  virtual void abort() = 0;
};

// Equally sized blocks (a collective's list of tensors) as one contiguous buffer, which the
// libraries need: the blocks' own memory when they lie back to back in one storage (the
// _into_tensor / _tensor forms), else a staging copy.
class FlatBlocks {
 public:
  // `copy_in`: fill a staging copy with the blocks' values (inputs).
  FlatBlocks(const std::vector<local::Tensor>& blocks, bool copy_in);
  char* data() const { return data_; }
  // Copies a staging copy back to the blocks (outputs); nothing when they were used directly.
  void copy_out(const std::vector<local::Tensor>& blocks) const;

 private:
  char* data_ = nullptr;
  std::shared_ptr<void> staging_;
};

class LibraryGroup : public Backend {
 public:
  // Bytes of a point-to-point header, and of the payload that travels inside it.
  static constexpr size_t kHeaderBytes = 64;
  static constexpr size_t kInlineBytes = 16 << 10;

  LibraryGroup(std::string name, int rank, std::vector<int> world_ranks,
               const ProcessGroupOptions& options);
  ~LibraryGroup() override;

  std::string_view name() const override { return name_; }
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  const std::vector<int>& world_ranks() const override { return members_; }

  Work isend(const local::Tensor& tensor, int dst, int tag, bool blocking) override;
  Work irecv(const local::Tensor& tensor, int src, int tag, bool blocking) override;
  Work collective(CollectiveArgs args) override;
  void shutdown() override;

 protected:
  const ProcessGroupOptions& options() const { return options_; }
  // Stops the executor and the pool (their tasks use the subclass): call first thing in the
  // subclass's destructor.
  void stop_threads();
  // Runs `body` in the group's collective order (on the executor, or inline when idle) and
  // waits for it; for a subclass's new_group, which is a collective of the library.
  void run_in_order(const std::string& what, const std::function<void()>& body);
  // The group cannot be used any more (a library failure): later calls fail naming `why`.
  void mark_broken(const std::string& why);
  // Throws when the group is shut down or broken; `what` names the operation.
  void check_usable(const std::string& what) const;
  bool closing() const { return closing_.load(); }
  const std::atomic<bool>& closing_flag() const { return closing_; }

  // ---- the subclass's part ----
  // Runs one collective (arguments as in CollectiveArgs; Avg as Sum) and returns when it is
  // done on this rank. `tag` is unique among the group's collectives. Executor thread or a
  // blocking caller. Throws dtr errors naming `what`.
  virtual void run(CollectiveArgs& args, uint32_t tag, const std::string& what,
                   Clock::time_point deadline) = 0;
  // Posts one message (any thread; posts on one channel are matched in posting order).
  // `keepalive` owns `data` (and what else the operation holds); the transfer keeps it
  // until its wait() has returned, and for as long after as the library may still touch
  // `data` (a send MPI cannot cancel).
  virtual std::shared_ptr<Transfer> post_send(int dst, Channel channel, const void* data,
                                              size_t bytes, std::shared_ptr<void> keepalive) = 0;
  // src: a group rank or kAnySource. The message may be shorter than `bytes`.
  virtual std::shared_ptr<Transfer> post_recv(int src, Channel channel, void* data, size_t bytes,
                                              std::shared_ptr<void> keepalive) = 0;
  // Why the library cannot carry `tag` ("backend X does not support tag ..."), or empty
  // when it can.
  virtual std::string unsupported_tag(int tag) const {
    (void)tag;
    return {};
  }
  // Releases the library's connections (shutdown, after pending transfers were aborted).
  virtual void close_library() = 0;

 private:
  struct P2PName;
  struct RecvOp;
  struct SendOp;
  // Runs one collective; returns its error (null on success). `what`: the call's name.
  std::exception_ptr execute(CollectiveArgs& args, uint64_t seq, const std::string& what);
  void verify(const CollectiveArgs& args, uint64_t seq, const std::string& what,
              Clock::time_point deadline);
  // Registers a transfer so that shutdown() can abort it; returns it shared.
  std::shared_ptr<Transfer> track(std::shared_ptr<Transfer> t);
  void untrack(const std::shared_ptr<Transfer>& t);
  // Waits for `t` and untracks it (the transfer marks the group broken where its library
  // cannot go on after a failure).
  int await(const std::shared_ptr<Transfer>& t, Clock::time_point deadline, P2PName& what);
  // Throws when the group is shut down or broken, or the library cannot carry `tag`.
  void check_p2p(P2PName& what, int tag) const;
  // Returns the sender's group rank.
  int finish_recv(RecvOp& op);
  void finish_send(SendOp& op);
  // Runs `body` (a point-to-point wait, returning the peer's rank or -1) inline when
  // `blocking`, else on the pool; the Work completes with it. `what`: the call's name.
  template <typename Body>
  Work complete_with(bool blocking, P2PName& what, Body body);

  const std::string name_;
  const int rank_;
  const std::vector<int> members_;
  const ProcessGroupOptions options_;
  const std::string call_suffix_;  // " on rank 1 of a group of 4 (mpi)", for collective_name()

  mutable std::mutex m_;  // seq_, broken_, transfers_
  uint64_t seq_ = 0;
  std::string broken_;
  std::atomic<bool> is_broken_{false};  // broken_ is set (read without m_)
  std::string inline_what_;  // the name of the call running inline (guarded by exec_'s gate)
  std::vector<std::shared_ptr<Transfer>> transfers_;  // pending, in no order
  std::vector<std::atomic<uint64_t>> payload_ids_;    // next payload id per destination
  // Completed states of successful blocking receives, by sender (Work::source_rank()).
  std::vector<std::shared_ptr<Work::State>> done_from_;
  std::atomic<bool> closing_{false};

  SerialExecutor exec_;
  TaskPool pool_;
};

}  // namespace dtr::pg
