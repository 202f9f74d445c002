// What peers can put into a worker's log: common::printable escapes their bytes, and
// security::LogThrottle bounds the lines per key and in total (issue 40, items 3 and 4).
#include <doctest/doctest.h>

#include <chrono>
#include <string>

#include "common/printable.hpp"
#include "security/log_throttle.hpp"

namespace {

using dtr::common::printable;
using dtr::security::LogThrottle;
using namespace std::chrono_literals;

TEST_CASE("printable: control bytes, DEL, non-ASCII and backslashes escaped; long text cut") {
  CHECK(printable("host:42") == "host:42");
  CHECK(printable(std::string("a\nb\rc\x1b[2Jd") + '\0' + "e\x7f") ==
        "a\\x0ab\\x0dc\\x1b[2Jd\\x00e\\x7f");
  CHECK(printable("caf\xc3\xa9") == "caf\\xc3\\xa9");
  CHECK(printable("a\\x0a") == "a\\\\x0a");  // an escape cannot be faked
  CHECK(printable(std::string(10, 'x'), 4) == "xxxx... (10 bytes)");
  CHECK(printable("", 4).empty());
}

TEST_CASE("LogThrottle: once per interval per key, counting the held-back ones") {
  LogThrottle t(60s);
  auto now = LogThrottle::Clock::now();
  CHECK(t.admit("a", "one", now) == "one");
  CHECK_FALSE(t.admit("a", "two", now + 1s).has_value());
  CHECK_FALSE(t.admit("a", "three", now + 2s).has_value());
  CHECK(t.admit("b", "other key", now + 3s) == "other key");
  CHECK(t.admit("a", "four", now + 61s) == "four (and 2 more like it in the last 60 s)");
}

TEST_CASE("LogThrottle: at most max_lines per interval in total, whatever the keys") {
  LogThrottle t(60s, 256, 3);
  auto now = LogThrottle::Clock::now();
  for (int i = 0; i < 3; ++i) CHECK(t.admit("k" + std::to_string(i), "line", now).has_value());
  for (int i = 3; i < 50; ++i)
    CHECK_FALSE(t.admit("k" + std::to_string(i), "line", now).has_value());
  auto next = t.admit("k99", "later", now + 61s);
  REQUIRE(next.has_value());
  CHECK(*next == "later (47 lines held back in the last 60 s: at most 3 per 60 s)");
  CHECK(t.admit("k100", "after", now + 62s) == "after");
}

}  // namespace
