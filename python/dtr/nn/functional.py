"""torch.nn.functional's functions over dtr tensors (``dtr.Tensor`` and ``dtr.LocalTensor``
alike): each is an op of the op table (or a few), which the C++ autograd records and
differentiates (autograd/derivatives.cpp), exactly as dtr::nn::functional does."""

from __future__ import annotations

from .. import _dtr

__all__ = ["relu", "leaky_relu", "hardtanh", "elu", "tanh", "sigmoid", "gelu", "silu", "embedding",
           "layer_norm", "group_norm", "batch_norm", "linear", "pad", "interpolate", "avg_pool1d",
           "conv2d", "max_pool2d", "avg_pool2d", "adaptive_avg_pool1d", "adaptive_avg_pool2d",
           "adaptive_avg_pool3d", "dropout", "dropout2d", "log_softmax", "softmax", "scaled_dot_product_attention", "nll_loss",
           "cross_entropy", "mse_loss", "flatten", "all_reduce"]


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
    return _module_of(input).embedding(input, weight, padding_idx)


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


def _module_of(input):
    """The extension module whose functions take input's class (dtr.Tensor or LocalTensor)."""
    return _dtr if isinstance(input, _dtr.Tensor) else _dtr.local


def pad(input, pad, mode: str = "constant", value=None):
    """input padded by pad (pairs for the last dims, the last dim's first), as torch's F.pad:
    mode "constant" (value, default 0; negative pads crop), or "reflect", "replicate",
    "circular" for the last 1 to 3 dims of a tensor of 1 or 2 more dims (each an
    index_select of positions computed on the tensor's node)."""
    _check_operands("pad", input)
    if mode != "constant" and value not in (None, 0):
        raise _dtr.InvalidArgument(f"pad: mode {mode!r} takes no value (got {value!r})")
    return _module_of(input).pad(input, list(pad), mode, 0 if value is None else value)


def _output_sizes(name, input, output_size, k):
    """output_size as k ints: an int for every dim, or k entries (None: the input's size)."""
    sizes = (output_size,) * k if isinstance(output_size, int) else tuple(output_size)
    if len(sizes) != k:
        raise _dtr.InvalidArgument(f"{name}: output_size must be an int or {k} values, got "
                                   f"{output_size!r}")
    shape = list(input.shape)
    return [shape[len(shape) - k + i] if s is None else int(s) for i, s in enumerate(sizes)]


def adaptive_avg_pool1d(input, output_size):
    """Average pooling of the last dim of (N, C, L) or (C, L) into output_size bins (bin i
    covers [floor(i L / out), ceil((i + 1) L / out)))."""
    _check_operands("adaptive_avg_pool1d", input)
    return _module_of(input).adaptive_avg_pool(
        input, _output_sizes("adaptive_avg_pool1d", input, output_size, 1))


def adaptive_avg_pool2d(input, output_size):
    """Average pooling of the last two dims of (N, C, H, W) or (C, H, W) into output_size
    bins (an int, or a pair whose None entries keep that size)."""
    _check_operands("adaptive_avg_pool2d", input)
    return _module_of(input).adaptive_avg_pool(
        input, _output_sizes("adaptive_avg_pool2d", input, output_size, 2))


def adaptive_avg_pool3d(input, output_size):
    """Average pooling of the last three dims of (N, C, D, H, W) or (C, D, H, W)."""
    _check_operands("adaptive_avg_pool3d", input)
    return _module_of(input).adaptive_avg_pool(
        input, _output_sizes("adaptive_avg_pool3d", input, output_size, 3))


_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}


