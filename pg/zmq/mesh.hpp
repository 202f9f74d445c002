// Mesh: the ZeroMQ transport under every group of one ProcessGroup::create() — one ROUTER
// this rank binds (everything it receives arrives there), one DEALER per peer (everything
// it sends leaves there), an I/O thread that reads the ROUTER and files each message into
// a mailbox, and socket monitors that turn a closed connection into "rank N died".
//
// Limits: the ROUTER accepts frames of at most kMaxFrameBytes (ZeroMQ drops a connection
// that sends a bigger one before allocating it), the DEALERs, which receive nothing, at
// most kMaxControlFrameBytes. A message is kept only when it comes from a connection whose
// identity is the rank its header names and carries this job's token; its frames are
// checked against the header (check_frames) before anything reads them.
//
// Sends go straight from the calling thread (a mutex per DEALER), zero-copy: ZeroMQ holds
// a reference to the sender's memory (kept alive by a shared_ptr) and a SendTracker
// counts the frames it has not yet released. Receives: collectives take() from a channel
// keyed by (group, sequence number); point-to-point receives are matched, in posting
// order, against messages in arrival order, as in MPI.
//
// The small-message path: a thread that runs a collective (a FastReader scope: the group's
// executor, or a blocking call running inline while the group is idle) reads the ROUTER
// itself while it waits in take(), a short spin then a bounded poll, instead of waiting for
// the I/O thread to read the message and wake it (two thread hand-offs per message). The
// ROUTER belongs to whoever holds router_m_: the I/O thread stays away from it while a
// FastReader scope exists and for a short grace after the last one ends (so that
// back-to-back calls find it free), unless a thread that is not reading waits for a
// message (it wakes the I/O thread). A reader files every message it reads, its own or
// not, exactly as the I/O thread does.
//
// Same-host point to point: a group whose members agreed on the same-host path registers
// its rings (add_rings, pg/zmq/p2p_ring.hpp), and its sends go through them (send_ring). The
// ROUTER's holder reads the rings with the ROUTER: in the reader's spin, and before it
// sleeps in poll() it sets the rings' bell, so that a peer's next record comes with a Ring
// message that wakes it. Records are filed as the ROUTER's point-to-point messages are.
//
// Thread safety: every public method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "dtr/process_group.hpp"
#include "pg/util.hpp"
#include "pg/work_state.hpp"
#include "pg/zmq/p2p_ring.hpp"
#include "pg/zmq/wire.hpp"
#include "security/curve.hpp"

