// dtr.Tensor: a handle to a tensor on a worker (dtr::DistributedTensor), its sync points
// (GIL released while they wait), copies between nodes and devices, and the creation
// functions with node= and device= (dtr.zeros(3, node=1), dtr.FloatTensor(10, device=0)).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "autograd_methods.hpp"
#include "bindings.hpp"
#include "composite_ops.hpp"
#include "dtr/composite.hpp"
#include "table_ops.hpp"
#include "tensor_methods.hpp"

namespace dtr::python {

namespace {

using Tensor = DistributedTensor;
using nb::arg;

local::Tensor fetch(const Tensor& t) {
  nb::gil_scoped_release nogil;
  return t.to_local();
}

nb::object item(const Tensor& t) {
  Scalar s;
  {
    nb::gil_scoped_release nogil;
    s = t.item();
  }
  return from_scalar(s);
}

std::string text(const Tensor& t) {
  if (!t.defined()) return "Tensor(undefined)";
  nb::gil_scoped_release nogil;
  return t.to_string();
}

// x.to(dtype) converts; x.to(k) (an int) copies to node k; x.to(node=k, device=d) too.
Tensor to(const Tensor& t, nb::handle target, std::optional<int> node, std::optional<int> device) {
  Tensor r = t;
  if (!target.is_none()) {
    if (!PyBool_Check(target.ptr()) && PyIndex_Check(target.ptr())) {
      if (node) throw InvalidArgument("to(): the node given twice");
      node = nb::cast<int>(target);
    } else {
      r = r.to(dtype_arg(target));
    }
  }
  if (node) r = r.to(*node);
  if (device) r = r.to_device(*device);
  return r;
}

// Creation on the current node and device, or on node= / device= when given.
template <typename F>
void def_creation(nb::module_& m, const char* name, F&& make, const char* doc) {
  m.def(
      name,
      [make](nb::args shape, nb::handle dtype, std::optional<int> node, std::optional<int> device,
             bool requires_grad) {
        Shape s = shape_from_args(shape, "tensor");
        DType t = dtype_arg(dtype);
        return with_requires_grad(on_place(node, device, [&] { return make(s, t); }),
                                  requires_grad);
      },
      arg("shape"), arg("dtype") = DType::Float32, arg("node") = nb::none(),
      arg("device") = nb::none(), arg("requires_grad") = false, doc);
}

void bind_creation(nb::module_& m) {
  def_creation(
      m, "empty", [](const Shape& s, DType t) { return empty(s, t); },
      "An uninitialized tensor on the current node and device (or node=, device=).");
  def_creation(
      m, "zeros", [](const Shape& s, DType t) { return zeros(s, t); },
      "A tensor of zeros on the current node and device (or node=, device=).");
  def_creation(
      m, "ones", [](const Shape& s, DType t) { return ones(s, t); },
      "A tensor of ones on the current node and device (or node=, device=).");
  m.def(
      "full",
      [](nb::handle size, nb::handle value, nb::handle dtype, std::optional<int> node,
         std::optional<int> device, bool requires_grad) {
        Shape s = shape_from_args(nb::borrow<nb::args>(nb::make_tuple(size)), "full");
        Scalar v = scalar_arg(value, "full");
        DType t = dtype_arg(dtype);
        return with_requires_grad(on_place(node, device, [&] { return full(s, v, t); }),
                                  requires_grad);
      },
      arg("size"), arg("fill_value"), arg("dtype") = DType::Float32, arg("node") = nb::none(),
      arg("device") = nb::none(), arg("requires_grad") = false);
  m.def(
      "arange",
      [](nb::handle a, nb::handle b, nb::handle step, nb::handle dtype, std::optional<int> node,
         std::optional<int> device) {
        Scalar start = b.is_none() ? Scalar(0) : scalar_arg(a, "arange");
        Scalar end = b.is_none() ? scalar_arg(a, "arange") : scalar_arg(b, "arange");
        Scalar s = scalar_arg(step, "arange");
        return on_place(node, device, [&] {
          Tensor r = arange(start, end, s);
          return dtype.is_none() ? r : r.to(dtype_arg(dtype));
        });
      },
      arg("start"), arg("end") = nb::none(), arg("step") = 1, arg("dtype") = nb::none(),
      arg("node") = nb::none(), arg("device") = nb::none());
  m.def(
      "linspace",
      [](double start, double end, int64_t steps, nb::handle dtype, std::optional<int> node,
         std::optional<int> device, bool requires_grad) {
        DType t = dtype_arg(dtype);
        return with_requires_grad(
            on_place(node, device, [&] { return linspace(start, end, steps, t); }), requires_grad);
      },
      arg("start"), arg("end"), arg("steps"), arg("dtype") = DType::Float32,
      arg("node") = nb::none(), arg("device") = nb::none(), arg("requires_grad") = false);
}

// rand, randn and dist_send.
void bind_random_and_send(nb::module_& m) {
  for (bool normal : {false, true}) {
    m.def(
        normal ? "randn" : "rand",
        [normal](nb::args shape, Generator* gen, nb::handle dtype, std::optional<int> node,
                 std::optional<int> device, bool requires_grad) {
          Shape s = shape_from_args(shape, normal ? "randn" : "rand");
          DType t = dtype_arg(dtype);
          return with_requires_grad(on_place(node, device,
                                             [&] {
                                               if (gen)
                                                 return normal ? randn(s, *gen, t)
                                                               : rand(s, *gen, t);
                                               return normal ? randn(s, t) : rand(s, t);
                                             }),
                                    requires_grad);
        },
        arg("shape"), arg("generator") = nb::none(), arg("dtype") = DType::Float32,
        arg("node") = nb::none(), arg("device") = nb::none(), arg("requires_grad") = false,
        normal ? "Standard normal draws (the same seed gives the same values on any node)."
               : "Uniform draws on [0, 1) (the same seed gives the same values on any node).");
  }
  m.def(
      "randperm",
      [](int64_t n, Generator* gen, nb::handle dtype, std::optional<int> node,
         std::optional<int> device) {
        check_randperm(n);
        const DType t = dtype.is_none() ? DType::Int64 : dtype_arg(dtype);
        return on_place(node, device, [&] {
          // Each position's key a double draw (53 bits: ties, left in place by the stable
          // sort, are rare), the permutation their order.
          Tensor keys = gen ? rand({n}, *gen, DType::Float64) : rand({n}, DType::Float64);
          Tensor perm = keys.argsort(0);
          return t == DType::Int64 ? perm : perm.to(t);
        });
      },
      arg("n"), nb::kw_only(), arg("generator") = nb::none(), arg("dtype") = nb::none(),
      arg("node") = nb::none(), arg("device") = nb::none(),
      "A random permutation of 0 .. n-1 (int64), made on the node: the order of n uniform "
      "draws (the same seed gives the same permutation on any node).");
  m.def(
      "eye",
      [](int64_t n, std::optional<int64_t> cols, nb::handle dtype, std::optional<int> node,
         std::optional<int> device, bool requires_grad) {
        const DType t = dtype_arg(dtype);
        return with_requires_grad(on_place(node, device, [&] { return eye(n, cols, t); }),
                                  requires_grad);
      },
      arg("n"), arg("m") = nb::none(), nb::kw_only(), arg("dtype") = DType::Float32,
      arg("node") = nb::none(), arg("device") = nb::none(), arg("requires_grad") = false,
      "The n x m identity (m = n by default), made on the node.");
  m.def(
      "randint",
      [](nb::args args, nb::handle size, Generator* gen, nb::handle dtype, std::optional<int> node,
         std::optional<int> device) {
        const auto [low, high, shape] = randint_args(args, size);
        const DType t = dtype.is_none() ? DType::Int64 : dtype_arg(dtype);
        return on_place(node, device, [&] { return randint(low, high, shape, gen, t); });
      },
      arg("args"), arg("size") = nb::none(), arg("generator") = nb::none(),
      arg("dtype") = nb::none(), arg("node") = nb::none(), arg("device") = nb::none(),
      nb::sig("def randint(*args, size: Sequence[int] | None = None, generator: Generator | None "
              "= None, dtype: object | None = None, node: int | None = None, device: int | None "
              "= None) -> Tensor"),
      "Integers uniform on [low, high): randint(high, size) or randint(low, high, size), made "
      "on the node (int64 unless dtype is given).");
  m.def(
      "dist_send",
      [](nb::handle data, std::optional<int> node, std::optional<int> device) {
        local::Tensor t = local_from_object(data);
        nb::gil_scoped_release nogil;
        return on_place(std::nullopt, device, [&] { return dist_send(t, node ? *node : -1); });
      },
      arg("data"), arg("node") = nb::none(), arg("device") = nb::none(),
      "Sync point: copies a LocalTensor, numpy array or any DLPack/buffer object to a node "
      "(default: the current one) and returns its handle.");
}

void bind_remote_methods(nb::class_<Tensor>& c) {
  c.def("get_node", &Tensor::get_node);
  c.def("get_device", &Tensor::get_device, "-1 for the node's CPU");
  c.def_prop_ro("node", &Tensor::get_node);
  c.def_prop_ro("device", &Tensor::get_device);
  c.def_prop_ro("id", &Tensor::id);
  c.def_prop_ro("is_defined", &Tensor::defined);
  c.def("to_local", &fetch, "Sync point: the values, copied to this process.");
  c.def("item", &item, "Sync point: the only element of a one-element tensor.");
  c.def(
      "numpy", [](const Tensor& t) { return nb::cast(fetch(t)).attr("numpy")(); },
      "Sync point: to_local().numpy().");
  c.def(
      "__array__",
      [](const Tensor& t, nb::handle dtype, nb::handle copy) {
        return nb::cast(fetch(t)).attr("__array__")(dtype, copy);
      },
      arg("dtype") = nb::none(), arg("copy") = nb::none());
  c.def("to", &to, arg("target") = nb::none(), arg("node") = nb::none(), arg("device") = nb::none(),
        "to(dtype) converts; to(k) or to(node=k) copies to node k worker to worker; "
        "to(device=d) moves to CUDA device d of the node (-1: its CPU). Never blocks.");
  c.def("to_device", &Tensor::to_device, arg("device"));
  c.def("cpu", &Tensor::cpu);
  c.def("cuda", &Tensor::cuda, arg("device") = 0);
  c.def("__repr__", &text, "Sync point: the values with node and device.");
  c.def("__bool__", [](const Tensor& t) {
    if (t.numel() != 1)
      throw InvalidArgument("the truth value of a tensor with " + std::to_string(t.numel()) +
                            " elements is ambiguous");
    nb::gil_scoped_release nogil;
    return t.item().to<bool>();
  });
  c.def("__float__", [](const Tensor& t) {
    nb::gil_scoped_release nogil;
    return t.item().to_double();
  });
  c.def("__int__", [](const Tensor& t) {
    nb::gil_scoped_release nogil;
    return t.item().to_int();
  });
}

}  // namespace

void bind_remote_tensor(nb::module_& m) {
  nb::class_<Tensor> c(m, "Tensor",
                       "A tensor on a worker: ops are checked here and run on its node, "
                       "returning at once; to_local(), item() and printing are sync points.");
  c.def(
      "__init__",
      [](Tensor* self, nb::args shape, nb::handle dtype, std::optional<int> node,
         std::optional<int> device) {
        Shape s = shape_from_args(shape, "Tensor");
        DType t = dtype_arg(dtype);
        new (self) Tensor(on_place(node, device, [&] { return empty(s, t); }));
      },
      arg("shape"), arg("dtype") = DType::Float32, arg("node") = nb::none(),
      arg("device") = nb::none());
  // numpy defers to this class's reflected operators (np.ones(3) * x refuses as x * a
  // local array does) instead of iterating x element by element, one sync each.
  c.attr("__array_ufunc__") = nb::none();
  bind_tensor_methods(c, "Tensor");
  bind_table_methods(c, "Tensor");
  bind_composite_methods(c, "Tensor");
  bind_table_functions<Tensor>(m, "Tensor", "Generator");
  bind_composite_functions<Tensor>(m, "Tensor");
  bind_remote_methods(c);
  bind_autograd_methods(c, "Tensor");
  bind_creation(m);
  bind_random_and_send(m);
}

}  // namespace dtr::python
