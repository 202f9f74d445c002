"""Neural-network modules (torch.nn's names) over dtr tensors; ``dtr.nn.functional`` has the
functions. Docs: docs/python.md ("Training"), docs/training.md.

A module is a Python class, as in torch: subclass ``dtr.nn.Module``, assign submodules and
parameters as attributes in ``__init__`` (they are registered in that order) and write
``forward``::

    class Net(dtr.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = dtr.nn.Linear(784, 50)
            self.fc2 = dtr.nn.Linear(50, 10)

        def forward(self, x):
            return F.log_softmax(self.fc2(F.relu(self.fc1(x))), 1)

The layers are those of dtr::nn (include/dtr/nn.hpp) written over the same ops, with the
same initialization drawn in the same order (uniform within 1/sqrt(fan_in), weight then
bias, from the default generator, ``dtr.manual_seed``): a Python Net and the C++ one built
after the same seed hold the same parameters. Autograd is the C++ runtime's: every op a
forward runs is recorded there; nothing is differentiated in Python.

Where parameters live: ``dtr.Tensor`` on the current node and device while a master-worker
session runs (or on ``node=`` / ``device=``), else ``dtr.LocalTensor`` (an SPMD program, a
script without workers). ``module.to(node=k, device=d)`` moves every parameter (worker to
worker, or from this process to node k); ``module.to_local()`` copies them here.

Registration: an attribute that is a Module is a submodule; a tensor that requires grad and
is a leaf (``dtr.nn.Parameter(t)``, ``t.requires_grad_()``) is a parameter; other values
are plain attributes (``register_parameter`` registers any floating tensor).

Thread safety: a module is used by one thread at a time (its parameters are leaves of the
graphs its forward records).
"""

from __future__ import annotations

import collections as _collections

from .. import _dtr
from . import functional  # noqa: F401
from . import functional as F

_TENSORS = (_dtr.Tensor, _dtr.LocalTensor)

__all__ = ["Module", "Parameter", "Linear", "Conv2d", "LayerNorm", "Embedding", "Dropout",
           "Dropout2d", "ReLU", "LeakyReLU", "ELU", "Hardtanh", "Tanh",
           "Sigmoid", "GELU", "SiLU", "Flatten", "MaxPool2d", "AvgPool2d", "LogSoftmax", "Softmax", "Identity",
           "Sequential", "NLLLoss", "CrossEntropyLoss", "MSELoss", "functional", "save_state",
           "load_state"]

save_state = _dtr.nn.save_state
load_state = _dtr.nn.load_state


class _ParameterMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _TENSORS) and obj.requires_grad and obj.is_leaf


class Parameter(metaclass=_ParameterMeta):
    """torch.nn.Parameter: ``Parameter(t)`` is `t`'s storage, outside any graph, as a leaf
    that requires grad (a dtr tensor, not an instance of this class); a Module registers it
    when it is assigned as an attribute. ``isinstance(x, Parameter)`` is true for every leaf
    tensor that requires grad."""

    def __new__(cls, data, requires_grad: bool = True):
        return data.detach().requires_grad_(requires_grad)


def _new_parameter(shape, fan_in, node, device, init=None):
    """A parameter where the module's parameters live: uniform on [-1/sqrt(fan_in),
    1/sqrt(fan_in)] (torch's default), or init(t) when given (it fills t in place)."""
    bound = 1.0 / fan_in ** 0.5 if fan_in > 0 else 0.0
    if node is not None or device is not None or _dtr.is_master_worker_initialized():
        t = _dtr.empty(*shape, node=node, device=device)
    else:
        t = _dtr.local.empty(*shape)
        if device is not None and device >= 0:
            t = t.to_device(device)
    if init is None:
        t.uniform_(-bound, bound)
    else:
        init(t)
    return t.requires_grad_()


