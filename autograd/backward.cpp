// The entry points of backward (dtr/autograd.hpp): backward() and grad() build an engine
// task from their outputs, gradients and inputs.
#include <fmt/format.h>

#include "autograd/engine.hpp"
#include "autograd/meta.hpp"
#include "autograd/tensor_traits.hpp"
#include "dtr/autograd.hpp"

namespace dtr::autograd {

namespace {

// The root edges and gradients of `outputs`; a missing gradient is ones for a one-element
// output.
template <typename T>
EngineTask<T> make_task(std::string_view what, const std::vector<T>& outputs,
                        const std::vector<T>& grads, bool retain_graph) {
  if (!grads.empty() && grads.size() != outputs.size())
    throw InvalidArgument(
        fmt::format("{}: {} outputs but {} gradients", what, outputs.size(), grads.size()));
  EngineTask<T> task;
  task.retain_graph = retain_graph;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const T& out = outputs[i];
    if (!out.defined()) throw InvalidArgument(fmt::format("{}: output {} is undefined", what, i));
    if (!requires_grad(out))
      throw InvalidArgument(fmt::format(
          "{}: output {} ({}) does not require grad and has no grad_fn: no tensor it was "
          "computed from requires grad, or it was computed under no_grad",
          what, i, describe(out.meta())));
    T g = grads.empty() ? T() : grads[i];
    if (!g.defined()) {
      if (out.numel() != 1)
        throw InvalidArgument(fmt::format(
            "{}: a gradient can be implied only for a one-element output; output {} has shape "
            "{}: pass a gradient of that shape",
            what, i, to_string(out.shape())));
      g = TensorTraits<T>::full(TensorMeta::contiguous(out.dtype(), out.shape()), 1, out);
    } else if (!(g.shape() == out.shape())) {
      throw ShapeError(fmt::format("{}: the gradient of output {} has shape {}, the output {}",
                                   what, i, to_string(g.shape()), to_string(out.shape())));
    } else if (g.dtype() != out.dtype()) {
      g = g.to(out.dtype());
    }
    task.roots.push_back(gradient_edge(out));
    task.root_grads.push_back(g.detach());
  }
  return task;
}

}  // namespace

template <typename T>
void backward(const std::vector<T>& outputs, const std::vector<T>& grads, bool retain_graph) {
  run_backward(make_task("backward", outputs, grads, retain_graph));
}

template <typename T>
std::vector<T> grad(const std::vector<T>& outputs, const std::vector<T>& inputs,
                    const std::vector<T>& grad_outputs, bool retain_graph, bool allow_unused) {
  EngineTask<T> task = make_task("grad", outputs, grad_outputs, retain_graph);
  if (inputs.empty()) throw InvalidArgument("grad: no inputs");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !requires_grad(inputs[i]))
      throw InvalidArgument(fmt::format("grad: input {} does not require grad", i));
    task.captures.push_back(gradient_edge(inputs[i]));
  }
  std::vector<T> result = run_backward(std::move(task));
  for (size_t i = 0; i < result.size(); ++i)
    if (!result[i].defined() && !allow_unused)
      throw InvalidArgument(fmt::format(
          "grad: input {} ({}) was not used to compute the outputs; pass allow_unused=true to "
          "get an undefined gradient for it",
          i, describe(inputs[i].meta())));
  return result;
}

template void backward(const std::vector<local::Tensor>&, const std::vector<local::Tensor>&, bool);
template void backward(const std::vector<DistributedTensor>&, const std::vector<DistributedTensor>&,
                       bool);
template std::vector<local::Tensor> grad(const std::vector<local::Tensor>&,
                                         const std::vector<local::Tensor>&,
                                         const std::vector<local::Tensor>&, bool, bool);
template std::vector<DistributedTensor> grad(const std::vector<DistributedTensor>&,
                                             const std::vector<DistributedTensor>&,
                                             const std::vector<DistributedTensor>&, bool, bool);

}  // namespace dtr::autograd
