"""dtr: a distributed tensor runtime, from Python.

A *master* program drives tensors that live on worker daemons (``dtr-worker``)::

    import dtr, numpy as np
    dtr.init_master_worker()                     # DTR_WORKERS=..., or two local workers
    x = dtr.FloatTensor(20, 20).fill_(4)         # node 0, CPU
    y = dtr.dist_send(np.random.randn(20, 20).astype(np.float32))
    z = x + y                                    # returns at once
    with dtr.node(1):
        a = dtr.FloatTensor(10)                  # a.get_node() == 1
    print(z.sum().item())                        # sync point
    arr = z.to_local().numpy()                   # no copy from the LocalTensor

Ops are checked here (shape and dtype rules) and run on the tensor's node; the program
waits only at sync points (``to_local``, ``item``, printing, ``dist_send``,
``synchronize``, event and stream queries). A failure on a worker is raised as
``dtr.RemoteError`` at the next sync point that touches it. ``dtr.distributed`` is the
process-group API for SPMD programs (torch.distributed's names); ``dtr.local`` makes
tensors in this process. Training: ``dtr.autograd`` (``x.backward()``, ``x.grad``,
``dtr.no_grad()``), ``dtr.nn`` (modules, ``dtr.nn.functional``), ``dtr.optim``,
``dtr.data``. See docs/python.md.
"""

from __future__ import annotations

import atexit as _atexit
import builtins as _builtins
import os as _os
from typing import Optional as _Optional, Sequence as _Sequence, Union as _Union

from . import _dtr
from ._dtr import (  # noqa: F401  (re-exported)
    AuthenticationError,
    DeviceError,
    DTypeError,
    Error,
    Event,
    Generator,
    Graph,
    IndexError,
    InvalidArgument,
    LocalTensor,
    OutOfMemory,
    ProtocolError,
    ReduceOp,
    RemoteError,
    ShapeError,
    Stream,
    Tensor,
    TimeoutError,
    TransportError,
    WorkerLost,
    all_gather,
    all_reduce,
    arange,
    broadcast,
    cancel,
    capture,
    cuda_device_count,
    cuda_unavailable_reason,
    current_device,
    current_node,
    current_stream,
    default_stream,
    device_count,
    dist_send,
    dtype,
    flight_recorder,
    empty,
    full,
    is_capturing,
    is_master_worker_initialized,
    is_tracing,
    linspace,
    manual_seed,
    memory_stats,
    node_count,
    node_info,
    node_metrics,
    ones,
    promote_types,
    rand,
    randn,
    randperm,
    randint,
    eye,
    reduce_scatter,
    set_device,
    set_node,
    set_stream,
    start_trace,
    stop_trace,
    synchronize,
    zeros,
)
# The ops of the op table's Join, Indexing and NN kinds as functions on dtr.Tensor (their
# methods are on the class): dtr.cat([a, b], 1), dtr.conv2d(x, w, b, stride=2), ...
from ._dtr import (  # noqa: E402,F401  (re-exported)
    addmm,
    adaptive_avg_pool_backward,
    amax,
    amin,
    avg_pool2d,
    avg_pool2d_backward,
    batch_norm,
    bernoulli,
    cat,
    constant_pad_nd,
    conv2d,
    conv2d_input_grad,
    conv2d_weight_grad,
    cumsum,
    dropout,
    dropout2d,
    embedding,
    embedding_dense_backward,
    flip,
    gather,
    group_norm,
    group_norm_backward,
    index_add,
    index_select,
    layer_norm,
    layer_norm_backward,
    layer_norm_weight_grad,
    linear,
    log_softmax,
    logsumexp,
    log_softmax_backward,
    masked_fill,
    masked_select,
    max_pool2d,
    max_pool2d_backward,
    max_pool2d_indices,
    nll_loss,
    nll_loss_backward,
    one_hot,
    scatter_add,
    scatter,
    scatter_reduce,
    select_scatter,
    slice_scatter,
    sort_indices,
    softmax,
    softmax_backward,
    stack,
    threshold_backward,
    topk,
    topk_indices,
    tril,
    triu,
    var_mean,
    where,
)
from . import local  # noqa: E402
# Training: autograd (torch.autograd's names), modules, optimizers, data (docs/training.md).
from . import autograd, data, nn, optim  # noqa: E402,F401
from .autograd import enable_grad, is_grad_enabled, no_grad, set_grad_enabled  # noqa: E402,F401
from ._contexts import device, node, stream  # noqa: E402,F401
from ._paths import find_program  # noqa: E402,F401

__version__ = "0.1.0"
built_with_cuda = _dtr.built_with_cuda

float32 = dtype.float32
float64 = dtype.float64
int32 = dtype.int32
int64 = dtype.int64
bool = dtype.bool  # noqa: A001  (torch.bool)
float16 = dtype.float16
bfloat16 = dtype.bfloat16
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001

_local_workers = None  # LocalWorkers started by init_master_worker(local_workers=N)


def _typed(name, dt):
    def make(*shape: _builtins.int, node: _Optional[_builtins.int] = None,
             device: _Optional[_builtins.int] = None) -> Tensor:
        return Tensor(*shape, dtype=dt, node=node, device=device)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = (f"An uninitialized {dt} tensor on the current node and device "
                    "(or node=, device=).")
    return make


