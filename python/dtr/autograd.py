"""Reverse-mode autograd (dtr::autograd, docs/training.md) under torch.autograd's names.

Every op on a tensor that requires grad is recorded by the C++ runtime, for ``dtr.Tensor``
(remote: the gradient ops run where the tensors live) and ``dtr.LocalTensor`` alike::

    w = dtr.local.randn(3, 2, requires_grad=True)
    loss = x.matmul(w).tanh().sum()
    loss.backward()                 # w.grad holds d loss / d w
    with dtr.no_grad():
        w -= w.grad * 0.1

Grad mode is per thread (as in torch). Not supported: in-place ops on tensors that require
grad while grad mode is on (they raise, naming the op; update parameters under no_grad), and
gradients of gradients.
"""

from __future__ import annotations

import functools as _functools

from . import _dtr

_ag = _dtr.autograd
is_grad_enabled = _ag.is_grad_enabled


class _GradMode:
    """Base of the grad-mode context managers; also usable as function decorators."""

    _enabled = True

    def __init__(self):
        self._previous = []

    def __enter__(self):
        self._previous.append(_ag.is_grad_enabled())
        _ag.set_grad_enabled(self._enabled)
        return None

    def __exit__(self, *exc):
        _ag.set_grad_enabled(self._previous.pop())
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__():
                return fn(*args, **kwargs)

        return wrapper


class no_grad(_GradMode):
    """``with dtr.no_grad():`` ops inside are not recorded (this thread); restores the
    previous mode after. Also a decorator: ``@dtr.no_grad()``."""

    _enabled = False


class enable_grad(_GradMode):
    """``with dtr.enable_grad():`` ops inside are recorded, even within no_grad."""

    _enabled = True


class set_grad_enabled(_GradMode):
    """``dtr.set_grad_enabled(False)`` sets this thread's mode at once; as ``with
    dtr.set_grad_enabled(mode):`` it restores the previous mode after the block."""

    def __init__(self, mode: bool):
        super().__init__()
        self._previous.append(_ag.is_grad_enabled())
        self._enabled = bool(mode)
        _ag.set_grad_enabled(self._enabled)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _ag.set_grad_enabled(self._previous.pop())
        return False

    def __call__(self, fn):
        raise TypeError("set_grad_enabled is not a decorator; use no_grad() or enable_grad()")


def _as_list(x):
    if x is None:
        return []
    if isinstance(x, (_dtr.Tensor, _dtr.LocalTensor)):
        return [x]
    return list(x)


def backward(tensors, grad_tensors=None, retain_graph: bool = False) -> None:
    """Accumulates the gradients of `tensors` (one or a sequence; all dtr.Tensor or all
    dtr.LocalTensor) into the leaves' ``.grad``. grad_tensors: d(something)/d(tensors[i]),
    needed for outputs with more than one element."""
    _ag.backward(_as_list(tensors), _as_list(grad_tensors), retain_graph)


def grad(outputs, inputs, grad_outputs=None, retain_graph: bool = False,
         allow_unused: bool = False) -> tuple:
    """torch.autograd.grad: the gradients of `outputs` with respect to `inputs` (tensors
    that require grad), returned as a tuple rather than accumulated into ``.grad``; None for
    an input the outputs do not depend on when allow_unused, else an error."""
    return tuple(_ag.grad(_as_list(outputs), _as_list(inputs), _as_list(grad_outputs),
                          retain_graph, allow_unused))


def all_reduce(tensor, op=_dtr.ReduceOp.SUM, group=None):
    """Differentiable all_reduce (torch.distributed.nn.functional.all_reduce): returns a new
    tensor, the input left as it is. A list of dtr.Tensor (one per node): all-reduced worker
    to worker from this master. A LocalTensor in an SPMD program: over the process group
    (the world when None; every rank must run backward through it, in the same order).
    Backward all-reduces the gradient with the same op (SUM or AVG; others raise)."""
    if isinstance(tensor, _dtr.LocalTensor):
        from .distributed import _group
        return _ag.all_reduce(tensor, op, _group(group))
    if group is not None:
        raise _dtr.InvalidArgument("all_reduce: group= is for LocalTensors (SPMD programs)")
    return _ag.all_reduce(list(tensor), op)


broadcast = _ag.broadcast
all_gather = _ag.all_gather
reduce_scatter = _ag.reduce_scatter

__all__ = ["backward", "grad", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
           "all_reduce", "broadcast", "all_gather", "reduce_scatter"]
