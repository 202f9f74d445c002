// Process groups for SPMD programs (dtr/process_group.hpp), the layer under
// dtr.distributed (python/dtr/distributed.py gives it torch.distributed's names). Tensors
// are LocalTensors or any host array with DLPack or the buffer protocol (numpy), shared
// without copies: a receive writes into the caller's array. Every blocking call waits
// with the GIL released, in slices, running Python's signal handlers between them, so
// Ctrl-C raises KeyboardInterrupt (the operation itself goes on to its own deadline).
#include <nanobind/stl/chrono.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.hpp"

namespace dtr::python {

namespace {

using nb::arg;
using std::chrono::milliseconds;

// An asynchronous operation and the tensors it uses (kept alive until it is dropped).
struct PyWork {
  Work work;
  std::vector<local::Tensor> tensors;
};

// Waits for `w` (bounded by `timeout` when given), running signal handlers every slice;
// rethrows the operation's error. Called with the GIL held; releases it.
void wait_work(Work& w, std::optional<double> timeout) {
  constexpr auto kSlice = milliseconds(20);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  nb::gil_scoped_release nogil;
  while (!w.is_completed()) {
    if (timeout && Clock::now() - start >= std::chrono::duration<double>(*timeout)) {
      w.wait(milliseconds(0));  // throws TimeoutError naming the operation
      break;
    }
    try {
      w.wait(kSlice);
    } catch (const TimeoutError&) {
      // The slice ran out, or the operation failed with its own timeout. Either way the
      // loop looks again, and the wait below rethrows the operation's own error. (This
      // used to rethrow when the operation had completed meanwhile, which turned a slice
      // that ran out just before a success into "not complete after waiting 20 ms".)
    }
    check_python_signals();
  }
  w.wait(milliseconds(0));  // completed: rethrows its error, if any
}

std::vector<local::Tensor> tensor_list(nb::handle list) {
  std::vector<local::Tensor> out;
  for (nb::handle h : nb::iter(list)) out.push_back(local_from_object(h));
  return out;
}

ProcessGroup& group_of(ProcessGroup* g) {
  return g ? *g : world_group();
}

// Runs an _async call and either waits for it or hands its Work back (async_op).
template <typename F>
nb::object run(bool async_op, std::vector<local::Tensor> keep, F&& start) {
  auto w = std::make_shared<PyWork>();
  w->tensors = std::move(keep);
  {
    nb::gil_scoped_release nogil;
    w->work = start(w->tensors);
  }
  if (async_op) return nb::cast(w);
  wait_work(w->work, std::nullopt);
  return nb::none();
}

void bind_group_class(nb::module_& m) {
  nb::class_<PyWork>(m, "Work", "An asynchronous operation (isend, irecv, async_op=True).")
      .def(
          "wait",
          [](PyWork& w, std::optional<double> timeout) {
            wait_work(w.work, timeout);
            return true;
          },
          arg("timeout") = nb::none(), "Waits (seconds: a bound); raises the operation's error.")
      .def("is_completed", [](const PyWork& w) { return w.work.is_completed(); })
      .def("is_success", [](const PyWork& w) { return w.work.is_success(); })
      .def("source_rank", [](const PyWork& w) { return w.work.source_rank(); });
  nb::class_<ProcessGroup>(m, "ProcessGroup", "A group of ranks (the world, or new_group()).")
      .def("rank", &ProcessGroup::rank, "This process's rank in the group; -1: not a member.")
      .def("size", &ProcessGroup::size)
      .def_prop_ro("ranks", &ProcessGroup::ranks, "World ranks of the members.")
      .def_prop_ro("backend", &ProcessGroup::backend_name)
      .def("is_member", &ProcessGroup::is_member)
      .def("cuda_path", &ProcessGroup::cuda_path)
      .def("host_path", &ProcessGroup::host_path,
           "How collectives move host tensors: zmq: '' until the first collective, then "
           "'shared memory' (ranks on one host) or 'sockets (why)'; mpi: 'shared memory (...)' "
           "or \"MPI's transports (...)\"; '' for gloo.");
}

void bind_point_to_point(nb::module_& m) {
  m.def(
      "isend",
      [](nb::handle t, int dst, int tag, ProcessGroup* g) {
        return run(true, {local_from_object(t)}, [&](std::vector<local::Tensor>& k) {
          return group_of(g).isend(k[0], dst, tag);
        });
      },
      arg("tensor"), arg("dst"), arg("tag") = 0, arg("group") = nb::none());
  m.def(
      "irecv",
      [](nb::handle t, int src, int tag, ProcessGroup* g) {
        return run(true, {local_from_object(t)}, [&](std::vector<local::Tensor>& k) {
          return group_of(g).irecv(k[0], src, tag);
        });
      },
      arg("tensor"), arg("src") = kAnySource, arg("tag") = 0, arg("group") = nb::none());
}

void bind_pg_collectives(nb::module_& m) {
  m.def(
      "broadcast",
      [](nb::handle t, int src, ProcessGroup* g, bool async_op) {
        return run(async_op, {local_from_object(t)}, [&](std::vector<local::Tensor>& k) {
          return group_of(g).broadcast_async(k[0], src);
        });
      },
      arg("tensor"), arg("src"), arg("group") = nb::none(), arg("async_op") = false);
  m.def(
      "all_reduce",
      [](nb::handle t, ReduceOp op, ProcessGroup* g, bool async_op) {
        return run(async_op, {local_from_object(t)}, [&](std::vector<local::Tensor>& k) {
          return group_of(g).all_reduce_async(k[0], op);
        });
      },
      arg("tensor"), arg("op") = ReduceOp::Sum, arg("group") = nb::none(), arg("async_op") = false);
  m.def(
      "reduce",
      [](nb::handle t, int dst, ReduceOp op, ProcessGroup* g, bool async_op) {
        return run(async_op, {local_from_object(t)}, [&](std::vector<local::Tensor>& k) {
          return group_of(g).reduce_async(k[0], dst, op);
        });
      },
      arg("tensor"), arg("dst"), arg("op") = ReduceOp::Sum, arg("group") = nb::none(),
      arg("async_op") = false);
  m.def(
      "all_gather",
      [](nb::handle outputs, nb::handle t, ProcessGroup* g, bool async_op) {
        std::vector<local::Tensor> keep = tensor_list(outputs);
        keep.push_back(local_from_object(t));
        return run(async_op, std::move(keep), [&](std::vector<local::Tensor>& k) {
          local::Tensor input = k.back();
          k.pop_back();
          return group_of(g).all_gather_async(k, input);
        });
      },
      arg("tensor_list"), arg("tensor"), arg("group") = nb::none(), arg("async_op") = false);
}

// The gather and scatter family (several tensors per rank).
void bind_list_collectives(nb::module_& m) {
  m.def(
      "all_gather_into_tensor",
      [](nb::handle out, nb::handle in, ProcessGroup* g, bool async_op) {
        return run(async_op, {local_from_object(out), local_from_object(in)},
                   [&](std::vector<local::Tensor>& k) {
                     return group_of(g).all_gather_into_tensor_async(k[0], k[1]);
                   });
      },
      arg("output_tensor"), arg("input_tensor"), arg("group") = nb::none(),
      arg("async_op") = false);
  m.def(
      "gather",
      [](nb::handle t, nb::handle list, int dst, ProcessGroup* g, bool async_op) {
        std::vector<local::Tensor> keep = {local_from_object(t)};
        bool has_list = !list.is_none();
        if (has_list)
          for (local::Tensor& x : tensor_list(list)) keep.push_back(x);
        return run(async_op, std::move(keep), [&](std::vector<local::Tensor>& k) {
          auto outputs = std::make_shared<std::vector<local::Tensor>>(k.begin() + 1, k.end());
          return group_of(g).gather_async(k[0], has_list ? outputs.get() : nullptr, dst);
        });
      },
      arg("tensor"), arg("gather_list") = nb::none(), arg("dst") = 0, arg("group") = nb::none(),
      arg("async_op") = false);
  m.def(
      "scatter",
      [](nb::handle t, nb::handle list, int src, ProcessGroup* g, bool async_op) {
        std::vector<local::Tensor> keep = {local_from_object(t)};
        bool has_list = !list.is_none();
        if (has_list)
          for (local::Tensor& x : tensor_list(list)) keep.push_back(x);
        return run(async_op, std::move(keep), [&](std::vector<local::Tensor>& k) {
          std::vector<local::Tensor> inputs(k.begin() + 1, k.end());
          return group_of(g).scatter_async(k[0], has_list ? &inputs : nullptr, src);
        });
      },
      arg("tensor"), arg("scatter_list") = nb::none(), arg("src") = 0, arg("group") = nb::none(),
      arg("async_op") = false);
  m.def(
      "reduce_scatter",
      [](nb::handle out, nb::handle list, ReduceOp op, ProcessGroup* g, bool async_op) {
        std::vector<local::Tensor> keep = {local_from_object(out)};
        for (local::Tensor& x : tensor_list(list)) keep.push_back(x);
        return run(async_op, std::move(keep), [&](std::vector<local::Tensor>& k) {
          std::vector<local::Tensor> inputs(k.begin() + 1, k.end());
          return group_of(g).reduce_scatter_async(k[0], inputs, op);
        });
      },
      arg("output"), arg("input_list"), arg("op") = ReduceOp::Sum, arg("group") = nb::none(),
      arg("async_op") = false);
  m.def(
      "reduce_scatter_tensor",
      [](nb::handle out, nb::handle in, ReduceOp op, ProcessGroup* g, bool async_op) {
        return run(async_op, {local_from_object(out), local_from_object(in)},
                   [&](std::vector<local::Tensor>& k) {
                     return group_of(g).reduce_scatter_tensor_async(k[0], k[1], op);
                   });
      },
      arg("output"), arg("input"), arg("op") = ReduceOp::Sum, arg("group") = nb::none(),
      arg("async_op") = false);
  m.def(
      "barrier",
      [](ProcessGroup* g, bool async_op) {
        return run(async_op, {},
                   [&](std::vector<local::Tensor>&) { return group_of(g).barrier_async(); });
      },
      arg("group") = nb::none(), arg("async_op") = false);
}

}  // namespace

void bind_process_group(nb::module_& root) {
  nb::module_ m = root.def_submodule("pg", "Process groups (dtr/process_group.hpp).");
  bind_group_class(m);
  m.def(
      "init_process_group",
      [](const std::string& backend, const std::string& init_method, int world_size, int rank,
         const std::string& group_name, double timeout) {
        try {
          nb::gil_scoped_release nogil;
          init_process_group(backend, init_method, world_size, rank, group_name,
                             milliseconds(static_cast<int64_t>(timeout * 1000)));
        } catch (const std::exception&) {
          // Ctrl-C during the rendezvous (which runs on to its timeout) is what the caller
          // sees, not the error it ended with: Python would raise it while printing that one
          // (a dump of the error and "lost sys.stderr").
          if (PyErr_CheckSignals() != 0) throw nb::python_error();
          throw;
        }
      },
      arg("backend") = "zmq", arg("init_method") = "env://", arg("world_size") = -1,
      arg("rank") = -1, arg("group_name") = "", arg("timeout") = 300.0);
  m.def("is_initialized", &is_initialized);
  m.def("get_rank", &get_rank);
  m.def("get_world_size", &get_world_size);
  m.def("world_group", &world_group, nb::rv_policy::reference);
  m.def(
      "new_group", [](const std::vector<int>& ranks) { return new_group(ranks); }, arg("ranks"));
  m.def("destroy_process_group", [] {
    nb::gil_scoped_release nogil;
    destroy_process_group();
  });
  m.def("backend_available", [](const std::string& b) { return backend_available(b); });
  bind_point_to_point(m);
  bind_pg_collectives(m);
  bind_list_collectives(m);
}

}  // namespace dtr::python
