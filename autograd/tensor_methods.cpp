// The autograd methods of the tensor handles (TensorOps<Derived>, dtr/tensor_ops.hpp),
// defined here for local::Tensor and DistributedTensor.
#include <fmt/format.h>

#include "autograd/meta.hpp"
#include "dtr/autograd.hpp"

namespace dtr {

using autograd::Meta;
using autograd::meta_of;

template <typename D>
bool TensorOps<D>::requires_grad() const {
  return autograd::requires_grad(self());
}

template <typename D>
D& TensorOps<D>::requires_grad_(bool on) {
  Meta<D>* m = meta_of(self());
  if (m && m->grad_fn) {
    if (on) return mut();
    throw InvalidArgument(fmt::format(
        "requires_grad_(false): this tensor ({}) is not a leaf (it was made by {}); use "
        "detach() for a tensor outside the graph",
        describe(self().meta()), m->grad_fn->name()));
  }
  if (on && !is_floating(dtype()))
    throw InvalidArgument(
        fmt::format("requires_grad_: only floating tensors can require grad; this one is {}",
                    describe(self().meta())));
  if (!m) {
    if (!on) return mut();
    autograd_ = std::make_shared<Meta<D>>();
    m = meta_of(self());
  }
  m->requires_grad = on;
  return mut();
}

template <typename D>
bool TensorOps<D>::is_leaf() const {
  const Meta<D>* m = meta_of(self());
  return !m || !m->grad_fn;
}

template <typename D>
D TensorOps<D>::grad() const {
  const Meta<D>* m = meta_of(self());
  return m ? m->grad : D();
}

template <typename D>
void TensorOps<D>::set_grad(const D& grad) {
  if (grad.defined() && (!(grad.shape() == shape()) || grad.dtype() != dtype()))
    throw ShapeError(fmt::format("set_grad: the gradient is {}, the tensor {}",
                                 describe(grad.meta()), describe(self().meta())));
  Meta<D>* m = meta_of(self());
  if (!m) {
    if (!grad.defined()) return;
    autograd_ = std::make_shared<Meta<D>>();
    m = meta_of(self());
  }
  m->grad = grad.detach();
}

template <typename D>
void TensorOps<D>::backward(bool retain_graph) const {
  autograd::backward<D>({self()}, {}, retain_graph);
}

template <typename D>
void TensorOps<D>::backward(const D& gradient, bool retain_graph) const {
  autograd::backward<D>({self()}, {gradient}, retain_graph);
}

template <typename D>
std::string TensorOps<D>::grad_fn_name() const {
  const Meta<D>* m = meta_of(self());
  return m && m->grad_fn ? m->grad_fn->name() : std::string();
}

#define DTR_INSTANTIATE(D)                                    \
  template bool TensorOps<D>::requires_grad() const;          \
  template D& TensorOps<D>::requires_grad_(bool);             \
  template bool TensorOps<D>::is_leaf() const;                \
  template D TensorOps<D>::grad() const;                      \
  template void TensorOps<D>::set_grad(const D&);             \
  template void TensorOps<D>::backward(bool) const;           \
  template void TensorOps<D>::backward(const D&, bool) const; \
  template std::string TensorOps<D>::grad_fn_name() const;
DTR_INSTANTIATE(local::Tensor)
DTR_INSTANTIATE(DistributedTensor)
#undef DTR_INSTANTIATE

}  // namespace dtr
