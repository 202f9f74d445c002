// The autograd methods both tensor classes share (dtr.Tensor and dtr.LocalTensor), over
// TensorOps' (dtr/tensor_ops.hpp, defined in the dtr::autograd library; docs/training.md):
// requires_grad (a property, and requires_grad_() returning the same object), is_leaf,
// grad (None when there is none; assignable, None clearing it), grad_fn (the name of the
// node that made the tensor, None for leaves), backward(gradient=None, retain_graph=False),
// detach() and torch's .data (detach(); assignable).
//
// Thread safety: as the bound type's; called with the GIL held. A remote backward releases
// the GIL while it queues the gradient ops (its graph holds remote handles only); a local
// one keeps it, as every LocalTensor op does (its tensors may hold numpy arrays).
#pragma once

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <type_traits>

#include "bindings.hpp"
#include "dtr/autograd.hpp"
#include "tensor_methods.hpp"

namespace dtr::python {

// Runs fn with the GIL released for DistributedTensor, held for local::Tensor.
template <typename T, typename F>
auto maybe_without_gil(F&& fn) {
  if constexpr (std::is_same_v<T, DistributedTensor>) {
    nb::gil_scoped_release nogil;
    return fn();
  } else {
    return fn();
  }
}

// `t`, marked as requiring grad when asked (the creation functions' requires_grad=).
template <typename T>
T with_requires_grad(T t, bool requires_grad) {
  if (requires_grad) t.requires_grad_();
  return t;
}

template <typename T>
void bind_autograd_methods(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  c.def_prop_rw(
      "requires_grad", [](const T& t) { return t.requires_grad(); },
      [](T& t, bool on) { t.requires_grad_(on); },
      "Whether gradients flow to this tensor (a leaf marked so, or made by a recorded op "
      "from one). Assigning marks or unmarks a leaf.");
  c.def(
      "requires_grad_",
      [](nb::pointer_and_handle<T> t, bool on) {
        t.p->requires_grad_(on);
        return nb::borrow(t.h);
      },
      arg("requires_grad") = true, self_sig(cls, "requires_grad_", ", requires_grad: bool = True"),
      "Marks this leaf as needing its gradient (floating tensors only), or not; returns it.");
  c.def_prop_ro(
      "is_leaf", [](const T& t) { return t.is_leaf(); },
      "True for tensors no recorded op made (every tensor that does not require grad).");
  c.def_prop_rw(
      "grad",
      [](const T& t) -> std::optional<T> {
        T g = t.grad();
        return g.defined() ? std::optional<T>(g) : std::nullopt;
      },
      [](T& t, std::optional<T> g) { t.set_grad(g ? *g : T()); },
      nb::for_setter(arg("value").none()),
      "The gradient backward() accumulated into this leaf (None when there is none); "
      "assign None to clear it, or a tensor of the same shape and dtype.");
  c.def_prop_ro(
      "grad_fn",
      [](const T& t) -> std::optional<std::string> {
        std::string name = t.grad_fn_name();
        return name.empty() ? std::nullopt : std::optional<std::string>(name);
      },
      "The name of the recorded op that made this tensor (e.g. 'MulBackward'); None for "
      "leaves.");
  c.def(
      "backward",
      [](const T& t, std::optional<T> gradient, bool retain_graph) {
        maybe_without_gil<T>([&] {
          if (gradient)
            t.backward(*gradient, retain_graph);
          else
            t.backward(retain_graph);
        });
      },
      arg("gradient") = nb::none(), arg("retain_graph") = false,
      "Accumulates d(this)/d(leaf) into every leaf's grad (gradient: d(something)/d(this), "
      "needed unless this has one element). The graph is freed unless retain_graph.");
  c.def(
      "detach", [](const T& t) { return t.detach(); },
      "The same tensor (shared storage) outside the graph: no grad, not recorded.");
  c.def_prop_rw(
      "data", [](const T& t) { return t.detach(); },
      [](T& t, const T& value) {
        auto meta = t.autograd_meta();  // requires_grad and grad stay; the values change
        T swapped = value.detach();
        swapped.set_autograd_meta(meta);
        t = swapped;
      },
      "torch's .data: detach(), the same storage outside the graph (param.grad.data /= n); "
      "assigning makes this object another tensor's storage, keeping its autograd state.");
}

}  // namespace dtr::python
