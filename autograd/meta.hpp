// Meta<T>: the autograd state of one tensor handle (and of its copies): whether it requires
// grad, its accumulated gradient (leaves), the node that made it (non-leaves) and which of
// that node's outputs it is. It implements the calls the tensor handles make
// (dtr/autograd_meta.hpp): recording ops and moves, refusing in-place writes.
//
// Thread safety: a graph is used by one thread at a time (dtr/autograd.hpp).
#pragma once

#include <memory>

#include "autograd/node.hpp"
#include "dtr/autograd_meta.hpp"

namespace dtr::autograd {

template <typename T>
class AccumulateGrad;

template <typename T>
class Meta final : public MetaBase<T> {
 public:
  bool requires_grad = false;
  T grad;                            // leaves: the accumulated gradient
  std::shared_ptr<Node<T>> grad_fn;  // null for leaves
  uint32_t output_nr = 0;            // which output of grad_fn this tensor is
  // A leaf's accumulator, shared by the graphs that use the leaf; they own it.
  std::weak_ptr<AccumulateGrad<T>> accumulator;

  bool tracks_grad() const override;
  void record(OpId op, const OpAttrs& attrs, std::span<const T* const> inputs, T& out) override;
  void check_inplace(OpId op, std::span<const T* const> inputs) override;
  void record_move(const T& src, T& out) override;
};

// The tensor's Meta, null when it has none.
template <typename T>
Meta<T>* meta_of(const T& t) {
  return static_cast<Meta<T>*>(t.autograd_meta().get());
}
template <typename T>
std::shared_ptr<Meta<T>> shared_meta_of(const T& t) {
  return std::static_pointer_cast<Meta<T>>(t.autograd_meta());
}
template <typename T>
bool requires_grad(const T& t) {
  const Meta<T>* m = meta_of(t);
  return m && m->requires_grad;
}

// The edge a gradient for `t` follows: its grad_fn's output, its leaf accumulator (made on
// first use), or none when it does not require grad.
template <typename T>
Edge<T> gradient_edge(const T& t);

// Makes `out` the output `output_nr` of `node` (a fresh Meta: requires grad, non-leaf).
template <typename T>
void set_history(T& out, const std::shared_ptr<Node<T>>& node, uint32_t output_nr);

// Fills node->next_edges and next_metas from the forward inputs (undefined ones, or ones
// that do not require grad, get no edge). Returns whether any input requires grad.
template <typename T>
bool connect_inputs(Node<T>& node, std::span<const T* const> inputs);

}  // namespace dtr::autograd