FloatTensor = _typed("FloatTensor", float32)
DoubleTensor = _typed("DoubleTensor", float64)
IntTensor = _typed("IntTensor", int32)
LongTensor = _typed("LongTensor", int64)
BoolTensor = _typed("BoolTensor", bool)
HalfTensor = _typed("HalfTensor", float16)
BFloat16Tensor = _typed("BFloat16Tensor", bfloat16)


def _from_environment():
    return any(_os.environ.get(v) for v in ("DTR_WORKERS", "DTR_LISTEN", "MASTER_ADDR"))


def init_master_worker(workers: _Union[str, _Sequence[str], None] = None, *,
                       listen: _Optional[str] = None, num_workers: _builtins.int = 0,
                       local_workers: _Optional[_builtins.int] = None,
                       connect_timeout: _Optional[_builtins.float] = None,
                       sync_timeout: _Optional[_builtins.float] = None,
                       heartbeat_timeout: _Optional[_builtins.float] = None,
                       key_file: str = "", insecure: _builtins.bool = False,
                       backend: str = "", log_level: str = "warn") -> None:
    """Starts the master-worker session.

    workers: endpoints of running ``dtr-worker --listen`` daemons (a list, or one string
    with commas); node k is workers[k]. listen/num_workers: listen for workers started with
    ``dtr-worker --master``. local_workers=N: start N workers on loopback here (stopped by
    shutdown_master_worker() or at exit). With none of them the environment decides
    (DTR_WORKERS, DTR_LISTEN + DTR_NUM_WORKERS, or MASTER_ADDR/MASTER_PORT/WORLD_SIZE), and
    where it names nothing two local workers are started. Timeouts are in seconds.
    backend: what the workers use among themselves for collectives on host tensors, "zmq"
    (or "tcp"; the default), "gloo", or "mpi" (the master and its workers started as one MPI
    job: ``mpirun -np N+1 python -m dtr.exec --launched prog.py``); DTR_BACKEND when not given.
    The timeouts, key_file and insecure also apply when the environment names the workers.
    """
    global _local_workers
    if isinstance(workers, str):
        workers = [w for w in workers.split(",") if w]
    if workers is None and listen is None and local_workers is None and not _from_environment():
        local_workers = 2
    if local_workers is not None:
        if workers is not None or listen is not None:
            raise InvalidArgument(
                "init_master_worker: local_workers= excludes workers= and listen=")
        if is_master_worker_initialized():
            raise InvalidArgument("init_master_worker: a session is already running")
        if isinstance(local_workers, _builtins.bool) \
                or not isinstance(local_workers, _builtins.int) \
                or local_workers < 1:
            raise InvalidArgument("init_master_worker: local_workers must be a whole number "
                                  f"of at least 1, got {local_workers!r}")
        started = _dtr.LocalWorkers(local_workers, find_program("dtr-worker"), log_level)
        try:
            _dtr._init_master_worker(list(started.endpoints), None, 0, connect_timeout,
                                     sync_timeout, heartbeat_timeout, key_file, insecure,
                                     backend)
        except BaseException:
            started.stop()
            raise
        _local_workers = started
        return
    _dtr._init_master_worker(None if workers is None else list(workers), listen, num_workers,
                             connect_timeout, sync_timeout,
                             heartbeat_timeout, key_file, insecure, backend)


def shutdown_master_worker() -> None:
    """Ends the session (workers free its tensors) and stops the local workers, if any."""
    global _local_workers
    try:
        _dtr.shutdown_master_worker()
    finally:
        if _local_workers is not None:
            workers, _local_workers = _local_workers, None
            workers.stop()


def local_worker_endpoints() -> list:
    """The endpoints of the workers init_master_worker(local_workers=N) started, or []."""
    return list(_local_workers.endpoints) if _local_workers is not None else []


def tensor(data, dtype=None, *, node: _Optional[_builtins.int] = None,
           device: _Optional[_builtins.int] = None,
           requires_grad: _builtins.bool = False) -> Tensor:
    """Sync point: a tensor on a node (default: the current one) holding a copy of `data`
    (a LocalTensor, a numpy array or anything numpy.asarray takes; Python floats give
    float32, as in torch). requires_grad=True makes it a leaf of autograd."""
    t = dist_send(local.tensor(data, dtype), node=node, device=device)
    return t.requires_grad_() if requires_grad else t


def unique(input, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim=None):
    """torch.unique (a sync point): the distinct values of input in ascending order, and
    when asked each element's position among them and their counts; dim=None only."""
    return input.unique(sorted, return_inverse, return_counts, dim)


def _tolist(self) -> list:
    t = self.to_local() if isinstance(self, Tensor) else self
    if t.dtype == bfloat16:
        t = t.to(float32)
    return t.numpy().tolist()


Tensor.tolist = _tolist
LocalTensor.tolist = _tolist


@_atexit.register
def _shutdown_at_exit():
    if is_master_worker_initialized() or _local_workers is not None:
        shutdown_master_worker()


# `from dtr import *` and `python -m dtr`'s namespace: every public name except those that
# would hide Python's builtins (dtr.int, dtr.float, dtr.bool, dtr.IndexError,
# dtr.TimeoutError stay reachable as attributes).
_SHADOWING = {"bool", "int", "float", "IndexError", "TimeoutError"}
__all__ = sorted(k for k in globals() if not k.startswith("_") and k not in _SHADOWING)
