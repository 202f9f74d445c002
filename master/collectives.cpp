// Master-issued collectives: checks on the master, one command per node.
#include "dtr/collectives.hpp"

#include <fmt/format.h>

#include <map>
#include <set>

#include "master/capture.hpp"
#include "master/session.hpp"

namespace dtr {

using protocol::CollectiveKind;
namespace cmd = protocol::cmd;

namespace {

// Checks a collective's tensors; returns their nodes in order.
std::vector<int> check_collective(std::string_view what,
                                  const std::vector<DistributedTensor>& tensors) {
  if (tensors.empty()) throw InvalidArgument(fmt::format("{}: no tensors", what));
  std::vector<int> nodes;
  std::map<int, size_t> index_on_node;  // node -> the tensor given for it
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DistributedTensor& t = tensors[i];
    if (!t.defined()) throw InvalidArgument(fmt::format("{}: tensor {} is undefined", what, i));
    if (autograd::tracks_grad(t))
      throw InvalidArgument(fmt::format(
          "{}: tensor {} ({}) requires grad and grad mode is on; this collective is not "
          "recorded: use dtr::autograd::{} (differentiable), or detach() / dtr::no_grad",
          what, i, describe(t.meta()), what));
    auto [at, fresh] = index_on_node.emplace(t.get_node(), i);
    if (!fresh)
      throw InvalidArgument(
          fmt::format("{}: tensors {} and {} both live on node {}; give one tensor per node", what,
                      at->second, i, t.get_node()));
    if (t.dtype() != tensors[0].dtype())
      throw DTypeError(fmt::format("{}: tensor {} is {}, tensor 0 is {}", what, i,
                                   dtype_name(t.dtype()), dtype_name(tensors[0].dtype())));
    if (!(t.shape() == tensors[0].shape()))
      throw ShapeError(fmt::format("{}: tensor {} has shape {}, tensor 0 has {}", what, i,
                                   to_string(t.shape()), to_string(tensors[0].shape())));
    nodes.push_back(t.get_node());
  }
  return nodes;
}

std::shared_ptr<detail::MasterSession> session_of(std::string_view what,
                                                  const std::vector<DistributedTensor>& tensors) {
  auto s = detail::current_session(what);
  for (const DistributedTensor& t : tensors) detail::pin_in_capture(*s, t);
  return s;
}

cmd::Collective collective_command(const detail::MasterSession& s, const DistributedTensor& t,
                                   CollectiveKind kind, ReduceOp op, int root) {
  return cmd::Collective{.stream = detail::current_stream_id(s, t.get_node()),
                         .kind = kind,
                         .reduce_op = op,
                         .root = root,
                         .input = t.id(),
                         .device = t.get_device()};
}

// Queues a collective that makes one new tensor (of `meta`) per node and returns their
// handles.
std::vector<DistributedTensor> issue_making(const std::shared_ptr<detail::MasterSession>& s,
                                            const std::vector<DistributedTensor>& tensors,
                                            const std::vector<int>& nodes, CollectiveKind kind,
                                            ReduceOp op, const TensorMeta& meta) {
  std::vector<cmd::Collective> cmds;
  std::vector<DistributedTensor> out;
  for (const DistributedTensor& t : tensors) {
    cmd::Collective c = collective_command(*s, t, kind, op, 0);
    c.out = s->new_id();
    c.meta = meta;
    out.push_back(DistributedTensor::adopt(s, t.get_node(), t.get_device(), c.out, meta));
    cmds.push_back(std::move(c));
  }
  s->enqueue_collective(nodes, std::move(cmds));
  return out;
}

void check_reduce_op(std::string_view what, ReduceOp op, DType dtype) {
  if (static_cast<int>(op) > static_cast<int>(ReduceOp::Avg))
    throw InvalidArgument(fmt::format("{}: unknown reduce op {}", what, static_cast<int>(op)));
  if (dtype == DType::Bool && (op == ReduceOp::Sum || op == ReduceOp::Avg))
    throw DTypeError(
        fmt::format("{}: {} of bool tensors; use MAX (or) or MIN (and)", what, reduce_op_name(op)));
}

}  // namespace

void all_reduce(std::vector<DistributedTensor>& tensors, ReduceOp op) {
  std::vector<int> nodes = check_collective("all_reduce", tensors);
  check_reduce_op("all_reduce", op, tensors[0].dtype());
  auto s = session_of("all_reduce", tensors);
  std::vector<cmd::Collective> cmds;
  for (const DistributedTensor& t : tensors)
    cmds.push_back(collective_command(*s, t, CollectiveKind::AllReduce, op, 0));
  s->enqueue_collective(nodes, std::move(cmds));
}

void broadcast(std::vector<DistributedTensor>& tensors, int root) {
  std::vector<int> nodes = check_collective("broadcast", tensors);
  if (root < 0 || root >= static_cast<int>(tensors.size()))
    throw IndexError(
        fmt::format("broadcast: root {} is not an index of the {} tensors", root, tensors.size()));
  auto s = session_of("broadcast", tensors);
  std::vector<cmd::Collective> cmds;
  for (const DistributedTensor& t : tensors)
    cmds.push_back(collective_command(*s, t, CollectiveKind::Broadcast, ReduceOp::Sum, root));
  s->enqueue_collective(nodes, std::move(cmds));
}

std::vector<DistributedTensor> all_gather(const std::vector<DistributedTensor>& tensors) {
  std::vector<int> nodes = check_collective("all_gather", tensors);
  auto s = session_of("all_gather", tensors);
  Shape shape;
  shape.push_back(static_cast<int64_t>(tensors.size()));
  for (int64_t d : tensors[0].shape()) shape.push_back(d);
  if (shape.size() > kMaxDims)
    throw ShapeError(fmt::format("all_gather: the result would have {} dims, at most {}",
                                 shape.size(), kMaxDims));
  TensorMeta meta = TensorMeta::contiguous(tensors[0].dtype(), shape);
  return issue_making(s, tensors, nodes, CollectiveKind::AllGather, ReduceOp::Sum, meta);
}

std::vector<DistributedTensor> reduce_scatter(const std::vector<DistributedTensor>& tensors,
                                              ReduceOp op) {
  std::vector<int> nodes = check_collective("reduce_scatter", tensors);
  check_reduce_op("reduce_scatter", op, tensors[0].dtype());
  auto s = session_of("reduce_scatter", tensors);
  const Shape& in = tensors[0].shape();
  auto n = static_cast<int64_t>(tensors.size());
  if (in.size() == 0 || in[0] % n != 0)
    throw ShapeError(
        fmt::format("reduce_scatter: inputs of shape {} do not split into {} equal "
                    "parts along dim 0",
                    to_string(in), n));
  Shape shape = in;
  shape[0] = in[0] / n;
  TensorMeta meta = TensorMeta::contiguous(tensors[0].dtype(), shape);
  return issue_making(s, tensors, nodes, CollectiveKind::ReduceScatter, op, meta);
}

}  // namespace dtr
