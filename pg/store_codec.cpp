// The rendezvous stores' formats: requests, replies, the server's table, the file log.
#include "pg/store_codec.hpp"

#include <fmt/format.h>

#include <cstring>

#include "dtr/error.hpp"
#include "pg/util.hpp"

namespace dtr::pg::store {

std::optional<Request> parse_request(const std::vector<FrameView>& f) {
  if (f.size() != 4 || f[0].size != 8 || f[1].size != 1) return std::nullopt;
  if (f[2].size > kMaxStoreField / 2 || f[3].size > kMaxStoreField / 2) return std::nullopt;
  const auto str = [](const FrameView& v) {
    return std::string(static_cast<const char*>(v.data), v.size);
  };
  Request r;
  r.reqid = str(f[0]);
  std::memcpy(&r.op, f[1].data, 1);
  r.key = str(f[2]);
  r.value = str(f[3]);
  return r;
}

std::string check_reply(const std::vector<FrameView>& f, size_t count) {
  if (count == 3 && f.size() == 3 && f[0].size == 8 && f[1].size == 1) return "";
  std::string sizes;
  if (f.size() >= 2) sizes = fmt::format(" of {} and {} bytes first", f[0].size, f[1].size);
  return fmt::format(
      "malformed reply: {} frames{}, expected 3 (request id of 8 bytes, status of 1 byte, "
      "value)",
      count, sizes);
}

int64_t add_to(const std::string& current, const std::string& key, int64_t delta) {
  const int64_t v = parse_int(current, key);
  int64_t sum = 0;
  if (__builtin_add_overflow(v, delta, &sum)) {
    throw InvalidArgument(
        fmt::format("add {} to {} (key of {} bytes) overflows int64", delta, v, key.size()));
  }
  return sum;
}

void StoreTable::wake(const std::string& key, std::vector<Reply>& out) {
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->key == key) {
      out.push_back({it->identity, it->reqid, 0, map_[key]});
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
}

void StoreTable::apply(const std::string& identity, const Request& r, std::vector<Reply>& out) {
  try {
    switch (r.op) {
      case 'S':
        map_[r.key] = r.value;
        out.push_back({identity, r.reqid, 0, ""});
        wake(r.key, out);
        return;
      case 'G': {
        auto it = map_.find(r.key);
        if (it != map_.end()) {
          out.push_back({identity, r.reqid, 0, it->second});
          return;
        }
        if (waiters_.size() >= kMaxWaiters) waiters_.erase(waiters_.begin());
        waiters_.push_back({identity, r.reqid, r.key});
        return;
      }
      case 'A': {
        auto it = map_.find(r.key);
        const int64_t v = add_to(it == map_.end() ? std::string() : it->second, r.key,
                                 parse_int(r.value, "delta"));
        map_[r.key] = std::to_string(v);
        out.push_back({identity, r.reqid, 0, map_[r.key]});
        wake(r.key, out);
        return;
      }
      case 'D':
        for (auto it = map_.lower_bound(r.key); it != map_.end() && it->first.starts_with(r.key);) {
          it = map_.erase(it);
        }
        out.push_back({identity, r.reqid, 0, ""});
        return;
      default:
        out.push_back({identity, r.reqid, 1,
                       fmt::format("unknown store op {} (expected S, G, A or D)",
                                   static_cast<int>(static_cast<unsigned char>(r.op)))});
    }
  } catch (const std::exception& e) {
    out.push_back({identity, r.reqid, 1, e.what()});
  }
}

std::string to_hex(std::string_view s) {
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

std::string set_record(std::string_view key, std::string_view value) {
  return "S " + to_hex(key) + " " + to_hex(value) + "\n";
}

std::string delete_record(std::string_view prefix) {
  return "D " + to_hex(prefix) + "\n";
}

std::map<std::string, std::string> replay_log(std::string_view data) {
  std::map<std::string, std::string> map;
  size_t pos = 0;
  std::string a, b;
  while (true) {
    const size_t nl = data.find('\n', pos);
    if (nl == std::string_view::npos) break;  // an incomplete last record is ignored
    const std::string_view line = data.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.starts_with("S ")) {
      const auto sp = line.find(' ', 2);
      if (sp == std::string_view::npos) continue;
      if (from_hex(line.substr(2, sp - 2), a) && from_hex(line.substr(sp + 1), b)) map[a] = b;
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

}  // namespace dtr::pg::store