def interpolate(input, size=None, scale_factor=None, mode: str = "nearest", align_corners=None,
                recompute_scale_factor=None, antialias: bool = False):
    """input (N, C, *) resized over its 1 to 3 spatial dims, as torch's F.interpolate: size
    (an int or one per dim) or scale_factor (output size floor(in * scale)); mode "nearest",
    "nearest-exact", "linear" / "bilinear" / "trilinear" (by the input's dims) or "area".
    The source positions are computed as torch's kernels do. "bicubic" and antialias raise."""
    _check_operands("interpolate", input)
    k = len(input.shape) - 2
    if k not in (1, 2, 3):
        raise _dtr.ShapeError(f"interpolate: expected an input of 3, 4 or 5 dims (N, C, *), got "
                              f"shape {list(input.shape)}")
    if mode in _LINEAR_MODES and _LINEAR_MODES[mode] != k:
        raise _dtr.ShapeError(f"interpolate: mode {mode!r} needs a {_LINEAR_MODES[mode] + 2}-D "
                              f"input, got shape {list(input.shape)}")
    if mode not in ("nearest", "nearest-exact", "area") and mode not in _LINEAR_MODES:
        raise _dtr.InvalidArgument(f"interpolate: mode {mode!r} is not supported on dtr tensors "
                                   "(nearest, nearest-exact, linear, bilinear, trilinear, area)")
    if antialias:
        raise _dtr.InvalidArgument("interpolate: antialias=True is not supported on dtr tensors")
    if align_corners is not None and mode not in _LINEAR_MODES:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | trilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("interpolate: exactly one of size and scale_factor must be given")
    spatial = list(input.shape)[2:]
    scales = []
    if size is not None:
        sizes = [size] * k if isinstance(size, int) else [int(v) for v in size]
        if len(sizes) != k:
            raise ValueError(f"interpolate: size {size!r} for {k} spatial dims")
    else:
        factors = [float(scale_factor)] * k if isinstance(scale_factor, (int, float)) \
            else [float(v) for v in scale_factor]
        if len(factors) != k:
            raise ValueError(f"interpolate: scale_factor {scale_factor!r} for {k} spatial dims")
        import math  # noqa: PLC0415
        sizes = [math.floor(n * f) for n, f in zip(spatial, factors)]
        # torch computes the positions from the user's factors unless told to recompute
        # them from the sizes; area mode uses the sizes only.
        if not recompute_scale_factor and mode != "area":
            scales = factors
    kind = "linear" if mode in _LINEAR_MODES else mode
    return _module_of(input).interpolate(input, sizes, kind, bool(align_corners), scales)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale=None, enable_gqa: bool = False,
                                 generator=None):
    """softmax(query key^T * scale + attn_mask) value, the math form of torch's (query
    (..., L, E), key (..., S, E), value (..., S, Ev)): is_causal lets position i attend to
    j <= i; attn_mask is bool (True: attend) or added to the scores; scale defaults to
    1 / sqrt(E); dropout_p drops attention weights (generator: a dtr.Generator).
    enable_gqa is not supported and raises."""
    _check_operands("scaled_dot_product_attention", query, key=key, value=value,
                    attn_mask=attn_mask)
    if enable_gqa:
        raise _dtr.InvalidArgument("scaled_dot_product_attention: enable_gqa=True is not "
                                   "supported on dtr tensors (repeat key and value per group)")
    return _module_of(query).scaled_dot_product_attention(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale, generator=generator)


def group_norm(input, num_groups: int, weight=None, bias=None, eps: float = 1e-5):
    """Each of num_groups groups of channels of each sample of (N, C, *) normalized, then
    * weight + bias per channel (C each, or None)."""
    _check_operands("group_norm", input, weight=weight, bias=bias)
    return _module_of(input).group_norm(input, num_groups, weight, bias, eps)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5):
    """Per-channel normalization of (N, C, *): by the batch's mean and biased variance when
    training (running_mean / running_var, if given, updated in place to momentum * batch +
    (1 - momentum) * running, the variance unbiased), else by the running statistics."""
    _check_operands("batch_norm", input, running_mean=running_mean, running_var=running_var,
                    weight=weight, bias=bias)
    return _module_of(input).batch_norm(input, running_mean, running_var, weight, bias,
                                        training, momentum, eps)


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


def _legacy_reduction(name, size_average, reduce):
    if size_average is not None or reduce is not None:
        raise _dtr.InvalidArgument(f"{name}: size_average and reduce are deprecated in torch and "
                                   "not supported here: use reduction='mean' | 'sum' | 'none'")


def nll_loss(input, target, weight=None, size_average=None, ignore_index: int = -100,
             reduce=None, reduction: str = "mean"):
    """Negative log likelihood of log-probabilities input (N, C), (C) or (N, C, d1, ...) at
    int64 targets (N), () or (N, d1, ...); reduction 'mean' (weighted), 'sum' or 'none'."""
    _check_operands("nll_loss", input, target=target, weight=weight)
    _legacy_reduction("nll_loss", size_average, reduce)
    if len(input.shape) == 2:
        return input.nll_loss(target, weight, reduction, ignore_index)
    return _module_of(input).nll_loss_nd(input, target, weight, ignore_index, reduction)


def cross_entropy(input, target, weight=None, size_average=None, ignore_index: int = -100,
                  reduce=None, reduction: str = "mean", label_smoothing: float = 0.0):
    """log_softmax over the class dim of input (N, C), (C) or (N, C, d1, ...), then the loss
    against int64 class indices (nll_loss) or floating class probabilities of input's shape;
    label_smoothing mixes in the uniform distribution, as torch's."""
    _check_operands("cross_entropy", input, target=target, weight=weight)
    _legacy_reduction("cross_entropy", size_average, reduce)
    return _module_of(input).cross_entropy(input, target, weight, ignore_index, reduction,
                                           label_smoothing)


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
