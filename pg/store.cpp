// Rendezvous stores: in-process (HashStore), a ZeroMQ key-value server hosted by one
// process (TcpStore), and a shared file with fcntl locks (FileStore, NFS-safe).
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "dtr/process_group.hpp"
#include "pg/store_codec.hpp"
#include "pg/util.hpp"
#include "security/curve.hpp"

namespace dtr {
namespace {

using Clock = std::chrono::steady_clock;

// ---------------------------------------------------------------- HashStore

class HashStore : public Store {
 public:
  void set(const std::string& key, const std::string& value) override {
    std::lock_guard lock(m_);
    map_[key] = value;
    cv_.notify_all();
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    std::unique_lock lock(m_);
    if (!cv_.wait_for(lock, timeout, [&] { return map_.count(key) != 0; })) {
      throw TimeoutError(
          fmt::format("store {}: no key '{}' after {} ms", describe(), key, timeout.count()));
    }
    return map_[key];
  }
  int64_t add(const std::string& key, int64_t delta) override {
    std::lock_guard lock(m_);
    auto it = map_.find(key);  // a refused add leaves no key behind
    const int64_t v = pg::store::add_to(it == map_.end() ? std::string() : it->second, key, delta);
    map_[key] = std::to_string(v);
    cv_.notify_all();
    return v;
  }
  void delete_prefix(const std::string& prefix) override {
    std::lock_guard lock(m_);
    for (auto it = map_.lower_bound(prefix); it != map_.end() && it->first.starts_with(prefix);) {
      it = map_.erase(it);
    }
  }
  std::string describe() const override { return "hash://"; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::map<std::string, std::string> map_;
};

// ---------------------------------------------------------------- TcpStore
//
// The formats and the server's table are in pg/store_codec.hpp. GET waits on the server
// until the key is set; the client bounds the wait and drops replies to requests it gave up
// on. A message with more frames than a request or reply has is dropped whole.

using pg::store::kMaxStoreField;

// Receives one message without blocking, keeping at most `keep` frames (the rest is read
// and counted in `frames`). False when none is waiting.
bool recv_bounded(zmq::socket_t& sock, std::vector<zmq::message_t>& out, size_t keep,
                  size_t& frames) {
  out.clear();
  frames = 0;
  while (true) {
    zmq::message_t m;
    if (!sock.recv(m, zmq::recv_flags::dontwait)) return frames > 0;
    ++frames;
    const bool more = m.more();
    if (out.size() < keep) out.push_back(std::move(m));
    if (!more) return true;
  }
}

std::vector<pg::store::FrameView> views(const std::vector<zmq::message_t>& frames, size_t from) {
  std::vector<pg::store::FrameView> v;
  for (size_t i = from; i < frames.size(); ++i) v.push_back({frames[i].data(), frames[i].size()});
  return v;
}

// Waits up to `timeout` for a message on `sock`. A signal that interrupts the wait (EINTR:
// Ctrl-C in a Python program, whose handler only sets a flag) counts as a wake-up, not an
// error: the caller's loop polls again, and the caller sees the signal when the call ends.
void poll_in(zmq::socket_t& sock, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{sock.handle(), 0, ZMQ_POLLIN, 0};
  try {
    zmq::poll(&item, 1, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() != EINTR) throw;
  }
}

class StoreServer {
 public:
  StoreServer(zmq::context_t& ctx, security::Guard& guard, const std::string& endpoint)
      : sock_(ctx, zmq::socket_type::router) {
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxStoreField));
    guard.server(sock_, endpoint, "rendezvous store");
    sock_.bind(endpoint);  // throws zmq::error_t (EADDRINUSE) when taken
    thread_ = std::thread([this] { run(); });
  }
  ~StoreServer() {
    stop_ = true;
    thread_.join();
  }

