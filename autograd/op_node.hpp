// OpNode<T>: the backward of one op of the op table. It keeps what the op's entry in the
// derivative table asks to save (detached handles, so no graph cycle), the call's
// attributes and metadata, and runs the entry's formula; an op without a formula throws
// there, naming the op.
//
// Thread safety: a graph is used by one thread at a time (dtr/autograd.hpp).
#pragma once

#include <vector>

#include "autograd/derivatives.hpp"
#include "autograd/node.hpp"

namespace dtr::autograd {

template <typename T>
class OpNode final : public Node<T> {
 public:
  // Records `out = op(inputs)` in the graph when grad mode is on and an input requires
  // grad: `out` gets the node as its grad_fn.
  static void record(OpId op, const OpAttrs& attrs, std::span<const T* const> inputs, T& out);

  OpNode(OpId op, const OpAttrs& attrs, const Derivative<T>* derivative)
      : Node<T>(1), op_(op), attrs_(attrs), derivative_(derivative) {}
  std::string name() const override;
  std::vector<T> apply(std::vector<T>& grads) override;
  void release() override;

 private:
  // "mul(float32[2, 3], float32[3]) -> float32[2, 3]", for messages.
  std::string describe_call() const;

  OpId op_;
  OpAttrs attrs_;
  const Derivative<T>* derivative_;  // null: the table has no entry
  std::vector<T> saved_inputs_;      // one per input, undefined where not saved
  T saved_output_;
  TensorMeta out_meta_;
  bool released_ = false;
};

}  // namespace dtr::autograd
