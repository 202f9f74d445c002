// Training from Python (docs/training.md, docs/python.md): dtr._dtr.autograd (grad mode,
// backward and grad of several tensors, the differentiable collectives), dtr._dtr.optim
// (SGD and Adam over LocalTensor or Tensor parameters), dtr._dtr.nn (state files) and
// dtr._dtr.data (IDX files, MNIST, synthetic MNIST, the tutorial's DataPartitioner). The
// package (python/dtr/autograd.py, nn/, optim.py, data.py) gives them torch's names; the
// modules themselves are Python classes over the tensor ops (python/dtr/nn/).
//
// Thread safety: called with the GIL held. Calls that can block release it: remote
// backward and grad (they queue the gradient ops), remote optimizer steps, the SPMD
// all_reduce (a process-group collective), file reads and writes. Local backward and steps
// keep it, as every LocalTensor op does (their tensors may hold numpy arrays).
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "autograd_methods.hpp"
#include "bindings.hpp"
#include "dtr/autograd.hpp"
#include "dtr/data.hpp"
#include "dtr/nn.hpp"
#include "dtr/optim.hpp"

namespace dtr::python {

namespace {

using nb::arg;
using LocalT = local::Tensor;
using RemoteT = DistributedTensor;

// Undefined tensors as None.
template <typename T>
std::vector<std::optional<T>> optional_list(const std::vector<T>& ts) {
  std::vector<std::optional<T>> out;
  for (const T& t : ts) out.push_back(t.defined() ? std::optional<T>(t) : std::nullopt);
  return out;
}

template <typename T>
void bind_graph_functions(nb::module_& m) {
  m.def(
      "backward",
      [](const std::vector<T>& tensors, const std::vector<T>& grad_tensors, bool retain_graph) {
        maybe_without_gil<T>([&] { autograd::backward<T>(tensors, grad_tensors, retain_graph); });
      },
      arg("tensors"), arg("grad_tensors") = std::vector<T>(), arg("retain_graph") = false,
      "backward() of several outputs at once; grad_tensors[i] is d(something)/d(tensors[i]) "
      "(may be empty for one-element outputs).");
  m.def(
      "grad",
      [](const std::vector<T>& outputs, const std::vector<T>& inputs,
         const std::vector<T>& grad_outputs, bool retain_graph, bool allow_unused) {
        return optional_list(maybe_without_gil<T>([&] {
          return autograd::grad<T>(outputs, inputs, grad_outputs, retain_graph, allow_unused);
        }));
      },
      arg("outputs"), arg("inputs"), arg("grad_outputs") = std::vector<T>(),
      arg("retain_graph") = false, arg("allow_unused") = false,
      "The gradients of outputs with respect to inputs, returned (not accumulated); None for "
      "an input the outputs do not depend on when allow_unused.");
}

void bind_autograd(nb::module_& top) {
  nb::module_ m = top.def_submodule("autograd", "Reverse-mode autograd (dtr::autograd).");
  m.def("is_grad_enabled", &autograd::is_grad_enabled,
        "Whether ops are recorded on this thread (on by default).");
  m.def("set_grad_enabled", &autograd::set_grad_enabled, arg("enabled"),
        "Turns recording on or off for this thread.");
  bind_graph_functions<LocalT>(m);
  bind_graph_functions<RemoteT>(m);
  // The differentiable collectives: new tensors, inputs left as they are.
  m.def(
      "all_reduce",
      [](const std::vector<RemoteT>& ts, ReduceOp op) { return autograd::all_reduce(ts, op); },
      arg("tensors"), arg("op") = ReduceOp::Sum,
      "One tensor per node, all-reduced worker to worker; backward all-reduces the gradients "
      "(SUM and AVG only).");
  m.def(
      "all_reduce",
      [](const LocalT& t, ReduceOp op, ProcessGroup* group) {
        nb::gil_scoped_release nogil;
        return autograd::all_reduce(t, op, group);
      },
      arg("tensor"), arg("op") = ReduceOp::Sum, arg("group") = nb::none(),
      "SPMD: this rank's tensor all-reduced over the group (the world when None); every rank "
      "must run backward through it.");
  m.def("broadcast", &autograd::broadcast, arg("tensors"), arg("root"),
        "One tensor per node, the root's copied to all; backward sums the gradients to the "
        "root.");
  m.def("all_gather", &autograd::all_gather, arg("tensors"),
        "One tensor per node; each gets all of them (concatenated); backward reduce-scatters.");
  m.def("reduce_scatter", &autograd::reduce_scatter, arg("tensors"), arg("op") = ReduceOp::Sum,
        "One tensor per node; each gets its slice of the reduction; backward all-gathers.");
}

// An optimizer over the parameters of one tensor class (SGD or Adam; Opt<T> for both).
template <template <typename> class Opt, typename Options>
class PyOptimizer {
 public:
  PyOptimizer(nb::handle params, const Options& options) {
    std::vector<LocalT> locals;
    std::vector<RemoteT> remotes;
    for (nb::handle h : nb::iter(params)) {
      if (nb::isinstance<LocalT>(h))
        locals.push_back(nb::cast<LocalT>(h));
      else if (nb::isinstance<RemoteT>(h))
        remotes.push_back(nb::cast<RemoteT>(h));
      else
        throw nb::type_error(("optimizer: parameters are dtr.Tensor or dtr.LocalTensor, got " +
                              std::string(nb::type_name(h.type()).c_str()))
                                 .c_str());
    }
    if (!locals.empty() && !remotes.empty())
      throw InvalidArgument("optimizer: parameters mix dtr.Tensor and dtr.LocalTensor");
    if (locals.empty() && remotes.empty())
      throw InvalidArgument("optimizer got an empty parameter list");
    if (!locals.empty())
      local_ = std::make_unique<Opt<LocalT>>(std::move(locals), options);
    else
      remote_ = std::make_unique<Opt<RemoteT>>(std::move(remotes), options);
  }
  void step() {
    if (local_) return local_->step();
    nb::gil_scoped_release nogil;
    remote_->step();
  }
  void zero_grad(bool set_to_none) {
    if (local_) return local_->zero_grad(set_to_none);
    remote_->zero_grad(set_to_none);
  }
  nb::list params() const {
    nb::list out;
    if (local_)
      for (const LocalT& p : local_->params()) out.append(nb::cast(p));
    else
      for (const RemoteT& p : remote_->params()) out.append(nb::cast(p));
    return out;
  }