 private:
  void run() {
    std::vector<zmq::message_t> frames;
    std::vector<pg::store::Reply> replies;
    while (!stop_) {
      poll_in(sock_, std::chrono::milliseconds(50));
      for (int i = 0; i < 1000; ++i) {
        size_t count = 0;
        if (!recv_bounded(sock_, frames, 5, count)) break;
        if (count != 5) continue;  // identity + 4 request frames; anything else: drop
        const auto request = pg::store::parse_request(views(frames, 1));
        if (!request) continue;  // malformed: drop
        replies.clear();
        table_.apply(frames[0].to_string(), *request, replies);
        for (const auto& r : replies) send(r);
      }
    }
  }
  void send(const pg::store::Reply& r) {
    sock_.send(zmq::buffer(r.identity), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(r.reqid), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(&r.status, 1), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(r.value), zmq::send_flags::none);
  }

  zmq::socket_t sock_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  pg::store::StoreTable table_;
};

class TcpStore : public Store {
 public:
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout)
      : timeout_(timeout) {
    if (port <= 0 || port > 65535) {
      throw InvalidArgument(fmt::format("tcp store: port {} out of range", port));
    }
    const std::string ip = pg::resolve_ipv4(host);
    endpoint_ = fmt::format("tcp://{}:{}", ip, port);
    described_ = fmt::format("tcp://{}:{}", host, port);
    if (serve) {
      try {
        server_ = std::make_unique<StoreServer>(ctx_, guard_, endpoint_);
      } catch (const zmq::error_t& e) {
        // Taken (another process hosts it) or not an address of this host: be a client.
        if (e.num() != EADDRINUSE && e.num() != EADDRNOTAVAIL) {
          throw TransportError(fmt::format("tcp store: bind {}: {}", endpoint_, e.what()));
        }
        if (e.num() == EADDRNOTAVAIL)
          not_served_ = fmt::format(
              "; this process was to serve it, but {} is not an address of this host", ip);
      }
    }
  }
  ~TcpStore() override { server_.reset(); }