namespace dtr::pg {

// Counts zero-copy frames ZeroMQ still holds. on_zero (if set) runs once when the count
// drops to zero after close() (for isend: completes the Work).
struct SendTracker {
  std::mutex m;
  std::condition_variable cv;
  int64_t pending = 0;
  bool closed = false;  // no more frames will be added
  std::function<void()> on_zero;
  void add() {
    std::lock_guard lock(m);
    ++pending;
  }
  void release();
  void close();
  bool idle() {
    std::lock_guard lock(m);
    return pending == 0;
  }
};

struct Incoming {
  WireHeader h;
  zmq::message_t payload;            // the payload's first (or only) frame
  std::vector<zmq::message_t> more;  // its further frames (payloads over kMaxFrameBytes)
  // Set when a payload by address could not be read on arrival (Mesh::stage_by_address):
  // the receive that takes this message fails with it (error_code: its class).
  std::string error;
  ErrCode error_code = ErrCode::Error;
  // A DataAt waiting for its receive: when it arrived, and whether the I/O thread is
  // copying its bytes now (Mesh::stage_waiting; a receive that matches it waits).
  Clock::time_point arrived{};
  bool staging = false;
  // Payload bytes in all frames (h.payload, checked on arrival).
  uint64_t bytes() const { return h.payload; }
  // Copies the payload (numel elements of dtype) to dst, frame by frame.
  void copy_to(void* dst, int64_t numel, DType dtype) const;
  // Makes the payload one frame (collectives read it as one block).
  void join();
};

// An outgoing payload: nothing, a zero-copy view of memory kept alive by `keepalive`, or a
// received message forwarded as is.
struct Payload {
  const void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> keepalive;
  std::shared_ptr<SendTracker> tracker;
  zmq::message_t* forward = nullptr;  // when set, sent instead of data (moved from)
};

// Messages read so far by FastReader threads and by I/O threads, and point-to-point
// payloads read by address, over every mesh of the process (for tests).
struct MeshReadCounts {
  uint64_t by_callers = 0;
  uint64_t by_io_threads = 0;
  uint64_t by_address = 0;
  uint64_t by_ring = 0;     // point-to-point messages read from shared-memory rings
  uint64_t rings_sent = 0;  // Ring messages sent to wake a peer that sleeps on its rings
  uint64_t spins_out = 0;   // blocking calls whose spin on the rings ran out (then slept)
};
MeshReadCounts mesh_read_counts();

// Turns an ErrCode and text into the matching dtr exception.
[[noreturn]] void throw_coded(ErrCode code, const std::string& text);
// Which ErrCode an exception maps to.
ErrCode code_of(const std::exception_ptr& e);

class Mesh {
 public:
  // Binds this rank's ROUTER (a "tcp://ip:*" style endpoint: the port may be * or 0).
  Mesh(int world_size, const ProcessGroupOptions& options, const std::string& bind_endpoint);
  ~Mesh();
  Mesh(const Mesh&) = delete;
  Mesh& operator=(const Mesh&) = delete;

  // The endpoint actually bound (with the port filled in).
  const std::string& bound_endpoint() const { return bound_; }
  // Connects to every peer, starts the I/O thread and waits (bounded by options.timeout)
  // until every peer has said hello.
  void connect(int rank, const std::vector<std::string>& endpoints, uint64_t token);

  int rank() const { return rank_; }
  int size() const { return world_; }
  const std::string& endpoint_of(int world_rank) const { return endpoints_[world_rank]; }
  const ProcessGroupOptions& options() const { return options_; }
  // Whether the mesh's links are CURVE (a cluster key).
  bool encrypted() const { return guard_->curve(); }
  // "rank 2 (tcp://10.0.0.3:41234)"
  std::string describe_rank(int world_rank) const;

  // Sends one message to world rank `dst`. Throws TransportError when the mesh is shut
  // down or dst is known dead.
  void send(int dst, WireHeader h, Payload payload);

  // -- collectives --
  // The next message from world rank `src` for (group, seq). Throws the Abort's error when a
  // rank aborted this collective, TransportError when src or any of `members` (world ranks)
  // died or left, TimeoutError at the deadline. `what` names the op for messages.
  // With `expect`, a message from any rank whose op, dtype, count, reduce op or root differ
  // from it is returned at once instead, so a mismatch is reported by the first rank that
  // sees one rather than by whichever rank happens to read from the odd one out.
  Incoming take(uint64_t group, uint64_t seq, int src, Clock::time_point deadline,
                const std::vector<int>& members, const std::string& what,
                const WireHeader* expect = nullptr);
  // Marks (group, seq) and everything before it done: later messages for them are dropped.
  void finish_collective(uint64_t group, uint64_t seq);
  // Tells every member but this rank that (group, seq) failed.
  void send_abort(uint64_t group, uint64_t seq, CommOp op, const std::vector<int>& members,
                  ErrCode code, const std::string& text);
  // Waits until the tracker has no frames in flight; throws like take() when one of
  // `dsts` dies or the deadline passes.
  void wait_sent(SendTracker& t, Clock::time_point deadline, const std::vector<int>& dsts,
                 const std::string& what);
  // Throws TransportError when one of `members` died (or left, with `left_counts`).
  void check_alive(const std::vector<int>& members, const std::string& what);

