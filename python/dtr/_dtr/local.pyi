"""Tensors in this process (dtr::local)."""

import dtr._dtr


def empty(*shape, dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def zeros(*shape, dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def ones(*shape, dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def full(size: object, fill_value: object, dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def arange(start: object, end: object | None = ..., step: object = ..., dtype: object | None = ...) -> dtr._dtr.LocalTensor: ...

def linspace(start: float, end: float, steps: int, dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def rand(*shape, generator: dtr._dtr.Generator | None = ..., dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def randn(*shape, generator: dtr._dtr.Generator | None = ..., dtype: object = dtr._dtr.dtype.float32) -> dtr._dtr.LocalTensor: ...

def from_dlpack(array: object) -> dtr._dtr.LocalTensor:
    """
    A LocalTensor sharing the memory of any object with __dlpack__ or the buffer protocol (numpy, torch CPU tensors); no copy.
    """

def memory_stats() -> dict:
    """Host memory held by this process's local tensors."""
