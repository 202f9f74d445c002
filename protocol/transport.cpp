// ZeroMQ framing helpers.
#include "protocol/transport.hpp"

#include <malloc.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>

#include "dtr/env.hpp"

namespace dtr::protocol {

namespace {
// The payload frames of a message whose first frames are sent; zero-copy, each keeping
// its tensor's storage alive until ZeroMQ is done with it.
void send_payloads(zmq::socket_t& socket, std::span<const local::Tensor> payloads) {
  for (size_t i = 0; i < payloads.size(); ++i) {
    const local::Tensor& t = payloads[i];
    auto* keep = new std::shared_ptr<Storage>(t.storage());
    size_t bytes = static_cast<size_t>(t.numel()) * element_size(t.dtype());
    zmq::message_t body(
        t.raw_data(), bytes,
        [](void*, void* hint) { delete static_cast<std::shared_ptr<Storage>*>(hint); }, keep);
    (void)socket.send(body,
                      i + 1 < payloads.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}
}  // namespace

std::optional<Received> try_recv(zmq::socket_t& socket, size_t max_frames) {
  Received r;
  zmq::message_t frame;
  try {
    if (!socket.recv(frame, zmq::recv_flags::dontwait)) return std::nullopt;
  } catch (const zmq::error_t& e) {
    // A signal (Ctrl-C handled by the program) while looking: nothing read, look again
    // later; any other error is the caller's.
    if (e.num() == EINTR) return std::nullopt;
    throw;
  }
  while (true) {
    bool more = frame.more();
    if (r.frames.size() < max_frames) {
      r.frames.push_back(std::move(frame));
    } else {
      r.truncated = true;
    }
    if (!more) break;
    frame = zmq::message_t();
    // The rest of a multipart message is already here: ZeroMQ delivers messages whole.
    (void)socket.recv(frame, zmq::recv_flags::none);
  }
  return r;
}

bool send_message(zmq::socket_t& socket, const std::string* identity, std::string header,
                  std::span<const local::Tensor> payloads) {
  try {
    if (identity) {
      if (!socket.send(zmq::buffer(*identity),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        return false;
    }
    zmq::send_flags more = payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    auto* owned = new std::string(std::move(header));
    zmq::message_t head(
        owned->data(), owned->size(),
        [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
    if (!socket.send(head, more)) return false;
    send_payloads(socket, payloads);
    return true;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return false;
    throw;
  }
}

SendResult try_send(zmq::socket_t& socket, const std::string* identity,
                    const std::shared_ptr<const std::string>& header,
                    std::span<const local::Tensor> payloads) {
  try {
    const zmq::send_flags more =
        payloads.empty() ? zmq::send_flags::none : zmq::send_flags::sndmore;
    if (identity) {
      if (!socket.send(zmq::buffer(*identity),
                       zmq::send_flags::sndmore | zmq::send_flags::dontwait))
        return SendResult::kWouldBlock;
    }
    auto* keep = new std::shared_ptr<const std::string>(header);
    zmq::message_t head(
        const_cast<char*>(header->data()), header->size(),
        [](void*, void* hint) { delete static_cast<std::shared_ptr<const std::string>*>(hint); },
        keep);
    // With an identity frame in, the rest of the message cannot be refused.
    const zmq::send_flags flags = identity ? more : more | zmq::send_flags::dontwait;
    if (!socket.send(head, flags)) return SendResult::kWouldBlock;
    send_payloads(socket, payloads);
    return SendResult::kSent;
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return SendResult::kUnreachable;
    throw;
  }
}

std::optional<std::string> endpoint_problem(std::string_view endpoint, bool bind) {
  auto problem = [&](std::string_view why) {
    return fmt::format("expected tcp://HOST:PORT or ipc://PATH, got '{}' ({})", endpoint, why);
  };
  constexpr std::string_view tcp = "tcp://", ipc = "ipc://";
  if (endpoint.rfind(ipc, 0) == 0) {
    if (endpoint.size() == ipc.size()) return problem("no path");
    return std::nullopt;
  }
  if (endpoint.rfind(tcp, 0) != 0) {
    if (endpoint.find("://") == std::string_view::npos)
      return problem("no transport: write tcp:// before the host");
    return problem("unknown transport");
  }
  std::string_view rest = endpoint.substr(tcp.size());
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return problem("no port");
  std::string_view host = rest.substr(0, colon), port = rest.substr(colon + 1);
  if (host.empty()) return problem("no host");
  if (host == "*" && !bind) return problem("'*' is for listening: name the host to connect to");
  for (char c : host)
    if (std::isspace(static_cast<unsigned char>(c))) return problem("white space in the host");
  if (port == "*" || port == "0") {
    if (!bind) return problem("a port the kernel picks is for listening: name the port");
    return std::nullopt;
  }
  if (port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return problem(fmt::format("port '{}' is not a number", port));
  int value = std::stoi(std::string(port));
  if (value < 1 || value > 65535) return problem(fmt::format("port {} is not 1 to 65535", value));
  return std::nullopt;
}

std::string bind_failure(int err) {
  std::string text = zmq_strerror(err);
  switch (err) {
    case ENODEV:
      return text +
             " (a listen address is an address of this machine, an interface name such "
             "as eth0, or *)";
    case EADDRINUSE:
      return text + " (another process listens on that port; * picks a free one)";
    case EACCES:
      return text + " (ports below 1024 need privileges)";
    case EADDRNOTAVAIL:
      return text + " (that address is not one of this machine's)";
    default:
      return text;
  }
}

std::vector<std::string> split_endpoints(std::string_view list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    std::string_view item = list.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front())))
      item.remove_prefix(1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back())))
      item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string random_routing_id() {
  std::random_device rd;
  std::string id(16, '\0');
  for (size_t i = 0; i < id.size(); i += 4) {
    uint32_t r = rd();
    std::memcpy(id.data() + i, &r, 4);
  }
  id[0] = static_cast<char>(id[0] | 1);  // ids starting with a zero byte are ZeroMQ's own
  return id;
}

std::string beat_identity(const std::string& data_id) {
  return data_id + std::string("\x01") + "beat";
}

std::shared_ptr<zmq::message_t> share_frame(zmq::message_t&& frame) {
  return std::make_shared<zmq::message_t>(std::move(frame));
}

void configure_socket(zmq::socket_t& socket, int64_t max_message_bytes) {
  socket.set(zmq::sockopt::linger, 0);
  socket.set(zmq::sockopt::maxmsgsize, max_message_bytes);
  socket.set(zmq::sockopt::sndhwm, 0);
  socket.set(zmq::sockopt::rcvhwm, 0);
  socket.set(zmq::sockopt::tcp_keepalive, 1);
}

namespace {
std::atomic<bool> g_allocator_tuned{false};
}  // namespace

void tune_allocator_for_large_messages() {
  // One arena, no mmap for big blocks, no trimming: a freed 64 MiB receive buffer stays
  // mapped and faulted in, and the next message of that size reuses it (the glibc
  // settings behind the "malloc tuned" ZeroMQ figures in shared/bench-peers).
  g_allocator_tuned = true;
  mallopt(M_ARENA_MAX, 1);
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void tune_allocator_for_frames() {
  if (g_allocator_tuned.exchange(true)) return;
  if (!env_flag("DTR_TUNE_MALLOC", true)) return;
  // ZeroMQ allocates every received frame (up to 256 KiB); with glibc's defaults a block
  // that size is mapped and unmapped, or the heap's top trimmed, around each one, and
  // every frame is page-faulted in again.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 64 << 20);
}

}  // namespace dtr::protocol
