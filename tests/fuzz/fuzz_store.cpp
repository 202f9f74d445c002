// libFuzzer target: the rendezvous stores' formats (pg/store_codec.hpp), everything a peer
// of the TcpStore server or client, or a writer of a FileStore's file, controls.
//
// Input layout: byte 0 picks the part (mod 3), the rest is its input.
//   0  the server: a sequence of messages, each [frame count (1 byte, mod 8)] then per frame
//      [length (1 byte; 255: the next 2 bytes, little-endian)][bytes], from one of four
//      clients (the frame count's high bits). Each goes through parse_request() and, when it
//      parses, StoreTable::apply(). Checked against a model map: the table's map equals the
//      model after every request; each reply answers the request or a waiting get of the same
//      key with the key's current value; an add either succeeds with the model's sum or
//      leaves the map as it was; a request that parses gets exactly its replies.
//   1  the file store's log: replay_log() on the bytes; then the log re-encoded from the
//      map replays to the same map, and a record appended the way FileStore::append does
//      (after kTornLineEnd when the log's last line is torn) takes effect, and nothing
//      else does, whatever the log holds.
//   2  a client's view of a reply: frames as in 0; check_reply() returns "" exactly for
//      three frames of 8, 1 and any bytes.
// A crash, a sanitizer report, an exception out of these functions or a broken check aborts
// (a finding).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "fuzz_input.hpp"
#include "pg/store_codec.hpp"

namespace {

using namespace dtr::pg::store;

[[noreturn]] void finding(const char* what, const std::string& detail = {}) {
  dtr::fuzz::report_finding("fuzz_store", what, detail);
}

// [count][frames...] (count mod 8; its bits 3-4 the client in *client), each frame
// [length (1 byte; 255: the next 2 bytes)][bytes].
std::vector<std::string> read_message(dtr::fuzz::InputReader& in, int* client) {
  const uint8_t c = in.byte();
  *client = (c >> 3) & 3;
  std::vector<std::string> frames(c & 7);
  for (auto& f : frames) {
    size_t len = in.byte();
    if (len == 255) len = in.u16();
    f = in.bytes(len);
  }
  return frames;
}

std::vector<FrameView> views(const std::vector<std::string>& frames) {
  std::vector<FrameView> v;
  for (const auto& f : frames) v.push_back({f.data(), f.size()});
  return v;
}

struct Model {
  std::map<std::string, std::string> map;
  std::vector<Request> waiting;  // gets not answered yet, with the client in reqid's place
};

// The replies `r` must cause, given the model before it; updates the model.
size_t expected_replies(Model& m, const std::string& client, const Request& r,
                        const std::vector<Reply>& got) {
  const auto woken = [&](const std::string& key) {
    size_t n = 0;
    for (auto it = m.waiting.begin(); it != m.waiting.end();) {
      if (it->key == key) {
        ++n;
        it = m.waiting.erase(it);
      } else {
        ++it;
      }
    }
    return n;
  };
  switch (r.op) {
    case 'S':
      m.map[r.key] = r.value;
      return 1 + woken(r.key);
    case 'G':
      if (m.map.count(r.key)) return 1;
      if (m.waiting.size() >= kMaxWaiters) m.waiting.erase(m.waiting.begin());
      m.waiting.push_back({client, r.op, r.key, r.value});
      return 0;
    case 'A':
      if (got.empty()) finding("add without a reply");
      if (got[0].status != 0) return 1;  // refused: nothing changes, nobody wakes
      m.map[r.key] = got[0].value;
      return 1 + woken(r.key);
    case 'D':
      for (auto it = m.map.lower_bound(r.key); it != m.map.end() && it->first.starts_with(r.key);)
        it = m.map.erase(it);
      return 1;
    default:
      return 1;
  }
}

void check_add(const Model& before, const Request& r, const Reply& reply) {
  if (reply.status != 0) return;
  auto it = before.map.find(r.key);
  const std::string old = it == before.map.end() ? "" : it->second;
  const long long a = old.empty() ? 0 : std::strtoll(old.c_str(), nullptr, 10);
  const long long d = std::strtoll(r.value.c_str(), nullptr, 10);
  long long sum = 0;
  if (__builtin_add_overflow(a, d, &sum) || reply.value != std::to_string(sum)) {
    finding("add result", old + " + " + r.value + " gave " + reply.value);
  }
}

void server(dtr::fuzz::InputReader& in) {
  StoreTable table;
  Model model;
  const std::string clients[4] = {"a", "b", "c", std::string("\0\xff", 2)};
  std::vector<Reply> out;
  for (int n = 0; n < 64 && !in.empty(); ++n) {
    int client = 0;
    const auto frames = read_message(in, &client);
    const auto request = parse_request(views(frames));
    const bool well_formed = frames.size() == 4 && frames[0].size() == 8 && frames[1].size() == 1;
    if (request.has_value() != well_formed) finding("parse_request", std::to_string(frames.size()));
    if (!request) continue;
    out.clear();
    table.apply(clients[client], *request, out);
    const Model before = model;
    const size_t want = expected_replies(model, clients[client], *request, out);
    if (out.size() != want) {
      finding("reply count", std::string(1, request->op) + ": " + std::to_string(out.size()) +
                                 " replies, expected " + std::to_string(want));
    }
    if (request->op == 'A' && !out.empty()) check_add(before, *request, out[0]);
    for (size_t i = 0; i < out.size(); ++i) {
      const Reply& r = out[i];
      if (r.status > 1 || r.reqid.size() != 8) finding("reply fields");
      if (i > 0 && (r.status != 0 || r.value != table.map().at(request->key))) {
        finding("woken get's value");
      }
    }
    if (table.map() != model.map) finding("table differs from the model", request->key);
    if (table.waiting() != model.waiting.size()) finding("waiting gets");
  }
}

void file_log(dtr::fuzz::InputReader& in) {
  const std::string log = in.bytes(SIZE_MAX);
  const auto map = replay_log(log);
  std::string again;
  for (const auto& [k, v] : map) {
    std::string back;
    if (!from_hex(to_hex(k), back) || back != k) finding("hex round trip");
    again += set_record(k, v);
  }
  if (replay_log(again) != map) finding("re-encoded log replays differently");
  // FileStore::append after whatever a writer that died left behind.
  const std::string key = log.substr(0, std::min<size_t>(log.size(), 5)), value = "v";
  const std::string appended = log +
                               std::string(log.empty() || log.back() == '\n' ? "" : kTornLineEnd) +
                               set_record(key, value);
  auto expected = map;
  expected[key] = value;
  if (replay_log(appended) != expected) finding("appended record not taken");
  const std::string deleted =
      appended + delete_record(key.substr(0, std::min<size_t>(key.size(), 2)));
  const auto after = replay_log(deleted);
  for (const auto& [k, v] : after) {
    if (k.starts_with(key.substr(0, std::min<size_t>(key.size(), 2)))) finding("delete");
  }
}

void client(dtr::fuzz::InputReader& in) {
  int unused = 0;
  const auto frames = read_message(in, &unused);
  std::vector<FrameView> kept = views(frames);
  if (kept.size() > 3) kept.resize(3);  // recv_bounded keeps 3 and counts the rest
  const std::string bad = check_reply(kept, frames.size());
  const bool ok = frames.size() == 3 && frames[0].size() == 8 && frames[1].size() == 1;
  if (bad.empty() != ok) finding("check_reply", bad);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  dtr::fuzz::InputReader in(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0:
      server(in);
      break;
    case 1:
      file_log(in);
      break;
    default:
      client(in);
  }
  return 0;
}
