// Test support: a decoded reply as the reply struct a test expects.
//
// Thread safety: stateless functions (doctest's checks, so on a test's own thread).
#pragma once

#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace dtr::test {

// `r` as a protocol::reply::R; the test stops (REQUIRE) when it is another reply.
template <class R>
R reply_as(protocol::Reply r) {
  R* x = std::get_if<R>(&r);
  REQUIRE_MESSAGE(x != nullptr, "a " << std::string(protocol::reply_name(r))
                                     << " reply, expected a " << std::string(R::kName) << " reply");
  return std::move(*x);
}

// decode_reply(header, payload_frames) as a protocol::reply::R.
template <class R>
R decode_as(std::string_view header, size_t payload_frames) {
  return reply_as<R>(protocol::decode_reply(header, payload_frames));
}

}  // namespace dtr::test
