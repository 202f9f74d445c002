// dtr._dtr: the extension module under the `dtr` Python package (python/dtr/).
#include "bindings.hpp"
#include "dtr/config.hpp"

NB_MODULE(_dtr, m) {
  namespace py = dtr::python;
  m.doc() = "dtr's C++ API (include/dtr/) for Python; import dtr, not this module.";
  py::bind_errors(m);
  py::bind_basics(m);
  py::bind_local_tensor(m);
  py::bind_remote_tensor(m);
  py::bind_session(m);
  py::bind_process_group(m);
  py::bind_training(m);
  m.attr("built_with_cuda") = static_cast<bool>(DTR_WITH_CUDA);
}
