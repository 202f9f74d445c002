// The slot a tensor handle keeps for autograd, and the calls the tensor libraries make
// through it. The handles (local::Tensor, DistributedTensor) know nothing of graphs: each
// holds a shared pointer to a MetaBase, null until autograd (the dtr::autograd library,
// dtr/autograd.hpp) gives the tensor one (requires_grad_(), or the result of an op on a
// tensor that requires grad). An op whose inputs have no slot costs one pointer test; an op
// where some input has one calls that slot's virtual functions, which live in dtr::autograd,
// so the tensor and master libraries do not link it.
//
// Thread safety: the slot belongs to the autograd graph; see dtr/autograd.hpp for which
// threads may use a graph.
#pragma once

#include <span>
#include <vector>

#include "dtr/op_table.hpp"

namespace dtr::autograd {

template <typename T>
class MetaBase {
 public:
  virtual ~MetaBase() = default;
  // True when this tensor requires grad and grad mode is on in the calling thread (an op on
  // it would be recorded).
  virtual bool tracks_grad() const = 0;
  // `out = op(inputs)` ran out of place; records it when grad mode is on and an input
  // requires grad. `inputs` are the tensor inputs in order.
  virtual void record(OpId op, const OpAttrs& attrs, std::span<const T* const> inputs, T& out) = 0;
  // Called before `op` writes into inputs[0] in place: throws when autograd cannot allow it
  // (grad mode on and an input requires grad).
  virtual void check_inplace(OpId op, std::span<const T* const> inputs) = 0;
  // `out` is a copy of `src` in another place (node or device); records it.
  virtual void record_move(const T& src, T& out) = 0;
};

// The calls the handles make, kept here so that each is one line in the handle's code.
template <typename T>
MetaBase<T>* first_meta(std::span<const T* const> inputs) {
  for (const T* t : inputs)
    if (t && t->autograd_meta()) return t->autograd_meta().get();
  return nullptr;
}
template <typename T>
void record_op(OpId op, const OpAttrs& attrs, std::span<const T* const> inputs, T& out) {
  if (MetaBase<T>* m = first_meta(inputs)) m->record(op, attrs, inputs, out);
}
// record_op for an op of any number of inputs, given as a span of handles.
template <typename T>
void record_inputs(OpId op, const OpAttrs& attrs, std::span<const T> inputs, T& out) {
  bool any = false;
  for (const T& t : inputs) any = any || t.autograd_meta() != nullptr;
  if (!any) return;
  std::vector<const T*> ptrs;
  ptrs.reserve(inputs.size());
  for (const T& t : inputs) ptrs.push_back(&t);
  record_op<T>(op, attrs, ptrs, out);
}
template <typename T>
void check_inplace(OpId op, std::span<const T* const> inputs) {
  if (MetaBase<T>* m = first_meta(inputs)) m->check_inplace(op, inputs);
}
template <typename T>
bool tracks_grad(const T& t) {
  return t.autograd_meta() && t.autograd_meta()->tracks_grad();
}

}  // namespace dtr::autograd
