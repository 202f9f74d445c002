// Conversions between Python values and dtr's value types, and the small value types'
// bindings: DType (with dtr.float32 ... dtr.bfloat16), Generator, ReduceOp.
#include <nanobind/stl/string.h>

#include <cstring>
#include <iterator>
#include <string_view>

#include "bindings.hpp"

namespace dtr::python {

std::optional<Scalar> to_scalar(nb::handle h) {
  PyObject* o = h.ptr();
  if (PyBool_Check(o)) return Scalar(o == Py_True);
  if (PyLong_CheckExact(o) || PyLong_Check(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0) {
      PyErr_SetString(PyExc_OverflowError, "integer does not fit in int64");
      throw nb::python_error();
    }
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    return Scalar(static_cast<int64_t>(v));
  }
  if (PyFloat_Check(o)) return Scalar(PyFloat_AS_DOUBLE(o));
  // numpy scalars and other number types: bool_ first (it has no __index__ in numpy 2).
  PyTypeObject* t = Py_TYPE(o);
  if (std::strcmp(t->tp_name, "numpy.bool") == 0 || std::strcmp(t->tp_name, "numpy.bool_") == 0)
    return Scalar(PyObject_IsTrue(o) == 1);
  if (t->tp_as_number && t->tp_as_number->nb_index) {
    nb::object i = nb::steal(PyNumber_Index(o));
    if (i.is_valid()) return to_scalar(i);
    PyErr_Clear();  // e.g. a 0-d float array: __index__ refuses it, __float__ takes it
  }
  if (t->tp_as_number && t->tp_as_number->nb_float) {
    double v = PyFloat_AsDouble(o);
    if (v == -1.0 && PyErr_Occurred()) throw nb::python_error();
    return Scalar(v);
  }
  return std::nullopt;
}

Scalar scalar_arg(nb::handle h, const char* what) {
  if (std::optional<Scalar> s = to_scalar(h)) return *s;
  throw nb::type_error((std::string(what) + ": expected a number (bool, int or float), got " +
                        nb::type_name(h.type()).c_str())
                           .c_str());
}

nb::object from_scalar(const Scalar& s) {
  switch (s.kind()) {
    case Scalar::Kind::Bool:
      return nb::bool_(s.to<bool>());
    case Scalar::Kind::Int:
      return nb::int_(s.to_int());
    case Scalar::Kind::Float:
      return nb::float_(s.to_double());
    case Scalar::Kind::None:
      break;
  }
  return nb::none();
}

RandintArgs randint_args(nb::args args, nb::handle size) {
  const size_t n = args.size();
  nb::handle shape = size;
  if (size.is_none() && n >= 1) shape = args[n - 1];
  const size_t ints = size.is_none() ? (n >= 1 ? n - 1 : 0) : n;
  if (shape.is_none() || ints < 1 || ints > 2)
    throw nb::type_error(
        "randint: expected randint(high, size) or randint(low, high, size), size a sequence of "
        "ints");
  const int64_t a = nb::cast<int64_t>(args[0]);
  RandintArgs r{ints == 2 ? a : 0, ints == 2 ? nb::cast<int64_t>(args[1]) : a, {}};
  nb::tuple t = nb::make_tuple(shape);
  r.shape = shape_from_args(nb::borrow<nb::args>(t), "randint");
  return r;
}

Shape shape_from_args(nb::args args, const char* what) {
  nb::handle seq = args;
  if (args.size() == 1 && !PyLong_Check(args[0].ptr()) &&
      PySequence_Check(args[0].ptr()))  // f((2, 3)) or f([2, 3]) or f(x.shape)
    seq = args[0];
  Shape shape;
  Py_ssize_t n = PySequence_Size(seq.ptr());
  if (n < 0) throw nb::python_error();
  if (n > static_cast<Py_ssize_t>(kMaxDims))
    throw InvalidArgument(std::string(what) + ": at most " + std::to_string(kMaxDims) +
                          " dims, got " + std::to_string(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    nb::object item = nb::steal(PySequence_GetItem(seq.ptr(), i));
    if (!item.is_valid()) throw nb::python_error();
    if (PyBool_Check(item.ptr()) || !PyIndex_Check(item.ptr()))
      throw nb::type_error(
          (std::string(what) + ": a shape is ints, got " + nb::type_name(item.type()).c_str())
              .c_str());
    nb::object index = nb::steal(PyNumber_Index(item.ptr()));
    if (!index.is_valid()) throw nb::python_error();
    long long v = PyLong_AsLongLong(index.ptr());
    if (v == -1 && PyErr_Occurred()) throw nb::python_error();
    shape.push_back(static_cast<int64_t>(v));
  }
  return shape;
}

DType dtype_arg(nb::handle h) {
  if (nb::isinstance<DType>(h)) return nb::cast<DType>(h);
  if (nb::isinstance<nb::str>(h)) {
    std::string name = nb::cast<std::string>(h);
    static const std::pair<std::string_view, DType> kNames[] = {
        {"float32", DType::Float32}, {"float", DType::Float32}, {"float64", DType::Float64},
        {"double", DType::Float64},  {"int32", DType::Int32},   {"int", DType::Int32},
        {"int64", DType::Int64},     {"long", DType::Int64},    {"bool", DType::Bool},
        {"float16", DType::Float16}, {"half", DType::Float16},  {"bfloat16", DType::BFloat16}};
    for (const auto& [n, t] : kNames)
      if (name == n) return t;
    throw DTypeError("unknown dtype '" + name +
                     "' (float32, float64, int32, int64, bool, float16, bfloat16)");
  }
  // numpy dtypes and scalar types: by their name.
  if (nb::hasattr(h, "name") && nb::hasattr(h, "kind")) return dtype_arg(nb::str(h.attr("name")));
  if (PyType_Check(h.ptr())) {
    if (h.ptr() == reinterpret_cast<PyObject*>(&PyFloat_Type)) return DType::Float32;
    if (h.ptr() == reinterpret_cast<PyObject*>(&PyLong_Type)) return DType::Int64;
    if (h.ptr() == reinterpret_cast<PyObject*>(&PyBool_Type)) return DType::Bool;
    if (nb::hasattr(h, "__name__")) return dtype_arg(nb::str(h.attr("__name__")));
  }
  throw nb::type_error((std::string("expected a dtype (dtr.float32, 'float32', ...), got ") +
                        nb::type_name(h.type()).c_str())
                           .c_str());
}

void bind_basics(nb::module_& m) {
  nb::enum_<DType>(m, "dtype", "Element type of a tensor.")
      .value("float32", DType::Float32)
      .value("float64", DType::Float64)
      .value("int32", DType::Int32)
      .value("int64", DType::Int64)
      .value("bool", DType::Bool)
      .value("float16", DType::Float16)
      .value("bfloat16", DType::BFloat16)
      .def_prop_ro("itemsize", [](DType t) { return element_size(t); })
      .def_prop_ro("is_floating_point", [](DType t) { return is_floating(t); })
      .def("__str__", [](DType t) { return "dtr." + std::string(dtype_name(t)); });
  m.def("promote_types", &promote_types, nb::arg("a"), nb::arg("b"),
        "The dtype two tensors of dtypes a and b promote to (torch.result_type's rule).");

  nb::class_<Generator>(m, "Generator",
                        "A seeded counter-based random stream (Philox): the same seed gives the "
                        "same values on every node.")
      .def(nb::init<uint64_t>(), nb::arg("seed") = 0x5eed)
      .def(
          "manual_seed",
          [](Generator& g, uint64_t seed) -> Generator& {
            g.manual_seed(seed);
            return g;
          },
          nb::arg("seed"), nb::rv_policy::reference)
      .def("initial_seed", &Generator::seed)
      .def_prop_ro("offset", &Generator::offset);
  m.def("manual_seed", &manual_seed, nb::arg("seed"),
        "Seeds the default generator (rand, randn, uniform_, normal_ without generator=).");

  m.def(
      "_op_table",
      [] {
        static const char* kKinds[] = {"unary",  "binary", "reduce",   "clamp",   "norm",
                                       "moment", "linalg", "view",     "convert", "mutate",
                                       "create", "join",   "indexing", "nn"};
        static_assert(std::size(kKinds) == static_cast<size_t>(OpKind::NN) + 1,
                      "one name per OpKind");
        nb::list ops;
        for (const OpDef& d : all_ops())
          ops.append(nb::make_tuple(std::string(d.name), kKinds[static_cast<int>(d.kind)],
                                    d.has_inplace_form, std::string(d.help)));
        return ops;
      },
      "The op table: (name, kind, has an in-place form, help) per op.");

  nb::enum_<ReduceOp>(m, "ReduceOp", "Reduction of a collective.")
      .value("SUM", ReduceOp::Sum)
      .value("PRODUCT", ReduceOp::Product)
      .value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max)
      .value("AVG", ReduceOp::Avg);
}

}  // namespace dtr::python
