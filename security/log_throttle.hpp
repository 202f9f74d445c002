// LogThrottle: keeps logs readable when a peer repeats itself (a hostile client sending
// garbage, a client retrying a refused handshake, a second master asking every 200 ms).
// Each key (one source address and one kind of line: never something the peer claims,
// such as its name or routing id, which a client that reconnects changes at will) is let
// through at most once per interval; the lines held back in between are counted, and the
// next line let through for that key says how many there were. Beside that, at most
// `max_lines` lines per interval are let through in total, whatever the keys (many
// addresses, or the oldest keys dropped): the next line after a held-back stretch says how
// many were held back. Keys are forgotten once idle for an interval, and at most
// `max_keys` are tracked (past that, the oldest is dropped), so memory stays bounded
// whatever the peers do.
//
// Thread safety: every member may be called from any thread (one mutex).
#pragma once

#include <fmt/format.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

namespace dtr::security {

class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogThrottle(std::chrono::milliseconds interval, size_t max_keys = 256,
                       uint64_t max_lines = 32)
      : interval_(interval), max_keys_(max_keys), max_lines_(max_lines) {}

  // The line to log now for `key`, or nullopt when one was logged for it within the
  // interval, or `max_lines` were logged in total within it (this one is then counted). A
  // line after held-back ones ends with "(and N more like it in the last S s)"; the first
  // line after the total limit held some back ends with "(N lines held back in the last S s:
  // at most M per S s)".
  std::optional<std::string> admit(const std::string& key, std::string line,
                                   Clock::time_point now = Clock::now()) {
    std::lock_guard lock(mu_);
    forget_idle(now);
    if (now - window_start_ >= interval_) {
      window_start_ = now;
      window_lines_ = 0;
    }
    auto it = keys_.find(key);
    if (it != keys_.end() && now - it->second.logged < interval_) {
      ++it->second.held;
      it->second.last = now;
      return std::nullopt;
    }
    if (window_lines_ >= max_lines_) {
      ++total_held_;
      return std::nullopt;
    }
    ++window_lines_;
    uint64_t held = it == keys_.end() ? 0 : it->second.held;
    if (it == keys_.end()) {
      if (keys_.size() >= max_keys_) drop_oldest();
      it = keys_.emplace(key, Entry{}).first;
    }
    it->second = Entry{now, now, 0};
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(interval_).count();
    if (held > 0) line += fmt::format(" (and {} more like it in the last {} s)", held, seconds);
    if (total_held_ > 0) {
      line += fmt::format(" ({} lines held back in the last {} s: at most {} per {} s)",
                          total_held_, seconds, max_lines_, seconds);
      total_held_ = 0;
    }
    return line;
  }

 private:
  struct Entry {
    Clock::time_point logged{};  // when a line for the key was last let through
    Clock::time_point last{};    // when one last came
    uint64_t held = 0;           // lines held back since `logged`
  };

  void forget_idle(Clock::time_point now) {
    for (auto it = keys_.begin(); it != keys_.end();) {
      // A key whose held-back lines were never reported keeps its count until its next
      // line; one with nothing held and nothing for an interval is forgotten.
      if (it->second.held == 0 && now - it->second.last >= interval_)
        it = keys_.erase(it);
      else
        ++it;
    }
  }
  void drop_oldest() {
    auto oldest = keys_.begin();
    for (auto it = keys_.begin(); it != keys_.end(); ++it)
      if (it->second.last < oldest->second.last) oldest = it;
    if (oldest != keys_.end()) keys_.erase(oldest);
  }

  const std::chrono::milliseconds interval_;
  const size_t max_keys_;
  const uint64_t max_lines_;
  std::mutex mu_;
  std::map<std::string, Entry> keys_;
  Clock::time_point window_start_{};  // the total limit's current interval
  uint64_t window_lines_ = 0;         // lines let through in it
  uint64_t total_held_ = 0;           // held back by the total limit, not yet reported
};

}  // namespace dtr::security
