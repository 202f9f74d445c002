// dtr error hierarchy: every failure the library reports is a dtr::Error.
//
// Thread safety: the classes are plain exception values; copying and reading them from
// any thread is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

namespace dtr {

// Base of every exception dtr throws.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A caller passed something that can never work (bad dim, shape, dtype, argument).
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// Shapes that do not fit the op (not broadcastable, wrong rank, numel mismatch).
class ShapeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A dtype the op does not accept, or two dtypes that do not go together.
class DTypeError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// A dim or an index outside the tensor.
class IndexError : public InvalidArgument {
 public:
  using InvalidArgument::InvalidArgument;
};

// An allocation the allocator could not satisfy.
class OutOfMemory : public Error {
 public:
  using Error::Error;
};

// A CUDA device is missing, out of range, or reported an error (the message names the
// device and CUDA's own text); also raised where dtr was built without CUDA.
class DeviceError : public Error {
 public:
  using Error::Error;
};

// Bytes that do not follow the protocol (bad prefix, version, count, id, field).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A socket or connection failed (bind, connect, send, receive).
class TransportError : public Error {
 public:
  using Error::Error;
};

// A worker of the session is gone: its connection closed, or it sent nothing (not even a
// heartbeat) for longer than the session's heartbeat timeout. Raised by every later use of
// its node; the message names the node, its endpoint and why.
class WorkerLost : public TransportError {
 public:
  using TransportError::TransportError;
};

// A link could not be authenticated: the other side holds another cluster key, or one side
// uses CURVE and the other does not, or an endpoint that is not loopback was to be used
// without a key. The message names the endpoint and what to do.
class AuthenticationError : public TransportError {
 public:
  using TransportError::TransportError;
};

// A wait ran out of time.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// What a worker reported about a failed op, for RemoteError::failure().
struct RemoteFailureInfo {
  std::string op;       // the op that failed, or could not run because an input had failed
  uint64_t tensor = 0;  // the tensor it was producing (0: none)
  int node = -1;
  int device = -1;  // of that tensor: -1 the node's CPU, k CUDA device k
  std::string message;
  // The first cause (the same op and tensor when this op is the root of the failure).
  std::string cause_op;
  uint64_t cause_tensor = 0;
  std::string cause_message;
};

// An op failed on a worker; raised on the master at the next sync point that touches the
// failed tensor. The message names op, tensor, node, device and the worker's message;
// failure() gives them as fields when the error came from a worker's report.
class RemoteError : public Error {
 public:
  using Error::Error;
  RemoteError(const std::string& what, std::shared_ptr<const RemoteFailureInfo> info)
      : Error(what), info_(std::move(info)) {}
  // The worker's report, or nullptr when this error was not made from one.
  const RemoteFailureInfo* failure() const { return info_.get(); }
  const std::shared_ptr<const RemoteFailureInfo>& failure_ptr() const { return info_; }

 private:
  std::shared_ptr<const RemoteFailureInfo> info_;
};

}  // namespace dtr
