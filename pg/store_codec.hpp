// The rendezvous stores' formats (pg/store.cpp), apart from their sockets and files so that
// a fuzz target (tests/fuzz/fuzz_store.cpp) reaches every byte a peer or a file controls:
//
//   TcpStore request  (DEALER -> ROUTER): [reqid (8 bytes), op (1 byte), key, value]
//   TcpStore reply    (ROUTER -> DEALER): [reqid, status (1 byte: 0 ok, 1 error), value]
//   FileStore log     one record a line: "S <hex key> <hex value>" (set) and
//                     "D <hex prefix>" (delete every key with that prefix); hex is "x"
//                     followed by two lowercase digits a byte.
//
// Keys and values are at most kMaxStoreField / 2 bytes, so that no frame either way is over
// kMaxStoreField (both sockets' ZMQ_MAXMSGSIZE). StoreTable is the server's state: the map
// and the gets that wait for a key; a malformed request or an op it does not know gets an
// error reply, never a crash.
//
// Thread safety: value types and pure functions; a StoreTable belongs to one thread (the
// store server's).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtr::pg::store {

inline constexpr size_t kMaxStoreField = 1 << 20;
// Gets that may wait at the server at once; past it the oldest is dropped (its client times
// out and says the key was never set).
inline constexpr size_t kMaxWaiters = 100000;
// Largest file store log read (FileStore refuses a larger file).
inline constexpr size_t kMaxLogBytes = size_t{256} << 20;

struct Request {
  std::string reqid;  // 8 bytes, echoed by the reply
  char op = 0;        // 'S' set, 'G' get (waits), 'A' add, 'D' delete prefix
  std::string key, value;
};

// A request's four frames (after the ROUTER's identity frame), by their sizes and bytes;
// nullopt when their number or sizes are wrong (the server drops such a message).
struct FrameView {
  const void* data = nullptr;
  size_t size = 0;
};
std::optional<Request> parse_request(const std::vector<FrameView>& frames);

struct Reply {
  std::string identity, reqid;  // to whom, and to which request
  uint8_t status = 0;           // 0 ok, 1 error (value is the message)
  std::string value;
};

// What a client makes of a reply's frames (`count` of them arrived; at most the first 3 are
// in `frames`): "" when well formed, else what is wrong, naming the frame count and sizes.
std::string check_reply(const std::vector<FrameView>& frames, size_t count);

class StoreTable {
 public:
  // Applies one request from `identity`; appends the replies it causes to `out` (its own,
  // unless it is a get that waits, and those of the gets it wakes).
  void apply(const std::string& identity, const Request& r, std::vector<Reply>& out);
  const std::map<std::string, std::string>& map() const { return map_; }
  size_t waiting() const { return waiters_.size(); }

 private:
  struct Waiter {
    std::string identity, reqid, key;
  };
  void wake(const std::string& key, std::vector<Reply>& out);
  std::map<std::string, std::string> map_;
  std::vector<Waiter> waiters_;
};

// `current` (a decimal int64, "" is 0) plus `delta`, as the stores' add does; throws
// InvalidArgument when `current` is not an integer or the sum overflows int64.
int64_t add_to(const std::string& current, const std::string& key, int64_t delta);

// The file store's hex: "x" then two lowercase hex digits a byte ("x" alone is "").
std::string to_hex(std::string_view s);
bool from_hex(std::string_view h, std::string& out);
// A set or delete record, with its newline.
std::string set_record(std::string_view key, std::string_view value);
std::string delete_record(std::string_view prefix);

// What a writer appends to a log whose last line is torn (a writer that died mid-write)
// before its own record: no record ends in " !" (hex has no space), so the torn line, which
// may look like a record cut short ("S x61 x62" of "S x61 x6263"), is never read as one.
inline constexpr std::string_view kTornLineEnd = " !\n";

// The map a file store's log holds. An incomplete last line is ignored; so is a line that
// is not a record (a torn line closed by kTornLineEnd).
std::map<std::string, std::string> replay_log(std::string_view log);

}  // namespace dtr::pg::store
