// Internal: the NCCL communicator of one process group, for collectives on CUDA tensors
// (pg/device_backend.cpp decides when it is used). Built when DTR_WITH_NCCL is on
// (pg/nccl/nccl.cpp); otherwise pg/nccl/no_nccl.cpp provides the same functions and nccl_built() is
// false, so CUDA tensors of every group go through host staging.
//
// One communicator per group, bound to one device per rank (the device of the group's
// first CUDA collective on that rank). Its unique id travels through the group itself:
// rank 0 makes it and broadcasts it over the group's host transport, then every member
// calls ncclCommInitRank. Operations run on the communicator's own CUDA stream, which
// first waits for an event recorded on the caller's stream at issue.
//
// Thread safety: nccl_connect() is called by every member of the group at the same point
// of its program (it is a collective). A NcclComm's run() is called from one thread at a
// time (the group's finisher thread); abort() may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "pg/backend.hpp"
#include "tensor/device_runtime.hpp"

namespace dtr::pg {

class NcclComm {
 public:
  virtual ~NcclComm() = default;
  virtual int device() const = 0;
  // Runs one collective on CUDA tensors of device(), validated on every rank (same op,
  // dtype, sizes and root everywhere). Its stream waits for `ready` first. Returns once
  // the device has finished it. Throws TimeoutError when it has not finished by `deadline`
  // (the communicator is then aborted and every later run() throws), TransportError when
  // NCCL reports an error (a peer died, a network failure), and a DeviceError for a CUDA
  // failure. `closing` set (the group shuts down): stop waiting, abort, throw
  // TransportError. After any failure the communicator is aborted and every later run()
  // throws TransportError naming the first failure.
  virtual void run(const CollectiveArgs& args, const cuda::Event& ready,
                   std::chrono::steady_clock::time_point deadline,
                   const std::atomic<bool>& closing) = 0;
  // "nccl 2.28.3 on cuda:0", for ProcessGroup::cuda_path().
  virtual std::string describe() const = 0;
};

// Whether this dtr was built with NCCL.
bool nccl_built();
// "2.28.3" (the library's version at run time), "" when not built.
std::string nccl_version();
// Creates the group's communicator on `device` (see above). `host` is the group's host
// transport, used to broadcast the unique id; waits are bounded by `timeout`. Throws
// TransportError with NCCL's message when ncclCommInitRank fails, DeviceError when not
// built with NCCL.
std::shared_ptr<NcclComm> nccl_connect(Backend& host, int device,
                                       std::chrono::milliseconds timeout);

}  // namespace dtr::pg
