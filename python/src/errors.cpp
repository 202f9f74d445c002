// dtr's errors as Python exceptions: one class per dtr::Error subclass, in the same
// hierarchy, each also deriving from the builtin a Python user would catch
// (InvalidArgument is a ValueError, IndexError an IndexError, ...). A RemoteError
// carries the worker's report as attributes. And the Ctrl-C check of blocking waits.
#include <nanobind/stl/string.h>

#include "bindings.hpp"

namespace dtr::python {

namespace {

// The classes, made once at import; module attributes keep them alive.
struct Classes {
  PyObject* error = nullptr;
  PyObject* invalid_argument = nullptr;
  PyObject* shape = nullptr;
  PyObject* dtype = nullptr;
  PyObject* index = nullptr;
  PyObject* out_of_memory = nullptr;
  PyObject* device = nullptr;
  PyObject* protocol = nullptr;
  PyObject* transport = nullptr;
  PyObject* worker_lost = nullptr;
  PyObject* authentication = nullptr;
  PyObject* timeout = nullptr;
  PyObject* remote = nullptr;
};
Classes g_classes;

PyObject* make_class(nb::module_& m, const char* name, std::initializer_list<PyObject*> bases,
                     const char* doc) {
  nb::tuple base_tuple = nb::steal<nb::tuple>(PyTuple_New(static_cast<Py_ssize_t>(bases.size())));
  Py_ssize_t i = 0;
  for (PyObject* b : bases) PyTuple_SET_ITEM(base_tuple.ptr(), i++, nb::borrow(b).release().ptr());
  std::string qualified = std::string("dtr.") + name;
  PyObject* cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, base_tuple.ptr(), nullptr);
  if (!cls) throw nb::python_error();
  m.attr(name) = nb::handle(cls);
  Py_DECREF(cls);  // the module holds it
  return cls;
}

// A RemoteError instance with the worker's report as attributes.
void raise_remote(const RemoteError& e) {
  nb::object exc = nb::steal(PyObject_CallFunction(g_classes.remote, "s", e.what()));
  if (!exc.is_valid()) return;  // the call set an error
  const RemoteFailureInfo* f = e.failure();
  nb::object none = nb::none();
  exc.attr("op") = f ? nb::cast(f->op) : none;
  exc.attr("tensor") = f && f->tensor ? nb::cast(f->tensor) : none;
  exc.attr("node") = f ? nb::cast(f->node) : none;
  exc.attr("device") = f ? nb::cast(f->device) : none;
  exc.attr("message") = f ? nb::cast(f->message) : none;
  bool has_cause = f && !(f->cause_op == f->op && f->cause_tensor == f->tensor);
  exc.attr("cause_op") = f ? nb::cast(f->cause_op) : none;
  exc.attr("cause_tensor") = f && f->cause_tensor ? nb::cast(f->cause_tensor) : none;
  exc.attr("cause_message") = f ? nb::cast(f->cause_message) : none;
  exc.attr("cause") = has_cause
                          ? nb::cast(f->cause_op + " producing tensor %" +
                                     std::to_string(f->cause_tensor) + ": " + f->cause_message)
                          : none;
  PyErr_SetObject(g_classes.remote, exc.ptr());
}

void translate(const std::exception_ptr& p, void*) {
  try {
    std::rethrow_exception(p);
  } catch (const RemoteError& e) {
    raise_remote(e);
  } catch (const WorkerLost& e) {
    PyErr_SetString(g_classes.worker_lost, e.what());
  } catch (const AuthenticationError& e) {
    PyErr_SetString(g_classes.authentication, e.what());
  } catch (const TransportError& e) {
    PyErr_SetString(g_classes.transport, e.what());
  } catch (const ShapeError& e) {
    PyErr_SetString(g_classes.shape, e.what());
  } catch (const DTypeError& e) {
    PyErr_SetString(g_classes.dtype, e.what());
  } catch (const IndexError& e) {
    PyErr_SetString(g_classes.index, e.what());
  } catch (const InvalidArgument& e) {
    PyErr_SetString(g_classes.invalid_argument, e.what());
  } catch (const OutOfMemory& e) {
    PyErr_SetString(g_classes.out_of_memory, e.what());
  } catch (const DeviceError& e) {
    PyErr_SetString(g_classes.device, e.what());
  } catch (const ProtocolError& e) {
    PyErr_SetString(g_classes.protocol, e.what());
  } catch (const TimeoutError& e) {
    PyErr_SetString(g_classes.timeout, e.what());
  } catch (const Error& e) {
    PyErr_SetString(g_classes.error, e.what());
  }
}

}  // namespace

void check_python_signals() {
  if (!Py_IsInitialized()) return;
  nb::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw nb::python_error();
}

void bind_errors(nb::module_& m) {
  Classes& c = g_classes;
  c.error = make_class(m, "Error", {PyExc_RuntimeError}, "Base of every error dtr raises.");
  c.invalid_argument = make_class(m, "InvalidArgument", {c.error, PyExc_ValueError},
                                  "An argument that can never work (bad dim, shape, dtype).");
  c.shape = make_class(m, "ShapeError", {c.invalid_argument},
                       "Shapes that do not fit the op (not broadcastable, wrong rank).");
  c.dtype = make_class(m, "DTypeError", {c.invalid_argument, PyExc_TypeError},
                       "A dtype the op does not accept, or two that do not go together.");
  c.index = make_class(m, "IndexError", {c.invalid_argument, PyExc_IndexError},
                       "A dim, index or node outside its range.");
  c.out_of_memory = make_class(m, "OutOfMemory", {c.error, PyExc_MemoryError},
                               "An allocation the allocator could not satisfy.");
  c.device = make_class(m, "DeviceError", {c.error},
                        "A CUDA device is missing or failed; also raised without CUDA support.");
  c.protocol = make_class(m, "ProtocolError", {c.error}, "Bytes that do not follow the protocol.");
  c.transport = make_class(m, "TransportError", {c.error}, "A socket or connection failed.");
  c.worker_lost = make_class(m, "WorkerLost", {c.transport},
                             "A worker of the session is gone (closed or silent too long).");
  c.authentication = make_class(m, "AuthenticationError", {c.transport},
                                "A link could not be authenticated (cluster key, CURVE).");
  c.timeout = make_class(m, "TimeoutError", {c.error}, "A wait ran out of time.");
  c.remote = make_class(m, "RemoteError", {c.error},
                        "An op failed on a worker. Attributes: op, tensor, node, device, message "
                        "and the first cause (cause, cause_op, cause_tensor, cause_message).");
  nb::register_exception_translator(translate);
  set_wait_interrupt_check(&check_python_signals);
}

}  // namespace dtr::python
