"""Optimizers (dtr::optim, include/dtr/optim.hpp) under torch.optim's names, over the
parameters of dtr.Tensor or dtr.LocalTensor modules::

    opt = dtr.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    opt.zero_grad(); loss.backward(); opt.step()

``step()`` updates each parameter in place with ops on its own node and device (under
no_grad) from the gradient backward() left in ``.grad``; a parameter without one is
skipped. The arithmetic is the C++ optimizers' (torch's single-tensor implementations).
Parameters are one list (no parameter groups); the options are fixed at construction.
Thread safety: an optimizer is used by one thread at a time.
"""

from __future__ import annotations

from . import _dtr

__all__ = ["SGD", "Adam", "Optimizer"]


class Optimizer:
    """Common base: ``step()``, ``zero_grad(set_to_none=True)``, ``params``."""

    _impl_class = None

    def __init__(self, params, **options):
        self._impl = self._impl_class(list(params), **options)
        self.defaults = dict(options)

    def step(self) -> None:
        """Updates every parameter that has a gradient (remote ones: the GIL released while
        the update is queued)."""
        self._impl.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clears the gradients (set_to_none), or zeroes them in place."""
        self._impl.zero_grad(set_to_none)

    @property
    def params(self) -> list:
        return self._impl.params

    def __repr__(self):
        opts = ", ".join(f"{k}={v}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({opts})"


class SGD(Optimizer):
    """Stochastic gradient descent with momentum (torch.optim.SGD): with g the gradient
    (+ weight_decay * p), b = g at the first step and b = momentum * b + (1 - dampening) * g
    after; p -= lr * (g + momentum * b) with nesterov, else lr * b (lr * g without
    momentum). Raises InvalidArgument for negative values, or nesterov without momentum or
    with dampening."""

    _impl_class = _dtr.optim.SGD

    def __init__(self, params, lr: float = 0.01, momentum: float = 0.0, dampening: float = 0.0,
                 weight_decay: float = 0.0, nesterov: bool = False):
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         weight_decay=weight_decay, nesterov=nesterov)


class Adam(Optimizer):
    """Adam (torch.optim.Adam, without amsgrad)."""

    _impl_class = _dtr.optim.Adam

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0):
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)