  // -- point to point --
  struct RecvRequest {
    uint64_t group = 0;
    uint64_t tag = 0;
    int src = kAnySource;      // world rank or kAnySource
    std::vector<int> members;  // world ranks of the group, group-rank order
    local::Tensor tensor;
    std::shared_ptr<Work::State> work;
    Clock::time_point deadline;
    std::string what;
    // The posting thread reads the ROUTER itself until this completes (serve_until).
    bool owner_reads = false;
  };
  void post_recv(RecvRequest req);
  // The small-message path of a blocking receive: reads the ROUTER on this thread (a
  // FastReader scope) until `work` is complete or `deadline` passes.
  void serve_until(Work::State& work, Clock::time_point deadline);
  // Registers a sent message so that a dead destination or the deadline fails its Work.
  void watch_send(std::shared_ptr<SendTracker> t, std::shared_ptr<Work::State> work, int dst,
                  Clock::time_point deadline, std::string what);

  // -- point-to-point payloads by address (ranks on one host; wire.hpp, DataAt) --
  // World rank r runs as process `pid` on this host, which a group's same-host agreement
  // proved this process may read: payloads r sends by address are read from it.
  void set_peer_pid(int r, int64_t pid);
  // Offers `t` to world rank dst by address: the returned payload goes to dst in a DataAt
  // message (send() or send_ring()); dst reads the bytes from this process and answers
  // Released, which completes `work`. The Work fails when dst dies or leaves, when the mesh
  // shuts down, or at `deadline` (nobody took the payload); the tensor's storage is held
  // until the release or dst's end either way, since dst may still read it. withdraw()
  // drops an offer whose message could not be sent.
  AddressPayload offer(int dst, const local::Tensor& t, std::shared_ptr<Work::State> work,
                       Clock::time_point deadline, std::string what);
  void withdraw(uint64_t offer);

  // -- point to point through shared memory (pg/zmq/p2p_ring.hpp) --
  // Group `group`'s rings, `members` its world ranks in group-rank order: from now on what
  // its peers write to this rank is read with the ROUTER's messages. remove_rings() stops
  // that (the group ends).
  void add_rings(uint64_t group, std::shared_ptr<shm::RingFile> rings, std::vector<int> members);
  void remove_rings(uint64_t group);
  // A blocking point-to-point call of a group with rings: polls the rings on this thread
  // (counted as a spinner of `rings`, and without a FastReader scope, so that the I/O
  // thread sleeps undisturbed) for a short while (longer just after this process woke a
  // sleeping peer); true when `work` completed meanwhile. Then the call waits in
  // serve_until().
  bool spin_rings(Work::State& work, shm::RingFile& rings);
  // Whether a thread polls the rings in spin_rings() now or left it less than kRingLinger
  // ago (a program's next blocking call is usually that close).
  bool rings_lingering(Clock::time_point now) const;
  // Sends a point-to-point message (h: Data or DataAt) with `bytes` of payload to group
  // rank d (world rank dst) through `rings`. While the ring is full it waits for the
  // receiver to read: throws TransportError when dst dies or leaves or the mesh shuts down,
  // TimeoutError at `deadline`; `what` names the send.
  void send_ring(shm::RingFile& rings, int d, int dst, WireHeader h, const void* data, size_t bytes,
                 Clock::time_point deadline, const std::string& what);

  // Marks the calling thread's scope as one that runs collectives on this mesh: take()
  // then reads the ROUTER itself when it can (see above). Scopes may nest on one thread.
  class FastReader {
   public:
    explicit FastReader(Mesh& mesh);
    ~FastReader();
    FastReader(const FastReader&) = delete;
    FastReader& operator=(const FastReader&) = delete;

   private:
    Mesh& mesh_;
    Mesh* previous_;
  };

