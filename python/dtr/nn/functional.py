"""torch.nn.functional's functions over dtr tensors (``dtr.Tensor`` and ``dtr.LocalTensor``
alike): each is an op of the op table (or a few), which the C++ autograd records and
differentiates (autograd/derivatives.cpp), exactly as dtr::nn::functional does."""

from __future__ import annotations

from .. import _dtr

__all__ = ["relu", "tanh", "sigmoid", "gelu", "silu", "linear", "conv2d", "max_pool2d", "avg_pool2d", "dropout",
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
    """max(x, 0) (inplace=True is accepted and ignored: the result is a new tensor)."""
    return input.relu()


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
