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
    int64_t v = pg::parse_int(map_[key], key) + delta;
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
// Requests (DEALER -> ROUTER): [reqid(8 bytes), op(1 byte), key, value]; replies:
// [reqid, status(1 byte: 0 ok, 1 error), value]. GET waits on the server until the key is
// set; the client bounds the wait and drops replies to requests it gave up on.
//
// Limits: keys and values are at most kMaxStoreField / 2 bytes, so no frame either way is
// over kMaxStoreField (both sockets' ZMQ_MAXMSGSIZE: ZeroMQ drops a connection sending a
// bigger one); a message with more frames than a request or reply has is dropped whole.

constexpr size_t kMaxStoreField = 1 << 20;

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
  struct Waiter {
    std::string identity, reqid, key;
  };
  void reply(const std::string& identity, const std::string& reqid, uint8_t status,
             const std::string& value) {
    sock_.send(zmq::buffer(identity), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(reqid), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(&status, 1), zmq::send_flags::sndmore);
    sock_.send(zmq::buffer(value), zmq::send_flags::none);
  }
  void run() {
    while (!stop_) {
      poll_in(sock_, std::chrono::milliseconds(50));
      for (int i = 0; i < 1000; ++i) {
        std::vector<zmq::message_t> frames;
        size_t count = 0;
        if (!recv_bounded(sock_, frames, 5, count)) break;
        if (count == 5) handle(frames);  // identity + 4 request frames; anything else: drop
      }
    }
  }
  void handle(std::vector<zmq::message_t>& f) {
    if (f.size() != 5 || f[1].size() != 8 || f[2].size() != 1) return;  // malformed: drop
    std::string id = f[0].to_string(), reqid = f[1].to_string(), key = f[3].to_string(),
                value = f[4].to_string();
    const char op = *f[2].data<char>();
    try {
      if (op == 'S') {
        map_[key] = value;
        reply(id, reqid, 0, "");
        for (auto it = waiters_.begin(); it != waiters_.end();) {
          if (it->key == key) {
            reply(it->identity, it->reqid, 0, value);
            it = waiters_.erase(it);
          } else {
            ++it;
          }
        }
      } else if (op == 'G') {
        auto it = map_.find(key);
        if (it != map_.end()) {
          reply(id, reqid, 0, it->second);
        } else {
          if (waiters_.size() > 100000) waiters_.erase(waiters_.begin());
          waiters_.push_back({id, reqid, key});
        }
      } else if (op == 'A') {
        int64_t v = pg::parse_int(map_[key], key) + pg::parse_int(value, "delta");
        map_[key] = std::to_string(v);
        reply(id, reqid, 0, std::to_string(v));
        for (auto it = waiters_.begin(); it != waiters_.end();) {
          if (it->key == key) {
            reply(it->identity, it->reqid, 0, map_[key]);
            it = waiters_.erase(it);
          } else {
            ++it;
          }
        }
      } else if (op == 'D') {
        for (auto it = map_.lower_bound(key); it != map_.end() && it->first.starts_with(key);) {
          it = map_.erase(it);
        }
        reply(id, reqid, 0, "");
      } else {
        reply(id, reqid, 1, "unknown store op");
      }
    } catch (const std::exception& e) {
      reply(id, reqid, 1, e.what());
    }
  }

  zmq::socket_t sock_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::map<std::string, std::string> map_;
  std::vector<Waiter> waiters_;
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
      if (count != 3 || frames[0].size() != 8 || frames[1].size() != 1) {
        throw ProtocolError(fmt::format(
            "rendezvous store {}: malformed reply: {} frames{}, expected 3 (request id of 8 "
            "bytes, status of 1 byte, value)",
            described_, count,
            count >= 2
                ? fmt::format(" of {} and {} bytes first", frames[0].size(), frames[1].size())
                : std::string()));
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

std::string to_hex(const std::string& s) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() * 2 + 1);
  out.push_back('x');  // so that an empty string is one non-empty token
  for (unsigned char c : s) {
    out.push_back(digits[c >> 4]);
    out.push_back(digits[c & 15]);
  }
  return out;
}

bool from_hex(std::string_view h, std::string& out) {
  if (h.empty() || h[0] != 'x' || (h.size() - 1) % 2 != 0) return false;
  out.clear();
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (size_t i = 1; i < h.size(); i += 2) {
    int a = val(h[i]), b = val(h[i + 1]);
    if (a < 0 || b < 0) return false;
    out.push_back(static_cast<char>(a * 16 + b));
  }
  return true;
}

class FileStore : public Store {
 public:
  explicit FileStore(std::string path) : path_(std::move(path)) {
    if (path_.empty()) throw InvalidArgument("file store: empty path");
    Locked f(*this, F_RDLCK);  // creates it, checks it can be opened
  }

  void set(const std::string& key, const std::string& value) override {
    Locked f(*this, F_WRLCK);
    f.append("S " + to_hex(key) + " " + to_hex(value) + "\n");
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
    int64_t v = pg::parse_int(map[key], key) + delta;
    f.append("S " + to_hex(key) + " " + to_hex(std::to_string(v)) + "\n");
    return v;
  }
  void delete_prefix(const std::string& prefix) override {
    Locked f(*this, F_WRLCK);
    f.append("D " + to_hex(prefix) + "\n");
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
        if (data.size() > (size_t{256} << 20)) fail("read (file over 256 MiB)");
      }
      std::map<std::string, std::string> map;
      size_t pos = 0;
      while (true) {
        size_t nl = data.find('\n', pos);
        if (nl == std::string::npos) break;  // an incomplete last record is ignored
        std::string_view line(data.data() + pos, nl - pos);
        pos = nl + 1;
        std::string a, b;
        if (line.starts_with("S ")) {
          auto sp = line.find(' ', 2);
          if (sp == std::string_view::npos) continue;
          if (from_hex(line.substr(2, sp - 2), a) && from_hex(line.substr(sp + 1), b)) {
            map[a] = b;
          }
        } else if (line.starts_with("D ")) {
          if (from_hex(line.substr(2), a)) {
            for (auto it = map.lower_bound(a); it != map.end() && it->first.starts_with(a);) {
              it = map.erase(it);
            }
          }
        }
      }
      return map;
    }
    void append(const std::string& record) {
      if (::lseek(fd_, 0, SEEK_END) < 0) fail("seek");
      size_t done = 0;
      while (done < record.size()) {
        ssize_t n = ::write(fd_, record.data() + done, record.size() - done);
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
