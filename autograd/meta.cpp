// Meta<T> (meta.hpp): what the tensor handles call, and the wiring of a tensor into the
// graph (edges, history); AccumulateGrad<T> (accumulate_grad.hpp); the node of a move.
#include "autograd/meta.hpp"

#include <fmt/format.h>

#include "autograd/accumulate_grad.hpp"
#include "autograd/op_node.hpp"
#include "autograd/tensor_traits.hpp"
#include "dtr/autograd.hpp"

namespace dtr::autograd {

std::string describe_place(Place p, bool distributed) {
  std::string dev = p.device < 0 ? std::string("cpu") : fmt::format("cuda:{}", p.device);
  return distributed ? fmt::format("node {} ({})", p.node, dev) : dev;
}

namespace {

// The backward of x.to(node) / x.to_device(d): the gradient goes back where x lived.
template <typename T>
class MoveBackward final : public Node<T> {
 public:
  explicit MoveBackward(Place src) : Node<T>(1), src_(src) {}
  std::string name() const override { return "ToBackward"; }
  std::vector<T> apply(std::vector<T>& grads) override {
    if (grads.empty() || !grads[0].defined()) return {T()};
    return {TensorTraits<T>::move_to(grads[0], src_)};
  }

 private:
  Place src_;
};

}  // namespace

template <typename T>
bool Meta<T>::tracks_grad() const {
  return requires_grad && is_grad_enabled();
}

template <typename T>
void Meta<T>::record(OpId op, const OpAttrs& attrs, std::span<const T* const> inputs, T& out) {
  OpNode<T>::record(op, attrs, inputs, out);
}

template <typename T>
void Meta<T>::check_inplace(OpId op, std::span<const T* const> inputs) {
  if (!is_grad_enabled()) return;
  const OpDef& d = op_def(op);
  const std::string name =
      d.kind == OpKind::Mutate ? std::string(d.name) : std::string(d.name) + "_";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i] || !autograd::requires_grad(*inputs[i])) continue;
    throw InvalidArgument(fmt::format(
        "{}: {} ({}) requires grad and grad mode is on; autograd records no in-place op: use "
        "the out-of-place form, or write under dtr::no_grad (as an optimizer step does)",
        name, i == 0 ? "the tensor written in place" : "its operand", describe(inputs[i]->meta())));
  }
}

template <typename T>
void Meta<T>::record_move(const T& src, T& out) {
  if (!tracks_grad()) return;
  auto node = std::make_shared<MoveBackward<T>>(TensorTraits<T>::place_of(src));
  const T* in[1] = {&src};
  if (connect_inputs<T>(*node, in)) set_history<T>(out, node, 0);
}

template <typename T>
Edge<T> gradient_edge(const T& t) {
  Meta<T>* m = meta_of(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<AccumulateGrad<T>> acc = m->accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad<T>>(shared_meta_of(t));
    m->accumulator = acc;
  }
  return {acc, 0};
}

template <typename T>
void set_history(T& out, const std::shared_ptr<Node<T>>& node, uint32_t output_nr) {
  auto m = std::make_shared<Meta<T>>();
  m->requires_grad = true;
  m->grad_fn = node;
  m->output_nr = output_nr;
  out.set_autograd_meta(std::move(m));
}

template <typename T>
bool connect_inputs(Node<T>& node, std::span<const T* const> inputs) {
  bool any = false;
  node.next_edges.reserve(inputs.size());
  node.next_metas.reserve(inputs.size());
  for (const T* in : inputs) {
    if (!in || !in->defined()) {
      node.next_edges.emplace_back();
      node.next_metas.emplace_back();
      continue;
    }
    Edge<T> e = gradient_edge(*in);
    any = any || e.valid();
    node.next_edges.push_back(std::move(e));
    node.next_metas.push_back(in->meta());
  }
  return any;
}

template <typename T>
std::vector<T> AccumulateGrad<T>::apply(std::vector<T>& grads) {
  if (grads.empty() || !grads[0].defined()) return {};
  T& grad = leaf_->grad;
  if (!grad.defined())
    grad = TensorTraits<T>::clone(grads[0]);
  else
    grad.add_(grads[0]);
  return {};
}

#define DTR_INSTANTIATE(T)                                                  \
  template class Meta<T>;                                                   \
  template class AccumulateGrad<T>;                                         \
  template Edge<T> gradient_edge(const T&);                                 \
  template void set_history(T&, const std::shared_ptr<Node<T>>&, uint32_t); \
  template bool connect_inputs(Node<T>&, std::span<const T* const>);
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr::autograd
