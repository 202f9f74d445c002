// What the master's socket code knows of a message's frames: how many a worker's message
// may have (its payload frames, the header and, on the listen-mode ROUTER, the routing
// id) and a frame's bytes as text. Shared by the handshake (master/connect.cpp) and the
// reading of replies (master/replies.cpp).
//
// Thread safety: a constant and a pure function; any thread.
#pragma once

#include <cstddef>
#include <string_view>
#include <zmq.hpp>

#include "protocol/commands.hpp"

namespace dtr::detail {

inline constexpr size_t kMaxFrames = protocol::kMaxPayloadFrames + 2;

inline std::string_view frame_view(const zmq::message_t& m) {
  return {static_cast<const char*>(m.data()), m.size()};
}

}  // namespace dtr::detail