 private:
  std::unique_ptr<Opt<LocalT>> local_;
  std::unique_ptr<Opt<RemoteT>> remote_;
};

template <typename Py>
void bind_optimizer_methods(nb::class_<Py>& c) {
  c.def("step", &Py::step, "Updates every parameter that has a gradient, in place.");
  c.def("zero_grad", &Py::zero_grad, arg("set_to_none") = true,
        "Clears the parameters' gradients (set_to_none), or zeroes them in place.");
  c.def_prop_ro("params", &Py::params, "The parameters, in the order given.");
}

void bind_optim(nb::module_& top) {
  nb::module_ m = top.def_submodule("optim", "Optimizers (dtr::optim).");
  using SGD = PyOptimizer<optim::SGD, optim::SGDOptions>;
  nb::class_<SGD> sgd(m, "SGD",
                      "Stochastic gradient descent with momentum (torch.optim.SGD) over "
                      "dtr.Tensor or dtr.LocalTensor parameters.");
  sgd.def(
      "__init__",
      [](SGD* self, nb::handle params, double lr, double momentum, double dampening,
         double weight_decay, bool nesterov) {
        new (self) SGD(params, optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
      },
      arg("params"), arg("lr") = 0.01, arg("momentum") = 0.0, arg("dampening") = 0.0,
      arg("weight_decay") = 0.0, arg("nesterov") = false);
  bind_optimizer_methods(sgd);
  using Adam = PyOptimizer<optim::Adam, optim::AdamOptions>;
  nb::class_<Adam> adam(m, "Adam", "Adam (torch.optim.Adam, without amsgrad).");
  adam.def(
      "__init__",
      [](Adam* self, nb::handle params, double lr, std::pair<double, double> betas, double eps,
         double weight_decay) {
        new (self)
            Adam(params, optim::AdamOptions{lr, betas.first, betas.second, eps, weight_decay});
      },
      arg("params"), arg("lr") = 1e-3, arg("betas") = std::make_pair(0.9, 0.999), arg("eps") = 1e-8,
      arg("weight_decay") = 0.0);
  bind_optimizer_methods(adam);
}

void bind_nn_state(nb::module_& top) {
  nb::module_ m = top.def_submodule("nn", "State files of modules (dtr::nn).");
  m.def(
      "save_state",
      [](const std::string& path, const nn::NamedTensors& tensors) {
        nb::gil_scoped_release nogil;
        nn::save_state(path, tensors);
      },
      arg("path"), arg("tensors"),
      "Writes (name, float32/float64 LocalTensor) pairs to a versioned, checksummed file.");
  m.def(
      "load_state",
      [](const std::string& path) {
        nb::gil_scoped_release nogil;
        return nn::load_state(path);
      },
      arg("path"), "Reads a file save_state wrote: a list of (name, LocalTensor).");
}

void bind_idx(nb::module_& m) {
  nb::enum_<data::IdxType>(m, "IdxType", "The element type of an IDX file.")
      .value("UInt8", data::IdxType::UInt8)
      .value("Int8", data::IdxType::Int8)
      .value("Int16", data::IdxType::Int16)
      .value("Int32", data::IdxType::Int32)
      .value("Float32", data::IdxType::Float32)
      .value("Float64", data::IdxType::Float64);
  nb::class_<data::IdxFile>(m, "IdxFile", "An IDX file's type and values.")
      .def_ro("type", &data::IdxFile::type)
      .def_ro("values", &data::IdxFile::values,
              "int32 for the integer types, else float32 or float64, with the file's dims");
  m.def(
      "read_idx",
      [](const std::string& path) {
        nb::gil_scoped_release nogil;
        return data::read_idx(path);
      },
      arg("path"), "Reads an IDX file strictly (InvalidArgument naming what is wrong).");
  m.def(
      "write_idx",
      [](const std::string& path, const LocalT& values, data::IdxType type) {
        nb::gil_scoped_release nogil;
        data::write_idx(path, values, type);
      },
      arg("path"), arg("values"), arg("type"));
}

void bind_mnist(nb::module_& m) {
  nb::class_<data::Mnist>(m, "Mnist", "MNIST images and labels.")
      .def_ro("images", &data::Mnist::images,
              "float32 (N, 1, H, W), normalized as the seed: (x / 255 - 0.1307) / 0.3081")
      .def_ro("labels", &data::Mnist::labels, "int64 (N)");
  m.def(
      "load_mnist",
      [](const std::string& images, const std::string& labels) {
        nb::gil_scoped_release nogil;
        return data::load_mnist(images, labels);
      },
      arg("images"), arg("labels"));
  nb::class_<data::MnistFiles>(m, "MnistFiles", "The paths of an image and a label file.")
      .def_ro("images", &data::MnistFiles::images)
      .def_ro("labels", &data::MnistFiles::labels);
  m.def(
      "write_synthetic_mnist",
      [](const std::string& dir, int64_t n, uint64_t seed) {
        nb::gil_scoped_release nogil;
        return data::write_synthetic_mnist(dir, n, seed);
      },
      arg("dir"), arg("n"), arg("seed") = 0,
      "Writes n synthetic 28x28 MNIST-like samples into dir under MNIST's file names (same "
      "seed, same bytes).");
}

void bind_data(nb::module_& top) {
  nb::module_ m = top.def_submodule("data", "Data for training (dtr::data).");
  bind_idx(m);
  bind_mnist(m);
  nb::class_<data::DataPartitioner>(
      m, "DataPartitioner",
      "The tutorial's DataPartitioner: 0..n-1 shuffled by random.Random(seed).shuffle, cut "
      "into pieces of int(fraction * n) indices.")
      .def(nb::init<int64_t, const std::vector<double>&, uint64_t>(), arg("n"),
           arg("sizes") = std::vector<double>{0.7, 0.2, 0.1}, arg("seed") = 1234)
      .def("use", &data::DataPartitioner::use, arg("partition"),
           "The indices of a partition (IndexError for one that does not exist).")
      .def("__len__", &data::DataPartitioner::size);
  m.def(
      "gather_rows",
      [](const LocalT& t, const std::vector<int64_t>& rows) { return data::gather_rows(t, rows); },
      arg("tensor"), arg("rows"), "The rows of tensor (dim 0) stacked into a new tensor.");
}

}  // namespace

void bind_training(nb::module_& m) {
  bind_autograd(m);
  bind_optim(m);
  bind_nn_state(m);
  bind_data(m);
}

}  // namespace dtr::python