  // Says goodbye to every peer, fails everything pending, stops the I/O thread and closes
  // the sockets. Idempotent.
  void shutdown();
  // An outside liveness monitor (a session's master) found world rank `r` lost: as when
  // its connection drops, what is pending that involves it fails with `why`, and later
  // operations that involve it fail at once; operations among the others go on.
  void declare_dead(int r, std::string why);
  bool is_shut_down() const { return shut_.load(); }

 private:
  // tests/fuzz/fuzz_pg_frames.cpp: sets up a connected rank without peers or an I/O thread
  // and feeds on_message() the frames a peer could send.
  friend struct MeshFuzzAccess;
  enum class PeerState { Alive, Left, Dead };
  struct Peer {
    PeerState state = PeerState::Alive;
    std::string reason;
    bool hello = false;
    Clock::time_point disconnected{};  // pending "dead" verdict (grace for a goodbye)
    bool disconnect_pending = false;
  };
  struct Channel {
    std::deque<Incoming> msgs;
    bool aborted = false;
    ErrCode code = ErrCode::Error;
    std::string text;
  };
  struct SendWatch {
    std::shared_ptr<SendTracker> tracker;
    std::shared_ptr<Work::State> work;
    int dst;
    Clock::time_point deadline;
    std::string what;
  };
  // A payload sent by address, held until its receiver releases it.
  struct Offer {
    std::shared_ptr<void> keepalive;
    std::shared_ptr<Work::State> work;
    int dst;
    Clock::time_point deadline;
    std::string what;
    bool failed = false;  // the Work failed (deadline); the storage is still held
  };
  struct Dealer {
    std::mutex m;
    zmq::socket_t sock;
    bool open = false;
  };

  void io_loop();
  // Reads one whole message from the ROUTER (router_m_ held) and files it; false when none
  // is waiting.
  bool read_message(std::vector<zmq::message_t>& frames);
  // A FastReader thread's wait in take(): reads the ROUTER (when it can take it) until a
  // message was filed or a short slice passed; false when the ROUTER was not free.
  bool pump(Clock::time_point deadline);
  // Wakes the I/O thread (it returns from its poll).
  void wake_io();
  // Whether the I/O thread may read the ROUTER now (no FastReader, grace over, or a
  // thread waits that does not read).
  bool io_may_read(Clock::time_point now) const;
  // frames: identity, header, payload frames; `dropped`: frames past those kept.
  void on_message(std::vector<zmq::message_t>& frames, uint64_t dropped);
  void on_monitor(int peer, zmq::socket_t& mon);
  void sweep(Clock::time_point now);
  void mark_peer(int r, PeerState s, std::string reason);  // lock held
  // Fails pending p2p receives/sends touching rank r (lock held; completes outside).
  void fail_p2p_for(int r,
                    std::vector<std::pair<std::shared_ptr<Work::State>, std::exception_ptr>>& out);
  void complete_recv(RecvRequest& req, Incoming& msg);
  // Copies a DataAt message's payload from its sender's process into `dst` (`bytes` bytes);
  // throws naming `what`. Then, or on failure, answers Released.
  void read_by_address(const Incoming& msg, void* dst, uint64_t bytes, const std::string& what,
                       int src_group);
  // Answers Released for `offer` of `group` to world rank src (nothing when src is gone):
  // through the group's ring when it has one with room, else over the sockets.
  void release(int src, uint64_t offer, uint64_t group);
  // Fills the header's fields every message of this rank carries.
  void stamp(WireHeader& h, uint64_t payload) const;
  // Drops the offer Released names (h.src its receiver) and completes its Work.
  void on_released(const WireHeader& h);
  // Completes the first pending receive `in` matches (unlocking `lock`, held on entry);
  // false when none matches (still locked).
  bool match_pending(std::unique_lock<std::mutex>& lock, Incoming& in);
  // Files a point-to-point message: completes the receive it matches or keeps it for a
  // later one (`lock` held on entry; it may be unlocked on return).
  void file_p2p(std::unique_lock<std::mutex>& lock, Incoming& in);
  // The ROUTER's holder: reads every registered ring (true when a record was read); sets
  // (arm) or clears the rings' bells.
  bool drain_rings();
  void arm_rings(bool armed);
  // Checks and files one ring record from world rank `src` of `group`; "" or what is wrong.
  std::string on_ring_record(uint64_t group, int src, const WireHeader& h, const char* data,
                             size_t bytes);
  // Wakes world rank dst, which sleeps with records in its rings (a Ring message).
  void ring_bell(int dst);
  // A DataAt nobody receives yet: reads its bytes into the message, which becomes a Data
  // message (or carries the error).
  void stage_by_address(Incoming& in);
  // I/O thread: stages the DataAt messages that waited kStageGrace for a receive.
  void stage_waiting(Clock::time_point now);
  // A DataAt in unexpected_ that nobody copies yet (lock held).
  static bool unstaged(const Incoming& in);
  std::string peer_failure(int r) const;  // lock held
  void count_pending();                   // lock held: updates pending_count_

