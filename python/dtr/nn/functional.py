"""torch.nn.functional's functions over dtr tensors (``dtr.Tensor`` and ``dtr.LocalTensor``
alike): each is an op of the op table (or a few), which the C++ autograd records and
differentiates (autograd/derivatives.cpp), exactly as dtr::nn::functional does."""

from __future__ import annotations

from .. import _dtr

__all__ = ["relu", "leaky_relu", "hardtanh", "elu", "tanh", "sigmoid", "gelu", "silu", "embedding",
           "layer_norm", "linear", "pad", "avg_pool1d", "conv2d", "max_pool2d", "avg_pool2d", "dropout",
           "dropout2d", "log_softmax", "softmax", "nll_loss", "cross_entropy", "mse_loss",
           "flatten", "all_reduce"]


_TENSORS = (_dtr.Tensor, _dtr.LocalTensor)


def _place(t):
    """Where a tensor operand lives, in words, with its dtype and shape."""
    what = f"{str(t.dtype).removeprefix('dtr.')}{list(t.shape)}"
    if isinstance(t, _dtr.Tensor):
        return f"a tensor on node {t.get_node()} ({what})"
    return f"a local tensor ({what})"


def _check_operands(name, input, **others):
    """A function of a module takes dtr tensors that live in one place: all on one node, or
    all local. Anything else raises here naming both places and what to do (nanobind's
    TypeError named a mismatched *weight*, numpy's AttributeError the method)."""
    if not isinstance(input, _TENSORS):
        kind = type(input).__module__ + "." + type(input).__qualname__
        raise TypeError(
            f"{name}: the input is a {kind.removeprefix('builtins.')}, expected a dtr tensor: "
            "make one first (dtr.local.from_numpy(a), or dtr.tensor(...) on a node)")
    for label, other in others.items():
        if other is None or not isinstance(other, _TENSORS):
            continue
        if type(other) is type(input) and (isinstance(input, _dtr.LocalTensor) or
                                            other.get_node() == input.get_node()):
            continue
        remote = input if isinstance(input, _dtr.Tensor) else other
        if isinstance(input, _dtr.LocalTensor):
            hint = (f"send the input there first (dtr.dist_send(x, node={remote.get_node()})), "
                    "or bring the module here (module.to_local())")
        elif isinstance(other, _dtr.LocalTensor):
            hint = (f"send that one there first (dtr.dist_send(t, node={remote.get_node()})), "
                    "or bring the input here (x.to_local())")
        else:
            hint = (f"move one of them (x.to(node={other.get_node()}), or "
                    f"module.to(node={input.get_node()}))")
        raise _dtr.InvalidArgument(f"{name}: the input is {_place(input)} and the {label} "
                                   f"{_place(other)}: {hint}")


def relu(input, inplace: bool = False):
    """max(x, 0); inplace=True writes the result into the input, as torch's."""
    return input.relu_() if inplace else input.relu()


def _into(input, result, inplace):
    """The result, or (inplace=True) the input with the result copied into it."""
    return input.copy_(result) if inplace else result


def leaky_relu(input, negative_slope: float = 0.01, inplace: bool = False):
    """x > 0 ? x : negative_slope * x (floating tensors)."""
    return _into(input, input.leaky_relu(negative_slope), inplace)


def hardtanh(input, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
    """x clamped to [min_val, max_val]; the gradient passes strictly inside only."""
    return _into(input, input.hardtanh(min_val, max_val), inplace)


def elu(input, alpha: float = 1.0, inplace: bool = False):
    """x > 0 ? x : alpha * (exp(x) - 1)."""
    return _into(input, input.elu(alpha), inplace)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type: float = 2.0,
              scale_grad_by_freq: bool = False, sparse: bool = False):
    """The rows of weight (num_embeddings, embedding_dim) at the integer indices input, of
    shape input.shape + (embedding_dim,); padding_idx's row gets no gradient. max_norm,
    scale_grad_by_freq and sparse gradients are not supported and raise."""
    _check_operands("embedding", input, weight=weight)
    for name, value, default in (("max_norm", max_norm, None),
                                 ("scale_grad_by_freq", scale_grad_by_freq, False),
                                 ("sparse", sparse, False)):
        if value != default:
            raise _dtr.InvalidArgument(
                f"embedding: {name}={value!r} is not supported on dtr tensors (the default "
                f"{default!r} is); dtr.embedding_dense_backward takes scale_grad_by_freq")
    mod = _dtr if isinstance(input, _dtr.Tensor) else _dtr.local
    return mod.embedding(input, weight, padding_idx)


def tanh(input):
    return input.tanh()


def sigmoid(input):
    return input.sigmoid()


def gelu(input, approximate: str = "none"):
    """x * Phi(x); approximate="tanh" gives torch's tanh approximation."""
    if approximate == "none":
        return input.gelu()
    if approximate == "tanh":
        return input.gelu_tanh()
    raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")


def silu(input, inplace: bool = False):
    """x * sigmoid(x); inplace=True writes the result into the input, as torch's."""
    return input.silu_() if inplace else input.silu()


def layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dims, which must be
    normalized_shape (weight and bias of that shape, or None: ones and zeros)."""
    _check_operands("layer_norm", input, weight=weight, bias=bias)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    for label, t in (("weight", weight), ("bias", bias)):
        if t is not None and tuple(t.shape) != shape:
            raise _dtr.ShapeError(f"layer_norm: {label} of shape {list(t.shape)} is not "
                                  f"normalized_shape {list(shape)}")
    if tuple(input.shape[len(input.shape) - len(shape):]) != shape or not shape:
        raise _dtr.ShapeError(f"layer_norm: normalized_shape {list(shape)} is not the last dims "
                              f"of the input's shape {list(input.shape)}")
    w = weight if weight is not None else input.new_ones(shape)
    b = bias if bias is not None else input.new_zeros(shape)
    return input.layer_norm(w, b, eps)


def pad(input, pad, mode: str = "constant", value=None):
    """input padded by pad (pairs for the last dims, the last dim's first; negative pads
    crop), as torch's F.pad: mode "constant" (value, default 0). The reflect, replicate and
    circular modes are not supported on dtr tensors and raise."""
    if mode != "constant":
        raise _dtr.InvalidArgument(f"pad: mode {mode!r} is not supported on dtr tensors "
                                   "(only 'constant')")
    return input.constant_pad_nd(list(pad), 0 if value is None else value)


def linear(input, weight, bias=None):
    """input @ weight.t() + bias; weight (out, in), input (..., in)."""
    _check_operands("linear", input, weight=weight, bias=bias)
    return input.linear(weight, bias)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of input (N, C, H, W) with weight (O, C / groups, kH, kW);
    stride, padding and dilation an int or a pair."""
    _check_operands("conv2d", input, weight=weight, bias=bias)
    return input.conv2d(weight, bias, stride, padding, dilation, groups)


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False):
    """2-D max pooling (stride: kernel_size when None); with return_indices, also the
    positions h * W + w of the maxima in their planes."""
    out = input.max_pool2d(kernel_size, stride, padding, dilation, ceil_mode)
    if return_indices:
        return out, input.max_pool2d_indices(kernel_size, stride, padding, dilation, ceil_mode)
    return out


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None):
    """2-D average pooling (stride: kernel_size when None)."""
    return input.avg_pool2d(kernel_size, stride, padding, ceil_mode, count_include_pad,
                            divisor_override)


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True):
    """1-D average pooling over the last dim of (N, C, L) or (C, L): avg_pool2d over a
    size-1 height (stride: kernel_size when None)."""
    one = lambda v: v if isinstance(v, int) else v[0]  # noqa: E731  (torch takes (k,) too)
    if len(input.shape) not in (2, 3):
        raise _dtr.ShapeError(f"avg_pool1d: expected input of 2 dims (C, L) or 3 (N, C, L), "
                              f"got shape {list(input.shape)}")
    k = one(kernel_size)
    s = k if stride is None else one(stride)
    return input.unsqueeze(-2).avg_pool2d((1, k), (1, s), (0, one(padding)), ceil_mode,
                                          count_include_pad).squeeze(-2)


def dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False, generator=None):
    """Zeroes each element with probability p while training, scaling the rest by 1/(1-p);
    the input itself when not training or p == 0 (nothing drawn). generator: a
    dtr.Generator, or None for the default one."""
    if p < 0 or p > 1:
        raise _dtr.InvalidArgument(f"dropout probability has to be between 0 and 1, got {p}")
    if not training or p == 0:
        return input
    return input.dropout(p, True, generator=generator)


def dropout2d(input, p: float = 0.5, training: bool = True, inplace: bool = False,
              generator=None):
    """As dropout, whole channels (dim 1 of (N, C, H, W)) at once."""
    if p < 0 or p > 1:
        raise _dtr.InvalidArgument(f"dropout probability has to be between 0 and 1, got {p}")
    if not training or p == 0:
        return input
    return input.dropout2d(p, True, generator=generator)


def _softmax_dim(ndim):
    # torch's rule when dim is left out (deprecated there): 0 for 0-, 1- and 3-D inputs.
    return 0 if ndim in (0, 1, 3) else 1


def log_softmax(input, dim=None):
    """log(softmax(input)) along dim, computed stably (dim None: torch's old implicit
    choice, 1 for a batch of rows)."""
    return input.log_softmax(_softmax_dim(input.dim()) if dim is None else dim)


def softmax(input, dim=None):
    return input.softmax(_softmax_dim(input.dim()) if dim is None else dim)


def nll_loss(input, target, weight=None, ignore_index: int = -100, reduction: str = "mean"):
    """Negative log likelihood of log-probabilities input (N, C) at int64 targets (N);
    reduction 'mean' (weighted), 'sum' or 'none'."""
    _check_operands("nll_loss", input, target=target, weight=weight)
    return input.nll_loss(target, weight, reduction, ignore_index)


def cross_entropy(input, target, weight=None, ignore_index: int = -100,
                  reduction: str = "mean"):
    """nll_loss(log_softmax(input, 1), target, ...)."""
    return nll_loss(input.log_softmax(1), target, weight, ignore_index, reduction)


def mse_loss(input, target, reduction: str = "mean"):
    """The squared differences: their mean, sum, or themselves ('none')."""
    d = input - target
    d = d * d
    if reduction == "mean":
        return d.mean()
    if reduction == "sum":
        return d.sum()
    if reduction == "none":
        return d
    raise _dtr.InvalidArgument(f"mse_loss: reduction is 'mean', 'sum' or 'none', got "
                               f"{reduction!r}")


def flatten(input, start_dim: int = 0, end_dim: int = -1):
    return input.flatten(start_dim, end_dim)


def all_reduce(tensor, op=_dtr.ReduceOp.SUM, group=None):
    """torch.distributed.nn.functional.all_reduce: see dtr.autograd.all_reduce."""
    from ..autograd import all_reduce as _all_reduce
    return _all_reduce(tensor, op, group)
