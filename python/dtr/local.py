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
randperm = _l.randperm
eye = _l.eye
randint = _l.randint
from_dlpack = _l.from_dlpack
# The Join, Indexing and NN ops as functions on LocalTensor (dtr.local.cat, ...).
cat = _l.cat
stack = _l.stack
where = _l.where
masked_fill = _l.masked_fill
index_select = _l.index_select
gather = _l.gather
scatter_add = _l.scatter_add
cumsum = _l.cumsum
one_hot = _l.one_hot
topk = _l.topk
topk_indices = _l.topk_indices
tril = _l.tril
triu = _l.triu
flip = _l.flip
sort_indices = _l.sort_indices
scatter = _l.scatter
scatter_reduce = _l.scatter_reduce
constant_pad_nd = _l.constant_pad_nd
layer_norm = _l.layer_norm
layer_norm_backward = _l.layer_norm_backward
layer_norm_weight_grad = _l.layer_norm_weight_grad
# Compositions of table ops (include/dtr/tensor_ops.hpp).
embedding = _l.embedding
embedding_dense_backward = _l.embedding_dense_backward
slice_scatter = _l.slice_scatter
select_scatter = _l.select_scatter
addmm = _l.addmm
group_norm = _l.group_norm
logsumexp = _l.logsumexp
var_mean = _l.var_mean
amax = _l.amax
amin = _l.amin
index_add = _l.index_add
masked_select = _l.masked_select
bernoulli = _l.bernoulli
group_norm_backward = _l.group_norm_backward
batch_norm = _l.batch_norm
adaptive_avg_pool_backward = _l.adaptive_avg_pool_backward
linear = _l.linear
conv2d = _l.conv2d
conv2d_input_grad = _l.conv2d_input_grad
conv2d_weight_grad = _l.conv2d_weight_grad
max_pool2d = _l.max_pool2d
max_pool2d_indices = _l.max_pool2d_indices
max_pool2d_backward = _l.max_pool2d_backward
avg_pool2d = _l.avg_pool2d
avg_pool2d_backward = _l.avg_pool2d_backward
softmax = _l.softmax
log_softmax = _l.log_softmax
softmax_backward = _l.softmax_backward
log_softmax_backward = _l.log_softmax_backward
nll_loss = _l.nll_loss
nll_loss_backward = _l.nll_loss_backward
dropout = _l.dropout
dropout2d = _l.dropout2d
threshold_backward = _l.threshold_backward

memory_stats = _l.memory_stats
LocalTensor = _dtr.LocalTensor


def from_numpy(array):
    """A LocalTensor sharing `array`'s memory (no copy); numpy's dtypes float32, float64,
    float16, int32, int64 and bool."""
    return from_dlpack(array)


def tensor(data, dtype=None, requires_grad=False):
    """A LocalTensor holding a copy of `data` (a LocalTensor, anything with __dlpack__ or
    the buffer protocol, or what numpy.asarray takes). Python floats give float32 and
    Python ints int64, as in torch. requires_grad=True makes it a leaf of autograd."""
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
    return t.requires_grad_() if requires_grad else t


def _dtr_dtype(d):
    return _dtr.local.zeros(0, dtype=d).dtype


def _has_buffer(obj):
    try:
        memoryview(obj)
        return True
    except TypeError:
        return False


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """torch.unique on a LocalTensor (see dtr.unique)."""
    return input.unique(sorted, return_inverse, return_counts, dim)