  void set(const std::string& key, const std::string& value) override {
    request('S', key, value, timeout_);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    return request('G', key, "", timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override {
    return pg::parse_int(request('A', key, std::to_string(delta), timeout_), key);
  }
  void delete_prefix(const std::string& prefix) override { request('D', prefix, "", timeout_); }
  std::string describe() const override { return described_; }

 private:
  std::string request(char op, const std::string& key, const std::string& value,
                      std::chrono::milliseconds timeout, bool probe = false) {
    if (key.size() > kMaxStoreField / 2 || value.size() > kMaxStoreField / 2) {
      throw InvalidArgument("tcp store: key or value too large");
    }
    // One socket per request: requests from several threads never wait on each other.
    zmq::socket_t sock_(ctx_, zmq::socket_type::dealer);
    sock_.set(zmq::sockopt::linger, 0);
    sock_.set(zmq::sockopt::reconnect_ivl, 50);
    sock_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(kMaxStoreField));
    guard_.client(sock_, endpoint_, "rendezvous store");
    sock_.connect(endpoint_);
    const uint64_t id = ++next_id_;
    std::string reqid(reinterpret_cast<const char*>(&id), 8);
    sock_.send(zmq::buffer(reqid), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(&op, 1), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(key), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(value), zmq::send_flags::none);
    const auto start = Clock::now(), deadline = start + timeout;
    while (true) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0) {
        if (probe) throw TimeoutError("rendezvous store: no answer to a probe");
        throw timed_out(key, timeout);
      }
      if (!probe && Clock::now() - start >= kSilentStoreNote && !noted_silence_.load() &&
          !answers() && !noted_silence_.exchange(true))
        std::fprintf(stderr, "dtr process group: %s\n", silence_note().c_str());
      poll_in(sock_, std::min(left, std::chrono::milliseconds(100)));
      std::vector<zmq::message_t> frames;
      size_t count = 0;
      if (!recv_bounded(sock_, frames, 3, count)) continue;
      answered_.store(true);  // something answers there, even if not as a store should
      if (const std::string bad = pg::store::check_reply(views(frames, 0), count); !bad.empty()) {
        throw ProtocolError(fmt::format("rendezvous store {}: {}", described_, bad));
      }
      if (frames[0].to_string() != reqid) continue;  // a reply to a request given up on
      if (*frames[1].data<uint8_t>() != 0) {
        throw Error(fmt::format("rendezvous store {}: {}", described_, frames[2].to_string()));
      }
      return frames[2].to_string();
    }
  }

  // Nothing has answered at the store's address: a mistyped or unreachable MASTER_ADDR
  // (or rank 0 not running), not ranks that have yet to set a key.
  std::string silence_note() const {
    return fmt::format(
        "rendezvous store {}: nothing has answered at that address for {} s{} (rank 0 serves "
        "it where MASTER_ADDR is an address of its host: are MASTER_ADDR and MASTER_PORT "
        "right, and is rank 0 running?)",
        described_, kSilentStoreNote.count(), not_served_);
  }
  // Whether the store answers at all: it has, or it answers a request that waits for
  // nothing (deleting keys under a prefix no one uses) within half a second. A get waits
  // at the server until its key is set, so silence alone does not tell.
  bool answers() {
    if (answered_.load()) return true;
    try {
      request('D', "\x01dtr-probe/", "", std::chrono::milliseconds(500), /*probe=*/true);
    } catch (const TimeoutError&) {
    }
    return answered_.load();
  }
  TimeoutError timed_out(const std::string& key, std::chrono::milliseconds timeout) {
    if (!answers()) {
      return TimeoutError(fmt::format(
          "rendezvous store {}: nothing answered at that address within {} ms{} (rank 0 serves "
          "it where MASTER_ADDR is an address of its host: are MASTER_ADDR and MASTER_PORT "
          "right, and is rank 0 running?)",
          described_, timeout.count(), not_served_));
    }
    return TimeoutError(fmt::format(
        "rendezvous store {}: no answer for key '{}' within {} ms (the store answers; is every "
        "rank running, and is the key set by every rank?)",
        described_, key, timeout.count()));
  }

  static constexpr std::chrono::seconds kSilentStoreNote{10};
  std::chrono::milliseconds timeout_;
  std::string endpoint_, described_;
  std::string not_served_;             // why this process did not serve it when asked to
  std::atomic<bool> answered_{false};  // the store has answered a request
  std::atomic<bool> noted_silence_{false};
  zmq::context_t ctx_{1};
  // Before the sockets: the server binds under its ZAP handler.
  security::Guard guard_{ctx_, resolve_security()};
  std::unique_ptr<StoreServer> server_;
  std::atomic<uint64_t> next_id_{0};
};

// ---------------------------------------------------------------- FileStore
//
// The file is a log of records, one a line: "S <hex key> <hex value>" (set) and
// "D <hex prefix>" (delete every key with that prefix). Writers take an exclusive fcntl
// lock on the whole file, read it, and append one record with one write(); readers take a
// shared lock and read it whole. fcntl locks work on NFS (through lockd); each access
// opens the file anew, so NFS close-to-open consistency gives fresh contents. No mmap, no
// inotify: waiting is polling with a backoff.

using pg::store::delete_record;
using pg::store::set_record;

class FileStore : public Store {
 public:
  explicit FileStore(std::string path) : path_(std::move(path)) {
    if (path_.empty()) throw InvalidArgument("file store: empty path");
    Locked f(*this, F_RDLCK);  // creates it, checks it can be opened
  }

