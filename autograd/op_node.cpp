// OpNode<T> (op_node.hpp): recording an op and running its derivative.
#include "autograd/op_node.hpp"

#include <fmt/format.h>

#include <cctype>

#include "autograd/meta.hpp"
#include "dtr/autograd.hpp"

namespace dtr::autograd {

template <typename T>
void OpNode<T>::record(OpId op, const OpAttrs& attrs, std::span<const T* const> inputs, T& out) {
  if (!is_grad_enabled() || !is_floating(out.dtype())) return;
  const Derivative<T>* d = find_derivative<T>(op);
  auto node = std::make_shared<OpNode<T>>(op, attrs, d);
  if (!connect_inputs<T>(*node, inputs)) return;
  const uint8_t saves = d ? d->saves : static_cast<uint8_t>(kSaveNothing);
  node->saved_inputs_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size() && i < kMaxSavedInputs; ++i)
    if (inputs[i] && (saves & (1u << i))) node->saved_inputs_[i] = inputs[i]->detach();
  if (saves & kSaveOutput) node->saved_output_ = out.detach();
  node->out_meta_ = out.meta();
  set_history<T>(out, node, 0);
}

template <typename T>
std::string OpNode<T>::name() const {
  std::string n(op_def(op_).name);
  std::string out;
  bool upper = true;
  for (char ch : n) {
    if (ch == '_') {
      upper = true;
      continue;
    }
    out.push_back(upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch);
    upper = false;
  }
  return out + "Backward";
}

template <typename T>
std::string OpNode<T>::describe_call() const {
  std::string args;
  for (const TensorMeta& m : this->next_metas) args += (args.empty() ? "" : ", ") + describe(m);
  return fmt::format("{}({}) -> {}", op_def(op_).name, args, describe(out_meta_));
}

template <typename T>
std::vector<T> OpNode<T>::apply(std::vector<T>& grads) {
  if (!derivative_)
    throw InvalidArgument(
        fmt::format("backward: op {} has no derivative (no entry in the derivative table, "
                    "autograd/derivatives.cpp), reached from {}",
                    op_def(op_).name, describe_call()));
  if (!derivative_->formula)
    throw InvalidArgument(fmt::format("backward: op {} is not differentiable ({}), reached from {}",
                                      op_def(op_).name, derivative_->no_formula_reason,
                                      describe_call()));
  if (released_ && derivative_->saves != kSaveNothing)
    throw InvalidArgument(fmt::format(
        "backward: {} ({}) ran before and its saved tensors are freed; pass retain_graph=true "
        "to the first backward() to run backward through a graph twice",
        name(), describe_call()));
  std::vector<T> out(this->next_edges.size());
  const T& g = grads.empty() ? T() : grads[0];
  if (!g.defined()) return out;
  std::vector<uint8_t> needs(this->next_edges.size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = this->next_edges[i].valid() ? 1 : 0;
  GradContext<T> c{op_, attrs_, saved_inputs_, saved_output_, this->next_metas, out_meta_, needs};
  std::vector<T> r = derivative_->formula(c, g);
  for (size_t i = 0; i < r.size() && i < out.size(); ++i)
    if (c.needs(i)) out[i] = std::move(r[i]);
  return out;
}

template <typename T>
void OpNode<T>::release() {
  saved_inputs_.assign(saved_inputs_.size(), T());
  saved_output_ = T();
  released_ = true;
}

template class OpNode<local::Tensor>;
template class OpNode<DistributedTensor>;

}  // namespace dtr::autograd
