// Streams and events on the nodes of a master-worker session, CUDA-style.
//
//   dtr::Stream s = dtr::Stream::create();          // a new stream on the current node
//   dtr::Event done;
//   {
//     dtr::stream_guard on(s);                      // commands of this node go to s
//     y = x.matmul(x);                              // runs on s
//     done.record();                                // a point in s
//   }
//   dtr::current_stream().wait(done);               // the default stream waits for it
//   z = y + 1;                                      // ordered after the matmul
//
// Every node has a default stream (id 0) and any number of user streams. Each thread has
// a current stream per node; a command on a tensor goes to the current stream of the
// tensor's node. Commands of one stream run in order; different streams of a node run
// concurrently, on the worker's executor threads (its `--threads` budget).
//
// Events: record() marks a point in a stream; Stream::wait(e) makes a stream wait for
// the event's latest record, also when the event lives on another node: then the worker
// holding the event notifies the waiting worker directly, and the master is not in
// between. Waiting on an event that was never recorded does nothing (as in CUDA).
// record() and wait() only queue commands and never block the master; query(),
// synchronize() and elapsed_time() are sync points that ask the event's node.
//
// Errors: a failing op does not stop other streams. An event carries the first failure
// on its stream since the stream's previous record; Event::synchronize() (and
// Stream::synchronize()) throw it as RemoteError, and dtr::synchronize() does not report
// it a second time.
//
// Memory safety: a command holds the tensors it uses, so a tensor freed on the master
// (its last handle dropped) while a command of another stream still uses it stays alive
// on the worker until that command has run. Reading a tensor that another stream has not
// finished producing waits for it. Writing a tensor in place while another stream reads
// it is ordered only by events you record and wait on, as in CUDA.
//
// Thread safety: Stream and Event are shared handles; copies refer to the same stream or
// event. Every function may be called from any thread; record() on one Event from two
// threads at once orders the two records arbitrarily. The current stream is per thread.
#pragma once

#include <cstdint>
#include <memory>

#include "dtr/distributed.hpp"

namespace dtr {

namespace detail {
struct StreamHandle;
struct EventHandle;
}  // namespace detail

class Event;

class Stream {
 public:
  Stream() = default;  // undefined; calls on it throw InvalidArgument
  // A new stream on `node` (-1: the current node) and the current device.
  static Stream create(int node = -1);

  bool defined() const { return handle_ != nullptr; }
  int node() const;
  int device() const;
  uint32_t id() const;  // 0: the node's default stream
  bool is_default() const { return id() == 0; }

  // Queues a wait: commands queued on this stream afterwards run once `e`'s latest record
  // has run. Never blocks; a no-op when `e` was never recorded.
  void wait(const Event& e) const;
  // Records a new event at this point of the stream.
  Event record_event(bool enable_timing = false) const;
  // Sync point: whether everything queued on the stream so far has run.
  bool query() const;
  // Sync point: waits until everything queued on the stream so far has run; throws the
  // first failure on the stream since its previous record.
  void synchronize() const;

  bool operator==(const Stream& other) const;

 private:
  explicit Stream(std::shared_ptr<detail::StreamHandle> h) : handle_(std::move(h)) {}
  const detail::StreamHandle& handle(std::string_view what) const;
  friend Stream current_stream(int node);
  friend Stream default_stream(int node);
  friend class Event;
  friend void set_stream(const Stream& s);
  std::shared_ptr<detail::StreamHandle> handle_;
};

class Event {
 public:
  // An event not recorded yet; with timing, elapsed_time() works between two of them.
  explicit Event(bool enable_timing = false);

  // Records the event on the current stream of the current node, or on `s`. An event
  // belongs to the node of its first record; recording it on another node throws.
  void record();
  void record(const Stream& s);
  bool recorded() const;
  int node() const;  // -1 until recorded

  // Sync point: whether the latest record has run (true when never recorded).
  bool query() const;
  // Sync point: waits until the latest record has run; throws RemoteError when the
  // stream had failed before it (see above). Returns at once when never recorded.
  void synchronize() const;
  // Sync point: milliseconds from this event's latest record to `end`'s, both recorded
  // with timing on one node; waits for both.
  double elapsed_time(const Event& end) const;

 private:
  std::shared_ptr<detail::EventHandle> handle_;
  friend class Stream;
};

// The current stream of `node` (-1: the current node) for this thread.
Stream current_stream(int node = -1);
// The default stream of `node` (-1: the current node).
Stream default_stream(int node = -1);
// Makes `s` the current stream of its node for this thread.
void set_stream(const Stream& s);

// For its scope: `s` is the current stream of its node, and its node and device are the
// current ones (as torch.cuda.stream() also switches the device). Restores all three.
class stream_guard {
 public:
  explicit stream_guard(const Stream& s);
  ~stream_guard();
  stream_guard(const stream_guard&) = delete;
  stream_guard& operator=(const stream_guard&) = delete;

 private:
  Stream previous_stream_;
  node_guard node_;
  device_guard device_;
};

}  // namespace dtr
