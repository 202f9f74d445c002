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

// A command that names one input tensor (Get, Free, ...).
inline protocol::Command input_cmd(protocol::CmdType type, protocol::TensorId id,
                                   uint64_t request = 0) {
  protocol::Command c;
  c.type = type;
  c.inputs[0] = id;
  c.n_inputs = 1;
  c.request = request;
  return c;
}
inline protocol::Command get_cmd(protocol::TensorId id, uint64_t request) {
  return input_cmd(protocol::CmdType::Get, id, request);
}
inline protocol::Command free_cmd(protocol::TensorId id) {
  return input_cmd(protocol::CmdType::Free, id);
}

// A command with only a request number (Sync, Stats).
inline protocol::Command request_cmd(protocol::CmdType type, uint64_t request) {
  protocol::Command c;
  c.type = type;
  c.request = request;
  return c;
}
inline protocol::Command sync_cmd(uint64_t request) {
  return request_cmd(protocol::CmdType::Sync, request);
}
inline protocol::Command stats_cmd(uint64_t request) {
  return request_cmd(protocol::CmdType::Stats, request);
}

// Put: the tensor's bytes come in payload frame `frame`.
inline protocol::Command put_cmd(protocol::TensorId id, const TensorMeta& meta, uint32_t frame) {
  protocol::Command c;
  c.type = protocol::CmdType::Put;
  c.out = id;
  c.meta = meta;
  c.payload = frame;
  return c;
}
inline protocol::Command put_cmd(protocol::TensorId id, const local::Tensor& t, uint32_t frame) {
  return put_cmd(id, TensorMeta::contiguous(t.dtype(), t.shape()), frame);
}
inline protocol::Command put_cmd(protocol::TensorId id, const Shape& shape, uint32_t frame) {
  return put_cmd(id, TensorMeta::contiguous(DType::Float32, shape), frame);
}

inline protocol::Command add_cmd(protocol::TensorId out, protocol::TensorId a,
                                 protocol::TensorId b) {
  protocol::Command c;
  c.type = protocol::CmdType::RunOp;
  c.op = OpId::add;
  c.out = out;
  c.n_inputs = 2;
  c.inputs[0] = a;
  c.inputs[1] = b;
  return c;
}
inline protocol::Command fill_inplace_cmd(protocol::TensorId target, double value) {
  protocol::Command c;
  c.type = protocol::CmdType::RunOp;
  c.op = OpId::fill_;
  c.inplace = true;
  c.n_inputs = 1;
  c.inputs[0] = target;
  c.attrs.scalars[0] = Scalar(value);
  return c;
}

}  // namespace dtr::test