  void set(const std::string& key, const std::string& value) override {
    Locked f(*this, F_WRLCK);
    f.append(set_record(key, value));
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    const auto deadline = Clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    while (true) {
      {
        Locked f(*this, F_RDLCK);
        auto map = f.read();
        auto it = map.find(key);
        if (it != map.end()) return it->second;
      }
      if (Clock::now() >= deadline) {
        throw TimeoutError(fmt::format("file store {}: no key '{}' after {} ms", describe(), key,
                                       timeout.count()));
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(50));
    }
  }
  int64_t add(const std::string& key, int64_t delta) override {
    Locked f(*this, F_WRLCK);
    auto map = f.read();
    const int64_t v = pg::store::add_to(map[key], key, delta);
    f.append(set_record(key, std::to_string(v)));
    return v;
  }
  void delete_prefix(const std::string& prefix) override {
    Locked f(*this, F_WRLCK);
    f.append(delete_record(prefix));
  }
  std::string describe() const override { return "file://" + path_; }

 private:
  // fcntl locks belong to the process (and closing any descriptor of the file drops them
  // all): threads of one process are kept apart by a mutex, held for the whole access.
  static std::mutex& process_lock() {
    static std::mutex m;
    return m;
  }

  class Locked {
   public:
    Locked(FileStore& s, short type) : in_process_(process_lock()), s_(s) {
      fd_ = ::open(s.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
      if (fd_ < 0) {
        throw TransportError(
            fmt::format("file store: cannot open {}: {}", s.path_, std::strerror(errno)));
      }
      struct flock fl {};
      fl.l_type = type;
      fl.l_whence = SEEK_SET;
      while (::fcntl(fd_, F_SETLKW, &fl) != 0) {
        if (errno == EINTR) continue;
        int err = errno;
        ::close(fd_);
        throw TransportError(
            fmt::format("file store: cannot lock {}: {}", s.path_, std::strerror(err)));
      }
    }
    ~Locked() {
      struct flock fl {};
      fl.l_type = F_UNLCK;
      fl.l_whence = SEEK_SET;
      ::fcntl(fd_, F_SETLK, &fl);
      ::close(fd_);
    }
    std::map<std::string, std::string> read() {
      std::string data;
      char buf[65536];
      if (::lseek(fd_, 0, SEEK_SET) < 0) fail("seek");
      while (true) {
        ssize_t n = ::read(fd_, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("read");
        if (n == 0) break;
        data.append(buf, static_cast<size_t>(n));
        if (data.size() > pg::store::kMaxLogBytes) fail("read (file over 256 MiB)");
      }
      return pg::store::replay_log(data);
    }
    // Appends one record. A writer that died mid-write left a torn line: it is closed
    // first (pg::store::kTornLineEnd), so that it is never read as a record, nor joined to
    // this one.
    void append(const std::string& record) {
      const off_t end = ::lseek(fd_, 0, SEEK_END);
      if (end < 0) fail("seek");
      char last = '\n';
      if (end > 0 && ::pread(fd_, &last, 1, end - 1) != 1) fail("read");
      const std::string bytes =
          last == '\n' ? record : std::string(pg::store::kTornLineEnd) + record;
      size_t done = 0;
      while (done < bytes.size()) {
        ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("write");
        done += static_cast<size_t>(n);
      }
      ::fsync(fd_);
    }

   private:
    [[noreturn]] void fail(const char* what) {
      throw TransportError(
          fmt::format("file store: {} {}: {}", what, s_.path_, std::strerror(errno)));
    }
    std::lock_guard<std::mutex> in_process_;  // first: released last
    FileStore& s_;
    int fd_ = -1;
  };

  std::string path_;
};

}  // namespace

std::shared_ptr<Store> make_hash_store() {
  return std::make_shared<HashStore>();
}

std::shared_ptr<Store> make_tcp_store(const std::string& host, int port, bool serve,
                                      std::chrono::milliseconds timeout) {
  return std::make_shared<TcpStore>(host, port, serve, timeout);
}

std::shared_ptr<Store> make_file_store(const std::string& path) {
  return std::make_shared<FileStore>(path);
}

}  // namespace dtr
