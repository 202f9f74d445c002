// Test support: builders of the protocol's commands, for tests that talk to a worker with
// raw messages (server_test, hostile_test).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtr/tensor.hpp"
#include "protocol/codec.hpp"
#include "protocol/messages.hpp"

namespace dtr::test {

inline std::string batch(std::vector<protocol::Command> commands) {
  protocol::Batch b;
  b.commands = std::move(commands);
  return protocol::encode(b);
}

inline protocol::Command get_cmd(protocol::TensorId id, uint64_t request) {
  return protocol::cmd::Get{.input = id, .request = request};
}
inline protocol::Command free_cmd(protocol::TensorId id) {
  return protocol::cmd::Free{.input = id};
}
inline protocol::Command sync_cmd(uint64_t request) {
  return protocol::cmd::Sync{.request = request};
}
inline protocol::Command stats_cmd(uint64_t request) {
  return protocol::cmd::Stats{.request = request};
}

// Put: the tensor's bytes come in payload frame `frame`.
inline protocol::Command put_cmd(protocol::TensorId id, const TensorMeta& meta, uint32_t frame) {
  return protocol::cmd::Put{.out = id, .meta = meta, .payload = frame};
}
inline protocol::Command put_cmd(protocol::TensorId id, const local::Tensor& t, uint32_t frame) {
  return put_cmd(id, TensorMeta::contiguous(t.dtype(), t.shape()), frame);
}
inline protocol::Command put_cmd(protocol::TensorId id, const Shape& shape, uint32_t frame) {
  return put_cmd(id, TensorMeta::contiguous(DType::Float32, shape), frame);
}

inline protocol::Command add_cmd(protocol::TensorId out, protocol::TensorId a,
                                 protocol::TensorId b) {
  return protocol::cmd::RunOp{.op = OpId::add, .inputs = {2, {a, b}}, .out = out};
}
inline protocol::Command fill_inplace_cmd(protocol::TensorId target, double value) {
  protocol::cmd::RunOp c{.op = OpId::fill_, .inplace = true, .inputs = {1, {target, 0}}};
  c.attrs.scalars[0] = Scalar(value);
  return c;
}

}  // namespace dtr::test
