// AccumulateGrad<T>: the node at a leaf. It adds the gradient that reaches it into the
// leaf's grad(): the first gradient is copied (so that grad() never aliases a tensor the
// user or another leaf holds), later ones are added in place.
//
// Thread safety: a graph is used by one thread at a time (dtr/autograd.hpp).
#pragma once

#include <memory>

#include "autograd/meta.hpp"
#include "autograd/node.hpp"

namespace dtr::autograd {

template <typename T>
class AccumulateGrad final : public Node<T> {
 public:
  explicit AccumulateGrad(std::shared_ptr<Meta<T>> leaf) : Node<T>(1), leaf_(std::move(leaf)) {}
  std::string name() const override { return "AccumulateGrad"; }
  std::vector<T> apply(std::vector<T>& grads) override;
  const std::shared_ptr<Meta<T>>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<Meta<T>> leaf_;
};

}  // namespace dtr::autograd
