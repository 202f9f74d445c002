// Reverse-mode automatic differentiation for local::Tensor and DistributedTensor alike
// (library dtr::autograd; docs/training.md).
//
//   auto w = dtr::local::randn({3, 2}).requires_grad_();
//   auto loss = x.matmul(w).tanh().sum();
//   loss.backward();                   // w.grad() now holds d loss / d w
//   { dtr::no_grad g; w.sub_(w.grad() * 0.1f); }
//
// Every op of the op table on a tensor that requires grad is recorded, on the thread that
// calls it, as a node of a graph (the tensor's grad_fn); tensors the user made and marked
// with requires_grad_() are its leaves. backward() walks the graph from the output: each
// node's derivative (autograd/derivatives.cpp, one entry per op) is a few more ops of the
// op table on the saved tensors, so for DistributedTensor the gradient ops are queued to the
// node and device where the tensors live, like forward ops, and no gradient passes through
// the master. Leaves' gradients accumulate in grad(). x.to(node) and x.to_device(d) are
// recorded (their backward moves the gradient back); the collectives below are the
// differentiable forms of dtr/collectives.hpp. Graphs are of one tensor type: dist_send()
// of a tensor that requires grad throws, and to_local() gives a tensor outside the graph.
//
// Not supported: in-place ops on tensors that require grad while grad mode is on (they
// throw, naming the op; the optimizers update under no_grad), and gradients of gradients.
// An op whose derivative is not written throws when backward reaches it, naming the op.
//
// Thread safety: grad mode is per thread. A graph (the tensors of one forward pass and
// their grad_fn) belongs to the thread that records and runs it: it may be handed to
// another thread, but not used by two at once. Leaves shared by graphs on several threads
// (one model's parameters) must not receive gradients from two threads at once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dtr/collectives.hpp"
#include "dtr/distributed.hpp"
#include "dtr/tensor.hpp"

namespace dtr {
namespace autograd {

// ---- grad mode (per thread; on by default) ----
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Turns recording off for its scope (torch.no_grad), restoring the previous mode after.
class no_grad {
 public:
  no_grad();
  ~no_grad();
  no_grad(const no_grad&) = delete;
  no_grad& operator=(const no_grad&) = delete;

 private:
  bool previous_;
};

// Turns recording on for its scope (torch.enable_grad).
class enable_grad {
 public:
  enable_grad();
  ~enable_grad();
  enable_grad(const enable_grad&) = delete;
  enable_grad& operator=(const enable_grad&) = delete;

 private:
  bool previous_;
};

// ---- running the graph ----

// backward() of several outputs at once: grads[i] is d(something)/d(outputs[i]); an
// empty `grads` means ones for one-element outputs. Gradients accumulate into the leaves'
// grad(). Throws InvalidArgument for an output that does not require grad or a gradient
// whose shape differs from its output's.
template <typename T>
void backward(const std::vector<T>& outputs, const std::vector<T>& grads = {},
              bool retain_graph = false);

// torch.autograd.grad: the gradients of `outputs` with respect to `inputs` (tensors that
// require grad, leaves or not), returned rather than accumulated into grad(). An input the
// outputs do not depend on gives an undefined tensor when allow_unused, else throws.
template <typename T>
std::vector<T> grad(const std::vector<T>& outputs, const std::vector<T>& inputs,
                    const std::vector<T>& grad_outputs = {}, bool retain_graph = false,
                    bool allow_unused = false);

// ---- custom differentiable functions (torch.autograd.Function) ----

// Given the gradients of a function's outputs (undefined where none arrived), returns the
// gradients of its inputs, one per input (undefined for none).
template <typename T>
using BackwardFunction = std::function<std::vector<T>(const std::vector<T>& grad_outputs)>;

// Records `outputs`, computed from `inputs` without recording (under no_grad, or by ops
// outside the op table), as one node named `name` whose derivative is `backward`; returns
// the outputs, now requiring grad when an input does. Outputs must be floating tensors that
// are not yet in a graph. Does nothing in grad mode off or when no input requires grad.
template <typename T>
std::vector<T> record_function(const std::string& name, const std::vector<T>& inputs,
                               std::vector<T> outputs, BackwardFunction<T> backward);

// ---- differentiable collectives over tensors on several nodes (dtr/collectives.hpp) ----
// As torch.distributed.nn.functional: the results are new tensors and the inputs are left
// as they are. Their backward runs the collective of the gradients among the same nodes:
// all_reduce's is all_reduce (Sum of Sum, Avg of Avg; other ops are not differentiable and
// throw), all_gather's is reduce_scatter (Sum) and the reverse, broadcast's is a Sum
// all_reduce whose result goes to the root's input (zero for the others).
std::vector<DistributedTensor> all_reduce(const std::vector<DistributedTensor>& tensors,
                                          ReduceOp op = ReduceOp::Sum);
std::vector<DistributedTensor> broadcast(const std::vector<DistributedTensor>& tensors, int root);
std::vector<DistributedTensor> all_gather(const std::vector<DistributedTensor>& tensors);
std::vector<DistributedTensor> reduce_scatter(const std::vector<DistributedTensor>& tensors,
                                              ReduceOp op = ReduceOp::Sum);

// SPMD (process groups, dtr/process_group.hpp): this rank's tensor all_reduced over `group`
// (the world group when null), as torch.distributed.nn.functional.all_reduce; its backward
// all_reduces the gradient with the same op (Sum or Avg) over the group, so every rank must
// run backward through it, in the same order as the other collectives of the group.
local::Tensor all_reduce(const local::Tensor& tensor, ReduceOp op = ReduceOp::Sum,
                         ProcessGroup* group = nullptr);

}  // namespace autograd

using autograd::enable_grad;
using autograd::no_grad;

}  // namespace dtr
