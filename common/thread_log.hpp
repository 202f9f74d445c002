// ThreadLog: an append-only log of records written by many threads without locks, read by
// another thread while they write. Used for the timeline by the master (its calls and sync
// points) and by the workers (their commands), docs/observability.md.
//
// Terms. Each writing thread has its own *thread log*, a list of *chunks* (blocks of
// kChunkBytes); a record is a run of bytes written into the thread's current chunk and
// then *committed* (the chunk's `used` advances past it with a release store), so a reader
// sees only whole records, in the order the thread wrote them. A record never spans
// chunks. The log's *budget* bounds the bytes of all chunks; past it records are dropped
// and counted. reset() begins a new *generation*: writers bind to a fresh thread log on
// their next record (the binding is one thread-local per thread) and the old logs' chunks
// are freed, except each thread's current chunk, which its thread log holds until the
// thread's next record or exit: a writer never touches freed memory, and at most one
// chunk per thread outlives a reset.
//
// Thread safety: reserve()/commit() from any thread (each thread writes its own thread
// log); reset(), snapshot() and dropped() from any thread. A chunk's bytes below
// its `used` are immutable once committed.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dtr::trace {

class ThreadLog {
 public:
  static constexpr size_t kChunkBytes = size_t{256} << 10;

  explicit ThreadLog(size_t budget_bytes) : budget_(budget_bytes) {}
  ThreadLog(const ThreadLog&) = delete;
  ThreadLog& operator=(const ThreadLog&) = delete;

  struct Chunk {
    std::unique_ptr<std::byte[]> data{new std::byte[kChunkBytes]};
    std::atomic<size_t> used{0};
  };
  struct Writer {
    std::mutex mu;  // guards chunks (appended by the owner, copied by readers)
    std::vector<std::shared_ptr<Chunk>> chunks;
    std::shared_ptr<Chunk> current;  // owner only
    size_t used = 0;                 // owner only: bytes of `current` written and committed
  };
  // Where a record of `n` bytes goes; null (the record dropped) when the budget is spent.
  struct Slot {
    std::byte* data = nullptr;
    Writer* writer = nullptr;
    size_t n = 0;
    explicit operator bool() const { return data != nullptr; }
  };

  // Room for a record of `n` bytes (n <= kChunkBytes, a multiple of 8) in the calling
  // thread's log; write it, then commit().
  [[gnu::always_inline]] inline Slot reserve(size_t n) {
    Binding* b = current_binding();
    if (!b || b->owner != this || b->generation != generation_.load(std::memory_order_acquire))
        [[unlikely]]
      b = bind();
    Writer& w = *b->writer;
    if (!w.current || w.used + n > kChunkBytes) [[unlikely]]
      if (!grow(w)) return {};
    return Slot{w.current->data.get() + w.used, &w, n};
  }
  [[gnu::always_inline]] static inline void commit(const Slot& s) {
    s.writer->used += s.n;
    s.writer->current->used.store(s.writer->used, std::memory_order_release);
  }

  // A new generation (see the file comment): what was written before is forgotten.
  void reset() {
    std::lock_guard lock(mu_);
    generation_.store(next_generation(), std::memory_order_release);
    for (const auto& w : writers_) {
      std::lock_guard wl(w->mu);
      w->chunks.clear();
    }
    writers_.clear();
    allocated_.store(0);
    dropped_.store(0);
  }
  // The committed bytes of every chunk (each thread's chunks in order, threads one after
  // another), the chunks kept alive by the snapshot.
  struct Part {
    std::shared_ptr<const Chunk> chunk;
    size_t bytes = 0;
  };
  std::vector<Part> snapshot() const {
    std::vector<std::shared_ptr<Writer>> writers;
    {
      std::lock_guard lock(mu_);
      writers = writers_;
    }
    std::vector<Part> parts;
    for (const auto& w : writers) {
      std::lock_guard lock(w->mu);
      for (const auto& c : w->chunks)
        parts.push_back(Part{c, c->used.load(std::memory_order_acquire)});
    }
    return parts;
  }
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  // Changes at each reset(): a pointer into a record of an older generation is stale.
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  size_t bytes() const { return allocated_.load(std::memory_order_relaxed); }

 private:
  struct Binding {
    const ThreadLog* owner = nullptr;
    uint64_t generation = 0;
    std::shared_ptr<Writer> writer;
  };
  // The calling thread's binding: a plain pointer in initial-exec TLS, so that the hot
  // path finds it with one load and no call (the libraries holding a ThreadLog are loaded
  // with the program, or by Python's import, within glibc's static TLS reserve); the
  // binding itself is owned by a second thread-local, touched only when binding, which
  // frees it (and its writer reference) when the thread exits.
  static Binding*& current_binding() {
    static thread_local Binding* b __attribute__((tls_model("initial-exec"))) = nullptr;
    return b;
  }
  static Binding& owned_binding() {
    static thread_local std::unique_ptr<Binding> b;
    if (!b) b = std::make_unique<Binding>();
    current_binding() = b.get();
    return *b;
  }
  static uint64_t next_generation() {
    static std::atomic<uint64_t> counter{0};
    return counter.fetch_add(1) + 1;
  }
  [[gnu::noinline]] Binding* bind() {
    Binding& b = owned_binding();
    auto w = std::make_shared<Writer>();
    std::lock_guard lock(mu_);
    writers_.push_back(w);
    b.owner = this;
    b.generation = generation_.load(std::memory_order_relaxed);
    b.writer = std::move(w);
    return &b;
  }
  [[gnu::noinline]] bool grow(Writer& w) {
    if (allocated_.fetch_add(kChunkBytes) + kChunkBytes > budget_) {
      allocated_.fetch_sub(kChunkBytes);
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return false;
    }
    auto c = std::make_shared<Chunk>();
    {
      std::lock_guard lock(w.mu);
      w.chunks.push_back(c);
    }
    w.current = std::move(c);
    w.used = 0;
    return true;
  }

  const size_t budget_;
  mutable std::mutex mu_;  // guards writers_
  std::vector<std::shared_ptr<Writer>> writers_;
  std::atomic<uint64_t> generation_{next_generation()};
  std::atomic<size_t> allocated_{0};
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace dtr::trace
