"""Reverse-mode autograd (dtr::autograd)."""

from collections.abc import Sequence
from typing import overload

import dtr._dtr
import dtr._dtr.pg


def is_grad_enabled() -> bool:
    """Whether ops are recorded on this thread (on by default)."""

def set_grad_enabled(enabled: bool) -> None:
    """Turns recording on or off for this thread."""

@overload
def backward(tensors: Sequence[dtr._dtr.LocalTensor], grad_tensors: Sequence[dtr._dtr.LocalTensor] = ..., retain_graph: bool = ...) -> None: ...

@overload
def backward(tensors: Sequence[dtr._dtr.Tensor], grad_tensors: Sequence[dtr._dtr.Tensor] = ..., retain_graph: bool = ...) -> None:
    """
    backward() of several outputs at once; grad_tensors[i] is d(something)/d(tensors[i]) (may be empty for one-element outputs).
    """

@overload
def grad(outputs: Sequence[dtr._dtr.LocalTensor], inputs: Sequence[dtr._dtr.LocalTensor], grad_outputs: Sequence[dtr._dtr.LocalTensor] = ..., retain_graph: bool = ..., allow_unused: bool = ...) -> list[dtr._dtr.LocalTensor | None]: ...

@overload
def grad(outputs: Sequence[dtr._dtr.Tensor], inputs: Sequence[dtr._dtr.Tensor], grad_outputs: Sequence[dtr._dtr.Tensor] = ..., retain_graph: bool = ..., allow_unused: bool = ...) -> list[dtr._dtr.Tensor | None]:
    """
    The gradients of outputs with respect to inputs, returned (not accumulated); None for an input the outputs do not depend on when allow_unused.
    """

@overload
def all_reduce(tensors: Sequence[dtr._dtr.Tensor], op: dtr._dtr.ReduceOp = dtr._dtr.ReduceOp.SUM) -> list[dtr._dtr.Tensor]:
    """
    One tensor per node, all-reduced worker to worker; backward all-reduces the gradients (SUM and AVG only).
    """

@overload
def all_reduce(tensor: dtr._dtr.LocalTensor, op: dtr._dtr.ReduceOp = dtr._dtr.ReduceOp.SUM, group: dtr._dtr.pg.ProcessGroup | None = ...) -> dtr._dtr.LocalTensor:
    """
    SPMD: this rank's tensor all-reduced over the group (the world when None); every rank must run backward through it.
    """

def broadcast(tensors: Sequence[dtr._dtr.Tensor], root: int) -> list[dtr._dtr.Tensor]:
    """
    One tensor per node, the root's copied to all; backward sums the gradients to the root.
    """

def all_gather(tensors: Sequence[dtr._dtr.Tensor]) -> list[dtr._dtr.Tensor]:
    """
    One tensor per node; each gets all of them (concatenated); backward reduce-scatters.
    """

def reduce_scatter(tensors: Sequence[dtr._dtr.Tensor], op: dtr._dtr.ReduceOp = dtr._dtr.ReduceOp.SUM) -> list[dtr._dtr.Tensor]:
    """
    One tensor per node; each gets its slice of the reduction; backward all-gathers.
    """
