#include "pg/signature.hpp"

#include <fmt/format.h>

#include <string>

namespace dtr::pg {
namespace {

enum Field : int { kOp, kRoot, kReduce, kDType, kCount, kDevice, kCommDevice };
constexpr const char* kFieldNames[] = {"op", "root", "ReduceOp", "dtype", "element count"};
static_assert(kCommDevice + 1 == kSignatureWords);

std::string field_value(int field, int64_t v) {
  switch (field) {
    case kOp:
      return std::string(comm_op_name(static_cast<CommOp>(v)));
    case kReduce:
      return std::string(reduce_op_name(static_cast<ReduceOp>(v)));
    case kDType:
      return v < 0 ? std::string("none") : std::string(dtype_name(static_cast<DType>(v)));
    default:
      return std::to_string(v);
  }
}

bool rooted(CommOp op) {
  return op == CommOp::Broadcast || op == CommOp::Reduce || op == CommOp::Gather ||
         op == CommOp::Scatter;
}

bool reducing(CommOp op) {
  return op == CommOp::AllReduce || op == CommOp::Reduce || op == CommOp::ReduceScatter;
}

}  // namespace

const local::Tensor* reference_tensor(const CollectiveArgs& a) {
  switch (a.op) {
    case CommOp::AllGather:
    case CommOp::Gather:
      return a.inputs.empty() ? nullptr : &a.inputs[0];
    default:
      return a.outputs.empty() ? nullptr : &a.outputs[0];
  }
}

std::vector<int64_t> collective_signature(const CollectiveArgs& a, int device, int comm_device) {
  const local::Tensor* ref = reference_tensor(a);
  std::vector<int64_t> sig(kSignatureWords, 0);
  sig[kOp] = static_cast<int64_t>(a.op);
  sig[kRoot] = a.root;
  sig[kReduce] = static_cast<int64_t>(a.reduce);
  sig[kDType] = ref ? static_cast<int64_t>(ref->dtype()) : -1;
  sig[kCount] = ref ? ref->meta().numel() : 0;
  sig[kDevice] = device;
  sig[kCommDevice] = comm_device;
  return sig;
}

void check_signatures(std::string_view what, CommOp op, const int64_t* w, int n) {
  for (int r = 0; r < n; ++r) {
    const int64_t* s = w + kSignatureWords * r;
    if (s[kDevice] != s[kCommDevice]) {
      throw DeviceError(fmt::format(
          "{}: rank {} passed a tensor on cuda:{}, but its NCCL communicator for this group "
          "is on cuda:{} (a group uses one GPU per rank)",
          what, r, s[kDevice], s[kCommDevice]));
    }
  }
  for (int f = kOp; f <= kCount; ++f) {
    if ((f == kRoot && !rooted(op)) || (f == kReduce && !reducing(op))) continue;
    for (int r = 1; r < n; ++r) {
      const int64_t v0 = w[f], v = w[kSignatureWords * r + f];
      if (v == v0) continue;
      const std::string msg = fmt::format("{}: rank 0 has {} {}, rank {} has {}", what,
                                          kFieldNames[f], field_value(f, v0), r, field_value(f, v));
      if (f == kDType) throw DTypeError(msg);
      if (f == kCount) throw ShapeError(msg);
      throw InvalidArgument(msg);
    }
  }
}

WordGather all_gather_words(const std::vector<int64_t>& mine, int n) {
  const auto words = static_cast<int64_t>(mine.size());
  WordGather g;
  g.all = local::empty(Shape{words * n}, DType::Int64);
  g.args.op = CommOp::AllGather;
  g.args.inputs = {local::from_vector<int64_t>(mine)};
  for (int r = 0; r < n; ++r) {
    TensorMeta m = TensorMeta::contiguous(DType::Int64, Shape{words});
    m.offset = words * r;
    g.args.outputs.emplace_back(g.all.storage(), m);
  }
  return g;
}

}  // namespace dtr::pg
