// Command execution for one master session.
#include "worker/session.hpp"

#include "protocol/codec.hpp"

#include <fmt/format.h>

#include <array>
#include <cstring>
#include <limits>
#include <new>

namespace dtr::worker {

using protocol::CmdType;
using protocol::Command;
using protocol::RemoteFailure;
using protocol::TensorId;

namespace {

std::string_view command_name(const Command& c) {
  switch (c.type) {
    case CmdType::RunOp:
      return op_def(c.op).name;
    case CmdType::Put:
      return "put";
    case CmdType::Get:
      return "get";
    case CmdType::Free:
      return "free";
    case CmdType::Sync:
      return "sync";
    case CmdType::Stats:
      return "stats";
  }
  return "?";
}

RemoteFailure make_failure(TensorId tensor, std::string_view op, std::string message) {
  RemoteFailure f;
  f.tensor = tensor;
  f.op = std::string(op);
  f.message = std::move(message);
  f.cause_tensor = tensor;
  f.cause_op = f.op;
  f.cause_message = f.message;
  return f;
}

}  // namespace

Session::Failure Session::root_failure(TensorId tensor, std::string_view op, std::string message) {
  auto f = std::make_shared<RemoteFailure>(make_failure(tensor, op, std::move(message)));
  if (unreported_.size() < protocol::kMaxErrorsPerReply) {
    unreported_.push_back(*f);
  } else {
    ++dropped_failures_;
  }
  return f;
}

Session::Failure Session::dependent_failure(TensorId tensor, std::string_view op, TensorId input,
                                            const RemoteFailure& cause) {
  auto f = std::make_shared<RemoteFailure>();
  f->tensor = tensor;
  f->op = std::string(op);
  f->message = fmt::format("input %{} is failed", input);
  f->cause_tensor = cause.cause_tensor;
  f->cause_op = cause.cause_op;
  f->cause_message = cause.cause_message;
  return f;
}

bool Session::check_new_id(TensorId id, std::string_view op) {
  if (id == protocol::kNoTensor) {
    root_failure(id, op, "output tensor id 0 is not a valid id");
    return false;
  }
  if (table_.count(id)) {
    root_failure(id, op, fmt::format("output tensor id %{} is already in use", id));
    return false;
  }
  return true;
}

void Session::run(const protocol::Batch& batch, std::span<const PayloadFrame> payloads,
                  std::vector<Outgoing>& replies) {
  for (const Command& c : batch.commands) {
    if (c.stream != 0) {
      bool makes = (c.type == CmdType::RunOp && !c.inplace) || c.type == CmdType::Put;
      Failure f = root_failure(makes ? c.out : c.inputs[0], command_name(c),
                               fmt::format("stream {} does not exist on this worker", c.stream));
      // The output exists, failed, so that its users learn why; a request is still
      // answered, or the master would wait for it forever.
      if (makes && c.out != protocol::kNoTensor && !table_.count(c.out))
        table_[c.out] = Entry{{}, f};
      if (c.type == CmdType::Get) {
        protocol::Reply r;
        r.type = protocol::ReplyType::Get;
        r.request = c.request;
        r.failures.push_back(*f);
        replies.push_back(Outgoing{protocol::encode(r), {}});
      }
      if (c.type != CmdType::Sync && c.type != CmdType::Stats) continue;
    }
    switch (c.type) {
      case CmdType::RunOp:
        run_op(c);
        break;
      case CmdType::Put:
        put(c, payloads);
        break;
      case CmdType::Get:
        get(c, replies);
        break;
      case CmdType::Free:
        free(c);
        break;
      case CmdType::Sync: {
        protocol::Reply r;
        r.type = protocol::ReplyType::Sync;
        r.request = c.request;
        r.failures = std::move(unreported_);
        if (dropped_failures_ > 0) {
          RemoteFailure more =
              make_failure(protocol::kNoTensor, "sync",
                           fmt::format("{} more failures were not recorded", dropped_failures_));
          if (r.failures.size() >= protocol::kMaxErrorsPerReply) r.failures.pop_back();
          r.failures.push_back(more);
        }
        unreported_.clear();
        dropped_failures_ = 0;
        replies.push_back(Outgoing{protocol::encode(r), {}});
        break;
      }
      case CmdType::Stats: {
        protocol::Reply r;
        r.type = protocol::ReplyType::Stats;
        r.request = c.request;
        r.stats = stats();
        replies.push_back(Outgoing{protocol::encode(r), {}});
        break;
      }
    }
  }
}

void Session::run_op(const Command& c) {
  const OpDef& d = op_def(c.op);
  TensorId target = c.inplace ? c.inputs[0] : c.out;
  if (c.inplace) {
    if (c.n_inputs == 0) {
      root_failure(protocol::kNoTensor, d.name, "an in-place command needs input 0 (its target)");
      return;
    }
    if (c.out != protocol::kNoTensor) {
      root_failure(c.out, d.name, fmt::format("an in-place command names output id %{}", c.out));
      return;
    }
  } else if (!check_new_id(c.out, d.name)) {
    return;
  }

  std::array<local::Tensor, 2> inputs;
  for (uint8_t i = 0; i < c.n_inputs; ++i) {
    auto it = table_.find(c.inputs[i]);
    if (it == table_.end()) {
      Failure f =
          root_failure(target, d.name, fmt::format("input tensor %{} does not exist", c.inputs[i]));
      if (!c.inplace) table_[c.out] = Entry{{}, f};
      return;
    }
    if (it->second.failure) {
      Failure f = dependent_failure(target, d.name, c.inputs[i], *it->second.failure);
      table_[target] = Entry{{}, f};
      return;
    }
    inputs[i] = it->second.tensor;
  }

  try {
    local::Tensor result = local::execute(
        c.op, std::span<const local::Tensor>(inputs.data(), c.n_inputs), c.attrs, c.inplace);
    if (!c.inplace) table_[c.out] = Entry{std::move(result), nullptr};
  } catch (const std::bad_alloc&) {
    table_[target] = Entry{{}, root_failure(target, d.name, "out of host memory")};
  } catch (const std::exception& e) {
    table_[target] = Entry{{}, root_failure(target, d.name, e.what())};
  }
}

void Session::put(const Command& c, std::span<const PayloadFrame> payloads) {
  if (!check_new_id(c.out, "put")) return;
  if (c.payload < 1 || c.payload > payloads.size()) {  // the decoder checks it too
    table_[c.out] = Entry{{},
                          root_failure(c.out, "put",
                                       fmt::format("payload frame {} does not exist (1 to {})",
                                                   c.payload, payloads.size()))};
    return;
  }
  const PayloadFrame& frame = payloads[c.payload - 1];
  const TensorMeta& m = c.meta;
  // numel * element size must not wrap around (2^61 float64 elements would need 0 bytes).
  if (static_cast<uint64_t>(m.numel()) >
      std::numeric_limits<int64_t>::max() / element_size(m.dtype)) {
    table_[c.out] =
        Entry{{},
              root_failure(c.out, "put",
                           fmt::format("{} needs more bytes than int64 can count", describe(m)))};
    return;
  }
  size_t expected = static_cast<size_t>(m.numel()) * element_size(m.dtype);
  if (frame.size != expected) {
    table_[c.out] = Entry{{},
                          root_failure(c.out, "put",
                                       fmt::format("payload has {} bytes, {} needs {}", frame.size,
                                                   describe(m), expected))};
    return;
  }
  try {
    std::shared_ptr<Storage> storage;
    bool aligned = reinterpret_cast<uintptr_t>(frame.data) % element_size(m.dtype) == 0;
    if (aligned && frame.owner) {
      storage = Storage::wrap(frame.data, frame.size, frame.owner);
    } else {
      storage = Storage::allocate(frame.size);
      if (frame.size) std::memcpy(storage->data(), frame.data, frame.size);
    }
    table_[c.out] =
        Entry{local::Tensor(std::move(storage), TensorMeta::contiguous(m.dtype, m.shape)), nullptr};
  } catch (const std::exception& e) {
    table_[c.out] = Entry{{}, root_failure(c.out, "put", e.what())};
  }
}

void Session::get(const Command& c, std::vector<Outgoing>& replies) {
  protocol::Reply r;
  r.type = protocol::ReplyType::Get;
  r.request = c.request;
  Outgoing out;
  auto it = table_.find(c.inputs[0]);
  if (it == table_.end()) {
    r.failures.push_back(
        make_failure(c.inputs[0], "get", fmt::format("tensor %{} does not exist", c.inputs[0])));
  } else if (it->second.failure) {
    r.failures.push_back(*it->second.failure);
  } else {
    try {
      local::Tensor packed = it->second.tensor.contiguous();
      r.meta = packed.meta();
      out.payloads.push_back(std::move(packed));
    } catch (const std::exception& e) {
      r.failures.push_back(make_failure(c.inputs[0], "get", e.what()));
    }
  }
  out.header = protocol::encode(r);
  replies.push_back(std::move(out));
}

void Session::free(const Command& c) {
  if (table_.erase(c.inputs[0]) == 0)
    root_failure(c.inputs[0], "free", fmt::format("tensor %{} does not exist", c.inputs[0]));
}

protocol::MemoryStatsWire Session::stats() const {
  MemoryStats s = cpu_memory_stats();
  return protocol::MemoryStatsWire{s.bytes_in_use, s.peak_bytes,
                                   static_cast<int64_t>(table_.size())};
}

}  // namespace dtr::worker
