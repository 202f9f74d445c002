"""Tensors in this process (dtr::local): the master's own data, and the tensors of SPMD
programs (dtr.distributed). A LocalTensor has every op of dtr.Tensor, run on the CPU
kernels here, and shares memory with numpy (``t.numpy()``, ``np.asarray(t)``, the buffer
protocol) and with DLPack consumers (``torch.from_dlpack(t)``, ``np.from_dlpack(t)``)."""

from . import _dtr

_l = _dtr.local
empty = _l.empty
zeros = _l.zeros
ones = _l.ones
full = _l.full
arange = _l.arange
linspace = _l.linspace
rand = _l.rand
randn = _l.randn
from_dlpack = _l.from_dlpack
memory_stats = _l.memory_stats
LocalTensor = _dtr.LocalTensor


def from_numpy(array):
    """A LocalTensor sharing `array`'s memory (no copy); numpy's dtypes float32, float64,
    float16, int32, int64 and bool."""
    return from_dlpack(array)


def tensor(data, dtype=None):
    """A LocalTensor holding a copy of `data` (a LocalTensor, anything with __dlpack__ or
    the buffer protocol, or what numpy.asarray takes). Python floats give float32 and
    Python ints int64, as in torch."""
    if isinstance(data, LocalTensor):
        t = data.clone()
    elif hasattr(data, "__dlpack__") or _has_buffer(data):
        t = from_dlpack(data).clone()
    else:
        try:
            import numpy as np
        except ImportError as e:  # pragma: no cover - numpy is a dependency of the tests
            raise _dtr.InvalidArgument("dtr.tensor(list) needs numpy (pip install numpy)") from e
        array = np.asarray(data)
        if array.dtype == np.float64 and dtype is None:
            array = array.astype(np.float32)
        t = from_dlpack(np.ascontiguousarray(array)).clone()
    if dtype is not None and t.dtype != _dtr_dtype(dtype):
        t = t.to(dtype)
    return t


def _dtr_dtype(d):
    return _dtr.local.zeros(0, dtype=d).dtype


def _has_buffer(obj):
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False
