// Collective signatures: what every rank must agree on before a collective whose transport
// cannot check it in band (NCCL, gloo, MPI move bytes without dtr's headers). Each rank
// all-gathers its signature first; every rank then runs the same check on the same data,
// so a mismatch fails the collective identically everywhere, naming the ranks and both
// values, before any data moves (no hang, no write past a tensor, no abort inside the
// library).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "pg/backend.hpp"

namespace dtr::pg {

// Words of one signature: op, root, ReduceOp, dtype (-1 without a tensor), element count of
// the reference tensor, the tensors' device, the communicator's device (-1: host).
inline constexpr int kSignatureWords = 7;

// The reference tensor of a collective: the one whose dtype and size every rank shares (the
// input of all_gather and gather, the output of the others); null for barrier.
const local::Tensor* reference_tensor(const CollectiveArgs& args);
std::vector<int64_t> collective_signature(const CollectiveArgs& args, int device, int comm_device);
// `all`: n signatures in rank order. Throws, identically on every rank, when a rank's
// tensors are not on its communicator's device (DeviceError) or the ranks disagree on the op,
// the root (rooted ops), the ReduceOp (reducing ops) (InvalidArgument), the dtype
// (DTypeError) or the element count (ShapeError). Messages start with `what`: "all_reduce
// (nccl): rank 0 has element count 10, rank 1 has 11".
void check_signatures(std::string_view what, CommOp op, const int64_t* all, int n);

// An all-gather of the same number of int64 words from every rank of a group of `n`: the
// way ranks exchange what they must agree on before anything else moves (signatures, the
// device router's per-rank facts). `args` gathers `mine` into `all`, rank r's words at
// [r * mine.size(), (r + 1) * mine.size()); run `args` on the group, then read `all`.
struct WordGather {
  local::Tensor all;
  CollectiveArgs args;
};
WordGather all_gather_words(const std::vector<int64_t>& mine, int n);

}  // namespace dtr::pg
