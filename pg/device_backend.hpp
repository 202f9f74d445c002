// Internal: the Backend every ProcessGroup hands its calls to. It routes by where the
// tensors live:
//  - host tensors go straight to the host transport (the zmq backend), unchanged;
//  - CUDA tensors of a "nccl" group's collectives run on the group's NCCL communicator
//    (pg/nccl/nccl.hpp), set up at the group's first collective on CUDA tensors;
//  - every other CUDA-tensor call goes through host staging: the inputs are copied to host
//    memory at issue (on the caller's current stream, in order with its earlier work), the
//    host transport runs the operation, and the results are copied back to the device
//    before the Work completes. That covers "zmq" groups, point-to-point calls of "nccl"
//    groups, and "nccl" groups whose ranks share one GPU or where a rank lacks NCCL.
//
// NCCL collectives first exchange a small signature (op, root, ReduceOp, dtype, element
// count, device) over the host transport, issued in program order with the group's other
// collectives; a mismatch fails the collective on every rank with an error naming the
// rank and both values, instead of hanging or corrupting memory. Completion, copies back
// and NCCL waits happen on one "finisher" thread per group (started at its first CUDA
// call), in issue order.
//
// Thread safety: as pg::Backend (any thread). The NCCL set-up is a collective: every
// member reaches it at the same collective.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "pg/backend.hpp"

namespace dtr::pg {

// Wraps `host` (the group's host transport). `backend` is the group's backend name ("zmq"
// or "nccl"); `timeout` is the group's Options::timeout.
std::shared_ptr<Backend> make_device_backend(std::shared_ptr<Backend> host, std::string backend,
                                             std::chrono::milliseconds timeout);

// The pieces of the NCCL path that need no device (declared for the tests):
// The signature of one collective (kSignatureWords int64 words, pg/signature.hpp) this rank
// all-gathers before running it on NCCL: op, root, ReduceOp, dtype, element count, the tensors'
// device and the communicator's device.
std::vector<int64_t> nccl_signature(const CollectiveArgs& args, int device, int comm_device);
// `all`: n signatures in rank order. Throws, identically on every rank, when a rank's
// tensors are not on its communicator's device (DeviceError) or the ranks disagree on the
// op, root, ReduceOp (InvalidArgument), dtype (DTypeError) or count (ShapeError).
void check_nccl_signatures(CommOp op, const int64_t* all, int n);
// `facts`: 3 words per rank (GPU UUID as two words, has NCCL). Why the group must stage
// ("rank 1 was built without NCCL", "ranks 0 and 2 share one GPU, ..."), or "" for NCCL.
std::string staging_reason(const int64_t* facts, int n);

// For tests: groups created after set_stage_host_tensors_for_testing(true) send host tensors
// through the staging path too (copied to fresh host tensors and back), so that path and
// its completion thread run without a GPU. Process-wide.
void set_stage_host_tensors_for_testing(bool on);

}  // namespace dtr::pg