class Module:
    """Base class of modules (torch.nn.Module): parameters and submodules registered as
    attributes, train()/eval(), zero_grad(), to(), state_dict()/load_state_dict(), save()/
    load(). Subclasses write forward(); calling the module calls it."""

    def __init__(self):
        object.__setattr__(self, "_parameters", _collections.OrderedDict())
        object.__setattr__(self, "_modules", _collections.OrderedDict())
        object.__setattr__(self, "training", True)

    # ---- registration ----
    def _registries(self):
        params = self.__dict__.get("_parameters")
        if params is None:
            raise AttributeError("cannot assign to a Module before Module.__init__() is called")
        return params, self.__dict__["_modules"]

    def __setattr__(self, name, value):
        params, modules = self._registries()
        if isinstance(value, Module):
            params.pop(name, None)
            self.__dict__.pop(name, None)
            modules[name] = value
        elif isinstance(value, _TENSORS) and (name in params or
                                              (value.requires_grad and value.is_leaf)):
            modules.pop(name, None)
            self.__dict__.pop(name, None)
            self.register_parameter(name, value)
        else:
            if name in params and value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} as parameter '{name}' "
                                "(a dtr tensor or None expected)")
            params.pop(name, None)
            modules.pop(name, None)
            object.__setattr__(self, name, value)

    def __getattr__(self, name):
        d = self.__dict__
        if "_parameters" in d and name in d["_parameters"]:
            return d["_parameters"][name]
        if "_modules" in d and name in d["_modules"]:
            return d["_modules"][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        params, modules = self._registries()
        if name in params:
            del params[name]
        elif name in modules:
            del modules[name]
        else:
            object.__delattr__(self, name)

    def register_parameter(self, name: str, param) -> None:
        """Registers `param` (a floating tensor, marked as requiring grad; or None) under
        `name`."""
        params, _ = self._registries()
        if param is not None:
            if not isinstance(param, _TENSORS):
                raise TypeError(f"register_parameter: '{name}' must be a dtr tensor or None, "
                                f"got {type(param).__name__}")
            param.requires_grad_()
        params[name] = param

    def register_module(self, name: str, module) -> None:
        setattr(self, name, module)

    add_module = register_module

    # ---- the tree ----
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_children(self):
        yield from self._modules.items()

    def children(self):
        for _, m in self.named_children():
            yield m

    def named_modules(self, prefix: str = ""):
        yield prefix, self
        for name, m in self._modules.items():
            yield from m.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        """(dotted name, parameter): this module's, then each submodule's in registration
        order (dtr::nn::Module's order)."""
        seen = set()
        for name, p in self._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                yield (f"{prefix}.{name}" if prefix else name), p
        if recurse:
            for name, m in self._modules.items():
                for sub, p in m.named_parameters(f"{prefix}.{name}" if prefix else name):
                    if id(p) not in seen:
                        seen.add(id(p))
                        yield sub, p

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---- modes and gradients ----
    def train(self, mode: bool = True):
        """Training mode (dropout active) or evaluation mode, for the whole tree."""
        for m in self.modules():
            object.__setattr__(m, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears every parameter's gradient (set_to_none), or zeroes it in place."""
        from ..autograd import no_grad
        with no_grad():
            for p in self.parameters():
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.zero_()

    # ---- where the parameters live ----
    def _replace_parameters(self, move):
        for m in self.modules():
            for name, p in list(m._parameters.items()):
                if p is not None:
                    rg = p.requires_grad
                    q = move(p.detach())
                    m._parameters[name] = q.requires_grad_() if rg else q
        return self

    def to(self, target=None, *, node=None, device=None):
        """Moves every parameter: to(k) or to(node=k) to node k (worker to worker, or sent
        from this process), to(device=d) to CUDA device d of its node (-1: the CPU),
        keeping requires_grad; gradients are dropped. Make optimizers after moving."""
        if target is not None:
            if node is not None:
                raise _dtr.InvalidArgument("to(): the node given twice")
            node = target

        def move(p):
            if isinstance(p, _dtr.Tensor):
                return p.to(node=node, device=device)
            if node is not None:
                return _dtr.dist_send(p, node=node, device=device)
            return p if device is None else p.to_device(device)

        return self._replace_parameters(move)

    def to_local(self):
        """Copies remote parameters into this process (a sync point); they become
        LocalTensors requiring grad."""
        return self._replace_parameters(
            lambda p: p.to_local() if isinstance(p, _dtr.Tensor) else p)

    def cpu(self):
        return self.to(device=-1)

    def cuda(self, device: int = 0):
        return self.to(device=device)

    # ---- state ----
    def state_dict(self):
        """The parameters as LocalTensors, by dotted name (a sync point for remote ones;
        local CPU ones share the parameters' memory)."""
        out = _collections.OrderedDict()
        for name, p in self.named_parameters():
            out[name] = p.to_local() if isinstance(p, _dtr.Tensor) else p.detach().cpu()
        return out

    def load_state_dict(self, state, strict: bool = True):
        """Copies the values of `state` (name -> LocalTensor, dtr.Tensor or numpy array)
        into the parameters in place, under no_grad. Every parameter must be there with its
        shape, and no other entry (strict=False allows both)."""
        from ..autograd import no_grad
        mine = list(self.named_parameters())
        names = [n for n, _ in mine]
        unexpected = [k for k in state if k not in names]
        missing = [n for n in names if n not in state]
        if strict and unexpected:
            raise _dtr.InvalidArgument(
                f"load_state_dict: entry '{unexpected[0]}' names no parameter of this module "
                f"(its parameters: {', '.join(names)})")
        if strict and missing:
            raise _dtr.InvalidArgument(f"load_state_dict: the state has no entry '{missing[0]}'")
        with no_grad():
            for name, p in mine:
                if name not in state:
                    continue
                src = state[name]
                if not isinstance(src, _TENSORS):
                    src = _dtr.local.from_dlpack(src)
                if tuple(src.shape) != tuple(p.shape):
                    raise _dtr.ShapeError(f"load_state_dict: '{name}' has shape "
                                          f"{tuple(src.shape)} in the state, {tuple(p.shape)} "
                                          "in the module")
                p.copy_(_placed_like(src.detach(), p))

    def save(self, path: str) -> None:
        """Writes the state_dict to a state file (dtr::nn::save_state's format)."""
        save_state(path, list(self.state_dict().items()))

    def load(self, path: str) -> None:
        """Loads a state file save() (or the C++ Module::save) wrote."""
        self.load_state_dict(dict(load_state(path)))

    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = [f"  ({name}): " + repr(m).replace("\n", "\n  ")
                 for name, m in self._modules.items()]
        head = f"{type(self).__name__}({self.extra_repr()}"
        return head + ("\n" + "\n".join(lines) + "\n)" if lines else ")")


def _placed_like(src, p):
    """`src` (a tensor) where `p` lives, as a tensor of p's class."""
    if isinstance(p, _dtr.Tensor):
        if isinstance(src, _dtr.Tensor):
            return src.to(node=p.node, device=p.device)
        return _dtr.dist_send(src.contiguous(), node=p.node, device=p.device)
    if isinstance(src, _dtr.Tensor):
        src = src.to_local()
    return src if src.device == p.device else src.to_device(p.device)


# ---- layers (dtr::nn) ----
class Linear(Module):
    """y = x W^T + b; x (..., in), W (out, in), b (out)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *, node=None,
                 device=None):
        super().__init__()
        if in_features <= 0 or out_features <= 0:
            raise _dtr.InvalidArgument("Linear: in_features and out_features must be positive")
        self.in_features, self.out_features = in_features, out_features
        self.weight = _new_parameter((out_features, in_features), in_features, node, device)
        self.bias = (_new_parameter((out_features,), in_features, node, device) if bias
                     else None)

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class Conv2d(Module):
    """2-D convolution over (N, C_in, H, W) with a (C_out, C_in / groups, kH, kW) weight."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, *, node=None, device=None):
        super().__init__()
        kh, kw = _pair(kernel_size)
        if in_channels <= 0 or out_channels <= 0 or kh <= 0 or kw <= 0 or groups <= 0:
            raise _dtr.InvalidArgument("Conv2d: channels, kernel_size and groups must be "
                                       "positive")
        if in_channels % groups or out_channels % groups:
            raise _dtr.InvalidArgument("Conv2d: in_channels and out_channels must be "
                                       "divisible by groups")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = (kh, kw), stride, padding
        self.dilation, self.groups = dilation, groups
        fan_in = in_channels // groups * kh * kw
        self.weight = _new_parameter((out_channels, in_channels // groups, kh, kw), fan_in, node,
                                     device)
        self.bias = _new_parameter((out_channels,), fan_in, node, device) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")


class LayerNorm(Module):
    """Layer normalization over the last dims (normalized_shape), as torch.nn.LayerNorm:
    weight ones and bias zeros when elementwise_affine (bias=False: no bias)."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 bias: bool = True, *, node=None, device=None):
        super().__init__()
        shape = ((normalized_shape,) if isinstance(normalized_shape, int)
                 else tuple(normalized_shape))
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        self.weight = (_new_parameter(shape, 0, node, device, lambda t: t.fill_(1))
                       if elementwise_affine else None)
        self.bias = (_new_parameter(shape, 0, node, device, lambda t: t.fill_(0))
                     if elementwise_affine and bias else None)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class Embedding(Module):
    """A lookup table of num_embeddings rows of embedding_dim, drawn from N(0, 1) (torch's
    default; the padding_idx row zeroed), as torch.nn.Embedding."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx=None, *,
                 node=None, device=None):
        super().__init__()
        if num_embeddings <= 0 or embedding_dim <= 0:
            raise _dtr.InvalidArgument("Embedding: num_embeddings and embedding_dim must be "
                                       "positive")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise _dtr.InvalidArgument(f"Embedding: padding_idx {padding_idx} is outside "
                                           f"the {num_embeddings} embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = padding_idx

        def init(t):
            t.normal_()
            if padding_idx is not None:
                t[padding_idx] = 0

        self.weight = _new_parameter((num_embeddings, embedding_dim), 0, node, device, init)

    def forward(self, x):
        return F.embedding(x, self.weight, self.padding_idx)

    def extra_repr(self):
        pad = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}"


class Dropout(Module):
    """Zeroes each element with probability p while training; the identity in eval mode.
    Draws from `generator` (a dtr.Generator; the default one when None)."""

    def __init__(self, p: float = 0.5, inplace: bool = False, generator=None):
        super().__init__()
        if p < 0 or p > 1:
            raise _dtr.InvalidArgument(f"dropout probability has to be between 0 and 1, got {p}")
        self.p, self.generator = p, generator

    def forward(self, x):
        return F.dropout(x, self.p, self.training, generator=self.generator)

    def extra_repr(self):
        return f"p={self.p}"


class Dropout2d(Dropout):
    """As Dropout, whole channels (dim 1 of (N, C, H, W)) at once."""

    def forward(self, x):
        return F.dropout2d(x, self.p, self.training, generator=self.generator)


class _Function(Module):
    def __init__(self, fn, **kwargs):
        super().__init__()
        self._fn, self._kwargs = fn, kwargs

    def forward(self, x):
        return self._fn(x, **self._kwargs)

    def extra_repr(self):
        return ", ".join(f"{k}={v}" for k, v in self._kwargs.items())


class ReLU(_Function):
    def __init__(self, inplace: bool = False):
        super().__init__(F.relu, inplace=inplace)


class LeakyReLU(_Function):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(F.leaky_relu, negative_slope=negative_slope, inplace=inplace)


class ELU(_Function):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(F.elu, alpha=alpha, inplace=inplace)


class Hardtanh(_Function):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__(F.hardtanh, min_val=min_val, max_val=max_val, inplace=inplace)


class Tanh(_Function):
    def __init__(self):
        super().__init__(F.tanh)


class Sigmoid(_Function):
    def __init__(self):
        super().__init__(F.sigmoid)


class GELU(_Function):
    def __init__(self, approximate: str = "none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        super().__init__(F.gelu, approximate=approximate)


class SiLU(_Function):
    def __init__(self, inplace: bool = False):
        super().__init__(F.silu, inplace=inplace)


class Identity(_Function):
    def __init__(self, *args, **kwargs):
        super().__init__(lambda x: x)


class Flatten(_Function):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__(F.flatten, start_dim=start_dim, end_dim=end_dim)


class MaxPool2d(_Function):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False):
        super().__init__(F.max_pool2d, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation, ceil_mode=ceil_mode)


class AvgPool2d(_Function):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__(F.avg_pool2d, kernel_size=kernel_size, stride=stride, padding=padding,
                         ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                         divisor_override=divisor_override)


class LogSoftmax(_Function):
    def __init__(self, dim=None):
        super().__init__(F.log_softmax, dim=dim)


class Softmax(_Function):
    def __init__(self, dim=None):
        super().__init__(F.softmax, dim=dim)


class Sequential(Module):
    """The modules applied in order."""

    def __init__(self, *modules):
        super().__init__()
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = reduction


class NLLLoss(_Loss):
    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean"):
        super().__init__(reduction)
        F._legacy_reduction(type(self).__name__, size_average, reduce)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


class CrossEntropyLoss(NLLLoss):
    def __init__(self, weight=None, size_average=None, ignore_index: int = -100, reduce=None,
                 reduction: str = "mean", label_smoothing: float = 0.0):
        super().__init__(weight, size_average, ignore_index, reduce, reduction)
        self.label_smoothing = label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


class MSELoss(_Loss):
    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)
