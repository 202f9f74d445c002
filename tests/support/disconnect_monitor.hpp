// Tests: waits for ZeroMQ to report that a socket's connection was dropped, through a
// socket monitor (the monitor's PAIR socket, connected to the inproc address given to
// zmq_socket_monitor with ZMQ_EVENT_DISCONNECTED). Used by the hostile-client tests.
//
// Thread safety: one thread per monitor socket.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstring>
#include <zmq.hpp>

namespace dtr::test {

// True once a disconnect event arrives within `limit` (polled every 50 ms).
inline bool wait_disconnected(zmq::socket_t& monitor, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    zmq::pollitem_t item{monitor.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    zmq::message_t ev;
    while (monitor.recv(ev, zmq::recv_flags::dontwait)) {
      uint16_t event = 0;
      if (ev.size() >= 2) std::memcpy(&event, ev.data(), 2);
      zmq::message_t rest;
      if (ev.more()) (void)monitor.recv(rest, zmq::recv_flags::dontwait);
      if (event == ZMQ_EVENT_DISCONNECTED) return true;
    }
  }
  return false;
}

}  // namespace dtr::test
