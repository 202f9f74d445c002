// Differentiable master-issued collectives (dtr/autograd.hpp): the collectives of
// dtr/collectives.hpp on copies of the inputs, recorded with record_function. Their
// backward issues the matching collective of the gradients among the same nodes, so the
// gradients stay on the workers.
#include <fmt/format.h>

#include "autograd/tensor_traits.hpp"
#include "dtr/autograd.hpp"

namespace dtr::autograd {

namespace {

using DT = DistributedTensor;
using Traits = TensorTraits<DT>;

std::vector<Place> places_of(const std::vector<DT>& ts) {
  std::vector<Place> p;
  for (const DT& t : ts) p.push_back(Traits::place_of(t));
  return p;
}

// Copies of the gradients (collectives write in place; a gradient may be shared), zeros of
// `meta` at the output's place where none arrived.
std::vector<DT> own_grads(const std::vector<DT>& grads, const std::vector<Place>& places,
                          const TensorMeta& meta) {
  std::vector<DT> out;
  for (size_t i = 0; i < grads.size(); ++i)
    out.push_back(grads[i].defined() ? Traits::clone(grads[i]) : full_at(meta, 0, places[i]));
  return out;
}

std::vector<DT> detached_copies(const std::vector<DT>& ts) {
  std::vector<DT> out;
  for (const DT& t : ts) out.push_back(Traits::clone(t.detach()));
  return out;
}

}  // namespace

std::vector<DT> all_reduce(const std::vector<DT>& tensors, ReduceOp op) {
  std::vector<DT> out;
  {
    no_grad off;
    out = detached_copies(tensors);
    dtr::all_reduce(out, op);
  }
  const TensorMeta meta = TensorMeta::contiguous(tensors[0].dtype(), tensors[0].shape());
  return record_function<DT>(
      "AllReduceBackward", tensors, std::move(out),
      [op, meta, places = places_of(tensors)](const std::vector<DT>& grads) {
        if (op != ReduceOp::Sum && op != ReduceOp::Avg)
          throw InvalidArgument(
              fmt::format("backward: all_reduce with {} is not differentiable (Sum and Avg are)",
                          reduce_op_name(op)));
        std::vector<DT> g = own_grads(grads, places, meta);
        dtr::all_reduce(g, op);
        return g;
      });
}

std::vector<DT> broadcast(const std::vector<DT>& tensors, int root) {
  std::vector<DT> out;
  {
    no_grad off;
    out = detached_copies(tensors);
    dtr::broadcast(out, root);
  }
  const TensorMeta meta = TensorMeta::contiguous(tensors[0].dtype(), tensors[0].shape());
  return record_function<DT>(
      "BroadcastBackward", tensors, std::move(out),
      [root, meta, places = places_of(tensors)](const std::vector<DT>& grads) {
        std::vector<DT> g = own_grads(grads, places, meta);
        dtr::all_reduce(g, ReduceOp::Sum);
        std::vector<DT> r(g.size());
        r[static_cast<size_t>(root)] = g[static_cast<size_t>(root)];
        return r;
      });
}

std::vector<DT> all_gather(const std::vector<DT>& tensors) {
  std::vector<DT> out;
  {
    no_grad off;
    std::vector<DT> in;
    for (const DT& t : tensors) in.push_back(t.detach());
    out = dtr::all_gather(in);
  }
  const TensorMeta meta = out.at(0).meta();
  const Shape shape = tensors[0].shape();
  return record_function<DT>(
      "AllGatherBackward", tensors, std::move(out),
      [meta, shape, places = places_of(tensors)](const std::vector<DT>& grads) {
        std::vector<DT> g = own_grads(grads, places, meta);  // [n, ...] on every node
        std::vector<DT> r = dtr::reduce_scatter(g, ReduceOp::Sum);
        for (DT& t : r) t = t.reshape(shape);
        return r;
      });
}

std::vector<DT> reduce_scatter(const std::vector<DT>& tensors, ReduceOp op) {
  std::vector<DT> out;
  {
    no_grad off;
    std::vector<DT> in;
    for (const DT& t : tensors) in.push_back(t.detach());
    out = dtr::reduce_scatter(in, op);
  }
  const TensorMeta meta = out.at(0).meta();
  const Shape shape = tensors[0].shape();
  return record_function<DT>(
      "ReduceScatterBackward", tensors, std::move(out),
      [op, meta, shape, places = places_of(tensors)](const std::vector<DT>& grads) {
        if (op != ReduceOp::Sum)
          throw InvalidArgument(
              fmt::format("backward: reduce_scatter with {} is not differentiable (Sum is)",
                          reduce_op_name(op)));
        std::vector<DT> g = own_grads(grads, places, meta);
        std::vector<DT> r = dtr::all_gather(g);  // [n, m, ...]
        for (DT& t : r) t = t.reshape(shape);
        return r;
      });
}

local::Tensor all_reduce(const local::Tensor& tensor, ReduceOp op, ProcessGroup* group) {
  local::Tensor out = tensor.detach().clone();
  dtr::all_reduce(out, op, group);
  return record_function<local::Tensor>(
      "AllReduceBackward", {tensor}, {out}, [op, group](const std::vector<local::Tensor>& g) {
        if (op != ReduceOp::Sum && op != ReduceOp::Avg)
          throw InvalidArgument(
              fmt::format("backward: all_reduce with {} is not differentiable (Sum and Avg are)",
                          reduce_op_name(op)));
        local::Tensor r = g[0].clone();
        dtr::all_reduce(r, op, group);
        return std::vector<local::Tensor>{r};
      })[0];
}

}  // namespace dtr::autograd
