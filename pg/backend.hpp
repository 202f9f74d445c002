// Backend: what a transport implements under ProcessGroup (the seed's "DataChannel").
// ProcessGroup validates the call (membership, ranks, contiguity, list lengths, shapes
// and dtypes of this rank's tensors, capability) and hands the backend a CollectiveArgs;
// the backend checks what only the other ranks can tell (their sizes and dtypes), runs the
// algorithm and completes a Work. A new backend (nccl, mpi, gloo) implements this class
// and is added to make_backend(); callers do not change.
//
// Thread safety: implementations must accept calls from any thread.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dtr/process_group.hpp"

namespace dtr::pg {

// Tensors of one collective (group ranks throughout):
//   Broadcast, AllReduce, Reduce: outputs[0] (read and written in place)
//   AllGather: inputs[0]; outputs: size() blocks shaped like the input
//   Gather:    inputs[0]; outputs: size() blocks on the root, none elsewhere
//   Scatter:   inputs: size() blocks on the root, none elsewhere; outputs[0]
//   ReduceScatter: inputs: size() blocks shaped like outputs[0]
//   Barrier:   none
struct CollectiveArgs {
  CommOp op = CommOp::Barrier;
  ReduceOp reduce = ReduceOp::Sum;
  int root = 0;
  std::vector<local::Tensor> inputs;
  std::vector<local::Tensor> outputs;
  // The caller waits for the result at once: the backend may run it on the calling thread
  // when nothing of this group is queued (saves two thread hand-offs per call).
  bool blocking = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  // Group rank of this process (-1 when not a member) and group size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // World ranks of the members, in group-rank order.
  virtual const std::vector<int>& world_ranks() const = 0;
  // A subgroup (group ranks of this group, validated, sorted as given).
  virtual std::shared_ptr<Backend> new_group(const std::vector<int>& group_ranks) = 0;
  // `blocking`: the caller waits for the Work at once (ProcessGroup::send/recv), so the
  // backend may do the whole operation on the calling thread.
  virtual Work isend(const local::Tensor& tensor, int dst, int tag, bool blocking) = 0;
  virtual Work irecv(const local::Tensor& tensor, int src, int tag, bool blocking) = 0;
  virtual Work collective(CollectiveArgs args) = 0;
  virtual void shutdown() = 0;
  // World rank `world_rank` is lost (ProcessGroup::declare_lost): what involves it fails
  // now with `why`. A backend without such a notion keeps its own timeouts (the default).
  virtual void declare_lost(int world_rank, const std::string& why) {
    (void)world_rank;
    (void)why;
  }
  // How CUDA tensors travel (ProcessGroup::cuda_path()); "" for a backend without them.
  virtual std::string cuda_path() const { return ""; }
  // How host tensors of collectives travel (ProcessGroup::host_path()); "" for a backend
  // that does not say, or before the group's first collective.
  virtual std::string host_path() const { return ""; }
};

}  // namespace dtr::pg
