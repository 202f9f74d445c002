// The Python module dtr._dtr: the parts of the binding and the conversions they share.
//
// The module stays thin: the C++ API (include/dtr/) is the design; these files translate
// types (Python numbers to dtr::Scalar, shapes, dtypes, buffers), errors (dtr::Error to
// Python exception classes, errors.cpp) and the GIL (released around every call that can
// block: sync points, connecting, process-group calls).
//
// Thread safety: every function here must be called with the GIL held, except where it
// says otherwise.
#pragma once

#include <nanobind/nanobind.h>

#include <optional>
#include <string>

#include "dtr/dtr.hpp"

namespace dtr::python {

namespace nb = nanobind;

// ---- the parts (one file each) ----
void bind_errors(nb::module_& m);         // errors.cpp
void bind_basics(nb::module_& m);         // convert.cpp: DType, Generator, ReduceOp
void bind_local_tensor(nb::module_& m);   // local_tensor.cpp
void bind_remote_tensor(nb::module_& m);  // remote_tensor.cpp
void bind_session(nb::module_& m);        // session.cpp
void bind_process_group(nb::module_& m);  // process_group.cpp
void bind_training(nb::module_& m);       // training.cpp: autograd, optim, nn, data

// ---- conversions (convert.cpp) ----

// A Python bool, int or float (or anything with __index__ / __float__, e.g. numpy
// scalars) as a Scalar; nullopt for anything else. Ints outside int64 raise OverflowError.
std::optional<Scalar> to_scalar(nb::handle h);
// As to_scalar, but raises TypeError naming `what` for anything else.
Scalar scalar_arg(nb::handle h, const char* what);
// A Scalar as a Python bool, int or float.
nb::object from_scalar(const Scalar& s);
// A shape given as ints (`f(2, 3)`) or as one sequence (`f((2, 3))`, `f([2, 3])`).
Shape shape_from_args(nb::args args, const char* what);
// A DType, or a dtype named by a string ("float32", "float", "int64", "long", ...).
DType dtype_arg(nb::handle h);
// randperm's n: raises InvalidArgument for a negative one, as torch does.
inline void check_randperm(int64_t n) {
  if (n < 0) throw InvalidArgument("randperm: n must be non-negative, got " + std::to_string(n));
}
// torch.randint's arguments: (high, size) or (low, high, size), size also as a keyword.
struct RandintArgs {
  int64_t low, high;
  Shape shape;
};
RandintArgs randint_args(nb::args args, nb::handle size);
// Runs fn with `node` / `device` current when given (the constructors' node=, device=).
template <typename F>
auto on_place(std::optional<int> node, std::optional<int> device, F&& fn) {
  std::optional<node_guard> n;
  std::optional<device_guard> d;
  if (node) n.emplace(*node);
  if (device) d.emplace(*device);
  return fn();
}

// ---- Ctrl-C (errors.cpp) ----

// The wait interrupt check installed in the master library (dtr::set_wait_interrupt_check):
// takes the GIL and runs Python's signal handlers; a handler that raises
// (KeyboardInterrupt) ends the wait with that exception. Called without the GIL.
void check_python_signals();

}  // namespace dtr::python

namespace dtr::python {
// ---- data in and out (local_tensor.cpp) ----

// A local tensor holding `h`'s data: a LocalTensor itself, or any object with __dlpack__
// or the buffer protocol (numpy arrays, torch CPU tensors, memoryview), shared without a
// copy (the tensor keeps the object alive). Raises DTypeError / InvalidArgument naming
// what does not fit (dtype, device, negative strides).
local::Tensor local_from_object(nb::handle h);
}  // namespace dtr::python
