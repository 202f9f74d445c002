// dtr.LocalTensor (dtr::local::Tensor: a tensor in this process) and its data paths:
// the buffer protocol and __array__ for numpy, DLPack both ways (__dlpack__,
// __dlpack_device__, from_dlpack), all without copies; and the dtr.local creation
// functions.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <utility>

#include "autograd_methods.hpp"
#include "bindings.hpp"
#include "composite_ops.hpp"
#include "table_ops.hpp"
#include "tensor_methods.hpp"

namespace dtr::python {

namespace {

using LocalTensor = local::Tensor;

nb::dlpack::dtype dlpack_dtype(DType t) {
  using nb::dlpack::dtype_code;
  auto make = [](dtype_code c, int bits) {
    return nb::dlpack::dtype{static_cast<uint8_t>(c), static_cast<uint8_t>(bits), 1};
  };
  switch (t) {
    case DType::Float32:
      return make(dtype_code::Float, 32);
    case DType::Float64:
      return make(dtype_code::Float, 64);
    case DType::Int32:
      return make(dtype_code::Int, 32);
    case DType::Int64:
      return make(dtype_code::Int, 64);
    case DType::Bool:
      return make(dtype_code::Bool, 8);
    case DType::Float16:
      return make(dtype_code::Float, 16);
    case DType::BFloat16:
      return make(dtype_code::Bfloat, 16);
  }
  throw DTypeError("no DLPack dtype for this tensor");
}

DType dtype_of_dlpack(nb::dlpack::dtype d) {
  using nb::dlpack::dtype_code;
  auto code = static_cast<dtype_code>(d.code);
  if (d.lanes == 1) {
    if (code == dtype_code::Float && d.bits == 32) return DType::Float32;
    if (code == dtype_code::Float && d.bits == 64) return DType::Float64;
    if (code == dtype_code::Float && d.bits == 16) return DType::Float16;
    if (code == dtype_code::Bfloat && d.bits == 16) return DType::BFloat16;
    if (code == dtype_code::Int && d.bits == 32) return DType::Int32;
    if (code == dtype_code::Int && d.bits == 64) return DType::Int64;
    if (code == dtype_code::Bool && d.bits == 8) return DType::Bool;
  }
  static const char* kCodes[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  std::string name = d.code < 7 ? kCodes[d.code] : "code " + std::to_string(d.code);
  throw DTypeError("no dtr dtype for " + name + std::to_string(d.bits) +
                   (d.lanes == 1 ? "" : "x" + std::to_string(d.lanes)) +
                   " (dtr has float32, float64, float16, bfloat16, int32, int64, bool)");
}

// The tensor as a nanobind ndarray of framework F sharing its memory; the ndarray keeps a
// handle of the tensor alive.
template <typename F>
nb::object export_ndarray(const LocalTensor& t) {
  if (!t.defined()) throw InvalidArgument("an undefined tensor has no data");
  size_t shape[kMaxDims];
  int64_t strides[kMaxDims];
  for (int64_t i = 0; i < t.dim(); ++i) {
    shape[i] = static_cast<size_t>(t.shape()[i]);
    strides[i] = t.strides()[i];
  }
  nb::capsule owner(new LocalTensor(t),
                    [](void* p) noexcept { delete static_cast<LocalTensor*>(p); });
  int device_type = t.device() < 0 ? nb::device::cpu::value : nb::device::cuda::value;
  nb::ndarray<F> array(t.raw_data(), static_cast<size_t>(t.dim()), shape, owner, strides,
                       dlpack_dtype(t.dtype()), device_type, t.device() < 0 ? 0 : t.device());
  return nb::cast(array, nb::rv_policy::reference);
}

nb::object to_numpy(const LocalTensor& t) {
  if (t.dtype() == DType::BFloat16)
    throw DTypeError(
        "numpy has no bfloat16: use DLPack (torch.from_dlpack(t)), or t.to(dtr.float32)");
  if (t.device() >= 0) throw DeviceError("a CUDA tensor cannot be a numpy array: t.cpu() first");
  return export_ndarray<nb::numpy>(t);
}

// ---- the buffer protocol (memoryview(t), numpy.frombuffer, ...) ----

struct BufferLayout {
  Py_ssize_t shape[kMaxDims];
  Py_ssize_t strides[kMaxDims];
};

int get_buffer(PyObject* self, Py_buffer* view, int flags) {
  const LocalTensor& t = *nb::inst_ptr<LocalTensor>(self);
  const char* format = nullptr;
  switch (t.dtype()) {
    case DType::Float32:
      format = "f";
      break;
    case DType::Float64:
      format = "d";
      break;
    case DType::Int32:
      format = "i";
      break;
    case DType::Int64:
      format = "q";
      break;
    case DType::Bool:
      format = "?";
      break;
    case DType::Float16:
      format = "e";
      break;
    case DType::BFloat16:
      break;
  }
  if (!t.defined() || t.device() >= 0 || !format) {
    PyErr_SetString(PyExc_BufferError, !t.defined() ? "an undefined tensor has no buffer"
                                       : t.device() >= 0
                                           ? "a CUDA tensor has no host buffer: t.cpu() first"
                                           : "bfloat16 has no buffer format: use DLPack or "
                                             "t.to(dtr.float32)");
    view->obj = nullptr;
    return -1;
  }
  bool contiguous = t.is_contiguous();
  if (!contiguous && (flags & PyBUF_STRIDES) != PyBUF_STRIDES) {
    PyErr_SetString(PyExc_BufferError, "the tensor is not contiguous: t.contiguous() first");
    view->obj = nullptr;
    return -1;
  }
  if (!contiguous && ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS ||
                      (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS ||
                      (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS)) {
    PyErr_SetString(PyExc_BufferError, "the tensor is not contiguous: t.contiguous() first");
    view->obj = nullptr;
    return -1;
  }
  auto* layout = new BufferLayout;
  const auto item = static_cast<Py_ssize_t>(element_size(t.dtype()));
  for (int64_t i = 0; i < t.dim(); ++i) {
    layout->shape[i] = static_cast<Py_ssize_t>(t.shape()[i]);
    layout->strides[i] = static_cast<Py_ssize_t>(t.strides()[i]) * item;
  }
  view->buf = t.raw_data();
  view->obj = nb::borrow(self).release().ptr();
  view->len = static_cast<Py_ssize_t>(t.numel()) * item;
  view->readonly = 0;
  view->itemsize = item;
  view->format = (flags & PyBUF_FORMAT) ? const_cast<char*>(format) : nullptr;
  view->ndim = static_cast<int>(t.dim());
  view->shape = (flags & PyBUF_ND) == PyBUF_ND ? layout->shape : nullptr;
  view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? layout->strides : nullptr;
  view->suboffsets = nullptr;
  view->internal = layout;
  return 0;
}

void release_buffer(PyObject*, Py_buffer* view) {
  delete static_cast<BufferLayout*>(view->internal);
}

PyType_Slot kBufferSlots[] = {{Py_bf_getbuffer, reinterpret_cast<void*>(get_buffer)},
                              {Py_bf_releasebuffer, reinterpret_cast<void*>(release_buffer)},
                              {0, nullptr}};

void bind_local_creation(nb::module_& local) {
  using nb::arg;
  local.def(
      "empty",
      [](nb::args shape, nb::handle dtype, bool requires_grad) {
        return with_requires_grad(local::empty(shape_from_args(shape, "empty"), dtype_arg(dtype)),
                                  requires_grad);
      },
      arg("shape"), arg("dtype") = DType::Float32, arg("requires_grad") = false);
  local.def(
      "zeros",
      [](nb::args shape, nb::handle dtype, bool requires_grad) {
        return with_requires_grad(local::zeros(shape_from_args(shape, "zeros"), dtype_arg(dtype)),
                                  requires_grad);
      },
      arg("shape"), arg("dtype") = DType::Float32, arg("requires_grad") = false);
  local.def(
      "ones",
      [](nb::args shape, nb::handle dtype, bool requires_grad) {
        return with_requires_grad(local::ones(shape_from_args(shape, "ones"), dtype_arg(dtype)),
                                  requires_grad);
      },
      arg("shape"), arg("dtype") = DType::Float32, arg("requires_grad") = false);
  local.def(
      "full",
      [](nb::handle shape, nb::handle value, nb::handle dtype, bool requires_grad) {
        return with_requires_grad(
            local::full(shape_from_args(nb::borrow<nb::args>(nb::make_tuple(shape)), "full"),
                        scalar_arg(value, "full"), dtype_arg(dtype)),
            requires_grad);
      },
      arg("size"), arg("fill_value"), arg("dtype") = DType::Float32, arg("requires_grad") = false);
  local.def(
      "arange",
      [](nb::handle a, nb::handle b, nb::handle step, nb::handle dtype) {
        Scalar start = b.is_none() ? Scalar(0) : scalar_arg(a, "arange");
        Scalar end = b.is_none() ? scalar_arg(a, "arange") : scalar_arg(b, "arange");
        Scalar s = scalar_arg(step, "arange");
        if (dtype.is_none()) return local::arange(start, end, s);
        return local::arange(start, end, s, dtype_arg(dtype));
      },
      arg("start"), arg("end") = nb::none(), arg("step") = 1, arg("dtype") = nb::none());
  local.def(
      "linspace",
      [](double start, double end, int64_t steps, nb::handle dtype, bool requires_grad) {
        return with_requires_grad(local::linspace(start, end, steps, dtype_arg(dtype)),
                                  requires_grad);
      },
      arg("start"), arg("end"), arg("steps"), arg("dtype") = DType::Float32,
      arg("requires_grad") = false);
}

// The random creation functions and the ones over data here.
void bind_local_random(nb::module_& local) {
  using nb::arg;
  for (bool normal : {false, true}) {
    local.def(
        normal ? "randn" : "rand",
        [normal](nb::args shape, Generator* gen, nb::handle dtype, bool requires_grad) {
          Shape s = shape_from_args(shape, normal ? "randn" : "rand");
          DType t = dtype_arg(dtype);
          LocalTensor r = gen ? (normal ? local::randn(s, *gen, t) : local::rand(s, *gen, t))
                              : (normal ? local::randn(s, t) : local::rand(s, t));
          return with_requires_grad(std::move(r), requires_grad);
        },
        arg("shape"), arg("generator") = nb::none(), arg("dtype") = DType::Float32,
        arg("requires_grad") = false);
  }
  local.def(
      "randperm",
      [](int64_t n, Generator* gen, nb::handle dtype) {
        check_randperm(n);
        const DType t = dtype.is_none() ? DType::Int64 : dtype_arg(dtype);
        LocalTensor keys =
            gen ? local::rand({n}, *gen, DType::Float64) : local::rand({n}, DType::Float64);
        LocalTensor perm = keys.argsort(0);
        return t == DType::Int64 ? perm : perm.to(t);
      },
      arg("n"), nb::kw_only(), arg("generator") = nb::none(), arg("dtype") = nb::none(),
      "A random permutation of 0 .. n-1 (int64): the order of n uniform draws.");
  local.def(
      "eye",
      [](int64_t n, std::optional<int64_t> cols, nb::handle dtype, bool requires_grad) {
        return with_requires_grad(local::eye(n, cols, dtype_arg(dtype)), requires_grad);
      },
      arg("n"), arg("m") = nb::none(), nb::kw_only(), arg("dtype") = DType::Float32,
      arg("requires_grad") = false, "The n x m identity (m = n by default).");
  local.def(
      "randint",
      [](nb::args args, nb::handle size, Generator* gen, nb::handle dtype) {
        const auto [low, high, shape] = randint_args(args, size);
        return local::randint(low, high, shape, gen,
                              dtype.is_none() ? DType::Int64 : dtype_arg(dtype));
      },
      arg("args"), arg("size") = nb::none(), arg("generator") = nb::none(),
      arg("dtype") = nb::none(),
      nb::sig("def randint(*args, size: Sequence[int] | None = None, generator: "
              "dtr._dtr.Generator | None = None, dtype: object | None = None) -> "
              "dtr._dtr.LocalTensor"),
      "Integers uniform on [low, high): randint(high, size) or randint(low, high, size).");
  local.def("from_dlpack", &local_from_object, arg("array"),
            "A LocalTensor sharing the memory of any object with __dlpack__ or the buffer "
            "protocol (numpy, torch CPU tensors); no copy.");
  local.def(
      "memory_stats",
      [] {
        MemoryStats s = cpu_memory_stats();
        nb::dict d;
        d["bytes_in_use"] = s.bytes_in_use;
        d["peak_bytes"] = s.peak_bytes;
        d["live_storages"] = s.live_storages;
        return d;
      },
      "Host memory held by this process's local tensors.");
}

}  // namespace

namespace {

bool python_finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsInitialized() || Py_IsFinalizing();
#else
  return !Py_IsInitialized() || _Py_IsFinalizing();
#endif
}

// Releases of shared arrays on threads that do not hold the GIL (wrap_array). A thread that
// asks for the GIL once Python finalizes is ended by pthread_exit, whose unwinding through
// dtr's noexcept destructors calls std::terminate; checking python_finalizing() first is
// not enough, since finalization can begin while the thread waits for the GIL. So an
// atexit hook (which runs before finalization) sets g_exiting and, with the GIL released,
// waits for the releases already under way; a release that starts after it leaves its
// array to the exit. The counter is raised before g_exiting is read and the flag set before
// the counter is read (both sequentially consistent): one of the two sees the other.
std::atomic<int> g_releasing{0};
std::atomic<bool> g_exiting{false};

template <typename Array>
void release_array(Array* a) {
  if (PyGILState_Check()) {
    delete a;
    return;
  }
  g_releasing.fetch_add(1);
  if (!g_exiting.load() && !python_finalizing()) delete a;  // takes the GIL for the decref
  g_releasing.fetch_sub(1);
}

// The atexit hook (GIL held). Bounded: a release holds the GIL only for a decref.
void wait_for_array_releases() {
  g_exiting.store(true);
  if (g_releasing.load() == 0) return;
  nb::gil_scoped_release nogil;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (g_releasing.load() != 0 && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

// A tensor over `array`'s memory, keeping the array alive.
template <typename Array>
local::Tensor wrap_array(const Array& array) {
  if (array.device_type() != nb::device::cpu::value)
    throw DeviceError("only host (CPU) arrays can be shared with dtr; copy it to the host first");
  DType dtype = dtype_of_dlpack(array.dtype());
  TensorMeta meta;
  meta.dtype = dtype;
  int64_t extent = 1;
  bool empty = false;
  for (size_t i = 0; i < array.ndim(); ++i) {
    int64_t size = static_cast<int64_t>(array.shape(i));
    int64_t stride = array.stride(i);
    if (stride < 0)
      throw InvalidArgument(
          "arrays with negative strides cannot be shared: pass a copy "
          "(numpy.ascontiguousarray)");
    meta.shape.push_back(size);
    meta.strides.push_back(stride);
    if (size == 0) empty = true;
    extent += (size - 1) * stride;
  }
  size_t nbytes = empty ? 0 : static_cast<size_t>(extent) * element_size(dtype);
  // The last reference may go on a thread of dtr's (a process-group operation that ran on
  // after a KeyboardInterrupt): release_array takes the GIL only while Python is not
  // exiting, else it leaves the array to the exit.
  std::shared_ptr<Array> owner(new Array(array), [](Array* a) { release_array(a); });
  auto storage = Storage::wrap(const_cast<void*>(array.data()), nbytes, owner);
  return LocalTensor(std::move(storage), meta);
}

}  // namespace

local::Tensor local_from_object(nb::handle h) {
  if (nb::isinstance<LocalTensor>(h)) return *nb::inst_ptr<LocalTensor>(h);
  nb::ndarray<> array;
  if (nb::try_cast(h, array)) return wrap_array(array);
  // Read-only memory (numpy.frombuffer over bytes, ...) is copied: dtr writes into the
  // tensors it is given (a receive, an in-place op).
  nb::ndarray<nb::ro> readonly;
  if (nb::try_cast(h, readonly)) return wrap_array(readonly).clone();
  throw nb::type_error((std::string("expected a tensor, or an array with __dlpack__ or the "
                                    "buffer protocol (numpy, torch), got ") +
                        nb::type_name(h.type()).c_str())
                           .c_str());
}

void bind_local_tensor(nb::module_& m) {
  nb::module_::import_("atexit").attr("register")(nb::cpp_function(&wait_for_array_releases));
  nb::class_<LocalTensor> c(m, "LocalTensor", nb::type_slots(kBufferSlots),
                            "A tensor in this process (CPU, or a CUDA device of this process): "
                            "the master's data (to_local()) and the tensors of SPMD programs "
                            "(dtr.distributed). Every op of dtr.Tensor runs here on the CPU "
                            "kernels. Shares memory with numpy and DLPack consumers.");
  c.def(nb::init<>());
  bind_tensor_methods(c, "LocalTensor");
  bind_table_methods(c, "LocalTensor");
  bind_composite_methods(c, "LocalTensor");
  bind_autograd_methods(c, "LocalTensor");
  c.def_prop_ro("device", [](const LocalTensor& t) { return t.device(); });
  c.def("item", [](const LocalTensor& t) { return from_scalar(t.item()); });
  c.def(
      "to", [](const LocalTensor& t, nb::handle dtype) { return t.to(dtype_arg(dtype)); },
      nb::arg("dtype"));
  c.def(
      "to_device", [](const LocalTensor& t, int d) { return t.to_device(d); }, nb::arg("device"));
  c.def("cpu", [](const LocalTensor& t) { return t.cpu(); });
  c.def(
      "cuda", [](const LocalTensor& t, int d) { return t.cuda(d); }, nb::arg("device") = 0);
  c.def("numpy", &to_numpy, "A numpy array sharing this tensor's memory (no copy).");
  c.def(
      "__array__",
      [](const LocalTensor& t, nb::handle dtype, nb::handle copy) {
        nb::object a = to_numpy(t);
        if (!dtype.is_none()) a = a.attr("astype")(dtype, nb::arg("copy") = false);
        if (!copy.is_none() && nb::cast<bool>(copy)) a = a.attr("copy")();
        return a;
      },
      nb::arg("dtype") = nb::none(), nb::arg("copy") = nb::none());
  c.def(
      "__dlpack__",
      [](const LocalTensor& t, nb::kwargs kwargs) {
        return export_ndarray<nb::array_api>(t).attr("__dlpack__")(**kwargs);
      },
      "DLPack capsule sharing this tensor's memory (torch.from_dlpack, numpy.from_dlpack).");
  c.def("__dlpack_device__", [](const LocalTensor& t) {
    return t.device() < 0 ? nb::make_tuple(1, 0) : nb::make_tuple(2, t.device());
  });
  c.def("__repr__", [](const LocalTensor& t) {
    return t.defined() ? t.to_string() : std::string("LocalTensor(undefined)");
  });
  c.def("__bool__", [](const LocalTensor& t) {
    if (t.numel() != 1)
      throw InvalidArgument("the truth value of a tensor with " + std::to_string(t.numel()) +
                            " elements is ambiguous");
    return t.item().to<bool>();
  });
  c.def("__float__", [](const LocalTensor& t) { return t.item().to_double(); });
  c.def("__int__", [](const LocalTensor& t) { return t.item().to_int(); });

  nb::module_ local = m.def_submodule("local", "Tensors in this process (dtr::local).");
  bind_local_creation(local);
  bind_local_random(local);
  bind_table_functions<LocalTensor>(local, "dtr._dtr.LocalTensor", "dtr._dtr.Generator");
  bind_composite_functions<LocalTensor>(local, "dtr._dtr.LocalTensor");
}

}  // namespace dtr::python