  const int world_;
  int rank_ = -1;
  ProcessGroupOptions options_;
  uint64_t token_ = 0;
  std::string bound_;
  std::vector<std::string> endpoints_;

  zmq::context_t ctx_;
  // Before the sockets: they bind under its ZAP handler; reset before ctx_ closes.
  std::unique_ptr<security::Guard> guard_;
  zmq::socket_t router_;
  std::vector<std::unique_ptr<Dealer>> dealers_;
  std::vector<zmq::socket_t> monitors_;
  int wake_fd_ = -1;
  std::thread io_;
  // The small-message path (see above).
  std::mutex router_m_;                    // held by whoever reads router_
  std::atomic<int> fast_scopes_{0};        // FastReader scopes alive
  std::atomic<int> idle_waiters_{0};       // threads in take() that do not read
  std::atomic<size_t> pending_count_{0};   // pending_ entries nobody reads for, without m_
  std::atomic<bool> io_reading_{false};    // the I/O thread holds router_m_
  std::atomic<int64_t> fast_ended_ns_{0};  // steady_clock time the last scope ended
  std::atomic<bool> stop_io_{false};
  std::atomic<bool> shut_{false};
  std::mutex shutdown_m_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<Peer> peers_;
  std::map<std::pair<uint64_t, uint64_t>, Channel> channels_;
  std::map<uint64_t, uint64_t> done_upto_;
  std::list<Incoming> unexpected_;  // p2p messages no receive was posted for, arrival order
  std::list<RecvRequest> pending_;  // posted p2p receives, posting order
  std::list<SendWatch> watches_;
  std::map<uint64_t, Offer> offers_;  // by id
  std::atomic<int> unstaged_{0};      // unexpected_ entries for which unstaged() holds
  uint64_t next_offer_ = 1;
  std::vector<int64_t> peer_pids_;  // by world rank; 0: not known to share this host
  // Registered rings (add_rings); read by the ROUTER's holder under rings_m_.
  struct RingSet {
    uint64_t group;
    std::shared_ptr<shm::RingFile> file;
    std::vector<int> members;
  };
  std::recursive_mutex rings_m_;  // release() may push while drain_rings() holds it
  std::vector<RingSet> rings_;
  std::atomic<int> ring_sets_{0};
  // Threads in spin_rings() now, and when the last one left (steady_clock ns): while either
  // says a caller polls the rings or will be back soon, the I/O thread sleeps without
  // setting the rings' bell (rings_lingering()).
  std::atomic<int> ring_spinners_{0};
  std::atomic<int64_t> ring_spin_ended_ns_{0};
  // When this process last woke a sleeping peer through a Ring message (steady_clock ns):
  // its answer comes after a wake-up, so spin_rings() polls longer meanwhile.
  std::atomic<int64_t> bell_rung_ns_{0};
  const int cpus_ = affinity_cpus();  // this process's CPUs
  std::string bad_peer_text_;
};

}  // namespace dtr::pg
