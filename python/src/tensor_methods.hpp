// The methods and operators both tensor classes share (dtr.Tensor, a remote handle, and
// dtr.LocalTensor), generated from the op table as TensorOps<T> generates the C++ ones:
// every unary op with its in-place form, every binary op with tensor or number operands
// and its in-place form, every reduction, the views, conversions, fills, indexing and
// slicing, and Python's operators (+ - * / ** @, comparisons giving bool tensors, in-place
// += -= *= /=, numbers on either side).
//
// Thread safety: as the bound type's; called with the GIL held. Nothing here blocks
// except through the type's own calls (a remote op may wait for the I/O thread when 64 Ki
// commands are queued for its node).
#pragma once

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <fmt/format.h>

#include <deque>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "bindings.hpp"
#include "dtr/composite.hpp"

namespace dtr::python {

// The tensor `h` holds when it is a T, else nullptr.
template <typename T>
const T* tensor_of(nb::handle h) {
  return nb::isinstance<T>(h) ? nb::inst_ptr<T>(h) : nullptr;
}

// An operand of the other tensor class (a local tensor or array in a remote tensor's op,
// or a remote tensor in a local one's): a 0-d one is a number, as a CPU scalar tensor is
// for a CUDA op in torch; anything else raises naming both places (it used to be read as a
// number through __float__, failing with "item: needs a tensor with one element"). On the
// path of every binary op: numbers and same-class tensors return first.
template <typename T>
void refuse_other_kind(OpId op, const T& self, nb::handle other) {
  PyObject* p = other.ptr();
  if (PyFloat_Check(p) || PyLong_Check(p) || tensor_of<T>(other)) return;
  const std::string_view name = op_def(op).name;
  if constexpr (std::is_same_v<T, DistributedTensor>) {
    std::string local;  // the local operand, when it has elements
    if (const auto* o = tensor_of<local::Tensor>(other)) {
      if (o->dim() > 0) local = fmt::format("a local tensor ({})", describe(o->meta()));
    } else if (PyObject_HasAttrString(p, "__dlpack__") == 1 && nb::hasattr(other, "ndim") &&
               nb::cast<int>(other.attr("ndim")) > 0) {  // numpy, torch: a local array
      local = fmt::format("a local array ({})", nb::type_name(other.type()).c_str());
    }
    if (local.empty()) return;
    throw InvalidArgument(fmt::format(
        "{}: {} and a tensor on node {}: send it there first (dtr.dist_send(t, node={})), or "
        "bring this one here (x.to_local())",
        name, local, self.get_node(), self.get_node()));
  } else {
    const auto* o = tensor_of<DistributedTensor>(other);
    if (o == nullptr || o->dim() == 0) return;
    throw InvalidArgument(
        fmt::format("{}: a local tensor and a tensor on node {} ({}): bring that one here first "
                    "(t.to_local()), or send this one there (dtr.dist_send(x, node={}))",
                    name, o->get_node(), describe(o->meta()), o->get_node()));
  }
}

// `self op other` (or `other op self` when reflected) for a tensor or number operand;
// NotImplemented for anything else, so Python tries the other operand's method.
template <typename T>
nb::object binary(OpId op, const T& self, nb::handle other, bool reflected) {
  refuse_other_kind(op, self, other);
  if (const T* o = tensor_of<T>(other))
    return nb::cast(reflected ? o->apply(op, {}, &self) : self.apply(op, {}, o));
  if (std::optional<Scalar> s = to_scalar(other)) {
    OpAttrs a;
    a.scalars[0] = *s;
    a.scalar_first = reflected;
    return nb::cast(self.apply(op, a, nullptr));
  }
  return nb::borrow(Py_NotImplemented);
}

// The method form: TypeError instead of NotImplemented.
template <typename T>
T binary_method(OpId op, const T& self, nb::handle other) {
  refuse_other_kind(op, self, other);
  if (const T* o = tensor_of<T>(other)) return self.apply(op, {}, o);
  OpAttrs a;
  a.scalars[0] = scalar_arg(other, op_def(op).name.data());
  return self.apply(op, a, nullptr);
}

// A signature for the stubs (`nb::sig`), kept for the life of the module.
inline const char* stub_sig(std::string text) {
  static std::deque<std::string> kept;
  return kept.emplace_back(std::move(text)).c_str();
}

// `self op= other`; returns self (the same Python object).
template <typename T>
nb::object binary_inplace(OpId op, nb::pointer_and_handle<T> self, nb::handle other) {
  refuse_other_kind(op, *self.p, other);
  if (const T* o = tensor_of<T>(other)) {
    self.p->apply_inplace(op, {}, o);
  } else {
    OpAttrs a;
    a.scalars[0] = scalar_arg(other, op_def(op).name.data());
    self.p->apply_inplace(op, a, nullptr);
  }
  return nb::borrow(self.h);
}

// The items of an index: a tuple's, or the index itself.
inline std::vector<nb::handle> index_items(nb::handle index) {
  std::vector<nb::handle> items;
  if (nb::isinstance<nb::tuple>(index)) {
    for (nb::handle h : nb::borrow<nb::tuple>(index)) items.push_back(h);
  } else {
    items.push_back(index);
  }
  return items;
}

// Advanced indexing (an item is a tensor or a list of ints): the index tensors per dim of
// x (undefined where the whole dim is taken) for TensorOps::index / index_put. Ints index
// too (0-d tensors, as in torch, so the layout is torch's); `:` takes a whole dim and one
// `...` the dims not named; a partial slice or None beside a tensor index raises.
template <typename T>
std::optional<std::vector<T>> advanced_indices(const T& x, nb::handle index) {
  const std::vector<nb::handle> items = index_items(index);
  bool advanced = false;
  for (nb::handle h : items) advanced = advanced || tensor_of<T>(h) || PyList_Check(h.ptr());
  if (!advanced) return std::nullopt;
  int64_t named = 0;
  for (nb::handle h : items) named += h.ptr() == Py_Ellipsis ? 0 : 1;
  if (named > x.dim())
    throw IndexError("too many indices for a tensor of dimension " + std::to_string(x.dim()));
  std::vector<T> out;
  for (nb::handle h : items) {
    if (h.ptr() == Py_Ellipsis) {
      out.resize(out.size() + static_cast<size_t>(x.dim() - named));
    } else if (const T* t = tensor_of<T>(h)) {
      out.push_back(*t);
    } else if (PyList_Check(h.ptr())) {
      const local::Tensor l = local::from_vector(nb::cast<std::vector<int64_t>>(h));
      if constexpr (std::is_same_v<T, local::Tensor>) {
        out.push_back(l.to_device(x.device()));
      } else {
        device_guard dev(x.get_device());
        out.push_back(dist_send(l, x.get_node()));
      }
    } else if (!PyBool_Check(h.ptr()) && PyIndex_Check(h.ptr())) {
      out.push_back(
          x.new_full({}, nb::cast<int64_t>(nb::steal(PyNumber_Index(h.ptr()))), DType::Int64));
    } else if (PySlice_Check(h.ptr()) && nb::borrow<nb::slice>(h).attr("start").is_none() &&
               nb::borrow<nb::slice>(h).attr("stop").is_none() &&
               nb::borrow<nb::slice>(h).attr("step").is_none()) {
      out.emplace_back();
    } else {
      throw IndexError(
          "beside a tensor index only ints, ':' and '...' are supported (index in two steps: "
          "x[1:3][idx]), got " +
          std::string(nb::type_name(h.type()).c_str()));
    }
  }
  return out;
}

// x[index]: ints select (dropping the dim), slices slice (step > 0), None inserts a dim,
// one Ellipsis stands for the dims not named. Views: they share x's storage.
template <typename T>
T index_view(const T& x, nb::handle index) {
  const std::vector<nb::handle> items = index_items(index);
  auto is_int = [](nb::handle h) { return !PyBool_Check(h.ptr()) && PyIndex_Check(h.ptr()); };
  int64_t consuming = 0, ellipses = 0;
  for (nb::handle h : items) {
    if (is_int(h) || PySlice_Check(h.ptr())) {
      ++consuming;
    } else if (h.ptr() == Py_Ellipsis) {
      ++ellipses;
    } else if (!h.is_none()) {
      throw IndexError(
          std::string("only integers, slices, None, ..., integer tensors and lists index a "
                      "tensor, got ") +
          nb::type_name(h.type()).c_str());
    }
  }
  if (ellipses > 1) throw IndexError("an index can only have one ellipsis ('...')");
  if (consuming > 0 && x.dim() == 0)  // torch's words, with its hint
    throw IndexError(
        "invalid index of a 0-dim tensor: use x.item() to read its value as a Python number");
  if (consuming > x.dim())
    throw IndexError("too many indices for a tensor of dimension " + std::to_string(x.dim()) +
                     ": " + std::to_string(consuming));
  T r = x;
  int64_t d = 0;
  for (nb::handle h : items) {
    if (h.is_none()) {
      r = r.unsqueeze(d++);
    } else if (h.ptr() == Py_Ellipsis) {
      d = r.dim() - consuming;  // the indices after it (`consuming` left) name the last dims
    } else if (is_int(h)) {
      nb::object i = nb::steal(PyNumber_Index(h.ptr()));
      if (!i.is_valid()) throw nb::python_error();  // an __index__ that raised
      r = r.select(d, nb::cast<int64_t>(i));
      if (consuming > 0) --consuming;
    } else {
      Py_ssize_t start, stop, step;
      if (PySlice_Unpack(h.ptr(), &start, &stop, &step) < 0) throw nb::python_error();
      if (step <= 0)
        throw InvalidArgument("slice step must be positive, got " + std::to_string(step));
      int64_t end = stop == PY_SSIZE_T_MAX ? std::numeric_limits<int64_t>::max() : stop;
      r = r.slice(d++, start, end, step);
      if (consuming > 0) --consuming;
    }
  }
  return r;
}

// A `dim` argument of a reduction: None (every dim: an empty list), an int, or a sequence.
inline Dims dims_arg(nb::handle dim) {
  if (dim.is_none()) return Dims{};
  if (PyLong_Check(dim.ptr())) return Dims{nb::cast<int64_t>(dim)};
  const auto v = nb::cast<std::vector<int64_t>>(dim);
  return Dims(v.begin(), v.end());
}

// The nb::sig of a method that returns self: "def name(self<params>) -> cls" (the stubs
// would say `object` otherwise).
inline nb::sig self_sig(const std::string& cls, const char* name, const std::string& params) {
  return nb::sig(stub_sig("def " + std::string(name) + "(self" + params + ") -> " + cls));
}

template <typename T>
void bind_metadata(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  (void)cls;
  // ---- metadata ----
  c.def_prop_ro("dtype", [](const T& t) { return t.dtype(); })
      .def_prop_ro("shape",
                   [](const T& t) {
                     nb::tuple shape = nb::steal<nb::tuple>(PyTuple_New(t.dim()));
                     for (int64_t i = 0; i < t.dim(); ++i)
                       PyTuple_SET_ITEM(shape.ptr(), i, PyLong_FromLongLong(t.shape()[i]));
                     return shape;
                   })
      .def_prop_ro("ndim", [](const T& t) { return t.dim(); })
      .def("dim", [](const T& t) { return t.dim(); })
      .def("numel", [](const T& t) { return t.numel(); })
      .def(
          "size",
          [](const T& t, std::optional<int64_t> d) -> nb::object {
            if (d) return nb::int_(t.size(*d));
            return nb::getattr(nb::cast(t), "shape");
          },
          arg("dim") = nb::none())
      .def(
          "stride",
          [](const T& t, std::optional<int64_t> d) -> nb::object {
            if (d) return nb::int_(t.strides()[wrap_dim("stride", *d, t.dim())]);
            nb::list l;
            for (int64_t s : t.strides()) l.append(s);
            return nb::tuple(l);
          },
          arg("dim") = nb::none())
      .def("is_contiguous", [](const T& t) { return t.is_contiguous(); })
      .def("__len__", [](const T& t) {
        if (t.dim() == 0) throw nb::type_error("len() of a 0-d tensor");
        return t.shape()[0];
      });
}

template <typename T>
void bind_elementwise(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  const std::string operand = ", other: " + cls + " | float | int | bool";
  // ---- unary ops, name() and name_() ----
#define DTR_PY_UNARY(name, code, kind, rule, sig, doc)                          \
  c.def(                                                                        \
      #name, [](const T& t) { return t.apply(OpId::name, {}, nullptr); }, doc); \
  c.def(                                                                        \
      #name "_",                                                                \
      [](nb::pointer_and_handle<T> t) {                                         \
        t.p->apply_inplace(OpId::name, {}, nullptr);                            \
        return nb::borrow(t.h);                                                 \
      },                                                                        \
      self_sig(cls, #name "_", ""), "in place: " doc);
  DTR_UNARY_OPS(DTR_PY_UNARY)
#undef DTR_PY_UNARY

  // ---- binary ops with a tensor or a number, and in place ----
#define DTR_PY_BINARY(name, code, kind, rule, sig, doc)                                   \
  c.def(                                                                                  \
      #name, [](const T& t, nb::handle o) { return binary_method<T>(OpId::name, t, o); }, \
      arg("other"), doc);                                                                 \
  c.def(                                                                                  \
      #name "_",                                                                          \
      [](nb::pointer_and_handle<T> t, nb::handle o) {                                     \
        return binary_inplace<T>(OpId::name, t, o);                                       \
      },                                                                                  \
      self_sig(cls, #name "_", operand), "in place: " doc);
  DTR_BINARY_OPS(DTR_PY_BINARY)
#undef DTR_PY_BINARY
}

// split, chunk (tuples of views) and repeat, as torch's.
template <typename T>
void bind_pieces(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  auto as_tuple = [](std::vector<T> pieces) {
    nb::list l;
    for (T& p : pieces) l.append(nb::cast(std::move(p)));
    return nb::tuple(l);
  };
  c.def(
      "split",
      [as_tuple](const T& t, nb::handle size_or_sizes, int64_t dim) {
        if (PyLong_Check(size_or_sizes.ptr()))
          return as_tuple(t.split(nb::cast<int64_t>(size_or_sizes), dim));
        return as_tuple(t.split_with_sizes(nb::cast<std::vector<int64_t>>(size_or_sizes), dim));
      },
      arg("split_size_or_sections"), arg("dim") = 0,
      nb::sig(stub_sig("def split(self, split_size_or_sections: int | Sequence[int], dim: int = 0) "
                       "-> tuple[" +
                       cls + ", ...]")),
      "views of pieces of split_size along dim (the last shorter), or of the given sizes");
  c.def(
      "split_with_sizes",
      [as_tuple](const T& t, const std::vector<int64_t>& sizes, int64_t dim) {
        return as_tuple(t.split_with_sizes(sizes, dim));
      },
      arg("split_sizes"), arg("dim") = 0,
      nb::sig(stub_sig("def split_with_sizes(self, split_sizes: Sequence[int], dim: int = 0) -> "
                       "tuple[" +
                       cls + ", ...]")),
      "views of pieces of the given sizes along dim (they must add up to its size)");
  c.def(
      "chunk",
      [as_tuple](const T& t, int64_t chunks, int64_t dim) {
        return as_tuple(t.chunk(chunks, dim));
      },
      arg("chunks"), arg("dim") = 0,
      nb::sig(stub_sig("def chunk(self, chunks: int, dim: int = 0) -> tuple[" + cls + ", ...]")),
      "at most `chunks` views of ceil(size / chunks) along dim");
  c.def(
      "repeat",
      [](const T& t, nb::args sizes) {
        // repeat(2, 3) or repeat((2, 3)), as torch.
        if (sizes.size() == 1 && !PyLong_Check(sizes[0].ptr()))
          return t.repeat(nb::cast<std::vector<int64_t>>(sizes[0]));
        return t.repeat(nb::cast<std::vector<int64_t>>(sizes));
      },
      nb::sig(stub_sig("def repeat(self, *sizes: int | Sequence[int]) -> " + cls)),
      "the tensor tiled sizes[i] times along dim i (one copy)");
  // Bound before the table's scatter (src a tensor), which it serves too: src may be a
  // number (torch's scatter.value).
  c.def(
      "scatter",
      [](const T& t, int64_t dim, const T& index, nb::handle src) {
        if (const T* s = tensor_of<T>(src)) return t.scatter(dim, index, *s);
        return t.scatter(dim, index, scalar_arg(src, "scatter"));
      },
      arg("dim"), arg("index"), arg("src"),
      nb::sig(stub_sig("def scatter(self, dim: int, index: " + cls + ", src: " + cls +
                       " | float | int) -> " + cls)),
      "x with src (a tensor, or a number) written at index along dim");
}

// The named tuple type (values, indices) of torch.return_types.<name>, made once.
inline nb::object values_indices(const char* name) {
  // Kept for the process's life (never released: no reference dropped after Python ends).
  static auto* max_type = new nb::object();
  static auto* min_type = new nb::object();
  nb::object& type = std::string_view(name) == "max" ? *max_type : *min_type;
  if (!type.is_valid())
    type = nb::module_::import_("collections").attr("namedtuple")(name, "values indices");
  return type;
}

template <typename T>
void bind_reductions(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  // ---- reductions: over everything, one dim or several ----
#define DTR_PY_REDUCE(name, code, kind, rule, sig, doc)                                          \
  if (std::string_view(#name) != "max" && std::string_view(#name) != "min")                      \
    c.def(                                                                                       \
        #name,                                                                                   \
        [](const T& t, nb::handle dim, bool keepdim) {                                           \
          if (dim.is_none()) return t.name();                                                    \
          if (PyLong_Check(dim.ptr())) return t.name(nb::cast<int64_t>(dim), keepdim);           \
          return t.name(dims_arg(dim), keepdim);                                                 \
        },                                                                                       \
        arg("dim") = nb::none(), arg("keepdim") = false,                                         \
        self_sig(cls, #name, ", dim: int | Sequence[int] | None = None, keepdim: bool = False"), \
        doc " (over every dim, one, or several)");
  DTR_REDUCE_OPS(DTR_PY_REDUCE)
#undef DTR_PY_REDUCE
  // max and min as torch's: over one dim, (values, indices) (a named tuple, as
  // torch.return_types.max), so that `values, indices = x.max(1)` unpacks what it says.
  for (bool largest : {true, false}) {
    const char* name = largest ? "max" : "min";
    c.def(
        name,
        [largest](const T& t, nb::handle dim, bool keepdim) -> nb::object {
          if (dim.is_none()) return nb::cast(largest ? t.max() : t.min());
          if (!PyLong_Check(dim.ptr()))
            return nb::cast(largest ? t.max(dims_arg(dim), keepdim)
                                    : t.min(dims_arg(dim), keepdim));
          const int64_t d = nb::cast<int64_t>(dim);
          T values = largest ? t.max(d, keepdim) : t.min(d, keepdim);
          T indices = largest ? t.argmax(d, keepdim) : t.argmin(d, keepdim);
          return values_indices(largest ? "max" : "min")(std::move(values), std::move(indices));
        },
        arg("dim") = nb::none(), arg("keepdim") = false,
        nb::sig(
            stub_sig(std::string("def ") + name +
                     "(self, dim: int | Sequence[int] | None = None, keepdim: bool = False) -> " +
                     cls + " | tuple[" + cls + ", " + cls + "]")),
        largest ? "the largest value: over every dim; over one dim (values, indices), as torch; "
                  "over several dims the values (torch's amax)"
                : "the smallest value: over every dim; over one dim (values, indices), as torch; "
                  "over several dims the values (torch's amin)");
  }

  c.def(
      "norm",
      [](const T& t, double p, std::optional<int64_t> d, bool keepdim) {
        return d ? t.norm(p, *d, keepdim) : t.norm(p);
      },
      arg("p") = 2.0, arg("dim") = nb::none(), arg("keepdim") = false, "p-norm (p may be inf)");
  const std::string moment_sig =
      ", dim: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 1";
  c.def(
      "var",
      [](const T& t, nb::handle dim, bool keepdim, int64_t correction) {
        return t.var(dims_arg(dim), keepdim, correction);
      },
      arg("dim") = nb::none(), arg("keepdim") = false, arg("correction") = 1,
      self_sig(cls, "var", moment_sig), "variance (over every dim, one, or several)");
  c.def(
      "std",
      [](const T& t, nb::handle dim, bool keepdim, int64_t correction) {
        return t.std(dims_arg(dim), keepdim, correction);
      },
      arg("dim") = nb::none(), arg("keepdim") = false, arg("correction") = 1,
      self_sig(cls, "std", moment_sig), "standard deviation (over every dim, one, or several)");
  auto bound = [](nb::handle h) { return h.is_none() ? Scalar() : scalar_arg(h, "clamp"); };
  // A bound is a number, None (open) or a tensor (then maximum/minimum, broadcasting, as
  // torch's clamp.Tensor; tensor_ops.hpp).
  c.def(
      "clamp",
      [bound](const T& t, nb::handle lo, nb::handle hi) -> T {
        const bool tensor_lo = nb::isinstance<T>(lo), tensor_hi = nb::isinstance<T>(hi);
        if (!tensor_lo && !tensor_hi) return t.clamp(bound(lo), bound(hi));
        T r = tensor_lo      ? t.clamp_min(nb::cast<const T&>(lo))
              : lo.is_none() ? t
                             : t.clamp(bound(lo));
        if (tensor_hi) return r.clamp_max(nb::cast<const T&>(hi));
        return hi.is_none() ? r : r.clamp(Scalar(), bound(hi));
      },
      arg("min") = nb::none(), arg("max") = nb::none(),
      self_sig(cls, "clamp",
               ", min: " + cls + " | float | int | None = None, max: " + cls +
                   " | float | int | None = None"),
      "limit values to [min, max] (numbers or tensors, broadcasting)");
  c.def(
      "clamp_min", [](const T& t, const T& lo) { return t.clamp_min(lo); }, arg("min"),
      "maximum with a tensor bound (torch's clamp_min)");
  c.def(
      "clamp_max", [](const T& t, const T& hi) { return t.clamp_max(hi); }, arg("max"),
      "minimum with a tensor bound (torch's clamp_max)");
  c.def(
      "addcmul",
      [](const T& t, const T& t1, const T& t2, nb::handle value) {
        return t.addcmul(t1, t2, scalar_arg(value, "addcmul"));
      },
      arg("tensor1"), arg("tensor2"), arg("value") = 1, "x + value * tensor1 * tensor2");
  c.def(
      "addcdiv",
      [](const T& t, const T& t1, const T& t2, nb::handle value) {
        return t.addcdiv(t1, t2, scalar_arg(value, "addcdiv"));
      },
      arg("tensor1"), arg("tensor2"), arg("value") = 1, "x + value * tensor1 / tensor2");
  c.def(
      "lerp",
      [](const T& t, const T& end, nb::handle weight) {
        if (nb::isinstance<T>(weight)) return t.lerp(end, nb::cast<const T&>(weight));
        return t.lerp(end, scalar_arg(weight, "lerp"));
      },
      arg("end"), arg("weight"), "x + weight * (end - x) (weight a number or a tensor)");
  bind_pieces(c, cls);
  c.def(
      "clamp_",
      [bound](nb::pointer_and_handle<T> t, nb::handle lo, nb::handle hi) {
        t.p->clamp_(bound(lo), bound(hi));
        return nb::borrow(t.h);
      },
      arg("min") = nb::none(), arg("max") = nb::none(),
      self_sig(cls, "clamp_", ", min: float | int | None = None, max: float | int | None = None"),
      "in place: limit values to [min, max]");

  // ---- linear algebra ----
  c.def(
      "matmul", [](const T& a, const T& b) { return a.matmul(b); }, arg("other"));
  c.def(
      "dot", [](const T& a, const T& b) { return a.dot(b); }, arg("other"));
  c.def(
      "mv", [](const T& a, const T& b) { return a.mv(b); }, arg("vec"));
  c.def("__matmul__", [](const T& a, const T& b) { return a.matmul(b); });
}

template <typename T>
void bind_views(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  (void)cls;
  // ---- views ----
  c.def("view", [](const T& t, nb::args shape) { return t.view(shape_from_args(shape, "view")); });
  c.def("reshape",
        [](const T& t, nb::args shape) { return t.reshape(shape_from_args(shape, "reshape")); });
  c.def("expand",
        [](const T& t, nb::args shape) { return t.expand(shape_from_args(shape, "expand")); });
  c.def("permute",
        [](const T& t, nb::args dims) { return t.permute(shape_from_args(dims, "permute")); });
  c.def(
      "flatten", [](const T& t, int64_t start, int64_t end) { return t.flatten(start, end); },
      arg("start_dim") = 0, arg("end_dim") = -1,
      "merge dims start_dim..end_dim into one (a view when the strides allow, else a copy)");
  c.def(
      "transpose", [](const T& t, int64_t d0, int64_t d1) { return t.transpose(d0, d1); },
      arg("dim0"), arg("dim1"));
  c.def("t", [](const T& t) { return t.t(); });
  c.def_prop_ro("T", [](const T& t) { return t.dim() < 2 ? t : t.transpose(0, 1); });
  c.def(
      "narrow",
      [](const T& t, int64_t d, int64_t start, int64_t length) {
        return t.narrow(d, start, length);
      },
      arg("dim"), arg("start"), arg("length"));
  c.def(
      "slice",
      [](const T& t, int64_t d, int64_t start, std::optional<int64_t> end, int64_t step) {
        return t.slice(d, start, end ? *end : std::numeric_limits<int64_t>::max(), step);
      },
      arg("dim"), arg("start") = 0, arg("end") = nb::none(), arg("step") = 1,
      "python-style slice of one dim");
  c.def(
      "select", [](const T& t, int64_t d, int64_t i) { return t.select(d, i); }, arg("dim"),
      arg("index"));
  c.def(
      "squeeze",
      [](const T& t, std::optional<int64_t> d) { return d ? t.squeeze(*d) : t.squeeze(); },
      arg("dim") = nb::none());
  c.def(
      "unsqueeze", [](const T& t, int64_t d) { return t.unsqueeze(d); }, arg("dim"));
  c.def(
      "__getitem__",
      [](const T& t, nb::handle index) {
        if (const T* m = tensor_of<T>(index); m && m->dtype() == DType::Bool)
          return mask_index(t, *m);  // a sync point, as in torch
        if (std::optional<std::vector<T>> adv = advanced_indices(t, index)) return t.index(*adv);
        return index_view(t, index);
      },
      arg("index").none());
  c.def(
      "__setitem__",
      [](T& t, nb::handle index, nb::handle value) {
        if (const T* m = tensor_of<T>(index); m && m->dtype() == DType::Bool) {
          if (const T* v = tensor_of<T>(value))
            mask_assign(t, *m, *v);
          else
            mask_assign(t, *m, scalar_arg(value, "__setitem__"));
          return;
        }
        if (std::optional<std::vector<T>> adv = advanced_indices(t, index)) {
          const T* v = tensor_of<T>(value);
          t.copy_(t.index_put(*adv, v ? *v : t.new_full({}, scalar_arg(value, "__setitem__"))));
          return;
        }
        T view = index_view(t, index);
        if (const T* v = tensor_of<T>(value))
          view.copy_(*v);
        else
          view.fill_(scalar_arg(value, "__setitem__"));
      },
      arg("index").none(), arg("value").none());
}

template <typename T>
void bind_conversions_and_fills(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  // ---- conversions and fills ----
  c.def("contiguous", [](const T& t) { return t.contiguous(); });
  c.def(
      "clone", [](const T& t) { return t.clone(); }, "a packed copy in new storage");
  c.def(
      "copy_",
      [](nb::pointer_and_handle<T> t, const T& src) {
        t.p->copy_(src);
        return nb::borrow(t.h);
      },
      arg("src"), self_sig(cls, "copy_", ", src: " + cls));
  c.def(
      "fill_",
      [](nb::pointer_and_handle<T> t, nb::handle v) {
        t.p->fill_(scalar_arg(v, "fill_"));
        return nb::borrow(t.h);
      },
      arg("value"), self_sig(cls, "fill_", ", value: float | int | bool"));
  c.def(
      "zero_",
      [](nb::pointer_and_handle<T> t) {
        t.p->zero_();
        return nb::borrow(t.h);
      },
      self_sig(cls, "zero_", ""));
  c.def(
      "uniform_",
      [](nb::pointer_and_handle<T> t, double from, double to, Generator* gen) {
        if (gen)
          t.p->uniform_(from, to, *gen);
        else
          t.p->uniform_(from, to);
        return nb::borrow(t.h);
      },
      arg("from_") = 0.0, arg("to") = 1.0, arg("generator") = nb::none(),
      self_sig(cls, "uniform_",
               ", from_: float = 0.0, to: float = 1.0, generator: Generator | None = None"));
  c.def(
      "normal_",
      [](nb::pointer_and_handle<T> t, double mean, double std, Generator* gen) {
        if (gen)
          t.p->normal_(mean, std, *gen);
        else
          t.p->normal_(mean, std);
        return nb::borrow(t.h);
      },
      arg("mean") = 0.0, arg("std") = 1.0, arg("generator") = nb::none(),
      self_sig(cls, "normal_",
               ", mean: float = 0.0, std: float = 1.0, generator: Generator | None = None"));
  c.def("float", [](const T& t) { return t.to(DType::Float32); });
  c.def("double", [](const T& t) { return t.to(DType::Float64); });
  c.def("int", [](const T& t) { return t.to(DType::Int32); });
  c.def("long", [](const T& t) { return t.to(DType::Int64); });
  c.def("bool", [](const T& t) { return t.to(DType::Bool); });
  c.def("half", [](const T& t) { return t.to(DType::Float16); });
  c.def("bfloat16", [](const T& t) { return t.to(DType::BFloat16); });
}

template <typename T>
void bind_operators(nb::class_<T>& c, const std::string& cls) {
  using nb::arg;
  (void)cls;
  // ---- operators ----
  struct Op {
    const char* name;
    OpId op;
    bool reflected;
  };
  static const Op kOps[] = {{"__add__", OpId::add, false},
                            {"__radd__", OpId::add, true},
                            {"__sub__", OpId::sub, false},
                            {"__rsub__", OpId::sub, true},
                            {"__mul__", OpId::mul, false},
                            {"__rmul__", OpId::mul, true},
                            {"__truediv__", OpId::div, false},
                            {"__rtruediv__", OpId::div, true},
                            {"__pow__", OpId::pow, false},
                            {"__rpow__", OpId::pow, true},
                            {"__eq__", OpId::eq, false},
                            {"__ne__", OpId::ne, false},
                            {"__lt__", OpId::lt, false},
                            {"__le__", OpId::le, false},
                            {"__gt__", OpId::gt, false},
                            {"__ge__", OpId::ge, false},
                            {"__mod__", OpId::remainder, false},
                            {"__rmod__", OpId::remainder, true},
                            {"__and__", OpId::bitwise_and, false},
                            {"__rand__", OpId::bitwise_and, true},
                            {"__or__", OpId::bitwise_or, false},
                            {"__ror__", OpId::bitwise_or, true},
                            {"__xor__", OpId::bitwise_xor, false},
                            {"__rxor__", OpId::bitwise_xor, true},
                            {"__floordiv__", OpId::floor_divide, false},
                            {"__rfloordiv__", OpId::floor_divide, true}};
  for (const Op& o : kOps) {
    OpId op = o.op;
    bool reflected = o.reflected;
    c.def(
        o.name,
        [op, reflected](const T& t, nb::handle other) {
          return binary<T>(op, t, other, reflected);
        },
        arg("other").none(), nb::is_operator());
  }
  static const Op kInplace[] = {
      {"__iadd__", OpId::add, false},         {"__isub__", OpId::sub, false},
      {"__imul__", OpId::mul, false},         {"__itruediv__", OpId::div, false},
      {"__ipow__", OpId::pow, false},         {"__imod__", OpId::remainder, false},
      {"__iand__", OpId::bitwise_and, false}, {"__ior__", OpId::bitwise_or, false},
      {"__ixor__", OpId::bitwise_xor, false}, {"__ifloordiv__", OpId::floor_divide, false}};
  for (const Op& o : kInplace) {
    OpId op = o.op;
    c.def(
        o.name,
        [op](nb::pointer_and_handle<T> t, nb::handle other) {
          return binary_inplace<T>(op, t, other);
        },
        arg("other").none(), nb::is_operator());
  }
  c.def("__neg__", [](const T& t) { return t.neg(); });
  c.def("__abs__", [](const T& t) { return t.abs(); });
  c.def("__invert__", [](const T& t) { return t.bitwise_not(); });
  c.def("__pos__", [](nb::handle self) { return nb::borrow(self); });
  // Comparisons give tensors, so hashing stays by identity, as in torch.
  c.def("__hash__", [](nb::handle self) { return reinterpret_cast<intptr_t>(self.ptr()); });
}

// Every method and operator of both tensor classes; `cls` names the class in the stubs.
template <typename T>
void bind_tensor_methods(nb::class_<T>& c, const std::string& cls) {
  bind_metadata(c, cls);
  bind_elementwise(c, cls);
  bind_reductions(c, cls);
  bind_views(c, cls);
  bind_conversions_and_fills(c, cls);
  bind_operators(c, cls);
}

}  // namespace dtr::python
