// Collectives issued by the master over tensors on several nodes, run worker to worker on
// the session's process group (the master carries no tensor bytes).
//
//   std::vector<dtr::DistributedTensor> grads;        // one per node, same shape and dtype
//   ...
//   dtr::all_reduce(grads, dtr::ReduceOp::Avg);       // returns at once; every node averages
//
// tensors[i]'s node is rank i of the group. When the tensors lie on nodes 0..n-1 in that
// order the group is the session's whole process group; any other set or order of nodes
// gets a subgroup, made once on every node and reused. Each node runs its part on its
// current stream, so stream order and events apply as for any command. The master checks
// the call first (one tensor per node, distinct nodes, same shape and dtype, CPU) and
// throws InvalidArgument / ShapeError / DTypeError at the call.
//
// Failures: the members first agree on whether every input is valid; if one is failed,
// every member's output fails (RemoteError at the next sync point) naming the node whose
// input was bad, and nothing is computed with it. A node that is gone makes the others'
// outputs fail once the workers' --collective-timeout-ms passes (default 300 s).
//
// Thread safety: any thread may call these. Each node receives the collectives in the
// same order (one lock covers a call's commands to every node); as with NCCL, collectives
// on different streams of one node must not be waited on in an order that differs
// between nodes.
#pragma once

#include <vector>

#include "dtr/distributed.hpp"
#include "dtr/process_group.hpp"

namespace dtr {

// In place: every tensor becomes the reduction of all of them.
void all_reduce(std::vector<DistributedTensor>& tensors, ReduceOp op = ReduceOp::Sum);
// In place: every tensor becomes a copy of tensors[root].
void broadcast(std::vector<DistributedTensor>& tensors, int root);
// Result i lives on tensors[i]'s node, shape [n, ...] (n = tensors.size()), row j being
// tensors[j].
std::vector<DistributedTensor> all_gather(const std::vector<DistributedTensor>& tensors);
// Inputs of shape [n * m, ...]; result i (on tensors[i]'s node, shape [m, ...]) is the
// reduction over all inputs of rows [i*m, (i+1)*m).
std::vector<DistributedTensor> reduce_scatter(const std::vector<DistributedTensor>& tensors,
                                              ReduceOp op = ReduceOp::Sum);

}  // namespace dtr
